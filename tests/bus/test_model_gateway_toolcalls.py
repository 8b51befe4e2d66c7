"""Tool-call accounting against a real gate, a real nats-server and a
fake provider, through the gateway's real HTTP server.

Proves: every tool call the gateway returns carries an id it issued (``smfc`` and 24
lowercase hex), never the provider's; a tool result for such an id that a verified
proposal carried is served; one that no proposal carried is refused
``ungated_tool_result`` before the provider is asked, recorded in the ledger, and
stops the runtime: its next request (even one with no tool result) and its proposals
are refused ``runtime_stopped_ungated_tool_result`` until an operator clears it on
``smf.gateway.clear`` (or with ``model-gateway clear``, whose clear is in the ledger)
and it attests again; a calls answer no gate key signed is not believed; a runtime
whose profile says ``account_tool_calls: false`` is not checked. The gate's index and
the gateway's id sets are bounded (unit tests). A proposal's ``tool_call_id`` is not
part of the operation: its operation hash and normalized envelope are those of the
same proposal without it.

Does not prove: anything about the real runtimes (the Hermes adapter's ids are
tested in tests/runtimes/test_hermes_unit.py), persistence across a gate restart
(tests/bus/test_tool_call_restart.py), accounting across gate replicas
(tests/bus/test_replica_sync.py).
"""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

import msgspec
import pytest

from smf_assurance.adapters.client import tool_call_id_of
from smf_assurance.gateway.server import (
    _Bounded,
    _Marks,
    new_call_id,
)
from smf_assurance.ops.cli.main import main
from smf_assurance.pipeline.desks.tool_calls import DecidedCalls
from smf_assurance.subjects import dsse
from smf_assurance.subjects.call_context import CallContext
from smf_assurance.subjects.keys import SigningKey
from smf_assurance.subjects.model_gateway import GatewayCalls, GatewayCallsAnswer
from smf_assurance.subjects.names import (
    GATEWAY_CALLS,
    HEADER_SERVICE_ERROR,
    PAYLOAD_GATEWAY_CALLS,
)
from smf_tools.fake_model import Reply
from tests.support.builders import normalized_proposal
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
    HERMES,
    HERMES_ID,
    LOOSE,
    LOOSE_ID,
    READ_FILE_TOOL,
    REFUSED_BY_CHECK,
    STOPPED,
    TOOLS,
    TOOLS_ID,
    UNCHECKED,
    UNCHECKED_ID,
    UNGATED,
    clear,
    emitted_call,
    emitted_with,
    ledger_entries,
    offering,
    propose,
    with_result,
    world,
)

__all__ = ["world"]

CALL_ID = re.compile(r"smfc[0-9a-f]{24}")


# -- through the gateway --------------------------------------------------------------


async def test_a_decided_tool_call_gets_a_gateway_id_and_its_result_is_served(
    world: World,
) -> None:
    assert (await attest(world, TOOLS, TOOLS_ID)).accepted
    call_id = await emitted_call(world, TOOLS_ID)
    assert CALL_ID.fullmatch(call_id)  # the gateway's, not the provider's "call_up1"
    verdict = await propose(world, TOOLS, TOOLS_ID, call_id)
    assert STOPPED not in verdict.reason_codes
    world.model.default = Reply(content="Your hearing is on Monday.")
    status, data = await chat(world, TOOLS_ID, body=with_result(call_id))
    assert status == 200
    assert sse_text(data)[0] == "Your hearing is on Monday."
    assert len(world.model.requests) == 2
    assert UNGATED not in ledger_reasons(world.state)


@pytest.mark.claim("model-gateway.ungated-result-stops")
async def test_an_ungated_tool_result_stops_the_runtime_until_an_operator_clears_it(
    world: World,
) -> None:
    assert (await attest(world, TOOLS, TOOLS_ID)).accepted
    call_id = await emitted_call(world, TOOLS_ID)
    # the tool ran with no proposal (a hook removed, ``ctx.dispatch_tool``)
    status, data = await chat(world, TOOLS_ID, body=with_result(call_id))
    assert (status, error_code(data)) == (403, "ungated_tool_result")
    assert len(world.model.requests) == 1  # the provider was not asked again
    assert UNGATED in ledger_reasons(world.state)

    # stopped: a clean request, and a proposal, are refused; attesting again does not help
    status, data = await chat(world, TOOLS_ID)
    assert (status, error_code(data)) == (403, STOPPED)
    assert [STOPPED, "model_request_refused"] in ledger_reasons(world.state)
    assert (await propose(world, TOOLS, TOOLS_ID, None)).reason_codes == (STOPPED,)
    await attest(world, TOOLS, TOOLS_ID)
    assert (await chat(world, TOOLS_ID))[0] == 403
    assert len(world.model.requests) == 1

    # the operator clears it; it is served once it has attested again
    assert (await clear(world, TOOLS_ID)).was_stopped
    status, data = await chat(world, TOOLS_ID)
    assert (status, error_code(data)) == (403, "runtime_attestation_missing")
    assert (await attest(world, TOOLS, TOOLS_ID)).accepted
    world.model.default = Reply(content="Back.")
    status, data = await chat(world, TOOLS_ID)
    assert (status, sse_text(data)[0]) == (200, "Back.")
    assert not (await clear(world, TOOLS_ID)).was_stopped


