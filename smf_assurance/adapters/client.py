"""The runtime side of ``smf.propose``: sign a proposal, ask the gate, read the verdict.

Adapters depend on ``subjects/`` only (ARCHITECTURE.md, "Layers"), so this
client installs into a runtime's environment with nats-py and msgspec. It
fails closed: no reply, an error reply, a reply no gate key signed
(``smf_assurance.subjects.verdicts``) or one that is not a Verdict for this proposal all
become a ``deny`` Verdict with a reason code, never an exception the caller
might forget to treat as a denial.

The requester's deadline (docs/SUBJECTS.md, "Requester's
deadline"): every proposal built here carries ``reply_by_ms``, its issue time
plus :attr:`ProposalClient.timeout`, and the client waits for the verdict until
that time plus :attr:`ProposalClient.grace` on its own clock. The gate starts no
order publish and no hold after ``reply_by_ms`` on its clock, and each publish it
starts ends (acknowledged or given up) by then. So, with the gate's and the
runtime's clocks within ``grace`` of each other (one host, or NTP-kept hosts) and
the reply's transit inside it too, a ``gate_timeout`` means no order was started
late; an order can be behind one only when the gate stopped (a crash) or the bus
lost the reply after the order was stored. Such an outcome, and one the gate
cannot confirm (``dispatch_unconfirmed``), are :data:`UNSETTLED_REASONS`: the
runtime must neither run the action itself nor assume it did not run, and learns
what happened with :meth:`ProposalClient.recorded` (the same signed proposal sent
again after its deadline, which the gate answers from its records), within the
gate's freshness window (two minutes after the proposal was issued).
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import msgspec
from nats.aio.client import Client
from nats.errors import Error as NatsError

from smf_assurance.subjects import names
from smf_assurance.subjects.clock import wall_clock_ms
from smf_assurance.subjects.dsse import (
    MalformedPayloadError,
    SignatureError,
    encode_envelope,
    sign_struct,
)
from smf_assurance.subjects.envelope import Surface
from smf_assurance.subjects.keys import VerifyKey
from smf_assurance.subjects.messages import (
    ActorContext,
    DataFacts,
    Proposal,
    ProposedDestination,
    Verdict,
)
from smf_assurance.subjects.signer import Signer
from smf_assurance.subjects.verdicts import NOT_SIGNED_BY_GATE, VerdictMismatchError, open_verdict

_TOOL_CALL_ID: Final = re.compile(r"[A-Za-z0-9_-]{1,128}")
DEFAULT_GRACE: Final = 1.0
"""Seconds the client waits past its deadline: the reply's transit and the
difference between the gate's clock and the runtime's."""
UNSETTLED_REASONS: Final = frozenset(
    {
        "gate_timeout",
        "gate_transport_error",
        "dispatch_unconfirmed",
        "verdict_pending",
        "order_outcome_unknown",
    }
)
"""Denials the client makes (or the gate's error replies) that say no verdict is
known: an order may exist. Ask :meth:`ProposalClient.recorded` later."""


def unsettled(verdict: Verdict) -> bool:
    """Whether this denial says only that no verdict is known (yet)."""
    return verdict.outcome == "deny" and not UNSETTLED_REASONS.isdisjoint(verdict.reason_codes)


def tool_call_id_of(raw: object) -> str | None:
    """The model's tool-call id as a proposal may carry it
    (``smf_assurance.subjects.patterns.ToolCallId``),
    or None: an id the contract cannot carry is left out rather than make the
    proposal malformed (its result is then reported ungated, fail closed)."""
    if isinstance(raw, str) and _TOOL_CALL_ID.fullmatch(raw):
        return raw
    return None


def new_proposal_id() -> str:
    return "p-" + secrets.token_hex(16)


def denial(proposal_id: str, reason: str) -> Verdict:
    return Verdict(
        schema="smf.verdict/1", proposal_id=proposal_id, outcome="deny", reason_codes=(reason,)
    )


@dataclass(frozen=True, slots=True)
class ProposalClient:
    nc: Client
    key: Signer
    runtime_id: str
    runtime_version: str
    adapter_id: str
    timeout: float = 5.0
    """How long the gate has to answer: a built proposal's deadline is its issue time
    plus this."""
    gate_keys: Mapping[str, VerifyKey] = field(kw_only=True)
    """The registry's ``gate`` keys: only a verdict one of them signed is read."""
    grace: float = field(default=DEFAULT_GRACE, kw_only=True)
    """How long past the deadline the client still waits (see the module docstring)."""

    def build(
        self,
        *,
        native_tool: str,
        arguments: dict[str, Any],
        actor: ActorContext,
        facts: DataFacts,
        content: str = "",
        destination: ProposedDestination | None = None,
        surface: Surface = "tool_call",
        proposal_id: str | None = None,
        issued_at_ms: int | None = None,
        tool_call_id: str | None = None,
        reply_by_ms: int | None = None,
        refused_locally: str | None = None,
    ) -> Proposal:
        issued = issued_at_ms if issued_at_ms is not None else wall_clock_ms()
        return Proposal(
            schema="smf.proposal/1",
            proposal_id=proposal_id or new_proposal_id(),
            runtime_id=self.runtime_id,
            runtime_version=self.runtime_version,
            adapter_id=self.adapter_id,
            surface=surface,
            native_tool=native_tool,
            arguments=arguments,
            content=content,
            destination=destination or ProposedDestination(),
            actor=actor,
            facts=facts,
            issued_at_ms=issued,
            tool_call_id=tool_call_id,
            reply_by_ms=reply_by_ms if reply_by_ms is not None else issued + self._timeout_ms,
            refused_locally=refused_locally,
        )

    def again(self, proposal: Proposal) -> Proposal:
        """The same action proposed anew: a new proposal id, issued now, with a deadline
        of its own (none when the first had none), and no tool call it answers. The
        first one's deadline has long passed when its approval expired, and a gate
        decides nothing past a deadline (docs/SUBJECTS.md, "Requester's deadline and
        recorded verdicts")."""
        issued = wall_clock_ms()
        return msgspec.structs.replace(
            proposal,
            proposal_id=new_proposal_id(),
            issued_at_ms=issued,
            reply_by_ms=None if proposal.reply_by_ms is None else issued + self._timeout_ms,
            tool_call_id=None,
        )

    @property
    def _timeout_ms(self) -> int:
        return int(self.timeout * 1000)

    def sign(self, proposal: Proposal) -> bytes:
        return encode_envelope(sign_struct(names.PAYLOAD_PROPOSAL, proposal, [self.key]))

    async def send(self, proposal_id: str, signed: bytes, *, wait: float | None = None) -> Verdict:
        """Send signed proposal bytes and wait ``wait`` seconds (the timeout and the
        grace when not given); every failure is a deny Verdict."""
        waited = self.timeout + self.grace if wait is None else wait
        try:
            reply = await self.nc.request(names.PROPOSE, signed, timeout=max(waited, 0.001))
        except (NatsError, TimeoutError) as exc:
            return denial(proposal_id, _transport_reason(exc))
        headers = reply.headers or {}
        if names.HEADER_SERVICE_ERROR_CODE in headers:
            reason = headers.get(names.HEADER_SERVICE_ERROR, "gate_error")
            return denial(proposal_id, reason if reason.isidentifier() else "gate_error")
        try:
            return open_verdict(reply.data, self.gate_keys, proposal_id=proposal_id)
        except MalformedPayloadError:
            return denial(proposal_id, "unreadable_verdict")
        except SignatureError:
            return denial(proposal_id, NOT_SIGNED_BY_GATE)
        except VerdictMismatchError:
            return denial(proposal_id, "verdict_for_another_proposal")

    async def propose(self, proposal: Proposal) -> Verdict:
        """Sign and send; wait until the proposal's deadline plus the grace."""
        return await self.send(
            proposal.proposal_id, self.sign(proposal), wait=self._wait_for(proposal)
        )

    def _wait_for(self, proposal: Proposal) -> float | None:
        if proposal.reply_by_ms is None:
            return None
        return (proposal.reply_by_ms - wall_clock_ms()) / 1000 + self.grace

    async def recorded(self, proposal_id: str, signed: bytes) -> Verdict:
        """The recorded verdict of a proposal whose deadline has passed: the same signed
        bytes sent again, which the gate answers from what it recorded (an allow with
        its order and where the order stands, a deny, the open approval of a held
        proposal) and never decides again. Still unsettled (:func:`unsettled`) while
        the gate does not know whether its order exists or ran; ask again later."""
        return await self.send(proposal_id, signed)


def _transport_reason(exc: Exception) -> str:
    name = type(exc).__name__
    if "NoResponders" in name:
        return "gate_unreachable"
    if "Timeout" in name:
        return "gate_timeout"
    return "gate_transport_error"
