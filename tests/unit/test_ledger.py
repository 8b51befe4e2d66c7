"""Evidence ledger store (ARCHITECTURE.md, "Evidence").

Every test runs against a real SQLite file in ``tmp_path``. Attacks are made
the way someone with access to the file would make them: through Python's
``sqlite3`` module, outside the store, and (where the test says so) after
dropping the triggers first.
"""

from __future__ import annotations

import asyncio
import io
import re
import sqlite3
from collections.abc import Callable
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from smf_assurance.pipeline.stores import ledger_schema
from smf_assurance.pipeline.stores.ledger import (
    CHAIN_BROKEN,
    CHECKPOINT_BAD_SIGNATURE,
    CHECKPOINT_MALFORMED,
    CHECKPOINT_MISMATCH,
    ENTRY_HASH_MISMATCH,
    ENTRY_MALFORMED,
    LEDGER_UNREADABLE,
    SEQ_GAP,
    TAIL_MISMATCH,
    TRUNCATED_AFTER_CHECKPOINT,
    EvidenceEntryRejected,
    EvidenceError,
    EvidenceStoreUnavailable,
    Ledger,
    LedgerIntegrityError,
    Receipt,
    export_jsonl,
    verify_ledger,
)
from smf_assurance.pipeline.stores.ledger_schema import (
    CHECKPOINT_PAYLOAD_TYPE,
    DDL,
    ENTRY_COLUMNS,
    GENESIS_HASH,
    INSERT_ENTRY,
    SELECT_ENTRIES_AFTER,
    MalformedEntry,
    checkpoint_payload,
    entry_hash_of,
    parse_checkpoint_payload,
    parse_export_line,
)
from smf_assurance.pipeline.stores.sqlite_worker import StoreUnavailable
from smf_assurance.subjects import dsse
from smf_assurance.subjects.canonical import canonical_bytes, identity_of, parse_canonical
from smf_assurance.subjects.keys import SigningKey, VerifyKey, generate_signing_key
from tests.support.ledger import attacker, db, make_entry
from tests.support.store_helpers import parked, statements

__all__ = ["db"]

NEVER = 10**9  # a cadence that never fires within a test


def trusted(*keys: SigningKey) -> dict[str, VerifyKey]:
    return {key.key_id: key.verify_key for key in keys}


class Sink:
    """An ``on_checkpoint`` callback that records envelopes (the stream)."""

    def __init__(self) -> None:
        self.published: list[bytes] = []
        self.failures_left = 0

    async def __call__(self, envelope: bytes) -> None:
        if self.failures_left:
            self.failures_left -= 1
            raise ConnectionError("stream unavailable")
        self.published.append(envelope)

    def claims(self, key: SigningKey) -> list[ledger_schema.CheckpointClaim]:
        out = []
        for data in self.published:
            verified = dsse.verify(
                dsse.decode_envelope(data),
                trusted(key),
                expected_payload_type=CHECKPOINT_PAYLOAD_TYPE,
            )
            out.append(parse_checkpoint_payload(verified.payload))
        return out


@pytest.fixture
def key() -> SigningKey:
    return generate_signing_key()


@pytest.fixture
def sink() -> Sink:
    return Sink()


async def fill(
    db: Path, key: SigningKey, count: int, sink: Sink | None = None, every: int = 4
) -> list[Receipt]:
    """A closed ledger of ``count`` entries, checkpointed every ``every``."""
    async with await Ledger.open(
        db, signer=key, checkpoint_every=every, checkpoint_seconds=NEVER, on_checkpoint=sink
    ) as ledger:
        return [await ledger.append(make_entry(i)) for i in range(1, count + 1)]


def snapshot(db: Path) -> dict[str, list[tuple[Any, ...]]]:
    with attacker(db) as conn:
        return {
            table: conn.execute(f"SELECT * FROM {table} ORDER BY 1").fetchall()
            for table in ("ledger_meta", "evidence_entries", "ledger_checkpoints")
        }


def row_of(db: Path, seq: int) -> tuple[Any, ...]:
    with attacker(db) as conn:
        row = conn.execute(SELECT_ENTRIES_AFTER.replace("seq > ?", "seq = ?"), (seq,)).fetchone()
    assert row is not None
    return tuple(row)


def rehash_from(conn: sqlite3.Connection, first: int) -> None:
    """What a capable attacker does after editing: recompute the chain onward."""
    rows = conn.execute(SELECT_ENTRIES_AFTER, (first - 1,)).fetchall()
    prev = conn.execute("SELECT entry_hash FROM evidence_entries WHERE seq = ?", (first - 1,))
    prev_hash = (prev.fetchone() or (GENESIS_HASH,))[0]
    for row in rows:
        stored = ledger_schema.stored_entry(row)
        new_hash = entry_hash_of(stored.seq, prev_hash, stored.entry)
        conn.execute(
            "UPDATE evidence_entries SET prev_hash = ?, entry_hash = ? WHERE seq = ?",
            (prev_hash, new_hash, stored.seq),
        )
        prev_hash = new_hash


def drop_guards(conn: sqlite3.Connection) -> None:
    for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'").fetchall():
        conn.execute(f"DROP TRIGGER {name}")


# --- a clean ledger ----------------------------------------------------------


async def test_append_and_verify_clean_ledger(db: Path, key: SigningKey, sink: Sink) -> None:
    receipts = await fill(db, key, 10, sink, every=4)

    assert [r.seq for r in receipts] == list(range(1, 11))
    prev = GENESIS_HASH
    for i, receipt in enumerate(receipts, start=1):
        assert receipt.entry_hash == entry_hash_of(i, prev, make_entry(i))
        prev = receipt.entry_hash
    assert [c.seq for c in sink.claims(key)] == [4, 8]

    report = verify_ledger(db, sink.published, trusted(key))
    assert report.ok, report
    assert (report.reason, report.seq) == (None, None)
    assert (report.entries, report.last_seq, report.last_entry_hash) == (10, 10, prev)
    assert (report.checkpoints, report.checkpoint_seq) == (2, 8)  # file and stream copies once


async def test_append_is_committed_when_it_returns(db: Path, key: SigningKey) -> None:
    async with await Ledger.open(db, signer=key) as ledger:
        receipt = await ledger.append(make_entry(1))
        with attacker(db) as other:  # another connection sees it before close
            stored = other.execute("SELECT seq, entry_hash FROM evidence_entries").fetchall()
        assert stored == [(receipt.seq, receipt.entry_hash)]

        def pragmas(conn: sqlite3.Connection) -> tuple[str, int]:
            return (
                conn.execute("PRAGMA journal_mode").fetchone()[0],
                conn.execute("PRAGMA synchronous").fetchone()[0],
            )

        mode, synchronous = await ledger._worker.run(pragmas)
    assert (mode, synchronous) == ("wal", 2)  # 2 == FULL: fsync on every commit


