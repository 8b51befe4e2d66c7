"""The pinned Hermes Agent in a virtual environment of its own, installed once and reused.

RUNTIMES.md, "Hermes Agent": ``hermes-agent==0.19.0`` installs in about 22 s
and 230 MB with exact pins of its own (openai, pydantic, httpx, ...) and ships
generic top-level modules (``agent``, ``tools``, ``utils``, ...), so it never
goes into the project's environment. It gets its own venv under a per-user
cache folder keyed by the pinned version::

    ${XDG_CACHE_HOME:-~/.cache}/smf-assurance/hermes-agent-0.19.0/

Invariants:

- Two layers, two markers. The Hermes layer (the venv and the pinned
  ``hermes-agent``) is complete only when ``.complete`` exists; it is written
  last, so an interrupted install is detected and redone from scratch. The
  project layer (our distribution, editable, so the ``hermes_agent.plugins``
  entry point in ``pyproject.toml`` is found, plus nats-py, nkeys, msgspec
  and PyNaCl at the versions of the calling environment; nkeys because
  nats-py signs the bus's nonce with it, issue 15, and does not install it
  by itself) is keyed by the project
  folder and those versions in ``.smf-project``, because a fresh clone in
  another folder (CI) must not run a plugin from the old folder.
- One installer at a time: an exclusive ``flock`` on a lock file beside the
  folder serialises concurrent test processes.
- Only the ordinary pip client talks to the package registry.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Final

from ops.runtime_cache import cache_root, install_lock

HERMES_VERSION: Final = "0.19.0"
"""The pinned runtime; a conformance run covers this version only (ARCHITECTURE.md)."""
HERMES_REQUIREMENT: Final = f"hermes-agent=={HERMES_VERSION}"
PLUGIN_DEPENDENCIES: Final = ("nats-py", "nkeys", "msgspec", "PyNaCl")
"""What ``adapters/`` and ``subjects/`` import beyond the standard library (``nkeys``:
nats-py's ``nkeys_seed`` needs it, the ``[nkeys]`` extra of our own dependency)."""
COMPLETE_MARKER: Final = ".complete"
PROJECT_MARKER: Final = ".smf-project"
INSTALL_TIMEOUT_S: Final = 900.0

Progress = Callable[[str], None]


class HermesEnvError(RuntimeError):
    """The Hermes environment could not be installed or is not what was pinned."""


@dataclass(frozen=True, slots=True)
class HermesEnv:
    root: Path
    cold_seconds: float | None
    """Seconds spent installing the Hermes layer now; ``None`` when it was reused."""
    project_seconds: float | None
    """Seconds spent installing our distribution now; ``None`` when it was reused."""

    @property
    def python(self) -> Path:
        return self.root / "bin" / "python"

    @property
    def hermes(self) -> Path:
        return self.root / "bin" / "hermes"


def default_env_dir(version: str = HERMES_VERSION) -> Path:
    return cache_root() / f"hermes-agent-{version}"


def _stderr(line: str) -> None:
    sys.stderr.write(f"[hermes-env] {line}\n")
    sys.stderr.flush()


def _run(args: list[str], progress: Progress, what: str) -> None:
    started = time.monotonic()
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
    progress(f"{what}: done in {time.monotonic() - started:.1f}s")


def _plugin_requirements() -> list[str]:
    """Our plugin's dependencies at the versions this environment runs (tested together)."""
    pins = []
    for name in PLUGIN_DEPENDENCIES:
        try:
            pins.append(f"{name}=={metadata.version(name)}")
        except metadata.PackageNotFoundError:
            pins.append(name)
    return pins


def installed_hermes_version(root: Path) -> str | None:
    """The ``hermes-agent`` version inside the venv, read from its metadata."""
    for dist in (root / "lib").glob("python*/site-packages/hermes_agent-*.dist-info"):
        for line in (dist / "METADATA").read_text(errors="replace").splitlines():
            if line.startswith("Version:"):
                return line.split(":", 1)[1].strip()
    return None


def _hermes_layer(root: Path, progress: Progress) -> float | None:
    marker = root / COMPLETE_MARKER
    if marker.exists() and installed_hermes_version(root) == HERMES_VERSION:
        progress(f"reusing {root} (hermes-agent {HERMES_VERSION})")
        return None
    started = time.monotonic()
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
    found = installed_hermes_version(root)
    if found != HERMES_VERSION:
        raise HermesEnvError(f"installed hermes-agent is {found!r}, not {HERMES_VERSION}")
    marker.write_text(json.dumps({"hermes_agent": HERMES_VERSION, "at": time.time()}))
    return time.monotonic() - started


def _project_layer(root: Path, project: Path, progress: Progress) -> float | None:
    wanted = {"project": str(project.resolve()), "requirements": _plugin_requirements()}
    marker = root / PROJECT_MARKER
    try:
        if json.loads(marker.read_text()) == wanted:
            progress(f"reusing smf-assurance from {project} in the Hermes venv")
            return None
    except (OSError, ValueError):
        pass
    started = time.monotonic()
    marker.unlink(missing_ok=True)
    python = str(root / "bin" / "python")
    # ``wheel`` lets the venv's own setuptools build the editable install
    # without build isolation (no second download of setuptools).
    _run(
        [python, "-m", "pip", "install", "--quiet", "--no-input", "wheel", *wanted["requirements"]],
        progress,
        "pip install plugin dependencies",
    )
    # Editable, without dependencies: Hermes's own pins stay untouched, and the
    # entry point ``hermes_agent.plugins`` of our distribution becomes visible.
    _run(
        [
            *(python, "-m", "pip", "install", "--quiet", "--no-input", "--no-deps"),
            *("--no-build-isolation", "-e", str(project)),
        ],
        progress,
        "pip install -e smf-assurance",
    )
    marker.write_text(json.dumps(wanted))
    return time.monotonic() - started


def ensure_hermes_env(
    project: Path, *, root: Path | None = None, progress: Progress = _stderr
) -> HermesEnv:
    """Install (or reuse) the pinned Hermes venv with our plugin in it."""
    root = root or default_env_dir()
    with install_lock(root):
        cold = _hermes_layer(root, progress)
        project_seconds = _project_layer(root, project, progress)
    return HermesEnv(root=root, cold_seconds=cold, project_seconds=project_seconds)


def main() -> None:
    """``python -m ops.hermes_env [project]``: install or reuse, print the venv path."""
    project = Path(sys.argv[1]) if len(sys.argv) > 1 else Path.cwd()
    env = ensure_hermes_env(project)
    sys.stdout.write(f"{env.root}\n")


if __name__ == "__main__":
    main()
