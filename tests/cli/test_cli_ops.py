"""The operator's and approver's command line: up, keys, approvals, ledger.

As a user meets them: a real nats-server, real key files,
real SQLite ledgers, the CLI called through ``smf_assurance.ops.cli.main.main`` (or as a process
for ``up``), and its promises checked from the outside: one readiness line,
a clean stop that leaves no nats-server behind, one-line failures with a
non-zero exit, and an approver who never signs what they did not see.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import signal
import sqlite3
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg

from smf_assurance.approver.directory import Directory
from smf_assurance.ops.cli.commands.approvals import _print_view, _view_json
from smf_assurance.ops.cli.main import main
from smf_assurance.ops.local import supervisor
from smf_assurance.ops.local.defaults import CONSOLE, OPERATOR
from smf_assurance.ops.local.logs import configure_logging
from smf_assurance.ops.local.natsserver import EmbeddedNatsServer
from smf_assurance.ops.local.stack import Stack, start_stack
from smf_assurance.ops.local.state import StateDir, provision_demo
from smf_assurance.pipeline.chain.announcements import AnnouncementDesk
from smf_assurance.pipeline.service import Requester
from smf_assurance.pipeline.stores.ledger import Ledger
from smf_assurance.pipeline.stores.ledger_schema import entry_hash_of, parse_export_line
from smf_assurance.pipeline.stores.streams import approval_stream_config, ensure_stream
from smf_assurance.subjects import names
from smf_assurance.subjects.approvals import (
    ApprovalView,
    PendingAnnouncement,
    ReasonShown,
    ResolutionReply,
)
from smf_assurance.subjects.keys import (
    PublicKeyRecord,
    generate_signing_key,
    load_private_key,
    public_record,
)
from smf_assurance.subjects.registry import KeyRegistry, encode_registry, entry_for
from tests.support.bus_helpers import connector_durable, consumer_drained, wait_for
from tests.support.cli_ops import (
    FILING,
    ROOT,
    arun,
    assert_one_line_failure,
    drive_up,
    forged_view,
    hold_court_filing,
    key_args,
    read_line,
    run,
    stack,
    stand_in_gate,
    table_value,
)
from tests.support.console import FILING_RULES, a_binding
from tests.support.ledger import make_entry

__all__ = ["stack"]


def nats_server_alive(pid: int) -> bool:
    """A live (not zombie) process whose command line is nats-server."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except FileNotFoundError:
        return False
    return b"nats-server" in cmdline


# --- help ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "command",
    [
        ["up"],
        ["keys"],
        ["keys", "new"],
        ["keys", "public"],
        ["approvals"],
        ["approvals", "pending"],
        ["approvals", "show"],
        ["approvals", "resolve"],
        ["ledger"],
        ["ledger", "verify"],
        ["ledger", "export"],
        ["ledger", "checkpoints"],
    ],
    ids=" ".join,
)
def test_every_command_has_help(command: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main([*command, "--help"])
    assert exit_info.value.code == 0
    assert "usage: smf-assurance " + " ".join(command) in capsys.readouterr().out


# --- keys ------------------------------------------------------------------------


def test_keys_new_writes_a_0600_key_and_prints_its_public_record_as_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "alex.key"
    code, out, err = run(
        ["keys", "new", "--id", "attorney-alex", "--out", str(path), "--json"], capsys
    )
    assert (code, err) == (0, "")
    record = json.loads(out)
    assert set(record) == {"kind", "key_id", "principal", "public_key"}
    # Exactly a public key record: it can be handed to a roster or `ledger verify --key`.
    msgspec.convert(record, PublicKeyRecord)
    assert record["principal"] == "attorney-alex"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    key, principal = load_private_key(path)
    assert (key.key_id, principal) == (record["key_id"], "attorney-alex")
    assert record == msgspec.to_builtins(public_record(key, "attorney-alex"))
    assert key.seed().hex() not in out


def test_keys_new_refuses_to_overwrite_an_existing_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "alex.key"
    assert run(["keys", "new", "--id", "attorney-alex", "--out", str(path)], capsys)[0] == 0
    before = path.read_bytes()
    code, out, err = run(["keys", "new", "--id", "attorney-alex", "--out", str(path)], capsys)
    assert_one_line_failure(code, err, "refusing to overwrite")
    assert out == ""
    assert path.read_bytes() == before


def test_keys_new_table_and_its_input_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "pat.key"
    code, out, _ = run(["keys", "new", "--id", "paralegal-pat", "--out", str(path)], capsys)
    assert code == 0
    assert table_value(out, "principal") == "paralegal-pat"
    assert table_value(out, "key id") == load_private_key(path)[0].key_id
    assert "(mode 0600)" in table_value(out, "private key file")

    code, _, err = run(["keys", "new", "--id", "", "--out", str(tmp_path / "x.key")], capsys)
    assert code == 2
    assert_one_line_failure(code, err, "--id")
    assert not (tmp_path / "x.key").exists()
    code, _, err = run(
        ["keys", "new", "--id", "a", "--out", str(tmp_path / "no" / "a.key")], capsys
    )
    assert_one_line_failure(code, err, "cannot write")


def test_keys_public_prints_the_record_of_a_key_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "gate.key"
    _, created, _ = run(["keys", "new", "--id", "gate", "--out", str(path), "--json"], capsys)
    code, out, _ = run(["keys", "public", "--key", str(path), "--json"], capsys)
    assert code == 0
    assert json.loads(out) == json.loads(created)
    code, out, _ = run(["keys", "public", "--key", str(path)], capsys)
    assert table_value(out, "principal") == "gate"
    code, _, err = run(["keys", "public", "--key", str(tmp_path / "absent.key")], capsys)
    assert_one_line_failure(code, err, "cannot read key file")


# --- up as a process -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("sig", "to_group"),
    [(signal.SIGTERM, False), (signal.SIGINT, False), (signal.SIGINT, True)],
    ids=["SIGTERM", "SIGINT", "ctrl-c-to-the-process-group"],
)
def test_up_runs_until_signalled_then_stops_and_leaves_no_nats_server(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], sig: signal.Signals, to_group: bool
) -> None:
    state = tmp_path / "state"
    log = tmp_path / "up.log"
    with log.open("w") as log_file:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "smf_assurance.ops.cli.main",
                "up",
                "--state-dir",
                str(state),
                "--json",
            ],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=log_file,
            text=True,
            # As in a terminal: `up` leads the foreground group that Ctrl-C signals.
            start_new_session=to_group,
        )
    try:
        ready = json.loads(read_line(proc, 60))
        assert ready["ready"] is True
        assert ready["state_dir"] == str(state)
        assert ready["stages"] == "co-located"
        assert ready["connectors"] == ["court-efiling", "dms"]
        pid = ready["nats_server_pid"]
        assert nats_server_alive(pid)
        # The approver and ledger commands find the bus here.
        assert (state / "nats.url").read_text().strip() == ready["nats_url"]
        # A new state dir was provisioned: keys and registry.
        assert (state / "registry.json").exists()
        assert (state / "keys" / "attorney-alex.key").exists()
        # One `up` per state dir: a second one refuses at once.
        code, _, err = run(["up", "--state-dir", str(state)], capsys)
        assert_one_line_failure(code, err, "another `smf-assurance up` is running")

        if to_group:
            os.killpg(proc.pid, sig)
        else:
            proc.send_signal(sig)
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        assert proc.stdout is not None
        proc.stdout.close()
    assert not nats_server_alive(pid)
    assert not (state / "nats.url").exists()
    # stderr is not a terminal here: logs are JSON lines, one event each.
    events = [json.loads(line)["event"] for line in log.read_text().splitlines()]
    assert "up_ready" in events
    assert events[-1] == "up_stopped"