async def test_reopen_continues_the_chain(db: Path, key: SigningKey, sink: Sink) -> None:
    first = await fill(db, key, 3, sink, every=2)
    async with await Ledger.open(db, signer=key, checkpoint_every=2, on_checkpoint=sink) as again:
        more = [await again.append(make_entry(i)) for i in (4, 5)]
    assert [r.seq for r in more] == [4, 5]
    assert row_of(db, 4)[1] == first[-1].entry_hash
    assert verify_ledger(db, sink.published, trusted(key)).ok


async def test_concurrent_appends_form_one_chain(db: Path, key: SigningKey) -> None:
    async with await Ledger.open(db, signer=key, checkpoint_every=7) as ledger:
        receipts = await asyncio.gather(*(ledger.append(make_entry(i)) for i in range(40)))
    assert sorted(r.seq for r in receipts) == list(range(1, 41))
    report = verify_ledger(db, [], trusted(key))
    assert report.ok
    assert report.last_seq == 40


async def test_cancelled_append_leaves_a_valid_chain(db: Path, key: SigningKey) -> None:
    async with await Ledger.open(db, signer=key) as ledger:
        task = asyncio.create_task(ledger.append(make_entry(1)))
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        receipt = await ledger.append(make_entry(2))
    assert receipt.seq in (1, 2)  # the cancelled one may or may not have committed
    assert verify_ledger(db, [], trusted(key)).ok


# --- group commit ------------------------------------------------


async def test_appends_that_wait_share_one_transaction(db: Path, key: SigningKey) -> None:
    """What queued while a commit was in flight commits together, one
    COMMIT (one fsync) for all; each receipt is durable when its caller has it."""
    async with await Ledger.open(db, signer=key, checkpoint_every=NEVER) as ledger:
        seen = await statements(ledger._worker)
        visible: list[bool] = []

        async def append_and_look(i: int) -> Receipt:
            receipt = await ledger.append(make_entry(i))
            with attacker(db) as other:
                found = other.execute(
                    "SELECT entry_hash FROM evidence_entries WHERE seq = ?", (receipt.seq,)
                ).fetchone()
            visible.append(found == (receipt.entry_hash,))
            return receipt

        async with parked(ledger._worker) as release:
            tasks = [asyncio.create_task(append_and_look(i)) for i in range(1, 41)]
            await asyncio.sleep(0)
            release()
            receipts = await asyncio.gather(*tasks)
    commits = [sql for sql in seen if sql == "COMMIT"]
    assert [r.seq for r in receipts] == list(range(1, 41))  # chain order = arrival order
    assert 1 <= len(commits) <= 2, commits  # the first may have gone alone
    assert visible == [True] * 40
    report = verify_ledger(db, [], trusted(key))
    assert report.ok
    assert report.last_seq == 40


async def test_a_write_beside_an_entry_commits_with_it_or_alone_fails(
    db: Path, key: SigningKey
) -> None:
    """``Ledger.append_beside``: a caller's write beside its entry is in the
    entry's transaction (one COMMIT for the whole group, the row visible to
    another connection when the caller is released); a write that fails is
    undone alone and is that caller's ``StoreUnavailable``, while its entry and
    the other callers' entries and writes commit; a stopped ledger writes
    neither."""
    async with await Ledger.open(db, signer=key, checkpoint_every=NEVER) as ledger:
        await ledger.worker.run(lambda c: c.execute("CREATE TABLE beside (n INTEGER UNIQUE)"))
        seen = await statements(ledger.worker)

        def insert(n: int) -> Callable[[sqlite3.Connection], int]:
            def body(conn: sqlite3.Connection) -> int:
                conn.execute("INSERT INTO beside VALUES (?)", (n,))
                if n == 3:
                    conn.execute("INSERT INTO beside VALUES (?)", (n,))  # a duplicate: fails
                return n

            return body

        async with parked(ledger.worker) as release:
            tasks = [
                asyncio.create_task(ledger.append_beside(make_entry(i), insert(i)))
                for i in range(1, 6)
            ]
            await asyncio.sleep(0)
            release()
            results = await asyncio.gather(*tasks)
        assert [r.seq for r, _ in results] == [1, 2, 3, 4, 5]
        assert [w for _, w in results if not isinstance(w, StoreUnavailable)] == [1, 2, 4, 5]
        failed = results[2][1]
        assert isinstance(failed, StoreUnavailable)
        assert isinstance(failed.__cause__, sqlite3.IntegrityError)
        assert len([sql for sql in seen if sql == "COMMIT"]) <= 2
        with attacker(db) as other:
            assert [n for (n,) in other.execute("SELECT n FROM beside ORDER BY n")] == [1, 2, 4, 5]
    report = verify_ledger(db, [], trusted(key))
    assert (report.ok, report.last_seq) == (True, 5)
    with pytest.raises(EvidenceStoreUnavailable):
        await ledger.append_beside(make_entry(6), insert(6))
    with attacker(db) as other:
        assert other.execute("SELECT count(*) FROM beside WHERE n = 6").fetchone() == (0,)


async def test_a_write_with_no_entry_rides_in_the_next_group(db: Path, key: SigningKey) -> None:
    """``Ledger.write_beside``: a write with no entry of its own (a claim's
    settle) commits in the group queued with it: one COMMIT for it and the
    entries, no seq taken, the chain continuing where it was; alone, it is a
    group of its own; a closed ledger refuses it."""
    async with await Ledger.open(db, signer=key, checkpoint_every=NEVER) as ledger:
        await ledger.worker.run(lambda c: c.execute("CREATE TABLE settles (n INTEGER)"))
        assert await ledger.write_beside(lambda c: c.execute("INSERT INTO settles VALUES (0)"))
        seen = await statements(ledger.worker)

        def settle(n: int) -> Callable[[sqlite3.Connection], int]:
            def body(conn: sqlite3.Connection) -> int:
                conn.execute("INSERT INTO settles VALUES (?)", (n,))
                return n

            return body

        async with parked(ledger.worker) as release:
            appends = [asyncio.create_task(ledger.append(make_entry(i))) for i in (1, 2)]
            writes = [asyncio.create_task(ledger.write_beside(settle(n))) for n in (10, 11)]
            await asyncio.sleep(0)
            release()
            receipts = await asyncio.gather(*appends)
            written = await asyncio.gather(*writes)
        assert [r.seq for r in receipts] == [1, 2]
        assert written == [10, 11]
        assert [sql for sql in seen if sql == "COMMIT"] == ["COMMIT"]
        assert (await ledger.append(make_entry(3))).seq == 3
        with attacker(db) as other:
            assert [n for (n,) in other.execute("SELECT n FROM settles ORDER BY n")] == [0, 10, 11]
    assert verify_ledger(db, [], trusted(key)).last_seq == 3
    with pytest.raises(EvidenceStoreUnavailable):
        await ledger.write_beside(settle(12))


