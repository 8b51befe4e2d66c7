/**
 * The hooks' decision logic: propose, read the verdict, wait for an approval,
 * and report what ran. Independent of OpenClaw (the `Bus` and the clock are
 * injected), so it is tested on its own and from the Python suite.
 *
 * Invariants, each enforced where it is named:
 *
 * - FAIL CLOSED. `beforeToolCall` never throws and every path that is not a
 *   verified allow returns `{block: true, blockReason}` with reason codes.
 *   OpenClaw itself blocks a hook that throws or runs past its `timeoutMs`
 *   (RUNTIMES.md, "FAIL-CLOSED"), but the adapter does not lean on that: it
 *   returns an explicit block before its own deadline.
 * - SIGNED VERDICT. The reply on `smf.propose` is read only as a DSSE envelope
 *   signed by a `gate` key of the verified release's registry, for the verdict
 *   payload type, naming the proposal just sent (`contract/verdicts.ts`; ARCHITECTURE.md,
 *   "Trust and identity on the bus"). Anything else is a deny
 *   (`verdict_not_signed_by_gate`, `unreadable_verdict`,
 *   `verdict_for_another_proposal`): no other responder on the subject, and no
 *   recorded genuine verdict, can make a call run.
 * - EXACT PARAMS. An allow returns `{params}` holding exactly the canonical
 *   arguments that were signed and hashed (`mapping.finalArguments`). OpenClaw
 *   merges them shallowly over a copy of the same original params and the
 *   last returned params win, which is why the hook runs at the lowest
 *   priority (RUNTIMES.md: "return exactly the params you hashed").
 * - HELD, RACE-FREE. The gate announces a hold before it answers `held`, so
 *   an approver can resolve before the runtime even knows the approval id. The
 *   adapter therefore subscribes to `smf.approval.outcome.>` BEFORE its first
 *   proposal ({@link OutcomeWatch}, one subscription per process, recent
 *   outcomes kept by approval id). On a held verdict it takes the outcome if it
 *   already arrived, otherwise asks `smf.approval.status` once: a final state
 *   (`denied`, `expired`, ...) blocks at once; `pending`, `approved` and
 *   `executing` (claimed, outcome in flight) wait, at most
 *   min(approval expiry, `holdTimeoutMs`), and for `executing` at most
 *   `gateTimeoutMs` more. Only an `allow` Verdict SIGNED BY A GATE KEY of the
 *   registry (`contract/outcome.ts`) naming THIS approval id, decision id and operation
 *   hash, with no connector, releases the params, and each approval id releases
 *   them at most once per process. An outcome that is unsigned, signed by any
 *   other key, or for another approval never reaches a waiter: it is dropped
 *   as if it had not been published (the pending announcement makes every id
 *   public, so anyone on the bus could publish one). A
 *   deny, an expiry, a timeout, a mismatch, a cancelled call or any error blocks.
 *   The status never releases anything: it names no decision. An `executing`
 *   whose outcome never arrives (lost across a reconnect) blocks
 *   (`approval_outcome_missed`); the spent claim then ends `execution_unknown`.
 * - BOUND REPORT. `afterToolCall` compares the identity of the executed params
 *   with the identity of the params the gate allowed for that tool call and
 *   publishes a signed ExecutionReport on `smf.result.<runtime id>`:
 *   `confirmed`/`executed_as_approved`, `failed`/`tool_error`, or
 *   `ambiguous`/`executed_params_mismatch` (evidence of a broken binding).
 */

import { identityOf, isIdentity, type JsonObject } from "./contract/canonical.js";
import { encodeEnvelope, signValue } from "./contract/dsse.js";
import type { Signer } from "./contract/keys.js";
import type { VerifyKey } from "./contract/keys.js";
import type { Governed } from "./attest.js";
import { isUntrusted, MappingError, ProcessTaint, proposeCall, type Protected, type ProposedCall } from "./mapping.js";
import type { OpenClawContext } from "./config.js";
import {
  APPROVAL_STATUS,
  APPROVAL_OUTCOME_PREFIX,
  approvalIdFor,
  checkProposal,
  TOOL_CALL_ID_RE,
  decodeApprovalStatus,
  denial,
  MessageError,
  newProposalId,
  orderIdFor,
  PAYLOAD_PROPOSAL,
  PAYLOAD_REPORT,
  PROPOSE,
  resultSubject,
  type ExecutionReport,
  type Proposal,
  type ReportStatus,
  type Verdict,
} from "./contract/messages.js";
import { openOutcome } from "./contract/outcome.js";
import { BusError, type Bus, type Inbox } from "./transport.js";
import { readVerdictReply } from "./contract/verdicts.js";

