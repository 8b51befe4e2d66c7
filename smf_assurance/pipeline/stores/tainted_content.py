"""The tainted-content bucket: written and read by model gateways, created by gates.

``smf_assurance.subjects.tainted_content`` is the contract (key, value, who may
write). Here:

- :func:`ensure_tainted_content_bucket`: the gate creates the bucket when it is
  absent (history 1, file storage, its replicas, a maximum age, a maximum size)
  and refuses to start on one with other settings. A gateway cannot create it
  (no outside account may create a stream, docs/BUS-PERMISSIONS.md).
- :class:`TaintedContentIndex`: the gateway's side. It writes a record (a create:
  a key that holds a value is refused by the server) and keeps every digest of
  every record in memory, read from the bucket in sequence order
  (``STREAM.MSG.GET`` with ``next_by_subj``, one request per record; with nothing
  new, one request answered "no message"). :meth:`TaintedContentIndex.sync` reads
  what was written since the last read, so a record another gateway (or this one
  before a restart) wrote before a request is seen by that request.

Fail closed: a write that does not land, a read that fails and an index past its
bound are each :class:`TaintedContentUnavailable`; the gateway refuses the turn.
A record can only raise a request's taint, never lower it, so one that no
gateway key of the registry in force signed, or that is stored under another
key (a key rotated out, a record moved), still counts: its digests taint as
``unknown`` (what is not known is assumed worse), and a warning says so. A value
that is not a record at all carries no digest and is skipped with an error. Bounds: the
bucket's maximum size (:data:`DEFAULT_MAX_BYTES`; writes past it are refused,
``discard new``), and the index's :attr:`TaintedContentIndex.capacity`. Records
past the maximum age (:data:`DEFAULT_MAX_AGE_S`, as the call contexts) leave the
bucket, and the index forgets their digests at its next sync.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final

import msgspec
import structlog
from nats.js.api import KeyValueConfig, StorageType
from nats.js.client import JetStreamContext
from nats.js.errors import BucketNotFoundError, NotFoundError
from nats.js.kv import KV_DEL, KV_OP, KV_PURGE

from smf_assurance.pipeline.stores.call_context import (
    EXPECTED_LAST_SUBJECT_SEQUENCE,
    NO_MESSAGE,
)
from smf_assurance.pipeline.stores.kv import fail_closed, open_strict_bucket
from smf_assurance.subjects import dsse
from smf_assurance.subjects.envelope import InjectionTaint
from smf_assurance.subjects.keys import SigningKey, VerifyKey
from smf_assurance.subjects.tainted_content import (
    MAX_TAINTED_CONTENT_BYTES,
    PAYLOAD_TAINTED_CONTENT,
    TAINTED_CONTENT_BUCKET,
    TAINTED_CONTENT_STREAM,
    TAINTED_CONTENT_SUBJECT_PREFIX,
    TaintedContent,
    tainted_content_key,
)

log = structlog.get_logger(__name__)

DEFAULT_MAX_AGE_S: Final = 30 * 24 * 3600.0
DEFAULT_MAX_BYTES: Final = 16 * 1024 * 1024
"""About 450,000 digests: the index holds each in memory (about 120 bytes apiece)."""
DEFAULT_CAPACITY: Final = 1_000_000
_TAINT_RANK: Final = {"suspected": 1, "unknown": 2, "tainted": 3}
_RANKED: Final[dict[int, InjectionTaint]] = {1: "suspected", 2: "unknown", 3: "tainted"}


class TaintedContentUnavailable(Exception):
    """The bucket could not be written or read, or holds what no gateway wrote."""


def tainted_content_bucket_config(
    replicas: int, max_age_s: float, max_bytes: int
) -> KeyValueConfig:
    return KeyValueConfig(
        bucket=TAINTED_CONTENT_BUCKET,
        description="SMF content written by tainted sessions: digests, by the model gateway",
        history=1,
        ttl=max_age_s,
        max_bytes=max_bytes,
        max_value_size=MAX_TAINTED_CONTENT_BYTES,
        storage=StorageType.FILE,
        replicas=replicas,
        direct=False,
    )


async def ensure_tainted_content_bucket(
    js: JetStreamContext,
    replicas: int = 1,
    max_age_s: float = DEFAULT_MAX_AGE_S,
    max_bytes: int = DEFAULT_MAX_BYTES,
) -> None:
    """Create the bucket when it is absent; raise when it exists with settings its
    readers cannot rely on (more history, memory storage, fewer replicas, direct gets)."""
    try:
        await js.key_value(TAINTED_CONTENT_BUCKET)
    except BucketNotFoundError:
        await js.create_key_value(
            config=tainted_content_bucket_config(replicas, max_age_s, max_bytes)
        )
    await open_strict_bucket(
        js, TAINTED_CONTENT_BUCKET, "SMF tainted content", replicas, RuntimeError, "tainted_content"
    )


def _subject(record: TaintedContent) -> str:
    key = tainted_content_key(record.runtime_id, record.tool_call_id, record.part)
    return TAINTED_CONTENT_SUBJECT_PREFIX + key


def open_tainted_content(
    data: bytes, keys: Mapping[str, VerifyKey], subject: str
) -> tuple[TaintedContent, bool] | None:
    """The record in ``data`` and whether it is believed: as written when a gateway key
    signed it and it is stored under its own key; else with its digests at taint
    ``unknown`` (it can only raise). ``None`` when ``data`` holds no record at all."""
    try:
        envelope = dsse.decode_envelope(data, MAX_TAINTED_CONTENT_BYTES)
    except dsse.SignatureError:
        return None
    try:
        record, _ = dsse.open_struct(envelope, keys, TaintedContent, PAYLOAD_TAINTED_CONTENT)
    except (dsse.SignatureError, msgspec.ValidationError):
        try:
            unbelieved = msgspec.json.decode(envelope.raw_payload, type=TaintedContent)
        except msgspec.DecodeError:
            return None
        return msgspec.structs.replace(unbelieved, injection_taint="unknown"), False
    if _subject(record) != subject:
        return msgspec.structs.replace(record, injection_taint="unknown"), False
    return record, True


@dataclass(slots=True)
class _Digest:
    rank: int
    issued_at_ms: int


@dataclass
class TaintedContentIndex:
    """Every digest of the bucket, in memory, with the highest taint that wrote it.
    Every mutation happens on the event loop's thread."""

    js: JetStreamContext
    signer: SigningKey
    keys: Callable[[], Mapping[str, VerifyKey]]
    """The keys a record may be signed by: the registry's ``gateway`` role."""
    clock: Callable[[], int]
    timeout: float = 2.0
    capacity: int = DEFAULT_CAPACITY
    max_age_ms: int = int(DEFAULT_MAX_AGE_S * 1000)
    prune_every_ms: int = 60_000
    """How often a sync forgets expired digests (a pass over all of them)."""
    _digests: dict[str, _Digest] = field(init=False, default_factory=dict)
    _next_seq: int = field(init=False, default=1)
    _pruned_at_ms: int = field(init=False, default=0)

    def __len__(self) -> int:
        return len(self._digests)

    async def write(self, records: Iterable[TaintedContent]) -> None:
        """Store each record under its key (a create), then keep its digests."""
        for record in records:
            data = dsse.encode_envelope(
                dsse.sign_struct(PAYLOAD_TAINTED_CONTENT, record, [self.signer])
            )
            with fail_closed(TaintedContentUnavailable, "tainted_content", "write"):
                await self.js.publish(
                    _subject(record),
                    data,
                    timeout=self.timeout,
                    headers={EXPECTED_LAST_SUBJECT_SEQUENCE: "0"},
                )
            self._keep(record)

    def _keep(self, record: TaintedContent) -> None:
        rank = _TAINT_RANK[record.injection_taint]
        for digest in record.digests:
            kept = self._digests.get(digest)
            if kept is None:
                if len(self._digests) >= self.capacity:
                    log.error("tainted_content_index_full", capacity=self.capacity)
                    raise TaintedContentUnavailable("index full")
                self._digests[digest] = _Digest(rank, record.issued_at_ms)
            else:
                kept.rank = max(kept.rank, rank)
                kept.issued_at_ms = max(kept.issued_at_ms, record.issued_at_ms)

    async def sync(self) -> None:
        """Read every record written since the last sync, in sequence order, and forget
        digests older than the bucket keeps them."""
        keys = self.keys()
        while True:
            with fail_closed(TaintedContentUnavailable, "tainted_content", "read"):
                try:
                    msg = await self.js.get_msg(
                        TAINTED_CONTENT_STREAM,
                        seq=self._next_seq,
                        subject=TAINTED_CONTENT_SUBJECT_PREFIX + ">",
                        next=True,
                    )
                except NotFoundError as exc:
                    if exc.err_code == NO_MESSAGE:
                        break
                    raise  # the stream itself is gone: unavailable, never "nothing new"
            assert msg.seq is not None
            assert msg.subject is not None
            data = msg.data or b""
            deleted = (msg.headers or {}).get(KV_OP) in (KV_DEL, KV_PURGE) or not data
            opened = None if deleted else open_tainted_content(data, keys, msg.subject)
            if opened is not None:
                if not opened[1]:
                    log.warning("tainted_content_unverified", seq=msg.seq)
                # kept before the read moves on: an index that is full refuses this
                # record again at every sync, never skips it
                self._keep(opened[0])
            elif not deleted:
                log.error("tainted_content_unreadable", seq=msg.seq)
            self._next_seq = msg.seq + 1
        self._forget_expired()

    def _forget_expired(self) -> None:
        now = self.clock()
        if now - self._pruned_at_ms < self.prune_every_ms:
            return
        self._pruned_at_ms = now
        oldest = now - self.max_age_ms
        for digest in [d for d, kept in self._digests.items() if kept.issued_at_ms < oldest]:
            del self._digests[digest]

    def taint_of(self, digests: Iterable[str]) -> InjectionTaint | None:
        """The highest taint any of ``digests`` was written under, or None."""
        rank = 0
        for digest in digests:
            kept = self._digests.get(digest)
            if kept is not None and kept.rank > rank:
                rank = kept.rank
        return _RANKED.get(rank)


__all__ = [
    "DEFAULT_CAPACITY",
    "DEFAULT_MAX_AGE_S",
    "DEFAULT_MAX_BYTES",
    "TaintedContentIndex",
    "TaintedContentUnavailable",
    "ensure_tainted_content_bucket",
    "open_tainted_content",
    "tainted_content_bucket_config",
]
