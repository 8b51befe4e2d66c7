"""A gate in its own process, so a test can SIGKILL it mid-flight.

Run by ``tests/bus/test_bus_faults.py`` ("Faults: the gate restarts
mid-flight -> nothing is executed twice"). A crash is only honest in a
separate process: closing an in-process gate runs its shutdown code, a
SIGKILL runs none, so the claims, the ledger and the stream are left exactly
as the kill found them.

Argument: one JSON object with ``url``, ``state_dir`` and ``co_located``.
Prints ``ready`` on stdout once the gate serves ``smf.propose``, then runs
until killed. Logs go to stderr as JSON lines, so stdout carries only that
line. It also exits when its stdin closes: a test that dies without killing
it (its end of the pipe closes) leaves no stray gate behind.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import threading
from pathlib import Path

from smf_assurance.ops.local.logs import configure_logging
from smf_assurance.ops.local.stack import gate_config
from smf_assurance.ops.local.state import StateDir
from smf_assurance.pipeline.assembly import start_gate


def _exit_with_parent() -> None:
    sys.stdin.buffer.read()
    os._exit(0)


async def main(config: dict[str, object]) -> None:
    threading.Thread(target=_exit_with_parent, daemon=True).start()
    configure_logging(json=True, level="warning")
    await start_gate(
        gate_config(
            state=StateDir(Path(str(config["state_dir"]))),
            nats_url=str(config["url"]),
            co_located=bool(config["co_located"]),
        )
    )
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main(json.loads(sys.argv[1])))
