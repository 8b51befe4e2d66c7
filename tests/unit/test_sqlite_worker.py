"""Group commit in the stores' SQLite idiom (smf_assurance/pipeline/stores/sqlite_worker.py, issue
20).

Properties, on a real SQLite file: transactions queued while a commit is in
flight commit together (one COMMIT in the connection's statement trace) and
each caller holds a committed result when released (another connection reads
it); each body sees the ones queued before it; a body's own failure rolls back
its writes only and reaches its caller alone (a SQLite error as
StoreUnavailable); a failed BEGIN fails every caller of the group; a caller
that gave up before its group was taken is not run; a committer stopped before
or during its commit fails its callers instead of leaving them waiting; close
commits what is queued and then refuses. Does not prove: power loss mid-commit
(SQLite's atomic commit is relied on).
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from smf_assurance.pipeline.stores.sqlite_worker import SqliteWorker, StoreUnavailable
from tests.support.store_helpers import parked, statements

SCHEMA = "CREATE TABLE IF NOT EXISTS t (k TEXT PRIMARY KEY, v INTEGER NOT NULL);"


@pytest.fixture
async def worker(tmp_path: Path) -> AsyncIterator[SqliteWorker]:
    opened = await SqliteWorker.open(tmp_path / "w.db", SCHEMA, name="test", busy_timeout_ms=50)
    try:
        yield opened
    finally:
        await opened.close()


def insert(key: str, value: int) -> Callable[[sqlite3.Connection], int]:
    def body(conn: sqlite3.Connection) -> int:
        conn.execute("INSERT INTO t VALUES (?, ?)", (key, value))
        (total,) = conn.execute("SELECT COALESCE(SUM(v), 0) FROM t").fetchone()
        return int(total)

    return body


def stored(path: Path) -> dict[str, int]:
    with sqlite3.connect(path) as conn:
        return dict(conn.execute("SELECT k, v FROM t ORDER BY k").fetchall())


async def test_queued_transactions_commit_together_in_queue_order(
    worker: SqliteWorker, tmp_path: Path
) -> None:
    seen = await statements(worker)
    committed: list[bool] = []

    async def one(n: int) -> int:
        total = await worker.transact(insert(f"k{n:02d}", n))
        committed.append(stored(tmp_path / "w.db").get(f"k{n:02d}") == n)
        return total

    async with parked(worker) as release:
        tasks = [asyncio.create_task(one(n)) for n in range(1, 21)]
        await asyncio.sleep(0)
        release()
        totals = await asyncio.gather(*tasks)
    assert totals == [n * (n + 1) // 2 for n in range(1, 21)]  # each saw those before it
    assert committed == [True] * 20
    assert seen.count("COMMIT") == 1
    assert seen.count("SAVEPOINT smf_item") == 20


async def test_a_body_that_fails_rolls_back_alone(worker: SqliteWorker, tmp_path: Path) -> None:
    class Refused(Exception):
        pass

    def refuse(conn: sqlite3.Connection) -> None:
        conn.execute("INSERT INTO t VALUES ('refused', 1)")
        raise Refused

    def broken(conn: sqlite3.Connection) -> None:
        conn.execute("INSERT INTO t VALUES ('broken', 1)")
        conn.execute("INSERT INTO missing_table VALUES (1)")

    async with parked(worker) as release:
        tasks = [
            asyncio.create_task(worker.transact(insert("a", 1))),
            asyncio.create_task(worker.transact(refuse)),
            asyncio.create_task(worker.transact(broken)),
            asyncio.create_task(worker.transact(insert("b", 2))),
        ]
        await asyncio.sleep(0)
        release()
        results = await asyncio.gather(*tasks, return_exceptions=True)
    assert results[0] == 1
    assert isinstance(results[1], Refused)
    assert isinstance(results[2], StoreUnavailable)
    assert isinstance(results[2].__cause__, sqlite3.OperationalError)
    assert results[3] == 3
    assert stored(tmp_path / "w.db") == {"a": 1, "b": 2}


async def test_a_group_that_cannot_begin_fails_every_caller(
    worker: SqliteWorker, tmp_path: Path
) -> None:
    with sqlite3.connect(tmp_path / "w.db", isolation_level=None) as holder:
        holder.execute("BEGIN EXCLUSIVE")
        results = await asyncio.gather(
            *(worker.transact(insert(f"k{n}", n)) for n in range(3)), return_exceptions=True
        )
        holder.execute("ROLLBACK")
    assert all(isinstance(r, StoreUnavailable) for r in results), results
    assert await worker.transact(insert("after", 1)) == 1
    assert stored(tmp_path / "w.db") == {"after": 1}


async def test_a_caller_that_gave_up_before_its_group_is_not_run(
    worker: SqliteWorker, tmp_path: Path
) -> None:
    async with parked(worker) as release:
        first = asyncio.create_task(worker.transact(insert("first", 1)))
        await asyncio.sleep(0)
        gave_up = asyncio.create_task(worker.transact(insert("gave_up", 2)))
        kept = asyncio.create_task(worker.transact(insert("kept", 3)))
        await asyncio.sleep(0)
        gave_up.cancel()
        release()
        assert (await first, await kept) == (1, 4)
    with pytest.raises(asyncio.CancelledError):
        await gave_up
    assert stored(tmp_path / "w.db") == {"first": 1, "kept": 3}


@pytest.mark.parametrize("when", ["before_its_first_step", "mid_commit"])
async def test_a_stopped_committer_fails_its_callers(
    worker: SqliteWorker, tmp_path: Path, when: str
) -> None:
    async with parked(worker) as release:
        waiting = [asyncio.create_task(worker.transact(insert(f"k{n}", n))) for n in (1, 2)]
        await asyncio.sleep(0)
        if when == "mid_commit":
            await asyncio.sleep(0)
        assert worker._grouped.task is not None
        worker._grouped.task.cancel()
        results = await asyncio.gather(*waiting, return_exceptions=True)
        release()
    assert all(isinstance(r, StoreUnavailable) for r in results), results
    assert await worker.transact(insert("after", 5)) >= 5


async def test_close_commits_what_is_queued_and_then_refuses(tmp_path: Path) -> None:
    worker = await SqliteWorker.open(tmp_path / "w.db", SCHEMA, name="test")
    async with parked(worker) as release:
        queued = [asyncio.create_task(worker.transact(insert(f"k{n}", n))) for n in (1, 2)]
        await asyncio.sleep(0)
        closing = asyncio.create_task(worker.close())
        await asyncio.sleep(0)
        with pytest.raises(StoreUnavailable, match="closed"):
            await worker.transact(insert("late", 9))
        release()
        await closing
    assert await asyncio.gather(*queued) == [1, 3]
    assert stored(tmp_path / "w.db") == {"k1": 1, "k2": 2}
    await worker.close()  # idempotent


# --- a loan of the connection -------------------------------------------


async def test_a_loan_shares_the_connection_and_ends_without_closing_it(tmp_path: Path) -> None:
    """``SqliteWorker.lend``: the loan's transactions run on the lender's connection
    (its schema installed there); closing the loan leaves the lender working, and
    closing the lender makes the loan unavailable."""
    lender = await SqliteWorker.open(tmp_path / "shared.db", name="lender")
    loan = await lender.lend("CREATE TABLE IF NOT EXISTS lent (n INTEGER)", name="loan")
    await loan.transact(lambda c: c.execute("INSERT INTO lent VALUES (1)"))
    assert await lender.run(lambda c: c.execute("SELECT n FROM lent").fetchall()) == [(1,)]
    await loan.close()
    assert loan.closed
    assert not lender.closed
    with pytest.raises(StoreUnavailable):
        await loan.run(lambda c: None)
    assert await lender.run(lambda c: c.execute("SELECT count(*) FROM lent").fetchone()) == (1,)
    second = await lender.lend(name="second")
    await lender.close()
    assert second.closed
    with pytest.raises(StoreUnavailable):
        await second.run(lambda c: None)
    await second.close()  # ending a loan whose lender is gone is quiet


async def test_a_loan_whose_schema_does_not_install_is_refused(tmp_path: Path) -> None:
    lender = await SqliteWorker.open(tmp_path / "shared.db", name="lender")
    try:
        with pytest.raises(StoreUnavailable, match="could not be installed"):
            await lender.lend("CREATE TABLE (", name="broken")
    finally:
        await lender.close()
