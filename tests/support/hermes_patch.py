"""The fixtures, builders and constants of tests/runtimes/test_hermes_patch.py
that other test modules use too: here, so that no test module imports another."""

from __future__ import annotations

import subprocess
from pathlib import Path

from smf_assurance.ops.runtimes.hermes_env import ensure_hermes_env
from tests.support.hermes_conformance import PROJECT, netns_available

__all__ = ["run_probe"]


def run_probe(script: str, tmp_path: Path, stdin: str = "", timeout: float = 600) -> str:
    """Run ``tests/<script>`` in the pinned Hermes venv with this checkout's plugin on its
    path, no network where a namespace can be made; its stdout."""
    env = ensure_hermes_env(PROJECT)
    prefix = ["unshare", "-n"] if netns_available() else []
    done = subprocess.run(
        [*prefix, str(env.python), str(PROJECT / "tests" / "support" / script)],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": env.pythonpath, "HOME": str(tmp_path)},
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout
