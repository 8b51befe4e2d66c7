"""The JetStream streams the gate owns, created with explicit settings.

NATS guarantee relied on: a stream de-duplicates messages by ``Nats-Msg-Id``
only within its ``duplicate_window`` (ARCHITECTURE.md, "One proposal through
the bus"); the one-shot guarantee itself comes from the gate's claim record
and the connector's idempotency record.
"""

from __future__ import annotations

import asyncio
import time
from typing import Final

from nats.aio.client import Client
from nats.errors import Error as NatsError
from nats.errors import TimeoutError as NatsTimeoutError
from nats.js.api import DiscardPolicy, RetentionPolicy, StorageType, StreamConfig
from nats.js.client import JetStreamContext
from nats.js.errors import NotFoundError

from smf_assurance.subjects.names import (
    APPROVAL_PENDING_PREFIX,
    APPROVAL_STREAM,
    CHECKPOINT_PREFIX,
    CHECKPOINT_STREAM,
    EXECUTE_PREFIX,
    EXECUTE_STREAM,
    RESULT_PREFIX,
    RESULT_STREAM,
)

DUPLICATE_WINDOW_SECONDS: Final = 120.0
PROBE_SECONDS: Final = 2.0


class JetStreamUnavailableError(RuntimeError):
    """JetStream did not answer this connection within the time allowed."""


async def wait_for_jetstream(nc: Client, seconds: float) -> None:
    """Return once JetStream answers this connection, or raise after ``seconds``.

    On a cluster, an API answer comes back from the meta leader over the routes;
    on a cluster that has just formed, it can be dropped before this connection's
    reply interest has reached the leader's node. The stream was made; the
    caller never hears it. This was seen in a test under load: the stream
    existed, and the creation request timed out after 30 s. So the first API
    call goes to a read-only probe the meta leader answers (the stream names).
    It is asked again, with a short deadline, until it is answered. Only then
    does a call that changes something go out.
    """
    js = nc.jetstream(timeout=PROBE_SECONDS)
    deadline = time.monotonic() + seconds
    while True:
        try:
            await js.streams_info()
            return
        except (NatsTimeoutError, TimeoutError, NatsError) as exc:
            if time.monotonic() + PROBE_SECONDS > deadline:
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
    )


def result_stream_config(replicas: int = 1) -> StreamConfig:
    return StreamConfig(
        name=RESULT_STREAM,
        subjects=[f"{RESULT_PREFIX}.>"],
        storage=StorageType.FILE,
        num_replicas=replicas,
        retention=RetentionPolicy.LIMITS,
        duplicate_window=DUPLICATE_WINDOW_SECONDS,
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
    )


def checkpoint_stream_config(replicas: int = 1) -> StreamConfig:
    """Ledger checkpoints outside the ledger file (issue 7): the stream refuses
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


async def ensure_stream(js: JetStreamContext, config: StreamConfig) -> None:
    """Create the stream, or check that the existing one has our subjects."""
    assert config.name is not None
    try:
        info = await js.stream_info(config.name)
    except NotFoundError:
        await js.add_stream(config)
        return
    if sorted(info.config.subjects or []) != sorted(config.subjects or []):
        raise RuntimeError(f"stream {config.name} exists with other subjects")
    if (info.config.num_replicas or 1) < (config.num_replicas or 1):
        # A cluster gate must not run on a stream that one lost node can take away.
        raise RuntimeError(
            f"stream {config.name} has {info.config.num_replicas or 1} replica(s); "
            f"{config.num_replicas} are required"
        )


async def ensure_gate_streams(js: JetStreamContext, replicas: int = 1) -> None:
    """The gate's streams; on a cluster with ``replicas`` copies each (issue 11: orders,
    reports, pending approvals and ledger checkpoints survive the loss of a node)."""
    await ensure_stream(js, execute_stream_config(replicas=replicas))
    await ensure_stream(js, result_stream_config(replicas))
    await ensure_stream(js, checkpoint_stream_config(replicas))
    await ensure_stream(js, approval_stream_config(replicas))
