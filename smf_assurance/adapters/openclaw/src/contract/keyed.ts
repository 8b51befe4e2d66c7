/**
 * Keyed (pseudonymous) identifiers: the twin of `smf_assurance/subjects/keyed.py`.
 *
 * `hmac-sha256:` + HMAC-SHA-256(key, u64be(len(D)) || D || u64be(len(V)) || V)
 * with D the domain's ASCII bytes and V the value's UTF-8 bytes (RFC 2104).
 * The explicit lengths keep ("a", "b\0c") apart from ("a\0b", "c").
 * The value is hashed as given (no NFC); a lone surrogate is refused, never
 * replaced by U+FFFD (which is what Buffer.from would silently do).
 */

import { createHmac } from "node:crypto";

export const KEYED_PREFIX = "hmac-sha256:";
export const MIN_KEY_BYTES = 32;

export class KeyedIdentifierError extends Error {
  override name = "KeyedIdentifierError";
}

function frame(part: Buffer): Buffer {
  const length = Buffer.alloc(8);
  length.writeBigUInt64BE(BigInt(part.length));
  return Buffer.concat([length, part]);
}

export function keyedIdentifier(key: Uint8Array, domain: string, value: string): string {
  if (key.length < MIN_KEY_BYTES) {
    throw new KeyedIdentifierError(`keyed identifier key must be at least ${MIN_KEY_BYTES} bytes`);
  }
  if (domain.length === 0) throw new KeyedIdentifierError("keyed identifier domain must not be empty");
  for (let i = 0; i < domain.length; i++) {
    const c = domain.charCodeAt(i);
    if (c < 0x20 || c >= 0x7f) {
      throw new KeyedIdentifierError(
        "keyed identifier domain must be printable ASCII (no NUL or other control characters)",
      );
    }
  }
  if (!value.isWellFormed()) throw new KeyedIdentifierError("keyed identifier value is not valid Unicode");
  const message = Buffer.concat([frame(Buffer.from(domain, "ascii")), frame(Buffer.from(value, "utf8"))]);
  return KEYED_PREFIX + createHmac("sha256", key).update(message).digest("hex");
}
