"""The golden vectors shared with the OpenClaw plugin, consumed by the Python side (``subjects/``).

The TypeScript side (``smf_assurance/adapters/openclaw/test/vectors.test.ts``) consumes the
same files, so every vector here is checked by both implementations
(ARCHITECTURE.md, "Canonical bytes": byte for byte, proven by shared golden
vectors). How each expected value was produced: ``tests/vectors/README.md``.

Proves, for Python: the canonical bytes and identities of the wire messages
the OpenClaw adapter signs (a Proposal, an ExecutionReport), the exact DSSE
envelope bytes of those messages signed with a fixed RFC 8032 key
(deterministic Ed25519), which tampered or malformed envelopes are refused and
with which error class, the order-id and approval-id derivations, the verdict
decoding rules (msgspec), the operation hash the gate computes for an OpenClaw
``exec`` call through ``smf_assurance/pipeline/mappers/smf-openclaw-adapter.json``, which
signed approval outcomes ``open_outcome`` acts on and which it refuses (unsigned,
another signer, another purpose, edited, another approval, decision or
operation, not final, not canonical) with which error class, which signed
replies on ``smf.propose`` ``smf_assurance.subjects.verdicts.open_verdict`` accepts and which
it refuses (unsigned, another signer, the gate's signature for another payload
type, edited, signatures stripped, another proposal, a payload that is not the
one canonical Verdict) with which error class, and the reason code
``ProposalClient.send`` turns each refusal into (the one the TypeScript hook
gives), a runtime attestation's canonical bytes with and without its additive
``instance_id`` and its signed envelope, the exact header value
``seal_instance_proof`` writes for a fixed key, proof and time and which header
values ``open_instance_proof`` refuses with which error class, and the
extra canonical-JSON vectors of ``canonical_more.json``.

Does not prove: anything about the TypeScript side (its own test does), or
that the vectors are complete.
"""

from __future__ import annotations

import json
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import msgspec
import pytest
from nats.aio.client import Client

from smf_assurance.adapters.client import ProposalClient
from smf_assurance.adapters.hermes.release import ReleaseVerifier
from smf_assurance.core.normalize import decode_mapper, normalize
from smf_assurance.subjects import dsse, names
from smf_assurance.subjects.approvals import (
    AskAgain,
    OutcomeMismatchError,
    approval_id_for,
    open_ask_again,
    open_outcome,
)
from smf_assurance.subjects.attestation import RuntimeAttestation
from smf_assurance.subjects.canonical import (
    CanonicalJSONError,
    canonical_bytes,
    identity_of,
    parse_canonical,
)
from smf_assurance.subjects.dsse import decode_envelope, encode_envelope, sign_struct, verify
from smf_assurance.subjects.envelope import content_hash_of, envelope_builtins
from smf_assurance.subjects.keys import SigningKey, VerifyKey
from smf_assurance.subjects.messages import ExecutionReport, Proposal, Verdict, order_id_for
from smf_assurance.subjects.model_gateway import (
    MAX_INSTANCE_PROOF_CHARS,
    InstanceProof,
    open_instance_proof,
    request_digest,
    seal_instance_proof,
)
from smf_assurance.subjects.registry import KeyRegistry, RegistryFile
from smf_assurance.subjects.release import ReleaseCheckError, decode_bundle, decode_trust_root
from smf_assurance.subjects.verdicts import VerdictMismatchError, open_verdict
from tests.support.builders import Decided

ROOT = Path(__file__).resolve().parents[2]
VECTORS = ROOT / "tests" / "vectors"
MESSAGES = json.loads((VECTORS / "messages.json").read_text(encoding="ascii"))
MORE = json.loads((VECTORS / "canonical_more.json").read_text(encoding="ascii"))
TYPES: dict[str, type[msgspec.Struct]] = {
    "Proposal": Proposal,
    "ExecutionReport": ExecutionReport,
    "Verdict": Verdict,
    "RuntimeAttestation": RuntimeAttestation,
}
PAYLOAD_TYPES: dict[str, type[msgspec.Struct]] = {
    names.PAYLOAD_PROPOSAL: Proposal,
    names.PAYLOAD_REPORT: ExecutionReport,
    names.PAYLOAD_APPROVAL_OUTCOME: Verdict,
    names.PAYLOAD_VERDICT: Verdict,
    names.PAYLOAD_ATTESTATION: RuntimeAttestation,
}


def _key(which: str = "test_key") -> SigningKey:
    return SigningKey.from_seed(bytes.fromhex(MESSAGES[which]["seed_hex"]))


def vector_value(message: dict[str, Any]) -> Any:
    return message["value"]


