"""The test side of a runtime conformance harness (Hermes, OpenClaw).

Each harness runs in its own process (inside ``unshare -n`` where available)
and speaks one JSON line per command on stdin/stdout; this is that exchange.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any


class HarnessClient:
    """One JSON line out, one JSON line back; a dead harness or an error reply fails."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc = proc

    def send(self, command: dict[str, Any]) -> dict[str, Any]:
        assert self.proc.stdin is not None
        assert self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(command) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        assert line, "the harness died; see its stderr log"
        reply: dict[str, Any] = json.loads(line)
        assert "error" not in reply, reply
        return reply


@contextlib.contextmanager
def harness_process(
    script: Path, config: dict[str, Any], workdir: Path, *, isolated: bool
) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """The harness ``script`` started with ``config`` (inside ``unshare -n`` when
    ``isolated``), its stderr in ``workdir/harness.log``, and its first line (it is
    ready); stopped at the end: stdin closed, then killed if it has not exited in 30 s."""
    prefix = ["unshare", "-n"] if isolated else []
    with (workdir / "harness.log").open("w") as log:
        proc = subprocess.Popen(
            [*prefix, sys.executable, str(script), json.dumps(config)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
            cwd=script.parents[2],
        )
        assert proc.stdout is not None
        ready = proc.stdout.readline()
        assert ready, f"harness did not start; log: {workdir / 'harness.log'}"
        try:
            yield proc, ready
        finally:
            assert proc.stdin is not None
            proc.stdin.close()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
