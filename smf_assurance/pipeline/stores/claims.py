"""The proposal claim store: each signed proposal is acted on at most once.

ARCHITECTURE.md, "One proposal through the bus": allow means "claim once,
then publish". A replayed proposal (the same signed bytes sent again, or the
same proposal id with anything changed) must never produce a second order,
and JetStream's ``Nats-Msg-Id`` de-duplication lasts only for the stream's
duplicate window. So the claim is a row keyed by proposal id, inserted in
one ``BEGIN IMMEDIATE`` transaction before anything is published; a second
insert fails and the gate denies ``duplicate_proposal``. Rows are kept for
``GateSettings.claim_retention_ms`` (two freshness windows and the clock skew
between gates), after which a replay is refused as stale before its claim is
looked at; the gate then prunes them (``Gate.prune_claims``).

:class:`ProposalClaims` is the interface the gate uses; :class:`ClaimStore`
implements it in SQLite on one machine: in the ledger file, on its connection,
with the order book's table beside it, so a claim, its order and the decision's
evidence entry commit as one transaction (:meth:`ClaimStore.claim_and_record_beside`);
and
:class:`smf_assurance.pipeline.stores.claims_kv.KvClaimStore` on JetStream KV (a cluster,
ARCHITECTURE.md "Scale"). Both raise :class:`StoreUnavailable` (or a
subclass) when they cannot answer, which the gate turns into the denial
``claim_store_unavailable``: an outage never lets a proposal through.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Final, Literal, NamedTuple, Protocol

from smf_assurance.pipeline.stores.orders import SCHEMA as ORDERS_SCHEMA
from smf_assurance.pipeline.stores.orders import OrderRecord, insert_order, order_row
from smf_assurance.pipeline.stores.sqlite_worker import SqliteWorker, StoreUnavailable

__all__ = [
    "CLAIM_NOT_WRITTEN",
    "CLAIM_STORE_UNAVAILABLE",
    "DUPLICATE_PROPOSAL",
    "SCHEMA",
    "ClaimAndOrder",
    "ClaimRecord",
    "ClaimState",
    "ClaimStore",
    "ClaimStoreUnavailable",
    "ProposalClaims",
    "StoreUnavailable",
    "merge_claim_file",
]

SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS proposal_claims (
    proposal_id TEXT PRIMARY KEY,
    operation_hash TEXT NOT NULL,
    decision_id TEXT NOT NULL,
    claimed_at INTEGER NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('claimed', 'published', 'failed'))
);
"""

ClaimState = Literal["claimed", "published", "failed"]

DUPLICATE_PROPOSAL: Final = "duplicate_proposal"
"""The proposal was claimed before: a replay, denied, and no claim row written."""
CLAIM_STORE_UNAVAILABLE: Final = "claim_store_unavailable"
"""The claim could not be written: denied, and no claim row exists."""
CLAIM_NOT_WRITTEN: Final = frozenset({DUPLICATE_PROPOSAL, CLAIM_STORE_UNAVAILABLE})
"""Where the claims live in the ledger file, an allow's evidence entry carries one of
these exactly when its claim row was not written (``Ledger.append_beside`` with a
``Recorded`` write); every other allow of the retention window has its row."""


class ClaimAndOrder(NamedTuple):
    claimed: bool
    """The first claim of the proposal: False for a replay (nothing was written)."""
    order_recorded: bool
    """Its order is in the book (False when none was asked for, or its id existed)."""


class ClaimRecord(NamedTuple):
    """One claim as stored: what was decided for the proposal, and how it ended."""

    operation_hash: str
    decision_id: str
    claimed_at: int
    state: ClaimState


def _insert_claim(conn: sqlite3.Connection, row: tuple[str, str, str, int]) -> bool:
    try:
        conn.execute("INSERT INTO proposal_claims VALUES (?, ?, ?, ?, 'claimed')", row)
    except sqlite3.IntegrityError:
        return False
    return True


