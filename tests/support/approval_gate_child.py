"""A gate process for the multi-process race and crash tests of the approval desk.

Run by ``tests/bus/test_approval_race.py`` ("Two gate processes racing to
claim the same approval"; "Crash the gate between claim and publish, and
between publish and report"). Argument: one JSON object with

- ``url``: the nats-server; ``state``: the state directory (keys, registry,
  ``approvals.db``), shared by every gate process of a test;
- ``ledger``: this process's own ledger file. The evidence ledger has one
  writer per chain (``smf_assurance.pipeline.stores.ledger``: an append checks that the
  file's last entry is the one this writer wrote), so gate instances that
  share an approval store keep separate ledgers;
- ``name``: the process's name, also its test subject prefix ``smf-test.<name>``;
- ``cluster_replicas``: when set, the gate runs in cluster mode:
  JetStream KV stores with that many replicas, on the cluster node ``url``;
- ``sweep_seconds`` (default an hour: no sweep during a test) and ``claim_grace_ms``:
  the gate's sweep period and how long an accepted allow-once may stay unclaimed;
- ``clock_offset_ms``: when set, the gate's clock runs this far ahead of wall time
  (a restart after a downtime longer than an approval's TTL, without waiting it out);
- ``park_dispatch``: when true, the desk's dispatch client (an injected
  dependency, :attr:`ApprovalDesk.dispatch`) is replaced by one that announces
  ``smf-test.<name>.dispatching`` and then never returns. The claim has then
  committed and nothing has been published: the state in which a process
  killed "between claim and publish" leaves the system. No product code is
  patched; the store, the claim and the ledger are the real ones.

Test-only request subjects (plain core NATS, not part of the bus contract),
so that a test can address one process instead of whichever member of the
``smf-gate`` queue group the server picks:

- ``smf-test.<name>.resolve``: the same :meth:`ApprovalDesk.handle_resolve`
  the ``smf.approval.resolve`` endpoint calls;
- ``smf-test.<name>.claim``: the step after an accepted allow-once, on an
  approval some approver already moved to ``approved``
  (:meth:`ApprovalDesk._claim_and_dispatch`), replying the ResolutionReply
  or ``{"refused": reason}``. It lets two processes race on the store's
  claim itself, not only on the approve step in front of it.

- ``smf-test.<name>.propose``: this process's ``smf.propose`` handler, so a
  test knows which replica held an approval.
- ``smf-test.<name>.holds``: ``fresh`` or ``stale``, this process's hold-list mirror
  as its decisions see it (``HoldsMirror.view``). A stale mirror denies every document
  write and delete (``holds_unavailable``), so a test that expects allows after a
  fault waits for ``fresh`` on each replica.

Prints ``READY`` once the gate answers; exits on SIGTERM after closing the
gate. A test stops it with SIGKILL to simulate a crash.
"""

from __future__ import annotations

import asyncio
import ctypes
import dataclasses
import faulthandler
import json
import signal
import sys
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import nats
from nats.aio.client import Client
from nats.aio.msg import Msg

from smf_assurance.ops.local.stack import gate_config
from smf_assurance.ops.local.state import StateDir
from smf_assurance.pipeline.assembly import ClusterSettings, RunningGate, start_gate
from smf_assurance.pipeline.chain.approvals import DeskError
from smf_assurance.pipeline.chain.contracts import DispatchReceipt, DispatchRequest
from smf_assurance.subjects.bus_access import BusCredential, connect_options

TEST_PREFIX = "smf-test"


@dataclass(frozen=True, slots=True)
class OwnLedgerState(StateDir):
    """The shared state directory, with this process's own ledger file."""

    own_ledger: Path = Path()

    @property
    def ledger(self) -> Path:
        return self.own_ledger