async def test_a_batch_checkpoints_exactly_where_single_appends_would(
    tmp_path: Path, key: SigningKey
) -> None:
    single, grouped = tmp_path / "single.db", tmp_path / "grouped.db"
    await fill(single, key, 20, every=7)
    async with await Ledger.open(
        grouped, signer=key, checkpoint_every=7, checkpoint_seconds=NEVER
    ) as ledger:
        seen = await statements(ledger._worker)
        async with parked(ledger._worker) as release:
            tasks = [asyncio.create_task(ledger.append(make_entry(i))) for i in range(1, 21)]
            await asyncio.sleep(0)
            release()
            await asyncio.gather(*tasks)
    assert seen.count("COMMIT") <= 2
    grouped_rows, single_rows = snapshot(grouped), snapshot(single)
    assert grouped_rows["evidence_entries"] == single_rows["evidence_entries"]
    assert [row[:3] for row in grouped_rows["ledger_checkpoints"]] == [
        row[:3] for row in single_rows["ledger_checkpoints"]
    ]
    assert [row[0] for row in grouped_rows["ledger_checkpoints"]] == [7, 14]


async def test_a_failed_group_commit_fails_every_caller_in_it(db: Path, key: SigningKey) -> None:
    async with await Ledger.open(db, signer=key, busy_timeout_ms=50) as ledger:
        await ledger.append(make_entry(1))
        with attacker(db) as holder:
            holder.execute("BEGIN EXCLUSIVE")
            results = await asyncio.gather(
                *(ledger.append(make_entry(i)) for i in range(2, 7)), return_exceptions=True
            )
            holder.execute("ROLLBACK")
        failures = [r for r in results if isinstance(r, EvidenceStoreUnavailable)]
        assert len(failures) == 5, results
        assert all(isinstance(r.__cause__, sqlite3.OperationalError) for r in failures)
        assert len({id(r) for r in failures}) == 5  # one exception per caller
        assert (await ledger.append(make_entry(7))).seq == 2
    report = verify_ledger(db, [], trusted(key))
    assert report.ok
    assert report.last_seq == 2


async def test_a_caller_that_gave_up_before_its_batch_is_not_written(
    db: Path, key: SigningKey
) -> None:
    async with await Ledger.open(db, signer=key) as ledger:
        async with parked(ledger._worker) as release:
            first = asyncio.create_task(ledger.append(make_entry(1)))
            await asyncio.sleep(0)  # taken into the first batch, behind the parked job
            gave_up = asyncio.create_task(ledger.append(make_entry(2)))
            kept = asyncio.create_task(ledger.append(make_entry(3)))
            await asyncio.sleep(0)
            gave_up.cancel()
            release()
            receipts = [await first, await kept]
        with pytest.raises(asyncio.CancelledError):
            await gave_up
    assert [r.seq for r in receipts] == [1, 2]
    with attacker(db) as conn:
        written = [h for (h,) in conn.execute("SELECT operation_hash FROM evidence_entries")]
    assert written == [make_entry(1).operation_hash, make_entry(3).operation_hash]


@pytest.mark.parametrize("when", ["before_its_first_step", "mid_commit"])
async def test_a_stopped_committer_fails_its_callers_instead_of_leaving_them_waiting(
    db: Path, key: SigningKey, when: str
) -> None:
    ledger = await Ledger.open(db, signer=key)
    async with parked(ledger._worker) as release:
        waiting = [asyncio.create_task(ledger.append(make_entry(i))) for i in (1, 2)]
        await asyncio.sleep(0)
        if when == "mid_commit":
            await asyncio.sleep(0)  # the committer has taken the batch and waits on the worker
        assert ledger._grouped.task is not None
        ledger._grouped.task.cancel()
        results = await asyncio.gather(*waiting, return_exceptions=True)
        release()
    assert all(isinstance(r, EvidenceStoreUnavailable) for r in results), results
    assert all("stopped" in str(r) for r in results)
    after = await ledger.append(make_entry(3))  # a new committer, on the true tail
    await ledger.close()
    report = verify_ledger(db, [], trusted(key))
    assert report.ok
    assert report.last_seq == after.seq


async def test_close_commits_what_is_queued_and_then_refuses(db: Path, key: SigningKey) -> None:
    ledger = await Ledger.open(db, signer=key)
    async with parked(ledger._worker) as release:
        queued = [asyncio.create_task(ledger.append(make_entry(i))) for i in (1, 2, 3)]
        await asyncio.sleep(0)
        closing_task = asyncio.create_task(ledger.close())
        await asyncio.sleep(0)
        with pytest.raises(EvidenceStoreUnavailable, match="closed"):
            await ledger.append(make_entry(4))
        release()
        await closing_task
    assert [r.seq for r in await asyncio.gather(*queued)] == [1, 2, 3]
    assert verify_ledger(db, [], trusted(key)).last_seq == 3


# --- append-only, attacked through sqlite3 -----------------------------------

_ROW_VALUES = ", ".join("?" for _ in ENTRY_COLUMNS)

# Each attack targets entry 2 with a row that keeps its seq but claims a
# different status; the store's triggers must refuse every one.
ATTACKS: dict[str, list[str]] = {
    "update": ["UPDATE evidence_entries SET status = 'released' WHERE seq = 2"],
    "delete": ["DELETE FROM evidence_entries WHERE seq = 2"],
    "insert_or_replace": [f"INSERT OR REPLACE INTO evidence_entries VALUES ({_ROW_VALUES})"],
    "duplicate_insert": [f"INSERT INTO evidence_entries VALUES ({_ROW_VALUES})"],
    "upsert": [
        f"INSERT INTO evidence_entries VALUES ({_ROW_VALUES}) "
        "ON CONFLICT (seq) DO UPDATE SET status = excluded.status, at = excluded.at"
    ],
    "replace_recursive_triggers_off": [
        "PRAGMA recursive_triggers = OFF",
        f"REPLACE INTO evidence_entries VALUES ({_ROW_VALUES})",
    ],
}


