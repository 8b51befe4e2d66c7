/**
 * The hook's decision logic (gate.ts) against an in-process fake bus, plus the
 * mapping, the configuration and register(). The bus part is also tested
 * against a real gate and nats-server from Python (tests/runtimes/test_openclaw_plugin.py);
 * these tests reach the orderings and failures a real gate does not produce on
 * demand (a status that already says executing, a verdict for another
 * decision, a connector order, a throwing bus, a cancelled call, outcomes
 * signed by the gate for something else, replies on `smf.propose` that the
 * gate did not sign for this proposal).
 */

import assert from "node:assert/strict";
import { chmodSync, mkdirSync, mkdtempSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";

import { Governance, PAYLOAD_ATTESTATION, type Governed } from "../dist/attest.js";
import { newProcessBinding, type ProcessBinding } from "../dist/binding.js";
import { canonicalBytes, canonicalText, identityOf, sha256Identity } from "../dist/contract/canonical.js";
import { parseContext, protectedFiles, readConfig } from "../dist/config.js";
import { decodeEnvelope, encodeEnvelope, signEnvelope, signValue, verifyEnvelope } from "../dist/contract/dsse.js";
import { GateAdapter, replyWindowMs, type BeforeResult } from "../dist/gate.js";
import plugin, { adapterFor, HOOK_PRIORITY, hookTimeoutMs, shutdown, warnIfUngated, type PluginApi } from "../dist/index.js";
import { SigningKey, type VerifyKey } from "../dist/contract/keys.js";
import { finalArguments, legalHoldOf, ProcessTaint, proposeCall, targetPaths } from "../dist/mapping.js";
import { currentRegistry, foreignParamHooks, ownHookTimeoutMs } from "../dist/foreign.js";
import { approvalIdFor, PAYLOAD_APPROVAL_OUTCOME, PAYLOAD_PROPOSAL, PAYLOAD_REPORT, PAYLOAD_VERDICT, type Verdict } from "../dist/contract/messages.js";
import { gateKeysOf } from "../dist/contract/registry.js";
import { PAYLOAD_RELEASE_MANIFEST } from "../dist/contract/release.js";
import { BusError, type Bus, type Inbox, type Reply } from "../dist/transport.js";
import { inboxPrefix } from "../dist/contract/bus_access.js";
import { nkeys } from "@nats-io/transport-node";

const KEY = SigningKey.fromSeed(Buffer.from("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60", "hex"));
const TRUSTED = new Map<string, VerifyKey>([[KEY.keyId, KEY.verifyKey]]);
/** The gate's key (RFC 8032 TEST 2 seed): the only signer of verdicts and outcomes the adapter acts on. */
const GATE = SigningKey.fromSeed(Buffer.from("4ccd089b28ff96da9db6c346ec114e0f5b8a319f35aba624da8cf6ed4fb8a6fb", "hex"));
const GATE_KEYS = new Map<string, VerifyKey>([[GATE.keyId, GATE.verifyKey]]);
const CONTEXT_DOC = {
  schema: "smf.openclaw-context/1",
  actor: {
    domain: "litigation",
    tenant_id: "tenant-acme",
    organization_id: "org-acme-llp",
    matter_id: "m-1",
    actor_id: "paralegal-pat",
    actor_roles: ["paralegal"],
    governing_laws: ["US-NY"],
  },
  facts: { classification: "confidential", injection_taint: "clear", redaction_status: "none" },
  legal_hold_paths: ["/srv/held"],
  internal_targets: ["slack:#partners"],
};
const CONTEXT = parseContext(CONTEXT_DOC);
const DECISION = "sha256:" + "d".repeat(64);
const OPERATION = "sha256:" + "e".repeat(64);
const APPROVAL = approvalIdFor(DECISION);
const silent = { info: () => undefined, warn: () => undefined, error: () => undefined };

/** Every Verdict field, optional ones null, as `msgspec.to_builtins` writes the gate's Verdict. */
function fullVerdict(fields: Partial<Verdict> & { outcome: Verdict["outcome"] }): Verdict {
  return {
    schema: "smf.verdict/1", proposal_id: "", reason_codes: [], decision_id: null, operation_hash: null, release_id: null,
    order_id: null, connector_id: null, approval_id: null, expires_at_ms: null, required_roles: [], evidence: [], ...fields,
  };
}

/** The gate's reply on `smf.propose` as the gate sends it: the Verdict, DSSE-signed by `signer`. */
function verdict(fields: Partial<Verdict> & { proposal_id: string; outcome: Verdict["outcome"] }, signer: SigningKey = GATE, payloadType = PAYLOAD_VERDICT): Uint8Array {
  return encodeEnvelope(signValue(payloadType, fullVerdict(fields), [signer]));
}

/** A Verdict as plain JSON: what the gate answered before verdicts were signed, and what anyone can send. */
function unsignedVerdict(fields: Partial<Verdict> & { proposal_id: string; outcome: Verdict["outcome"] }): Uint8Array {
  return Buffer.from(JSON.stringify(fullVerdict(fields)), "utf8");
}

/** An approval outcome as the gate publishes it: every Verdict field, DSSE-signed by `signer`. */
function outcome(fields: Partial<Verdict> & { outcome: Verdict["outcome"] }, signer: SigningKey = GATE, payloadType = PAYLOAD_APPROVAL_OUTCOME): Uint8Array {
  return encodeEnvelope(signValue(payloadType, fullVerdict(fields), [signer]));
}

interface Seen {
  op: string;
  subject: string;
}

/** A bus whose gate is a function; records the order of every operation. */
class FakeBus implements Bus {
  seen: Seen[] = [];
  inboxes = new Map<string, { push(d: Uint8Array): void }>();
  constructor(
    private readonly gate: (subject: string, data: Uint8Array, headers?: Record<string, string>) => Reply | Promise<Reply>,
  ) {}
  async request(subject: string, data: Uint8Array, _t: number, headers?: Record<string, string>): Promise<Reply> {
    this.seen.push({ op: "request", subject });
    return this.gate(subject, data, headers);
  }
  async subscribe(subject: string): Promise<Inbox> {
    this.seen.push({ op: "subscribe", subject });
    const queue: Uint8Array[] = [];
    let waiter: ((d: Uint8Array | undefined) => void) | undefined;
    this.inboxes.set(subject, {
      push: (d) => (waiter ? (waiter(d), (waiter = undefined)) : queue.push(d)),
    });
    return {
      next: (timeoutMs, signal) =>
        queue.length > 0
          ? Promise.resolve(queue.shift())
          : new Promise((resolve) => {
              const timer = setTimeout(() => resolve(undefined), timeoutMs);
              timer.unref(); // the outcome watch waits forever; it must not hold the test process
              signal?.addEventListener("abort", () => {
                clearTimeout(timer);
                resolve(undefined);
              });
              waiter = (d) => {
                clearTimeout(timer);
                resolve(d);
              };
            }),
      close: () => this.seen.push({ op: "close", subject }),
    };
  }
}

function reply(data: Uint8Array, headers: Record<string, string> = {}): Reply {
  return { data, headers: new Map(Object.entries(headers)) };
}

function proposalOf(data: Uint8Array): { proposal_id: string; arguments: unknown; native_tool: string } {
  const verified = verifyEnvelope(decodeEnvelope(data), TRUSTED, 1, PAYLOAD_PROPOSAL);
  return JSON.parse(verified.payload.toString("utf8")) as { proposal_id: string; arguments: unknown; native_tool: string };
}

/** Governance that has attested with a verified release whose registry names GATE (attest.ts is tested below). */
const GOVERNED: Governed = {
  ensure: async () => undefined,
  refusal: () => undefined,
  gateKeys: () => GATE_KEYS,
  noteVerdict: () => undefined,
  noteProblem: () => true,
};

function adapter(bus: Bus | undefined, holdTimeoutMs = 2000, problems: string[] = [], governance: Governed = GOVERNED): GateAdapter {
  return new GateAdapter(
    { runtimeId: "openclaw-demo", runtimeVersion: "2026.9.6", key: KEY, governance, context: CONTEXT, gateTimeoutMs: 1000, holdTimeoutMs },
    problems,
    bus,
    silent,
  );
}

function blockReason(result: BeforeResult): string {
  assert.ok("block" in result, JSON.stringify(result));
  return result.blockReason;
}

/** A gate that holds, answers the status with `state`, and lets the test publish outcomes. */
function holdingGate(state: string): FakeBus {
  return new FakeBus((subject, data) => {
    if (subject === "smf.propose") {
      const p = proposalOf(data);
      return reply(verdict({
        proposal_id: p.proposal_id, outcome: "held", reason_codes: ["attorney_approval_required_for_transmission"],
        decision_id: DECISION, operation_hash: OPERATION, approval_id: APPROVAL, expires_at_ms: Date.now() + 60_000,
      }));
    }
    if (subject === "smf.approval.status") return reply(Buffer.from(JSON.stringify({ approval_id: APPROVAL, state })));
    throw new BusError("gate_unreachable");
  });
}

const MESSAGE = { toolName: "message", params: { action: "send", channel: "slack", target: "#client", message: "hi" }, runId: "r", toolCallId: "c" };
const WATCH = "smf.approval.outcome.>";

async function publishSoon(bus: FakeBus, data: Uint8Array): Promise<void> {
  for (let i = 0; i < 100 && !bus.seen.some((x) => x.subject === "smf.approval.status"); i++) {
    await new Promise((r) => setTimeout(r, 5));
  }
  await new Promise((r) => setTimeout(r, 20));
  bus.inboxes.get(WATCH)?.push(data);
}

// --- allow and deny ------------------------------------------------------------------

test("allow returns exactly the signed canonical params", async () => {
  let signed: unknown;
  const bus = new FakeBus((_s, data) => {
    const p = proposalOf(data);
    signed = p.arguments;
    return reply(verdict({ proposal_id: p.proposal_id, outcome: "allow", decision_id: DECISION, operation_hash: OPERATION }));
  });
  const params = { path: "/srv/cafe\u0301.txt", b: 2, a: [1, { y: null, x: true }] };
  const result = await adapter(bus).beforeToolCall({ toolName: "read", params, toolCallId: "c" }, {});
  assert.ok("params" in result);
  assert.equal(canonicalText(result.params), canonicalText(signed));
  assert.equal(identityOf(result.params), identityOf(params));
  assert.equal((result.params as { path: string }).path, "/srv/caf\u00e9.txt");
});

test("a proposal carries the call's id when the contract can carry it, and only then", async () => {
  const sent: Array<{ tool_call_id?: string }> = [];
  const bus = new FakeBus((_s, data) => {
    const p = proposalOf(data);
    sent.push(p as { tool_call_id?: string });
    return reply(verdict({ proposal_id: p.proposal_id, outcome: "deny", reason_codes: ["x"] }));
  });
  const a = adapter(bus);
  await a.beforeToolCall({ toolName: "read", params: { path: "/srv/a" }, toolCallId: "smfc0123abcd" }, {});
  await a.beforeToolCall({ toolName: "read", params: { path: "/srv/a" }, toolCallId: "functions.read:0" }, {});
  await a.beforeToolCall({ toolName: "read", params: { path: "/srv/a" } }, {});
  assert.deepEqual(sent.map((p) => p.tool_call_id), ["smfc0123abcd", undefined, undefined]);
  assert.ok(sent.slice(1).every((p) => !("tool_call_id" in p)));
});

test("a proposal states a deadline one grace before the adapter stops waiting", async () => {
  const sent: Array<{ issued_at_ms: number; reply_by_ms?: number }> = [];
  const bus = new FakeBus((_s, data) => {
    const p = proposalOf(data);
    sent.push(p as unknown as { issued_at_ms: number; reply_by_ms?: number });
    return reply(verdict({ proposal_id: p.proposal_id, outcome: "deny", reason_codes: ["x"] }));
  });
  const a = adapter(bus);
  await a.beforeToolCall({ toolName: "read", params: { path: "/srv/a" } }, {});
  const timeout = a.settings?.gateTimeoutMs ?? 0;
  const [first] = sent;
  assert.ok(first !== undefined && sent.length === 1);
  assert.equal((first.reply_by_ms ?? 0) - first.issued_at_ms, replyWindowMs(timeout));
  assert.ok(replyWindowMs(timeout) < timeout);
  assert.equal(replyWindowMs(5_000), 4_000);
  assert.equal(replyWindowMs(200), 100);
});

test("deny blocks with the gate's reason codes", async () => {
  const bus = new FakeBus((_s, data) => reply(verdict({ proposal_id: proposalOf(data).proposal_id, outcome: "deny", reason_codes: ["legal_hold_blocks_deletion"] })));
  const reason = blockReason(await adapter(bus).beforeToolCall({ toolName: "write", params: { path: "/srv/held/a", content: "x" } }, {}));
  assert.match(reason, /^SMF Assurance gate denied write: legal_hold_blocks_deletion\. It did not run\.$/);
});

test("a denial names the decision it rests on, so explain can say why", async () => {
  const decision = "sha256:" + "ab".repeat(32);
  const bus = new FakeBus((_s, data) =>
    reply(verdict({ proposal_id: proposalOf(data).proposal_id, outcome: "deny", reason_codes: ["legal_hold_blocks_deletion"], decision_id: decision })),
  );
  const reason = blockReason(await adapter(bus).beforeToolCall({ toolName: "write", params: { path: "/srv/held/a", content: "x" } }, {}));
  assert.equal(
    reason,
    `SMF Assurance gate denied write: legal_hold_blocks_deletion. It did not run. Decision ${decision}: \`smf-assurance explain ${decision}\` says why.`,
  );
});

test("every bad reply blocks", async () => {
  const cases: [string, (data: Uint8Array) => Reply | Promise<Reply>, RegExp][] = [
    ["service error header", () => reply(Buffer.from(""), { "Nats-Service-Error-Code": "400", "Nats-Service-Error": "bad_signature" }), /bad_signature/],
    ["not an envelope", () => reply(Buffer.from("{")), /verdict_not_signed_by_gate/],
    ["empty reply", () => reply(Buffer.from("")), /verdict_not_signed_by_gate/],
    // Signed by the gate, but not one canonical Verdict: nothing in it is read.
    ["gate-signed payload that is not a Verdict", (d) => reply(encodeEnvelope(signValue(PAYLOAD_VERDICT, { proposal_id: proposalOf(d).proposal_id, outcome: "allow" }, [GATE]))), /unreadable_verdict/],
    ["gate-signed Verdict without its optional fields", (d) => reply(encodeEnvelope(signValue(PAYLOAD_VERDICT, { schema: "smf.verdict/1", proposal_id: proposalOf(d).proposal_id, outcome: "deny", reason_codes: ["x"] }, [GATE]))), /unreadable_verdict/],
    ["gate-signed Verdict, keys not in canonical order", (d) => reply(encodeEnvelope(signEnvelope(PAYLOAD_VERDICT, Buffer.from(JSON.stringify(fullVerdict({ proposal_id: proposalOf(d).proposal_id, outcome: "allow", decision_id: DECISION, operation_hash: OPERATION }))), [GATE]))), /unreadable_verdict/],
    ["verdict for another proposal", () => reply(verdict({ proposal_id: "p-other", outcome: "allow", decision_id: DECISION, operation_hash: OPERATION })), /verdict_for_another_proposal/],
    ["deny without reasons", (d) => reply(verdict({ proposal_id: proposalOf(d).proposal_id, outcome: "deny" })), /deny_without_reason/],
    ["allow without a decision", (d) => reply(verdict({ proposal_id: proposalOf(d).proposal_id, outcome: "allow" })), /verdict_incomplete/],
    ["allow for a connector", (d) => reply(verdict({ proposal_id: proposalOf(d).proposal_id, outcome: "allow", decision_id: DECISION, operation_hash: OPERATION, connector_id: "court-efiling" })), /executed_by_connector_court_efiling/],
    ["no responders", () => { throw new BusError("gate_unreachable"); }, /gate_unreachable/],
    ["timeout", () => { throw new BusError("gate_timeout"); }, /gate_timeout/],
    ["a bug in the bus", () => { throw new TypeError("boom"); }, /adapter_internal_error/],
  ];
  for (const [name, gate, expected] of cases) {
    const reason = blockReason(await adapter(new FakeBus((_s, d) => gate(d))).beforeToolCall({ toolName: "read", params: { path: "/a" } }, {}));
    assert.match(reason, expected, name);
  }
});

test("smf.propose: only the gate's signed verdict for THIS proposal runs the call", async () => {
  // Each reply below is what a responder other than the gate (or a replay) could
  // send first: an allow the real policy never gave. None runs the call.
  const allowFor = (id: string): Partial<Verdict> & { proposal_id: string; outcome: "allow" } =>
    ({ proposal_id: id, outcome: "allow", decision_id: DECISION, operation_hash: OPERATION });
  const OUTSIDER = SigningKey.fromSeed(Buffer.alloc(32, 9));
  const cases: [string, (proposalId: string) => Uint8Array, RegExp][] = [
    ["an unsigned JSON allow", (id) => unsignedVerdict(allowFor(id)), /: verdict_not_signed_by_gate\./],
    ["an allow signed by the runtime's own key", (id) => verdict(allowFor(id), KEY), /: verdict_not_signed_by_gate\./],
    ["an allow signed by a key no registry names", (id) => verdict(allowFor(id), OUTSIDER), /: verdict_not_signed_by_gate\./],
    ["an allow signed by the gate as an approval outcome", (id) => verdict(allowFor(id), GATE, PAYLOAD_APPROVAL_OUTCOME), /: verdict_not_signed_by_gate\./],
    ["an allow signed by the gate as an execution report", (id) => verdict(allowFor(id), GATE, PAYLOAD_REPORT), /: verdict_not_signed_by_gate\./],
    ["the gate's deny, payload edited into an allow", (id) => {
      const env = JSON.parse(Buffer.from(verdict({ proposal_id: id, outcome: "deny", reason_codes: ["legal_hold_blocks_deletion"] })).toString()) as { payload: string };
      const edited = Buffer.from(env.payload, "base64").toString().replace('"deny"', '"allow"');
      return Buffer.from(JSON.stringify({ ...env, payload: Buffer.from(edited).toString("base64") }));
    }, /: verdict_not_signed_by_gate\./],
    ["the gate's envelope with its signature stripped", (id) => {
      const env = JSON.parse(Buffer.from(verdict(allowFor(id))).toString()) as Record<string, unknown>;
      return Buffer.from(JSON.stringify({ ...env, signatures: [] }));
    }, /: verdict_not_signed_by_gate\./],
    // Unsigned `held` naming a genuine approval: its gate-signed allow would release this call.
    ["an unsigned held naming another call's approval", (id) => unsignedVerdict({ proposal_id: id, outcome: "held", reason_codes: ["attorney_approval_required_for_transmission"], decision_id: DECISION, operation_hash: OPERATION, approval_id: APPROVAL }), /: verdict_not_signed_by_gate\./],
    ["a validly signed allow for another proposal", () => verdict(allowFor("p-" + "0".repeat(32))), /: verdict_for_another_proposal\./],
  ];
  for (const [name, answer, expected] of cases) {
    let bus: FakeBus | undefined;
    bus = new FakeBus((subject, data) => {
      if (subject === "smf.propose") {
        // The gate's genuine allow of that approval is already out: had the adapter
        // believed a forged `held`, this would release the call.
        bus?.inboxes.get(WATCH)?.push(outcome({ outcome: "allow", reason_codes: ["approved_once"], decision_id: DECISION, operation_hash: OPERATION, approval_id: APPROVAL }));
        return reply(answer(proposalOf(data).proposal_id));
      }
      if (subject === "smf.approval.status") return reply(Buffer.from(JSON.stringify({ approval_id: APPROVAL, state: "pending" })));
      throw new BusError("gate_unreachable");
    });
    const a = adapter(bus);
    const reason = blockReason(await a.beforeToolCall({ toolName: "exec", params: { command: "rm -rf /srv/held" }, runId: "r", toolCallId: "c" }, {}));
    assert.match(reason, expected, name);
    assert.match(reason, /^SMF Assurance gate denied exec: /, name);
    assert.ok(!bus.seen.some((x) => x.subject === "smf.approval.status"), `${name}: waited for an approval`);
    // nothing was allowed, so nothing is reported as executed under a decision
    const report = await a.afterToolCall({ toolName: "exec", params: { command: "rm -rf /srv/held" }, runId: "r", toolCallId: "c" }, {});
    assert.equal(report, undefined, name);
  }
  // A genuine allow recorded from one call and replayed to the next: for another proposal.
  let recorded: Uint8Array | undefined;
  const replaying = new FakeBus((_s, data) => {
    const genuine = verdict(allowFor(proposalOf(data).proposal_id));
    recorded ??= genuine;
    return reply(recorded);
  });
  const a = adapter(replaying);
  assert.ok("params" in (await a.beforeToolCall({ toolName: "read", params: { path: "/a" }, toolCallId: "c1" }, {})));
  assert.match(blockReason(await a.beforeToolCall({ toolName: "read", params: { path: "/a" }, toolCallId: "c2" }, {})), /verdict_for_another_proposal/);
});

test("params without a canonical form are blocked before anything is sent", async () => {
  const bus = new FakeBus(() => assert.fail("nothing may be proposed"));
  for (const params of [{ n: 1.5 }, { s: "\ud800" }, { k: "\u{16D63}" }, "not an object", { big: 2 ** 60 }]) {
    assert.match(blockReason(await adapter(bus).beforeToolCall({ toolName: "exec", params }, {})), /arguments_not_(canonical|an_object)/);
  }
});

test("refusing mode blocks everything and names its problems", async () => {
  const bus = new FakeBus(() => assert.fail("nothing may be proposed"));
  const reason = blockReason(await adapter(bus, 0, ["runtime_version_not_pinned"]).beforeToolCall({ toolName: "read", params: {} }, {}));
  assert.match(reason, /adapter_refuses_to_run\(runtime_version_not_pinned\)/);
});

// --- held --------------------------------------------------------------------------------

test("held: subscribed before proposing, then the status, then an allow for this approval releases the params once", async () => {
  const bus = holdingGate("pending");
  const a = adapter(bus);
  const pending = a.beforeToolCall(MESSAGE, {});
  await publishSoon(bus, outcome({ outcome: "allow", reason_codes: ["approved_once"], decision_id: DECISION, operation_hash: OPERATION, approval_id: APPROVAL }));
  const result = await pending;
  assert.ok("params" in result);
  const order = bus.seen.map((s) => `${s.op}:${s.subject}`);
  assert.deepEqual(order, [`subscribe:${WATCH}`, "request:smf.propose", "request:smf.approval.status"]);
  // the same approval never releases a second call in this process
  const again = a.beforeToolCall(MESSAGE, {});
  assert.match(blockReason(await again), /approval_already_used/);
});

test("held: every other ending blocks", async () => {
  const allow = { outcome: "allow" as const, decision_id: DECISION, operation_hash: OPERATION, approval_id: APPROVAL };
  const cases: [string, string, Uint8Array | undefined, RegExp][] = [
    ["status executing, no outcome ever: it was missed", "executing", undefined, /approval_outcome_missed/],
    ["status denied", "denied", undefined, /approval_denied/],
    ["status expired", "expired", undefined, /approval_expired/],
    ["deny outcome", "pending", outcome({ ...allow, outcome: "deny", reason_codes: ["approver_denied"] }), /approver_denied/],
    // The gate signed it, but its decision does not derive this approval id: never acted on.
    ["allow for another decision", "pending", outcome({ ...allow, decision_id: "sha256:" + "f".repeat(64) }), /approval_wait_timeout/],
    ["allow for another operation", "pending", outcome({ ...allow, operation_hash: "sha256:" + "0".repeat(64) }), /approval_outcome_mismatch/],
    ["allow for a connector", "pending", outcome({ ...allow, connector_id: "dms" }), /executed_by_connector_dms/],
    // Garbage names no approval, so it cannot end this wait: the wait times out.
    ["garbage on the subject", "pending", Buffer.from("not json"), /approval_wait_timeout/],
  ];
  for (const [name, state, data, expected] of cases) {
    const bus = holdingGate(state);
    const pending = adapter(bus, 300).beforeToolCall(MESSAGE, {});
    if (data !== undefined) await publishSoon(bus, data);
    assert.match(blockReason(await pending), expected, name);
  }
});

test("held: an approver's deny tells the requester its reason code and note", async () => {
  const deny = {
    outcome: "deny" as const, decision_id: DECISION, operation_hash: OPERATION, approval_id: APPROVAL,
    reason_codes: ["approver_denied", "approver_denied_wrong_recipient"],
  };
  const note = "Send it to opposing counsel's new address.\nSee the matter notes.";
  const bus = holdingGate("pending");
  const pending = adapter(bus).beforeToolCall(MESSAGE, {});
  await publishSoon(bus, outcome({ ...deny, approver_note: note }));
  const reason = blockReason(await pending);
  assert.match(reason, /approver_denied_wrong_recipient/);
  assert.ok(reason.endsWith(`The approver's note: ${JSON.stringify(note)}`), reason);
  // A note that is not plain text is not a Verdict: never read, the wait runs out.
  const forged = holdingGate("pending");
  const waiting = adapter(forged, 300).beforeToolCall(MESSAGE, {});
  await publishSoon(forged, outcome({ ...deny, approver_note: "\u001b[2Jall clear" }));
  assert.match(blockReason(await waiting), /approval_wait_timeout/);
});

test("held: status executing waits for the outcome in flight", async () => {
  const bus = holdingGate("executing");
  const pending = adapter(bus).beforeToolCall(MESSAGE, {});
  await publishSoon(bus, outcome({ outcome: "allow", reason_codes: ["approved_once"], decision_id: DECISION, operation_hash: OPERATION, approval_id: APPROVAL }));
  assert.ok("params" in (await pending));
});

test("held: an approver faster than the held reply is not lost", async () => {
  // The gate announces before it answers `held`; here the allow is published
  // while the proposal is still in flight, and the status already says executing.
  let bus: FakeBus | undefined;
  bus = new FakeBus((subject, data) => {
    if (subject === "smf.propose") {
      const p = proposalOf(data);
      bus?.inboxes.get(WATCH)?.push(outcome({ outcome: "allow", reason_codes: ["approved_once"], decision_id: DECISION, operation_hash: OPERATION, approval_id: APPROVAL }));
      return new Promise((resolve) => setTimeout(() => resolve(reply(verdict({
        proposal_id: p.proposal_id, outcome: "held", reason_codes: ["attorney_approval_required_for_transmission"],
        decision_id: DECISION, operation_hash: OPERATION, approval_id: APPROVAL, expires_at_ms: Date.now() + 60_000,
      }))), 20));
    }
    return reply(Buffer.from(JSON.stringify({ approval_id: APPROVAL, state: "executing" })));
  });
  const result = await adapter(bus).beforeToolCall(MESSAGE, {});
  assert.ok("params" in result, JSON.stringify(result));
  assert.deepEqual(bus.seen.map((x) => x.op + ":" + x.subject), [`subscribe:${WATCH}`, "request:smf.propose"]);
});

test("held: a forged outcome is ignored, never acted on; the gate's own releases the call once", async () => {
  const allow = { outcome: "allow" as const, reason_codes: ["approved_once"], decision_id: DECISION, operation_hash: OPERATION, approval_id: APPROVAL };
  const unsigned = unsignedVerdict({ proposal_id: "", ...allow });
  const OTHER_DECISION = "sha256:" + "c".repeat(64);
  const forgeries: [string, Uint8Array][] = [
    ["unsigned allow", unsigned],
    ["allow signed by the runtime's key", outcome(allow, KEY)],
    ["allow signed by the gate for another purpose", outcome(allow, GATE, PAYLOAD_REPORT)],
    ["the gate's allow of another approval", outcome({ ...allow, decision_id: OTHER_DECISION, approval_id: approvalIdFor(OTHER_DECISION) })],
    ["the gate's allow naming this approval but another decision", outcome({ ...allow, decision_id: OTHER_DECISION })],
    ["the gate's envelope, payload edited", (() => {
      const env = JSON.parse(Buffer.from(outcome({ ...allow, outcome: "deny", reason_codes: ["approver_denied"] })).toString()) as { payload: string };
      const edited = Buffer.from(env.payload, "base64").toString().replace('"deny"', '"allow"');
      return Buffer.from(JSON.stringify({ ...env, payload: Buffer.from(edited).toString("base64") }));
    })()],
  ];
  // Alone, none of them releases the call or ends the wait: it times out.
  for (const [name, data] of forgeries) {
    const bus = holdingGate("pending");
    const pending = adapter(bus, 300).beforeToolCall(MESSAGE, {});
    await publishSoon(bus, data);
    assert.match(blockReason(await pending), /approval_wait_timeout/, name);
  }
  // All of them first, then the gate's allow: released, once.
  const bus = holdingGate("pending");
  const a = adapter(bus, 5000);
  let settled = false;
  const pending = a.beforeToolCall(MESSAGE, {}).finally(() => {
    settled = true;
  });
  for (const [, data] of forgeries) await publishSoon(bus, data);
  await new Promise((r) => setTimeout(r, 50));
  assert.equal(settled, false, "a forged outcome ended the wait");
  bus.inboxes.get(WATCH)?.push(outcome(allow));
  assert.ok("params" in (await pending));
  assert.match(blockReason(await a.beforeToolCall(MESSAGE, {})), /approval_already_used/);
});

test("held: timeout, cancellation, waiting disabled, an approval id not derived from the decision", async () => {
  assert.match(blockReason(await adapter(holdingGate("pending"), 150).beforeToolCall(MESSAGE, {})), /approval_wait_timeout/);
  const abort = new AbortController();
  const pending = adapter(holdingGate("pending"), 5000).beforeToolCall(MESSAGE, { abortSignal: abort.signal });
  setTimeout(() => abort.abort(), 50);
  assert.match(blockReason(await pending), /tool_call_cancelled/);
  assert.match(blockReason(await adapter(holdingGate("pending"), 0).beforeToolCall(MESSAGE, {})), /approval_wait_disabled/);
  const forged = new FakeBus((_s, data) => reply(verdict({ proposal_id: proposalOf(data).proposal_id, outcome: "held", decision_id: DECISION, operation_hash: OPERATION, approval_id: "sha256:" + "a".repeat(64) })));
  assert.match(blockReason(await adapter(forged).beforeToolCall(MESSAGE, {})), /approval_id_mismatch/);
});

// --- after_tool_call -------------------------------------------------------------------

test("after_tool_call reports confirmed, failed, mismatch and ungated runs, signed", async () => {
  const reports: { subject: string; report: Record<string, unknown>; headers: Record<string, string> | undefined }[] = [];
  const bus = new FakeBus((subject, data, headers) => {
    if (subject === "smf.propose") {
      return reply(verdict({ proposal_id: proposalOf(data).proposal_id, outcome: "allow", decision_id: DECISION, operation_hash: OPERATION }));
    }
    const verified = verifyEnvelope(decodeEnvelope(data), TRUSTED, 1, PAYLOAD_REPORT);
    reports.push({ subject, report: JSON.parse(verified.payload.toString()) as Record<string, unknown>, headers });
    return reply(Buffer.from("{}"));
  });
  const a = adapter(bus);
  const params = { path: "/srv/a.txt" };
  for (const id of ["ok", "err", "changed"]) {
    assert.ok("params" in (await a.beforeToolCall({ toolName: "read", params, runId: "r", toolCallId: id }, {})));
  }
  await a.afterToolCall({ toolName: "read", params, runId: "r", toolCallId: "ok" }, {});
  await a.afterToolCall({ toolName: "read", params, runId: "r", toolCallId: "err", error: "ENOENT" }, {});
  await a.afterToolCall({ toolName: "read", params: { ...params, host: "gateway" }, runId: "r", toolCallId: "changed" }, {});
  await a.afterToolCall({ toolName: "exec", params: { command: "id" }, runId: "r", toolCallId: "never-seen" }, {});
  assert.deepEqual(
    reports.map((r) => [r.report.status, r.report.reason_code]),
    [["confirmed", "executed_as_approved"], ["failed", "tool_error"], ["ambiguous", "executed_params_mismatch"], ["ambiguous", "executed_without_gate_decision"]],
  );
  assert.ok(reports.every((r) => r.subject === "smf.result.openclaw-demo"));
  assert.equal(reports[0]?.headers?.["Smf-Decision-Id"], DECISION);
  assert.equal(reports[0]?.report.external_ref, "ok");
});

test("a read marks the whole process tainted; later egress says suspected", async () => {
  let facts: unknown;
  const bus = new FakeBus((subject, data) => {
    if (subject !== "smf.propose") return reply(Buffer.from("{}"));
    const verified = verifyEnvelope(decodeEnvelope(data), TRUSTED, 1, PAYLOAD_PROPOSAL);
    const p = JSON.parse(verified.payload.toString()) as { proposal_id: string; facts: unknown };
    facts = p.facts;
    return reply(verdict({ proposal_id: p.proposal_id, outcome: "deny", reason_codes: ["x"] }));
  });
  const a = adapter(bus);
  await a.beforeToolCall(MESSAGE, {});
  assert.equal((facts as { injection_taint: string }).injection_taint, "clear");
  await a.afterToolCall({ toolName: "web_fetch", params: { url: "https://x" }, toolCallId: "w" }, {});
  await a.beforeToolCall(MESSAGE, { sessionKey: "agent:other:main" });
  assert.equal((facts as { injection_taint: string }).injection_taint, "suspected");
});

// --- mapping and configuration ---------------------------------------------------------------

test("mapping: canonical arguments, legal hold, message destination, surface", () => {
  assert.equal(canonicalText(finalArguments({ b: 1, a: "e\u0301" })), '{"a":"\u00e9","b":1}');
  assert.throws(() => finalArguments({ "cafe\u0301": 1 }), /arguments_keys_not_nfc/);
  assert.equal(canonicalText(finalArguments({ nested: { "cafe\u0301": 1 } })), '{"nested":{"caf\u00e9":1}}');
  assert.equal(legalHoldOf("write", { path: "/srv/held/x" }, CONTEXT), true);
  assert.equal(legalHoldOf("write", { path: "/srv/free/x" }, CONTEXT), false);
  assert.equal(legalHoldOf("write", { path: "relative/x" }, CONTEXT), null);
  assert.equal(legalHoldOf("apply_patch", { input: "*** Begin Patch\n*** Update File: /srv/held/a\n*** End Patch" }, CONTEXT), true);
  assert.equal(legalHoldOf("exec", { command: "rm /srv/held/x" }, CONTEXT), null);
  const taint = new ProcessTaint();
  // OpenClaw trims header lines before matching them, and strips a leading "@".
  for (const header of [
    "  *** Update File: /srv/held/a",
    "*** Delete File: /srv/held/a  ",
    "*** Update File: /srv/free/a\n   *** Move to: /srv/held/b",
    "*** update  file: /srv/held/a",
    "***Add File:/srv/held/a",
  ]) {
    const input = `*** Begin Patch\r\n${header.replace("\n", "\r\n")}\r\n+x\r\n*** End Patch`;
    assert.equal(legalHoldOf("apply_patch", { input }, CONTEXT), true, header);
  }
  assert.equal(legalHoldOf("write", { path: "@/srv/held/x" }, CONTEXT), true);
  assert.equal(legalHoldOf("apply_patch", { input: "*** Add File: @/srv/held/y\n+x" }, CONTEXT), true);
  assert.deepEqual(targetPaths("read", { path: "@@x" }), ["@@x", "./@x"]);
  const internal = proposeCall("message", { action: "send", channel: "slack", target: "#partners", message: "m" }, undefined, CONTEXT, taint);
  assert.deepEqual(internal.destination, { address: "slack:#partners", locality: "internal" });
  assert.equal(internal.content, "m");
  const external = proposeCall("message", { action: "send", targets: ["a", "b"] }, "agent:main:subagent:x", CONTEXT, taint);
  assert.deepEqual(external.destination, { address: "a,b", locality: "unknown" });
  assert.equal(external.surface, "delegation");
  assert.throws(() => proposeCall("", {}, undefined, CONTEXT, taint), /tool_name_invalid/);
});

test("configuration problems are reason codes, never exceptions", () => {
  const dir = mkdtempSync(join(tmpdir(), "smf-oc-"));
  const badContext = join(dir, "ctx.json");
  writeFileSync(badContext, JSON.stringify({ ...CONTEXT_DOC, surprise: 1 }));
  const codes = (raw: unknown): string[] => readConfig(raw).problems.map((p) => p.reasonCode);
  assert.deepEqual(codes(undefined).sort(), ["smf_bus_credential_missing", "smf_context_missing", "smf_release_trust_root_missing", "smf_runtime_id_missing", "smf_runtime_key_missing"]);
  assert.ok(codes({ runtimeId: "a.b", keyFile: "/nope", contextFile: badContext }).includes("smf_context_invalid"));
  assert.ok(codes({ runtimeId: "rt", keyFile: "/nope", context: CONTEXT_DOC }).includes("smf_runtime_key_unreadable"));
  assert.ok(codes({ runtimeId: "rt", keyFile: "/nope", context: CONTEXT_DOC, gateTimeoutMs: "5000" }).includes("smf_config_invalid"));
  assert.ok(codes({ runtimeId: "rt", keyFile: "/nope", context: CONTEXT_DOC, typo: 1 }).includes("smf_config_invalid"));
});

/** A registry file (`smf.registry/1`) as `smf_assurance.subjects.registry.encode_registry` writes it. */
function registryDoc(entries: { key: SigningKey; role: string; principal: string; extra?: Record<string, unknown> }[]): Record<string, unknown> {
  return {
    schema: "smf.registry/1",
    entries: entries.map((e) => ({
      key: { kind: "smf.ed25519.public/1", key_id: e.key.keyId, principal: e.principal, public_key: e.key.publicBytes.toString("base64") },
      role: e.role,
      runtime_id: e.role === "runtime" ? "openclaw-demo" : null,
      connector_id: null,
      tenants: [],
      licensed_roles: [],
      ...e.extra,
    })),
  };
}

/** A trust root document (`smf.release-trust-root/1`) as `release trust-root` writes it. */
function trustRootDoc(keys: SigningKey[], threshold = 1): Record<string, unknown> {
  return {
    schema: "smf.release-trust-root/1",
    threshold,
    keys: keys.map((k, i) => ({ kind: "smf.ed25519.public/1", key_id: k.keyId, principal: `release-signer-${i}`, public_key: k.publicBytes.toString("base64") })),
  };
}

/** A fresh user nkey seed (0600), as `smf_assurance.ops.local.bus_auth.write_user_seed` writes one. */
function writeSeedFile(dir: string, mode = 0o600): string {
  const seedFile = join(dir, `runtime-${mode.toString(8)}.nkey`);
  writeFileSync(seedFile, new TextDecoder().decode(nkeys.createUser().getSeed()) + "\n", { mode });
  chmodSync(seedFile, mode);
  return seedFile;
}

function writeKeyFile(dir: string): string {
  const keyFile = join(dir, "runtime.key");
  writeFileSync(keyFile, JSON.stringify({
    kind: "smf.ed25519.private/1", key_id: KEY.keyId, principal: "openclaw-runtime",
    public_key: KEY.publicBytes.toString("base64"), secret_seed: Buffer.from("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60", "hex").toString("base64"),
  }));
  return keyFile;
}

test("a registry's gate keys: role gate only; the registry is checked as Python checks it", () => {
  const good = registryDoc([
    { key: GATE, role: "gate", principal: "gate" },
    { key: KEY, role: "runtime", principal: "openclaw-runtime" },
  ]);
  assert.deepEqual([...gateKeysOf(good).keys()], [GATE.keyId]); // the runtime's key is not a gate key
  const gateEntry = (good.entries as Record<string, unknown>[])[0] as Record<string, unknown>;
  const code = (doc: unknown): string => {
    try {
      gateKeysOf(doc);
      return "accepted";
    } catch (error) {
      return (error as { reasonCode: string }).reasonCode;
    }
  };
  assert.equal(code({ ...good, schema: "smf.registry/2" }), "smf_registry_invalid");
  assert.equal(code({ ...good, extra: 1 }), "smf_registry_invalid");
  assert.equal(code({ ...good, entries: [{ ...gateEntry, key: { ...(gateEntry.key as object), key_id: KEY.keyId } }] }), "smf_registry_invalid");
  assert.equal(code({ ...good, entries: [gateEntry, gateEntry] }), "smf_registry_invalid");
  assert.equal(code(registryDoc([{ key: KEY, role: "runtime", principal: "openclaw-runtime" }])), "smf_gate_keys_missing");
  // a runtime's launcher (`runtime add` registers one): known to the plugin, never a gate key
  const launcher = { key: SigningKey.fromSeed(Buffer.alloc(32, 5)), role: "launcher", principal: "openclaw-demo-launcher" };
  const withLauncher = registryDoc([{ key: GATE, role: "gate", principal: "gate" }, { ...launcher, extra: { runtime_id: "openclaw-demo" } }]);
  assert.deepEqual([...gateKeysOf(withLauncher).keys()], [GATE.keyId]);
  assert.equal(code(registryDoc([{ key: GATE, role: "gate", principal: "gate" }, launcher])), "smf_registry_invalid"); // a launcher names its runtime
  // a rotation's retired gate key: listed for the evidence it signed, never trusted
  const oldGate = SigningKey.fromSeed(Buffer.alloc(32, 6));
  const retiredEntry = { ...gateEntry, key: { ...(gateEntry.key as object), key_id: oldGate.keyId, public_key: oldGate.publicBytes.toString("base64") } };
  assert.deepEqual([...gateKeysOf({ ...good, retired: [retiredEntry] }).keys()], [GATE.keyId]);
  assert.equal(code({ ...good, retired: [gateEntry] }), "smf_registry_invalid"); // one key, active and retired
  assert.equal(code({ ...good, retired: [{ ...retiredEntry, nats_user: "U" + "A".repeat(55) }] }), "smf_registry_invalid");
  assert.equal(code({ ...good, retired: [{ ...retiredEntry, extra: 1 }] }), "smf_registry_invalid");
  assert.equal(code({ ...good, retired: {} }), "smf_registry_invalid");
  assert.equal(code({ ...good, entries: [(good.entries as unknown[])[1]], retired: [gateEntry] }), "smf_gate_keys_missing");
  // a person's enrolled passkey: read past (the gate verifies it), never a gate key
  const attorney = registryDoc([{ key: GATE, role: "gate", principal: "gate" }, { key: KEY, role: "approver", principal: "attorney-alex" }]);
  const passkey = { principal: "attorney-alex", credential_id: "A".repeat(43), public_key: "pQECAyYgASFYIA", rp_id: "localhost", origins: ["http://localhost:8765"], enrolled_at_ms: 1 };
  assert.deepEqual([...gateKeysOf({ ...attorney, passkeys: [passkey] }).keys()], [GATE.keyId]);
  assert.deepEqual([...gateKeysOf({ ...attorney, passkeys: [{ ...passkey, label: "security key" }] }).keys()], [GATE.keyId]);
  assert.equal(code({ ...attorney, passkeys: [{ ...passkey, principal: "gate" }] }), "smf_registry_invalid"); // not a person
  assert.equal(code({ ...attorney, passkeys: [passkey, passkey] }), "smf_registry_invalid"); // enrolled twice
  assert.equal(code({ ...attorney, passkeys: [{ ...passkey, extra: 1 }] }), "smf_registry_invalid");
  assert.equal(code({ ...attorney, passkeys: {} }), "smf_registry_invalid");
});

test("trustRootFile: no registryFile any more; missing, unreadable or invalid trust root refuses", () => {
  const dir = mkdtempSync(join(tmpdir(), "smf-oc-root-"));
  const write = (name: string, doc: unknown): string => {
    const path = join(dir, name);
    writeFileSync(path, typeof doc === "string" ? doc : JSON.stringify(doc));
    return path;
  };
  const base = { runtimeId: "openclaw-demo", keyFile: writeKeyFile(dir), credentialFile: writeSeedFile(dir), context: CONTEXT_DOC };
  const ok = readConfig({ ...base, trustRootFile: write("ok.json", trustRootDoc([GATE, KEY], 2)) });
  assert.deepEqual(ok.problems, []);
  assert.equal(ok.config?.trustRoot.threshold, 2);
  assert.deepEqual([...(ok.config?.trustRoot.keys.keys() ?? [])].sort(), [GATE.keyId, KEY.keyId].sort());
  const codes = (trustRootFile: unknown): string[] => readConfig({ ...base, trustRootFile }).problems.map((p) => p.reasonCode);
  const good = trustRootDoc([GATE]);
  const cases: [string, unknown, string][] = [
    ["not set", undefined, "smf_release_trust_root_missing"],
    ["no such file", join(dir, "missing.json"), "smf_release_trust_root_unreadable"],
    ["not JSON", write("bad.json", "{"), "smf_release_trust_root_invalid"],
    ["another schema", write("schema.json", { ...good, schema: "smf.release-trust-root/2" }), "smf_release_trust_root_invalid"],
    ["unknown field", write("field.json", { ...good, extra: 1 }), "smf_release_trust_root_invalid"],
    ["threshold above its keys", write("threshold.json", trustRootDoc([GATE], 2)), "smf_release_trust_root_invalid"],
    ["the same key twice", write("twice.json", { ...good, keys: [...(good.keys as unknown[]), ...(good.keys as unknown[])] }), "smf_release_trust_root_invalid"],
  ];
  for (const [name, path, code] of cases) assert.deepEqual(codes(path), [code], name);
  // The old key is refused, not silently ignored: a registry on disk is not a verified release.
  assert.ok(codes(write("ok2.json", good)).length === 0);
  assert.ok(readConfig({ ...base, trustRootFile: write("ok3.json", good), registryFile: "/x" }).problems.some((p) => p.reasonCode === "smf_config_invalid"));
});

test("credentialFile: the key file's principal, its nkey, the inbox prefix; refused when unusable", () => {
  const dir = mkdtempSync(join(tmpdir(), "smf-oc-cred-"));
  const trustRootFile = join(dir, "root.json");
  writeFileSync(trustRootFile, JSON.stringify(trustRootDoc([GATE])));
  const base = { runtimeId: "openclaw-demo", keyFile: writeKeyFile(dir), trustRootFile, context: CONTEXT_DOC };
  const seedFile = writeSeedFile(dir);
  const ok = readConfig({ ...base, credentialFile: seedFile });
  assert.deepEqual(ok.problems, []);
  assert.deepEqual(ok.config?.credential, { principal: "openclaw-runtime", seedFile });
  assert.equal(inboxPrefix(ok.config?.credential.principal ?? ""), "_INBOX.openclaw-runtime");
  const badChecksum = join(dir, "checksum.nkey");
  writeFileSync(badChecksum, "SU" + "A".repeat(56), { mode: 0o600 });
  const problems = (credentialFile: unknown) => readConfig({ ...base, credentialFile }).problems;
  const cases: [string, unknown, string][] = [
    ["not set", undefined, "smf_bus_credential_missing"],
    ["no such file", join(dir, "missing.nkey"), "smf_bus_credential_unreadable"],
    ["a directory", dir, "smf_bus_credential_unreadable"],
    ["group-readable", writeSeedFile(dir, 0o640), "smf_bus_credential_too_open"],
    ["world-readable", writeSeedFile(dir, 0o644), "smf_bus_credential_too_open"],
    ["bad checksum", badChecksum, "smf_bus_credential_invalid"],
  ];
  for (const [name, path, code] of cases) {
    const found = problems(path);
    assert.deepEqual(found.map((p) => p.reasonCode), [code], name);
    // no byte of a seed in any problem text
    assert.ok(found.every((p) => !/SU[A-Z2-7]{20}/.test(p.detail)), name);
  }
  assert.deepEqual(problems(writeSeedFile(dir, 0o400)), []);
});

test("caFile: the bus CA, else SMF_NATS_CA unless confined; refused when it holds no certificate", () => {
  const dir = mkdtempSync(join(tmpdir(), "smf-oc-ca-"));
  const trustRootFile = join(dir, "root.json");
  writeFileSync(trustRootFile, JSON.stringify(trustRootDoc([GATE])));
  const base = { runtimeId: "openclaw-demo", keyFile: writeKeyFile(dir), credentialFile: writeSeedFile(dir), trustRootFile, context: CONTEXT_DOC };
  const ca = join(dir, "ca.pem");
  writeFileSync(ca, "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n");
  const other = join(dir, "other.pem");
  writeFileSync(other, "-----BEGIN CERTIFICATE-----\nMIIC\n-----END CERTIFICATE-----\n");
  assert.equal(readConfig(base, {}).config?.busCa, null);
  assert.equal(readConfig({ ...base, caFile: ca }, {}).config?.busCa, ca);
  assert.equal(readConfig(base, { SMF_NATS_CA: ca }).config?.busCa, ca);
  assert.equal(readConfig({ ...base, caFile: other }, { SMF_NATS_CA: ca }).config?.busCa, other);
  assert.equal(readConfig(base, { SMF_NATS_CA: "" }).config?.busCa, null);
  const notPem = join(dir, "not.pem");
  writeFileSync(notPem, "hello\n");
  const codes = (caFile: unknown): string[] => readConfig({ ...base, caFile }, {}).problems.map((p) => p.reasonCode);
  const cases: [string, unknown][] = [
    ["no such file", join(dir, "missing.pem")],
    ["a directory", dir],
    ["no certificate in it", notPem],
    ["not a path", 7],
    ["empty", ""],
  ];
  for (const [name, caFile] of cases) assert.deepEqual(codes(caFile), ["smf_bus_ca_unusable"], name);
  assert.deepEqual(readConfig(base, { SMF_NATS_CA: notPem }).problems.map((p) => p.reasonCode), ["smf_bus_ca_unusable"]);
});

// --- register() ---------------------------------------------------------------------------

test("register twice shares one adapter, lowest priority, budget above the hold wait, never throws", () => {
  const registered: { name: string; priority?: number; timeoutMs?: number }[] = [];
  const api = (): PluginApi => ({
    pluginConfig: { runtimeId: "rt", keyFile: "/nope", context: CONTEXT_DOC, holdTimeoutMs: 100_000 },
    runtime: { version: "2026.9.6" },
    logger: silent,
    on: (name, _handler, opts) => {
      registered.push({ name, ...opts });
    },
  });
  const first = api();
  plugin.register(first);
  plugin.register(api());
  assert.equal(adapterFor(first), adapterFor(api()));
  assert.equal(registered.length, 4);
  assert.ok(registered.every((r) => r.priority === HOOK_PRIORITY));
  assert.equal(plugin.id, "smf-assurance");
  const throwing: PluginApi = { ...api(), on: () => { throw new Error("host refused"); } };
  assert.doesNotThrow(() => plugin.register(throwing));
  assert.equal(hookTimeoutMs(adapter(undefined, 600_000)), 600_000);
  assert.equal(hookTimeoutMs(adapter(undefined, 10_000)), 2 * 1000 + 10_000 + 5000);
});

// --- the governed release and the attestation (attest.ts, release.ts) ----------------------

/** A release signer beside the gate's and the runtime's keys. */
const SIGNER = SigningKey.fromSeed(Buffer.alloc(32, 7));
const ROOT = { threshold: 1, keys: new Map<string, VerifyKey>([[SIGNER.keyId, SIGNER.verifyKey]]) };
const NOW = 1_800_000_000_000;

function bundleOf(opts: { sequence?: number; releaseId?: string; leaseMs?: number; signer?: SigningKey; gate?: SigningKey } = {}): Uint8Array {
  const enforcement = Buffer.from("{}");
  const analysis = Buffer.from("[]");
  const registry = canonicalBytes(registryDoc([
    { key: opts.gate ?? GATE, role: "gate", principal: "gate" },
    { key: KEY, role: "runtime", principal: "openclaw-runtime" },
  ]));
  const manifest = {
    schema: "smf.release-manifest/1", release_id: opts.releaseId ?? "demo-1", sequence: opts.sequence ?? 1, prior_release_hash: null,
    issued_at_ms: NOW - 1000, lease_expires_at_ms: NOW + (opts.leaseMs ?? 3_600_000), recipe_id: "sha256:" + "a".repeat(64),
    digests: { enforcement: sha256Identity(enforcement), analysis: sha256Identity(analysis), registry: sha256Identity(registry) },
    revocations: { key_ids: [], release_ids: [] },
  };
  const envelope = signValue(PAYLOAD_RELEASE_MANIFEST, manifest, [opts.signer ?? SIGNER]);
  return Buffer.from(JSON.stringify({
    schema: "smf.release-bundle/1", envelope,
    enforcement: enforcement.toString("base64"), analysis: analysis.toString("base64"), registry: registry.toString("base64"),
  }));
}

/** A bus with a JetStream KV bucket (`values` by key, `null` = a delete marker), a gate and its attestation desk. */
class GovernedBus extends FakeBus {
  attestations: Record<string, unknown>[] = [];
  proposals = 0;
  /** Refusals the adapter reported (`refused_locally`), apart from its proposals. */
  reports: Record<string, unknown>[] = [];
  accept = true;
  gateReasons: string[] = [];
  constructor(public values: Record<string, Uint8Array | null> | undefined, attest = true) {
    super((subject, data) => {
      if (subject === "$JS.SMF.API.STREAM.INFO.KV_SMF_RELEASES") {
        if (this.values === undefined) return reply(Buffer.from(JSON.stringify({ error: { code: 404, err_code: 10059, description: "stream not found" } })));
        const subjects = Object.fromEntries(Object.keys(this.values).map((k) => [`$KV.SMF_RELEASES.${k}`, 1]));
        return reply(Buffer.from(JSON.stringify({ state: { subjects } })));
      }
      if (subject === "$JS.SMF.API.STREAM.MSG.GET.KV_SMF_RELEASES") {
        const key = (JSON.parse(Buffer.from(data).toString()) as { last_by_subj: string }).last_by_subj.slice("$KV.SMF_RELEASES.".length);
        const value = this.values?.[key];
        if (value === undefined) return reply(Buffer.from(JSON.stringify({ error: { code: 404, description: "no message found" } })));
        const message = value === null
          ? { hdrs: Buffer.from("NATS/1.0\r\nKV-Operation: DEL\r\n\r\n").toString("base64") }
          : { data: Buffer.from(value).toString("base64") };
        return reply(Buffer.from(JSON.stringify({ message })));
      }
      if (subject === "smf.attest") {
        if (!attest) throw new BusError("gate_unreachable", "no responders");
        const verified = verifyEnvelope(decodeEnvelope(data), TRUSTED, 1, PAYLOAD_ATTESTATION);
        const att = JSON.parse(verified.payload.toString("utf8")) as Record<string, unknown>;
        this.attestations.push(att);
        const reasons = this.accept ? (att.problems as string[]) : ["runtime_release_mismatch"];
        return reply(Buffer.from(JSON.stringify({ schema: "smf.attestation-ack/1", attestation_id: att.attestation_id, accepted: reasons.length === 0, reason_codes: reasons, release_id: "demo-1" })));
      }
      if (subject === "smf.propose") {
        const p = proposalOf(data);
        if ((p as { refused_locally?: string }).refused_locally !== undefined) {
          this.reports.push(p as unknown as Record<string, unknown>);
          return reply(verdict({ proposal_id: p.proposal_id, outcome: "deny", reason_codes: ["refused_by_adapter"] }));
        }
        this.proposals += 1;
        if (this.gateReasons.length > 0) return reply(verdict({ proposal_id: p.proposal_id, outcome: "deny", reason_codes: this.gateReasons }));
        return reply(verdict({ proposal_id: p.proposal_id, outcome: "allow", decision_id: DECISION, operation_hash: OPERATION }));
      }
      throw new BusError("gate_unreachable", "no responders");
    });
  }
}

function governed(bus: Bus, clock: () => number = () => NOW, binding: ProcessBinding = newProcessBinding()): Governance {
  const g = new Governance(
    { runtimeId: "openclaw-demo", runtimeVersion: "2026.9.6", runtimePin: "2026.9.6", adapterId: "smf-openclaw-adapter", key: KEY, trustRoot: ROOT, gateTimeoutMs: 1000, attestIntervalMs: 60_000 },
    bus, silent, clock, binding,
  );
  g.hooksPresent = ["after_tool_call", "before_tool_call"];
  return g;
}

const EXEC = { toolName: "exec", params: { command: "ls" }, toolCallId: "c1" };

test("attests with the verified release and profile exact-hold, then proposes; gate keys come from that release", async () => {
  const bus = new GovernedBus({ "release.0000000000000001": bundleOf(), "release.0000000000000002": null });
  const g = governed(bus);
  const result = await adapter(bus, 2000, [], g).beforeToolCall(EXEC, {});
  assert.ok("params" in result, JSON.stringify(result));
  assert.deepEqual(bus.seen.filter((x) => !x.subject.startsWith("$JS")).map((x) => x.subject), ["smf.attest", "smf.approval.outcome.>", "smf.propose"]);
  const att = bus.attestations[0] as Record<string, unknown>;
  assert.equal(att.schema, "smf.runtime-attestation/1");
  assert.equal(att.profile, "exact-hold");
  assert.equal(att.runtime_pin, "2026.9.6");
  assert.equal(att.verified_release_id, "demo-1"); // the deleted newer key was skipped
  assert.deepEqual(att.hooks_present, ["after_tool_call", "before_tool_call"]);
  assert.deepEqual(att.problems, []);
  assert.deepEqual([...g.gateKeys().keys()], [GATE.keyId]);
  // attested once: the next call does not attest again
  await adapter(bus, 2000, [], g).beforeToolCall({ ...EXEC, toolCallId: "c2" }, {});
  assert.equal(bus.attestations.length, 1);
});

test("the attestation names this process's instance, and the gate's answer is what the model-request proof follows", async () => {
  const bus = new GovernedBus({ "release.0000000000000001": bundleOf() });
  const binding = newProcessBinding();
  const g = governed(bus, () => NOW, binding);
  const first = g.attestOnce();
  assert.equal(binding.pending, first); // a first model call may wait for it
  const ack = await first;
  assert.equal(ack.accepted, true);
  assert.equal(binding.pending, undefined);
  assert.equal((bus.attestations[0] as Record<string, unknown>).instance_id, binding.instanceId);
  assert.match(binding.instanceId, /^i-[0-9a-f]{32}$/);
  assert.deepEqual(binding.attested, { accepted: true, runtimeId: "openclaw-demo", key: KEY, expiresAtMs: null });
  // the gate refuses the next one: the proof stops with it
  bus.accept = false;
  await g.attestOnce();
  assert.deepEqual(binding.attested, { accepted: false });
  // a gate that does not answer changes nothing the gate said last
  bus.accept = true;
  await g.attestOnce();
  const silentGate = new GovernedBus({ "release.0000000000000001": bundleOf() }, false);
  const quiet = governed(silentGate, () => NOW, binding);
  await assert.rejects(quiet.attestOnce());
  assert.equal(binding.attested?.accepted, true);
  // one process, one instance: a second adapter of the process attests the same id
  assert.equal((bus.attestations[2] as Record<string, unknown>).instance_id, binding.instanceId);
});

test("a problem one adapter of the process found is in every adapter's attestation (one process, several module instances)", async () => {
  const bus = new GovernedBus({ "release.0000000000000001": bundleOf() });
  const binding = newProcessBinding();
  const [found, other] = [governed(bus, () => NOW, binding), governed(bus, () => NOW, binding)];
  assert.equal(found.noteProblem("foreign_param_hooks"), true);
  assert.equal(other.noteProblem("foreign_param_hooks"), false); // noted once per process
  await other.attestOnce();
  const last = bus.attestations.at(-1) as Record<string, unknown>;
  assert.deepEqual(last.problems, ["foreign_param_hooks"]);
  // the gate refuses it, and the other adapter's periodic attestation cannot turn that back
  assert.deepEqual(binding.attested, { accepted: false });
});

test("no release, a forged, expired or rolled-back release: refusing, attested as such, nothing proposed, no gate keys", async () => {
  const cases: [string, Record<string, Uint8Array | null> | undefined, string, number?][] = [
    ["no bucket", undefined, "release_unavailable"],
    ["an empty bucket", {}, "release_unavailable"],
    ["only a delete marker", { "release.0000000000000001": null }, "release_unavailable"],
    ["signed by an outsider", { "release.0000000000000001": bundleOf({ signer: KEY }) }, "release_bad_signature"],
    ["expired", { "release.0000000000000001": bundleOf({ leaseMs: 30_000 }) }, "release_expired"],
    ["garbage", { "release.0000000000000001": Buffer.from("{") }, "release_malformed"],
  ];
  for (const [name, values, reason] of cases) {
    const bus = new GovernedBus(values);
    const g = governed(bus);
    const result = await adapter(bus, 2000, [], g).beforeToolCall(EXEC, {});
    assert.match(blockReason(result), new RegExp(`adapter_refuses_to_run\\(${reason}\\)`), name);
    assert.equal(bus.proposals, 0, name);
    // only the refusal is reported (tool-call accounting), nothing of the call
    assert.deepEqual(bus.reports.map((r) => [r.refused_locally, r.tool_call_id, r.arguments]), [["adapter_refuses_to_run", "c1", {}]], name);
    const att = bus.attestations[0] as Record<string, unknown>;
    assert.equal(att.verified_release_id, null, name);
    assert.deepEqual(att.problems, [reason], name);
    assert.equal(g.gateKeys().size, 0, name);
  }
  // The lease runs out after verification: blocked from then on, gate keys dropped.
  let now = NOW;
  const bus = new GovernedBus({ "release.0000000000000001": bundleOf({ leaseMs: 120_000 }) });
  const g = governed(bus, () => now);
  assert.ok("params" in (await adapter(bus, 2000, [], g).beforeToolCall(EXEC, {})));
  now += 61_000;
  assert.match(blockReason(await adapter(bus, 2000, [], g).beforeToolCall({ ...EXEC, toolCallId: "c3" }, {})), /release_expired/);
  assert.equal(g.gateKeys().size, 0);
  // Rollback: a lower sequence after a higher one is refused (floor in memory).
  const rb = new GovernedBus({ "release.0000000000000002": bundleOf({ sequence: 2, releaseId: "demo-2" }) });
  const gr = governed(rb);
  await gr.checkRelease();
  assert.equal(gr.release?.releaseId, "demo-2");
  rb.values = { "release.0000000000000001": bundleOf() };
  await gr.checkRelease();
  assert.equal(gr.refusal(), "release_rollback");
});

test("a gate that does not answer smf.attest blocks; a release mismatch makes the adapter re-attest first", async () => {
  const silentGate = new GovernedBus({ "release.0000000000000001": bundleOf() }, false);
  assert.match(blockReason(await adapter(silentGate, 2000, [], governed(silentGate)).beforeToolCall(EXEC, {})), /gate_unreachable/);
  assert.equal(silentGate.proposals, 0);
  const bus = new GovernedBus({ "release.0000000000000001": bundleOf() });
  const g = governed(bus);
  bus.gateReasons = ["runtime_release_mismatch"];
  assert.match(blockReason(await adapter(bus, 2000, [], g).beforeToolCall(EXEC, {})), /runtime_release_mismatch/);
  bus.gateReasons = [];
  await adapter(bus, 2000, [], g).beforeToolCall({ ...EXEC, toolCallId: "c2" }, {});
  assert.equal(bus.attestations.length, 2);
});

test("smf.propose: the verdict must be signed by a gate key of the VERIFIED release's registry", async () => {
  // The release names another gate key: the bus's gate (GATE) is then just another signer.
  const OTHER_GATE = SigningKey.fromSeed(Buffer.alloc(32, 11));
  const bus = new GovernedBus({ "release.0000000000000001": bundleOf({ gate: OTHER_GATE }) });
  const g = governed(bus);
  const reason = blockReason(await adapter(bus, 2000, [], g).beforeToolCall(EXEC, {}));
  assert.match(reason, /verdict_not_signed_by_gate/);
  assert.equal(bus.proposals, 1);
  assert.deepEqual([...g.gateKeys().keys()], [OTHER_GATE.keyId]);
});

test("register(): a hook budget below the longest approval wait is a problem, attested and refusing", async () => {
  const dir = mkdtempSync(join(tmpdir(), "smf-oc-hook-"));
  const trustRootFile = join(dir, "root.json");
  writeFileSync(trustRootFile, JSON.stringify(trustRootDoc([SIGNER])));
  const base = { natsUrl: "nats://127.0.0.1:1", runtimeId: "openclaw-demo", keyFile: writeKeyFile(dir), credentialFile: writeSeedFile(dir), trustRootFile, context: CONTEXT_DOC, gateTimeoutMs: 1000 };
  const api = (config: Record<string, unknown>, extra: Partial<PluginApi> = {}): PluginApi => ({
    pluginConfig: config, runtime: { version: "2026.9.6" }, logger: silent, on: () => undefined, ...extra,
  });
  assert.deepEqual(adapterFor(api({ ...base, holdTimeoutMs: 60_000 })).problems, []);
  assert.deepEqual(adapterFor(api({ ...base, holdTimeoutMs: 600_000 })).problems, ["hook_timeout_below_approval_wait"]);
  const override = { config: { plugins: { entries: { "smf-assurance": { hooks: { timeouts: { before_tool_call: 30_000 } } } } } } };
  assert.deepEqual(adapterFor(api({ ...base, holdTimeoutMs: 60_001 }, override)).problems, ["hook_timeout_below_approval_wait"]);
  await shutdown();
});

test("a call the adapter refuses itself is reported to the gate as a refusal, and stays blocked whatever the answer", async () => {
  const sent: Record<string, unknown>[] = [];
  const bus = new FakeBus((_s, data) => {
    const verified = verifyEnvelope(decodeEnvelope(data), TRUSTED, 1, PAYLOAD_PROPOSAL);
    const p = JSON.parse(verified.payload.toString("utf8")) as Record<string, unknown> & { proposal_id: string };
    sent.push(p);
    // even a gate that answered allow could not turn the refusal into a run
    return reply(verdict({ proposal_id: p.proposal_id, outcome: "allow", decision_id: DECISION, operation_hash: OPERATION }));
  });
  const result = await adapter(bus).beforeToolCall({ toolName: "read", params: ["x"], toolCallId: "c9" }, {});
  assert.match(blockReason(result), /arguments_not_an_object/);
  assert.deepEqual(
    sent.map((p) => [p.refused_locally, p.tool_call_id, p.native_tool, p.arguments]),
    [["arguments_not_an_object", "c9", "read", {}]],
  );
  // without a call id there is no result to account for: nothing is sent
  assert.match(blockReason(await adapter(bus).beforeToolCall({ toolName: "read", params: ["x"] }, {})), /arguments_not_an_object/);
  assert.equal(sent.length, 1);
  // a gate that does not answer: still blocked, nothing thrown
  const unanswered = new FakeBus(() => {
    throw new BusError("gate_unreachable", "no responders");
  });
  assert.match(blockReason(await adapter(unanswered).beforeToolCall({ toolName: "read", params: ["x"], toolCallId: "c8" }, {})), /arguments_not_an_object/);
  await shutdown();
});

test("mapping: no tool call may touch the plugin's own files", () => {
  const dir = mkdtempSync(join(tmpdir(), "smf-protected-"));
  mkdirSync(join(dir, "keys"));
  const key = join(dir, "keys", "openclaw-runtime.key");
  writeFileSync(key, "seed");
  symlinkSync(join(dir, "keys"), join(dir, "link"));
  const guard = protectedFiles({ keyFile: key, trustRootFile: join(dir, "root.json") }, { OPENCLAW_CONFIG_PATH: join(dir, "openclaw.json") });
  const context = { ...CONTEXT, workspaceDir: dir };
  const refused = (tool: string, args: Record<string, unknown>): boolean => {
    try {
      proposeCall(tool, args, undefined, context, new ProcessTaint(), guard);
      return false;
    } catch (error) {
      return error instanceof Error && /credential_access/.test(error.message);
    }
  };
  assert.ok(refused("read", { path: key }));
  assert.ok(refused("read", { path: "link/openclaw-runtime.key" }));
  assert.ok(refused("read", { path: "@link/openclaw-runtime.key" }));
  assert.ok(refused("write", { path: "root.json", content: "{}" }));
  assert.ok(refused("edit", { path: join(dir, "openclaw.json"), oldText: "a", newText: "b" }));
  assert.ok(refused("apply_patch", { input: "*** Begin Patch\n*** Update File: link/openclaw-runtime.key\n*** End Patch" }));
  assert.ok(refused("exec", { command: "cat keys/openclaw-runtime.key | base64" }));
  assert.ok(!refused("read", { path: "notes.txt" }));
  assert.ok(!refused("exec", { command: "ls" }));
  assert.deepEqual(guard.names, ["openclaw-runtime.key"]);
  // Without OPENCLAW_CONFIG_PATH: openclaw.json in the state folder.
  assert.ok(protectedFiles({}, { OPENCLAW_STATE_DIR: dir }).paths.includes(join(dir, "openclaw.json")));
});

test("foreign hooks: another plugin that can change a call after ours is found", () => {
  const mine = new Set<string>(["/plugins/smf-assurance/dist/index.js"]);
  const entry = (pluginId: string, hookName: string, priority?: unknown) => ({ pluginId, hookName, priority, source: `/plugins/${pluginId}-elsewhere/index.js` });
  const ours = { ...entry("smf-assurance", "before_tool_call", Number.MIN_SAFE_INTEGER), source: "/plugins/smf-assurance/dist/index.js" };
  const found = (...hooks: unknown[]) => foreignParamHooks({ typedHooks: [ours, ...hooks] }, mine, Number.MIN_SAFE_INTEGER);
  assert.deepEqual(found(), []);
  assert.deepEqual(found(entry("memory", "before_tool_call", 0), entry("x", "after_tool_call", -Infinity)), []);
  assert.deepEqual(found(entry("default", "before_tool_call")), []); // no priority: 0, before ours
  assert.deepEqual(found(entry("rogue", "before_tool_call", -Infinity)), ["rogue:before_tool_call@-Infinity"]);
  assert.deepEqual(found(entry("tie", "before_tool_call", Number.MIN_SAFE_INTEGER)), [`tie:before_tool_call@${Number.MIN_SAFE_INTEGER}`]);
  assert.deepEqual(found(entry("nan", "before_tool_call", Number.NaN)), ["nan:before_tool_call@NaN"]);
  assert.deepEqual(found(entry("env", "resolve_exec_env")), ["env:resolve_exec_env"]);
  // Priorities as OpenClaw's dispatcher coerces them. A string sorts by Number(); an
  // object's valueOf is foreign code (it may answer this check and the sort apart).
  assert.deepEqual(found(entry("str", "before_tool_call", "-Infinity")), ["str:before_tool_call@-Infinity"]);
  assert.deepEqual(found(entry("str-high", "before_tool_call", "100")), []);
  assert.deepEqual(found(entry("str-nan", "before_tool_call", "soon")), ["str-nan:before_tool_call@soon"]);
  let calls = 0;
  const shifty = { valueOf: () => (++calls === 1 ? Infinity : -Infinity) };
  assert.deepEqual(found(entry("obj", "before_tool_call", shifty)), ["obj:before_tool_call@object"]);
  assert.equal(calls, 0); // never run: its answer could not be trusted
  assert.deepEqual(found(entry("big", "before_tool_call", 5n)), ["big:before_tool_call@bigint"]);
  // An entry naming our plugin id is ours only if OpenClaw recorded it from our source.
  assert.deepEqual(found(entry("smf-assurance", "before_tool_call", -Infinity)), ["smf-assurance:before_tool_call@-Infinity"]);
  assert.deepEqual(found({ ...ours, priority: -Infinity }), []); // our own source, registered again
  assert.deepEqual(found({ ...ours, source: undefined }), ["smf-assurance:before_tool_call@-9007199254740991"]);
  assert.equal(foreignParamHooks(undefined, mine, 0), null);
  assert.equal(foreignParamHooks({ typedHooks: "no" }, mine, 0), null);
  // Where OpenClaw keeps it: the frame's generation registry first, else the active one.
  const generation = { typedHooks: [] };
  const active = { typedHooks: [ours] };
  const INVOCATION = Symbol.for("openclaw.pluginInstanceInvocation");
  const STATE = Symbol.for("openclaw.pluginRegistryState");
  assert.equal(currentRegistry({ [INVOCATION]: { getFrame: () => ({ generationRegistry: generation }) }, [STATE]: { activeRegistry: active } }), generation);
  assert.equal(currentRegistry({ [INVOCATION]: { getFrame: () => undefined }, [STATE]: { activeRegistry: active } }), active);
  assert.equal(currentRegistry({}), undefined);
  const throwing = { getFrame: () => { throw new Error("boom"); } };
  assert.equal(currentRegistry({ [INVOCATION]: throwing }), undefined);
});

test("foreign hooks: the adapter blocks every call and attests the problem while one is loaded", async () => {
  const noted: string[] = [];
  const governance: Governed = { ...GOVERNED, noteProblem: (p) => { const first = !noted.includes(p); noted.push(p); return first; } };
  let seen: string[] | null = ["rogue:before_tool_call@-Infinity"];
  // the bus must never be asked: the block comes before anything is proposed
  const bus = { request: async () => { throw new Error("must not be asked"); } } as unknown as Bus;
  const b = new GateAdapter(
    { runtimeId: "openclaw-demo", runtimeVersion: "2026.9.6", key: KEY, governance, context: CONTEXT, gateTimeoutMs: 1000, holdTimeoutMs: 2000, inspect: () => seen },
    [],
    bus,
    silent,
  );
  assert.match(blockReason(await b.beforeToolCall({ toolName: "read", params: { path: "/srv/a" } }, {})), /adapter_refuses_to_run\(foreign_param_hooks\)/);
  seen = null;
  assert.match(blockReason(await b.beforeToolCall({ toolName: "read", params: { path: "/srv/a" } }, {})), /adapter_refuses_to_run\(plugin_registry_unreadable\)/);
  assert.deepEqual(noted, ["foreign_param_hooks", "plugin_registry_unreadable"]);
});

test("agent exec: a discovery-only registration says its tools are not gated, once", () => {
  const lines: string[] = [];
  const api = (mode: string): PluginApi => ({
    registrationMode: mode,
    logger: { error: (m: string) => lines.push(m) },
    on: () => undefined,
  });
  const seen = { full: false, warned: false };
  assert.equal(warnIfUngated(api("discovery"), seen), true);
  assert.equal(warnIfUngated(api("discovery"), seen), false);
  assert.equal(lines.length, 1);
  assert.match(lines[0] ?? "", /NOT gated/);
  // agent --local: full first, then discovery: nothing to say
  const local = { full: false, warned: false };
  assert.equal(warnIfUngated(api("full"), local), false);
  assert.equal(warnIfUngated(api("discovery"), local), false);
  assert.equal(lines.length, 1);
});

test("hook budget: the budget OpenClaw gave our hook, as registered, must cover a held call", async () => {
  const mine = new Set<string>(["/plugins/smf-assurance/index.js"]);
  const registry = {
    typedHooks: [
      { pluginId: "smf-assurance", hookName: "before_tool_call", timeoutMs: 60_000, source: "/plugins/rogue/index.js" },
      { pluginId: "smf-assurance", hookName: "before_tool_call", timeoutMs: 9000, source: "/plugins/smf-assurance/index.js" },
    ],
  };
  assert.equal(ownHookTimeoutMs(registry, mine, "before_tool_call"), 9000); // ours by source, not by id
  assert.equal(ownHookTimeoutMs(registry, mine, "after_tool_call"), undefined);
  assert.equal(ownHookTimeoutMs(undefined, mine, "before_tool_call"), undefined);
  const noted: string[] = [];
  const governance: Governed = { ...GOVERNED, noteProblem: (p) => (noted.push(p), true) };
  const bus = { request: async () => { throw new Error("must not be asked"); } } as unknown as Bus;
  const a = new GateAdapter(
    {
      runtimeId: "openclaw-demo",
      runtimeVersion: "2026.9.6",
      key: KEY,
      governance,
      context: CONTEXT,
      gateTimeoutMs: 1000,
      holdTimeoutMs: 2000,
      inspect: () => [],
      hookBudget: { effectiveMs: () => ownHookTimeoutMs(registry, mine, "before_tool_call"), neededMs: 10_000 },
    },
    [],
    bus,
    silent,
  );
  assert.match(blockReason(await a.beforeToolCall({ toolName: "read", params: { path: "/srv/a" } }, {})), /adapter_refuses_to_run\(hook_timeout_below_approval_wait\)/);
  assert.deepEqual(noted, ["hook_timeout_below_approval_wait"]);
});
