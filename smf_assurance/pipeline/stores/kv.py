"""JetStream KV tools shared by the cluster stores (approvals and proposal claims).

ARCHITECTURE.md, "Scale": beyond one machine the one-shot claim moves to "a
store that is atomic across instances (JetStream KV compare-and-set by
revision)". Both KV stores (:mod:`smf_assurance.pipeline.stores.approvals_kv`,
:mod:`smf_assurance.pipeline.stores.claims_kv`) keep that promise the same way, so the way
lives here once:

- :func:`open_strict_bucket`: a bucket whose settings the compare-and-set can
  rely on, or the store's "unavailable" error.
- :func:`compare_and_set`: read, decide, write by revision; on a conflict read
  again and decide again, never overwrite. When the re-read still shows the
  revision that lost (a cluster's leader can refuse a CAS before it applies
  the write that won), wait (:class:`Backoff`) instead of deciding again on a
  state already known to be stale.
- :func:`kv_entries`: a complete listing of a key prefix.
- :func:`delete_at`: a delete conditional on the revision that was judged.
- :func:`fail_closed`: a NATS failure is the store's "unavailable" error, so
  the gate denies (an outage is a denial, never an allow).
- :func:`token`: any string as a KV key token.
- :class:`KvBucketStore` and :func:`decode_keyed`: what the single-bucket stores
  (claims, orders, tool calls) share: the bucket, closing, failing closed, and
  refusing a stored value filed under another's key.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import enum
import secrets
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import ClassVar, Final, Self, TypeVar

import msgspec
import structlog
from nats.errors import Error as NatsError
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy, StorageType
from nats.js.client import JetStreamContext
from nats.js.errors import (
    APIError,
    BucketNotFoundError,
    KeyNotFoundError,
    ServiceUnavailableError,
)
from nats.js.kv import KV_DEL, KV_OP, KV_PURGE, KeyValue

__all__ = [
    "DEFAULT_TIMEOUT",
    "MAX_STALE_READ_BACKOFF",
    "NATS_FAILURES",
    "STALE_READ_BACKOFF",
    "WRONG_LAST_SEQUENCE",
    "Backoff",
    "KvBucketStore",
    "KvEntry",
    "Retry",
    "compare_and_set",
    "decode_keyed",
    "delete_at",
    "fail_closed",
    "kv_entries",
    "open_strict_bucket",
    "read_entry",
    "token",
]

log = structlog.get_logger(__name__)

V = TypeVar("V")
R = TypeVar("R")

DEFAULT_TIMEOUT: Final = 10.0

STALE_READ_BACKOFF: Final = 0.005
MAX_STALE_READ_BACKOFF: Final = 0.2
"""Seconds to wait before reading again a key whose CAS just lost but which
still reads at the losing revision (a cluster's leader can refuse the CAS
before it applies the write that won); doubled per wait, capped here."""

NATS_FAILURES: Final = (NatsError, TimeoutError, OSError)
"""What an unreachable, slow or refusing server raises through nats-py
(``nats.errors.TimeoutError`` is also a ``TimeoutError``)."""


def token(text: str) -> str:
    """A deterministic, injective KV-key token for any string.

    KV keys allow only ``[-/_=.a-zA-Z0-9]``: URL-safe base64 (with ``=``
    padding) uses nothing else. The leading ``t`` keeps the key from ending in
    ``.`` when ``text`` is empty.
    """
    return "t" + base64.urlsafe_b64encode(text.encode("utf-8", "surrogatepass")).decode()


@contextlib.contextmanager
def fail_closed(unavailable: Callable[[str], Exception], store: str, during: str) -> Iterator[None]:
    """Turn a NATS failure into the store's ``unavailable`` error: an outage is a
    denial (``<store>_store_unavailable``), never a success."""
    try:
        yield
    except NATS_FAILURES as exc:
        log.warning(f"{store}_store_unavailable", during=during, error=type(exc).__name__)
        raise unavailable(f"{store} store unavailable during {during}") from exc


async def read_entry(
    kv: KeyValue, key: str, unavailable: Callable[[str], Exception], store: str
) -> tuple[bytes | None, int] | None:
    """The value under ``key`` and its revision, or None when the key is absent.

    One read for every KV store of the pipeline (claims, orders, approvals): a bus
    failure, or an entry without a revision (which no compare-and-set could
    follow), is the store's ``unavailable`` error, never an empty answer.
    """
    with fail_closed(unavailable, store, "read"):
        try:
            entry = await kv.get(key)
        except KeyNotFoundError:
            return None
    if entry.revision is None:
        raise unavailable(f"stored {store} {key} has no revision")
    return entry.value, entry.revision


WRONG_LAST_SEQUENCE: Final = frozenset({10071, 10164})
"""JetStream's error codes for a failed expected-last-sequence check (nats-py turns
them into KeyWrongLastSequenceError for create and update, not for delete)."""


async def delete_at(kv: KeyValue, key: str, revision: int) -> bool:
    """Delete ``key`` only if it is still at ``revision``: False (nothing deleted) when
    another write moved it on. Any other failure raises, for :func:`fail_closed`."""
    try:
        await kv.delete(key, last=revision)
    except APIError as exc:
        if exc.err_code not in WRONG_LAST_SEQUENCE:
            raise
        return False
    return True


class Backoff:
    """Waits that double from :data:`STALE_READ_BACKOFF` up to
    :data:`MAX_STALE_READ_BACKOFF`: for a write that won on the server to become
    readable, without spinning on a state already known to be stale."""

    def __init__(self) -> None:
        self._next = STALE_READ_BACKOFF

    async def wait(self) -> None:
        await asyncio.sleep(self._next)
        self._next = min(self._next * 2, MAX_STALE_READ_BACKOFF)


class Retry(enum.Enum):
    """What an attempt of :func:`compare_and_set` says when it did not finish."""

    LOST = enum.auto()
    """Its write was refused: the key is no longer at the revision it decided on."""
    AGAIN = enum.auto()
    """What it read moved on before it could be used: read again at once."""


async def compare_and_set(
    read: Callable[[], Awaitable[tuple[V, int] | None]],
    attempt: Callable[[V, int], Awaitable[R | Retry]],
    *,
    attempts: int,
    exhausted: Callable[[], Exception],
) -> R | None:
    """Read a key, let ``attempt`` decide and write against that revision; on a
    conflict read again and decide again.

    ``read`` returns the value with its revision, or None when the key holds
    nothing (then so does this). ``attempt`` writes only if the key is still at
    the revision it was given (``kv.update(..., last=revision)``) and returns
    its result, :attr:`Retry.LOST` when that write lost, or
    :attr:`Retry.AGAIN`. Each conflict is another writer's committed write: a
    read that still shows the revision that lost waits (:class:`Backoff`) and
    reads again rather than deciding again, and more than ``attempts`` reads
    is a fault, not contention: ``exhausted()`` is raised (fail closed).
    """
    lost_at: int | None = None
    backoff = Backoff()
    for _ in range(attempts):
        found = await read()
        if found is None:
            return None
        value, revision = found
        if revision == lost_at:
            await backoff.wait()
            continue
        outcome = await attempt(value, revision)
        if outcome is Retry.LOST:
            lost_at = revision
        elif outcome is not Retry.AGAIN:
            return outcome
    raise exhausted()


@dataclass(frozen=True)
class KvEntry:
    """One key's latest value and its revision (stream sequence)."""

    value: bytes
    revision: int