export const ADAPTER_ID = "smf-openclaw-adapter";
export const INTERNAL_ERROR = "adapter_internal_error";
const ERROR_CODE_HEADER = "Nats-Service-Error-Code";
const ERROR_HEADER = "Nats-Service-Error";
const MAX_REMEMBERED = 4096;
const REMEMBER_MS = 30 * 60_000;

export type BeforeResult = { params: JsonObject } | { block: true; blockReason: string };

export interface ToolEvent {
  toolName?: unknown;
  params?: unknown;
  runId?: unknown;
  toolCallId?: unknown;
  result?: unknown;
  error?: unknown;
}

export interface ToolContext {
  sessionKey?: unknown;
  runId?: unknown;
  toolCallId?: unknown;
  abortSignal?: unknown;
}

export interface Logger {
  info(message: string): void;
  warn(message: string): void;
  error(message: string): void;
}

export interface AdapterSettings {
  runtimeId: string;
  runtimeVersion: string;
  key: Signer;
  /**
   * The verified release and the attestation (`attest.ts`): the proposal waits
   * for an attestation, a release problem blocks, and the `gate` keys of the
   * VERIFIED release's registry are the only signers of a verdict or an
   * approval outcome the adapter acts on.
   */
  governance: Governed;
  context: OpenClawContext;
  gateTimeoutMs: number;
  holdTimeoutMs: number;
  /** The plugin's own files (issue 17); absent only when built by hand in tests. */
  protected?: Protected;
  /**
   * Other plugins' hooks that can change a call after ours (`foreign.ts`); `null`
   * when the registry cannot be read. Absent only when built by hand in tests.
   */
  inspect?: () => string[] | null;
  /**
   * The budget OpenClaw gives our `before_tool_call` as it registered it
   * (`foreign.ts`, `ownHookTimeoutMs`), and the least a held call needs.
   */
  hookBudget?: { effectiveMs: () => number | undefined; neededMs: number };
}

/** What the gate allowed for one tool call, kept until its after_tool_call. */
interface Allowed {
  tool: string;
  argsHash: string;
  decisionId: string;
  operationHash: string;
  approvalId: string | null;
  expiresAt: number;
}

class Blocked extends Error {
  constructor(
    readonly reasons: readonly string[],
    readonly kind: "gate" | "adapter" | "approval",
    readonly decisionId: string | null = null,
    /** The denying approver's note (issue 23): told to the requester, never logged. */
    readonly note: string | null = null,
    /** The adapter refused before proposing the call: the refusal is reported (`reportRefused`). */
    readonly beforeProposal = false,
  ) {
    super(reasons.join(","));
  }
}

/**
 * The reason of a refusal this adapter made by itself, before any proposal of the call
 * reached the gate (the call is reported, `reportRefused`), or undefined: a gate's or an
 * approval's denial was decided at the gate already, and a bus failure reaches no gate.
 */
function localRefusal(error: unknown): string | undefined {
  if (error instanceof MappingError) return error.reasonCode;
  if (error instanceof Blocked && error.beforeProposal) return "adapter_refuses_to_run";
  return undefined;
}

/** Issue 25: every denial names the decision it rests on, so whoever reads it can have
 * the gate's reasons in words (`smf-assurance explain`, from the ledger and the release).
 * Empty when the verdict names none (the gate never decided). */
export function decisionHint(decisionId: string | null | undefined): string {
  return decisionId ? ` Decision ${decisionId}: \`smf-assurance explain ${decisionId}\` says why.` : "";
}

function str(value: unknown): string | undefined {
  return typeof value === "string" && value.length > 0 ? value : undefined;
}

function callKey(runId: unknown, toolCallId: unknown): string | undefined {
  const id = str(toolCallId);
  return id === undefined ? undefined : `${str(runId) ?? ""}\u0000${id}`;
}

