"""The fixtures, builders and constants of tests/runtimes/test_confinement.py
that other test modules use too: here, so that no test module imports another."""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import sqlite3
import time
import unicodedata
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import msgspec
import nats
import pytest
from nats.aio.client import Client

from smf_assurance.adapters.client import ProposalClient
from smf_assurance.governance.projections import SCENARIO_CORPUS, package_path
from smf_assurance.governance.releases import (
    build_release,
    latest_in_inbox,
    prior_of,
    publish_to_inbox,
)
from smf_assurance.ops.demo.script import actor
from smf_assurance.ops.local.defaults import OPERATOR
from smf_assurance.ops.local.natsserver import EmbeddedNatsServer
from smf_assurance.ops.local.stack import gate_config, start_embedded_server
from smf_assurance.ops.local.state import RELEASE_SIGNER, StateDir, provision_demo
from smf_assurance.ops.runtimes.provision import (
    HERMES_PRINCIPAL,
    HERMES_RUNTIME_ID,
    provision_launcher,
    provision_runtime,
)
from smf_assurance.pipeline.assembly import RunningGate, start_gate
from smf_assurance.subjects import dsse, names
from smf_assurance.subjects.attestation import AttestationAck, RuntimeAttestation
from smf_assurance.subjects.canonical import sha256_identity
from smf_assurance.subjects.messages import DataFacts, ProposedDestination, Verdict
from tests.support.clocks import FrozenClock

__all__ = ["Runtime", "buses", "clock", "confinement_state", "gate", "ledger_reasons", "server"]

OTHER_RUNTIME = "other-demo"


OTHER_PRINCIPAL = "other-runtime"


ALLOW_RULE = "urn:smf:rule:test:firm-opaque-operations"


ALLOW_STATEMENT = "The firm allows commands, code, patches and scheduled jobs in the workspace."


ALLOWED = "firm_opaque_operations_allowed"


ACTOR = actor("associate-ann", "associate")


FACTS = DataFacts(classification="internal", injection_taint="clear", legal_hold=False)


def firm_corpus(directory: Path) -> Path:
    """The shipped scenario corpus (which requires confinement for opaque operations)
    plus a customer policy allowing them, so only confinement can deny them."""
    shutil.copytree(package_path(SCENARIO_CORPUS), directory)
    assert (directory / "confinement.json").is_file()
    rules = json.loads((directory / "rules.json").read_text())
    template = next(r for r in rules if r["rule_id"].endswith("retention-deletion"))
    rules.append(
        {
            **template,
            "rule_id": ALLOW_RULE,
            "title": "Opaque operations in the workspace",
            "locator": f"tests/runtimes/test_confinement.py#{ALLOW_RULE}",
            "statement": ALLOW_STATEMENT,
            "source_hash": sha256_identity(unicodedata.normalize("NFC", ALLOW_STATEMENT).encode()),
            "when": {
                "any": [
                    {
                        "in": {
                            "fact": "capability",
                            "values": ["process.execute", "schedule.create", "unknown"],
                        }
                    },
                    {"eq": {"fact": "runtime.native_tool", "value": "patch"}},
                ]
            },
        }
    )
    (directory / "rules.json").write_text(json.dumps(rules))
    policies = json.loads((directory / "policies.json").read_text())
    policies.append(
        {
            "policy_id": "customer.acme.opaque",
            "layer": "customer",
            "scope": {"tenant_id": "tenant-acme"},
            "rule_id": ALLOW_RULE,
            "effect": "allow",
            "reason_code": ALLOWED,
        }
    )
    (directory / "policies.json").write_text(json.dumps(policies))
    return directory


@pytest.fixture
def confinement_state(tmp_path: Path) -> StateDir:
    confinement_state = StateDir(tmp_path / "state")
    provision_demo(confinement_state)
    provision_runtime(confinement_state, require_release=False)
    provision_launcher(confinement_state, HERMES_RUNTIME_ID)
    provision_runtime(confinement_state, OTHER_PRINCIPAL, OTHER_RUNTIME, require_release=False)
    provision_launcher(confinement_state, OTHER_RUNTIME)
    latest = latest_in_inbox(confinement_state.release_inbox)
    assert latest is not None
    bundle = build_release(
        firm_corpus(tmp_path / "firm"),
        [confinement_state.key(RELEASE_SIGNER)],
        confinement_state.registry.read_bytes(),
        now_ms=time.time_ns() // 1_000_000,
        prior=prior_of(latest),
    )
    publish_to_inbox(bundle, confinement_state.release_inbox)
    return confinement_state


