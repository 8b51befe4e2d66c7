"""The gate's background loops: execution reports, sweeps, claim pruning.

Each loop outlives every transient failure (logged by type, retried) and
ends only when cancelled; ``honour_cancel`` re-raises a cancel that
``asyncio.wait_for`` (Python 3.11) lost, since a loop that swallowed it would
make ``RunningGate.close()`` wait for its task forever. It loses one two ways:
turned into a ``TimeoutError`` when it landed as the call's own deadline
passed (checked where that error is caught), or dropped when it landed as the
awaited call completed, which then returns normally (checked at the head of
every pass: a sweep at 0.2 s on a loaded machine kept a gate's close waiting).
"""

from __future__ import annotations

import asyncio

import structlog
from nats.errors import TimeoutError as NatsTimeoutError
from nats.js.client import JetStreamContext

from smf_assurance.pipeline.chain.approvals import ApprovalDesk
from smf_assurance.pipeline.chain.buffer import OutputBuffer
from smf_assurance.pipeline.chain.gate import Gate
from smf_assurance.pipeline.chain.outcomes import OutcomeDesk
from smf_assurance.subjects import names

log = structlog.get_logger(__name__)

REPORTS_DURABLE = "smf-gate-results"


def honour_cancel() -> None:
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError


async def follow_reports(js: JetStreamContext, outcomes: OutcomeDesk) -> None:
    """A durable consumer on SMF_RESULT: a report that arrives while no gate
    runs is read when one starts (the deadline sweep covers a lost report).
    Every report goes to the outcome desk, which offers it to the approval desk
    first and settles a direct order's report itself."""
    sub = await js.pull_subscribe(f"{names.RESULT_PREFIX}.>", durable=REPORTS_DURABLE)
    try:
        while True:
            honour_cancel()
            try:
                messages = await sub.fetch(16, timeout=1.0)
            except (NatsTimeoutError, TimeoutError):
                # fetch raises nats' TimeoutError or asyncio's, depending on where
                # its deadline passed; both mean "no report yet", never "stop".
                honour_cancel()
                continue
            except Exception as exc:  # noqa: BLE001 - fail-closed boundary, logged by type
                # While the connection is down fetch fails at once; the task
                # must outlive that, or reports are never read again.
                log.error("execution_report_fetch_failed", error=type(exc).__name__)
                await asyncio.sleep(1.0)
                continue
            for msg in messages:
                try:
                    await outcomes.handle_report(msg.data)
                except Exception as exc:  # noqa: BLE001 - fail-closed boundary, logged by type
                    log.error("execution_report_failed", error=type(exc).__name__)
                await msg.ack()
    finally:
        # A fetch cancelled at shutdown can leave a message in the subscription's
        # queue that nobody takes; nc.drain() would then wait for it forever.
        try:
            await sub.unsubscribe()
        except Exception as exc:  # noqa: BLE001 - fail-closed boundary, logged by type
            log.error("report_subscription_unsubscribe_failed", error=type(exc).__name__)


async def sweep(
    desk: ApprovalDesk,
    outcomes: OutcomeDesk,
    buffer: OutputBuffer,
    every: float,
    gate: Gate | None = None,
) -> None:
    """Expire overdue approvals and output streams; unknown executions, approved
    or allowed directly, end unknown; orders whose publish was not confirmed are
    settled (stored, or voided so they never run)."""
    while True:
        honour_cancel()
        await asyncio.sleep(every)
        buffer.sweep()
        if gate is not None:
            try:
                await gate.resolve_unconfirmed()
            except Exception as exc:  # noqa: BLE001 - fail-closed boundary, logged by type
                honour_cancel()
                log.error("unconfirmed_order_sweep_failed", error=type(exc).__name__)
        try:
            await desk.sweep()
        except Exception as exc:  # noqa: BLE001 - fail-closed boundary, logged by type
            honour_cancel()
            log.error("approval_sweep_failed", error=type(exc).__name__)
        try:
            await outcomes.sweep()
        except Exception as exc:  # noqa: BLE001 - fail-closed boundary, logged by type
            honour_cancel()
            log.error("order_sweep_failed", error=type(exc).__name__)


async def prune_claims(gate: Gate, every: float) -> None:
    """Keep the claim store bounded: forget claims no replay can still use
    (:attr:`GateSettings.claim_retention_ms`). Every replica of a cluster runs
    this; the KV store deletes each claim only at the revision it judged. A
    failed pass forgets nothing, so it is logged and retried, never fatal."""
    while True:
        honour_cancel()
        await asyncio.sleep(every)
        try:
            pruned = await gate.prune_claims()
        except Exception as exc:  # noqa: BLE001 - fail-closed boundary, logged by type
            honour_cancel()
            log.error("claim_prune_failed", error=type(exc).__name__)
            continue
        if pruned:
            log.info("claims_pruned", count=pruned)
