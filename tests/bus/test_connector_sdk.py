"""The connector SDK against a real nats-server and real SQLite files.

An order executes exactly
once; a redelivery, a republish after the duplicate window, a replay under a
fresh message id or a crash between side effect and ack never executes it
again; every refused message is terminated with a signed ``failed`` report
naming the reason. NATS is never mocked.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import json
import sqlite3
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import msgspec
import nats
import pytest
from nats.aio.client import Client
from nats.aio.subscription import Subscription
from nats.js.api import AckPolicy, ConsumerConfig, ConsumerInfo, DiscardPolicy, StorageType
from nats.js.client import JetStreamContext
from structlog.testing import capture_logs

from smf_assurance.adapters.connector import (
    REASON_AMBIGUOUS,
    REASON_BAD_SIGNATURE,
    REASON_CANCELLED,
    REASON_CONNECTOR_ERROR,
    REASON_EXECUTED,
    REASON_HEADER_MISMATCH,
    REASON_INTERRUPTED,
    REASON_MALFORMED_ORDER,
    REASON_ORDER_EXPIRED,
    REASON_UNKNOWN_SIGNER,
    REASON_WRONG_CONNECTOR,
    REASON_WRONG_PAYLOAD_TYPE,
    Accepted,
    AmbiguousExecution,
    Connector,
    ConnectorRunner,
    ConsumerConfigError,
    ExecuteStreamMissing,
    ExecutionOutcome,
    IdempotencyStore,
    RecordStateError,
    Refused,
    RunnerConfig,
    StoreLockedError,
    check_order,
    wall_clock_ms,
)
from smf_assurance.adapters.connectors.court_efiling import CourtEFilingConnector
from smf_assurance.ops.demo.script import MOTION_PDF
from smf_assurance.ops.local.natsserver import EmbeddedNatsServer
from smf_assurance.pipeline.stores.streams import ensure_connector_durables
from smf_assurance.subjects.attachments import attachment_argument
from smf_assurance.subjects.dsse import (
    Envelope,
    UnknownSignerError,
    decode_envelope,
    encode_envelope,
    sign,
)
from smf_assurance.subjects.keys import SigningKey, VerifyKey, generate_signing_key
from smf_assurance.subjects.messages import ExecuteOrder, ExecutionReport
from smf_assurance.subjects.names import (
    EXECUTE_STREAM,
    HEADER_APPROVAL_ID,
    HEADER_DECISION_ID,
    HEADER_MSG_ID,
    HEADER_OPERATION_HASH,
    HEADER_RELEASE_ID,
    PAYLOAD_ORDER,
    PAYLOAD_REPORT,
    RESULT_STREAM,
    SubjectError,
    execute_subject,
)
from tests.support.bus_helpers import (
    ReportInbox,
    connector_durable,
    consumer_drained,
    ensure_execute_stream,
    ensure_result_stream,
    make_order,
    make_signed_order,
    open_report,
    order_headers,
    publish_order,
    sign_order,
    stream_count,
    wait_for,
)

CID = "recorder"
DURABLE = connector_durable(CID)
FAST = RunnerConfig(
    create_durable=True,
    ack_wait=1.0,
    fetch_timeout=0.1,
    retry_delay=0.1,
    stream_wait=2.0,
    publish_timeout=2.0,
)
CHILD = Path(__file__).parents[1] / "support" / "connector_crash_child.py"
REPO = Path(__file__).resolve().parents[2]


class Recorder(Connector):
    """Records each call; answers with ``outcome``, raises ``raises``, or waits on ``block``."""

    def __init__(
        self,
        outcome: ExecutionOutcome | None = None,
        *,
        raises: BaseException | None = None,
        block: asyncio.Event | None = None,
        delay: float = 0.0,
        hook: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self.calls: list[str] = []
        self.hook = hook
        self.outcome = outcome
        self.raises = raises
        self.block = block
        self.delay = delay

    async def execute(self, order: ExecuteOrder) -> ExecutionOutcome:
        self.calls.append(order.order_id)
        if self.hook is not None:
            await self.hook()
        if self.block is not None:
            await self.block.wait()
        if self.delay:
            await asyncio.sleep(self.delay)
        if self.raises is not None:
            raise self.raises
        return self.outcome or ExecutionOutcome.confirmed(f"ref-{order.order_id[:8]}")


MakeRunner = Callable[..., ConnectorRunner]


@pytest.fixture
def gate_key() -> SigningKey:
    return generate_signing_key()


@pytest.fixture
def connector_key() -> SigningKey:
    return generate_signing_key()


@pytest.fixture
def gate_keys(gate_key: SigningKey) -> dict[str, VerifyKey]:
    return {gate_key.key_id: gate_key.verify_key}


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    return tmp_path / "state"


@pytest.fixture
async def js(nc: Client) -> JetStreamContext:
    context = nc.jetstream()
    await ensure_execute_stream(context)
    return context


@pytest.fixture
async def inbox(nc: Client, connector_key: SigningKey) -> ReportInbox:
    return await ReportInbox.open(nc, CID, connector_key.verify_key)


@pytest.fixture
def make_runner(
    nc: Client, connector_key: SigningKey, gate_keys: dict[str, VerifyKey], state_dir: Path
) -> MakeRunner:
    def make(
        connector: Connector,
        *,
        config: RunnerConfig = FAST,
        clock: Callable[[], int] = wall_clock_ms,
        client: Client | None = None,
    ) -> ConnectorRunner:
        return ConnectorRunner(
            client or nc,
            connector,
            connector_id=CID,
            signing_key=connector_key,
            gate_keys=gate_keys,
            state_dir=state_dir,
            config=config,
            clock=clock,
        )

    return make


@contextlib.asynccontextmanager
async def running(runner: ConnectorRunner) -> AsyncIterator[asyncio.Task[None]]:
    """Run ``runner`` in a task until the block ends, then stop it gracefully."""
    task = asyncio.create_task(runner.run())
    ready = asyncio.create_task(runner.ready.wait())
    await asyncio.wait({task, ready}, timeout=5, return_when=asyncio.FIRST_COMPLETED)
    ready.cancel()
    if task.done():
        task.result()
    assert runner.ready.is_set(), "runner did not become ready"
    try:
        yield task
    finally:
        runner.stop()
        try:
            await asyncio.wait_for(task, 3)
        except (TimeoutError, asyncio.CancelledError):
            task.cancel()


async def terminations(nc: Client) -> Subscription:
    """JetStream's advisory for every ``msg.term()`` on our durable consumer."""
    sub = await nc.subscribe(
        f"$JS.EVENT.ADVISORY.CONSUMER.MSG_TERMINATED.{EXECUTE_STREAM}.{DURABLE}"
    )
    await nc.flush()
    return sub


