"""smf_assurance.ops.local.natsserver and smf_assurance.ops.local.logs, against a real nats-server.

Small fake binaries written to ``tmp_path`` stand in for nats-server only
where the subject is our own code: version parsing and rejection, a process
that dies at once or never becomes ready, one that ignores SIGTERM.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import sysconfig
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import nats
import pytest
import structlog
from nats.aio.client import Client
from nats.aio.msg import Msg
from structlog.testing import capture_logs

from smf_assurance.ops.local import natsserver
from smf_assurance.ops.local.logs import configure_logging
from smf_assurance.ops.local.natsserver import (
    BINARY_ENV,
    MIN_VERSION,
    EmbeddedNatsServer,
    NatsServerError,
    NatsVersion,
    PortReservation,
    parse_version,
    reserve_port,
    resolve_binary,
)

linux_only = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="parent-death signal and /proc are Linux-only"
)

# --- helpers -----------------------------------------------------------------


def real_binary() -> Path:
    return Path(sysconfig.get_path("scripts")) / "nats-server"


def write_executable(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(0o755)
    return path


def fake_nats(tmp_path: Path, *, version: str = "2.15.1", run: str = "exit 0") -> Path:
    """A shell script that answers ``--version`` and otherwise runs ``run``."""
    script = f"""\
#!/bin/sh
if [ "$1" = "--version" ]; then echo "nats-server: v{version}"; exit 0; fi
{run}
"""
    return write_executable(tmp_path / "fake-nats-server", script)


def fake_listener(tmp_path: Path, greeting: bytes | None) -> Path:
    """A Python stand-in that binds the port, writes its ports file like nats-server,
    sends ``greeting`` to every client and ignores SIGTERM; ``None`` holds clients silent."""
    script = f"""\
#!{sys.executable}
import os, signal, socket, sys
args = sys.argv
if args[1:] == ["--version"]:
    print("nats-server: v2.15.1")
    sys.exit(0)
signal.signal(signal.SIGTERM, signal.SIG_IGN)
listener = socket.create_server(("127.0.0.1", int(args[args.index("-p") + 1])))
ports_dir = args[args.index("--ports_file_dir") + 1]
name = os.path.basename(args[0]) + "_" + str(os.getpid()) + ".ports"
with open(os.path.join(ports_dir, name), "w") as ports:
    ports.write("{{}}")
greeting = {greeting!r}
held = []
while True:
    conn, _ = listener.accept()
    if greeting is None:
        held.append(conn)
        continue
    conn.sendall(greeting)
    conn.close()
"""
    return write_executable(tmp_path / "fake-listener", script)


def gone(pid: int) -> bool:
    """No such process, or a zombie nobody reaped (PID 1 here may not reap)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] in ("Z", "X")


