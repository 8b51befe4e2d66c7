"""Properties of the gate on a real nats-server and real SQLite.

What each test proves, and how it is observed from outside the gate:

- Only an allow reaches ``smf.execute.>``, exactly once: a wildcard core
  subscriber AND the SMF_EXECUTE stream's message count, because either alone
  could miss something (the spy sees what was sent, the stream what was kept).
- An order carries its verdict's identities in its headers, is de-duplicated
  by ``Nats-Msg-Id`` when republished, and a different payload gets a
  different key; a replayed proposal is refused by the claim, not by luck.
- Input that is not a verified proposal gets a NATS service error reply with
  the reason code, changes neither the stream nor the evidence ledger, and
  the gate keeps serving.
- Normalization failures (unknown tool or adapter, missing argument, a value
  without canonical form) end in a denial or refusal, never an allow.
- Only the gate's own decisions reach ``smf.execute``: a client on the bus
  that calls the stage subjects directly, or answers them in the gate's
  place, gets nothing dispatched.
- 200 proposals in flight from 4 connections: each gets exactly one verdict
  (counted on the wire, not inferred from ``request`` returning once) and
  the stream holds exactly the allowed orders.

Key tests run with the stages called over the bus and co-located. Fixtures
and helpers here are reused by ``tests/bus/test_bus_faults.py``.
"""

from __future__ import annotations

import asyncio
import base64
import io
import json
import sqlite3
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import nats
import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js.client import JetStreamContext

from smf_assurance.adapters.client import ProposalClient
from smf_assurance.core.policy import NO_REQUIREMENTS
from smf_assurance.ops.demo.script import SCENARIOS
from smf_assurance.ops.local.natsserver import EmbeddedNatsServer
from smf_assurance.ops.local.stack import gate_config
from smf_assurance.ops.local.state import ADAPTER_ID, RUNTIME_ID, StateDir
from smf_assurance.pipeline.assembly import RunningGate, start_gate
from smf_assurance.pipeline.chain.contracts import DispatchRequest, EvaluateRequest
from smf_assurance.pipeline.service import STAGE_MAC_HEADER, StageRefusal
from smf_assurance.pipeline.stores.claims import ClaimRecord, ClaimState, ProposalClaims
from smf_assurance.pipeline.stores.ledger_audit import export_jsonl
from smf_assurance.pipeline.stores.sqlite_worker import StoreUnavailable
from smf_assurance.subjects import dsse, names
from smf_assurance.subjects.canonical import canonical_bytes
from smf_assurance.subjects.keys import VerifyKey, generate_signing_key
from smf_assurance.subjects.messages import Proposal, Verdict, order_id_for
from smf_assurance.subjects.signer import Signer
from tests.support.builders import Decided
from tests.support.bus_helpers import ExecuteSpy, caught_up, gate_reply, is_mark, wait_for
from tests.support.bus_properties import (
    MODES,
    GateStarter,
    deletion,
    execute_count,
    from_scenario,
    ledger_entries,
    open_order,
    runtime_client,
    stored_orders,
)

SERVICE_ERROR_CODE = "Nats-Service-Error-Code"
SERVICE_ERROR = "Nats-Service-Error"
DENY_SCENARIOS = [s for s in SCENARIOS if s.expected_outcome != "allow"]
ALLOW_SCENARIO = next(s for s in SCENARIOS if s.expected_outcome == "allow")
HOLD_SCENARIO = next(s for s in SCENARIOS if s.expected_outcome == "deny" and s.connector == "dms")


# --- fixtures and helpers (also used by test_bus_faults.py) --------------------


@pytest.fixture
async def running_gates(
    state: StateDir, nats_server: EmbeddedNatsServer
) -> AsyncIterator[GateStarter]:
    starter = GateStarter(state, nats_server.url)
    yield starter
    await starter.close()


def ledger_row(state: StateDir, entry_hash: str) -> dict[str, Any]:
    """One entry of the ledger as an auditor's export shows it."""
    out = io.StringIO()
    export_jsonl(state.ledger, out)
    rows = [json.loads(line) for line in out.getvalue().splitlines()]
    (row,) = [r for r in rows if r["entry_hash"] == entry_hash]
    assert isinstance(row, dict)
    return row


