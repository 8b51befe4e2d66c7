"""The pure rules for who settles an order and how
(``smf_assurance.core.execution_rules``).

ARCHITECTURE.md, "Trust and identity on the bus" and "One proposal through
the bus". No bus, no store: principals are built from registry entries here.
What these prove: only the order's executor (role and id, naming itself and
exactly the order) settles it; confirmed/failed/ambiguous map to
consumed/failed/execution_unknown and a params mismatch is a broken binding.
What they do not prove: that the gate applies them (the desk tests do).
"""

from __future__ import annotations

from typing import Any, Final

import pytest

from smf_assurance.core.execution_rules import Executor, settlement, signed_by
from smf_assurance.subjects.keys import generate_signing_key
from smf_assurance.subjects.messages import ExecutionReport
from smf_assurance.subjects.registry import Principal, entry_for

ORDER: Final = "a" * 64


def principal(
    role: Any, *, connector_id: str | None = None, runtime_id: str | None = None
) -> Principal:
    key = generate_signing_key()
    entry = entry_for(key, f"{role}-x", role, connector_id=connector_id, runtime_id=runtime_id)
    return Principal(entry=entry, verify_key=key.verify_key)


def report(
    executor_id: str, order_id: str = ORDER, status: Any = "confirmed", reason: str = "executed"
) -> ExecutionReport:
    return ExecutionReport(
        schema="smf.execution-report/1",
        order_id=order_id,
        connector_id=executor_id,
        status=status,
        reason_code=reason,
        at_ms=1,
    )


DMS: Final = Executor("connector", "dms")
RUNTIME: Final = Executor("runtime", "openclaw-1")


@pytest.mark.parametrize(
    ("executor", "signer", "named", "order_id", "expected"),
    [
        (DMS, principal("connector", connector_id="dms"), "dms", ORDER, True),
        (DMS, principal("connector", connector_id="court-efiling"), "dms", ORDER, False),
        (DMS, principal("connector", connector_id="dms"), "court-efiling", ORDER, False),
        (DMS, principal("connector", connector_id="dms"), "dms", "b" * 64, False),
        (DMS, principal("runtime", runtime_id="dms"), "dms", ORDER, False),
        (RUNTIME, principal("runtime", runtime_id="openclaw-1"), "openclaw-1", ORDER, True),
        (RUNTIME, principal("runtime", runtime_id="hermes-1"), "openclaw-1", ORDER, False),
        (RUNTIME, principal("connector", connector_id="openclaw-1"), "openclaw-1", ORDER, False),
        (RUNTIME, principal("approver"), "openclaw-1", ORDER, False),
    ],
)
def test_only_the_orders_executor_settles_it(
    executor: Executor, signer: Principal, named: str, order_id: str, expected: bool
) -> None:
    assert signed_by(executor, ORDER, report(named, order_id), [signer]) is expected


def test_no_signer_settles_nothing() -> None:
    assert signed_by(DMS, ORDER, report("dms"), []) is False


@pytest.mark.parametrize(
    ("status", "reason", "expected"),
    [
        ("confirmed", "executed", ("consumed", ("executed",))),
        ("failed", "not_found", ("failed", ("not_found",))),
        ("ambiguous", "ambiguous_execution", ("execution_unknown", ("ambiguous_execution",))),
        (
            "confirmed",
            "executed_params_mismatch",
            ("execution_unknown", ("binding_broken", "executed_params_mismatch")),
        ),
    ],
)
def test_settlement(status: Any, reason: str, expected: Any) -> None:
    assert settlement(report("dms", status=status, reason=reason)) == expected
