"""Crash consistency of orders: kill -9 of nats-server and of the gate at seeded moments
under load loses no acknowledged order and runs none twice.

Everything is real and on loopback: one nats-server (``sync_interval: always``, the
product's setting), the gate in its own process (``tests/support/gate_child.py``), the example
connectors in theirs (``tests/support/connector_child.py``), real SQLite. Allowed deletions flow
from a few concurrent senders; each round SIGKILLs nats-server, the gate, or both, when
a number of that round's proposals drawn by a seeded ``random.Random`` have been
answered (plus a seeded jitter of a few milliseconds), then starts them again on the
same store and state. The rounds are bounded; nothing waits a fixed time before an
assertion.

Afterwards, once everything is back, for every order a runtime was told ``allow``
(acknowledged: the gate had the order's PubAck before it said so):

- the order is in the order stream (not lost to the kill of the server that
  acknowledged it, nor to the kill of the gate that published it);
- the ledger records its one outcome, and the connector's files agree: ``consumed``
  is one tombstone naming the order and the document gone; ``failed`` (refused, e.g.
  its deadline passed while the bus or the gate was down) is no tombstone and the
  document still there; ``execution_unknown`` (the connector could not tell) is at most
  one tombstone;
- no order ran twice (at most one tombstone per order and per document), and nothing
  ran that no runtime was told, or learned from the gate's record, was allowed.

A proposal whose reply was lost to a kill is settled from the gate's record
(``ProposalClient.recorded``), asked only after the proposal's deadline: before it the
same bytes are a replay and denied ``duplicate_proposal``, which says nothing about
the order; each record read must carry ``recorded_verdict``.

What it does not prove: durability across a power cut or a kernel crash. A SIGKILLed
process loses nothing the kernel already has, so this test passes with nats-server's
two-minute default as well; what covers power loss is ``sync_interval: always``,
which ``tests/bus/test_durable_orders.py`` shows in force (the server's own ``/varz``),
and a disk that honours fsync, which no test here can show.
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Final, Literal

import nats
import pytest

from smf_assurance.adapters.client import ProposalClient, unsettled
from smf_assurance.ops.local.natsserver import EmbeddedNatsServer
from smf_assurance.pipeline.chain.gate import RECORDED
from smf_assurance.pipeline.stores.ledger_audit import verify_ledger
from smf_assurance.subjects import names
from smf_assurance.subjects.clock import wall_clock_ms
from smf_assurance.subjects.messages import Proposal, Verdict
from tests.support.bus_faults import seed_documents, tombstones
from tests.support.bus_helpers import wait_for
from tests.support.bus_properties import deletion, provisioned_state, runtime_client, stored_orders
from tests.support.load_faults import CONNECTOR_CHILD, GATE_CHILD, Process, learned, outcome_of

SEED: Final = 39_005
PER_ROUND: Final = 20
CONCURRENCY: Final = 4
TIMEOUT_S: Final = 2.0
Victim = Literal["nats", "gate", "both"]
ROUNDS: Final[tuple[Victim, ...]] = ("nats", "gate", "both", "both")
"""Each round's kill; its moment is drawn from ``random.Random(SEED + round)``."""


async def recorded(runtime: ProposalClient, proposal: Proposal, signed: bytes) -> Verdict:
    """The verdict the gate recorded, asked once the proposal's deadline has passed.

    Before its deadline the same signed bytes are a replay, decided again and denied
    ``duplicate_proposal`` (the claim exists), which says nothing about the order;
    after it the gate answers from its record (``recorded_verdict``) and decides
    nothing (``ProposalClient.recorded``)."""
    deadline = proposal.reply_by_ms
    assert deadline is not None
    await wait_for(lambda: wall_clock_ms() > deadline, timeout=TIMEOUT_S + 10, interval=0.05)
    answer = await learned(runtime, proposal, signed)
    assert RECORDED in answer.reason_codes, answer
    return answer


def document(index: int) -> str:
    return f"doc-crash-{index:04d}"


def moment(round_index: int) -> tuple[int, float]:
    """How many of the round's proposals are answered before the kill, and the jitter
    (seconds) after that: the same every run."""
    rng = random.Random(SEED + round_index)
    return rng.randrange(2, PER_ROUND - 4), rng.uniform(0.0, 0.02)


class Load:
    """Allowed deletions of distinct documents, each built and signed when sent."""

    def __init__(self, runtime: ProposalClient) -> None:
        self.runtime = runtime
        self.results: dict[int, tuple[Proposal, bytes, Verdict]] = {}

    async def send(self, index: int) -> None:
        proposal = deletion(self.runtime, document(index))
        signed = self.runtime.sign(proposal)
        self.results[index] = (
            proposal,
            signed,
            await self.runtime.send(proposal.proposal_id, signed),
        )

    def answered(self, first: int, count: int) -> Callable[[], bool]:
        return lambda: sum(1 for i in self.results if i >= first) >= count


