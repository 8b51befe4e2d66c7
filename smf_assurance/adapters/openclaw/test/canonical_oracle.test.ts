/**
 * The TypeScript twin's canonical bytes against an independent RFC 8785
 * implementation: npm `canonicalize` (pinned devDependency).
 *
 * The Python side runs the same comparison against PyPI `rfc8785`
 * (tests/unit/test_canonical_oracle.py), so both twins are checked against an
 * oracle neither of us wrote, on the golden vectors of tests/vectors/.
 *
 * What is compared: every value our `canonicalText` accepts (the `encode`
 * vectors of canonical.json and canonical_more.json, the messages of
 * messages.json) must give exactly `canonicalize` of the same value after NFC
 * of every string and key (our one deliberate difference in the bytes:
 * ARCHITECTURE.md, "after NFC normalization of every string"); every `verify`
 * text we call canonical must be reproduced by `canonicalize` byte for byte.
 *
 * What is not compared, and why: our refusals. Ours refuse at the level of the
 * JSON text (float syntax even when integral, integers outside the I-JSON safe
 * range, code points unassigned in Unicode 14.0, nesting deeper than 64,
 * duplicate keys after NFC), which `JSON.parse` -- the only way to hand a value
 * to `canonicalize` -- cannot see: it reads `1.0` as `1` and rounds unsafe
 * integers. The refusals are checked against `rfc8785` on the Python side and
 * by the vectors themselves (test/vectors.test.ts).
 */

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

import canonicalize from "canonicalize";

import { canonicalText, parseCanonical, parseJson } from "../dist/contract/canonical.js";

const VECTORS = fileURLToPath(new URL("../../../../tests/vectors/", import.meta.url));

type Row = Record<string, unknown> & { name: string };

function rows(file: string, key: string): Row[] {
  const doc = JSON.parse(readFileSync(VECTORS + file, "utf8")) as Record<string, unknown>;
  const list = doc[key] ?? [];
  assert.ok(Array.isArray(list), `${file}.${key}`);
  return list as Row[];
}

function nfc(value: unknown): unknown {
  if (typeof value === "string") return value.normalize("NFC");
  if (Array.isArray(value)) return value.map(nfc);
  if (value !== null && typeof value === "object") {
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [k.normalize("NFC"), nfc(v)]));
  }
  return value;
}

/** The oracle: `canonicalize` after our NFC rule, on the value `JSON.parse` reads. */
function oracle(text: string): string {
  const out = canonicalize(nfc(JSON.parse(text)));
  assert.equal(typeof out, "string");
  return out as string;
}

function accepted(text: string): string | undefined {
  try {
    return canonicalText(parseJson(text));
  } catch {
    return undefined;
  }
}

for (const file of ["canonical.json", "canonical_more.json"]) {
  for (const row of rows(file, "encode")) {
    const input = row.input as string;
    const ours = accepted(input);
    if (ours === undefined) continue;
    test(`${file} encode ${row.name} equals canonicalize`, () => {
      assert.equal(ours, oracle(input));
      assert.equal(ours, row.canonical);
    });
  }
  for (const row of rows(file, "verify")) {
    if (row.canonical !== true) continue;
    test(`${file} verify ${row.name}: canonicalize reproduces the text`, () => {
      const input = row.input as string;
      parseCanonical(input);
      assert.equal(oracle(input), input);
    });
  }
}

for (const row of rows("messages.json", "messages")) {
  test(`messages.json message ${row.name} equals canonicalize`, () => {
    const expected = canonicalize(nfc(row.value));
    assert.equal(canonicalText(row.value), expected);
    assert.equal(expected, row.canonical);
  });
}

test("the oracle orders keys by UTF-16 code units, not code points", () => {
  const text = '{"\\ue000":1,"\\ud83d\\ude00":2}';
  assert.equal(oracle(text), accepted(text));
  assert.equal(oracle(text), '{"\u{1F600}":2,"\ue000":1}');
});
