"""Tool-call accounting across a gate restart, on one machine.

A real gate (the ledger file holds the stops and the decided calls), a real
nats-server with authorization, the model gateway's real HTTP server and a fake
provider. The gate is stopped and started again on the same state directory.

Proves: a runtime stopped for an ungated tool result is still refused after the
restart, though it attests again (the gateway's admission and its proposals,
``runtime_stopped_ungated_tool_result``; the provider gets no request), until an
operator's ``model-gateway clear``, which is in the ledger (a transition of the
stop's own refusal, ``runtime_stop_cleared``; ``ledger verify`` passes against the
checkpoints on the bus) and is kept across the next restart too; a tool call
decided before a restart, allowed, denied, or refused before evaluation (no
evidence entry), has its result served after it, the runtime not stopped; a clear
whose evidence cannot be written lifts nothing, now or after a restart; a clear
from anyone but an operator is refused by the server, replayed bytes included;
stops and clears racing on the bus leave the gate's memory and its store the same,
and a restart finds what was there; a stop that does not decode keeps the gate
from starting (never read as "not stopped"); a decided call's note adds no commit
to a decision (SQLite's statement trace of the ledger connection); a stop whose write
fails is in force all the same and the calls answer says so
(``runtime_stop_store_unavailable``), and, the documented limit, a restart lifts it.

Does not prove: the KV backend through a gate (tests/bus/test_replica_sync.py); a crash
between a stop's write and its evidence entry (the order is argued in
``smf_assurance.pipeline.desks.tool_calls``, not killed here); real runtimes.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import msgspec
import nats
import pytest

from smf_assurance.adapters.client import ProposalClient
from smf_assurance.gateway.server import new_call_id
from smf_assurance.ops.cli.main import main
from smf_assurance.ops.demo.script import actor
from smf_assurance.ops.local.stack import follow_releases, gate_config
from smf_assurance.ops.local.state import ADAPTER_ID, MODEL_GATEWAY, RUNTIME_ID, StateDir
from smf_assurance.pipeline.assembly import RunningGate, start_gate
from smf_assurance.pipeline.stores.call_context import CallContextWriter
from smf_assurance.pipeline.stores.sqlite_worker import StoreUnavailable
from smf_assurance.subjects import dsse, names
from smf_assurance.subjects.bus_access import ConnectOptions
from smf_assurance.subjects.call_context import CallContext
from smf_assurance.subjects.messages import DataFacts, Proposal
from smf_assurance.subjects.model_gateway import GatewayCalls, GatewayClear, GatewayCleared
from smf_tools.fake_model import Reply
from tests.support.model_gateway import (
    ACTOR,
    World,
    attest,
    chat,
    error_code,
    ledger_reasons,
    sse_text,
)
from tests.support.model_gateway_toolcalls import (
    REFUSED_BY_CHECK,
    STOPPED,
    TOOLS,
    TOOLS_ID,
    UNGATED,
    clear,
    emitted_call,
    emitted_with,
    ledger_entries,
    propose,
    tool_call_world,
    with_result,
)
from tests.support.store_helpers import statements

CLEARED = ["runtime_stop_cleared"]


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    async with tool_call_world(tmp_path) as built:
        yield built


def running(world: World) -> RunningGate:
    return world.stack.gate


async def restart_gate(world: World) -> None:
    """Stop the gate and start it again on the same state and bus, as ``up`` does."""
    await running(world).close()
    assert world.stack.server is not None
    config = gate_config(world.state, world.stack.url, co_located=True)
    config = dataclasses.replace(
        config, on_release=follow_releases(world.state, world.stack.server)
    )
    world.stack.gate = await start_gate(config)


async def stop_by_ungated_result(world: World) -> None:
    assert (await attest(world, TOOLS, TOOLS_ID)).accepted
    call_id = await emitted_call(world, TOOLS_ID)
    status, data = await chat(world, TOOLS_ID, body=with_result(call_id))
    assert (status, error_code(data)) == (403, "ungated_tool_result")


async def cli_clear(
    world: World, capsys: pytest.CaptureFixture[str]
) -> tuple[int, dict[str, Any], str]:
    args = ["model-gateway", "clear", TOOLS_ID, "--state-dir", str(world.state.root)]
    args += ["--nats", world.stack.url, "--json"]
    code = await asyncio.to_thread(main, args)
    captured = capsys.readouterr()
    printed = json.loads(captured.out.strip().splitlines()[-1])  # logs go to stdout too
    return code, printed, captured.err


async def ask_calls(world: World) -> dict[str, Any]:
    """The gateway's question with an id no proposal carried: it stops the runtime. The
    gate's signed answer."""
    ask = GatewayCalls(
        schema="smf.gateway-calls/1",
        request_id="m-" + new_call_id()[4:] * 2,
        runtime_id=TOOLS_ID,
        tenant_id=ACTOR.tenant_id,
        tool_call_ids=(new_call_id(),),
        issued_at_ms=running(world).gate.clock(),
    )
    reply = await world.gateway.nc.request(
        names.GATEWAY_CALLS, msgspec.json.encode(ask), timeout=10
    )
    answer: dict[str, Any] = json.loads(dsse.decode_envelope(reply.data).raw_payload)
    return answer


