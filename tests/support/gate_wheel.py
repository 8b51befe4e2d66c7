"""The gate's distributions as ``smf_tools.dist`` builds them, for the tests that
install them (tests/cli/test_cli.py, tests/tools/test_dist.py) through the session fixture
``gate_wheel`` in tests/conftest.py: one build and one install per session, only read
by the tests (each runs its own commands against the installed copy)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from smf_tools import dist
from tests.support.surface_matrix import ROOT


@dataclass(frozen=True)
class GateWheel:
    wheel: Path
    sdist: Path
    venv: Path
    """A clean venv with ``wheel`` installed (its dependencies from pip's usual source)."""


def git_copy(dest: Path) -> Path:
    """A copy of this checkout as git sees it, committed in a repository of its own (the
    packaging gate compares with git's file list)."""
    for name in dist.known_files(ROOT):
        source = ROOT / name
        if source.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / name)
    git = [
        "git",
        "-c",
        "user.name=t",
        "-c",
        "user.email=t@example.invalid",
        "-c",
        "commit.gpgsign=false",
    ]
    subprocess.run(["git", "init", "-q", str(dest)], check=True)
    subprocess.run([*git, "add", "-A"], cwd=dest, check=True)
    subprocess.run([*git, "commit", "-q", "-m", "copy"], cwd=dest, check=True)
    return dest


def clean_env() -> dict[str, str]:
    """No ``PYTHONPATH``, no virtualenv of ours: the target imports what it installed."""
    return {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "VIRTUAL_ENV"}}


def build_and_install(where: Path) -> GateWheel:
    """Build the gate's wheel and sdist from a git copy of this checkout and install the
    wheel into a new venv, all under ``where``."""
    project = git_copy(where / "project")
    wheel, sdist = (a.path for a in dist.build(project, where / "out", only=["gate"]))
    venv = where / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    done = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", str(wheel)],
        cwd=where,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return GateWheel(wheel, sdist, venv)
