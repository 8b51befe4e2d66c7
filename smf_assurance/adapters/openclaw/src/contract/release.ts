/**
 * The governed release's format and checks: the twin of `smf_assurance/subjects/release.py`.
 *
 * Each check is Python's and throws a {@link ReleaseCheckError} with the reason
 * code the gate reports for the threat it stops (TUF's model, named at each
 * check; ARCHITECTURE.md, "Governed releases"). The plugin's verifier
 * (`../release.ts`) runs them, in Python's order, on what it reads from the
 * `SMF_RELEASES` bucket; `tests/vectors/releases.json` pins them for both
 * implementations.
 */

import { canonicalBytes, isIdentity, parseCanonical, sha256Identity, type JsonValue } from "./canonical.js";
import {
  BadSignatureError,
  BelowThresholdError,
  envelopeFromValue,
  MalformedEnvelopeError,
  PayloadTypeMismatchError,
  UnknownSignerError,
  verifyEnvelope,
  type Envelope,
} from "./dsse.js";
import type { VerifyKey } from "./keys.js";
import { publicKey } from "./registry.js";

export const PAYLOAD_RELEASE_MANIFEST = "application/vnd.smf.release-manifest+json;v=1";
export const MANIFEST_SCHEMA = "smf.release-manifest/1";
export const BUNDLE_SCHEMA = "smf.release-bundle/1";
export const TRUST_ROOT_SCHEMA = "smf.release-trust-root/1";
export const RELEASE_BUCKET = "SMF_RELEASES";
export const RELEASE_KEY_PREFIX = "release.";
export const MAX_BUNDLE_BYTES = 900 * 1024;
export const MAX_TRUST_ROOT_KEYS = 16;
export const MAX_REVOCATIONS = 1024;
export const DEFAULT_MAX_SKEW_MS = 60_000;
const RELEASE_KEY_RE = /^release\.\d{16}$/;
const RELEASE_ID_RE = /^[a-z0-9][a-z0-9._-]{0,127}$/;
const KEY_ID_RE = /^ed25519:[0-9a-f]{64}$/;
const BASE64_RE = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/;
const SAFE_MAX = 2 ** 53 - 1;

/** A release failed a check; `reasonCode` is the one the gate and Python report for it. */
export class ReleaseCheckError extends Error {
  override name = "ReleaseCheckError";
  constructor(readonly reasonCode: string, detail: string) {
    super(`${reasonCode}: ${detail}`);
  }
}

const fail = (reasonCode: string, detail: string): never => {
  throw new ReleaseCheckError(reasonCode, detail);
};
const malformed = (detail: string): never => fail("release_malformed", detail);

export interface TrustRoot {
  threshold: number;
  keys: ReadonlyMap<string, VerifyKey>;
}

export interface ReleaseManifest {
  schema: string;
  release_id: string;
  sequence: number;
  prior_release_hash: string | null;
  issued_at_ms: number;
  lease_expires_at_ms: number;
  recipe_id: string;
  digests: { enforcement: string; analysis: string; registry: string };
  revocations: { key_ids: string[]; release_ids: string[] };
}

export interface ReleaseBundle {
  envelope: Envelope;
  enforcement: Buffer;
  analysis: Buffer;
  registry: Buffer;
}

function exact(value: unknown, fields: readonly string[], required: readonly string[], what: string, err: (d: string) => never): Record<string, unknown> {
  if (typeof value !== "object" || value === null || Array.isArray(value)) err(`${what} is not an object`);
  const record = value as Record<string, unknown>;
  for (const key of Object.keys(record)) if (!fields.includes(key)) err(`${what} has unknown field ${key}`);
  for (const key of required) if (!(key in record)) err(`${what} lacks ${key}`);
  return record;
}

export function strictJson(data: Uint8Array, what: string, err: (d: string) => never): unknown {
  try {
    return JSON.parse(new TextDecoder("utf-8", { fatal: true }).decode(data));
  } catch {
    return err(`${what} is not JSON`);
  }
}

// -- the trust root -------------------------------------------------------------------

export class TrustRootError extends Error {
  override name = "TrustRootError";
  constructor(readonly reasonCode: "smf_release_trust_root_missing" | "smf_release_trust_root_unreadable" | "smf_release_trust_root_invalid", detail: string) {
    super(detail);
  }
}

