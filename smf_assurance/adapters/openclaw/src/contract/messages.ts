/**
 * The wire messages the plugin builds or reads, mirroring `smf_assurance/subjects/messages.py`
 * and `smf_assurance/subjects/approvals.py` (version 1), and the subject names of
 * `smf_assurance/subjects/names.py` it uses.
 *
 * Signed payloads are the canonical JSON of the Python Struct's
 * `msgspec.to_builtins` form, which the gate re-derives and compares
 * byte for byte (`smf_assurance.subjects.dsse.open_struct`): so every field is present,
 * optional ones as `null`, exactly as Python writes them. The golden vectors
 * in `tests/vectors/messages.json` pin this.
 *
 * Replies are decoded strictly, as msgspec does for frozen Structs with
 * `forbid_unknown_fields=True`: an unknown field, a missing field or a value
 * outside its vocabulary is an error, which the hook turns into a block.
 */

import { randomBytes } from "node:crypto";
import { identityOf, isIdentity, parseJson, type JsonObject, type JsonValue } from "./canonical.js";

export const PROPOSE = "smf.propose";
export const RESULT_PREFIX = "smf.result";
export const APPROVAL_OUTCOME_PREFIX = "smf.approval.outcome";
export const APPROVAL_STATUS = "smf.approval.status";
export const PAYLOAD_PROPOSAL = "application/vnd.smf.proposal+json;v=1";
export const PAYLOAD_REPORT = "application/vnd.smf.execution-report+json;v=1";
/** A held proposal's final Verdict, signed by the gate (`smf_assurance/subjects/names.py`, PAYLOAD_APPROVAL_OUTCOME). */
export const PAYLOAD_APPROVAL_OUTCOME = "application/vnd.smf.approval-outcome+json;v=1";
/** The gate's reply on `smf.propose`: the Verdict, signed by the gate (`smf_assurance/subjects/names.py`, PAYLOAD_VERDICT). */
export const PAYLOAD_VERDICT = "application/vnd.smf.verdict+json;v=1";

const TOKEN_RE = /^[A-Za-z0-9_-]{1,64}$/;
const CODE_RE = /^[a-z][a-z0-9_]{0,63}$/;
const MESSAGE_ID_RE = /^[A-Za-z0-9._:-]{8,128}$/;

export type Surface =
  | "tool_call" | "direct_reply" | "stream" | "gateway_delivery" | "cron" | "delegation" | "background" | "mcp";
export type Classification = "public" | "internal" | "confidential" | "privileged" | "unknown";
export type InjectionTaint = "clear" | "suspected" | "tainted" | "unknown";
export type RedactionStatus = "none" | "pending" | "complete" | "unknown";
export type CitationVerification = "pending" | "verified" | "failed" | "not_applicable" | "unknown";
export type Locality = "internal" | "external" | "unknown";
export type Outcome = "allow" | "deny" | "held";
export type ReportStatus = "confirmed" | "failed" | "ambiguous";

export const CLASSIFICATIONS: readonly Classification[] = ["public", "internal", "confidential", "privileged", "unknown"];
export const TAINTS: readonly InjectionTaint[] = ["clear", "suspected", "tainted", "unknown"];
export const REDACTIONS: readonly RedactionStatus[] = ["none", "pending", "complete", "unknown"];
export const CITATIONS: readonly CitationVerification[] = ["pending", "verified", "failed", "not_applicable", "unknown"];
export const LOCALITIES: readonly Locality[] = ["internal", "external", "unknown"];

export interface ActorContext {
  domain: string;
  tenant_id: string;
  organization_id: string;
  matter_id: string;
  actor_id: string;
  actor_roles: string[];
  governing_laws: string[];
}

export interface DataFacts {
  classification: Classification;
  injection_taint: InjectionTaint;
  redaction_status: RedactionStatus;
  redaction_evidence: string | null;
  legal_hold: boolean | null;
  citation_verification: CitationVerification;
}

export interface ProposedDestination {
  address: string;
  locality: Locality;
}

export interface Proposal {
  schema: "smf.proposal/1";
  proposal_id: string;
  runtime_id: string;
  runtime_version: string;
  adapter_id: string;
  surface: Surface;
  native_tool: string;
  arguments: JsonObject;
  content: string;
  destination: ProposedDestination;
  actor: ActorContext;
  facts: DataFacts;
  issued_at_ms: number;
  /** The model's tool-call id (`smf_assurance/subjects/messages.py`: additive, absent when unknown),
   * so the model gateway's tool-call accounting finds this call decided. */
  tool_call_id?: string;
  /** The requester's deadline (`smf_assurance/subjects/messages.py`: additive, absent when
   * not set): the gate starts no order and no hold after it, and answers a copy that
   * arrives later from its records instead of deciding it (docs/SUBJECTS.md). */
  reply_by_ms?: number;
  /** The adapter refused this call itself, for this reason (`smf_assurance/subjects/messages.py`:
   * additive, absent on every proposed call): the proposal only reports the refusal, so the
   * gate records it as a denial and the call's error result is accounted (never an allow). */
  refused_locally?: string;
}

