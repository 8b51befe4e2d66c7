"""The runtime side of ``smf.propose``: sign a proposal, ask the gate, read the verdict.

Adapters depend on ``subjects/`` only (ARCHITECTURE.md, "Layers"), so this
client installs into a runtime's environment with nats-py and msgspec. It
fails closed: no reply, an error reply, a reply no gate key signed
(``smf_assurance.subjects.verdicts``) or one that is not a Verdict for this proposal all
become a ``deny`` Verdict with a reason code, never an exception the caller
might forget to treat as a denial.
"""

from __future__ import annotations

import re
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from nats.aio.client import Client
from nats.errors import Error as NatsError

from smf_assurance.subjects import names
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
    gate_keys: Mapping[str, VerifyKey] = field(kw_only=True)
    """The registry's ``gate`` keys: only a verdict one of them signed is read."""

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
    ) -> Proposal:
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
            issued_at_ms=issued_at_ms if issued_at_ms is not None else int(time.time() * 1000),
            tool_call_id=tool_call_id,
        )

    def sign(self, proposal: Proposal) -> bytes:
        return encode_envelope(sign_struct(names.PAYLOAD_PROPOSAL, proposal, [self.key]))

    async def send(self, proposal_id: str, signed: bytes) -> Verdict:
        """Send signed proposal bytes; every failure is a deny Verdict."""
        try:
            reply = await self.nc.request(names.PROPOSE, signed, timeout=self.timeout)
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
        return await self.send(proposal.proposal_id, self.sign(proposal))


def _transport_reason(exc: Exception) -> str:
    name = type(exc).__name__
    if "NoResponders" in name:
        return "gate_unreachable"
    if "Timeout" in name:
        return "gate_timeout"
    return "gate_transport_error"
