"""``runtime run``: the runtime's command under bubblewrap, its secrets in the launcher.

Order (each step refuses in one line and nothing runs unconfined, ever: there
is no fallback that starts the command without the sandbox):

1. the profile (:mod:`.profile`): every folder it names exists;
2. bubblewrap is there and executable;
3. the runtime's key, bus seed and gateway token are read (they stay in this
   process), its context file and the trust root copied into a private run folder
   with the relay program;
4. the view (:mod:`.view`) is built, legal holds included, and checked: no state
   folder, no secret of any principal;
5. the forwarders (:mod:`.sidecar`) listen on the run folder's sockets;
6. bubblewrap starts the relay and the command with: its own PID, network, IPC and
   UTS namespaces (loopback only), a new session (no terminal to inject into), no
   capabilities, no new privileges (bubblewrap sets ``PR_SET_NO_NEW_PRIVS``), its
   own ``/proc``, ``--die-with-parent`` (the sandbox dies with the launcher), an
   environment made here and nothing inherited;
7. while it runs, the hold list (the gate's, :mod:`.gate_holds`, and the files') is
   read again every second; a change stops the runtime (the sandbox's mounts cannot
   follow it): start it again to apply it. A gate that stops answering stops it too.

The exit status is the command's; a refusal is 1 with one line; holds that
changed or a gate that no longer tells them, 75; bubblewrap that refused to build the
sandbox, 1 with its reason.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import ssl
import sys
import tempfile
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final
from urllib.parse import urlsplit

import structlog

from smf_assurance.ops.local.bus_auth import BusCredentialError, public_user
from smf_assurance.ops.local.confine import relay
from smf_assurance.ops.local.confine.attest import Attester
from smf_assurance.ops.local.confine.gate_holds import (
    UNREACHABLE_AFTER_S,
    GateHolds,
    GateHoldsError,
    ask_before_start,
)
from smf_assurance.ops.local.confine.profile import (
    ConfinementProfile,
    ProfileError,
    Secrets,
    context_path,
    load_profile,
    loopback_port,
    secrets_of,
)
from smf_assurance.ops.local.confine.sidecar import GatewayForwarder, NatsForwarder, SignerServer
from smf_assurance.ops.local.confine.view import (
    RUN_DIR,
    View,
    build_view,
    check_view,
    digest,
    read_holds,
)
from smf_assurance.ops.local.defaults import BWRAP
from smf_assurance.ops.local.state import StateDir
from smf_assurance.subjects.bus_access import (
    BusCredential,
    CredentialFileError,
    bus_tls,
    read_credential,
)
from smf_assurance.subjects.keys import KeyFileError, SigningKey, load_private_key
from smf_assurance.subjects.signer import SIGNER_SOCKET_ENV

log = structlog.get_logger(__name__)

HOLDS_CHANGED_EXIT: Final = 75
HOLD_POLL_S: Final = 1.0
NAMESPACES: Final = ("pid", "net", "ipc", "uts", "cgroup")
PASSED_ENV: Final = ("TERM", "LANG", "LC_ALL", "NO_COLOR", "TZ")
"""Harmless settings of the operator's shell the runtime may see; nothing else is passed."""
STATUS_FD: Final = "{ready-fd}"
"""Replaced by the number of the ready pipe's write end when the sandbox starts: the relay
writes ``ready`` on it once the sandbox is built and it listens."""
SOCKETS: Final = {"nats": "nats.sock", "gateway": "gateway.sock", "signer": "signer.sock"}


class LaunchError(Exception):
    """The runtime was not started: one line, what to do."""


@dataclass(frozen=True, slots=True)
class Launcher:
    """The launcher's own key and bus credential: what it attests confinement with."""

    key: SigningKey
    credential: BusCredential


@dataclass(frozen=True, slots=True)
class Held:
    """The runtime's secrets, read once; never written anywhere, never logged."""

    key: SigningKey
    principal: str
    seed: bytes
    token: str
    launcher: Launcher | None = None
    """None: this state holds no launcher key for the runtime (added before launchers
    existed): it runs confined, and the gate holds it as not confined."""
    bus_tls: ssl.SSLContext | None = None
    """The bus's TLS (``SMF_NATS_CA`` of the launcher's environment): the NATS
    forwarder's connections to the bus, outside the sandbox, are TLS."""


