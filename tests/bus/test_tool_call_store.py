"""Contract tests of the tool-call accounting store, on both backends.

``smf_assurance.pipeline.stores.tool_calls``: a stop stands until a clear removes exactly it (a
newer stop survives a clear of an older one, also when the two race on two
instances); notes come back oldest first, a note made again is the newest, and
pruning keeps the in-memory index's bounds; a stop that does not decode is refused,
never read as "not stopped"; a note that does not decode is left out (its id is
then uncovered: fails closed); a closed store is unavailable. Every test runs on
the SQLite store (a file of its own, each instance its own connection) and the KV
store (a real nats-server, each instance its own connection).

The SQLite section shows what only the ledger file gives: a note and a clear ride
in the transaction of an evidence entry, ONE COMMIT in SQLite's statement trace, and
a clear whose entry cannot be written removes nothing.

What these do not prove: anything through the gate (tests/bus/test_tool_call_restart.py
and tests/bus/test_replica_sync.py), or a race on an R3 cluster (the compare-and-set
loop is the claim store's, tested there).
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Protocol

import msgspec
import pytest
from nats.js.kv import KeyValue

from smf_assurance.ops.local.natsserver import EmbeddedNatsServer
from smf_assurance.pipeline.stores import tool_calls_kv
from smf_assurance.pipeline.stores.kv import token
from smf_assurance.pipeline.stores.ledger import EvidenceEntry, EvidenceStoreUnavailable, Ledger
from smf_assurance.pipeline.stores.sqlite_worker import StoreUnavailable
from smf_assurance.pipeline.stores.tool_calls import (
    SqliteToolCallStore,
    Stop,
    ToolCallStore,
    ToolCallStoreUnavailable,
)
from smf_assurance.pipeline.stores.tool_calls_kv import KvToolCallStore
from smf_assurance.subjects.keys import generate_signing_key
from tests.support.builders import AT_MS, fake_identity
from tests.support.bus_helpers import wait_for
from tests.support.store_backends import (
    KvConnections,
    SqliteFile,
    StoreBackend,
    only_kv,
    opened_on_backend,
    over_backends,
)
from tests.support.store_helpers import statements

T0: Final = AT_MS
TENANT: Final = "hmac-sha256:" + "0" * 64


def stop(runtime_id: str, n: int = 1) -> Stop:
    return Stop(
        runtime_id=runtime_id,
        reason="runtime_stopped_ungated_tool_result",
        operation_hash=fake_identity(f"operation-{runtime_id}-{n}"),
        decision_id=fake_identity(f"decision-{runtime_id}-{n}"),
        tenant_ref=TENANT,
        stopped_at=T0 + n,
    )


class Backend(StoreBackend[ToolCallStore], Protocol):
    async def corrupt_stop(self, runtime_id: str) -> None:
        """Store, around the store, a stop for ``runtime_id`` that does not decode."""
        ...

    async def corrupt_note(self, runtime_id: str, tool_call_id: str) -> None: ...


@dataclass
class SqliteBackend(SqliteFile):
    async def open(self) -> SqliteToolCallStore:
        return await SqliteToolCallStore.open(self.path)

    def _write(self, sql: str, row: tuple[object, ...]) -> None:
        with sqlite3.connect(self.path) as conn:
            conn.execute(sql, row)

    async def corrupt_stop(self, runtime_id: str) -> None:
        # a row whose ids are not identities: no write of the store makes one
        row = (runtime_id, "runtime_stopped_ungated_tool_result", "x", "y", TENANT, T0)
        self._write("INSERT OR REPLACE INTO runtime_stops VALUES (?, ?, ?, ?, ?, ?)", row)

    async def corrupt_note(self, runtime_id: str, tool_call_id: str) -> None:
        self._write(
            "INSERT INTO decided_tool_calls VALUES (?, ?, ?)", (runtime_id, tool_call_id, -1)
        )


@dataclass
class KvBackend(KvConnections):
    async def open(self) -> KvToolCallStore:
        return await KvToolCallStore.open_bucket(await self.jetstream())

    async def bucket(self) -> KeyValue:
        await self.open()  # the bucket exists
        return await (await self.jetstream()).key_value(tool_calls_kv.BUCKET)

    async def corrupt_stop(self, runtime_id: str) -> None:
        await (await self.bucket()).put(tool_calls_kv.STOP_KEY + token(runtime_id), b"{not json")

    async def corrupt_note(self, runtime_id: str, tool_call_id: str) -> None:
        key = f"{tool_calls_kv.NOTE_KEY}{token(runtime_id)}.{token(tool_call_id)}"
        await (await self.bucket()).put(key, b'{"runtime_id": 7}')


backend = over_backends(lambda tmp_path: SqliteBackend(tmp_path / "calls.db"), KvBackend)
store = opened_on_backend()


# --- the contract: stops ---------------------------------------------------------------


async def test_a_stop_stands_for_every_instance_until_it_is_cleared(
    backend: Backend, store: ToolCallStore
) -> None:
    assert await store.stops() == {}
    assert await store.stop_of("r1") is None
    await store.stop(stop("r1"))
    await store.stop(stop("r2"))
    other = await backend.open()  # another connection: what a restarted gate reads
    assert await other.stops() == {"r1": stop("r1"), "r2": stop("r2")}
    assert await other.stop_of("r1") == stop("r1")
    assert await store.clear(stop("r1")) is True
    assert await other.stops() == {"r2": stop("r2")}
    assert await other.stop_of("r1") is None
    assert await store.clear(stop("r1")) is True  # nothing stands: nothing to lift
    await other.close()


async def test_a_newer_stop_replaces_the_older_and_survives_its_clear(
    store: ToolCallStore,
) -> None:
    await store.stop(stop("r1", 1))
    await store.stop(stop("r1", 2))
    assert await store.stop_of("r1") == stop("r1", 2)
    assert await store.clear(stop("r1", 1)) is False  # the operator saw the older one
    assert await store.stop_of("r1") == stop("r1", 2)
    assert await store.clear(stop("r1", 2)) is True
    assert await store.stop_of("r1") is None


async def test_a_stop_racing_a_clear_on_two_instances_always_stands(backend: Backend) -> None:
    """Whichever lands first, the newer stop stands: a clear removes only the stop it
    names, so it either finds the newer one and refuses, or is overtaken by it."""
    one, two = await backend.open(), await backend.open()
    for n in range(1, 21):
        await one.stop(stop("r1", 2 * n - 1))
        cleared, _ = await asyncio.gather(
            one.clear(stop("r1", 2 * n - 1)), two.stop(stop("r1", 2 * n))
        )
        assert await one.stop_of("r1") == stop("r1", 2 * n), cleared
    await one.close()
    await two.close()


async def test_a_stop_that_does_not_decode_is_refused_never_read_as_not_stopped(
    backend: Backend, store: ToolCallStore
) -> None:
    await store.stop(stop("r2"))
    await backend.corrupt_stop("r1")
    with pytest.raises(ToolCallStoreUnavailable):
        await store.stop_of("r1")
    with pytest.raises(ToolCallStoreUnavailable):
        await store.stops()  # a gate does not start on it
    assert await store.stop_of("r2") == stop("r2")


async def test_a_closed_store_is_unavailable(backend: Backend) -> None:
    opened = await backend.open()
    await opened.close()
    with pytest.raises(StoreUnavailable):
        await opened.stop(stop("r1"))
    with pytest.raises(StoreUnavailable):
        await opened.stops()
    with pytest.raises(StoreUnavailable):
        await opened.note("r1", "c1", T0)


# --- the contract: notes ---------------------------------------------------------------


async def test_notes_come_back_oldest_first_and_a_note_made_again_is_the_newest(
    backend: Backend, store: ToolCallStore
) -> None:
    for runtime_id, call_id in (("r1", "a"), ("r2", "a"), ("r1", "b"), ("r1", "a")):
        await store.note(runtime_id, call_id, T0)
    other = await backend.open()
    assert await other.notes() == [("r2", "a"), ("r1", "b"), ("r1", "a")]
    await other.close()


async def test_pruning_keeps_the_index_bounds_oldest_first(store: ToolCallStore) -> None:
    for call_id in ("a", "b", "c", "d"):
        await store.note("r1", call_id, T0)
    await store.note("r2", "x", T0)
    await store.note("r3", "x", T0)
    await store.note("r1", "b", T0)  # r1 noted last: the most recent runtime
    # r2 is the least recent runtime; r1 keeps its two newest, d and b
    assert await store.prune_notes(per_runtime=2, max_runtimes=2) == 3
    assert await store.notes() == [("r1", "d"), ("r3", "x"), ("r1", "b")]
    assert await store.prune_notes(per_runtime=2, max_runtimes=2) == 0
    with pytest.raises(ValueError, match="at least one"):
        await store.prune_notes(per_runtime=0, max_runtimes=2)


async def test_a_note_that_does_not_decode_is_left_out(
    backend: Backend, store: ToolCallStore
) -> None:
    await store.note("r1", "a", T0)
    await backend.corrupt_note("r1", "b")
    await store.note("r1", "c", T0)
    assert await store.notes() == [("r1", "a"), ("r1", "c")]


# --- KV only --------------------------------------------------------------------------


kv_backend = only_kv(KvBackend)


async def test_kv_a_stop_filed_under_another_runtime_is_refused(kv_backend: KvBackend) -> None:
    """A valid stop of r1 copied under r9's key (by someone who can write the bucket) is
    not r9's stop: refused, never read as r9 "not stopped" or as stopped for r1."""
    store = await kv_backend.open()
    bucket = await kv_backend.bucket()
    await bucket.put(tool_calls_kv.STOP_KEY + token("r9"), msgspec.json.encode(stop("r1")))
    with pytest.raises(ToolCallStoreUnavailable, match="another runtime"):
        await store.stop_of("r9")
    with pytest.raises(ToolCallStoreUnavailable):
        await store.stops()


