# ruff: noqa: E501 - vector data: one case per line reads better than split literals
"""Write ``messages.json`` and ``canonical_more.json`` (golden vectors, issue 10).

Run from the repository root: ``.venv/bin/python tests/vectors/make_message_vectors.py``.

The expected values are NOT produced by either implementation under test
(``subjects/`` in Python, ``smf_assurance/adapters/openclaw/src/contract`` in TypeScript):

- canonical texts: written by hand below (``canonical_more.json``), or, for
  the message vectors, by ``json.dumps(sort_keys=True, separators=(",", ":"),
  ensure_ascii=False)`` of a value this script first checks to be in the subset
  where that IS the JCS form (ASCII keys only, strings already NFC, integers
  only within 2^53-1);
- identities: ``hashlib.sha256`` over those bytes;
- Ed25519 signatures: the OpenSSL command line (``openssl pkeyutl -sign
  -rawin``), a third implementation beside PyNaCl/libsodium (Python) and Node's
  crypto; the test keys are RFC 8032 section 7.1 TEST 1 and TEST 2, whose
  public keys (and TEST 2's signature) this script checks against the RFC;
- DSSE PAE and envelope JSON: assembled here from ``protocol.md`` and
  ``envelope.md`` (byte strings, not a library).

Two places pin current Python behaviour as a cross-language contract rather
than derive it from a spec, and README.md says so: the NFC of the Unicode
vectors (``unicodedata`` is also what ``smf_assurance/subjects/canonical.py`` uses) and the
operation envelope's exact shape (what ``smf_assurance.core.normalize`` builds from
the OpenClaw mapper table, written out here by hand from that table).
"""

from __future__ import annotations

import base64
import hashlib
import json
import subprocess
import tempfile
import unicodedata
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
PKCS8_PREFIX = bytes.fromhex("302e020100300506032b657004220420")

RFC8032_TEST1 = {
    "seed_hex": "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60",
    "public_hex": "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a",
}
RFC8032_TEST2 = {
    "seed_hex": "4ccd089b28ff96da9db6c346ec114e0f5b8a319f35aba624da8cf6ed4fb8a6fb",
    "public_hex": "3d4017c3e843895a92b70aa74d1b7ebc9c982ccf2ec4968cc0cd55f12af4660c",
    "message_hex": "72",
    "signature_hex": "92a009a9f0d4cab8720e820b5f642540a2b27b5416503f8fb3762223ebdb69da"
    "085ac1e43e15996e458f3613d0f11d8c387b2eaeb4302aeeb00d291612bb0c00",
}
PAYLOAD_PROPOSAL = "application/vnd.smf.proposal+json;v=1"
PAYLOAD_REPORT = "application/vnd.smf.execution-report+json;v=1"
PAYLOAD_APPROVAL_OUTCOME = "application/vnd.smf.approval-outcome+json;v=1"
PAYLOAD_VERDICT = "application/vnd.smf.verdict+json;v=1"
PAYLOAD_ATTESTATION = "application/vnd.smf.runtime-attestation+json;v=1"
PAYLOAD_INSTANCE_PROOF = "application/vnd.smf.instance-proof+json;v=1"
PAYLOAD_ASK_AGAIN = "application/vnd.smf.approval-ask-again+json;v=1"
HEADER_INSTANCE_PROOF = "Smf-Instance-Proof"
MAX_INSTANCE_PROOF_CHARS = 2048


# --- independent helpers ------------------------------------------------------


def _check_simple(value: Any) -> None:
    """The subset where json.dumps(sort_keys=True) is the JCS form."""
    if isinstance(value, dict):
        for key, item in value.items():
            assert isinstance(key, str), key
            assert key.isascii(), key
            _check_simple(item)
    elif isinstance(value, list):
        for item in value:
            _check_simple(item)
    elif isinstance(value, str):
        assert unicodedata.is_normalized("NFC", value), value
    elif isinstance(value, bool) or value is None:
        pass
    else:
        assert isinstance(value, int), value
        assert abs(value) <= 2**53 - 1, value


def simple_canonical(value: Any) -> str:
    _check_simple(value)
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def sha(text: str | bytes) -> str:
    data = text.encode("utf-8") if isinstance(text, str) else text
    return "sha256:" + hashlib.sha256(data).hexdigest()


def nfc_tree(value: Any) -> Any:
    if isinstance(value, str):
        return unicodedata.normalize("NFC", value)
    if isinstance(value, dict):
        return {nfc_tree(k): nfc_tree(v) for k, v in value.items()}
    if isinstance(value, list):
        return [nfc_tree(v) for v in value]
    return value


def _pem(seed_hex: str) -> str:
    der = PKCS8_PREFIX + bytes.fromhex(seed_hex)
    body = base64.b64encode(der).decode("ascii")
    return f"-----BEGIN PRIVATE KEY-----\n{body}\n-----END PRIVATE KEY-----\n"


def openssl_public(seed_hex: str) -> bytes:
    with tempfile.TemporaryDirectory() as tmp:
        key = Path(tmp) / "k.pem"
        key.write_text(_pem(seed_hex))
        der = subprocess.run(
            ["openssl", "pkey", "-in", str(key), "-pubout", "-outform", "DER"],
            capture_output=True,
            check=True,
        ).stdout
    return der[-32:]


def openssl_sign(seed_hex: str, message: bytes) -> bytes:
    with tempfile.TemporaryDirectory() as tmp:
        key = Path(tmp) / "k.pem"
        msg = Path(tmp) / "m.bin"
        key.write_text(_pem(seed_hex))
        msg.write_bytes(message)
        return subprocess.run(
            ["openssl", "pkeyutl", "-sign", "-inkey", str(key), "-rawin", "-in", str(msg)],
            capture_output=True,
            check=True,
        ).stdout


def pae(payload_type: str, payload: bytes) -> bytes:
    t = payload_type.encode("utf-8")
    return b"DSSEv1 %d %s %d %s" % (len(t), t, len(payload), payload)


def key_id(public: bytes) -> str:
    return "ed25519:" + hashlib.sha256(public).hexdigest()


def envelope_text(payload: bytes, payload_type: str, signatures: list[tuple[str, str]]) -> str:
    sigs = ",".join(f'{{"keyid":"{k}","sig":"{s}"}}' for k, s in signatures)
    return (
        f'{{"payload":"{base64.b64encode(payload).decode()}",'
        f'"payloadType":"{payload_type}","signatures":[{sigs}]}}'
    )


# --- messages.json ----------------------------------------------------------------