def stored_stop(state: StateDir) -> tuple[object, ...] | None:
    """The runtime's row in the ledger file, read on a connection of the test's own."""
    with sqlite3.connect(state.ledger) as conn:
        row: tuple[object, ...] | None = conn.execute(
            "SELECT * FROM runtime_stops WHERE runtime_id = ?", (TOOLS_ID,)
        ).fetchone()
    return row


def stop_entry(state: StateDir) -> dict[str, Any]:
    """The ledger entry that stopped the runtime (its refusal of the ungated result)."""
    (entry,) = [e for e in ledger_entries(state) if e["reason_codes"] == UNGATED]
    return entry


# -- a stop survives a restart, until a recorded clear ----------------------------------


async def test_a_stop_survives_a_restart_until_an_operator_clears_it(
    world: World, capsys: pytest.CaptureFixture[str]
) -> None:
    await stop_by_ungated_result(world)
    assert len(world.model.requests) == 1
    await restart_gate(world)

    # attested again and still refused: the gateway's admission and its proposals
    assert (await attest(world, TOOLS, TOOLS_ID)).accepted
    status, data = await chat(world, TOOLS_ID)
    assert (status, error_code(data)) == (403, STOPPED)
    assert (await propose(world, TOOLS, TOOLS_ID, None)).reason_codes == (STOPPED,)
    assert len(world.model.requests) == 1  # the provider got nothing after the stop
    assert [STOPPED, "model_request_refused"] in ledger_reasons(world.state)

    code, printed, err = await cli_clear(world, capsys)
    assert code == 0
    assert "smf-assurance:" not in err  # no refusal (the in-process gate's logs go there)
    assert printed["was_stopped"] is True
    assert (printed["stopped"], printed["reason_codes"]) == (False, [])
    (cleared,) = ledger_entries(world.state, printed["evidence"][0])
    stopped = stop_entry(world.state)
    assert (cleared["kind"], cleared["reason_codes"]) == ("transition", CLEARED)
    assert (cleared["decision_id"], cleared["operation_hash"]) == (
        stopped["decision_id"],
        stopped["operation_hash"],
    )
    assert stored_stop(world.state) is None

    status, data = await chat(world, TOOLS_ID)
    assert (status, error_code(data)) == (403, "runtime_attestation_missing")
    assert (await attest(world, TOOLS, TOOLS_ID)).accepted
    world.model.default = Reply(content="Back.")
    status, data = await chat(world, TOOLS_ID)
    assert (status, sse_text(data)[0]) == (200, "Back.")

    # the clear is kept: served after another restart too
    await restart_gate(world)
    assert (await attest(world, TOOLS, TOOLS_ID)).accepted
    assert (await chat(world, TOOLS_ID))[0] == 200
    assert len(world.model.requests) == 3

    await running(world).ledger.checkpoint(running(world).gate.clock())
    db = str(world.state.ledger)
    args = ["ledger", "verify", "--db", db, "--state-dir", str(world.state.root)]
    args += ["--nats", world.stack.url, "--json"]
    assert await asyncio.to_thread(main, args) == 0
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert report["ok"] is True
    assert report["external_checkpoints"] >= 1


# -- a call decided before a restart is covered after it -------------------------------