async def test_kv_a_note_filed_under_another_call_is_left_out(kv_backend: KvBackend) -> None:
    store = await kv_backend.open()
    bucket = await kv_backend.bucket()
    note = msgspec.json.encode({"runtime_id": "r1", "tool_call_id": "a", "noted_at": T0})
    await bucket.put(f"{tool_calls_kv.NOTE_KEY}{token('r1')}.{token('b')}", note)
    assert await store.notes() == []


async def test_kv_outage_is_unavailable_never_not_stopped(
    nats_server: EmbeddedNatsServer,
) -> None:
    """Server stopped: every read and write raises ToolCallStoreUnavailable, none answers
    "not stopped"; after a restart the stop made before the outage still stands."""
    kv_backend = KvBackend(nats_server)
    try:
        store = await kv_backend.open()
        await store.stop(stop("r1"))
        nats_server.stop()
        steps: list[Callable[[], Awaitable[object]]] = [
            lambda: store.stop_of("r1"),
            store.stops,
            lambda: store.stop(stop("r1", 2)),
            lambda: store.clear(stop("r1")),
            lambda: store.note("r1", "c1", T0),
            store.notes,
        ]
        failures = await asyncio.wait_for(
            asyncio.gather(*(step() for step in steps), return_exceptions=True), timeout=60
        )
        for step, failure in zip(steps, failures, strict=True):
            assert isinstance(failure, ToolCallStoreUnavailable), (step, failure)
        nats_server.start()
        await wait_for(lambda: all(c.is_connected for c in kv_backend.connections), timeout=10)
        assert await store.stop_of("r1") == stop("r1")
    finally:
        await kv_backend.aclose()


