"""``doctor`` on a running deployment: it passes when the deployment is
healthy and names each failure when it is not.

A nats-server of the test (authorization from the demo registry, as ``up`` would
generate it) stays up while real ``up`` processes come and go on it with the
demo state: the whole stack, then no connectors (``--no-connectors``), then no
gate (``--connectors-only``). ``doctor`` runs as the operator does, through
``smf_assurance.ops.cli.main.main`` with ``--json`` decoded strictly as its declared type, and the
table once. Also: a runtime that never attested, a release whose lease runs out
under a running gate, a console that does and does not answer, and a bus that
is not there. A check that could not look must say ``skip``, never ``ok``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import http.server
import json
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import msgspec
import nats
import pytest

from smf_assurance.governance.projections import SCENARIO_CORPUS, package_path
from smf_assurance.governance.releases import build_release, prior_of, write_release_dir
from smf_assurance.ops.cli.cli_json import DoctorCheckJson, DoctorJson
from smf_assurance.ops.cli.main import main
from smf_assurance.ops.doctor.checks import Settings
from smf_assurance.ops.doctor.files import NAMED, file_checks
from smf_assurance.ops.doctor.gates import ledger_check, runtime_check
from smf_assurance.ops.doctor.run import GATE_SERVICES, RELEASE_SERVICE
from smf_assurance.ops.local.defaults import CONSOLE
from smf_assurance.ops.local.model_gateway import set_upstream
from smf_assurance.ops.local.natsserver import EmbeddedNatsServer, reserve_port
from smf_assurance.ops.local.stack import start_embedded_server, start_stack
from smf_assurance.ops.local.state import RELEASE_SIGNER, RUNTIME_ID, StateDir, provision_demo
from smf_assurance.ops.runtimes.provision import provision_runtime
from smf_assurance.pipeline.stores.release_state import read_release_state
from smf_assurance.subjects import dsse, names
from smf_assurance.subjects.bus_access import connect_options
from smf_assurance.subjects.gate_status import (
    GateStatus,
    LedgerStanding,
    RuntimeStanding,
    open_gate_status,
    sign_gate_status,
)
from smf_assurance.subjects.keys import generate_signing_key
from smf_assurance.subjects.registry import load_registry
from smf_assurance.subjects.release import ReleaseBundle
from smf_tools.bench.gateway import attest
from tests.support.cli_json import hold_filing
from tests.support.cli_ops import read_line

PROG: Final = (sys.executable, "-m", "smf_assurance.ops.cli.main")
TIMEOUT: Final = 60.0
HOUR_MS: Final = 3_600_000
PIN_FOR_TEST: Final = "1.0"
SKEW_MS: Final = 60_000
"""The gates' clock-skew bound: a lease counts only while it outlasts now + this."""


@dataclass(frozen=True)
class Bus:
    work: Path
    state: StateDir
    server: EmbeddedNatsServer

    @property
    def url(self) -> str:
        return self.server.url


@pytest.fixture
def bus(tmp_path: Path) -> Iterator[Bus]:
    state = StateDir(tmp_path / "state")
    provision_demo(state)
    set_upstream(state, "http://127.0.0.1:9/v1", "local-model")
    server = start_embedded_server(state, tmp_path / "nats")
    try:
        yield Bus(tmp_path, state, server)
    finally:
        server.close()