def read_launcher(found: Secrets, runtime_id: str) -> Launcher | None:
    """The launcher's key and seed, None when neither exists; one that exists but cannot
    be used is refused (a damaged key is never taken for an absent one)."""
    if not found.launcher_key.exists() and not found.launcher_seed.exists():
        return None
    try:
        key, principal = load_private_key(found.launcher_key)
        credential = read_credential(found.launcher, found.launcher_seed)
    except KeyFileError as exc:
        raise LaunchError(f"runtime {runtime_id}'s launcher: {exc}") from exc
    except CredentialFileError as exc:
        raise LaunchError(f"runtime {runtime_id}'s launcher: {exc.detail}") from exc
    if principal != found.launcher:
        raise LaunchError(
            f"runtime {runtime_id}'s launcher key {found.launcher_key} is {principal}'s"
        )
    return Launcher(key, credential)


def read_secrets(found: Secrets, runtime_id: str) -> Held:
    try:
        key, principal = load_private_key(found.key)
    except KeyFileError as exc:
        raise LaunchError(f"runtime {runtime_id}: {exc}") from exc
    try:
        seed = found.bus_seed.read_bytes().strip()
        public_user(seed)
    except OSError as exc:
        raise LaunchError(
            f"runtime {runtime_id}: cannot read its bus seed {found.bus_seed}: {exc.strerror}"
        ) from exc
    except BusCredentialError as exc:
        raise LaunchError(f"runtime {runtime_id}: {found.bus_seed}: {exc}") from exc
    try:
        token = found.gateway_token.read_text().strip()
    except OSError as exc:
        raise LaunchError(
            f"runtime {runtime_id}: cannot read its gateway token {found.gateway_token}: "
            f"{exc.strerror}"
        ) from exc
    try:
        tls = bus_tls().get("tls")
    except CredentialFileError as exc:
        raise LaunchError(f"runtime {runtime_id}: {exc.detail}") from exc
    return Held(key, principal, seed, token, read_launcher(found, runtime_id), tls)


@dataclass(frozen=True, slots=True)
class Plan:
    """Everything the sandbox is, before it starts; its digest names the profile."""

    profile: ConfinementProfile
    view: View
    env: Mapping[str, str]
    forwards: Mapping[str, int]
    argv: tuple[str, ...]
    run_dir: str
    gate_holds: tuple[str, ...] | None = None
    """The gate's hold list as the start read it; None: the profile does not ask the gate
    (or, for a plan only, the gate could not be asked: :attr:`gate_unasked`)."""
    gate_unasked: str | None = None

    def document(self) -> dict[str, object]:
        """What the digest covers: mounts, namespaces, forwarders, the environment's names
        and the command (no secret is in any of them)."""
        return {
            "runtime_id": self.profile.runtime_id,
            "kind": self.profile.kind,
            # the run folder's host path changes per run; it appears at RUN_DIR always
            "mounts": [m for m in self.view.describe() if m["dest"] != RUN_DIR],
            "holds": list(self.view.holds),
            "namespaces": list(NAMESPACES),
            "forwarders": dict(self.forwards),
            "env": sorted(self.env),
            "flags": ["die-with-parent", "new-session", "cap-drop-all", "no-new-privs"],
        }

    @property
    def digest(self) -> str:
        return digest(self.document())


def inside_env(
    profile: ConfinementProfile, forwards: Mapping[str, int], outer: Mapping[str, str]
) -> dict[str, str]:
    env = {name: outer[name] for name in PASSED_ENV if name in outer}
    software = [os.path.join(d, "bin") for d in profile.runtime_dirs]
    env["PATH"] = ":".join(
        [p for p in software if os.path.isdir(p)] + ["/usr/local/bin", "/usr/bin", "/bin"]
    )
    env["HOME"] = profile.workspace
    if profile.kind == "hermes":
        env["HERMES_HOME"] = profile.home
    else:
        env["OPENCLAW_STATE_DIR"] = profile.home
        env["OPENCLAW_CONFIG_PATH"] = os.path.join(profile.home, "openclaw.json")
    env.update(profile.env)
    env.update(
        {
            "SMF_RUNTIME_ID": profile.runtime_id,
            "SMF_NATS_URL": f"nats://127.0.0.1:{forwards['nats']}",
            SIGNER_SOCKET_ENV: f"{RUN_DIR}/{SOCKETS['signer']}",
            "SMF_CONTEXT_FILE": f"{RUN_DIR}/context.json",
            "SMF_RELEASE_TRUST_ROOT": f"{RUN_DIR}/trust-root.json",
            "SMF_CONFINED": "1",
        }
    )
    return env