async def crash_round(
    load: Load, round_index: int, victim: Victim, gate: Process, server: EmbeddedNatsServer
) -> None:
    """One round: its proposals from ``CONCURRENCY`` senders, and one kill at the
    round's seeded moment, then the victims started again on the same store and state."""
    first = round_index * PER_ROUND
    queue: asyncio.Queue[int] = asyncio.Queue()
    for index in range(first, first + PER_ROUND):
        queue.put_nowait(index)

    async def worker() -> None:
        while not queue.empty():
            await load.send(queue.get_nowait())

    async def crash() -> None:
        answered, jitter = moment(round_index)
        await wait_for(load.answered(first, answered), timeout=60, interval=0.005)
        await asyncio.sleep(jitter)  # the seeded moment inside the flow, not a wait
        if victim in ("gate", "both"):
            await gate.kill()
        if victim in ("nats", "both"):
            server.kill()
            server.start()
        if victim in ("gate", "both"):
            await gate.start()

    await asyncio.gather(crash(), *(worker() for _ in range(CONCURRENCY)))


@pytest.mark.claim("verdict-agrees.crash-consistency")
async def test_kill_9_of_the_bus_and_the_gate_loses_no_acknowledged_order_and_runs_none_twice(
    tmp_path: Path, nats_server: EmbeddedNatsServer
) -> None:
    state = provisioned_state(tmp_path)
    total = PER_ROUND * len(ROUNDS)
    store = seed_documents(state, [document(i) for i in range(total)])
    config: dict[str, object] = {"url": nats_server.url, "state_dir": str(state.root)}
    nc = await nats.connect(
        nats_server.url, max_reconnect_attempts=-1, reconnect_time_wait=0.1, connect_timeout=2
    )
    load = Load(runtime_client(nc, state, timeout=TIMEOUT_S))
    gate = Process(GATE_CHILD, {**config, "co_located": True})
    connectors = Process(CONNECTOR_CHILD, config)
    try:
        await gate.start()
        await connectors.start()
        for round_index, victim in enumerate(ROUNDS):
            await crash_round(load, round_index, victim, gate, nats_server)
        assert len(load.results) == total

        # What each runtime ends up knowing: what it was told, or what it learns.
        told = {i: v for i, (_, _, v) in load.results.items()}
        final = {
            i: await recorded(load.runtime, p, s) if unsettled(v) else v
            for i, (p, s, v) in load.results.items()
        }
        acknowledged = {i: v for i, v in told.items() if v.outcome == "allow"}
        assert acknowledged, "no proposal was told allow"
        assert all(v.order_id for v in acknowledged.values())
        for i, verdict in acknowledged.items():  # the gate's record, after every kill, agrees
            proposal, signed, _ = load.results[i]
            record = await recorded(load.runtime, proposal, signed)
            assert (record.outcome, record.order_id) == ("allow", verdict.order_id), record
        allowed = {i: v for i, v in final.items() if v.outcome == "allow"}
        assert set(acknowledged) <= set(allowed)
        hit = [v for v in told.values() if unsettled(v) or v.outcome != "allow"]
        assert hit, "no kill hit the flow: every proposal was told allow"

        # Not lost: every acknowledged order (and every one learned from the record) is
        # in the stream, once, after every kill.
        stored = await stored_orders(nc.jetstream())
        in_stream = Counter((m.headers or {})[names.HEADER_MSG_ID] for m in stored)
        for verdict in allowed.values():
            assert in_stream[str(verdict.order_id)] == 1, verdict

        # Carried out at most once, and the ledger's one outcome agrees with the files.
        def outcomes_recorded() -> bool:
            return all(outcome_of(state.ledger, str(v.decision_id)) for v in allowed.values())

        await wait_for(outcomes_recorded, timeout=90, interval=0.25)
        done = Counter(t.order_id for t in tombstones(store))
        assert set(done) <= {str(v.order_id) for v in allowed.values()}, "ran, never allowed"
        assert set(done.values()) <= {1}, done
        for index, verdict in allowed.items():
            outcome = outcome_of(state.ledger, str(verdict.decision_id))
            present = (store / document(index)).exists()
            ran = done[str(verdict.order_id)]
            if outcome == "consumed":
                assert (ran, present) == (1, False), verdict
            elif outcome == "failed":
                assert (ran, present) == (0, True), verdict
            else:
                assert outcome == "execution_unknown", (verdict, outcome)
                assert ran <= 1, verdict
        for index, verdict in final.items():  # a denial (the bus was down) never ran
            if verdict.outcome != "allow":
                assert (store / document(index)).exists(), verdict
        gate_key = state.key("gate")
        report = verify_ledger(state.ledger, [], {gate_key.key_id: gate_key.verify_key})
        assert report.ok, report
    finally:
        await nc.close()
        await gate.kill()
        await connectors.kill()
