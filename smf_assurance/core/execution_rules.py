"""Who may report an order's execution, and where a verified report leaves it; pure.

ARCHITECTURE.md, "One proposal through the bus": the connector "executes with
the idempotency key, reports on smf.result.<connector>: confirmed -> consumed |
failed -> failed | ambiguous/no report -> execution_unknown"; "Trust and
identity on the bus": a message whose signer's role does not fit is refused.

These rules hold for every order the gate gives, approved or allowed
directly, so both the approval desk (``smf_assurance.pipeline.chain.approvals``) and the
direct-allow outcome desk (``smf_assurance.pipeline.chain.outcomes``) judge reports here
and nowhere else (STYLE.md, python-tuf: the trust logic in one place, tested
without a bus):

- ``signed_by``: a report counts only when it names exactly the order, names
  the order's executor, and is signed by a key whose registry entry has the
  executor's role and id. A runtime key never settles a connector's order, a
  connector key never a runtime's, and no executor settles another's.
- ``settlement``: confirmed -> consumed, failed -> failed, ambiguous ->
  execution_unknown; a reported params mismatch is a broken binding
  (execution_unknown, never consumed).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final, Literal

import msgspec

from smf_assurance.subjects.messages import ExecutionReport
from smf_assurance.subjects.registry import Principal

__all__ = [
    "BINDING_BROKEN",
    "PARAMS_MISMATCH",
    "REPORT_OUTCOME",
    "Executor",
    "ExecutorRole",
    "Finish",
    "settlement",
    "signed_by",
]

Finish = Literal["consumed", "failed", "execution_unknown"]
ExecutorRole = Literal["connector", "runtime"]
REPORT_OUTCOME: Final[dict[str, Finish]] = {
    "confirmed": "consumed",
    "failed": "failed",
    "ambiguous": "execution_unknown",
}
"""ARCHITECTURE.md: confirmed -> consumed | failed -> failed | ambiguous -> execution_unknown."""
PARAMS_MISMATCH: Final = "executed_params_mismatch"
"""The reason an executor gives when what ran is not what was allowed
(smf_assurance/adapters/openclaw/src/gate.ts, ``afterToolCall``)."""
BINDING_BROKEN: Final = "binding_broken"
"""Evidence reason for a reported params mismatch: what was decided is not what
ran, so the order ends ``execution_unknown``, never ``consumed``."""


class Executor(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """The party an order was given to: a connector (an ExecuteOrder on
    ``smf.execute.<connector>``) or the proposing runtime (a tool it runs itself)."""

    role: ExecutorRole
    executor_id: str


def signed_by(
    executor: Executor, order_id: str, report: ExecutionReport, signers: Iterable[Principal]
) -> bool:
    """Is this report, for exactly ``order_id``, signed by the order's executor?

    The report must name the order and the executor (its ``connector_id`` field
    carries a runtime's id for a runtime-executed action), and one of
    ``signers`` (the registry principals whose keys verified) must have the
    executor's role and be registered under its id.
    """
    if report.order_id != order_id or report.connector_id != executor.executor_id:
        return False
    for principal in signers:
        entry = principal.entry
        registered = entry.connector_id if executor.role == "connector" else entry.runtime_id
        if entry.role == executor.role and registered == executor.executor_id:
            return True
    return False


def settlement(report: ExecutionReport) -> tuple[Finish, tuple[str, ...]]:
    """Where a verified report leaves its order, and the evidence reasons.

    confirmed -> consumed, failed -> failed, ambiguous -> execution_unknown
    (ARCHITECTURE.md); an executor that says the executed params were not the
    allowed ones broke the binding: ``execution_unknown`` with
    ``binding_broken``, whatever status it gave.
    """
    if report.reason_code == PARAMS_MISMATCH:
        return "execution_unknown", (BINDING_BROKEN, report.reason_code)
    return REPORT_OUTCOME[report.status], (report.reason_code,)