def read_record(state_dir: Path, order_id: str) -> tuple[Any, ...]:
    """(state, reason_code, report) of one order, read beside the running runner."""
    db = sqlite3.connect(f"file:{state_dir / CID}.sqlite3?mode=ro", uri=True)
    try:
        row: tuple[Any, ...] | None = db.execute(
            "SELECT state, reason_code, report FROM orders WHERE order_id = ?", (order_id,)
        ).fetchone()
    finally:
        db.close()
    assert row is not None, "no record"
    return row


def tampered(signed: bytes, order: ExecuteOrder, **changes: Any) -> bytes:
    """The gate's signatures over ``order``, on a payload with ``changes``."""
    envelope = decode_envelope(signed).envelope
    forged = msgspec.structs.replace(order, **changes)
    payload = base64.b64encode(msgspec.json.encode(forged)).decode()
    return encode_envelope(
        Envelope(
            payload=payload, payload_type=envelope.payload_type, signatures=envelope.signatures
        )
    )


# --- the checks, without a bus ------------------------------------------------


def _check(data: bytes, headers: dict[str, str] | None, gate_keys: dict[str, VerifyKey]) -> Any:
    return check_order(data, headers, connector_id=CID, gate_keys=gate_keys)


def test_check_accepts_a_gate_signed_order_with_its_headers(
    gate_key: SigningKey, gate_keys: dict[str, VerifyKey]
) -> None:
    order, signed = make_signed_order(gate_key, CID, approval_id="appr-1")
    assert _check(signed, order_headers(order), gate_keys) == Accepted(order)


def test_check_refuses_an_attachment_that_is_not_its_digest(
    gate_key: SigningKey, gate_keys: dict[str, VerifyKey]
) -> None:
    """Even gate-signed, a document whose bytes are not its digest is not filed."""
    pdf = attachment_argument("m.pdf", "application/pdf", MOTION_PDF)
    good, signed = make_signed_order(gate_key, CID, arguments={"document_file": pdf})
    assert _check(signed, order_headers(good), gate_keys) == Accepted(good)
    swapped = pdf | {"data_b64": base64.b64encode(MOTION_PDF + b" ").decode()}
    order, signed = make_signed_order(gate_key, CID, arguments={"document_file": swapped})
    refused = Refused("attachment_digest_mismatch", order.order_id)
    assert _check(signed, order_headers(order), gate_keys) == refused


@pytest.mark.parametrize(
    ("header", "value"),
    [
        (HEADER_MSG_ID, "f" * 64),
        (HEADER_OPERATION_HASH, "sha256:" + "0" * 64),
        (HEADER_DECISION_ID, "sha256:" + "1" * 64),
        (HEADER_RELEASE_ID, "release-other"),
        (HEADER_APPROVAL_ID, "appr-smuggled"),
    ],
)
def test_check_refuses_a_header_that_disagrees_with_the_signed_order(
    gate_key: SigningKey, gate_keys: dict[str, VerifyKey], header: str, value: str
) -> None:
    order, signed = make_signed_order(gate_key, CID)
    headers = order_headers(order) | {header: value}
    assert _check(signed, headers, gate_keys) == Refused(REASON_HEADER_MISMATCH, order.order_id)


def test_check_refuses_a_missing_approval_header_and_missing_headers(
    gate_key: SigningKey, gate_keys: dict[str, VerifyKey]
) -> None:
    order, signed = make_signed_order(gate_key, CID, approval_id="appr-1")
    headers = order_headers(order)
    del headers[HEADER_APPROVAL_ID]
    refused = Refused(REASON_HEADER_MISMATCH, order.order_id)
    assert _check(signed, headers, gate_keys) == refused
    assert _check(signed, None, gate_keys) == refused


