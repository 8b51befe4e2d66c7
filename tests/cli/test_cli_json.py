"""Every ``--json`` output has a declared, documented schema.

Both command lines are held to it: the product's ``smf-assurance`` (types in
``smf_assurance.ops.cli.cli_json``, page ``docs/CLI-JSON.md``) and the team's ``python -m
smf_tools`` (``smf_tools.cli_json``, ``docs/TOOLS-JSON.md``). Commands are read from each parser
(``tests.support.cli.subcommands``): one with ``--json`` and no declared type in its own
command line's ``COMMANDS`` fails here, and so does one without a case in ``CASES``.
Each case runs the real command (in process through its command line's ``main``, or as a
process for the ones that run until stopped) against a demo's state and, for the bus, a
real ``up`` (nats-server and gate); stdout is decoded strictly with the declared type, so an unknown
field, a cut id or a word outside an enum fails the decode. A refusal either
prints its declared refusal type or nothing on stdout, as ``docs/CLI-JSON.md``
says for that command.
"""

from __future__ import annotations

import argparse
import ast
import asyncio
import contextlib
import inspect
import json
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import pytest

from smf_assurance.governance.projections import SCENARIO_CORPUS, SCENARIO_ENVELOPES, package_path
from smf_assurance.governance.releases import build_release, write_release_dir
from smf_assurance.ops.cli import cli_json
from smf_assurance.ops.cli.cli_json import COMMANDS, CliJson
from smf_assurance.ops.cli.main import build_parser, main
from smf_assurance.ops.local.bus_auth import new_user_seed, public_user
from smf_assurance.ops.local.defaults import CONSOLE, PUBLISHER
from smf_assurance.ops.local.natsserver import reserve_port
from smf_assurance.ops.local.state import RELEASE_SIGNER, StateDir
from smf_assurance.subjects.keys import SigningKey
from smf_assurance.subjects.passkeys import credential_fingerprint, enrolment_challenge
from smf_assurance.subjects.registry import encode_registry, entry_for
from smf_tools import cli as tools_cli
from smf_tools import cli_json as tools_json
from tests.support.authenticator import SoftAuthenticator, b64url
from tests.support.candidate import fake_project
from tests.support.cli import AT, subcommands
from tests.support.cli_json import hold_filing
from tests.support.cli_model_gateway import ACTOR
from tests.support.cli_ops import read_line
from tests.support.cli_robustness import first_decision

ROOT = Path(__file__).resolve().parents[2]
PROG = (sys.executable, "-m", "smf_assurance.ops.cli.main")
TOOLS_PROG = (sys.executable, "-m", "smf_tools")
TIMEOUT = 60.0
IDENTITY = r"sha256:[0-9a-f]{64}"
ORDER_ID = r"[0-9a-f]{64}"
KEY_ID = r"ed25519:[0-9a-f]{64}"


@dataclass(frozen=True)
class Line:
    """One command line: its parser, its ``main``, how it runs as a process, its page."""

    name: str
    parser: Callable[[], argparse.ArgumentParser]
    main: Callable[[list[str]], int]
    process: tuple[str, ...]
    page: cli_json.Page


PRODUCT = Line("smf-assurance", build_parser, main, PROG, cli_json.PAGE)
TOOLS = Line(
    "python -m smf_tools", tools_cli.build_parser, tools_cli.main, TOOLS_PROG, tools_json.PAGE
)
LINES = (PRODUCT, TOOLS)


def json_commands(line: Line) -> list[tuple[str, ...]]:
    return sorted(
        path
        for path, _, parser in subcommands(line.parser())
        if any("--json" in action.option_strings for action in parser._actions)
    )


def line_of(path: tuple[str, ...]) -> Line:
    """The command line a declared command belongs to."""
    (line,) = (line for line in LINES if path in line.page.commands)
    return line


# --- the table covers the parser -----------------------------------------------------------


@pytest.mark.parametrize("line", LINES, ids=lambda line: line.name)
def test_every_command_with_json_has_a_declared_type(line: Line) -> None:
    """Of its own command line: a product command is declared only in the product's
    table, a team tool's only in ``smf_tools.cli_json``."""
    found = json_commands(line)
    for path in found:
        assert path in line.page.commands, f"{line.name} {' '.join(path)}: no declared type"
    assert set(line.page.commands) <= set(found), "a type for a command without --json"


def test_the_two_command_lines_share_no_command_and_no_type_name() -> None:
    """A path is declared on one page only, and a type's name means one type: a page
    lists the nested types it uses by name."""
    assert not set(COMMANDS) & set(tools_json.COMMANDS)
    names = [t.__name__ for t in declared()]
    assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)


def test_the_product_page_knows_nothing_of_the_tools() -> None:
    """The wheel's table and page name no team tool, and its module imports none."""
    tree = ast.parse(Path(cli_json.__file__).read_text(encoding="utf-8"))
    imported = {
        node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
    } | {
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    }
    assert not any(name == "smf_tools" or name.startswith("smf_tools.") for name in imported), (
        imported
    )
    page = cli_json.render()
    for path in tools_json.COMMANDS:
        assert f"## `{' '.join(path)} --json`" not in page
    for struct in {t for ts in tools_json.COMMANDS.values() for t in ts}:
        assert f"`{struct.__name__}`" not in page


def declared() -> list[type[CliJson]]:
    found: list[type[CliJson]] = []

    def walk(base: type[CliJson]) -> None:
        for sub in base.__subclasses__():
            found.append(sub)
            walk(sub)

    walk(CliJson)
    return found


@pytest.mark.parametrize("struct", declared(), ids=lambda t: t.__name__)
def test_every_type_is_closed_keyword_only_and_says_what_each_field_means(
    struct: type[CliJson],
) -> None:
    assert struct.__struct_config__.forbid_unknown_fields
    params = inspect.signature(struct).parameters.values()
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in params)
    assert (struct.__doc__ or "").strip(), struct
    _, components = msgspec.json.schema_components([struct])
    for name, field in components[struct.__name__]["properties"].items():
        assert field.get("description"), f"{struct.__name__}.{name} has no meaning"