async def test_a_call_decided_before_a_restart_is_covered_after_it(world: World) -> None:
    """Two decided calls: one the policy decided (its note rode in the decision's
    evidence entry), one refused at admission before evaluation (its refusal is an
    entry of its own and its note was written on its own), and each result is
    served after the restart."""
    assert (await attest(world, TOOLS, TOOLS_ID)).accepted
    decided = await emitted_call(world, TOOLS_ID)
    verdict = await propose(world, TOOLS, TOOLS_ID, decided)
    assert verdict.evidence  # decided by policy: in the ledger
    refused = await emitted_call(world, TOOLS_ID)
    verdict = await propose(world, TOOLS, TOOLS_ID, refused, version="9.9.9")
    assert verdict.reason_codes == ("runtime_version_not_attested",)
    assert verdict.evidence  # the refusal is evidence too
    assert verdict.decision_id

    await restart_gate(world)
    assert (await attest(world, TOOLS, TOOLS_ID)).accepted
    for call_id in (decided, refused):
        world.model.default = Reply(content="Noted.")
        status, data = await chat(world, TOOLS_ID, body=with_result(call_id))
        assert (status, sse_text(data)[0]) == (200, "Noted.")
    assert len(world.model.requests) == 4
    assert UNGATED not in ledger_reasons(world.state)
    assert running(world).attestation.standing(TOOLS_ID)[0] is None


@pytest.mark.claim("model-gateway.invalid-arguments-accounted")
async def test_a_call_whose_arguments_failed_the_schema_is_denied_after_a_restart(
    world: World,
) -> None:
    """Its result was recorded as a refusal before the restart; a proposal of it after
    the restart is still denied (the gateway's record of the call says so, and it is
    stored), and its result is still served, not a stop."""
    assert (await attest(world, TOOLS, TOOLS_ID)).accepted
    call_id = await emitted_with(world, '{"path": {"name": "notes.txt"}}')
    world.model.default = Reply(content="Refused.")
    status, data = await chat(world, TOOLS_ID, body=with_result(call_id, REFUSED_BY_CHECK))
    assert (status, sse_text(data)[0]) == (200, "Refused.")

    await restart_gate(world)
    assert (await attest(world, TOOLS, TOOLS_ID)).accepted
    verdict = await propose(world, TOOLS, TOOLS_ID, call_id)
    assert (verdict.outcome, verdict.reason_codes) == ("deny", ("tool_arguments_invalid",))
    assert verdict.evidence
    status, data = await chat(world, TOOLS_ID, body=with_result(call_id, REFUSED_BY_CHECK))
    assert (status, sse_text(data)[0]) == (200, "Refused.")
    reasons = ledger_reasons(world.state)
    assert reasons.count(["tool_arguments_invalid", "tool_arguments_rejected_by_runtime"]) == 1
    assert UNGATED not in reasons


# -- a clear that cannot be recorded lifts nothing ---------------------------------------


def refuse_evidence(state: StateDir, refuse: bool) -> None:
    """Make every evidence write fail inside its transaction, as a full disk would (a
    trigger another connection puts on the ledger file), or stop doing so."""
    with sqlite3.connect(state.ledger) as conn:
        if refuse:
            conn.execute(
                "CREATE TRIGGER test_refuse_entries BEFORE INSERT ON evidence_entries"
                " BEGIN SELECT RAISE(ABORT, 'no room'); END"
            )
        else:
            conn.execute("DROP TRIGGER test_refuse_entries")


async def test_a_refusal_the_ledger_did_not_take_is_neither_served_nor_a_stop(
    world: World,
) -> None:
    """Evidence first, for a call to a tool the request did not offer: while the ledger
    refuses every write, the request carrying its result is refused 503 (the provider
    not asked) and the runtime is not stopped; once the ledger takes it, the same
    request is served and the refusal is recorded, once."""
    assert (await attest(world, TOOLS, TOOLS_ID)).accepted
    call_id = await emitted_call(world, TOOLS_ID, offered=False)
    refuse_evidence(world.state, True)
    status, data = await chat(world, TOOLS_ID, body=with_result(call_id))
    assert (status, error_code(data)) == (503, "tool_refusal_not_recorded")
    assert len(world.model.requests) == 1
    refuse_evidence(world.state, False)
    world.model.default = Reply(content="Recorded now.")
    status, data = await chat(world, TOOLS_ID, body=with_result(call_id))
    assert (status, sse_text(data)[0]) == (200, "Recorded now.")
    reasons = ledger_reasons(world.state)
    assert reasons.count(["unknown_tool", "tool_not_offered_by_runtime"]) == 1
    assert UNGATED not in reasons
    assert not [r for r in reasons if STOPPED in r]


