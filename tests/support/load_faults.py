"""The fixtures, builders and constants of tests/bus/test_load_faults.py
that other test modules use too: here, so that no test module imports another."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sqlite3
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from smf_assurance.adapters.client import ProposalClient, unsettled
from smf_assurance.subjects.messages import Proposal, Verdict
from tests.support.bus_helpers import wait_for

__all__ = ["CONNECTOR_CHILD", "GATE_CHILD", "Process", "learned", "outcome_of"]

REPO: Final = Path(__file__).resolve().parents[2]


GATE_CHILD: Final = Path(__file__).parents[1] / "support" / "gate_child.py"


CONNECTOR_CHILD: Final = Path(__file__).parents[1] / "support" / "connector_child.py"


@dataclass
class Process:
    """A child that prints ``ready``; killed with SIGKILL, started again on demand."""

    script: Path
    config: dict[str, object]
    proc: asyncio.subprocess.Process | None = None

    async def start(self) -> None:
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable,
            str(self.script),
            json.dumps(self.config),
            cwd=REPO,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
        )
        assert self.proc.stdout is not None
        line = await asyncio.wait_for(self.proc.stdout.readline(), 60)
        assert line == b"ready\n", (self.script.name, line)

    async def kill(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            self.proc.kill()  # SIGKILL: no shutdown code runs
            await self.proc.wait()


async def learned(runtime: ProposalClient, proposal: Proposal, signed: bytes) -> Verdict:
    """The verdict the runtime learns from the gate's record, once it is known."""
    answer: list[Verdict] = []

    async def known() -> bool:
        answer[:] = [await runtime.recorded(proposal.proposal_id, signed)]
        return not unsettled(answer[0])

    await wait_for(known, timeout=60, interval=0.25)
    return answer[0]


def outcome_of(ledger: Path, decision_id: str) -> str | None:
    """The outcome the ledger recorded for the order of one decision, if any yet."""
    uri = ledger.resolve().as_uri() + "?mode=ro"
    with contextlib.closing(sqlite3.connect(uri, uri=True)) as conn:
        rows = conn.execute(
            "SELECT status FROM evidence_entries WHERE decision_id = ?"
            " AND status IN ('consumed', 'failed', 'execution_unknown') ORDER BY seq",
            (decision_id,),
        ).fetchall()
    assert len(rows) <= 1, (decision_id, rows)  # one outcome per order
    return None if not rows else str(rows[0][0])
