/**
 * DSSE envelopes with Ed25519 signatures: the twin of `smf_assurance/subjects/dsse.py`.
 *
 * Signatures cover PAE(payloadType, payload) (secure-systems-lab/dsse,
 * `protocol.md`, "Signature Definition"):
 *   "DSSEv1" SP LEN(type) SP type SP LEN(body) SP body
 * with ASCII decimal byte counts, so no (type, body) pair can be reframed as
 * another and the payload type is authenticated. Verification follows
 * `protocol.md` "Multi-signature Verification" in Python's order: decode,
 * verify each signature against the trusted key its keyid selects (keyid is
 * only a hint), count distinct keys against the threshold, then check the
 * payload type. Every refusal is a subclass of {@link SignatureError} named
 * after the attack it stops, as in Python.
 */

import { canonicalBytes } from "./canonical.js";
import { SIGNATURE_BYTES, type Signer, type VerifyKey } from "./keys.js";

export const MAX_ENVELOPE_BYTES = 1024 * 1024;
export const MAX_SIGNATURES = 32;

export class SignatureError extends Error {
  override name = "SignatureError";
}
/** Bad JSON, unknown fields, invalid or non-canonical base64, signatures not 64 bytes. */
export class MalformedEnvelopeError extends SignatureError {
  override name = "MalformedEnvelopeError";
}
export class EnvelopeTooLargeError extends MalformedEnvelopeError {
  override name = "EnvelopeTooLargeError";
}
/**
 * The verified payload does not decode as the expected message, or is not its
 * canonical form (`protocol.md`: parse SERIALIZED_BODY after the signature
 * check, reject if parsing fails); the twin of Python's `MalformedPayloadError`.
 * Stops two parsers reading two values from the same signed bytes.
 */
export class MalformedPayloadError extends MalformedEnvelopeError {
  override name = "MalformedPayloadError";
}
/** A trusted signer signed this payload, but for another purpose (type confusion). */
export class PayloadTypeMismatchError extends SignatureError {
  override name = "PayloadTypeMismatchError";
}
/** Signatures name trusted keys but none verifies (forgery, tampering). */
export class BadSignatureError extends SignatureError {
  override name = "BadSignatureError";
}
/** Fewer distinct trusted keys verified than the threshold. */
export class BelowThresholdError extends SignatureError {
  override name = "BelowThresholdError";
}
/** No signature names a trusted key (an outsider, or stripped signatures). */
export class UnknownSignerError extends SignatureError {
  override name = "UnknownSignerError";
}

export interface DsseSignature {
  keyid: string;
  sig: string;
}

export interface Envelope {
  payload: string;
  payloadType: string;
  signatures: DsseSignature[];
}

export interface Verified {
  payloadType: string;
  payload: Buffer;
  keyIds: Set<string>;
}

/** DSSE Pre-Authentication Encoding over the UTF-8 of `payloadType` and the raw payload. */
export function pae(payloadType: string, payload: Uint8Array): Buffer {
  const type = Buffer.from(payloadType, "utf8");
  return Buffer.concat([
    Buffer.from(`DSSEv1 ${type.length} `, "ascii"),
    type,
    Buffer.from(` ${payload.length} `, "ascii"),
    payload,
  ]);
}

/**
 * Standard or URL-safe base64 (verifiers MUST accept both, `protocol.md`), in
 * canonical form only (RFC 4648 section 3.5: padding present, pad bits zero),
 * so that one signature has one spelling.
 */
function b64decode(text: string, what: string): Buffer {
  const urlSafe = text.includes("-") || text.includes("_");
  if (urlSafe && (text.includes("+") || text.includes("/"))) {
    throw new MalformedEnvelopeError(`${what} mixes standard and URL-safe base64`);
  }
  const standard = urlSafe ? text.replaceAll("-", "+").replaceAll("_", "/") : text;
  if (!/^[A-Za-z0-9+/]*={0,2}$/.test(standard) || standard.length % 4 !== 0) {
    throw new MalformedEnvelopeError(`${what} is not valid base64`);
  }
  const raw = Buffer.from(standard, "base64");
  if (raw.toString("base64") !== standard) throw new MalformedEnvelopeError(`${what} is not canonical base64`);
  return raw;
}

interface Decoded {
  payloadType: Buffer;
  payload: Buffer;
  signatures: [string, Buffer][];
}

function decodeParts(envelope: Envelope): Decoded {
  if (envelope.signatures.length > MAX_SIGNATURES) {
    throw new MalformedEnvelopeError(`${envelope.signatures.length} signatures, more than ${MAX_SIGNATURES}`);
  }
  if (!envelope.payloadType.isWellFormed()) throw new MalformedEnvelopeError("payloadType is not valid UTF-8 text");
  const payload = b64decode(envelope.payload, "payload");
  const signatures = envelope.signatures.map((s, i): [string, Buffer] => {
    const raw = b64decode(s.sig, `signatures[${i}].sig`);
    if (raw.length !== SIGNATURE_BYTES) {
      throw new MalformedEnvelopeError(`signatures[${i}].sig is ${raw.length} bytes, not ${SIGNATURE_BYTES}`);
    }
    return [s.keyid, raw];
  });
  return { payloadType: Buffer.from(envelope.payloadType, "utf8"), payload, signatures };
}

