"""What ``make mutate`` mutates: the modules of the trust core and their focused tests.

The trust core: smf_assurance/core (policy, predicates, evaluator, normalize,
release_trust), the pure approval rules (``smf_assurance.core.approval_rules``),
the claim paths of the stores, the model gateway's admission and tool-call
accounting (gate and gateway side), and the ``subjects`` contract (canonical,
keyed, dsse, envelope, approvals, release, bus_access). Each module is tested by the
test files coverage picks for it (``smf_tools.mutation.focus``: for every mutant, the
cheapest file whose tests run its line), so that the whole run stays practical.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Final

ROOT: Final = Path(__file__).resolve().parents[2]
"""The repository root: module paths, test files and the pytest working directory."""
FOCUS_FILE: Final = Path(__file__).with_name("focus.json")
"""Each target's test files, derived from coverage (``smf_tools.mutation.focus``)."""
FOCUS_SCHEMA: Final = "smf.mutation-focus/1"

MIN_SCORE: Final = 90.0
"""Every module of the trust core at least 90 % killed."""

PYTEST_ARGS: Final = ("-x", "-q", "-p", "no:cacheprovider", "-p", "smf_mutation_plugin")
"""Stop at the first failure; no cache; the run's Hypothesis profile
(``smf_tools.mutation.runner``)."""
TIMEOUT_FACTOR: Final = 3
TIMEOUT_MARGIN_S: Final = 20.0


@dataclass(frozen=True, slots=True)
class Target:
    """One module of the trust core, the part of it mutated, and its focused tests.

    ``scope`` names the functions, classes, methods (``Class.method``) and
    module-level assignments that are mutated; empty means the whole module.
    """

    name: str
    module: str
    tests: tuple[str, ...]
    scope: tuple[str, ...] = ()
    pytest_args: tuple[str, ...] = ()

    @property
    def path(self) -> Path:
        return ROOT / (self.module.replace(".", "/") + ".py")

    @property
    def relpath(self) -> str:
        return self.module.replace(".", "/") + ".py"


_FROZEN: Final = "tests/unit/test_frozen_contract.py"