ACTOR = {
    "domain": "litigation",
    "tenant_id": "tenant-acme",
    "organization_id": "org-acme-llp",
    "matter_id": "matter-2026-0042",
    "actor_id": "paralegal-pat",
    "actor_roles": ["paralegal"],
    "governing_laws": ["US-NY"],
}
FACTS = {
    "classification": "confidential",
    "injection_taint": "clear",
    "redaction_status": "none",
    "redaction_evidence": None,
    "legal_hold": None,
    "citation_verification": "unknown",
}
EXEC_ARGS: dict[str, Any] = {
    "command": "ls -la /srv/matters/2026-0042",
    "env": {"LANG": "C.UTF-8"},
    "timeoutSeconds": 30,
    "workdir": "/srv",
}
PROPOSAL_EXEC = {
    "schema": "smf.proposal/1",
    "proposal_id": "p-00000000000000000000000000000001",
    "runtime_id": "openclaw-demo",
    "runtime_version": "2026.9.6",
    "adapter_id": "smf-openclaw-adapter",
    "surface": "tool_call",
    "native_tool": "exec",
    "arguments": EXEC_ARGS,
    "content": "",
    "destination": {"address": "", "locality": "unknown"},
    "actor": ACTOR,
    "facts": FACTS,
    "issued_at_ms": 1767225600000,
}
# Decomposed input on purpose: e + U+0301, U+212B ANGSTROM SIGN; NFC makes U+00E9, U+00C5.
MESSAGE_TEXT = "Caf" + "e\u0301" + " \u2014 draft \u201cmotion\u201d \U0001f600 \u212b"
PROPOSAL_MESSAGE = {
    "schema": "smf.proposal/1",
    "proposal_id": "p-00000000000000000000000000000002",
    "runtime_id": "openclaw-demo",
    "runtime_version": "2026.9.6",
    "adapter_id": "smf-openclaw-adapter",
    "surface": "tool_call",
    "native_tool": "message",
    "arguments": {
        "action": "send",
        "channel": "slack",
        "message": MESSAGE_TEXT,
        "target": "#client-acme",
    },
    "content": MESSAGE_TEXT,
    "destination": {"address": "slack:#client-acme", "locality": "unknown"},
    "actor": ACTOR,
    "facts": {**FACTS, "legal_hold": False, "redaction_evidence": None},
    "issued_at_ms": 1767225600001,
}
OPERATION_HASH = sha("operation")
DECISION_ID = sha("decision")


def order_id_for(operation_hash: str, decision_id: str) -> str:
    text = simple_canonical({"operation_hash": operation_hash, "decision_id": decision_id})
    return hashlib.sha256(text.encode()).hexdigest()


def approval_id_for(decision_id: str) -> str:
    return sha(simple_canonical({"approval_for": decision_id}))


REPORT_CONFIRMED = {
    "schema": "smf.execution-report/1",
    "order_id": order_id_for(OPERATION_HASH, DECISION_ID),
    "connector_id": "openclaw-demo",
    "status": "confirmed",
    "reason_code": "executed_as_approved",
    "at_ms": 1767225601000,
    "external_ref": "call_0001",
}
REPORT_MISMATCH = {
    "schema": "smf.execution-report/1",
    "order_id": order_id_for(OPERATION_HASH, DECISION_ID),
    "connector_id": "openclaw-demo",
    "status": "ambiguous",
    "reason_code": "executed_params_mismatch",
    "at_ms": 1767225601001,
    "external_ref": None,
}


APPROVAL_ID = approval_id_for(DECISION_ID)
OTHER_DECISION_ID = sha("another decision")


def outcome_value(**changes: Any) -> dict[str, Any]:
    """A held proposal's final Verdict as the gate signs it: every field of
    ``smf_assurance.subjects.messages.Verdict`` present (``msgspec.to_builtins``), optional ones null."""
    value: dict[str, Any] = {
        "schema": "smf.verdict/1",
        "proposal_id": "",
        "outcome": "allow",
        "reason_codes": ["approved_once"],
        "decision_id": DECISION_ID,
        "operation_hash": OPERATION_HASH,
        "release_id": "release-0001",
        "order_id": None,
        "connector_id": None,
        "approval_id": APPROVAL_ID,
        "expires_at_ms": None,
        "required_roles": [],
        "evidence": [],
    }
    value.update(changes)
    return value


OUTCOME_ALLOW = outcome_value()
OUTCOME_DENY = outcome_value(outcome="deny", reason_codes=["approver_denied"])
OUTCOME_DENY_WITH_NOTE = outcome_value(
    outcome="deny",
    reason_codes=["approver_denied", "approver_denied_wrong_recipient"],
    approver_note="Wrong court.\nRefile in the Eastern District.",
)
"""Issue 23: an approver's deny with its reason code and note (present only when sent)."""


def verdict_value(**changes: Any) -> dict[str, Any]:
    """The gate's reply to PROPOSAL_EXEC on ``smf.propose`` as it signs it: every field
    of ``smf_assurance.subjects.messages.Verdict`` present, optional ones null."""
    value: dict[str, Any] = {
        "schema": "smf.verdict/1",
        "proposal_id": PROPOSAL_EXEC["proposal_id"],
        "outcome": "allow",
        "reason_codes": [],
        "decision_id": DECISION_ID,
        "operation_hash": OPERATION_HASH,
        "release_id": "release-0001",
        "order_id": None,
        "connector_id": None,
        "approval_id": None,
        "expires_at_ms": None,
        "required_roles": [],
        "evidence": [sha("evidence")],
    }
    value.update(changes)
    return value


VERDICT_ALLOW = verdict_value()
VERDICT_DENY = verdict_value(
    outcome="deny",
    reason_codes=["confidential_egress_to_public_service"],
    decision_id=None,
    operation_hash=None,
    evidence=[],
)
VERDICT_HELD = verdict_value(
    outcome="held",
    reason_codes=["attorney_approval_required_for_transmission"],
    approval_id=APPROVAL_ID,
    expires_at_ms=1767225900000,
    required_roles=["licensed_attorney"],
)


INSTANCE_ID = "i-" + "0123456789abcdef" * 2
ATTESTATION_WITHOUT_INSTANCE: dict[str, Any] = {
    "schema": "smf.runtime-attestation/1",
    "attestation_id": "a-" + "0" * 31 + "1",
    "runtime_id": "openclaw-demo",
    "runtime_version": "2026.9.6",
    "runtime_pin": "2026.9.6",
    "adapter_id": "smf-openclaw-adapter",
    "adapter_version": "0.1.0",
    "profile": "exact-hold",
    "hooks_present": ["after_tool_call", "before_tool_call"],
    "hooks_missing": [],
    "streaming": [],
    "verified_release_id": "release-0001",
    "problems": [],
    "issued_at_ms": 1767225600000,
}
"""What the OpenClaw plugin attested before issue 16: ``instance_id`` absent
(``omit_defaults``), every other field present (``verified_release_id`` may be null)."""
ATTESTATION_WITH_INSTANCE = ATTESTATION_WITHOUT_INSTANCE | {
    "attestation_id": "a-" + "0" * 31 + "2",
    "instance_id": INSTANCE_ID,
}
"""The same process naming its instance (issue 16): present when set."""
PROOF = {
    "schema": "smf.instance-proof/1",
    "runtime_id": "openclaw-demo",
    "instance_id": INSTANCE_ID,
    "issued_at_ms": 1767225600000,
}


def message_vector(name: str, kind: str, value: dict[str, Any]) -> dict[str, Any]:
    canonical = simple_canonical(nfc_tree(value))
    return {
        "name": name,
        "type": kind,
        "value": value,
        "canonical": canonical,
        "identity": sha(canonical),
    }


