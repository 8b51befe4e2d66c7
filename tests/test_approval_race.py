"""Several gate processes on one approval store, and gates that crash mid-approval.

"Two gate processes racing to claim the same approval:
exactly one ExecuteOrder in the stream, on every one of at least 50 rounds";
"Crash the gate between claim and publish, and between publish and report:
recovery yields execution_unknown, never a second order". ARCHITECTURE.md,
"Exact-action approval". Real gate processes (``tests/approval_gate_child.py``)
on one real nats-server, sharing the state directory and its ``approvals.db``;
each gate process keeps its own evidence ledger, because the ledger allows one
writer per chain.

How the races are driven: each round holds a fresh court filing (through
``smf.propose``, whichever gate the queue group picks), then sends work to
both processes at once over the child's test-only subjects, so that each
process really gets one of the two requests (through the shared
``smf.approval.resolve`` queue group, both could land on one process):

- the same signed allow-once to both (``handle_resolve``): the store's
  ``pending -> approved`` step is where the processes meet;
- an approval already moved to ``approved`` in the store, claimed by both
  (``_claim_and_dispatch``): the store's ``approved -> executing`` claim
  itself is where they meet.

How the crashes are made, and why that is honest: the process is SIGKILLed
(no cleanup, no graceful close) at a point the test has observed, not guessed.
"Between publish and report": the order is published, no connector runs, so
no report can arrive. "Between claim and publish": the child replaces the
desk's injected dispatch client with one that announces it was called and
never returns: the claim has committed in the real store and nothing has
reached the stream. No product code is patched. The restart is a fresh
``start_gate`` on the same state directory, whose start-up recovery is the
code under test.

What these prove: one accepted reply and one published order per approval
on every round, whichever process wins (a core subscription on
``smf.execute.>`` counts publishes, so a re-publish that JetStream would
de-duplicate still counts); a refused claimant records the state the store
holds, not ``invalidated``; after a crash, executing work becomes
``execution_unknown`` and an approved approval no claim followed
``invalidated``, both with ``gate_restarted`` in the ledger, while a pending
one stays pending with its content; no order is published again, later
resolutions of what ended are refused, and an order already published is filed
once by the connector while the approval stays ``execution_unknown``.

What they do not prove: atomicity across machines (SQLite file locking on
one host; the cluster store has its own tests); that a side effect happens once in
the outside world (one order is one filing only through the connector's
idempotency record); crashes at other points (e.g. inside SQLite's commit,
or of the nats-server); several gate processes starting while others hold
open approvals: start-up recovery assumes it is the only gate on its store
(a restarting gate ends the approved and in-flight work of the others),
so the gates here start before any approval exists.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import msgspec
import pytest
from nats.aio.client import Client

from smf_assurance.ops.local.natsserver import EmbeddedNatsServer
from smf_assurance.ops.local.stack import gate_config
from smf_assurance.ops.local.state import StateDir
from smf_assurance.pipeline.assembly import start_gate
from smf_assurance.pipeline.stores.approvals import ApprovalStore
from smf_assurance.pipeline.stores.approvals_sqlite import SqliteApprovalStore
from smf_assurance.subjects import names
from smf_assurance.subjects.approvals import ResolutionReply
from smf_assurance.subjects.bus_access import BusCredential
from smf_assurance.subjects.clock import wall_clock_ms
from tests.bus_helpers import ExecuteSpy, wait_for
from tests.clocks import OffsetClock as Clock
from tests.test_approval_desk import (
    ATTORNEY,
    CLOSE_TIMEOUT_S,
    approver,
    connectors_running,
    court_filing,
    hold,
    ledger_rows,
    ledger_statuses,
    order_count,
    orders,
    provision_with_extra_approvers,
    runtime,
    send,
)

CHILD: Final = Path(__file__).with_name("approval_gate_child.py")
REPO: Final = CHILD.parent.parent
ROUNDS: Final = 50
READY_TIMEOUT_S: Final = 20.0
STOP_TIMEOUT_S: Final = 5.0


@dataclass
class GateProcess:
    """One gate process; its output goes to a file so a full pipe never stalls it."""

    name: str
    proc: asyncio.subprocess.Process
    log: Path
    ledger: Path

    @property
    def subject(self) -> str:
        return f"smf-test.{self.name}"

    async def kill(self) -> None:
        """SIGKILL: no cleanup, no graceful close, as a crash."""
        self.proc.send_signal(signal.SIGKILL)
        assert await self.proc.wait() == -signal.SIGKILL

    async def stop(self) -> None:
        if self.proc.returncode is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(self.proc.wait(), STOP_TIMEOUT_S)
        except TimeoutError:
            self.proc.send_signal(signal.SIGUSR1)  # stacks into the log, then kill
            await asyncio.sleep(0.5)
            self.proc.kill()
            await self.proc.wait()
            raise AssertionError(f"gate {self.name} did not stop; stacks in {self.log}") from None


Spawn = Callable[..., Awaitable[GateProcess]]


@pytest.fixture
def state(tmp_path: Path) -> StateDir:
    state = StateDir(tmp_path / "state")
    provision_with_extra_approvers(state)
    return state


async def launch_gate_process(
    tmp_path: Path,
    state: StateDir,
    url: str,
    name: str,
    *,
    own_ledger: bool = True,
    control: BusCredential | None = None,
    **config: object,
) -> GateProcess:
    """Start ``tests/approval_gate_child.py`` and wait for its READY line.

    ``control``: the credential the child serves the test's own subjects with,
    on a bus with authorization (the gate's own credential may not)."""
    ledger = tmp_path / f"{name}-ledger.db" if own_ledger else state.ledger
    log = tmp_path / f"{name}.log"
    settings = {"url": url, "state": str(state.root), "ledger": str(ledger), "name": name}
    if control is not None:
        settings |= {"control_principal": control.principal, "control_seed": str(control.seed_file)}
    with log.open("wb") as out:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            str(CHILD),
            json.dumps({**settings, **config}),
            cwd=REPO,
            stdout=out,
            stderr=asyncio.subprocess.STDOUT,
        )
    gate = GateProcess(name, proc, log, ledger)
    deadline = time.monotonic() + READY_TIMEOUT_S
    while b"READY" not in log.read_bytes():
        if proc.returncode is not None or time.monotonic() > deadline:
            if proc.returncode is None:  # killing one that exited raises, hiding its log
                proc.kill()
            await proc.wait()
            tail = log.read_bytes()[-3000:].decode(errors="replace")
            raise AssertionError(f"gate {name} did not start:\n{tail}")
        await asyncio.sleep(0.05)
    return gate