@pytest.mark.claim("protected-evidence.append-only")
@pytest.mark.parametrize("attack", list(ATTACKS), ids=list(ATTACKS))
async def test_append_only_against_sql(attack: str, db: Path, key: SigningKey, sink: Sink) -> None:
    await fill(db, key, 3, sink, every=3)
    before = snapshot(db)
    row = list(row_of(db, 2))
    if attack != "duplicate_insert":
        row[ENTRY_COLUMNS.index("status")] = "released"
    with attacker(db) as conn:
        *setup, statement = ATTACKS[attack]
        for pragma in setup:
            conn.execute(pragma)
        params = row if "?" in statement else []
        with pytest.raises(sqlite3.IntegrityError, match="append-only"):
            conn.execute(statement, params)
    assert snapshot(db) == before
    assert verify_ledger(db, sink.published, trusted(key)).ok


@pytest.mark.parametrize(
    "statement",
    [
        "UPDATE ledger_checkpoints SET at = 0",
        "DELETE FROM ledger_checkpoints",
        "INSERT OR REPLACE INTO ledger_checkpoints SELECT seq, entry_hash, 0, envelope "
        "FROM ledger_checkpoints",
        "UPDATE ledger_meta SET ledger_id = 'sha256:' || hex(zeroblob(32))",
        "DELETE FROM ledger_meta",
        "INSERT OR REPLACE INTO ledger_meta VALUES (1, 'sha256:' || hex(zeroblob(32)), 1)",
    ],
    ids=[
        "update_checkpoint",
        "delete_checkpoint",
        "replace_checkpoint",
        "update_meta",
        "delete_meta",
        "replace_meta",
    ],
)
async def test_checkpoints_and_identity_are_append_only(
    statement: str, db: Path, key: SigningKey
) -> None:
    await fill(db, key, 4, every=2)
    before = snapshot(db)
    with attacker(db) as conn, pytest.raises(sqlite3.IntegrityError):
        conn.execute(statement)
    assert snapshot(db) == before


async def test_insert_that_does_not_extend_the_chain_is_refused(db: Path, key: SigningKey) -> None:
    await fill(db, key, 3)
    before = snapshot(db)
    row = list(row_of(db, 3))
    forged = list(row)
    forged[0] = 4  # the next seq, but chained to entry 2 instead of entry 3
    forged[1] = row_of(db, 2)[2]
    skipping = list(row)
    skipping[0], skipping[1] = 9, row[2]  # chained correctly, but skips seq 4..8
    auto = list(row)
    auto[0], auto[1] = None, row[2]  # let SQLite pick the seq
    with attacker(db) as conn:
        for attempt in (forged, skipping, auto):
            with pytest.raises(sqlite3.IntegrityError, match="append-only"):
                conn.execute(INSERT_ENTRY, attempt)
        with pytest.raises(sqlite3.IntegrityError, match="append-only"):
            conn.execute(
                "INSERT INTO ledger_checkpoints VALUES (3, ?, 0, x'00')",
                (identity_of("not entry 3"),),
            )
    assert snapshot(db) == before


async def test_store_refuses_to_extend_a_chain_it_did_not_write(
    db: Path, key: SigningKey, sink: Sink
) -> None:
    async with await Ledger.open(db, signer=key, on_checkpoint=sink) as ledger:
        await ledger.append(make_entry(1))
        # Someone else appends a well-formed, correctly chained entry.
        entry = make_entry(99)
        prev_hash = row_of(db, 1)[2]
        forged = ledger_schema.entry_row(2, prev_hash, entry_hash_of(2, prev_hash, entry), entry)
        with attacker(db) as conn:
            conn.execute(INSERT_ENTRY, forged)
        with pytest.raises(EvidenceStoreUnavailable) as caught:
            await ledger.append(make_entry(2))
        assert isinstance(caught.value.__cause__, LedgerIntegrityError)
        assert caught.value.__cause__.reason == TAIL_MISMATCH
        # Nor will it sign that tail.
        with pytest.raises(EvidenceStoreUnavailable):
            await ledger.checkpoint(at=1)
    assert [row[0] for row in snapshot(db)["evidence_entries"]] == [1, 2]
    assert snapshot(db)["ledger_checkpoints"] == []


# --- tampering detected by the chain and the checkpoints ------------------------


@pytest.mark.claim("protected-evidence.append-only")
async def test_edited_byte_in_the_file_is_detected(db: Path, key: SigningKey, sink: Sink) -> None:
    await fill(db, key, 6, sink, every=100)  # the ledger is closed: WAL merged
    target = identity_of({"operation": 3}).encode()
    raw = db.read_bytes()
    assert raw.count(target) == 1
    offset = raw.index(target) + len("sha256:")
    flipped = b"0" if raw[offset : offset + 1] != b"0" else b"1"
    db.write_bytes(raw[:offset] + flipped + raw[offset + 1 :])

    report = verify_ledger(db, sink.published, trusted(key))
    assert (report.ok, report.reason, report.seq) == (False, ENTRY_HASH_MISMATCH, 3)
    assert report.last_seq == 2


async def test_edit_after_dropping_triggers_is_detected(db: Path, key: SigningKey) -> None:
    await fill(db, key, 6)
    with attacker(db) as conn:
        drop_guards(conn)
        conn.execute("UPDATE evidence_entries SET status = 'released' WHERE seq = 4")
    report = verify_ledger(db, [], trusted(key))
    assert (report.reason, report.seq) == (ENTRY_HASH_MISMATCH, 4)


async def test_edit_and_rehash_of_one_entry_breaks_the_chain(db: Path, key: SigningKey) -> None:
    await fill(db, key, 6)
    with attacker(db) as conn:
        drop_guards(conn)
        conn.execute("UPDATE evidence_entries SET disposition = 'allow' WHERE seq = 3")
        stored = ledger_schema.stored_entry(row_of(db, 3))
        conn.execute(
            "UPDATE evidence_entries SET entry_hash = ? WHERE seq = 3",
            (entry_hash_of(3, stored.prev_hash, stored.entry),),
        )
    report = verify_ledger(db, [], trusted(key))
    assert (report.reason, report.seq) == (CHAIN_BROKEN, 4)


