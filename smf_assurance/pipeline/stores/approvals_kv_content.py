"""The held content of open KV approvals: one message each in a plain stream,
erased at every terminal state.

ARCHITECTURE.md, "Exact-action approval": while an approval is open the gate
keeps the proposal's content so an entitled approver can see exactly what
will be sent, and "the content is purged at every terminal state". The KV
approval store (:mod:`smf_assurance.pipeline.stores.approvals_kv`) keeps the record; this
module keeps the content, apart from it, for this reason:

A KV update does NOT remove the old revision's bytes from disk: with
``history=1`` the superseded message is dropped by the per-subject limit,
which only marks it deleted in its block file; ``kv.delete`` and
``kv.purge`` do the same, and a KV stream refuses the message-delete API
(``deny_delete``). Measured on nats-server 2.15.1: the old value is still in
``streams/KV_<bucket>/msgs/1.blk`` after each of the three, and after a
clean shutdown. So the content never enters the bucket. It is one message in
a plain stream (:data:`CONTENT_STREAM`), referenced from the record by its
sequence, and removed at every terminal state with JetStream's message-delete
API, which erases by default (``no_erase`` unset: the server overwrites the
record in the block file with random bytes and syncs it). Measured: after the
erase the bytes are in no file under the store directory. Limits, named so no
one claims more:

- On a cluster (R3) every replica also has the message in the stream's Raft
  log (``$SYS/_js_/S-R3F-*/msgs``), which the erase does not touch, until that
  group snapshots and compacts its log, on the server's schedule. Measured on
  a 3-node 2.15.1 cluster: in every replica's log right after the erase; gone
  from two of them about 140 s later, still in the third at 150 s; in another
  run still in two logs after a clean shutdown. With JetStream encryption at
  rest (``jetstream { cipher: chachapoly, key: ... }``) the bytes were in no
  file in plain text at any point, Raft logs included: run clusters that way.
- Removal is at file level: an overwrite in place, or a block file deleted
  once all its messages are gone. What a file system or an SSD keeps of freed
  blocks is out of reach here.
- The erase runs after the terminal write. If it fails (outage, crash) the
  record already says "purged" and the bytes stay in the content stream until
  the store's ``expire_due`` or ``recover`` sweeps them
  (:meth:`HeldContent.sweep`), which also removes content a crashed
  ``create`` left without a record.

Logs carry approval ids; never the content.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from typing import Final

import structlog
from nats.js.api import RawStreamMsg, StorageType, StreamConfig
from nats.js.client import JetStreamContext
from nats.js.errors import NotFoundError

from smf_assurance.pipeline.stores.approvals import ApprovalStoreUnavailable
from smf_assurance.pipeline.stores.kv import NATS_FAILURES, fail_closed
from smf_assurance.subjects import names
from smf_assurance.subjects.approvals import MAX_TTL_MS
from smf_assurance.subjects.canonical import IDENTITY_PREFIX

__all__ = [
    "CONTENT_STREAM",
    "CONTENT_SUBJECT_ROOT",
    "HELD_AT_HEADER",
    "ORPHAN_GRACE_MS",
    "ContentMissing",
    "HeldContent",
    "ensure_content_stream",
]

log = structlog.get_logger(__name__)

CONTENT_STREAM: Final = "SMF_APPROVAL_CONTENT"
CONTENT_SUBJECT_ROOT: Final = names.STORE_PREFIX
"""The content stream's subjects are ``smf.store.<stream>.<hex of the id>``:
storage, not bus contract, so they are not in ``subjects/``; only the gate
may publish there (NATS permissions, ARCHITECTURE.md "Trust and identity")."""

HELD_AT_HEADER: Final = "Smf-Held-At-Ms"
"""The gate time a content message was written, so the sweep can tell content
whose record is still being created from content a crashed create left."""

ORPHAN_GRACE_MS: Final = MAX_TTL_MS
"""Content without a record is erased once it is this old: no approval created
with it could still be open."""


class ContentMissing(ApprovalStoreUnavailable):
    """An open record's content message is not in the content stream: either a
    terminal move erased it after the record was read (read the record again) or
    it was removed around the store (a fault)."""


def _unavailable(during: str) -> contextlib.AbstractContextManager[None]:
    return fail_closed(ApprovalStoreUnavailable, "approval", during)


def _subjects(name: str) -> list[str]:
    return [f"{CONTENT_SUBJECT_ROOT}.{name}.>"]


async def ensure_content_stream(js: JetStreamContext, name: str, replicas: int) -> bool:
    """Bind the content stream ``name``, creating it if absent; False when it exists
    with other settings.

    A plain stream (unlike a KV stream it allows the erasing message delete),
    file storage, ``replicas`` copies, no per-subject limit (a limit would drop
    messages without erasing them). An existing stream with memory storage,
    fewer replicas, deletes denied or other subjects would not keep (or not
    erase) what this module promises.
    """
    try:
        config = (await js.stream_info(name)).config
    except NotFoundError:
        config = (
            await js.add_stream(
                StreamConfig(
                    name=name,
                    description="SMF held approval content; erased at every terminal state",
                    subjects=_subjects(name),
                    storage=StorageType.FILE,
                    num_replicas=replicas,
                    deny_delete=False,
                    allow_rollup_hdrs=False,
                )
            )
        ).config
    return (
        config.storage == StorageType.FILE
        and config.num_replicas == replicas
        and not config.deny_delete
        and config.subjects == _subjects(name)
    )


class HeldContent:
    """The content stream of one KV approval store.

    ``check_open`` is the store's: it raises once the store is closed, so a
    closed store reads no content either. Every NATS failure is
    :class:`~smf_assurance.pipeline.stores.approvals.ApprovalStoreUnavailable`, except in
    :meth:`erase`, which runs after a terminal write and defers instead.
    """

    def __init__(self, js: JetStreamContext, stream: str, check_open: Callable[[], None]) -> None:
        self._js = js
        self._stream = stream
        self._prefix = f"{CONTENT_SUBJECT_ROOT}.{stream}."
        self._check_open = check_open

    def _subject(self, approval_id: str) -> str:
        return self._prefix + approval_id.removeprefix(IDENTITY_PREFIX)

    async def hold(self, approval_id: str, payload: bytes, now_ms: int) -> int:
        """Write the content of a new approval; returns its sequence, which the
        record then references."""
        with _unavailable("hold content"):
            ack = await self._js.publish(
                self._subject(approval_id),
                payload,
                stream=self._stream,
                headers={HELD_AT_HEADER: str(now_ms)},
            )
        return ack.seq

    async def read(self, approval_id: str, seq: int) -> bytes:
        """The content at ``seq``, which must be ``approval_id``'s.

        :class:`ContentMissing` when it is gone (a
        terminal move may have erased it since the record was read: the caller
        reads the record again); content filed under another approval is a fault.
        """
        self._check_open()
        with _unavailable("read content"):
            try:
                msg = await self._js.get_msg(self._stream, seq=seq)
            except NotFoundError as exc:
                raise ContentMissing(
                    f"approval {approval_id}: held content is missing", approval_id=approval_id
                ) from exc
        if msg.subject != self._subject(approval_id):
            raise ApprovalStoreUnavailable(
                f"approval {approval_id}: held content belongs to another approval",
                approval_id=approval_id,
            )
        return msg.data or b""

    async def erase(self, approval_id: str, seq: int) -> None:
        """Remove one content message with the erasing delete (JetStream's default:
        the block-file record is overwritten with random bytes).

        Runs after the terminal write, so a failure cannot undo the move: it is
        logged and :meth:`sweep` erases the message later. A message that is
        already gone is done.
        """
        try:
            await self._js.delete_msg(self._stream, seq)
        except NATS_FAILURES:
            with contextlib.suppress(*NATS_FAILURES):
                try:
                    await self._js.get_msg(self._stream, seq=seq)
                except NotFoundError:
                    return
            log.warning("approval_content_erase_deferred", approval_id=approval_id)

    async def sweep(self, held: Mapping[str, int | None], now_ms: int) -> None:
        """Erase content messages no open record points at.

        ``held`` maps the id of every record in the bucket to the content
        sequence it references (None once terminal). Catches what a terminal
        write could not erase itself (an outage or a crash between the write and
        the erase) and content a crashed ``create`` left without a record, once
        :data:`ORPHAN_GRACE_MS` old so that a create still in flight keeps its
        content.
        """
        seq = 1
        while True:
            msg = await self._next(seq)
            if msg is None:
                return
            assert msg.seq is not None  # a stored message has a sequence
            seq = msg.seq + 1
            approval_id = IDENTITY_PREFIX + (msg.subject or "").removeprefix(self._prefix)
            if approval_id not in held:
                if now_ms - _held_at(msg) < ORPHAN_GRACE_MS:
                    continue  # its create may still be in flight
            elif held[approval_id] == msg.seq:
                continue  # the content of an open approval
            await self.erase(approval_id, msg.seq)
            log.info("approval_content_swept", approval_id=approval_id)

    async def _next(self, seq: int) -> RawStreamMsg | None:
        self._check_open()
        with _unavailable("sweep content"):
            try:
                return await self._js.get_msg(
                    self._stream, seq=seq, subject=f"{self._prefix}>", next=True
                )
            except NotFoundError:
                return None


def _held_at(msg: RawStreamMsg) -> int:
    """When the content was held (gate time); 0 for a message without the header,
    which no create of this store writes, so it is swept at once."""
    try:
        return int((msg.headers or {}).get(HELD_AT_HEADER, 0))
    except ValueError:
        return 0
