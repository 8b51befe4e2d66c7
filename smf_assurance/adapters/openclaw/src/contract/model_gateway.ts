/**
 * The instance proof of `smf_assurance/subjects/model_gateway.py` (admission bound to
 * the process that attested): its twin, byte for byte.
 *
 * The model gateway admits a runtime by its bearer token while the gate holds
 * a fresh attestation for the runtime id. A second process of the same runtime
 * without our plugin holds the token (it lives in the runtime's config) but not
 * the adapter. So the adapter draws a random instance id at start, attests it
 * (`attestation.ts`, `instance_id`), and adds an {@link InstanceProof} signed
 * with the runtime key to every model request, as the HTTP header
 * {@link HEADER_INSTANCE_PROOF}: unpadded base64url of the DSSE envelope's JSON.
 * The gate serves a runtime whose accepted attestation names an instance only
 * for a fresh proof of an instance it holds a fresh, accepted attestation from.
 *
 * {@link sealInstanceProof} writes what `seal_instance_proof` writes for the same
 * key, payload and time; {@link openInstanceProof} refuses what
 * `open_instance_proof` refuses, with the same error class (golden vectors,
 * `tests/vectors/messages.json` `instance_proofs`). Only the gate opens proofs
 * in production; the opener here lets the plugin's tests read what it sent.
 */

import { randomBytes } from "node:crypto";
import { canonicalBytes, parseCanonical, type JsonValue } from "./canonical.js";
import { decodeEnvelope, encodeEnvelope, MalformedEnvelopeError, MalformedPayloadError, signValue, verifyEnvelope, type Verified } from "./dsse.js";
import type { Signer, VerifyKey } from "./keys.js";
import { MessageError } from "./messages.js";

/** `smf_assurance.subjects.names.HEADER_INSTANCE_PROOF`. */
export const HEADER_INSTANCE_PROOF = "Smf-Instance-Proof";
/** `smf_assurance.subjects.names.PAYLOAD_INSTANCE_PROOF`. */
export const PAYLOAD_INSTANCE_PROOF = "application/vnd.smf.instance-proof+json;v=1";
export const INSTANCE_PROOF_SCHEMA = "smf.instance-proof/1";
/** Bound on the header's value, checked before any decoding (a sealed proof is about 600). */
export const MAX_INSTANCE_PROOF_CHARS = 2048;
/** `smf_assurance.subjects.patterns.InstanceId`. */
export const INSTANCE_ID_RE = /^i-[0-9a-f]{32}$/;
const TOKEN_RE = /^[A-Za-z0-9_-]{1,64}$/;
const BASE64URL_RE = /^[A-Za-z0-9_-]+$/;
const PROOF_FIELDS = ["schema", "runtime_id", "instance_id", "issued_at_ms"] as const;
/** Present only when set, as msgspec's `omit_defaults` writes them. */
const OPTIONAL_PROOF_FIELDS = ["nonce", "request_digest"] as const;
const NONCE_RE = /^[0-9a-f]{32}$/;
const IDENTITY_RE = /^sha256:[0-9a-f]{64}$/;

/**
 * "This model request comes from the adapter process `instance_id` of `runtime_id`."
 * `nonce`: drawn for one request, the gate accepts the proof once and within seconds
 * (`smf_assurance/subjects/model_gateway.py`); `request_digest`: the digest of the
 * request's messages, which this adapter cannot see as they are sent, so it is left
 * out here (docs/OPENCLAW.md).
 */
export interface InstanceProof {
  schema: typeof INSTANCE_PROOF_SCHEMA;
  runtime_id: string;
  instance_id: string;
  issued_at_ms: number;
  nonce?: string;
  request_digest?: string;
}

/** `smf_assurance.subjects.model_gateway.new_proof_nonce`: 128 random bits in hex. */
export function newProofNonce(): string {
  return randomBytes(16).toString("hex");
}

/** `smf_assurance.subjects.model_gateway.new_instance_id`: `i-` and 128 random bits in hex. */
export function newInstanceId(): string {
  return "i-" + randomBytes(16).toString("hex");
}

