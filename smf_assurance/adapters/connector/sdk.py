"""The connector SDK: run a side-effecting :class:`Connector` behind the gate.

ARCHITECTURE.md, "One proposal through
the bus": a connector consumes gated orders from ``smf.execute.<connector_id>``
(stream ``SMF_EXECUTE``) and reports on ``smf.result.<connector_id>``; the gate
maps ``confirmed -> consumed``, ``failed -> failed`` and ``ambiguous`` or no
report at all to ``execution_unknown``, which is never retried.

How one message is handled (:meth:`ConnectorRunner.run`, one at a time: orders
are side effects, and serial handling keeps the idempotency record simple):

1. :func:`check_order` — nothing executes unless every check passes, and a
   refused message is terminated (``msg.term()``), never redelivered:
   ``malformed_order`` (envelope or payload does not decode), ``unknown_signer``
   (no signature by a gate key), ``bad_signature`` (forged or tampered),
   ``wrong_payload_type`` (a gate-signed message of another kind, replayed as
   an order), ``wrong_connector`` (an order for another connector),
   ``header_mismatch`` (``Nats-Msg-Id`` is not the order id, or an ``Smf-*``
   header disagrees with the signed order: a replay under a fresh message id
   to slip past JetStream de-duplication lands here).
2. The idempotency record (:mod:`smf_assurance.adapters.connector.idempotency`). JetStream
   de-duplicates only within the stream's duplicate window and redelivers
   every unacked message, so the record, not the bus, prevents a second
   execution: a finished order re-publishes its recorded report; an order
   ``started`` but never finished (we crashed or were cancelled while it ran)
   is reported ``ambiguous`` and NEVER retried.
3. ``order_expired`` (the injectable clock is past ``not_after_ms``), checked
   after the record so that a late redelivery of an order we already handled
   still gets its true report.
4. Insert ``started`` and commit durably, execute, record the outcome with its
   signed report, publish the report, then ack. A report that cannot be
   published is not acked: the order is redelivered and the record answers.

Every refusal with a known order id is recorded as ``failed`` before its
report is published, so the connector never signs "failed" for an order id
and later executes it. For messages that fail verification the id is the one
the ``Nats-Msg-Id`` header claims; recording it gives a forger nothing new:
publishing first under that id already makes JetStream drop the genuine order
inside the duplicate window.

Run a connector::

    runner = ConnectorRunner(
        nc, CourtEFilingConnector(outbox),
        connector_id="court_efiling", signing_key=connector_key,
        gate_keys=registry.trusted("gate"), state_dir=state / "connectors",
    )
    await runner.run()          # until cancelled, or runner.stop()
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import math
import re
import sqlite3
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal

import nats.errors
import nats.js.errors
import structlog
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js.api import AckPolicy, ConsumerConfig, ConsumerInfo, DeliverPolicy
from nats.js.client import JetStreamContext

from smf_assurance.adapters.connector.idempotency import (
    FinalState,
    IdempotencyError,
    IdempotencyStore,
    Record,
)
from smf_assurance.subjects.attachments import AttachmentError, check_attachments
from smf_assurance.subjects.bus_access import CLIENT_API, connector_durable
from smf_assurance.subjects.clock import Clock, monotonic_s, wall_clock_ms
from smf_assurance.subjects.dsse import (
    SignatureError,
    decode_envelope,
    encode_envelope,
    open_struct,
    reason_code,
    sign_struct,
)
from smf_assurance.subjects.keys import SigningKey, VerifyKey
from smf_assurance.subjects.messages import ExecuteOrder, ExecutionReport
from smf_assurance.subjects.names import (
    EXECUTE_STREAM,
    HEADER_APPROVAL_ID,
    HEADER_DECISION_ID,
    HEADER_MSG_ID,
    HEADER_OPERATION_HASH,
    HEADER_REASON,
    HEADER_RELEASE_ID,
    PAYLOAD_ORDER,
    PAYLOAD_REPORT,
    execute_subject,
    result_subject,
)

log = structlog.get_logger(__name__)

REASON_EXECUTED: Final = "executed"
REASON_MALFORMED_ORDER: Final = "malformed_order"
REASON_UNKNOWN_SIGNER: Final = "unknown_signer"
REASON_BAD_SIGNATURE: Final = "bad_signature"
REASON_WRONG_PAYLOAD_TYPE: Final = "wrong_payload_type"
REASON_WRONG_CONNECTOR: Final = "wrong_connector"
REASON_HEADER_MISMATCH: Final = "header_mismatch"
REASON_ORDER_EXPIRED: Final = "order_expired"
REASON_CONNECTOR_ERROR: Final = "connector_error"
REASON_AMBIGUOUS: Final = "ambiguous_execution"
REASON_INTERRUPTED: Final = "execution_interrupted"
"""An earlier delivery started executing and never recorded an outcome."""
REASON_CANCELLED: Final = "execution_cancelled"
"""The connector's execution was cancelled from inside; the side effect is unknown."""

