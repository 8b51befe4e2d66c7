"""What the chain needs of where the gate runs: one machine or a cluster.

ARCHITECTURE.md, "One proposal through the bus" and "Scale". The chain writes the same
things on both: the decision's evidence entry, the proposal's claim and, for a
connector, its order, a claim's settle, and the note of the proposal's tool call. Where
they live decides how they are written, and that is this module's one protocol,
:class:`Deployment`, whose two implementations the assembly chooses once
(``smf_assurance.pipeline.assembly.deployment``):

- one machine: the claims, the order book and the tool-call notes are tables in the
  ledger file, so an allow's claim and order, and every decision's note, commit in the
  transaction of the decision's evidence entry (one durable commit per decision; no
  crash leaves a claim or an order without the evidence of its decision, or the
  reverse);
- a cluster: they are replicated KV buckets, written beside the chain (an allow's
  claim, then its order, once the evidence has committed; the note while the chain
  runs), and every noted tool-call id is told to the other replicas before the verdict
  is answered.

The chain never asks which one it runs on: it hands its writes to the deployment.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Protocol

from smf_assurance.pipeline.stores.claims import ClaimAndOrder, ClaimState
from smf_assurance.pipeline.stores.evidence import EvidenceWriter
from smf_assurance.pipeline.stores.ledger import Beside, EvidenceEntry, Receipt
from smf_assurance.pipeline.stores.orders import OrderRecord
from smf_assurance.pipeline.stores.sqlite_worker import StoreUnavailable
from smf_assurance.pipeline.stores.tool_calls import ToolCallStore


class CallNote(Protocol):
    """The note that a proposal's tool call was decided, on its way to its store
    (``smf_assurance.pipeline.desks.tool_calls``): durable before the verdict is
    answered, so a tool result that comes back after a restart is still covered."""

    def beside(self) -> Beside | None:
        """The note as a write in the decision's evidence transaction (it then adds no
        commit of its own), or None when it cannot ride there."""
        ...

    async def stored(self) -> None:
        """Wait until a note that did not ride beside the evidence is durable; raises
        ``StoreUnavailable`` or ``EvidenceError`` when it cannot be."""
        ...


class _NoNote:
    """A proposal with no tool call to note."""

    def beside(self) -> Beside | None:
        return None

    async def stored(self) -> None:
        return None


NO_NOTE: Final[CallNote] = _NoNote()


@dataclass(frozen=True, slots=True)
class AllowClaim:
    """What an allow claims: its proposal, once, and for a connector the order it gives
    at ``at_ms`` (the one clock read the order's deadline counts from)."""

    proposal_id: str
    operation_hash: str
    decision_id: str
    at_ms: int
    order: OrderRecord | None


@dataclass(frozen=True, slots=True)
class Recording:
    """What committed with a decision's evidence entry."""

    receipt: Receipt
    noted: bool
    """The tool call's note committed in the entry's transaction."""
    claim: ClaimAndOrder | StoreUnavailable | None = None
    """The allow's claim (and its order), or the outage that refused it; None when no
    claim was asked for."""
    order_at_ms: int | None = None
    """When the order recorded with the claim was given."""


class Deployment(Protocol):
    """Where the chain's claims, order book and tool-call notes live, and so how it
    writes them (this module's docstring)."""

    @property
    def calls(self) -> ToolCallStore:
        """The decided tool calls and the stops, kept across a restart."""
        ...

    def note(self, runtime_id: str, call_id: str) -> CallNote:
        """The note of a decided tool call, begun when its proposal is verified."""
        ...

    async def share_call(self, runtime_id: str, call_id: str) -> None:
        """Tell every other replica of a decided tool-call id, before its verdict."""
        ...

    async def record(
        self,
        evidence: EvidenceWriter,
        entry: EvidenceEntry,
        note: Beside | None,
        claim: AllowClaim | None,
    ) -> Recording:
        """Write-before-release: the decision's evidence entry, with the note that rides
        beside it, and for an allow (``claim``) its claim and, if it is the first, its
        order, never before the entry commits. Raises ``EvidenceError`` when the entry
        did not commit (then nothing was claimed)."""
        ...

    async def settle(self, proposal_id: str, state: ClaimState) -> None:
        """Record how a claim ended; raises ``StoreUnavailable`` or ``EvidenceError``."""
        ...


async def append_noted(
    evidence: EvidenceWriter, entry: EvidenceEntry, note: Beside | None
) -> Recording:
    """The entry, and the note in its transaction when there is one to write."""
    if note is None:
        return Recording(await evidence.append(entry), noted=False)
    receipt, written = await evidence.append_beside(entry, note)
    return Recording(receipt, noted=not isinstance(written, StoreUnavailable))
