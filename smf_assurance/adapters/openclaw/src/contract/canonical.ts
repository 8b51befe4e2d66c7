/**
 * Canonical JSON bytes and the identities computed over them: the TypeScript
 * twin of `smf_assurance/subjects/canonical.py`, byte for byte.
 *
 * ARCHITECTURE.md, "Canonical bytes": every identity is SHA-256 over RFC 8785
 * (JCS) canonical JSON of the value after NFC normalization of every string;
 * integers only, within the I-JSON safe range (RFC 7493 section 2.2); object
 * keys ordered by UTF-16 code units (RFC 8785 section 3.2.3); nesting at most
 * 64 (the top-level value is depth 0). Both implementations consume the same
 * golden vectors in `tests/vectors/` (README.md there states every rule).
 *
 * Two entry points, because a JavaScript value cannot say how its numbers were
 * written:
 * - {@link canonicalValue} / {@link canonicalBytes} take a JavaScript value
 *   (a tool call's params): a number must be a safe integer;
 * - {@link parseJson} reads JSON TEXT and keeps each number's spelling, so
 *   `1.0` and `1e2` are refused although `JSON.parse` would read them as the
 *   integers 1 and 100 (tests/vectors/README.md, "numbers").
 *
 * One divergence is guarded rather than shared: NFC depends on the Unicode
 * version. Python 3.11's `unicodedata` is Unicode 14.0, Node 24's ICU is
 * Unicode 17.0, and NFC of characters assigned since 14.0 differs (for example
 * U+16D63 U+16D67, Kirat Rai, composes under 16.0 and not under 14.0). So every
 * string is refused when it holds a code point that is unassigned in Unicode
 * 14.0 ({@link UNICODE_GUARD}); README.md in `tests/vectors/` documents it.
 */

import { createHash } from "node:crypto";
import { isAfterUnicode14 } from "./unicode14.js";

export const SAFE_INTEGER_MAX = Number.MAX_SAFE_INTEGER;
export const MAX_DEPTH = 64;
export const IDENTITY_PREFIX = "sha256:";
const IDENTITY_RE = /^sha256:[0-9a-f]{64}$/;
/** How deep the text parser goes before refusing; canonicalization stops at 64. */
const MAX_PARSE_DEPTH = 512;
export const UNICODE_GUARD = "14.0";

export type JsonValue = null | boolean | number | string | JsonValue[] | { [key: string]: JsonValue };
export type JsonObject = { [key: string]: JsonValue };

/** The value has no canonical form (float, unsafe integer, bad string, ...). */
export class CanonicalJSONError extends Error {
  override name = "CanonicalJSONError";
}

function normalizeString(value: string, where: string): string {
  // A lone surrogate has no UTF-8 form; Python's encoder refuses it too.
  if (!value.isWellFormed()) throw new CanonicalJSONError(`lone surrogate in string at ${where}`);
  for (const ch of value) {
    const cp = ch.codePointAt(0) ?? 0;
    if (cp >= 0x80 && isAfterUnicode14(cp)) {
      throw new CanonicalJSONError(
        `code point U+${cp.toString(16).toUpperCase()} at ${where} is not assigned in Unicode ${UNICODE_GUARD}; ` +
          "NFC of it differs between the two implementations",
      );
    }
  }
  return value.normalize("NFC");
}

function isPlainObject(value: object): value is Record<string, unknown> {
  const proto: unknown = Object.getPrototypeOf(value);
  return proto === Object.prototype || proto === null;
}