CONSUMER_READY_POLL_S: Final = 0.05
"""How often :func:`kv_entries` asks a consumer that is not reachable yet."""


async def kv_entries(
    js: JetStreamContext, bucket: str, prefix: str, timeout: float
) -> dict[str, KvEntry]:
    """The latest live value of every key under ``prefix`` in ``bucket``.

    An ephemeral pull consumer over the last message per key, without acks. It is
    complete by construction: the server counts the pending messages when it
    creates the consumer, and every message says how many remain after it, so
    the read ends at a message with none remaining. (nats-py's KV watcher decides
    "caught up" by comparing consumer info with a client-side count of messages
    received, which disagree when the info reply overtakes a delivery, so a listing
    through it can miss an existing record under load.)

    Every key that existed when the read began is seen at least once; a key
    written meanwhile is seen again at its new revision, and the last one wins.
    Deleted keys are left out. Each fetch is bounded by ``timeout``.

    A fetch answered 503 (no responders) asked a consumer the server has created
    but not yet made reachable (on a cluster its leader is still being placed):
    it is asked again until ``timeout`` has passed since the first such answer,
    and then the 503 is logged (``kv_listing_consumer_unreachable``, with how long
    it waited) and raised: the caller's outage, which a gate starting on it
    reports as a store unavailable and the command line as a bus that did not
    answer (``ops/cli/boundary.py``).
    """
    stream = f"KV_{bucket}"
    subject_prefix = f"$KV.{bucket}."
    name = f"smf_list_{secrets.token_hex(8)}"
    info = await js.add_consumer(
        stream,
        ConsumerConfig(
            name=name,
            filter_subject=f"{subject_prefix}{prefix}>",
            deliver_policy=DeliverPolicy.LAST_PER_SUBJECT,
            ack_policy=AckPolicy.NONE,
            inactive_threshold=max(timeout * 4, 30.0),
            mem_storage=True,
            num_replicas=1,
        ),
    )
    latest: dict[str, KvEntry] = {}
    try:
        remaining = info.num_pending or 0
        if remaining:
            pull = await js.pull_subscribe_bind(consumer=name, stream=stream)
            try:
                unready_since: float | None = None
                while remaining:
                    try:
                        batch = await pull.fetch(batch=min(remaining, 256), timeout=timeout)
                    except ServiceUnavailableError:
                        now = asyncio.get_running_loop().time()
                        unready_since = now if unready_since is None else unready_since
                        if now - unready_since >= timeout:
                            log.warning(
                                "kv_listing_consumer_unreachable",
                                bucket=bucket,
                                waited_s=round(now - unready_since, 1),
                            )
                            raise
                        await asyncio.sleep(CONSUMER_READY_POLL_S)
                        continue
                    for msg in batch:
                        key = msg.subject.removeprefix(subject_prefix)
                        operation = (msg.headers or {}).get(KV_OP)
                        if operation in (KV_DEL, KV_PURGE):
                            latest.pop(key, None)
                        else:
                            latest[key] = KvEntry(msg.data, msg.metadata.sequence.stream)
                        remaining = msg.metadata.num_pending or 0
            finally:
                with contextlib.suppress(*NATS_FAILURES):
                    await pull.unsubscribe()
    finally:
        with contextlib.suppress(*NATS_FAILURES):
            await js.delete_consumer(stream, name)
    return latest


