"""Contract tests of the direct-allow order book, on both backends.

``smf_assurance.pipeline.stores.orders``: an order is recorded once, settled once
(``executing -> consumed | failed | execution_unknown``), listed as overdue
only while it is open, and pruned only once settled. Every test runs on the
SQLite book (the gate's claim file, beside the claims table) and the KV book
(the claim bucket on a real nats-server), each instance on its own connection.
The KV section checks what only a NATS backend has: a closed store and a
tampered value fail closed, and the claims in the same bucket are untouched.

What these do not prove: anything through the gate (``tests/bus/test_direct_outcomes.py``
does that), or a race on an R3 cluster (the compare-and-set loop is the claim
store's, tested there).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import msgspec
import pytest

from smf_assurance.pipeline.stores import claims_kv
from smf_assurance.pipeline.stores.claims import ClaimAndOrder, ClaimStore
from smf_assurance.pipeline.stores.claims_kv import KvClaimStore
from smf_assurance.pipeline.stores.kv import token
from smf_assurance.pipeline.stores.ledger import EvidenceEntry, Ledger
from smf_assurance.pipeline.stores.orders import OrderBook, OrderRecord, SqliteOrderBook
from smf_assurance.pipeline.stores.orders_kv import ORDER_KEY, KvOrderBook
from smf_assurance.pipeline.stores.sqlite_worker import StoreUnavailable
from smf_assurance.subjects.keys import generate_signing_key
from tests.support.builders import AT_MS, fake_identity
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


def order(name: str, at: int = T0, **changes: Any) -> OrderRecord:
    record = OrderRecord(
        order_id=fake_identity(name).removeprefix("sha256:"),
        proposal_id=f"proposal-{name}",
        operation_hash=fake_identity(f"operation-{name}"),
        decision_id=fake_identity(f"decision-{name}"),
        release_id="release-1",
        projection_id=fake_identity("projection"),
        tenant_ref="hmac-sha256:" + "0" * 64,
        executor_role="connector",
        executor_id="dms",
        dispatched_at=at,
    )
    return msgspec.structs.replace(record, **changes)


@dataclass
class SqliteBackend(SqliteFile):
    async def open(self) -> OrderBook:
        # As the gate opens it: the book on the claim store's worker (one file, one
        # connection), closed with it.
        return SqliteOrderBook.beside((await ClaimStore.open(self.path)).worker)


@dataclass
class KvBackend(KvConnections):
    async def open(self) -> KvOrderBook:
        return await KvOrderBook.open_bucket(await self.jetstream())


Backend = StoreBackend[OrderBook]
backend = over_backends(lambda tmp_path: SqliteBackend(tmp_path / "claims.db"), KvBackend)
book = opened_on_backend()


# --- the contract -----------------------------------------------------------------


async def test_an_order_is_recorded_once(book: OrderBook) -> None:
    first = order("a")
    assert await book.open(first) is True
    assert await book.open(msgspec.structs.replace(first, executor_id="court-efiling")) is False
    assert await book.get(first.order_id) == first
    assert await book.get(order("never").order_id) is None


async def test_an_order_is_recorded_executing_only(book: OrderBook) -> None:
    with pytest.raises(ValueError, match="executing"):
        await book.open(order("a", state="consumed", settled_at=T0))
    assert await book.get(order("a").order_id) is None


@pytest.mark.parametrize("outcome", ["consumed", "failed", "execution_unknown"])
async def test_an_order_settles_once(book: OrderBook, outcome: Any) -> None:
    recorded = order("a")
    await book.open(recorded)
    settled = await book.settle(recorded.order_id, outcome, T0 + 5)
    assert settled == msgspec.structs.replace(recorded, state=outcome, settled_at=T0 + 5)
    for later in ("consumed", "failed", "execution_unknown"):
        assert await book.settle(recorded.order_id, later, T0 + 6) is None
    assert await book.get(recorded.order_id) == settled
    assert await book.settle(order("never").order_id, "consumed", T0) is None


async def test_racing_settles_on_two_instances_have_one_winner(
    backend: Backend, book: OrderBook
) -> None:
    """A report, its replay and a sweep on two gates: exactly one records."""
    other = await backend.open()
    try:
        for round_no in range(10):
            recorded = order(f"race-{round_no}")
            await book.open(recorded)
            outcomes: list[Any] = ["consumed", "failed", "execution_unknown"] * 4
            results = await asyncio.gather(
                *(
                    store.settle(recorded.order_id, outcome, T0)
                    for store, outcome in zip([book, other] * 6, outcomes, strict=True)
                )
            )
            won = [r for r in results if r is not None]
            assert len(won) == 1, results
            assert await book.get(recorded.order_id) == won[0]
    finally:
        await other.close()


async def test_overdue_lists_open_orders_given_before_the_cutoff(book: OrderBook) -> None:
    old, settled, new = order("old", T0), order("settled", T0), order("new", T0 + 10)
    for recorded in (old, settled, new):
        await book.open(recorded)
    await book.settle(settled.order_id, "consumed", T0 + 1)
    assert [o.order_id for o in await book.overdue(T0 + 10)] == [old.order_id]
    assert {o.order_id for o in await book.overdue(T0 + 11)} == {old.order_id, new.order_id}


async def test_prune_forgets_settled_orders_only(book: OrderBook) -> None:
    waiting, done, recent = order("waiting", T0), order("done", T0), order("recent", T0)
    for recorded in (waiting, done, recent):
        await book.open(recorded)
    await book.settle(done.order_id, "failed", T0 + 1)
    await book.settle(recent.order_id, "consumed", T0 + 20)

    assert await book.prune(T0 + 10) == 1

    assert await book.get(done.order_id) is None
    waiting_now = await book.get(waiting.order_id)
    assert waiting_now is not None
    assert waiting_now.state == "executing"  # never forgotten while open
    assert await book.get(recent.order_id) is not None
    assert await book.prune(T0 + 10) == 0


# --- KV only ----------------------------------------------------------------------


kv_backend = only_kv(KvBackend)


async def test_kv_book_shares_the_claim_bucket_and_leaves_claims_alone(
    kv_backend: KvBackend,
) -> None:
    client = await kv_backend.connect()
    claims = await KvClaimStore.open_bucket(client.jetstream(timeout=2))
    book = await kv_backend.open()
    assert await claims.claim("p-1", fake_identity("op"), fake_identity("d"), T0) is True
    done = order("a")
    await book.open(done)
    await book.settle(done.order_id, "consumed", T0)
    assert await claims.prune(T0 + 1) == 1  # the claim, not the order
    assert await book.get(done.order_id) is not None
    assert await book.prune(T0 + 1) == 1  # the order, and no claim
    assert await claims.state("p-1") is None


async def test_kv_book_fails_closed(kv_backend: KvBackend) -> None:
    book = await kv_backend.open()
    recorded = order("a")
    await book.open(recorded)
    bucket = await (await kv_backend.connect()).jetstream(timeout=2).key_value(claims_kv.BUCKET)
    await bucket.put(ORDER_KEY + token(recorded.order_id), b"{not an order")
    with pytest.raises(StoreUnavailable):
        await book.get(recorded.order_id)
    with pytest.raises(StoreUnavailable):
        await book.overdue(T0 + 1)
    # A valid record filed under another order's key is refused too.
    other = order("b")
    await bucket.put(ORDER_KEY + token(other.order_id), msgspec.json.encode(order("c")))
    with pytest.raises(StoreUnavailable):
        await book.get(other.order_id)
    await book.close()
    with pytest.raises(StoreUnavailable):
        await book.open(order("d"))


# --- one transaction for a claim, its order and its evidence ---------------


async def test_a_claim_and_its_order_commit_in_the_evidence_transaction(tmp_path: Path) -> None:
    """``ClaimStore.claim_and_record_beside`` on the ledger file: the first claim of a
    proposal, its order and the decision's evidence entry are written by ONE
    COMMIT (seen in SQLite's statement trace); a replay writes neither claim nor
    order (its entry is still evidence); an order id already recorded leaves the
    book as it was; an order that is not ``executing`` is refused before
    anything is written; a closed claim store refuses before the ledger is
    asked. Each effect is read back from a second connection on the file."""
    ledger_file = tmp_path / "ledger.db"
    ledger = await Ledger.open(ledger_file, signer=generate_signing_key())
    claims = await ClaimStore.in_ledger(ledger.worker)
    book = SqliteOrderBook.beside(claims.worker)
    seen = await statements(ledger.worker)

    async def claim(proposal: str, record: OrderRecord | None, n: int) -> ClaimAndOrder:
        beside = claims.claim_and_record_beside(
            proposal, fake_identity("op"), fake_identity(f"d{n}"), T0, record
        )
        receipt, written = await ledger.append_beside(entry(n), beside)
        assert receipt.seq == n
        assert isinstance(written, ClaimAndOrder)
        return written

    first = order("a")
    assert await claim(first.proposal_id, first, 1) == ClaimAndOrder(True, True)
    assert [s for s in seen if s == "COMMIT"] == ["COMMIT"]
    other = await ClaimStore.open(ledger_file)
    other_book = SqliteOrderBook.beside(other.worker)
    assert await other.state(first.proposal_id) == "claimed"
    assert await other_book.get(first.order_id) == first

    assert await claim(first.proposal_id, order("b"), 2) == ClaimAndOrder(False, False)
    assert await other_book.get(order("b").order_id) is None

    clash = msgspec.structs.replace(order("c"), order_id=first.order_id)
    assert await claim(clash.proposal_id, clash, 3) == ClaimAndOrder(True, False)
    assert await other_book.get(first.order_id) == first

    assert await claim("p-alone", None, 4) == ClaimAndOrder(True, False)
    assert await other.state("p-alone") == "claimed"

    with pytest.raises(ValueError, match="executing"):
        claims.claim_and_record_beside(
            "p-settled", fake_identity("op"), "d", T0, order("d", state="consumed")
        )
    await book.close()  # ends the loan; the ledger's connection stays
    with pytest.raises(StoreUnavailable):
        claims.claim_and_record_beside("p-late", fake_identity("op"), "d", T0, None)
    assert await other.state("p-late") is None
    await other.close()
    await claims.close()
    await ledger.close()


async def test_a_settle_beside_a_closed_claim_store_is_refused(tmp_path: Path) -> None:
    """``ClaimStore.settle_beside`` writes in the LEDGER's transaction, on a connection
    that outlives the claim store: a closed store must refuse before the ledger is
    asked, or a claim would be settled by a store the gate has closed. The settle
    before the close lands; the one after is refused, and the claim still reads as
    the first settle left it (from a second connection on the file)."""
    ledger_file = tmp_path / "ledger.db"
    ledger = await Ledger.open(ledger_file, signer=generate_signing_key())
    claims = await ClaimStore.in_ledger(ledger.worker)
    beside = claims.claim_and_record_beside("p-1", fake_identity("op"), "d", T0, None)
    await ledger.append_beside(entry(1), beside)
    assert await ledger.write_beside(claims.settle_beside("p-1", "published")) is None
    other = await ClaimStore.open(ledger_file)
    assert await other.state("p-1") == "published"
    await claims.close()
    with pytest.raises(StoreUnavailable, match="closed"):
        claims.settle_beside("p-1", "failed")
    await ledger.write_beside(lambda _conn: None)  # the ledger still commits
    assert await other.state("p-1") == "published"
    await other.close()
    await ledger.close()


def entry(n: int) -> EvidenceEntry:
    return EvidenceEntry(
        kind="decision",
        operation_hash=fake_identity("op"),
        decision_id=fake_identity(f"d{n}"),
        release_id=fake_identity("release"),
        projection_id=fake_identity("projection"),
        tenant_ref="hmac-sha256:" + "0" * 64,
        at=T0 + n,
        disposition="allow",
        reason_codes=("retention_schedule_deletion",),
    )