@pytest.fixture
async def spawn(
    state: StateDir, nats_server: EmbeddedNatsServer, tmp_path: Path
) -> AsyncIterator[Spawn]:
    """Start gate processes on the shared state; every one is stopped afterwards."""
    started: list[GateProcess] = []

    async def start(
        name: str, *, own_ledger: bool = True, park_dispatch: bool = False
    ) -> GateProcess:
        gate = await launch_gate_process(
            tmp_path,
            state,
            nats_server.url,
            name,
            own_ledger=own_ledger,
            park_dispatch=park_dispatch,
        )
        started.append(gate)
        return gate

    yield start
    for gate in started:
        await gate.stop()


@pytest.fixture
async def store(state: StateDir) -> AsyncIterator[SqliteApprovalStore]:
    """The test's own connection to the shared approvals.db."""
    opened = await SqliteApprovalStore.open(state.approvals)
    yield opened
    await opened.close()


async def request(nc: Client, subject: str, data: bytes) -> bytes:
    return (await nc.request(subject, data, timeout=10)).data


# --- two processes, one approval, fifty times ----------------------------------------


async def test_one_resolution_sent_to_two_gate_processes_gives_one_order_every_round(
    spawn: Spawn, nc: Client, state: StateDir
) -> None:
    gates = [await spawn("gate-a"), await spawn("gate-b")]
    await race_one_resolution(gates, nc, state)


