"""The runtime side of a re-request: propose an expired held action anew, never revive it.

An expired approval is not a dead end: the requester can re-request an
expired one (a new proposal, a new binding; never a revival of the old one). The
gate purges an approval's content when it expires (ARCHITECTURE.md, "Exact-action
approval"), so only the runtime that proposed the action still has it. This keeps,
in memory, the proposals this runtime had held (bounded, oldest dropped first) and,
on the gate-signed :class:`~smf_assurance.subjects.approvals.AskAgain` for one of
them, proposes the same action again under a new proposal id and time. The gate then
decides it from the start: a new decision, binding and approval id, or whatever the
release in force says now (a deny included). The old approval stays expired.

Fail closed: a notice that no gate key signed, that names another approval or
another decision or operation than the held verdict did, or that names a proposal
this process does not hold, proposes nothing. Each held proposal is proposed again
at most once per notice it is held for (it is forgotten when used; the new verdict,
if held, is remembered in its place). Logs name approval ids only, never content.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Final

import msgspec
import structlog
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from smf_assurance.adapters.client import ProposalClient
from smf_assurance.subjects import dsse, names
from smf_assurance.subjects.approvals import open_ask_again
from smf_assurance.subjects.messages import Proposal, Verdict

log = structlog.get_logger(__name__)

MAX_HELD: Final = 256
"""How many held proposals a runtime keeps for a re-request."""

OnVerdict = Callable[[Verdict], Awaitable[None]]


class HeldProposals:
    """Proposes through ``client`` and remembers what the gate held, for a re-request."""

    def __init__(
        self,
        client: ProposalClient,
        *,
        capacity: int = MAX_HELD,
        on_verdict: OnVerdict | None = None,
    ) -> None:
        self.client = client
        self.capacity = capacity
        self.on_verdict = on_verdict
        """Told the verdict of every proposal made again (a runtime reports it to its user)."""
        self._held: OrderedDict[str, tuple[Proposal, Verdict]] = OrderedDict()

    async def propose(self, proposal: Proposal) -> Verdict:
        verdict = await self.client.propose(proposal)
        if verdict.outcome == "held" and verdict.approval_id is not None:
            self._held[verdict.approval_id] = (proposal, verdict)
            while len(self._held) > self.capacity:
                self._held.popitem(last=False)
        return verdict

    async def serve(self) -> Subscription:
        """Listen for notices on ``smf.approval.again.>``; the caller unsubscribes."""
        return await self.client.nc.subscribe(
            f"{names.APPROVAL_AGAIN_PREFIX}.>", cb=self._on_notice
        )

    async def _on_notice(self, msg: Msg) -> None:
        approval_id = "sha256:" + msg.subject.rsplit(".", 1)[-1]
        held = self._held.get(approval_id)
        if held is None:
            return  # not ours, or already asked again
        proposal, verdict = held
        try:
            notice = open_ask_again(msg.data, self.client.gate_keys, approval_id=approval_id)
        except (dsse.SignatureError, msgspec.ValidationError) as exc:
            log.warning("ask_again_refused", approval_id=approval_id, error=type(exc).__name__)
            return
        if (notice.decision_id, notice.operation_hash) != (
            verdict.decision_id,
            verdict.operation_hash,
        ):
            log.warning("ask_again_refused", approval_id=approval_id, error="other_decision")
            return
        del self._held[approval_id]
        answer = await self.propose(self.client.again(proposal))
        log.info(
            "asked_again",
            approval_id=approval_id,
            outcome=answer.outcome,
            new_approval_id=answer.approval_id,
        )
        if self.on_verdict is not None:
            await self.on_verdict(answer)