def test_check_refuses_by_signature_and_names_the_claimed_order_id(
    gate_key: SigningKey, gate_keys: dict[str, VerifyKey]
) -> None:
    order, signed = make_signed_order(gate_key, CID, arguments={"n": 1})
    headers = order_headers(order)
    outsider = sign_order(order, generate_signing_key())
    forged = tampered(signed, order, arguments={"n": 2})
    assert _check(outsider, headers, gate_keys) == Refused(REASON_UNKNOWN_SIGNER, order.order_id)
    assert _check(forged, headers, gate_keys) == Refused(REASON_BAD_SIGNATURE, order.order_id)
    assert _check(b"{not json", headers, gate_keys) == Refused(
        REASON_MALFORMED_ORDER, order.order_id
    )


def test_check_refuses_wrong_payload_type_and_a_signed_non_order(
    gate_key: SigningKey, gate_keys: dict[str, VerifyKey]
) -> None:
    order = make_order(CID)
    as_report = encode_envelope(sign(PAYLOAD_REPORT, msgspec.json.encode(order), [gate_key]))
    not_an_order = encode_envelope(sign(PAYLOAD_ORDER, b'{"schema":"nope"}', [gate_key]))
    headers = order_headers(order)
    assert _check(as_report, headers, gate_keys) == Refused(
        REASON_WRONG_PAYLOAD_TYPE, order.order_id
    )
    assert _check(not_an_order, headers, gate_keys) == Refused(
        REASON_MALFORMED_ORDER, order.order_id
    )


def test_check_claims_no_order_id_from_a_malformed_header(
    gate_keys: dict[str, VerifyKey],
) -> None:
    assert _check(b"garbage", {HEADER_MSG_ID: "not-an-order-id"}, gate_keys) == Refused(
        REASON_MALFORMED_ORDER, None
    )
    assert _check(b"garbage", None, gate_keys) == Refused(REASON_MALFORMED_ORDER, None)


def test_check_refuses_an_order_for_another_connector(
    gate_key: SigningKey, gate_keys: dict[str, VerifyKey]
) -> None:
    order, signed = make_signed_order(gate_key, "dms")
    assert _check(signed, order_headers(order), gate_keys) == Refused(
        REASON_WRONG_CONNECTOR, order.order_id
    )


def test_outcome_and_ambiguity_validate_reason_codes() -> None:
    assert ExecutionOutcome.confirmed("x").reason_code == REASON_EXECUTED
    assert ExecutionOutcome.failed("not_found").status == "failed"
    assert AmbiguousExecution().reason_code == REASON_AMBIGUOUS
    with pytest.raises(ValueError, match="reason code"):
        ExecutionOutcome.failed("Not A Code")
    with pytest.raises(ValueError, match="external_ref"):
        ExecutionOutcome.confirmed("r" * 257)
    with pytest.raises(ValueError, match="reason code"):
        AmbiguousExecution("bad code")


def test_runner_refuses_bad_configuration(nc: Client, connector_key: SigningKey) -> None:
    with pytest.raises(ValueError, match="no gate keys"):
        ConnectorRunner(
            nc,
            Recorder(),
            connector_id=CID,
            signing_key=connector_key,
            gate_keys={},
            state_dir=Path("unused"),
        )
    other = generate_signing_key()
    with pytest.raises(ValueError, match="not its own"):
        ConnectorRunner(
            nc,
            Recorder(),
            connector_id=CID,
            signing_key=connector_key,
            gate_keys={other.key_id: connector_key.verify_key},
            state_dir=Path("unused"),
        )
    with pytest.raises(SubjectError):
        ConnectorRunner(
            nc,
            Recorder(),
            connector_id="a.b",
            signing_key=connector_key,
            gate_keys={connector_key.key_id: connector_key.verify_key},
            state_dir=Path("unused"),
        )


async def test_a_runner_takes_the_gate_keys_of_a_new_release_without_a_restart(
    js: JetStreamContext,
    gate_key: SigningKey,
    inbox: ReportInbox,
    make_runner: MakeRunner,
) -> None:
    """A gate key rotation (docs/OPERATIONS.md, "Key rotation"): once the runner has
    the new release's keys, an order the new key signed executes; once the old key
    is retired, an order it signed is refused, and the connector never acts on it."""
    connector = Recorder()
    runner = make_runner(connector)
    new = generate_signing_key()
    with pytest.raises(ValueError, match="no gate keys"):
        runner.trust_gate_keys({})
    with pytest.raises(ValueError, match="not its own"):
        runner.trust_gate_keys({gate_key.key_id: new.verify_key})
    async with running(runner):
        runner.trust_gate_keys({gate_key.key_id: gate_key.verify_key, new.key_id: new.verify_key})
        by_new = make_order(CID, arguments={"n": 1})
        await publish_order(js, by_new, new)
        first = await inbox.next()
        runner.trust_gate_keys({new.key_id: new.verify_key})
        by_old = make_order(CID, arguments={"n": 2})
        await publish_order(js, by_old, gate_key)
        second = await inbox.next()
    assert (first.order_id, first.status) == (by_new.order_id, "confirmed")
    assert (second.order_id, second.status, second.reason_code) == (
        by_old.order_id,
        "failed",
        "unknown_signer",
    )
    assert connector.calls == [by_new.order_id]


# --- the idempotency record ---------------------------------------------------


