"""Builders for valid test inputs: envelopes, rules, policies, corpora, policy sets.

Every builder returns something valid by default, so a test changes only the
one thing it is about:

- ``make_envelope({"data.classification": "privileged"})`` (or
  ``make_envelope(**{"data.classification": "privileged"})``) starts from
  ``BASE_ENVELOPE`` and applies dotted-path overrides; the value ``DELETE``
  removes the field. ``envelope_dict`` does the same without validating, for
  tests that need an invalid envelope.
- ``proposal_dict({"facts.classification": "unknown"})`` does the same for
  ``BASE_PROPOSAL``, a runtime's proposal in its JSON form;
  ``normalized_proposal`` normalizes it through the shipped mapper tables
  (``shipped_table``).
- ``make_rule``, ``make_policy`` and ``make_release`` build corpus records in
  the JSON form the compiler reads (``smf_assurance/governance/corpus/scenarios`` is the example);
  ``write_corpus`` writes them as a corpus directory.
- ``policy_set_from`` builds the gate's ``PolicySet`` from the same records
  in memory, without the compiler and without touching the disk, for fast
  property tests.

The base envelope is deliberately inert: an internal read, no egress, no
persistence, fully reversible, so it is *not* consequential and no shipped
scenario rule matches it except ``internal-read``.
"""

from __future__ import annotations

import copy
import datetime as dt
import json
import unicodedata
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Final, NamedTuple

import msgspec

from smf_assurance.core.facts import FACT_REGISTRY_VERSION
from smf_assurance.core.normalize import MapperTable, Normalized, decode_mapper, normalize
from smf_assurance.core.policy import Effect, Layer
from smf_assurance.core.projection import (
    ENFORCEMENT_SCHEMA,
    EnforcementProjection,
    EnforcementRule,
    PolicyRecord,
    PolicySet,
    build_policy_set,
)
from smf_assurance.subjects.canonical import sha256_identity
from smf_assurance.subjects.envelope import OperationEnvelope, envelope_from_builtins
from smf_assurance.subjects.messages import Proposal, Verdict


class _Delete:
    """Marker: remove the field at this dotted path."""

    def __repr__(self) -> str:
        return "DELETE"


DELETE: Final = _Delete()

RECIPE_ID_FOR_TESTS: Final = sha256_identity(b"tests/builders recipe")
"""A syntactically valid recipe id for projections built without the compiler."""

AT_MS: Final = 1_795_953_600_000
"""2026-11-29T12:00:00Z: inside every default effective interval."""

DEFAULT_TENANT: Final = "tenant-acme"


def fake_identity(label: str) -> str:
    """A deterministic, well-formed ``sha256:<hex>`` for a label."""
    return sha256_identity(label.encode("utf-8"))


BASE_ENVELOPE: Final[Mapping[str, Any]] = {
    "capability": "document.read",
    "effects": {"egress": False, "persistence": "none", "reversibility": "full"},
    "destination": {
        "channel": "none",
        "locality": "internal",
        "target_identity_hash": fake_identity("target"),
    },
    "data": {
        "classification": "internal",
        "redaction_status": "none",
        "injection_taint": "clear",
        "content_hash": fake_identity("content"),
    },
    "professional": {
        "domain": "litigation",
        "tenant_id": DEFAULT_TENANT,
        "organization_id": "org-acme-llp",
        "matter_id": "matter-2026-0042",
        "actor_id": "associate-ann",
        "actor_roles": ["associate"],
        "governing_laws": ["US-NY"],
    },
    "workflow": {"legal_hold": False, "citation_verification": "not_applicable"},
    "runtime": {
        "runtime_id": "hermes-test",
        "runtime_version": "0.19.0",
        "adapter_id": "smf-test-adapter",
        "surface": "tool_call",
        "native_tool": "dms_read",
        "canonical_args_hash": fake_identity("args"),
    },
}
"""A valid, non-consequential envelope: an internal document read."""


def set_path(document: dict[str, Any], path: str, value: Any) -> None:
    """Set (or with ``DELETE`` remove) ``document[a][b]...`` for ``path`` ``"a.b..."``."""
    *parents, leaf = path.split(".")
    node = document
    for part in parents:
        child = node.get(part)
        if not isinstance(child, dict):
            child = {}
            node[part] = child
        node = child
    if isinstance(value, _Delete):
        node.pop(leaf, None)
    else:
        node[leaf] = value


def envelope_dict(overrides: Mapping[str, Any] | None = None, /, **more: Any) -> dict[str, Any]:
    """``BASE_ENVELOPE`` with dotted-path overrides applied; not validated."""
    document: dict[str, Any] = copy.deepcopy(dict(BASE_ENVELOPE))
    for path, value in {**(overrides or {}), **more}.items():
        set_path(document, path, copy.deepcopy(value))
    return document


def envelope_json(overrides: Mapping[str, Any] | None = None, /, **more: Any) -> bytes:
    """The overridden envelope as JSON bytes (``ensure_ascii=False``), not validated."""
    return json.dumps(envelope_dict(overrides, **more), ensure_ascii=False).encode("utf-8")


