"""The order book: every order the gate gives on a direct allow, until its outcome.

ARCHITECTURE.md, "One proposal through the bus": after an allow the executor
"reports on smf.result.<connector>: confirmed -> consumed | failed -> failed |
ambiguous/no report -> execution_unknown". Approved orders are followed by the
approval store; this store follows the others (issue 15), so that every order's
outcome reaches the evidence ledger:

- ``open`` records the order (its id, proposal, decision, the release and
  projection it was decided under, the pseudonymous tenant, who must sign its
  report, the time) BEFORE the gate publishes it or releases it to a runtime,
  so a report can never arrive for an order the gate does not know. An order id
  is recorded at most once; a second ``open`` changes nothing.
- ``settle`` moves ``executing -> consumed | failed | execution_unknown`` at
  most once (a conditional write), so a replayed or second report, and a sweep
  racing a report, record one outcome between them.
- ``overdue`` lists what is still ``executing`` since before a time: the
  deadline sweep ends those ``execution_unknown``, never re-dispatches them.
- ``prune`` forgets settled orders only; an open order is never forgotten.

:class:`OrderBook` is the interface; :class:`SqliteOrderBook` keeps it beside
the claims (one machine: in the ledger file, issue 20) and
:class:`smf_assurance.pipeline.stores.orders_kv.KvOrderBook` in the claim bucket (a cluster,
ARCHITECTURE.md "Scale"). Both raise :class:`StoreUnavailable` (or a subclass)
when they cannot answer. Records hold
identities, ids and times only, never content, arguments or recipients.
"""

from __future__ import annotations

import sqlite3
from typing import Final, Literal, Protocol, get_args

import msgspec

from smf_assurance.core.execution_rules import Executor, ExecutorRole, Finish
from smf_assurance.pipeline.stores.sqlite_worker import SqliteWorker, StoreUnavailable

__all__ = [
    "ORDER_STATES",
    "SCHEMA",
    "OrderBook",
    "OrderBookUnavailable",
    "OrderRecord",
    "OrderState",
    "SqliteOrderBook",
]

OrderState = Literal["executing", "consumed", "failed", "execution_unknown"]
ORDER_STATES: Final[frozenset[str]] = frozenset(get_args(OrderState))
SETTLED: Final[frozenset[str]] = frozenset(get_args(Finish))

SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS direct_orders (
    order_id TEXT PRIMARY KEY,
    proposal_id TEXT NOT NULL,
    operation_hash TEXT NOT NULL,
    decision_id TEXT NOT NULL,
    release_id TEXT NOT NULL,
    projection_id TEXT NOT NULL,
    tenant_ref TEXT NOT NULL,
    executor_role TEXT NOT NULL CHECK (executor_role IN ('connector', 'runtime')),
    executor_id TEXT NOT NULL,
    dispatched_at INTEGER NOT NULL,
    state TEXT NOT NULL
        CHECK (state IN ('executing', 'consumed', 'failed', 'execution_unknown')),
    settled_at INTEGER
);
CREATE INDEX IF NOT EXISTS direct_orders_open ON direct_orders (state, dispatched_at);
"""
"""Beside ``proposal_claims`` (in the ledger file on one machine): a new table, so an existing file
gains it on open and the claims table (whose CHECK names its states) is untouched."""


class OrderBookUnavailable(StoreUnavailable):
    """An order book other than SQLite cannot answer (server unreachable, timeout,
    a stored value that does not decode)."""


class OrderRecord(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """One order given on a direct allow, as stored (identities, ids and times only)."""

    order_id: str
    proposal_id: str
    operation_hash: str
    decision_id: str
    release_id: str
    projection_id: str
    tenant_ref: str
    """The tenant's keyed pseudonym (``hmac-sha256:``), as the evidence ledger holds it."""
    executor_role: ExecutorRole
    executor_id: str
    dispatched_at: int
    state: OrderState = "executing"
    settled_at: int | None = None

    @property
    def executor(self) -> Executor:
        return Executor(self.executor_role, self.executor_id)


class OrderBook(Protocol):
    """Each direct-allow order, from before it is given until its one outcome.

    Every method raises :class:`StoreUnavailable` (or a subclass) when the store
    cannot answer; none reports a write it did not make.
    """

    async def open(self, order: OrderRecord) -> bool:
        """Record an ``executing`` order; False (and nothing changed) when the order
        id is already recorded."""
        ...

    async def get(self, order_id: str) -> OrderRecord | None: ...

    async def settle(self, order_id: str, outcome: Finish, at_ms: int) -> OrderRecord | None:
        """``executing -> outcome``; the settled record when THIS call settled it,
        None when the order is unknown or already settled (nothing changed)."""
        ...

    async def overdue(self, before_ms: int) -> list[OrderRecord]:
        """The orders still ``executing`` that were given before ``before_ms``."""
        ...

    async def prune(self, before_ms: int) -> int:
        """Forget orders settled before ``before_ms``; returns how many."""
        ...

    async def close(self) -> None: ...


