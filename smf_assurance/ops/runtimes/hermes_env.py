"""The pinned Hermes Agent in a virtual environment of its own, installed once and reused.

RUNTIMES.md, "Hermes Agent": ``hermes-agent==0.19.0`` installs in about 22 s
and 230 MB with exact pins of its own (openai, pydantic, httpx, ...) and ships
generic top-level modules (``agent``, ``tools``, ``utils``, ...), so it never
goes into the project's environment. It gets its own venv under a per-user
cache folder keyed by the pinned version and the plugin's dependency pins::

    ${XDG_CACHE_HOME:-~/.cache}/smf-assurance/hermes-agent-0.19.0-<pins>/

Invariants:

- The shared venv is never changed once complete. It holds Hermes and the
  plugin's dependencies (nats-py, nkeys, msgspec and PyNaCl at the versions of
  the calling environment; nkeys because nats-py signs the bus's nonce with
  it and does not install it by itself), and both are in its name.
- A second venv, asked for with ``surfaces=True``, also holds the packages
  the tests need to drive Hermes's own surfaces (:data:`SURFACE_PACKAGES`: the
  MCP SDK and the Telegram client, at the versions Hermes pins in its
  own extras); they are in its name too, so it is a folder of its own and the
  first one is never changed. The conformance modules keep the venv without
  them: with the MCP SDK installed the CLI's one-shot turn lives long enough
  for its background session-title request to go out (seen in the default
  display, docs/HERMES.md finding 10), which changes what those modules see.
  It is complete only when ``.complete`` exists; that is written last, so an
  interrupted install is detected and redone from scratch.
- Our code is never installed into it. The brief: "never let two checkouts
  share one mutable install": an editable install of one checkout into the
  shared venv would make every other checkout's Hermes run that checkout's
  plugin. Each checkout instead gets an overlay in its own ``.cache/``:
  a ``dist-info`` naming the ``hermes_agent.plugins`` entry point, read from
  that checkout's ``pyproject.toml``. :attr:`HermesEnv.pythonpath` puts the
  overlay and the checkout first on Hermes's ``sys.path``.
- One installer at a time: an exclusive ``flock`` on a lock file beside the
  folder serialises concurrent test processes; the overlay's files are
  written whole (a temporary file renamed over the old one).
- Only the ordinary pip client talks to the package registry.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Final

from smf_assurance.ops.runtimes.cache import cache_root, install_lock
from smf_assurance.subjects.clock import monotonic_s

HERMES_VERSION: Final = "0.19.0"
"""The pinned runtime; a conformance run covers this version only (ARCHITECTURE.md)."""
HERMES_REQUIREMENT: Final = f"hermes-agent=={HERMES_VERSION}"
PLUGIN_DEPENDENCIES: Final = ("nats-py", "nkeys", "msgspec", "PyNaCl")
"""What ``adapters/`` and ``subjects/`` import beyond the standard library (``nkeys``:
nats-py's ``nkeys_seed`` needs it, the ``[nkeys]`` extra of our own dependency)."""
SURFACE_PACKAGES: Final = ("mcp==1.26.0", "starlette==1.0.1", "python-telegram-bot==22.6")
"""What Hermes needs for the surfaces the tests drive (``surfaces=True``), pinned as
``hermes-agent`` 0.19.0 pins them in its own extras (``mcp``: its MCP client, and
the SDK the tests' MCP server is written with; ``messaging``: python-telegram-bot,
for its Telegram gateway platform against a local fake Bot API). Not our plugin's
dependencies: the adapter imports none of them."""
COMPLETE_MARKER: Final = ".complete"
INSTALL_TIMEOUT_S: Final = 900.0

Progress = Callable[[str], None]


class HermesEnvError(RuntimeError):
    """The Hermes environment could not be installed or is not what was pinned."""


@dataclass(frozen=True, slots=True)
class HermesEnv:
    root: Path
    overlay: Path
    """This checkout's ``dist-info`` folder (see the module docstring)."""
    project: Path
    cold_seconds: float | None
    """Seconds spent installing the shared venv now; ``None`` when it was reused."""

    @property
    def python(self) -> Path:
        return self.root / "bin" / "python"

    @property
    def hermes(self) -> Path:
        return self.root / "bin" / "hermes"

    @property
    def pythonpath(self) -> str:
        """``PYTHONPATH`` for every Hermes process: this checkout's plugin, then Hermes."""
        return os.pathsep.join((str(self.overlay), str(self.project)))


def _pins_key(requirements: list[str]) -> str:
    return hashlib.sha256("\n".join(requirements).encode()).hexdigest()[:10]


def default_env_dir(version: str = HERMES_VERSION, *, surfaces: bool = False) -> Path:
    key = _pins_key(_requirements(surfaces=surfaces))
    return cache_root() / f"hermes-agent-{version}-{key}"


def _stderr(line: str) -> None:
    sys.stderr.write(f"[hermes-env] {line}\n")
    sys.stderr.flush()


def _run(args: list[str], progress: Progress, what: str) -> None:
    started = monotonic_s()
    progress(f"{what}: {' '.join(args[:6])}{' ...' if len(args) > 6 else ''}")
    result = subprocess.run(
        args,
        capture_output=True,
        text=True,
        timeout=INSTALL_TIMEOUT_S,
        check=False,
        env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"},
    )
    if result.returncode != 0:
        tail = (result.stdout + result.stderr)[-4000:]
        raise HermesEnvError(f"{what} failed (exit {result.returncode}):\n{tail}")
    progress(f"{what}: done in {monotonic_s() - started:.1f}s")


def plugin_requirements() -> list[str]:
    """Our plugin's dependencies at the versions this environment runs (tested together)."""
    pins = []
    for name in PLUGIN_DEPENDENCIES:
        try:
            pins.append(f"{name}=={metadata.version(name)}")
        except metadata.PackageNotFoundError:
            pins.append(name)
    return pins


def _requirements(*, surfaces: bool) -> list[str]:
    """What goes into the venv beside Hermes; all of it is in the folder's name."""
    return [*plugin_requirements(), *(SURFACE_PACKAGES if surfaces else ())]


def installed_hermes_version(root: Path) -> str | None:
    """The ``hermes-agent`` version inside the venv, read from its metadata."""
    for dist in (root / "lib").glob("python*/site-packages/hermes_agent-*.dist-info"):
        for line in (dist / "METADATA").read_text(errors="replace").splitlines():
            if line.startswith("Version:"):
                return line.split(":", 1)[1].strip()
    return None


def _hermes_layer(root: Path, requirements: list[str], progress: Progress) -> float | None:
    marker = root / COMPLETE_MARKER
    if marker.exists() and installed_hermes_version(root) == HERMES_VERSION:
        progress(f"reusing {root} (hermes-agent {HERMES_VERSION})")
        return None
    started = monotonic_s()
    if root.exists():
        progress(f"{root} is incomplete; removing it")
        shutil.rmtree(root)
    progress(f"installing {HERMES_REQUIREMENT} into {root} (about 22 s and 230 MB, once)")
    _run([sys.executable, "-m", "venv", str(root)], progress, "create venv")
    python = str(root / "bin" / "python")
    _run(
        [python, "-m", "pip", "install", "--quiet", "--no-input", HERMES_REQUIREMENT],
        progress,
        "pip install hermes-agent",
    )
    _run(
        [python, "-m", "pip", "install", "--quiet", "--no-input", *requirements],
        progress,
        "pip install plugin dependencies"
        + (" and surface packages" if set(SURFACE_PACKAGES) <= set(requirements) else ""),
    )
    found = installed_hermes_version(root)
    if found != HERMES_VERSION:
        raise HermesEnvError(f"installed hermes-agent is {found!r}, not {HERMES_VERSION}")
    record = {"hermes_agent": HERMES_VERSION, "requirements": requirements, "at": time.time()}
    marker.write_text(json.dumps(record))
    return monotonic_s() - started


def _write_whole(path: Path, text: str) -> None:
    fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w") as handle:
        handle.write(text)
    os.replace(name, path)


def project_overlay(project: Path) -> Path:
    """Write this checkout's plugin ``dist-info`` and return the folder holding it.

    Only the entry point is needed: Hermes finds plugins through the
    ``hermes_agent.plugins`` group (``importlib.metadata``), and the code is
    imported from the checkout on ``PYTHONPATH``."""
    try:
        meta = tomllib.loads((project / "pyproject.toml").read_text())["project"]
        name, version = str(meta["name"]), str(meta["version"])
        plugins = meta["entry-points"]["hermes_agent.plugins"]
    except (OSError, tomllib.TOMLDecodeError, KeyError, TypeError) as exc:
        raise HermesEnvError(f"{project}/pyproject.toml names no Hermes plugin ({exc})") from exc
    overlay = project / ".cache" / f"hermes-overlay-{HERMES_VERSION}"
    info = overlay / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    for stale in overlay.glob("*.dist-info"):
        if stale != info:
            shutil.rmtree(stale, ignore_errors=True)
    _write_whole(info / "METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    points = "".join(f"{key} = {value}\n" for key, value in sorted(plugins.items()))
    _write_whole(info / "entry_points.txt", f"[hermes_agent.plugins]\n{points}")
    return overlay


def ensure_hermes_env(
    project: Path,
    *,
    root: Path | None = None,
    progress: Progress = _stderr,
    surfaces: bool = False,
) -> HermesEnv:
    """Install (or reuse) the pinned, shared Hermes venv, and this checkout's overlay;
    with ``surfaces`` the venv that also holds :data:`SURFACE_PACKAGES`."""
    requirements = _requirements(surfaces=surfaces)
    root = root or default_env_dir(surfaces=surfaces)
    with install_lock(root):
        cold = _hermes_layer(root, requirements, progress)
    project = project.resolve()
    overlay = project_overlay(project)
    return HermesEnv(root=root, overlay=overlay, project=project, cold_seconds=cold)


def main() -> None:
    """``python -m smf_assurance.ops.runtimes.hermes_env [project]``: install or reuse; print the
    venv path
    and the ``PYTHONPATH`` a Hermes process of this checkout needs."""
    project = Path(sys.argv[1]) if len(sys.argv) > 1 else Path.cwd()
    env = ensure_hermes_env(project)
    sys.stdout.write(f"{env.root}\nPYTHONPATH={env.pythonpath}\n")


if __name__ == "__main__":
    main()
