"""The example connectors in their own process, so a test can SIGKILL them mid-order.

Run by ``tests/bus/test_load_faults.py``. Argument: one JSON object with ``url`` and
``state_dir``. Runs the DMS and court e-filing connectors
(``smf_assurance.ops.local.stack.example_connectors``) on their durables, prints ``ready``
once both are bound, then runs until killed; it also exits when its stdin closes,
so a test that dies leaves no stray connector behind. A SIGKILL runs no shutdown
code: an order started and not finished is left ``started`` in the connector's
record, which its next delivery reports ``ambiguous`` and never runs again.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import threading
from pathlib import Path

import nats

from smf_assurance.adapters.connector.sdk import ConnectorRunner, RunnerConfig
from smf_assurance.ops.local.logs import configure_logging
from smf_assurance.ops.local.stack import example_connectors
from smf_assurance.ops.local.state import StateDir
from smf_assurance.subjects.registry import load_registry


def _exit_with_parent() -> None:
    sys.stdin.buffer.read()
    os._exit(0)


async def main(config: dict[str, object]) -> None:
    threading.Thread(target=_exit_with_parent, daemon=True).start()
    configure_logging(json=True, level="warning")
    state = StateDir(Path(str(config["state_dir"])))
    gate_keys = load_registry(state.registry).trusted("gate")
    runners = []
    for connector_id, connector in example_connectors(state).items():
        folder = state.connector_dir(connector_id)
        folder.mkdir(parents=True, exist_ok=True)
        nc = await nats.connect(
            str(config["url"]), max_reconnect_attempts=-1, reconnect_time_wait=0.1
        )
        runners.append(
            ConnectorRunner(
                nc,
                connector,
                connector_id=connector_id,
                signing_key=state.key(connector_id),
                gate_keys=gate_keys,
                state_dir=folder,
                config=RunnerConfig(
                    create_durable=True,
                    ack_wait=2.0,
                    fetch_timeout=0.2,
                    retry_delay=0.1,
                    stream_wait=20.0,
                ),
            )
        )
    tasks = [asyncio.create_task(runner.run()) for runner in runners]
    for runner in runners:
        await asyncio.wait_for(runner.ready.wait(), 20)
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    await asyncio.gather(*tasks)


if __name__ == "__main__":
    asyncio.run(main(json.loads(sys.argv[1])))
