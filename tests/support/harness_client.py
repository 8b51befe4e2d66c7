"""The test side of a runtime conformance harness (Hermes, OpenClaw).

Each harness runs in its own process (inside ``unshare -n`` where available)
and speaks one JSON line per command on stdin/stdout; this is that exchange.
"""

from __future__ import annotations

import json
import subprocess
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