def system_python() -> str:
    """The Python the relay runs on: the system's, which the sandbox shows read-only."""
    for candidate in ("/usr/bin/python3", "/usr/local/bin/python3"):
        if os.access(candidate, os.X_OK):
            return candidate
    raise LaunchError("no system python3 in /usr/bin or /usr/local/bin for the sandbox's relay")


def bwrap_argv(
    bwrap: str,
    plan_view: View,
    env: Mapping[str, str],
    cwd: str,
    forwards: Mapping[str, int],
    command: Sequence[str],
) -> tuple[str, ...]:
    relay_args = [
        arg
        for name in ("nats", "gateway")
        for arg in ("--forward", f"{forwards[name]}={RUN_DIR}/{SOCKETS[name]}")
    ]
    return (
        bwrap,
        "--die-with-parent",
        "--new-session",
        "--unshare-pid",
        "--unshare-net",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-cgroup-try",
        "--hostname",
        "smf-sandbox",
        "--cap-drop",
        "ALL",
        "--clearenv",
        *[arg for name, value in sorted(env.items()) for arg in ("--setenv", name, value)],
        *plan_view.args(),
        "--chdir",
        cwd,
        system_python(),
        f"{RUN_DIR}/relay.py",
        "--ready-fd",
        STATUS_FD,
        *relay_args,
        "--",
        *command,
    )


def prepare(
    state: StateDir,
    runtime_id: str,
    command: Sequence[str],
    *,
    bwrap: str = BWRAP,
    outer_env: Mapping[str, str] | None = None,
    plan_only: bool = False,
) -> tuple[Plan, Held]:
    """Check everything and make the run folder; the sandbox is not started. On a
    refusal the run folder is removed. ``plan_only`` (``runtime run --plan``, which
    starts nothing): a gate that cannot be asked leaves the gate's holds out of the
    plan and says why, where a start would be refused."""
    if not command:
        raise LaunchError("no runtime command given: `runtime run --id ID -- COMMAND ...`")
    try:
        profile = load_profile(state, runtime_id)
    except ProfileError as exc:
        raise LaunchError(str(exc)) from exc
    if not (os.path.isfile(bwrap) and os.access(bwrap, os.X_OK)):
        raise LaunchError(
            f"bubblewrap is not installed at {bwrap}: install the Debian package bubblewrap "
            "(`make bwrap`); the runtime does not run unconfined"
        )
    held = read_secrets(secrets_of(state, profile), runtime_id)
    context = context_path(state, runtime_id)
    for needed in (context, state.trust_root):
        if not needed.is_file():
            raise LaunchError(f"runtime {runtime_id}: {needed} is missing")
    gate_holds = None
    unasked = None
    if profile.gate_holds:
        try:
            gate_holds = ask_before_start(profile.nats_url, held.principal, held.seed, runtime_id)
        except GateHoldsError as exc:
            if plan_only:
                unasked = str(exc)
            else:
                raise LaunchError(
                    f"runtime {runtime_id}: the gate's legal holds could not be read, so it does "
                    f"not start: {exc}"
                ) from exc
    try:
        holds = tuple(dict.fromkeys((*read_holds(profile, context), *(gate_holds or ()))))
        forwards = {
            "nats": loopback_port(profile.nats_url, "nats_url"),
            "gateway": loopback_port(profile.gateway_url, "gateway_url"),
        }
    except ProfileError as exc:
        raise LaunchError(str(exc)) from exc
    run_dir = tempfile.mkdtemp(prefix="smf-confine-")
    try:
        os.chmod(run_dir, 0o700)
        shutil.copyfile(context, os.path.join(run_dir, "context.json"))
        shutil.copyfile(state.trust_root, os.path.join(run_dir, "trust-root.json"))
        shutil.copyfile(relay.__file__, os.path.join(run_dir, "relay.py"))
        env = inside_env(profile, forwards, outer_env if outer_env is not None else os.environ)
        try:
            view = build_view(profile, run_dir, holds)
            check_view(view, state, env)
        except (ProfileError, ValueError, OSError) as exc:
            raise LaunchError(str(exc)) from exc
        argv = bwrap_argv(bwrap, view, env, profile.cwd or profile.workspace, forwards, command)
        return Plan(profile, view, env, forwards, argv, run_dir, gate_holds, unasked), held
    except BaseException:
        shutil.rmtree(run_dir, ignore_errors=True)
        raise