/** `smf_assurance.subjects.patterns.ToolCallId`: an id the contract cannot carry is left out. */
export const TOOL_CALL_ID_RE = /^[A-Za-z0-9_-]{1,128}$/;

export interface Verdict {
  schema: "smf.verdict/1";
  proposal_id: string;
  outcome: Outcome;
  reason_codes: string[];
  decision_id: string | null;
  operation_hash: string | null;
  release_id: string | null;
  order_id: string | null;
  connector_id: string | null;
  approval_id: string | null;
  expires_at_ms: number | null;
  required_roles: string[];
  evidence: string[];
  /** The denying approver's note to the requester; present only when the
   * gate's final deny of a held call carries one (`smf_assurance.subjects.messages.Verdict`). */
  approver_note?: string;
}

export interface ExecutionReport {
  schema: "smf.execution-report/1";
  order_id: string;
  connector_id: string;
  status: ReportStatus;
  reason_code: string;
  at_ms: number;
  external_ref: string | null;
}

export class MessageError extends Error {
  override name = "MessageError";
  constructor(readonly reasonCode: string, detail = "") {
    super(detail ? `${reasonCode}: ${detail}` : reasonCode);
  }
}

export function newProposalId(): string {
  return "p-" + randomBytes(16).toString("hex");
}

/** A deny the adapter makes itself (no reply, bad reply): always with a reason code. */
export function denial(proposalId: string, reason: string): Verdict {
  return {
    schema: "smf.verdict/1",
    proposal_id: proposalId,
    outcome: "deny",
    reason_codes: [reason],
    decision_id: null,
    operation_hash: null,
    release_id: null,
    order_id: null,
    connector_id: null,
    approval_id: null,
    expires_at_ms: null,
    required_roles: [],
    evidence: [],
  };
}

/** `smf_assurance.subjects.messages.order_id_for`: bound to exactly one operation and one decision. */
export function orderIdFor(operationHash: string, decisionId: string): string {
  return identityOf({ operation_hash: operationHash, decision_id: decisionId }).slice("sha256:".length);
}

/** `smf_assurance.subjects.approvals.approval_id_for`: one approval per decision. */
export function approvalIdFor(decisionId: string): string {
  return identityOf({ approval_for: decisionId });
}

export function token(value: string): string {
  if (!TOKEN_RE.test(value)) throw new MessageError("subject_token_invalid", JSON.stringify(value));
  return value;
}

export function resultSubject(connectorId: string): string {
  return `${RESULT_PREFIX}.${token(connectorId)}`;
}

/** Keyed by the hex of the approval identity (`sha256:` has no place in a token). */
export function approvalOutcomeSubject(approvalId: string): string {
  return `${APPROVAL_OUTCOME_PREFIX}.${token(approvalId.replace(/^sha256:/, ""))}`;
}

// --- strict decoding ----------------------------------------------------------------

type Check = (value: JsonValue | undefined, field: string) => void;

function fail(field: string, what: string): never {
  throw new MessageError("malformed_verdict", `${field} ${what}`);
}
const str: Check = (v, f) => { if (typeof v !== "string") fail(f, "is not a string"); };
const optStr: Check = (v, f) => { if (v !== undefined && v !== null && typeof v !== "string") fail(f, "is not a string or null"); };
const optInt: Check = (v, f) => {
  if (v !== undefined && v !== null && !(typeof v === "number" && Number.isSafeInteger(v))) fail(f, "is not an integer or null");
};
const strList = (pattern?: RegExp): Check => (v, f) => {
  if (v === undefined) return;
  if (!Array.isArray(v)) fail(f, "is not a list");
  for (const item of v) {
    if (typeof item !== "string" || (pattern !== undefined && !pattern.test(item))) fail(f, "holds an invalid entry");
  }
};

const VERDICT_FIELDS: Record<string, Check> = {
  schema: (v, f) => { if (v !== "smf.verdict/1") fail(f, "is not smf.verdict/1"); },
  proposal_id: str,
  outcome: (v, f) => { if (v !== "allow" && v !== "deny" && v !== "held") fail(f, "is not allow, deny or held"); },
  reason_codes: (v, f) => { if (v === undefined) fail(f, "is missing"); strList(CODE_RE)(v, f); },
  decision_id: optStr,
  operation_hash: optStr,
  release_id: optStr,
  order_id: optStr,
  connector_id: optStr,
  approval_id: optStr,
  expires_at_ms: optInt,
  required_roles: strList(),
  evidence: strList(),
  approver_note: (v, f) => {
    if (v !== undefined && !(typeof v === "string" && isApproverNote(v))) fail(f, "is not a plain-text note");
  },
};