def _message(name: str) -> dict[str, Any]:
    found: dict[str, Any] = next(m for m in MESSAGES["messages"] if m["name"] == name)
    return found


def test_new_vector_files_are_pure_ascii() -> None:
    for name in ("messages.json", "canonical_more.json"):
        assert (VECTORS / name).read_bytes().isascii(), name


# --- keys and signatures ----------------------------------------------------------------


def test_test_keys_are_the_rfc8032_keys() -> None:
    for which in ("test_key", "other_key"):
        key = _key(which)
        assert key.public_bytes.hex() == MESSAGES[which]["public_hex"]
        assert key.key_id == MESSAGES[which]["key_id"]


@pytest.mark.parametrize("vector", MESSAGES["ed25519"], ids=lambda v: v["name"])
def test_ed25519_signature_is_deterministic(vector: dict[str, Any]) -> None:
    key = SigningKey.from_seed(bytes.fromhex(vector["seed_hex"]))
    assert key.sign(bytes.fromhex(vector["message_hex"])).hex() == vector["signature_hex"]


# --- canonical bytes of wire messages --------------------------------------------------


@pytest.mark.parametrize("vector", MESSAGES["messages"], ids=lambda v: v["name"])
def test_message_canonical_bytes_and_identity(vector: dict[str, Any]) -> None:
    """The Struct round trip is what the gate does (``open_struct``): decode, re-encode."""
    struct = msgspec.convert(vector["value"], TYPES[vector["type"]])
    raw = canonical_bytes(msgspec.to_builtins(struct))
    assert raw == vector["canonical"].encode("utf-8")
    assert identity_of(vector["value"]) == vector["identity"]
    assert canonical_bytes(parse_canonical(raw)) == raw


@pytest.mark.parametrize("vector", MESSAGES["envelopes"], ids=lambda v: v["name"])
def test_signed_envelope_bytes(vector: dict[str, Any]) -> None:
    message = _message(vector["message"])
    struct = msgspec.convert(message["value"], TYPES[message["type"]])
    envelope = sign_struct(vector["payload_type"], struct, [_key()])
    assert encode_envelope(envelope) == vector["envelope"].encode("utf-8")
    assert envelope.signatures[0].sig == vector["signature"]
    # and the gate's own reading of it: verify, decode once, canonical check
    key = _key().verify_key
    opened, verified = dsse.open_struct(
        decode_envelope(vector["envelope"].encode()),
        {key.key_id: key},
        PAYLOAD_TYPES[vector["payload_type"]],
        vector["payload_type"],
    )
    assert canonical_bytes(msgspec.to_builtins(opened)) == canonical_bytes(vector_value(message))
    assert verified.key_ids == frozenset({key.key_id})


_ERRORS: dict[str, type[Exception]] = {
    "BadSignatureError": dsse.BadSignatureError,
    "PayloadTypeMismatchError": dsse.PayloadTypeMismatchError,
    "UnknownSignerError": dsse.UnknownSignerError,
    "MalformedEnvelopeError": dsse.MalformedEnvelopeError,
    "MalformedPayloadError": dsse.MalformedPayloadError,
    "OutcomeMismatchError": OutcomeMismatchError,
    "VerdictMismatchError": VerdictMismatchError,
}


@pytest.mark.parametrize("vector", MESSAGES["verify"], ids=lambda v: v["name"])
def test_envelope_verification(vector: dict[str, Any]) -> None:
    key: VerifyKey = _key().verify_key

    def check() -> None:
        envelope = decode_envelope(vector["envelope"].encode("utf-8"))
        verify(envelope, {key.key_id: key}, 1, names.PAYLOAD_PROPOSAL)

    if vector.get("result") == "ok":
        check()
        return
    with pytest.raises(_ERRORS[vector["error"]]) as caught:
        check()
    # The most specific class is the one named: a subclass would be a different attack.
    assert type(caught.value) is _ERRORS[vector["error"]]


# --- signed approval outcomes -------------------------------------------------------------

OUTCOMES = MESSAGES["outcomes"]


def test_outcome_payload_type_is_the_contracts() -> None:
    assert OUTCOMES["payload_type"] == names.PAYLOAD_APPROVAL_OUTCOME