/** A bounded map with expiry: remembered decisions can never grow without limit. */
class Remembered<T> {
  private readonly items = new Map<string, { value: T; until: number }>();
  constructor(private readonly clock: () => number) {}
  set(key: string, value: T, ttlMs = REMEMBER_MS): void {
    const now = this.clock();
    if (this.items.size >= MAX_REMEMBERED) {
      for (const [k, v] of this.items) if (v.until < now) this.items.delete(k);
      while (this.items.size >= MAX_REMEMBERED) {
        const oldest = this.items.keys().next().value;
        if (oldest === undefined) break;
        this.items.delete(oldest);
      }
    }
    this.items.set(key, { value, until: now + ttlMs });
  }
  take(key: string): T | undefined {
    const item = this.items.get(key);
    this.items.delete(key);
    return item !== undefined && item.until >= this.clock() ? item.value : undefined;
  }
  has(key: string): boolean {
    return this.items.has(key);
  }
}

const OUTCOMES_KEPT = 1024;
const OUTCOME_KEPT_MS = 15 * 60_000;

/**
 * Every gate-signed approval outcome published on the bus since the watch
 * started, kept briefly by approval id, and the waiters for the ones still to
 * come. One wildcard subscription per adapter, made before the first proposal,
 * so no outcome of a call this adapter proposed can be published unseen (except
 * across a reconnect, which the status check covers).
 *
 * Only outcomes that {@link openOutcome} verifies against the gate keys (and
 * whose decision derives their approval id) are kept or handed to a waiter: an
 * unsigned or otherwise signed message can neither release a call nor take the
 * "first outcome" slot of an approval.
 */
export class OutcomeWatch {
  private readonly seen = new Map<string, { verdict: Verdict; at: number }>();
  private readonly waiters = new Map<string, (verdict: Verdict | undefined) => void>();
  private closed = false;

  constructor(
    private readonly inbox: Inbox,
    private readonly clock: () => number,
    private readonly gateKeys: () => ReadonlyMap<string, VerifyKey>,
    private readonly log?: Logger,
  ) {
    void this.pump();
  }

  private async pump(): Promise<void> {
    while (!this.closed) {
      const data = await this.inbox.next(60_000);
      if (data === undefined) continue;
      let verdict: Verdict;
      try {
        verdict = openOutcome(data, this.gateKeys());
      } catch (error) {
        // Not the gate's: ignored, as if never published (nothing may act on it).
        try {
          this.log?.warn(`smf: ignored an approval outcome that is not the gate's (${error instanceof Error ? error.name : "error"})`);
        } catch {
          // a logger that throws must not stop the watch
        }
        continue;
      }
      const approvalId = verdict.approval_id;
      if (approvalId === null) continue; // openOutcome never returns one without it
      const waiter = this.waiters.get(approvalId);
      if (waiter !== undefined) {
        this.waiters.delete(approvalId);
        waiter(verdict);
        continue;
      }
      // Keep the FIRST outcome per approval: a later one cannot replace it.
      if (this.seen.has(approvalId)) continue;
      const now = this.clock();
      for (const [id, item] of this.seen) {
        if (this.seen.size < OUTCOMES_KEPT && item.at >= now - OUTCOME_KEPT_MS) break;
        this.seen.delete(id);
      }
      this.seen.set(approvalId, { verdict, at: now });
    }
  }

  /** The verified outcome already seen for `approvalId`, taken (at most once). */
  take(approvalId: string): Verdict | undefined {
    const item = this.seen.get(approvalId);
    this.seen.delete(approvalId);
    return item?.verdict;
  }

  /** The next verified outcome for `approvalId`, or undefined after `timeoutMs` or an abort. */
  wait(approvalId: string, timeoutMs: number, signal?: AbortSignal): Promise<Verdict | undefined> {
    const ready = this.take(approvalId);
    if (ready !== undefined) return Promise.resolve(ready);
    if (timeoutMs <= 0 || signal?.aborted === true) return Promise.resolve(undefined);
    return new Promise((resolve) => {
      const finish = (verdict: Verdict | undefined): void => {
        clearTimeout(timer);
        signal?.removeEventListener("abort", onAbort);
        if (this.waiters.get(approvalId) === finish) this.waiters.delete(approvalId);
        resolve(verdict);
      };
      const onAbort = (): void => finish(undefined);
      const timer = setTimeout(() => finish(undefined), timeoutMs);
      signal?.addEventListener("abort", onAbort, { once: true });
      this.waiters.get(approvalId)?.(undefined);
      this.waiters.set(approvalId, finish);
    });
  }

