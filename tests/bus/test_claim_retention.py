"""Proposal claims are forgotten only when no replay can use them.

The claim store would grow forever if nothing pruned it; the gate prunes claims
older than :attr:`GateSettings.claim_retention_ms` (``Gate.prune_claims``, run by
``smf_assurance.pipeline.assembly`` every ``claim_prune_seconds``). The invariant attacked here: a
replay that still passes the freshness check always meets its claim (refused
``duplicate_proposal``), and a replay after the retention is refused as
``stale_proposal``; in no case a second order. The proposals here carry no
requester's deadline (``reply_by_ms``), so every replay is decided again and meets
its claim; one that carries a deadline is answered from the record after it
(``tests/bus/test_requester_deadline.py``), which makes no order either.

What these tests prove: the retention bound (``2F + skew``) against every clock
arrangement hypothesis finds, and against a real gate at the edge of the window
(a proposal issued a freshness window ahead of the gate, the pruning gate's clock
a full skew ahead). What they do not prove: that deployed gates' clocks really
stay within ``max_clock_skew_ms`` of each other; that is an operating condition
(NTP), stated in docs/CLUSTER.md.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

import msgspec
import nats
import pytest
from hypothesis import assume, example, given
from hypothesis import strategies as st
from nats.aio.client import Client

from smf_assurance.ops.local.natsserver import EmbeddedNatsServer
from smf_assurance.ops.local.stack import gate_config
from smf_assurance.ops.local.state import StateDir
from smf_assurance.pipeline.assembly import RunningGate, start_gate
from smf_assurance.pipeline.chain.gate import GateSettings
from smf_assurance.pipeline.stores.claims import (
    ClaimRecord,
    ClaimState,
    ProposalClaims,
    StoreUnavailable,
)
from smf_assurance.subjects.keyed import PseudonymKey
from tests.support.bus_helpers import wait_for
from tests.support.bus_properties import deletion, execute_count, runtime_client
from tests.support.clocks import FrozenClock

SETTINGS = GateSettings(tenant_key=PseudonymKey(b"k" * 32))
F = SETTINGS.freshness_ms
SKEW = SETTINGS.max_clock_skew_ms
SECOND = 1_000


def test_retention_is_two_freshness_windows_and_the_skew() -> None:
    assert SETTINGS.claim_retention_ms == 2 * F + SKEW
    custom = GateSettings(tenant_key=PseudonymKey(b"k" * 32), freshness_ms=10, max_clock_skew_ms=3)
    assert custom.claim_retention_ms == 23
    # a restored state answers from its record whatever its backup's gate could have
    # accepted: issued up to the restore plus the window and the skew
    assert SETTINGS.record_only_until_ms is None
    restored = GateSettings(
        tenant_key=PseudonymKey(b"k" * 32), freshness_ms=10, max_clock_skew_ms=3, restored_at_ms=100
    )
    assert restored.record_only_until_ms == 113


@pytest.mark.parametrize(("freshness", "skew"), [(0, 0), (-1, 0), (10, -1)])
def test_settings_without_a_freshness_window_or_with_negative_skew_are_refused(
    freshness: int, skew: int
) -> None:
    with pytest.raises(ValueError, match="freshness_ms"):
        GateSettings(
            tenant_key=PseudonymKey(b"k" * 32), freshness_ms=freshness, max_clock_skew_ms=skew
        )


@given(
    freshness=st.integers(1, 10**7),
    skew=st.integers(0, 10**6),
    claimed=st.integers(0, 10**12),
    issued=st.integers(-(10**7), 10**7),
    replayed=st.integers(-(10**7), 10**7),
    replayer=st.integers(-(10**6), 10**6),
    pruner=st.integers(-(10**6), 10**6),
    earlier=st.integers(0, 10**8),
)
@example(  # the edge: issued a window ahead, replayed at its end, the pruner a skew ahead
    freshness=F, skew=SKEW, claimed=0, issued=F, replayed=F, replayer=0, pruner=SKEW, earlier=0
)
def test_no_clock_arrangement_prunes_a_claim_a_replay_can_still_use(
    freshness: int,
    skew: int,
    claimed: int,
    issued: int,
    replayed: int,
    replayer: int,
    pruner: int,
    earlier: int,
) -> None:
    """Times are as each gate's clock reads them; the claiming gate's clock is the
    reference. Any two gates' clocks differ by at most ``skew``."""
    settings = GateSettings(
        tenant_key=PseudonymKey(b"k" * 32), freshness_ms=freshness, max_clock_skew_ms=skew
    )
    assume(abs(replayer) <= skew and abs(pruner) <= skew and abs(replayer - pruner) <= skew)
    issued_at = claimed + issued
    assume(abs(claimed - issued_at) <= freshness)  # the claiming gate accepted it
    replay_reads = issued_at + replayed  # on the replaying gate's clock
    assume(abs(replay_reads - issued_at) <= freshness)  # the replay is still fresh
    # A prune pass that ran at or before the replay, on the pruning gate's clock.
    prune_reads = replay_reads - replayer + pruner - earlier
    assert prune_reads - settings.claim_retention_ms <= claimed  # the claim was kept


def test_one_millisecond_less_retention_would_forget_a_usable_claim() -> None:
    """The bound is tight: the edge example above with ``2F + skew - 1``."""
    claimed, issued_at = 0, F
    prune_reads = issued_at + F + SKEW  # the replay's last fresh moment, pruner a skew ahead
    assert prune_reads - (SETTINGS.claim_retention_ms - 1) > claimed


