"""The sandbox's filesystem: every mount, and the check that no secret is in it.

The view is built from an allow list, never by hiding parts of the host: the
sandbox starts from an empty root, and only what is listed here appears in it,
each at the same path as on the host (so the runtime's configuration names the
same paths confined or not). In bubblewrap's order, later mounts on top:

1. ``/proc`` of the sandbox's own PID namespace, a minimal ``/dev``, an empty
   ``/tmp``;
2. system folders read-only (``/usr``, the ``/lib*`` and ``/bin`` folders or
   their merged-``/usr`` links) and a short list of ``/etc`` entries (no
   ``shadow``, no ``ssh``, no ``ssl/private``);
3. the runtime's software read-only (``runtime_dirs``);
4. its home and its workspace read-write (the outer of the two first), then the
   home's configuration, plugins and scheduler folders on top read-only
   (:data:`HOME_READ_ONLY`, per runtime), more read-only data (``read_only``);
5. documents under legal hold read-only, and each folder between the
   workspace and a held document bound onto itself, so that the document can
   be neither written, truncated, deleted nor renamed, nor moved away with a
   folder above it (a mount point cannot be renamed or removed: ``EBUSY``);
6. the launcher's run folder at :data:`RUN_DIR` read-only: the three
   sockets, the relay program, the context file and the trust root (copies).

:func:`check_view` refuses the view, before anything starts, when a mount is
the state folder, lies inside it or contains it, contains any file of the
state's ``keys/``, or when any file of the searched mounts (home, workspace,
``read_only``) or any environment value holds a private key, an nkey seed or a
gateway token of any principal (by their formats, and the exact secrets of
the state's ``keys/``). The runtime's software and the system folders are
checked by path only, not searched (searching a Python environment takes
seconds at every start, and its sources quote key headers).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal

from smf_assurance.ops.local.confine.profile import ConfinementProfile, Kind, ProfileError
from smf_assurance.ops.local.state import StateDir

RUN_DIR: Final = "/run/smf"
"""Where the launcher's run folder appears inside the sandbox."""
SYSTEM_DIRS: Final = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
ETC_ENTRIES: Final = (
    "passwd",
    "group",
    "hosts",
    "hostname",
    "nsswitch.conf",
    "host.conf",
    "gai.conf",
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "localtime",
    "timezone",
    "alternatives",
    "ssl/certs",
    "ssl/openssl.cnf",
    "ca-certificates",
    "ca-certificates.conf",
    "mime.types",
    "protocols",
    "services",
    "os-release",
    "debian_version",
    "bash.bashrc",
    "profile",
    "inputrc",
    "terminfo",
    "magic",
    "magic.mime",
    "locale.alias",
)
"""What of ``/etc`` a runtime and its shell need; nothing that holds a host secret."""

HOME_READ_ONLY: Final[Mapping[Kind, tuple[tuple[str, Literal["file", "dir"], bool], ...]]] = {
    # (name in the home, its kind, created when missing): Hermes 0.19.0 keeps its
    # configuration in config.yaml and .env, plugins in plugins/, shell hooks in
    # hooks/, its scheduler's jobs in cron/ (``hermes cron create`` writes
    # cron/jobs.json), platform pairings in pairing/, and its persona in SOUL.md;
    # sessions (state.db), logs, memories and skills stay read-write.
    "hermes": (
        ("config.yaml", "file", False),
        (".env", "file", True),
        ("plugins", "dir", True),
        ("hooks", "dir", True),
        ("cron", "dir", True),
        ("pairing", "dir", True),
        ("SOUL.md", "file", False),
    ),
    # OpenClaw 2026.9.6: openclaw.json (configuration), extensions/ (installed plugins),
    # cron/ (automations' jobs); sessions, agents' transcripts and logs stay read-write.
    "openclaw": (
        ("openclaw.json", "file", False),
        ("extensions", "dir", True),
        ("cron", "dir", True),
    ),
}

MAX_SCAN_BYTES: Final = 512 * 1024 * 1024
"""The most the secret search reads before it refuses the view as too large to check."""
SECRET_PATTERNS: Final = re.compile(
    rb"smf\.ed25519\.private/1"
    rb"|(?<![A-Z2-7])S[UOA][A-Z2-7]{56}(?![A-Z2-7])"
    rb"|smfgw_[A-Za-z0-9_-]{40,}"
    rb"|-----BEGIN [A-Z ]*PRIVATE KEY-----\r?\n[A-Za-z0-9+/=]{16}"
)
"""Our private key files, NATS user/operator/account seeds, model-gateway tokens and PEM
private keys (a header followed by key material, not a source file quoting one)."""

MountKind = Literal["ro", "rw", "symlink", "proc", "dev", "tmpfs"]