async def test_the_cli_clears_a_stop(world: World, capsys: pytest.CaptureFixture[str]) -> None:
    assert (await attest(world, TOOLS, TOOLS_ID)).accepted
    call_id = await emitted_call(world, TOOLS_ID)
    assert (await chat(world, TOOLS_ID, body=with_result(call_id)))[0] == 403
    args = ["model-gateway", "clear", TOOLS_ID, "--state-dir", str(world.state.root)]
    args += ["--nats", world.stack.url, "--json"]
    assert await asyncio.to_thread(main, args) == 0
    out = capsys.readouterr().out.strip().splitlines()[-1]  # logs go to stdout too
    printed = json.loads(out)
    assert printed == {
        "runtime_id": TOOLS_ID,
        "was_stopped": True,
        "stopped": False,
        "reason_codes": [],
        "evidence": printed["evidence"],
    }
    # the clear is in the ledger: the entry it names, a transition of the stop's refusal
    (cleared,) = ledger_entries(world.state, printed["evidence"][0])
    assert (cleared["kind"], cleared["reason_codes"]) == ("transition", ["runtime_stop_cleared"])
    assert (await attest(world, TOOLS, TOOLS_ID)).accepted
    world.model.default = Reply(content="Back.")
    assert (await chat(world, TOOLS_ID))[0] == 200


async def test_a_refused_proposal_still_counts_as_decided(world: World) -> None:
    """Recorded before admission: a proposal the gate refused was decided (the hook
    blocked the call), so its result does not stop the runtime."""
    call_id = await attest_and_emit(world)
    verdict = await propose(world, TOOLS, TOOLS_ID, call_id, version="9.9.9")
    assert (verdict.outcome, verdict.reason_codes) == ("deny", ("runtime_version_not_attested",))
    world.model.default = Reply(content="It was blocked.")
    assert (await chat(world, TOOLS_ID, body=with_result(call_id)))[0] == 200


@pytest.mark.claim("model-gateway.local-refusals-accounted")
async def test_a_call_its_adapter_refused_is_a_recorded_denial_and_its_result_is_served(
    world: World,
) -> None:
    """The adapter blocked the call itself (here ``credential_access``) and reports it:
    the gate denies it with the adapter's reason, never runs a policy that could allow
    it, records the denial, and the call's error result is served, the runtime not
    stopped. The control: the same call proposed is allowed, so only the report made
    this one a denial; and a result nobody reported still stops the runtime."""
    call_id = await attest_and_emit(world)
    verdict = await propose(world, TOOLS, TOOLS_ID, call_id, refused_locally="credential_access")
    assert (verdict.outcome, verdict.reason_codes) == (
        "deny",
        ("refused_by_adapter", "credential_access"),
    )
    assert verdict.evidence  # recorded: the ledger entry it names
    (entry,) = ledger_entries(world.state, verdict.evidence[0])
    assert (entry["disposition"], entry["reason_codes"]) == (
        "deny",
        ["refused_by_adapter", "credential_access"],
    )
    world.model.default = Reply(content="It was blocked.")
    status, data = await chat(world, TOOLS_ID, body=with_result(call_id))
    assert (status, sse_text(data)[0]) == (200, "It was blocked.")
    assert UNGATED not in ledger_reasons(world.state)
    # control: proposed, not reported, the same call is allowed by the release
    allowed = await propose(world, TOOLS, TOOLS_ID, await emitted_call(world, TOOLS_ID))
    assert allowed.outcome == "allow"
    # and an unreported result of an offered tool still stops the runtime
    unreported = await emitted_call(world, TOOLS_ID)
    status, data = await chat(world, TOOLS_ID, body=with_result(unreported))
    assert (status, error_code(data)) == (403, "ungated_tool_result")