  close(): void {
    this.closed = true;
    for (const waiter of this.waiters.values()) waiter(undefined);
    this.waiters.clear();
    this.inbox.close();
  }
}

export class GateAdapter {
  private readonly allowed: Remembered<Allowed>;
  private readonly blockedCalls: Remembered<true>;
  private readonly consumedApprovals: Remembered<true>;
  readonly taint = new ProcessTaint();
  private watch: Promise<OutcomeWatch> | undefined;

  constructor(
    readonly settings: AdapterSettings | undefined,
    readonly problems: readonly string[],
    private readonly bus: Bus | undefined,
    private readonly log: Logger,
    private readonly clock: () => number = Date.now,
  ) {
    this.allowed = new Remembered(clock);
    this.blockedCalls = new Remembered(clock);
    this.consumedApprovals = new Remembered(clock);
  }

  // -- before_tool_call -------------------------------------------------------------

  /** The hook. Never throws; anything but a verified allow is a block. */
  async beforeToolCall(event: ToolEvent, ctx: ToolContext): Promise<BeforeResult> {
    const label = str(event.toolName) ?? "this tool";
    const key = callKey(event.runId ?? ctx.runId, event.toolCallId ?? ctx.toolCallId);
    try {
      const result = await this.decide(label, event, ctx, key);
      return result;
    } catch (error) {
      let message: string;
      if (error instanceof Blocked) message = this.blockMessage(label, error);
      else if (error instanceof MappingError || error instanceof BusError || error instanceof MessageError) {
        message = `SMF Assurance adapter blocked ${label}: ${error.reasonCode}. It did not run.`;
      } else {
        try {
          this.log.error(`smf before_tool_call failed: ${error instanceof Error ? error.stack ?? error.message : String(error)}`);
        } catch {
          // Logging must never turn a block into a throw.
        }
        message = `SMF Assurance adapter blocked ${label}: ${INTERNAL_ERROR}. It did not run.`;
      }
      if (key !== undefined) this.blockedCalls.set(key, true);
      const local = localRefusal(error);
      if (local !== undefined) await this.reportRefused(event, ctx, local);
      return { block: true, blockReason: message };
    }
  }

  /**
   * Tool-call accounting (docs/OPENCLAW.md): a call this adapter refused itself (a path of
   * its own credentials, arguments it cannot map, refusing mode) still leaves an error
   * result, which the model gateway would report as one no gate decided and stop the
   * runtime for. So the refusal is reported to the gate (`refused_locally`): recorded there
   * as a denial with the adapter's reason, the call noted decided. The block stands
   * whatever the gate answers; a report that fails is logged, and the result is then
   * reported ungated (fail closed). The refused params are not sent. Never throws.
   */
  private async reportRefused(event: ToolEvent, ctx: ToolContext, reason: string): Promise<void> {
    const settings = this.settings;
    const toolCallId = str(event.toolCallId ?? ctx.toolCallId);
    if (settings === undefined || this.bus === undefined || toolCallId === undefined || !TOOL_CALL_ID_RE.test(toolCallId)) return;
    try {
      const name = typeof event.toolName === "string" && event.toolName.length >= 1 && event.toolName.length <= 256 ? event.toolName : "unnamed_tool";
      const call: ProposedCall = {
        nativeTool: name,
        arguments: {},
        content: "",
        destination: { address: "", locality: "unknown" },
        facts: { ...settings.context.facts, legal_hold: null },
        surface: "tool_call",
      };
      const proposal = this.buildProposal(settings, call, toolCallId);
      proposal.refused_locally = /^[a-z][a-z0-9_]{0,63}$/.test(reason) ? reason : "adapter_refused";
      checkProposal(proposal);
      const verdict = await this.propose(settings, proposal);
      if (verdict.outcome !== "deny") this.log.error(`smf: refusal report answered ${verdict.outcome}; the call stays blocked`);
    } catch (error) {
      try {
        this.log.warn(`smf: refusal not reported to the gate (${error instanceof Error ? error.name : "error"})`);
      } catch {
        // Logging must never turn a block into a throw.
      }
    }
  }

