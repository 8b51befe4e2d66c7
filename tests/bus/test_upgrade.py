"""Upgrades: the state the previous version wrote opens, and is kept, under today's code.

Issue 39, "Upgrades". The project has no tags; the previous version is the last commit
that passed CI, 6e1624e, and ``tests/data/older-state/<commit>/`` holds the state
folder its own code wrote (``python -m smf_tools.fixtures.older_state``, its MANIFEST
says how): the demo's scenarios, a direct allow executed, a filing held and denied,
one held and left pending, the ledger's tail signed as ``up`` signs it at stop, and
JetStream's store with the checkpoint, the orders and the approval announcements.

Each test unpacks it into its own folder and runs today's code on it, a real
nats-server on the state's own store and real SQLite files: ``ledger verify`` (the
command) says ``verified`` against the older gate's checkpoint with the older entry
count and hash; today's stack starts on it, decides, and extends the same chain; the
older files, once opened, have exactly the schema today's code creates; every older
approval is shown in the state the older gate left it (the pending one expired); a
state folder others may enter is refused. The replay test is the invariant under
attack: the older runtime's very bytes of an executed allow, sent to today's gate
moments after the older one stopped (its clock set there, the claim still in force),
get the recorded verdict, and the same proposal id signed again is denied
``duplicate_proposal``: no order is published, none is added to the book, no claim
is written, and the ledger gains only that refusal's entry.

Not proven: a state of any other commit (one fixture, of one commit); a cluster's
state (its stores are KV buckets, not in the fixture); a ledger of schema 1, which
``tests/unit/test_ledger_schema2.py`` migrates from ``tests/data/ledger-v1.db``.
Between 6e1624e and today no store's schema changed, so nothing here needed a
migration: the schema test is what will show the first change that needs one.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Final

import pytest
from nats.aio.client import Client

from smf_assurance.ops.demo.script import SCENARIOS
from smf_assurance.ops.local.bus import connect_bus
from smf_assurance.ops.local.defaults import CONSOLE, OPERATOR
from smf_assurance.ops.local.stack import (
    Stack,
    seed_demo_documents,
    start_embedded_server,
    start_stack,
)
from smf_assurance.ops.local.state import RELEASE_SIGNER, StateDir, private_files
from smf_assurance.pipeline.stores.ledger_schema import SCHEMA_VERSION
from smf_assurance.pipeline.stores.state_check import STATE_FOLDER_TOO_OPEN, StateRefused
from smf_assurance.subjects import names
from smf_assurance.subjects.clock import wall_clock_ms
from tests.support.bus_helpers import ExecuteSpy, stream_count, wait_for
from tests.support.bus_properties import from_scenario, runtime_client
from tests.support.cli_ops import arun, assert_one_line_failure
from tests.support.clocks import OffsetClock
from tests.support.older_state import (
    OLDER_COMMIT,
    approvals_expiry,
    archived_modes,
    assert_replay_answered_from_record,
    count,
    ledger_rows,
    manifest,
    recorded,
    schema,
    too_open,
    unpack,
)

RESTART_AFTER_MS: Final = 5_000
"""How long after the older stack stopped the replay test's gate believes it starts."""
MARGIN_MS: Final = 60_000
"""Slack around the fixture's own deadlines, for a run minutes after it was made."""
ANNOUNCED_MS: Final = 3_600_000
"""How long the server keeps an approval's announcement (``SMF_APPROVALS``' ``max_age``)."""
ATTORNEY: Final = "attorney-alex"
STALE_AFTER_MS: Final = 180_000
"""Past this, a proposal is stale to a gate on the wall clock: ``GateSettings.freshness_ms``
(120 s) and a minute to spare."""
ALLOW: Final = next(a for a in SCENARIOS if a.name == "6 retention deletion (allowed)")
TAINTED: Final = next(a for a in SCENARIOS if a.name == "3 tainted external email")


@pytest.fixture
def older(tmp_path: Path) -> StateDir:
    """The older state, unpacked; this process creates its files private, as ``up``
    does (a read of a WAL file makes its ``-shm`` of the process's mask)."""
    private_files()
    return unpack(tmp_path / "older")


async def _connect(stack: Stack, principal: str) -> Client:
    """A connection as ``principal`` with its own credential from the older state."""
    return await connect_bus(
        stack.url, f"upgrade-{principal}", stack.state.existing_credential(principal)
    )


async def _verify(
    state: StateDir, url: str | None, capsys: pytest.CaptureFixture[str]
) -> dict[str, object]:
    """``ledger verify --json`` of the state's ledger, against the checkpoints on the
    bus at ``url``, or (None) against the file's own."""
    bus = ["--nats", url] if url is not None else []
    code, out, _ = await arun(
        [
            "ledger", "verify", "--db", str(state.ledger), "--state-dir", str(state.root),
            *bus, "--json",
        ],
        capsys,
    )  # fmt: skip
    assert code == 0, out
    verified: dict[str, object] = json.loads(out)
    return verified