def test_no_command_prints_an_undeclared_value() -> None:
    """Every ``--json`` goes through ``smf_assurance.ops.cli.output.emit``, which takes a declared
    type only: no code of either command line writes JSON to stdout another way."""
    import smf_assurance.ops.cli.output  # noqa: PLC0415

    assert not hasattr(smf_assurance.ops.cli.output, "emit_json")
    sources = sorted(
        [*(ROOT / "smf_assurance" / "ops").rglob("*.py"), *(ROOT / "smf_tools").rglob("*.py")]
    )
    assert ROOT / "smf_tools" / "bench" / "command.py" in sources
    for path in sources:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call):
                assert getattr(node.func, "id", "") != "emit_json", path


@pytest.mark.parametrize("line", LINES, ids=lambda line: line.name)
def test_the_document_is_generated_from_the_types(line: Line) -> None:
    """``docs/CLI-JSON.md`` or ``docs/TOOLS-JSON.md`` is stale: run ``make cli-json``."""
    page = cli_json.render(line.page)
    assert line.page.doc.read_text(encoding="utf-8") == page
    for path in line.page.commands:
        assert f"## `{' '.join(path)} --json`" in page


def test_emit_refuses_a_value_its_own_type_rejects(capsys: pytest.CaptureFixture[str]) -> None:
    """An id cut to a display prefix is an error, not a line a script reads."""
    from smf_assurance.ops.cli.output import emit  # noqa: PLC0415 - the one function under test here

    cut = cli_json.ModelGatewayClearJson(
        runtime_id="not a token", was_stopped=False, stopped=False, reason_codes=(), evidence=()
    )
    with pytest.raises(msgspec.ValidationError):
        emit(cut)
    assert capsys.readouterr().out == ""


# --- running each command ----------------------------------------------------------------------


@dataclass(frozen=True)
class World:
    """What the cases run against: a demo's state, the demo's own output, a gate."""

    work: Path
    state: StateDir
    demo_out: str
    up_line: str
    nats_url: str
    approval_id: str
    expired_id: str
    """A second filing, expired (``approvals rerequest`` asks only an expired one again)."""


def expire_in_store(state: StateDir, approval_id: str) -> None:
    """What the gate's sweep writes once the approval's TTL has passed (pending ->
    expired, content purged), written now rather than after five minutes."""
    with contextlib.closing(sqlite3.connect(state.root / "approvals.db")) as db, db:
        moved = db.execute(
            "UPDATE approvals SET state = 'expired', held_payload = NULL "
            "WHERE approval_id = ? AND state = 'pending'",
            (approval_id,),
        ).rowcount
    assert moved == 1


def copy_state(world: World, into: Path) -> StateDir:
    shutil.copytree(world.state.root, into, ignore=shutil.ignore_patterns("nats", "nats.url"))
    return StateDir(into)


