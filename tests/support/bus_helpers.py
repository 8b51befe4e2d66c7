"""Helpers for bus tests: streams as the gate creates them, and signed orders.

Reusable by any test that needs gated orders on ``smf.execute.<connector>``
or reports from ``smf.result.<connector>`` against a real nats-server.
``publish_order`` sets every header the gate sets: ``Nats-Msg-Id``
is the order id, plus the ``Smf-*`` headers of the signed order.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import os
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, Final

import msgspec
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.js.api import PubAck, StorageType, StreamInfo
from nats.js.client import JetStreamContext
from nats.js.errors import NotFoundError

from smf_assurance.subjects.canonical import identity_of
from smf_assurance.subjects.clock import wall_clock_ms
from smf_assurance.subjects.dsse import (
    SignatureError,
    decode_envelope,
    encode_envelope,
    open_struct,
    sign_struct,
)
from smf_assurance.subjects.keys import SigningKey, VerifyKey
from smf_assurance.subjects.messages import ExecuteOrder, ExecutionReport, OutputVerdict, Verdict
from smf_assurance.subjects.names import (
    EXECUTE_PREFIX,
    EXECUTE_STREAM,
    HEADER_APPROVAL_ID,
    HEADER_DECISION_ID,
    HEADER_FINAL,
    HEADER_MSG_ID,
    HEADER_OPERATION_HASH,
    HEADER_RELEASE_ID,
    OUTPUT_PREFIX,
    PAYLOAD_ORDER,
    PAYLOAD_OUTPUT_VERDICT,
    PAYLOAD_REPORT,
    PAYLOAD_VERDICT,
    PROPOSE,
    RESULT_PREFIX,
    RESULT_STREAM,
    execute_subject,
    result_subject,
)
from smf_assurance.subjects.registry import RegistryEntry, load_registry

DUPLICATE_WINDOW_S = 120.0
"""The execute stream's de-duplication window in tests (the gate sets its own)."""


async def _ensure_stream(
    js: JetStreamContext, name: str, subject: str, duplicate_window: float
) -> StreamInfo:
    try:
        return await js.stream_info(name)
    except NotFoundError:
        return await js.add_stream(
            name=name,
            subjects=[subject],
            storage=StorageType.FILE,
            duplicate_window=duplicate_window,
        )


async def ensure_execute_stream(
    js: JetStreamContext, *, duplicate_window: float = DUPLICATE_WINDOW_S
) -> StreamInfo:
    """``SMF_EXECUTE`` on ``smf.execute.>``: file storage, explicit duplicate window."""
    return await _ensure_stream(js, EXECUTE_STREAM, f"{EXECUTE_PREFIX}.>", duplicate_window)


async def ensure_result_stream(
    js: JetStreamContext, *, duplicate_window: float = DUPLICATE_WINDOW_S
) -> StreamInfo:
    """``SMF_RESULT`` on ``smf.result.>``, so connectors publish reports durably."""
    return await _ensure_stream(js, RESULT_STREAM, f"{RESULT_PREFIX}.>", duplicate_window)


async def stream_count(js: JetStreamContext, name: str = EXECUTE_STREAM) -> int:
    info = await js.stream_info(name)
    return info.state.messages


def random_identity() -> str:
    return "sha256:" + os.urandom(32).hex()


def derive_order_id(operation_hash: str, decision_id: str) -> str:
    """A stand-in for the gate's derivation: a different payload, a different key."""
    return hashlib.sha256(f"{operation_hash}\n{decision_id}".encode()).hexdigest()


def make_order(
    connector_id: str,
    *,
    arguments: dict[str, Any] | None = None,
    content: str = "",
    native_tool: str = "test_tool",
    destination_address: str = "",
    release_id: str = "release-test-1",
    approval_id: str | None = None,
    decision_id: str | None = None,
    issued_at_ms: int | None = None,
    ttl_ms: int = 60_000,
) -> ExecuteOrder:
    """An order as the gate would issue it; ``order_id`` derived from its content."""
    arguments = arguments if arguments is not None else {}
    operation_hash = identity_of(
        {
            "connector_id": connector_id,
            "native_tool": native_tool,
            "arguments": arguments,
            "content": content,
            "destination": destination_address,
        }
    )
    decision_id = decision_id or random_identity()
    issued = wall_clock_ms() if issued_at_ms is None else issued_at_ms
    return ExecuteOrder(
        schema="smf.execute-order/1",
        order_id=derive_order_id(operation_hash, decision_id),
        connector_id=connector_id,
        operation_hash=operation_hash,
        decision_id=decision_id,
        release_id=release_id,
        approval_id=approval_id,
        native_tool=native_tool,
        arguments=arguments,
        content=content,
        destination_address=destination_address,
        issued_at_ms=issued,
        not_after_ms=issued + ttl_ms,
    )