@pytest.mark.claim("model-gateway.local-refusals-accounted")
async def test_a_call_to_a_tool_the_request_did_not_offer_is_a_recorded_refusal(
    world: World,
) -> None:
    """The model called a tool the runtime's request did not offer: the runtime answers it
    with an error before any hook of ours could propose it. Its result is served and
    recorded as the refusal it was (``unknown_tool``), once; the runtime is not stopped
    and keeps being served. The control (the tool offered, no proposal) is the stop of
    ``test_an_ungated_tool_result_stops_the_runtime_until_an_operator_clears_it``."""
    assert (await attest(world, TOOLS, TOOLS_ID)).accepted
    call_id = await emitted_call(world, TOOLS_ID, offered=False)
    world.model.default = Reply(content="No such tool.")
    for _ in range(2):  # asked once: the second request finds it decided
        status, data = await chat(world, TOOLS_ID, body=with_result(call_id))
        assert (status, sse_text(data)[0]) == (200, "No such tool.")
    reasons = ledger_reasons(world.state)
    assert reasons.count(["unknown_tool", "tool_not_offered_by_runtime"]) == 1
    assert UNGATED not in reasons
    status, data = await chat(world, TOOLS_ID)
    assert (status, sse_text(data)[0]) == (200, "No such tool.")


async def attest_and_emit(world: World) -> str:
    assert (await attest(world, TOOLS, TOOLS_ID)).accepted
    return await emitted_call(world, TOOLS_ID)


async def test_a_calls_answer_no_gate_key_signed_is_not_believed(world: World) -> None:
    call_id = await attest_and_emit(world)  # admitted and cached with the real gate keys
    await propose(world, TOOLS, TOOLS_ID, call_id)
    stranger = SigningKey.from_seed(b"\x07" * 32).verify_key
    world.gateway.gateway.gate_keys = lambda: {stranger.key_id: stranger}
    status, data = await chat(world, TOOLS_ID, body=with_result(call_id))
    assert (status, error_code(data)) == (503, "calls_answer_not_signed_by_gate")
    assert len(world.model.requests) == 1


async def test_a_runtime_without_accounting_is_not_checked(world: World) -> None:
    assert (await attest(world, LOOSE, LOOSE_ID)).accepted
    call_id = await emitted_call(world, LOOSE_ID)
    world.model.default = Reply(content="Unchecked.")
    status, data = await chat(world, LOOSE_ID, body=with_result(call_id))
    assert (status, sse_text(data)[0]) == (200, "Unchecked.")
    assert UNGATED not in ledger_reasons(world.state)


async def test_a_result_for_an_id_the_gateway_never_issued_is_not_checked(
    world: World,
) -> None:
    """History from before this gateway: no id of ours, nothing to check."""
    assert (await attest(world, TOOLS, TOOLS_ID)).accepted
    world.model.default = Reply(content="Old history.")
    status, _ = await chat(world, TOOLS_ID, body=with_result("call_from_before"))
    assert status == 200


async def test_a_malformed_calls_question_or_an_unknown_runtime_is_refused(world: World) -> None:
    """Only what the contract says is answered, and only for a registered runtime:
    an error reply, which the gateway treats as no answer (503, fail closed)."""
    nc = world.gateway.nc  # the gateway's own connection: it may ask
    ask = GatewayCalls(
        schema="smf.gateway-calls/1",
        request_id="m-" + "0" * 32,
        runtime_id="no-such-runtime",
        tenant_id=ACTOR.tenant_id,
        tool_call_ids=(new_call_id(),),
        issued_at_ms=1,
    )
    for data, reason in (
        (b"{}", "malformed_calls"),
        (b"not json", "malformed_calls"),
        (msgspec.json.encode(ask), "unknown_runtime"),
    ):
        reply = await nc.request(GATEWAY_CALLS, data, timeout=5)
        assert (reply.headers or {}).get(HEADER_SERVICE_ERROR) == reason
    assert UNGATED not in ledger_reasons(world.state)


async def test_a_calls_question_past_64_kib_is_refused_before_it_is_read(world: World) -> None:
    """The gate reads at most 64 KiB of a calls question: one byte more is refused as too
    large, before anything of it is decoded; exactly 64 KiB is read."""
    nc = world.gateway.nc
    ask = msgspec.json.encode(
        GatewayCalls(
            schema="smf.gateway-calls/1",
            request_id="m-" + "0" * 32,
            runtime_id="no-such-runtime",
            tenant_id=ACTOR.tenant_id,
            tool_call_ids=(new_call_id(),),
            issued_at_ms=1,
        )
    )
    limit = 64 * 1024
    for size, reason, detail in (
        (limit, "unknown_runtime", ""),
        (limit + 1, "malformed_calls", "too large"),
    ):
        reply = await nc.request(GATEWAY_CALLS, ask + b" " * (size - len(ask)), timeout=5)
        assert (reply.headers or {}).get(HEADER_SERVICE_ERROR) == reason
        assert msgspec.json.decode(reply.data)["detail"] == detail


