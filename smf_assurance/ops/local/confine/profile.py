"""A runtime's confinement profile: what its sandbox is made of.

``STATE/runtimes/<id>.confine.json``, written by ``smf-assurance runtime confine``
(the operator's word) and read by ``runtime run``. It names folders on this
machine only; the secrets are not in it: the launcher reads the runtime's key,
bus seed and gateway token from the state's ``keys/`` (where ``runtime add`` wrote
them), and its context file and the trust root from the state, and copies only
the public two into the sandbox.

Every path must be absolute and exist when the runtime starts (a profile naming a
missing folder is refused in one line: nothing runs); none may be the state
folder, lie inside it or contain it (:mod:`smf_assurance.ops.local.confine.view` checks).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal
from urllib.parse import urlsplit

import msgspec

from smf_assurance.ops.local.model_gateway import token_path
from smf_assurance.ops.local.state import StateDir
from smf_assurance.subjects.patterns import Token

PROFILE_SCHEMA: Final = "smf.confinement-profile/1"
PROFILE_SUFFIX: Final = ".confine.json"
RUNTIMES_DIR: Final = "runtimes"
Kind = Literal["hermes", "openclaw"]
MAX_PROFILE_BYTES: Final = 256 * 1024

FORBIDDEN_ENV: Final = frozenset(
    {"SMF_RUNTIME_KEY", "SMF_BUS_CREDENTIAL", "SMF_SIGNER_SOCKET", "SMF_NATS_URL"}
)
"""Environment names the profile may not set: the launcher sets the signer and the bus
itself, and a key or seed path has no place in a confined runtime."""


class ProfileError(ValueError):
    """A profile that cannot be used: one line, what to do."""


class ConfinementProfile(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """The operator's declaration of one runtime's sandbox."""

    schema: Literal["smf.confinement-profile/1"]
    runtime_id: Token
    kind: Kind
    home: str
    """The runtime's home (``HERMES_HOME``; OpenClaw's state folder): its configuration,
    plugins and scheduler folders read-only, its session data read-write."""
    workspace: str
    """Where the runtime works: read-write (but for documents under legal hold)."""
    nats_url: str
    """The bus, outside the sandbox; inside it the runtime reaches it on 127.0.0.1 at
    the same port."""
    gateway_url: str
    """The model gateway, outside; inside on 127.0.0.1 at the same port."""
    principal: Token | None = None
    """The registry principal whose key and seed the launcher holds (default: the id)."""
    runtime_dirs: tuple[str, ...] = ()
    """The runtime's software (its venv, Node, the adapter): read-only, not searched for
    secrets (they are checked not to hold the state folder)."""
    read_only: tuple[str, ...] = ()
    """More data folders or files, read-only and searched for secrets."""
    env: dict[str, str] = {}
    """More environment for the runtime (never a secret: searched like a file)."""
    holds_file: str | None = None
    """A JSON list of paths under legal hold (``{"paths": [...]}``), besides the
    ``legal_hold_paths`` of the runtime's context file; read at start and watched."""
    cwd: str | None = None
    """Where the command starts (default: the workspace)."""
    gate_holds: bool = True
    """Ask the gate's hold list (``smf.holds``) at start and every second: the runtime does
    not start, and stops, when the gate does not answer. False only where no gate runs
    (the confinement bench; a test of the sandbox alone): then only the files hold."""


def profile_path(state: StateDir, runtime_id: str) -> Path:
    return state.root / RUNTIMES_DIR / f"{runtime_id}{PROFILE_SUFFIX}"


def context_path(state: StateDir, runtime_id: str) -> Path:
    """The runtime's context file as ``runtime add`` wrote it."""
    return state.root / RUNTIMES_DIR / f"{runtime_id}.context.json"


def encode_profile(profile: ConfinementProfile) -> bytes:
    return msgspec.json.format(msgspec.json.encode(profile), indent=2) + b"\n"


