"""The tool-call accounting store on JetStream KV, for gate replicas on a cluster.

Implements :class:`smf_assurance.pipeline.stores.tool_calls.ToolCallStore` (issue 16, item 3;
ARCHITECTURE.md, "Scale") in its own bucket, :data:`BUCKET` (history 1, file
storage, the cluster's replicas, no direct gets: :func:`open_strict_bucket`), which
only gates may read or write (``smf_assurance.subjects.bus_access``: gates hold ``$KV.>``, no
other role does):

- ``stop.<token of the runtime id>``: the runtime's :class:`Stop`. A stop is a plain
  put: a new stop always stands. A clear is a delete conditional on the revision
  whose value is the stop it names (:func:`compare_and_set`), so a stop another
  replica made since is never removed by it.
- ``note.<token of the runtime id>.<token of the tool-call id>``: a decided tool
  call; a put again gives it a new revision, which is its order (oldest first).
  Pruning deletes each note at the revision it judged.
- Fail closed: a NATS error, a timeout, a closed store raise
  :class:`ToolCallStoreUnavailable`; so does a stop that does not decode or that
  names another runtime than its key (never read as "not stopped"). A note that
  does not decode, or that names another call than its key, is left out (its id
  is then reported uncovered).

A restarted replica loads every stop and note from here before it serves
(``smf_assurance.pipeline.assembly``); replicas running meanwhile still hear each other's stops
and clears at once (``smf_assurance.pipeline.followers.replica_sync``). The values are identities,
ids and times only.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Final

import msgspec
import structlog

from smf_assurance.pipeline.stores.kv import (
    KvBucketStore,
    Retry,
    compare_and_set,
    decode_keyed,
    delete_at,
    token,
)
from smf_assurance.pipeline.stores.tool_calls import Note, Stop, ToolCallStoreUnavailable

__all__ = ["BUCKET", "KvToolCallStore"]

log = structlog.get_logger(__name__)

BUCKET: Final = "smf_tool_calls"
STOP_KEY: Final = "stop."
NOTE_KEY: Final = "note."
MAX_ATTEMPTS: Final = 8
"""CAS retries for ``clear``: a runtime is stopped again rarely, so a second conflict
is already unusual; more than this is a fault."""
STOP_WHAT: Final = ("stop", "runtime")


def _stop_key(runtime_id: str) -> str:
    return STOP_KEY + token(runtime_id)


def _note_key(runtime_id: str, tool_call_id: str) -> str:
    return f"{NOTE_KEY}{token(runtime_id)}.{token(tool_call_id)}"


def _decode_stop(key: str, value: bytes | None) -> Stop:
    return decode_keyed(
        key, value, Stop, lambda s: _stop_key(s.runtime_id), ToolCallStoreUnavailable, STOP_WHAT
    )


class KvToolCallStore(KvBucketStore):
    """:class:`~smf_assurance.pipeline.stores.tool_calls.ToolCallStore` on JetStream KV; any number
    of replicas share the bucket. The NATS connection belongs to the caller."""

    unavailable = ToolCallStoreUnavailable
    store = "tool_call"
    default_bucket = BUCKET
    description = "SMF tool-call accounting: runtime stops, decided calls"
    closed = "tool-call store is closed"

    async def _read_stop(self, runtime_id: str) -> tuple[Stop, int] | None:
        key = _stop_key(runtime_id)
        found = await self._read_raw(key)
        return None if found is None else (_decode_stop(key, found[0]), found[1])

    async def stops(self) -> dict[str, Stop]:
        entries = await self._entries(STOP_KEY)
        stops = [_decode_stop(key, entry.value) for key, entry in entries.items()]
        return {stop.runtime_id: stop for stop in stops}

    async def stop_of(self, runtime_id: str) -> Stop | None:
        found = await self._read_stop(runtime_id)
        return None if found is None else found[0]

    async def stop(self, stop: Stop) -> None:
        self._check_open()
        with self._failing("stop"):
            await self._kv.put(_stop_key(stop.runtime_id), msgspec.json.encode(stop))

    async def clear(self, stop: Stop) -> bool:
        """Delete the runtime's stop at the revision that holds ``stop``; a conflict is
        read again and judged again, never overwritten."""
        key = _stop_key(stop.runtime_id)

        async def attempt(current: Stop, revision: int) -> bool | Retry:
            if current.decision_id != stop.decision_id:
                return False  # another stop stands: it is not the one cleared
            with self._failing("clear"):
                if await delete_at(self._kv, key, revision):
                    return True
            return Retry.LOST

        cleared = await compare_and_set(
            lambda: self._read_stop(stop.runtime_id),
            attempt,
            attempts=MAX_ATTEMPTS,
            exhausted=lambda: ToolCallStoreUnavailable(f"stop {key}: no clear in {MAX_ATTEMPTS}"),
        )
        return True if cleared is None else cleared

    async def note(self, runtime_id: str, tool_call_id: str, at_ms: int) -> None:
        self._check_open()
        value = msgspec.json.encode(Note(runtime_id, tool_call_id, at_ms))
        with self._failing("note"):
            await self._kv.put(_note_key(runtime_id, tool_call_id), value)

    async def _notes(self) -> list[tuple[int, str, Note]]:
        """Every readable note with its revision and key, oldest first."""
        entries = await self._entries(NOTE_KEY)
        notes: list[tuple[int, str, Note]] = []
        for key, entry in entries.items():
            try:
                note = msgspec.json.decode(entry.value, type=Note)
            except msgspec.DecodeError:
                continue  # not a note: its id is reported uncovered (fails closed)
            if _note_key(note.runtime_id, note.tool_call_id) == key:
                notes.append((entry.revision, key, note))
        if len(notes) != len(entries):
            log.warning("tool_call_notes_unreadable", count=len(entries) - len(notes))
        return sorted(notes, key=lambda found: found[0])

    async def notes(self) -> list[tuple[str, str]]:
        return [(note.runtime_id, note.tool_call_id) for _, _, note in await self._notes()]

    async def prune_notes(self, per_runtime: int, max_runtimes: int) -> int:
        """Each delete is conditional on the revision judged old, so a call noted again
        meanwhile is kept."""
        if per_runtime < 1 or max_runtimes < 1:
            raise ValueError("the index keeps at least one id of one runtime")
        by_runtime: defaultdict[str, list[tuple[int, str]]] = defaultdict(list)
        for revision, key, note in await self._notes():
            by_runtime[note.runtime_id].append((revision, key))
        recent = sorted(by_runtime, key=lambda runtime: by_runtime[runtime][-1][0], reverse=True)
        kept = set(recent[:max_runtimes])
        old = [
            found
            for runtime, found_notes in by_runtime.items()
            for found in (found_notes if runtime not in kept else found_notes[:-per_runtime])
        ]
        pruned = 0
        for revision, key in old:
            pruned += await self._delete_at(key, revision, "prune")
        return pruned
