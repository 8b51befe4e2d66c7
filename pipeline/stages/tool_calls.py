"""Tool-call accounting at the gate (issue 16): a tool result no proposal decided stops
its runtime.

The model gateway gives every tool call the model emits its own id and, when a
later request carries a tool result for one of them, asks here
(``smf.gateway.calls``) whether the gate decided a proposal carrying that id.
Invariants this module keeps:

- **Recorded before anything else.** :class:`DecidedCalls` remembers
  ``(runtime_id, tool_call_id)`` of every verified proposal at the gate chain's
  first link, before admission (``pipeline.stages.gate``): a proposal the gate
  refused was still decided, and its hook blocked the call.
- **Bounded.** At most :attr:`DecidedCalls.per_runtime` ids per runtime and
  :attr:`DecidedCalls.max_runtimes` runtimes, oldest forgotten first. A
  forgotten id is reported uncovered: the index fails closed, never open.
- **Uncovered stops the runtime.** One ledger entry (``ungated_tool_result``,
  ``model_request_refused``; ids only) before the answer, then
  :meth:`AttestationDesk.stop`: the gateway's admission and the runtime's
  proposals are refused with ``runtime_stopped_ungated_tool_result`` until an
  operator clears it (``smf.gateway.clear``). A ledger outage does not
  prevent the stop.
- **Signed answers.** The answer is signed with the gate key
  (:data:`names.PAYLOAD_GATEWAY_CALLS`): no other client can tell the gateway
  that a tool result was decided.

In memory only: a gate restart forgets both the index and every stop. After a
restart, a tool result for a call decided before it is reported uncovered
(fails closed: the runtime is stopped and an operator clears it); a stop made
before it is lifted (the runtime must still re-attest, as after any restart).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Final, TypeVar

import msgspec
import structlog

from pipeline.service import StageRefusal
from pipeline.stages.attestation import AttestationDesk
from pipeline.stages.evidence import EvidenceWriter
from subjects import dsse, names
from subjects.keys import SigningKey
from subjects.model_gateway import GatewayCalls, GatewayCallsAnswer, GatewayClear, GatewayCleared

log = structlog.get_logger(__name__)
T = TypeVar("T")

UNGATED: Final = "ungated_tool_result"
REFUSED: Final = "model_request_refused"
STOPPED: Final = "runtime_stopped_ungated_tool_result"
MAX_CALLS_BYTES: Final = 64 * 1024


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
    evidence: EvidenceWriter
    release_id: Callable[[], str | None]
    signer: SigningKey
    share_stop: Callable[[str], Awaitable[None]] | None = None
    share_clear: Callable[[str], Awaitable[None]] | None = None
    """On a cluster: tell the other replicas (``pipeline.stages.replica_sync``)."""

    async def handle_calls(self, data: bytes) -> bytes:
        ask = _decode(data, GatewayCalls, "malformed_calls")
        if ask.runtime_id not in self.attestation.known_runtimes():
            raise StageRefusal("unknown_runtime")
        uncovered = tuple(
            dict.fromkeys(i for i in ask.tool_call_ids if not self.calls.covered(ask.runtime_id, i))
        )
        answer = GatewayCallsAnswer(
            schema="smf.gateway-calls-answer/1",
            request_id=ask.request_id,
            runtime_id=ask.runtime_id,
            uncovered=uncovered,
        )
        if uncovered:
            answer = await self._stop(ask, answer)
        return dsse.encode_envelope(
            dsse.sign_struct(names.PAYLOAD_GATEWAY_CALLS, answer, [self.signer])
        )

    async def _stop(self, ask: GatewayCalls, answer: GatewayCallsAnswer) -> GatewayCallsAnswer:
        subject = {
            "model_request": ask.request_id,
            "runtime_id": ask.runtime_id,
            "tool_call_ids": ",".join(answer.uncovered),
        }
        reasons, recorded = await self.evidence.refuse(
            subject, ask.tenant_id, self.release_id(), (UNGATED, REFUSED)
        )
        # the stop stands whether or not its evidence was written: fail closed
        self.attestation.stop(ask.runtime_id, STOPPED)
        if self.share_stop is not None:
            await self.share_stop(ask.runtime_id)
        log.warning("runtime_stopped", runtime_id=ask.runtime_id, uncovered=len(answer.uncovered))
        return msgspec.structs.replace(
            answer, stopped=True, reason_codes=reasons, evidence=recorded
        )

    async def handle_clear(self, data: bytes) -> bytes:
        ask = _decode(data, GatewayClear, "malformed_clear")
        was = self.attestation.clear(ask.runtime_id)
        if self.share_clear is not None:
            await self.share_clear(ask.runtime_id)
        log.warning("runtime_stop_cleared", runtime_id=ask.runtime_id, was_stopped=was)
        return msgspec.json.encode(
            GatewayCleared(
                schema="smf.gateway-cleared/1", runtime_id=ask.runtime_id, was_stopped=was
            )
        )


def _decode(data: bytes, type_: type[T], reason: str) -> T:
    if len(data) > MAX_CALLS_BYTES:
        raise StageRefusal(reason, "too large")
    try:
        return msgspec.json.decode(data, type=type_)
    except msgspec.ValidationError as exc:
        raise StageRefusal(reason, "invalid message") from exc
    except msgspec.DecodeError as exc:
        raise StageRefusal(reason, "not JSON") from exc