/** Throws the `MessageError` msgspec's Struct would raise as a ValidationError. */
function checked(proof: InstanceProof): InstanceProof {
  const bad = (what: string): never => {
    throw new MessageError("instance_proof_invalid", what);
  };
  if (proof.schema !== INSTANCE_PROOF_SCHEMA) bad("schema");
  if (typeof proof.runtime_id !== "string" || !TOKEN_RE.test(proof.runtime_id)) bad("runtime_id");
  if (typeof proof.instance_id !== "string" || !INSTANCE_ID_RE.test(proof.instance_id)) bad("instance_id");
  if (!Number.isSafeInteger(proof.issued_at_ms) || proof.issued_at_ms < 0) bad("issued_at_ms");
  if (proof.nonce !== undefined && (typeof proof.nonce !== "string" || !NONCE_RE.test(proof.nonce))) bad("nonce");
  if (proof.request_digest !== undefined && (typeof proof.request_digest !== "string" || !IDENTITY_RE.test(proof.request_digest))) {
    bad("request_digest");
  }
  return proof;
}

/** A proof of `instanceId` of `runtimeId` issued at `issuedAtMs` (with `nonce` when given), checked as the Struct checks it. */
export function instanceProof(runtimeId: string, instanceId: string, issuedAtMs: number, nonce?: string): InstanceProof {
  const proof: InstanceProof = { schema: INSTANCE_PROOF_SCHEMA, runtime_id: runtimeId, instance_id: instanceId, issued_at_ms: issuedAtMs };
  if (nonce !== undefined) proof.nonce = nonce;
  return checked(proof);
}

/** `seal_instance_proof`: the DSSE envelope's JSON, signed by `key`, in unpadded base64url (header-safe). */
export function sealInstanceProof(proof: InstanceProof, key: Signer): string {
  return encodeEnvelope(signValue(PAYLOAD_INSTANCE_PROOF, checked(proof), [key])).toString("base64url");
}

/** The proof a verified payload holds, exactly in its canonical form; throws {@link MalformedPayloadError}. */
function proofFrom(payload: Buffer): InstanceProof {
  let value: JsonValue;
  try {
    value = parseCanonical(payload);
  } catch (error) {
    throw new MalformedPayloadError(`verified payload is not canonical JSON: ${(error as Error).message}`);
  }
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    throw new MalformedPayloadError("verified payload is not an object");
  }
  const keys = Object.keys(value);
  const allowed: readonly string[] = [...PROOF_FIELDS, ...OPTIONAL_PROOF_FIELDS];
  if (!PROOF_FIELDS.every((k) => keys.includes(k)) || !keys.every((k) => allowed.includes(k))) {
    throw new MalformedPayloadError("verified payload does not hold exactly the fields of an InstanceProof");
  }
  let proof: InstanceProof;
  try {
    proof = checked(value as unknown as InstanceProof);
  } catch (error) {
    throw new MalformedPayloadError(`verified payload is not an InstanceProof: ${(error as Error).message}`);
  }
  if (!canonicalBytes(proof).equals(payload)) throw new MalformedPayloadError("verified payload is not the canonical InstanceProof");
  return proof;
}

/**
 * `open_instance_proof`: verify a header value against `trusted` (the runtime keys
 * of the registry). Throws a `dsse.ts` SignatureError subclass named after what it
 * stops: {@link MalformedEnvelopeError} for an empty, too long, non-base64url or
 * non-canonical value (one proof, one spelling) or a bad envelope, then the
 * signature and payload-type errors, then {@link MalformedPayloadError}.
 */
export function openInstanceProof(sealed: string, trusted: ReadonlyMap<string, VerifyKey>): { proof: InstanceProof; verified: Verified } {
  if (sealed.length === 0 || sealed.length > MAX_INSTANCE_PROOF_CHARS) {
    throw new MalformedEnvelopeError("instance proof is empty or too long");
  }
  if (!BASE64URL_RE.test(sealed) || sealed.length % 4 === 1) throw new MalformedEnvelopeError("instance proof is not base64url");
  const raw = Buffer.from(sealed, "base64url");
  if (raw.toString("base64url") !== sealed) throw new MalformedEnvelopeError("instance proof is not canonical base64url");
  const verified = verifyEnvelope(decodeEnvelope(raw, MAX_INSTANCE_PROOF_CHARS), trusted, 1, PAYLOAD_INSTANCE_PROOF);
  return { proof: proofFrom(verified.payload), verified };
}
