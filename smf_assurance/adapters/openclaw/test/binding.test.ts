/**
 * The model-request proof's decisions (binding.ts): when the provider
 * `smf-gateway`'s stream wrappers add `Smf-Instance-Proof`, and when they add
 * nothing (the model gateway then refuses the request). Runs on the compiled
 * JavaScript against stand-in streams; the real runtime is driven from Python
 * (tests/runtimes/test_openclaw_gateway.py, tests/runtimes/test_openclaw_gateway_entry.py).
 */

import assert from "node:assert/strict";
import { test } from "node:test";

import {
  FIRST_ATTESTATION_WAIT_MS,
  InstanceProver,
  newProcessBinding,
  noteAttestation,
  PROVIDER_ID,
  withProof,
  type ProcessBinding,
  type StreamFn,
  type StreamOptions,
} from "../dist/binding.js";
import { SigningKey, type VerifyKey } from "../dist/contract/keys.js";
import { HEADER_INSTANCE_PROOF, openInstanceProof } from "../dist/contract/model_gateway.js";
import plugin, { noteRegistration, provider, type PluginApi, type ProviderRegistration } from "../dist/index.js";

const KEY = SigningKey.fromSeed(Buffer.from("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60", "hex"));
const OTHER = SigningKey.fromSeed(Buffer.from("4ccd089b28ff96da9db6c346ec114e0f5b8a319f35aba624da8cf6ed4fb8a6fb", "hex"));
const RUNTIME_KEYS = new Map<string, VerifyKey>([[KEY.keyId, KEY.verifyKey]]);
const NOW = 1_800_000_000_000;
const LEASE_END = NOW + 180_000;

interface Lines {
  info: string[];
  warn: string[];
}

/** A logger that keeps what it was told (`lines`). */
function logs(): { info(m: string): void; warn(m: string): void; lines: Lines } {
  const lines: Lines = { info: [], warn: [] };
  return { info: (m) => void lines.info.push(m), warn: (m) => void lines.warn.push(m), lines };
}

/** A stand-in for OpenClaw's stream: records the options of every call. */
function recorder(): { fn: StreamFn; calls: (StreamOptions | undefined)[] } {
  const calls: (StreamOptions | undefined)[] = [];
  return { fn: (_m, _c, options) => (calls.push(options), "stream"), calls };
}

function proofOf(options: StreamOptions | undefined): string | undefined {
  return options?.headers?.[HEADER_INSTANCE_PROOF];
}

/** A process that registered us in full mode and whose attestation the gate accepted. */
function proving(): ProcessBinding {
  const binding = newProcessBinding();
  binding.full = true;
  noteAttestation(binding, "openclaw-demo", KEY, { accepted: true, expires_at_ms: LEASE_END });
  return binding;
}

test("full registration and an accepted attestation: every request carries this process's proof, signed by the runtime key", () => {
  const binding = proving();
  const { fn, calls } = recorder();
  const wrapped = new InstanceProver(binding, logs(), () => NOW).wrap(fn, true);
  assert.ok(wrapped !== undefined);
  assert.equal(wrapped("model", "context", { headers: { authorization: "Bearer t" }, temperature: 0 }), "stream");
  const [options] = calls;
  assert.equal(options?.headers?.authorization, "Bearer t"); // the request's own headers kept
  assert.equal(options?.temperature, 0);
  const { proof, verified } = openInstanceProof(proofOf(options) ?? "", RUNTIME_KEYS);
  assert.deepEqual(proof, { schema: "smf.instance-proof/1", runtime_id: "openclaw-demo", instance_id: binding.instanceId, issued_at_ms: NOW, nonce: proof.nonce });
  assert.match(proof.nonce ?? "", /^[0-9a-f]{32}$/);
  assert.deepEqual([...verified.keyIds], [KEY.keyId]);
  assert.match(binding.instanceId, /^i-[0-9a-f]{32}$/);
});

test("no full registration (agent exec): no proof, even with an accepted attestation", () => {
  const binding = proving();
  binding.full = false;
  const { fn, calls } = recorder();
  const out = logs();
  const options = { headers: { authorization: "Bearer t" } };
  new InstanceProver(binding, out, () => NOW).wrap(fn, true)?.("m", "c", options);
  assert.equal(calls[0], options); // untouched
  assert.equal(proofOf(calls[0]), undefined);
  assert.match(out.lines.warn.join("\n"), /NOT added to model requests \(not_full_registration\)/);
});

test("full registration but no accepted attestation: not attested, refused, or past its lease: no proof", () => {
  const cases: [string, (b: ProcessBinding) => void, string][] = [
    ["never attested", (b) => (b.attested = undefined), "not_attested"],
    ["refused", (b) => noteAttestation(b, "openclaw-demo", KEY, { accepted: false, expires_at_ms: null }), "attestation_refused"],
    ["lease ended", (b) => noteAttestation(b, "openclaw-demo", KEY, { accepted: true, expires_at_ms: NOW }), "attestation_lease_ended"],
  ];
  for (const [name, make, reason] of cases) {
    const binding = proving();
    make(binding);
    const { fn, calls } = recorder();
    const out = logs();
    new InstanceProver(binding, out, () => NOW).wrap(fn, false)?.("m", "c", undefined);
    assert.equal(proofOf(calls[0]), undefined, name);
    assert.match(out.lines.warn.join("\n"), new RegExp(`\\(${reason}\\)`), name);
  }
});