async def test_unrun_calls_are_answered_as_recorded_refusals_and_noted_decided(
    world: World,
) -> None:
    """The gate's own answer to the gateway for calls its runtime answered itself (a tool
    not offered, arguments failing the schema): each is refused with its reasons and
    named refused (recorded), nothing is uncovered and nobody is stopped; asked again,
    the calls are decided and nothing more is refused."""
    assert (await attest(world, TOOLS, TOOLS_ID)).accepted
    keys = world.gateway.gateway.gate_keys()
    first_id, second_id = new_call_id(), new_call_id()

    async def ask(**fields: Any) -> GatewayCallsAnswer:
        question = GatewayCalls(
            schema="smf.gateway-calls/1",
            request_id="m-" + "1" * 32,
            runtime_id=TOOLS_ID,
            tenant_id=ACTOR.tenant_id,
            tool_call_ids=(first_id, second_id),
            issued_at_ms=1,
            **fields,
        )
        reply = await world.gateway.nc.request(
            GATEWAY_CALLS, msgspec.json.encode(question), timeout=5
        )
        answer, _ = dsse.open_struct(
            dsse.decode_envelope(reply.data), keys, GatewayCallsAnswer, PAYLOAD_GATEWAY_CALLS
        )
        return answer

    first = await ask(not_offered=(first_id,), invalid_arguments=(second_id,))
    assert (first.uncovered, first.stopped) == ((), False)
    assert (first.refused, first.unrecorded) == ((first_id, second_id), ())
    assert first.reason_codes == (
        "unknown_tool",
        "tool_not_offered_by_runtime",
        "tool_arguments_invalid",
        "tool_arguments_rejected_by_runtime",
    )
    assert len(first.evidence) == 2
    again = await ask()
    assert (again.uncovered, again.stopped, again.reason_codes) == ((), False, ())
    assert again.refused is msgspec.UNSET
    assert STOPPED not in [code for reasons in ledger_reasons(world.state) for code in reasons]


async def test_unrun_calls_the_ledger_cannot_take_are_named_unrecorded_and_not_noted(
    world: World,
) -> None:
    """Evidence first: with the gate's ledger closed, the refusals of calls the runtime
    answered itself are not recorded, so the gate names them ``unrecorded`` with
    ``evidence_store_unavailable`` (the gateway then refuses the request and asks again)
    and does not note them decided: asked again they are still unrecorded, and the
    ledger holds nothing of them."""
    assert (await attest(world, TOOLS, TOOLS_ID)).accepted
    keys = world.gateway.gateway.gate_keys()
    call_id = new_call_id()
    question = GatewayCalls(
        schema="smf.gateway-calls/1",
        request_id="m-" + "2" * 32,
        runtime_id=TOOLS_ID,
        tenant_id=ACTOR.tenant_id,
        tool_call_ids=(call_id,),
        issued_at_ms=1,
        not_offered=(call_id,),
    )
    entries = ledger_reasons(world.state)
    await world.stack.gate.ledger.close()
    for _ in range(2):
        reply = await world.gateway.nc.request(
            GATEWAY_CALLS, msgspec.json.encode(question), timeout=5
        )
        answer, _ = dsse.open_struct(
            dsse.decode_envelope(reply.data), keys, GatewayCallsAnswer, PAYLOAD_GATEWAY_CALLS
        )
        assert (answer.uncovered, answer.stopped) == ((), False)
        assert (answer.refused, answer.unrecorded, answer.evidence) == ((), (call_id,), ())
        assert answer.reason_codes[-1] == "evidence_store_unavailable", answer
    assert ledger_reasons(world.state) == entries


# -- units --------------------------------------------------------------------------------


def test_the_gate_index_forgets_the_oldest_ids_of_a_runtime_first() -> None:
    calls = DecidedCalls(per_runtime=3, max_runtimes=2)
    for call_id in ("a", "b", "c", "d"):
        calls.add("r1", call_id)
    assert [calls.covered("r1", i) for i in "abcd"] == [False, True, True, True]
    assert len(calls) == 3
    calls.add("r1", "b")  # seen again: the newest now
    calls.add("r1", "e")
    assert [calls.covered("r1", i) for i in "bcde"] == [True, False, True, True]


def test_the_gate_index_keeps_a_bounded_number_of_runtimes() -> None:
    calls = DecidedCalls(per_runtime=4, max_runtimes=2)
    calls.add("r1", "x")
    calls.add("r2", "x")
    calls.add("r1", "y")  # r1 is the most recent runtime now
    calls.add("r3", "x")  # forgets r2, the least recent
    assert (calls.covered("r1", "x"), calls.covered("r2", "x"), calls.covered("r3", "x")) == (
        True,
        False,
        True,
    )
    assert not calls.covered("r4", "x")