@pytest.fixture
def server(confinement_state: StateDir) -> Iterator[EmbeddedNatsServer]:
    server = start_embedded_server(confinement_state)
    yield server
    server.close()


@pytest.fixture
def clock() -> FrozenClock:
    return FrozenClock()


@pytest.fixture
async def gate(
    confinement_state: StateDir, server: EmbeddedNatsServer, clock: FrozenClock
) -> AsyncIterator[RunningGate]:
    running = await start_gate(
        gate_config(confinement_state, server.url, co_located=True, clock=clock, sweep_seconds=3600)
    )
    yield running
    await asyncio.wait_for(running.close(), 15)


async def connect(state: StateDir, server: EmbeddedNatsServer, principal: str) -> Client:
    credential = state.existing_credential(principal)
    assert credential is not None, principal
    return await nats.connect(server.url, connect_timeout=2, **credential.connect_options())


@pytest.fixture
async def buses(
    confinement_state: StateDir, server: EmbeddedNatsServer, gate: RunningGate
) -> AsyncIterator[dict[str, Client]]:
    made = {p: await connect(confinement_state, server, p) for p in (HERMES_PRINCIPAL, OPERATOR)}
    yield made
    for client in made.values():
        with contextlib.suppress(Exception):
            await client.close()


class Runtime:
    """The runtime's side, as its adapter does it: attest a process, propose."""

    def __init__(self, state: StateDir, nc: Client, clock: FrozenClock) -> None:
        self.state = state
        self.nc = nc
        self.clock = clock
        self.key = state.key(HERMES_PRINCIPAL)
        self.client = ProposalClient(
            nc,
            self.key,
            HERMES_RUNTIME_ID,
            "0.19.0",
            "smf-hermes-adapter",
            gate_keys=state.gate_keys(),
        )

    async def attest(self, instance_id: str) -> AttestationAck:
        att = RuntimeAttestation(
            schema="smf.runtime-attestation/1",
            attestation_id="att-" + instance_id,
            runtime_id=HERMES_RUNTIME_ID,
            runtime_version="0.19.0",
            runtime_pin="0.19.0",
            adapter_id="smf-hermes-adapter",
            adapter_version="0.1.0",
            profile="block-only",
            hooks_present=(),
            hooks_missing=(),
            streaming=(),
            verified_release_id=None,
            problems=(),
            issued_at_ms=self.clock.now,
            instance_id=instance_id,
        )
        signed = dsse.sign_struct(names.PAYLOAD_ATTESTATION, att, [self.key])
        reply = await self.nc.request(names.ATTEST, dsse.encode_envelope(signed), timeout=3)
        ack = msgspec.json.decode(reply.data, type=AttestationAck)
        assert ack.accepted, ack
        return ack

    async def propose(self, tool: str, arguments: dict[str, Any]) -> Verdict:
        proposal = self.client.build(
            native_tool=tool,
            arguments=arguments,
            actor=ACTOR,
            facts=FACTS,
            content=str(arguments.get("command") or arguments.get("code") or ""),
            destination=ProposedDestination(address="cli:operator", locality="internal"),
            issued_at_ms=self.clock.now,
        )
        return await self.client.propose(proposal)


def ledger_reasons(state: StateDir, verdict: Verdict) -> tuple[str | None, tuple[str, ...]]:
    """The disposition and reason codes of the ledger entry the verdict names."""
    assert verdict.decision_id is not None
    uri = state.ledger.resolve().as_uri() + "?mode=ro"
    with contextlib.closing(sqlite3.connect(uri, uri=True)) as conn:
        rows = conn.execute(
            "SELECT disposition, reason_codes FROM evidence_entries "
            "WHERE kind = 'decision' AND decision_id IN (?, ?)",
            (verdict.decision_id, verdict.decision_id.removeprefix("sha256:")),
        ).fetchall()
    assert len(rows) == 1, rows
    return rows[0][0], tuple(json.loads(rows[0][1]))