async def test_rewritten_history_is_caught_by_a_signed_checkpoint(
    db: Path, key: SigningKey, sink: Sink
) -> None:
    await fill(db, key, 10, sink, every=4)
    with attacker(db) as conn:
        drop_guards(conn)
        conn.execute("UPDATE evidence_entries SET disposition = 'allow' WHERE seq = 3")
        rehash_from(conn, 3)
        conn.execute("DELETE FROM ledger_checkpoints")
    assert verify_ledger(db, [], trusted(key)).ok  # the chain alone is consistent again
    report = verify_ledger(db, sink.published, trusted(key))
    assert (report.reason, report.seq) == (CHECKPOINT_MISMATCH, 4)


@pytest.mark.claim("protected-evidence.append-only")
async def test_removed_middle_entry_is_detected(db: Path, key: SigningKey) -> None:
    await fill(db, key, 8)
    with attacker(db) as conn:
        drop_guards(conn)
        conn.execute("DELETE FROM evidence_entries WHERE seq = 5")
    report = verify_ledger(db, [], trusted(key))
    assert (report.reason, report.seq, report.last_seq) == (SEQ_GAP, 5, 4)


@pytest.mark.claim("protected-evidence.append-only")
async def test_truncated_tail_is_detected_by_an_external_checkpoint(
    db: Path, key: SigningKey, sink: Sink
) -> None:
    await fill(db, key, 9, sink, every=4)
    with attacker(db) as conn:
        drop_guards(conn)
        conn.execute("DELETE FROM evidence_entries WHERE seq > 6")
        conn.execute("DELETE FROM ledger_checkpoints WHERE seq > 6")
    # The file on its own looks fine: that is why checkpoints leave it.
    assert verify_ledger(db, [], trusted(key)).ok
    report = verify_ledger(db, sink.published, trusted(key))
    assert (report.reason, report.seq) == (TRUNCATED_AFTER_CHECKPOINT, 7)


async def test_whole_file_replaced_with_another_keys_checkpoints(
    db: Path, tmp_path: Path, key: SigningKey, sink: Sink
) -> None:
    await fill(db, key, 8, sink, every=4)
    forger = generate_signing_key()
    fake = tmp_path / "fake.db"
    async with await Ledger.open(fake, signer=forger, checkpoint_every=2) as other:
        for i in range(1, 11):
            await other.append(make_entry(i, disposition="allow", reason_codes=()))
    fake.replace(db)
    report = verify_ledger(db, sink.published, trusted(key))
    assert (report.ok, report.reason) == (False, CHECKPOINT_BAD_SIGNATURE)


async def test_whole_file_replaced_without_checkpoints(
    db: Path, tmp_path: Path, key: SigningKey, sink: Sink
) -> None:
    await fill(db, key, 8, sink, every=4)
    fake = tmp_path / "fake.db"
    async with await Ledger.open(fake, signer=key, checkpoint_every=NEVER) as other:
        for i in range(1, 11):
            await other.append(make_entry(i))  # even the same content
    fake.replace(db)
    report = verify_ledger(db, sink.published, trusted(key))
    assert (report.reason, report.seq) == (CHECKPOINT_MISMATCH, 4)  # another ledger_id


async def test_forged_or_damaged_checkpoints_are_refused(
    db: Path, key: SigningKey, sink: Sink
) -> None:
    receipts = await fill(db, key, 4, sink, every=4)
    ledger_id = sink.claims(key)[0].ledger_id
    forger = generate_signing_key()
    payload = checkpoint_payload(ledger_id, 4, receipts[-1].entry_hash, 1)
    by_forger = dsse.encode_envelope(dsse.sign(CHECKPOINT_PAYLOAD_TYPE, payload, [forger]))
    wrong_type = dsse.encode_envelope(dsse.sign("application/vnd.smf.other", payload, [key]))
    not_an_envelope = b'{"payload": "garbage"'
    for envelope in (by_forger, wrong_type, not_an_envelope, "not bytes"):
        report = verify_ledger(db, [envelope], trusted(key))  # type: ignore[list-item]
        assert (report.reason, report.seq) == (CHECKPOINT_BAD_SIGNATURE, None)

    for bad_payload in (
        b'{"seq":4}',
        canonical_bytes({"ledger_id": ledger_id, "seq": 0, "entry_hash": GENESIS_HASH, "at": 1}),
        canonical_bytes([1, 2]),
    ):
        signed = dsse.encode_envelope(dsse.sign(CHECKPOINT_PAYLOAD_TYPE, bad_payload, [key]))
        report = verify_ledger(db, [signed], trusted(key))
        assert report.reason == CHECKPOINT_MALFORMED


async def test_checkpoint_of_a_later_entry_with_another_hash_is_a_mismatch(
    db: Path, key: SigningKey
) -> None:
    receipts = await fill(db, key, 5, every=NEVER)
    ledger_id = verify_ledger(db, [], trusted(key)).ledger_id
    assert ledger_id is not None
    lie = checkpoint_payload(ledger_id, 2, receipts[3].entry_hash, 1)
    envelope = dsse.encode_envelope(dsse.sign(CHECKPOINT_PAYLOAD_TYPE, lie, [key]))
    report = verify_ledger(db, [envelope], trusted(key))
    assert (report.reason, report.seq) == (CHECKPOINT_MISMATCH, 2)


async def test_value_written_around_the_checks_is_malformed(db: Path, key: SigningKey) -> None:
    await fill(db, key, 5)
    with attacker(db) as conn:
        drop_guards(conn)
        conn.execute("PRAGMA ignore_check_constraints = ON")
        conn.execute(
            "UPDATE evidence_entries SET operation_hash = 'send draft to bob@example.com' "
            "WHERE seq = 2"
        )
    report = verify_ledger(db, [], trusted(key))
    assert (report.reason, report.seq) == (ENTRY_MALFORMED, 2)
    with pytest.raises(LedgerIntegrityError) as caught:
        export_jsonl(db, io.StringIO())
    assert (caught.value.reason, caught.value.seq) == (ENTRY_MALFORMED, 2)


@pytest.mark.parametrize(
    ("column", "value"),
    [
        ("seq", "1"),
        ("prev_hash", "Dear Ms. Smith"),
        ("entry_hash", None),
        ("reason_codes", 5),
        ("reason_codes", "not json"),
        ("reason_codes", '"ok"'),
        ("reason_codes", '["ok", "Dear client"]'),
    ],
)
def test_row_from_a_rewritten_schema_is_malformed(column: str, value: object) -> None:
    """Rows are decoded defensively: with file access the schema itself (STRICT,
    CHECKs) can be rewritten, so the verifier trusts no column's type."""
    row = list(ledger_schema.entry_row(1, GENESIS_HASH, identity_of("e"), make_entry(1)))
    row[ENTRY_COLUMNS.index(column)] = value
    with pytest.raises(MalformedEntry):
        ledger_schema.stored_entry(tuple(row))


