"""The dispatch stage: build, sign and publish exactly one ExecuteOrder.

Every gated order is published to ``smf.execute.<connector_id>``
with ``Nats-Msg-Id`` set to its idempotency key and the ``Smf-*`` headers;
the stage waits for JetStream's PubAck, so a reply means the order is stored.
A typed stage, ``DispatchRequest -> DispatchReceipt`` (``smf_assurance.pipeline.chain.transport``).

What the runtime is told is what happens:

- One deadline. The order's ``not_after_ms`` is the caller's (the gate's one
  clock read when it gave the order, plus the order budget), and the receipt
  returns it, so the verdict promises exactly the deadline the connector
  enforces. A deadline already past, or further than the budget, is refused.
- A publish is tried only until ``publish_until_ms`` (the requester's deadline,
  or the caller's stage deadline). A publish that timed out or lost its
  connection may have been stored: it is tried again with the same bytes and
  the same ``Nats-Msg-Id`` (JetStream keeps one copy inside its duplicate
  window, which outlasts the order's deadline), so a PubAck that comes, first
  or duplicate, settles it. When none comes in time the stage cannot say
  whether the order exists: ``dispatch_unconfirmed``, which the gate never
  turns into a deny (:data:`CERTAIN_NOT_STORED` lists the refusals that are).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from nats.errors import Error as NatsError
from nats.errors import NoRespondersError
from nats.js.api import PubAck
from nats.js.client import JetStreamContext
from nats.js.errors import APIError as JetStreamAPIError
from nats.js.errors import Error as JetStreamError
from nats.js.errors import NoStreamResponseError

from smf_assurance.pipeline.chain.contracts import DispatchReceipt, DispatchRequest
from smf_assurance.pipeline.service import StageRefusal
from smf_assurance.subjects import names
from smf_assurance.subjects.dsse import encode_envelope, sign_struct
from smf_assurance.subjects.keys import SigningKey
from smf_assurance.subjects.messages import ExecuteOrder, OrderVoid, order_id_for
from smf_assurance.subjects.names import SubjectError

DEFAULT_ORDER_TTL_MS: Final = 60_000
"""The order budget (``GateConfig.order_ttl_ms``): how long an order stays executable."""
DISPATCH_UNCONFIRMED: Final = "dispatch_unconfirmed"
"""The order may or may not be stored: no PubAck came before the deadline."""
REQUESTER_DEADLINE_PASSED: Final = "requester_deadline_passed"
"""Nothing was published: the time to publish (the requester's deadline) had passed."""
CERTAIN_NOT_STORED: Final = frozenset(
    {
        "malformed_stage_request",
        "dispatch_of_denied_decision",
        "dispatch_without_approval",
        "order_deadline_invalid",
        REQUESTER_DEADLINE_PASSED,
        "order_stream_missing",
        "dispatch_publish_failed",
        "stage_unavailable",
    }
)
"""The refusals (of this stage, or of the call to it: ``stage_unavailable`` is no
responder) after which no order is stored. Every other refusal of a dispatch,
a stage timeout included, may leave one behind: it is unconfirmed, never a deny."""
RETRY_PAUSE: Final = 0.05


@dataclass(frozen=True, slots=True)
class DispatchStage:
    js: JetStreamContext
    gate_key: SigningKey
    clock: Callable[[], int]
    order_ttl_ms: int = DEFAULT_ORDER_TTL_MS
    """The order budget: how long an order stays executable after it was given."""
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
        not_after = request.not_after_ms
        if not_after is None:
            not_after = now + self.order_ttl_ms
        if not now < not_after <= now + self.order_ttl_ms:
            # A deadline that has passed makes an order no connector runs; one further
            # than the budget would outlive what the verdict's budget promises.
            raise StageRefusal("order_deadline_invalid")
        until = request.publish_until_ms
        if until is None:
            until = now + int(self.publish_timeout * 1000)
        if now >= until:
            raise StageRefusal(REQUESTER_DEADLINE_PASSED)
        order = ExecuteOrder(
            schema="smf.execute-order/1",
            order_id=order_id_for(decision),
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
            not_after_ms=not_after,
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
        ack = await self._publish(subject, envelope, headers, until)
        return DispatchReceipt(
            order_id=order.order_id,
            stream=ack.stream,
            stream_seq=ack.seq,
            duplicate=bool(ack.duplicate),
            not_after_ms=not_after,
        )

    async def _publish(
        self, subject: str, envelope: bytes, headers: dict[str, str], until: int
    ) -> PubAck:
        """The PubAck of ``envelope``, tried again (same bytes, same message id) after
        any failure that may have stored it, until ``until`` on the stage's clock."""
        maybe_stored = False
        while True:
            left = (until - self.clock()) / 1000
            if left <= 0:
                break
            try:
                return await self.js.publish(
                    subject, envelope, timeout=min(self.publish_timeout, left), headers=headers
                )
            except (NoRespondersError, NoStreamResponseError) as exc:
                # Nothing keeps orders on this subject: this attempt stored nothing.
                if not maybe_stored:
                    raise StageRefusal("order_stream_missing", subject) from exc
            except JetStreamAPIError as exc:
                # The stream refused this message: this attempt stored nothing.
                if not maybe_stored:
                    raise StageRefusal("dispatch_publish_failed", type(exc).__name__) from exc
            except (NatsError, JetStreamError, TimeoutError):
                # No PubAck: the order may be stored (sent, answer lost) or not.
                maybe_stored = True
            await asyncio.sleep(min(RETRY_PAUSE, max(0.0, (until - self.clock()) / 1000)))
        if maybe_stored:
            raise StageRefusal(DISPATCH_UNCONFIRMED, subject)
        raise StageRefusal(REQUESTER_DEADLINE_PASSED)


@dataclass(frozen=True, slots=True)
class OrderFence:
    """Settles whether an unconfirmed order is stored, and makes sure it never runs
    if it is not (:class:`~smf_assurance.subjects.messages.OrderVoid`).

    Inside ``SMF_EXECUTE``'s duplicate window a publish under the order's
    ``Nats-Msg-Id`` is answered ``duplicate`` exactly when the order is stored. So
    the gate publishes a signed void under that id: ``True`` (stored: the order is
    out, and its connector reports on it) or ``False`` (it was not: the void now
    holds its place, and a connector that meets it records the id ``failed``).
    Only meaningful within the window of the order's own publish; raises like a
    publish when the bus does not answer (the order stays unconfirmed).
    """

    js: JetStreamContext
    gate_key: SigningKey
    clock: Callable[[], int]
    timeout: float = 2.0

    async def __call__(self, connector_id: str, order_id: str) -> bool:
        void = OrderVoid(
            schema="smf.order-void/1",
            order_id=order_id,
            connector_id=connector_id,
            voided_at_ms=self.clock(),
        )
        envelope = encode_envelope(sign_struct(names.PAYLOAD_ORDER_VOID, void, [self.gate_key]))
        ack = await self.js.publish(
            names.execute_subject(connector_id),
            envelope,
            timeout=self.timeout,
            headers={names.HEADER_MSG_ID: order_id},
        )
        return bool(ack.duplicate)