async def test_kv_open_refuses_a_bucket_with_other_settings(kv_backend: KvBackend) -> None:
    client = await kv_backend.connect()
    js = client.jetstream(timeout=2)
    await js.create_key_value(bucket=tool_calls_kv.BUCKET, history=5)
    with pytest.raises(ToolCallStoreUnavailable, match="other settings"):
        await KvToolCallStore.open_bucket(js)


# --- SQLite: beside the evidence, in the ledger file -----------------------


def entry(n: int) -> EvidenceEntry:
    return EvidenceEntry(
        kind="decision",
        operation_hash=fake_identity("op"),
        decision_id=fake_identity(f"d{n}"),
        release_id=fake_identity("release"),
        projection_id=fake_identity("projection"),
        tenant_ref=TENANT,
        at=T0 + n,
        disposition="deny",
        reason_codes=("no_applicable_policy_for_consequential_operation",),
    )


async def test_a_note_and_a_clear_ride_in_the_evidence_transaction(tmp_path: Path) -> None:
    """``note_beside`` and ``clear_beside`` on the ledger file: each is written by the
    COMMIT of its evidence entry and by no commit of its own (SQLite's statement
    trace); read back from a second connection."""
    ledger_file = tmp_path / "ledger.db"
    ledger = await Ledger.open(ledger_file, signer=generate_signing_key())
    calls = await SqliteToolCallStore.in_ledger(ledger.worker)
    await calls.stop(stop("r1"))
    seen = await statements(ledger.worker)

    await ledger.append_beside(entry(1), calls.note_beside("r1", "c1", T0))
    assert [s for s in seen if s == "COMMIT"] == ["COMMIT"]
    assert any(s.startswith("INSERT OR REPLACE INTO decided_tool_calls") for s in seen)
    seen.clear()
    _, cleared = await ledger.append_beside(entry(2), calls.clear_beside(stop("r1")))
    assert cleared is True
    assert [s for s in seen if s == "COMMIT"] == ["COMMIT"]

    other = await SqliteToolCallStore.open(ledger_file)
    assert await other.notes() == [("r1", "c1")]
    assert await other.stops() == {}
    await other.close()
    await calls.close()  # ends the loan; the ledger's connection stays
    with pytest.raises(StoreUnavailable):
        calls.note_beside("r1", "c2", T0)
    with pytest.raises(StoreUnavailable):
        calls.clear_beside(stop("r1"))
    await ledger.close()


async def test_a_clear_whose_entry_cannot_be_written_removes_nothing(tmp_path: Path) -> None:
    """The entry fails inside the transaction (a trigger another connection put on the
    ledger, as a full disk would fail it): the clear's delete is rolled back with it."""
    ledger_file = tmp_path / "ledger.db"
    ledger = await Ledger.open(ledger_file, signer=generate_signing_key())
    calls = await SqliteToolCallStore.in_ledger(ledger.worker)
    await calls.stop(stop("r1"))
    with sqlite3.connect(ledger_file) as conn:
        conn.execute(
            "CREATE TRIGGER refuse_entries BEFORE INSERT ON evidence_entries"
            " BEGIN SELECT RAISE(ABORT, 'no room'); END"
        )
    with pytest.raises(EvidenceStoreUnavailable):
        await ledger.append_beside(entry(1), calls.clear_beside(stop("r1")))
    assert await calls.stop_of("r1") == stop("r1")
    await calls.close()
    await ledger.close()
