"""A wrong bus credential is named for what it is, at once, and a notifier file that
names a tenant or approver the roster does not know refuses to start.

On a real nats-server with the registry's authorization: an nkey the server does
not know, a principal the server knows but that may not use what the command asks
for, a malformed and a too-open seed file. Each command that connects ends with one
line naming the principal and the refusal, never ``nats: timeout`` seconds later,
``ErrInvalidSeed`` or a doctor's "enable JetStream"; the notifier's log says why the
bus refused it, never the library's bare ``Error``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import msgspec
import nats
import pytest
import structlog
from nats.errors import Error as NatsError

from smf_assurance.approver.notify.config import load_config
from smf_assurance.approver.notify.service import NotifierSettings, start_notifier
from smf_assurance.ops.cli.cli_json import DoctorJson
from smf_assurance.ops.cli.main import main
from smf_assurance.ops.local.bus_auth import new_user_seed
from smf_assurance.ops.local.natsserver import EmbeddedNatsServer
from smf_assurance.ops.local.stack import start_embedded_server
from smf_assurance.ops.local.state import StateDir, provision_demo
from smf_assurance.subjects.bus_access import BusCredential, bus_error_reason, connect_options
from tests.support.bus_helpers import wait_for


@dataclass(frozen=True)
class Bus:
    state: StateDir
    server: EmbeddedNatsServer
    stranger: Path
    """A well-formed user seed the server's authorization does not list."""

    @property
    def url(self) -> str:
        return self.server.url

    def key(self, principal: str) -> Path:
        return self.state.bus_credential_path(principal)


@pytest.fixture(scope="module")
def bus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bus]:
    work = tmp_path_factory.mktemp("credentials")
    state = StateDir(work / "state")
    provision_demo(state)
    stranger = work / "stranger.nkey"
    stranger.write_bytes(new_user_seed())
    stranger.chmod(0o600)
    server = start_embedded_server(state, work / "nats")
    try:
        yield Bus(state, server, stranger)
    finally:
        server.close()