def test_the_fixture_names_the_commit_that_wrote_it_and_keeps_its_modes(older: StateDir) -> None:
    assert manifest()["commit"] == OLDER_COMMIT == recorded().commit
    assert "demo key" in manifest()["keys"]
    modes = archived_modes()
    assert modes["state"] == 0o700
    assert modes["state/ledger.db"] == modes["state/keys/gate.key"] == 0o600
    assert set(modes.values()) == {0o700, 0o600}
    assert too_open(older.root) == []
    assert older.ledger.is_file()
    assert older.approvals.is_file()


@pytest.mark.claim("protected-evidence.previous-state-opens")
async def test_the_older_ledger_verifies_against_its_own_checkpoint_then_todays_gate_extends_it(
    older: StateDir, capsys: pytest.CaptureFixture[str], clients: list[Client]
) -> None:
    before = ledger_rows(older.ledger)
    assert len(before) == recorded().older_files.ledger_entries

    offline = await _verify(older, None, capsys)
    assert offline["result"] == "self-consistent"
    assert (offline["entries"], offline["checkpoints"]) == (len(before), 1)

    server = start_embedded_server(older)  # the older store: its checkpoint is there
    try:
        verified = await _verify(older, server.url, capsys)
    finally:
        server.close()
    assert verified["result"] == "verified"
    assert verified["entries"] == len(before)
    assert verified["checkpoint_seq"] == before[-1].seq
    assert verified["last_entry_hash"] == before[-1].entry_hash

    seed_demo_documents(older)  # the older runs deleted doc-1207; a firm's DMS has new ones
    stack = await start_stack(older)
    try:
        observer = await _connect(stack, OPERATOR)
        clients.append(observer)
        spy = await ExecuteSpy.attach(observer)
        runtime = runtime_client(await _connect(stack, "runtime"), older)
        clients.append(runtime.nc)
        replay = recorded().replay
        assert wall_clock_ms() - replay.issued_at_ms > STALE_AFTER_MS, "fixture too new"
        stale = await runtime.send(replay.proposal_id, replay.signed)
        assert stale.outcome == "deny"
        assert stale.reason_codes == ("stale_proposal",)
        allowed = await runtime.propose(from_scenario(runtime, ALLOW))
        denied = await runtime.propose(from_scenario(runtime, TAINTED))
        assert allowed.outcome == "allow"
        assert allowed.order_id is not None
        assert denied.outcome == "deny"
        assert "injection_tainted_egress" in denied.reason_codes

        def consumed() -> bool:
            return any(
                row.status == "consumed" and row.decision_id == allowed.decision_id
                for row in ledger_rows(older.ledger)[len(before) :]
            )

        await wait_for(consumed, timeout=15)
        assert [(m.headers or {}).get(names.HEADER_MSG_ID) for m in await spy.settled()] == [
            allowed.order_id
        ]
        await stack.gate.ledger.checkpoint(wall_clock_ms())
        after = await _verify(older, stack.url, capsys)
    finally:
        await stack.stop()

    rows = ledger_rows(older.ledger)
    assert rows[: len(before)] == before, "today's gate rewrote none of the older entries"
    new = {row.decision_id: row for row in rows[len(before) :] if row.kind == "decision"}
    assert new[allowed.decision_id].disposition == "allow"
    assert new[denied.decision_id].disposition == "deny"
    assert [row.seq for row in rows] == list(range(1, len(rows) + 1))
    assert after["result"] == "verified"
    assert after["entries"] == len(rows)
    assert after["checkpoint_seq"] == rows[-1].seq


@pytest.mark.claim("protected-evidence.previous-state-opens")
async def test_the_older_files_have_todays_schema_once_todays_gate_opened_them(
    older: StateDir, state: StateDir
) -> None:
    """The older files, after today's gate ran on them, match the files today's gate
    creates for a new state: a store whose schema changed without a migration shows
    here as a difference, not later as a failing write."""
    private_files()
    assert recorded().older_files.ledger_schema_version == SCHEMA_VERSION
    for fresh_or_older in (state, older):
        stack = await start_stack(fresh_or_older, with_connectors=False)
        await stack.stop()
    for name in ("ledger.db", "approvals.db", "release-state.db"):
        assert schema(older.root / name) == schema(state.root / name), name


