"""Runtime stops at the gate, one step at a time (``smf_assurance.pipeline.desks.runtime_stops``).

The real desk, the real ledger file and the real tool-call store in it, no bus: the
interleavings the gate-level tests (tests/bus/test_tool_call_restart.py) cannot pin down.

Proves: a stop is in force before its write, and a stop made while a clear is being
recorded survives the clear, in memory and in the store (``runtime_stopped_again``);
a stop whose write fails is still in force and says so, and a clear then lifts
nothing while the store cannot be read; a clear that lifts a stop writes exactly one
ledger entry, a transition of that stop's refusal; a replica told of a clear lifts
its copy only when the store holds no stop, and puts in force the one it holds.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import pytest

from smf_assurance.ops.local.state import StateDir
from smf_assurance.pipeline.desks.attestation import AttestationDesk
from smf_assurance.pipeline.desks.runtime_stops import RuntimeStops
from smf_assurance.pipeline.stores.evidence import EvidenceWriter
from smf_assurance.pipeline.stores.ledger import Ledger, decision_entries
from smf_assurance.pipeline.stores.tool_calls import SqliteToolCallStore, Stop
from smf_assurance.subjects.keyed import PseudonymKey
from smf_assurance.subjects.registry import load_registry
from tests.support.builders import AT_MS, fake_identity
from tests.support.bus_helpers import wait_for
from tests.support.store_helpers import parked

STOPPED: Final = "runtime_stopped_ungated_tool_result"


def stop(n: int) -> Stop:
    return Stop(
        runtime_id="r1",
        reason=STOPPED,
        operation_hash=fake_identity(f"operation-{n}"),
        decision_id=fake_identity(f"decision-{n}"),
        tenant_ref="hmac-sha256:" + "0" * 64,
        stopped_at=AT_MS + n,
    )


@dataclass
class Desk:
    ledger_path: Path
    ledger: Ledger
    store: SqliteToolCallStore
    attestation: AttestationDesk
    stops: RuntimeStops

    def refused_as_stopped(self) -> bool:
        return self.attestation.standing("r1")[0] == STOPPED


@pytest.fixture
async def desk(tmp_path: Path, state: StateDir) -> AsyncIterator[Desk]:
    ledger = await Ledger.open(tmp_path / "ledger.db", signer=state.key("gate"))
    store = await SqliteToolCallStore.in_ledger(ledger.worker)
    attestation = AttestationDesk(
        required={}, registry=lambda: load_registry(state.registry), clock=lambda: AT_MS
    )
    stops = RuntimeStops(
        store=store,
        attestation=attestation,
        evidence=EvidenceWriter(ledger, PseudonymKey(b"k" * 32), lambda: AT_MS),
        release_id=lambda: "rel-1",
        clear_beside=store.clear_beside,
    )
    yield Desk(tmp_path / "ledger.db", ledger, store, attestation, stops)
    await store.close()
    await ledger.close()


async def test_a_stop_made_while_a_clear_is_recorded_survives_it(desk: Desk) -> None:
    assert await desk.stops.stop(stop(1)) is True
    async with parked(desk.ledger.worker) as release:  # the clear waits on the ledger
        clearing = asyncio.ensure_future(desk.stops.clear("r1"))
        # the clear has begun: it holds the desk's lock while it waits on the ledger
        await wait_for(desk.stops._lock.locked)
        stopping = asyncio.ensure_future(desk.stops.stop(stop(2)))
        await wait_for(lambda: desk.stops.standing("r1") == stop(2))
        assert not stopping.done()  # in force before it is written
        assert not clearing.done()
        release()
        answer, stored = await asyncio.gather(clearing, stopping)
    assert stored is True
    assert (answer.was_stopped, answer.stopped, answer.reason_codes) == (
        True,
        True,
        ("runtime_stopped_again",),
    )
    assert desk.stops.standing("r1") == stop(2) == await desk.store.stop_of("r1")
    assert desk.refused_as_stopped()
    # the clear of the older stop is recorded as what it was: that stop is gone
    (cleared,) = decision_entries(desk.ledger_path, stop(1).decision_id)
    assert cleared.entry.reason_codes == ("runtime_stop_cleared",)


async def test_a_clear_lifts_a_stop_with_one_entry_naming_it(desk: Desk) -> None:
    await desk.stops.stop(stop(1))
    answer = await desk.stops.clear("r1")
    assert (answer.was_stopped, answer.stopped, answer.reason_codes) == (True, False, ())
    (stored,) = decision_entries(desk.ledger_path, stop(1).decision_id)
    assert (stored.entry.kind, stored.entry.operation_hash, stored.entry_hash) == (
        "transition",
        stop(1).operation_hash,
        answer.evidence[0],
    )
    assert await desk.store.stop_of("r1") is None
    assert not desk.refused_as_stopped()
    again = await desk.stops.clear("r1")
    assert (again.was_stopped, again.stopped, again.evidence) == (False, False, ())


async def test_a_stop_that_cannot_be_written_is_in_force_and_no_clear_lifts_it_unread(
    desk: Desk,
) -> None:
    await desk.store.close()  # the store is gone (the ledger still takes entries)
    assert await desk.stops.stop(stop(1)) is False
    assert desk.refused_as_stopped()
    answer = await desk.stops.clear("r1")
    assert (answer.stopped, answer.reason_codes) == (True, ("runtime_stop_store_unavailable",))
    assert desk.refused_as_stopped()


async def test_a_replica_told_of_a_clear_follows_the_store(desk: Desk) -> None:
    desk.stops.adopt_stop(stop(1))  # made and stored elsewhere
    await desk.store.stop(stop(2))  # and stopped again there since
    await desk.stops.adopt_clear("r1")
    assert desk.stops.standing("r1") == stop(2)
    assert desk.refused_as_stopped()
    await desk.store.clear(stop(2))
    await desk.stops.adopt_clear("r1")
    assert desk.stops.standing("r1") is None
    assert not desk.refused_as_stopped()