def signed_vector(name: str, message: dict[str, Any], payload_type: str) -> dict[str, Any]:
    payload = message["canonical"].encode("utf-8")
    signature = openssl_sign(RFC8032_TEST1["seed_hex"], pae(payload_type, payload))
    kid = key_id(bytes.fromhex(RFC8032_TEST1["public_hex"]))
    sig = base64.b64encode(signature).decode()
    return {
        "name": name,
        "message": message["name"],
        "payload_type": payload_type,
        "pae_sha256": hashlib.sha256(pae(payload_type, payload)).hexdigest(),
        "signature": sig,
        "envelope": envelope_text(payload, payload_type, [(kid, sig)]),
    }


def operation_vector() -> dict[str, Any]:
    """The envelope ``smf_assurance.core.normalize`` builds for PROPOSAL_EXEC, by hand from
    ``smf_assurance/pipeline/mappers/smf-openclaw-adapter.json`` ("exec"): ``content_arg`` command,
    no ``target_arg`` (address ""), ``Data.redaction_evidence`` omitted when None
    (``omit_defaults``), ``workflow.legal_hold`` = bool(None) = false."""
    args_hash = sha(simple_canonical(EXEC_ARGS))
    envelope: dict[str, Any] = {
        "capability": "process.execute",
        "effects": {"egress": True, "persistence": "unknown", "reversibility": "unknown"},
        "destination": {
            "channel": "unknown",
            "locality": "unknown",
            "target_identity_hash": sha(simple_canonical({"channel": "unknown", "address": ""})),
        },
        "data": {
            "classification": "confidential",
            "redaction_status": "none",
            "injection_taint": "clear",
            "content_hash": sha(EXEC_ARGS["command"]),
        },
        "professional": ACTOR,
        "workflow": {"legal_hold": False, "citation_verification": "unknown"},
        "runtime": {
            "runtime_id": "openclaw-demo",
            "runtime_version": "2026.9.6",
            "adapter_id": "smf-openclaw-adapter",
            "surface": "tool_call",
            "native_tool": "exec",
            "canonical_args_hash": args_hash,
        },
    }
    canonical = simple_canonical(envelope)
    return {
        "name": "openclaw_exec_native_call",
        "mapper": "smf-openclaw-adapter",
        "proposal": PROPOSAL_EXEC,
        "canonical_args_hash": args_hash,
        "content_hash": envelope["data"]["content_hash"],
        "envelope": envelope,
        "envelope_canonical": canonical,
        "operation_hash": sha(canonical),
    }


def _signed_text(seed_hex: str, payload: bytes, payload_type: str) -> str:
    """DSSE envelope JSON over ``payload`` signed by the key of ``seed_hex`` (OpenSSL)."""
    public = bytes.fromhex(
        RFC8032_TEST1["public_hex"]
        if seed_hex == RFC8032_TEST1["seed_hex"]
        else RFC8032_TEST2["public_hex"]
    )
    sig = base64.b64encode(openssl_sign(seed_hex, pae(payload_type, payload))).decode()
    return envelope_text(payload, payload_type, [(key_id(public), sig)])


def outcome_vectors() -> dict[str, Any]:
    """Signed approval outcomes (``smf.approval.outcome.<approval>``): the gate key is
    the test key; what a runtime must act on, and everything it must ignore, each
    with the error class both ``smf_assurance.subjects.approvals.open_outcome`` and
    ``smf_assurance/adapters/openclaw/src/contract/outcome.ts`` raise."""
    gate = RFC8032_TEST1["seed_hex"]
    other = RFC8032_TEST2["seed_hex"]

    def signed(
        value: dict[str, Any], seed: str = gate, ptype: str = PAYLOAD_APPROVAL_OUTCOME
    ) -> str:
        return _signed_text(seed, simple_canonical(value).encode(), ptype)

    allow_text = simple_canonical(OUTCOME_ALLOW)
    deny_envelope = json.loads(signed(OUTCOME_DENY))
    edited = dict(deny_envelope, payload=base64.b64encode(allow_text.encode()).decode())
    # Keys out of order, and a duplicate key whose LAST value says allow: both are
    # signed by the gate key, neither is the canonical form the gate writes.
    unsorted = json.dumps(OUTCOME_ALLOW, separators=(",", ":"))
    assert unsorted != allow_text
    duplicate = allow_text.replace('"outcome":"allow"', '"outcome":"deny","outcome":"allow"')
    other_approval = outcome_value(
        decision_id=OTHER_DECISION_ID, approval_id=approval_id_for(OTHER_DECISION_ID)
    )
    cases: list[dict[str, Any]] = [
        {"name": "gate_allow", "envelope": signed(OUTCOME_ALLOW), "outcome": "allow"},
        {"name": "gate_deny", "envelope": signed(OUTCOME_DENY), "outcome": "deny"},
        {
            "name": "gate_deny_with_reason_and_note",
            "envelope": signed(OUTCOME_DENY_WITH_NOTE),
            "outcome": "deny",
            "reason_codes": OUTCOME_DENY_WITH_NOTE["reason_codes"],
            "approver_note": OUTCOME_DENY_WITH_NOTE["approver_note"],
        },
        {
            "name": "gate_deny_with_a_note_that_is_not_plain_text",
            "envelope": signed(dict(OUTCOME_DENY_WITH_NOTE, approver_note="ok\u001b[2J")),
            "error": "MalformedPayloadError",
        },
        {"name": "unsigned_allow", "envelope": allow_text, "error": "MalformedEnvelopeError"},
        {
            "name": "allow_signed_by_a_key_that_is_not_the_gate",
            "envelope": signed(OUTCOME_ALLOW, other),
            "error": "UnknownSignerError",
        },
        {
            "name": "allow_signed_by_the_gate_for_another_purpose",
            "envelope": signed(OUTCOME_ALLOW, gate, PAYLOAD_REPORT),
            "error": "PayloadTypeMismatchError",
        },
        {
            "name": "gate_deny_edited_into_an_allow",
            "envelope": json.dumps(edited, separators=(",", ":")),
            "error": "BadSignatureError",
        },
        {
            "name": "gate_allow_of_another_approval",
            "envelope": signed(other_approval),
            "error": "OutcomeMismatchError",
        },
        {
            "name": "gate_allow_naming_this_approval_with_another_decision",
            "envelope": signed(outcome_value(decision_id=OTHER_DECISION_ID)),
            "error": "OutcomeMismatchError",
        },
        {
            "name": "gate_allow_of_another_operation",
            "envelope": signed(outcome_value(operation_hash=sha("another operation"))),
            "error": "OutcomeMismatchError",
        },
        {
            "name": "held_is_not_an_outcome",
            "envelope": signed(outcome_value(outcome="held")),
            "error": "OutcomeMismatchError",
        },
        {
            "name": "gate_signed_payload_not_canonical",
            "envelope": _signed_text(gate, unsorted.encode(), PAYLOAD_APPROVAL_OUTCOME),
            "error": "MalformedPayloadError",
        },
        {
            "name": "gate_signed_payload_duplicate_key",
            "envelope": _signed_text(gate, duplicate.encode(), PAYLOAD_APPROVAL_OUTCOME),
            "error": "MalformedPayloadError",
        },
        {
            # The same Verdict to msgspec, but not the bytes the gate signs (every field).
            "name": "gate_signed_outcome_without_its_empty_fields",
            "envelope": signed({k: v for k, v in OUTCOME_ALLOW.items() if v not in (None, [])}),
            "error": "MalformedPayloadError",
        },
    ]
    return {
        "payload_type": PAYLOAD_APPROVAL_OUTCOME,
        "gate_key": "test_key",
        "expected": {
            "approval_id": APPROVAL_ID,
            "decision_id": DECISION_ID,
            "operation_hash": OPERATION_HASH,
        },
        "cases": cases,
    }