def test_the_gateway_id_sets_are_bounded() -> None:
    ids = _Bounded(limit=2)
    for value in ("a", "b", "c"):
        ids.add(value)
    assert ("a" in ids, "b" in ids, "c" in ids) == (False, True, True)
    marks = _Marks(limit=2)
    for value in ("a", "b", "c"):
        marks.add(value, "skipped")
    marks.add("b", "arguments")  # marked again: the newest, kept
    marks.add("d", "same_tool")
    assert [marks.get(v) for v in "abcd"] == [None, "arguments", None, "same_tool"]
    assert all(CALL_ID.fullmatch(new_call_id()) for _ in range(100))
    assert len({new_call_id() for _ in range(100)}) == 100


def test_a_turn_refused_for_bad_json_adds_nothing_to_the_wire_when_there_is_none() -> None:
    """``invalid_turn`` and ``turn_invalid`` are left out when empty or false, so an ask
    and a record without them encode byte for byte as before they existed; set, they
    round-trip."""
    call_id = "smfc" + "0" * 24
    ask = GatewayCalls(
        schema="smf.gateway-calls/1",
        request_id="m-" + "0" * 32,
        runtime_id=HERMES_ID,
        tenant_id="firm-a",
        tool_call_ids=(call_id,),
        issued_at_ms=1,
    )
    assert b"invalid_turn" not in msgspec.json.encode(ask)
    marked = msgspec.structs.replace(ask, invalid_turn=(call_id,))
    assert msgspec.json.decode(msgspec.json.encode(marked), type=GatewayCalls) == marked
    record = CallContext(
        schema="smf.call-context/1",
        runtime_id=HERMES_ID,
        tool_call_id=call_id,
        tool_name="read_file",
        classification="public",
        injection_taint="clear",
        found=(),
        issued_at_ms=1,
    )
    assert b"turn_invalid" not in msgspec.json.encode(record)
    marked_record = msgspec.structs.replace(record, turn_invalid=True)
    encoded = msgspec.json.encode(marked_record)
    assert msgspec.json.decode(encoded, type=CallContext) == marked_record


def test_a_tool_call_id_is_not_part_of_the_operation() -> None:
    plain = normalized_proposal()
    with_id = normalized_proposal(tool_call_id="smfc" + "0" * 24)
    assert with_id.operation_hash == plain.operation_hash
    assert with_id.envelope == plain.envelope


@pytest.mark.parametrize(
    ("raw", "kept"),
    [
        ("call_abc-1", True),
        ("functions.read:0", False),
        ("", False),
        (None, False),
        ("x" * 129, False),
    ],
)
def test_only_an_id_the_contract_can_carry_goes_into_a_proposal(raw: object, kept: bool) -> None:
    assert tool_call_id_of(raw) == (raw if kept else None)


# -- arguments that fail the offered schema ------------------------------------------

INVALID_ARGUMENTS = ["tool_arguments_invalid", "tool_arguments_rejected_by_runtime"]


@pytest.mark.claim("model-gateway.invalid-arguments-accounted")
@pytest.mark.parametrize(
    "arguments",
    ['{"path": {"name": "notes.txt"}}', '{"limit": 3}', '{"path": "a", "mode": "raw"}'],
    ids=["object-for-string", "required-missing", "extra-property"],
)
async def test_a_call_whose_arguments_fail_the_offered_schema_is_a_recorded_refusal(
    world: World, arguments: str
) -> None:
    """The model called an offered tool with arguments its schema rejects whatever a
    runtime coerces first: a runtime that checks them (OpenClaw) answers with an error
    before any hook could propose the call. Its result is served and recorded as the
    refusal it was (``tool_arguments_invalid``), once; the runtime is not stopped and
    keeps being served. The control: arguments a runtime could coerce into the schema
    (``5`` for a string), whose result no proposal covered, still stop the runtime."""
    assert (await attest(world, TOOLS, TOOLS_ID)).accepted
    call_id = await emitted_with(world, arguments)
    world.model.default = Reply(content="Bad arguments.")
    for _ in range(2):  # asked once: the second request finds it decided
        status, data = await chat(world, TOOLS_ID, body=with_result(call_id, REFUSED_BY_CHECK))
        assert (status, sse_text(data)[0]) == (200, "Bad arguments.")
    reasons = ledger_reasons(world.state)
    assert reasons.count(INVALID_ARGUMENTS) == 1
    assert UNGATED not in reasons
    status, data = await chat(world, TOOLS_ID)
    assert (status, sse_text(data)[0]) == (200, "Bad arguments.")

    coercible = await emitted_with(world, '{"path": 5}')
    status, data = await chat(world, TOOLS_ID, body=with_result(coercible, REFUSED_BY_CHECK))
    assert (status, error_code(data)) == (403, "ungated_tool_result")
    assert UNGATED in ledger_reasons(world.state)


