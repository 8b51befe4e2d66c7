"""The call-context bucket: written by the model gateway, read by the gate.

``smf_assurance.subjects.call_context`` is the contract (key, value, who may write). Here:

- :func:`ensure_call_context_bucket`: the gate creates the bucket when it is
  absent (history 1, file storage, its replicas, a maximum age) and refuses to
  start on one with other settings (:func:`smf_assurance.pipeline.stores.kv.open_strict_bucket`).
  The gateway never creates it: on a cluster it would create it with one replica.
- :class:`CallContextWriter`: the gateway's write. One create per call id
  (expected last subject sequence 0): a second write of a key is refused by the
  server, so a record, once written, is what every gate reads.
- :func:`read_call_context`: one direct read (``STREAM.MSG.GET``, answered by
  the stream leader, so never a replica that lags the write) and its check.
- :class:`CallContextMirror`: what the gate reads through. Recent records from
  a watch of the bucket (new records only, bounded, oldest dropped first), a
  direct read for anything else: a proposal can arrive before the watch has
  delivered its record. The mirror is only a cache; records never change, so
  a kept record is never stale.

Checks every read makes (each failure its own error, never an empty answer):

- the value is a DSSE envelope a key of the registry's ``gateway`` role signed
  for :data:`~smf_assurance.subjects.call_context.PAYLOAD_CALL_CONTEXT`, and its payload the
  canonical :class:`~smf_assurance.subjects.call_context.CallContext` of the very key it is
  stored under (a record moved to another key is refused): else
  :class:`CallContextInvalid`;
- a NATS failure, a timeout, or a missing bucket is :class:`CallContextUnavailable`;
- only "no message for this key" (JetStream error 10037), or a delete marker,
  is "no record" (``None``).

Why a maximum age (:data:`DEFAULT_MAX_AGE_S`, 30 days): a record is needed
first when its call is proposed (seconds after the turn), then for as long as
its id may come back in a resumed history, where it passes its context on to
the next calls (lineage). Runtimes keep sessions on disk indefinitely, so some
bound has to be chosen; past it the record is gone and the gateway counts the
id as a call of unknown context (``call_context_lineage_unknown``): a session
resumed after a month is assumed unknown-tainted, never clear. So the age
bounds storage (a record is about 600 bytes: ids and two facts) and can only
make decisions stricter.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Final

import msgspec
import structlog
from nats.aio.msg import Msg
from nats.js.api import DeliverPolicy, KeyValueConfig, StorageType
from nats.js.client import JetStreamContext
from nats.js.errors import BucketNotFoundError, NotFoundError
from nats.js.kv import KV_DEL, KV_OP, KV_PURGE

from smf_assurance.pipeline.stores.kv import NATS_FAILURES, fail_closed, open_strict_bucket
from smf_assurance.subjects import dsse
from smf_assurance.subjects.call_context import (
    CALL_CONTEXT_BUCKET,
    CALL_CONTEXT_STREAM,
    CALL_CONTEXT_SUBJECT_PREFIX,
    MAX_CALL_CONTEXT_BYTES,
    PAYLOAD_CALL_CONTEXT,
    CallContext,
    call_context_key,
)
from smf_assurance.subjects.keys import SigningKey, VerifyKey

log = structlog.get_logger(__name__)

DEFAULT_MAX_AGE_S: Final = 30 * 24 * 3600.0
DEFAULT_MIRROR_RECORDS: Final = 65_536
DEFAULT_TIMEOUT_S: Final = 2.0
NO_MESSAGE: Final = 10037
"""JetStream's error code for "no message found" (the stream exists, the key does not)."""
EXPECTED_LAST_SUBJECT_SEQUENCE: Final = "Nats-Expected-Last-Subject-Sequence"

Keys = Callable[[], Mapping[str, VerifyKey]]
"""The keys a record may be signed by: the registry's ``gateway`` role, as it is now."""


class CallContextError(Exception):
    """A record could not be written or read; ``reason`` names why (ids only)."""


class CallContextUnavailable(CallContextError):
    """The bucket did not answer, is gone, or refused the write."""


