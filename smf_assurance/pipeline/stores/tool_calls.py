"""The tool-call accounting store (issue 16, item 3): runtime stops and the decided-call
index, kept across a gate restart.

The gate refuses a runtime whose model request carried a tool result no proposal
decided (``smf_assurance.pipeline.desks.tool_calls``), until an operator clears it. Kept in
memory only, a restart lifted every stop (a stopped runtime was served again once
it re-attested: fails OPEN) and forgot every decided call (an honest runtime's
result for a call decided before the restart stopped it). This store keeps both:

- **Stops.** One :class:`Stop` per runtime: identities only (the runtime id, the
  operation and decision ids of the refusal that stopped it, the tenant's keyed
  pseudonym, a time; ARCHITECTURE.md, "Evidence": never anything raw). A new stop
  replaces the one standing; :meth:`ToolCallStore.clear` removes exactly the stop
  it names, so a clear never lifts a stop made after the one the operator saw.
- **Notes.** ``(runtime_id, tool_call_id)`` of every verified proposal, oldest
  first; noting an id again makes it the newest. :meth:`ToolCallStore.prune_notes`
  keeps the bounds of the in-memory index (``DecidedCalls``): a forgotten id is
  reported uncovered, which fails closed.
- **Fail closed.** Every method raises :class:`StoreUnavailable` (or a subclass)
  when the store cannot answer, and a stop that does not decode is refused, never
  read as "not stopped": a gate does not start on it, and a clear of that runtime
  is refused. A note that does not decode is left out, so the id it may have
  named is reported uncovered.

:class:`ToolCallStore` is the interface; :class:`SqliteToolCallStore` implements it
in the LEDGER file on one machine (on a loan of its worker, as the claims are, issue
20), so a note rides in the decision's evidence transaction
(:meth:`SqliteToolCallStore.note_beside`: no commit of its own) and a clear commits
with the evidence entry that records it (:meth:`SqliteToolCallStore.clear_beside`);
:class:`smf_assurance.pipeline.stores.tool_calls_kv.KvToolCallStore` implements it on JetStream KV
(a cluster, ARCHITECTURE.md "Scale").
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable
from typing import Final, Literal, Protocol

import msgspec
import structlog

from smf_assurance.pipeline.stores.ledger_schema import KeyedId, Sha256Id, UnixMillis
from smf_assurance.pipeline.stores.sqlite_worker import SqliteWorker, StoreUnavailable
from smf_assurance.subjects.patterns import Token, ToolCallId

__all__ = [
    "SCHEMA",
    "Note",
    "SqliteToolCallStore",
    "Stop",
    "StopReason",
    "ToolCallStore",
    "ToolCallStoreUnavailable",
]

log = structlog.get_logger(__name__)

SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS runtime_stops (
    runtime_id TEXT PRIMARY KEY,
    reason TEXT NOT NULL,
    operation_hash TEXT NOT NULL,
    decision_id TEXT NOT NULL,
    tenant_ref TEXT NOT NULL,
    stopped_at INTEGER NOT NULL
) STRICT;
CREATE TABLE IF NOT EXISTS decided_tool_calls (
    runtime_id TEXT NOT NULL,
    tool_call_id TEXT NOT NULL,
    noted_at INTEGER NOT NULL,
    PRIMARY KEY (runtime_id, tool_call_id)
) STRICT;
"""
"""Two tables beside the ledger's (on one machine, in the ledger file): new tables, so
an existing file gains them on open and nothing of the ledger's schema changes. The
notes' rowid is their order: ``INSERT OR REPLACE`` of an id noted again gives it a new,
largest rowid."""

StopReason = Literal["runtime_stopped_ungated_tool_result", "runtime_stopped_binding_broken"]
"""Why a runtime is stopped: it ran a tool no proposal decided, or it executed other
parameters than an attorney approved (its report said ``executed_params_mismatch``)."""