async def test_unreadable_files(tmp_path: Path, db: Path, key: SigningKey) -> None:
    assert verify_ledger(tmp_path / "missing.db", [], {}).reason == LEDGER_UNREADABLE
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"this is not a database" * 100)
    assert verify_ledger(garbage, [], {}).reason == LEDGER_UNREADABLE
    await fill(db, key, 2)
    with attacker(db) as conn:
        drop_guards(conn)
        conn.execute("DELETE FROM ledger_meta")
    assert verify_ledger(db, [], {}).reason == LEDGER_UNREADABLE


# --- checkpoints ---------------------------------------------------------------


async def test_checkpoint_cadence_by_count(db: Path, key: SigningKey, sink: Sink) -> None:
    receipts = await fill(db, key, 10, sink, every=3)
    claims = sink.claims(key)
    assert [c.seq for c in claims] == [3, 6, 9]
    assert [c.entry_hash for c in claims] == [receipts[i - 1].entry_hash for i in (3, 6, 9)]
    assert len({c.ledger_id for c in claims}) == 1


async def test_checkpoint_cadence_by_time(db: Path, key: SigningKey, sink: Sink) -> None:
    start = 1_700_000_000_000
    async with await Ledger.open(
        db, signer=key, checkpoint_every=NEVER, checkpoint_seconds=5, on_checkpoint=sink
    ) as ledger:
        for offset in (0, 1_000, 4_999, 5_000, 9_000, 9_999):
            await ledger.append(make_entry(offset, at=start + offset))
    assert [(c.seq, c.at - start) for c in sink.claims(key)] == [(4, 5_000)]

    # The window survives a restart: it runs from the last checkpoint's time.
    async with await Ledger.open(
        db, signer=key, checkpoint_every=NEVER, checkpoint_seconds=5, on_checkpoint=sink
    ) as ledger:
        await ledger.append(make_entry(7, at=start + 10_000))
    # (seq 4 twice: the last checkpoint is offered to the sink again at open)
    assert [(c.seq, c.at - start) for c in sink.claims(key)] == [
        (4, 5_000),
        (4, 5_000),
        (7, 10_000),
    ]
    assert verify_ledger(db, sink.published, trusted(key)).ok


async def test_time_window_starts_at_first_entry_after_restart(
    db: Path, key: SigningKey, sink: Sink
) -> None:
    start = 1_700_000_000_000
    async with await Ledger.open(db, signer=key, checkpoint_seconds=5) as ledger:
        await ledger.append(make_entry(1, at=start))
    async with await Ledger.open(
        db, signer=key, checkpoint_seconds=5, on_checkpoint=sink
    ) as ledger:
        await ledger.append(make_entry(2, at=start + 4_000))
        assert sink.published == []
        await ledger.append(make_entry(3, at=start + 5_000))
    assert [c.seq for c in sink.claims(key)] == [3]


async def test_explicit_checkpoint_signs_the_tail_once(
    db: Path, key: SigningKey, sink: Sink
) -> None:
    async with await Ledger.open(db, signer=key, on_checkpoint=sink) as ledger:
        assert await ledger.checkpoint(at=1) is None  # nothing to sign yet
        receipt = await ledger.append(make_entry(1))
        envelope = await ledger.checkpoint(at=2)
        assert envelope is not None
        assert await ledger.checkpoint(at=3) is None
        with pytest.raises(ValueError, match="milliseconds"):
            await ledger.checkpoint(at=-1)
    assert sink.published == [envelope]
    assert sink.claims(key)[0][1:] == (1, receipt.entry_hash, 2)


async def test_sink_failure_does_not_fail_the_append_and_is_retried(
    db: Path, key: SigningKey, sink: Sink
) -> None:
    sink.failures_left = 2
    async with await Ledger.open(db, signer=key, checkpoint_every=1, on_checkpoint=sink) as ledger:
        with capture_logs() as logs:
            first = await ledger.append(make_entry(1))
        assert first.seq == 1
        assert ledger.pending_checkpoints == 1
        assert any(log["event"] == "ledger.checkpoint_publish_failed" for log in logs)
        await ledger.append(make_entry(2))  # second failure: both still queued
        assert ledger.pending_checkpoints == 2
        await ledger.append(make_entry(3))
        assert ledger.pending_checkpoints == 0
    assert [c.seq for c in sink.claims(key)] == [1, 2, 3]


async def test_without_a_sink_checkpoints_stay_in_the_file(db: Path, key: SigningKey) -> None:
    await fill(db, key, 6, None, every=2)
    report = verify_ledger(db, [], trusted(key))
    assert report.ok
    assert (report.checkpoints, report.checkpoint_seq) == (3, 6)


# --- minimization: nothing but identities, vocabulary, codes and time -------------

RAW = "Dear Ms. Smith, re matter 2024-117: settlement draft attached"


@pytest.mark.parametrize(
    ("field", "changes"),
    [
        ("reason_codes[1]", {"reason_codes": ("ok", RAW)}),
        ("reason_codes[0]", {"reason_codes": ("Upper_case",)}),
        ("reason_codes[0]", {"reason_codes": ("a" * 65,)}),
        ("reason_codes[0]", {"reason_codes": ("ok\n",)}),
        ("reason_codes[0]", {"reason_codes": ("_leading",)}),
        ("reason_codes[0]", {"reason_codes": (7,)}),
        ("reason_codes", {"reason_codes": ["ok"]}),
        ("reason_codes", {"reason_codes": ("ok",) * 33}),
        ("operation_hash", {"operation_hash": RAW}),
        ("operation_hash", {"operation_hash": identity_of(1) + "\n"}),
        ("decision_id", {"decision_id": identity_of(1).upper()}),
        ("release_id", {"release_id": "sha256:" + "0" * 63}),
        ("projection_id", {"projection_id": None}),
        ("approval_id", {"approval_id": "bob@example.com"}),
        ("tenant_ref", {"tenant_ref": "Acme Legal LLP"}),
        ("tenant_ref", {"tenant_ref": identity_of("acme")}),  # unkeyed hash of a name
        ("kind", {"kind": RAW}),
        ("disposition", {"disposition": "maybe"}),
        ("status", {"status": RAW}),
        ("at", {"at": -1}),
        ("at", {"at": True}),
        ("at", {"at": 1.5}),
        ("at", {"at": 2**53}),
    ],
)
async def test_disallowed_value_is_refused_before_insert(
    field: str, changes: dict[str, Any], db: Path, key: SigningKey
) -> None:
    async with await Ledger.open(db, signer=key) as ledger:
        with capture_logs() as logs, pytest.raises(EvidenceEntryRejected) as caught:
            await ledger.append(make_entry(1, **changes))
        assert caught.value.field == field
        assert isinstance(caught.value, EvidenceError)
        await ledger.append(make_entry(2))  # the store is still usable
    assert [row[0] for row in snapshot(db)["evidence_entries"]] == [1]
    for value in changes.values():
        if isinstance(value, str):
            assert value not in str(caught.value)
            assert value not in repr(logs)
    assert RAW not in repr(logs)