/** Check a trust root document (`smf.release-trust-root/1`): each key once under its derived id, a reachable threshold. */
export function trustRootOf(doc: unknown): TrustRoot {
  const invalid = (d: string): never => {
    throw new TrustRootError("smf_release_trust_root_invalid", d);
  };
  const root = exact(doc, ["schema", "threshold", "keys"], ["schema", "threshold", "keys"], "trust root", invalid);
  if (root.schema !== TRUST_ROOT_SCHEMA) invalid(`trust root schema is not ${TRUST_ROOT_SCHEMA}`);
  const threshold = root.threshold;
  if (typeof threshold !== "number" || !Number.isSafeInteger(threshold) || threshold < 1 || threshold > MAX_TRUST_ROOT_KEYS) {
    invalid(`threshold must be an integer from 1 to ${MAX_TRUST_ROOT_KEYS}`);
  }
  if (!Array.isArray(root.keys) || root.keys.length > MAX_TRUST_ROOT_KEYS) invalid(`keys must be a list of at most ${MAX_TRUST_ROOT_KEYS}`);
  const keys = new Map<string, VerifyKey>();
  (root.keys as unknown[]).forEach((record, i) => {
    let key: VerifyKey;
    try {
      key = publicKey(record, `trust root keys[${i}]`);
    } catch (error) {
      return invalid(error instanceof Error ? error.message : String(error));
    }
    if (keys.has(key.keyId)) invalid(`trust root lists key ${key.keyId} twice`);
    keys.set(key.keyId, key);
  });
  if ((threshold as number) > keys.size) invalid(`trust root threshold ${String(threshold)} exceeds its ${keys.size} keys`);
  return { threshold: threshold as number, keys };
}

// -- the checks ------------------------------------------------------------------------

function bytesField(value: unknown, what: string): Buffer {
  if (typeof value !== "string" || !BASE64_RE.test(value)) return malformed(`${what} is not base64`);
  return Buffer.from(value, "base64");
}

/** Decode a bundle, bounded by {@link MAX_BUNDLE_BYTES} before any parsing. */
export function decodeBundle(data: Uint8Array): ReleaseBundle {
  if (data.length > MAX_BUNDLE_BYTES) malformed(`release bundle is ${data.length} bytes, more than ${MAX_BUNDLE_BYTES}`);
  const doc = exact(strictJson(data, "release bundle", malformed), ["schema", "envelope", "enforcement", "analysis", "registry"],
    ["schema", "envelope", "enforcement", "analysis", "registry"], "release bundle", malformed);
  if (doc.schema !== BUNDLE_SCHEMA) malformed(`release bundle schema is not ${BUNDLE_SCHEMA}`);
  let envelope: Envelope;
  try {
    envelope = envelopeFromValue(doc.envelope);
  } catch (error) {
    return malformed(error instanceof Error ? error.message : "bad envelope");
  }
  return {
    envelope,
    enforcement: bytesField(doc.enforcement, "enforcement"),
    analysis: bytesField(doc.analysis, "analysis"),
    registry: bytesField(doc.registry, "registry"),
  };
}

function intIn(value: unknown, low: number, what: string): number {
  if (typeof value !== "number" || !Number.isSafeInteger(value) || value < low || value > SAFE_MAX) malformed(`${what} is not an integer from ${low}`);
  return value as number;
}

function identity(value: unknown, what: string): string {
  if (typeof value !== "string" || !isIdentity(value)) malformed(`${what} is not a sha256 identity`);
  return value as string;
}

function list(value: unknown, re: RegExp, what: string): string[] {
  if (!Array.isArray(value) || value.length > MAX_REVOCATIONS) return malformed(`${what} is not a list of at most ${MAX_REVOCATIONS}`);
  return value.map((v, i) => {
    if (typeof v !== "string" || !re.test(v)) malformed(`${what}[${i}] is malformed`);
    return v as string;
  });
}

/** The verified payload as a manifest, with its defaults; it must be its own canonical form. */
export function manifestFrom(payload: Uint8Array): ReleaseManifest {
  let value: JsonValue;
  try {
    value = parseCanonical(payload);
  } catch (error) {
    return malformed(`verified payload is not canonical JSON: ${(error as Error).message}`);
  }
  const fields = ["schema", "release_id", "sequence", "prior_release_hash", "issued_at_ms", "lease_expires_at_ms", "recipe_id", "digests", "revocations"];
  const m = exact(value, fields, fields.filter((f) => f !== "revocations"), "manifest", malformed);
  if (m.schema !== MANIFEST_SCHEMA) malformed(`manifest schema is not ${MANIFEST_SCHEMA}`);
  if (typeof m.release_id !== "string" || !RELEASE_ID_RE.test(m.release_id)) malformed("release_id is malformed");
  const d = exact(m.digests, ["enforcement", "analysis", "registry"], ["enforcement", "analysis", "registry"], "digests", malformed);
  const r = exact(m.revocations ?? {}, ["key_ids", "release_ids"], [], "revocations", malformed);
  const manifest: ReleaseManifest = {
    schema: MANIFEST_SCHEMA,
    release_id: m.release_id as string,
    sequence: intIn(m.sequence, 1, "sequence"),
    prior_release_hash: m.prior_release_hash === null ? null : identity(m.prior_release_hash, "prior_release_hash"),
    issued_at_ms: intIn(m.issued_at_ms, 0, "issued_at_ms"),
    lease_expires_at_ms: intIn(m.lease_expires_at_ms, 0, "lease_expires_at_ms"),
    recipe_id: identity(m.recipe_id, "recipe_id"),
    digests: {
      enforcement: identity(d.enforcement, "digests.enforcement"),
      analysis: identity(d.analysis, "digests.analysis"),
      registry: identity(d.registry, "digests.registry"),
    },
    revocations: {
      key_ids: r.key_ids === undefined ? [] : list(r.key_ids, KEY_ID_RE, "revocations.key_ids"),
      release_ids: r.release_ids === undefined ? [] : list(r.release_ids, RELEASE_ID_RE, "revocations.release_ids"),
    },
  };
  // As Python's `open_struct`: the payload must be the canonical form of the value
  // it decodes to, defaults included.
  if (!canonicalBytes(manifest).equals(Buffer.from(payload))) malformed("verified payload is not the canonical manifest");
  return manifest;
}