def one_line(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    """Run ``argv``: it fails with exit 1 and exactly one line on stderr."""
    capsys.readouterr()
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert "Traceback" not in err
    assert "timeout" not in err.lower(), err
    return err


@pytest.mark.claim("bus-access.credential-named")
def test_an_nkey_the_server_does_not_know_is_named_as_refused(
    bus: Bus, capsys: pytest.CaptureFixture[str]
) -> None:
    for argv in (
        ["approvals", "pending"],
        ["release", "status"],
    ):
        err = one_line(capsys, [*argv, "--nats", bus.url, "--credential", str(bus.stranger)])
        assert err.startswith(
            "smf-assurance: the bus refused the credential of principal stranger "
            "(Authorization Violation)"
        ), err


@pytest.mark.claim("bus-access.credential-named")
def test_a_principal_refused_a_subject_is_named_with_it_not_after_a_timeout(
    bus: Bus, capsys: pytest.CaptureFixture[str]
) -> None:
    """The runtime's credential is the server's, but it may not read approvals: the
    command ends on the server's refusal, naming principal and subject."""
    err = one_line(
        capsys, ["approvals", "pending", "--nats", bus.url, "--credential", str(bus.key("runtime"))]
    )
    assert err.startswith(
        "smf-assurance: the bus refused principal runtime permission to publish to "
        "smf.approval.announcements (Permissions Violation)"
    ), err


@pytest.mark.claim("bus-access.credential-named")
def test_a_malformed_or_too_open_seed_file_is_named_before_connecting(
    bus: Bus, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    garbage = tmp_path / "garbage.nkey"
    garbage.write_text("SUnot-a-seed\n")
    garbage.chmod(0o600)
    err = one_line(
        capsys, ["approvals", "pending", "--nats", bus.url, "--credential", str(garbage)]
    )
    assert err == (
        f"smf-assurance: bus credential of principal garbage: {garbage} does not hold one "
        "NATS user nkey seed\n"
    )
    assert "ErrInvalidSeed" not in err
    open_seed = tmp_path / "open.nkey"
    open_seed.write_bytes(bus.key("operator").read_bytes())
    open_seed.chmod(0o644)
    err = one_line(
        capsys, ["approvals", "pending", "--nats", bus.url, "--credential", str(open_seed)]
    )
    assert "has mode 0644; it must be 0600 or stricter" in err
    missing = tmp_path / "missing.nkey"
    err = one_line(
        capsys, ["approvals", "pending", "--nats", bus.url, "--credential", str(missing)]
    )
    assert str(missing) in err


def doctor_bus_row(
    bus: Bus, capsys: pytest.CaptureFixture[str], credential: Path
) -> tuple[str, str | None]:
    capsys.readouterr()
    argv = ["doctor", "--state-dir", str(bus.state.root), "--nats", bus.url]
    assert main([*argv, "--credential", str(credential), "--json"]) == 1
    report = msgspec.json.decode(capsys.readouterr().out.encode(), type=DoctorJson)
    (row,) = (c for c in report.checks if c.kind == "bus")
    assert row.status == "fail"
    return row.detail, row.fix


@pytest.mark.claim("bus-access.credential-named")
def test_doctor_names_the_refused_credential_and_never_advises_enabling_jetstream_for_it(
    bus: Bus, capsys: pytest.CaptureFixture[str]
) -> None:
    detail, fix = doctor_bus_row(bus, capsys, bus.stranger)
    assert "as stranger" in detail
    assert "(Authorization Violation)" in detail
    assert "JetStream" not in (fix or "")
    detail, fix = doctor_bus_row(bus, capsys, bus.key("runtime"))
    assert detail.startswith(
        "connected as runtime, but the bus refused principal runtime permission to publish to "
    ), detail
    assert "(Permissions Violation)" in detail
    assert "enable JetStream" not in (fix or "")


async def refusal_from_the_server(bus: Bus) -> tuple[Exception, Exception]:
    """What nats-py raises for an unknown nkey, and hands its error callback for a
    subject the principal may not publish to: the library's own exceptions."""
    stranger = BusCredential("stranger", bus.stranger)
    try:
        await nats.connect(bus.url, allow_reconnect=False, **connect_options(stranger))
    except NatsError as exc:
        unknown: Exception = exc
    else:
        raise AssertionError("the server admitted an nkey it does not list")
    seen: list[Exception] = []

    async def collect(exc: Exception) -> None:
        seen.append(exc)

    runtime = BusCredential("runtime", bus.key("runtime"))
    nc = await nats.connect(bus.url, error_cb=collect, **connect_options(runtime))
    try:
        await nc.publish("smf.approval.announcements", b"{}")
        await nc.flush()
        await wait_for(lambda: seen, timeout=10)
    finally:
        await nc.close()
    return unknown, seen[0]


@pytest.mark.claim("bus-access.credential-named")
async def test_a_refusal_is_logged_by_its_reason_never_the_bare_error(bus: Bus) -> None:
    unknown, forbidden = await refusal_from_the_server(bus)
    assert bus_error_reason(unknown) == "authorization_violation"
    assert bus_error_reason(forbidden) == "permissions_violation"
    assert type(forbidden).__name__ == "Error"  # what the logs said before


@pytest.mark.claim("bus-access.credential-named")
async def test_a_notifier_the_bus_refuses_logs_why(bus: Bus, tmp_path: Path) -> None:
    """A notifier on a credential that may not read announcements (the runtime's):
    its log names the refusal."""
    config = tmp_path / "notify.toml"
    config.write_text(
        'console_url = "https://console.example/"\nrecord = "sent.sqlite"\n'
        '[tenants.tenant-acme.approvers.attorney-alex]\nemail = "a@firm.example"\n'
        '[tenants.tenant-acme.smtp]\nhost = "127.0.0.1"\nport = 9\nsender = "s@firm.example"\n'
    )
    settings = NotifierSettings(
        nats_url=bus.url,
        registry=bus.state.registry,
        config=load_config(config),
        credential=BusCredential("runtime", bus.key("runtime")),
        interval_seconds=0.05,
    )
    with structlog.testing.capture_logs() as logs:
        running = await start_notifier(settings)
        try:
            await wait_for(lambda: any(e["event"] == "notify_bus_error" for e in logs), timeout=10)
        finally:
            await running.close()
    errors = {e["error"] for e in logs if e["event"] == "notify_bus_error"}
    assert errors == {"permissions_violation"}, logs


# --- the notifier's file against the roster ----------------------------------------------


@pytest.fixture
def roster(tmp_path: Path) -> StateDir:
    state = StateDir(tmp_path / "state")
    provision_demo(state)
    return state


def notify_file(tmp_path: Path, tenant: str, approver: str) -> Path:
    path = tmp_path / "notify.toml"
    path.write_text(
        'console_url = "https://console.example/"\n'
        f'[tenants.{tenant}.approvers.{approver}]\nwebhook_url = "https://h.example/x"\n'
        f'[tenants.{tenant}.webhook]\nsecret_env = "SMF_TEST_NAMED_SECRET"\n'
    )
    return path


@pytest.fixture
def secret() -> Iterator[None]:
    os.environ["SMF_TEST_NAMED_SECRET"] = "whsec-named-0123456789"
    try:
        yield
    finally:
        del os.environ["SMF_TEST_NAMED_SECRET"]


@pytest.mark.claim("notifications.unknown-ids-refused")
@pytest.mark.usefixtures("secret")
@pytest.mark.parametrize(
    ("tenant", "approver", "named"),
    [
        (
            "tenant-acmee",
            "attorney-alex",
            "tenants.tenant-acmee: no approver on the roster is entitled to tenant 'tenant-acmee'",
        ),
        (
            "tenant-acme",
            "attorney-alexx",
            "tenants.tenant-acme.approvers.attorney-alexx: 'attorney-alexx' is no approver "
            "on the roster",
        ),
        (
            "tenant-acme",
            "console",
            "tenants.tenant-acme.approvers.console: 'console' is no approver on the roster",
        ),
    ],
)
def test_notify_refuses_to_start_naming_an_unknown_tenant_or_approver(
    roster: StateDir,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    tenant: str,
    approver: str,
    named: str,
) -> None:
    config = notify_file(tmp_path, tenant, approver)
    registry = ["--registry", str(roster.registry)]
    # nothing listens on port 1: the refusal comes before any connection
    argv = ["notify", "--config", str(config), *registry, "--nats", "nats://127.0.0.1:1"]
    assert main(argv) == 1
    assert capsys.readouterr().err == f"smf-assurance: bad notifier config: {named}\n"
    # `up --notify` refuses the same before it starts anything
    assert main(["up", "--state-dir", str(roster.root), "--notify", str(config)]) == 1
    assert capsys.readouterr().err == f"smf-assurance: bad notifier config: {named}\n"
    assert not (roster.root / "nats.url").exists()


@pytest.mark.usefixtures("secret")
def test_a_file_the_roster_knows_passes_the_check(
    roster: StateDir, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The check refuses only what is unknown: the same file with known ids goes on
    to connect (and here finds no bus)."""
    config = notify_file(tmp_path, "tenant-acme", "paralegal-pat")
    argv = ["notify", "--config", str(config), "--registry", str(roster.registry)]
    assert main([*argv, "--nats", "nats://127.0.0.1:1"]) == 1
    assert capsys.readouterr().err.startswith(
        "smf-assurance: cannot connect to NATS at nats://127.0.0.1:1"
    )