async def open_strict_bucket(
    js: JetStreamContext,
    bucket: str,
    description: str,
    replicas: int,
    unavailable: Callable[[str], Exception],
    store: str,
) -> KeyValue:
    """Bind ``bucket``, creating it if absent, as every KV store needs it: history 1,
    file storage, ``replicas`` copies, no direct gets. A bucket that exists with
    other settings is refused with the store's ``unavailable`` error, as is an
    outage: history would keep superseded values, memory storage forgets on
    restart, fewer replicas lose writes with a node, and direct gets may read a
    replica that lags the compare-and-set the stores re-check against.
    """
    with fail_closed(unavailable, store, "open"):
        try:
            kv = await js.key_value(bucket)
        except BucketNotFoundError:
            kv = await js.create_key_value(
                bucket=bucket,
                description=description,
                history=1,
                storage=StorageType.FILE,
                replicas=replicas,
                direct=False,
            )
        info = (await js.stream_info(f"KV_{bucket}")).config
    if (
        info.max_msgs_per_subject != 1
        or info.storage != StorageType.FILE
        or info.num_replicas != replicas
        or info.allow_direct
    ):
        raise unavailable(f"bucket {bucket} exists with other settings")
    return kv


def decode_keyed(
    key: str,
    value: bytes | None,
    kind: type[V],
    key_of: Callable[[V], str],
    unavailable: Callable[[str], Exception],
    what: tuple[str, str],
) -> V:
    """A stored value, or the store's ``unavailable`` error for one no write of the store
    produces, including a valid value filed under another's key (so a copied entry can
    never answer for another claim, order or runtime). ``what`` names the value and what
    its key identifies, e.g. ``("order", "order")``, for the one-line message."""
    noun, owner = what
    try:
        decoded = msgspec.json.decode(value or b"", type=kind)
    except msgspec.DecodeError as exc:  # ValidationError is a DecodeError
        raise unavailable(f"stored {noun} {key} does not decode") from exc
    if key_of(decoded) != key:
        raise unavailable(f"stored {noun} {key} names another {owner}")
    return decoded