def ask_again_vectors() -> dict[str, Any]:
    """Gate-signed notices that an expired approval is asked for again
    (``smf.approval.again.<approval>``, issue 23): the one a runtime holding that
    proposal acts on, and each it must ignore, with the error class
    ``smf_assurance.subjects.approvals.open_ask_again`` raises. The runtime proposes
    anew only on a notice that verifies; which proposal it holds for the approval is
    its own check (the operation hash), after this one."""
    gate = RFC8032_TEST1["seed_hex"]
    other = RFC8032_TEST2["seed_hex"]
    notice = {
        "schema": "smf.approval-ask-again/1",
        "approval_id": APPROVAL_ID,
        "decision_id": DECISION_ID,
        "operation_hash": OPERATION_HASH,
        "asked_at_ms": 1767225600000,
    }

    def signed(value: dict[str, Any], seed: str = gate, ptype: str = PAYLOAD_ASK_AGAIN) -> str:
        return _signed_text(seed, simple_canonical(value).encode(), ptype)

    text = simple_canonical(notice)
    envelope = json.loads(signed(notice))
    later = simple_canonical(dict(notice, asked_at_ms=1767225700000))
    edited = dict(envelope, payload=base64.b64encode(later.encode()).decode())
    other_approval = dict(
        notice, decision_id=OTHER_DECISION_ID, approval_id=approval_id_for(OTHER_DECISION_ID)
    )
    cases: list[dict[str, Any]] = [
        {"name": "gate_notice", "envelope": signed(notice), "asked_at_ms": notice["asked_at_ms"]},
        {"name": "unsigned_notice", "envelope": text, "error": "MalformedEnvelopeError"},
        {
            "name": "notice_signed_by_a_key_that_is_not_the_gate",
            "envelope": signed(notice, other),
            "error": "UnknownSignerError",
        },
        {
            "name": "outcome_signature_offered_as_a_notice",
            "envelope": signed(notice, gate, PAYLOAD_APPROVAL_OUTCOME),
            "error": "PayloadTypeMismatchError",
        },
        {
            "name": "gate_notice_edited",
            "envelope": json.dumps(edited, separators=(",", ":")),
            "error": "BadSignatureError",
        },
        {
            "name": "gate_notice_of_another_approval",
            "envelope": signed(other_approval),
            "error": "OutcomeMismatchError",
        },
        {
            "name": "gate_notice_naming_this_approval_with_another_decision",
            "envelope": signed(dict(notice, decision_id=OTHER_DECISION_ID)),
            "error": "OutcomeMismatchError",
        },
        {
            "name": "gate_notice_with_an_unknown_field",
            "envelope": signed(dict(notice, revive=True)),
            "error": "MalformedPayloadError",
        },
        {
            "name": "gate_notice_of_another_schema",
            "envelope": signed(dict(notice, schema="smf.approval-ask-again/2")),
            "error": "MalformedPayloadError",
        },
    ]
    return {
        "payload_type": PAYLOAD_ASK_AGAIN,
        "gate_key": "test_key",
        "expected": {"approval_id": APPROVAL_ID, "operation_hash": OPERATION_HASH},
        "cases": cases,
    }


def signed_verdict_vectors() -> dict[str, Any]:
    """Replies on ``smf.propose``: the gate key is the test key; the Verdict a runtime
    may act on and every reply it must turn into a deny, each with the error class
    both ``smf_assurance.subjects.verdicts.open_verdict`` and ``smf_assurance/adapters/openclaw/src/contract/verdicts.ts``
    ``openVerdict`` raise and the reason code both clients deny with
    (``smf_assurance/adapters/client.py`` ``ProposalClient.send``, ``readVerdictReply``)."""
    gate = RFC8032_TEST1["seed_hex"]
    other = RFC8032_TEST2["seed_hex"]
    not_signed = "verdict_not_signed_by_gate"
    unreadable = "unreadable_verdict"

    def signed(value: dict[str, Any], seed: str = gate, ptype: str = PAYLOAD_VERDICT) -> str:
        return _signed_text(seed, simple_canonical(value).encode(), ptype)

    allow_text = simple_canonical(VERDICT_ALLOW)
    deny_envelope = json.loads(signed(VERDICT_DENY))
    edited_deny = simple_canonical(dict(VERDICT_DENY, outcome="allow"))
    edited = dict(deny_envelope, payload=base64.b64encode(edited_deny.encode()).decode())
    stripped = dict(json.loads(signed(VERDICT_ALLOW)), signatures=[])
    unsorted = json.dumps(VERDICT_ALLOW, separators=(",", ":"))
    assert unsorted != allow_text
    duplicate = allow_text.replace('"outcome":"allow"', '"outcome":"deny","outcome":"allow"')
    # Only the required fields: the same Verdict to msgspec, not the bytes the gate signs.
    partial = simple_canonical(
        {k: VERDICT_DENY[k] for k in ("schema", "proposal_id", "outcome", "reason_codes")}
    )
    cases: list[dict[str, Any]] = [
        {"name": "gate_allow", "envelope": signed(VERDICT_ALLOW), "outcome": "allow"},
        {"name": "gate_deny", "envelope": signed(VERDICT_DENY), "outcome": "deny"},
        {"name": "gate_held", "envelope": signed(VERDICT_HELD), "outcome": "held"},
        {
            "name": "unsigned_allow",
            "envelope": allow_text,
            "error": "MalformedEnvelopeError",
            "reason_code": not_signed,
        },
        {
            "name": "allow_signed_by_a_key_that_is_not_the_gate",
            "envelope": signed(VERDICT_ALLOW, other),
            "error": "UnknownSignerError",
            "reason_code": not_signed,
        },
        {
            "name": "allow_signed_by_the_gate_as_an_approval_outcome",
            "envelope": signed(VERDICT_ALLOW, gate, PAYLOAD_APPROVAL_OUTCOME),
            "error": "PayloadTypeMismatchError",
            "reason_code": not_signed,
        },
        {
            "name": "gate_deny_edited_into_an_allow",
            "envelope": json.dumps(edited, separators=(",", ":")),
            "error": "BadSignatureError",
            "reason_code": not_signed,
        },
        {
            "name": "gate_allow_signatures_stripped",
            "envelope": json.dumps(stripped, separators=(",", ":")),
            "error": "UnknownSignerError",
            "reason_code": not_signed,
        },
        {
            "name": "gate_allow_for_another_proposal",
            "envelope": signed(VERDICT_ALLOW | {"proposal_id": PROPOSAL_MESSAGE["proposal_id"]}),
            "error": "VerdictMismatchError",
            "reason_code": "verdict_for_another_proposal",
        },
        {
            "name": "gate_signed_payload_not_canonical",
            "envelope": _signed_text(gate, unsorted.encode(), PAYLOAD_VERDICT),
            "error": "MalformedPayloadError",
            "reason_code": unreadable,
        },
        {
            "name": "gate_signed_payload_duplicate_key",
            "envelope": _signed_text(gate, duplicate.encode(), PAYLOAD_VERDICT),
            "error": "MalformedPayloadError",
            "reason_code": unreadable,
        },
        {
            "name": "gate_signed_verdict_without_its_optional_fields",
            "envelope": _signed_text(gate, partial.encode(), PAYLOAD_VERDICT),
            "error": "MalformedPayloadError",
            "reason_code": unreadable,
        },
        {
            "name": "gate_signed_payload_not_a_verdict",
            "envelope": signed(REPORT_CONFIRMED),
            "error": "MalformedPayloadError",
            "reason_code": unreadable,
        },
    ]
    return {
        "payload_type": PAYLOAD_VERDICT,
        "gate_key": "test_key",
        "proposal_id": PROPOSAL_EXEC["proposal_id"],
        "cases": cases,
    }