def sign_order(order: ExecuteOrder, key: SigningKey) -> bytes:
    """The DSSE envelope bytes of ``order`` signed by ``key``."""
    return encode_envelope(sign_struct(PAYLOAD_ORDER, order, [key]))


def make_signed_order(
    gate_key: SigningKey, connector_id: str, **fields: Any
) -> tuple[ExecuteOrder, bytes]:
    order = make_order(connector_id, **fields)
    return order, sign_order(order, gate_key)


def order_headers(order: ExecuteOrder) -> dict[str, str]:
    """The headers the gate sets on a gated order."""
    headers = {
        HEADER_MSG_ID: order.order_id,
        HEADER_OPERATION_HASH: order.operation_hash,
        HEADER_DECISION_ID: order.decision_id,
        HEADER_RELEASE_ID: order.release_id,
    }
    if order.approval_id is not None:
        headers[HEADER_APPROVAL_ID] = order.approval_id
    return headers


async def publish_order(
    js: JetStreamContext,
    order: ExecuteOrder,
    gate_key: SigningKey,
    *,
    payload: bytes | None = None,
    headers: dict[str, str] | None = None,
    subject: str | None = None,
) -> PubAck:
    """Publish ``order`` signed by ``gate_key`` with the gate's headers.

    ``payload``, ``headers`` and ``subject`` override what the gate would send,
    to forge or break an order on purpose.
    """
    return await js.publish(
        subject or execute_subject(order.connector_id),
        payload if payload is not None else sign_order(order, gate_key),
        headers=headers if headers is not None else order_headers(order),
    )


def open_report(data: bytes, connector_key: VerifyKey) -> ExecutionReport:
    """Verify a report against the connector's key and decode it."""
    report, _ = open_struct(
        decode_envelope(data),
        {connector_key.key_id: connector_key},
        ExecutionReport,
        PAYLOAD_REPORT,
    )
    return report


class ReportInbox:
    """Core subscription to ``smf.result.<connector_id>``; ``next()`` waits for one."""

    def __init__(self, sub: Subscription, connector_key: VerifyKey) -> None:
        self.sub = sub
        self.connector_key = connector_key
        self.messages: list[Msg] = []

    @classmethod
    async def open(cls, nc: Client, connector_id: str, connector_key: VerifyKey) -> ReportInbox:
        sub = await nc.subscribe(result_subject(connector_id))
        await nc.flush()
        return cls(sub, connector_key)

    async def next(self, timeout: float = 3.0) -> ExecutionReport:
        msg = await self.sub.next_msg(timeout=timeout)
        self.messages.append(msg)
        return open_report(msg.data, self.connector_key)

    async def nothing_within(self, seconds: float) -> bool:
        """True when no report arrives for ``seconds``. Proves a negative only when a
        real mechanism bounds when the report would come (say which at the call);
        otherwise use :meth:`none_pending` after an effect that follows any report."""
        try:
            await self.sub.next_msg(timeout=seconds)
        except TimeoutError:
            return True
        return False

    def none_pending(self) -> bool:
        """True when no report is waiting to be read. Exact once the caller has seen
        something the server delivered to this connection after every report it
        could have sent (a term advisory, a consumer info that says drained): one
        connection reads its messages in the server's order."""
        return self.sub.pending_msgs == 0


async def wait_for(predicate: Any, timeout: float = 3.0, interval: float = 0.02) -> None:
    """Poll an (async or sync) predicate until it is true, or fail the test."""
    deadline = time.monotonic() + timeout
    while True:
        result = predicate()
        if asyncio.iscoroutine(result):
            result = await result
        if result:
            return
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(interval)


