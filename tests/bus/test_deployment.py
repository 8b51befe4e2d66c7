"""An allow's claim and order are written with its decision, on both deployments.

``smf_assurance.pipeline.assembly.deployment``: on one machine the claim and the order
ride in the transaction of the decision's evidence entry; on a cluster they follow
its commit, in KV buckets on a real nats-server. Each test opens the stores as
``start_gate`` does (``deployment_for(config).open``), writes through
``Deployment.record`` and reads the effect back: the ledger file, the claim store and
the order book.

What these do not prove: anything through a running gate (``tests/bus/test_bus_properties.py``,
``tests/bus/test_cluster.py`` and ``tests/bus/test_direct_outcomes.py`` do), or a race on an
R3 cluster (the claim store's compare-and-set, ``tests/tools/test_claims.py``).
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Final

import nats
import pytest

from smf_assurance.ops.local.natsserver import EmbeddedNatsServer
from smf_assurance.ops.local.stack import gate_config
from smf_assurance.ops.local.state import StateDir
from smf_assurance.pipeline.assembly.config import ClusterSettings, GateConfig
from smf_assurance.pipeline.assembly.deployment import Placed, deployment_for
from smf_assurance.pipeline.chain.deployment import AllowClaim, Recording
from smf_assurance.pipeline.stores.claims import CLAIM_STORE_UNAVAILABLE, ClaimAndOrder
from smf_assurance.pipeline.stores.evidence import EvidenceWriter
from smf_assurance.pipeline.stores.ledger import EvidenceEntry, Ledger
from smf_assurance.pipeline.stores.ledger_audit import decision_entries
from smf_assurance.pipeline.stores.orders import OrderRecord
from smf_assurance.pipeline.stores.sqlite_worker import StoreUnavailable
from smf_assurance.subjects.messages import order_id_for
from tests.support.builders import AT_MS, Decided, fake_identity

PROPOSAL: Final = "proposal-1"
OPERATION: Final = fake_identity("operation")
KINDS: Final = ("one_machine", "cluster")


@dataclass
class Opened:
    kind: str
    config: GateConfig
    ledger: Ledger
    placed: Placed
    evidence: EvidenceWriter


@contextlib.asynccontextmanager
async def opened_as(
    kind: str, state: StateDir, server: EmbeddedNatsServer
) -> AsyncIterator[Opened]:
    cluster = ClusterSettings(replicas=1) if kind == "cluster" else None
    config = gate_config(state, server.url, cluster=cluster)
    nc = await nats.connect(server.url, connect_timeout=2)
    try:
        async with contextlib.AsyncExitStack() as undo:
            ledger = await Ledger.open(config.stores.ledger, signer=config.gate_key)
            undo.push_async_callback(ledger.close)
            placed = await deployment_for(config).open(
                config, nc.jetstream(timeout=2), ledger, undo
            )
            evidence = EvidenceWriter(ledger, config.tenant_key, config.clock)
            yield Opened(kind, config, ledger, placed, evidence)
    finally:
        await nc.close()


@pytest.fixture(params=KINDS)
async def opened(
    request: pytest.FixtureRequest, state: StateDir, nats_server: EmbeddedNatsServer
) -> AsyncIterator[Opened]:
    async with opened_as(request.param, state, nats_server) as built:
        yield built


def decision(n: int) -> str:
    return fake_identity(f"decision-{n}")


def allow(n: int) -> EvidenceEntry:
    return EvidenceEntry(
        kind="decision",
        operation_hash=OPERATION,
        decision_id=decision(n),
        release_id=fake_identity("release"),
        projection_id=fake_identity("projection"),
        tenant_ref="hmac-sha256:" + "0" * 64,
        at=AT_MS + n,
        disposition="allow",
        reason_codes=("retention_schedule_deletion",),
    )


def order(n: int) -> OrderRecord:
    return OrderRecord(
        order_id=order_id_for(Decided(OPERATION, decision(n))),
        proposal_id=PROPOSAL,
        operation_hash=OPERATION,
        decision_id=decision(n),
        release_id=fake_identity("release"),
        projection_id=fake_identity("projection"),
        tenant_ref="hmac-sha256:" + "0" * 64,
        executor_role="connector",
        executor_id="dms",
        dispatched_at=AT_MS,
    )


async def record(opened: Opened, n: int, *, connector: bool = True) -> Recording:
    claim = AllowClaim(PROPOSAL, OPERATION, decision(n), AT_MS, order(n) if connector else None)
    return await opened.placed.record(opened.evidence, allow(n), None, claim)


def reasons(opened: Opened, n: int) -> list[tuple[str, ...]]:
    """The reason codes of every entry the ledger file holds for decision ``n``."""
    return [
        e.entry.reason_codes for e in decision_entries(opened.config.stores.ledger, decision(n))
    ]


async def test_an_allow_is_claimed_once_and_its_order_recorded_once(opened: Opened) -> None:
    """A second decision for the same proposal (a replay decided again) is recorded
    as evidence but claims nothing and records no order: one proposal, one order."""
    first = await record(opened, 1)
    replay = await record(opened, 2)
    assert first.claim == ClaimAndOrder(claimed=True, order_recorded=True)
    assert replay.claim == ClaimAndOrder(claimed=False, order_recorded=False)
    stored = await opened.placed.orders.get(order(1).order_id)
    assert stored is not None
    assert stored.state == "executing"
    assert first.order_at_ms == stored.dispatched_at
    assert await opened.placed.orders.get(order(2).order_id) is None
    claim = await opened.placed.claims.get(PROPOSAL)
    assert claim is not None
    assert claim.decision_id == decision(1)
    assert len(reasons(opened, 1)) == 1
    assert len(reasons(opened, 2)) == 1


async def test_a_tool_its_runtime_runs_is_claimed_with_no_order(opened: Opened) -> None:
    recorded = await record(opened, 1, connector=False)
    assert recorded.claim == ClaimAndOrder(claimed=True, order_recorded=False)
    assert recorded.order_at_ms is None
    assert await opened.placed.orders.get(order(1).order_id) is None
    assert await opened.placed.claims.state(PROPOSAL) == "claimed"


async def test_an_order_already_in_the_book_is_not_recorded_again(opened: Opened) -> None:
    """The claim makes each decision's order once; an id already in the book is a
    fault, reported as not recorded (the chain then refuses the allow)."""
    assert await opened.placed.orders.open(order(1))
    recorded = await record(opened, 1)
    assert recorded.claim == ClaimAndOrder(claimed=True, order_recorded=False)
    assert await opened.placed.claims.state(PROPOSAL) == "claimed"


async def test_a_claim_store_that_cannot_answer_refuses_the_claim_not_the_evidence(
    opened: Opened,
) -> None:
    """The decision's entry commits either way; nothing is claimed or ordered. On one
    machine the entry itself says the claim was not written (the start-up check
    holds every other allow to a claim row); on a cluster it committed before the
    claim was tried."""
    await opened.placed.claims.close()
    recorded = await record(opened, 1)
    assert isinstance(recorded.claim, StoreUnavailable)
    [entry_reasons] = reasons(opened, 1)
    assert (CLAIM_STORE_UNAVAILABLE in entry_reasons) == (opened.kind == "one_machine")


async def test_a_cluster_order_book_that_cannot_answer_spends_the_claim(
    state: StateDir, nats_server: EmbeddedNatsServer
) -> None:
    """On a cluster the order is written after the claim: a book that cannot answer
    leaves the claim spent and the order unrecorded, so the allow is refused and a
    replay still finds the claim (never a second try)."""
    async with opened_as("cluster", state, nats_server) as cluster:
        await cluster.placed.orders.close()
        recorded = await record(cluster, 1)
        assert recorded.claim == ClaimAndOrder(claimed=True, order_recorded=False)
        assert await cluster.placed.claims.state(PROPOSAL) == "claimed"
        replay = await record(cluster, 2)
        assert replay.claim == ClaimAndOrder(claimed=False, order_recorded=False)


async def test_a_claim_write_that_fails_in_the_transaction_is_recorded_on_its_entry(
    state: StateDir, nats_server: EmbeddedNatsServer
) -> None:
    """One machine: the claim, its order and the call's note are one write in the
    entry's transaction. A claim row the file cannot write (here a trigger that
    fails, as a disk error would) undoes all three, and the entry that commits says
    the claim was not written, so the start-up check does not hold this allow to a
    claim row."""
    async with opened_as("one_machine", state, nats_server) as machine:
        with contextlib.closing(sqlite3.connect(machine.config.stores.ledger)) as other:
            # a write that fails as a disk error would (not a constraint: a refused
            # INSERT is a replay's claim)
            other.execute("CREATE TABLE gone (x)")
            other.execute(
                "CREATE TRIGGER refuse BEFORE INSERT ON proposal_claims "
                "BEGIN INSERT INTO gone VALUES (1); END"
            )
            other.execute("DROP TABLE gone")
            other.commit()
        note = machine.placed.note("runtime-1", "call-1").beside()
        claim = AllowClaim(PROPOSAL, OPERATION, decision(1), AT_MS, order(1))
        recorded = await machine.placed.record(machine.evidence, allow(1), note, claim)
        assert isinstance(recorded.claim, StoreUnavailable)
        assert not recorded.noted
        assert await machine.placed.claims.state(PROPOSAL) is None
        assert await machine.placed.orders.get(order(1).order_id) is None
        assert await machine.placed.calls.notes() == []
        [entry_reasons] = reasons(machine, 1)
        assert CLAIM_STORE_UNAVAILABLE in entry_reasons


async def test_a_notes_write_is_durable_once_stored_returns(opened: Opened) -> None:
    """A note that did not ride beside an entry (one refused before evaluation) is
    written when the chain asks for it: read back from the store afterwards."""
    note = opened.placed.note("runtime-1", "call-1")
    await note.stored()
    assert await opened.placed.calls.notes() == [("runtime-1", "call-1")]


async def test_a_note_whose_store_is_closed_is_refused_not_lost_silently(
    state: StateDir, nats_server: EmbeddedNatsServer
) -> None:
    """One machine: a closed store gives no write to ride beside the evidence, and
    the later write raises (the chain logs it: the id is then covered until a
    restart only)."""
    async with opened_as("one_machine", state, nats_server) as machine:
        note = machine.placed.note("runtime-1", "call-1")
        await machine.placed.calls.close()
        assert note.beside() is None
        with pytest.raises(StoreUnavailable):
            await note.stored()