def hold_state(profile: ConfinementProfile, context: Path) -> str:
    """What the hold list is now (its paths), or why it cannot be read."""
    try:
        return json.dumps(read_holds(profile, context))
    except ProfileError as exc:
        return f"unreadable: {exc}"


@dataclass
class Outcome:
    exit_code: int
    reason: str | None = None
    """Why the launcher ended the run (``holds_changed``, ``bwrap_refused``, ``stopped``)."""
    started: bool = False
    counters: dict[str, object] = field(default_factory=dict)


async def run_plan(
    state: StateDir,
    plan: Plan,
    held: Held,
    *,
    stderr: int | None = None,
) -> Outcome:
    """Serve the forwarders, run bubblewrap, wait; always removes the run folder."""
    if plan.gate_unasked is not None:
        shutil.rmtree(plan.run_dir, ignore_errors=True)
        raise LaunchError(f"a plan without the gate's legal holds is not run: {plan.gate_unasked}")
    profile = plan.profile
    servers: list[asyncio.Server] = []
    nats_host = _host(profile.nats_url)
    gateway_host = _host(profile.gateway_url)
    nats = NatsForwarder(nats_host, plan.forwards["nats"], held.seed, held.bus_tls)
    gateway = GatewayForwarder(gateway_host, plan.forwards["gateway"], held.token)
    attester = None
    if held.launcher is None:
        # doctor shows the runtime "not confined"; `runtime add` provisions a launcher
        log.info(
            "confinement_not_attested", runtime_id=profile.runtime_id, reason="no_launcher_key"
        )
    else:
        attester = Attester(
            held.launcher.key,
            held.launcher.credential,
            profile.nats_url,
            profile.runtime_id,
            plan.digest,
        )
    signer = SignerServer(
        held.key,
        held.principal,
        profile.runtime_id,
        launched=None if attester is None else attester.launched,
    )
    context = context_path(state, profile.runtime_id)
    holds_now = hold_state(profile, context)
    gate_holds: GateHolds | None = None
    status_read, status_write = os.pipe()
    try:
        servers.append(await nats.serve(os.path.join(plan.run_dir, SOCKETS["nats"])))
        servers.append(await gateway.serve(os.path.join(plan.run_dir, SOCKETS["gateway"])))
        servers.append(await signer.serve(os.path.join(plan.run_dir, SOCKETS["signer"])))
        argv = [str(status_write) if arg == STATUS_FD else arg for arg in plan.argv]
        proc = await asyncio.create_subprocess_exec(
            *argv,
            env={"PATH": "/usr/bin:/bin"},
            pass_fds=(status_write,),
            stderr=asyncio.subprocess.PIPE,
        )
        os.close(status_write)
        status_write = -1
        supervisor = _Supervisor(
            proc,
            profile,
            context,
            holds_now,
            stderr,
            on_started=None if attester is None else attester.start,
        )
        if plan.gate_holds is not None:
            gate_holds = GateHolds(profile.nats_url, held.principal, held.seed, profile.runtime_id)
            supervisor.gate = (gate_holds, plan.gate_holds)
        outcome = await supervisor.run(status_read)
        if attester is not None:
            await attester.end()
        outcome.counters = {
            "nats_connections": nats.counters.connections,
            "gateway_connections": gateway.counters.connections,
            "signer_connections": signer.counters.connections,
            "signed": dict(signer.signed),
            "refused": {
                **nats.counters.refused,
                **gateway.counters.refused,
                **signer.counters.refused,
            },
            "confinement_attested": 0 if attester is None else attester.accepted,
            "confinement_refused": {} if attester is None else dict(attester.refused),
        }
        return outcome
    finally:
        for server in servers:
            server.close()
        if attester is not None:
            await attester.end()
        if gate_holds is not None:
            await gate_holds.close()
        if status_write >= 0:
            os.close(status_write)
        os.close(status_read)
        shutil.rmtree(plan.run_dir, ignore_errors=True)


def _host(url: str) -> str:
    host = urlsplit(url).hostname
    assert host is not None
    return host