test("the decision is made per request from process state, not when the wrapper was made", () => {
  // OpenClaw calls the provider hooks of a discovery registration even in a full process.
  const binding = newProcessBinding();
  const { fn, calls } = recorder();
  const wrapped = new InstanceProver(binding, logs(), () => NOW).wrap(fn, false);
  wrapped?.("m", "c", {});
  binding.full = true;
  wrapped?.("m", "c", {});
  noteAttestation(binding, "openclaw-demo", KEY, { accepted: true, expires_at_ms: LEASE_END });
  wrapped?.("m", "c", {});
  // the gate's latest word is a refusal (a problem attested): no proof from then on
  noteAttestation(binding, "openclaw-demo", KEY, { accepted: false, expires_at_ms: null });
  wrapped?.("m", "c", {});
  noteAttestation(binding, "openclaw-demo", KEY, { accepted: true, expires_at_ms: LEASE_END });
  wrapped?.("m", "c", {});
  assert.deepEqual(calls.map((o) => proofOf(o) !== undefined), [false, false, true, false, true]);
});

test("every request gets its own proof: the time of the request and a fresh nonce, never reused", () => {
  let now = NOW;
  const binding = proving();
  const { fn, calls } = recorder();
  const wrapped = new InstanceProver(binding, logs(), () => now).wrap(fn, false);
  wrapped?.("m", "c", {});
  wrapped?.("m", "c", {});
  now += 1;
  wrapped?.("m", "c", {});
  const opened = calls.map((o) => openInstanceProof(proofOf(o) ?? "", RUNTIME_KEYS).proof);
  assert.deepEqual(opened.map((p) => p.issued_at_ms), [NOW, NOW, NOW + 1]);
  assert.equal(new Set(opened.map((p) => p.nonce)).size, 3);
  assert.ok(opened.every((p) => /^[0-9a-f]{32}$/.test(p.nonce ?? "")));
  assert.ok(opened.every((p) => p.request_digest === undefined)); // the wrapper cannot see the body
  // another runtime key (a new attestation under another key): signed with it at once
  noteAttestation(binding, "openclaw-demo", OTHER, { accepted: true, expires_at_ms: LEASE_END });
  wrapped?.("m", "c", {});
  const other = new Map<string, VerifyKey>([[OTHER.keyId, OTHER.verifyKey]]);
  assert.equal(openInstanceProof(proofOf(calls[3]) ?? "", other).proof.instance_id, binding.instanceId);
});

test("a proof that cannot be sealed: the request goes without one (refused), the wrapper does not throw", () => {
  const binding = proving();
  const broken = Object.create(KEY) as SigningKey;
  Object.defineProperty(broken, "sign", { value: () => { throw new Error("no signer"); } });
  noteAttestation(binding, "openclaw-demo", broken, { accepted: true, expires_at_ms: LEASE_END });
  const { fn, calls } = recorder();
  const out = logs();
  const throwingLog = { info: () => { throw new Error("log"); }, warn: () => { throw new Error("log"); } };
  assert.equal(new InstanceProver(binding, out, () => NOW).wrap(fn, false)?.("m", "c", { headers: { a: "b" } }), "stream");
  assert.equal(new InstanceProver(binding, throwingLog, () => NOW).wrap(fn, false)?.("m", "c", {}), "stream");
  assert.equal(proofOf(calls[0]), undefined);
  assert.deepEqual(calls[0]?.headers, { a: "b" });
  assert.match(out.lines.warn.join("\n"), /proof_not_sealed/);
  // a runtime id the contract cannot carry: not sealed either
  noteAttestation(binding, "not a token", KEY, { accepted: true, expires_at_ms: LEASE_END });
  new InstanceProver(binding, logs(), () => NOW).wrap(fn, false)?.("m", "c", {});
  assert.equal(proofOf(calls[2]), undefined);
});

test("logs say whether requests are proven, never the proof", () => {
  const binding = proving();
  const { fn, calls } = recorder();
  const out = logs();
  const wrapped = new InstanceProver(binding, out, () => NOW).wrap(fn, false);
  wrapped?.("m", "c", {});
  wrapped?.("m", "c", {});
  const lines = out.lines;
  assert.equal(lines.info.length, 1); // once per change, not per request
  const proof = proofOf(calls[0]) ?? "";
  assert.ok(proof.length > 100);
  for (const line of [...lines.info, ...lines.warn]) assert.ok(!line.includes(proof.slice(0, 40)));
});

