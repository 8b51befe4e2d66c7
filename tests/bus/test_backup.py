"""Backup and restore: a backup taken while the gate serves restores verified, and
nothing consumed before it can execute again.

Issue 39, "Backup and restore". Real nats-server (the state's own, authorization on),
real SQLite files, the example connectors, the command line as an operator runs it
(``smf-assurance backup`` / ``restore``). The main test is the invariant under
attack: an allow-once consumed and a direct allow executed before the backup, the
gate deciding while the backup is taken and after it, then that (now older) backup
restored into a new folder and a gate started on it; the attorney's very
bytes of the allow-once, the runtime's very bytes of the allow, and the same proposal
id signed again are sent to it: each is refused or answered from the record, nothing
is published on ``smf.execute`` (a core subscriber and the stream's count watch),
and no connector files anything again.

And what happened after the backup began is not done again: a direct allow executed
and a filing allowed after it, the restored gate answers the allow's very bytes from
its record (no second order), and a new proposal within what the backup's gate could
have accepted (the freshness window and the skew past the restore) too, and has
invalidated the approval at start, so the attorney's allow-once is refused; a restore
marker that cannot be read stops the gate.

The refusals: a tampered archive (one member changed, the manifest not), a
truncated one and one that is not an archive are refused in one line with nothing
written; a restore is refused while a gate holds ``up``'s lock on the state, and over
a folder with anything in it unless ``--force``, which sets that folder aside.

Not proven: a cluster's state (its stores are KV buckets on the cluster's nodes; a
backup takes the streams of the one server it is pointed at); a forger who rewrites
the manifest with the member (the digests are not a signature; the restored ledger's
signed checkpoints are what is verified).
"""

from __future__ import annotations

import asyncio
import hashlib
import io
import json
import os
import re
import stat
import tarfile
from pathlib import Path
from typing import Any, Final

import pytest
from nats.aio.client import Client

from smf_assurance.adapters.client import ProposalClient
from smf_assurance.approver.client import ApproverClient
from smf_assurance.ops.demo.script import SCENARIOS
from smf_assurance.ops.local.bus import connect_bus, write_url
from smf_assurance.ops.local.defaults import OPERATOR
from smf_assurance.ops.local.logs import configure_logging
from smf_assurance.ops.local.restored import RESTORE_MARKER, restored_at
from smf_assurance.ops.local.stack import Stack, seed_demo_documents, start_stack
from smf_assurance.ops.local.state import StateDir, private_files
from smf_assurance.ops.local.supervisor import exclusive
from smf_assurance.pipeline.stores.state_check import StateRefused
from smf_assurance.subjects.clock import wall_clock_ms
from tests.support.approval_desk import ATTORNEY, approver, court_filing, hold, status
from tests.support.bus_helpers import ExecuteSpy, stream_count, wait_for
from tests.support.bus_properties import deletion, from_scenario, runtime_client
from tests.support.cli_ops import arun, assert_one_line_failure, run, table_value
from tests.support.clocks import OffsetClock
from tests.support.older_state import assert_replay_answered_from_record, ledger_rows

ALLOW: Final = next(a for a in SCENARIOS if a.name == "6 retention deletion (allowed)")
TAINTED: Final = next(a for a in SCENARIOS if a.name == "3 tainted external email")
GATE_STREAMS: Final = {"SMF_EXECUTE", "SMF_RESULT", "SMF_APPROVALS", "SMF_LEDGER_CHECKPOINTS"}


@pytest.fixture
def seeded(state: StateDir) -> StateDir:
    """The demo state, its documents seeded, its files private (as ``up`` makes them)."""
    private_files()
    configure_logging(json=True, level="error")  # the in-process gate's, off stdout's JSON
    seed_demo_documents(state)
    return state


async def _connect(stack: Stack, principal: str, clients: list[Client]) -> Client:
    nc = await connect_bus(
        stack.url, f"backup-{principal}", stack.state.existing_credential(principal)
    )
    clients.append(nc)
    return nc