  /**
   * Block (and attest the problem) while the registry OpenClaw dispatches from shows
   * another plugin that can change the call after us, or a budget for our hook
   * shorter than a held call may wait, or cannot be read (`foreign.ts`).
   */
  private refuseForeignHooks(settings: AdapterSettings, proposed = false): void {
    const found = settings.inspect?.();
    let problem: string | undefined;
    let detail = "";
    if (found === null) problem = "plugin_registry_unreadable";
    else if (found !== undefined && found.length > 0) [problem, detail] = ["foreign_param_hooks", found.join(", ")];
    const budget = settings.hookBudget;
    const effective = budget?.effectiveMs();
    if (problem === undefined && budget !== undefined && effective !== undefined && effective < budget.neededMs) {
      // The operator's override as OpenClaw applied it: a held call would be cut short.
      [problem, detail] = ["hook_timeout_below_approval_wait", `${effective} ms < ${budget.neededMs} ms`];
    }
    if (problem === undefined) return;
    if (settings.governance.noteProblem(problem)) {
      this.log.error(
        `SMF Assurance adapter REFUSES to run (${problem}${detail ? `: ${detail}` : ""}). ` +
          "Every tool call will be BLOCKED until the operator fixes this and restarts OpenClaw.",
      );
    }
    throw new Blocked([`adapter_refuses_to_run(${problem})`], "adapter", null, null, !proposed);
  }

  private blockMessage(label: string, blocked: Blocked): string {
    const reasons = blocked.reasons.join(", ") || "no reason given";
    if (blocked.kind === "gate") {
      return `SMF Assurance gate denied ${label}: ${reasons}. It did not run.${decisionHint(blocked.decisionId)}`;
    }
    if (blocked.kind === "approval") {
      const note = blocked.note === null ? "" : ` The approver's note: ${JSON.stringify(blocked.note)}`;
      return `SMF Assurance gate did not approve ${label}: ${reasons}. It did not run and will not run for this request.${note}`;
    }
    return `SMF Assurance adapter blocked ${label}: ${reasons}. It did not run.`;
  }

  private async decide(label: string, event: ToolEvent, ctx: ToolContext, key: string | undefined): Promise<BeforeResult> {
    const settings = this.settings;
    if (this.problems.length > 0 || settings === undefined || this.bus === undefined) {
      throw new Blocked([`adapter_refuses_to_run(${this.problems.join(",") || "adapter_not_configured"})`], "adapter", null, null, true);
    }
    this.refuseForeignHooks(settings);
    const signal = ctx.abortSignal instanceof AbortSignal ? ctx.abortSignal : undefined;
    // Attested (the release checked first) before the gate is asked; fail closed
    // while no release verifies or its lease ran out.
    await settings.governance.ensure();
    const refusal = settings.governance.refusal();
    if (refusal !== undefined) throw new Blocked([`adapter_refuses_to_run(${refusal})`], "adapter", null, null, true);
    const call = proposeCall(event.toolName, event.params, str(ctx.sessionKey), settings.context, this.taint, settings.protected);
    const proposal = this.buildProposal(settings, call, str(event.toolCallId ?? ctx.toolCallId));
    // Subscribed before proposing: an approver may answer before `held` does.
    const watch = settings.holdTimeoutMs > 0 ? await this.outcomes(settings) : undefined;
    const verdict = await this.propose(settings, proposal);
    const argsHash = identityOf(call.arguments);

    if (verdict.outcome === "deny") {
      settings.governance.noteVerdict(verdict.reason_codes);
      throw new Blocked(verdict.reason_codes, "gate", verdict.decision_id ?? null);
    }
    if (verdict.outcome === "allow") {
      this.checkAllow(verdict, null, null);
      this.remember(key, label, argsHash, verdict, null);
      this.log.info(`smf allow ${label} decision=${verdict.decision_id ?? "?"}`);
      return { params: call.arguments };
    }
    if (verdict.outcome === "held") {
      const outcome = await this.awaitApproval(settings, verdict, watch, signal);
      // A plugin loaded while the call was held would run after us on the approved params.
      this.refuseForeignHooks(settings, true);
      this.remember(key, label, argsHash, outcome, outcome.approval_id);
      this.log.info(`smf allow-once ${label} approval=${outcome.approval_id ?? "?"}`);
      return { params: call.arguments };
    }
    throw new Blocked(["unknown_verdict"], "adapter");
  }