REPORT_SCHEMA: Final = "smf.execution-report/1"
MAX_EXTERNAL_REF: Final = 256
_CODE: Final = re.compile(r"[a-z][a-z0-9_]{0,63}")
_ORDER_ID: Final = re.compile(r"[0-9a-f]{64}")


def _check_code(code: str) -> str:
    if not _CODE.fullmatch(code):
        raise ValueError(f"{code!r} is not a reason code (^[a-z][a-z0-9_]{{0,63}}$)")
    return code


# --- what a connector implements ---------------------------------------------


@dataclass(frozen=True, slots=True)
class ExecutionOutcome:
    """What the external system answered. Validated here, so a bad reason code
    fails inside ``execute`` rather than producing a report the gate rejects."""

    status: Literal["confirmed", "failed"]
    reason_code: str = REASON_EXECUTED
    external_ref: str | None = None

    def __post_init__(self) -> None:
        _check_code(self.reason_code)
        if self.external_ref is not None and len(self.external_ref) > MAX_EXTERNAL_REF:
            raise ValueError(f"external_ref is longer than {MAX_EXTERNAL_REF} characters")

    @classmethod
    def confirmed(cls, external_ref: str | None = None) -> ExecutionOutcome:
        return cls("confirmed", REASON_EXECUTED, external_ref)

    @classmethod
    def failed(cls, reason_code: str) -> ExecutionOutcome:
        """The side effect certainly did NOT happen; otherwise raise :class:`AmbiguousExecution`."""
        return cls("failed", reason_code)


class AmbiguousExecution(Exception):
    """Raise from ``execute`` when the side effect may or may not have happened.

    E.g. a timeout after the request left. The order is reported ``ambiguous``
    (the gate records ``execution_unknown``) and never retried. Any other
    exception is reported ``failed`` / ``connector_error``, which tells the gate
    that nothing happened; so once the side effect may have started, catch
    what the client library raises and raise this instead.
    """

    def __init__(self, reason_code: str = REASON_AMBIGUOUS) -> None:
        super().__init__(_check_code(reason_code))
        self.reason_code = reason_code


class Connector(abc.ABC):
    """A side effect behind the gate. The runner calls ``execute`` at most once
    per order id (per state directory), only for verified, current orders.

    Pass ``order.order_id`` to the external system as its idempotency key where
    it supports one, so even an ``ambiguous`` order cannot land twice.
    """

    @abc.abstractmethod
    async def execute(self, order: ExecuteOrder) -> ExecutionOutcome:
        """Perform the order's side effect and say how it went."""


# --- the checks, pure: no I/O ------------------------------------------------


@dataclass(frozen=True, slots=True)
class Accepted:
    """The order is signed by the gate, addressed to us, and its headers agree."""

    order: ExecuteOrder


@dataclass(frozen=True, slots=True)
class Refused:
    """Not executed. ``order_id`` is the signed one when the signature verified,
    otherwise the one ``Nats-Msg-Id`` claims, or ``None`` if there is none."""

    reason_code: str
    order_id: str | None


CheckResult = Accepted | Refused


def _headers_agree(order: ExecuteOrder, headers: Mapping[str, str]) -> bool:
    """Every gated order carries ``Nats-Msg-Id`` = its idempotency key
    and the ``Smf-*`` headers of the signed order. Headers are unsigned, so they
    must say exactly what the signed payload says; ``Smf-Approval-Id`` is absent
    exactly when the order has no approval."""
    expected = {
        HEADER_MSG_ID: order.order_id,
        HEADER_OPERATION_HASH: order.operation_hash,
        HEADER_DECISION_ID: order.decision_id,
        HEADER_RELEASE_ID: order.release_id,
        HEADER_APPROVAL_ID: order.approval_id,
    }
    return all(headers.get(name) == value for name, value in expected.items())