@pytest.mark.claim("protected-evidence.previous-state-opens")
async def test_the_approvals_the_older_gate_recorded_are_listed_in_their_states(
    older: StateDir, capsys: pytest.CaptureFixture[str]
) -> None:
    """Today's gate answers for every older approval from the older approval file:
    ``approvals show`` (the attorney's, by id) says the demo's consumed approval and the
    denied one are closed in those states, and the one left pending is expired once its
    deadline passed while no gate ran. ``approvals pending --all`` lists what the
    state's own ``SMF_APPROVALS`` stream still holds, each in the same state: the
    server keeps an announcement an hour (``max_age``), so a fixture older than that
    lists none, and one younger lists all three."""
    older_states = recorded().older_files.approval_states
    assert sorted(older_states.values()) == ["consumed", "denied", "pending"]
    (pending,) = (a for a, s in older_states.items() if s == "pending")
    to_expiry = approvals_expiry(older.approvals)[pending] - wall_clock_ms()
    expected = {**older_states, pending: "expired"}
    age_ms = wall_clock_ms() - recorded().stopped_at_ms
    if to_expiry > -MARGIN_MS:
        pytest.fail(f"the fixture is {age_ms // 1000} s old; its pending approval expires then")

    stack = await start_stack(older, with_connectors=False)
    attorney = [
        "--nats", stack.url,
        "--credential", str(older.bus_credential_path(ATTORNEY)),
        "--key", str(older.key_path(ATTORNEY)),
        "--directory", str(older.directory),
    ]  # fmt: skip
    console = ["--nats", stack.url, "--credential", str(older.bus_credential_path(CONSOLE))]
    try:
        lines: dict[str, str] = {}

        async def shown_closed(approval_id: str) -> str:
            code, _, err = await arun(["approvals", "show", approval_id, *attorney], capsys)
            assert_one_line_failure(code, err, approval_id, "approval_not_pending")
            lines[approval_id] = err
            return err.split("(state ", 1)[1].split(")", 1)[0]

        async def all_closed() -> bool:
            return await shown_closed(pending) == "expired"

        await wait_for(all_closed, timeout=15, interval=0.5)
        shown = {approval_id: await shown_closed(approval_id) for approval_id in expected}
        code, out, _ = await arun(["approvals", "pending", "--all", "--json", *console], capsys)
    finally:
        await stack.stop()
    assert shown == expected
    by_state = {state: lines[approval_id] for approval_id, state in expected.items()}
    assert "reasons approver_denied" in by_state["denied"]
    assert "the connector's receipt ECF-" in by_state["consumed"]
    assert code == 0
    listed = {a["approval_id"]: a["state"] for a in json.loads(out)["approvals"]}
    assert listed == {a: s for a, s in expected.items() if a in listed}
    if age_ms < ANNOUNCED_MS - MARGIN_MS:
        assert listed == expected
    elif age_ms > ANNOUNCED_MS + MARGIN_MS:
        assert listed == {}


@pytest.mark.claim("protected-evidence.previous-state-opens")
async def test_a_proposal_the_older_gate_executed_is_never_executed_again(
    older: StateDir, clients: list[Client]
) -> None:
    """The attack: the older runtime's exact bytes of an executed allow, then the same
    proposal id signed afresh, sent to today's gate as it starts on the older state
    moments after the older gate stopped (within the claim's retention and the
    proposal's freshness; a production gate holds no release key, so none is signed
    now and the older release is the one in force)."""
    replay = recorded().replay
    assert recorded().older_files.claims[replay.proposal_id] == "published"
    (older.key_path(RELEASE_SIGNER)).unlink()
    clock = OffsetClock()
    clock.offset_ms = recorded().stopped_at_ms + RESTART_AFTER_MS - wall_clock_ms()
    orders_before = count(older.ledger, "direct_orders")
    before = ledger_rows(older.ledger)

    stack = await start_stack(older, with_connectors=False, clock=clock)
    try:
        observer = await _connect(stack, OPERATOR)
        clients.append(observer)
        spy = await ExecuteSpy.attach(observer)
        executed_before = await stream_count(observer.jetstream())
        runtime = runtime_client(await _connect(stack, "runtime"), older)
        clients.append(runtime.nc)

        resigned = from_scenario(
            runtime, ALLOW, proposal_id=replay.proposal_id, issued_at_ms=clock()
        )
        await assert_replay_answered_from_record(
            runtime, replay.proposal_id, replay.signed, replay.order_id, resigned
        )

        assert await spy.settled() == []
        assert await stream_count(observer.jetstream()) == executed_before
    finally:
        await stack.stop()

    rows = ledger_rows(older.ledger)
    assert rows[: len(before)] == before
    (added,) = rows[len(before) :]
    # The policy's allow, recorded with the reason its claim was refused: the one
    # entry of the attack (the recorded verdict wrote nothing), and no claim row.
    assert (added.kind, added.disposition) == ("decision", "allow")
    assert "duplicate_proposal" in added.reason_codes
    assert count(older.ledger, "proposal_claims") == len(recorded().older_files.claims)
    assert count(older.ledger, "direct_orders") == orders_before


async def test_the_older_state_folder_others_may_enter_is_refused(older: StateDir) -> None:
    os.chmod(older.root, 0o755)
    with pytest.raises(StateRefused) as refused:
        await start_stack(older, with_connectors=False)
    assert refused.value.reason_code == STATE_FOLDER_TOO_OPEN
    assert f"chmod 700 '{older.root}'" in str(refused.value)