def make_envelope(overrides: Mapping[str, Any] | None = None, /, **more: Any) -> OperationEnvelope:
    """A validated ``OperationEnvelope``: ``BASE_ENVELOPE`` plus dotted-path overrides."""
    return envelope_from_builtins(envelope_dict(overrides, **more))


BASE_PROPOSAL: Final[Mapping[str, Any]] = {
    "schema": "smf.proposal/1",
    "proposal_id": "prop-0001",
    "runtime_id": "rt-test",
    "runtime_version": "1.0",
    "adapter_id": "smf-scripted-adapter",
    "surface": "tool_call",
    "native_tool": "dms_read",
    "arguments": {"document_id": "doc-1207"},
    "content": "",
    "destination": {"address": "", "locality": "internal"},
    "actor": dict(BASE_ENVELOPE["professional"]),
    "facts": {
        "classification": "internal",
        "injection_taint": "clear",
        "redaction_status": "none",
        "legal_hold": False,
        "citation_verification": "not_applicable",
    },
    "issued_at_ms": AT_MS,
}
"""A valid proposal of the shipped scripted adapter: read one document, every fact known."""


def proposal_dict(overrides: Mapping[str, Any] | None = None, /, **more: Any) -> dict[str, Any]:
    """``BASE_PROPOSAL`` with dotted-path overrides applied (``DELETE`` removes); not
    validated, so a test can send what the decoder must refuse."""
    document: dict[str, Any] = copy.deepcopy(dict(BASE_PROPOSAL))
    for path, value in {**(overrides or {}), **more}.items():
        set_path(document, path, copy.deepcopy(value))
    return document


MAPPER_TABLES: Final = (
    Path(__file__).resolve().parents[2] / "smf_assurance" / "pipeline" / "mappers"
)
"""The shipped per-adapter mapper tables."""
SHIPPED_ADAPTERS: Final = ("smf-scripted-adapter", "smf-hermes-adapter", "smf-openclaw-adapter")


def shipped_table(adapter_id: str = "smf-scripted-adapter") -> MapperTable:
    """A shipped mapper table, through the decoder the gate loads them with."""
    return decode_mapper((MAPPER_TABLES / f"{adapter_id}.json").read_bytes())


def normalized_proposal(overrides: Mapping[str, Any] | None = None, /, **more: Any) -> Normalized:
    """``proposal_dict`` decoded as the proposal a runtime sent and normalized
    through the shipped mapper tables."""
    data = json.dumps(proposal_dict(overrides, **more)).encode("utf-8")
    tables = {t.adapter_id: t for t in map(shipped_table, SHIPPED_ADAPTERS)}
    return normalize(msgspec.json.decode(data, type=Proposal), tables)


CONSEQUENTIAL_TRIGGERS: Final[Mapping[str, Mapping[str, Any]]] = {
    "egress": {"effects.egress": True},
    "external_persistent": {"effects.persistence": "external_persistent"},
    "unknown_persistence": {"effects.persistence": "unknown"},
    "limited_reversibility": {"effects.reversibility": "limited"},
    "no_reversibility": {"effects.reversibility": "none"},
    "unknown_reversibility": {"effects.reversibility": "unknown"},
    "unknown_capability": {"capability": "unknown"},
}
"""Each override alone makes ``BASE_ENVELOPE`` consequential."""


# --- corpus records -----------------------------------------------------------

SYNTHETIC_CITATION: Final = "Synthetic: test rule, not a citation of any real authority"

ALWAYS: Final[Mapping[str, Any]] = {"exists": {"fact": "capability"}}
"""A predicate every envelope satisfies."""

NEVER: Final[Mapping[str, Any]] = {"not_exists": {"fact": "capability"}}
"""A predicate no envelope satisfies."""


def statement_hash(statement: str) -> str:
    """The ``source_hash`` of a synthetic rule: SHA-256 over its NFC statement."""
    return sha256_identity(unicodedata.normalize("NFC", statement).encode("utf-8"))


def make_rule(
    rule_id: str,
    when: Mapping[str, Any] | None = None,
    /,
    **fields: Any,
) -> dict[str, Any]:
    """A valid synthetic rule record; ``fields`` replace any top-level field.

    ``rule_id`` may be a short name (``"r1"``), which becomes ``urn:smf:rule:r1``.
    The ``source_hash`` follows the statement unless given explicitly.
    """
    rid = rule_id if rule_id.startswith("urn:") else f"urn:smf:rule:{rule_id}"
    statement = fields.pop("statement", f"Test statement for {rid}.")
    rule: dict[str, Any] = {
        "rule_id": rid,
        "title": f"Test rule {rid}",
        "authority_type": "synthetic",
        "citation": SYNTHETIC_CITATION,
        "locator": f"tests/support/builders.py#{rid}",
        "statement": statement,
        "source_hash": statement_hash(statement),
        "effective_from": "2025-01-01",
        "effective_until": None,
        "review": {
            "reviewer": "smf-engineering",
            "kind": "engineering_review",
            "reviewed_at": "2026-11-29",
        },
        "corrections": [],
        "when": dict(when if when is not None else ALWAYS),
    }
    rule.update(fields)
    return rule