def load_profile(state: StateDir, runtime_id: str) -> ConfinementProfile:
    path = profile_path(state, runtime_id)
    try:
        with path.open("rb") as handle:
            data = handle.read(MAX_PROFILE_BYTES + 1)
    except FileNotFoundError:
        raise ProfileError(
            f"no confinement profile for {runtime_id} ({path}): write one with "
            f"`smf-assurance runtime confine --id {runtime_id} --home DIR --workspace DIR`"
        ) from None
    except OSError as exc:
        raise ProfileError(f"cannot read the confinement profile {path}: {exc.strerror}") from exc
    if len(data) > MAX_PROFILE_BYTES:
        raise ProfileError(f"the confinement profile {path} is too large")
    try:
        profile = msgspec.json.decode(data, type=ConfinementProfile)
    except msgspec.DecodeError as exc:
        raise ProfileError(f"the confinement profile {path} is not valid: {exc}") from exc
    if profile.runtime_id != runtime_id:
        raise ProfileError(f"the confinement profile {path} names runtime {profile.runtime_id}")
    check_profile(profile)
    return profile


def loopback_port(url: str, what: str) -> int:
    """The port of a ``scheme://host:port`` URL; the sandbox listens on 127.0.0.1 at it."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        port = None
        parts = None
    if parts is None or port is None or not parts.hostname:
        raise ProfileError(f"{what} {url!r} names no host and port")
    return port


def check_profile(profile: ConfinementProfile) -> None:
    """Refuse, in one line, what cannot be confined as declared: a relative path, a
    folder that does not exist, an environment name the launcher owns."""
    for what, value in (("home", profile.home), ("workspace", profile.workspace)):
        _existing_dir(value, what)
    for value in profile.runtime_dirs:
        _existing(value, "runtime dir")
    for value in profile.read_only:
        _existing(value, "read-only path")
    if profile.cwd is not None:
        _existing_dir(profile.cwd, "cwd")
    if profile.holds_file is not None and not os.path.isabs(profile.holds_file):
        raise ProfileError(f"holds file {profile.holds_file!r} is not an absolute path")
    for name in profile.env:
        if name in FORBIDDEN_ENV or not name or "=" in name:
            raise ProfileError(f"the profile may not set the environment variable {name!r}")
    loopback_port(profile.nats_url, "nats_url")
    loopback_port(profile.gateway_url, "gateway_url")


def _existing(value: str, what: str) -> None:
    if not os.path.isabs(value):
        raise ProfileError(f"{what} {value!r} is not an absolute path")
    if not os.path.exists(value):
        raise ProfileError(f"{what} {value} does not exist; create it or fix the profile")


def _existing_dir(value: str, what: str) -> None:
    _existing(value, what)
    if not os.path.isdir(value):
        raise ProfileError(f"{what} {value} is not a folder")


@dataclass(frozen=True, slots=True)
class Secrets:
    """Where the runtime's secrets are: read by the launcher, never bound."""

    key: Path
    bus_seed: Path
    gateway_token: Path
    launcher: str
    """The principal of the runtime's launcher (its key and seed are beside the others)."""
    launcher_key: Path
    launcher_seed: Path


LAUNCHER_SUFFIX: Final = "-launcher"


def launcher_principal(runtime_id: str) -> str:
    """The registry principal of ``runtime_id``'s launcher (``runtime add`` makes it)."""
    return f"{runtime_id}{LAUNCHER_SUFFIX}"


def secrets_of(state: StateDir, profile: ConfinementProfile) -> Secrets:
    principal = profile.principal or profile.runtime_id
    launcher = launcher_principal(profile.runtime_id)
    return Secrets(
        key=state.key_path(principal),
        bus_seed=state.bus_credential_path(principal),
        gateway_token=token_path(state, profile.runtime_id),
        launcher=launcher,
        launcher_key=state.key_path(launcher),
        launcher_seed=state.bus_credential_path(launcher),
    )