def check_order(
    data: bytes,
    headers: Mapping[str, str] | None,
    *,
    connector_id: str,
    gate_keys: Mapping[str, VerifyKey],
) -> CheckResult:
    """Verify one message from ``smf.execute.<connector_id>`` (see module docstring)."""
    headers = headers or {}
    claimed = headers.get(HEADER_MSG_ID)
    claimed_id = claimed if claimed is not None and _ORDER_ID.fullmatch(claimed) else None
    try:
        # Signature first, parse after: DSSE "To verify" (smf_assurance/subjects/dsse.py).
        order, _ = open_struct(decode_envelope(data), gate_keys, ExecuteOrder, PAYLOAD_ORDER)
    except SignatureError as exc:
        return Refused(reason_code(exc, REASON_MALFORMED_ORDER), claimed_id)
    if order.connector_id != connector_id:
        # An order the gate addressed elsewhere: never run another connector's action.
        return Refused(REASON_WRONG_CONNECTOR, order.order_id)
    if not _headers_agree(order, headers):
        # A genuine order replayed under a fresh Nats-Msg-Id, to slip past
        # JetStream de-duplication, or headers rewritten in transit.
        return Refused(REASON_HEADER_MISMATCH, order.order_id)
    try:
        # A document whose bytes are not the digest it carries is not the one
        # the approver saw; the gate refuses it first, and a connector never files it.
        check_attachments(order.arguments)
    except AttachmentError as exc:
        return Refused(exc.reason_code, order.order_id)
    return Accepted(order)


# --- the runner --------------------------------------------------------------


class ConnectorError(Exception):
    """The runner cannot run."""


class ExecuteStreamMissing(ConnectorError):
    """The connector's durable on ``SMF_EXECUTE`` did not appear in time. The gate
    creates the stream with its duplicate window and storage, and each registered
    connector's durable with its filter; a connector never guesses those settings,
    and on a bus with authorization it may not create them (``bus_access``)."""


class ConsumerConfigError(ConnectorError):
    """The durable consumer exists with settings that would lose the guarantee
    (an ack policy other than explicit, or another subject)."""


class ReportPublishError(Exception):
    """The report did not reach the bus; the order stays unacked, to be redelivered."""


@dataclass(frozen=True, slots=True)
class RunnerConfig:
    """Tuning of :class:`ConnectorRunner`; times in seconds.

    The runner binds the durable the gate created (``connector_durable``); with
    ``create_durable`` it creates it itself when absent, with ``ack_wait``, which only a
    bus without authorization allows (tests, and a connector run beside a bare server).
    While an order executes the runner signals progress every third of the consumer's
    ack wait so a slow external system does not cause a redelivery.
    ``stream_wait`` bounds the wait for the durable to exist.
    """

    durable: str | None = None
    create_durable: bool = False
    ack_wait: float = 30.0
    fetch_timeout: float = 1.0
    publish_timeout: float = 5.0
    retry_delay: float = 1.0
    stream_wait: float = 30.0
    stream_backoff_max: float = 2.0


@dataclass(slots=True)
class _Running:
    js: JetStreamContext
    store: IdempotencyStore
    progress_every: float
    result_stream: str | None = None


def _checked_gate_keys(gate_keys: Mapping[str, VerifyKey]) -> dict[str, VerifyKey]:
    if not gate_keys:
        raise ValueError("no gate keys: every order would be refused as unknown_signer")
    if any(key_id != key.key_id for key_id, key in gate_keys.items()):
        raise ValueError("a gate key is listed under an id that is not its own")
    return dict(gate_keys)