async def test_record_moves_one_way_and_survives_reopening(tmp_path: Path) -> None:
    order_id = "a" * 64
    async with await IdempotencyStore.open(tmp_path / "s", CID) as store:
        assert await store.get(order_id) is None
        started = await store.begin(order_id, 10)
        assert started.state == "started"
        assert not started.finished
        with pytest.raises(RecordStateError):
            await store.begin(order_id, 11)
        done = await store.finish(order_id, "confirmed", "executed", "ref", b"report", 12)
        assert (done.state, done.report, done.finished_at_ms) == ("confirmed", b"report", 12)
        with pytest.raises(RecordStateError):
            await store.finish(order_id, "failed", "x", None, b"other", 13)
        with pytest.raises(RecordStateError):
            await store.finish("b" * 64, "failed", "x", None, b"r", 13)
    async with await IdempotencyStore.open(tmp_path / "s", CID) as store:
        again = await store.get(order_id)
        assert again == done
        refused = await store.refuse(order_id, "bad_signature", b"failed", 20)
        assert refused == done, "an existing record stands"
        fresh = await store.refuse("c" * 64, "bad_signature", b"failed", 21)
        assert (fresh.state, fresh.reason_code, fresh.report) == (
            "failed",
            "bad_signature",
            b"failed",
        )


async def test_finished_records_are_final_even_to_raw_sql(tmp_path: Path) -> None:
    async with await IdempotencyStore.open(tmp_path, CID) as store:
        await store.begin("a" * 64, 1)
        await store.finish("a" * 64, "confirmed", "executed", None, b"r", 2)
        path = store.path
    db = sqlite3.connect(path)
    try:
        with pytest.raises(sqlite3.IntegrityError, match="final"):
            db.execute("UPDATE orders SET state = 'started', report = NULL")
        with pytest.raises(sqlite3.IntegrityError, match="never deleted"):
            db.execute("DELETE FROM orders")
    finally:
        db.close()


async def test_second_store_on_the_same_state_dir_is_refused(tmp_path: Path) -> None:
    store = await IdempotencyStore.open(tmp_path, CID)
    try:
        with pytest.raises(StoreLockedError):
            await IdempotencyStore.open(tmp_path, CID)
    finally:
        await store.close()
    reopened = await IdempotencyStore.open(tmp_path, CID)
    await reopened.close()


async def test_store_that_cannot_open_its_database_releases_the_lock(tmp_path: Path) -> None:
    (tmp_path / f"{CID}.sqlite3").write_bytes(b"this is not a database" * 100)
    with pytest.raises(sqlite3.DatabaseError):
        await IdempotencyStore.open(tmp_path, CID)
    (tmp_path / f"{CID}.sqlite3").unlink()
    store = await IdempotencyStore.open(tmp_path, CID)
    await store.close()


# --- executing through the bus ----------------------------------------------


async def test_order_executes_once_and_the_report_is_signed(
    js: JetStreamContext,
    gate_key: SigningKey,
    connector_key: SigningKey,
    inbox: ReportInbox,
    make_runner: MakeRunner,
    state_dir: Path,
) -> None:
    connector = Recorder()
    runner = make_runner(connector)
    order = make_order(CID, arguments={"k": "v"})
    async with running(runner):
        await publish_order(js, order, gate_key)
        report = await inbox.next()
    assert report == ExecutionReport(
        schema="smf.execution-report/1",
        order_id=order.order_id,
        connector_id=CID,
        status="confirmed",
        reason_code=REASON_EXECUTED,
        at_ms=report.at_ms,
        external_ref=f"ref-{order.order_id[:8]}",
    )
    assert inbox.messages[0].headers is not None
    assert inbox.messages[0].headers[HEADER_MSG_ID] == f"{order.order_id}:confirmed"
    with pytest.raises(UnknownSignerError):
        open_report(inbox.messages[0].data, gate_key.verify_key)
    assert connector.calls == [order.order_id]
    info = await js.consumer_info(EXECUTE_STREAM, DURABLE)
    assert (info.num_ack_pending, info.num_pending) == (0, 0)
    record = read_record(state_dir, order.order_id)
    assert record == ("confirmed", REASON_EXECUTED, inbox.messages[0].data)


async def test_republish_inside_the_window_is_deduplicated_by_jetstream(
    js: JetStreamContext, gate_key: SigningKey, inbox: ReportInbox, make_runner: MakeRunner
) -> None:
    connector = Recorder()
    order = make_order(CID)
    first = await publish_order(js, order, gate_key)
    second = await publish_order(js, order, gate_key)
    assert (first.duplicate, second.duplicate) == (None, True)
    assert await stream_count(js) == 1
    other = make_order(CID, arguments={"different": True})
    assert other.order_id != order.order_id, "a different payload never shares a key"
    async with running(make_runner(connector)):
        assert (await inbox.next()).status == "confirmed"
        await wait_for(lambda: consumer_drained(js, DURABLE))
        assert inbox.none_pending()  # the one stored message was the only delivery
    assert connector.calls == [order.order_id]


async def test_republish_after_the_window_is_answered_from_the_record_after_restart(
    nc: Client, gate_key: SigningKey, inbox: ReportInbox, make_runner: MakeRunner
) -> None:
    """JetStream forgets Nats-Msg-Id after the window; the record does not."""
    context = nc.jetstream()
    await ensure_execute_stream(context, duplicate_window=0.3)
    first, second = Recorder(), Recorder()
    order = make_order(CID)
    async with running(make_runner(first)):
        await publish_order(context, order, gate_key)
        original = await inbox.next()

    # JetStream forgets the id when its window has passed, on its own timer; until
    # then a republish is dropped as a duplicate (stored nowhere, so harmless).
    async def forgotten() -> bool:
        return (await publish_order(context, order, gate_key)).duplicate is None

    await wait_for(forgotten, timeout=10, interval=0.1)
    assert await stream_count(context) == 2
    async with running(make_runner(second)):
        replayed = await inbox.next()
    assert replayed == original
    assert inbox.messages[1].data == inbox.messages[0].data, "the recorded bytes, re-published"
    assert (first.calls, second.calls) == ([order.order_id], [])


