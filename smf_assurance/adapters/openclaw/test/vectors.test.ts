/**
 * The golden vectors of tests/vectors/, consumed by the TypeScript side.
 *
 * The Python side consumes the same files (tests/unit/test_canonical.py,
 * tests/unit/test_keyed.py, tests/unit/test_vectors_messages.py), so each vector is
 * checked by both implementations, byte for byte (ARCHITECTURE.md,
 * "Canonical bytes"). Runs on the compiled JavaScript (dist/).
 */

import assert from "node:assert/strict";
import { chmodSync, mkdirSync, mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

import { canonicalBytes, canonicalText, identityOf, parseCanonical, parseJson, sha256Identity } from "../dist/contract/canonical.js";
import {
  BadSignatureError,
  decodeEnvelope,
  encodeEnvelope,
  MalformedEnvelopeError,
  MalformedPayloadError,
  PayloadTypeMismatchError,
  pae,
  signValue,
  UnknownSignerError,
  verifyEnvelope,
} from "../dist/contract/dsse.js";
import { keyedIdentifier } from "../dist/contract/keyed.js";
import { SigningKey, type VerifyKey } from "../dist/contract/keys.js";
import { approvalIdFor, decodeVerdict, orderIdFor, PAYLOAD_APPROVAL_OUTCOME, PAYLOAD_PROPOSAL, PAYLOAD_VERDICT } from "../dist/contract/messages.js";
import { openOutcome, OutcomeMismatchError } from "../dist/contract/outcome.js";
import { openVerdict, readVerdictReply, VerdictMismatchError } from "../dist/contract/verdicts.js";
import { PAYLOAD_RELEASE_MANIFEST, ReleaseCheckError, trustRootOf } from "../dist/contract/release.js";
import { ReleaseVerifier } from "../dist/release.js";
import { CredentialFileError, inboxPrefix, InboxPrefixError, readCredential } from "../dist/contract/bus_access.js";
import { runtimeAttestation, type AttestationFields } from "../dist/contract/attestation.js";
import {
  HEADER_INSTANCE_PROOF,
  instanceProof,
  MAX_INSTANCE_PROOF_CHARS,
  openInstanceProof,
  PAYLOAD_INSTANCE_PROOF,
  sealInstanceProof,
  type InstanceProof,
} from "../dist/contract/model_gateway.js";

const VECTORS = fileURLToPath(new URL("../../../../tests/vectors/", import.meta.url));

type Row = Record<string, unknown> & { name: string };

function load(name: string): Record<string, unknown> {
  const text = readFileSync(VECTORS + name, "utf8");
  // tests/unit/test_canonical.py checks the files are ASCII; a decomposed string
  // written as an escape cannot be normalized by an editor on the way.
  assert.ok(/^[\x00-\x7f]*$/.test(text), `${name} is not pure ASCII`);
  return JSON.parse(text) as Record<string, unknown>;
}

function rows(doc: Record<string, unknown>, key: string): Row[] {
  const list = doc[key];
  assert.ok(Array.isArray(list), key);
  return list as Row[];
}

function s(row: Row, key: string): string {
  const v = row[key];
  assert.equal(typeof v, "string", `${row.name}.${key}`);
  return v as string;
}

// --- canonical.json and canonical_more.json ------------------------------------

for (const file of ["canonical.json", "canonical_more.json"]) {
  const doc = load(file);
  for (const row of rows(doc, "encode")) {
    test(`${file} encode ${row.name}`, () => {
      if (row.error === true) {
        assert.throws(() => canonicalBytes(parseJson(s(row, "input"))), `${row.name} must be refused`);
        return;
      }
      const value = parseJson(s(row, "input"));
      assert.equal(canonicalText(value), s(row, "canonical"));
      assert.ok(canonicalBytes(value).equals(Buffer.from(s(row, "canonical"), "utf8")));
      assert.equal(identityOf(value), s(row, "identity"));
    });
  }
  for (const row of rows(doc, "verify")) {
    test(`${file} verify ${row.name}`, () => {
      if (row.canonical === true) {
        parseCanonical(s(row, "input"));
        return;
      }
      assert.throws(() => parseCanonical(s(row, "input")));
    });
  }
}

for (const row of rows(load("canonical_more.json"), "unicode_divergence")) {
  test(`canonical_more.json unicode_divergence ${row.name} (TypeScript refuses)`, () => {
    assert.throws(() => canonicalBytes(parseJson(s(row, "input"))), /not assigned in Unicode 14\.0/);
  });
}

// --- keyed.json ---------------------------------------------------------------------

{
  const doc = load("keyed.json");
  for (const row of rows(doc, "vectors")) {
    test(`keyed.json ${row.name}`, () => {
      const key = Buffer.from((row.key_hex ?? doc.key_hex) as string, "hex");
      if (row.error === true) {
        assert.throws(() => keyedIdentifier(key, s(row, "domain"), s(row, "value")));
        return;
      }
      assert.equal(keyedIdentifier(key, s(row, "domain"), s(row, "value")), s(row, "identifier"));
    });
  }
}

// --- messages.json --------------------------------------------------------------------

const messages = load("messages.json");
const keyDoc = messages.test_key as Record<string, string>;
const otherDoc = messages.other_key as Record<string, string>;
const testKey = SigningKey.fromSeed(Buffer.from(keyDoc.seed_hex ?? "", "hex"));

test("messages.json test keys are the RFC 8032 keys", () => {
  assert.equal(testKey.publicBytes.toString("hex"), keyDoc.public_hex);
  assert.equal(testKey.keyId, keyDoc.key_id);
  const other = SigningKey.fromSeed(Buffer.from(otherDoc.seed_hex ?? "", "hex"));
  assert.equal(other.publicBytes.toString("hex"), otherDoc.public_hex);
  assert.equal(other.keyId, otherDoc.key_id);
});

for (const row of rows(messages, "ed25519")) {
  test(`messages.json ed25519 ${row.name}`, () => {
    const key = SigningKey.fromSeed(Buffer.from(s(row, "seed_hex"), "hex"));
    assert.equal(key.sign(Buffer.from(s(row, "message_hex"), "hex")).toString("hex"), s(row, "signature_hex"));
  });
}

const byName = new Map(rows(messages, "messages").map((m) => [m.name, m]));

for (const row of rows(messages, "messages")) {
  test(`messages.json message ${row.name}`, () => {
    assert.equal(canonicalText(row.value), s(row, "canonical"));
    assert.equal(identityOf(row.value), s(row, "identity"));
    assert.ok(canonicalBytes(parseCanonical(s(row, "canonical"))).equals(Buffer.from(s(row, "canonical"), "utf8")));
  });
}

for (const row of rows(messages, "envelopes")) {
  test(`messages.json envelope ${row.name}`, () => {
    const message = byName.get(s(row, "message"));
    assert.ok(message !== undefined);
    const payloadType = s(row, "payload_type");
    const envelope = signValue(payloadType, message.value, [testKey]);
    assert.equal(encodeEnvelope(envelope).toString("utf8"), s(row, "envelope"));
    assert.equal(envelope.signatures[0]?.sig, s(row, "signature"));
    const payload = canonicalBytes(message.value);
    assert.equal(sha256Identity(pae(payloadType, payload)), "sha256:" + s(row, "pae_sha256"));
    const trusted = new Map<string, VerifyKey>([[testKey.keyId, testKey.verifyKey]]);
    const verified = verifyEnvelope(decodeEnvelope(Buffer.from(s(row, "envelope"), "utf8")), trusted, 1, payloadType);
    assert.ok(verified.payload.equals(payload));
  });
}

const ERRORS: Record<string, new (...args: never[]) => Error> = {
  BadSignatureError,
  PayloadTypeMismatchError,
  UnknownSignerError,
  MalformedEnvelopeError,
  MalformedPayloadError,
  OutcomeMismatchError,
  VerdictMismatchError,
};

for (const row of rows(messages, "verify")) {
  test(`messages.json verify ${row.name}`, () => {
    const trusted = new Map<string, VerifyKey>([[testKey.keyId, testKey.verifyKey]]);
    const check = (): unknown =>
      verifyEnvelope(decodeEnvelope(Buffer.from(s(row, "envelope"), "utf8")), trusted, 1, PAYLOAD_PROPOSAL);
    if (row.result === "ok") {
      check();
      return;
    }
    const expected = ERRORS[s(row, "error")];
    assert.ok(expected !== undefined);
    assert.throws(check, (error: unknown) => {
      // the exact class, not a subclass: each names a different attack
      assert.equal((error as Error).constructor, expected);
      return true;
    });
  });
}

// --- runtime attestations and the instance proof --------------------------------

for (const row of rows(messages, "messages").filter((m) => m.type === "RuntimeAttestation")) {
  test(`messages.json attestation ${row.name}: the builder writes exactly this value`, () => {
    const { schema, ...fields } = row.value as Record<string, unknown>;
    assert.equal(schema, "smf.runtime-attestation/1");
    const built = runtimeAttestation(fields as unknown as AttestationFields);
    assert.deepEqual(built, row.value);
    assert.equal(canonicalText(built), s(row, "canonical"));
    // instance_id present only when set, as msgspec's omit_defaults writes it
    assert.equal("instance_id" in built, "instance_id" in (row.value as object));
    assert.equal(canonicalText(runtimeAttestation({ ...(fields as unknown as AttestationFields), instance_id: undefined })).includes("instance_id"), false);
  });
}

{
  const proofs = messages.instance_proofs as {
    payload_type: string;
    header: string;
    max_chars: number;
    runtime_key: string;
    seal: Row[];
    open: Row[];
  };
  const runtimeDoc = messages[proofs.runtime_key] as Record<string, string>;
  const runtime = SigningKey.fromSeed(Buffer.from(runtimeDoc.seed_hex ?? "", "hex"));
  const trusted = new Map<string, VerifyKey>([[runtime.keyId, runtime.verifyKey]]);
  test("messages.json instance proofs: payload type, header, bound", () => {
    assert.equal(proofs.payload_type, PAYLOAD_INSTANCE_PROOF);
    assert.equal(proofs.header, HEADER_INSTANCE_PROOF);
    assert.equal(proofs.max_chars, MAX_INSTANCE_PROOF_CHARS);
  });
  for (const row of proofs.seal) {
    test(`messages.json instance proof seal ${row.name}`, () => {
      const p = row.proof as InstanceProof;
      const proof = instanceProof(p.runtime_id, p.instance_id, p.issued_at_ms, p.nonce);
      if (p.request_digest !== undefined) proof.request_digest = p.request_digest;
      assert.deepEqual(proof, p);
      assert.equal(canonicalText(proof), s(row, "canonical"));
      assert.equal(encodeEnvelope(signValue(PAYLOAD_INSTANCE_PROOF, proof, [runtime])).toString("utf8"), s(row, "envelope"));
      const sealed = sealInstanceProof(proof, runtime);
      assert.equal(sealed, s(row, "sealed"));
      assert.deepEqual(openInstanceProof(sealed, trusted).proof, p);
    });
  }
  for (const row of proofs.open) {
    test(`messages.json instance proof open ${row.name}`, () => {
      const open = () => openInstanceProof(s(row, "sealed"), trusted).proof;
      if (row.proof !== undefined) {
        assert.deepEqual(open(), row.proof);
        return;
      }
      const error = ERRORS[s(row, "error")];
      assert.ok(error !== undefined, s(row, "error"));
      assert.throws(open, (caught: unknown) => {
        // the exact class, not a subclass: each names a different attack
        assert.equal((caught as Error).constructor, error, (caught as Error).message);
        return true;
      });
    });
  }
}

test("messages.json identities", () => {
  const ids = new Map(rows(messages, "identities").map((r) => [r.name, r]));
  const order = ids.get("order_id_for");
  const approval = ids.get("approval_id_for");
  const content = ids.get("content_hash_nfc");
  assert.ok(order && approval && content);
  assert.equal(orderIdFor(s(order, "operation_hash"), s(order, "decision_id")), s(order, "expected"));
  assert.equal(approvalIdFor(s(approval, "decision_id")), s(approval, "expected"));
  assert.equal(sha256Identity(Buffer.from(s(content, "text").normalize("NFC"), "utf8")), s(content, "expected"));
});

for (const row of rows(messages, "operations")) {
  test(`messages.json operation ${row.name}`, () => {
    const proposal = row.proposal as { arguments: unknown; native_tool: string };
    assert.equal(identityOf(proposal.arguments), s(row, "canonical_args_hash"));
    assert.equal(canonicalText(row.envelope), s(row, "envelope_canonical"));
    assert.equal(identityOf(row.envelope), s(row, "operation_hash"));
    const args = proposal.arguments as { command: string };
    assert.equal(sha256Identity(Buffer.from(args.command.normalize("NFC"), "utf8")), s(row, "content_hash"));
  });
}

for (const row of rows(messages, "verdicts")) {
  test(`messages.json verdict ${row.name}`, () => {
    const data = Buffer.from(s(row, "input"), "utf8");
    if (row.valid === true) {
      assert.equal(decodeVerdict(data).outcome, row.outcome);
      return;
    }
    assert.throws(() => decodeVerdict(data));
  });
}

// --- signed approval outcomes -----------------------------------------------------------

{
  const outcomes = messages.outcomes as { payload_type: string; gate_key: string; expected: Record<string, string>; cases: Row[] };
  test("messages.json outcomes payload type", () => {
    assert.equal(outcomes.payload_type, PAYLOAD_APPROVAL_OUTCOME);
  });
  const gateDoc = messages[outcomes.gate_key] as Record<string, string>;
  const gate = SigningKey.fromSeed(Buffer.from(gateDoc.seed_hex ?? "", "hex"));
  const gateKeys = new Map<string, VerifyKey>([[gate.keyId, gate.verifyKey]]);
  const expected = {
    approvalId: outcomes.expected.approval_id ?? "",
    decisionId: outcomes.expected.decision_id ?? "",
    operationHash: outcomes.expected.operation_hash ?? "",
  };
  for (const row of outcomes.cases) {
    test(`messages.json outcome ${row.name}`, () => {
      const open = () => openOutcome(Buffer.from(s(row, "envelope"), "utf8"), gateKeys, expected);
      if (typeof row.outcome === "string") {
        const opened = open();
        assert.equal(opened.outcome, row.outcome);
        // The deny's code and note, as sent; absent from every other outcome.
        assert.equal(opened.approver_note, row.approver_note);
        if (row.approver_note !== undefined) assert.deepEqual(opened.reason_codes, row.reason_codes);
        return;
      }
      const error = ERRORS[s(row, "error")];
      assert.ok(error !== undefined, s(row, "error"));
      assert.throws(open, (caught: unknown) => {
        assert.equal((caught as Error).constructor, error, (caught as Error).message);
        return true;
      });
    });
  }
}

// --- signed verdicts on smf.propose ---------------------------------------------------------

{
  const verdicts = messages.signed_verdicts as { payload_type: string; gate_key: string; proposal_id: string; cases: Row[] };
  test("messages.json signed verdicts payload type", () => {
    assert.equal(verdicts.payload_type, PAYLOAD_VERDICT);
  });
  const gateDoc = messages[verdicts.gate_key] as Record<string, string>;
  const gate = SigningKey.fromSeed(Buffer.from(gateDoc.seed_hex ?? "", "hex"));
  const gateKeys = new Map<string, VerifyKey>([[gate.keyId, gate.verifyKey]]);
  for (const row of verdicts.cases) {
    test(`messages.json signed verdict ${row.name}`, () => {
      const data = Buffer.from(s(row, "envelope"), "utf8");
      const open = () => openVerdict(data, gateKeys, verdicts.proposal_id);
      // What the hook acts on (gate.ts propose): the gate's Verdict, or a deny with the
      // reason code Python's ProposalClient gives.
      const read = readVerdictReply(data, gateKeys, verdicts.proposal_id);
      assert.equal(read.proposal_id, verdicts.proposal_id);
      if (typeof row.outcome === "string") {
        assert.equal(open().outcome, row.outcome);
        assert.deepEqual(read, open());
        return;
      }
      const error = ERRORS[s(row, "error")];
      assert.ok(error !== undefined, s(row, "error"));
      assert.throws(open, (caught: unknown) => {
        assert.equal((caught as Error).constructor, error, (caught as Error).message);
        return true;
      });
      assert.equal(read.outcome, "deny");
      assert.deepEqual(read.reason_codes, [s(row, "reason_code")]);
      assert.equal(read.decision_id, null);
    });
  }
}

// --- release bundle verification (releases.json) --------------------------------------------

{
  const releases = load("releases.json") as unknown as { trust_root: unknown; clock_ms: number; max_skew_ms: number; payload_type: string; cases: Row[] };
  test("releases.json payload type", () => {
    assert.equal(releases.payload_type, PAYLOAD_RELEASE_MANIFEST);
  });
  for (const row of releases.cases) {
    test(`releases.json ${row.name}`, () => {
      const verifier = new ReleaseVerifier(trustRootOf(releases.trust_root), () => releases.clock_ms, releases.max_skew_ms);
      const data = Buffer.from(s(row, "bundle"), "utf8");
      if (row.expect !== "accepted") {
        assert.throws(
          () => verifier.verify(data),
          (caught: unknown) => {
            assert.ok(caught instanceof ReleaseCheckError, String(caught));
            assert.equal(caught.reasonCode, row.expect, caught.message);
            return true;
          },
        );
        assert.equal(verifier.floor, undefined); // a refused release never moves the floor
        return;
      }
      const usable = verifier.verify(data);
      assert.equal(usable.releaseId, row.release_id);
      assert.equal(usable.sequence, row.sequence);
      assert.equal(usable.manifestHash, row.manifest_hash);
      assert.deepEqual([...usable.gateKeys.keys()].sort(), row.gate_key_ids);
    });
  }
}

// --- the bus credential (bus_access.json) ---------------------------------------------------

test("bus_access.json inbox prefixes", () => {
  const doc = load("bus_access.json");
  assert.equal(doc.schema, "smf.vectors.bus-access/1");
  for (const row of rows(doc, "inbox_prefix")) {
    if (row.error === true) assert.throws(() => inboxPrefix(s(row, "principal")), InboxPrefixError, row.name);
    else assert.equal(inboxPrefix(s(row, "principal")), s(row, "prefix"), row.name);
  }
});

test("bus_access.json seed files: the same reason codes as smf_assurance.subjects.bus_access.read_credential", () => {
  const doc = load("bus_access.json");
  const dir = mkdtempSync(join(tmpdir(), "smf-vec-seed-"));
  for (const row of rows(doc, "seed_files")) {
    const path = join(dir, row.name);
    if (row.kind === "directory") mkdirSync(path);
    else if (row.kind !== "missing") {
      writeFileSync(path, s(row, "content"), { encoding: "latin1" });
      chmodSync(path, row.mode as number);
    }
    if (row.expect === "ok") {
      assert.deepEqual(readCredential("hermes-runtime", path), { principal: "hermes-runtime", seedFile: path }, row.name);
      continue;
    }
    assert.throws(
      () => readCredential("hermes-runtime", path),
      (error: unknown) => error instanceof CredentialFileError && error.reasonCode === row.expect && !error.message.includes("SUAAAA"),
      row.name,
    );
  }
  const first = rows(doc, "seed_files")[0] as Row;
  assert.throws(() => readCredential("a.b", join(dir, first.name)), (e: unknown) => e instanceof CredentialFileError && e.reasonCode === "smf_bus_credential_invalid");
});