/** `smf_assurance.subjects.patterns.ApproverNote`: 1 to 500 characters of plain text (newlines and tabs only). */
const MAX_NOTE_CHARS = 500;
const NOTE_FORBIDDEN = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u2028\u2029\u202a-\u202e\u2066-\u2069]/u;
function isApproverNote(note: string): boolean {
  const length = [...note].length;
  return length >= 1 && length <= MAX_NOTE_CHARS && !NOTE_FORBIDDEN.test(note);
}

/**
 * Decode Verdict JSON as msgspec would (`Verdict`, forbid_unknown_fields); raises
 * MessageError. The hook acts on no verdict read this way: replies and outcomes are
 * gate-signed and opened by `verdicts.ts`, which applies these rules to the payload.
 */
export function decodeVerdict(data: Uint8Array): Verdict {
  let value: JsonValue;
  try {
    value = parseJson(new TextDecoder("utf-8", { fatal: true }).decode(data));
  } catch (error) {
    throw new MessageError("unreadable_verdict", (error as Error).message);
  }
  return verdictFrom(value);
}

/** Check a parsed JSON value as a Verdict (the part of {@link decodeVerdict} after parsing). */
export function verdictFrom(value: JsonValue): Verdict {
  if (typeof value !== "object" || value === null || Array.isArray(value)) fail("verdict", "is not an object");
  for (const key of Object.keys(value)) if (!(key in VERDICT_FIELDS)) fail(key, "is not a Verdict field");
  for (const [key, check] of Object.entries(VERDICT_FIELDS)) check(value[key], key);
  const get = <T>(key: string, fallback: T): T => (value[key] ?? fallback) as T;
  return {
    schema: "smf.verdict/1",
    proposal_id: get("proposal_id", ""),
    outcome: get<Outcome>("outcome", "deny"),
    reason_codes: get<string[]>("reason_codes", []),
    decision_id: get<string | null>("decision_id", null),
    operation_hash: get<string | null>("operation_hash", null),
    release_id: get<string | null>("release_id", null),
    order_id: get<string | null>("order_id", null),
    connector_id: get<string | null>("connector_id", null),
    approval_id: get<string | null>("approval_id", null),
    expires_at_ms: get<number | null>("expires_at_ms", null),
    required_roles: get<string[]>("required_roles", []),
    evidence: get<string[]>("evidence", []),
    // Present only when sent: the verdict's canonical bytes are then the payload's.
    ...(typeof value.approver_note === "string" ? { approver_note: value.approver_note } : {}),
  };
}

export interface ApprovalStatus {
  approval_id: string;
  state: string;
}

/** The gate's `smf.approval.status` reply: `{"approval_id": ..., "state": ...}`. */
export function decodeApprovalStatus(data: Uint8Array): ApprovalStatus {
  let value: JsonValue;
  try {
    value = parseJson(new TextDecoder("utf-8", { fatal: true }).decode(data));
  } catch (error) {
    throw new MessageError("unreadable_approval_status", (error as Error).message);
  }
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    throw new MessageError("unreadable_approval_status", "not an object");
  }
  const { approval_id: approvalId, state } = value;
  if (typeof approvalId !== "string" || typeof state !== "string" || Object.keys(value).length !== 2) {
    throw new MessageError("unreadable_approval_status", "unexpected shape");
  }
  return { approval_id: approvalId, state };
}

/** Checks the Python Struct would apply to a Proposal the adapter is about to sign. */
export function checkProposal(p: Proposal): void {
  const bad = (what: string): never => { throw new MessageError("proposal_invalid", what); };
  if (!MESSAGE_ID_RE.test(p.proposal_id)) bad("proposal_id");
  if (!TOKEN_RE.test(p.runtime_id)) bad("runtime_id");
  for (const [name, value] of [["runtime_version", p.runtime_version], ["adapter_id", p.adapter_id], ["native_tool", p.native_tool]] as const) {
    if (value.length < 1 || value.length > 256) bad(name);
  }
  if (p.content.length > 512 * 1024) bad("content");
  if (p.destination.address.length > 2048) bad("destination.address");
  if (!Number.isSafeInteger(p.issued_at_ms) || p.issued_at_ms < 0) bad("issued_at_ms");
  if (p.tool_call_id !== undefined && !TOOL_CALL_ID_RE.test(p.tool_call_id)) bad("tool_call_id");
  if (p.reply_by_ms !== undefined && (!Number.isSafeInteger(p.reply_by_ms) || p.reply_by_ms < 0)) bad("reply_by_ms");
  if (p.refused_locally !== undefined && !/^[a-z][a-z0-9_]{0,63}$/.test(p.refused_locally)) bad("refused_locally");
}

export function isOrderId(text: string): boolean {
  return /^[0-9a-f]{64}$/.test(text);
}

export { isIdentity, CODE_RE };