class CallContextInvalid(CallContextError):
    """A stored value is not a record a gateway key signed for its own key."""


def call_context_bucket_config(replicas: int, max_age_s: float) -> KeyValueConfig:
    return KeyValueConfig(
        bucket=CALL_CONTEXT_BUCKET,
        description="SMF tool-call contexts: written by the model gateway, read by the gate",
        history=1,
        ttl=max_age_s,
        max_value_size=MAX_CALL_CONTEXT_BYTES,
        storage=StorageType.FILE,
        replicas=replicas,
        direct=False,
    )


async def ensure_call_context_bucket(
    js: JetStreamContext, replicas: int = 1, max_age_s: float = DEFAULT_MAX_AGE_S
) -> None:
    """Create the bucket when it is absent; raise when it exists with settings the
    readers cannot rely on (more history, memory storage, fewer replicas, direct
    gets that may read a lagging replica)."""
    try:
        await js.key_value(CALL_CONTEXT_BUCKET)
    except BucketNotFoundError:
        await js.create_key_value(config=call_context_bucket_config(replicas, max_age_s))
    description = "SMF tool-call contexts"
    await open_strict_bucket(
        js, CALL_CONTEXT_BUCKET, description, replicas, RuntimeError, "call_context"
    )


def _subject(runtime_id: str, tool_call_id: str) -> str:
    return CALL_CONTEXT_SUBJECT_PREFIX + call_context_key(runtime_id, tool_call_id)


def _unavailable(reason: str) -> CallContextUnavailable:
    return CallContextUnavailable(reason)


@dataclass(frozen=True)
class CallContextWriter:
    """The model gateway's side: one signed record per tool-call id it issues."""

    js: JetStreamContext
    signer: SigningKey
    """The gateway's key (registry role ``gateway``)."""
    timeout: float = DEFAULT_TIMEOUT_S

    async def create(self, record: CallContext) -> None:
        """Store ``record`` under its key, or raise :class:`CallContextUnavailable`
        (the gateway then refuses the turn: no call goes out without its record).
        The write is a create: a key that already holds a value is refused."""
        data = dsse.encode_envelope(dsse.sign_struct(PAYLOAD_CALL_CONTEXT, record, [self.signer]))
        with fail_closed(_unavailable, "call_context", "write"):
            await self.js.publish(
                _subject(record.runtime_id, record.tool_call_id),
                data,
                timeout=self.timeout,
                headers={EXPECTED_LAST_SUBJECT_SEQUENCE: "0"},
            )


def open_call_context(
    data: bytes, keys: Mapping[str, VerifyKey], runtime_id: str, tool_call_id: str
) -> tuple[CallContext, frozenset[str]]:
    """The record in ``data`` and the keys that signed it, if it is a gateway's record
    of exactly this call; else :class:`CallContextInvalid`."""
    try:
        envelope = dsse.decode_envelope(data, MAX_CALL_CONTEXT_BYTES)
        record, verified = dsse.open_struct(envelope, keys, CallContext, PAYLOAD_CALL_CONTEXT)
    except (dsse.SignatureError, msgspec.ValidationError) as exc:
        raise CallContextInvalid(type(exc).__name__) from exc
    if record.runtime_id != runtime_id or record.tool_call_id != tool_call_id:
        raise CallContextInvalid("record_for_another_key")
    return record, verified.key_ids


async def read_call_context(
    js: JetStreamContext, keys: Mapping[str, VerifyKey], runtime_id: str, tool_call_id: str
) -> tuple[CallContext, frozenset[str]] | None:
    """The checked record of one call, or ``None`` when the bucket holds none for it."""
    with fail_closed(_unavailable, "call_context", "read"):
        try:
            msg = await js.get_msg(CALL_CONTEXT_STREAM, subject=_subject(runtime_id, tool_call_id))
        except NotFoundError as exc:
            if exc.err_code == NO_MESSAGE:
                return None
            raise  # the stream itself is gone: unavailable, never "no record"
    if (msg.headers or {}).get(KV_OP) in (KV_DEL, KV_PURGE) or msg.data is None:
        return None
    return open_call_context(msg.data, keys, runtime_id, tool_call_id)


