"""Tool-call accounting at the gate (issue 16): a tool result no proposal decided stops
its runtime.

The model gateway gives every tool call the model emits its own id and, when a
later request carries a tool result for one of them, asks here
(``smf.gateway.calls``) whether the gate decided a proposal carrying that id.
Invariants this module keeps:

- **Recorded before anything else.** :class:`DecidedCalls` remembers
  ``(runtime_id, tool_call_id)`` of every verified proposal at the gate chain's
  first link, before admission (``smf_assurance.pipeline.chain.gate``): a proposal the gate
  refused was still decided, and its hook blocked the call.
- **Bounded.** At most :attr:`DecidedCalls.per_runtime` ids per runtime and
  :attr:`DecidedCalls.max_runtimes` runtimes, oldest forgotten first. A
  forgotten id is reported uncovered: the index fails closed, never open.
- **Uncovered stops the runtime.** The stop is in force at once, then stored
  (``smf_assurance.pipeline.desks.runtime_stops``), then one ledger entry
  (``ungated_tool_result``, ``model_request_refused``; ids only) is written,
  all before the answer: the gateway's admission and the runtime's proposals
  are refused with ``runtime_stopped_ungated_tool_result`` until an operator
  clears it (``smf.gateway.clear``), whose clear is recorded in the ledger. A
  ledger or store outage does not prevent the stop (the answer names it).
- **Tools not offered are refusals, not stops.** A call the model made to a tool the
  request did not offer (the gateway says which, ``GatewayCalls.not_offered``) is
  answered by the runtime itself with an error before any hook of ours sees it; when
  no proposal carried it, it is recorded as a refusal (``unknown_tool``,
  ``tool_not_offered_by_runtime``, one entry per call) and noted decided. So is a
  call whose arguments certainly failed the schema the request offered for its tool
  (``GatewayCalls.invalid_arguments``; OpenClaw checks them before any hook):
  ``tool_arguments_invalid``, ``tool_arguments_rejected_by_runtime``. In a turn a
  runtime refused whole because a call's arguments were not JSON (Hermes, on a turn
  it did not stream), that call is such a one and each other call
  (``GatewayCalls.invalid_turn``) is recorded as ``tool_call_turn_invalid``,
  ``tool_call_skipped_by_runtime``. A call an
  adapter refused itself is reported as a proposal (``Proposal.refused_locally``),
  denied and noted at the gate's first link like any other. So ``ungated_tool_result``
  means a result of a call that was offered and reached no gate decision.
- **Signed answers.** The answer is signed with the gate key
  (:data:`names.PAYLOAD_GATEWAY_CALLS`): no other client can tell the gateway
  that a tool result was decided.
- **Kept across a restart.** Stops and notes are stored
  (``smf_assurance.pipeline.stores.tool_calls``: in the ledger file on one machine, where a
  note rides in the decision's evidence transaction, ``Gate._record``; JetStream
  KV on a cluster) and loaded before the gate serves; :class:`DecidedCalls` is
  their in-memory mirror, which every answer reads.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final, TypeVar

import msgspec
import structlog

from smf_assurance.pipeline.desks.attestation import AttestationDesk
from smf_assurance.pipeline.desks.runtime_stops import RuntimeStops
from smf_assurance.pipeline.service import StageRefusal
from smf_assurance.pipeline.stores.evidence import EvidenceWriter
from smf_assurance.subjects import dsse, names
from smf_assurance.subjects.keys import SigningKey
from smf_assurance.subjects.model_gateway import GatewayCalls, GatewayCallsAnswer, GatewayClear

log = structlog.get_logger(__name__)
T = TypeVar("T")

UNGATED: Final = "ungated_tool_result"
REFUSED: Final = "model_request_refused"
STOPPED: Final = "runtime_stopped_ungated_tool_result"
MAX_CALLS_BYTES: Final = 64 * 1024
NOT_OFFERED_REASONS: Final = ("unknown_tool", "tool_not_offered_by_runtime")
"""A call the model made to a tool the runtime's request did not offer."""
INVALID_ARGUMENTS_REASONS: Final = ("tool_arguments_invalid", "tool_arguments_rejected_by_runtime")
"""A call whose arguments certainly failed the schema the request offered for its tool
(``smf_assurance.core.tool_arguments``), or were not JSON in a turn its runtime
refused whole for that."""
INVALID_TURN_REASONS: Final = ("tool_call_turn_invalid", "tool_call_skipped_by_runtime")
"""A call whose own arguments were fine, in a turn its runtime refused whole because
another call's were not JSON (Hermes answers each such call itself, before any hook)."""


@dataclass
class DecidedCalls:
    """The tool-call ids of verified proposals, per runtime, bounded (oldest first out)."""

    per_runtime: int = 8192
    max_runtimes: int = 1024
    _seen: OrderedDict[str, OrderedDict[str, None]] = field(default_factory=OrderedDict)

    def add(self, runtime_id: str, tool_call_id: str) -> None:
        ids = self._seen.get(runtime_id)
        if ids is None:
            while len(self._seen) >= self.max_runtimes:
                self._seen.popitem(last=False)
            ids = self._seen[runtime_id] = OrderedDict()
        self._seen.move_to_end(runtime_id)
        ids[tool_call_id] = None
        ids.move_to_end(tool_call_id)
        while len(ids) > self.per_runtime:
            ids.popitem(last=False)

    def load(self, notes: list[tuple[str, str]]) -> None:
        """Stored notes, oldest first, noted again in their order (at a gate's start)."""
        for runtime_id, tool_call_id in notes:
            self.add(runtime_id, tool_call_id)

    def covered(self, runtime_id: str, tool_call_id: str) -> bool:
        ids = self._seen.get(runtime_id)
        return ids is not None and tool_call_id in ids

    def __len__(self) -> int:
        return sum(len(ids) for ids in self._seen.values())