def _base64url(raw: bytes) -> str:
    """Unpadded base64url (RFC 4648 section 5, padding dropped): the header's spelling."""
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def instance_proof_vectors() -> dict[str, Any]:
    """The header ``Smf-Instance-Proof`` (issue 16): unpadded base64url of the DSSE
    envelope JSON of the canonical InstanceProof, signed with the runtime key (here
    the test key). ``seal``: what ``smf_assurance.subjects.model_gateway.seal_instance_proof`` and
    ``smf_assurance/adapters/openclaw/src/contract/model_gateway.ts`` ``sealInstanceProof`` write
    for that key, payload and time, byte for byte. ``open``: header values opened
    with the test key as the only runtime key by ``open_instance_proof`` and
    ``openInstanceProof``: the proof, or the exact error class both raise."""
    runtime = RFC8032_TEST1["seed_hex"]
    other = RFC8032_TEST2["seed_hex"]

    def sealed(
        value: dict[str, Any], seed: str = runtime, ptype: str = PAYLOAD_INSTANCE_PROOF
    ) -> str:
        return _base64url(_signed_text(seed, simple_canonical(value).encode(), ptype).encode())

    def seal_case(name: str, value: dict[str, Any]) -> dict[str, Any]:
        canonical = simple_canonical(value)
        envelope = _signed_text(runtime, canonical.encode(), PAYLOAD_INSTANCE_PROOF)
        return {
            "name": name,
            "proof": value,
            "canonical": canonical,
            "envelope": envelope,
            "sealed": _base64url(envelope.encode()),
        }

    messages = [{"role": "user", "content": "Caf\u00e9: file the memo."}]
    digest = (
        "sha256:" + hashlib.sha256(simple_canonical({"messages": messages}).encode()).hexdigest()
    )
    seal = [
        seal_case("openclaw_process", PROOF),
        # issue 36: one request's proof (a nonce; the digest of its messages)
        seal_case(
            "bound_to_one_request",
            PROOF | {"nonce": "0f" * 16, "request_digest": digest},
        ),
        seal_case(
            "latest_safe_time",
            PROOF
            | {
                "runtime_id": "hermes-demo",
                "instance_id": "i-" + "f" * 32,
                "issued_at_ms": 2**53 - 1,
            },
        ),
    ]
    good = seal[0]["sealed"]
    envelope = json.loads(seal[0]["envelope"])
    # A character of the standard alphabet: Python's decoder reads "+" as "-" would be
    # read, so only the one-spelling check (re-encode and compare) refuses it.
    standard = good[:10] + "+" + good[11:]
    assert standard != good
    edited_payload = simple_canonical(PROOF | {"instance_id": "i-" + "e" * 32})
    edited = dict(envelope, payload=base64.b64encode(edited_payload.encode()).decode())
    unsorted = json.dumps(PROOF, separators=(",", ":"))
    assert unsorted != simple_canonical(PROOF)
    malformed = "MalformedEnvelopeError"
    opened: list[dict[str, Any]] = [
        {"name": "sealed_by_the_runtime", "sealed": good, "proof": PROOF},
        {"name": "padded", "sealed": good + "=" * (-len(good) % 4 or 4), "error": malformed},
        {"name": "standard_alphabet_character", "sealed": standard, "error": malformed},
        {"name": "truncated", "sealed": good[:-8], "error": malformed},
        {"name": "empty", "sealed": "", "error": malformed},
        {"name": "too_long", "sealed": "A" * (MAX_INSTANCE_PROOF_CHARS + 1), "error": malformed},
        {"name": "not_base64url", "sealed": "not a proof!", "error": malformed},
        {
            "name": "signed_by_a_key_that_is_not_a_runtime_key",
            "sealed": sealed(PROOF, other),
            "error": "UnknownSignerError",
        },
        {
            "name": "signed_by_the_runtime_for_another_purpose",
            "sealed": sealed(PROOF, runtime, PAYLOAD_ATTESTATION),
            "error": "PayloadTypeMismatchError",
        },
        {
            "name": "another_instance_edited_in",
            "sealed": _base64url(json.dumps(edited, separators=(",", ":")).encode()),
            "error": "BadSignatureError",
        },
        {
            "name": "signed_payload_not_canonical",
            "sealed": _base64url(
                _signed_text(runtime, unsorted.encode(), PAYLOAD_INSTANCE_PROOF).encode()
            ),
            "error": "MalformedPayloadError",
        },
        {
            "name": "signed_payload_not_an_instance_proof",
            "sealed": sealed(ATTESTATION_WITH_INSTANCE),
            "error": "MalformedPayloadError",
        },
        {
            "name": "signed_payload_names_no_instance_id",
            "sealed": sealed(PROOF | {"instance_id": "i-not-hex"}),
            "error": "MalformedPayloadError",
        },
        {
            "name": "signed_payload_nonce_not_hex",
            "sealed": sealed(PROOF | {"nonce": "not-a-nonce"}),
            "error": "MalformedPayloadError",
        },
    ]
    return {
        "payload_type": PAYLOAD_INSTANCE_PROOF,
        "header": HEADER_INSTANCE_PROOF,
        "max_chars": MAX_INSTANCE_PROOF_CHARS,
        "runtime_key": "test_key",
        "seal": seal,
        "open": opened,
        # what an adapter and the gateway compute over one request's messages
        "request_digests": [{"messages": messages, "digest": digest}],
    }


