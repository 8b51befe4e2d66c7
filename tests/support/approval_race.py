"""The fixtures, builders and constants of tests/bus/test_approval_race.py
that other test modules use too: here, so that no test module imports another."""

from __future__ import annotations

import asyncio
import json
import signal
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import msgspec
import pytest
from nats.aio.client import Client

from smf_assurance.ops.local.state import StateDir
from smf_assurance.pipeline.stores.approvals import ApprovalStore
from smf_assurance.pipeline.stores.approvals_sqlite import SqliteApprovalStore
from smf_assurance.subjects.approvals import ResolutionReply
from smf_assurance.subjects.bus_access import BusCredential
from smf_assurance.subjects.clock import wall_clock_ms
from tests.support.approval_desk import (
    ATTORNEY,
    approver,
    court_filing,
    hold,
    ledger_rows,
    ledger_statuses,
    order_count,
    orders,
    runtime,
)
from tests.support.bus_helpers import ExecuteSpy

__all__ = ["GateProcess", "launch_gate_process", "race_one_claim", "race_one_resolution"]

CHILD: Final = Path(__file__).parents[1] / "support" / "approval_gate_child.py"


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
    """Start ``tests/support/approval_gate_child.py`` and wait for its READY line.

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
async def store(approvers_state: StateDir) -> AsyncIterator[SqliteApprovalStore]:
    """The test's own connection to the shared approvals.db."""
    opened = await SqliteApprovalStore.open(approvers_state.approvals)
    yield opened
    await opened.close()


async def request(nc: Client, subject: str, data: bytes) -> bytes:
    return (await nc.request(subject, data, timeout=10)).data


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