class Stop(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """One runtime's stop, as stored: identities, a reason code and a time only."""

    runtime_id: Token
    reason: StopReason
    operation_hash: Sha256Id
    """The refused model request, as the stop's evidence entry names it."""
    decision_id: Sha256Id
    """The stop's evidence entry's decision id: which stop a clear removes."""
    tenant_ref: KeyedId
    stopped_at: UnixMillis


class Note(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One decided tool call, as the KV store keeps it (the SQLite row has its columns)."""

    runtime_id: Token
    tool_call_id: ToolCallId
    noted_at: UnixMillis


class ToolCallStoreUnavailable(StoreUnavailable):
    """The store cannot answer, or holds a stop that does not decode. A
    :class:`StoreUnavailable`, so every caller's one handler fails closed for either
    backend."""


_STOP_COLUMNS: Final = tuple(Stop.__struct_fields__)
_NOTE_COLUMNS: Final = tuple(Note.__struct_fields__)
_SELECT_STOPS: Final = (
    "SELECT runtime_id, reason, operation_hash, decision_id, tenant_ref, stopped_at"
    " FROM runtime_stops"
)


def _decode_stop(row: tuple[object, ...]) -> Stop:
    """A stored row, validated as a decoded message is; one that is not a :class:`Stop`
    is refused, never read as "not stopped" (the error never repeats the value)."""
    try:
        return msgspec.convert(dict(zip(_STOP_COLUMNS, row, strict=True)), Stop)
    except msgspec.ValidationError as exc:
        raise ToolCallStoreUnavailable("stored stop in runtime_stops does not decode") from exc


class ToolCallStore(Protocol):
    """Runtime stops and the decided-call index, across restarts and (on KV) replicas.

    Every method raises :class:`StoreUnavailable` (or a subclass) when the store
    cannot answer; none reports a write it did not make.
    """

    async def stops(self) -> dict[str, Stop]:
        """Every standing stop, by runtime id; raises if any does not decode."""
        ...

    async def stop_of(self, runtime_id: str) -> Stop | None: ...

    async def stop(self, stop: Stop) -> None:
        """Stand ``stop`` for its runtime, replacing any stop standing."""
        ...

    async def clear(self, stop: Stop) -> bool:
        """Remove ``stop`` if it is the one standing. True when no stop of its runtime
        stands afterwards; False when another one does (nothing removed)."""
        ...

    async def note(self, runtime_id: str, tool_call_id: str, at_ms: int) -> None:
        """Note a decided tool call; noting it again makes it the newest."""
        ...

    async def notes(self) -> list[tuple[str, str]]:
        """Every readable note ``(runtime_id, tool_call_id)``, oldest first."""
        ...

    async def prune_notes(self, per_runtime: int, max_runtimes: int) -> int:
        """Forget all but the newest ``per_runtime`` notes of each runtime and all notes
        of the runtimes beyond the ``max_runtimes`` noted most recently; how many."""
        ...

    async def close(self) -> None: ...


def _stop_row(stop: Stop) -> tuple[object, ...]:
    return tuple(getattr(stop, name) for name in _STOP_COLUMNS)


def _read_stop(conn: sqlite3.Connection, runtime_id: str) -> Stop | None:
    row = conn.execute(f"{_SELECT_STOPS} WHERE runtime_id = ?", (runtime_id,)).fetchone()
    if row is None:
        return None
    return _decode_stop(row)


def _clear(conn: sqlite3.Connection, stop: Stop) -> bool:
    conn.execute(
        "DELETE FROM runtime_stops WHERE runtime_id = ? AND decision_id = ?",
        (stop.runtime_id, stop.decision_id),
    )
    standing = conn.execute(
        "SELECT 1 FROM runtime_stops WHERE runtime_id = ?", (stop.runtime_id,)
    ).fetchone()
    return standing is None


def _note(conn: sqlite3.Connection, row: tuple[str, str, int]) -> None:
    conn.execute("INSERT OR REPLACE INTO decided_tool_calls VALUES (?, ?, ?)", row)


_PRUNE_NOTES: Final = """
WITH latest AS (
    SELECT runtime_id, max(rowid) AS last FROM decided_tool_calls GROUP BY runtime_id
), kept AS (
    SELECT runtime_id FROM latest ORDER BY last DESC LIMIT ?
), ranked AS (
    SELECT rowid AS id, runtime_id,
           row_number() OVER (PARTITION BY runtime_id ORDER BY rowid DESC) AS newest
    FROM decided_tool_calls
)
DELETE FROM decided_tool_calls WHERE rowid IN (
    SELECT id FROM ranked WHERE newest > ? OR runtime_id NOT IN (SELECT runtime_id FROM kept)
)
"""


class SqliteToolCallStore:
    """:class:`ToolCallStore` on SQLite: each write in ``BEGIN IMMEDIATE``, group-committed
    with those beside it (:meth:`SqliteWorker.transact`), or beside an evidence entry."""

    def __init__(self, worker: SqliteWorker) -> None:
        self._worker = worker

    @classmethod
    async def open(cls, path: str | os.PathLike[str]) -> SqliteToolCallStore:
        """A file of its own: what the store's contract tests open."""
        return cls(await SqliteWorker.open(path, SCHEMA, name="tool-calls"))

    @classmethod
    async def in_ledger(cls, ledger_worker: SqliteWorker) -> SqliteToolCallStore:
        """The tables in the LEDGER file, on a loan of its worker (issue 20), so a note
        and a clear can commit in the transaction of an evidence entry."""
        return cls(await ledger_worker.lend(SCHEMA, name="tool-calls"))

    def _check_open(self, what: str) -> None:
        if self._worker.closed:
            raise ToolCallStoreUnavailable(f"tool-call store is closed ({what})")

    async def stops(self) -> dict[str, Stop]:
        def body(conn: sqlite3.Connection) -> dict[str, Stop]:
            rows = conn.execute(_SELECT_STOPS).fetchall()
            stops = [_decode_stop(row) for row in rows]
            return {stop.runtime_id: stop for stop in stops}

        return await self._worker.run(body)

    async def stop_of(self, runtime_id: str) -> Stop | None:
        return await self._worker.run(lambda conn: _read_stop(conn, runtime_id))

    async def stop(self, stop: Stop) -> None:
        row = _stop_row(stop)
        await self._worker.transact(
            lambda conn: conn.execute(
                "INSERT OR REPLACE INTO runtime_stops VALUES (?, ?, ?, ?, ?, ?)", row
            )
        )

    def clear_beside(self, stop: Stop) -> Callable[[sqlite3.Connection], bool]:
        """:meth:`clear` as a write beside the evidence entry that records the clear
        (:meth:`smf_assurance.pipeline.stores.ledger.Ledger.append_beside`): the stop is removed in
        the transaction that writes its clear, or not at all. Raises
        :class:`StoreUnavailable` now if the store is closed."""
        self._check_open("clear")
        return lambda conn: _clear(conn, stop)

    async def clear(self, stop: Stop) -> bool:
        return await self._worker.transact(lambda conn: _clear(conn, stop))

    def note_beside(
        self, runtime_id: str, tool_call_id: str, at_ms: int
    ) -> Callable[[sqlite3.Connection], None]:
        """:meth:`note` as a write beside the decision's evidence entry, or in the
        ledger's next group commit (issue 20: no commit of its own). Raises
        :class:`StoreUnavailable` now if the store is closed."""
        self._check_open("note")
        row = (runtime_id, tool_call_id, at_ms)
        return lambda conn: _note(conn, row)

    async def note(self, runtime_id: str, tool_call_id: str, at_ms: int) -> None:
        row = (runtime_id, tool_call_id, at_ms)
        await self._worker.transact(lambda conn: _note(conn, row))

    async def notes(self) -> list[tuple[str, str]]:
        def body(conn: sqlite3.Connection) -> list[tuple[object, ...]]:
            return conn.execute(
                "SELECT runtime_id, tool_call_id, noted_at FROM decided_tool_calls ORDER BY rowid"
            ).fetchall()

        rows = await self._worker.run(body)
        kept: list[tuple[str, str]] = []
        for row in rows:
            try:
                note = msgspec.convert(dict(zip(_NOTE_COLUMNS, row, strict=True)), Note)
            except msgspec.ValidationError:
                continue  # not a note: its id is reported uncovered (fails closed)
            kept.append((note.runtime_id, note.tool_call_id))
        if len(kept) != len(rows):
            log.warning("tool_call_notes_unreadable", count=len(rows) - len(kept))
        return kept

    async def prune_notes(self, per_runtime: int, max_runtimes: int) -> int:
        if per_runtime < 1 or max_runtimes < 1:
            raise ValueError("the index keeps at least one id of one runtime")
        bounds = (max_runtimes, per_runtime)

        def body(conn: sqlite3.Connection) -> int:
            before = conn.total_changes  # rowcount is -1 for a statement that starts WITH
            conn.execute(_PRUNE_NOTES, bounds)
            return conn.total_changes - before

        return await self._worker.transact(body)

    async def close(self) -> None:
        await self._worker.close()