async def test_replay_under_a_fresh_message_id_is_refused_and_not_executed(
    js: JetStreamContext,
    nc: Client,
    gate_key: SigningKey,
    inbox: ReportInbox,
    make_runner: MakeRunner,
) -> None:
    """The genuine signed bytes with a new Nats-Msg-Id slip past de-duplication;
    the header check and the record stop them."""
    connector = Recorder()
    order, signed = make_signed_order(gate_key, CID)
    terms = await terminations(nc)
    async with running(make_runner(connector)):
        await publish_order(js, order, gate_key)
        assert (await inbox.next()).status == "confirmed"
        replay_headers = order_headers(order) | {HEADER_MSG_ID: "e" * 64}
        await publish_order(js, order, gate_key, payload=signed, headers=replay_headers)
        answer = await inbox.next()
        await terms.next_msg(timeout=3)
    assert (answer.order_id, answer.status) == (order.order_id, "confirmed")
    assert connector.calls == [order.order_id]


async def test_forged_order_first_under_a_genuine_id_is_refused_and_blocks_that_id(
    js: JetStreamContext,
    nc: Client,
    gate_key: SigningKey,
    inbox: ReportInbox,
    make_runner: MakeRunner,
    state_dir: Path,
) -> None:
    """A tampered payload under the gate's signature is a bad signature; its
    order id is then recorded failed, so the genuine order (deduplicated by
    JetStream inside the window anyway) can never execute after a signed
    "failed"."""
    connector = Recorder()
    order, signed = make_signed_order(gate_key, CID, arguments={"amount": 1})
    forged = tampered(signed, order, arguments={"amount": 1000})
    terms = await terminations(nc)
    async with running(make_runner(connector)):
        await publish_order(js, order, gate_key, payload=forged)
        report = await inbox.next()
        await terms.next_msg(timeout=3)
        genuine = await publish_order(js, order, gate_key)
        assert genuine.duplicate is True
    assert (report.order_id, report.status, report.reason_code) == (
        order.order_id,
        "failed",
        REASON_BAD_SIGNATURE,
    )
    assert connector.calls == []
    assert read_record(state_dir, order.order_id)[:2] == ("failed", REASON_BAD_SIGNATURE)


@pytest.mark.parametrize(
    ("case", "reason"),
    [
        ("unknown_signer", REASON_UNKNOWN_SIGNER),
        ("bad_signature", REASON_BAD_SIGNATURE),
        ("wrong_payload_type", REASON_WRONG_PAYLOAD_TYPE),
        ("malformed_json", REASON_MALFORMED_ORDER),
        ("wrong_connector", REASON_WRONG_CONNECTOR),
        ("header_mismatch", REASON_HEADER_MISMATCH),
    ],
)
async def test_refused_order_is_terminated_with_a_failed_report(
    js: JetStreamContext,
    nc: Client,
    gate_key: SigningKey,
    inbox: ReportInbox,
    make_runner: MakeRunner,
    state_dir: Path,
    case: str,
    reason: str,
) -> None:
    connector = Recorder()
    order, signed = make_signed_order(gate_key, CID, arguments={"n": 1})
    headers = order_headers(order)
    payload = signed
    if case == "unknown_signer":
        payload = sign_order(order, generate_signing_key())
    elif case == "bad_signature":
        payload = tampered(signed, order, content="something else")
    elif case == "wrong_payload_type":
        payload = encode_envelope(sign(PAYLOAD_REPORT, msgspec.json.encode(order), [gate_key]))
    elif case == "malformed_json":
        payload = b'{"payload": '
    elif case == "wrong_connector":
        order = make_order("dms")
        payload, headers = sign_order(order, gate_key), order_headers(order)
    else:
        headers[HEADER_RELEASE_ID] = "release-forged"
    terms = await terminations(nc)
    async with running(make_runner(connector)):
        await publish_order(
            js, order, gate_key, payload=payload, headers=headers, subject=execute_subject(CID)
        )
        report = await inbox.next()
        await terms.next_msg(timeout=3)
        info = await js.consumer_info(EXECUTE_STREAM, DURABLE)
    assert (report.order_id, report.status, report.reason_code) == (
        order.order_id,
        "failed",
        reason,
    )
    assert connector.calls == []
    assert info.num_ack_pending == 0
    assert read_record(state_dir, order.order_id)[:2] == ("failed", reason)


async def test_message_naming_no_order_is_terminated_without_report(
    js: JetStreamContext, nc: Client, inbox: ReportInbox, make_runner: MakeRunner
) -> None:
    connector = Recorder()
    terms = await terminations(nc)
    async with running(make_runner(connector)):
        await js.publish(execute_subject(CID), b"\x00garbage", headers={HEADER_MSG_ID: "x-1"})
        await terms.next_msg(timeout=3)
        # The runner reports before it terminates, on this connection: none came.
        assert inbox.none_pending()
    assert connector.calls == []


