"""The board: what has been held (from the stream) and where it stands (from the gate).

Announcements carry identities and reasons only, never content or recipient
(ARCHITECTURE.md, "Exact-action approval"), so the board holds nothing an
approver could not be shown; :meth:`ApprovalBoard.listed_for` still lists
only what the roster entitles an approver to resolve.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

import msgspec
import structlog
from nats.aio.client import Client
from nats.errors import Error as NatsError

from smf_assurance.approver.console.access import entitled
from smf_assurance.approver.pending import PendingReader, approval_state
from smf_assurance.subjects.approvals import TERMINAL_STATES, PendingAnnouncement
from smf_assurance.subjects.bus_access import bus_error_reason
from smf_assurance.subjects.clock import monotonic_s
from smf_assurance.subjects.registry import Principal

log = structlog.get_logger(__name__)

RETAIN_CLOSED_MS: Final = 3_600_000
"""Closed approvals stay listed (greyed) as long as the stream keeps their announcement."""
CLOSED_STATES: Final = TERMINAL_STATES | {"unknown"}
"""``unknown``: the gate holds no record of the id; nothing more will happen to it."""


class ListedApproval(msgspec.Struct, frozen=True):
    """One approval as the list shows it: the announcement's identities and its state."""

    approval_id: str
    state: str
    tenant_id: str
    capability: str
    channel: str
    locality: str
    native_tool: str
    rule_ids: tuple[str, ...]
    reason_codes: tuple[str, ...]
    required_roles: tuple[str, ...]
    created_at_ms: int
    expires_at_ms: int


@dataclass
class Tracked:
    announcement: PendingAnnouncement
    state: str = "pending"


class ApprovalBoard:
    """What has been held, and where each approval stands now.

    Announcements come from :class:`smf_assurance.approver.pending.PendingReader` (the
    reader the command line uses too), from the last sequence seen, so
    approvals held before the console started are listed too.
    Open approvals are asked their state on ``smf.approval.status`` each
    refresh; closed ones are never asked again.
    """

    def __init__(self, nc: Client, clock: Callable[[], int], timeout: float) -> None:
        self.nc = nc
        self.clock = clock
        self.timeout = timeout
        self.entries: dict[str, Tracked] = {}
        self.gate_answering = False
        self.fed_at: float | None = None
        """``monotonic_s()`` of the last refresh that completed (``/healthz``)."""
        self.reader = PendingReader(nc)
        self._wake = asyncio.Event()

    def wake(self) -> None:
        """Refresh now (after a resolution, so its outcome shows without waiting)."""
        self._wake.set()

    async def run(self, interval: float) -> None:
        task = asyncio.current_task()
        while True:
            try:
                await self.refresh()
            except (NatsError, TimeoutError) as exc:
                self.gate_answering = False
                log.warning("console_refresh_failed", error=bus_error_reason(exc))
            except Exception:  # a list that silently stops updating would mislead approvers
                self.gate_answering = False
                log.exception("console_refresh_crashed")
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(interval):
                    await self._wake.wait()
            self._wake.clear()
            # Python 3.11's wait_for (inside nats-py's requests) can swallow a cancel
            # that lands as its inner call completes; honour it here, or the console's
            # close waits for this loop forever.
            if task is not None and task.cancelling():
                raise asyncio.CancelledError

    async def refresh(self) -> None:
        await self._read_announcements()
        await self._refresh_states()
        self._prune()
        self.fed_at = monotonic_s()

    async def _read_announcements(self) -> None:
        try:
            announcements = await self.reader.read_new()
        except (NatsError, TimeoutError) as exc:
            # no gate lists them now: the states' probe tells whether one answers
            log.debug("console_announcements_unread", error=bus_error_reason(exc))
            return
        for announcement in announcements:
            self.entries.setdefault(announcement.approval_id, Tracked(announcement))

    async def _state(self, approval_id: str) -> str:
        return await approval_state(self.nc, approval_id, self.timeout)

    async def _refresh_states(self) -> None:
        # One probe that always gets an answer from a live gate, even with nothing open.
        try:
            await self._state("")
            self.gate_answering = True
        except (NatsError, TimeoutError, msgspec.DecodeError):
            self.gate_answering = False
            return
        open_ids = [k for k, t in self.entries.items() if t.state not in CLOSED_STATES]
        states = await asyncio.gather(*map(self._state, open_ids), return_exceptions=True)
        for approval_id, state in zip(open_ids, states, strict=True):
            if isinstance(state, str):
                self.entries[approval_id].state = state

    def _prune(self) -> None:
        horizon = self.clock() - RETAIN_CLOSED_MS
        self.entries = {
            k: t
            for k, t in self.entries.items()
            if t.state not in CLOSED_STATES or t.announcement.expires_at_ms >= horizon
        }

    def tenant_ids(self, principal: Principal) -> list[str]:
        """Ids held for the principal's tenants: candidates for their own requests (issue
        23). The gate, not this list, decides which are theirs (``smf.approval.track``)."""
        tenants = set(principal.entry.tenants)
        return [k for k, t in self.entries.items() if t.announcement.tenant_id in tenants]

    def listed(self, approval_id: str) -> ListedApproval | None:
        tracked = self.entries.get(approval_id)
        return None if tracked is None else _listed(tracked)

    def listed_for(self, principal: Principal) -> list[ListedApproval]:
        return [
            _listed(t)
            for t in self.entries.values()
            if entitled(principal, t.announcement.tenant_id, t.announcement.required_roles)
        ]


def _listed(tracked: Tracked) -> ListedApproval:
    a = tracked.announcement
    return ListedApproval(
        approval_id=a.approval_id,
        state=tracked.state,
        tenant_id=a.tenant_id,
        capability=a.capability,
        channel=a.channel,
        locality=a.locality,
        native_tool=a.native_tool,
        rule_ids=a.rule_ids,
        reason_codes=a.reason_codes,
        required_roles=a.required_roles,
        created_at_ms=a.created_at_ms,
        expires_at_ms=a.expires_at_ms,
    )