@dataclass(frozen=True)
class ToolCallDesk:
    """Serves ``smf.gateway.calls`` (the gateway) and ``smf.gateway.clear`` (operators)."""

    calls: DecidedCalls
    attestation: AttestationDesk
    stops: RuntimeStops
    evidence: EvidenceWriter
    release_id: Callable[[], str | None]
    signer: SigningKey

    async def handle_calls(self, data: bytes) -> bytes:
        ask = _decode(data, GatewayCalls, "malformed_calls")
        if ask.runtime_id not in self.attestation.known_runtimes():
            raise StageRefusal("unknown_runtime")
        not_covered = tuple(
            dict.fromkeys(i for i in ask.tool_call_ids if not self.calls.covered(ask.runtime_id, i))
        )
        reasons = {i: INVALID_TURN_REASONS for i in ask.invalid_turn}
        reasons.update({i: INVALID_ARGUMENTS_REASONS for i in ask.invalid_arguments})
        reasons.update({i: NOT_OFFERED_REASONS for i in ask.not_offered})
        uncovered = tuple(i for i in not_covered if i not in reasons)
        answer = GatewayCallsAnswer(
            schema="smf.gateway-calls-answer/1",
            request_id=ask.request_id,
            runtime_id=ask.runtime_id,
            uncovered=uncovered,
        )
        if uncovered:
            # a stop wins: nothing of this ask is recorded as a refusal
            answer = await self._stop(ask, answer)
        else:
            refused = [(i, reasons[i]) for i in not_covered if i in reasons]
            if refused:
                answer = await self._refuse_unrun(ask, answer, refused)
        return dsse.encode_envelope(
            dsse.sign_struct(names.PAYLOAD_GATEWAY_CALLS, answer, [self.signer])
        )

    async def _refuse_unrun(
        self,
        ask: GatewayCalls,
        answer: GatewayCallsAnswer,
        calls: list[tuple[str, tuple[str, str]]],
    ) -> GatewayCallsAnswer:
        """Calls no proposal carried that the runtime answered with an error of its own
        before any hook could propose them (a tool it did not offer, arguments that
        fail the tool's schema, a turn refused whole for arguments that are not JSON):
        each is recorded as the refusal it was, with its
        reasons (one entry each, ids only), and noted decided; the runtime is not
        stopped. A refusal the ledger did not take is not noted (``unrecorded``:
        evidence first, so the gateway refuses the request and asks again). The
        gateway says which calls were such; it computed that from the very request
        the model answered."""
        tenant_ref = self.evidence.tenant_ref(ask.tenant_id)
        refused: list[str] = []
        unrecorded: list[str] = []
        evidence: list[str] = []
        codes: dict[str, None] = {}
        for call_id, reasons in calls:
            codes.update(dict.fromkeys(reasons))
            subject = {
                "model_request": ask.request_id,
                "runtime_id": ask.runtime_id,
                "tool_call_id": call_id,
            }
            entry = self.evidence.for_refusal(subject, tenant_ref, self.release_id(), reasons)
            _, recorded = await self.evidence.record_refusal(entry)
            if recorded:
                self.calls.add(ask.runtime_id, call_id)
                refused.append(call_id)
                evidence += recorded
            else:
                unrecorded.append(call_id)
        log.info(
            "unrun_tool_calls_refused",
            runtime_id=ask.runtime_id,
            refused=len(refused),
            unrecorded=len(unrecorded),
        )
        lost = ("evidence_store_unavailable",) if unrecorded else ()
        return msgspec.structs.replace(
            answer,
            reason_codes=(*codes, *lost),
            evidence=tuple(evidence),
            refused=tuple(refused),
            unrecorded=tuple(unrecorded),
        )

    async def _stop(self, ask: GatewayCalls, answer: GatewayCallsAnswer) -> GatewayCallsAnswer:
        subject = {
            "model_request": ask.request_id,
            "runtime_id": ask.runtime_id,
            "tool_call_ids": ",".join(answer.uncovered),
        }
        reasons, recorded = await self.stops.stop_recorded(
            ask.runtime_id, ask.tenant_id, subject, (UNGATED, REFUSED), STOPPED
        )
        return msgspec.structs.replace(
            answer, stopped=True, reason_codes=reasons, evidence=recorded
        )

    async def handle_clear(self, data: bytes) -> bytes:
        """An operator's clear (only the operator role may publish it,
        ``smf_assurance.subjects.bus_access``): lifted only once it is in the ledger
        (:meth:`RuntimeStops.clear`)."""
        ask = _decode(data, GatewayClear, "malformed_clear")
        return msgspec.json.encode(await self.stops.clear(ask.runtime_id))


def _decode(data: bytes, type_: type[T], reason: str) -> T:
    if len(data) > MAX_CALLS_BYTES:
        raise StageRefusal(reason, "too large")
    try:
        return msgspec.json.decode(data, type=type_)
    except msgspec.ValidationError as exc:
        raise StageRefusal(reason, "invalid message") from exc
    except msgspec.DecodeError as exc:
        raise StageRefusal(reason, "not JSON") from exc