async def test_expired_order_is_refused_by_the_injected_clock(
    js: JetStreamContext, gate_key: SigningKey, inbox: ReportInbox, make_runner: MakeRunner
) -> None:
    connector = Recorder()
    order = make_order(CID, ttl_ms=1_000)
    runner = make_runner(connector, clock=lambda: order.not_after_ms + 1)
    async with running(runner):
        await publish_order(js, order, gate_key)
        report = await inbox.next()
    assert (report.status, report.reason_code) == ("failed", REASON_ORDER_EXPIRED)
    assert connector.calls == []


@pytest.mark.parametrize(
    ("connector", "status", "reason"),
    [
        (Recorder(raises=AmbiguousExecution("upstream_timeout")), "ambiguous", "upstream_timeout"),
        (Recorder(raises=RuntimeError("secret argument")), "failed", REASON_CONNECTOR_ERROR),
        (Recorder(ExecutionOutcome.failed("not_found")), "failed", "not_found"),
        (Recorder(raises=asyncio.CancelledError()), "ambiguous", REASON_CANCELLED),
    ],
    ids=["ambiguous", "exception", "failed", "cancelled-inside"],
)
async def test_connector_outcomes_are_recorded_and_reported(
    js: JetStreamContext,
    gate_key: SigningKey,
    inbox: ReportInbox,
    make_runner: MakeRunner,
    state_dir: Path,
    connector: Recorder,
    status: str,
    reason: str,
) -> None:
    order = make_order(CID)
    async with running(make_runner(connector)):
        await publish_order(js, order, gate_key)
        report = await inbox.next()
    assert (report.status, report.reason_code, report.external_ref) == (status, reason, None)
    assert read_record(state_dir, order.order_id)[:2] == (status, reason)
    assert connector.calls == [order.order_id]


async def test_cancelled_mid_execution_is_ambiguous_and_never_retried(
    js: JetStreamContext,
    gate_key: SigningKey,
    inbox: ReportInbox,
    make_runner: MakeRunner,
    state_dir: Path,
) -> None:
    stuck = Recorder(block=asyncio.Event())
    order = make_order(CID)
    task = asyncio.create_task(make_runner(stuck).run())
    await publish_order(js, order, gate_key)
    await wait_for(lambda: stuck.calls)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert read_record(state_dir, order.order_id)[0] == "started"
    fresh = Recorder()
    async with running(make_runner(fresh)):
        report = await inbox.next(timeout=4)
    assert (report.status, report.reason_code) == ("ambiguous", REASON_INTERRUPTED)
    assert fresh.calls == []


async def test_forged_copy_cannot_decide_an_order_whose_outcome_is_unknown(
    js: JetStreamContext,
    nc: Client,
    gate_key: SigningKey,
    inbox: ReportInbox,
    make_runner: MakeRunner,
    state_dir: Path,
) -> None:
    order, signed = make_signed_order(gate_key, CID)
    async with await IdempotencyStore.open(state_dir, CID) as store:
        await store.begin(order.order_id, wall_clock_ms())
    terms = await terminations(nc)
    async with running(make_runner(Recorder())):
        await publish_order(js, order, gate_key, payload=tampered(signed, order, content="x"))
        await terms.next_msg(timeout=3)
        assert inbox.none_pending()  # a report would have come before the termination
    assert read_record(state_dir, order.order_id) == ("started", None, None)


async def test_crash_after_side_effect_before_ack_is_ambiguous_and_happens_once(
    nats_server: EmbeddedNatsServer,
    nc: Client,
    js: JetStreamContext,
    gate_key: SigningKey,
    connector_key: SigningKey,
    tmp_path: Path,
) -> None:
    """Killed after executing but before acking -> on
    restart the order is reported ambiguous, not executed again."""
    cid, outbox, state = "court_efiling", tmp_path / "outbox", tmp_path / "state"
    order = make_order(cid, arguments={"court": "NYSCEF", "document": "motion"}, content="text")
    await publish_order(js, order, gate_key)
    config = {
        "url": nats_server.url,
        "state_dir": str(state),
        "outbox": str(outbox),
        "connector_id": cid,
        "durable": f"smf-connector-{cid}",
        "ack_wait": "1.0",
        "gate_public": gate_key.public_bytes.hex(),
        "connector_seed": connector_key.seed().hex(),
    }
    child = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, str(CHILD), json.dumps(config)],
        cwd=REPO,
        timeout=10,
        capture_output=True,
        check=False,
    )
    assert child.returncode == 137, child.stderr.decode(errors="replace")[-2000:]
    assert [p.name for p in outbox.iterdir()] == [f"{order.order_id}.json"]
    reports = await ReportInbox.open(nc, cid, connector_key.verify_key)
    runner = ConnectorRunner(
        nc,
        CourtEFilingConnector(outbox),
        connector_id=cid,
        signing_key=connector_key,
        gate_keys={gate_key.key_id: gate_key.verify_key},
        state_dir=state,
        config=FAST,
    )
    async with running(runner):
        report = await reports.next(timeout=4)
    assert (report.order_id, report.status, report.reason_code) == (
        order.order_id,
        "ambiguous",
        REASON_INTERRUPTED,
    )
    assert [p.name for p in outbox.iterdir()] == [f"{order.order_id}.json"]