# --- a real gate at the edge of the window -----------------------------------------------


@pytest.fixture
def clock() -> FrozenClock:
    return FrozenClock()


@pytest.fixture
async def gate(
    state: StateDir, nats_server: EmbeddedNatsServer, clock: FrozenClock
) -> AsyncIterator[RunningGate]:
    running = await start_gate(
        gate_config(state=state, nats_url=nats_server.url, clock=clock, claim_prune_seconds=0.05)
    )
    yield running
    await running.close()


@pytest.fixture
async def nc(nats_server: EmbeddedNatsServer) -> AsyncIterator[Client]:
    client = await nats.connect(nats_server.url)
    yield client
    await client.close()


async def test_a_replay_inside_the_window_meets_its_claim_after_every_prune(
    gate: RunningGate, nc: Client, state: StateDir, clock: FrozenClock
) -> None:
    runtime = runtime_client(nc, state)
    start = clock.now
    # Issued as far ahead of the gate as freshness allows: a replay stays fresh
    # until the gate's clock reads start + 2F - 1 s.
    proposal = msgspec.structs.replace(
        deletion(runtime, "doc-edge"), issued_at_ms=start + F - SECOND, reply_by_ms=None
    )
    signed = runtime.sign(proposal)
    first = await runtime.send(proposal.proposal_id, signed)
    assert first.outcome == "allow", first
    last_fresh = start + 2 * F - SECOND
    # A pruning gate whose clock reads a full skew ahead of the replaying one.
    clock.now = last_fresh + SKEW
    assert await gate.gate.prune_claims() == 0
    assert await gate.claims.state(proposal.proposal_id) == "published"
    clock.now = last_fresh
    replay = await runtime.send(proposal.proposal_id, signed)
    assert replay.outcome == "deny"
    assert "duplicate_proposal" in replay.reason_codes, replay
    assert await execute_count(gate.js) == 1


async def test_a_claim_past_its_retention_is_pruned_and_its_replay_is_stale(
    gate: RunningGate, nc: Client, state: StateDir, clock: FrozenClock
) -> None:
    runtime = runtime_client(nc, state)
    kept = deletion(runtime, "doc-kept")
    proposal = msgspec.structs.replace(
        deletion(runtime, "doc-old"), issued_at_ms=clock.now, reply_by_ms=None
    )
    signed = runtime.sign(proposal)
    assert (await runtime.send(proposal.proposal_id, signed)).outcome == "allow"
    clock.advance(SETTINGS.claim_retention_ms)
    kept = msgspec.structs.replace(kept, issued_at_ms=clock.now, reply_by_ms=None)
    assert (await runtime.send(kept.proposal_id, runtime.sign(kept))).outcome == "allow"
    clock.advance(1)

    async def forgotten() -> bool:
        return await gate.claims.state(proposal.proposal_id) is None

    await wait_for(forgotten, timeout=10)  # by the gate's own prune task
    assert await gate.claims.state(kept.proposal_id) == "published"  # a newer one stays
    replay = await runtime.send(proposal.proposal_id, signed)
    assert replay.outcome == "deny"
    assert replay.reason_codes == ("stale_proposal",), replay
    assert await execute_count(gate.js) == 2


@dataclass
class PruneOutage:
    """The gate's real claim store whose prune fails ``failures`` times first, as in
    an outage; every other call goes to the real store."""

    real: ProposalClaims
    failures: int
    passes: int = 0

    async def claim(self, proposal_id: str, operation_hash: str, decision_id: str, at: int) -> bool:
        return await self.real.claim(proposal_id, operation_hash, decision_id, at)

    async def settle(self, proposal_id: str, state: ClaimState) -> None:
        await self.real.settle(proposal_id, state)

    async def state(self, proposal_id: str) -> ClaimState | None:
        return await self.real.state(proposal_id)

    async def get(self, proposal_id: str) -> ClaimRecord | None:
        return await self.real.get(proposal_id)

    async def prune(self, before_ms: int) -> int:
        self.passes += 1
        if self.passes <= self.failures:
            raise StoreUnavailable("claim store lost its quorum")
        return await self.real.prune(before_ms)

    async def close(self) -> None:
        await self.real.close()


async def test_failing_prune_passes_do_not_stop_the_gate_pruning(
    gate: RunningGate, nc: Client, state: StateDir, clock: FrozenClock
) -> None:
    runtime = runtime_client(nc, state)
    proposal = msgspec.structs.replace(
        deletion(runtime, "doc-outage"), issued_at_ms=clock.now, reply_by_ms=None
    )
    signed = runtime.sign(proposal)
    assert (await runtime.send(proposal.proposal_id, signed)).outcome == "allow"
    outage = PruneOutage(gate.claims, failures=3)
    gate.gate.claims = outage
    clock.advance(SETTINGS.claim_retention_ms + 1)

    async def forgotten() -> bool:
        return await outage.real.state(proposal.proposal_id) is None

    await wait_for(forgotten, timeout=10)
    assert outage.passes > outage.failures  # forgotten by a pass after the failed ones
    assert (await runtime.send(proposal.proposal_id, signed)).reason_codes == ("stale_proposal",)
    assert await execute_count(gate.js) == 1