@pytest.mark.parametrize("vector", OUTCOMES["cases"], ids=lambda v: v["name"])
def test_approval_outcome(vector: dict[str, Any]) -> None:
    """What a runtime may act on (the gate's allow or deny for this call) and what it
    must ignore, with the exact class ``open_outcome`` raises (one per attack)."""
    gate = _key(OUTCOMES["gate_key"]).verify_key
    expected = OUTCOMES["expected"]

    def check() -> Verdict:
        return open_outcome(
            vector["envelope"].encode("utf-8"),
            {gate.key_id: gate},
            approval_id=expected["approval_id"],
            decision_id=expected["decision_id"],
            operation_hash=expected["operation_hash"],
        )

    if "outcome" in vector:
        opened = check()
        assert opened.outcome == vector["outcome"]
        if "approver_note" in vector:  # the deny's code and note, as sent
            assert list(opened.reason_codes) == vector["reason_codes"]
            assert opened.approver_note == vector["approver_note"]
        else:
            assert opened.approver_note is msgspec.UNSET
        return
    with pytest.raises(_ERRORS[vector["error"]]) as caught:
        check()
    assert type(caught.value) is _ERRORS[vector["error"]]


# --- gate-signed notices that an expired approval is asked again ----------------

ASK_AGAIN = MESSAGES["ask_again"]


def test_ask_again_payload_type_is_the_contracts() -> None:
    assert ASK_AGAIN["payload_type"] == names.PAYLOAD_ASK_AGAIN


@pytest.mark.parametrize("vector", ASK_AGAIN["cases"], ids=lambda v: v["name"])
def test_ask_again_notice(vector: dict[str, Any]) -> None:
    """The notice a runtime holding the expired approval's proposal acts on, and each it
    must ignore, with the exact class ``open_ask_again`` raises: without the gate's
    signature over exactly these bytes, for this approval and its own decision, no
    runtime proposes anything anew."""
    gate = _key(ASK_AGAIN["gate_key"]).verify_key
    expected = ASK_AGAIN["expected"]

    def check() -> AskAgain:
        return open_ask_again(
            vector["envelope"].encode("utf-8"),
            {gate.key_id: gate},
            approval_id=expected["approval_id"],
        )

    if "asked_at_ms" in vector:
        notice = check()
        assert (notice.approval_id, notice.operation_hash, notice.asked_at_ms) == (
            expected["approval_id"],
            expected["operation_hash"],
            vector["asked_at_ms"],
        )
        return
    with pytest.raises(_ERRORS[vector["error"]]) as caught:
        check()
    assert type(caught.value) is _ERRORS[vector["error"]]


# --- signed verdicts on smf.propose ---------------------------------------------------------

SIGNED_VERDICTS = MESSAGES["signed_verdicts"]


def test_signed_verdict_payload_type_is_the_contracts() -> None:
    assert SIGNED_VERDICTS["payload_type"] == names.PAYLOAD_VERDICT


@pytest.mark.parametrize("vector", SIGNED_VERDICTS["cases"], ids=lambda v: v["name"])
def test_signed_verdict(vector: dict[str, Any]) -> None:
    """The gate's reply a runtime may act on, and every other reply, refused with the
    exact class ``open_verdict`` raises (one per attack)."""
    gate = _key(SIGNED_VERDICTS["gate_key"]).verify_key

    def check() -> Verdict:
        return open_verdict(
            vector["envelope"].encode("utf-8"),
            {gate.key_id: gate},
            proposal_id=SIGNED_VERDICTS["proposal_id"],
        )

    if "outcome" in vector:
        assert check().outcome == vector["outcome"]
        return
    with pytest.raises(_ERRORS[vector["error"]]) as caught:
        check()
    assert type(caught.value) is _ERRORS[vector["error"]]


@dataclass(frozen=True)
class _Reply:
    data: bytes
    headers: dict[str, str] | None = None


@dataclass(frozen=True)
class _OneReply:
    """A bus on which ``data`` is the first (and only) answer on ``smf.propose``."""

    data: bytes

    async def request(self, subject: str, payload: bytes, timeout: float) -> _Reply:
        assert subject == names.PROPOSE
        return _Reply(self.data)


@pytest.mark.parametrize("vector", SIGNED_VERDICTS["cases"], ids=lambda v: v["name"])
async def test_signed_verdict_as_the_python_client_reads_it(vector: dict[str, Any]) -> None:
    """``ProposalClient.send`` acts on the gate's Verdict and denies everything else with
    the vector's reason code, the one ``smf_assurance/adapters/openclaw/src/contract/verdicts.ts``
    gives."""
    gate = _key(SIGNED_VERDICTS["gate_key"]).verify_key
    proposal_id: str = SIGNED_VERDICTS["proposal_id"]
    client = ProposalClient(
        cast(Client, _OneReply(vector["envelope"].encode("utf-8"))),
        _key("other_key"),
        "openclaw-demo",
        "2026.9.6",
        "smf-openclaw-adapter",
        gate_keys={gate.key_id: gate},
    )
    verdict = await client.send(proposal_id, b"")
    assert verdict.proposal_id == proposal_id
    if "outcome" in vector:
        assert verdict.outcome == vector["outcome"]
        assert verdict.release_id == "release-0001"  # the gate's, not one the client made
        return
    assert (verdict.outcome, verdict.reason_codes) == ("deny", (vector["reason_code"],))