class ExecuteSpy:
    """Every publish on ``smf.execute.>``, as a core subscriber sees it.

    JetStream drops a second publish with the same ``Nats-Msg-Id`` inside its
    duplicate window, so the stream count alone would hide a re-dispatch; the
    spy sees what was sent, the stream what was kept. Attach it to the
    connection that receives the gate's replies, and read it with
    :meth:`settled`.
    """

    def __init__(self, sub: Subscription) -> None:
        self.sub = sub
        self.seen: list[Msg] = []

    @classmethod
    async def attach(cls, nc: Client) -> ExecuteSpy:
        async def record(msg: Msg) -> None:
            spy.seen.append(msg)

        spy = cls(await nc.subscribe(f"{EXECUTE_PREFIX}.>", cb=record))
        await nc.flush()
        return spy

    async def settled(self) -> list[Msg]:
        """Every publish made before the replies this connection has already read.

        A gate publishes an order before it answers the request that caused it, and
        one server hands this connection the order first, so when a reply has been
        read the order already sits in this subscription's queue: once the queue is
        empty (its callback never awaits, so an empty queue means recorded), no
        publish that came before those replies is still on its way. A publish the
        gate made after its last reply is outside this bound."""
        await wait_for(lambda: self.sub.pending_msgs == 0, timeout=10)
        return list(self.seen)

    async def approval_ids(self) -> list[str | None]:
        """``Smf-Approval-Id`` of each publish, once :meth:`settled`."""
        return [(m.headers or {}).get(HEADER_APPROVAL_ID) for m in await self.settled()]


def connector_durable(connector_id: str) -> str:
    """The durable a ``ConnectorRunner`` binds when its config names none."""
    return f"smf-connector-{connector_id}"


async def consumer_drained(
    js: JetStreamContext, durable: str, stream: str = EXECUTE_STREAM
) -> bool:
    """True when ``durable`` on ``stream`` has delivered every message and had each
    acknowledged. A connector acks an order only after executing and reporting it,
    and the gate acks a report (``smf-gate-results`` on SMF_RESULT) only after
    handling it, evidence included: from then on nothing more happens until a new
    message arrives. This, not a pause, is what makes "nothing else happened" true."""
    info = await js.consumer_info(stream, durable)
    return (info.num_pending, info.num_ack_pending) == (0, 0)


MARK_PREFIX: Final = b"smf-test-mark-"


async def caught_up(
    publisher: Client, subject: str, received: Callable[[], Iterable[bytes]], timeout: float = 10
) -> None:
    """Publish fresh marks on ``subject`` from ``publisher`` until one is in
    ``received()`` (the payloads one subscription recorded, in arrival order).

    One nats-server hands a subscriber every message in the order it took them,
    and a subscription's callbacks run in that order: once a mark is recorded,
    so is every message the server took before it, from any connection. That
    bounds a "nothing else arrived" check when whoever might have sent more has
    stopped (or is ``publisher`` itself) before the first mark. A mark is sent
    again on every poll because a subscription made just now may not yet catch
    another connection's publish (see :meth:`Rogue.start`); a lost mark only
    delays the answer. The deadline only bounds a failure."""
    marks: set[bytes] = set()

    async def arrived() -> bool:
        mark = MARK_PREFIX + os.urandom(8).hex().encode()
        marks.add(mark)
        await publisher.publish(subject, mark)
        await publisher.flush()
        await asyncio.sleep(0.01)
        return not marks.isdisjoint(received())

    await wait_for(arrived, timeout=timeout)


def is_mark(data: bytes) -> bool:
    """A message :func:`caught_up` published, not one the test is about."""
    return data.startswith(MARK_PREFIX)


def gate_reply(data: bytes, gate_keys: Mapping[str, VerifyKey]) -> Verdict | OutputVerdict | None:
    """A gate-signed Verdict or OutputVerdict seen on the wire
    (``smf_assurance.subjects.verdicts``);
    None for anything else: a stage reply, a PubAck, an unsigned or foreign message."""
    try:
        envelope = decode_envelope(data)
    except SignatureError:
        return None
    try:
        return open_struct(envelope, gate_keys, Verdict, PAYLOAD_VERDICT)[0]
    except SignatureError:
        pass
    try:
        return open_struct(envelope, gate_keys, OutputVerdict, PAYLOAD_OUTPUT_VERDICT)[0]
    except SignatureError:
        return None


FORGED_TEXT = "text the gate never released"