def verify_vectors(signed: dict[str, Any]) -> list[dict[str, Any]]:
    """DSSE envelopes both implementations must accept, or refuse with the named error."""
    good = json.loads(signed["envelope"])
    kid1 = key_id(bytes.fromhex(RFC8032_TEST1["public_hex"]))
    kid2 = key_id(bytes.fromhex(RFC8032_TEST2["public_hex"]))
    payload = base64.b64decode(good["payload"])
    sig = good["signatures"][0]["sig"]

    def env(**changes: Any) -> str:
        doc = dict(good, **changes)
        return json.dumps(doc, separators=(",", ":"))

    tampered = base64.b64encode(payload.replace(b"ls -la", b"rm -rf")).decode()
    raw_sig = base64.b64decode(sig)
    url_safe_sig = base64.urlsafe_b64encode(raw_sig).decode()
    # A signature spelled with a non-zero pad bit: decodes to the same bytes, not canonical.
    sloppy = sig[:-2] + chr(ord(sig[-2]) + 1) + sig[-1] if sig.endswith("=") else sig
    second = base64.b64encode(
        openssl_sign(RFC8032_TEST2["seed_hex"], pae(PAYLOAD_PROPOSAL, payload))
    ).decode()
    rows: list[dict[str, Any]] = [
        {"name": "valid", "envelope": signed["envelope"], "result": "ok"},
        {
            "name": "valid_url_safe_signature",
            "envelope": env(signatures=[{"keyid": kid1, "sig": url_safe_sig}]),
            "result": "ok" if url_safe_sig != sig else "skip",
        },
        {
            "name": "tampered_payload",
            "envelope": env(payload=tampered),
            "error": "BadSignatureError",
        },
        {
            "name": "payload_type_changed",
            "envelope": env(payloadType=PAYLOAD_REPORT),
            "error": "BadSignatureError",
        },
        {
            "name": "signed_for_another_purpose",
            "envelope": envelope_text(
                payload,
                PAYLOAD_REPORT,
                [
                    (
                        kid1,
                        base64.b64encode(
                            openssl_sign(RFC8032_TEST1["seed_hex"], pae(PAYLOAD_REPORT, payload))
                        ).decode(),
                    )
                ],
            ),
            "error": "PayloadTypeMismatchError",
        },
        {
            "name": "unknown_signer",
            "envelope": env(signatures=[{"keyid": kid2, "sig": second}]),
            "error": "UnknownSignerError",
        },
        {
            "name": "trusted_keyid_wrong_key",
            "envelope": env(signatures=[{"keyid": kid1, "sig": second}]),
            "error": "BadSignatureError",
        },
        {
            "name": "no_signatures",
            "envelope": env(signatures=[]),
            "error": "UnknownSignerError",
        },
        {
            "name": "short_signature",
            "envelope": env(
                signatures=[{"keyid": kid1, "sig": base64.b64encode(raw_sig[:63]).decode()}]
            ),
            "error": "MalformedEnvelopeError",
        },
        {
            "name": "signature_without_padding",
            "envelope": env(signatures=[{"keyid": kid1, "sig": sig.rstrip("=")}]),
            "error": "MalformedEnvelopeError",
        },
        {
            "name": "payload_not_base64",
            "envelope": env(payload="%%%%"),
            "error": "MalformedEnvelopeError",
        },
        {
            "name": "mixed_base64_alphabets",
            "envelope": env(payload="ab+-"),
            "error": "MalformedEnvelopeError",
        },
        {
            "name": "unknown_envelope_field",
            "envelope": signed["envelope"][:-1] + ',"extra":1}',
            "error": "MalformedEnvelopeError",
        },
        {
            "name": "unknown_signature_field",
            "envelope": env(signatures=[{"keyid": kid1, "sig": sig, "cert": "x"}]),
            "error": "MalformedEnvelopeError",
        },
        {"name": "not_json", "envelope": "{", "error": "MalformedEnvelopeError"},
    ]
    if sloppy != sig:
        rows.append(
            {
                "name": "signature_non_canonical_pad_bits",
                "envelope": env(signatures=[{"keyid": kid1, "sig": sloppy}]),
                "error": "MalformedEnvelopeError",
            }
        )
    return [r for r in rows if r.get("result") != "skip"]


VERDICTS: list[dict[str, Any]] = [
    {
        "name": "allow_as_the_gate_writes_it",
        "input": '{"schema":"smf.verdict/1","proposal_id":"p-1","outcome":"allow","reason_codes":["internal_read"],'
        '"decision_id":"'
        + DECISION_ID
        + '","operation_hash":"'
        + OPERATION_HASH
        + '","release_id":"r-1",'
        '"order_id":null,"connector_id":null,"approval_id":null,"expires_at_ms":null,"required_roles":[],'
        '"evidence":["' + sha("evidence") + '"]}',
        "valid": True,
        "outcome": "allow",
    },
    {
        "name": "deny_minimal",
        "input": '{"schema":"smf.verdict/1","proposal_id":"p-1","outcome":"deny","reason_codes":["gate_unreachable"]}',
        "valid": True,
        "outcome": "deny",
    },
    {
        "name": "held_with_approval",
        "input": '{"schema":"smf.verdict/1","proposal_id":"p-1","outcome":"held","reason_codes":'
        '["attorney_approval_required_for_transmission"],"approval_id":"'
        + approval_id_for(DECISION_ID)
        + '",'
        '"decision_id":"'
        + DECISION_ID
        + '","expires_at_ms":1767225900000,"required_roles":["licensed_attorney"]}',
        "valid": True,
        "outcome": "held",
    },
    {
        "name": "duplicate_key_last_wins",
        "input": '{"schema":"smf.verdict/1","proposal_id":"p-1","outcome":"deny","reason_codes":["x"],"outcome":"allow"}',
        "valid": True,
        "outcome": "allow",
        "note": "msgspec and the TypeScript reader both take the LAST value: verdicts are unsigned, see README.md",
    },
    {
        "name": "unknown_field",
        "input": '{"schema":"smf.verdict/1","proposal_id":"p","outcome":"deny","reason_codes":["x"],"extra":1}',
        "valid": False,
    },
    {
        "name": "wrong_schema",
        "input": '{"schema":"smf.verdict/2","proposal_id":"p","outcome":"deny","reason_codes":["x"]}',
        "valid": False,
    },
    {
        "name": "outcome_outside_vocabulary",
        "input": '{"schema":"smf.verdict/1","proposal_id":"p","outcome":"maybe","reason_codes":["x"]}',
        "valid": False,
    },
    {
        "name": "reason_codes_missing",
        "input": '{"schema":"smf.verdict/1","proposal_id":"p","outcome":"deny"}',
        "valid": False,
    },
    {
        "name": "reason_code_not_a_code",
        "input": '{"schema":"smf.verdict/1","proposal_id":"p","outcome":"deny","reason_codes":["Bad Code"]}',
        "valid": False,
    },
    {
        "name": "expiry_float",
        "input": '{"schema":"smf.verdict/1","proposal_id":"p","outcome":"held","reason_codes":["x"],"expires_at_ms":1.0}',
        "valid": False,
    },
    {
        "name": "expiry_text",
        "input": '{"schema":"smf.verdict/1","proposal_id":"p","outcome":"held","reason_codes":["x"],"expires_at_ms":"1"}',
        "valid": False,
    },
    {
        "name": "roles_null",
        "input": '{"schema":"smf.verdict/1","proposal_id":"p","outcome":"deny","reason_codes":["x"],"required_roles":null}',
        "valid": False,
    },
    {
        "name": "decision_id_number",
        "input": '{"schema":"smf.verdict/1","proposal_id":"p","outcome":"deny","reason_codes":["x"],"decision_id":5}',
        "valid": False,
    },
    {
        "name": "proposal_id_missing",
        "input": '{"schema":"smf.verdict/1","outcome":"deny","reason_codes":["x"]}',
        "valid": False,
    },
    {"name": "not_an_object", "input": "[]", "valid": False},
    {"name": "not_json", "input": "{", "valid": False},
]