def wait_gone(pid: int, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if gone(pid):
            return True
        time.sleep(0.05)
    return gone(pid)


def read_info(port: int) -> dict[str, object]:
    with socket.create_connection(("127.0.0.1", port), timeout=2) as conn:
        line = conn.makefile("rb").readline()
    assert line.startswith(b"INFO ")
    info: dict[str, object] = json.loads(line[5:])
    return info


async def stream_messages(url: str, stream: str) -> int:
    client = await nats.connect(url, connect_timeout=2, allow_reconnect=False)
    try:
        info = await client.jetstream().stream_info(stream)
    finally:
        await client.close()
    assert info.state.messages is not None
    return info.state.messages


async def fill_stream(url: str, stream: str, count: int) -> None:
    client = await nats.connect(url, connect_timeout=2, allow_reconnect=False)
    try:
        js = client.jetstream()
        await js.add_stream(name=stream, subjects=[f"{stream.lower()}.>"])
        for n in range(count):
            await js.publish(f"{stream.lower()}.{n}", b"payload")
    finally:
        await client.close()


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    monkeypatch.delenv(BINARY_ENV, raising=False)
    return monkeypatch


# --- a real server -----------------------------------------------------------


def test_listens_on_loopback_with_jetstream_store_under_state_dir(
    nats_server: EmbeddedNatsServer, tmp_path: Path
) -> None:
    assert nats_server.url == f"nats://127.0.0.1:{nats_server.port}"
    assert nats_server.running
    assert nats_server.pid is not None
    assert nats_server.store_dir.is_relative_to(tmp_path)
    assert (nats_server.store_dir / "jetstream").is_dir()
    assert nats_server.version >= MIN_VERSION


async def test_request_reply_round_trip(nc: Client) -> None:
    async def echo(msg: Msg) -> None:
        await msg.respond(b"echo:" + msg.data)

    await nc.subscribe("smf.test.echo", cb=echo)
    reply = await nc.request("smf.test.echo", b"ping", timeout=2)
    assert reply.data == b"echo:ping"


async def test_jetstream_is_enabled(nc: Client) -> None:
    js = nc.jetstream()
    await js.add_stream(name="ORDERS", subjects=["orders.>"])
    for n in range(3):
        ack = await js.publish(f"orders.{n}", b"order")
        assert ack.stream == "ORDERS"
    info = await js.stream_info("ORDERS")
    assert info.state.messages == 3


async def test_restart_keeps_jetstream_data_and_port(nats_server: EmbeddedNatsServer) -> None:
    await fill_stream(nats_server.url, "KEEP", 3)
    port, pid = nats_server.port, nats_server.pid
    assert pid is not None

    nats_server.restart()

    assert nats_server.port == port
    assert nats_server.pid != pid
    assert wait_gone(pid)
    assert "Server Exiting" in nats_server.log_path.read_text()
    assert "Server Exiting" not in nats_server.log_tail(), "tail covers the latest run only"
    assert await stream_messages(nats_server.url, "KEEP") == 3


# --- ports: reserved from choice to close ------------------------------


def plain_bind_refused(port: int) -> bool:
    """Whether an ordinary ``bind()`` (no ``SO_REUSEADDR``), as any other program
    would make, is refused the port."""
    with socket.socket() as rival:
        try:
            rival.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


async def test_the_port_stays_reserved_while_the_server_is_down(
    nats_server: EmbeddedNatsServer,
) -> None:
    await fill_stream(nats_server.url, "HELD", 1)
    port = nats_server.port
    nats_server.stop()
    assert plain_bind_refused(port)
    chosen = []
    for _ in range(200):
        with socket.socket() as other:
            other.bind(("127.0.0.1", 0))
            chosen.append(other.getsockname()[1])
    assert port not in chosen, "the kernel handed a reserved port to another bind(0)"

    nats_server.restart()
    assert (nats_server.port, nats_server.url) == (port, f"nats://127.0.0.1:{port}")
    assert await stream_messages(nats_server.url, "HELD") == 1

    nats_server.close()
    assert not plain_bind_refused(port), "close() releases the port"
    with pytest.raises(NatsServerError, match="was closed"):
        nats_server.start()


def test_a_reservation_is_released_once_and_says_so() -> None:
    reservation = reserve_port()
    assert reservation.held
    assert plain_bind_refused(reservation.port)
    assert repr(reservation) == f"PortReservation(127.0.0.1:{reservation.port}, held=True)"
    reservation.close()
    reservation.close()
    assert not reservation.held
    assert not plain_bind_refused(reservation.port)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        with pytest.raises(NatsServerError, match="cannot reserve a TCP port"):
            PortReservation(taken.getsockname()[1])


def own_netns_available() -> bool:
    try:
        done = subprocess.run(
            ["unshare", "-n", "true"], capture_output=True, timeout=10, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


@linux_only
@pytest.mark.skipif(not own_netns_available(), reason="needs `unshare -n` (root)")
def test_forced_port_collisions_cannot_fail_a_start(tmp_path: Path) -> None:
    """In a network namespace of its own whose port range is shrunk to twelve
    ports, the old bind-and-close picks repeat a port; the reservations made in
    that range start a three-node cluster and a server, restart both, and end on
    exactly the ports reserved (tests/support/port_collision_child.py)."""
    script = 'ip link set lo up && exec "$0" -m tests.support.port_collision_child "$1"'
    done = subprocess.run(
        ["unshare", "-n", "sh", "-c", script, sys.executable, str(tmp_path)],
        cwd=Path(__file__).resolve().parents[2],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(set(report["naive"])) < len(report["naive"]), "the repro forces no collision"
    assert len(set(report["reserved"])) == len(report["reserved"]) == 10
    assert report["ended"] == report["reserved"]


async def test_kill_then_restart(nats_server: EmbeddedNatsServer) -> None:
    await fill_stream(nats_server.url, "CRASH", 2)
    pid = nats_server.pid
    assert pid is not None

    nats_server.kill()

    assert not nats_server.running
    assert nats_server.pid is None
    assert gone(pid)
    assert "Server Exiting" not in nats_server.log_tail(), "SIGKILL must not shut down cleanly"
    nats_server.restart()
    assert nats_server.running
    assert await stream_messages(nats_server.url, "CRASH") == 2


def test_stop_is_graceful_and_idempotent(nats_server: EmbeddedNatsServer) -> None:
    pid = nats_server.pid
    assert pid is not None

    nats_server.stop()

    assert not nats_server.running
    assert gone(pid)
    assert "Server Exiting" in nats_server.log_tail()
    nats_server.stop()
    nats_server.kill()
    assert not list(nats_server.state_dir.glob("*.ports"))


def test_a_server_that_died_on_its_own_is_seen_and_reaped(
    nats_server: EmbeddedNatsServer,
) -> None:
    pid = nats_server.pid
    assert pid is not None
    os.kill(pid, signal.SIGKILL)

    deadline = time.monotonic() + 5
    while nats_server.running and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not nats_server.running
    nats_server.stop()
    assert nats_server.pid is None
    assert not list(nats_server.state_dir.glob("*.ports"))


def test_kill_leaves_no_ports_file(nats_server: EmbeddedNatsServer) -> None:
    nats_server.kill()
    assert not list(nats_server.state_dir.glob("*.ports"))


def test_log_tail_is_empty_before_the_first_start(tmp_path: Path) -> None:
    assert EmbeddedNatsServer(tmp_path / "s").log_tail() == ""


def test_second_start_is_refused(nats_server: EmbeddedNatsServer) -> None:
    with pytest.raises(NatsServerError, match="already running"):
        nats_server.start()


def test_server_name_and_config_file_are_applied(tmp_path: Path) -> None:
    config = tmp_path / "extra.conf"
    config.write_text("max_payload: 4096\n")

    with EmbeddedNatsServer(tmp_path / "s", server_name="smf-a", config_file=config) as server:
        info = read_info(server.port)

    assert info["server_name"] == "smf-a"
    assert info["max_payload"] == 4096
    assert info["jetstream"] is True


def test_bad_config_file_fails_with_log_tail(tmp_path: Path) -> None:
    config = tmp_path / "broken.conf"
    config.write_text("jetstream { max_mem: \n")
    server = EmbeddedNatsServer(tmp_path / "s", config_file=config)

    with pytest.raises(NatsServerError, match="exited with") as failure:
        server.start()

    assert "Parse error" in str(failure.value)
    assert not server.running


def test_another_server_on_the_port_does_not_pass_for_ours(
    nats_server: EmbeddedNatsServer, tmp_path: Path
) -> None:
    impostor_victim = EmbeddedNatsServer(tmp_path / "second", port=nats_server.port)

    with pytest.raises(NatsServerError, match="address already in use"):
        impostor_victim.start()

    assert nats_server.running
    assert not impostor_victim.running


# --- finding the binary ------------------------------------------------------


def test_env_var_selects_the_binary(clean_env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    link = tmp_path / "chosen-nats"
    link.symlink_to(real_binary())
    clean_env.setenv(BINARY_ENV, str(link))

    with EmbeddedNatsServer(tmp_path / "s") as server:
        assert server.binary == link
        assert server.running


def test_argument_beats_env_var(clean_env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    clean_env.setenv(BINARY_ENV, str(tmp_path / "absent"))
    assert resolve_binary(real_binary()) == real_binary()


def test_wheel_binary_is_the_default(clean_env: pytest.MonkeyPatch) -> None:
    assert resolve_binary() == real_binary()


def test_path_is_the_last_resort(clean_env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    on_path = tmp_path / "bin"
    on_path.mkdir()
    (on_path / "nats-server").symlink_to(real_binary())
    clean_env.setattr(sysconfig, "get_path", lambda _name: str(tmp_path / "no-scripts"))
    clean_env.setenv("PATH", str(on_path))

    assert resolve_binary() == on_path / "nats-server"


def test_missing_binary_is_one_clear_error(clean_env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    clean_env.setattr(sysconfig, "get_path", lambda _name: str(tmp_path))
    clean_env.setenv("PATH", str(tmp_path))

    with pytest.raises(NatsServerError, match=BINARY_ENV) as failure:
        EmbeddedNatsServer(tmp_path / "s")

    assert "\n" not in str(failure.value)


@pytest.mark.parametrize("source", ["argument", "env"])
def test_named_binary_must_exist(
    clean_env: pytest.MonkeyPatch, tmp_path: Path, source: str
) -> None:
    missing = tmp_path / "absent"
    if source == "env":
        clean_env.setenv(BINARY_ENV, str(missing))

    with pytest.raises(NatsServerError, match="not an executable"):
        resolve_binary(missing if source == "argument" else None)


def test_named_binary_must_be_executable(tmp_path: Path) -> None:
    plain = tmp_path / "nats-server"
    plain.write_text("not a program")

    with pytest.raises(NatsServerError, match="not an executable"):
        resolve_binary(plain)


# --- version -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("output", "expected"),
    [
        ("nats-server: v2.15.1\n", NatsVersion(2, 15, 1)),
        ("nats-server: v2.11.0-RC.2\n", NatsVersion(2, 11, 0)),
        ("warning: something\nnats-server: v3.0.10\n", NatsVersion(3, 0, 10)),
    ],
)
def test_parse_version(output: str, expected: NatsVersion) -> None:
    assert parse_version(output) == expected


@pytest.mark.parametrize(
    "output", ["", "hello", "Python 3.11.2", "nats-server: 2.10.0", "nats-server: v2.10"]
)
def test_parse_version_rejects_other_output(output: str) -> None:
    with pytest.raises(NatsServerError, match="cannot parse"):
        parse_version(output)


def test_version_prints_as_dotted() -> None:
    assert str(MIN_VERSION) == "2.10.0"


def test_real_binary_version_is_exposed(nats_server: EmbeddedNatsServer) -> None:
    printed = subprocess.run(
        [str(nats_server.binary), "--version"], capture_output=True, text=True, check=True
    )
    assert nats_server.version == parse_version(printed.stdout)


def test_too_old_version_is_refused(tmp_path: Path) -> None:
    binary = fake_nats(tmp_path, version="2.9.25")
    with pytest.raises(NatsServerError, match=r"2\.9\.25 .* too old; 2\.10\.0 or newer"):
        EmbeddedNatsServer(tmp_path / "s", binary=binary)


def test_oldest_supported_version_is_accepted(tmp_path: Path) -> None:
    binary = fake_nats(tmp_path, version="2.10.0")
    assert EmbeddedNatsServer(tmp_path / "s", binary=binary).version == MIN_VERSION


def test_unparseable_version_is_refused(tmp_path: Path) -> None:
    binary = fake_nats(tmp_path, version="next")
    with pytest.raises(NatsServerError, match="cannot parse"):
        EmbeddedNatsServer(tmp_path / "s", binary=binary)


def test_failing_version_probe_is_refused(tmp_path: Path) -> None:
    binary = write_executable(tmp_path / "nats-server", "#!/bin/sh\necho nope >&2\nexit 3\n")
    with pytest.raises(NatsServerError, match="exited with 3: 'nope'"):
        EmbeddedNatsServer(tmp_path / "s", binary=binary)


def test_unrunnable_binary_is_refused(tmp_path: Path) -> None:
    binary = write_executable(tmp_path / "nats-server", "#!/nonexistent/interpreter\n")
    with pytest.raises(NatsServerError, match="cannot run"):
        EmbeddedNatsServer(tmp_path / "s", binary=binary)


# --- a start that fails leaves nothing behind --------------------------------


def test_binary_that_exits_at_once_reports_its_log(tmp_path: Path) -> None:
    binary = fake_nats(tmp_path, run='echo "fatal: store is corrupt" >&2\nexit 1')
    server = EmbeddedNatsServer(tmp_path / "s", binary=binary)

    with pytest.raises(NatsServerError, match="exited with 1") as failure:
        server.start()

    assert "fatal: store is corrupt" in str(failure.value)
    assert not server.running


def test_never_ready_times_out_and_is_killed(tmp_path: Path) -> None:
    binary = fake_nats(tmp_path, run="echo 'waiting forever'\nexec sleep 30")
    server = EmbeddedNatsServer(tmp_path / "s", binary=binary, ready_timeout=0.5)

    with capture_logs() as events, pytest.raises(NatsServerError, match="not ready") as failure:
        server.start()

    assert "waiting forever" in str(failure.value)
    killed = [e for e in events if e["event"] == "nats_server.killed"]
    assert len(killed) == 1
    assert wait_gone(killed[0]["pid"])


@pytest.mark.parametrize("greeting", [b"-ERR 'not nats'\r\n", b"INF", b"", None])
def test_a_listener_that_does_not_greet_like_nats_is_not_ready(
    tmp_path: Path, greeting: bytes | None
) -> None:
    binary = fake_listener(tmp_path, greeting)
    server = EmbeddedNatsServer(tmp_path / "s", binary=binary, ready_timeout=0.5)

    with pytest.raises(NatsServerError, match="not ready"):
        server.start()

    assert not server.running


def test_binary_removed_after_construction(tmp_path: Path) -> None:
    link = tmp_path / "nats-server"
    link.symlink_to(real_binary())
    server = EmbeddedNatsServer(tmp_path / "s", binary=link)
    link.unlink()

    with pytest.raises(NatsServerError, match="cannot start"):
        server.start()


def test_stop_kills_a_server_that_ignores_sigterm(tmp_path: Path) -> None:
    binary = fake_listener(tmp_path, b'INFO {"server_id":"fake"}\r\n')
    server = EmbeddedNatsServer(tmp_path / "s", binary=binary, stop_grace=0.3)
    server.start()
    pid = server.pid
    assert pid is not None

    with capture_logs() as events:
        server.stop()

    assert [e["event"] for e in events] == ["nats_server.kill_after_grace", "nats_server.stopped"]
    assert events[1]["returncode"] == -signal.SIGKILL
    assert gone(pid)


# --- never a stray process ---------------------------------------------------

CHILD = textwrap.dedent(
    """
    import sys, time
    from smf_assurance.ops.local.logs import configure_logging
    from smf_assurance.ops.local.natsserver import EmbeddedNatsServer
    configure_logging(json=True)
    server = EmbeddedNatsServer(sys.argv[1]).start()
    print(server.pid, flush=True)
    if sys.argv[2] == "hang":
        time.sleep(60)
    """
)


Spawn = Callable[[str], tuple[subprocess.Popen[str], int]]


@pytest.fixture
def spawn_child(tmp_path: Path) -> Iterator[Spawn]:
    """Run ``CHILD`` in a new interpreter; returns it and its server's PID.

    Whatever a failing test leaves behind is killed afterwards.
    """
    procs: list[subprocess.Popen[str]] = []
    server_pids: list[int] = []

    def spawn(mode: str) -> tuple[subprocess.Popen[str], int]:
        proc = subprocess.Popen(
            [sys.executable, "-c", CHILD, str(tmp_path / "child"), mode],
            stdout=subprocess.PIPE,
            text=True,
        )
        procs.append(proc)
        assert proc.stdout is not None
        pid = int(proc.stdout.readline())
        server_pids.append(pid)
        return proc, pid

    yield spawn
    for proc in procs:
        proc.kill()
        proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
    for pid in server_pids:
        if not gone(pid):
            os.kill(pid, signal.SIGKILL)


@linux_only
def test_server_dies_when_its_parent_is_sigkilled(spawn_child: Spawn) -> None:
    child, server_pid = spawn_child("hang")
    assert not gone(server_pid)

    child.send_signal(signal.SIGKILL)
    child.wait()

    assert wait_gone(server_pid), "nats-server outlived its SIGKILLed parent"


@linux_only
def test_atexit_stops_a_forgotten_server_gracefully(spawn_child: Spawn, tmp_path: Path) -> None:
    child, server_pid = spawn_child("return")

    assert child.wait(timeout=15) == 0
    assert wait_gone(server_pid)
    assert 'Trapped "terminated" signal' in (tmp_path / "child" / "nats-server.log").read_text()


def test_stop_all_hook_stops_running_servers(tmp_path: Path) -> None:
    first = EmbeddedNatsServer(tmp_path / "a").start()
    second = EmbeddedNatsServer(tmp_path / "b").start()

    natsserver._stop_all()

    assert not first.running
    assert not second.running


@linux_only
def test_start_off_the_main_thread_warns_and_dies_with_that_thread(tmp_path: Path) -> None:
    server = EmbeddedNatsServer(tmp_path / "s")
    with capture_logs() as events:
        worker = threading.Thread(target=server.start)
        worker.start()
        worker.join()
    pid = server.pid
    assert pid is not None

    assert "nats_server.start_off_main_thread" in [e["event"] for e in events]
    assert wait_gone(pid), "Linux sends the parent-death signal when the spawning thread exits"
    server.stop()


# --- logging -----------------------------------------------------------------


@pytest.fixture
def restore_structlog() -> Iterator[None]:
    saved = structlog.get_config()
    yield
    structlog.configure(**saved)


@pytest.mark.usefixtures("restore_structlog")
def test_json_logging_writes_one_object_per_line_to_stderr(
    capsys: pytest.CaptureFixture[str],
) -> None:
    configure_logging(json=True)
    logger = structlog.get_logger("smf.test")

    logger.debug("hidden")
    logger.info("nats_server.started", port=4222)

    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 1
    event = json.loads(lines[0])
    assert event["event"] == "nats_server.started"
    assert event["port"] == 4222
    assert event["level"] == "info"
    assert event["timestamp"].endswith("Z")


@pytest.mark.usefixtures("restore_structlog")
def test_console_logging_is_readable_and_honours_level(
    capsys: pytest.CaptureFixture[str],
) -> None:
    configure_logging(json=False, level="debug")

    structlog.get_logger("smf.test").debug("shown", stage="normalize")

    err = capsys.readouterr().err
    assert "shown" in err
    assert "stage=normalize" in err
    assert not err.lstrip().startswith("{")


def test_unknown_log_level_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown log level"):
        configure_logging(json=True, level="chatty")