def sign_raw(payload: bytes, key: Signer, payload_type: str = names.PAYLOAD_PROPOSAL) -> bytes:
    """A DSSE envelope over exactly ``payload``, canonical or not."""
    return dsse.encode_envelope(dsse.sign(payload_type, payload, [key]))


# --- only allows reach smf.execute, exactly once ------------------------------


@MODES
async def test_denials_and_holds_never_reach_execute(
    co_located: bool, running_gates: GateStarter, nc: Client, state: StateDir
) -> None:
    gate: RunningGate = await running_gates(co_located)
    spy = await ExecuteSpy.attach(nc)
    runtime = runtime_client(nc, state)
    for action in DENY_SCENARIOS:
        verdict = await runtime.propose(from_scenario(runtime, action))
        assert verdict.outcome == action.expected_outcome, (action.name, verdict)
        assert action.expected_reason in verdict.reason_codes
        assert verdict.order_id is None
        assert await spy.settled() == [], action.name
        assert await execute_count(gate.js) == 0, action.name


@MODES
async def test_allow_reaches_execute_once_with_the_verdicts_identities(
    co_located: bool, running_gates: GateStarter, nc: Client, state: StateDir
) -> None:
    gate: RunningGate = await running_gates(co_located)
    spy = await ExecuteSpy.attach(nc)
    runtime = runtime_client(nc, state)
    verdict = await runtime.propose(from_scenario(runtime, ALLOW_SCENARIO))
    assert verdict.outcome == "allow", verdict
    assert verdict.order_id is not None
    assert verdict.decision_id
    assert verdict.operation_hash
    assert await execute_count(gate.js) == 1
    assert [m.subject for m in await spy.settled()] == [names.execute_subject("dms")]

    (stored,) = await stored_orders(gate.js)
    headers = stored.headers or {}
    assert headers[names.HEADER_MSG_ID] == verdict.order_id
    assert headers[names.HEADER_OPERATION_HASH] == verdict.operation_hash
    assert headers[names.HEADER_DECISION_ID] == verdict.decision_id
    assert headers[names.HEADER_RELEASE_ID] == verdict.release_id
    assert names.HEADER_APPROVAL_ID not in headers
    order = open_order(stored.data or b"", state.key("gate"))
    assert order.order_id == verdict.order_id
    # The one derivation of an order id, from the decision the verdict names: the id
    # published, the id the order book recorded before it was given.
    assert order.order_id == order_id_for(Decided.of(verdict))
    recorded = await gate.orders.get(order.order_id)
    assert recorded is not None
    assert (recorded.operation_hash, recorded.decision_id) == Decided.of(verdict)
    assert order.arguments == ALLOW_SCENARIO.arguments


@MODES
async def test_republished_order_is_deduplicated_and_keys_follow_the_payload(
    co_located: bool, running_gates: GateStarter, nc: Client, state: StateDir
) -> None:
    gate: RunningGate = await running_gates(co_located)
    runtime = runtime_client(nc, state)
    first = await runtime.propose(deletion(runtime, "doc-a"))
    assert first.outcome == "allow", first
    (stored,) = await stored_orders(gate.js)

    # The same order again (same Nats-Msg-Id): JetStream keeps one copy.
    ack = await gate.js.publish(stored.subject or "", stored.data or b"", headers=stored.headers)
    assert ack.duplicate
    assert await execute_count(gate.js) == 1

    # A different document is a different operation, so a different key.
    second = await runtime.propose(deletion(runtime, "doc-b"))
    assert second.outcome == "allow", second
    assert second.operation_hash != first.operation_hash
    assert second.order_id != first.order_id
    assert await execute_count(gate.js) == 2

    # The same action proposed again under a new proposal id is a new decision
    # and a new key; the connector's record, not this key, stops a repeat.
    again = await runtime.propose(deletion(runtime, "doc-a"))
    assert again.outcome == "allow"
    assert again.operation_hash == first.operation_hash
    assert again.order_id not in (first.order_id, second.order_id)
    assert await execute_count(gate.js) == 3