def messages() -> dict[str, Any]:
    public1 = openssl_public(RFC8032_TEST1["seed_hex"])
    public2 = openssl_public(RFC8032_TEST2["seed_hex"])
    assert public1.hex() == RFC8032_TEST1["public_hex"], "OpenSSL disagrees with RFC 8032 TEST 1"
    assert public2.hex() == RFC8032_TEST2["public_hex"], "OpenSSL disagrees with RFC 8032 TEST 2"
    rfc_sig = openssl_sign(RFC8032_TEST2["seed_hex"], bytes.fromhex(RFC8032_TEST2["message_hex"]))
    assert rfc_sig.hex() == RFC8032_TEST2["signature_hex"], "OpenSSL disagrees with RFC 8032 TEST 2"

    proposal_exec = message_vector("proposal_exec", "Proposal", PROPOSAL_EXEC)
    proposal_message = message_vector("proposal_message_unicode", "Proposal", PROPOSAL_MESSAGE)
    report_ok = message_vector("execution_report_confirmed", "ExecutionReport", REPORT_CONFIRMED)
    report_bad = message_vector("execution_report_mismatch", "ExecutionReport", REPORT_MISMATCH)
    outcome_allow = message_vector("approval_outcome_allow", "Verdict", OUTCOME_ALLOW)
    verdict_allow = message_vector("verdict_allow", "Verdict", VERDICT_ALLOW)
    attestation = message_vector(
        "runtime_attestation_with_instance", "RuntimeAttestation", ATTESTATION_WITH_INSTANCE
    )
    attestation_without = message_vector(
        "runtime_attestation_without_instance", "RuntimeAttestation", ATTESTATION_WITHOUT_INSTANCE
    )
    signed_exec = signed_vector("proposal_exec_signed", proposal_exec, PAYLOAD_PROPOSAL)
    return {
        "schema": "smf.vectors.messages/1",
        "description": "Wire messages of the OpenClaw adapter: canonical bytes, identities, DSSE envelopes "
        "signed with a fixed key, verdict decoding, the operation hash of a native call, gate-signed "
        "approval outcomes with what a runtime must ignore, runtime attestations with and without an "
        "instance id, and the instance proof header. See README.md.",
        "test_key": {
            "source": "RFC 8032 section 7.1 TEST 1",
            "seed_hex": RFC8032_TEST1["seed_hex"],
            "public_hex": RFC8032_TEST1["public_hex"],
            "key_id": key_id(public1),
        },
        "other_key": {
            "source": "RFC 8032 section 7.1 TEST 2",
            "seed_hex": RFC8032_TEST2["seed_hex"],
            "public_hex": RFC8032_TEST2["public_hex"],
            "key_id": key_id(public2),
        },
        "ed25519": [
            {
                "name": "rfc8032_test2",
                "seed_hex": RFC8032_TEST2["seed_hex"],
                "message_hex": RFC8032_TEST2["message_hex"],
                "signature_hex": RFC8032_TEST2["signature_hex"],
            }
        ],
        "messages": [
            proposal_exec,
            proposal_message,
            report_ok,
            report_bad,
            outcome_allow,
            verdict_allow,
            attestation,
            attestation_without,
        ],
        "envelopes": [
            signed_exec,
            signed_vector("proposal_message_signed", proposal_message, PAYLOAD_PROPOSAL),
            signed_vector("execution_report_signed", report_ok, PAYLOAD_REPORT),
            signed_vector("approval_outcome_signed", outcome_allow, PAYLOAD_APPROVAL_OUTCOME),
            signed_vector("verdict_signed", verdict_allow, PAYLOAD_VERDICT),
            signed_vector("runtime_attestation_signed", attestation, PAYLOAD_ATTESTATION),
        ],
        "verify": verify_vectors(signed_exec),
        "identities": [
            {
                "name": "order_id_for",
                "operation_hash": OPERATION_HASH,
                "decision_id": DECISION_ID,
                "expected": order_id_for(OPERATION_HASH, DECISION_ID),
            },
            {
                "name": "approval_id_for",
                "decision_id": DECISION_ID,
                "expected": approval_id_for(DECISION_ID),
            },
            {
                "name": "content_hash_nfc",
                "text": MESSAGE_TEXT,
                "expected": sha(unicodedata.normalize("NFC", MESSAGE_TEXT)),
            },
        ],
        "operations": [operation_vector()],
        "verdicts": VERDICTS,
        "outcomes": outcome_vectors(),
        "ask_again": ask_again_vectors(),
        "signed_verdicts": signed_verdict_vectors(),
        "instance_proofs": instance_proof_vectors(),
    }


# --- canonical_more.json -------------------------------------------------------------