@dataclass(frozen=True, slots=True)
class _Kept:
    record: CallContext
    key_ids: frozenset[str]


class CallContextMirror:
    """The gate's reader: a bounded mirror of new records fed by a watch, and a direct
    read on a miss. Every mutation happens on the event loop's thread."""

    def __init__(
        self,
        js: JetStreamContext,
        keys: Keys,
        capacity: int = DEFAULT_MIRROR_RECORDS,
    ) -> None:
        if capacity < 0:
            raise ValueError("capacity must not be negative")
        self.js = js
        self.keys = keys
        self.capacity = capacity
        self._kept: OrderedDict[tuple[str, str], _Kept] = OrderedDict()
        self._sub: JetStreamContext.PushSubscription | None = None

    async def start(self) -> None:
        """Watch the bucket for records written from now on (an ordered consumer,
        which re-creates itself after a gap). With capacity 0 nothing is kept and
        every lookup is a direct read."""
        if self.capacity == 0:
            return
        self._sub = await self.js.subscribe(
            CALL_CONTEXT_SUBJECT_PREFIX + ">",
            stream=CALL_CONTEXT_STREAM,
            cb=self._on_record,
            ordered_consumer=True,
            deliver_policy=DeliverPolicy.NEW,
        )

    async def stop(self) -> None:
        sub, self._sub = self._sub, None
        if sub is not None:
            try:
                await sub.unsubscribe()
            except NATS_FAILURES:
                log.warning("call_context_watch_stop_failed")

    def __len__(self) -> int:
        return len(self._kept)

    def forget(self, key: tuple[str, str] | None = None) -> None:
        """Drop the kept record of one ``(runtime_id, tool_call_id)``, or every one: the
        next lookup reads the bucket (as for a record the watch has not delivered)."""
        if key is None:
            self._kept.clear()
        else:
            self._kept.pop(key, None)

    async def _on_record(self, msg: Msg) -> None:
        key = msg.subject[len(CALL_CONTEXT_SUBJECT_PREFIX) :]
        runtime_id, _, tool_call_id = key.partition(".")
        if (msg.headers or {}).get(KV_OP) in (KV_DEL, KV_PURGE):
            self._kept.pop((runtime_id, tool_call_id), None)
            return
        try:
            record, key_ids = open_call_context(msg.data, self.keys(), runtime_id, tool_call_id)
        except CallContextInvalid as exc:
            # not kept: a lookup reads it again and refuses it there, with a reason
            log.warning("call_context_refused", runtime_id=runtime_id, reason=str(exc))
            return
        self._keep(runtime_id, tool_call_id, _Kept(record, key_ids))

    def _keep(self, runtime_id: str, tool_call_id: str, kept: _Kept) -> None:
        if self.capacity == 0:
            return
        self._kept[(runtime_id, tool_call_id)] = kept
        self._kept.move_to_end((runtime_id, tool_call_id))
        while len(self._kept) > self.capacity:
            self._kept.popitem(last=False)

    async def get(self, runtime_id: str, tool_call_id: str) -> CallContext | None:
        """The record of one call: kept, if a key that signed it is still a gateway key
        of the registry in force, else read from the bucket. ``None``: no record.
        Raises :class:`CallContextUnavailable` or :class:`CallContextInvalid`."""
        keys = self.keys()
        kept = self._kept.get((runtime_id, tool_call_id))
        if kept is not None and not kept.key_ids.isdisjoint(keys):
            return kept.record
        found = await read_call_context(self.js, keys, runtime_id, tool_call_id)
        if found is None:
            return None
        self._keep(runtime_id, tool_call_id, _Kept(*found))
        return found[0]


__all__ = [
    "DEFAULT_MAX_AGE_S",
    "DEFAULT_MIRROR_RECORDS",
    "CallContextError",
    "CallContextInvalid",
    "CallContextMirror",
    "CallContextUnavailable",
    "CallContextWriter",
    "call_context_bucket_config",
    "ensure_call_context_bucket",
    "open_call_context",
    "read_call_context",
]