# --- runtime attestations and the instance proof -------------------------------


def test_an_attestation_names_its_instance_only_when_it_has_one() -> None:
    """``RuntimeAttestation.instance_id`` is additive (docs/SUBJECTS.md): absent from the
    canonical bytes when unset, present when set (the TypeScript builder must agree)."""
    without = _message("runtime_attestation_without_instance")
    with_instance = _message("runtime_attestation_with_instance")
    assert "instance_id" not in without["canonical"]
    assert f'"instance_id":"{with_instance["value"]["instance_id"]}"' in with_instance["canonical"]
    struct = msgspec.convert(without["value"], RuntimeAttestation)
    assert struct.instance_id is None
    assert "instance_id" not in msgspec.to_builtins(struct)


INSTANCE_PROOFS = MESSAGES["instance_proofs"]


def test_instance_proof_constants_are_the_contracts() -> None:
    assert INSTANCE_PROOFS["payload_type"] == names.PAYLOAD_INSTANCE_PROOF
    assert INSTANCE_PROOFS["header"] == names.HEADER_INSTANCE_PROOF
    assert INSTANCE_PROOFS["max_chars"] == MAX_INSTANCE_PROOF_CHARS


@pytest.mark.parametrize("vector", INSTANCE_PROOFS["seal"], ids=lambda v: v["name"])
def test_instance_proof_sealing(vector: dict[str, Any]) -> None:
    """``seal_instance_proof`` writes the vector's header value for that key, payload and
    time, byte for byte (``sealInstanceProof`` in TypeScript must too), and opens it."""
    key = _key(INSTANCE_PROOFS["runtime_key"])
    proof = msgspec.convert(vector["proof"], InstanceProof)
    assert canonical_bytes(msgspec.to_builtins(proof)) == vector["canonical"].encode()
    sealed = seal_instance_proof(proof, key)
    assert sealed == vector["sealed"]
    assert encode_envelope(sign_struct(names.PAYLOAD_INSTANCE_PROOF, proof, [key])) == vector[
        "envelope"
    ].encode("utf-8")
    opened, verified = open_instance_proof(sealed, {key.key_id: key.verify_key})
    assert opened == proof
    assert verified.key_ids == frozenset({key.key_id})


@pytest.mark.parametrize("vector", INSTANCE_PROOFS["request_digests"])
def test_request_digest(vector: dict[str, Any]) -> None:
    """What a proof names for one request: the digest of its messages (JCS, NFC)."""
    assert request_digest(vector["messages"]) == vector["digest"]


@pytest.mark.parametrize("vector", INSTANCE_PROOFS["open"], ids=lambda v: v["name"])
def test_instance_proof_opening(vector: dict[str, Any]) -> None:
    """What the gate accepts as a proof, and every other header value with the exact class
    ``open_instance_proof`` raises (``openInstanceProof`` in TypeScript raises the same)."""
    key = _key(INSTANCE_PROOFS["runtime_key"]).verify_key

    def check() -> InstanceProof:
        proof, _ = open_instance_proof(vector["sealed"], {key.key_id: key})
        return proof

    if "proof" in vector:
        assert msgspec.to_builtins(check()) == vector["proof"]
        return
    with pytest.raises(_ERRORS[vector["error"]]) as caught:
        check()
    assert type(caught.value) is _ERRORS[vector["error"]]


# --- identities ---------------------------------------------------------------------------


def test_order_and_approval_ids() -> None:
    rows = {v["name"]: v for v in MESSAGES["identities"]}
    order = rows["order_id_for"]
    decided = Decided(order["operation_hash"], order["decision_id"])
    assert order_id_for(decided) == order["expected"]
    approval = rows["approval_id_for"]
    assert approval_id_for(approval["decision_id"]) == approval["expected"]
    content = rows["content_hash_nfc"]
    assert content_hash_of(content["text"]) == content["expected"]