def _settle(conn: sqlite3.Connection, proposal_id: str, state: ClaimState) -> None:
    conn.execute(
        "UPDATE proposal_claims SET state = ? WHERE proposal_id = ? AND state = 'claimed'",
        (state, proposal_id),
    )


class ClaimStoreUnavailable(StoreUnavailable):
    """A claim store other than SQLite cannot answer (server unreachable, timeout,
    a stored value that does not decode). A :class:`StoreUnavailable`, so the gate's
    one handler denies ``claim_store_unavailable`` for every backend."""


class ProposalClaims(Protocol):
    """Each proposal id is claimed at most once, by one gate instance.

    Every method raises :class:`StoreUnavailable` (or a subclass) when the store
    cannot answer; none of them reports success it did not get.
    """

    async def claim(
        self, proposal_id: str, operation_hash: str, decision_id: str, at_ms: int
    ) -> bool:
        """True for the first claim of ``proposal_id`` (in any instance); False for
        every later one, until :meth:`prune` forgets it."""
        ...

    async def settle(self, proposal_id: str, state: ClaimState) -> None:
        """Move a ``claimed`` claim to ``state``; a claim already settled, or none, is
        left as it is."""
        ...

    async def state(self, proposal_id: str) -> ClaimState | None: ...

    async def get(self, proposal_id: str) -> ClaimRecord | None:
        """The claim of ``proposal_id``, or None when it was never claimed (or pruned)."""
        ...

    async def prune(self, before_ms: int) -> int:
        """Forget claims made before ``before_ms``; returns how many."""
        ...

    async def close(self) -> None: ...


class ClaimStore:
    """:class:`ProposalClaims` on a SQLite file: the claim is an INSERT on the
    primary key inside ``BEGIN IMMEDIATE``, group-committed with the claims
    and settles beside it (:meth:`SqliteWorker.transact`)."""

    def __init__(self, worker: SqliteWorker) -> None:
        self._worker = worker

    @classmethod
    async def open(cls, path: str | os.PathLike[str]) -> ClaimStore:
        """A claim file of its own, holding the order book's table too: how older
        versions kept them (:func:`merge_claim_file` moves them into the ledger),
        and what the store's contract tests open."""
        return cls(await SqliteWorker.open(path, SCHEMA + ORDERS_SCHEMA, name="claims"))

    @classmethod
    async def in_ledger(cls, ledger_worker: SqliteWorker) -> ClaimStore:
        """The claims and the order book's table in the LEDGER file, on a loan of its
        worker: a claim and its order then commit in the transaction of
        the decision's evidence entry (:meth:`claim_and_record_beside`)."""
        return cls(await ledger_worker.lend(SCHEMA + ORDERS_SCHEMA, name="claims"))

    @property
    def worker(self) -> SqliteWorker:
        return self._worker

    async def claim(
        self, proposal_id: str, operation_hash: str, decision_id: str, at_ms: int
    ) -> bool:
        """True for the first claim of ``proposal_id``; False for every later one."""
        row = (proposal_id, operation_hash, decision_id, at_ms)
        return await self._worker.transact(lambda conn: _insert_claim(conn, row))

    def settle_beside(
        self, proposal_id: str, state: ClaimState
    ) -> Callable[[sqlite3.Connection], None]:
        """:meth:`settle` as a write for the ledger's next group commit
        (:meth:`smf_assurance.pipeline.stores.ledger.Ledger.write_beside`); raises
        :class:`StoreUnavailable` now if the store is closed."""
        if self._worker.closed:
            raise StoreUnavailable("claim store is closed")
        return lambda conn: _settle(conn, proposal_id, state)

    def claim_and_record_beside(
        self,
        proposal_id: str,
        operation_hash: str,
        decision_id: str,
        at_ms: int,
        order: OrderRecord | None,
    ) -> Callable[[sqlite3.Connection], ClaimAndOrder]:
        """Claim the proposal and, if that is its first claim, record its order: a
        write for the ledger's transaction beside the decision's evidence entry
        (:meth:`smf_assurance.pipeline.stores.ledger.Ledger.append_beside`; one durable
        commit per decision), so the order exists exactly when the claim does, and
        both exactly when the evidence does. Raises :class:`StoreUnavailable` now if
        the store is closed, and ``ValueError`` for an order not ``executing``."""
        if self._worker.closed:
            raise StoreUnavailable("claim store is closed")
        claim = (proposal_id, operation_hash, decision_id, at_ms)
        row = None if order is None else order_row(order)

        def body(conn: sqlite3.Connection) -> ClaimAndOrder:
            if not _insert_claim(conn, claim):
                return ClaimAndOrder(claimed=False, order_recorded=False)
            return ClaimAndOrder(
                claimed=True, order_recorded=row is not None and insert_order(conn, row)
            )

        return body

    async def settle(self, proposal_id: str, state: ClaimState) -> None:
        await self._worker.transact(lambda conn: _settle(conn, proposal_id, state))

    async def state(self, proposal_id: str) -> ClaimState | None:
        def body(conn: sqlite3.Connection) -> ClaimState | None:
            row = conn.execute(
                "SELECT state FROM proposal_claims WHERE proposal_id = ?", (proposal_id,)
            ).fetchone()
            return None if row is None else row[0]

        return await self._worker.run(body)

    async def get(self, proposal_id: str) -> ClaimRecord | None:
        def body(conn: sqlite3.Connection) -> ClaimRecord | None:
            row = conn.execute(
                "SELECT operation_hash, decision_id, claimed_at, state FROM proposal_claims"
                " WHERE proposal_id = ?",
                (proposal_id,),
            ).fetchone()
            return None if row is None else ClaimRecord(*row)

        return await self._worker.run(body)

    async def prune(self, before_ms: int) -> int:
        """Forget claims older than the freshness window: a replay is stale by then."""

        def body(conn: sqlite3.Connection) -> int:
            return conn.execute(
                "DELETE FROM proposal_claims WHERE claimed_at < ?", (before_ms,)
            ).rowcount

        return await self._worker.transact(body)

    async def close(self) -> None:
        await self._worker.close()