@dataclass(frozen=True, slots=True)
class Mount:
    kind: MountKind
    dest: str
    source: str | None = None
    searched: bool = False
    """Searched for secrets (data); software and system folders are checked by path."""

    def args(self) -> list[str]:
        """This mount as bubblewrap options."""
        if self.kind == "proc":
            return ["--proc", self.dest]
        if self.kind == "dev":
            return ["--dev", self.dest]
        if self.kind == "tmpfs":
            return ["--tmpfs", self.dest]
        assert self.source is not None
        flag = {"ro": "--ro-bind", "rw": "--bind", "symlink": "--symlink"}[self.kind]
        return [flag, self.source, self.dest]


@dataclass(frozen=True, slots=True)
class View:
    mounts: tuple[Mount, ...]
    holds: tuple[str, ...]
    """The held documents and folders bound read-only."""

    def args(self) -> list[str]:
        return [arg for mount in self.mounts for arg in mount.args()]

    def describe(self) -> list[dict[str, str | None]]:
        return [{"kind": m.kind, "source": m.source, "dest": m.dest} for m in self.mounts]


def system_mounts() -> list[Mount]:
    mounts = [Mount("proc", "/proc"), Mount("dev", "/dev"), Mount("tmpfs", "/tmp")]  # noqa: S108 - the sandbox's own, empty
    for folder in SYSTEM_DIRS:
        if os.path.islink(folder):
            mounts.append(Mount("symlink", folder, os.readlink(folder)))
        elif os.path.isdir(folder):
            mounts.append(Mount("ro", folder, folder))
    for entry in ETC_ENTRIES:
        path = os.path.join("/etc", entry)
        if os.path.exists(path):
            mounts.append(Mount("ro", path, path))
    return mounts


def venv_bases(runtime_dirs: Sequence[str]) -> list[str]:
    """The installations the Python virtual environments among ``runtime_dirs`` run on
    (``pyvenv.cfg``'s ``home``, one level up), when not already shown: a venv's
    interpreter is a link into its base installation."""
    bases: list[str] = []
    for folder in runtime_dirs:
        config = os.path.join(folder, "pyvenv.cfg")
        if not os.path.isfile(config):
            continue
        with open(config, encoding="utf-8") as handle:
            for line in handle:
                name, sep, value = line.partition("=")
                if sep and name.strip() == "home":
                    base = os.path.dirname(os.path.realpath(value.strip()))
                    shown = [*runtime_dirs, *bases, *SYSTEM_DIRS]
                    if not any(_inside(base, s) for s in shown):
                        bases.append(base)
    return bases


def prepare_home(profile: ConfinementProfile) -> list[Mount]:
    """The home's configuration read-only, for mounting on top of the home. A read-only
    folder or ``.env`` the runtime lacks is created first (empty), so the runtime cannot
    create it inside the sandbox for its next start to read."""
    home = profile.home
    mounts: list[Mount] = []
    for name, kind, create in HOME_READ_ONLY[profile.kind]:
        path = os.path.join(home, name)
        if not os.path.lexists(path):
            if not create:
                continue
            if kind == "dir":
                os.mkdir(path, 0o700)
            else:
                os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        if os.path.islink(path):
            raise ProfileError(f"{path} is a symbolic link; the launcher binds it only as a file")
        mounts.append(Mount("ro", path, path))
    return mounts


def hold_mounts(holds: Iterable[str], writable: Sequence[str]) -> tuple[list[Mount], list[str]]:
    """Read-only mounts for the held paths that exist inside a writable mount, and the
    folders between that mount and each held path bound onto themselves."""
    anchors: list[Mount] = []
    held: list[str] = []
    seen: set[str] = set()
    for raw in holds:
        path = os.path.realpath(raw)
        if not os.path.exists(path):
            continue
        root = next((w for w in writable if _inside(path, w)), None)
        if root is None:
            continue  # outside every writable mount: read-only or not in the view at all
        parent = os.path.dirname(path)
        chain: list[str] = []
        while parent != root and _inside(parent, root):
            chain.append(parent)
            parent = os.path.dirname(parent)
        for folder in reversed(chain):
            if folder not in seen:
                seen.add(folder)
                anchors.append(Mount("rw", folder, folder))
        if path not in held:
            held.append(path)
    return anchors + [Mount("ro", p, p) for p in held], held


def build_view(
    profile: ConfinementProfile,
    run_dir: str,
    holds: Iterable[str],
) -> View:
    mounts = system_mounts()
    software = [*profile.runtime_dirs, *venv_bases(profile.runtime_dirs)]
    mounts += [Mount("ro", d, d) for d in software]
    # the outer of home and workspace first: a later mount hides what is under it
    writable = sorted({profile.home, profile.workspace}, key=lambda p: p.count("/"))
    mounts += [Mount("rw", p, p, searched=True) for p in writable]
    mounts += prepare_home(profile)
    mounts += [Mount("ro", p, p, searched=True) for p in profile.read_only]
    held_mounts, held = hold_mounts(holds, [profile.workspace, profile.home])
    mounts += held_mounts
    mounts.append(Mount("ro", RUN_DIR, run_dir))
    return View(tuple(mounts), tuple(held))