async def race_one_resolution(gates: list[GateProcess], nc: Client, state: StateDir) -> None:
    """Fifty rounds: one signed allow-once sent to both processes at once."""
    js = nc.jetstream()
    spy = await ExecuteSpy.attach(nc)
    client, attorney = runtime(nc, state), approver(nc, state, ATTORNEY)
    winners: Counter[str] = Counter()
    held: list[str] = []
    for round_ in range(ROUNDS):
        verdict = await hold(client, court_filing(client))
        approval_id = verdict.approval_id
        assert approval_id is not None
        held.append(approval_id)
        view = await attorney.show(approval_id)
        signed = attorney.sign_resolution(approval_id, "allow-once", view.binding_digest)
        order = gates if round_ % 2 == 0 else gates[::-1]  # neither always asks first

        raw = await asyncio.gather(*(request(nc, f"{g.subject}.resolve", signed) for g in order))

        replies = [msgspec.json.decode(r, type=ResolutionReply) for r in raw]
        accepted = [(g.name, r) for g, r in zip(order, replies, strict=True) if r.accepted]
        assert len(accepted) == 1, (round_, replies)
        winner, reply = accepted[0]
        winners[winner] += 1
        assert reply.state == "executing"
        assert reply.order_id
        refused = [r for r in replies if not r.accepted]
        assert [r.reason_codes for r in refused] == [("approval_not_pending",)], (round_, replies)
        assert await order_count(js) == round_ + 1, round_

    published = await spy.approval_ids()
    assert Counter(published) == dict.fromkeys(held, 1)
    sent = await orders(js, state)
    assert sorted(o.approval_id or "" for o, _ in sent) == sorted(held)
    assert len({o.order_id for o, _ in sent}) == ROUNDS
    assert set(winners) == {"gate-a", "gate-b"}, winners  # the race went both ways


async def test_two_gate_processes_claiming_one_approved_approval_give_one_order_every_round(
    spawn: Spawn, nc: Client, state: StateDir, store: SqliteApprovalStore
) -> None:
    gates = [await spawn("gate-a"), await spawn("gate-b")]
    await race_one_claim(gates, nc, state, store)


async def race_one_claim(
    gates: list[GateProcess], nc: Client, state: StateDir, store: ApprovalStore
) -> None:
    """Fifty rounds: an approved approval claimed by both processes at once."""
    js = nc.jetstream()
    spy = await ExecuteSpy.attach(nc)
    client = runtime(nc, state)
    winners: Counter[str] = Counter()
    held: list[str] = []
    for round_ in range(ROUNDS):
        verdict = await hold(client, court_filing(client))
        approval_id = verdict.approval_id
        assert approval_id is not None
        held.append(approval_id)
        record = await store.get(approval_id)
        assert record is not None
        await store.approve(approval_id, record.digest, ATTORNEY, wall_clock_ms())
        order = gates if round_ % 2 == 0 else gates[::-1]

        raw = await asyncio.gather(
            *(request(nc, f"{g.subject}.claim", approval_id.encode()) for g in order)
        )

        answers = [json.loads(r) for r in raw]
        won = [g for g, a in zip(order, answers, strict=True) if a.get("accepted")]
        lost = [g for g, a in zip(order, answers, strict=True) if not a.get("accepted")]
        assert (len(won), len(lost)) == (1, 1), (round_, answers)
        assert [a["refused"] for a in answers if "refused" in a] == ["approval_not_pending"]
        winners[won[0].name] += 1
        assert await order_count(js) == round_ + 1, round_
        # The loser's evidence says what the store holds (the winner's claim), and
        # neither process claims the approval was invalidated.
        assert ("executing", ("approval_not_pending",)) in ledger_rows(lost[0].ledger, approval_id)
        assert "executing" in ledger_statuses(won[0].ledger, approval_id)
        for gate in gates:
            assert "invalidated" not in ledger_statuses(gate.ledger, approval_id)

    assert Counter(await spy.approval_ids()) == dict.fromkeys(held, 1)
    assert len(await orders(js, state)) == ROUNDS
    for approval_id in held:
        record = await store.get(approval_id)
        assert record is not None
        assert record.state == "executing"
    assert set(winners) == {"gate-a", "gate-b"}, winners


# --- crashes -------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def restarted_gate(state: StateDir, url: str) -> AsyncIterator[None]:
    """A fresh gate on the same state directory: its start-up recovery runs first."""
    running = await start_gate(
        gate_config(state=state, nats_url=url, clock=Clock(), sweep_seconds=3600.0)
    )
    try:
        yield
    finally:
        await asyncio.wait_for(running.close(), CLOSE_TIMEOUT_S)  # a hang fails, loudly