/** Sign PAE(payloadType, payload) with each signer (`protocol.md`, "To sign"). */
export function signEnvelope(payloadType: string, payload: Uint8Array, signers: readonly Signer[]): Envelope {
  if (payloadType.length === 0) throw new Error("payloadType must not be empty");
  if (signers.length === 0) throw new Error("at least one signer is required");
  if (signers.length > MAX_SIGNATURES) throw new Error(`at most ${MAX_SIGNATURES} signers`);
  const ids = signers.map((s) => s.keyId);
  if (new Set(ids).size !== ids.length) throw new Error("the same key is listed twice among the signers");
  const message = pae(payloadType, payload);
  return {
    payload: Buffer.from(payload).toString("base64"),
    payloadType,
    signatures: signers.map((s) => ({ keyid: s.keyId, sig: s.sign(message).toString("base64") })),
  };
}

/** Sign the canonical JSON bytes of `value`, the bytes every identity is computed over. */
export function signValue(payloadType: string, value: unknown, signers: readonly Signer[]): Envelope {
  return signEnvelope(payloadType, canonicalBytes(value), signers);
}

/** The envelope as DSSE JSON bytes, fields in the order msgspec writes them in Python. */
export function encodeEnvelope(envelope: Envelope): Buffer {
  const ordered = {
    payload: envelope.payload,
    payloadType: envelope.payloadType,
    signatures: envelope.signatures.map((s) => ({ keyid: s.keyid, sig: s.sig })),
  };
  return Buffer.from(JSON.stringify(ordered), "utf8");
}

function exactFields(value: unknown, fields: readonly string[], what: string): Record<string, unknown> {
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    throw new MalformedEnvelopeError(`${what} is not an object`);
  }
  const record = value as Record<string, unknown>;
  for (const key of Object.keys(record)) {
    if (!fields.includes(key)) throw new MalformedEnvelopeError(`${what} has unknown field ${key}`);
  }
  for (const key of fields) {
    if (!(key in record)) throw new MalformedEnvelopeError(`${what} lacks ${key}`);
  }
  return record;
}

/** Decode DSSE JSON bytes, bounded by `maxSize`, and check every base64 field. */
export function decodeEnvelope(data: Uint8Array, maxSize = MAX_ENVELOPE_BYTES): Envelope {
  if (data.length > maxSize) throw new EnvelopeTooLargeError(`envelope is ${data.length} bytes, more than ${maxSize}`);
  let parsed: unknown;
  try {
    parsed = JSON.parse(new TextDecoder("utf-8", { fatal: true }).decode(data));
  } catch {
    throw new MalformedEnvelopeError("not a DSSE envelope: not JSON");
  }
  return envelopeFromValue(parsed);
}

/** Check a parsed DSSE envelope value (exact fields, every base64 field); throws {@link MalformedEnvelopeError}. */
export function envelopeFromValue(parsed: unknown): Envelope {
  const record = exactFields(parsed, ["payload", "payloadType", "signatures"], "envelope");
  const { payload, payloadType, signatures } = record;
  if (typeof payload !== "string") throw new MalformedEnvelopeError("payload is not a string");
  if (typeof payloadType !== "string" || payloadType.length === 0) {
    throw new MalformedEnvelopeError("payloadType is not a non-empty string");
  }
  if (!Array.isArray(signatures)) throw new MalformedEnvelopeError("signatures is not an array");
  const sigs = signatures.map((s: unknown, i) => {
    const r = exactFields(s, ["keyid", "sig"], `signatures[${i}]`);
    if (typeof r.keyid !== "string" || r.keyid.length === 0 || typeof r.sig !== "string") {
      throw new MalformedEnvelopeError(`signatures[${i}] is malformed`);
    }
    return { keyid: r.keyid, sig: r.sig };
  });
  const envelope: Envelope = { payload, payloadType, signatures: sigs };
  decodeParts(envelope);
  return envelope;
}

/** Verify against `threshold` distinct trusted keys, then the payload type. */
export function verifyEnvelope(
  envelope: Envelope,
  trusted: ReadonlyMap<string, VerifyKey>,
  threshold = 1,
  expectedPayloadType?: string,
): Verified {
  if (threshold < 1) throw new Error("threshold must be at least 1");
  for (const [keyId, key] of trusted) {
    if (keyId !== key.keyId) throw new Error(`trusted key listed as ${keyId} but its id is ${key.keyId}`);
  }
  const decoded = decodeParts(envelope);
  const message = pae(envelope.payloadType, decoded.payload);
  const accepted = new Set<string>();
  let claimedTrusted = false;
  for (const [keyId, signature] of decoded.signatures) {
    const key = trusted.get(keyId);
    if (key === undefined) continue;
    claimedTrusted = true;
    if (!accepted.has(keyId) && key.verify(message, signature)) accepted.add(keyId);
  }
  if (!claimedTrusted) throw new UnknownSignerError("no signature is from a trusted key");
  if (accepted.size === 0) throw new BadSignatureError("no signature from a trusted key verifies");
  if (accepted.size < threshold) {
    throw new BelowThresholdError(`${accepted.size} distinct trusted keys verified, threshold is ${threshold}`);
  }
  if (expectedPayloadType !== undefined && envelope.payloadType !== expectedPayloadType) {
    throw new PayloadTypeMismatchError(`payloadType ${envelope.payloadType}, expected ${expectedPayloadType}`);
  }
  return { payloadType: envelope.payloadType, payload: decoded.payload, keyIds: accepted };
}