ENCODE: list[tuple[str, str, str | None, str]] = [
    # name, input JSON text, expected canonical text (None: error), note or reason
    (
        "astral_key_sorts_before_halfwidth",
        '{"\\uff61":1,"\\ud800\\udc00":2}',
        '{"\U00010000":2,"\uff61":1}',
        "U+10000 is D800 DC00 in UTF-16, below U+FF61; code-point order is the reverse",
    ),
    (
        "noncharacter_key_after_astral",
        '{"\\uffff":1,"\\ud83d\\ude00":2}',
        '{"\U0001f600":2,"\uffff":1}',
        "U+FFFF (a noncharacter, unassigned in every version) is emitted literally and sorts after D83D",
    ),
    ("max_code_point_literal", '"\\udbff\\udfff"', '"\U0010ffff"', "U+10FFFF as four UTF-8 bytes"),
    (
        "escaped_surrogate_pair_upper_case_hex",
        '"\\uD83D\\uDE00"',
        '"\U0001f600"',
        "upper-case hex in the input is fine",
    ),
    (
        "combining_marks_reordered",
        '"a\\u0307\\u0323"',
        '"\u1ea1\u0307"',
        "canonical ordering puts U+0323 (ccc 220) before U+0307 (ccc 230), then a+U+0323 composes to U+1EA1",
    ),
    (
        "combining_marks_already_ordered",
        '"a\\u0323\\u0307"',
        '"\u1ea1\u0307"',
        "same bytes as the reordered input",
    ),
    ("hangul_lvt", '"\\u1100\\u1161\\u11a8"', '"\uac01"', "L+V+T jamo compose to U+AC01"),
    (
        "nfc_changes_key_order",
        '{"A\\u030a":1,"B":2}',
        '{"B":2,"\u00c5":1}',
        "A+U+030A sorts before B, but its NFC U+00C5 sorts after",
    ),
    (
        "nested_lists_of_objects",
        '[[{"b":1,"a":[{"d":2,"c":[]}]}],[],[[[]]]]',
        '[[{"a":[{"c":[],"d":2}],"b":1}],[],[[[]]]]',
        "",
    ),
    (
        "control_and_empty_keys",
        '{"\\u0001":1,"":2," ":3}',
        '{"":2,"\\u0001":1," ":3}',
        "U+0001 escaped in a key too",
    ),
    (
        "quote_and_backslash_keys",
        '{"a\\\\b":2,"a\\"b":1}',
        '{"a\\"b":1,"a\\\\b":2}',
        "0x22 sorts before 0x5C",
    ),
    (
        "bom_and_zero_width_literal",
        '"\\ufeff\\u200b"',
        '"\ufeff\u200b"',
        "U+FEFF and U+200B inside a string are literal UTF-8",
    ),
    ("private_use_keys_ordered", '{"\\ue001":1,"\\ue000":2}', '{"\ue000":2,"\ue001":1}', ""),
    (
        "integer_forms",
        "[0,-0,9007199254740991,-1]",
        "[0,0,9007199254740991,-1]",
        "-0 inside an array is 0",
    ),
    (
        "mixed_unicode_text",
        '"Zoe\\u0308 \\u2014 \\u201cq\\u201d \\u2603 \\ud834\\udd1e"',
        '"Zo\u00eb \u2014 \u201cq\u201d \u2603 \U0001d11e"',
        "",
    ),
    (
        "nesting_at_limit_mixed",
        '[{"a":' * 32 + "0" + "}]" * 32,
        '[{"a":' * 32 + "0" + "}]" * 32,
        "32 arrays and 32 objects alternate: depth 64",
    ),
    ("float_negative_zero", "-0.0", None, "float syntax"),
    ("exponent_upper_case", "1E2", None, "float syntax"),
    ("exponent_negative", "1e-2", None, "float syntax"),
    ("fraction_deep_inside", '{"a":{"b":[1,2,3.25]}}', None, "float"),
    ("leading_plus", "+1", None, "not JSON"),
    ("leading_zero_negative", "-01", None, "not JSON"),
    ("minus_alone", "-", None, "not JSON"),
    ("trailing_comma_array", "[1,]", None, "not JSON"),
    ("trailing_comma_object", '{"a":1,}', None, "not JSON"),
    ("single_quotes", "{'a':1}", None, "not JSON"),
    ("unquoted_key", "{a:1}", None, "not JSON"),
    ("comment", "[1/*x*/]", None, "not JSON"),
    ("raw_control_character_in_string", '"a\u0001b"', None, "not JSON: raw U+0001 in a string"),
    ("raw_tab_in_string", '"\t"', None, "not JSON: raw tab in a string"),
    ("reversed_surrogate_pair", '"\\ude00\\ud83d"', None, "lone surrogates"),
    ("high_surrogate_then_ascii", '"\\ud83dx"', None, "lone surrogate"),
    ("trailing_garbage", "{} x", None, "not JSON"),
    ("empty_text", "", None, "not JSON"),
    ("hex_number", "0x10", None, "not JSON"),
    ("negative_infinity", "-Infinity", None, "not an integer"),
    ("nan_in_object", '{"a":NaN}', None, "not an integer"),
    (
        "unsafe_negative_in_array",
        "[-9007199254740992]",
        None,
        "integer outside the I-JSON safe range",
    ),
    (
        "duplicate_after_nfc_nested",
        '{"x":{"\\u00c5":1,"A\\u030a":2}}',
        None,
        "duplicate key after NFC",
    ),
    (
        "duplicate_after_nfc_angstrom_sign",
        '{"\\u212b":1,"\\u00c5":2}',
        None,
        "U+212B normalizes to U+00C5",
    ),
    ("lone_surrogate_nested", '["ok",["\\ud800"]]', None, "lone surrogate"),
    ("nesting_too_deep_mixed", '[{"a":' * 32 + "[0]" + "}]" * 32, None, "depth 65"),
    ("bad_escape", '"\\x41"', None, "not JSON"),
    ("short_unicode_escape", '"\\u12"', None, "not JSON"),
    ("unterminated_string", '"abc', None, "not JSON"),
]

VERIFY: list[tuple[str, str, bool, str]] = [
    ("canonical_astral_key_first", '{"\U00010000":2,"\uff61":1}', True, ""),
    (
        "halfwidth_key_first",
        '{"\uff61":1,"\U00010000":2}',
        False,
        "keys in code-point order, not UTF-16 order",
    ),
    ("canonical_control_key", '{"":2,"\\u0001":1," ":3}', True, ""),
    ("upper_case_escape_in_key", '{"\\u001F":1}', False, "escapes use lower-case hex"),
    ("nfd_key", '{"A\u030a":1}', False, "keys must be NFC"),
    ("whitespace_in_array", "[1, 2]", False, "insignificant whitespace"),
    ("byte_order_mark", "\ufeff{}", False, "a BOM is not canonical"),
    (
        "literal_lone_surrogate_in_text",
        '"\ud800"',
        False,
        "text holding a lone surrogate has no UTF-8 form",
    ),
    ("canonical_nested_lists", '[[{"a":[{"c":[],"d":2}],"b":1}],[],[[[]]]]', True, ""),
    ("exponent_value", '{"a":1e0}', False, "float syntax"),
    ("negative_zero_in_array", "[-0]", False, "-0 re-encodes as 0"),
    ("canonical_noncharacter", '"\uffff"', True, "U+FFFF literal"),
]

# NFC of characters assigned after Unicode 14.0 depends on the version, so the two
# implementations cannot share these: Python 3.11 (Unicode 14.0) treats them as
# unassigned and keeps them, the TypeScript adapter (Node 24, Unicode 17.0) refuses
# any string holding one. Each side checks its own column.
DIVERGENT: list[tuple[str, str, str, str]] = [
    (
        "kirat_rai_composition",
        '"\\ud81b\\udd63\\ud81b\\udd67"',
        '"\U00016d63\U00016d67"',
        "U+16D63 U+16D67 (Kirat Rai, Unicode 16.0) compose to U+16D69 under Unicode 16+ NFC",
    ),
    (
        "unicode15_emoji",
        '"\\ud83e\\udee8"',
        '"\U0001fae8"',
        "U+1FAE8 (Unicode 15.0), no decomposition: refused all the same",
    ),
]


def canonical_more() -> dict[str, Any]:
    encode: list[dict[str, Any]] = []
    for name, text, canonical, note in ENCODE:
        row: dict[str, Any] = {"name": name, "input": text}
        if canonical is None:
            row.update({"error": True, "reason": note})
        else:
            row.update({"canonical": canonical, "identity": sha(canonical)})
            if note:
                row["note"] = note
        encode.append(row)
    verify: list[dict[str, Any]] = []
    for name, text, ok, reason in VERIFY:
        row = {"name": name, "input": text}
        row.update({"canonical": True} if ok else {"error": True, "reason": reason})
        verify.append(row)
    divergent = [
        {
            "name": n,
            "input": t,
            "python_canonical": c,
            "python_identity": sha(c),
            "typescript": "refused",
            "note": note,
        }
        for n, t, c, note in DIVERGENT
    ]
    return {
        "schema": "smf.vectors.canonical/1",
        "description": "More canonical JSON vectors (issue 10): Unicode, key order, nested lists, malformed "
        "text. Same rules and format as canonical.json; plus unicode_divergence. See README.md.",
        "encode": encode,
        "verify": verify,
        "unicode_divergence": divergent,
    }


def write(name: str, document: dict[str, Any]) -> None:
    text = json.dumps(document, indent=2, ensure_ascii=True) + "\n"
    (HERE / name).write_text(text, encoding="ascii")


if __name__ == "__main__":
    write("messages.json", messages())
    write("canonical_more.json", canonical_more())