  /** The process's outcome subscription; made once, before the first proposal. */
  private async outcomes(settings: AdapterSettings): Promise<OutcomeWatch> {
    if (this.watch === undefined) {
      const bus = this.bus as Bus;
      this.watch = bus.subscribe(`${APPROVAL_OUTCOME_PREFIX}.>`).then(
        (inbox) => new OutcomeWatch(inbox, this.clock, () => settings.governance.gateKeys(), this.log),
        (error: unknown) => {
          this.watch = undefined; // the next call subscribes anew
          throw error;
        },
      );
    }
    return this.watch;
  }

  private buildProposal(settings: AdapterSettings, call: ProposedCall, toolCallId?: string): Proposal {
    const issued = this.clock();
    const proposal: Proposal = {
      schema: "smf.proposal/1",
      proposal_id: newProposalId(),
      runtime_id: settings.runtimeId,
      runtime_version: settings.runtimeVersion,
      adapter_id: ADAPTER_ID,
      surface: call.surface,
      native_tool: call.nativeTool,
      arguments: call.arguments,
      content: call.content,
      destination: call.destination,
      actor: settings.context.actor,
      facts: call.facts,
      issued_at_ms: issued,
      reply_by_ms: issued + replyWindowMs(settings.gateTimeoutMs),
    };
    // The call's id, when the contract can carry it (model-gateway accounting, issue 16).
    if (toolCallId !== undefined && TOOL_CALL_ID_RE.test(toolCallId)) proposal.tool_call_id = toolCallId;
    checkProposal(proposal);
    return proposal;
  }

  /**
   * `smf_assurance/adapters/client.py` `ProposalClient.send`: every failure is a deny Verdict.
   * The reply counts only as a Verdict signed by a `gate` key of the verified
   * release's registry for `smf.propose` and naming this proposal
   * (ARCHITECTURE.md, "Trust and identity on the bus"; `contract/verdicts.ts`). An error
   * reply (nats.micro headers) is unsigned and can only deny.
   */
  private async propose(settings: AdapterSettings, proposal: Proposal): Promise<Verdict> {
    const signed = encodeEnvelope(signValue(PAYLOAD_PROPOSAL, proposal, [settings.key]));
    let reply;
    try {
      reply = await (this.bus as Bus).request(PROPOSE, signed, settings.gateTimeoutMs);
    } catch (error) {
      if (error instanceof BusError) return denial(proposal.proposal_id, error.reasonCode);
      throw error;
    }
    if (reply.headers.has(ERROR_CODE_HEADER)) {
      const reason = reply.headers.get(ERROR_HEADER) ?? "gate_error";
      return denial(proposal.proposal_id, /^[a-z][a-z0-9_]{0,63}$/.test(reason) ? reason : "gate_error");
    }
    // Only the gate's signed Verdict of THIS proposal is read (verdicts.ts): any other
    // responder on smf.propose, or a recorded genuine verdict, is a deny.
    const verdict = readVerdictReply(reply.data, settings.governance.gateKeys(), proposal.proposal_id);
    if (verdict.outcome === "deny" && verdict.reason_codes.length === 0) {
      return denial(proposal.proposal_id, "deny_without_reason");
    }
    return verdict;
  }

  /** An allow must name its decision; a connector's order is not the runtime's to run. */
  private checkAllow(verdict: Verdict, approvalId: string | null, decisionId: string | null): void {
    if (verdict.decision_id === null || !isIdentity(verdict.decision_id) || verdict.operation_hash === null || !isIdentity(verdict.operation_hash)) {
      throw new Blocked(["verdict_incomplete"], "adapter");
    }
    if (decisionId !== null && verdict.decision_id !== decisionId) throw new Blocked(["approval_outcome_mismatch"], "approval");
    if (approvalId !== null && verdict.approval_id !== approvalId) throw new Blocked(["approval_outcome_mismatch"], "approval");
    if (verdict.connector_id !== null) {
      // The gate dispatched this action to a connector (smf.execute.<connector>):
      // running it here as well would perform it twice.
      throw new Blocked([`executed_by_connector_${verdict.connector_id.replace(/[^a-z0-9_]/g, "_")}`.slice(0, 64)], "adapter");
    }
  }