def stop(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.terminate()
    try:
        proc.wait(TIMEOUT)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(TIMEOUT)


def started(*argv: str) -> tuple[subprocess.Popen[str], dict[str, object]]:
    """A command of ours as a process, once it printed its ``--json`` readiness line."""
    proc = subprocess.Popen(
        [*PROG, *argv, "--json", "--log-level", "error"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        ready: dict[str, object] = json.loads(read_line(proc, TIMEOUT))
    except BaseException:
        stop(proc)
        raise
    return proc, ready


def up(bus: Bus, *flags: str) -> subprocess.Popen[str]:
    """``up`` on the test's server, once it is ready."""
    return started("up", "--state-dir", str(bus.state.root), "--nats", bus.url, *flags)[0]


def doctor(
    bus: Bus, capsys: pytest.CaptureFixture[str], *extra: str, url: str | None = None
) -> tuple[int, DoctorJson, str]:
    capsys.readouterr()
    argv = ["doctor", "--state-dir", str(bus.state.root), "--nats", url or bus.url, *extra]
    code = main([*argv, "--json"])
    out, err = capsys.readouterr()
    assert out.count("\n") == 1, out
    return code, msgspec.json.decode(out.encode(), type=DoctorJson), err


def rows(report: DoctorJson, kind: str) -> list[DoctorCheckJson]:
    return [c for c in report.checks if c.kind == kind]


def row(report: DoctorJson, kind: str, subject: str | None) -> DoctorCheckJson:
    (found,) = (c for c in report.checks if (c.kind, c.subject) == (kind, subject))
    return found


def assert_fails_with(code: int, report: DoctorJson, err: str, *needles: str) -> None:
    assert code == 1
    assert not report.ok
    assert report.failed == sum(1 for c in report.checks if c.status == "fail")
    assert err.startswith("smf-assurance: doctor: "), err
    assert err.count("\n") == 1, err
    for needle in needles:
        assert needle in err, err


def assert_never_ok_without_looking(report: DoctorJson) -> None:
    """A row that says it did not check is never ``ok``."""
    for check in report.checks:
        if "not checked" in check.detail or "not verified" in check.detail:
            assert check.status == "skip", check


@pytest.fixture
def console(bus: Bus) -> Iterator[str]:
    """The real console (``smf-assurance console``) on the test's bus, on a free port;
    it outlives the ``up`` runs of a test, as an operator's console does."""
    proc, ready = started(
        "console",
        "--nats",
        bus.url,
        "--registry",
        str(bus.state.registry),
        "--credential",
        str(bus.state.bus_credential_path(CONSOLE)),
        "--port",
        "0",
    )
    try:
        yield str(ready["url"])
    finally:
        stop(proc)


def console_health(url: str, wanted: Callable[[int, dict[str, object]], bool]) -> None:
    """Wait, with a deadline, until the console's own ``/healthz`` answers as ``wanted``."""
    deadline = time.monotonic() + TIMEOUT
    while True:
        try:
            with urllib.request.urlopen(f"{url}healthz", timeout=5) as answer:
                status, body = answer.status, answer.read()
        except urllib.error.HTTPError as refused:
            status, body = refused.code, refused.read()
        if wanted(status, json.loads(body)):
            return
        assert time.monotonic() < deadline, (status, body)
        time.sleep(0.1)


def test_doctor_passes_on_a_healthy_up_and_names_each_failure(
    bus: Bus, console: str, capsys: pytest.CaptureFixture[str]
) -> None:
    signer = ["--release-key", str(bus.state.key_path(RELEASE_SIGNER))]
    state = ["--state-dir", str(bus.state.root)]
    proc = up(bus)
    try:
        asyncio.run(hold_filing(bus.url, bus.state))
        console_health(console, lambda status, _: status == 200)
        code, report, err = doctor(bus, capsys, "--console", console)
        assert code == 0, err
        assert (report.ok, report.failed, report.nats_url) == (True, 0, bus.url)
        assert row(report, "bus", bus.url).status == "ok"
        (release,) = [
            c for c in rows(report, "release") if not (c.subject or "").endswith("verified")
        ]
        assert release.status == "ok"
        assert release.remaining_ms is not None
        assert release.remaining_ms > 24 * HOUR_MS
        verified = [c for c in rows(report, "release") if (c.subject or "").endswith("verified")]
        assert [c.status for c in verified] == ["ok"]
        services = {c.subject: c.status for c in rows(report, "service")}
        assert services == dict.fromkeys((*GATE_SERVICES, RELEASE_SERVICE), "ok")
        scripted = row(report, "runtime", RUNTIME_ID)
        assert scripted.status == "skip"  # it does not attest, so it was not judged
        assert {c.subject: c.status for c in rows(report, "connector")} == {
            "court-efiling": "ok",
            "dms": "ok",
        }
        ledger = row(report, "ledger", "smf-gate")
        assert ledger.status == "ok", ledger
        assert "within" in ledger.detail or "anchored" in ledger.detail
        healthy = row(report, "console", console)
        assert (healthy.status, healthy.detail) == (
            "ok",
            "/healthz answers 200: it shows what is held now",
        )
        assert_never_ok_without_looking(report)

        capsys.readouterr()  # the table, once
        assert main(["doctor", *state, "--nats", bus.url]) == 0
        out = capsys.readouterr().out
        assert out.splitlines()[0].split() == ["check", "status", "found", "fix"]
        assert "0 failed" in out

        dead_http = reserve_port()
        try:
            code, report, err = doctor(
                bus, capsys, "--console", f"http://127.0.0.1:{dead_http.port}/"
            )
        finally:
            dead_http.close()
        assert_fails_with(code, report, err, "console")
        assert [c.kind for c in report.checks if c.status == "fail"] == ["console"]

        # a runtime that never attested
        code, _, err_add = cli_add(bus, capsys, signer, state)
        assert code == 0, err_add
        code, report, err = doctor(bus, capsys)
        assert_fails_with(code, report, err, "runtime hermes-new", "runtime_attestation_missing")
        failing = row(report, "runtime", "hermes-new")
        assert (failing.status, failing.age_ms) == ("fail", None)
        assert "never attested" in failing.detail
        assert failing.fix is not None
        assert [c.kind for c in report.checks if c.status == "fail"] == ["runtime"]
        capsys.readouterr()
        removed = main(["runtime", "remove", "--id", "hermes-new", *state, *signer])
        assert removed == 0, capsys.readouterr().err
        code, report, err = doctor(bus, capsys)
        assert code == 0, err
    finally:
        stop(proc)

    # the connectors stopped: their durables stay, nobody pulls
    proc = up(bus, "--no-connectors")
    try:
        code, report, err = doctor(bus, capsys)
        assert_fails_with(code, report, err, "connector")
        assert {c.subject: c.status for c in rows(report, "connector")} == {
            "court-efiling": "fail",
            "dms": "fail",
        }
        assert "not bound" in row(report, "connector", "dms").detail
        assert {c.kind for c in report.checks if c.status == "fail"} == {"connector"}
    finally:
        stop(proc)

    # the gate stopped: only the connectors run
    proc = up(bus, "--connectors-only")
    try:
        # The console's page still answers 200; its /healthz says no gate answers it.
        console_health(
            console,
            lambda status, body: status == 503 and body["reason"] == "gate_not_answering",
        )
        code, report, err = doctor(bus, capsys, "--console", console)
        assert_fails_with(code, report, err)
        kinds = {c.kind for c in report.checks if c.status == "fail"}
        assert kinds == {"release", "service", "runtime", "console"}, report.checks
        unhealthy = row(report, "console", console)
        assert unhealthy.detail == "/healthz answers 503: gate_not_answering"
        assert unhealthy.fix is not None
        assert "start the gate" in unhealthy.fix
        assert all(c.status == "fail" for c in rows(report, "service"))
        assert row(report, "ledger", None).status == "skip"  # it could not look
        assert {c.status for c in rows(report, "connector")} == {"ok"}
        assert_never_ok_without_looking(report)
    finally:
        stop(proc)


def stand_in(status: int, body: bytes, headers: dict[str, str]) -> type[Handler]:
    """Something at the console's URL that is not a healthy console: it answers every
    path, ``/healthz`` included, with ``status`` and ``body``."""

    class StandIn(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(status)
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            """Quiet."""

    return StandIn


Handler = http.server.BaseHTTPRequestHandler
HEALTHY = b'{"ok":true,"reason":null,"bus_connected":true,"gate_answering":true,"board_age_ms":1}'


@pytest.mark.parametrize(
    ("status", "body", "headers", "detail"),
    [
        (200, b"<html>a page</html>", {}, "/healthz answers HTTP 200 without the console's health"),
        (404, b"not found", {}, "/healthz answers HTTP 404 without the console's health"),
        (302, b"", {"Location": "/healthz-elsewhere"}, "/healthz answers HTTP 302 without"),
        (503, b'{"ok": false}', {}, "/healthz answers HTTP 503 without the console's health"),
        (503, HEALTHY.replace(b"null", b'"bus_exploded"'), {}, "/healthz answers HTTP 503"),
        (200, HEALTHY.replace(b"true,", b"false,", 1), {}, "/healthz answers HTTP 200 without"),
        (200, HEALTHY + b" " * 5000, {}, "/healthz answers HTTP 200 without"),
        (500, HEALTHY, {}, "/healthz answers HTTP 500 without the console's health"),
    ],
    ids=[
        "a-page-not-its-health",
        "not-found",
        "redirect",
        "503-without-reason",
        "503-unknown-reason",
        "200-saying-not-ok",
        "oversized",
        "500",
    ],
)
def test_doctor_fails_a_console_url_whose_healthz_is_not_a_healthy_console(
    bus: Bus,
    capsys: pytest.CaptureFixture[str],
    status: int,
    body: bytes,
    headers: dict[str, str],
    detail: str,
) -> None:
    """``ok`` only on the console's own health saying ``ok`` with 200; anything
    else at the URL fails (fail closed), and the one-line reason names the console."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), stand_in(status, body, headers))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/"
        code, report, err = doctor(bus, capsys, "--console", url)
    finally:
        server.shutdown()
        server.server_close()
    found = row(report, "console", url)
    assert found.status == "fail"
    assert found.detail.startswith(detail), found.detail
    assert code == 1
    assert "console" in {c.kind for c in report.checks if c.status == "fail"}
    assert err.count("\n") == 1, err


def cli_add(
    bus: Bus, capsys: pytest.CaptureFixture[str], signer: list[str], state: list[str]
) -> tuple[int, str, str]:
    capsys.readouterr()
    argv = [
        "runtime",
        "add",
        "--kind",
        "hermes",
        "--id",
        "hermes-new",
        "--tenant",
        "tenant-acme",
        *state,
        *signer,
    ]
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def test_doctor_names_an_unreachable_bus_and_checks_nothing_else(
    bus: Bus, capsys: pytest.CaptureFixture[str]
) -> None:
    dead = reserve_port()
    try:
        url = f"nats://127.0.0.1:{dead.port}"
        code, report, err = doctor(bus, capsys, url=url)
    finally:
        dead.close()
    assert_fails_with(code, report, err, url)
    assert row(report, "bus", url).status == "fail"
    assert "nothing answers there" in row(report, "bus", url).detail
    # Everything asked of the bus is skipped; the state folder's modes are the files'.
    assert {c.status for c in report.checks if c.kind not in ("bus", "files")} == {"skip"}
    assert row(report, "files", str(bus.state.root)).status == "ok"
    assert_never_ok_without_looking(report)


@contextlib.contextmanager
def hanging_up() -> Iterator[tuple[str, list[int]]]:
    """A listener on 127.0.0.1 that accepts each connection and closes it at once (no
    NATS INFO): the URL, and one entry per connection it accepted."""
    listener = socket.create_server(("127.0.0.1", 0))
    accepted: list[int] = []

    def serve() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return  # closed
            accepted.append(1)
            conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"nats://127.0.0.1:{listener.getsockname()[1]}", accepted
    finally:
        listener.shutdown(socket.SHUT_RDWR)
        listener.close()
        thread.join(10)


def test_doctor_tries_a_bus_that_hangs_up_once_and_checks_nothing_else(
    bus: Bus, capsys: pytest.CaptureFixture[str]
) -> None:
    """Doctor does not retry a bus that fails it: one connection, then the bus row fails
    and everything asked of the bus is skipped (so an unreachable bus costs one
    attempt, not a reconnect loop)."""
    with hanging_up() as (url, accepted):
        code, report, err = doctor(bus, capsys, url=url)
    assert len(accepted) == 1
    assert_fails_with(code, report, err, url)
    assert row(report, "bus", url).status == "fail"
    assert {c.status for c in report.checks if c.kind not in ("bus", "files")} == {"skip"}


@pytest.mark.claim("protected-evidence.state-files-private")
def test_doctor_names_each_state_file_or_folder_others_may_read(
    bus: Bus, capsys: pytest.CaptureFixture[str]
) -> None:
    """The state folder as provisioned is its owner's alone; a file and a folder made
    readable by others are each a failure naming the path and the chmod, and doctor
    changes neither."""
    dead = reserve_port()  # the modes are asked of the files: no bus needed
    url = f"nats://127.0.0.1:{dead.port}"
    try:
        _, report, _ = doctor(bus, capsys, url=url)
        assert [(c.subject, c.status) for c in rows(report, "files")] == [
            (str(bus.state.root), "ok")
        ]
        leaked = bus.state.approvals
        leaked.write_bytes(b"")
        leaked.chmod(0o644)
        bus.state.keys.chmod(0o755)
        code, report, err = doctor(bus, capsys, url=url)
    finally:
        dead.close()
    assert_fails_with(code, report, err)
    found = {c.subject: (c.status, c.detail, c.fix) for c in rows(report, "files")}
    assert found == {
        str(bus.state.keys): (
            "fail",
            "mode 0755: others may enter it",
            f"chmod 700 '{bus.state.keys}'",
        ),
        str(leaked): ("fail", "mode 0644: others may read it", f"chmod 600 '{leaked}'"),
    }
    assert (leaked.stat().st_mode & 0o777, bus.state.keys.stat().st_mode & 0o777) == (0o644, 0o755)


def accepted(state: StateDir) -> ReleaseBundle:
    stored = read_release_state(state.release_state)
    assert stored is not None
    return msgspec.json.decode(stored.bundle, type=ReleaseBundle)


def test_doctor_warns_of_a_lease_ending_and_fails_once_it_ended(
    bus: Bus, capsys: pytest.CaptureFixture[str]
) -> None:
    """A release whose lease ends 75 s from now: adopted (it outlasts the 60 s skew),
    reported near its end at once, then not in force once only the skew is left."""
    proc = up(bus)
    try:
        now = time.time_ns() // 1_000_000
        ending = now + SKEW_MS + 15_000
        short = build_release(
            package_path(SCENARIO_CORPUS),
            [bus.state.key(RELEASE_SIGNER)],
            bus.state.registry.read_bytes(),
            now_ms=ending - HOUR_MS,  # issued an hour before its end: a one-hour lease
            lease_hours=1,
            prior=prior_of(accepted(bus.state)),
        )
        write_release_dir(short, bus.work / "short")
        capsys.readouterr()
        published = main(
            ["release", "publish", str(bus.work / "short"), "--state-dir", str(bus.state.root)]
        )
        assert published == 0, capsys.readouterr().err
        code, report, err = doctor(bus, capsys)
        (release,) = [c for c in rows(report, "release") if c.subject == "smf-gate"]
        assert release.status == "warn", release  # in force, under the 24 h threshold
        assert "24 h" in release.detail
        assert code == 0, err
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline:
            code, report, err = doctor(bus, capsys)
            (release,) = [c for c in rows(report, "release") if c.subject == "smf-gate"]
            if release.status == "fail":
                break
            time.sleep(1)
        assert_fails_with(code, report, err, "release smf-gate", "release_expired")
        assert release.remaining_ms is not None
        assert release.remaining_ms < SKEW_MS
    finally:
        stop(proc)


def test_a_status_no_gate_key_signed_is_not_a_gates_word() -> None:
    """``smf.gate.status`` is opened only with the registry's gate keys: an answer signed
    by any other key (or for another payload type) is not counted, so no other client
    on the bus can tell the operator a runtime attested."""
    gate, other = generate_signing_key(), generate_signing_key()
    status = GateStatus(
        schema="smf.gate-status/1",
        gate="smf-gate",
        at_ms=1,
        release_id=None,
        runtimes=(),
        runtimes_truncated=False,
        ledger=LedgerStanding(
            ledger_id="l",
            tail_seq=0,
            checkpoint_seq=0,
            pending_checkpoints=0,
            window_start_ms=None,
        ),
    )
    trusted = {gate.key_id: gate.verify_key}
    assert open_gate_status(sign_gate_status(status, gate), trusted) == status
    with pytest.raises(dsse.SignatureError):
        open_gate_status(sign_gate_status(status, other), trusted)
    report = dsse.encode_envelope(dsse.sign_struct(names.PAYLOAD_VERDICT, status, [gate]))
    with pytest.raises(dsse.SignatureError):
        open_gate_status(report, trusted)


# --- each judgement, on the gate's word as it would come ----------------------------------------


NOW: Final = 10_000_000


def status_of(*runtimes: RuntimeStanding, **ledger: int | None) -> GateStatus:
    fields: dict[str, int | None] = {
        "tail_seq": 10,
        "checkpoint_seq": 0,
        "pending_checkpoints": 0,
        "window_start_ms": NOW - 1000,
    }
    fields.update(ledger)
    return GateStatus(
        schema="smf.gate-status/1",
        gate="smf-gate",
        at_ms=NOW,
        release_id="r",
        runtimes=runtimes,
        runtimes_truncated=False,
        ledger=msgspec.convert({"ledger_id": "ledger-a", **fields}, type=LedgerStanding),
    )


def settings_for(state: StateDir) -> Settings:
    return Settings(
        url="nats://unused",
        credential=None,
        registry=load_registry(state.registry),
        trust_root=None,
        state=None,
        console=None,
        clock=lambda: NOW,
    )


def standing(reason: str | None, *, must: bool = True, age: int | None = 5000) -> RuntimeStanding:
    return RuntimeStanding(
        runtime_id="rt",
        must_attest=must,
        lease_ms=180_000,
        attested_at_ms=None if age is None else NOW - age,
        accepted=None if age is None else reason != "runtime_attestation_rejected",
        reason_codes=("runtime_hook_missing",) if reason == "runtime_attestation_rejected" else (),
        standing=reason,
    )


@pytest.mark.parametrize(
    ("reason", "status", "said"),
    [
        (None, "ok", "accepted"),
        ("runtime_attestation_missing", "fail", "never attested"),
        ("runtime_attestation_stale", "fail", "older than its lease"),
        ("runtime_attestation_rejected", "fail", "refused (runtime_hook_missing)"),
        ("runtime_release_mismatch", "fail", "another release"),
        ("runtime_stopped_ungated_tool_result", "fail", "stopped"),
    ],
)
def test_each_runtime_standing_is_judged_as_the_gate_would_refuse_it(
    reason: str | None, status: str, said: str
) -> None:
    age = None if reason == "runtime_attestation_missing" else 5000
    check = runtime_check(status_of(), standing(reason, age=age), "rt", NOW)
    assert (check.status, check.age_ms) == (status, age)
    assert said in check.detail
    assert (check.fix is None) == (status == "ok")
    exempt = runtime_check(status_of(), standing(None, must=False), "rt", NOW)
    assert exempt.status == "skip"  # not required to attest: not judged, never ok


@pytest.mark.parametrize(
    ("ledger", "found", "status", "said"),
    [
        ({"tail_seq": 0, "window_start_ms": None}, None, "ok", "empty"),
        ({"pending_checkpoints": 2}, None, "fail", "not on the bus"),
        ({}, None, "ok", "10 entries after the newest checkpoint (seq 0), waiting 1 s"),
        ({"window_start_ms": NOW - 600_000}, None, "warn", "more than 120 s"),
        ({"checkpoint_seq": 10}, None, "fail", "the stream holds none"),
        ({"checkpoint_seq": 10}, ("ledger-a", 10, NOW - 5000), "ok", "anchored"),
        ({"checkpoint_seq": 8}, ("ledger-a", 6, NOW - 5000), "fail", "seq 6 at most"),
        ({}, ("ledger-b", 4, NOW), "fail", "replaced or truncated"),
        ({}, ("ledger-a", 11, NOW), "fail", "replaced or truncated"),
    ],
)
def test_each_ledger_standing_is_judged_against_the_checkpoint_on_the_bus(
    ledger: dict[str, int | None],
    found: tuple[str, int, int] | None,
    status: str,
    said: str,
    quiet: StateDir,
) -> None:
    published = found is not None
    check = ledger_check(settings_for(quiet), "smf-gate", status_of(**ledger), published, found)
    assert check.status == status, check
    assert said in check.detail, check
    stranger = ledger_check(settings_for(quiet), "smf-gate", status_of(), True, None)
    assert "not signed by a gate key" in stranger.detail


@pytest.fixture
def quiet(tmp_path: Path) -> StateDir:
    state = StateDir(tmp_path / "quiet")
    provision_demo(state)
    return state


async def test_a_gate_answers_its_status_signed_and_read_only(quiet: StateDir) -> None:
    """The gate side of ``smf.gate.status`` in process: the scripted runtime exempt, a
    runtime that must attest missing until it attests, the ledger's tail, and a request
    that is not one answered unsigned (no asker counts it)."""
    provision_runtime(quiet, "rt-must", "rt-must", runtime_pin=PIN_FOR_TEST, require_release=False)
    stack = await start_stack(quiet, with_connectors=False)
    try:
        nc = await nats.connect(stack.url, **connect_options(quiet.existing_credential("operator")))
        try:

            async def ask(payload: bytes = b"{}") -> bytes:
                reply = await nc.request(names.GATE_STATUS, payload, timeout=5)
                data: bytes = reply.data
                return data

            status = open_gate_status(await ask(), quiet.gate_keys())
            assert [(r.runtime_id, r.must_attest, r.standing) for r in status.runtimes] == [
                ("rt-must", True, "runtime_attestation_missing"),
                (RUNTIME_ID, False, "runtime_attestation_missing"),
            ]
            assert status.release_id is not None
            ack = await attest(quiet, stack.url, "rt-must", "rt-must", PIN_FOR_TEST)
            assert ack.accepted, ack
            again = open_gate_status(await ask(), quiet.gate_keys())
            (must,) = (r for r in again.runtimes if r.runtime_id == "rt-must")
            assert (must.standing, must.accepted) == (None, True)
            assert must.attested_at_ms is not None
            assert again.ledger.tail_seq >= status.ledger.tail_seq
            assert await ask(b"not json") == b'{"error":"malformed_request"}'
        finally:
            await nc.close()
    finally:
        await stack.stop()


# --- the tenant directory -------------------------------------------------------

OTHER_TENANT: Final = """\
schema = "smf.tenant-directory/1"
tenant_id = "tenant-other"

[courts.sdny]
name = "U.S. District Court, Southern District of New York"
"""


def test_doctor_reads_the_tenant_directory_and_warns_of_a_roster_tenant_it_names_nothing_for(
    bus: Bus, capsys: pytest.CaptureFixture[str]
) -> None:
    """The directory is checked from the files, so the answer does not wait on the bus:
    with none kept the row is ``skip`` (approvers read raw ids); with one file for
    another tenant it is ``ok`` naming that tenant, and the demo roster's own tenant,
    which has no file, is a warning naming the file to add."""
    dead = reserve_port()
    try:
        url = f"nats://127.0.0.1:{dead.port}"
        _, report, _ = doctor(bus, capsys, url=url)
        assert [(c.status, c.subject) for c in rows(report, "directory")] == [("skip", None)]
        bus.state.directory.mkdir()
        (bus.state.directory / "tenant-other.toml").write_text(OTHER_TENANT)
        _, report, _ = doctor(bus, capsys, url=url)
    finally:
        dead.close()
    folder = str(bus.state.directory)
    assert row(report, "directory", folder).status == "ok"
    assert "tenant-other" in row(report, "directory", folder).detail
    missing = row(report, "directory", "tenant-acme")
    assert missing.status == "warn"
    assert missing.fix is not None
    assert str(bus.state.directory / "tenant-acme.toml") in missing.fix


def test_doctor_fails_on_the_directory_the_console_refuses_naming_the_file_and_key(
    bus: Bus, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A case at a court the file does not name: the console refuses to start on it,
    and doctor fails with the same line, so the operator learns it before an
    approver opens the console; ``--directory`` names another folder."""
    folder = tmp_path / "elsewhere"
    folder.mkdir()
    broken = OTHER_TENANT + (
        '\n[matters.m1]\nname = "M"\nclient = "C"\n'
        '[matters.m1.cases.ndca]\ncaption = "A v. B"\ndocket = "1"\n'
    )
    (folder / "tenant-other.toml").write_text(broken)
    dead = reserve_port()
    try:
        url = f"nats://127.0.0.1:{dead.port}"
        code, report, err = doctor(bus, capsys, "--directory", str(folder), url=url)
    finally:
        dead.close()
    assert_fails_with(code, report, err)
    check = row(report, "directory", str(folder))
    assert check.status == "fail"
    assert "tenant-other.toml" in check.detail
    assert "matters.m1.cases.ndca" in check.detail
    assert "no [courts.ndca]" in check.detail
    capsys.readouterr()
    argv = ["console", "--state-dir", str(bus.state.root), "--directory", str(folder)]
    assert main([*argv, "--port", "0"]) == 1
    refused = capsys.readouterr().err
    assert refused.count("\n") == 1
    assert check.detail in refused


def test_the_modes_check_counts_past_the_named_few_and_skips_without_a_state(
    tmp_path: Path,
) -> None:
    state = StateDir(tmp_path / "state")
    provision_demo(state)
    settings = Settings(
        url="nats://127.0.0.1:1",
        credential=None,
        registry=load_registry(state.registry),
        trust_root=None,
        state=state,
        console=None,
        clock=lambda: 0,
    )
    leaked = [state.root / f"leak-{index}.txt" for index in range(NAMED + 2)]
    for path in leaked:
        path.write_bytes(b"x")
        path.chmod(0o644)
    (state.root / "a-link").symlink_to("/etc/hostname")  # not followed, not judged

    checks = file_checks(settings)

    assert [(c.subject, c.status) for c in checks[:NAMED]] == [
        (str(path), "fail") for path in leaked[:NAMED]
    ]
    assert (checks[-1].subject, checks[-1].detail, checks[-1].fix) == (
        str(state.root),
        "2 more path(s) others may read or enter",
        f"chmod -R go-rwx '{state.root}'",
    )
    assert len(checks) == NAMED + 1
    (skipped,) = file_checks(dataclasses.replace(settings, state=None))
    assert (skipped.kind, skipped.status) == ("files", "skip")