async def _json(argv: list[str], capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    code, out, err = await arun([*argv, "--json"], capsys)
    assert code == 0, err
    parsed: dict[str, Any] = json.loads(out)
    return parsed


async def _serving_with_a_held_filing(
    stack: Stack, clients: list[Client]
) -> tuple[Client, ProposalClient, ApproverClient, str]:
    """The gate serves (its URL written, as ``up`` does), with the operator, the runtime
    and the attorney connected, and a court filing held: its approval id."""
    state = stack.state
    write_url(state.root, stack.url)
    operator = await _connect(stack, OPERATOR, clients)
    runtime = runtime_client(await _connect(stack, "runtime", clients), state)
    attorney = approver(await _connect(stack, ATTORNEY, clients), state, ATTORNEY)
    held = await hold(runtime, court_filing(runtime))
    assert held.approval_id is not None
    return operator, runtime, attorney, held.approval_id


def _outbox(state: StateDir) -> list[str]:
    """What the court connector filed (none, before its first filing makes the folder)."""
    outbox = state.connector_dir("court-efiling") / "outbox"
    return sorted(p.name for p in outbox.iterdir()) if outbox.exists() else []


@pytest.mark.claim("protected-evidence.backup-restore")
async def test_a_backup_taken_while_the_gate_serves_restores_and_nothing_runs_again(
    seeded: StateDir,
    tmp_path: Path,
    clients: list[Client],
    capsys: pytest.CaptureFixture[str],
) -> None:
    stack = await start_stack(seeded)
    try:
        operator, runtime, attorney, approval_id = await _serving_with_a_held_filing(stack, clients)
        view = await attorney.show(approval_id)
        allow_once = attorney.sign_resolution(approval_id, "allow-once", view.binding_digest)
        assert (await attorney.send(allow_once)).accepted

        proposal = from_scenario(runtime, ALLOW)
        signed = runtime.sign(proposal)
        allowed = await runtime.send(proposal.proposal_id, signed)
        assert allowed.outcome == "allow", allowed.reason_codes

        def allow_consumed() -> bool:
            return any(
                r.status == "consumed" and r.decision_id == allowed.decision_id
                for r in ledger_rows(seeded.ledger)
            )

        async def approval_consumed() -> bool:
            return await status(operator, approval_id) == "consumed"

        await wait_for(allow_consumed, timeout=15)
        await wait_for(approval_consumed, timeout=15)
        await stack.gate.ledger.checkpoint(wall_clock_ms())
        before = ledger_rows(seeded.ledger)
        filed = _outbox(seeded)
        assert len(filed) == 1

        async def busy() -> int:
            """Proposals decided while the backup runs: the gate keeps writing."""
            decided = 0
            while not done.is_set():
                denied = await runtime.propose(from_scenario(runtime, TAINTED))
                assert denied.outcome == "deny"
                decided += 1
            return decided

        done = asyncio.Event()
        writer = asyncio.create_task(busy())
        archive = tmp_path / "backup.tar.gz"
        try:
            made = await _json(
                ["backup", "--state-dir", str(seeded.root), "--out", str(archive)], capsys
            )
        finally:
            done.set()
        assert await writer >= 1
        # The gate goes on after the backup: what it decides now the backup cannot hold.
        later = await runtime.propose(from_scenario(runtime, ALLOW))
        assert later.decision_id is not None
        assert later.decision_id in {r.decision_id for r in ledger_rows(seeded.ledger)}
    finally:
        await stack.stop()

    assert stat.S_IMODE(archive.stat().st_mode) == 0o600
    assert made["online"] is True
    assert made["keys_included"] is True
    streams = {s["name"]: s for s in made["streams"]}
    assert set(streams) >= GATE_STREAMS
    assert streams["SMF_EXECUTE"]["messages"] == 2
    assert streams["SMF_LEDGER_CHECKPOINTS"]["messages"] >= 1
    kinds = {f["path"]: f["kind"] for f in made["files"]}
    assert kinds["state/ledger.db"] == kinds["state/approvals.db"] == "sqlite"
    assert kinds["state/connectors/court-efiling/court-efiling.sqlite3"] == "sqlite"
    assert kinds["state/keys/gate.key"] == "file"
    assert not any(p.startswith(("state/nats/", "state/up.lock", "state/nats.url")) for p in kinds)

    restored = StateDir(tmp_path / "restored")
    report = await _json(
        ["restore", "--from", str(archive), "--state-dir", str(restored.root)], capsys
    )
    assert report["ledger_result"] == "verified"
    assert report["replaced"] is None
    rows = ledger_rows(restored.ledger)
    assert rows[: len(before)] == before, "everything written before the backup is in it"
    assert later.decision_id not in {r.decision_id for r in rows}, "an older backup"
    assert stat.S_IMODE(restored.root.stat().st_mode) == 0o700
    assert _outbox(restored) == filed

    # The replay arrives after its requester's deadline, as a runtime retrying later
    # would: the gate answers it from its record rather than deciding it again.
    assert proposal.reply_by_ms is not None
    clock = OffsetClock()
    clock.offset_ms = max(0, proposal.reply_by_ms + 1_000 - wall_clock_ms())
    stack = await start_stack(restored, clock=clock)
    try:
        observer = await _connect(stack, OPERATOR, clients)
        spy = await ExecuteSpy.attach(observer)
        executed = await stream_count(observer.jetstream())
        assert executed == 2
        runtime = runtime_client(await _connect(stack, "runtime", clients), restored)
        attorney = approver(await _connect(stack, ATTORNEY, clients), restored, ATTORNEY)

        resigned = from_scenario(
            runtime, ALLOW, proposal_id=proposal.proposal_id, issued_at_ms=clock()
        )
        await assert_replay_answered_from_record(
            runtime, proposal.proposal_id, signed, allowed.order_id, resigned, restored=True
        )
        replayed = await attorney.send(allow_once)
        assert (replayed.accepted, replayed.reason_codes) == (False, ("approval_not_pending",))
        assert await status(observer, approval_id) == "consumed"

        assert await spy.settled() == []
        assert await stream_count(observer.jetstream()) == executed
        await stack.gate.ledger.checkpoint(wall_clock_ms())
        verified = await _json(
            [
                "ledger", "verify", "--db", str(restored.ledger),
                "--state-dir", str(restored.root), "--nats", stack.url,
            ],
            capsys,
        )  # fmt: skip
    finally:
        await stack.stop()
    assert verified["result"] == "verified"
    assert _outbox(restored) == filed, "no connector filed anything again"


@pytest.mark.claim("protected-evidence.backup-restore")
async def test_an_older_backup_restored_decides_and_resolves_nothing_signed_before_it_again(
    seeded: StateDir,
    tmp_path: Path,
    clients: list[Client],
    capsys: pytest.CaptureFixture[str],
) -> None:
    """After the backup began, the gate executed a direct allow and an allowed filing.
    Restored, the state holds neither: the allow's claim and the approval's resolution
    are gone, the document is in the DMS store again and the filing is pending. The
    runtime's very bytes of the allow, still fresh and before their deadline, are
    answered from the record (no order: ``no_order_recorded``), never decided again;
    the approval was invalidated at start (``state_restored``, its runtime told deny),
    so the attorney's very allow-once is refused. Nothing is published on
    ``smf.execute``, the document is not deleted again and nothing is filed."""
    stack = await start_stack(seeded)
    try:
        operator, runtime, attorney, approval_id = await _serving_with_a_held_filing(stack, clients)
        archive = tmp_path / "backup.tar.gz"
        await _json(["backup", "--state-dir", str(seeded.root), "--out", str(archive)], capsys)

        # after the backup began: what the restored state will not know
        proposal = from_scenario(runtime, ALLOW, reply_by_ms=wall_clock_ms() + 600_000)
        signed = runtime.sign(proposal)
        allowed = await runtime.send(proposal.proposal_id, signed)
        assert allowed.outcome == "allow", allowed.reason_codes
        view = await attorney.show(approval_id)
        allow_once = attorney.sign_resolution(approval_id, "allow-once", view.binding_digest)
        assert (await attorney.send(allow_once)).accepted

        async def both_ran() -> bool:
            consumed = any(
                r.status == "consumed" and r.decision_id == allowed.decision_id
                for r in ledger_rows(seeded.ledger)
            )
            return consumed and await status(operator, approval_id) == "consumed"

        await wait_for(both_ran, timeout=15)
        assert len(_outbox(seeded)) == 1
    finally:
        await stack.stop()
    document = Path("store") / str(ALLOW.arguments["document_id"])
    assert not (seeded.connector_dir("dms") / document).exists()

    restored = StateDir(tmp_path / "restored")
    await _json(["restore", "--from", str(archive), "--state-dir", str(restored.root)], capsys)
    assert (restored.connector_dir("dms") / document).exists(), "the backup holds it"
    assert _outbox(restored) == []
    stack = await start_stack(restored)
    try:
        observer = await _connect(stack, OPERATOR, clients)
        spy = await ExecuteSpy.attach(observer)
        executed = await stream_count(observer.jetstream())
        runtime = runtime_client(await _connect(stack, "runtime", clients), restored)
        attorney = approver(await _connect(stack, ATTORNEY, clients), restored, ATTORNEY)

        assert proposal.reply_by_ms is not None
        assert wall_clock_ms() < min(proposal.reply_by_ms, proposal.issued_at_ms + 120_000)
        again = await runtime.send(proposal.proposal_id, signed)
        assert (again.outcome, again.order_id) == ("deny", None)
        assert set(again.reason_codes) == {"recorded_verdict", "no_order_recorded"}
        # signed after the restore, but within what the backup's gate could have
        # accepted (its clock may have run ahead): answered from the record too
        fresh = await runtime.propose(deletion(runtime, "doc-4711"))
        assert (fresh.outcome, fresh.order_id) == ("deny", None)
        assert set(fresh.reason_codes) == {"recorded_verdict", "no_order_recorded"}

        assert await status(observer, approval_id) == "invalidated"
        replayed = await attorney.send(allow_once)
        assert (replayed.accepted, replayed.reason_codes) == (False, ("approval_not_pending",))
        closed = [r for r in ledger_rows(restored.ledger) if r.status == "invalidated"]
        assert [r.reason_codes for r in closed] == [("state_restored",)]

        assert await spy.settled() == []
        assert await stream_count(observer.jetstream()) == executed
    finally:
        await stack.stop()
    assert (restored.connector_dir("dms") / document).exists(), "not deleted again"
    assert _outbox(restored) == [], "nothing filed"


@pytest.mark.parametrize(
    ("content", "said"),
    [
        (b"{not json", "restore_marker_unreadable: it says when this state was restored"),
        (
            b'{"schema": "smf.restore-marker/9", "restored_at_ms": 1, "backup_started_at_ms": 1}',
            "restore_marker_unreadable: not a smf.restore-marker/1",
        ),
        (b'{"schema": "smf.restore-marker/1"}', "restore_marker_unreadable"),
    ],
    ids=["not-json", "another-schema", "incomplete"],
)
def test_a_restore_marker_that_cannot_be_read_stops_the_gate(
    seeded: StateDir, content: bytes, said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without its marker a restored gate would decide again what its backup's gate
    may have decided after the backup began: a marker that is there but unreadable is
    refused at start, naming the file; none at all is a state never restored."""
    assert restored_at(seeded.root) is None
    marker = seeded.root / RESTORE_MARKER
    marker.write_bytes(content)
    with pytest.raises(StateRefused, match=re.escape(said)):
        restored_at(seeded.root)
    code, out, err = run(["up", "--state-dir", str(seeded.root), "--log-level", "error"], capsys)
    assert out == ""
    assert_one_line_failure(code, err, f"smf-assurance: cannot start the gate: {marker}: {said}")


# --- refusals -------------------------------------------------------------------------


@pytest.fixture
async def archive(seeded: StateDir, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    """A backup of the demo state taken with no gate running (the state's own server
    started under ``up``'s lock)."""
    out = tmp_path / "offline.tar.gz"
    made = await _json(["backup", "--state", str(seeded.root), "--out", str(out)], capsys)
    assert made["online"] is False
    assert not (seeded.root / "nats.url").exists()
    return out


def _repack(source: Path, target: Path, change: str | None, drop: str | None = None) -> None:
    """``source`` again, with member ``change`` one byte different and ``drop`` left
    out; the manifest as it was."""
    with tarfile.open(source, "r:gz") as old, tarfile.open(target, "w:gz") as new:
        for member in old:
            if member.name == drop:
                continue
            handle = old.extractfile(member)
            assert handle is not None
            data = handle.read()
            if member.name == change:
                data = data[:-1] + bytes([data[-1] ^ 1])
            new.addfile(member, io.BytesIO(data))


def _with_member(source: Path, target: Path, name: str, in_manifest: bool) -> None:
    """``source`` with one more member ``name``; named in the manifest, with its true
    digest, when ``in_manifest`` (a forger who rewrote the manifest too)."""
    data = b"planted\n"
    with tarfile.open(source, "r:gz") as old, tarfile.open(target, "w:gz") as new:
        for member in old:
            handle = old.extractfile(member)
            assert handle is not None
            content = handle.read()
            if member.name == "MANIFEST.json" and in_manifest:
                manifest = json.loads(content)
                digest = hashlib.sha256(data).hexdigest()
                manifest["files"].append(
                    {"path": name, "sha256": digest, "size": len(data), "kind": "file"}
                )
                content = json.dumps(manifest).encode()
                member.size = len(content)
            new.addfile(member, io.BytesIO(content))
        planted = tarfile.TarInfo(name)
        planted.size = len(data)
        new.addfile(planted, io.BytesIO(data))


def _siblings(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.parent.iterdir() if p.name.startswith(f".{folder.name}"))


@pytest.mark.parametrize(
    ("damage", "reason"),
    [
        ("member", "state/registry.json does not match its manifest digest"),
        ("manifest", "does not match its manifest digest"),
        ("missing", "member state/keys/gate.key of its manifest is missing"),
        ("truncated", "is not a readable backup archive"),
        ("garbage", "is not a readable backup archive"),
        ("extra", "member state/planted is not in its manifest"),
        ("escape", "names a path outside the state folder: '../planted'"),
    ],
)
async def test_a_damaged_archive_is_refused_with_nothing_written(
    archive: Path,
    tmp_path: Path,
    damage: str,
    reason: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    bad = tmp_path / f"{damage}.tar.gz"
    if damage == "member":
        _repack(archive, bad, "state/registry.json")
    elif damage == "manifest":
        _repack(archive, bad, "MANIFEST.json")
        reason = "MANIFEST.json is unreadable"
    elif damage == "missing":
        _repack(archive, bad, None, drop="state/keys/gate.key")
    elif damage == "extra":
        _with_member(archive, bad, "state/planted", in_manifest=False)
    elif damage == "escape":
        _with_member(archive, bad, "../planted", in_manifest=True)
    elif damage == "truncated":
        bad.write_bytes(archive.read_bytes()[: archive.stat().st_size // 2])
    else:
        bad.write_bytes(b"\xff\x00 not an archive\n")
    target = tmp_path / "restored"
    code, _, err = await arun(["restore", "--from", str(bad), "--state-dir", str(target)], capsys)
    assert_one_line_failure(code, err, reason)
    assert not target.exists()
    assert _siblings(target) == []
    assert not (tmp_path / "planted").exists()


async def test_a_restore_is_refused_while_a_gate_runs_on_the_state_and_over_a_full_one(
    archive: Path, seeded: StateDir, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (seeded.root / "marker").write_text("the folder as it was\n")
    argv = ["restore", "--from", str(archive), "--state-dir", str(seeded.root)]
    with exclusive(seeded):  # what `up` holds for as long as it runs
        code, _, err = await arun([*argv, "--force"], capsys)
    assert_one_line_failure(code, err, "a gate is running on", "stop it before restoring")
    code, _, err = await arun(argv, capsys)
    assert_one_line_failure(code, err, "is not empty; pass --force")
    assert (seeded.root / "marker").read_text() == "the folder as it was\n"
    assert _siblings(seeded.root) == []

    report = await _json([*argv, "--force"], capsys)
    aside = Path(str(report["replaced"]))
    assert (aside / "marker").is_file()
    assert not (seeded.root / "marker").exists()
    assert report["ledger_result"] == "no-ledger"  # no gate ever ran on the demo state
    stack = await start_stack(seeded, with_connectors=False)
    await stack.stop()


async def test_a_backup_never_overwrites_and_needs_a_state_folder(
    seeded: StateDir, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    existing = tmp_path / "kept.tar.gz"
    existing.write_bytes(b"an earlier backup\n")
    code, _, err = await arun(
        ["backup", "--state-dir", str(seeded.root), "--out", str(existing)], capsys
    )
    assert_one_line_failure(code, err, "refusing to overwrite")
    assert existing.read_bytes() == b"an earlier backup\n"
    code, _, err = await arun(
        ["backup", "--state-dir", str(tmp_path / "none"), "--out", str(tmp_path / "b.tgz")],
        capsys,
    )
    assert_one_line_failure(code, err, "is not a state folder")
    with exclusive(seeded):  # `up` runs but wrote no nats.url yet
        code, _, err = await arun(
            ["backup", "--state-dir", str(seeded.root), "--out", str(tmp_path / "b.tgz")], capsys
        )
    assert_one_line_failure(code, err, "another `smf-assurance up` is running")
    assert not (tmp_path / "b.tgz").exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []
    assert os.listdir(tmp_path)


async def test_the_tables_say_what_was_copied_and_that_the_keys_are_in_it(
    seeded: StateDir, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without ``--json``: the backup's table names the archive, says it was taken
    offline and that the private keys are in it, and lists the streams; the restore's
    names what it restored and what the ledger check proved."""
    out = tmp_path / "table.tar.gz"
    code, printed, _ = await arun(
        ["backup", "--state-dir", str(seeded.root), "--out", str(out)], capsys
    )
    assert code == 0
    assert table_value(printed, "archive") == str(out)
    assert table_value(printed, "online") == "no"
    assert table_value(printed, "private keys").startswith("included")
    assert "stream  messages" in printed  # none yet: no gate ever ran on the demo state
    target = tmp_path / "from-table"
    code, printed, _ = await arun(
        ["restore", "--from", str(out), "--state-dir", str(target)], capsys
    )
    assert code == 0
    assert table_value(printed, "state dir") == str(target)
    assert table_value(printed, "set aside") == "-"
    assert table_value(printed, "ledger") == "no-ledger"
    code, _, err = await arun(
        ["restore", "--from", str(tmp_path / "absent.tgz"), "--state-dir", str(target)], capsys
    )
    assert_one_line_failure(code, err, "absent.tgz: no such file")
    assert code == 2