async def test_a_clear_that_cannot_be_recorded_leaves_the_stop_in_force(
    world: World, capsys: pytest.CaptureFixture[str]
) -> None:
    await stop_by_ungated_result(world)
    refuse_evidence(world.state, True)
    code, printed, err = await cli_clear(world, capsys)
    assert code == 1
    assert "evidence_store_unavailable" in err
    assert "still stopped" in err
    assert printed == {
        "runtime_id": TOOLS_ID,
        "was_stopped": True,
        "stopped": True,
        "reason_codes": ["evidence_store_unavailable"],
        "evidence": [],
    }
    assert stored_stop(world.state) is not None
    assert (await attest(world, TOOLS, TOOLS_ID)).accepted
    status, data = await chat(world, TOOLS_ID)
    assert (status, error_code(data)) == (403, STOPPED)
    assert len(world.model.requests) == 1

    refuse_evidence(world.state, False)
    await restart_gate(world)
    assert (await attest(world, TOOLS, TOOLS_ID)).accepted
    assert (await chat(world, TOOLS_ID))[0] == 403
    assert CLEARED not in ledger_reasons(world.state)
    code, printed, _ = await cli_clear(world, capsys)
    assert (code, printed["stopped"], len(printed["evidence"])) == (0, False, 1)


# -- a stop that cannot be stored -----------------------------------------------------------


async def test_a_stop_that_cannot_be_stored_is_in_force_and_the_answer_says_so(
    world: World,
) -> None:
    """The stop's write fails (a trigger on the table, as a broken file would) while the
    ledger takes entries: the calls answer still says stopped, and why; the runtime is
    refused; the refusal is in the ledger. The documented limit: that stop lives in
    this process only, so a restart lifts it (a negative finding, docs/EVIDENCE.md)."""
    with sqlite3.connect(world.state.ledger) as conn:
        conn.execute(
            "CREATE TRIGGER test_refuse_stops BEFORE INSERT ON runtime_stops"
            " BEGIN SELECT RAISE(ABORT, 'no room'); END"
        )
    assert (await attest(world, TOOLS, TOOLS_ID)).accepted
    answer = await ask_calls(world)
    assert answer["stopped"] is True
    assert answer["reason_codes"] == [*UNGATED, "runtime_stop_store_unavailable"]
    assert len(answer["evidence"]) == 1
    assert stored_stop(world.state) is None
    assert (await attest(world, TOOLS, TOOLS_ID)).accepted
    status, data = await chat(world, TOOLS_ID)
    assert (status, error_code(data)) == (403, STOPPED)

    await restart_gate(world)
    assert (await attest(world, TOOLS, TOOLS_ID)).accepted
    world.model.default = Reply(content="Lifted by the restart.")
    assert (await chat(world, TOOLS_ID))[0] == 200


# -- only an operator clears -----------------------------------------------------------


async def test_a_clear_from_anyone_but_an_operator_is_refused_by_the_bus(world: World) -> None:
    """The operator's exact clear bytes, replayed by the runtime itself and by the model
    gateway: the server refuses the publish (a permissions violation naming the
    subject); the stop stands and the ledger holds no clear."""
    await stop_by_ungated_result(world)
    replay = msgspec.json.encode(GatewayClear(schema="smf.gateway-clear/1", runtime_id=TOOLS_ID))
    for principal in (TOOLS, MODEL_GATEWAY):
        credential = world.state.existing_credential(principal)
        assert credential is not None
        errors: list[str] = []

        async def seen(exc: Exception, errors: list[str] = errors) -> None:
            errors.append(str(exc))

        nc = await nats.connect(world.stack.url, error_cb=seen, **credential.connect_options())
        try:
            with pytest.raises((nats.errors.TimeoutError, nats.errors.NoRespondersError)):
                await nc.request(names.GATEWAY_CLEAR, replay, timeout=1)
        finally:
            await nc.close()
        assert any(
            "permissions violation" in e.lower() and names.GATEWAY_CLEAR in e for e in errors
        )
    assert stored_stop(world.state) is not None
    assert running(world).attestation.standing(TOOLS_ID)[0] == STOPPED
    assert CLEARED not in ledger_reasons(world.state)


# -- stops and clears racing -------------------------------------------------------------