@pytest.mark.claim("model-gateway.invalid-arguments-accounted")
@pytest.mark.parametrize("result_first", [False, True], ids=["proposed-first", "result-first"])
async def test_a_call_whose_arguments_failed_the_schema_is_never_allowed(
    world: World, result_first: bool
) -> None:
    """The attack: the runtime runs a call whose arguments the gateway found invalid
    anyway, and proposes it, before its result comes back or after its refusal was
    recorded. The gate denies it (``tool_arguments_invalid``, recorded) whatever
    policy would say: the same proposal under a valid call's id is allowed."""
    assert (await attest(world, TOOLS, TOOLS_ID)).accepted
    call_id = await emitted_with(world, '{"path": ["notes.txt"]}')
    world.model.default = Reply(content="Refused.")
    if result_first:
        status, data = await chat(world, TOOLS_ID, body=with_result(call_id, REFUSED_BY_CHECK))
        assert (status, sse_text(data)[0]) == (200, "Refused.")
        assert ledger_reasons(world.state).count(INVALID_ARGUMENTS) == 1
    verdict = await propose(world, TOOLS, TOOLS_ID, call_id)
    assert (verdict.outcome, verdict.reason_codes) == ("deny", ("tool_arguments_invalid",))
    (entry,) = ledger_entries(world.state, verdict.evidence[0])
    assert (entry["disposition"], entry["reason_codes"]) == ("deny", ["tool_arguments_invalid"])
    again = await propose(world, TOOLS, TOOLS_ID, call_id)
    assert (again.outcome, again.reason_codes) == ("deny", ("tool_arguments_invalid",))
    status, data = await chat(world, TOOLS_ID, body=with_result(call_id, REFUSED_BY_CHECK))
    assert (status, sse_text(data)[0]) == (200, "Refused.")
    assert UNGATED not in ledger_reasons(world.state)
    # control: the same proposal under the id of a call with valid arguments is allowed
    valid = await emitted_with(world, '{"path": "notes.txt"}')
    assert (await propose(world, TOOLS, TOOLS_ID, valid)).outcome == "allow"


@pytest.mark.claim("model-gateway.invalid-arguments-accounted")
async def test_a_runtime_that_does_not_check_arguments_is_stopped_by_their_unproposed_result(
    world: World,
) -> None:
    """A runtime whose profile does not say it checks arguments (Hermes coerces and runs
    the call whatever its schema says) may have run a call with invalid arguments past
    a removed hook: its unproposed result stops the runtime, and a proposal of it is
    decided by policy like any other (here allowed)."""
    assert (await attest(world, UNCHECKED, UNCHECKED_ID)).accepted
    proposed = await emitted_with(world, '{"path": ["notes.txt"]}', UNCHECKED_ID)
    verdict = await propose(world, UNCHECKED, UNCHECKED_ID, proposed)
    assert verdict.outcome == "allow"
    unproposed = await emitted_with(world, '{"path": ["notes.txt"]}', UNCHECKED_ID)
    status, data = await chat(world, UNCHECKED_ID, body=with_result(unproposed))
    assert (status, error_code(data)) == (403, "ungated_tool_result")
    reasons = ledger_reasons(world.state)
    assert UNGATED in reasons
    assert INVALID_ARGUMENTS not in reasons


@pytest.mark.claim("model-gateway.invalid-arguments-accounted")
async def test_a_call_with_invalid_arguments_whose_result_is_no_refusal_stops_the_runtime(
    world: World,
) -> None:
    """The attack on the accounting: a call whose arguments fail the offered schema, but
    that the runtime repaired and ran past a bypassed hook (OpenClaw's
    ``prepareArguments`` turns some such forms into valid ones), answers with the
    tool's output, not the runtime's refusal. Unproposed, it stops the runtime as any
    ungated result does; nothing records it as a refusal. The control, in the same
    world: the runtime's own refusal text of the same kind of call is a recorded
    refusal and the runtime is served."""
    assert (await attest(world, TOOLS, TOOLS_ID)).accepted
    refused = await emitted_with(world, '{"path": ["notes.txt"]}')
    world.model.default = Reply(content="Refused.")
    status, data = await chat(world, TOOLS_ID, body=with_result(refused, REFUSED_BY_CHECK))
    assert (status, sse_text(data)[0]) == (200, "Refused.")
    assert ledger_reasons(world.state).count(INVALID_ARGUMENTS) == 1
    ran = await emitted_with(world, '{"path": ["notes.txt"]}')
    status, data = await chat(world, TOOLS_ID, body=with_result(ran, "Hearing on Monday."))
    assert (status, error_code(data)) == (403, "ungated_tool_result")
    reasons = ledger_reasons(world.state)
    assert UNGATED in reasons
    assert reasons.count(INVALID_ARGUMENTS) == 1


# -- a turn refused whole for arguments that are not JSON (Hermes) -------------------