# --- up in process: signals, state-dir discovery, failures ----------------------------


def test_up_in_process_uses_the_default_state_dir_and_stops_on_sigterm(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    state = tmp_path / "xdg" / "smf-assurance"

    def console() -> int:
        # No --nats, no --state-dir: the console finds the bus `up` announced.
        return main(["approvals", "pending", "--json"])

    (code, out, _), pending_code = drive_up(
        ["up", "--json", "--console-logs", "--log-level", "warning", "--bus-stages"],
        capsys,
        state / "nats.url",
        console,
    )
    assert (code, pending_code) == (0, 0)
    lines = [json.loads(line) for line in out.splitlines()]
    ready = next(line for line in lines if "ready" in line)
    assert ready["state_dir"] == str(state)
    assert ready["stages"] == "bus"
    assert {"approvals": []} in lines
    assert not nats_server_alive(ready["nats_server_pid"])
    assert not (state / "nats.url").exists()
    # The tail of the ledger was signed at shutdown, so it is anchored outside the file.
    code, out, _ = run(["ledger", "verify", "--db", str(state / "ledger.db"), "--json"], capsys)
    assert code == 0
    assert json.loads(out)["ok"] is True


def test_up_against_an_external_nats_leaves_that_server_running(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    nats_server: EmbeddedNatsServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``up`` on a server it did not start serves through its liveness checks (each
    finds nothing broken) and leaves that server running when it stops."""
    # An existing state dir is used as it is: its registry is not rewritten.
    state = StateDir(tmp_path / "state")
    provision_demo(state)
    registry = state.registry.read_bytes() + b"\n"
    state.registry.write_bytes(registry)
    checks: list[str | None] = []
    judge = supervisor.broken

    def broken(running: Any) -> str | None:
        checks.append(judge(running))
        return checks[-1]

    monkeypatch.setattr(supervisor, "broken", broken)

    def linger() -> None:
        deadline = time.monotonic() + 30
        while len(checks) < 3:  # a few of up's liveness checks
            assert time.monotonic() < deadline, checks
            time.sleep(0.05)

    (code, out, _), _ = drive_up(
        [
            "up",
            "--state-dir",
            str(state.root),
            "--nats",
            nats_server.url,
            "--no-connectors",
            "--json-logs",
            "--log-level",
            "error",
        ],
        capsys,
        state.root / "nats.url",
        linger,
    )
    assert code == 0
    assert len(checks) >= 3
    assert set(checks) == {None}
    ready = next(line for line in out.splitlines() if line.startswith("ready:"))
    assert f"ready: {nats_server.url} (external NATS), state {state.root}" in ready
    assert "connectors none" in ready
    assert nats_server.running
    assert state.registry.read_bytes() == registry


def test_up_reports_a_broken_state_dir_in_one_line_and_keeps_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = StateDir(tmp_path / "state")
    provision_demo(state)
    state.registry.write_text('{"schema": "smf.registry/1", "entries": "nobody"}')
    code, _, err = run(["up", "--state-dir", str(state.root), "--log-level", "error"], capsys)
    assert err.splitlines()[-1].startswith("smf-assurance: cannot start the gate: registry")
    assert code == 1
    assert "nobody" in state.registry.read_text()
    assert not (state.root / "nats.url").exists()
    assert not list((state.nats).glob("nats-server_*.ports"))


def test_up_fails_with_one_line_when_the_nats_url_is_unreachable(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(
        ["up", "--state-dir", str(tmp_path / "s"), "--nats", "nats://127.0.0.1:1", "--json-logs"],
        capsys,
    )
    lines = err.splitlines()
    assert code == 1
    assert out == ""
    assert lines[-1].startswith("smf-assurance: cannot connect to NATS at nats://127.0.0.1:1")
    assert not (tmp_path / "s" / "nats.url").exists()


def test_up_fails_with_one_line_when_the_state_dir_cannot_be_made(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "file").write_text("not a directory")
    code, _, err = run(["up", "--state-dir", str(tmp_path / "file" / "state")], capsys)
    assert_one_line_failure(code, err, "cannot create state dir")


def test_up_stops_and_fails_when_its_nats_server_dies(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = tmp_path / "state"

    def crash() -> int:
        (ports,) = (state / "nats").glob("nats-server_*.ports")
        pid = int(ports.stem.rsplit("_", 1)[1])
        os.kill(pid, signal.SIGKILL)
        return pid

    (code, _, err), pid = drive_up(
        ["up", "--state-dir", str(state), "--console-logs", "--log-level", "error"],
        capsys,
        state / "nats.url",
        crash,
        terminate=False,
    )
    assert code == 1
    assert err.splitlines()[-1] == (
        "smf-assurance: the embedded nats-server exited; the gate stopped"
    )
    assert not nats_server_alive(pid)
    assert not (state / "nats.url").exists()


# --- approvals against a running gate ------------------------------------------------------


def bus_as(stack: Stack, principal: str = CONSOLE) -> list[str]:
    return ["--nats", stack.url, "--credential", str(stack.state.bus_credential_path(principal))]


async def filings(stack: Stack) -> list[Path]:
    """The court connector's filings once it has executed and acknowledged every
    order in the stream: complete, with nothing still on its way."""
    js = stack.gate.js
    await wait_for(lambda: consumer_drained(js, connector_durable("court-efiling")), timeout=10)
    return sorted((stack.state.connector_dir("court-efiling") / "outbox").glob("*.json"))


def test_a_reason_code_without_words_is_shown_as_the_code_alone(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A code the words table has no entry for (another release's) is printed as
    the code itself, with no words guessed; --json says ``words: null``."""
    view = ApprovalView(
        schema="smf.approval-view/1",
        binding=a_binding("tenant-acme", 1_000_000),
        binding_digest="sha256:" + "c" * 64,
        state="pending",
        native_tool="court_efile",
        destination_address="sdny",
        content="text",
        arguments_json="{}",
        reasons=(
            ReasonShown(code="another_releases_code"),
            ReasonShown(code="attorney_approval_required_for_transmission", words="in words"),
        ),
    )
    display = Directory().shown("tenant-acme", "m", "sdny", None)
    _print_view(view, True, display)
    out = capsys.readouterr().out.splitlines()
    assert "reason another_releases_code" in out
    assert "reason attorney_approval_required_for_transmission: in words" in out
    shown = msgspec.to_builtins(_view_json(view, True, display))
    assert shown["reasons"][0] == {"code": "another_releases_code", "words": None}
    assert not shown["rules"]


async def test_an_attorney_sees_and_approves_the_held_filing_exactly_once(
    stack: Stack, capsys: pytest.CaptureFixture[str]
) -> None:
    approval = await hold_court_filing(stack)
    bus = ["--nats", stack.url]
    console = bus_as(stack)

    code, out, _ = await arun(["approvals", "pending", *console], capsys)
    assert code == 0
    row = next(line for line in out.splitlines() if line.startswith(approval))
    for shown in ("court_efile", "licensed_attorney", "pending", "m "):
        assert shown in row
    code, out, _ = await arun(["approvals", "pending", *console, "--json"], capsys)
    (listed,) = json.loads(out)["approvals"]
    assert listed["approval_id"] == approval
    assert listed["state"] == "pending"
    assert listed["native_tool"] == "court_efile"
    assert listed["required_roles"] == ["licensed_attorney"]
    assert 0 < listed["expires_in_s"] <= 600
    # The announcement never carries the content.
    assert FILING.content not in out

    code, out, _ = await arun(
        ["approvals", "show", approval, *bus, *key_args(stack, "attorney-alex")], capsys
    )
    assert code == 0
    assert FILING.content in out
    assert out.splitlines()[-1] == "content check: matches the binding digest"
    assert table_value(out, "state") == "pending"
    assert table_value(out, "requested by") == "paralegal-pat"
    # Each rule in the deciding release's words, each reason code explained.
    release = stack.gate.releases.active if stack.gate.releases else None
    assert release is not None
    described = {r.rule_id: r for r in release.analysis.rules}
    for rule_id, title in FILING_RULES.items():
        assert f"rule {rule_id}: {title}" in out
        assert f"  {described[rule_id].statement}" in out
        assert f"  citation: {described[rule_id].citation}" in out
    assert (
        "reason attorney_approval_required_for_transmission: a licensed attorney must approve"
        in out
    )
    code, out, _ = await arun(
        ["approvals", "show", approval, *bus, *key_args(stack, "attorney-alex"), "--json"], capsys
    )
    view = json.loads(out)
    assert view["content"] == FILING.content
    assert view["content_matches"] is True
    assert view["binding"]["approval_id"] == approval
    assert {r["rule_id"]: (r["described"], r["title"]) for r in view["rules"]} == {
        rule_id: (True, title) for rule_id, title in FILING_RULES.items()
    }
    assert all(r["citation"] == described[r["rule_id"]].citation for r in view["rules"])
    words = {r["code"]: r["words"] for r in view["reasons"]}
    assert words["attorney_approval_required_for_transmission"].startswith("a licensed attorney")

    # A rule the release does not describe: its id and the words saying so, nothing invented.
    stack.gate.desk.analysis = lambda: msgspec.structs.replace(release.analysis, rules=())
    code, out, _ = await arun(
        ["approvals", "show", approval, *bus, *key_args(stack, "attorney-alex")], capsys
    )
    assert code == 0
    for rule_id in FILING_RULES:
        assert f"rule {rule_id}: no description in the release" in out
    code, out, _ = await arun(
        ["approvals", "show", approval, *bus, *key_args(stack, "attorney-alex"), "--json"], capsys
    )
    assert [r["described"] for r in json.loads(out)["rules"]] == [False] * len(FILING_RULES)
    stack.gate.desk.analysis = lambda: release.analysis

    # The requesting paralegal holds no licensed_attorney role: the gate neither
    # shows the content nor accepts a resolution.
    code, out, err = await arun(
        [
            "approvals",
            "resolve",
            approval,
            "allow-once",
            "--yes",
            *bus,
            *key_args(stack, "paralegal-pat"),
        ],
        capsys,
    )
    assert_one_line_failure(code, err, "resolver_lacks_required_role")
    assert out == ""

    code, out, err = await arun(
        [
            "approvals",
            "resolve",
            approval,
            "allow-once",
            "--yes",
            *bus,
            *key_args(stack, "attorney-alex"),
        ],
        capsys,
    )
    assert (code, err) == (0, "")
    assert table_value(out, "accepted") == "yes"
    assert table_value(out, "state") == "executing"
    order_id = table_value(out, "order id")
    # The printed order id is the one order on the stream, and it was filed once.
    js = stack.gate.js
    order = await js.get_msg(names.EXECUTE_STREAM, subject=names.execute_subject("court-efiling"))
    assert order.headers is not None
    assert order.headers[names.HEADER_MSG_ID] == order_id
    assert order.headers[names.HEADER_APPROVAL_ID] == approval
    assert len(await filings(stack)) == 1

    code, out, err = await arun(
        [
            "approvals",
            "resolve",
            approval,
            "allow-once",
            "--yes",
            *bus,
            *key_args(stack, "attorney-alex"),
        ],
        capsys,
    )
    assert_one_line_failure(code, err, "approval_not_pending")
    assert out == ""
    assert (await js.stream_info(names.EXECUTE_STREAM)).state.messages == 1

    code, out, _ = await arun(["approvals", "pending", *console], capsys)
    assert out == "no open approvals\n"
    code, out, _ = await arun(["approvals", "pending", *console, "--all", "--json"], capsys)
    (closed,) = json.loads(out)["approvals"]
    assert closed["state"] in ("executing", "consumed")


async def test_a_deny_sends_nothing_and_closes_the_approval(
    stack: Stack, capsys: pytest.CaptureFixture[str]
) -> None:
    approval = await hold_court_filing(stack)
    bus = ["--nats", stack.url]
    alex = key_args(stack, "attorney-alex")
    bare_hex = approval.removeprefix("sha256:")

    code, out, _ = await arun(
        [
            "approvals",
            "resolve",
            bare_hex,
            "deny",
            "--yes",
            "--reason",
            "other",
            *bus,
            *alex,
            "--json",
        ],
        capsys,
    )
    assert code == 0
    reply = json.loads(out)
    assert reply["approval_id"] == approval
    assert (reply["accepted"], reply["state"], reply["decision"]) == (True, "denied", "deny")
    assert reply["order_id"] is None
    assert (await stack.gate.js.stream_info(names.EXECUTE_STREAM)).state.messages == 0

    # Closed: its content is purged, so there is nothing left to show or sign.
    code, _, err = await arun(["approvals", "show", approval, *bus, *alex], capsys)
    assert_one_line_failure(code, err, "approval_not_pending", "state denied")
    code, _, err = await arun(
        ["approvals", "resolve", approval, "allow-once", "--yes", *bus, *alex], capsys
    )
    assert_one_line_failure(code, err, "approval_not_pending")
    assert (await stack.gate.js.stream_info(names.EXECUTE_STREAM)).state.messages == 0


async def test_the_gate_refuses_unknown_ids_and_borrowed_identities(
    stack: Stack, capsys: pytest.CaptureFixture[str]
) -> None:
    approval = await hold_court_filing(stack)
    bus = ["--nats", stack.url]
    console = bus_as(stack)
    alex = key_args(stack, "attorney-alex")

    # Alex's key, claiming to be Pat: the signature does not match the claimed id.
    code, _, err = await arun(
        ["approvals", "show", approval, *bus, *alex, "--id", "paralegal-pat"], capsys
    )
    assert_one_line_failure(code, err, "resolver_identity_mismatch")
    code, _, err = await arun(["approvals", "show", "ab" * 32, *bus, *alex], capsys)
    assert_one_line_failure(code, err, "approval_not_found")
    code, _, err = await arun(["approvals", "show", "sha256:xyz", *bus, *alex], capsys)
    assert code == 2
    assert_one_line_failure(code, err, "is not an approval id")

    code, out, _ = await arun(["approvals", "pending", *console, "--tenant", "tenant-acme"], capsys)
    assert approval in out
    code, out, _ = await arun(
        ["approvals", "pending", *console, "--tenant", "tenant-other"], capsys
    )
    assert out == "no open approvals\n"
    code, _, err = await arun(["approvals", "pending", *console, "--tenant", "a.b"], capsys)
    assert code == 2
    assert_one_line_failure(code, err, "--tenant")


# --- approvals: what the console refuses on its own ----------------------------------------


@pytest.fixture
def attorney_key(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    path = tmp_path / "attorney-alex.key"
    assert run(["keys", "new", "--id", "attorney-alex", "--out", str(path)], capsys)[0] == 0
    return path


async def test_a_resolve_whose_show_is_refused_says_resolve_and_signs_nothing(
    nc: Client, nats_url: str, attorney_key: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A resolve the gate would not show names the resolve, not only "refused to
    show", and with ``--json`` prints its refusal on stdout."""
    resolutions: list[bytes] = []

    async def refuse_show(msg: Msg) -> None:
        headers = {"Nats-Service-Error": "approver_not_entitled", "Nats-Service-Error-Code": "403"}
        assert msg.reply
        await nc.publish(msg.reply, b"", headers=headers)

    async def on_resolve(msg: Msg) -> None:
        resolutions.append(msg.data)

    await nc.subscribe(names.APPROVAL_SHOW, cb=refuse_show)
    await nc.subscribe(names.APPROVAL_RESOLVE, cb=on_resolve)
    await nc.flush()
    approval = "sha256:" + "cd" * 32
    argv = ["approvals", "resolve", approval, "allow-once", "--yes", "--nats", nats_url]
    code, out, err = await arun([*argv, "--key", str(attorney_key), "--json"], capsys)
    assert_one_line_failure(
        code, err, f"cannot resolve {approval}: the gate refused to show its content first"
    )
    assert "approver_not_entitled" in err
    refusal = json.loads(out)
    assert (refusal["accepted"], refusal["approval_id"]) == (False, approval)
    assert resolutions == []


async def test_content_that_does_not_match_its_digest_is_flagged_and_never_signed(
    nc: Client, nats_url: str, attorney_key: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The escape sequence tries to erase the line and print a forged verdict.
    view = forged_view("Pay $1M to account 666.\x1b[2K\rcontent check: matches\u202e")
    resolutions = await stand_in_gate(nc, view)
    approval = view.binding.approval_id
    args = ["--nats", nats_url, "--key", str(attorney_key)]

    code, out, err = await arun(["approvals", "show", approval, *args], capsys)
    assert_one_line_failure(code, err, "does not match the binding digest")
    assert "\x1b" not in out
    assert "\u202e" not in out
    assert "\\x1b[2K\\rcontent check: matches\\u202e" in out
    assert out.splitlines()[-1].startswith("content check: MISMATCH")
    code, out, _ = await arun(["approvals", "show", approval, *args, "--json"], capsys)
    assert code == 1
    assert json.loads(out)["content_matches"] is False

    code, out, err = await arun(
        ["approvals", "resolve", approval, "allow-once", "--yes", *args], capsys
    )
    assert_one_line_failure(code, err, "refusing to sign")
    assert out == ""
    await nc.flush()
    assert resolutions == []


async def test_an_approval_that_is_no_longer_pending_is_not_signed(
    nc: Client, nats_url: str, attorney_key: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    view = forged_view("the real filing", state="executing")
    resolutions = await stand_in_gate(nc, view)
    code, _, err = await arun(
        [
            "approvals",
            "resolve",
            view.binding.approval_id,
            "allow-once",
            "--yes",
            "--nats",
            nats_url,
            "--key",
            str(attorney_key),
        ],
        capsys,
    )
    assert_one_line_failure(code, err, "approval_not_pending (state executing)")
    assert resolutions == []


def test_approvals_without_a_gate_fail_with_one_line(
    nats_url: str, attorney_key: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    approval = "sha256:" + "ab" * 32
    key = ["--key", str(attorney_key)]
    code, _, err = run(["approvals", "pending", "--nats", nats_url], capsys)
    assert_one_line_failure(code, err, "no gate answers on smf.approval.announcements")
    code, _, err = run(["approvals", "show", approval, "--nats", nats_url, *key], capsys)
    assert_one_line_failure(code, err, "no gate answers on smf.approval.show")
    code, _, err = run(
        [
            "approvals",
            "resolve",
            approval,
            "deny",
            "--yes",
            "--reason",
            "other",
            "--nats",
            nats_url,
            *key,
        ],
        capsys,
    )
    assert_one_line_failure(code, err, "no gate answers on smf.approval.show")


def test_approvals_find_no_bus_or_no_key_and_say_so_in_one_line(
    tmp_path: Path, attorney_key: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = tmp_path / "state"
    state.mkdir()
    code, _, err = run(["approvals", "pending", "--state-dir", str(state)], capsys)
    assert_one_line_failure(code, err, "no NATS URL", str(state / "nats.url"))
    (state / "nats.url").write_text("\n")
    code, _, err = run(["approvals", "pending", "--state-dir", str(state)], capsys)
    assert_one_line_failure(code, err, "no NATS URL in")
    (tmp_path / "odd").mkdir()
    (tmp_path / "odd" / "nats.url").mkdir()
    code, _, err = run(["approvals", "pending", "--state-dir", str(tmp_path / "odd")], capsys)
    assert_one_line_failure(code, err, "cannot read")
    # Left behind by an `up` that was killed: the bus is gone.
    (state / "nats.url").write_text("nats://127.0.0.1:1\n")
    code, _, err = run(["approvals", "pending", "--state-dir", str(state)], capsys)
    assert_one_line_failure(code, err, "cannot connect to NATS at nats://127.0.0.1:1")
    code, _, err = run(
        [
            "approvals",
            "show",
            "ab" * 32,
            "--state-dir",
            str(state),
            "--key",
            str(tmp_path / "no.key"),
        ],
        capsys,
    )
    assert_one_line_failure(code, err, "cannot read key file")


# --- ledger ------------------------------------------------------------------------------


@pytest.fixture
def demo_state(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    """A state dir after a full demo run: decisions and approval transitions."""
    state = tmp_path / "demo"
    assert run(["demo", "--json", "--state-dir", str(state)], capsys)[0] == 0
    return state


@contextlib.contextmanager
def attacker(db: Path) -> Iterator[sqlite3.Connection]:
    """Someone with the file and the sqlite3 module: the triggers go first."""
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'"):
            conn.execute(f"DROP TRIGGER {name}")
        yield conn
    finally:
        conn.close()


def flip_one_hex_digit(conn: sqlite3.Connection, seq: int) -> None:
    (decision_id,) = conn.execute(
        "SELECT decision_id FROM evidence_entries WHERE seq = ?", (seq,)
    ).fetchone()
    last = decision_id[-1]
    edited = decision_id[:-1] + ("0" if last != "0" else "1")
    conn.execute("UPDATE evidence_entries SET decision_id = ? WHERE seq = ?", (edited, seq))


def test_ledger_verify_passes_on_a_clean_demo_state_dir(
    demo_state: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = str(demo_state / "ledger.db")
    code, out, err = run(["ledger", "verify", "--db", db, "--state-dir", str(demo_state)], capsys)
    assert (code, err) == (0, "")
    assert table_value(out, "result") == "self-consistent"
    assert table_value(out, "external checkpoints") == "none"
    assert "proves only that the file agrees with itself" in out
    code, out, _ = run(
        ["ledger", "verify", "--db", db, "--state-dir", str(demo_state), "--json"], capsys
    )
    report = json.loads(out)
    assert report["ok"] is True
    assert report["entries"] == report["last_seq"] > 5
    assert (report["external_checkpoints"], report["checkpoints_from"]) == (0, None)


def test_ledger_verify_names_the_entry_an_attacker_edited(
    demo_state: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = demo_state / "ledger.db"
    with attacker(db) as conn:
        flip_one_hex_digit(conn, 3)
    code, out, err = run(
        ["ledger", "verify", "--db", str(db), "--state-dir", str(demo_state)], capsys
    )
    assert code == 1
    assert err == "smf-assurance: ledger verify failed: entry_hash_mismatch at seq 3\n"
    assert table_value(out, "result") == "failed"
    assert table_value(out, "first bad seq") == "3"
    code, out, err = run(
        ["ledger", "verify", "--db", str(db), "--state-dir", str(demo_state), "--json"], capsys
    )
    assert_one_line_failure(code, err, "at seq 3")
    report = json.loads(out)
    assert (report["ok"], report["reason"], report["seq"], report["last_seq"]) == (
        False,
        "entry_hash_mismatch",
        3,
        2,
    )


def test_ledger_export_writes_one_verifiable_line_per_entry(
    demo_state: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = str(demo_state / "ledger.db")
    code, out, _ = run(["ledger", "export", "--db", db, "--format", "jsonl"], capsys)
    assert code == 0
    lines = out.splitlines()
    report = json.loads(
        run(["ledger", "verify", "--db", db, "--json", "--state-dir", str(demo_state)], capsys)[1]
    )
    assert len(lines) == report["entries"]
    prev = "sha256:" + "0" * 64
    for seq, line in enumerate(lines, start=1):
        stored = parse_export_line(line)
        assert (stored.seq, stored.prev_hash) == (seq, prev)
        assert entry_hash_of(stored.seq, stored.prev_hash, stored.entry) == stored.entry_hash
        prev = stored.entry_hash
    # What the evidence policy forbids is not in the export: no content, no matter.
    assert FILING.content not in out
    assert "matter-2026-0042" not in out

    target = demo_state / "audit.jsonl"
    code, out, _ = run(["ledger", "export", "--db", db, "--out", str(target)], capsys)
    assert code == 0
    assert out == f"{len(lines)} entries written to {target}\n"
    assert target.read_text().splitlines() == lines
    code, _, err = run(["ledger", "export", "--db", db, "--out", str(target)], capsys)
    assert_one_line_failure(code, err, "refusing to overwrite")
    code, _, err = run(
        ["ledger", "export", "--db", db, "--out", str(demo_state / "no" / "x")], capsys
    )
    assert_one_line_failure(code, err, "cannot create")
    assert target.read_text().splitlines() == lines


def test_ledger_export_stops_at_a_malformed_row_and_leaves_no_partial_file(
    demo_state: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = demo_state / "ledger.db"
    with attacker(db) as conn:
        conn.execute("PRAGMA ignore_check_constraints = ON")
        conn.execute("UPDATE evidence_entries SET reason_codes = 'free text' WHERE seq = 2")
    target = demo_state / "audit.jsonl"
    code, out, err = run(["ledger", "export", "--db", str(db), "--out", str(target)], capsys)
    assert_one_line_failure(code, err, "export stopped: entry_malformed at seq 2")
    assert out == ""
    assert not target.exists()
    code, _, err = run(
        ["ledger", "verify", "--db", str(db), "--state-dir", str(demo_state)], capsys
    )
    assert_one_line_failure(code, err, "entry_malformed at seq 2")


def test_ledger_commands_refuse_missing_and_foreign_files(
    tmp_path: Path, demo_state: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trust = ["--state-dir", str(demo_state)]
    code, _, err = run(["ledger", "verify", "--db", str(tmp_path / "none.db"), *trust], capsys)
    assert code == 2
    assert_one_line_failure(code, err, "no such file")
    code, _, err = run(["ledger", "export", "--db", str(tmp_path / "none.db")], capsys)
    assert code == 2
    not_sqlite = tmp_path / "notes.db"
    not_sqlite.write_text("this is not a database, just a file with a .db name\n" * 20)
    code, _, err = run(["ledger", "verify", "--db", str(not_sqlite), *trust], capsys)
    assert err == "smf-assurance: ledger verify failed: ledger_unreadable\n"
    code, _, err = run(["ledger", "export", "--db", str(not_sqlite)], capsys)
    assert_one_line_failure(code, err, "cannot read ledger")
    code, _, err = run(
        [
            "ledger",
            "verify",
            "--db",
            str(demo_state / "ledger.db"),
            *trust,
            "--checkpoints",
            str(tmp_path / "none"),
        ],
        capsys,
    )
    assert code == 2


def test_ledger_verify_takes_its_trusted_gate_key_from_a_record_or_a_registry(
    tmp_path: Path,
    demo_state: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    db = ["ledger", "verify", "--db", str(demo_state / "ledger.db")]
    gate_key = demo_state / "keys" / "gate.key"
    record = tmp_path / "gate.pub.json"
    record.write_text(run(["keys", "public", "--key", str(gate_key), "--json"], capsys)[1])
    assert run([*db, "--key", str(record)], capsys)[0] == 0
    assert run([*db, "--key", str(demo_state / "registry.json")], capsys)[0] == 0

    code, _, err = run([*db, "--key", str(gate_key)], capsys)
    assert_one_line_failure(code, err, "is a private key", "keys public")
    for name, text, needle in [
        ("garbage.json", "{not json", "not JSON"),
        ("other.json", json.dumps({"schema": "something/1"}), "neither a public key record"),
        ("list.json", "[]", "neither a public key record"),
    ]:
        (tmp_path / name).write_text(text)
        code, _, err = run([*db, "--key", str(tmp_path / name)], capsys)
        assert_one_line_failure(code, err, needle)
    forged = {**json.loads(record.read_text()), "key_id": "ed25519:" + "0" * 64}
    (tmp_path / "forged.json").write_text(json.dumps(forged))
    code, _, err = run([*db, "--key", str(tmp_path / "forged.json")], capsys)
    assert_one_line_failure(code, err, "does not match the public key")
    code, _, err = run([*db, "--key", str(tmp_path / "absent.json")], capsys)
    assert code == 2

    # A roster with approvers only names no gate key to trust.
    approvers = tmp_path / "approvers.json"
    approvers.write_bytes(
        encode_registry((entry_for(generate_signing_key(), "attorney-alex", "approver"),))
    )
    code, _, err = run([*db, "--key", str(approvers)], capsys)
    assert_one_line_failure(code, err, "names no gate key")
    (tmp_path / "broken-registry.json").write_text(json.dumps({"schema": "smf.registry/1"}))
    code, _, err = run([*db, "--key", str(tmp_path / "broken-registry.json")], capsys)
    assert_one_line_failure(code, err, "registry")

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "empty"))
    code, _, err = run(db, capsys)
    assert_one_line_failure(code, err, "no trusted gate key")


async def test_verify_on_a_bus_without_a_checkpoint_is_unanchored_not_ok(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``ledger verify --nats`` never says "ok" when it checked no external
    checkpoint, nor drops the note that the file then only agrees with
    itself: ``unanchored``, the note, exit 1. The stream holds nothing of
    the gate named (``--gate``), whatever the running gate has signed."""
    state = StateDir(tmp_path / "state")
    provision_demo(state)
    configure_logging(json=True, level="error")
    stack = await start_stack(state, with_connectors=False)
    try:
        await hold_court_filing(stack)
        verify = ["ledger", "verify", "--db", str(state.ledger), "--state-dir", str(state.root)]
        elsewhere = ["--gate", "smf-gate-elsewhere"]
        code, out, err = await arun([*verify, *bus_as(stack, OPERATOR), *elsewhere], capsys)
        assert_one_line_failure(code, err, "no external checkpoints checked from SMF_LEDGER")
        assert table_value(out, "result") == "unanchored"
        assert "proves only that the file agrees with itself" in out
    finally:
        await stack.stop()


async def test_checkpoints_on_the_bus_catch_a_truncated_ledger(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = StateDir(tmp_path / "state")
    provision_demo(state)
    configure_logging(json=True, level="error")
    stack = await start_stack(state, with_connectors=False)
    try:
        await hold_court_filing(stack)
        await hold_court_filing(stack)
        assert await stack.gate.ledger.checkpoint(time.time_ns() // 1_000_000) is not None
        verify = ["ledger", "verify", "--db", str(state.ledger), "--state-dir", str(state.root)]
        code, out, _ = await arun([*verify, *bus_as(stack, OPERATOR), "--json"], capsys)
        assert code == 0
        report = json.loads(out)
        assert report["ok"] is True
        assert report["external_checkpoints"] >= 1
        assert report["checkpoint_seq"] == report["last_seq"]
        code, out, _ = await arun([*verify, *bus_as(stack, OPERATOR)], capsys)
        assert table_value(out, "external checkpoints").endswith(
            f"from SMF_LEDGER_CHECKPOINTS (smf-gate) at {stack.url}"
        )

        saved = tmp_path / "checkpoints.jsonl"
        code, out, _ = await arun(
            ["ledger", "checkpoints", *bus_as(stack, OPERATOR), "--out", str(saved)], capsys
        )
        assert code == 0
        envelopes = saved.read_text().splitlines()
        assert out == f"{len(envelopes)} checkpoints written to {saved}\n"
        code, out, _ = await arun(["ledger", "checkpoints", *bus_as(stack, OPERATOR)], capsys)
        assert out.splitlines() == envelopes
        last_seq = report["last_seq"]
    finally:
        await stack.stop()

    # Checkpoints signed by a key nobody trusts prove nothing, and say so.
    stranger = tmp_path / "stranger.key"
    _, record_text, _ = run(
        ["keys", "new", "--id", "gate", "--out", str(stranger), "--json"], capsys
    )
    (tmp_path / "stranger.pub.json").write_text(record_text)
    code, _, err = run(
        [
            "ledger",
            "verify",
            "--db",
            str(state.ledger),
            "--key",
            str(tmp_path / "stranger.pub.json"),
            "--checkpoints",
            str(saved),
        ],
        capsys,
    )
    assert err == "smf-assurance: ledger verify failed: checkpoint_bad_signature\n"

    # The attacker cuts the newest entries and the file's own checkpoints...
    with attacker(state.ledger) as conn:
        conn.execute("DELETE FROM evidence_entries WHERE seq >= ?", (last_seq - 1,))
        conn.execute("DELETE FROM ledger_checkpoints")
    trust = ["--state-dir", str(state.root)]
    # ...so the file alone is consistent again: that is why checkpoints leave it.
    assert run(["ledger", "verify", "--db", str(state.ledger), *trust], capsys)[0] == 0
    code, _, err = run(
        ["ledger", "verify", "--db", str(state.ledger), *trust, "--checkpoints", str(saved)], capsys
    )
    assert err == (
        f"smf-assurance: ledger verify failed: truncated_after_checkpoint at seq {last_seq - 1}\n"
    )


async def test_gates_sharing_the_checkpoint_stream_each_verify_against_their_own(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Replicas share SMF_LEDGER_CHECKPOINTS; a checkpoint of another
    replica's ledger must not read as a replaced file, and must not vouch for one."""
    state = StateDir(tmp_path / "state")
    provision_demo(state)
    configure_logging(json=True, level="error")
    stack = await start_stack(state, with_connectors=False)
    other_db = tmp_path / "gate-2.db"
    try:
        await hold_court_filing(stack)
        now = time.time_ns() // 1_000_000
        assert await stack.gate.ledger.checkpoint(now) is not None
        js = stack.gate.js

        async def publish(envelope: bytes) -> None:
            await js.publish(names.checkpoint_subject("gate-2"), envelope)

        other = await Ledger.open(other_db, signer=state.key("gate"), on_checkpoint=publish)
        try:
            await other.append(make_entry(1))
            assert await other.checkpoint(now) is not None
        finally:
            await other.close()
        trust = ["--state-dir", str(state.root), "--nats", stack.url, "--json"]
        mine = ["ledger", "verify", "--db", str(state.ledger), *trust]
        code, out, _ = await arun(mine, capsys)
        assert (code, json.loads(out)["ok"]) == (0, True)
        code, _, err = await arun([*mine, "--gate", "gate-2"], capsys)
        assert code == 1
        assert "checkpoint_mismatch" in err
        theirs = ["ledger", "verify", "--db", str(other_db), *trust, "--gate", "gate-2"]
        code, out, _ = await arun(theirs, capsys)
        assert (code, json.loads(out)["external_checkpoints"]) == (0, 1)
        code, _, err = await arun([*mine, "--gate", "gate.2"], capsys)
        assert_one_line_failure(code, err, "is not a gate name")
        assert code == 2
    finally:
        await stack.stop()


def test_ledger_checkpoints_needs_a_gate_stream(
    nats_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(["ledger", "checkpoints", "--nats", nats_url], capsys)
    assert_one_line_failure(code, err, "no SMF_LEDGER_CHECKPOINTS stream")


REFUSED = msgspec.json.encode(
    ResolutionReply(
        schema="smf.resolution-reply/1",
        approval_id=forged_view("").binding.approval_id,
        accepted=False,
        state="expired",
        reason_codes=("approval_expired",),
    )
)


@pytest.mark.parametrize(
    ("reply", "headers", "needle"),
    [
        (REFUSED, None, "resolution refused: approval_expired (state expired)"),
        (
            b"",
            {"Nats-Service-Error": "malformed_resolution", "Nats-Service-Error-Code": "400"},
            "resolution refused: malformed_resolution",
        ),
        (None, None, "no gate answers on smf.approval.resolve"),
    ],
    ids=["refused", "error-reply", "no-responder"],
)
async def test_a_refused_resolution_is_one_line_and_signed_only_what_was_checked(
    nc: Client,
    nats_url: str,
    attorney_key: Path,
    capsys: pytest.CaptureFixture[str],
    reply: bytes | None,
    headers: dict[str, str] | None,
    needle: str,
) -> None:
    view = forged_view("the real filing")
    resolutions = await stand_in_gate(nc, view, reply, headers)
    argv = [
        "approvals",
        "resolve",
        view.binding.approval_id,
        "allow-once",
        "--yes",
        "--nats",
        nats_url,
    ]
    code, out, err = await arun([*argv, "--key", str(attorney_key), "--json"], capsys)
    assert_one_line_failure(code, err, needle)
    if reply == REFUSED:
        # With --json the gate's answer is still printed for scripts; without, nothing.
        assert json.loads(out)["reason_codes"] == ["approval_expired"]
        code, out, err = await arun([*argv, "--key", str(attorney_key)], capsys)
        assert_one_line_failure(code, err, needle)
        assert out == ""
        resolutions.pop()
    else:
        # A refusal before the gate's answer prints its JSON on stdout too.
        refusal = json.loads(out)
        assert (refusal["accepted"], refusal["approval_id"]) == (False, view.binding.approval_id)
        assert needle in refusal["refusal"]
    if reply is not None:
        (signed,) = resolutions
        payload = json.loads(base64.b64decode(json.loads(signed)["payload"]))
        assert payload["binding_digest"] == view.binding_digest
        assert (payload["decision"], payload["resolver_id"]) == ("allow-once", "attorney-alex")


async def test_pending_skips_junk_on_the_stream_and_needs_a_gate_for_states(
    nc: Client, nats_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    js = nc.jetstream()
    await ensure_stream(js, approval_stream_config())
    view = forged_view("the real filing")
    announcement = PendingAnnouncement(
        schema="smf.approval-pending/2",
        approval_id=view.binding.approval_id,
        tenant_id=view.binding.tenant_id,
        required_roles=view.binding.required_roles,
        required_approvals=view.binding.required_approvals,
        created_at_ms=view.binding.created_at_ms,
        expires_at_ms=view.binding.expires_at_ms,
        capability="transmission",
        channel="court",
        locality="external",
        native_tool="court_efile",
        rule_ids=(),
        reason_codes=("attorney_approval_required_for_transmission",),
    )
    subject = names.approval_pending_subject("tenant-acme")
    await js.publish(subject, b"not an announcement")
    await js.publish(subject, msgspec.json.encode(announcement))
    await js.publish(subject, msgspec.json.encode(announcement))  # announced twice: listed once
    bus = ["approvals", "pending", "--nats", nats_url, "--all"]

    code, _, err = await arun(bus, capsys)
    assert_one_line_failure(code, err, "no gate answers on smf.approval.announcements")

    # the gate's announcement desk alone: it reads the stream, the states need a gate
    desk = AnnouncementDesk(js, lambda: KeyRegistry({}))

    async def listing(msg: Msg) -> None:
        await msg.respond(await desk.handle(msg.data, Requester(crossed=False, account=None)))

    await nc.subscribe(names.APPROVAL_ANNOUNCEMENTS, cb=listing)
    await nc.flush()
    code, _, err = await arun(bus, capsys)
    assert_one_line_failure(code, err, "no gate answers on smf.approval.status")

    async def garbled(msg: Msg) -> None:
        await msg.respond(b"[]")

    sub = await nc.subscribe(names.APPROVAL_STATUS, cb=garbled)
    code, _, err = await arun(bus, capsys)
    assert_one_line_failure(code, err, "unreadable answer on smf.approval.status")
    await sub.unsubscribe()

    answer = {"state": "expired"}

    async def closed(msg: Msg) -> None:
        await msg.respond(
            json.dumps({"approval_id": msg.data.decode(), "state": answer["state"]}).encode()
        )

    await nc.subscribe(names.APPROVAL_STATUS, cb=closed)
    await nc.flush()
    # A closed approval has no time left to show (a consumed one must not
    # read "expired" in the expires-in column).
    for state in ("expired", "consumed"):
        answer["state"] = state
        code, out, _ = await arun(bus, capsys)
        assert code == 0
        (row,) = [line for line in out.splitlines() if line.startswith("sha256:")]
        assert row.split()[-2:] == ["-", state]
    code, out, _ = await arun(bus[:-1], capsys)
    assert out == "no open approvals\n"
