"""The fact registry: every path a predicate may name, with its type.

Policies speak only in registered facts (STYLE.md, "Cedar"): a new need is a
new fact here, not a new escape hatch in the predicate language. The
registry is versioned; a projection names the version it was compiled
against and the evaluator refuses a mismatch.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal, get_args, get_type_hints

import msgspec

from smf_assurance.subjects.envelope import (
    Data,
    Destination,
    Effects,
    OperationEnvelope,
    Professional,
    Runtime,
    Workflow,
)

FACT_REGISTRY_VERSION: Final = "smf.facts/1"

FactType = Literal["bool", "enum", "string"]
Cardinality = Literal["one", "many"]

MAX_DEPTH: Final = 8
MAX_NODES: Final = 64
MAX_LIST: Final = 32


@dataclass(frozen=True, slots=True)
class Fact:
    """One registered fact: its path, value type, cardinality and vocabulary."""

    path: str
    type: FactType
    cardinality: Cardinality
    values: frozenset[str] | None = None


def _fact_for(path: str, annotation: Any) -> Fact:
    origin_args = get_args(annotation)
    if annotation is bool:
        return Fact(path, "bool", "one")
    if getattr(annotation, "__origin__", None) is Literal:
        return Fact(path, "enum", "one", frozenset(origin_args))
    if getattr(annotation, "__origin__", None) is tuple:
        return Fact(path, "string", "many")
    return Fact(path, "string", "one")


def _register(prefix: str, struct: type[msgspec.Struct]) -> dict[str, Fact]:
    hints = get_type_hints(struct, include_extras=False)
    facts: dict[str, Fact] = {}
    for name in struct.__struct_fields__:
        annotation = hints[name]
        args = get_args(annotation)
        if type(None) in args:
            annotation = next(a for a in args if a is not type(None))
        facts[f"{prefix}{name}"] = _fact_for(f"{prefix}{name}", annotation)
    return facts


def _build_registry() -> dict[str, Fact]:
    facts = {"capability": _fact_for("capability", get_type_hints(OperationEnvelope)["capability"])}
    for prefix, struct in (
        ("effects.", Effects),
        ("destination.", Destination),
        ("data.", Data),
        ("professional.", Professional),
        ("workflow.", Workflow),
        ("runtime.", Runtime),
    ):
        facts.update(_register(prefix, struct))
    return facts


REGISTRY: Final[Mapping[str, Fact]] = _build_registry()
"""Every envelope leaf, derived from the Structs so the two cannot drift."""


def facts_of(envelope: OperationEnvelope) -> dict[str, Any]:
    """Flatten an envelope into ``{path: value}``; an unset optional fact is absent.

    Written out field by field because it runs on every decision; a test
    checks that its keys are exactly the registry's.
    """
    e, d, x, p, w, r = (
        envelope.effects,
        envelope.destination,
        envelope.data,
        envelope.professional,
        envelope.workflow,
        envelope.runtime,
    )
    flat: dict[str, Any] = {
        "capability": envelope.capability,
        "effects.egress": e.egress,
        "effects.persistence": e.persistence,
        "effects.reversibility": e.reversibility,
        "destination.channel": d.channel,
        "destination.locality": d.locality,
        "destination.target_identity_hash": d.target_identity_hash,
        "data.classification": x.classification,
        "data.redaction_status": x.redaction_status,
        "data.injection_taint": x.injection_taint,
        "data.content_hash": x.content_hash,
        "professional.domain": p.domain,
        "professional.tenant_id": p.tenant_id,
        "professional.organization_id": p.organization_id,
        "professional.matter_id": p.matter_id,
        "professional.actor_id": p.actor_id,
        "professional.actor_roles": p.actor_roles,
        "professional.governing_laws": p.governing_laws,
        "workflow.legal_hold": w.legal_hold,
        "workflow.citation_verification": w.citation_verification,
        "runtime.runtime_id": r.runtime_id,
        "runtime.runtime_version": r.runtime_version,
        "runtime.adapter_id": r.adapter_id,
        "runtime.surface": r.surface,
        "runtime.native_tool": r.native_tool,
        "runtime.canonical_args_hash": r.canonical_args_hash,
    }
    if x.redaction_evidence is not None:
        flat["data.redaction_evidence"] = x.redaction_evidence
    return flat