@dataclass(frozen=True, slots=True)
class ParkedDispatch:
    """A dispatch client that says it was called and then never returns."""

    nc: Client
    subject: str

    async def call(self, request: DispatchRequest, timeout: float) -> DispatchReceipt:
        await self.nc.publish(self.subject, b"claimed")
        await self.nc.flush()
        await asyncio.Event().wait()
        raise AssertionError("unreachable")


async def _serve_tests(running: RunningGate, control: Client, prefix: str) -> None:
    """The test's own subjects, on the control connection: the gate's credential may
    not serve them, the test harness's operator may."""
    desk = running.desk

    async def resolve(msg: Msg) -> None:
        await msg.respond(await desk.handle_resolve(msg.data))

    async def claim(msg: Msg) -> None:
        record = await desk.store.get(msg.data.decode())
        if record is None:
            await msg.respond(b'{"refused": "approval_not_found"}')
            return
        try:
            reply = await desk._claim_and_dispatch(record)
        except DeskError as exc:
            await msg.respond(json.dumps({"refused": exc.reason_code}).encode())
            return
        await msg.respond(msgspec.json.encode(reply))

    tasks: set[asyncio.Task[None]] = set()

    def spawn(
        handler: Callable[[Msg], Coroutine[Any, Any, None]],
    ) -> Callable[[Msg], Awaitable[None]]:
        async def callback(msg: Msg) -> None:
            # One task per request, so the two requests of a race run concurrently.
            task = asyncio.get_running_loop().create_task(handler(msg))
            tasks.add(task)
            task.add_done_callback(tasks.discard)

        return callback

    async def propose(msg: Msg) -> None:
        await msg.respond(await running.gate.handle_propose(msg.data))

    async def holds(msg: Msg) -> None:
        mirror = running.holds
        await msg.respond(b"fresh" if mirror is not None and mirror.view().fresh else b"stale")

    await control.subscribe(f"{prefix}.propose", cb=spawn(propose))
    await control.subscribe(f"{prefix}.resolve", cb=spawn(resolve))
    await control.subscribe(f"{prefix}.claim", cb=spawn(claim))
    await control.subscribe(f"{prefix}.holds", cb=spawn(holds))
    await control.flush()


def _clock(offset_ms: int) -> Callable[[], int]:
    def now() -> int:
        return time.time_ns() // 1_000_000 + offset_ms

    return now


async def main(config: dict[str, object]) -> None:
    name = str(config["name"])
    prefix = f"{TEST_PREFIX}.{name}"
    replicas = config.get("cluster_replicas")
    state = OwnLedgerState(Path(str(config["state"])), own_ledger=Path(str(config["ledger"])))
    base = gate_config(
        state=state,
        nats_url=str(config["url"]),
        co_located=True,
        sweep_seconds=float(str(config.get("sweep_seconds", 3600.0))),
        clock=_clock(int(str(config.get("clock_offset_ms", 0)))),
        name=name,
        cluster=None if replicas is None else ClusterSettings(replicas=int(str(replicas))),
    )
    grace = config.get("claim_grace_ms")
    if grace is not None:
        base = dataclasses.replace(base, claim_grace_ms=int(str(grace)))
    running = await start_gate(base)
    principal, seed = config.get("control_principal"), config.get("control_seed")
    credential = None if principal is None else BusCredential(str(principal), Path(str(seed)))
    control = await nats.connect(str(config["url"]), **connect_options(credential))
    if config.get("park_dispatch"):
        running.desk.dispatch = ParkedDispatch(control, f"{prefix}.dispatching")
    await _serve_tests(running, control, prefix)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    print("READY", flush=True)
    await stop.wait()
    await running.close()
    await control.drain()


def _die_with_parent() -> None:
    """Linux: SIGKILL this process when the test process dies, so none is left over."""
    if sys.platform == "linux":
        pr_set_pdeathsig = 1
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)


if __name__ == "__main__":
    _die_with_parent()
    faulthandler.register(signal.SIGUSR1)  # a test that times out stopping us asks for stacks
    asyncio.run(main(json.loads(sys.argv[1])))
