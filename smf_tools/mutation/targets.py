"""What ``make mutate`` mutates: the modules of the trust core and their focused tests.

The trust core: smf_assurance/core (policy, predicates, evaluator, normalize,
release_trust), the pure approval rules (``smf_assurance.core.approval_rules``),
the claim paths of the stores, the model gateway's admission and tool-call
accounting (gate and gateway side), and the ``subjects`` contract (canonical,
keyed, dsse, envelope, approvals, release, bus_access). Each module is tested by the few
test files that test it directly, so that the whole run stays practical.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Final

ROOT: Final = Path(__file__).resolve().parents[2]
"""The repository root: module paths, test files and the pytest working directory."""

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
_UNKNOWN_FIELDS: Final = "tests/bus/test_unknown_fields.py"
_APPROVAL_STORE_TESTS: Final = (
    "tests/bus/test_approval_store.py",
    "tests/unit/test_approval_state_machine.py",
    "tests/bus/test_approval_crossed.py",
)

TARGETS: Final[tuple[Target, ...]] = (
    Target(
        "policy",
        "smf_assurance.core.policy",
        (
            "tests/unit/test_policy_merge.py",
            f"{_UNKNOWN_FIELDS}::test_a_decision_with_an_unknown_field_is_not_dispatched",
            _FROZEN,
        ),
    ),
    Target(
        "predicates",
        "smf_assurance.core.predicates",
        ("tests/unit/test_predicates.py", "tests/unit/test_policy_index.py", _FROZEN),
    ),
    Target(
        "policy_index",
        "smf_assurance.core.policy_index",
        ("tests/unit/test_policy_index.py", "tests/unit/test_evaluator.py", _FROZEN),
    ),
    Target(
        "evaluator",
        "smf_assurance.core.evaluator",
        ("tests/unit/test_evaluator.py", "tests/unit/test_policy_merge.py", _FROZEN),
    ),
    Target(
        "normalize",
        "smf_assurance.core.normalize",
        (
            "tests/unit/test_normalize.py",
            "tests/unit/test_vectors_messages.py",
            f"{_UNKNOWN_FIELDS}::test_a_normalized_operation_with_an_unknown_field_is_not_evaluated",
            _FROZEN,
            "tests/bus/test_gate_holds.py::test_normalization_sets_the_hold_and_the_operation_hash_covers_it",
        ),
    ),
    Target(
        "release_trust",
        "smf_assurance.core.release_trust",
        ("tests/unit/test_release_trust.py", "tests/unit/test_release_restart.py", _FROZEN),
    ),
    Target(
        "approval_rules",
        "smf_assurance.core.approval_rules",
        ("tests/unit/test_approval_rules.py", _FROZEN),
    ),
    Target(
        "approval_store",
        "smf_assurance.pipeline.stores.approvals",
        _APPROVAL_STORE_TESTS,
        scope=("TRANSITIONS", "OPEN_STATES", "check_transition", "admit_binding"),
        pytest_args=("-k", "not kv"),
    ),
    Target(
        "approval_claim_sqlite",
        "smf_assurance.pipeline.stores.approvals_sqlite",
        _APPROVAL_STORE_TESTS,
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
        pytest_args=("-k", "not kv"),
    ),
    Target(
        "claims_sqlite",
        "smf_assurance.pipeline.stores.claims",
        ("tests/bus/test_claim_store.py", "tests/bus/test_order_book.py"),
        scope=(
            "_insert_claim",
            "_settle",
            "ClaimStore.claim",
            "ClaimStore.settle",
            "ClaimStore.settle_beside",
            "ClaimStore.claim_and_record_beside",
        ),
        pytest_args=("-k", "not kv"),
    ),
    Target(
        "model_admission",
        "smf_assurance.pipeline.desks.model_admission",
        (
            "tests/bus/test_model_gateway.py",
            "tests/bus/test_model_gateway_instances.py",
            "tests/bus/test_model_gateway_admission.py",
            "tests/runtimes/test_confinement.py::test_the_model_gateways_admission_names_the_confinement",
        ),
    ),
    Target(
        "gateway_admission",
        "smf_assurance.gateway.server",
        (
            "tests/bus/test_model_gateway.py",
            "tests/bus/test_model_gateway_instances.py",
            "tests/bus/test_model_gateway_admission.py",
        ),
        scope=(
            "ModelGateway._authenticate",
            "ModelGateway._admit",
            "ModelGateway._keep_proof_standing",
            "ModelGateway._proven_here",
            "ModelGateway._note_nonce",
        ),
    ),
    Target(
        "tool_calls",
        "smf_assurance.pipeline.desks.tool_calls",
        ("tests/bus/test_model_gateway_toolcalls.py", "tests/bus/test_tool_call_restart.py"),
    ),
    Target(
        "bus_access",
        "smf_assurance.subjects.bus_access",
        (
            "tests/unit/test_bus_access.py",
            "tests/unit/test_bus_credential.py",
            "tests/unit/test_tls.py",
            "tests/bus/test_bus_permissions.py",
            _FROZEN,
        ),
    ),
    Target("canonical", "smf_assurance.subjects.canonical", ("tests/unit/test_canonical.py",)),
    Target("keyed", "smf_assurance.subjects.keyed", ("tests/unit/test_keyed.py",)),
    Target("dsse", "smf_assurance.subjects.dsse", ("tests/unit/test_dsse.py", _FROZEN)),
    Target(
        "envelope",
        "smf_assurance.subjects.envelope",
        ("tests/unit/test_envelope.py", "tests/unit/test_vectors_messages.py", _FROZEN),
    ),
    Target(
        "approvals",
        "smf_assurance.subjects.approvals",
        (
            "tests/unit/test_approval_rules.py",
            "tests/unit/test_vectors_messages.py",
            _UNKNOWN_FIELDS,
            _FROZEN,
        ),
    ),
    Target(
        "release",
        "smf_assurance.subjects.release",
        ("tests/unit/test_release_trust.py", _UNKNOWN_FIELDS, _FROZEN),
    ),
)
"""The trust core: smf_assurance/core (the pure approval checks among them, in
``smf_assurance.core.approval_rules``), the claim paths of the stores, the gate's
desks for the model gateway (admission, tool-call accounting) and the gateway's own
admission (issue 40), and the ``subjects`` contract, bus permissions included. The
store targets run the SQLite half of their contract tests (``-k "not kv"``); the
JetStream KV backend is not in scope. Every target whose module defines a verified
value type runs ``test_frozen_contract.py``, which kills a ``frozen=`` flipped off."""


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