  private async awaitApproval(
    settings: AdapterSettings,
    held: Verdict,
    watch: OutcomeWatch | undefined,
    signal: AbortSignal | undefined,
  ): Promise<Verdict> {
    const reasons = held.reason_codes;
    const approvalId = held.approval_id;
    const decisionId = held.decision_id;
    if (watch === undefined || settings.holdTimeoutMs === 0) throw new Blocked([...reasons, "approval_wait_disabled"], "approval");
    if (approvalId === null || decisionId === null || !isIdentity(approvalId) || !isIdentity(decisionId) || held.operation_hash === null) {
      throw new Blocked([...reasons, "held_verdict_incomplete"], "approval");
    }
    // One approval per decision (smf_assurance.subjects.approvals.approval_id_for): a held
    // verdict naming another approval is not about this call.
    if (approvalIdFor(decisionId) !== approvalId) throw new Blocked(["approval_id_mismatch"], "approval");
    if (this.consumedApprovals.has(approvalId)) throw new Blocked(["approval_already_used"], "approval");

    let outcome = watch.take(approvalId);
    if (outcome === undefined) {
      const bus = this.bus as Bus;
      const status = await bus.request(APPROVAL_STATUS, Buffer.from(approvalId, "utf8"), settings.gateTimeoutMs);
      const state = decodeApprovalStatus(status.data);
      if (state.approval_id !== approvalId) throw new Blocked(["approval_status_mismatch"], "approval");
      // The outcome may have arrived while the status was asked.
      outcome = watch.take(approvalId);
      if (outcome === undefined) {
        if (state.state !== "pending" && state.state !== "approved" && state.state !== "executing") {
          throw new Blocked([`approval_${state.state.replace(/[^a-z_]/g, "_")}`.slice(0, 64)], "approval");
        }
        const now = this.clock();
        const expiresAt = held.expires_at_ms ?? now + settings.holdTimeoutMs;
        let deadline = Math.min(expiresAt, now + settings.holdTimeoutMs);
        // `executing`: the claim is made and the desk publishes the outcome right
        // after it (smf_assurance/pipeline/chain/approvals.py, _claim_and_dispatch), so it is in
        // flight; it is awaited, never inferred from the status.
        if (state.state === "executing") deadline = Math.min(deadline, now + settings.gateTimeoutMs);
        outcome = await watch.wait(approvalId, deadline - now, signal);
        if (outcome === undefined) {
          if (signal?.aborted === true) throw new Blocked(["tool_call_cancelled"], "approval");
          if (state.state === "executing") throw new Blocked(["approval_outcome_missed"], "approval");
          throw new Blocked([this.clock() >= expiresAt ? "approval_expired" : "approval_wait_timeout"], "approval");
        }
      }
    }
    // Verified as the gate's by the watch, as was the held verdict (verdicts.ts): a
    // gate-signed outcome that disagrees with this call's held verdict is not acted on.
    if (outcome.approval_id !== approvalId || outcome.decision_id !== decisionId || outcome.operation_hash !== held.operation_hash) {
      throw new Blocked(["approval_outcome_mismatch"], "approval");
    }
    if (outcome.outcome !== "allow") {
      const reasons = outcome.reason_codes.length > 0 ? outcome.reason_codes : ["approval_not_granted"];
      throw new Blocked(reasons, "approval", null, outcome.approver_note ?? null);
    }
    this.checkAllow(outcome, approvalId, decisionId);
    // At most once per approval id in this process, whatever arrives later.
    if (this.consumedApprovals.has(approvalId)) throw new Blocked(["approval_already_used"], "approval");
    this.consumedApprovals.set(approvalId, true, 24 * 3600_000);
    return outcome;
  }

  private remember(key: string | undefined, tool: string, argsHash: string, verdict: Verdict, approvalId: string | null): void {
    if (key === undefined || verdict.decision_id === null || verdict.operation_hash === null) return;
    this.allowed.set(key, {
      tool,
      argsHash,
      decisionId: verdict.decision_id,
      operationHash: verdict.operation_hash,
      approvalId,
      expiresAt: this.clock() + REMEMBER_MS,
    });
  }

  // -- after_tool_call ------------------------------------------------------------