@MODES
async def test_replayed_proposal_is_refused_as_duplicate_and_adds_no_order(
    co_located: bool, running_gates: GateStarter, nc: Client, state: StateDir
) -> None:
    gate: RunningGate = await running_gates(co_located)
    runtime = runtime_client(nc, state)
    proposal = deletion(runtime, "doc-replayed")
    signed = runtime.sign(proposal)
    first = await runtime.send(proposal.proposal_id, signed)
    assert first.outcome == "allow", first
    for _ in range(3):
        replay = await runtime.send(proposal.proposal_id, signed)
        assert replay.outcome == "deny"
        assert "duplicate_proposal" in replay.reason_codes
    assert await execute_count(gate.js) == 1
    assert await gate.claims.state(proposal.proposal_id) == "published"


@dataclass
class SettleUnavailable:
    """The gate's real claim store, with only its settle step failing as in an outage
    (the KV store loses its quorum between the claim and the settle)."""

    real: ProposalClaims

    async def claim(self, proposal_id: str, operation_hash: str, decision_id: str, at: int) -> bool:
        return await self.real.claim(proposal_id, operation_hash, decision_id, at)

    async def settle(self, proposal_id: str, state: ClaimState) -> None:
        raise StoreUnavailable("claim store lost its quorum")

    async def state(self, proposal_id: str) -> ClaimState | None:
        return await self.real.state(proposal_id)

    async def get(self, proposal_id: str) -> ClaimRecord | None:
        return await self.real.get(proposal_id)

    async def prune(self, before_ms: int) -> int:
        return await self.real.prune(before_ms)

    async def close(self) -> None:
        await self.real.close()


