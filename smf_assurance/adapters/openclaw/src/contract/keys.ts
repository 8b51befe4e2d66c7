/**
 * Ed25519 keys, their ids and the key file: the twin of `smf_assurance/subjects/keys.py`.
 *
 * - A key id is derived from the key (`ed25519:` + SHA-256 hex of the 32 raw
 *   public bytes), never chosen, so one key has one id (TUF, "File formats").
 * - A key file (`smf.ed25519.private/1`, written by `smf_assurance.subjects.keys.write_private_key`)
 *   is checked on load: unknown fields refused, its key id must be the id of
 *   its public key, and its secret seed must derive that public key. A file
 *   assembled from two keys is refused, never half-used.
 * - Ed25519 (RFC 8032) is deterministic: the same seed and message give the
 *   same signature in libsodium (Python) and OpenSSL (Node).
 */

import { createHash, createPrivateKey, createPublicKey, sign, verify, type KeyObject } from "node:crypto";
import { readFileSync } from "node:fs";

export const KEY_ID_PREFIX = "ed25519:";
export const PRIVATE_KEY_KIND = "smf.ed25519.private/1";
export const PUBLIC_KEY_BYTES = 32;
export const SEED_BYTES = 32;
export const SIGNATURE_BYTES = 64;
export const MAX_KEY_FILE_BYTES = 64 * 1024;

// DER prefixes of an Ed25519 PKCS#8 private key and SPKI public key (RFC 8410).
const PKCS8_PREFIX = Buffer.from("302e020100300506032b657004220420", "hex");
const SPKI_PREFIX = Buffer.from("302a300506032b6570032100", "hex");

export class KeyFileError extends Error {
  override name = "KeyFileError";
}

export function keyIdOf(publicBytes: Uint8Array): string {
  if (publicBytes.length !== PUBLIC_KEY_BYTES) throw new Error(`an Ed25519 public key is ${PUBLIC_KEY_BYTES} bytes`);
  return KEY_ID_PREFIX + createHash("sha256").update(publicBytes).digest("hex");
}

export class VerifyKey {
  readonly keyId: string;
  private readonly key: KeyObject;

  constructor(readonly publicBytes: Buffer) {
    this.keyId = keyIdOf(publicBytes);
    this.key = createPublicKey({ key: Buffer.concat([SPKI_PREFIX, publicBytes]), format: "der", type: "spki" });
  }

  /** True only for a valid signature; a signature that is not 64 bytes is a caller error. */
  verify(message: Uint8Array, signature: Uint8Array): boolean {
    if (signature.length !== SIGNATURE_BYTES) throw new Error(`an Ed25519 signature is ${SIGNATURE_BYTES} bytes`);
    return verify(null, message, this.key, signature);
  }
}

/**
 * What signs: a key in this process ({@link SigningKey}) or the launcher's key of a
 * confined runtime (`src/signer.ts`, `smf_assurance.subjects.signer.Signer`).
 */
export interface Signer {
  readonly keyId: string;
  readonly publicBytes: Buffer;
  sign(message: Uint8Array): Buffer;
}

export class SigningKey implements Signer {
  readonly verifyKey: VerifyKey;
  private readonly key: KeyObject;

  private constructor(seed: Buffer) {
    this.key = createPrivateKey({ key: Buffer.concat([PKCS8_PREFIX, seed]), format: "der", type: "pkcs8" });
    const spki = createPublicKey(this.key).export({ format: "der", type: "spki" });
    this.verifyKey = new VerifyKey(Buffer.from(spki.subarray(spki.length - PUBLIC_KEY_BYTES)));
  }

  /** Rebuild the key from its 32-byte secret seed (RFC 8032 section 5.1.5). */
  static fromSeed(seed: Uint8Array): SigningKey {
    if (seed.length !== SEED_BYTES) throw new Error(`an Ed25519 seed is ${SEED_BYTES} bytes`);
    return new SigningKey(Buffer.from(seed));
  }

  get keyId(): string {
    return this.verifyKey.keyId;
  }

  get publicBytes(): Buffer {
    return this.verifyKey.publicBytes;
  }

  /** The 64-byte detached signature over `message`. */
  sign(message: Uint8Array): Buffer {
    return sign(null, message, this.key);
  }

  toString(): string {
    return `SigningKey(${this.keyId})`;
  }
}

const BASE64_RE = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/;

function b64decode(text: unknown, what: string, length: number): Buffer {
  if (typeof text !== "string" || !BASE64_RE.test(text)) throw new KeyFileError(`${what} is not valid base64`);
  const raw = Buffer.from(text, "base64");
  if (raw.length !== length) throw new KeyFileError(`${what} is ${raw.length} bytes, expected ${length}`);
  return raw;
}

const FILE_FIELDS = new Set(["kind", "key_id", "principal", "public_key", "secret_seed"]);

/** Load and check a private key file; return the key and its principal. */
export function loadPrivateKey(path: string): { key: SigningKey; principal: string } {
  let data: Buffer;
  try {
    data = readFileSync(path);
  } catch (error) {
    throw new KeyFileError(`cannot read key file ${path}: ${(error as NodeJS.ErrnoException).code ?? "error"}`);
  }
  if (data.length > MAX_KEY_FILE_BYTES) throw new KeyFileError(`key file ${path} is larger than ${MAX_KEY_FILE_BYTES} bytes`);
  let doc: unknown;
  try {
    doc = JSON.parse(data.toString("utf8"));
  } catch {
    throw new KeyFileError(`key file ${path} is not JSON`);
  }
  if (typeof doc !== "object" || doc === null || Array.isArray(doc)) {
    throw new KeyFileError(`key file ${path} is not a ${PRIVATE_KEY_KIND} file`);
  }
  const record = doc as Record<string, unknown>;
  for (const field of Object.keys(record)) {
    if (!FILE_FIELDS.has(field)) throw new KeyFileError(`key file ${path}: unknown field ${field}`);
  }
  if (record.kind !== PRIVATE_KEY_KIND) throw new KeyFileError(`key file ${path} is not a ${PRIVATE_KEY_KIND} file`);
  const principal = record.principal;
  if (typeof principal !== "string" || principal.length < 1 || principal.length > 256) {
    throw new KeyFileError(`key file ${path}: principal must be 1 to 256 characters`);
  }
  const publicKey = new VerifyKey(b64decode(record.public_key, "public_key", PUBLIC_KEY_BYTES));
  if (record.key_id !== publicKey.keyId) {
    throw new KeyFileError(`key file ${path}: key_id does not match the public key (derived ${publicKey.keyId})`);
  }
  const key = SigningKey.fromSeed(b64decode(record.secret_seed, "secret_seed", SEED_BYTES));
  if (!key.publicBytes.equals(publicKey.publicBytes)) {
    throw new KeyFileError(`key file ${path}: secret_seed does not derive public_key`);
  }
  return { key, principal };
}