def forged_allow(proposal_id: str) -> Verdict:
    """An allow for ``proposal_id`` in every field a runtime reads; no gate made it."""
    return Verdict(
        schema="smf.verdict/1",
        proposal_id=proposal_id,
        outcome="allow",
        reason_codes=(),
        decision_id=random_identity(),
        operation_hash=random_identity(),
    )


def forged_release(stream_id: str, proposal_id: str) -> OutputVerdict:
    return OutputVerdict(
        schema="smf.output-verdict/1",
        stream_id=stream_id,
        verdict=forged_allow(proposal_id),
        released=FORGED_TEXT,
    )


def unsigned(value: Verdict | OutputVerdict) -> bytes:
    """How the gate answered before verdicts were signed: plain JSON."""
    return msgspec.json.encode(value)


Forger = Callable[[Verdict | OutputVerdict], bytes]
"""Turns a forged verdict into the bytes a rogue replies with."""


def signed_reply(key: SigningKey, payload_type: str) -> Forger:
    """A forger that signs its reply with ``key`` for ``payload_type``."""

    def sign(value: Verdict | OutputVerdict) -> bytes:
        return encode_envelope(sign_struct(payload_type, value, [key]))

    return sign


class Rogue:
    """A client on the bus that answers ``smf.propose`` and output closes before the
    gate can (a plain subscriber, no queue group, so it sees every request beside
    the gate), with an allow it made: what a NATS permission mistake would let any
    client do. ``encode`` turns the forged value into reply bytes (unsigned JSON, or
    signed by some key for some payload type); while it is None the rogue stays
    silent. The ids it names are the request's unless a test overrides them;
    ``answered`` lists the proposal and stream ids it answered."""

    PROBE: Final = b"smf-test-rogue-probe"

    def __init__(
        self,
        nc: Client,
        encode: Forger | None = None,
        *,
        proposal_id: str | None = None,
        stream_id: str | None = None,
    ) -> None:
        self.nc = nc
        self.encode = encode
        self.proposal_id = proposal_id
        self.stream_id = stream_id
        self.answered: list[str] = []
        self.probed: set[str] = set()

    async def start(self, requester: Client) -> Rogue:
        """Subscribe, and return once a message ``requester`` publishes reaches us.

        A flush on our own connection is not enough: measured against nats-server
        2.15.1, another connection's request right after it still found no
        responder a few times in a hundred; one message from ``requester`` that
        arrived proves its publishes see our interest."""
        await self.nc.subscribe(PROPOSE, cb=self._propose)
        await self.nc.subscribe(f"{OUTPUT_PREFIX}.>", cb=self._output)
        await self.nc.flush()

        subjects = (PROPOSE, f"{OUTPUT_PREFIX}.probe")

        async def probed() -> bool:
            for subject in subjects:
                await requester.publish(subject, self.PROBE)
            await requester.flush()
            await asyncio.sleep(0.01)
            return self.probed >= set(subjects)

        await wait_for(probed, timeout=5)
        return self

    @staticmethod
    def _payload(data: bytes) -> dict[str, Any]:
        decoded = msgspec.json.decode(base64.b64decode(decode_envelope(data).envelope.payload))
        return decoded if isinstance(decoded, dict) else {}

    async def _propose(self, msg: Msg) -> None:
        if msg.data == self.PROBE:
            self.probed.add(msg.subject)
            return
        if self.encode is None or not msg.reply:
            return
        proposal_id = self.proposal_id or str(self._payload(msg.data).get("proposal_id", ""))
        self.answered.append(proposal_id)  # before the reply: the requester may read it at once
        await msg.respond(self.encode(forged_allow(proposal_id)))

    async def _output(self, msg: Msg) -> None:
        if msg.data == self.PROBE:
            self.probed.add(msg.subject)
            return
        if self.encode is None or not msg.reply or (msg.headers or {}).get(HEADER_FINAL) != "1":
            return  # silent, or a chunk, not the close
        close = self._payload(msg.data)
        stream_id = self.stream_id or str(close.get("stream_id", ""))
        self.answered.append(stream_id)
        await msg.respond(self.encode(forged_release(stream_id, str(close.get("proposal_id", "")))))


def registry_entries(path: Path) -> list[RegistryEntry]:
    """The entries of a registry file, in order: what a server's authorization is
    generated from (``smf_assurance.ops.local.bus_auth.render_authorization``)."""
    return [p.entry for p in load_registry(path).principals.values()]