test("withProof: our header, once, in our spelling; the other headers and options kept", () => {
  const options = { headers: { "smf-instance-proof": "forged", "SMF-INSTANCE-PROOF": "x", "x-other": "1" }, signal: "s" };
  const out = withProof(options, "proof");
  assert.deepEqual(out?.headers, { "x-other": "1", [HEADER_INSTANCE_PROOF]: "proof" });
  assert.equal(out?.signal, "s");
  assert.deepEqual(options.headers, { "smf-instance-proof": "forged", "SMF-INSTANCE-PROOF": "x", "x-other": "1" }); // not mutated
  assert.deepEqual(withProof(undefined, "p")?.headers, { [HEADER_INSTANCE_PROOF]: "p" });
  assert.equal(withProof(options, undefined), options);
});

test("no stream to wrap: no wrapper (OpenClaw's own stream sends no proof)", () => {
  assert.equal(new InstanceProver(proving(), logs(), () => NOW).wrap(undefined, true), undefined);
});

test("the first model call waits for this process's attestation in flight, then proves (main stream only)", async () => {
  const binding = newProcessBinding();
  binding.full = true;
  let settle: () => void = () => undefined;
  binding.pending = new Promise<void>((resolve) => (settle = resolve));
  const { fn, calls } = recorder();
  const prover = new InstanceProver(binding, logs(), () => NOW);
  const waiting = prover.wrap(fn, true)?.("m", "c", {});
  assert.ok(waiting instanceof Promise);
  // completeSimple's stream may not be a promise: it decides now, without a proof
  assert.equal(prover.wrap(fn, false)?.("m", "c", {}), "stream");
  assert.equal(proofOf(calls[0]), undefined);
  noteAttestation(binding, "openclaw-demo", KEY, { accepted: true, expires_at_ms: LEASE_END });
  settle();
  assert.equal(await waiting, "stream");
  assert.ok(openInstanceProof(proofOf(calls[1]) ?? "", RUNTIME_KEYS));
  // once answered (accepted or not), no call waits again
  binding.pending = new Promise<void>(() => undefined);
  assert.equal(prover.wrap(fn, true)?.("m", "c", {}), "stream");
});

test("the wait is bounded, and an attestation that fails ends it without a proof", async () => {
  const binding = newProcessBinding();
  binding.full = true;
  binding.pending = Promise.reject(new Error("gate_unreachable"));
  binding.pending.catch(() => undefined);
  const { fn, calls } = recorder();
  assert.equal(await new InstanceProver(binding, logs(), () => NOW).wrap(fn, true)?.("m", "c", {}), "stream");
  assert.equal(proofOf(calls[0]), undefined);
  binding.pending = new Promise<void>(() => undefined); // never answers
  const started = Date.now();
  assert.equal(await new InstanceProver(binding, logs(), () => NOW, 50).wrap(fn, true)?.("m", "c", {}), "stream");
  assert.ok(Date.now() - started < FIRST_ATTESTATION_WAIT_MS);
  assert.equal(proofOf(calls[1]), undefined);
  // not full (agent exec): never waits
  const exec = newProcessBinding();
  exec.pending = new Promise<void>(() => undefined);
  assert.equal(new InstanceProver(exec, logs(), () => NOW).wrap(fn, true)?.("m", "c", {}), "stream");
});

test("register(): the provider smf-gateway in every mode; only a full registration lets it sign", () => {
  const providers: ProviderRegistration[] = [];
  const api = (mode: string | undefined): PluginApi => ({
    ...(mode === undefined ? {} : { registrationMode: mode }),
    logger: { info: () => undefined, warn: () => undefined, error: () => undefined },
    on: () => undefined,
    registerProvider: (p) => providers.push(p),
  });
  for (const mode of ["discovery", "setup-only", undefined, "full"]) plugin.register(api(mode));
  assert.deepEqual(providers.map((p) => p.id), [PROVIDER_ID, PROVIDER_ID, PROVIDER_ID, PROVIDER_ID]);
  assert.equal(PROVIDER_ID, "smf-gateway");
  assert.deepEqual(providers[0]?.auth, []);
  // an API without registerProvider (or one that throws) must not break registration
  assert.doesNotThrow(() => plugin.register({ ...api("full"), registerProvider: () => { throw new Error("refused"); } }));
  const { registerProvider: _, ...older } = api("full");
  assert.doesNotThrow(() => plugin.register(older));
  // the modes, on a binding of their own
  const binding = newProcessBinding();
  noteRegistration(api("discovery"), binding);
  noteRegistration(api(undefined), binding);
  assert.equal(binding.full, false);
  noteRegistration(api("full"), binding);
  assert.equal(binding.full, true);
});

test("provider(): its wrappers prove from the binding; a factory that fails gives no wrapper", () => {
  const binding = proving();
  const registration = provider({ on: () => undefined, logger: {} }, binding);
  const { fn, calls } = recorder();
  registration.wrapStreamFn({ streamFn: fn })?.("m", "c", {});
  registration.wrapSimpleCompletionStreamFn({ streamFn: fn })?.("m", "c", {});
  assert.ok(calls.every((o) => openInstanceProof(proofOf(o) ?? "", RUNTIME_KEYS).proof.instance_id === binding.instanceId));
  assert.equal(registration.wrapStreamFn({}), undefined);
  assert.equal(registration.wrapStreamFn(undefined as never), undefined);
});