def _read_focus() -> dict[str, tuple[str, ...]]:
    """The test files of each target, as ``python -m smf_tools.mutation --derive`` last
    wrote them; none for a target it has not measured (the run then refuses it)."""
    try:
        document = json.loads(FOCUS_FILE.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(document, dict) or document.get("schema") != FOCUS_SCHEMA:
        return {}
    targets = document.get("targets")
    if not isinstance(targets, dict):
        return {}
    return {str(name): tuple(str(f) for f in files) for name, files in targets.items()}


_FOCUS: Final = _read_focus()


def _focus(name: str) -> tuple[str, ...]:
    return _FOCUS.get(name, ())


_NOT_KV: Final = ("-k", "not kv")
"""The store targets run the SQLite half of their contract tests."""

TARGETS: Final[tuple[Target, ...]] = (
    Target("policy", "smf_assurance.core.policy", _focus("policy")),
    Target("predicates", "smf_assurance.core.predicates", _focus("predicates")),
    Target("policy_index", "smf_assurance.core.policy_index", _focus("policy_index")),
    Target("evaluator", "smf_assurance.core.evaluator", _focus("evaluator")),
    Target("normalize", "smf_assurance.core.normalize", _focus("normalize")),
    Target("release_trust", "smf_assurance.core.release_trust", _focus("release_trust")),
    Target("approval_rules", "smf_assurance.core.approval_rules", _focus("approval_rules")),
    Target(
        "approval_store",
        "smf_assurance.pipeline.stores.approvals",
        _focus("approval_store"),
        scope=("TRANSITIONS", "OPEN_STATES", "check_transition", "admit_binding"),
        pytest_args=_NOT_KV,
    ),
    Target(
        "approval_claim_sqlite",
        "smf_assurance.pipeline.stores.approvals_sqlite",
        _focus("approval_claim_sqlite"),
        scope=(
            "_RESOLVE",
            "_CLAIM",
            "_Tx.move",
            "_only",
            "_refusal",
            "_record",
            "_codes",
            "SqliteApprovalStore._resolve",
            "SqliteApprovalStore.claim",
        ),
        pytest_args=_NOT_KV,
    ),
    Target(
        "claims_sqlite",
        "smf_assurance.pipeline.stores.claims",
        _focus("claims_sqlite"),
        scope=(
            "_insert_claim",
            "_settle",
            "ClaimStore.claim",
            "ClaimStore.settle",
            "ClaimStore.settle_beside",
            "ClaimStore.claim_and_record_beside",
        ),
        pytest_args=_NOT_KV,
    ),
    Target(
        "model_admission",
        "smf_assurance.pipeline.desks.model_admission",
        _focus("model_admission"),
    ),
    Target(
        "gateway_admission",
        "smf_assurance.gateway.server",
        _focus("gateway_admission"),
        scope=(
            "ModelGateway._authenticate",
            "ModelGateway._admit",
            "ModelGateway._keep_proof_standing",
            "ModelGateway._proven_here",
            "ModelGateway._note_nonce",
        ),
    ),
    Target("tool_calls", "smf_assurance.pipeline.desks.tool_calls", _focus("tool_calls")),
    Target("bus_access", "smf_assurance.subjects.bus_access", _focus("bus_access")),
    Target("canonical", "smf_assurance.subjects.canonical", _focus("canonical")),
    Target("keyed", "smf_assurance.subjects.keyed", _focus("keyed")),
    Target("dsse", "smf_assurance.subjects.dsse", _focus("dsse")),
    Target("envelope", "smf_assurance.subjects.envelope", _focus("envelope")),
    Target("approvals", "smf_assurance.subjects.approvals", _focus("approvals")),
    Target("release", "smf_assurance.subjects.release", _focus("release")),
)
"""The trust core: smf_assurance/core (the pure approval checks among them, in
``smf_assurance.core.approval_rules``), the claim paths of the stores, the gate's
desks for the model gateway (admission, tool-call accounting) and the gateway's own
admission (issue 40), and the ``subjects`` contract, bus permissions included. The
store targets run the SQLite half of their contract tests (``-k "not kv"``); the
JetStream KV backend is not in scope. Each target's test files are derived from
coverage (``smf_tools.mutation.focus``, written to ``focus.json``): no list here is
kept by hand. Every target with a ``frozen=`` flag among its mutants runs
``test_frozen_contract.py``, which kills one flipped off."""


@dataclass(frozen=True, slots=True)
class Smoke:
    """One security-critical mutant and the one test that must kill it: the fast
    mutation smoke that runs inside ``make test`` (``tests/tools/test_mutation_tool.py``)."""

    target: Target
    match: str
    """Selects exactly one mutant of ``target`` (a part of its label)."""
    why: str


SMOKE: Final[tuple[Smoke, ...]] = (
    Smoke(
        Target(
            "smoke_settle_beside",
            "smf_assurance.pipeline.stores.claims",
            ("tests/bus/test_order_book.py::test_a_settle_beside_a_closed_claim_store_is_refused",),
            scope=("ClaimStore.settle_beside",),
        ),
        'raise StoreUnavailable("claim store is closed")',
        "a claim store the gate has closed settles nothing in the ledger's transaction",
    ),
    Smoke(
        Target(
            "smoke_dsse_depth",
            "smf_assurance.subjects.dsse",
            ("tests/unit/test_dsse.py::test_a_signed_payload_nested_too_deep_is_malformed",),
            scope=("open_struct",),
        ),
        "nests too deep",
        "a signed payload nested too deep is a refusal, never an internal error",
    ),
    Smoke(
        Target(
            "smoke_frozen_release",
            "smf_assurance.core.release_trust",
            (f"{_FROZEN}::test_every_value_type_of_the_trust_code_is_frozen",),
            scope=("VerifiedRelease",),
        ),
        "frozen=True  ->  frozen=False",
        "a verified release cannot be changed after its check",
    ),
    Smoke(
        Target(
            "smoke_confined_default",
            "smf_assurance.core.evaluator",
            (
                "tests/unit/test_evaluator.py::"
                "test_a_runtime_not_known_confined_is_denied_where_the_release_requires_it",
            ),
            scope=("evaluate",),
        ),
        "bool  False  ->  True",
        "a runtime is never assumed confined",
    ),
)
"""A handful of sites where a surviving mutant would let an action through: each run
against its one test in ``make test`` (seconds, not the minutes of ``make mutate``)."""
