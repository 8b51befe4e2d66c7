"""Evidence minimization over a full demo run.

Proves: after the whole demo (held filing approved and executed, denials,
an allowed deletion, the Swarm report), neither the evidence ledger file nor
anything the gate, connectors or stores logged (at debug level) contains any
of the demo's raw values: arguments, content, recipients, matter, tenant or
actor names. Does not prove: minimization of values the demo does not use,
or of logs written by third-party libraries outside structlog.
"""

from __future__ import annotations

import io
import logging
import sqlite3
from pathlib import Path

import structlog

from smf_assurance.ops.cli.commands.demo import _demo
from smf_assurance.ops.demo.script import SCENARIOS
from smf_assurance.ops.local.state import StateDir


def raw_values() -> set[str]:
    values: set[str] = set()
    for action in SCENARIOS:
        values.update(str(v) for v in action.arguments.values())
        if action.content:
            values.add(action.content[:24])
        if action.destination.address:
            values.add(action.destination.address)
        values.update({action.actor.matter_id, action.actor.tenant_id, action.actor.actor_id})
    return {v for v in values if len(v) >= 5}


async def test_a_full_demo_leaves_no_raw_value_in_evidence_or_logs(tmp_path: Path) -> None:
    sink = io.StringIO()
    structlog.configure(
        processors=[structlog.processors.JSONRenderer()],
        wrapper_class=structlog.make_filtering_bound_logger(logging.DEBUG),
        logger_factory=structlog.PrintLoggerFactory(sink),
    )
    state = StateDir(tmp_path / "state")
    rows = await _demo(state, None)
    assert all(row.as_expected for row in rows)
    logs = sink.getvalue()
    assert "ledger.appended" in logs  # the sink really saw the gate's events

    ledger_bytes = state.ledger.read_bytes()
    wal = Path(str(state.ledger) + "-wal")
    if wal.exists():
        ledger_bytes += wal.read_bytes()
    with sqlite3.connect(state.ledger) as conn:
        rows_text = "\n".join(
            repr(row)
            for (table,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
            for row in conn.execute(f'SELECT * FROM "{table}"')
        )
    for value in sorted(raw_values()):
        assert value.encode() not in ledger_bytes, value
        assert value not in rows_text, value
        assert value not in logs, value