async def test_non_entry_is_refused(db: Path, key: SigningKey) -> None:
    async with await Ledger.open(db, signer=key) as ledger:
        with pytest.raises(EvidenceEntryRejected):
            await ledger.append({"kind": "decision"})  # type: ignore[arg-type]


EXPECTED_COLUMNS = {
    "ledger_meta": {"singleton", "ledger_id", "schema_version"},
    "evidence_entries": set(ENTRY_COLUMNS),
    "ledger_checkpoints": {"seq", "entry_hash", "at", "envelope"},
}
FREE_TEXT_NAMES = re.compile(
    r"prompt|content|argument|arg|recipient|matter|body|text|message|mail|name|note|comment|detail"
)


def _fresh_schema() -> sqlite3.Connection:
    conn = sqlite3.connect(":memory:", isolation_level=None)
    for statement in DDL:
        conn.execute(statement)
    return conn


def test_schema_has_no_column_that_could_hold_free_text() -> None:
    with closing(_fresh_schema()) as conn:
        for table, expected in EXPECTED_COLUMNS.items():
            info = conn.execute(f"PRAGMA table_info({table})").fetchall()
            names = {column[1] for column in info}
            assert names == expected, table  # a new column is a reviewed change
            for _, name, kind, *_ in info:
                assert FREE_TEXT_NAMES.search(name) is None, name
                assert kind in {"INTEGER", "TEXT", "BLOB"}, (table, name, kind)
            sql = conn.execute(
                "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?", (table,)
            ).fetchone()[0]
            assert sql.rstrip().endswith("STRICT"), table
            for _, name, kind, *_ in info:
                if kind == "TEXT":
                    definition = re.search(rf"^\s*{name} TEXT\b.*$", sql, re.MULTILINE)
                    assert definition is not None, name
                    assert "CHECK" in definition.group(0), name


def test_every_text_column_refuses_free_text_in_sql() -> None:
    """The CHECKs hold even for a writer that bypasses the Python validation."""
    valid = ledger_schema.entry_row(1, GENESIS_HASH, identity_of("e"), make_entry(1))
    with closing(_fresh_schema()) as conn:
        for index, name in enumerate(ENTRY_COLUMNS):
            if name in {"seq", "at"}:
                continue
            row = list(valid)
            row[index] = RAW
            with pytest.raises(sqlite3.IntegrityError, match=r"CHECK|append-only"):
                conn.execute(INSERT_ENTRY, row)
        for index in (0, ENTRY_COLUMNS.index("at")):
            row = list(valid)
            row[index] = RAW
            with pytest.raises(sqlite3.DatabaseError):  # STRICT: no text in INTEGER
                conn.execute(INSERT_ENTRY, row)
        with pytest.raises(sqlite3.IntegrityError, match="CHECK"):
            conn.execute("INSERT INTO ledger_meta VALUES (1, ?, 1)", (RAW,))
        conn.execute(INSERT_ENTRY, valid)
        with pytest.raises(sqlite3.IntegrityError):
            conn.execute("INSERT INTO ledger_checkpoints VALUES (1, ?, 0, x'00')", (RAW,))
        with pytest.raises(sqlite3.DatabaseError):
            conn.execute(
                "INSERT INTO ledger_checkpoints VALUES (1, ?, 0, ?)", (identity_of("e"), RAW)
            )
        conn.execute("INSERT INTO ledger_meta VALUES (1, ?, 1)", (identity_of("ledger"),))
        assert conn.execute("SELECT count(*) FROM evidence_entries").fetchone() == (1,)


@pytest.mark.parametrize(
    "codes",
    [
        '["Dear client"]',
        "[1]",
        "[true]",
        '["a,b"]',
        '[""]',
        '["_a"]',
        '["1a"]',
        ' ["a"]',
        '["a",null]',
        '["a", "b"]',
        '"a"',
        '{"a":1}',
    ],
)
def test_reason_codes_check_in_sql(codes: str) -> None:
    column = ENTRY_COLUMNS.index("reason_codes")
    row = list(ledger_schema.entry_row(1, GENESIS_HASH, identity_of("e"), make_entry(1)))
    with closing(_fresh_schema()) as conn:
        for accepted in ("[]", '["a","b_2"]'):
            row[column] = accepted
            conn.execute("SAVEPOINT probe")
            conn.execute(INSERT_ENTRY, row)
            conn.execute("ROLLBACK TO probe")
            conn.execute("RELEASE probe")
        row[column] = codes
        with pytest.raises(sqlite3.IntegrityError, match="CHECK"):
            conn.execute(INSERT_ENTRY, row)


def test_sql_column_lists_follow_entry_columns() -> None:
    for statement in (INSERT_ENTRY, SELECT_ENTRIES_AFTER):
        listed = re.findall(r"\b[a-z_]+\b", statement.split("FROM")[0].split("VALUES")[0])
        assert [word for word in listed if word in ENTRY_COLUMNS] == list(ENTRY_COLUMNS)


# --- unavailable store ------------------------------------------------------------


async def test_open_under_a_file_is_unavailable(tmp_path: Path, key: SigningKey) -> None:
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    with pytest.raises(EvidenceStoreUnavailable) as caught:
        await Ledger.open(blocker / "evidence.db", signer=key)
    assert isinstance(caught.value.__cause__, sqlite3.OperationalError)
    assert caught.value.reason_code == "evidence_store_unavailable"


@pytest.mark.parametrize("path", ["garbage", ":memory:"])
async def test_open_of_a_non_ledger_is_unavailable(
    path: str, tmp_path: Path, key: SigningKey
) -> None:
    target = tmp_path / path if path != ":memory:" else path
    if path == "garbage":
        (tmp_path / path).write_bytes(b"not sqlite" * 500)
    with pytest.raises(EvidenceStoreUnavailable) as caught:
        await Ledger.open(target, signer=key)
    assert isinstance(caught.value.__cause__, sqlite3.DatabaseError)


