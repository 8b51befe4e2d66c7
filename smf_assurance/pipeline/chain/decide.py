"""The normalize and evaluate stages: typed functions around the pure core.

``NormalizeStage``: a verified ``Proposal`` -> ``Normalized`` (the operation
envelope, its hash, where it executes), or a refusal naming why.
``EvaluateStage``: ``EvaluateRequest`` -> ``Decision`` under the policy set
in force. Encoding for the bus lives in ``smf_assurance.pipeline.chain.transport``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from smf_assurance.core.decision import Decision
from smf_assurance.core.evaluator import evaluate
from smf_assurance.core.normalize import (
    GateHolds,
    MapperTable,
    NormalizationError,
    Normalized,
    normalize,
)
from smf_assurance.core.projection import PolicySet
from smf_assurance.core.release_trust import NoVerifiedReleaseError
from smf_assurance.pipeline.chain.contracts import EvaluateRequest
from smf_assurance.pipeline.service import StageRefusal
from smf_assurance.subjects.clock import Clock
from smf_assurance.subjects.messages import Proposal
from smf_assurance.subjects.release import ReleaseCheckError


@dataclass(frozen=True, slots=True)
class NormalizeStage:
    """Verified proposal -> ``Normalized``, or a refusal (fail closed on any error).

    ``holds`` is the gate's hold-list mirror (``HoldsMirror.view``): read in memory at
    each proposal, never from the bus, so the decision path does no I/O for it."""

    tables: Mapping[str, MapperTable]
    holds: Callable[[], GateHolds] | None = None

    async def __call__(self, proposal: Proposal) -> Normalized:
        try:
            held = None if self.holds is None else self.holds()
            return normalize(proposal, self.tables, held)
        except NormalizationError as exc:
            raise StageRefusal(exc.reason_code, str(exc)) from exc
        except Exception as exc:
            raise StageRefusal("normalization_failed", type(exc).__name__) from exc


@dataclass
class EvaluateStage:
    """``EvaluateRequest`` -> ``Decision`` under the current policy set.

    ``policy_set`` is swapped as a whole reference (releases switch between
    proposals, never in the middle of one). With ``release`` (the
    release watcher's ``current``) the policy set comes from the verified
    release instead, read once per evaluation; when no verified release is in
    force the evaluation is refused with the reason code of the
    :class:`ReleaseCheckError` (``no_verified_release``, ``release_expired``),
    so the gate denies: it never evaluates unverified policy (fail closed).
    """

    policy_set: PolicySet | None
    clock: Clock
    release: Callable[[], PolicySet] | None = None

    def current(self) -> PolicySet:
        """The one policy set for the next evaluation; raises ``ReleaseCheckError``."""
        if self.release is not None:
            return self.release()
        if self.policy_set is None:
            raise NoVerifiedReleaseError("no policy set is loaded")
        return self.policy_set

    async def __call__(self, request: EvaluateRequest) -> Decision:
        try:
            policy_set = self.current()
        except ReleaseCheckError as exc:
            raise StageRefusal(exc.reason_code, str(exc)) from exc
        return evaluate(
            request.envelope,
            policy_set,
            at_ms=self.clock(),
            operation_id=request.operation_id,
            op_hash=request.operation_hash,
            confined=request.runtime_confined,
        )