def stop(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(TIMEOUT)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(TIMEOUT)


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    """``demo --json`` once (its output is the demo case), then ``up --json`` on a
    copy of that state: a real nats-server and gate for the bus commands."""
    work = tmp_path_factory.mktemp("cli-json")
    demo = subprocess.run(
        [*PROG, "demo", "--state-dir", str(work / "demo"), "--json"],
        capture_output=True,
        text=True,
        timeout=TIMEOUT * 2,
        check=True,
    )
    shutil.copytree(work / "demo", work / "state", ignore=shutil.ignore_patterns("nats"))
    state = StateDir(work / "state")
    up = subprocess.Popen(
        [*PROG, "up", "--state-dir", str(state.root), "--json", "--log-level", "error"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        line = read_line(up, TIMEOUT)
        url = json.loads(line)["nats_url"]
        approval = asyncio.run(hold_filing(url, state))
        expired = asyncio.run(hold_filing(url, state))
        expire_in_store(state, expired)
        yield World(work, state, demo.stdout, line, url, approval, expired)
    finally:
        stop(up)


def ready_line(argv: list[str], prog: tuple[str, ...] = PROG) -> str:
    """The readiness line of a command that runs until stopped; then stop it. From the
    checkout's root, where ``python -m smf_tools`` finds the team's tools."""
    proc = subprocess.Popen(
        [*prog, *argv],
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        return read_line(proc, TIMEOUT)
    finally:
        stop(proc)


Check = Callable[[Any, World], None]


@dataclass(frozen=True)
class Case:
    """One run of one command: its arguments (``{state}``, ``{work}``, ... filled in),
    the exit status, which of its declared types stdout holds (None: stdout is
    empty), and what to check of the decoded value."""

    argv: tuple[str, ...]
    code: int = 0
    prints: int | None = 0
    check: Check | None = None
    process: bool = False
    """Runs until stopped: its readiness line is read from a process."""


def full(pattern: str, value: object) -> None:
    assert isinstance(value, str), value
    assert re.fullmatch(pattern, value), value


def check_demo(out: cli_json.DemoJson, _: World) -> None:
    assert out.ok
    held = next(s for s in out.scenarios if s.outcome == "held")
    assert (held.final_outcome, held.connector_report) == ("allow", "confirmed")
    full(ORDER_ID, held.order_id)
    for scenario in out.scenarios:
        full(IDENTITY, scenario.evidence)


def check_eval(out: cli_json.EvalJson, _: World) -> None:
    assert out.disposition == "conditional"
    for value in (out.decision_id, out.operation_hash, out.projection_id):
        full(IDENTITY, value)


def check_key(out: cli_json.KeyRecordJson, _: World) -> None:
    full(KEY_ID, out.key_id)


def check_pending(out: cli_json.ApprovalsPendingJson, world: World) -> None:
    (item,) = (a for a in out.approvals if a.approval_id == world.approval_id)
    assert item.state in ("pending", "approved", "executing", "consumed")
    assert item.capability == "external.transmit"


def check_show(out: cli_json.ApprovalsShowJson, world: World) -> None:
    assert (out.content_matches, out.approval_id) == (True, world.approval_id)
    full(IDENTITY, out.binding_digest)


def check_resolve(out: cli_json.ApprovalsResolveJson, world: World) -> None:
    assert (out.accepted, out.decision, out.approval_id) == (True, "allow-once", world.approval_id)
    full(ORDER_ID, out.order_id)


def check_resolve_refusal(out: cli_json.ApprovalsResolveRefusal, _: World) -> None:
    assert out.accepted is False
    assert out.reason_code == "resolver_lacks_required_role", out


def check_not_pending(out: cli_json.ApprovalsResolveRefusal, world: World) -> None:
    assert (out.reason_code, out.approval_id) == ("approval_not_pending", world.approval_id)


def check_rerequest(out: cli_json.ApprovalsRerequestJson, world: World) -> None:
    assert (out.approval_id, out.accepted, out.reason_codes) == (world.expired_id, True, ())


def check_rerequest_refused(out: cli_json.ApprovalsRerequestJson, world: World) -> None:
    assert (out.accepted, out.reason_codes) == (False, ("approval_not_found",))


def check_ledger(out: cli_json.LedgerVerifyJson, _: World) -> None:
    assert (out.result, out.ok) == ("self-consistent", True)
    full(IDENTITY, out.last_entry_hash)


def check_unanchored(out: cli_json.LedgerVerifyJson, _: World) -> None:
    assert (out.result, out.external_checkpoints) == ("unanchored", 0)


def check_report(out: cli_json.SwarmReportJson, _: World) -> None:
    full(IDENTITY, out.report_id)
    assert out.accepted


def check_failed_personas(out: cli_json.SwarmReportJson, _: World) -> None:
    assert {p.status for p in out.personas} == {"failed"}


def check_reviewed(out: cli_json.SwarmReportJson, _: World) -> None:
    assert out.semantic_faithfulness.status == "faithful"


def check_build(out: cli_json.ReleaseBuildJson, _: World) -> None:
    full(IDENTITY, out.manifest.manifest_hash)
    for signer in out.signers:
        full(KEY_ID, signer)


def check_verify(out: cli_json.ReleaseVerifyJson, _: World) -> None:
    assert out.already_accepted is False
    full(IDENTITY, out.manifest.manifest_hash)


def check_permissions(out: cli_json.BusPermissionsJson, _: World) -> None:
    replies = [p for p in out.permissions if p.may == "publish replies"]
    assert replies
    assert all(p.subject is None for p in replies)
    assert all(p.subject for p in out.permissions if p.may != "publish replies")


def check_up(out: cli_json.UpJson, world: World) -> None:
    assert (out.stages, out.state_dir) == ("co-located", str(world.state.root))
    assert isinstance(out.nats_server_pid, int)


def check_bench(out: tools_json.BenchJson, _: World) -> None:
    assert out.evaluator
    assert out.targets
    assert out.bus is None
    assert all(t.comparison in ("at_most", "at_least") for t in out.targets)


def check_bench_confinement(out: tools_json.BenchJson, _: World) -> None:
    """Its figures decode; none is asserted (a benchmark informs, CI does not time)."""
    assert out.confinement is not None
    assert [s.label for s in out.confinement] == [
        "start, bare",
        "start, confined",
        "model request, bare",
        "model request, through the forwarders",
    ]
    assert [s.count for s in out.confinement][:2] == [2, 2]
    assert out.targets is not None
    assert [t.series for t in out.targets] == [
        "start, confined",
        "model request, through the forwarders",
    ]


def check_runtimes(out: cli_json.ModelGatewayListJson, _: World) -> None:
    assert [r.runtime for r in out.runtimes] == ["rt-json"]


MATTER = str(package_path(SCENARIO_ENVELOPES) / "swarm-matter.json")
ENVELOPE = str(package_path(SCENARIO_ENVELOPES) / "1-court-filing-approval.json")
ATTORNEY = (
    "--key",
    "{state}/keys/attorney-alex.key",
    "--credential",
    "{state}/keys/attorney-alex.nkey",
)
PARALEGAL = (
    "--key",
    "{state}/keys/paralegal-pat.key",
    "--credential",
    "{state}/keys/paralegal-pat.nkey",
)
SIGNER = ("--key", "{state}/keys/release-signer.key")
PUBLISHER_CREDENTIAL = ("--credential", f"{{state}}/keys/{PUBLISHER}.nkey")
RUNTIME = (
    "rt-json",
    *("--adapter", "hermes", "--actor", "{work}/actor.json"),
    *("--destination", "internal", "--locality", "internal"),
)


def check_publish_refused(out: cli_json.ReleasePublishJson, _: World) -> None:
    assert (out.sequence, out.waited) == (7, True)
    full(IDENTITY, out.manifest_hash)
    (gate,) = out.gates
    assert (gate.outcome, gate.reason_code, gate.retryable) == (
        "refused",
        "release_chain_broken",
        True,
    )


def check_status_bus(out: cli_json.ReleaseStatusJson, _: World) -> None:
    assert out.source == "bus"
    assert out.bucket is not None
    assert out.gates is not None
    (gate,) = out.gates
    assert gate.in_force
    assert gate.manifest_hash is not None
    full(IDENTITY, gate.manifest_hash)
    assert any(r.reason_code == "release_chain_broken" for r in gate.refusals)


def check_status_state(out: cli_json.ReleaseStatusJson, _: World) -> None:
    assert (out.source, out.bucket, out.gates) == ("state", None, None)
    assert out.accepted is not None
    full(IDENTITY, out.accepted.manifest_hash)
    assert out.accepted.lease_in_force


def check_eval_explained(out: cli_json.EvalExplainedJson, _: World) -> None:
    assert out.decision.disposition == "conditional"
    assert out.explanation is not None
    assert out.explanation.decision_id == out.decision.decision_id
    assert out.explanation.policies


def check_eval_lines(out: cli_json.EvalLinesJson, _: World) -> None:
    assert [r.line for r in out.results] == [1, 2]
    for result in out.results:
        full(IDENTITY, result.decision.decision_id)


def check_eval_against(out: cli_json.EvalAgainstJson, _: World) -> None:
    assert (out.total, out.changed) == (2, 0)  # the same corpus, released again
    assert sum(m.count for m in out.counts) == 2
    assert out.against.manifest_hash is not None
    full(IDENTITY, out.against.manifest_hash)


def check_explain(out: cli_json.ExplainJson, _: World) -> None:
    full(IDENTITY, out.explanation.decision_id)
    full(IDENTITY, out.ledger.entry_hash)
    full(IDENTITY, out.release.manifest_hash)
    assert out.ledger.history[0].kind == "decision"


def check_diff(out: cli_json.ReleaseDiffJson, _: World) -> None:
    assert (out.old.release_sequence, out.new.release_sequence) == (1, 7)
    assert out.authenticated is False


def check_traffic_diff(out: cli_json.ReleaseTrafficDiffJson, _: World) -> None:
    assert out.diff.authenticated  # with the state's trust root
    assert (out.recorded.total, out.recorded.moves) == (0, ())  # never shadow and active
    assert out.chart is None


def check_withdraw(out: cli_json.ReleaseWithdrawShadowJson, _: World) -> None:
    assert (out.withdrawn, out.waited, out.gates) == (False, False, ())  # none was held


def check_nkey(out: cli_json.BusUserJson, _: World) -> None:
    assert out.principal == "attorney-nkey"
    assert Path(out.seed_file).stat().st_mode & 0o077 == 0
    assert Path(out.seed_file).read_text().strip() != out.nats_user


def adopted(release: cli_json.ReleasePublishJson) -> None:
    full(IDENTITY, release.manifest_hash)
    (gate,) = release.gates
    assert (release.waited, gate.outcome) == (True, "adopted"), release


def check_runtime_add(out: cli_json.RuntimeAddJson, _: World) -> None:
    assert (out.kind, out.runtime_id, out.policies_from) == ("hermes", "hermes-json", "prior")
    full(KEY_ID, out.key_id)
    assert out.attestation.instance_bound
    assert out.attestation.required_hooks == ("pre_tool_call", "transform_llm_output")
    for path in msgspec.structs.asdict(out.files).values():
        assert Path(path).stat().st_mode & 0o077 == 0, path
    adopted(out.release)


def check_runtime_remove(out: cli_json.RuntimeRemoveJson, _: World) -> None:
    assert out.principals == ("hermes-json", "hermes-json-launcher")  # the runtime and its launcher
    assert out.attestation_requirement_removed
    assert out.gateway_profile_removed
    assert out.left_files
    adopted(out.release)


def check_approver_add(out: cli_json.ApproverAddJson, _: World) -> None:
    assert (out.licensed_roles, out.tenants) == (("licensed_attorney",), ("tenant-acme",))
    full(KEY_ID, out.key_id)
    adopted(out.release)


def check_approver_remove(out: cli_json.ApproverRemoveJson, _: World) -> None:
    assert out.principal == "attorney-json"
    assert out.passkeys_removed == 0  # passkey-remove took its one out before
    adopted(out.release)


def check_approver_passkey_add(out: cli_json.ApproverPasskeyAddJson, _: World) -> None:
    assert (out.principal, out.rp_id, out.origins) == ("attorney-json", "localhost", (ORIGIN,))
    assert out.label is None
    adopted(out.release)


def check_approver_passkey_remove(out: cli_json.ApproverPasskeyRemoveJson, _: World) -> None:
    assert out.principal == "attorney-json"
    assert len(out.credential_ids) == 1
    adopted(out.release)


def check_key_rotate(out: cli_json.KeyRotateJson, world: World) -> None:
    assert (out.principal, out.role) == ("operator", "operator")
    assert out.old_key_id == world.state.key("operator").key_id
    full(KEY_ID, out.new_key_id)
    assert out.nats_user == world.state.bus_user("operator")  # the credential moved as it is
    adopted(out.release)


def check_key_retire(out: cli_json.KeyRetireJson, world: World) -> None:
    assert out.retired_key_id == world.state.key("operator").key_id
    assert len(out.active_key_ids) == 1
    assert out.retired_key_id not in out.active_key_ids
    adopted(out.release)


CANDIDATE = (
    *("--repo", "{work}/candidate-repo", "--key", "{state}/keys/release-signer.key"),
    *("--out", "{work}/candidate-out"),
)


def check_candidate(out: tools_json.CandidateBuildJson, _: World) -> None:
    full(r"[0-9a-f]{40}", out.sha)
    assert (out.green, out.open, out.dist) == (2, 0, "built"), out
    assert (out.suite.collected, out.suite.ran, out.suite.passed) == (2, 2, 2), out
    assert [c.state for c in out.claims] == ["green", "green"], out


def check_backup(out: cli_json.BackupJson, world: World) -> None:
    assert out.online  # from the running `up`'s server
    assert out.keys_included
    assert out.state_dir == str(world.state.root)
    assert {"SMF_EXECUTE", "SMF_LEDGER_CHECKPOINTS"} <= {s.name for s in out.streams}
    assert {f.path: f.kind for f in out.files}["state/ledger.db"] == "sqlite"
    assert Path(out.archive).stat().st_mode & 0o777 == 0o600


def check_restore(out: cli_json.RestoreJson, world: World) -> None:
    assert out.state_dir == str(world.work / "restored")
    assert out.replaced is None
    assert out.ledger_result in ("verified", "self-consistent")
    assert out.ledger_entries > 0


def check_doctor(out: cli_json.DoctorJson, _: World) -> None:
    assert (out.ok, out.failed) == (True, 0), out
    kinds = {c.kind for c in out.checks if c.status in ("ok", "warn")}
    assert kinds == {
        "bus",
        "release",
        "service",
        "stream",
        "confinement",
        "connector",
        "ledger",
        "files",
        "directory",  # the demo's state keeps its tenant's directory
    }, out


def check_doctor_dead(out: cli_json.DoctorJson, _: World) -> None:
    assert (out.ok, out.failed) == (False, 1)
    (bus,) = (c for c in out.checks if c.kind == "bus")
    assert bus.status == "fail"
    # the state folder's modes and the tenant directory are read from the files, not
    # asked of the bus
    from_files = ("files", "directory")
    assert {c.status for c in out.checks if c.kind not in ("bus", *from_files)} == {"skip"}
    assert {c.status for c in out.checks if c.kind in from_files} == {"ok"}


def check_runtime_confine(out: cli_json.RuntimeConfineJson, world: World) -> None:
    assert (out.runtime_id, out.kind) == ("hermes-json", "hermes")
    assert out.workspace == str(world.work / "confine-ws")
    assert Path(out.profile).is_file()


def check_run_plan(out: cli_json.RuntimeRunPlanJson, world: World) -> None:
    assert out.runtime_id == "hermes-json"
    assert set(out.forwarders) == {"nats", "gateway"}
    assert ("rw", str(world.work / "confine-ws")) in {(m.kind, m.source) for m in out.mounts}
    assert all(not (m.source or "").startswith(str(world.state.root)) for m in out.mounts)
    assert out.command == ()
    # the runtime was removed before: its launcher cannot ask the gate, and says so
    assert out.gate_holds is None
    assert out.gate_holds_unasked is not None


def check_holds(out: cli_json.HoldsJson, _: World) -> None:
    assert "/srv/json/held.txt" in out.paths
    assert out.revision >= 1


def check_tls_init(out: cli_json.TlsInitJson, world: World) -> None:
    assert out.directory == str(world.work / "tls")
    assert out.hosts == ("localhost", "127.0.0.1", "nats-1")
    for name in (out.ca_cert, out.ca_key, out.cert, out.key, *out.includes):
        assert Path(name).parent == world.work / "tls"
        assert Path(name).is_file(), name


def check_tls_issue(out: cli_json.TlsIssueJson, world: World) -> None:
    assert (out.cert, out.key) == (
        str(world.work / "console-tls" / "console.pem"),
        str(world.work / "console-tls" / "console-key.pem"),
    )
    assert out.hosts == ("localhost", "127.0.0.1", "console")
    assert Path(out.cert).is_file()
    assert Path(out.key).is_file()


def check_review_start(out: tools_json.ReviewStartJson, world: World) -> None:
    assert out.sha == (world.work / "candidate.sha").read_text()
    assert Path(out.start_file).is_file()


def check_review_sign(out: tools_json.ReviewSignJson, _: World) -> None:
    assert (out.scope, out.target, out.verdict, out.reviewer) == (
        "claim",
        "bus-access.one",
        "pass",
        "reviewer-rita",
    )
    full(KEY_ID, out.key_id)
    assert Path(out.file).is_file()


def check_candidate_status(out: tools_json.CandidateStatusJson, _: World) -> None:
    assert out.complete
    (row,) = out.rows
    assert (row.claim, row.state, row.reviewer) == ("bus-access.one", "current", "reviewer-rita")


STEADY_TEST = (
    f"{Path(__file__).parents[1] / 'unit' / 'test_canonical.py'}::test_vector_names_are_unique"
)
"""A quick test with no I/O, for ``repeat`` to run twice."""


def check_repeat(out: tools_json.RepeatJson, _: World) -> None:
    assert (out.runs, out.passed, out.failed, out.burners) == (2, 2, 0, 1)
    assert out.failures == ()
    assert 0 < out.p50_ns <= out.max_ns


REPO = ("--repo", "{work}/reviewed")
REVIEW = (
    *("--candidate", "{work}/candidate.json", "--claim", "bus-access.one", "--verdict", "pass"),
    *("--registry", "{work}/reviewers.json", "--reviews", "{work}/reviews", *REPO),
)
RELEASE_KEY = ("--release-key", "{state}/keys/release-signer.key", "--state-dir", "{state}")
NEW_RUNTIME = ("--kind", "hermes", "--id", "hermes-json", "--tenant", "tenant-acme")
STATE = ("--state-dir", "{state}")
BUS = (*STATE, "--nats", "{nats}")
CONFINE = ("--id", "hermes-json", "--kind", "hermes", "--workspace", "{work}/confine-ws", *STATE)
NEW_APPROVER = (
    *("--id", "attorney-json", "--role", "licensed_attorney", "--tenant", "tenant-acme"),
    *("--public-key", "{work}/attorney-json.pub.json", "--bus-user", "{approver_user}"),
)
ORIGIN = "http://localhost:8765"
"""The origin the software authenticator's registration was made on."""
PASSKEY_CREDENTIAL = bytes(range(32))
"""The enrolled credential's id: fixed, so its fingerprint can be given as the attorney reads it."""
PASSKEY = (
    "--id",
    "attorney-json",
    "--registration",
    "{work}/passkey-json.json",
    "--fingerprint",
    credential_fingerprint(b64url(PASSKEY_CREDENTIAL)),
    "--origin",
    ORIGIN,
)


CASES: dict[tuple[str, ...], tuple[Case, ...]] = {
    ("compile",): (
        Case(("--corpus", str(package_path(SCENARIO_CORPUS)), "--out", "{work}/compiled")),
        Case(("--corpus", "{work}/nowhere", "--out", "{work}/c2"), 1, None),
    ),
    ("eval",): (
        Case(("--at", AT, ENVELOPE), check=check_eval),
        Case(("--at", AT, "{work}/garbage"), 2, None),
        Case(("--at", AT, "--explain", ENVELOPE), prints=1, check=check_eval_explained),
        Case(("--at", AT, "--jsonl", "{work}/envelopes.jsonl"), prints=2, check=check_eval_lines),
        Case(
            (  # no --at: the release just built is verified at the time it is now
                "--jsonl",
                "{work}/envelopes.jsonl",
                "--against",
                "{work}/against",
                "--trust-root",
                "{state}/release-trust-root.json",
            ),
            prints=3,
            check=check_eval_against,
        ),
    ),
    ("explain",): (
        Case(("{decision}", "--state-dir", "{state}"), check=check_explain),
        Case(("sha256:" + "0" * 64, "--state-dir", "{state}"), 1, None),
    ),
    ("demo",): (
        Case((), check=check_demo),
        Case(("--nats", "{dead}"), 1, None),
    ),
    ("bench",): (
        Case(("--evaluator", "--rounds", "10"), check=check_bench),
        Case(("--confinement", "--rounds", "2"), check=check_bench_confinement),
        Case(("--rounds", "0"), 2, None),
    ),
    ("up",): (
        Case((), check=check_up),
        Case(("--state-dir", "{work}/up2", "--nats", "{dead}"), 1, None, process=True),
    ),
    ("keys", "new"): (
        Case(("--id", "someone", "--out", "{work}/someone.key"), check=check_key),
        Case(("--id", "someone", "--out", "{state}/keys/runtime.key"), 1, None),
    ),
    ("keys", "public"): (
        Case(("--key", "{state}/keys/runtime.key"), check=check_key),
        Case(("--key", "{work}/garbage"), 1, None),
    ),
    ("approvals", "pending"): (
        Case(
            ("--nats", "{nats}", "--credential", f"{{state}}/keys/{CONSOLE}.nkey", "--all"),
            check=check_pending,
        ),
        Case(("--nats", "{dead}"), 1, None),
    ),
    ("approvals", "show"): (
        Case(("{approval}", "--nats", "{nats}", *ATTORNEY), check=check_show),
        Case(("sha256:" + "ab" * 32, "--nats", "{nats}", *ATTORNEY), 1, None),
    ),
    ("approvals", "resolve"): (
        Case(
            ("{approval}", "allow-once", "--yes", "--nats", "{nats}", *PARALEGAL),
            1,
            1,
            check_resolve_refusal,
        ),
        Case(
            ("{approval}", "allow-once", "--yes", "--nats", "{nats}", *ATTORNEY),
            check=check_resolve,
        ),
        Case(
            ("{approval}", "deny", "--yes", "--reason", "other", "--nats", "{nats}", *ATTORNEY),
            1,
            1,
            check_not_pending,
        ),
    ),
    ("approvals", "rerequest"): (
        Case(("{expired}", "--nats", "{nats}", *PARALEGAL), check=check_rerequest),
        Case(("{expired}", "--nats", "{nats}", *ATTORNEY), 1, 0, check_rerequest_refused),
    ),
    ("ledger", "verify"): (
        Case(("--db", "{state}/ledger.db", "--state-dir", "{state}"), check=check_ledger),
        Case(
            (
                "--db",
                "{state}/ledger.db",
                "--state-dir",
                "{state}",
                "--checkpoints",
                "{work}/empty",
            ),
            1,
            0,
            check_unanchored,
        ),
    ),
    ("backup",): (
        Case((*STATE, "--out", "{work}/backup.tgz"), check=check_backup),
        Case((*STATE, "--out", "{work}/backup.tgz"), 1, None),  # never over an archive
    ),
    ("restore",): (
        Case(
            ("--from", "{work}/backup.tgz", "--state-dir", "{work}/restored"), check=check_restore
        ),
        Case(("--from", "{work}/garbage", "--state-dir", "{work}/restored-not"), 1, None),
    ),
    ("swarm", "analyze"): (
        Case(("--facts", MATTER, "--out", "{work}/report.json"), check=check_report),
        Case(
            (
                "--facts",
                MATTER,
                "--personas",
                "openai",
                "--base-url",
                "{dead_http}",
                "--timeout",
                "5",
            ),
            1,
            0,
            check_failed_personas,
        ),
    ),
    ("swarm", "review"): (
        Case(
            (
                "--report",
                "{work}/report.json",
                "--reviewer",
                "reviewer-rita",
                "--key",
                "{work}/rita.key",
                "--verdict",
                "faithful",
                "--note",
                "checked",
            ),
            check=check_reviewed,
        ),
        Case(
            (
                "--report",
                "{work}/garbage",
                "--reviewer",
                "reviewer-rita",
                "--key",
                "{work}/rita.key",
                "--verdict",
                "faithful",
                "--note",
                "-",
            ),
            1,
            None,
        ),
    ),
    ("release", "build"): (
        Case(
            (
                "--corpus",
                str(package_path(SCENARIO_CORPUS)),
                *SIGNER,
                "--registry",
                "{state}/registry.json",
                "--out",
                "{work}/release",
                "--sequence",
                "7",
            ),
            check=check_build,
        ),
        Case(
            (
                "--corpus",
                "{work}/nowhere",
                *SIGNER,
                "--registry",
                "{state}/registry.json",
                "--out",
                "{work}/release2",
            ),
            1,
            None,
        ),
    ),
    ("release", "trust-root"): (
        Case(("--key", "{work}/someone.key", "--out", "{work}/other-root.json")),
        Case(("--key", "{work}/garbage", "--out", "{work}/root3.json"), 1, None),
    ),
    ("release", "verify"): (
        Case(
            ("{work}/release", "--trust-root", "{state}/release-trust-root.json"),
            check=check_verify,
        ),
        Case(("{work}/release", "--trust-root", "{work}/other-root.json"), 1, None),
    ),
    ("release", "publish"): (
        # sequence 7 chained to nothing: written to the bucket, then refused by the gate
        Case(("{work}/release", "--nats", "{nats}", *PUBLISHER_CREDENTIAL, "--no-wait")),
        Case(
            ("{work}/release", "--nats", "{nats}", *PUBLISHER_CREDENTIAL, "--wait", "10"),
            1,
            check=check_publish_refused,
        ),
        Case(("{work}/release", "--nats", "{dead}"), 1, None),
    ),
    ("release", "diff"): (
        Case(("{work}/against", "{work}/release"), check=check_diff),
        Case(("{work}/nowhere", "{work}/release"), 2, None),  # as verify: a usage error
        Case(
            ("{work}/against", "{work}/release", "--state-dir", "{state}"),
            prints=1,
            check=check_traffic_diff,
        ),
        Case(("--shadow", "--state-dir", "{state}"), 1, None),  # its gate keeps no shadow
    ),
    ("release", "withdraw-shadow"): (
        Case(("--nats", "{nats}", *PUBLISHER_CREDENTIAL), check=check_withdraw),
        Case(("--nats", "{dead}"), 1, None),
    ),
    ("release", "status"): (
        Case(("--nats", "{nats}", *PUBLISHER_CREDENTIAL), check=check_status_bus),
        Case(("--state-dir", "{state}"), check=check_status_state),
        Case(("--nats", "{dead}"), 1, None),
    ),
    ("console",): (
        Case(
            (
                "--nats",
                "{nats}",
                "--registry",
                "{state}/registry.json",
                "--credential",
                f"{{state}}/keys/{CONSOLE}.nkey",
                "--port",
                "0",
                "--log-level",
                "error",
            ),
            process=True,
        ),
        Case(("--nats", "{nats}", "--registry", "{work}/garbage"), 1, None),
    ),
    ("notify",): (
        Case(
            (
                *("--config", "{work}/notify.toml", "--nats", "{nats}"),
                *("--registry", "{state}/registry.json", "--log-level", "error"),
                *("--credential", f"{{state}}/keys/{CONSOLE}.nkey"),
            ),
            process=True,
        ),
        Case(("--config", "{work}/garbage", "--nats", "{nats}"), 1, None),
    ),
    ("bus", "authorization"): (
        Case(("--state-dir", "{state}", "--out", "{work}/auth.conf")),
        Case(("--state-dir", "{work}/nostate", "--out", "{work}/auth2.conf"), 1, None),
    ),
    ("bus", "permissions"): (
        Case(("--state-dir", "{state}"), check=check_permissions),
        Case(("--state-dir", "{work}/nostate"), 1, None),
    ),
    ("model-gateway", "upstream"): (
        Case(("http://127.0.0.1:9", "--provider", "openai", "--state-dir", "{state}")),
        Case(("not-a-url", "--provider", "openai", "--state-dir", "{state}"), 1, None),
    ),
    ("model-gateway", "add-runtime"): (
        Case((*RUNTIME, "--state-dir", "{state}")),
        Case((*RUNTIME, "--state-dir", "{work}/nostate"), 1, None),
    ),
    ("model-gateway", "list"): (
        Case(("--state-dir", "{state}"), check=check_runtimes),
        Case(("--state-dir", "{work}/nostate"), 1, None),
    ),
    ("model-gateway", "clear"): (
        Case(("rt-json", "--state-dir", "{state}", "--nats", "{nats}")),
        Case(("not a runtime", "--state-dir", "{state}", "--nats", "{nats}"), 1, None),
    ),
    ("model-gateway", "serve"): (
        Case(
            ("--state-dir", "{state}", "--nats", "{nats}", "--listen", "127.0.0.1:0"), process=True
        ),
        Case(("--state-dir", "{state}", "--nats", "{dead}", "--listen", "127.0.0.1:0"), 1, None),
    ),
    # onboarding in releases the running gate adopts, then the deployment checked
    ("keys", "nkey"): (
        Case(("--out", "{work}/attorney-nkey.nkey"), check=check_nkey),
        Case(("--out", "{work}/attorney-nkey.nkey"), 1, None),  # never over a seed
    ),
    ("runtime", "add"): (
        Case((*NEW_RUNTIME, *RELEASE_KEY), check=check_runtime_add),
        Case((*NEW_RUNTIME, *RELEASE_KEY), 1, None),  # the same id again
    ),
    ("runtime", "remove"): (
        Case(("--id", "hermes-json", *RELEASE_KEY), check=check_runtime_remove),
        Case(("--id", "hermes-json", *RELEASE_KEY), 1, None),  # no longer there
    ),
    # the removed runtime's files stay: its key, seed, token and context confine it
    ("runtime", "confine"): (
        Case((*CONFINE, "--home", "{work}/confine-home"), check=check_runtime_confine),
        Case((*CONFINE, "--home", "{work}/nowhere"), 1, None),
    ),
    ("runtime", "run"): (
        Case(("--id", "hermes-json", *STATE, "--plan"), check=check_run_plan),
        Case(("--id", "nobody", *STATE, "--plan"), 1, None),
    ),
    ("holds", "add"): (
        Case(("/srv/json//held.txt", *BUS), check=check_holds),
        Case(("relative/held.txt", *BUS), 2, None),
    ),
    ("holds", "remove"): (
        Case(("/srv/json/held.txt", *BUS)),
        Case(("/", *BUS), 2, None),
    ),
    ("holds", "list"): (
        Case(BUS),
        Case((*STATE, "--nats", "{dead}"), 1, None),
    ),
    ("tls", "init"): (
        Case(("--out", "{work}/tls", "--host", "nats-1"), check=check_tls_init),
        Case(("--out", "{work}/tls"), 1, None),  # never over a CA
    ),
    ("tls", "issue"): (
        Case(
            (
                "--ca",
                "{work}/tls",
                "--name",
                "console",
                "--host",
                "console",
                "--out",
                "{work}/console-tls",
            ),
            check=check_tls_issue,
        ),
        Case(("--ca", "{work}/no-ca", "--name", "console", "--out", "{work}/x"), 1, None),
    ),
    ("approver", "add"): (
        Case((*NEW_APPROVER, *RELEASE_KEY), check=check_approver_add),
        Case((*NEW_APPROVER, *RELEASE_KEY), 1, None),  # the same principal again
    ),
    ("approver", "passkey-add"): (
        Case((*PASSKEY, *RELEASE_KEY), check=check_approver_passkey_add),
        Case((*PASSKEY, *RELEASE_KEY), 1, None),  # the same credential again
    ),
    ("approver", "passkey-remove"): (
        Case(("--id", "attorney-json", *RELEASE_KEY), check=check_approver_passkey_remove),
        Case(("--id", "attorney-json", *RELEASE_KEY), 1, None),  # none left
    ),
    ("approver", "remove"): (
        Case(("--id", "attorney-json", *RELEASE_KEY), check=check_approver_remove),
        Case(("--id", "attorney-json", *RELEASE_KEY), 1, None),
    ),
    ("doctor",): (
        Case(("--state-dir", "{state}", "--nats", "{nats}"), check=check_doctor),
        Case(("--state-dir", "{state}", "--nats", "{dead}"), 1, 0, check_doctor_dead),
    ),
    ("candidate", "build"): (
        Case(CANDIDATE, check=check_candidate),
        Case(CANDIDATE, 1, None),  # its --out is no longer empty
    ),
    # a review of a candidate's claim, bound to its commit, then its status
    ("review", "start"): (
        Case(("--candidate", "{work}/candidate.json", *REPO), check=check_review_start),
        Case(("--candidate", "{work}/garbage", *REPO), 1, None),
    ),
    ("review", "sign"): (
        Case((*REVIEW, "--key", "{work}/rita.key"), check=check_review_sign),
        Case((*REVIEW, "--key", "{state}/keys/runtime.key"), 1, None),  # not a reviewer
    ),
    ("candidate", "status"): (
        Case(
            (
                "--candidate",
                "{work}/candidate.json",
                "--reviews",
                "{work}/reviews",
                *REPO,
                "--registry",
                "{work}/reviewers.json",
            ),
            check=check_candidate_status,
        ),
        Case(("--candidate", "{work}/garbage", "--reviews", "{work}/reviews"), 1, None),
    ),
    ("repeat",): (
        Case((STEADY_TEST, "--runs", "2", "--burners", "1"), check=check_repeat),
        Case((STEADY_TEST, "--runs", "0"), 2, None),
    ),
    # Last: the operator's signing key rotates (nothing after this signs as the operator).
    ("keys", "rotate"): (
        Case(
            ("--id", "operator", "--public-key", "{work}/operator-next.pub.json", *RELEASE_KEY),
            check=check_key_rotate,
        ),
        Case(
            ("--id", "operator", "--public-key", "{work}/operator-next.pub.json", *RELEASE_KEY),
            1,
            None,
        ),
    ),
    ("keys", "retire"): (
        Case(
            ("--id", "operator", "--key-id", "{operator_key_id}", *RELEASE_KEY),
            check=check_key_retire,
        ),
        Case(("--id", "operator", "--key-id", "{operator_key_id}", *RELEASE_KEY), 1, None),
    ),
}
"""Cases run in this order (a later one may use what an earlier one wrote): per
command, a success and, where it can refuse, a refusal."""

ROWS = [(path, n, case) for path, cases in CASES.items() for n, case in enumerate(cases)]


def test_every_declared_command_has_a_success_and_a_refusal_case() -> None:
    assert set(CASES) == set(COMMANDS) | set(tools_json.COMMANDS)
    for path, cases in CASES.items():
        assert any(c.code == 0 for c in cases), path
        assert any(c.code != 0 for c in cases), path


@pytest.fixture(scope="module")
def scratch(world: World) -> Iterator[dict[str, str]]:
    """The values cases are filled with, and the scratch files they read."""
    work = world.work
    (work / "garbage").write_bytes(b"\xff\x00 not json, not a key\n")
    (work / "empty").write_text("")
    (work / "notify.toml").write_text(
        'console_url = "https://console.example/"\n[tenants.tenant-acme.approvers]\n'
    )
    (work / "actor.json").write_text(json.dumps(ACTOR))
    (work / "confine-home").mkdir()
    (work / "confine-ws").mkdir()
    from smf_assurance.subjects.keys import (  # noqa: PLC0415
        generate_signing_key,
        public_record,
        write_private_key,
    )

    rita = generate_signing_key()
    write_private_key(work / "rita.key", rita, "reviewer-rita")
    reviewed_repo(work, rita)
    lines = [
        json.dumps(json.loads((package_path(SCENARIO_ENVELOPES) / name).read_text()))
        for name in ("1-court-filing-approval.json", "2-legal-hold-deletion.json")
    ]
    (work / "envelopes.jsonl").write_text("\n".join(lines) + "\n")
    state = world.state
    again = build_release(
        package_path(SCENARIO_CORPUS),
        [state.key(RELEASE_SIGNER)],
        state.registry.read_bytes(),
        now_ms=time.time_ns() // 1_000_000,
    )
    write_release_dir(again, work / "against")
    fake_project(work / "candidate-repo")
    approver = public_record(generate_signing_key(), "attorney-json")
    (work / "attorney-json.pub.json").write_bytes(msgspec.json.encode(approver))
    passkey = SoftAuthenticator(credential_id=PASSKEY_CREDENTIAL).register(
        enrolment_challenge("attorney-json", "localhost")
    )
    (work / "passkey-json.json").write_text(json.dumps(passkey))
    operator = public_record(generate_signing_key(), "operator")
    (work / "operator-next.pub.json").write_bytes(msgspec.json.encode(operator))
    dead, dead_http = reserve_port(), reserve_port()
    try:
        yield {
            "decision": first_decision(world.state.ledger),
            "state": str(world.state.root),
            "work": str(work),
            "nats": world.nats_url,
            "approval": world.approval_id,
            "expired": world.expired_id,
            "dead": f"nats://127.0.0.1:{dead.port}",
            "dead_http": f"http://127.0.0.1:{dead_http.port}",
            "approver_user": public_user(new_user_seed()),
            "operator_key_id": world.state.key("operator").key_id,
        }
    finally:
        dead.close()
        dead_http.close()


def reviewed_repo(work: Path, reviewer: SigningKey) -> None:
    """A git repository of one commit, its candidate and a registry naming the reviewer."""
    repo = work / "reviewed"
    repo.mkdir()
    (repo / "a.py").write_text("A = 1\n")

    def git(*args: str) -> str:
        return subprocess.run(
            ("git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.org", *args),
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()

    git("init", "-q")
    git("add", "-A")
    git("commit", "-q", "-m", "one")
    sha = git("rev-parse", "HEAD")
    (work / "candidate.sha").write_text(sha)
    claim = {"id": "bus-access.one", "family": "bus-access", "tests": []}
    candidate = {"schema": "smf.candidate/1", "sha": sha, "tree": git("rev-parse", "HEAD^{tree}")}
    (work / "candidate.json").write_text(json.dumps({**candidate, "claims": [claim]}))
    entry = entry_for(reviewer, "reviewer-rita", "operator", licensed_roles=("reviewer",))
    (work / "reviewers.json").write_bytes(encode_registry((entry,)))


def run_case(
    path: tuple[str, ...], case: Case, world: World, values: dict[str, str], capsys: Any
) -> tuple[int, str]:
    line = line_of(path)
    argv = [*path, *(part.format(**values) for part in case.argv), "--json"]
    if path == ("demo",) and case.code == 0:
        return 0, world.demo_out
    if path == ("up",) and case.code == 0:
        return 0, world.up_line
    if case.process:
        if case.code == 0:
            return 0, ready_line(argv, line.process)
        done = subprocess.run(
            [*line.process, *argv],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
            check=False,
        )
        return done.returncode, done.stdout
    capsys.readouterr()
    try:
        code = line.main(argv)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    return code, capsys.readouterr().out


@pytest.mark.parametrize(
    ("path", "n", "case"), ROWS, ids=[f"{'-'.join(p)}-{n}" for p, n, _ in ROWS]
)
def test_the_output_decodes_strictly_as_its_declared_type(
    path: tuple[str, ...],
    n: int,
    case: Case,
    world: World,
    scratch: dict[str, str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out = run_case(path, case, world, scratch, capsys)
    assert code == case.code, (path, n, out)
    if case.prints is None:
        assert out == "", out
        return
    assert out.count("\n") == 1, out
    assert out.endswith("\n"), out
    struct = line_of(path).page.commands[path][case.prints]
    value = msgspec.json.decode(out.encode(), type=struct)
    if case.check is not None:
        case.check(value, world)