async def test_unpublished_report_is_not_acked_and_redelivery_does_not_re_execute(
    js: JetStreamContext,
    gate_key: SigningKey,
    make_runner: MakeRunner,
    state_dir: Path,
) -> None:
    """A full SMF_RESULT (discard new) refuses the report: the order stays
    unacked, is redelivered, and the record answers until the report lands."""
    await js.add_stream(
        name=RESULT_STREAM,
        subjects=["smf.result.>"],
        storage=StorageType.FILE,
        max_msgs=1,
        discard=DiscardPolicy.NEW,
        duplicate_window=120,
    )
    await js.publish("smf.result.someone", b"filler")
    connector = Recorder()
    order = make_order(CID)
    async with running(make_runner(connector)):
        await publish_order(js, order, gate_key)

        async def redelivered() -> bool:
            info = await js.consumer_info(EXECUTE_STREAM, DURABLE)
            return (info.num_redelivered or 0) >= 1

        await wait_for(redelivered)
        assert read_record(state_dir, order.order_id)[0] == "confirmed"
        await js.purge_stream(RESULT_STREAM)

        async def settled() -> bool:
            info = await js.consumer_info(EXECUTE_STREAM, DURABLE)
            return info.num_ack_pending == 0 and await stream_count(js, RESULT_STREAM) == 1

        await wait_for(settled)
    assert connector.calls == [order.order_id]
    stored = await js.get_last_msg(RESULT_STREAM, f"smf.result.{CID}")
    assert stored.headers is not None
    assert stored.headers[HEADER_MSG_ID] == f"{order.order_id}:confirmed"


async def test_reports_go_durably_to_the_result_stream_and_dedupe(
    js: JetStreamContext,
    gate_key: SigningKey,
    connector_key: SigningKey,
    make_runner: MakeRunner,
) -> None:
    await ensure_result_stream(js)
    connector = Recorder()
    order = make_order(CID)
    async with running(make_runner(connector)):
        await publish_order(js, order, gate_key)
        await wait_for(lambda: stream_count(js, RESULT_STREAM))
        # A replay under a fresh id re-publishes the same report: deduplicated.
        await publish_order(
            js, order, gate_key, headers=order_headers(order) | {HEADER_MSG_ID: "d" * 64}
        )

        async def replay_handled() -> bool:
            info = await js.consumer_info(EXECUTE_STREAM, DURABLE)
            return (info.num_pending, info.num_ack_pending) == (0, 0)

        await wait_for(replay_handled)
    assert await stream_count(js, RESULT_STREAM) == 1
    stored = await js.get_last_msg(RESULT_STREAM, f"smf.result.{CID}")
    assert stored.data is not None
    assert open_report(stored.data, connector_key.verify_key).status == "confirmed"
    assert connector.calls == [order.order_id]


async def test_slow_execution_signals_progress_instead_of_being_redelivered(
    js: JetStreamContext, gate_key: SigningKey, inbox: ReportInbox, make_runner: MakeRunner
) -> None:
    # The ack wait is the server's clock, which no test can inject: the work outlasts
    # it by half, and the progress signals (every third of it) leave a loaded loop
    # over a second of slack before a redelivery.
    connector = Recorder(delay=3.0)
    config = RunnerConfig(
        create_durable=True, ack_wait=2.0, fetch_timeout=0.1, retry_delay=0.1, stream_wait=2.0
    )
    async with running(make_runner(connector, config=config)):
        await publish_order(js, make_order(CID), gate_key)
        assert (await inbox.next(timeout=10)).status == "confirmed"
        info = await js.consumer_info(EXECUTE_STREAM, DURABLE)
    assert info.num_redelivered == 0
    assert len(connector.calls) == 1


async def test_runner_waits_for_the_durable_the_gate_creates(
    nc: Client, gate_key: SigningKey, inbox: ReportInbox, make_runner: MakeRunner
) -> None:
    """The runner creates nothing on a bus where it may not: it asks after its durable
    until the gate made the stream and the durable, then binds and executes."""
    context = nc.jetstream()
    connector = Recorder()
    asked = await nc.subscribe(f"$JS.API.CONSUMER.INFO.{EXECUTE_STREAM}.{DURABLE}")
    patient = dataclasses.replace(FAST, stream_wait=60.0, create_durable=False)
    task = asyncio.create_task(make_runner(connector, config=patient).run())
    for _ in range(2):  # asked, found nothing, and asked again: it waits, it did not give up
        await asked.next_msg(timeout=5)
    assert not task.done()
    await ensure_execute_stream(context)
    for _ in range(2):  # the stream alone is not enough: it creates no consumer
        await asked.next_msg(timeout=5)
    assert not task.done()
    assert [c.name async for c in _consumers(context)] == []
    await asked.unsubscribe()
    await ensure_connector_durables(context, (CID,))
    order = make_order(CID)
    await publish_order(context, order, gate_key)
    assert (await inbox.next(timeout=4)).status == "confirmed"
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def _consumers(context: JetStreamContext) -> AsyncIterator[ConsumerInfo]:
    for info in await context.consumers_info(EXECUTE_STREAM):
        yield info


async def test_runner_gives_up_when_the_stream_never_appears(
    nc: Client, make_runner: MakeRunner
) -> None:
    runner = make_runner(Recorder(), config=RunnerConfig(stream_wait=0.3))
    with pytest.raises(ExecuteStreamMissing):
        await runner.run()


