"""What ``make mutate`` mutates: the modules of the trust core, and where their tests come from.

The trust core: smf_assurance/core (policy, predicates, evaluator, normalize,
release_trust), the pure approval rules (``smf_assurance.core.approval_rules``),
the claim paths of the stores, the model gateway's admission and tool-call
accounting (gate and gateway side), and the ``subjects`` contract (canonical,
keyed, dsse, passkeys, envelope, approvals, release, bus_access). Each mutant runs the test
functions of ``tests/unit`` and ``tests/bus`` that run its line, fastest first,
within :data:`BUDGET_S` of their unmutated time.
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
DERIVED_MARGIN_S: Final = 60.0


@dataclass(frozen=True, slots=True)
class Target:
    """One module of the trust core, the part of it mutated, and its tests.

    ``scope`` names the functions, classes, methods (``Class.method``) and
    module-level assignments that are mutated; empty means the whole module.
    """

    name: str
    module: str
    tests: tuple[str, ...] = ()
    """Empty: derived from coverage over :data:`POOL`. Named only by the smoke's
    targets, each the one test that must kill its mutant."""
    scope: tuple[str, ...] = ()
    pytest_args: tuple[str, ...] = ()

    @property
    def derived(self) -> bool:
        return not self.tests

    @property
    def path(self) -> Path:
        return ROOT / (self.module.replace(".", "/") + ".py")

    @property
    def relpath(self) -> str:
        return self.module.replace(".", "/") + ".py"


FROZEN_CONTRACT: Final = "tests/unit/test_frozen_contract.py"
"""Asserts that every verified value type of the trust code is frozen. A class
statement runs at import, so coverage cannot say which test depends on its
``frozen=`` flag: a mutant of that flag always runs this file's tests too."""

POOL: Final = ("tests/unit", "tests/bus")
"""Where a derived target's tests come from: one unmutated run of these, under
per-test coverage, says which test functions run which line of each module
(:func:`smf_tools.mutation.runner.pool_baselines`). Not in it: ``tests/cli`` and
``tests/runtimes``, whose tests drive whole processes and real runtimes."""

BUDGET_S: Final = 30.0
"""Per mutant of a derived target, the covering tests run fastest first until
their unmutated time would pass this (at least one test; the frozen contract
beside): what keeps the whole run practical where a module is run by most of the
suite (the ``subjects`` contract). Measured at 5a61886 before it was chosen: every
mutant the hand-listed tests then killed would run at least one of them within it."""

TARGETS: Final[tuple[Target, ...]] = (
    Target("policy", "smf_assurance.core.policy"),
    Target("predicates", "smf_assurance.core.predicates"),
    Target("policy_index", "smf_assurance.core.policy_index"),
    Target("evaluator", "smf_assurance.core.evaluator"),
    Target("normalize", "smf_assurance.core.normalize"),
    Target("release_trust", "smf_assurance.core.release_trust"),
    Target("approval_rules", "smf_assurance.core.approval_rules"),
    Target(
        "approval_store",
        "smf_assurance.pipeline.stores.approvals",
        scope=("TRANSITIONS", "OPEN_STATES", "check_transition", "admit_binding"),
    ),
    Target(
        "approval_claim_sqlite",
        "smf_assurance.pipeline.stores.approvals_sqlite",
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
    ),
    Target(
        "claims_sqlite",
        "smf_assurance.pipeline.stores.claims",
        scope=(
            "_insert_claim",
            "_settle",
            "ClaimStore.claim",
            "ClaimStore.settle",
            "ClaimStore.settle_beside",
            "ClaimStore.claim_and_record_beside",
        ),
    ),
    Target("model_admission", "smf_assurance.pipeline.desks.model_admission"),
    Target(
        "gateway_admission",
        "smf_assurance.gateway.server",
        scope=(
            "ModelGateway._authenticate",
            "ModelGateway._admit",
            "ModelGateway._keep_proof_standing",
            "ModelGateway._proven_here",
            "ModelGateway._note_nonce",
        ),
    ),
    Target("tool_calls", "smf_assurance.pipeline.desks.tool_calls"),
    Target("bus_access", "smf_assurance.subjects.bus_access"),
    Target("canonical", "smf_assurance.subjects.canonical"),
    Target("keyed", "smf_assurance.subjects.keyed"),
    Target("dsse", "smf_assurance.subjects.dsse"),
    Target("passkeys", "smf_assurance.subjects.passkeys"),
    Target("envelope", "smf_assurance.subjects.envelope"),
    Target("approvals", "smf_assurance.subjects.approvals"),
    Target("release", "smf_assurance.subjects.release"),
)
"""The trust core: smf_assurance/core (the pure approval checks among them, in
``smf_assurance.core.approval_rules``), the claim paths of the stores, the gate's
desks for the model gateway (admission, tool-call accounting) and the gateway's own
admission (issue 40), and the ``subjects`` contract, bus permissions included. No
target names its tests: each is derived from coverage over :data:`POOL` (issue 40:
a hand list says nothing of the tests it leaves out). The JetStream KV backend of
the stores is not mutated; its tests run where they run a mutated line."""


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
            scope=("decode_verified",),
        ),
        "nests too deep",
        "a signed payload nested too deep is a refusal, never an internal error",
    ),
    Smoke(
        Target(
            "smoke_frozen_release",
            "smf_assurance.core.release_trust",
            (f"{FROZEN_CONTRACT}::test_every_value_type_of_the_trust_code_is_frozen",),
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