_COLUMNS: Final = tuple(OrderRecord.__struct_fields__)
_SELECT: Final = (
    "SELECT order_id, proposal_id, operation_hash, decision_id, release_id, projection_id,"
    " tenant_ref, executor_role, executor_id, dispatched_at, state, settled_at"
    " FROM direct_orders"
)
_INSERT: Final = (
    "INSERT INTO direct_orders (order_id, proposal_id, operation_hash, decision_id,"
    " release_id, projection_id, tenant_ref, executor_role, executor_id, dispatched_at,"
    " state, settled_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
_SELECTED: Final = tuple(_SELECT.removeprefix("SELECT ").split(" FROM")[0].split(", "))
_INSERTED: Final = tuple(_INSERT.split("(")[1].split(")")[0].split(", "))
if _SELECTED != _COLUMNS or _INSERTED != _COLUMNS or _INSERT.count("?") != len(_COLUMNS):
    # The SQL is written out (no SQL built from strings); it must name every field.
    raise RuntimeError("direct_orders SQL disagrees with OrderRecord")


def order_row(order: OrderRecord) -> tuple[object, ...]:
    """The row of a new order; refuses one that is not ``executing`` and unsettled."""
    if order.state != "executing" or order.settled_at is not None:
        raise ValueError("an order is recorded executing, before any outcome")
    return tuple(getattr(order, name) for name in _COLUMNS)


def insert_order(conn: sqlite3.Connection, row: tuple[object, ...]) -> bool:
    """Record one order inside the caller's transaction: False if its id is recorded."""
    try:
        conn.execute(_INSERT, row)
    except sqlite3.IntegrityError:
        return False
    return True


def _record(row: tuple[object, ...]) -> OrderRecord:
    return msgspec.convert(dict(zip(_COLUMNS, row, strict=True)), OrderRecord)


class SqliteOrderBook:
    """:class:`OrderBook` beside the gate's claims: ``open`` is an INSERT on the
    primary key and ``settle`` a conditional UPDATE, each in ``BEGIN IMMEDIATE``,
    group-committed with those beside it (:meth:`SqliteWorker.transact`)."""

    def __init__(self, worker: SqliteWorker) -> None:
        self._worker = worker

    @classmethod
    def beside(cls, worker: SqliteWorker) -> SqliteOrderBook:
        """The book on the claim store's own worker (its file and connection, the
        schema installed with :data:`SCHEMA`), so a claim and its order can commit
        in one transaction
        (:meth:`smf_assurance.pipeline.stores.claims.ClaimStore.claim_and_record_beside`)."""
        return cls(worker)

    async def open(self, order: OrderRecord) -> bool:
        values = order_row(order)
        return await self._worker.transact(lambda conn: insert_order(conn, values))

    async def get(self, order_id: str) -> OrderRecord | None:
        def body(conn: sqlite3.Connection) -> OrderRecord | None:
            row = conn.execute(f"{_SELECT} WHERE order_id = ?", (order_id,)).fetchone()
            return None if row is None else _record(row)

        return await self._worker.run(body)

    async def settle(self, order_id: str, outcome: Finish, at_ms: int) -> OrderRecord | None:
        if outcome not in SETTLED:
            raise ValueError(f"{outcome!r} is no outcome")

        def body(conn: sqlite3.Connection) -> OrderRecord | None:
            moved = conn.execute(
                "UPDATE direct_orders SET state = ?, settled_at = ? "
                "WHERE order_id = ? AND state = 'executing'",
                (outcome, at_ms, order_id),
            ).rowcount
            if moved != 1:
                return None
            row = conn.execute(f"{_SELECT} WHERE order_id = ?", (order_id,)).fetchone()
            return _record(row)

        return await self._worker.transact(body)

    async def overdue(self, before_ms: int) -> list[OrderRecord]:
        def body(conn: sqlite3.Connection) -> list[OrderRecord]:
            rows = conn.execute(
                f"{_SELECT} WHERE state = 'executing' AND dispatched_at < ? ORDER BY dispatched_at",
                (before_ms,),
            ).fetchall()
            return [_record(row) for row in rows]

        return await self._worker.run(body)

    async def prune(self, before_ms: int) -> int:
        def body(conn: sqlite3.Connection) -> int:
            return conn.execute(
                "DELETE FROM direct_orders WHERE state != 'executing' AND settled_at < ?",
                (before_ms,),
            ).rowcount

        return await self._worker.transact(body)

    async def close(self) -> None:
        await self._worker.close()