  /** Compare what ran with what was allowed, and report it signed. Never throws. */
  async afterToolCall(event: ToolEvent, ctx: ToolContext): Promise<ExecutionReport | undefined> {
    try {
      return await this.report(event, ctx);
    } catch (error) {
      try {
        this.log.error(`smf after_tool_call failed: ${error instanceof Error ? error.message : String(error)}`);
      } catch {
        // Nothing else can be done from an observer hook.
      }
      return undefined;
    }
  }

  private async report(event: ToolEvent, ctx: ToolContext): Promise<ExecutionReport | undefined> {
    const settings = this.settings;
    const tool = str(event.toolName) ?? "unknown";
    const failed = event.error !== undefined && event.error !== null && event.error !== "";
    if (settings !== undefined && !failed && isUntrusted(tool, settings.context.untrustedTools)) this.taint.mark();
    const key = callKey(event.runId ?? ctx.runId, event.toolCallId ?? ctx.toolCallId);
    if (settings === undefined || this.bus === undefined) return undefined;
    if (key !== undefined && this.blockedCalls.has(key)) {
      this.blockedCalls.take(key);
      return undefined;
    }
    const allowed = key === undefined ? undefined : this.allowed.take(key);
    let executedHash: string | null;
    try {
      executedHash = identityOf(event.params);
    } catch {
      executedHash = null;
    }
    let status: ReportStatus;
    let reason: string;
    let orderId: string;
    if (allowed === undefined) {
      // A tool ran that this adapter never decided on (a bypass, or a hook that
      // did not run): evidence only; no gate order exists for it.
      status = "ambiguous";
      reason = "executed_without_gate_decision";
      orderId = identityOf({ ungated_call: { tool, tool_call_id: str(event.toolCallId) ?? "", params: executedHash } }).slice(7);
      this.log.error(`smf: ${tool} ran without a gate decision (tool call ${str(event.toolCallId) ?? "?"})`);
    } else {
      orderId = orderIdFor(allowed.operationHash, allowed.decisionId);
      if (executedHash !== allowed.argsHash) {
        status = "ambiguous";
        reason = "executed_params_mismatch";
        this.log.error(
          `smf: BROKEN BINDING: ${tool} ran with params ${executedHash ?? "(no canonical form)"}, ` +
            `the gate allowed ${allowed.argsHash} (decision ${allowed.decisionId})`,
        );
      } else if (failed) {
        status = "failed";
        reason = "tool_error";
      } else {
        status = "confirmed";
        reason = "executed_as_approved";
      }
    }
    const report: ExecutionReport = {
      schema: "smf.execution-report/1",
      order_id: orderId,
      connector_id: settings.runtimeId,
      status,
      reason_code: reason,
      at_ms: this.clock(),
      external_ref: str(event.toolCallId)?.slice(0, 256) ?? null,
    };
    const signed = encodeEnvelope(signValue(PAYLOAD_REPORT, report, [settings.key]));
    const headers: Record<string, string> = { "Nats-Msg-Id": identityOf(report).slice(7) };
    if (allowed !== undefined) {
      headers["Smf-Operation-Hash"] = allowed.operationHash;
      headers["Smf-Decision-Id"] = allowed.decisionId;
      if (allowed.approvalId !== null) headers["Smf-Approval-Id"] = allowed.approvalId;
    }
    try {
      // A request, so JetStream's SMF_RESULT stream acknowledges that it stored it.
      await this.bus.request(resultSubject(settings.runtimeId), signed, settings.gateTimeoutMs, headers);
    } catch (error) {
      this.log.warn(`smf execution report not stored: ${error instanceof BusError ? error.reasonCode : String(error)}`);
    }
    return report;
  }
}

/** Grace the adapter keeps between the deadline it states and the end of its wait. */
export const REPLY_GRACE_MS = 1_000;

/**
 * How long after issuing a proposal its stated deadline (`reply_by_ms`) falls: the wait
 * (`gateTimeoutMs`) less a grace of one second, or of half the wait when that is shorter,
 * so the adapter still waits past the deadline the gate works to (the reply's transit
 * and the difference of the two clocks; `smf_assurance/adapters/client.py`).
 */
export function replyWindowMs(gateTimeoutMs: number): number {
  return Math.max(gateTimeoutMs - REPLY_GRACE_MS, Math.ceil(gateTimeoutMs / 2));
}