export interface AuthenticatedRelease {
  bundle: ReleaseBundle;
  manifest: ReleaseManifest;
  manifestHash: string;
}

/** Python's `authenticate_release`: decode, a threshold of distinct trusted keys, the one canonical manifest. */
export function authenticateRelease(data: Uint8Array, keys: ReadonlyMap<string, VerifyKey>, threshold: number): AuthenticatedRelease {
  const bundle = decodeBundle(data);
  let payload: Buffer;
  try {
    payload = verifyEnvelope(bundle.envelope, keys, threshold, PAYLOAD_RELEASE_MANIFEST).payload;
  } catch (error) {
    // check for a threshold attack: too few distinct trusted keys
    if (error instanceof BelowThresholdError) return fail("release_below_threshold", error.message);
    // check for an arbitrary software attack: not signed by the trust root
    if (error instanceof UnknownSignerError || error instanceof BadSignatureError || error instanceof PayloadTypeMismatchError) {
      return fail("release_bad_signature", `${error.name}: ${error.message}`);
    }
    if (error instanceof MalformedEnvelopeError) return malformed(error.message);
    throw error;
  }
  const manifest = manifestFrom(payload);
  if (manifest.lease_expires_at_ms <= manifest.issued_at_ms) malformed("lease expires before the release is issued");
  return { bundle, manifest, manifestHash: sha256Identity(payload) };
}

/** TUF 5.5.2/5.6.2: check for a mix-and-match attack (every artifact, its digest). */
export function checkReleaseDigests(bundle: ReleaseBundle, manifest: ReleaseManifest): void {
  for (const [name, data, expected] of [
    ["enforcement projection", bundle.enforcement, manifest.digests.enforcement],
    ["analysis projection", bundle.analysis, manifest.digests.analysis],
    ["registry", bundle.registry, manifest.digests.registry],
  ] as const) {
    if (sha256Identity(data) !== expected) fail("release_digest_mismatch", `${name} does not match the manifest digest`);
  }
}

export function checkIssuedBefore(issuedAtMs: number, latestMs: number): void {
  if (issuedAtMs > latestMs) fail("release_clock_untrusted", `release issued at ${issuedAtMs}, after the clock's latest possible time ${latestMs}`);
}

/** TUF 5.4.4, "Check for a freeze attack", against the worst case within the skew. */
export function checkLeaseInForce(leaseExpiresAtMs: number, latestMs: number): void {
  if (latestMs >= leaseExpiresAtMs) fail("release_expired", `lease expired at ${leaseExpiresAtMs}; trusted time is up to ${latestMs}`);
}

export interface SequenceFloor {
  sequence: number;
  manifestHash: string;
}

/** TUF 5.4.3, "Check for a rollback attack", for a floor kept in memory. */
export function checkSequenceFloor(manifest: ReleaseManifest, digest: string, floor: SequenceFloor | undefined): SequenceFloor {
  if (floor !== undefined) {
    if (manifest.sequence < floor.sequence) fail("release_rollback", `sequence ${manifest.sequence} is below the ${floor.sequence} already used`);
    if (manifest.sequence === floor.sequence && digest !== floor.manifestHash) {
      fail("release_rollback", `sequence ${manifest.sequence} names another release than the one already used`);
    }
  }
  return { sequence: manifest.sequence, manifestHash: digest };
}

/** The release keys, highest sequence first; other keys are dropped (a key is only a hint). */
export function releaseKeysNewestFirst(keys: Iterable<string>): string[] {
  return [...keys].filter((k) => RELEASE_KEY_RE.test(k)).sort().reverse();
}