class _Supervisor:
    """One sandbox's run: its status pipe, its stderr, the hold list, signals."""

    def __init__(
        self,
        proc: asyncio.subprocess.Process,
        profile: ConfinementProfile,
        context: Path,
        holds_then: str,
        stderr_fd: int | None,
        on_started: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self.on_started = on_started
        """Once the sandbox is built: the launcher starts attesting its confinement."""
        self.proc = proc
        self.profile = profile
        self.context = context
        self.holds_then = holds_then
        self.out = stderr_fd if stderr_fd is not None else sys.stderr.fileno()
        self.started = asyncio.Event()
        self.stop = asyncio.Event()
        self.early: list[bytes] = []
        self.reason: str | None = None
        self.gate: tuple[GateHolds, tuple[str, ...]] | None = None
        """The gate to ask again, and its list as the start read it."""

    async def read_status(self, status: asyncio.StreamReader) -> None:
        """The relay's ``ready`` once the sandbox is built and listening; none means
        bubblewrap (or the relay) refused before the command could start."""
        if await status.readline() == b"ready\n":
            self.started.set()
            if self.on_started is not None:
                await self.on_started()

    async def copy_stderr(self) -> None:
        """The sandbox's stderr to ours; bubblewrap's own words before the start are kept
        to name its refusal in one line."""
        assert self.proc.stderr is not None
        while chunk := await self.proc.stderr.read(65536):
            if not self.started.is_set():
                self.early.append(chunk)
                continue
            if self.early:
                os.write(self.out, b"".join(self.early))
                self.early.clear()
            os.write(self.out, chunk)

    async def watch_holds(self) -> None:
        loop = asyncio.get_running_loop()
        answered = loop.time()
        while True:
            await asyncio.sleep(HOLD_POLL_S)
            if hold_state(self.profile, self.context) != self.holds_then:
                self.end("holds_changed")
                return
            if self.gate is None:
                continue
            gate, then = self.gate
            try:
                now = await gate.ask()
            except GateHoldsError as exc:
                if loop.time() - answered >= UNREACHABLE_AFTER_S:
                    log.info("holds_unreachable", runtime_id=self.profile.runtime_id)
                    self.end("holds_unreachable:" + str(exc))
                    return
                continue
            answered = loop.time()
            if set(now) != set(then):
                self.end("holds_changed")
                return

    def end(self, reason: str) -> None:
        if self.reason is None:
            self.reason = reason
        self.stop.set()

    async def run(self, status_fd: int) -> Outcome:
        loop = asyncio.get_running_loop()
        status = asyncio.StreamReader()
        transport, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(status), os.fdopen(os.dup(status_fd), "rb")
        )
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, self.end, "stopped")
        readers = [
            asyncio.ensure_future(self.read_status(status)),
            asyncio.ensure_future(self.copy_stderr()),
        ]
        others = [
            asyncio.ensure_future(self.watch_holds()),
            asyncio.ensure_future(self.stop.wait()),
        ]
        waiter = asyncio.ensure_future(self.proc.wait())
        try:
            await asyncio.wait({waiter, others[1]}, return_when=asyncio.FIRST_COMPLETED)
            if not waiter.done():
                with contextlib.suppress(ProcessLookupError):
                    self.proc.send_signal(signal.SIGKILL)
            code = await waiter
            await asyncio.wait_for(asyncio.gather(*readers, return_exceptions=True), 5)
        finally:
            for signum in (signal.SIGTERM, signal.SIGINT):
                loop.remove_signal_handler(signum)
            for task in (*readers, *others):
                task.cancel()
            transport.close()
        return self.outcome(code)

    def outcome(self, code: int) -> Outcome:
        if not self.started.is_set():
            said = b"".join(self.early).decode(errors="replace").strip().splitlines()
            return Outcome(1, "bwrap_refused:" + (said[-1] if said else f"exit {code}"))
        if self.early:
            os.write(self.out, b"".join(self.early))
        if self.reason == "holds_changed" or (self.reason or "").startswith("holds_unreachable"):
            return Outcome(HOLDS_CHANGED_EXIT, self.reason, True)
        if self.reason is not None:
            return Outcome(128 + signal.SIGTERM, self.reason, True)
        return Outcome(code, None, True)


def launch(
    state: StateDir,
    runtime_id: str,
    command: Sequence[str],
    *,
    bwrap: str = BWRAP,
) -> Outcome:
    """Prepare and run; :class:`LaunchError` for a refusal before the start."""
    plan, held = prepare(state, runtime_id, command, bwrap=bwrap)
    log.debug("confine_start", runtime_id=runtime_id, profile_digest=plan.digest)
    return asyncio.run(run_plan(state, plan, held))
