"""The fixtures, builders and constants of tests/bus/test_shadow_release.py
that other test modules use too: here, so that no test module imports another."""

from __future__ import annotations

import json
import shutil
import sqlite3
from collections.abc import AsyncIterator, Callable
from contextlib import closing
from pathlib import Path
from typing import Any, Final

import pytest
from nats.aio.client import Client

from smf_assurance.adapters.client import ProposalClient
from smf_assurance.governance.projections import SCENARIO_CORPUS, package_path
from smf_assurance.ops.demo.script import SCENARIOS, actor
from smf_assurance.ops.local.natsserver import EmbeddedNatsServer
from smf_assurance.ops.local.stack import gate_config
from smf_assurance.ops.local.state import ADAPTER_ID, RUNTIME_ID, StateDir
from smf_assurance.pipeline.assembly import RunningGate, start_gate
from smf_assurance.pipeline.stores.ledger_schema import (
    StoredEntry,
    select_entries_after,
    stored_entry,
)
from smf_assurance.subjects.messages import DataFacts, ProposedDestination
from smf_assurance.subjects.release import ReleaseBundle
from tests.support.release_distribution import (
    current_inbox,
    next_release,
)

__all__ = [
    "ASSOCIATE",
    "CLEAN",
    "INTERNAL",
    "OUTPUT",
    "OUTPUT_RULE",
    "RETENTION",
    "RETENTION_RULE",
    "GateFactory",
    "gates",
    "retention_deletion",
    "runtime",
    "scenario",
    "shadow_entries",
    "shadow_id",
    "tight_shadow",
]

RETENTION: Final = "customer.acme.retention-deletion"


RETENTION_RULE: Final = "urn:smf:rule:scenario:retention-deletion"


OUTPUT: Final = "customer.acme.output-internal"


OUTPUT_RULE: Final = "urn:smf:rule:scenario:output-internal-delivery"


ASSOCIATE: Final = actor("associate-ann", "associate")


CLEAN: Final = DataFacts(classification="internal", injection_taint="clear")


INTERNAL: Final = ProposedDestination(address="partner@firm.example", locality="internal")


RETAIN = next(a for a in SCENARIOS if a.expected_reason == "retention_schedule_deletion")


def tight_corpus(tmp: Path, name: str) -> Path:
    """The shipped corpus with the retention deletion held for a licensed attorney, the
    internal output delivery denied and the retention rule retitled; written where
    ``next_release`` looks."""
    corpus = tmp / f"corpus-{name}"
    shutil.copytree(package_path(SCENARIO_CORPUS), corpus)
    policies = json.loads((corpus / "policies.json").read_text())
    by_id = {p["policy_id"]: p for p in policies}
    by_id[RETENTION].update(
        effect="conditional",
        reason_code="retention_deletion_needs_attorney",
        requirements={"approval_count": 1, "required_roles": ["licensed_attorney"]},
    )
    by_id[OUTPUT].update(effect="deny", reason_code="internal_output_withheld")
    (corpus / "policies.json").write_text(json.dumps(policies))
    rules = json.loads((corpus / "rules.json").read_text())
    (retention,) = [r for r in rules if r["rule_id"] == RETENTION_RULE]
    retention["title"] += " (attorney review)"  # analysis words only: no decision changes
    (corpus / "rules.json").write_text(json.dumps(rules))
    return corpus


def tight_shadow(state: StateDir, tmp: Path, **options: Any) -> ReleaseBundle:
    """The next release after the state's active one, tightened (:func:`tight_corpus`)."""
    tight_corpus(tmp, "tight")
    return next_release(state, tmp, current_inbox(state), "tight", **options)


def runtime(nc: Client, state: StateDir) -> ProposalClient:
    return ProposalClient(
        nc, state.key("runtime"), RUNTIME_ID, "1.0", ADAPTER_ID, gate_keys=state.gate_keys()
    )


def retention_deletion(client: ProposalClient, document: str, at_ms: int | None = None) -> Any:
    return client.build(
        native_tool=RETAIN.native_tool,
        arguments={"document_id": document},
        actor=RETAIN.actor,
        facts=RETAIN.facts,
        issued_at_ms=at_ms,
    )


def scenario(client: ProposalClient, action: Any, at_ms: int | None = None) -> Any:
    return client.build(
        native_tool=action.native_tool,
        arguments=action.arguments,
        actor=action.actor,
        facts=action.facts,
        content=action.content,
        destination=action.destination,
        issued_at_ms=at_ms,
    )


def shadow_entries(state: StateDir) -> list[StoredEntry]:
    uri = state.ledger.resolve().as_uri() + "?mode=ro"
    with closing(sqlite3.connect(uri, uri=True)) as conn:
        rows = conn.execute(select_entries_after(conn), (0,)).fetchall()
    return [e for e in (stored_entry(row) for row in rows) if e.entry.kind == "shadow"]


GateFactory = Callable[..., Any]


@pytest.fixture
async def gates(nats_server: EmbeddedNatsServer) -> AsyncIterator[GateFactory]:
    started: list[RunningGate] = []

    async def start(state: StateDir, url: str | None = None, **options: Any) -> RunningGate:
        options.setdefault("co_located", True)
        options.setdefault("sweep_seconds", 3600.0)
        options.setdefault("release_tick_seconds", 0.2)
        running = await start_gate(gate_config(state, url or nats_server.url, **options))
        started.append(running)
        return running

    yield start
    for running in started:
        await running.close()


def shadow_id(gate: RunningGate) -> str | None:
    assert gate.shadows is not None
    running = gate.shadows.active
    return None if running is None else running.release.release_id