_SCOPE_FOR_LAYER: Final[Mapping[str, Mapping[str, str]]] = {
    "binding_authority": {},
    "smf_safety_floor": {},
    "customer": {"tenant_id": DEFAULT_TENANT},
    "matter": {"tenant_id": DEFAULT_TENANT, "matter_id": "matter-2026-0042"},
    "user": {"tenant_id": DEFAULT_TENANT, "actor_id": "associate-ann"},
}


def default_scope(layer: str) -> dict[str, str]:
    """The scope a layer needs, bound to ``BASE_ENVELOPE``'s tenant, matter and actor."""
    return dict(_SCOPE_FOR_LAYER[layer])


def make_policy(
    policy_id: str,
    rule_id: str,
    *,
    layer: Layer = "binding_authority",
    effect: Effect = "deny",
    reason_code: str | None = None,
    scope: Mapping[str, str] | None = None,
    requirements: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """A policy record; scope defaults to what ``layer`` needs for ``BASE_ENVELOPE``."""
    rid = rule_id if rule_id.startswith("urn:") else f"urn:smf:rule:{rule_id}"
    policy: dict[str, Any] = {
        "policy_id": policy_id,
        "layer": layer,
        "rule_id": rid,
        "effect": effect,
        "reason_code": reason_code or f"{effect}_{policy_id}".replace("-", "_").replace(".", "_"),
    }
    chosen = default_scope(layer) if scope is None else dict(scope)
    if chosen:
        policy["scope"] = chosen
    if requirements:
        policy["requirements"] = dict(requirements)
    return policy


def make_release(release_id: str = "test-release", release_sequence: int = 1) -> dict[str, Any]:
    return {"release_id": release_id, "release_sequence": release_sequence}


def write_json(path: Path, value: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(value, ensure_ascii=False, indent=2), encoding="utf-8")
    return path


def write_corpus(
    directory: Path,
    rules: Iterable[Mapping[str, Any]],
    policies: Iterable[Mapping[str, Any]],
    release: Mapping[str, Any] | None = None,
    *,
    sources: Mapping[str, bytes] | None = None,
) -> Path:
    """Write ``release.json``, ``rules.json``, ``policies.json`` (and snapshot files).

    ``sources`` maps paths relative to ``directory`` (``"sources/x.txt"``) to
    the bytes of a source snapshot.
    """
    directory.mkdir(parents=True, exist_ok=True)
    write_json(directory / "release.json", dict(release or make_release()))
    write_json(directory / "rules.json", [dict(r) for r in rules])
    write_json(directory / "policies.json", [dict(p) for p in policies])
    for relative, data in (sources or {}).items():
        target = directory / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    return directory


def _seconds(value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, int):
        return value
    day = dt.date.fromisoformat(str(value))
    return int(dt.datetime(day.year, day.month, day.day, tzinfo=dt.UTC).timestamp())


def enforcement_projection(
    rules: Iterable[Mapping[str, Any]],
    policies: Iterable[Mapping[str, Any]],
    release: Mapping[str, Any] | None = None,
) -> EnforcementProjection:
    """An enforcement projection built in memory from corpus records, in input order.

    Effective dates may be ISO dates (as in a corpus) or unix seconds.
    """
    meta = dict(release or make_release())
    enforcement_rules = tuple(
        EnforcementRule(
            rule_id=rule["rule_id"],
            source_hash=rule["source_hash"],
            effective_from=_seconds(rule["effective_from"]) or 0,
            effective_until=_seconds(rule.get("effective_until")),
            when=dict(rule["when"]),
        )
        for rule in rules
    )
    records = tuple(msgspec.convert(dict(p), PolicyRecord) for p in policies)
    return EnforcementProjection(
        schema=ENFORCEMENT_SCHEMA,
        release_id=meta["release_id"],
        release_sequence=meta["release_sequence"],
        fact_registry_version=FACT_REGISTRY_VERSION,
        recipe_id=RECIPE_ID_FOR_TESTS,
        rules=enforcement_rules,
        policies=records,
    )


def policy_set_from(
    rules: Iterable[Mapping[str, Any]],
    policies: Iterable[Mapping[str, Any]],
    release: Mapping[str, Any] | None = None,
) -> PolicySet:
    """The gate's ``PolicySet`` for these records, built in memory (no compiler, no disk)."""
    return build_policy_set(enforcement_projection(rules, policies, release))


class Decided(NamedTuple):
    """One decision named by its two ids, as ``order_id_for`` takes it: from a
    verdict's ids, or from strings a test makes up for an order the gate never gave."""

    operation_hash: str
    decision_id: str

    @classmethod
    def of(cls, verdict: Verdict) -> Decided:
        """The decision a verdict names (a verdict that names none fails the test)."""
        assert verdict.operation_hash is not None
        assert verdict.decision_id is not None
        return cls(verdict.operation_hash, verdict.decision_id)
