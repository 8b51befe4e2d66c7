"""The operation envelope (smf_assurance/subjects/envelope.py).

Properties: the schema is the validator — every group and every field is
required, unknown fields are rejected at every level, vocabularies are
closed, no type coercion, identities must be ``sha256:<64 hex>``;
``redaction_evidence`` is present exactly when redaction is complete;
``unknown`` is accepted as a value of its own; NFC normalization makes two
spellings of the same text the same operation; and every error names the
offending field's path.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest

from smf_assurance.subjects.canonical import identity_of
from smf_assurance.subjects.envelope import (
    ENVELOPE_SCHEMA,
    EnvelopeError,
    OperationEnvelope,
    decode_envelope,
    envelope_builtins,
    envelope_from_builtins,
    operation_hash,
)
from tests.support.builders import (
    BASE_ENVELOPE,
    DELETE,
    envelope_dict,
    envelope_json,
    fake_identity,
    make_envelope,
)

SCENARIOS = Path(__file__).resolve().parents[2] / "smf_assurance" / "governance" / "scenarios"
GROUPS = ("effects", "destination", "data", "professional", "workflow", "runtime")


def _leaf_paths(document: dict[str, Any], prefix: str = "") -> list[str]:
    paths: list[str] = []
    for key, value in document.items():
        if isinstance(value, dict):
            paths.extend(_leaf_paths(value, f"{prefix}{key}."))
        else:
            paths.append(f"{prefix}{key}")
    return paths


LEAF_PATHS = _leaf_paths(dict(BASE_ENVELOPE))


def _error(overrides: dict[str, Any]) -> str:
    """Decode the overridden envelope both ways; both must fail, with one message."""
    with pytest.raises(EnvelopeError) as from_json:
        decode_envelope(envelope_json(overrides))
    with pytest.raises(EnvelopeError) as from_builtins:
        envelope_from_builtins(envelope_dict(overrides))
    assert str(from_json.value) == str(from_builtins.value)
    return str(from_json.value)


# --- valid envelopes --------------------------------------------------------------


@pytest.mark.parametrize("path", sorted(SCENARIOS.glob("[0-9]-*.json")), ids=lambda p: p.stem)
def test_shipped_scenario_envelopes_decode(path: Path) -> None:
    envelope = decode_envelope(path.read_bytes())
    assert isinstance(envelope, OperationEnvelope)
    assert json.loads(msgspec.json.encode(envelope)) == json.loads(path.read_bytes())


def test_base_envelope_decodes_from_bytes_str_and_builtins() -> None:
    raw = envelope_json()
    from_bytes = decode_envelope(raw)
    assert decode_envelope(raw.decode("utf-8")) == from_bytes
    assert envelope_from_builtins(envelope_dict()) == from_bytes
    assert ENVELOPE_SCHEMA == "smf.operation/1"


def test_envelope_structs_are_frozen() -> None:
    envelope = make_envelope()
    with pytest.raises(AttributeError):
        envelope.capability = "unknown"  # type: ignore[misc]
    with pytest.raises(AttributeError):
        envelope.data.classification = "public"  # type: ignore[misc]


def test_builtins_round_trip_and_omit_unset_evidence() -> None:
    envelope = make_envelope()
    builtins = envelope_builtins(envelope)
    assert "redaction_evidence" not in builtins["data"]
    assert envelope_from_builtins(builtins) == envelope
    redacted = make_envelope(
        {"data.redaction_status": "complete", "data.redaction_evidence": "redactor run 17"}
    )
    assert envelope_builtins(redacted)["data"]["redaction_evidence"] == "redactor run 17"
    assert envelope_from_builtins(envelope_builtins(redacted)) == redacted


# --- required groups and fields --------------------------------------------------


@pytest.mark.parametrize("group", ["capability", *GROUPS])
def test_every_group_is_required(group: str) -> None:
    message = _error({group: DELETE})
    assert f"`{group}`" in message
    assert "missing required field" in message


@pytest.mark.parametrize("path", LEAF_PATHS)
def test_every_field_is_required(path: str) -> None:
    message = _error({path: DELETE})
    parent, _, leaf = path.rpartition(".")
    assert f"`{leaf}`" in message
    if parent:
        assert f"`$.{parent}`" in message


# --- unknown fields ----------------------------------------------------------------


@pytest.mark.parametrize("where", ["", *GROUPS])
def test_unknown_field_is_rejected_at_every_level(where: str) -> None:
    path = f"{where}.surprise" if where else "surprise"
    message = _error({path: "x"})
    assert "unknown field `surprise`" in message
    if where:
        assert f"`$.{where}`" in message


def test_unknown_field_inside_a_list_position_is_rejected() -> None:
    message = _error({"professional.actor_roles": [{"role": "x"}]})
    assert "$.professional.actor_roles[0]" in message


# --- redaction evidence --------------------------------------------------------


def test_redaction_evidence_required_when_complete() -> None:
    message = _error({"data.redaction_status": "complete"})
    assert "redaction_evidence is required" in message
    assert "`$.data`" in message


@pytest.mark.parametrize("status", ["none", "pending", "unknown"])
def test_redaction_evidence_forbidden_unless_complete(status: str) -> None:
    message = _error({"data.redaction_status": status, "data.redaction_evidence": "proof"})
    assert "redaction_evidence is forbidden" in message
    assert "`$.data`" in message


@pytest.mark.parametrize("status", ["none", "pending", "unknown"])
def test_no_evidence_is_fine_unless_complete(status: str) -> None:
    assert make_envelope({"data.redaction_status": status}).data.redaction_evidence is None


def test_complete_with_evidence_is_accepted() -> None:
    envelope = make_envelope(
        {"data.redaction_status": "complete", "data.redaction_evidence": "ticket-9"}
    )
    assert envelope.data.redaction_evidence == "ticket-9"


@pytest.mark.parametrize("evidence", ["x", "x" * 1024], ids=["1-char", "1024-chars"])
def test_redaction_evidence_at_its_bounds_is_accepted(evidence: str) -> None:
    envelope = make_envelope(
        {"data.redaction_status": "complete", "data.redaction_evidence": evidence}
    )
    assert envelope.data.redaction_evidence == evidence


def test_a_name_of_256_characters_is_accepted() -> None:
    """Names are 1 to 256 characters (``"t" * 257`` is refused below)."""
    assert make_envelope({"professional.tenant_id": "t" * 256}).professional.tenant_id == "t" * 256


@pytest.mark.parametrize("evidence", ["", "x" * 1025, None, 7])
def test_bad_redaction_evidence_values_are_rejected(evidence: Any) -> None:
    message = _error({"data.redaction_status": "complete", "data.redaction_evidence": evidence})
    assert "$.data" in message


# --- vocabularies, unknown, types -------------------------------------------------

UNKNOWN_CAPABLE = [
    "capability",
    "effects.persistence",
    "effects.reversibility",
    "destination.channel",
    "destination.locality",
    "data.classification",
    "data.redaction_status",
    "data.injection_taint",
    "workflow.citation_verification",
]


@pytest.mark.parametrize("path", UNKNOWN_CAPABLE)
def test_unknown_is_accepted_and_distinct(path: str) -> None:
    envelope = make_envelope({path: "unknown"})
    group, _, leaf = path.rpartition(".")
    holder: Any = getattr(envelope, group) if group else envelope
    assert getattr(holder, leaf or path) == "unknown"
    assert operation_hash(envelope) != operation_hash(make_envelope())


def test_issue_vocabularies_are_all_accepted() -> None:
    vocabulary = {
        "capability": [
            "external.transmit",
            "external.query",
            "document.delete",
            "document.write",
            "document.read",
            "output.deliver",
            "process.execute",
            "agent.delegate",
            "schedule.create",
            "unknown",
        ],
        "effects.persistence": ["none", "local", "external_persistent"],
        "effects.reversibility": ["full", "limited", "none"],
        "destination.channel": [
            "electronic_filing",
            "email",
            "messaging",
            "web",
            "filesystem",
            "dms",
            "none",
        ],
        "destination.locality": ["internal", "external"],
        "data.classification": ["public", "internal", "confidential", "privileged"],
        "data.redaction_status": ["none", "pending", "unknown"],
        "data.injection_taint": ["clear", "suspected", "tainted", "unknown"],
        "workflow.citation_verification": ["pending", "verified", "failed", "not_applicable"],
        "runtime.surface": [
            "tool_call",
            "direct_reply",
            "stream",
            "gateway_delivery",
            "cron",
            "delegation",
            "background",
            "mcp",
        ],
    }
    for path, values in vocabulary.items():
        for value in values:
            read: Any = make_envelope({path: value})
            for part in path.split("."):
                read = getattr(read, part)
            assert read == value, path


@pytest.mark.parametrize(
    ("path", "value"),
    [
        ("capability", "external.Transmit"),
        ("capability", "shell"),
        ("capability", ""),
        ("effects.persistence", "permanent"),
        ("effects.reversibility", "partial"),
        ("destination.channel", "fax"),
        ("destination.locality", "remote"),
        ("data.classification", "secret"),
        ("data.redaction_status", "done"),
        ("data.injection_taint", "none"),
        ("workflow.citation_verification", "ok"),
        ("runtime.surface", "unknown"),
        ("runtime.surface", "cli"),
    ],
)
def test_values_outside_a_vocabulary_are_rejected(path: str, value: str) -> None:
    message = _error({path: value})
    assert f"`$.{path}`" in message


@pytest.mark.parametrize(
    ("path", "value"),
    [
        ("effects.egress", "true"),
        ("effects.egress", 1),
        ("effects.egress", 0),
        ("effects.egress", None),
        ("workflow.legal_hold", 1),
        ("workflow.legal_hold", "false"),
        ("capability", 1),
        ("capability", True),
        ("professional.tenant_id", 42),
        ("professional.tenant_id", ""),
        ("professional.tenant_id", "t" * 257),
        ("professional.actor_roles", "paralegal"),
        ("professional.actor_roles", [1]),
        ("professional.actor_roles", [""]),
        ("professional.governing_laws", None),
        ("runtime.native_tool", ["x"]),
        ("effects", "none"),
        ("data", []),
    ],
)
def test_wrong_types_are_not_coerced(path: str, value: Any) -> None:
    message = _error({path: value})
    assert f"$.{path}" in message


def test_top_level_must_be_an_object() -> None:
    with pytest.raises(EnvelopeError):
        decode_envelope(b"[]")
    with pytest.raises(EnvelopeError):
        envelope_from_builtins("capability")


@pytest.mark.parametrize("raw", [b"", b"{", b"not json", b'{"capability": }', b"\xff"])
def test_malformed_json_is_an_envelope_error(raw: bytes) -> None:
    with pytest.raises(EnvelopeError, match="not valid JSON"):
        decode_envelope(raw)


# --- identity fields ---------------------------------------------------------------

HASH_FIELDS = [
    "destination.target_identity_hash",
    "data.content_hash",
    "runtime.canonical_args_hash",
]
GOOD = fake_identity("x")


@pytest.mark.parametrize("path", HASH_FIELDS)
@pytest.mark.parametrize(
    "bad",
    [
        pytest.param(GOOD.upper(), id="upper-case"),
        pytest.param("SHA256:" + GOOD[7:], id="upper-case-prefix"),
        pytest.param(GOOD[7:], id="no-prefix"),
        pytest.param(GOOD[:-1], id="63-hex"),
        pytest.param(GOOD + "0", id="65-hex"),
        pytest.param("sha512:" + GOOD[7:], id="other-algorithm"),
        pytest.param("sha256:" + "g" * 64, id="not-hex"),
        pytest.param(" " + GOOD, id="leading-space"),
        pytest.param(GOOD + " ", id="trailing-space"),
        pytest.param(GOOD + "\n", id="trailing-newline"),
        pytest.param("sha256:" + GOOD[7:].upper(), id="upper-case-hex"),
        pytest.param("", id="empty"),
    ],
)
def test_bad_hash_pattern_is_rejected(path: str, bad: str) -> None:
    message = _error({path: bad})
    assert f"`$.{path}`" in message


# --- NFC and the operation hash -------------------------------------------------


def test_nfc_gives_the_same_operation_for_decomposed_and_precomposed_text() -> None:
    precomposed = {
        "professional.matter_id": "matter-caf\u00e9",
        "professional.actor_roles": ["r\u00e9viseur"],
        "runtime.native_tool": "\u212bngstr\u00f6m",
    }
    decomposed = {
        "professional.matter_id": "matter-cafe\u0301",
        "professional.actor_roles": ["re\u0301viseur"],
        "runtime.native_tool": "\u212bngstro\u0308m",
    }
    a = decode_envelope(envelope_json(precomposed))
    b = decode_envelope(envelope_json(decomposed))
    assert a == b
    assert operation_hash(a) == operation_hash(b)
    assert a.professional.matter_id == "matter-caf\u00e9"
    assert a.runtime.native_tool == "\u00c5ngstr\u00f6m"
    assert operation_hash(make_envelope(decomposed)) == operation_hash(a)


def test_operation_hash_is_the_canonical_identity_of_the_envelope() -> None:
    envelope = make_envelope({"professional.matter_id": "caf\u00e9"})
    assert operation_hash(envelope) == identity_of(envelope_builtins(envelope))
    plain = make_envelope()
    assert operation_hash(plain) == identity_of(envelope_builtins(plain))


@pytest.mark.parametrize(
    ("path", "value"),
    [
        ("capability", "document.write"),
        ("effects.egress", True),
        ("destination.target_identity_hash", fake_identity("other")),
        ("data.content_hash", fake_identity("other")),
        ("professional.actor_roles", ["associate", "licensed_attorney"]),
        ("professional.actor_roles", []),
        ("workflow.legal_hold", True),
        ("runtime.surface", "stream"),
    ],
)
def test_any_change_changes_the_operation_hash(path: str, value: Any) -> None:
    assert operation_hash(make_envelope({path: value})) != operation_hash(make_envelope())


def test_list_order_is_part_of_the_operation() -> None:
    one = make_envelope({"professional.actor_roles": ["a", "b"]})
    two = make_envelope({"professional.actor_roles": ["b", "a"]})
    assert operation_hash(one) != operation_hash(two)


def test_every_literal_value_of_the_schema_decodes() -> None:
    """Guard: the builder's vocabulary paths cover every Literal field of the schema."""
    literal_fields = 0
    for path in LEAF_PATHS:
        group, _, leaf = path.rpartition(".")
        struct: type[msgspec.Struct] = OperationEnvelope
        if group:
            envelope_info = msgspec.inspect.type_info(OperationEnvelope)
            assert isinstance(envelope_info, msgspec.inspect.StructType)
            field = next(f for f in envelope_info.fields if f.name == group)
            assert isinstance(field.type, msgspec.inspect.StructType)
            struct = field.type.cls
        struct_info = msgspec.inspect.type_info(struct)
        assert isinstance(struct_info, msgspec.inspect.StructType)
        hints = {f.name: f for f in struct_info.fields}
        info = hints[leaf or path].type
        if isinstance(info, msgspec.inspect.LiteralType):
            literal_fields += 1
            for value in info.values:
                extra = {"data.redaction_evidence": "proof"} if value == "complete" else {}
                make_envelope({path: value, **extra})
    assert literal_fields == len(UNKNOWN_CAPABLE) + 1  # + runtime.surface