WRITE_FILE_TOOL = {
    "type": "function",
    "function": {
        "name": "write_file",
        "description": "Write a file.",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
    },
}
BAD_JSON = '{"path": "notes.txt",}'
INVALID_TURN = ["tool_call_turn_invalid", "tool_call_skipped_by_runtime"]
HERMES_SKIPPED = "Skipped: other tool call in this response had invalid JSON."


def hermes_refusal() -> str:
    """Hermes 0.19.0's result for a call of such a turn whose tool is that of the call
    with bad arguments (``BAD_JSON``), as ``agent/conversation_loop.py`` builds it."""
    try:
        json.loads(BAD_JSON)
    except json.JSONDecodeError as e:
        err = str(e)
    return (
        f"Error: Invalid JSON arguments. {err}. "
        f"For tools with no required parameters, use an empty object: {{}}. "
        f"Please retry with valid JSON."
    )


TURN = (
    ("call_b1", "read_file", BAD_JSON),
    ("call_b2", "read_file", '{"path": "a.txt"}'),
    ("call_b3", "write_file", '{"path": "b.txt"}'),
)


async def emitted_turn(
    world: World, runtime_id: str = HERMES_ID, *, stream: bool = False
) -> list[dict[str, Any]]:
    """Let the model emit ``TURN`` (a call whose arguments are not JSON, another call to
    the same tool and one to another tool) in answer to a request offering both tools,
    not streamed (as Hermes asks when it has no stream consumer) unless ``stream``; the
    calls the runtime gets, with the gateway's ids."""
    world.model.queue.append(Reply(content="", tool_calls=TURN))
    body = json.loads(offering(READ_FILE_TOOL, WRITE_FILE_TOOL))
    body["stream"] = stream
    status, data = await chat(world, runtime_id, body=json.dumps(body).encode())
    assert status == 200
    message = None if stream else json.loads(data)["choices"][0]["message"]
    calls = sse_text(data)[1] if message is None else message["tool_calls"]
    assert [c["function"]["arguments"] for c in calls] == [a for _, _, a in TURN]
    assert all(CALL_ID.fullmatch(c["id"]) for c in calls)
    return list(calls)


def with_results(calls: list[dict[str, Any]], contents: list[str]) -> bytes:
    """The runtime's next request: the turn and a result for each of its calls."""
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "Read my notes."},
        {"role": "assistant", "content": None, "tool_calls": calls},
    ]
    messages += [
        {"role": "tool", "tool_call_id": c["id"], "content": text}
        for c, text in zip(calls, contents, strict=True)
    ]
    return json.dumps({"model": "fake-model", "stream": False, "messages": messages}).encode()


HERMES_ANSWERS = [hermes_refusal(), hermes_refusal(), HERMES_SKIPPED]
"""What Hermes answers the calls of ``TURN``: it picks the refusal by the tool's name."""


def reply_text(data: bytes) -> str:
    text = json.loads(data)["choices"][0]["message"]["content"]
    assert isinstance(text, str)
    return text


@pytest.mark.claim("model-gateway.invalid-json-turns-accounted")
async def test_a_turn_refused_for_arguments_that_are_not_json_is_recorded_not_a_stop(
    world: World,
) -> None:
    """Hermes gives up retrying a turn whose arguments are not JSON and answers every
    call of it itself, before any hook: no proposal covers them. Their results, in
    Hermes's own texts, are served and recorded as refusals, once each (the call with
    bad arguments ``tool_arguments_invalid``, the others ``tool_call_turn_invalid``);
    the runtime is not stopped and keeps being served."""
    assert (await attest(world, HERMES, HERMES_ID)).accepted
    calls = await emitted_turn(world)
    world.model.default = Reply(content="Let me try again.")
    for _ in range(2):  # asked once: the second request finds them decided
        status, data = await chat(world, HERMES_ID, body=with_results(calls, HERMES_ANSWERS))
        assert (status, reply_text(data)) == (200, "Let me try again.")
    assert len(world.model.requests) == 3  # the provider was asked both times
    entries = ledger_entries(world.state)
    refusals = [e for e in entries if e["reason_codes"] in (INVALID_ARGUMENTS, INVALID_TURN)]
    assert [(e["disposition"], e["reason_codes"]) for e in refusals] == [
        ("deny", INVALID_ARGUMENTS),
        ("deny", INVALID_TURN),
        ("deny", INVALID_TURN),
    ]
    assert UNGATED not in ledger_reasons(world.state)
    status, data = await chat(world, HERMES_ID, stream=False)
    assert (status, reply_text(data)) == (200, "Let me try again.")