MERGED_SUFFIX: Final = ".merged-into-ledger"


async def merge_claim_file(store: ClaimStore, old: Path) -> int:
    """Move the claims and orders of a separate claim file (the layout before claims
    lived in the ledger file) into ``store``; returns how many rows were new.

    Nothing is lost: a claim keeps refusing its replays and an open order is
    still followed to its outcome. The copy is one transaction on the store's
    connection (``INSERT OR IGNORE``: a row already here, perhaps settled since,
    is kept), and only after it commits is the old file renamed aside
    (``claims.db.merged-into-ledger``), so a crash in between only repeats the
    copy at the next start."""
    if not old.exists():
        return 0

    def copy(conn: sqlite3.Connection) -> int:
        conn.execute("ATTACH DATABASE ? AS old", (os.fspath(old),))
        try:
            tables = {row[0] for row in conn.execute("SELECT name FROM old.sqlite_master")}
            before = conn.total_changes
            conn.execute("BEGIN IMMEDIATE")
            try:
                if "proposal_claims" in tables:
                    conn.execute(
                        "INSERT OR IGNORE INTO main.proposal_claims"
                        " SELECT * FROM old.proposal_claims"
                    )
                if "direct_orders" in tables:
                    conn.execute(
                        "INSERT OR IGNORE INTO main.direct_orders SELECT * FROM old.direct_orders"
                    )
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            if "proposal_claims" in tables or "direct_orders" in tables:
                conn.execute("PRAGMA old.wal_checkpoint(TRUNCATE)")
            return conn.total_changes - before
        finally:
            conn.execute("DETACH DATABASE old")

    try:
        merged = await store.worker.run(copy)
    except StoreUnavailable as exc:
        raise StoreUnavailable(
            f"claims store {os.fspath(old)} could not be merged into the ledger: {exc}"
        ) from exc.__cause__
    for suffix in ("", "-wal", "-shm"):
        part = old.with_name(old.name + suffix)
        if part.exists():
            part.replace(part.with_name(old.name + MERGED_SUFFIX + suffix))
    return merged