class KvBucketStore:
    """What every single-bucket KV store of the pipeline does the same way: hold the
    bucket, refuse every call once closed, and turn each read, listing and conditional
    delete into the store's ``unavailable`` error on any failure (fail closed: an
    outage is a denial, never an empty answer).

    A subclass names its error (:attr:`unavailable`), its store name for logs and
    messages (:attr:`store`) and what a closed instance says (:attr:`closed`). The NATS
    connection belongs to the caller."""

    unavailable: ClassVar[type[Exception]]
    store: ClassVar[str]
    closed: ClassVar[str]
    default_bucket: ClassVar[str]
    description: ClassVar[str]

    def __init__(self, js: JetStreamContext, kv: KeyValue, *, bucket: str, timeout: float) -> None:
        self._js = js
        self._kv = kv
        self._bucket = bucket
        self._timeout = timeout
        self._closed = False

    @classmethod
    async def open_bucket(
        cls,
        js: JetStreamContext,
        *,
        bucket: str | None = None,
        replicas: int = 1,
        timeout: float = DEFAULT_TIMEOUT,
    ) -> Self:
        """Bind the store's bucket (``default_bucket`` unless named), creating it if
        absent as :func:`open_strict_bucket` does (history 1, file storage, ``replicas``
        copies; a cluster uses 3, no direct gets); one with other settings is refused:
        memory storage would forget on restart, fewer replicas than asked would lose
        writes with a node, direct gets may read a replica that lags."""
        name = cls.default_bucket if bucket is None else bucket
        kv = await open_strict_bucket(
            js, name, cls.description, replicas, cls.unavailable, cls.store
        )
        return cls(js, kv, bucket=name, timeout=timeout)

    def _check_open(self) -> None:
        if self._closed:
            raise self.unavailable(self.closed)

    def _failing(self, during: str) -> contextlib.AbstractContextManager[None]:
        return fail_closed(self.unavailable, self.store, during)

    async def _read_raw(self, key: str) -> tuple[bytes | None, int] | None:
        self._check_open()
        return await read_entry(self._kv, key, self.unavailable, self.store)

    async def _entries(self, prefix: str, during: str = "list") -> dict[str, KvEntry]:
        self._check_open()
        with self._failing(during):
            return await kv_entries(self._js, self._bucket, prefix, self._timeout)

    async def _delete_at(self, key: str, revision: int, during: str) -> bool:
        """:func:`delete_at` on an open store, failing closed."""
        self._check_open()
        with self._failing(during):
            return await delete_at(self._kv, key, revision)

    async def close(self) -> None:
        """Stop this instance; every later call raises the store's ``unavailable``."""
        self._closed = True