@pytest.mark.parametrize("vector", MESSAGES["operations"], ids=lambda v: v["name"])
def test_operation_hash_of_a_native_call(vector: dict[str, Any]) -> None:
    """What the gate computes for the OpenClaw call, through the shipped mapper table."""
    table = decode_mapper(
        (ROOT / "smf_assurance" / "pipeline" / "mappers" / f"{vector['mapper']}.json").read_bytes()
    )
    proposal = msgspec.convert(vector["proposal"], Proposal)
    normalized = normalize(proposal, {table.adapter_id: table})
    built = canonical_bytes(envelope_builtins(normalized.envelope))
    assert built == canonical_bytes(vector["envelope"]) == vector["envelope_canonical"].encode()
    assert normalized.operation_hash == vector["operation_hash"]
    assert normalized.envelope.runtime.canonical_args_hash == vector["canonical_args_hash"]
    assert normalized.envelope.data.content_hash == vector["content_hash"]


@pytest.mark.parametrize("vector", MESSAGES["verdicts"], ids=lambda v: v["name"])
def test_verdict_decoding(vector: dict[str, Any]) -> None:
    data = vector["input"].encode("utf-8")
    if vector["valid"]:
        assert msgspec.json.decode(data, type=Verdict).outcome == vector["outcome"]
    else:
        with pytest.raises((msgspec.ValidationError, msgspec.DecodeError)):
            msgspec.json.decode(data, type=Verdict)


# --- canonical_more.json -----------------------------------------------------------------


@pytest.mark.parametrize("vector", MORE["encode"], ids=lambda v: v["name"])
def test_more_encode(vector: dict[str, Any]) -> None:
    if vector.get("error"):
        with pytest.raises((CanonicalJSONError, ValueError, RecursionError)):
            canonical_bytes(json.loads(vector["input"]))
        return
    raw = canonical_bytes(json.loads(vector["input"]))
    assert raw == vector["canonical"].encode("utf-8")
    assert identity_of(json.loads(vector["input"])) == vector["identity"]


@pytest.mark.parametrize("vector", MORE["verify"], ids=lambda v: v["name"])
def test_more_verify(vector: dict[str, Any]) -> None:
    if vector.get("canonical"):
        parse_canonical(vector["input"])
        return
    with pytest.raises(CanonicalJSONError):
        parse_canonical(vector["input"])


@pytest.mark.parametrize("vector", MORE["unicode_divergence"], ids=lambda v: v["name"])
def test_unicode_divergence_python_column(vector: dict[str, Any]) -> None:
    """Python (Unicode 14.0) keeps these code points; the TypeScript side refuses them."""
    raw = canonical_bytes(json.loads(vector["input"]))
    assert raw == vector["python_canonical"].encode("utf-8")
    assert identity_of(json.loads(vector["input"])) == vector["python_identity"]


def test_typescript_unicode_guard_matches_this_python() -> None:
    """``smf_assurance/adapters/openclaw/src/contract/unicode14.ts`` lists what THIS Python calls
    unassigned:
    after a Python upgrade (newer ``unicodedata``) it must be regenerated
    (``smf_assurance/adapters/openclaw/scripts/gen_unicode14.py``), or the guard is wrong."""
    table = (
        ROOT / "smf_assurance" / "adapters" / "openclaw" / "src" / "contract" / "unicode14.ts"
    ).read_text(encoding="ascii")
    assert f'PYTHON_UNICODE_VERSION = "{unicodedata.unidata_version}"' in table


# --- release bundle verification (releases.json) ---------------------------------

RELEASES = json.loads((VECTORS / "releases.json").read_text(encoding="ascii"))


@pytest.mark.parametrize("vector", RELEASES["cases"], ids=lambda v: v["name"])
def test_release_bundle_verification(vector: dict[str, Any]) -> None:
    """Every consumer's checks (``smf_assurance.subjects.release`` through the runtime verifier):
    the
    accepted release and its registry's gate keys, or the reason code of the refusal;
    ``smf_assurance/adapters/openclaw/test/vectors.test.ts`` expects the same of TypeScript."""
    root = decode_trust_root(json.dumps(RELEASES["trust_root"]).encode())
    verifier = ReleaseVerifier(
        root, clock=lambda: int(RELEASES["clock_ms"]), max_skew_ms=RELEASES["max_skew_ms"]
    )
    data = vector["bundle"].encode("utf-8")
    if vector["expect"] != "accepted":
        with pytest.raises(ReleaseCheckError) as caught:
            verifier.verify(data)
        assert caught.value.reason_code == vector["expect"]
        assert verifier.floor is None  # a refused release never moves the floor
        return
    usable = verifier.verify(data)
    assert usable.release_id == vector["release_id"]
    assert usable.sequence == vector["sequence"]
    assert usable.manifest_hash == vector["manifest_hash"]
    bundle = decode_bundle(data)
    gate = KeyRegistry.from_file(msgspec.json.decode(bundle.registry, type=RegistryFile))
    assert sorted(gate.trusted("gate")) == vector["gate_key_ids"]