async def test_open_of_an_unsupported_schema_version_is_unavailable(
    db: Path, key: SigningKey
) -> None:
    with attacker(db) as conn:
        for statement in DDL:
            conn.execute(statement)
        future = ledger_schema.SCHEMA_VERSION + 1  # 2 until schema 2 was written
        conn.execute(f"INSERT INTO ledger_meta VALUES (1, ?, {future})", (identity_of("future"),))
    with pytest.raises(EvidenceStoreUnavailable, match="opened"):
        await Ledger.open(db, signer=key)


async def test_closed_store_is_unavailable(db: Path, key: SigningKey) -> None:
    ledger = await Ledger.open(db, signer=key)
    await ledger.append(make_entry(1))
    await ledger.close()
    await ledger.close()  # idempotent
    with pytest.raises(EvidenceStoreUnavailable, match="closed"):
        await ledger.append(make_entry(2))
    with pytest.raises(EvidenceStoreUnavailable, match="closed"):
        await ledger.checkpoint(at=5)


async def test_lock_held_past_the_busy_timeout_is_unavailable(db: Path, key: SigningKey) -> None:
    async with await Ledger.open(db, signer=key, busy_timeout_ms=50) as ledger:
        await ledger.append(make_entry(1))
        with attacker(db) as holder:
            holder.execute("BEGIN EXCLUSIVE")
            with pytest.raises(EvidenceStoreUnavailable) as caught:
                await ledger.append(make_entry(2))
            assert isinstance(caught.value.__cause__, sqlite3.OperationalError)
            assert "locked" in str(caught.value.__cause__)
            holder.execute("ROLLBACK")
        assert (await ledger.append(make_entry(3))).seq == 2  # recovers, chain intact
    assert verify_ledger(db, [], trusted(key)).ok


async def test_full_disk_is_unavailable(db: Path, key: SigningKey) -> None:
    async with await Ledger.open(db, signer=key) as ledger:
        await ledger.append(make_entry(1))

        def fill_disk(conn: sqlite3.Connection) -> None:
            (pages,) = conn.execute("PRAGMA page_count").fetchone()
            conn.execute(f"PRAGMA max_page_count = {pages}")

        await ledger._worker.run(fill_disk)
        failure: EvidenceStoreUnavailable | None = None
        for i in range(2, 200):
            try:
                await ledger.append(make_entry(i, reason_codes=("x" * 64,) * 32))
            except EvidenceStoreUnavailable as exc:
                failure = exc
                break
        assert failure is not None
        assert "full" in str(failure.__cause__)
    assert verify_ledger(db, [], trusted(key)).ok


async def test_open_refuses_a_tampered_unsigned_tail(db: Path, key: SigningKey) -> None:
    await fill(db, key, 6, every=4)
    with attacker(db) as conn:
        drop_guards(conn)
        conn.execute("UPDATE evidence_entries SET status = 'released' WHERE seq = 6")
    with pytest.raises(EvidenceStoreUnavailable) as caught:
        await Ledger.open(db, signer=key)
    cause = caught.value.__cause__
    assert isinstance(cause, LedgerIntegrityError)
    assert (cause.reason, cause.seq) == (ENTRY_HASH_MISMATCH, 6)


async def test_open_refuses_when_the_checkpointed_entry_changed(db: Path, key: SigningKey) -> None:
    await fill(db, key, 6, every=4)
    with attacker(db) as conn:
        drop_guards(conn)
        conn.execute("UPDATE evidence_entries SET entry_hash = ? WHERE seq = 4", (identity_of(0),))
    with pytest.raises(EvidenceStoreUnavailable) as caught:
        await Ledger.open(db, signer=key)
    cause = caught.value.__cause__
    assert isinstance(cause, LedgerIntegrityError)
    assert (cause.reason, cause.seq) == (CHECKPOINT_MISMATCH, 4)


async def test_open_rejects_bad_configuration(db: Path, key: SigningKey) -> None:
    with pytest.raises(ValueError, match="checkpoint_every"):
        await Ledger.open(db, signer=key, checkpoint_every=0)
    with pytest.raises(ValueError, match="checkpoint_seconds"):
        await Ledger.open(db, signer=key, checkpoint_seconds=0)
    with pytest.raises(ValueError, match="busy_timeout_ms"):
        await Ledger.open(db, signer=key, busy_timeout_ms=-1)
    assert not db.exists()  # refused before touching the disk


# --- export for auditors ----------------------------------------------------------


async def test_export_jsonl_round_trip(db: Path, key: SigningKey) -> None:
    entries = [
        make_entry(1),
        make_entry(2, kind="transition", status="approved", approval_id=identity_of("a")),
        make_entry(3, kind="output", disposition=None, reason_codes=()),
    ]
    async with await Ledger.open(db, signer=key) as ledger:
        receipts = [await ledger.append(entry) for entry in entries]
    out = io.StringIO()
    assert export_jsonl(db, out) == 3
    lines = out.getvalue().splitlines(keepends=True)
    prev = GENESIS_HASH
    for line, entry, receipt in zip(lines, entries, receipts, strict=True):
        assert canonical_bytes(parse_canonical(line.rstrip("\n"))) == line.rstrip("\n").encode()
        stored = parse_export_line(line)
        assert stored.entry == entry
        assert (stored.seq, stored.prev_hash, stored.entry_hash) == (
            receipt.seq,
            prev,
            receipt.entry_hash,
        )
        assert entry_hash_of(stored.seq, stored.prev_hash, stored.entry) == stored.entry_hash
        prev = stored.entry_hash


@pytest.mark.parametrize(
    "line",
    ["not json", '{"seq":1}', "[1]", '{"a":1}'],
)
def test_export_line_that_is_not_an_entry_is_refused(line: str) -> None:
    with pytest.raises(MalformedEntry):
        parse_export_line(line)


async def test_export_line_with_non_list_reason_codes_is_refused(db: Path, key: SigningKey) -> None:
    await fill(db, key, 1)
    out = io.StringIO()
    export_jsonl(db, out)
    document = parse_canonical(out.getvalue().strip())
    for bad in ("ok", ["Not OK"]):
        document["reason_codes"] = bad
        with pytest.raises(MalformedEntry):
            parse_export_line(canonical_bytes(document).decode())


def test_export_of_a_missing_file_is_unavailable(tmp_path: Path) -> None:
    with pytest.raises(EvidenceStoreUnavailable):
        export_jsonl(tmp_path / "missing.db", io.StringIO())