async def test_runner_refuses_a_durable_without_explicit_acks(
    js: JetStreamContext, make_runner: MakeRunner
) -> None:
    await js.add_consumer(
        EXECUTE_STREAM,
        ConsumerConfig(
            durable_name=DURABLE, ack_policy=AckPolicy.ALL, filter_subject=f"smf.execute.{CID}"
        ),
    )
    with pytest.raises(ConsumerConfigError, match="explicit"):
        await make_runner(Recorder()).run()


async def test_runner_refuses_a_durable_on_another_subject(
    js: JetStreamContext, make_runner: MakeRunner
) -> None:
    await js.add_consumer(
        EXECUTE_STREAM,
        ConsumerConfig(
            durable_name=DURABLE, ack_policy=AckPolicy.EXPLICIT, filter_subject="smf.execute.other"
        ),
    )
    with pytest.raises(ConsumerConfigError, match="filter"):
        await make_runner(Recorder()).run()


async def test_runner_survives_a_nats_server_restart(
    nats_server: EmbeddedNatsServer,
    gate_key: SigningKey,
    connector_key: SigningKey,
    make_runner: MakeRunner,
) -> None:
    client = await nats.connect(nats_server.url, reconnect_time_wait=0.1, max_reconnect_attempts=-1)
    try:
        context = client.jetstream()
        await ensure_execute_stream(context)
        connector = Recorder()
        async with running(make_runner(connector, client=client)):
            await asyncio.to_thread(nats_server.restart)
            await wait_for(lambda: client.is_connected, timeout=4)
            reports = await ReportInbox.open(client, CID, connector_key.verify_key)
            order = make_order(CID)
            await publish_order(context, order, gate_key)
            assert (await reports.next(timeout=4)).status == "confirmed"
        assert connector.calls == [order.order_id]
    finally:
        await client.close()


async def test_runner_ends_when_its_connection_is_closed(
    nats_url: str, make_runner: MakeRunner
) -> None:
    client = await nats.connect(nats_url)
    await ensure_execute_stream(client.jetstream())
    runner = make_runner(Recorder(), client=client)
    task = asyncio.create_task(runner.run())
    await asyncio.wait_for(runner.ready.wait(), 3)
    await client.close()
    with pytest.raises(nats.errors.ConnectionClosedError):
        await asyncio.wait_for(task, 3)


async def test_stop_finishes_gracefully_and_releases_the_state_dir(
    js: JetStreamContext, make_runner: MakeRunner, state_dir: Path
) -> None:
    runner = make_runner(Recorder())
    task = asyncio.create_task(runner.run())
    await asyncio.wait_for(runner.ready.wait(), 3)
    with pytest.raises(StoreLockedError):
        await make_runner(Recorder()).run()
    runner.stop()
    await asyncio.wait_for(task, 2)
    assert not runner.ready.is_set()
    store = await IdempotencyStore.open(state_dir, CID)
    await store.close()


async def test_runner_binds_again_when_its_consumer_is_deleted(
    js: JetStreamContext, gate_key: SigningKey, inbox: ReportInbox, make_runner: MakeRunner
) -> None:
    """A re-created consumer redelivers the stream from the start; the record
    answers the order already executed instead of executing it again."""
    connector = Recorder()
    first, second = make_order(CID), make_order(CID)
    async with running(make_runner(connector)):
        await publish_order(js, first, gate_key)
        assert (await inbox.next()).order_id == first.order_id
        await js.delete_consumer(EXECUTE_STREAM, DURABLE)
        await publish_order(js, second, gate_key)
        answers = {(await inbox.next(timeout=4)).order_id for _ in range(2)}
    assert answers == {first.order_id, second.order_id}
    assert connector.calls == [first.order_id, second.order_id]


async def test_connection_lost_mid_execution_keeps_the_outcome_for_the_next_run(
    nats_url: str,
    nc: Client,
    js: JetStreamContext,
    gate_key: SigningKey,
    inbox: ReportInbox,
    make_runner: MakeRunner,
    state_dir: Path,
) -> None:
    """The side effect is done and recorded but neither reported nor acked:
    the next run re-publishes the recorded report and executes nothing."""
    client = await nats.connect(nats_url)
    config = RunnerConfig(
        create_durable=True, ack_wait=0.6, fetch_timeout=0.1, retry_delay=0.1, stream_wait=2.0
    )

    def progress_failed() -> bool:
        return any(e["event"] == "connector.order.progress_failed" for e in logs)

    async def lose_connection() -> None:
        await client.close()
        await wait_for(progress_failed)  # past a progress signal, which now fails

    first = Recorder(hook=lose_connection)
    order = make_order(CID)
    await publish_order(js, order, gate_key)
    with capture_logs() as logs, pytest.raises(nats.errors.ConnectionClosedError):
        await asyncio.wait_for(make_runner(first, config=config, client=client).run(), 4)
    assert progress_failed()
    assert read_record(state_dir, order.order_id)[0] == "confirmed"
    second = Recorder()
    async with running(make_runner(second, config=config)):
        report = await inbox.next(timeout=4)
        await wait_for(lambda: consumer_drained(js, DURABLE))
    assert (report.order_id, report.status) == (order.order_id, "confirmed")
    # The first run's connection closed before it could publish: the one report
    # is the second run's re-publication.
    assert inbox.none_pending()
    assert (first.calls, second.calls) == ([order.order_id], [])