async def test_an_order_already_published_is_answered_allow_when_the_settle_fails(
    running_gates: GateStarter, nc: Client, state: StateDir, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A store outage after the order is in the stream must not reply "deny": the
    runtime would be told no while the connector carries the order out.

    On one machine the settle is a write in the ledger's next group commit;
    here that write fails inside the transaction as a disk error
    would, and the entries committed beside it are unaffected."""
    gate: RunningGate = await running_gates(True)
    real = gate.gate.claims
    gate.gate.claims = SettleUnavailable(real)

    def failing_settle(proposal_id: str, claim_state: ClaimState) -> Callable[[Any], None]:
        def body(conn: Any) -> None:
            raise sqlite3.OperationalError("disk I/O error")

        return body

    monkeypatch.setattr(real, "settle_beside", failing_settle)  # the ledger file's claims
    runtime = runtime_client(nc, state)
    proposal = deletion(runtime, "doc-settle-outage")
    signed = runtime.sign(proposal)
    verdict = await runtime.send(proposal.proposal_id, signed)
    assert verdict.outcome == "allow", verdict
    await gate.gate.settled()
    gate_key = state.key("gate")
    stored = [open_order(raw.data or b"", gate_key) for raw in await stored_orders(gate.js)]
    assert [o.order_id for o in stored] == [verdict.order_id]
    assert await real.state(proposal.proposal_id) == "claimed"  # never settled, still claimed
    replay = await runtime.send(proposal.proposal_id, signed)
    assert "duplicate_proposal" in replay.reason_codes
    assert await execute_count(gate.js) == 1


# --- refused input changes nothing and the gate keeps serving ------------------


def _tampered(runtime: ProposalClient, state: StateDir) -> bytes:
    proposal = deletion(runtime, "doc-1207")
    envelope = dsse.decode_envelope(runtime.sign(proposal)).envelope
    forged = canonical_bytes(
        {**msgspec.to_builtins(proposal), "arguments": {"document_id": "doc-4711"}}
    )
    return dsse.encode_envelope(
        msgspec.structs.replace(envelope, payload=base64.b64encode(forged).decode())
    )


def _signed_by(principal: str) -> Callable[[ProposalClient, StateDir], bytes]:
    def build(runtime: ProposalClient, state: StateDir) -> bytes:
        proposal = deletion(runtime, "doc-1207")
        return sign_raw(canonical_bytes(msgspec.to_builtins(proposal)), state.key(principal))

    return build


def _unknown_key(runtime: ProposalClient, state: StateDir) -> bytes:
    proposal = deletion(runtime, "doc-1207")
    return sign_raw(canonical_bytes(msgspec.to_builtins(proposal)), generate_signing_key())


def _other_runtime_id(runtime: ProposalClient, state: StateDir) -> bytes:
    impostor = ProposalClient(
        runtime.nc, runtime.key, "another-runtime", "1.0", ADAPTER_ID, gate_keys=runtime.gate_keys
    )
    return impostor.sign(deletion(impostor, "doc-1207"))


def _unknown_field(runtime: ProposalClient, state: StateDir) -> bytes:
    value = {**msgspec.to_builtins(deletion(runtime, "doc-1207")), "priority": 1}
    return sign_raw(canonical_bytes(value), runtime.key)


def _float_argument(runtime: ProposalClient, state: StateDir) -> bytes:
    value = msgspec.to_builtins(deletion(runtime, "doc-1207"))
    value["arguments"]["fraction"] = 0.5
    return sign_raw(msgspec.json.encode(value), runtime.key)


def _bare_proposal(runtime: ProposalClient, state: StateDir) -> bytes:
    return msgspec.json.encode(deletion(runtime, "doc-1207"))


def _stale(runtime: ProposalClient, state: StateDir) -> bytes:
    proposal = msgspec.structs.replace(
        deletion(runtime, "doc-1207"), issued_at_ms=int(time.time() * 1000) - 3_600_000
    )
    return runtime.sign(proposal)


def _from_the_future(runtime: ProposalClient, state: StateDir) -> bytes:
    proposal = msgspec.structs.replace(
        deletion(runtime, "doc-1207"), issued_at_ms=int(time.time() * 1000) + 3_600_000
    )
    return runtime.sign(proposal)


def _wrong_payload_type(runtime: ProposalClient, state: StateDir) -> bytes:
    proposal = deletion(runtime, "doc-1207")
    return sign_raw(
        canonical_bytes(msgspec.to_builtins(proposal)), runtime.key, names.PAYLOAD_ORDER
    )


REFUSALS: dict[str, tuple[Callable[[ProposalClient, StateDir], bytes], str]] = {
    "malformed-json": (lambda r, s: b'{"payload": "', "malformed_proposal"),
    "not-json-at-all": (lambda r, s: b"\xff\xfe\x00 binary", "malformed_proposal"),
    "empty": (lambda r, s: b"", "malformed_proposal"),
    "unsigned-bare-proposal": (_bare_proposal, "malformed_proposal"),
    "tampered-payload": (_tampered, "bad_signature"),
    "key-not-in-registry": (_unknown_key, "unknown_signer"),
    "signed-by-connector": (_signed_by("dms"), "signer_role_mismatch"),
    "signed-by-approver": (_signed_by("attorney-alex"), "signer_role_mismatch"),
    "signed-by-gate": (_signed_by("gate"), "signer_role_mismatch"),
    "runtime-key-other-runtime-id": (_other_runtime_id, "runtime_identity_mismatch"),
    "unknown-field": (_unknown_field, "malformed_proposal"),
    "float-argument": (_float_argument, "malformed_proposal"),
    "wrong-payload-type": (_wrong_payload_type, "wrong_payload_type"),
    "stale": (_stale, "stale_proposal"),
    "from-the-future": (_from_the_future, "stale_proposal"),
}


async def assert_still_serving(runtime: ProposalClient, js: JetStreamContext) -> None:
    """A valid allow and a valid deny still get their verdicts."""
    before = await execute_count(js)
    allowed = await runtime.propose(deletion(runtime, f"doc-after-{time.monotonic_ns()}"))
    assert allowed.outcome == "allow", allowed
    held = await runtime.propose(deletion(runtime, "doc-held", hold=True))
    assert held.outcome == "deny"
    assert "legal_hold_blocks_deletion" in held.reason_codes
    assert await execute_count(js) == before + 1


@pytest.mark.parametrize("case", list(REFUSALS), ids=list(REFUSALS))
async def test_refused_input_gets_an_error_reply_and_changes_nothing(
    case: str, running_gates: GateStarter, nc: Client, state: StateDir
) -> None:
    """The edge check runs before any stage call, so one mode suffices here;
    ``test_refusals_in_co_located_mode`` repeats the sweep co-located."""
    gate: RunningGate = await running_gates(False)
    build, reason = REFUSALS[case]
    runtime = runtime_client(nc, state)
    spy = await ExecuteSpy.attach(nc)
    entries = ledger_entries(state)

    reply = await nc.request(names.PROPOSE, build(runtime, state), timeout=5)
    headers = reply.headers or {}
    assert headers.get(SERVICE_ERROR_CODE) == "400", (headers, reply.data[:200])
    assert headers.get(SERVICE_ERROR) == reason
    assert json.loads(reply.data)["reason_code"] == reason

    # The client library turns the same reply into a deny with that reason.
    verdict = await runtime.send("p-refused-0001", build(runtime, state))
    assert (verdict.outcome, verdict.reason_codes) == ("deny", (reason,))

    assert await spy.settled() == []
    assert await execute_count(gate.js) == 0
    assert ledger_entries(state) == entries
    await assert_still_serving(runtime, gate.js)


async def test_refusals_in_co_located_mode(
    running_gates: GateStarter, nc: Client, state: StateDir
) -> None:
    gate: RunningGate = await running_gates(True)
    runtime = runtime_client(nc, state)
    entries = ledger_entries(state)
    for case, (build, reason) in REFUSALS.items():
        reply = await nc.request(names.PROPOSE, build(runtime, state), timeout=5)
        assert (reply.headers or {}).get(SERVICE_ERROR) == reason, case
    assert await execute_count(gate.js) == 0
    assert ledger_entries(state) == entries
    await assert_still_serving(runtime, gate.js)


async def test_oversized_proposal_is_refused_by_the_client_library_on_a_default_server(
    running_gates: GateStarter, nc: Client, state: StateDir
) -> None:
    """nats-server's default max_payload (1 MiB) equals the gate's bound, so
    a bigger message never leaves the client; the adapter reports a denial."""
    gate: RunningGate = await running_gates(False)
    runtime = runtime_client(nc, state)
    proposal = deletion(runtime, "doc-1207")
    padded = runtime.sign(proposal) + b" " * (dsse.MAX_ENVELOPE_BYTES + 1)
    verdict = await runtime.send(proposal.proposal_id, padded)
    assert (verdict.outcome, verdict.reason_codes) == ("deny", ("gate_transport_error",))
    assert await execute_count(gate.js) == 0
    await assert_still_serving(runtime, gate.js)


async def test_oversized_proposal_is_refused_by_the_gate_before_parsing(
    tmp_path: Path, state: StateDir
) -> None:
    """On a server that lets 4 MiB through, the gate's own bound refuses it."""
    config = tmp_path / "big.conf"
    config.write_text("max_payload: 4194304\n")
    with EmbeddedNatsServer(tmp_path / "big", config_file=config) as server:
        gate = await start_gate(gate_config(state=state, nats_url=server.url))
        nc = await nats.connect(server.url)
        try:
            runtime = runtime_client(nc, state)
            entries = ledger_entries(state)
            proposal = deletion(runtime, "doc-1207")
            padded = runtime.sign(proposal) + b" " * (dsse.MAX_ENVELOPE_BYTES + 1)
            reply = await nc.request(names.PROPOSE, padded, timeout=5)
            assert (reply.headers or {}).get(SERVICE_ERROR) == "proposal_too_large"
            assert await execute_count(gate.js) == 0
            assert ledger_entries(state) == entries
            await assert_still_serving(runtime, gate.js)
        finally:
            await nc.drain()
            await gate.close()


# --- normalization failures deny ------------------------------------------------


@MODES
async def test_normalization_failures_are_denials_with_their_reason(
    co_located: bool, running_gates: GateStarter, nc: Client, state: StateDir
) -> None:
    gate: RunningGate = await running_gates(co_located)
    runtime = runtime_client(nc, state)
    spy = await ExecuteSpy.attach(nc)
    stranger = ProposalClient(
        nc, runtime.key, RUNTIME_ID, "1.0", "no-such-adapter", gate_keys=runtime.gate_keys
    )
    cases = [
        (runtime, "shell_exec", {"command": "rm -rf /"}, "unknown_tool"),
        (stranger, "dms_delete", {"document_id": "doc-1207"}, "unknown_adapter"),
        (runtime, "dms_delete", {"doc": "doc-1207"}, "missing_required_argument"),
    ]
    for client, tool, arguments, reason in cases:
        proposal = client.build(
            native_tool=tool,
            arguments=arguments,
            actor=ALLOW_SCENARIO.actor,
            facts=ALLOW_SCENARIO.facts,
        )
        before = ledger_entries(state)
        verdict = await client.propose(proposal)
        assert verdict.outcome == "deny", (tool, verdict)
        assert reason in verdict.reason_codes, verdict.reason_codes
        # refused before any policy ran, and still evidence: one entry, named in the
        # verdict, with the reason and nothing raw (ARCHITECTURE.md, "Evidence")
        assert ledger_entries(state) == before + 1
        (entry_hash,) = verdict.evidence
        entry = ledger_row(state, entry_hash)
        assert (entry["disposition"], reason in entry["reason_codes"]) == ("deny", True)
        exported = json.dumps(entry)
        assert not [raw for raw in (tool, *arguments.values()) if raw in exported], entry
    assert await spy.settled() == []
    assert await execute_count(gate.js) == 0


@MODES
async def test_arguments_without_canonical_form_are_refused_by_normalization(
    co_located: bool, running_gates: GateStarter, nc: Client, state: StateDir
) -> None:
    """Defence in depth behind the edge's canonical check: a float that did
    reach the normalize stage (through the gate's own stage client, over the
    bus or in-process) is refused ``arguments_not_canonical``."""
    gate: RunningGate = await running_gates(co_located)
    runtime = runtime_client(nc, state)
    value = msgspec.to_builtins(deletion(runtime, "doc-1207"))
    value["arguments"]["fraction"] = 0.5
    with pytest.raises(StageRefusal) as refused:
        await gate.gate.normalize.call(msgspec.convert(value, Proposal), 5.0)
    assert refused.value.reason_code == "arguments_not_canonical"
    assert await execute_count(gate.js) == 0


# --- only the gate's own decisions are dispatched -------------------------------


def _forged_allow(operation_hash: str, operation_id: str) -> dict[str, Any]:
    identity = "sha256:" + "ab" * 32
    return {
        "schema": "smf.decision/1",
        "decision_id": identity,
        "operation_id": operation_id,
        "operation_hash": operation_hash,
        "release_id": "forged-release",
        "release_sequence": 1,
        "projection_id": identity,
        "policy_fingerprint": identity,
        "disposition": "allow",
        "consequential": True,
        "requirements": msgspec.to_builtins(NO_REQUIREMENTS),
        "rule_ids": [],
        "rule_sources": [],
        "applied_policies": [],
        "reason_codes": ["forged"],
        "evaluated_at_ms": int(time.time() * 1000),
    }


@MODES
async def test_a_client_calling_the_dispatch_stage_directly_gets_no_order(
    co_located: bool, running_gates: GateStarter, nc: Client, state: StateDir
) -> None:
    """The stage subjects are on the bus in both modes. A client that sends
    the dispatch stage an "allow" it made up must not get a gate-signed order
    (for the document under legal hold, with no decision, claim or evidence)."""
    gate: RunningGate = await running_gates(co_located)
    spy = await ExecuteSpy.attach(nc)
    request = {
        "decision": _forged_allow("sha256:" + "cd" * 32, "p-forged-0001"),
        "connector_id": "dms",
        "native_tool": "dms_delete",
        "arguments": {"document_id": "doc-4711"},
        "content": "",
        "destination_address": "doc-4711",
    }
    msgspec.convert(request, DispatchRequest)  # well-formed: refused for who sent it
    for subject in (names.STAGE_DISPATCH, names.STAGE_NORMALIZE, names.STAGE_EVALUATE):
        reply = await nc.request(subject, json.dumps(request).encode(), timeout=5)
        headers = reply.headers or {}
        assert headers.get(SERVICE_ERROR_CODE) == "401", (subject, reply.data)
        assert headers.get(SERVICE_ERROR) == "stage_unauthenticated"
    assert await spy.settled() == []
    assert await execute_count(gate.js) == 0


@dataclass
class RogueEvaluator:
    """A client that answers ``smf.stage.evaluate`` before the real stage can.

    ``made-up``: replies with an "allow" it built for the request's operation.
    ``replayed``: first records a genuine "allow" reply (data and headers,
    seen on ``_INBOX.>``), then answers every request with that copy.
    """

    style: str
    nc: Client
    captured: Msg | None = None
    answered: int = 0

    async def on_reply(self, msg: Msg) -> None:
        try:
            decision = msgspec.json.decode(msg.data)
        except msgspec.DecodeError:
            return
        if isinstance(decision, dict) and decision.get("disposition") == "allow":
            self.captured = self.captured or msg

    async def on_request(self, msg: Msg) -> None:
        if self.style == "replayed":
            if self.captured is None:
                return
            await self.nc.publish(msg.reply, self.captured.data, headers=self.captured.headers)
        else:
            request = msgspec.json.decode(msg.data, type=EvaluateRequest)
            forged = _forged_allow(request.operation_hash, request.operation_id)
            await msg.respond(json.dumps(forged).encode())
        self.answered += 1


@pytest.mark.parametrize("style", ["made-up", "replayed"])
async def test_a_client_answering_the_evaluate_stage_cannot_turn_a_denial_into_an_allow(
    style: str, running_gates: GateStarter, nats_url: str, nc: Client, state: StateDir
) -> None:
    """With stages called over the bus, anyone may subscribe to
    ``smf.stage.evaluate`` and race the real stage. The gate must never act on
    a reply its own stage did not produce for that very request."""
    gate: RunningGate = await running_gates(False)
    runtime = runtime_client(nc, state)
    rogue_nc = await nats.connect(nats_url)
    rogue = RogueEvaluator(style, rogue_nc)
    try:
        await rogue_nc.subscribe("_INBOX.>", cb=rogue.on_reply)
        await rogue_nc.flush()
        genuine = await runtime.propose(deletion(runtime, "doc-1207"))
        assert genuine.outcome == "allow"
        assert rogue.captured is not None
        assert STAGE_MAC_HEADER in (rogue.captured.headers or {})
        await rogue_nc.subscribe(names.STAGE_EVALUATE, cb=rogue.on_request)
        await rogue_nc.flush()
        verdicts = [
            await runtime.propose(deletion(runtime, "doc-4711", hold=True)) for _ in range(10)
        ]
        assert rogue.answered == 10
        assert [v.outcome for v in verdicts] == ["deny"] * 10, [v.reason_codes for v in verdicts]
        # The rogue answered first every time here; a real answer may win a race.
        assert {r for v in verdicts for r in v.reason_codes} <= {
            "stage_reply_unauthenticated",
            "legal_hold_blocks_deletion",
        }
        assert await execute_count(gate.js) == 1
    finally:
        await rogue_nc.close()


# --- 200 in flight from several clients -----------------------------------------


@dataclass
class VerdictWire:
    """Counts Verdicts on the wire, per proposal id, from a separate connection.

    Replies to the runtimes' request inboxes are ordinary messages on
    ``_INBOX.>``; counting them proves "exactly one verdict" instead of
    inferring it from ``request`` returning once.
    """

    gate_keys: Mapping[str, VerifyKey]
    counts: Counter[str] = field(default_factory=Counter)
    marks: list[bytes] = field(default_factory=list)

    async def on_msg(self, msg: Msg) -> None:
        if is_mark(msg.data):
            self.marks.append(msg.data)
            return
        verdict = gate_reply(msg.data, self.gate_keys)
        if isinstance(verdict, Verdict):  # not a stage reply, a PubAck, ...
            self.counts[verdict.proposal_id] += 1


@MODES
async def test_two_hundred_in_flight_each_get_one_verdict_and_only_allows_are_stored(
    co_located: bool, running_gates: GateStarter, nats_url: str, nc: Client, state: StateDir
) -> None:
    gate: RunningGate = await running_gates(co_located)
    wire = VerdictWire(state.gate_keys())
    await nc.subscribe("_INBOX.>", cb=wire.on_msg)
    await nc.flush()
    connections = [await nats.connect(nats_url) for _ in range(4)]
    try:
        plans: list[tuple[ProposalClient, Proposal, bool]] = []
        for c, conn in enumerate(connections):
            runtime = runtime_client(conn, state, timeout=60)
            for i in range(50):
                allow = (c + i) % 2 == 0
                doc = f"doc-{c}-{i:02d}" if allow else "doc-4711"
                plans.append((runtime, deletion(runtime, doc, hold=not allow), allow))
        verdicts = await asyncio.gather(*(r.propose(p) for r, p, _ in plans))

        by_id = {
            p.proposal_id: (v, allow) for (_, p, allow), v in zip(plans, verdicts, strict=True)
        }
        assert len(by_id) == 200
        for verdict, allow in by_id.values():
            assert verdict.outcome == ("allow" if allow else "deny"), verdict
        await wait_for(lambda: sum(wire.counts.values()) >= 200, timeout=10)
        # A second verdict could only come from the gate: stop it (everything it
        # sent has reached the server), then a mark behind its last message.
        await running_gates.stop(gate)
        await caught_up(nc, "_INBOX.smf-test-mark", lambda: wire.marks)
        assert set(wire.counts) == set(by_id)
        assert set(wire.counts.values()) == {1}

        allowed = {v.order_id for v, allow in by_id.values() if allow}
        assert len(allowed) == 100
        assert None not in allowed
        stored = await stored_orders(nc.jetstream())
        stored_ids = [(m.headers or {})[names.HEADER_MSG_ID] for m in stored]
        assert len(stored_ids) == 100
        assert set(stored_ids) == allowed
    finally:
        for conn in connections:
            await conn.close()


# --- the benchmark runs and reports what PERFORMANCE.md quotes ---------------------


def test_bench_bus_smoke_prints_the_expected_keys(capsys: pytest.CaptureFixture[str]) -> None:
    """No timing assertions: only that the run completes and reports its series."""
    from smf_tools.cli import main  # noqa: PLC0415 - keep CLI imports out of the other tests

    assert main(["bench", "--bus", "--rounds", "20", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert set(report) >= {"machine", "bus"}
    assert "evaluator" not in report
    bus = report["bus"]
    assert set(bus) >= {"nats_server", "rounds", "in_flight", "latency", "throughput", "ratios"}
    labels = {row["label"] for row in bus["latency"]}
    assert labels >= {
        "echo",
        "propose allow (bus stages)",
        "propose deny (bus stages)",
        "propose allow (co-located)",
        "propose deny (co-located)",
        "propose allow (co-located, no call id, paired)",
        "propose allow (co-located, call context kept)",
        "propose allow (co-located, call context read)",
        "call context write (gateway)",
        "call context lookup (kept)",
        "call context lookup (read)",
        "ledger append",
        "verdict sign + open",
    }
    for row in bus["latency"]:
        assert row["count"] == 20
        assert 0 < row["p50_ns"] <= row["p95_ns"] <= row["p99_ns"]
    assert {row["label"] for row in bus["throughput"]} >= {
        "echo",
        "propose allow (bus stages)",
        "propose allow (co-located)",
    }
    assert all(row["requests_per_s"] > 0 for row in bus["throughput"])
    for row in bus["ratios"]:
        assert set(row) >= {"label", "p50_x1000", "p99_x1000", "throughput_x1000"}
    # Each co-located series has its floor target, computed from the steps above.
    p50 = {row["label"]: row["p50_ns"] for row in bus["latency"]}
    floor = {"deny": p50["echo"] + p50["ledger append"] + p50["verdict sign + open"]}
    floor["allow"] = floor["deny"] + p50["jetstream publish + ack"]
    targets = {(t["series"], t["measure"]): t for t in report["targets"]}
    for outcome in ("allow", "deny"):
        series = f"propose {outcome} (co-located)"
        target = targets[(series, "p50 / floor p50")]
        assert abs(target["measured_x1000"] - 1000 * p50[series] / floor[outcome]) <= 1
        assert target["met"] is (target["measured_x1000"] <= target["limit_x1000"])
    assert targets[("propose allow (co-located)", "requests/s")]["comparison"] == "at_least"