async def test_crash_between_claim_and_publish_is_execution_unknown_without_an_order(
    spawn: Spawn,
    nc: Client,
    state: StateDir,
    store: SqliteApprovalStore,
    nats_server: EmbeddedNatsServer,
) -> None:
    gate = await spawn("gate-a", own_ledger=False, park_dispatch=True)
    js = nc.jetstream()
    spy = await ExecuteSpy.attach(nc)
    client, attorney = runtime(nc, state), approver(nc, state, ATTORNEY)
    claimed = (await hold(client, court_filing(client))).approval_id
    pending = (await hold(client, court_filing(client))).approval_id
    approved = (await hold(client, court_filing(client))).approval_id
    assert claimed is not None
    assert pending is not None
    assert approved is not None
    record = await store.get(approved)
    assert record is not None
    await store.approve(approved, record.digest, ATTORNEY, wall_clock_ms())
    view = await attorney.show(claimed)
    signed = attorney.sign_resolution(claimed, "allow-once", view.binding_digest)
    dispatching = await nc.subscribe(f"{gate.subject}.dispatching")
    replies = await nc.subscribe(nc.new_inbox())
    await nc.flush()

    await nc.publish(names.APPROVAL_RESOLVE, signed, reply=replies.subject)
    await dispatching.next_msg(timeout=10)  # the claim has committed; nothing is published
    record = await store.get(claimed)
    assert record is not None
    assert record.state == "executing"
    await gate.kill()

    assert await order_count(js) == 0
    async with restarted_gate(state, nats_server.url):
        for approval_id, after in (
            (claimed, "execution_unknown"),
            (approved, "invalidated"),
        ):
            record = await store.get(approval_id)
            assert record is not None
            assert record.state == after, approval_id
            assert record.held_payload is None
            assert ledger_rows(state.ledger, approval_id)[-1] == (after, ("gate_restarted",))
        # What the crash did not interrupt survives it, content and all.
        kept = await store.get(pending)
        assert kept is not None
        assert (kept.state, kept.held_payload is not None) == ("pending", True)
        replay = await send(nc, signed)
        assert (replay.accepted, replay.reason_codes) == (False, ("approval_not_pending",))
        assert await spy.approval_ids() == []
        assert await order_count(js) == 0
    assert replies.pending_msgs == 0  # the killed gate never answered


async def test_crash_between_publish_and_report_is_execution_unknown_and_files_once(
    spawn: Spawn,
    nc: Client,
    state: StateDir,
    store: SqliteApprovalStore,
    nats_server: EmbeddedNatsServer,
) -> None:
    gate = await spawn("gate-a", own_ledger=False)
    js = nc.jetstream()
    spy = await ExecuteSpy.attach(nc)
    client, attorney = runtime(nc, state), approver(nc, state, ATTORNEY)
    approval_id = (await hold(client, court_filing(client))).approval_id
    assert approval_id is not None
    view = await attorney.show(approval_id)
    signed = attorney.sign_resolution(approval_id, "allow-once", view.binding_digest)
    reply = await send(nc, signed)  # no connector runs: no report can arrive
    assert reply.accepted
    assert reply.order_id
    assert await order_count(js) == 1
    await gate.kill()

    async with restarted_gate(state, nats_server.url):
        record = await store.get(approval_id)
        assert record is not None
        assert record.state == "execution_unknown"
        assert ledger_rows(state.ledger, approval_id)[-1] == (
            "execution_unknown",
            ("gate_restarted",),
        )
        replay = await send(nc, signed)
        assert (replay.accepted, replay.reason_codes) == (False, ("approval_not_pending",))
        async with connectors_running(state, nats_server.url):

            async def report_read() -> bool:
                info = await js.consumer_info(names.RESULT_STREAM, "smf-gate-results")
                return info.ack_floor is not None and (info.ack_floor.stream_seq or 0) >= 1

            await wait_for(report_read, timeout=10)
        record = await store.get(approval_id)
        assert record is not None
        assert record.state == "execution_unknown"
        assert await spy.approval_ids() == [approval_id]
    outbox = state.connector_dir("court-efiling") / "outbox"
    assert [p.name for p in outbox.iterdir()] == [f"{reply.order_id}.json"]
    assert await order_count(js) == 1
