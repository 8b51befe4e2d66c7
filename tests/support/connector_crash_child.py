"""A connector process that dies after its side effect and before its ack.

Run by ``tests/bus/test_connector_sdk.py`` ("Faults: the connector is
killed after executing but before acking -> on restart the order is reported
``ambiguous``, not executed again") and ``tests/bus/test_direct_outcomes.py``
(a direct allow whose connector dies ends ``execution_unknown``).
Argument: one JSON object with ``url``, ``state_dir``, ``outbox``,
``connector_id``, ``durable``, ``ack_wait``, ``gate_public`` (hex) and
``connector_seed`` (hex), and optionally ``kind``: ``court-efiling`` (the
default: files the order in the outbox) or ``dms`` (deletes the document from
the store folder given as ``outbox``, leaving its tombstone). Then
``os._exit(137)``: no ack, no report, no cleanup, as a SIGKILL.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

import nats

from smf_assurance.adapters.connector.sdk import (
    Connector,
    ConnectorRunner,
    ExecutionOutcome,
    RunnerConfig,
)
from smf_assurance.adapters.connectors.court_efiling import CourtEFilingConnector
from smf_assurance.adapters.connectors.dms import DocumentStoreConnector
from smf_assurance.subjects.keys import SigningKey, VerifyKey
from smf_assurance.subjects.messages import ExecuteOrder

CRASH_EXIT_CODE = 137


class CrashAfterFiling(CourtEFilingConnector):
    async def execute(self, order: ExecuteOrder) -> ExecutionOutcome:
        await super().execute(order)
        os._exit(CRASH_EXIT_CODE)


class CrashAfterDeleting(DocumentStoreConnector):
    async def execute(self, order: ExecuteOrder) -> ExecutionOutcome:
        await super().execute(order)
        os._exit(CRASH_EXIT_CODE)


def crashing(kind: str, folder: Path) -> Connector:
    return CrashAfterDeleting(folder) if kind == "dms" else CrashAfterFiling(folder)


async def main(config: dict[str, str]) -> None:
    nc = await nats.connect(config["url"], connect_timeout=2)
    gate = VerifyKey(bytes.fromhex(config["gate_public"]))
    runner = ConnectorRunner(
        nc,
        crashing(config.get("kind", "court-efiling"), Path(config["outbox"])),
        connector_id=config["connector_id"],
        signing_key=SigningKey.from_seed(bytes.fromhex(config["connector_seed"])),
        gate_keys={gate.key_id: gate},
        state_dir=Path(config["state_dir"]),
        config=RunnerConfig(
            create_durable=True,
            durable=config["durable"],
            ack_wait=float(config["ack_wait"]),
            fetch_timeout=0.2,
        ),
    )
    await runner.run()


if __name__ == "__main__":
    asyncio.run(main(json.loads(sys.argv[1])))
