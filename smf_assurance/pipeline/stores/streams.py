"""The JetStream streams the gate owns, created with explicit settings.

NATS guarantee relied on: a stream de-duplicates messages by ``Nats-Msg-Id``
only within its ``duplicate_window`` (ARCHITECTURE.md, "One proposal through
the bus"); the one-shot guarantee itself comes from the gate's claim record
and the connector's idempotency record.

Streams protect themselves: orders, reports, announcements and checkpoints are
kept with ``deny_delete`` and ``deny_purge`` (JetStream refuses the message-delete
and purge API for them, whoever asks: only an operator who first changes the
stream's configuration can), and a gate records when each stream was made. A gate
that starts and finds a stream it recorded gone, or made again since (its orders,
reports or announcements lost with it), refuses to start (:class:`GateStreamError`,
``stream_missing`` / ``stream_replaced``) instead of silently making a fresh one;
the operator who removed it on purpose removes the record too. A bus on which none
of them exists is a new bus, not a lost stream (:func:`ensure_gate_streams`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import tempfile
from pathlib import Path
from typing import Final

import msgspec
import structlog
from nats.aio.client import Client
from nats.errors import Error as NatsError
from nats.errors import TimeoutError as NatsTimeoutError
from nats.js.api import (
    AckPolicy,
    ConsumerConfig,
    DeliverPolicy,
    DiscardPolicy,
    RetentionPolicy,
    StorageType,
    StreamConfig,
    StreamInfo,
)
from nats.js.client import JetStreamContext
from nats.js.errors import NotFoundError

from smf_assurance.subjects.bus_access import connector_durable
from smf_assurance.subjects.clock import monotonic_s
from smf_assurance.subjects.names import (
    APPROVAL_PENDING_PREFIX,
    APPROVAL_STREAM,
    CHECKPOINT_PREFIX,
    CHECKPOINT_STREAM,
    EXECUTE_PREFIX,
    EXECUTE_STREAM,
    RESULT_PREFIX,
    RESULT_STREAM,
    execute_subject,
)
from smf_assurance.subjects.registry import KeyRegistry

log = structlog.get_logger(__name__)

DUPLICATE_WINDOW_SECONDS: Final = 120.0
PROBE_SECONDS: Final = 2.0
STREAM_MISSING: Final = "stream_missing"
STREAM_REPLACED: Final = "stream_replaced"


class GateStreamError(RuntimeError):
    """A stream the gate made before is gone or was made again; ``reason_code`` says which."""

    def __init__(self, reason_code: str, detail: str) -> None:
        super().__init__(f"{reason_code}: {detail}")
        self.reason_code = reason_code


class JetStreamUnavailableError(RuntimeError):
    """JetStream did not answer this connection within the time allowed."""


async def wait_for_jetstream(nc: Client, seconds: float) -> None:
    """Return once JetStream answers this connection, or raise after ``seconds``.

    On a cluster, an API answer comes back from the meta leader over the routes;
    on a cluster that has just formed, it can be dropped before this connection's
    reply interest has reached the leader's node. The stream was made; the
    caller never hears it: under load the stream exists and the creation
    request times out after 30 s. So the first API
    call goes to a read-only probe the meta leader answers (the stream names).
    It is asked again, with a short deadline, until it is answered. Only then
    does a call that changes something go out.
    """
    js = nc.jetstream(timeout=PROBE_SECONDS)
    deadline = monotonic_s() + seconds
    while True:
        try:
            await js.streams_info()
            return
        except (NatsTimeoutError, TimeoutError, NatsError) as exc:
            if monotonic_s() + PROBE_SECONDS > deadline:
                raise JetStreamUnavailableError(
                    f"JetStream did not answer within {seconds:g} s ({type(exc).__name__})"
                ) from exc
            await asyncio.sleep(0.05)


def execute_stream_config(
    duplicate_window: float = DUPLICATE_WINDOW_SECONDS, replicas: int = 1
) -> StreamConfig:
    return StreamConfig(
        name=EXECUTE_STREAM,
        subjects=[f"{EXECUTE_PREFIX}.>"],
        storage=StorageType.FILE,
        num_replicas=replicas,
        retention=RetentionPolicy.LIMITS,
        discard=DiscardPolicy.NEW,
        duplicate_window=duplicate_window,
        max_msg_size=1024 * 1024,
        deny_delete=True,
        deny_purge=True,
    )


def result_stream_config(replicas: int = 1) -> StreamConfig:
    return StreamConfig(
        name=RESULT_STREAM,
        subjects=[f"{RESULT_PREFIX}.>"],
        storage=StorageType.FILE,
        num_replicas=replicas,
        retention=RetentionPolicy.LIMITS,
        duplicate_window=DUPLICATE_WINDOW_SECONDS,
        deny_delete=True,
        deny_purge=True,
    )


def approval_stream_config(replicas: int = 1) -> StreamConfig:
    """Pending approvals, kept so a console that connects later still sees them."""
    return StreamConfig(
        name=APPROVAL_STREAM,
        subjects=[f"{APPROVAL_PENDING_PREFIX}.>"],
        storage=StorageType.FILE,
        num_replicas=replicas,
        retention=RetentionPolicy.LIMITS,
        duplicate_window=DUPLICATE_WINDOW_SECONDS,
        max_age=3600.0,
        deny_delete=True,
        deny_purge=True,
    )


def checkpoint_stream_config(replicas: int = 1) -> StreamConfig:
    """Ledger checkpoints outside the ledger file: the stream refuses
    message deletion and purge, so truncating the ledger stays detectable."""
    return StreamConfig(
        name=CHECKPOINT_STREAM,
        subjects=[f"{CHECKPOINT_PREFIX}.>"],
        storage=StorageType.FILE,
        num_replicas=replicas,
        retention=RetentionPolicy.LIMITS,
        deny_delete=True,
        deny_purge=True,
    )


async def ensure_stream(js: JetStreamContext, config: StreamConfig, made: str | None = None) -> str:
    """Create the stream, or check the existing one; return when it was made.

    ``made`` is when this gate recorded the stream's creation before: a stream
    missing, or made at another time, is a :class:`GateStreamError`. An existing
    stream must have our subjects and enough replicas; one made before the streams
    protected themselves gets ``deny_delete`` and ``deny_purge`` added.
    """
    assert config.name is not None
    try:
        info = await js.stream_info(config.name)
    except NotFoundError:
        if made is not None:
            raise GateStreamError(
                STREAM_MISSING, f"stream {config.name}, made {made}, is gone"
            ) from None
        return _created(await js.add_stream(config))
    if made is not None and _created(info) != made:
        raise GateStreamError(
            STREAM_REPLACED,
            f"stream {config.name} was made {_created(info)}, not {made} as recorded",
        )
    if sorted(info.config.subjects or []) != sorted(config.subjects or []):
        raise RuntimeError(f"stream {config.name} exists with other subjects")
    if (info.config.num_replicas or 1) < (config.num_replicas or 1):
        # A cluster gate must not run on a stream that one lost node can take away.
        raise RuntimeError(
            f"stream {config.name} has {info.config.num_replicas or 1} replica(s); "
            f"{config.num_replicas} are required"
        )
    protect = (config.deny_delete and not info.config.deny_delete) or (
        config.deny_purge and not info.config.deny_purge
    )
    if protect:
        await js.update_stream(
            dataclasses.replace(
                info.config,
                deny_delete=bool(info.config.deny_delete or config.deny_delete),
                deny_purge=bool(info.config.deny_purge or config.deny_purge),
            )
        )
    return _created(info)


def _created(info: StreamInfo) -> str:
    return "" if info.created is None else info.created.isoformat()


def gate_stream_configs(replicas: int = 1) -> tuple[StreamConfig, ...]:
    """The gate's streams; on a cluster with ``replicas`` copies each (orders,
    reports, pending approvals and ledger checkpoints survive the loss of a node)."""
    return (
        execute_stream_config(replicas=replicas),
        result_stream_config(replicas),
        checkpoint_stream_config(replicas),
        approval_stream_config(replicas),
    )


async def ensure_gate_streams(
    js: JetStreamContext, replicas: int = 1, record: Path | None = None
) -> None:
    """Every stream of the gate (:func:`gate_stream_configs`). With ``record`` (a file
    beside the gate's ledger), each stream's creation time is checked against the one
    recorded there, and the record is written for the next start.

    A bus on which none of the recorded streams exists is a new bus (the gate moved,
    or its whole store was replaced): the gate starts on it and says so in its log.
    Nothing it lost can be decided again there: the ledger, the claims and the
    approvals are the gate's own files, and an order in flight ends
    ``execution_unknown``. A bus that kept some streams and lost or remade others is
    refused: a stream went missing under a running deployment.
    """
    known = _read_record(record)
    configs = gate_stream_configs(replicas)
    if known and not any([await _exists(js, name) for name in known]):
        log.warning("gate_streams_on_a_new_bus", recorded=sorted(known))
        known = {}
    for config in configs:
        assert config.name is not None
        known[config.name] = await ensure_stream(js, config, known.get(config.name))
    if record is not None:
        _write_record(record, known)


async def _exists(js: JetStreamContext, name: str) -> bool:
    try:
        await js.stream_info(name)
    except NotFoundError:
        return False
    return True


async def record_restored_streams(js: JetStreamContext, record: Path) -> dict[str, str]:
    """Record, in the stream record ``record``, when each stream it names was made on
    this bus, and return the new record.

    A restore (``smf-assurance restore``) makes every stream again from its backup
    with its messages and consumers, so each is "made" at the restore: without this, the
    next start would refuse them all as ``stream_replaced``. Only what the record
    already names is recorded again; a stream it names that the restore did not make is
    left as recorded, so the next start still refuses it as missing."""
    known = _read_record(record)
    for name in list(known):
        try:
            known[name] = _created(await js.stream_info(name))
        except NotFoundError:
            continue
    if known:
        _write_record(record, known)
    return known


def _read_record(record: Path | None) -> dict[str, str]:
    if record is None:
        return {}
    try:
        raw = record.read_bytes()
    except FileNotFoundError:
        return {}
    try:
        return msgspec.json.decode(raw, type=dict[str, str])
    except msgspec.DecodeError as exc:
        raise GateStreamError(STREAM_REPLACED, f"{record} is not a stream record") from exc


def _write_record(record: Path, known: dict[str, str]) -> None:
    """Atomically, 0600: what the next start checks the streams against."""
    data = msgspec.json.encode(dict(sorted(known.items())))
    fd, tmp = tempfile.mkstemp(dir=record.parent, prefix=record.name + ".")
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    os.chmod(tmp, 0o600)
    Path(tmp).replace(record)


CONNECTOR_ACK_WAIT_SECONDS: Final = 30.0
"""How long an order a connector fetched stays its own before redelivery; the
connector signals progress while it executes (the connector SDK)."""


def connector_durable_config(
    connector_id: str, ack_wait: float = CONNECTOR_ACK_WAIT_SECONDS
) -> ConsumerConfig:
    """A connector's one durable: its own orders only, each acked explicitly."""
    durable = connector_durable(connector_id)
    return ConsumerConfig(
        name=durable,
        durable_name=durable,
        ack_policy=AckPolicy.EXPLICIT,
        ack_wait=ack_wait,
        deliver_policy=DeliverPolicy.ALL,
        filter_subject=execute_subject(connector_id),
    )


def registered_connectors(registry: KeyRegistry) -> tuple[str, ...]:
    """The connector ids of a registry, each once, in a stable order."""
    found = {
        p.entry.connector_id
        for p in registry.principals.values()
        if p.entry.role == "connector" and p.entry.connector_id is not None
    }
    return tuple(sorted(found))


async def ensure_connector_durables(js: JetStreamContext, connector_ids: tuple[str, ...]) -> None:
    """Create each connector's durable on ``SMF_EXECUTE`` where it is missing.

    The gate creates them because a connector may not (``bus_access``, "No deputy": a
    consumer's delivery subject is one more reply subject chosen by its creator). An
    existing durable is left as it is; the connector checks its settings before it binds.
    """
    for connector_id in connector_ids:
        try:
            await js.consumer_info(EXECUTE_STREAM, connector_durable(connector_id))
        except NotFoundError:
            await js.add_consumer(EXECUTE_STREAM, connector_durable_config(connector_id))