/** UTF-16 code-unit order: what `<` on JavaScript strings compares (RFC 8785 3.2.3). */
function utf16Compare(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

function normalize(value: unknown, where: string, depth: number): JsonValue {
  if (depth > MAX_DEPTH) throw new CanonicalJSONError(`nesting deeper than ${MAX_DEPTH} at ${where}`);
  if (value === null || typeof value === "boolean") return value;
  if (typeof value === "number") {
    if (!Number.isFinite(value)) throw new CanonicalJSONError(`NaN or infinity is not allowed at ${where}`);
    if (!Number.isInteger(value)) throw new CanonicalJSONError(`float is not allowed at ${where}; use integers`);
    if (!Number.isSafeInteger(value)) {
      throw new CanonicalJSONError(`integer outside the I-JSON safe range at ${where}`);
    }
    return value === 0 ? 0 : value; // -0 is the integer 0
  }
  if (typeof value === "string") return normalizeString(value, where);
  if (Array.isArray(value)) {
    const out: JsonValue[] = [];
    for (let i = 0; i < value.length; i++) {
      if (!(i in value)) throw new CanonicalJSONError(`array hole at ${where}[${i}]`);
      const item: unknown = value[i];
      if (item === undefined) throw new CanonicalJSONError(`undefined at ${where}[${i}]`);
      out.push(normalize(item, `${where}[${i}]`, depth + 1));
    }
    return out;
  }
  if (typeof value === "object" && isPlainObject(value)) {
    if (Object.getOwnPropertySymbols(value).length > 0) {
      throw new CanonicalJSONError(`object with symbol keys at ${where}`);
    }
    const items = new Map<string, JsonValue>();
    for (const key of Object.keys(value)) {
      const item = value[key];
      // JSON has no undefined: a key holding it is absent, as JSON.stringify treats it.
      if (item === undefined) continue;
      const nkey = normalizeString(key, where);
      if (items.has(nkey)) {
        throw new CanonicalJSONError(`duplicate key ${JSON.stringify(nkey)} after NFC normalization at ${where}`);
      }
      items.set(nkey, normalize(item, `${where}.${nkey}`, depth + 1));
    }
    const keys = [...items.keys()].sort(utf16Compare);
    // Object.fromEntries defines own data properties, so a key "__proto__" stays a key.
    return Object.fromEntries(keys.map((k) => [k, items.get(k) as JsonValue])) as JsonObject;
  }
  throw new CanonicalJSONError(`type ${describe(value)} has no JSON form at ${where}`);
}

function describe(value: unknown): string {
  if (value === undefined) return "undefined";
  if (typeof value === "object") return (value as object).constructor?.name ?? "object";
  return typeof value;
}

/** The NFC-normalized, key-ordered copy of a JSON value (a fresh plain object tree). */
export function canonicalValue(value: unknown): JsonValue {
  return normalize(value, "$", 0);
}

function serialize(value: JsonValue, parts: string[]): void {
  if (value === null) parts.push("null");
  else if (typeof value === "boolean") parts.push(value ? "true" : "false");
  else if (typeof value === "number") parts.push(String(value));
  // RFC 8785 3.2.2.2 is the ECMAScript string serialization: the six short
  // escapes, \u00xx in lower case below U+0020, every other character literal.
  else if (typeof value === "string") parts.push(JSON.stringify(value));
  else if (Array.isArray(value)) {
    parts.push("[");
    value.forEach((item, i) => {
      if (i > 0) parts.push(",");
      serialize(item, parts);
    });
    parts.push("]");
  } else {
    parts.push("{");
    // Sorted here, not by insertion: JavaScript enumerates integer-like keys
    // ("1", "42") first whatever the insertion order, so an object cannot hold
    // the canonical order by itself (canonical.json, rfc8785_sorting_example).
    Object.keys(value).sort(utf16Compare).forEach((key, i) => {
      if (i > 0) parts.push(",");
      parts.push(JSON.stringify(key), ":");
      serialize(value[key] as JsonValue, parts);
    });
    parts.push("}");
  }
}

/** The canonical JSON text of a value (JCS + NFC). */
export function canonicalText(value: unknown): string {
  const parts: string[] = [];
  serialize(normalize(value, "$", 0), parts);
  return parts.join("");
}

/** The canonical (JCS + NFC) UTF-8 bytes of a JSON value. */
export function canonicalBytes(value: unknown): Buffer {
  return Buffer.from(canonicalText(value), "utf8");
}

/** `sha256:<hex>` over raw bytes. */
export function sha256Identity(data: Uint8Array): string {
  return IDENTITY_PREFIX + createHash("sha256").update(data).digest("hex");
}

/** `sha256:<hex>` over the canonical bytes of a JSON value. */
export function identityOf(value: unknown): string {
  return sha256Identity(canonicalBytes(value));
}

export function isIdentity(text: string): boolean {
  return IDENTITY_RE.test(text);
}

// --- reading JSON text ---------------------------------------------------------

class Parser {
  private pos = 0;
  constructor(private readonly text: string) {}

  fail(what: string): never {
    throw new CanonicalJSONError(`not JSON: ${what} at offset ${this.pos}`);
  }

  ws(): void {
    for (;;) {
      const c = this.text.charCodeAt(this.pos);
      if (c === 0x20 || c === 0x09 || c === 0x0a || c === 0x0d) this.pos++;
      else return;
    }
  }

  document(): JsonValue {
    this.ws();
    const value = this.value(0);
    this.ws();
    if (this.pos !== this.text.length) this.fail("trailing data");
    return value;
  }

  value(depth: number): JsonValue {
    if (depth > MAX_PARSE_DEPTH) this.fail("nesting too deep");
    const c = this.text[this.pos];
    if (c === "{") return this.object(depth);
    if (c === "[") return this.array(depth);
    if (c === '"') return this.string();
    if (c === "-" || (c !== undefined && c >= "0" && c <= "9")) return this.number();
    for (const [word, literal] of [["true", true], ["false", false], ["null", null]] as const) {
      if (this.text.startsWith(word, this.pos)) {
        this.pos += word.length;
        return literal;
      }
    }
    return this.fail("unexpected character");
  }

  object(depth: number): JsonObject {
    this.pos++;
    // A Map, then own data properties: a key "__proto__" stays a key. A repeated
    // key keeps its last value, as json.loads and JSON.parse do.
    const entries = new Map<string, JsonValue>();
    this.ws();
    if (this.text[this.pos] === "}") {
      this.pos++;
      return {};
    }
    for (;;) {
      this.ws();
      if (this.text[this.pos] !== '"') this.fail("expected a string key");
      const key = this.string();
      this.ws();
      if (this.text[this.pos] !== ":") this.fail("expected ':'");
      this.pos++;
      this.ws();
      entries.delete(key);
      entries.set(key, this.value(depth + 1));
      this.ws();
      const c = this.text[this.pos];
      this.pos++;
      if (c === "}") return Object.fromEntries(entries) as JsonObject;
      if (c !== ",") this.fail("expected ',' or '}'");
    }
  }

  array(depth: number): JsonValue[] {
    this.pos++;
    const out: JsonValue[] = [];
    this.ws();
    if (this.text[this.pos] === "]") {
      this.pos++;
      return out;
    }
    for (;;) {
      this.ws();
      out.push(this.value(depth + 1));
      this.ws();
      const c = this.text[this.pos];
      this.pos++;
      if (c === "]") return out;
      if (c !== ",") this.fail("expected ',' or ']'");
    }
  }

  string(): string {
    this.pos++;
    let out = "";
    for (;;) {
      const c = this.text.charCodeAt(this.pos);
      if (Number.isNaN(c)) this.fail("unterminated string");
      if (c === 0x22) {
        this.pos++;
        return out;
      }
      if (c < 0x20) this.fail("raw control character in string");
      if (c !== 0x5c) {
        out += this.text[this.pos];
        this.pos++;
        continue;
      }
      const e = this.text[this.pos + 1];
      this.pos += 2;
      switch (e) {
        case '"': out += '"'; break;
        case "\\": out += "\\"; break;
        case "/": out += "/"; break;
        case "b": out += "\b"; break;
        case "f": out += "\f"; break;
        case "n": out += "\n"; break;
        case "r": out += "\r"; break;
        case "t": out += "\t"; break;
        case "u": {
          const hex = this.text.slice(this.pos, this.pos + 4);
          if (!/^[0-9A-Fa-f]{4}$/.test(hex)) this.fail("bad \\u escape");
          // One UTF-16 code unit; a lone surrogate survives here and is refused
          // by canonicalization, as in Python.
          out += String.fromCharCode(parseInt(hex, 16));
          this.pos += 4;
          break;
        }
        default:
          this.fail("bad escape");
      }
    }
  }

  number(): number {
    const m = /^-?(?:0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?/.exec(this.text.slice(this.pos, this.pos + 400));
    if (m === null) return this.fail("bad number");
    const text = m[0];
    this.pos += text.length;
    if (m[1] !== undefined || m[2] !== undefined) {
      throw new CanonicalJSONError(`float ${text} is not allowed; use integers`);
    }
    const big = BigInt(text);
    if (big > BigInt(SAFE_INTEGER_MAX) || big < -BigInt(SAFE_INTEGER_MAX)) {
      throw new CanonicalJSONError(`integer ${text} is outside the I-JSON safe range`);
    }
    return Number(big);
  }
}

/** Parse JSON text; numbers must be written as integers (no fraction, no exponent). */
export function parseJson(text: string): JsonValue {
  if (!text.isWellFormed()) throw new CanonicalJSONError("JSON text holds a lone surrogate");
  return new Parser(text).document();
}

const STRICT_UTF8 = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });

/**
 * Parse JSON that must already be canonical; refuse it otherwise (the twin of
 * Python's `parse_canonical`). Used where a signature or digest covers the
 * bytes, so that two parsers can never read different values from them.
 */
export function parseCanonical(data: Uint8Array | string): JsonValue {
  let raw: Buffer;
  if (typeof data === "string") {
    if (!data.isWellFormed()) throw new CanonicalJSONError("text holds a lone surrogate");
    raw = Buffer.from(data, "utf8");
  } else {
    raw = Buffer.from(data);
  }
  let text: string;
  try {
    text = STRICT_UTF8.decode(raw);
  } catch {
    throw new CanonicalJSONError("not UTF-8");
  }
  const value = parseJson(text);
  if (!canonicalBytes(value).equals(raw)) throw new CanonicalJSONError("JSON is not in canonical form");
  return value;
}
