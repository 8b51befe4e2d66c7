"""State that lies is refused at start, with one line naming the file.

ARCHITECTURE.md, "Evidence" and "Exact-action approval";
``smf_assurance.pipeline.stores.state_check``. A real gate
(``smf_assurance.pipeline.assembly.start_gate``) on a real nats-server and real
SQLite files makes real state (allowed deletions, a held filing, checkpoints on
``SMF_LEDGER_CHECKPOINTS``); it is closed, one file is damaged the way an attacker
with the state folder (or a failing disk) would, and a gate started again on it is
refused with the file and the reason code, before any store opens it. Each attack has
its control: the same start on the undamaged state serves, and does what the lie
would have undone (the replay is a ``duplicate_proposal``, the approval stays closed).

Proven: claim rows deleted (``claims_missing``: the replay that was executed twice is
never decided; a replay the gate refused before is no false alarm); a damaged page
that the ledger audit does not read (``state_file_malformed``, on the ledger and on
the approvals); the ledger deleted while the bus holds its checkpoints
(``ledger_missing``; with none, a first start creates it); the tail cut back to an
older copy (``truncated_after_checkpoint``) or rewritten past the checkpoint
(``checkpoint_mismatch``); junk on the checkpoint subject skipped, not fatal; an
approval's row deleted (``approval_missing``) or set back to ``pending``
(``approval_state_behind_ledger``); a store file or the state folder others may read
(``state_file_too_open`` / ``state_folder_too_open``, the line says the ``chmod``);
new store files are 0600; and ``smf-assurance up`` prints the refusal as one line
and exits 1. Not proven: a ledger and its checkpoint stream deleted together (nothing
outside them remains to tell), the cluster's KV stores (their own tests), the
connectors' idempotency files.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import sqlite3
import stat
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Final

import nats
import pytest
from nats.aio.client import Client
from nats.errors import NoRespondersError

from smf_assurance.adapters.client import ProposalClient
from smf_assurance.ops.local.natsserver import EmbeddedNatsServer
from smf_assurance.ops.local.stack import gate_config
from smf_assurance.ops.local.state import StateDir
from smf_assurance.pipeline.assembly import RunningGate, start_gate
from smf_assurance.pipeline.stores.ledger import EvidenceEntry, Ledger, verify_ledger
from smf_assurance.pipeline.stores.state_check import StateRefused
from smf_assurance.subjects import names
from smf_assurance.subjects.canonical import identity_of
from smf_assurance.subjects.messages import Proposal
from smf_assurance.subjects.registry import load_registry
from tests.support.approval_desk import approver, court_filing, hold
from tests.support.bus_helpers import ExecuteSpy
from tests.support.bus_properties import deletion, runtime_client
from tests.support.cli_ops import assert_one_line_failure, run
from tests.support.clocks import OffsetClock

CLOSE_TIMEOUT_S: Final = 15.0

Start = Callable[[], Awaitable[RunningGate]]


@pytest.fixture
async def start(seeded_state: StateDir, nats_server: EmbeddedNatsServer) -> AsyncIterator[Start]:
    """Starts a gate on the state (the sweep off, so nothing changes by itself);
    closes those still running."""
    started: list[RunningGate] = []

    async def launch() -> RunningGate:
        config = gate_config(
            seeded_state, nats_server.url, clock=OffsetClock(), sweep_seconds=3600.0
        )
        running = await start_gate(config)
        started.append(running)
        return running

    yield launch
    for running in started:
        if not running.nc.is_closed:
            await asyncio.wait_for(running.close(), CLOSE_TIMEOUT_S)


async def close(gate: RunningGate) -> None:
    """Sign the tail (the checkpoint goes to the bus, as ``up`` does at a clean stop),
    then close: the SQLite files are whole on disk, with no write-ahead log."""
    await gate.ledger.checkpoint(gate.gate.clock())
    await asyncio.wait_for(gate.close(), CLOSE_TIMEOUT_S)


async def refused(start: Start, path: Path, reason: str) -> StateRefused:
    with pytest.raises(StateRefused) as caught:
        await start()
    assert caught.value.path == path
    assert caught.value.reason_code == reason
    assert str(caught.value).startswith(f"{path}: {reason}: ")
    assert "\n" not in str(caught.value)
    return caught.value


def sql(path: Path, *statements: str) -> None:
    """Write to a state file around the stores, as someone with the folder could."""
    with contextlib.closing(sqlite3.connect(path)) as conn:
        for statement in statements:
            conn.execute(statement)
        conn.commit()


async def allowed(runtime: ProposalClient, proposal: Proposal) -> bytes:
    signed = runtime.sign(proposal)
    verdict = await runtime.send(proposal.proposal_id, signed)
    assert verdict.outcome == "allow", verdict
    return signed


# --- claims -----------------------------------------------------------------------


@pytest.mark.claim("protected-evidence.state-that-lies-refused")
async def test_deleted_claim_rows_stop_the_start_and_the_replay_is_never_decided(
    start: Start, nc: Client, seeded_state: StateDir
) -> None:
    gate = await start()
    runtime = runtime_client(nc, seeded_state)
    proposal = deletion(runtime, "doc-4711")
    signed = await allowed(runtime, proposal)
    await close(gate)

    # Control: the state as the gate left it serves, and the replay is a duplicate;
    # its entry says no claim was written, which the next start takes for no lie.
    gate = await start()
    replay = await runtime.send(proposal.proposal_id, signed)
    assert (replay.outcome, replay.reason_codes[-1:]) == ("deny", ("duplicate_proposal",))
    await close(gate)
    await close(await start())

    sql(seeded_state.ledger, "DELETE FROM proposal_claims")
    spy = await ExecuteSpy.attach(nc)
    error = await refused(start, seeded_state.ledger, "claims_missing")
    assert "1 allow(s) of the last 300 s" in str(error)
    with pytest.raises(NoRespondersError):  # no gate: the replay is decided by no one
        await nc.request(names.PROPOSE, signed, timeout=2)
    assert spy.seen == []


# --- damaged pages ------------------------------------------------------------------


def damage_index(path: Path, table: str) -> None:
    """Overwrite the page header of one of ``table``'s indexes: a page the ledger's
    audit never reads (it walks the entries' table), which SQLite's check does."""
    with contextlib.closing(sqlite3.connect(path)) as conn:
        (page_size,) = conn.execute("PRAGMA page_size").fetchone()
        (root,) = conn.execute(
            "SELECT rootpage FROM sqlite_master WHERE type = 'index' AND tbl_name = ?", (table,)
        ).fetchone()
    with path.open("r+b") as handle:
        handle.seek((root - 1) * page_size)
        handle.write(b"\xff" * 16)


@pytest.mark.claim("protected-evidence.state-that-lies-refused")
@pytest.mark.parametrize("which", ["ledger", "approvals"])
async def test_a_damaged_page_stops_the_start(
    which: str, start: Start, nc: Client, seeded_state: StateDir
) -> None:
    gate = await start()
    runtime = runtime_client(nc, seeded_state)
    await allowed(runtime, deletion(runtime, "doc-4711"))
    await hold(runtime, court_filing(runtime))
    await close(gate)
    await close(await start())  # control: sound files serve

    path, table = (
        (seeded_state.ledger, "proposal_claims")
        if which == "ledger"
        else (seeded_state.approvals, "approvals")
    )
    damage_index(path, table)
    trusted = load_registry(seeded_state.registry).trusted("gate")
    assert verify_ledger(seeded_state.ledger, [], trusted).ok  # the audit alone does not see it
    error = await refused(start, path, "state_file_malformed")
    assert "quick_check" in str(error) or "not a sound SQLite file" in str(error)


# --- the ledger against its checkpoints ---------------------------------------------


async def decide_some(start: Start, nc: Client, state: StateDir, documents: int) -> None:
    """A gate decides ``documents`` deletions, signs its tail to the bus and closes."""
    gate = await start()
    runtime = runtime_client(nc, state)
    for index in range(documents):
        await allowed(runtime, deletion(runtime, f"doc-{index}"))
    await close(gate)


def without_ledger(state: StateDir) -> None:
    for suffix in ("", "-wal", "-shm"):
        Path(f"{state.ledger}{suffix}").unlink(missing_ok=True)


@pytest.mark.claim("protected-evidence.state-that-lies-refused")
async def test_a_deleted_ledger_is_not_replaced_by_a_fresh_one(
    start: Start, nc: Client, seeded_state: StateDir, tmp_path: Path
) -> None:
    await decide_some(start, nc, seeded_state, 2)
    without_ledger(seeded_state)

    error = await refused(start, seeded_state.ledger, "ledger_missing")
    assert "but this gate signed" in str(error)
    assert not seeded_state.ledger.exists()  # nothing was created in its place


async def test_a_first_start_creates_the_ledger(start: Start, seeded_state: StateDir) -> None:
    """Control: with no checkpoint of this gate on the bus, no ledger is a new one."""
    assert not seeded_state.ledger.exists()
    gate = await start()
    assert seeded_state.ledger.exists()
    await close(gate)


@pytest.mark.claim("protected-evidence.state-that-lies-refused")
async def test_a_ledger_cut_back_to_an_older_copy_stops_the_start(
    start: Start, nc: Client, seeded_state: StateDir, tmp_path: Path
) -> None:
    await decide_some(start, nc, seeded_state, 1)
    older = tmp_path / "ledger-older.db"
    shutil.copy2(seeded_state.ledger, older)
    await decide_some(start, nc, seeded_state, 2)
    # Junk on the checkpoint subject (the newest message) is skipped, not fatal.
    js = nc.jetstream()
    await js.publish(names.checkpoint_subject(names.DEFAULT_GATE_NAME), b"not a checkpoint")
    await close(await start())  # control: the whole ledger, junk and all, serves

    shutil.copy2(older, seeded_state.ledger)
    error = await refused(start, seeded_state.ledger, "truncated_after_checkpoint")
    assert "from the bus" in str(error)


@pytest.mark.claim("protected-evidence.state-that-lies-refused")
async def test_a_ledger_rewritten_past_its_checkpoint_stops_the_start(
    start: Start, nc: Client, seeded_state: StateDir, tmp_path: Path
) -> None:
    await decide_some(start, nc, seeded_state, 1)
    older = tmp_path / "ledger-older.db"
    shutil.copy2(seeded_state.ledger, older)
    await decide_some(start, nc, seeded_state, 1)
    with contextlib.closing(sqlite3.connect(seeded_state.ledger)) as conn:
        (length,) = conn.execute("SELECT max(seq) FROM evidence_entries").fetchone()
    # The older copy grown back to that length with other entries, by the gate key
    # itself (as someone holding the state folder could): a chain that verifies on
    # its own, and whose entry at the bus checkpoint's height has another hash.
    async with await Ledger.open(older, signer=seeded_state.key("gate")) as rewritten:
        while rewritten.tail_seq < length:
            await rewritten.append(other_entry(rewritten.tail_seq))
    shutil.copy2(older, seeded_state.ledger)
    Path(f"{seeded_state.ledger}-wal").unlink(missing_ok=True)
    Path(f"{seeded_state.ledger}-shm").unlink(missing_ok=True)

    await refused(start, seeded_state.ledger, "checkpoint_mismatch")


def other_entry(seq: int) -> EvidenceEntry:
    return EvidenceEntry(
        kind="decision",
        operation_hash=identity_of({"operation": seq}),
        decision_id=identity_of({"decision": seq}),
        release_id=identity_of({"release": 1}),
        projection_id=identity_of({"projection": 1}),
        tenant_ref="hmac-sha256:" + "0" * 64,
        at=1_700_000_000_000 + seq,
        disposition="deny",
    )


# --- approvals ------------------------------------------------------------------------


async def held_then_executing(start: Start, nc: Client, state: StateDir) -> str:
    """A held filing the attorney approved (no connector runs: it stays executing)."""
    gate = await start()
    runtime = runtime_client(nc, state)
    verdict = await hold(runtime, court_filing(runtime))
    assert verdict.approval_id is not None
    _, reply = await approver(nc, state, "attorney-alex").review_and_resolve(
        verdict.approval_id, "allow-once"
    )
    assert reply.accepted
    await close(gate)
    return verdict.approval_id


@pytest.mark.claim("protected-evidence.state-that-lies-refused")
async def test_an_approval_set_back_to_pending_stops_the_start(
    start: Start, nc: Client, seeded_state: StateDir
) -> None:
    approval_id = await held_then_executing(start, nc, seeded_state)
    gate = await start()  # control: the restart ends it execution_unknown, never again
    record = await gate.approvals.get(approval_id)
    assert record is not None
    assert record.state == "execution_unknown"
    await close(gate)

    # Back to pending, content and all, as it was before the attorney approved it.
    sql(
        seeded_state.approvals,
        f"UPDATE approvals SET state = 'pending', held_payload = x'00', order_id = NULL "
        f"WHERE approval_id = '{approval_id}'",
    )
    error = await refused(start, seeded_state.approvals, "approval_state_behind_ledger")
    assert approval_id in str(error)


@pytest.mark.claim("protected-evidence.state-that-lies-refused")
async def test_a_deleted_approval_stops_the_start(
    start: Start, nc: Client, seeded_state: StateDir
) -> None:
    gate = await start()
    runtime = runtime_client(nc, seeded_state)
    verdict = await hold(runtime, court_filing(runtime))
    await close(gate)

    sql(seeded_state.approvals, "DELETE FROM approvals")
    error = await refused(start, seeded_state.approvals, "approval_missing")
    assert str(verdict.approval_id) in str(error)


# --- modes ------------------------------------------------------------------------------


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.claim("protected-evidence.state-files-private")
async def test_store_files_are_made_private(
    start: Start, nc: Client, seeded_state: StateDir
) -> None:
    gate = await start()
    runtime = runtime_client(nc, seeded_state)
    await allowed(runtime, deletion(runtime, "doc-4711"))
    await hold(runtime, court_filing(runtime))
    made = [
        Path(f"{base}{suffix}")
        for base in (seeded_state.ledger, seeded_state.approvals, seeded_state.release_state)
        for suffix in ("", "-wal", "-shm")
    ]
    assert all(path.exists() for path in made[:3:]), made  # the main files at least
    for path in made:
        if path.exists():
            assert mode(path) == 0o600, path
    assert mode(seeded_state.root) == 0o700
    await close(gate)


@pytest.mark.claim("protected-evidence.state-files-private")
@pytest.mark.parametrize("which", ["approvals", "ledger-wal", "folder"])
async def test_a_state_file_or_folder_others_may_read_stops_the_start(
    which: str, start: Start, nc: Client, seeded_state: StateDir
) -> None:
    gate = await start()
    runtime = runtime_client(nc, seeded_state)
    await hold(runtime, court_filing(runtime))
    await close(gate)
    if which == "ledger-wal":  # a file as SQLite makes it beside the ledger
        wal = Path(f"{seeded_state.ledger}-wal")
        wal.write_bytes(b"")
    target, chmod, reason = {
        "approvals": (seeded_state.approvals, 0o644, "state_file_too_open"),
        "ledger-wal": (Path(f"{seeded_state.ledger}-wal"), 0o640, "state_file_too_open"),
        "folder": (seeded_state.root, 0o755, "state_folder_too_open"),
    }[which]
    target.chmod(chmod)

    error = await refused(start, target, reason)
    fix = "chmod 700" if which == "folder" else "chmod 600"
    assert f"run: {fix} '{target}'" in str(error)
    assert mode(target) == chmod  # refused, not changed behind the operator's back
    target.chmod(0o700 if which == "folder" else 0o600)
    await close(await start())  # the line's chmod is all it takes


# --- the operator's view -----------------------------------------------------------------


@pytest.mark.claim("protected-evidence.state-that-lies-refused")
def test_up_prints_the_refusal_as_one_line_and_exits_1(
    seeded_state: StateDir, nats_server: EmbeddedNatsServer, capsys: pytest.CaptureFixture[str]
) -> None:
    """In the main thread, as an operator runs it (``up`` installs signal handlers)."""

    async def make_state() -> None:
        config = gate_config(seeded_state, nats_server.url, sweep_seconds=3600.0)
        gate = await start_gate(config)
        async with contextlib.AsyncExitStack() as stack:
            nc = await nats.connect(nats_server.url)
            stack.push_async_callback(nc.close)
            runtime = runtime_client(nc, seeded_state)
            await allowed(runtime, deletion(runtime, "doc-4711"))
        await close(gate)

    asyncio.run(make_state())
    without_ledger(seeded_state)

    code, out, err = run(
        [
            "up",
            "--state-dir",
            str(seeded_state.root),
            "--nats",
            nats_server.url,
            "--no-connectors",
            "--log-level",
            "error",
        ],
        capsys,
    )

    assert out == ""
    assert_one_line_failure(
        code, err, f"smf-assurance: cannot start the gate: {seeded_state.ledger}: ledger_missing: "
    )
    assert not seeded_state.ledger.exists()