def _inside(path: str, folder: str) -> bool:
    """``path`` is ``folder`` or below it (both normalised)."""
    folder = folder.rstrip("/") or "/"
    return path == folder or path.startswith(folder + "/") or folder == "/"


# --- the check ---------------------------------------------------------------------------


class SecretInView(ValueError):
    """The view holds a secret or the state folder: the runtime does not start."""


def known_secrets(state: StateDir) -> tuple[list[str], list[bytes]]:
    """Every file of the state's ``keys/`` and the secret bytes each holds (a key file's
    seed, a seed file, a token, the pseudonym key), to find copies elsewhere."""
    files: list[str] = []
    needles: list[bytes] = []
    if not state.keys.is_dir():
        return files, needles
    for entry in sorted(state.keys.iterdir()):
        if not entry.is_file():
            continue
        files.append(os.path.realpath(entry))
        data = entry.read_bytes()
        try:
            document = json.loads(data)
        except (ValueError, UnicodeDecodeError):
            document = None
        if isinstance(document, dict) and isinstance(document.get("secret_seed"), str):
            needles.append(document["secret_seed"].encode())
        elif 16 <= len(data.strip()) <= 4096:
            needles.append(data.strip())
    return files, needles


def check_view(
    view: View, state: StateDir, env: Mapping[str, str], max_bytes: int = MAX_SCAN_BYTES
) -> None:
    """Refuse the view (:class:`SecretInView`, one line) when it shows the state folder or
    a secret; the rule of docs/CONFINEMENT.md, "Nothing secret in view"."""
    state_root = os.path.realpath(state.root)
    key_files, needles = known_secrets(state)
    for mount in view.mounts:
        if mount.source is None or mount.kind == "symlink" or mount.dest == RUN_DIR:
            continue
        source = os.path.realpath(mount.source)
        if _inside(source, state_root) or _inside(state_root, source):
            raise SecretInView(
                f"{mount.source} would show the state folder {state.root} inside the sandbox"
            )
        for key_file in key_files:
            if _inside(key_file, source):
                raise SecretInView(f"{mount.source} holds the key file {key_file}")
    for name, value in env.items():
        if _holds_secret(value.encode(), needles):
            raise SecretInView(f"the environment variable {name} holds a secret")
    budget = [max_bytes]
    for mount in view.mounts:
        if not mount.searched or mount.source is None:
            continue
        for path in _files(mount.source):
            if _file_holds_secret(path, needles, budget):
                raise SecretInView(
                    f"{path} holds a private key, seed or token; move it out of the runtime's view"
                )


def _files(root: str) -> Iterator[str]:
    if os.path.isfile(root) and not os.path.islink(root):
        yield root
        return
    for folder, _dirs, files in os.walk(root):
        for name in files:
            yield os.path.join(folder, name)


def _file_holds_secret(path: str, needles: Sequence[bytes], budget: list[int]) -> bool:
    try:
        info = os.lstat(path)
    except OSError:
        return False
    if not stat.S_ISREG(info.st_mode):
        return False
    budget[0] -= info.st_size
    if budget[0] < 0:
        raise SecretInView(
            f"the runtime's view is larger than {MAX_SCAN_BYTES} bytes to search for "
            "secrets; narrow the workspace or read-only paths"
        )
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except OSError as exc:
        raise SecretInView(f"cannot read {path} to search it for secrets: {exc.strerror}") from exc
    return _holds_secret(data, needles)


def _holds_secret(data: bytes, needles: Sequence[bytes]) -> bool:
    return SECRET_PATTERNS.search(data) is not None or any(n in data for n in needles)


def digest(document: object) -> str:
    """``sha256:`` of the JSON of ``document`` (sorted keys, no spaces)."""
    raw = json.dumps(document, sort_keys=True, separators=(",", ":")).encode()
    return "sha256:" + hashlib.sha256(raw).hexdigest()


def read_holds(profile: ConfinementProfile, context: Path) -> tuple[str, ...]:
    """The paths under legal hold: the context file's ``legal_hold_paths`` (the list the
    adapter decides with) and the profile's holds file. A hold source that cannot be
    read refuses the start: running without a hold the operator declared is the one
    outcome that must not happen."""
    paths: list[str] = []
    for source, key in ((str(context), "legal_hold_paths"), (profile.holds_file, "paths")):
        if source is None:
            continue
        try:
            document = json.loads(Path(source).read_bytes())
        except OSError as exc:
            raise ProfileError(f"cannot read the hold list {source}: {exc.strerror}") from exc
        except ValueError as exc:
            raise ProfileError(f"the hold list {source} is not JSON") from exc
        listed = document.get(key) if isinstance(document, dict) else None
        if listed is None and source == str(context):
            continue
        if not isinstance(listed, list) or not all(isinstance(p, str) for p in listed):
            raise ProfileError(f"the hold list {source}: {key} is not a list of paths")
        for path in listed:
            if not os.path.isabs(path):
                raise ProfileError(f"the hold list {source} names a relative path {path!r}")
            paths.append(path)
    return tuple(paths)