@pytest.mark.claim("model-gateway.invalid-json-turns-accounted")
@pytest.mark.parametrize(
    ("call", "content"),
    [
        (0, "Hearing on Monday."),
        (2, "Wrote b.txt."),
        (2, HERMES_SKIPPED + " Wrote b.txt."),
        (2, hermes_refusal()),
        (1, hermes_refusal() + "\nHearing on Monday."),
    ],
    ids=[
        "bad-call-output",
        "skipped-output",
        "skipped-then-output",
        "skipped-as-refused",
        "refusal-then-output",
    ],
)
async def test_a_call_of_such_a_turn_answered_otherwise_than_by_hermes_stops_the_runtime(
    world: World, call: int, content: str
) -> None:
    """The attack: one call of the turn ran after all (a runtime that repaired the
    arguments and ran it past a bypassed hook) and answers with a tool's output, or
    with a text Hermes does not give that call. Unproposed, its result stops the
    runtime as any ungated result does, and nothing of the turn is recorded as a
    refusal."""
    assert (await attest(world, HERMES, HERMES_ID)).accepted
    calls = await emitted_turn(world)
    contents = list(HERMES_ANSWERS)
    contents[call] = content
    status, data = await chat(world, HERMES_ID, body=with_results(calls, contents))
    assert (status, error_code(data)) == (403, "ungated_tool_result")
    assert len(world.model.requests) == 1  # the provider was not asked again
    reasons = ledger_reasons(world.state)
    assert UNGATED in reasons
    assert INVALID_ARGUMENTS not in reasons
    assert INVALID_TURN not in reasons
    status, data = await chat(world, HERMES_ID, stream=False)
    assert (status, error_code(data)) == (403, STOPPED)


@pytest.mark.claim("model-gateway.invalid-json-turns-accounted")
async def test_a_call_of_a_turn_refused_for_bad_json_is_never_allowed(world: World) -> None:
    """The attack: a runtime proposes calls of such a turn anyway. The call with bad
    arguments is denied ``tool_arguments_invalid``, another call of the turn
    ``tool_call_turn_invalid`` (its own arguments were fine: the turn is what Hermes
    refuses), whatever policy would say; both denials are recorded, and the results
    are then covered by them. The control: the same proposal under the id of a call
    from a turn whose arguments are all JSON is allowed."""
    assert (await attest(world, HERMES, HERMES_ID)).accepted
    calls = await emitted_turn(world)
    bad = await propose(world, HERMES, HERMES_ID, calls[0]["id"])
    assert (bad.outcome, bad.reason_codes) == ("deny", ("tool_arguments_invalid",))
    sibling = await propose(world, HERMES, HERMES_ID, calls[1]["id"])
    assert (sibling.outcome, sibling.reason_codes) == ("deny", ("tool_call_turn_invalid",))
    (entry,) = ledger_entries(world.state, sibling.evidence[0])
    assert (entry["disposition"], entry["reason_codes"]) == ("deny", ["tool_call_turn_invalid"])
    world.model.default = Reply(content="Refused.")
    status, data = await chat(world, HERMES_ID, body=with_results(calls, HERMES_ANSWERS))
    assert (status, reply_text(data)) == (200, "Refused.")
    assert UNGATED not in ledger_reasons(world.state)
    valid = await emitted_with(world, '{"path": "notes.txt"}', HERMES_ID)
    assert (await propose(world, HERMES, HERMES_ID, valid)).outcome == "allow"


@pytest.mark.claim("model-gateway.invalid-json-turns-accounted")
@pytest.mark.parametrize(
    ("runtime", "runtime_id", "stream"),
    [(UNCHECKED, UNCHECKED_ID, False), (TOOLS, TOOLS_ID, False), (HERMES, HERMES_ID, True)],
    ids=["profile-without-it", "openclaw-profile", "streamed-turn"],
)
async def test_without_the_profile_or_on_a_streamed_turn_hermess_texts_still_stop(
    world: World, runtime: str, runtime_id: str, stream: bool
) -> None:
    """The control: for a runtime whose profile does not say it refuses such a turn whole
    (OpenClaw's ends it as a failed stream instead), and for a streamed turn (Hermes
    repairs streamed arguments and runs what it repaired through its hooks), nothing
    marks the turn: Hermes's texts as results of its calls stop the runtime, and a
    proposal of the other call of the same tool is decided by policy (allowed)."""
    assert (await attest(world, runtime, runtime_id)).accepted
    calls = await emitted_turn(world, runtime_id, stream=stream)
    assert (await propose(world, runtime, runtime_id, calls[1]["id"])).outcome == "allow"
    status, data = await chat(world, runtime_id, body=with_results(calls, HERMES_ANSWERS))
    assert (status, error_code(data)) == (403, "ungated_tool_result")
    reasons = ledger_reasons(world.state)
    assert UNGATED in reasons
    assert INVALID_TURN not in reasons
