"""The dispatch stage: build, sign and publish exactly one ExecuteOrder.

Issue 3: every gated order is published to ``smf.execute.<connector_id>``
with ``Nats-Msg-Id`` set to its idempotency key and the ``Smf-*`` headers;
the stage waits for JetStream's PubAck, so a reply means the order is stored.
Anything that fails here is a refusal: the gate then denies and reports it.
A typed stage, ``DispatchRequest -> DispatchReceipt`` (``smf_assurance.pipeline.stages.transport``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from nats.errors import Error as NatsError
from nats.errors import NoRespondersError
from nats.js.client import JetStreamContext
from nats.js.errors import Error as JetStreamError

from smf_assurance.pipeline.service import StageRefusal
from smf_assurance.pipeline.stages.contracts import DispatchReceipt, DispatchRequest
from smf_assurance.subjects import names
from smf_assurance.subjects.dsse import encode_envelope, sign_struct
from smf_assurance.subjects.keys import SigningKey
from smf_assurance.subjects.messages import ExecuteOrder, order_id_for
from smf_assurance.subjects.names import SubjectError


@dataclass(frozen=True, slots=True)
class DispatchStage:
    js: JetStreamContext
    gate_key: SigningKey
    clock: Callable[[], int]
    order_ttl_ms: int = 60_000
    publish_timeout: float = 2.0

    async def __call__(self, request: DispatchRequest) -> DispatchReceipt:
        try:
            subject = names.execute_subject(request.connector_id)
        except SubjectError as exc:
            raise StageRefusal("malformed_stage_request", str(exc)) from exc
        decision = request.decision
        if decision.disposition == "deny":
            raise StageRefusal("dispatch_of_denied_decision")
        if decision.disposition == "conditional" and request.approval_id is None:
            # A conditional decision executes only under the approval that satisfied it.
            raise StageRefusal("dispatch_without_approval")
        now = self.clock()
        order = ExecuteOrder(
            schema="smf.execute-order/1",
            order_id=order_id_for(decision.operation_hash, decision.decision_id),
            connector_id=request.connector_id,
            operation_hash=decision.operation_hash,
            decision_id=decision.decision_id,
            release_id=decision.release_id,
            approval_id=request.approval_id,
            native_tool=request.native_tool,
            arguments=request.arguments,
            content=request.content,
            destination_address=request.destination_address,
            issued_at_ms=now,
            not_after_ms=now + self.order_ttl_ms,
        )
        envelope = encode_envelope(sign_struct(names.PAYLOAD_ORDER, order, [self.gate_key]))
        headers = {
            names.HEADER_MSG_ID: order.order_id,
            names.HEADER_OPERATION_HASH: order.operation_hash,
            names.HEADER_DECISION_ID: order.decision_id,
            names.HEADER_RELEASE_ID: order.release_id,
        }
        if order.approval_id is not None:
            headers[names.HEADER_APPROVAL_ID] = order.approval_id
        try:
            ack = await self.js.publish(
                subject, envelope, timeout=self.publish_timeout, headers=headers
            )
        except NoRespondersError as exc:
            # nothing keeps orders on this subject: the stream is gone, no order is made
            raise StageRefusal("order_stream_missing", subject) from exc
        except (NatsError, JetStreamError, TimeoutError) as exc:
            raise StageRefusal("dispatch_publish_failed", type(exc).__name__) from exc
        return DispatchReceipt(
            order_id=order.order_id,
            stream=ack.stream,
            stream_seq=ack.seq,
            duplicate=bool(ack.duplicate),
        )
