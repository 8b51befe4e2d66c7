"""A connector process that dies after its side effect and before its ack.

Run by ``tests/test_connector_sdk.py`` (issue 3, "Faults: the connector is
killed after executing but before acking -> on restart the order is reported
``ambiguous``, not executed again"). Argument: one JSON object with ``url``,
``state_dir``, ``outbox``, ``connector_id``, ``durable``, ``ack_wait``,
``gate_public`` (hex) and ``connector_seed`` (hex). It files the order in the
outbox, then ``os._exit(137)``: no ack, no report, no cleanup, as a SIGKILL.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

import nats

from adapters.connector.sdk import ConnectorRunner, ExecutionOutcome, RunnerConfig
from adapters.connectors.court_efiling import CourtEFilingConnector
from subjects.keys import SigningKey, VerifyKey
from subjects.messages import ExecuteOrder

CRASH_EXIT_CODE = 137


class CrashAfterFiling(CourtEFilingConnector):
    async def execute(self, order: ExecuteOrder) -> ExecutionOutcome:
        await super().execute(order)
        os._exit(CRASH_EXIT_CODE)


async def main(config: dict[str, str]) -> None:
    nc = await nats.connect(config["url"], connect_timeout=2)
    gate = VerifyKey(bytes.fromhex(config["gate_public"]))
    runner = ConnectorRunner(
        nc,
        CrashAfterFiling(Path(config["outbox"])),
        connector_id=config["connector_id"],
        signing_key=SigningKey.from_seed(bytes.fromhex(config["connector_seed"])),
        gate_keys={gate.key_id: gate},
        state_dir=Path(config["state_dir"]),
        config=RunnerConfig(
            durable=config["durable"], ack_wait=float(config["ack_wait"]), fetch_timeout=0.2
        ),
    )
    await runner.run()


if __name__ == "__main__":
    asyncio.run(main(json.loads(sys.argv[1])))