class ConnectorRunner:
    """Drives one :class:`Connector` from its durable pull consumer.

    ``gate_keys`` are the keys allowed to sign orders (``KeyRegistry.trusted
    ("gate")`` of the release in force; :meth:`trust_gate_keys` takes a new
    release's); ``signing_key`` is this connector's key, which signs reports.
    ``state_dir`` holds ``<connector_id>.sqlite3`` (the idempotency record) and
    its lock. The runner does not own ``nc``.
    """

    def __init__(
        self,
        nc: Client,
        connector: Connector,
        *,
        connector_id: str,
        signing_key: SigningKey,
        gate_keys: Mapping[str, VerifyKey],
        state_dir: Path,
        config: RunnerConfig | None = None,
        clock: Clock = wall_clock_ms,
    ) -> None:
        self._gate_keys = _checked_gate_keys(gate_keys)
        self.subject: Final = execute_subject(connector_id)
        self.result_subject: Final = result_subject(connector_id)
        self.connector_id: Final = connector_id
        self.config: Final = config or RunnerConfig()
        self.durable: Final = self.config.durable or connector_durable(connector_id)
        self.ready: Final = asyncio.Event()
        """Set once the consumer is bound and the runner is fetching."""
        self._nc = nc
        self._connector = connector
        self._signing_key = signing_key
        self._state_dir = state_dir
        self._clock = clock
        self._stopping = asyncio.Event()
        self._log = log.bind(connector_id=connector_id)

    def stop(self) -> None:
        """Finish the message in hand, then return from :meth:`run`."""
        self._stopping.set()

    def trust_gate_keys(self, gate_keys: Mapping[str, VerifyKey]) -> None:
        """Verify the orders from the next one on with ``gate_keys``: those of the
        release in force. A gate key a rotation added is trusted without a restart,
        and one it retired no more (docs/OPERATIONS.md, "Key rotation"); refused
        as at the start when empty or listing a key under another id."""
        self._gate_keys = _checked_gate_keys(gate_keys)
        self._log.info("connector.gate_keys_followed", keys=len(self._gate_keys))

    async def run(self) -> None:
        """Consume orders until :meth:`stop` or cancellation.

        Cancellation while an order executes is a crash as far as the order is
        concerned: its record stays ``started`` and the next delivery reports
        it ``ambiguous``. If the consumer disappears (deleted by an operator,
        stream re-created), the runner binds again; a re-created consumer
        redelivers the stream, and the record answers every order already
        seen. Raises :class:`ExecuteStreamMissing`, :class:`ConsumerConfigError`,
        ``StoreLockedError`` when another runner holds the state directory, and
        ``ConnectionClosedError`` when ``nc`` is closed.
        """
        store = await IdempotencyStore.open(self._state_dir, self.connector_id)
        try:
            js = self._nc.jetstream(prefix=CLIENT_API, timeout=self.config.publish_timeout)
            while not self._stopping.is_set():
                sub, running = await self._bind(js, store)
                try:
                    await self._consume(sub, running)
                finally:
                    self.ready.clear()
                    with contextlib.suppress(nats.errors.Error):
                        await sub.unsubscribe()
        finally:
            await store.close()
            self._log.info("connector.stopped")

    async def _bind(
        self, js: JetStreamContext, store: IdempotencyStore
    ) -> tuple[JetStreamContext.PullSubscription, _Running]:
        """Wait for the durable consumer, check it, then bind it."""
        info = await self._wait_for_durable(js)
        self._check_consumer(info.config)
        sub = await js.pull_subscribe_bind(self.durable, EXECUTE_STREAM)
        ack_wait = info.config.ack_wait or self.config.ack_wait
        self.ready.set()
        self._log.info("connector.bound", durable=self.durable)
        return sub, _Running(js, store, progress_every=ack_wait / 3)

    def _durable_config(self) -> ConsumerConfig:
        return ConsumerConfig(
            name=self.durable,
            durable_name=self.durable,
            ack_policy=AckPolicy.EXPLICIT,
            ack_wait=self.config.ack_wait,
            deliver_policy=DeliverPolicy.ALL,
            filter_subject=self.subject,
        )

    def _check_consumer(self, config: ConsumerConfig) -> None:
        if config.ack_policy != AckPolicy.EXPLICIT:
            raise ConsumerConfigError(f"durable {self.durable} does not use explicit acks")
        if config.filter_subject != self.subject:
            raise ConsumerConfigError(f"durable {self.durable} does not filter {self.subject}")

    async def _wait_for_durable(self, js: JetStreamContext) -> ConsumerInfo:
        """Wait, with bounded exponential backoff, for the durable: the gate's, or with
        ``create_durable`` this runner's own (created, or its ack wait set to ours)."""
        deadline = monotonic_s() + self.config.stream_wait
        delay = 0.05
        while True:
            try:
                return await self._durable(js)
            except nats.js.errors.NotFoundError:
                pass  # no stream or no durable yet
            except (nats.errors.TimeoutError, nats.js.errors.ServiceUnavailableError):
                pass  # the bus is busy: ask again
            remaining = deadline - monotonic_s()
            if remaining <= 0:
                raise ExecuteStreamMissing(
                    f"durable {self.durable} on {EXECUTE_STREAM} not found within "
                    f"{self.config.stream_wait}s"
                ) from None
            self._log.info("connector.waiting_for_durable", durable=self.durable)
            await asyncio.sleep(min(delay, remaining))
            delay = min(delay * 2, self.config.stream_backoff_max)

    async def _durable(self, js: JetStreamContext) -> ConsumerInfo:
        try:
            info: ConsumerInfo = await js.consumer_info(EXECUTE_STREAM, self.durable)
        except nats.js.errors.NotFoundError:
            if not self.config.create_durable:
                raise
            made: ConsumerInfo = await js.add_consumer(EXECUTE_STREAM, self._durable_config())
            return made
        if self.config.create_durable and info.config.ack_wait != self.config.ack_wait:
            self._check_consumer(info.config)  # only the ack wait is ours to change
            info = await js.add_consumer(EXECUTE_STREAM, self._durable_config())
        return info

    async def _consume(self, sub: JetStreamContext.PullSubscription, running: _Running) -> None:
        """Fetch and handle one message at a time; return to bind again if the consumer is gone."""
        while not self._stopping.is_set():
            try:
                msgs = await sub.fetch(1, timeout=self.config.fetch_timeout)
            except TimeoutError:
                continue
            except nats.errors.ConnectionClosedError:
                raise
            except nats.js.errors.APIError as exc:
                # No consumer answers the pull (deleted, or its stream re-created).
                self._log.warning("connector.consumer_lost", error=type(exc).__name__)
                await asyncio.sleep(self.config.retry_delay)
                return
            except nats.errors.Error as exc:
                # Reconnecting, or the server is busy: the durable consumer keeps our place.
                self._log.warning("connector.fetch_failed", error=type(exc).__name__)
                await asyncio.sleep(self.config.retry_delay)
                continue
            await self._process(msgs[0], running)

    async def _process(self, msg: Msg, running: _Running) -> None:
        try:
            await self._handle(msg, running)
        except (ReportPublishError, IdempotencyError, sqlite3.Error, nats.errors.Error) as exc:
            # Not acked: redelivery asks the record again, which never re-executes.
            self._log.warning("connector.order.retry_later", error=type(exc).__name__)
            try:
                await msg.nak(delay=self.config.retry_delay)
            except nats.errors.Error:
                self._log.warning("connector.order.nak_failed")

    async def _handle(self, msg: Msg, running: _Running) -> None:
        result = check_order(
            msg.data, msg.headers, connector_id=self.connector_id, gate_keys=self._gate_keys
        )
        if isinstance(result, Accepted):
            order_id = result.order.order_id
        elif result.order_id is None:
            # Nothing names an order: no report is possible, only the refusal.
            self._log.warning("connector.order.refused", reason_code=result.reason_code)
            await msg.term()
            return
        else:
            order_id = result.order_id
        record = await running.store.get(order_id)
        if record is not None:
            await self._answer_from_record(msg, record, result, running)
            return
        now = self._clock()
        if isinstance(result, Accepted) and now > result.order.not_after_ms:
            # The gate's decision has a lifetime; a late order is not an order.
            result = Refused(REASON_ORDER_EXPIRED, order_id)
        if isinstance(result, Refused):
            report = self._sign(order_id, "failed", result.reason_code, None, now)
            record = await running.store.refuse(order_id, result.reason_code, report, now)
            self._log.warning(
                "connector.order.refused", order_id=order_id, reason_code=result.reason_code
            )
            await self._publish(record, running)
            await msg.term()
            return
        await self._execute(msg, result.order, running)

    async def _answer_from_record(
        self, msg: Msg, record: Record, result: CheckResult, running: _Running
    ) -> None:
        """A message for an order we have seen: never execute it again."""
        bound = self._log.bind(order_id=record.order_id)
        if record.finished:
            bound.info("connector.order.replayed", status=record.state)
            await self._publish(record, running)
            await (msg.ack() if isinstance(result, Accepted) else msg.term())
            return
        if isinstance(result, Refused):
            # Another message claims an order whose outcome is unknown: it must
            # not decide that outcome; the genuine redelivery will.
            bound.warning("connector.order.refused", reason_code=result.reason_code)
            await msg.term()
            return
        # Started but never finished: we crashed or were cancelled mid-execution.
        # The side effect may have happened, so this is ambiguous and not retried.
        now = self._clock()
        report = self._sign(record.order_id, "ambiguous", REASON_INTERRUPTED, None, now)
        record = await running.store.finish(
            record.order_id, "ambiguous", REASON_INTERRUPTED, None, report, now
        )
        bound.warning("connector.order.finished", status="ambiguous")
        await self._publish(record, running)
        await msg.ack()

    async def _execute(self, msg: Msg, order: ExecuteOrder, running: _Running) -> None:
        bound = self._log.bind(order_id=order.order_id)
        # Durable "started" BEFORE the side effect: a crash from here on is ambiguous.
        await running.store.begin(order.order_id, self._clock())
        progress = asyncio.create_task(self._signal_progress(msg, running.progress_every))
        try:
            # The connector's answer, an exception included, as a value; our own
            # cancellation still propagates (``gather`` re-raises it).
            (answer,) = await asyncio.gather(self._connector.execute(order), return_exceptions=True)
        finally:
            progress.cancel()
            await asyncio.wait([progress])
        state, reason, ref = self._outcome(answer, bound)
        now = self._clock()
        report = self._sign(order.order_id, state, reason, ref, now)
        record = await running.store.finish(order.order_id, state, reason, ref, report, now)
        bound.info("connector.order.finished", status=state, reason_code=reason)
        await self._publish(record, running)
        await msg.ack()

    @staticmethod
    def _outcome(
        answer: ExecutionOutcome | BaseException, bound: structlog.typing.FilteringBoundLogger
    ) -> tuple[FinalState, str, str | None]:
        """Map what ``execute`` returned or raised to the recorded outcome."""
        if isinstance(answer, ExecutionOutcome):
            return answer.status, answer.reason_code, answer.external_ref
        if isinstance(answer, AmbiguousExecution):
            return "ambiguous", answer.reason_code, None
        if isinstance(answer, Exception):
            # A connector bug, or a refusal before the side effect (see AmbiguousExecution).
            # The exception's text may quote arguments, so only its type is logged.
            bound.warning("connector.execute_raised", error=type(answer).__name__)
            return "failed", REASON_CONNECTOR_ERROR, None
        # The connector's own task was cancelled from inside (our cancellation
        # propagates out of ``gather`` instead): whether the side effect happened
        # is unknown. KeyboardInterrupt and SystemExit never get here; asyncio
        # re-raises them out of the loop, a crash the record already covers.
        bound.warning("connector.execute_cancelled", error=type(answer).__name__)
        return "ambiguous", REASON_CANCELLED, None

    async def _signal_progress(self, msg: Msg, every: float) -> None:
        """Extend the ack deadline while a slow external system works."""
        while True:
            await asyncio.sleep(every)
            try:
                await msg.in_progress()
            except nats.errors.Error:
                # A redelivery is harmless: the record answers it.
                self._log.debug("connector.order.progress_failed")

    def _sign(
        self, order_id: str, status: FinalState, reason: str, ref: str | None, at_ms: int
    ) -> bytes:
        report = ExecutionReport(
            schema=REPORT_SCHEMA,
            order_id=order_id,
            connector_id=self.connector_id,
            status=status,
            reason_code=reason,
            at_ms=at_ms,
            external_ref=ref,
        )
        return encode_envelope(sign_struct(PAYLOAD_REPORT, report, [self._signing_key]))

    async def _publish(self, record: Record, running: _Running) -> None:
        """Publish the recorded report, durably when a stream captures results.

        ``Nats-Msg-Id`` is ``<order_id>:<status>``, so a re-published report is
        de-duplicated by ``SMF_RESULT`` inside its window. Without a result
        stream it is a core publish, flushed so that the server has it.
        """
        assert record.report is not None
        headers = {
            HEADER_MSG_ID: f"{record.order_id}:{record.state}",
            HEADER_REASON: record.reason_code or "",
        }
        try:
            stream = await self._result_stream(running)
            if stream is None:
                await self._nc.publish(self.result_subject, record.report, headers=headers)
                await self._nc.flush(timeout=math.ceil(self.config.publish_timeout))
            else:
                await running.js.publish(
                    self.result_subject,
                    record.report,
                    headers=headers,
                    stream=stream,
                    timeout=self.config.publish_timeout,
                )
        except (nats.errors.Error, TimeoutError) as exc:
            running.result_stream = None
            raise ReportPublishError(f"report for {record.order_id} not published") from exc

    async def _result_stream(self, running: _Running) -> str | None:
        if running.result_stream is None:
            try:
                name = await running.js.find_stream_name_by_subject(self.result_subject)
            except nats.js.errors.NotFoundError:
                return None
            running.result_stream = name
        return running.result_stream