async def test_stops_and_clears_racing_leave_memory_and_store_the_same(world: World) -> None:
    answers: list[Any] = await asyncio.gather(
        *(step for _ in range(8) for step in (ask_calls(world), clear(world, TOOLS_ID)))
    )
    cleared = [a for a in answers if isinstance(a, GatewayCleared)]
    assert all(not a.reason_codes or a.reason_codes == ("runtime_stopped_again",) for a in cleared)
    lifted = [a for a in cleared if a.was_stopped and not a.stopped]
    entries = {e["entry_hash"]: e for e in ledger_entries(world.state)}
    assert all(entries[a.evidence[0]]["reason_codes"] == CLEARED for a in lifted)

    for _ in range(2):  # as it stands, then as a restart finds it
        gate = running(world)
        assert gate.tool_calls is not None
        assert gate.stops is not None
        stored = await gate.tool_calls.stop_of(TOOLS_ID)
        assert gate.stops.standing(TOOLS_ID) == stored
        assert (gate.attestation.standing(TOOLS_ID)[0] == STOPPED) == (stored is not None)
        assert (stored_stop(world.state) is not None) == (stored is not None)
        await restart_gate(world)


# -- a stop that does not decode -----------------------------------------------------------


async def test_a_stop_that_does_not_decode_keeps_the_gate_from_starting(world: World) -> None:
    await stop_by_ungated_result(world)
    await running(world).close()
    row = stored_stop(world.state)
    assert row is not None
    with sqlite3.connect(world.state.ledger) as conn:
        conn.execute("UPDATE runtime_stops SET decision_id = 'not an identity'")
    config = gate_config(world.state, world.stack.url, co_located=True)
    with pytest.raises(StoreUnavailable, match="runtime_stops"):
        await start_gate(config)

    with sqlite3.connect(world.state.ledger) as conn:  # the operator repairs it
        conn.execute("UPDATE runtime_stops SET decision_id = ?", (row[3],))
    world.stack.gate = await start_gate(config)
    assert (await attest(world, TOOLS, TOOLS_ID)).accepted
    assert running(world).attestation.standing(TOOLS_ID)[0] == STOPPED


# -- the hot path: a note adds no commit ------------------------------------------------------


async def test_a_decided_calls_note_adds_no_commit_to_its_decision(world: World) -> None:
    """A decision is one durable commit. With a tool-call id, the allow's and
    the deny's single COMMIT also writes the note, before it; without one, the same
    single COMMIT. A proposal refused before any evidence is written (admission) has
    its note committed in the ledger's next group commit instead."""
    nc = await nats.connect(world.stack.url, **connect_options(world.state, "runtime"))
    client = ProposalClient(
        nc,
        world.state.key("runtime"),
        RUNTIME_ID,
        "1.0",
        ADAPTER_ID,
        gate_keys=world.state.gate_keys(),
    )
    gate = running(world).gate
    seen = await statements(running(world).ledger.worker)
    # a gateway-issued id has its context recorded before any runtime sees it:
    # written here as the model gateway writes it, clean
    gateway_nc = await nats.connect(world.stack.url, **connect_options(world.state, MODEL_GATEWAY))
    contexts = CallContextWriter(gateway_nc.jetstream(), world.state.key(MODEL_GATEWAY))

    def issued(call_id: str) -> CallContext:
        return CallContext(
            schema="smf.call-context/1",
            runtime_id=RUNTIME_ID,
            tool_call_id=call_id,
            tool_name="dms_delete",
            classification="public",
            injection_taint="clear",
            found=(),
            issued_at_ms=0,
        )

    def proposal(document: str, call_id: str | None) -> Proposal:
        return client.build(
            native_tool="dms_delete",
            arguments={"document_id": document},
            actor=actor("associate-ann", "associate"),
            facts=DataFacts(
                classification="internal",
                injection_taint="clear",
                legal_hold=document == "doc-4711",
            ),
            tool_call_id=call_id,
        )

    try:
        for document, outcome in (("doc-trace-1", "allow"), ("doc-4711", "deny")):
            for call_id in (new_call_id(), None):
                if call_id is not None:
                    await contexts.create(issued(call_id))
                seen.clear()
                verdict = await gate.decide(proposal(document, call_id))
                assert verdict.outcome == outcome, verdict.reason_codes
                commits = [i for i, s in enumerate(seen) if s == "COMMIT"]
                assert len(commits) == 1, (outcome, call_id)
                notes = [
                    i
                    for i, s in enumerate(seen)
                    if s.startswith("INSERT OR REPLACE INTO decided_tool_calls")
                ]
                assert notes == ([] if call_id is None else [notes[0]])
                assert all(i < commits[0] for i in notes)
                assert gate.decided_calls is not None
                assert call_id is None or gate.decided_calls.covered(RUNTIME_ID, call_id)
                await gate.settled()
    finally:
        await nc.close()
        await gateway_nc.close()


def connect_options(state: StateDir, principal: str) -> ConnectOptions:
    credential = state.existing_credential(principal)
    assert credential is not None
    return credential.connect_options()
