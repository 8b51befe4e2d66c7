"""Session taint outside the runtime against a real gate, a real
nats-server (authorization on) and a fake provider, through the gateway's real HTTP server.

The runtime here declares every call clear, as a fresh ``hermes chat --continue``
does (its adapter's taint lives in its process memory). The model gateway records,
for each tool-call id it issues, the context the model was in (``SMF_CALL_CONTEXT``,
signed by the gateway's key); the gate raises the proposal of that id by it.

Proves, for these paths: a call the model emitted after a tool result with injected
text is decided tainted although its proposal declared clear (the ledger's decision
and reasons; an egress the floor then denies puts nothing in ``SMF_EXECUTE``), read
from the gate's watch of the bucket or, before the watch delivered it, from the
bucket itself; the same call in a clean context is decided as declared, with the
operation hash its adapter computed; taint is sticky: a call made after the
injected text left the history inherits it from the earlier call the history still
names, across a gateway restart; a history naming a gateway id with no record
makes the next call's context unknown; a gateway-form id with no record is denied
``tool_call_context_unknown`` (in the ledger); the id of a clean call proposed for
another tool is denied ``tool_call_context_mismatch``; a record no gateway key
signed, or one stored under another call's key, is denied ``tool_call_context_invalid``
(and refuses the gateway's turn whose history names it: 503 ``call_context_invalid``,
as a history naming more gateway ids than it reads is refused 413); a runtime
cannot write the bucket (the server refuses it); a bucket that is gone refuses the
gateway's turn (503 ``call_context_unavailable``, no tool call released, no output
decided) and denies the gate's lookup (``tool_call_context_unavailable``); a held call
whose facts were raised binds its approval to the raised operation, and the
approval's order and signed outcome name exactly that operation.

Does not prove: anything about the real runtimes (tests/runtimes/test_hermes_gateway.py
drives Hermes's ``--continue``), that the detectors find injected text without
their markers (marker detectors), a lineage the runtime cut by dropping every
earlier id and the injected text from its history (nothing is left to inherit
from), a cluster of gates (the mirror is per gate; a miss reads the leader).
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any, Final

import msgspec
import pytest

from smf_assurance.approver.client import ApproverClient
from smf_assurance.core import model_turns
from smf_assurance.core.detectors import raise_facts
from smf_assurance.core.normalize import normalize
from smf_assurance.gateway.server import Upstream, new_call_id
from smf_assurance.ops.local.defaults import OPERATOR
from smf_assurance.ops.local.state import MODEL_GATEWAY
from smf_assurance.pipeline.assembly.config import shipped_mapper_tables
from smf_assurance.pipeline.stores.call_context import CallContextInvalid, open_call_context
from smf_assurance.subjects import dsse, names
from smf_assurance.subjects.approvals import open_outcome
from smf_assurance.subjects.call_context import (
    CALL_CONTEXT_STREAM,
    CALL_CONTEXT_SUBJECT_PREFIX,
    PAYLOAD_CALL_CONTEXT,
    CallContext,
    call_context_key,
)
from smf_assurance.subjects.envelope import Classification, InjectionTaint
from smf_assurance.subjects.keys import SigningKey
from smf_assurance.subjects.messages import DataFacts, Proposal
from smf_tools.fake_model import Reply
from tests.support.bus_helpers import wait_for
from tests.support.model_gateway import (
    World,
    attest,
    chat,
    decisions,
    error_code,
)
from tests.support.model_gateway_context import (
    DECLARED,
    DELIVER,
    INJECTED,
    TOOLS,
    TOOLS_ID,
    USER,
    body,
    build,
    called,
    connect,
    emitted,
    last_reasons,
    propose,
    restart_gateway,
    result,
    world,
)

__all__ = ["world"]

ATTORNEY: Final = "attorney-alex"
PRIVILEGED: Final = "PRIVILEGED & CONFIDENTIAL: settlement floor 2M."
FILING: Final = ("court_efile", '{"court": "sdny", "document": "brief.pdf"}')
READ: Final = ("dms_read", '{"document_id": "d-1"}')


async def orders(world: World) -> int:
    """Every order in ``SMF_EXECUTE`` (no connector runs here, so each one stays)."""
    info = await world.stack.gate.js.stream_info(names.EXECUTE_STREAM)
    return int(info.state.messages)


def operation_hash(proposal: Proposal) -> str:
    return normalize(proposal, shipped_mapper_tables()).operation_hash


def tainted_history() -> bytes:
    return body(USER, called("c-web"), result("c-web", INJECTED))


# -- decided under the recorded context ---------------------------------------------------


@pytest.mark.parametrize("read", ["watch", "direct read"])
async def test_a_call_made_after_injected_text_is_decided_tainted_though_declared_clear(
    world: World, read: str
) -> None:
    assert (await attest(world, TOOLS, TOOLS_ID)).accepted
    mirror = world.stack.gate.call_contexts
    assert mirror is not None
    call_id = await emitted(world, tainted_history())
    if read == "watch":
        await wait_for(lambda: len(mirror) >= 1, timeout=5)
    else:
        mirror.forget()  # the proposal arrived before the watch delivered the record
    before = await orders(world)
    proposal = build(call_id)
    assert proposal.facts.injection_taint == "clear"
    verdict = await propose(world, proposal)
    assert verdict.outcome == "deny"
    assert "injection_tainted_egress" in verdict.reason_codes
    assert decisions(world.state)[-1] == "deny"
    for code in ("injection_tainted_egress", "facts_raised_by_call_context"):
        assert code in last_reasons(world)
    assert "detected_injection_marker" in last_reasons(world)
    assert await orders(world) == before  # nothing reached SMF_EXECUTE
    raised = msgspec.structs.replace(proposal, facts=raise_facts(DECLARED, "public", "suspected"))
    assert verdict.operation_hash == operation_hash(raised) != operation_hash(proposal)


async def test_the_same_call_in_a_clean_context_is_decided_as_declared(world: World) -> None:
    """The control: the same egress, proposed the same way, after no injected text, is
    allowed and ordered; its operation hash is the one its adapter computed (an adapter
    that checks the gate's answer against its own operation, as OpenClaw's exact hold
    does with a held call, sees no difference)."""
    assert (await attest(world, TOOLS, TOOLS_ID)).accepted
    call_id = await emitted(world, body(USER))
    before = await orders(world)
    proposal = build(call_id)
    verdict = await propose(world, proposal)
    assert (verdict.outcome, verdict.connector_id) == ("allow", "deliver.messaging")
    assert "facts_raised_by_call_context" not in verdict.reason_codes
    assert verdict.operation_hash == operation_hash(proposal)
    assert await orders(world) == before + 1


async def test_taint_is_sticky_after_the_injected_text_left_the_history(world: World) -> None:
    """Turn 1 reads injected text and emits call B (recorded tainted); the runtime then
    compacts its history: the injected text is gone, the call B it made is still named.
    After a gateway restart (nothing in memory) the next call C inherits B's context
    from the bucket and is decided tainted, and so is the reply written in that
    history; the same shape with a clean B is not."""
    assert (await attest(world, TOOLS, TOOLS_ID)).accepted
    b = await emitted(world, tainted_history(), READ)
    read = await propose(world, build(b, READ))
    assert read.outcome == "allow"  # raised, and still an internal read: taint does not block it
    assert "facts_raised_by_call_context" in read.reason_codes
    await restart_gateway(world)
    compacted = body(USER, called(b), result(b, "Done."))
    c = await emitted(world, compacted)
    verdict = await propose(world, build(c))
    assert verdict.outcome == "deny"
    assert "injection_tainted_egress" in verdict.reason_codes
    assert "call_context_inherited" in last_reasons(world)
    assert "detected_injection_marker" not in last_reasons(world)  # not in this history
    # the reply the model writes in that history is decided under the same context
    world.model.queue.append(Reply(content="All sent as you asked."))
    status, data = await chat(world, TOOLS_ID, body=compacted)
    assert status == 200
    assert b"All sent" not in data
    assert b"withheld" in data

    clean = await emitted(world, body(USER), READ)
    assert (await propose(world, build(clean, READ))).outcome == "allow"
    after_clean = await emitted(world, body(USER, called(clean), result(clean, "Done.")))
    assert (await propose(world, build(after_clean))).outcome == "allow"


async def test_a_history_naming_a_gateway_id_with_no_record_makes_the_next_call_unknown(
    world: World,
) -> None:
    """An id of the gateway's form the bucket holds nothing for (expired, lost, or made
    up by the runtime) stands for a context nobody can vouch for: the next call is
    recorded unknown, never clear."""
    assert (await attest(world, TOOLS, TOOLS_ID)).accepted
    ghost = new_call_id()
    call_id = await emitted(world, body(USER, called(ghost), result(ghost, "Done.")))
    verdict = await propose(world, build(call_id))
    assert verdict.outcome == "deny"
    assert "injection_tainted_egress" in verdict.reason_codes
    assert "call_context_lineage_unknown" in last_reasons(world)


async def test_a_gateway_form_id_with_no_record_is_denied_and_recorded(world: World) -> None:
    assert (await attest(world, TOOLS, TOOLS_ID)).accepted
    before = await orders(world)
    verdict = await propose(world, build(new_call_id()))
    assert (verdict.outcome, verdict.reason_codes) == ("deny", ("tool_call_context_unknown",))
    assert verdict.evidence  # the refusal is a ledger entry
    assert last_reasons(world) == ["tool_call_context_unknown"]
    assert await orders(world) == before
    # an id of another form has no record to look up: decided as declared
    other = await propose(world, build("call_provider_1"))
    assert other.outcome == "allow"


async def test_a_clean_calls_id_lent_to_another_tool_is_denied(world: World) -> None:
    """The id of a call made in a clean context vouches for that call only: a runtime
    that proposes another tool's call under it (made later, in a tainted context, and
    renamed in its history) is denied ``tool_call_context_mismatch``."""
    assert (await attest(world, TOOLS, TOOLS_ID)).accepted
    clean_read = await emitted(world, body(USER), READ)
    verdict = await propose(world, build(clean_read, DELIVER))
    assert (verdict.outcome, verdict.reason_codes) == ("deny", ("tool_call_context_mismatch",))
    assert last_reasons(world) == ["tool_call_context_mismatch"]
    assert (await propose(world, build(clean_read, READ))).outcome == "allow"


# -- who may write a record ---------------------------------------------------------------


async def test_a_runtime_cannot_write_a_record_the_server_refuses_it(world: World) -> None:
    assert (await attest(world, TOOLS, TOOLS_ID)).accepted
    errors: list[str] = []

    async def on_error(exc: Exception) -> None:
        errors.append(str(exc).lower())

    forged_id = new_call_id()
    record = context_record(forged_id)
    subject = CALL_CONTEXT_SUBJECT_PREFIX + call_context_key(TOOLS_ID, forged_id)
    nc = await connect(world, TOOLS, error_cb=on_error)
    try:
        await nc.publish(subject, signed(record, world.key(TOOLS)))
        await nc.flush()
        await wait_for(lambda: any("permissions violation" in e for e in errors), timeout=5)
    finally:
        await nc.close()
    assert f'permissions violation for publish to "{subject}"'.lower() in errors[0]
    verdict = await propose(world, build(forged_id))
    assert verdict.reason_codes == ("tool_call_context_unknown",)  # nothing was stored


@pytest.mark.parametrize("forgery", ["runtime-signed", "another-calls-record"])
async def test_a_record_no_gateway_signed_for_that_call_is_denied(
    world: World, forgery: str
) -> None:
    """The operator may write anything to the bus; even so the gate believes only a
    record a gateway key signed for the very call it is stored under."""
    assert (await attest(world, TOOLS, TOOLS_ID)).accepted
    forged_id = new_call_id()
    if forgery == "runtime-signed":
        data = signed(context_record(forged_id), world.key(TOOLS))
    else:
        data = signed(context_record(new_call_id()), world.key(MODEL_GATEWAY))
    operator = await connect(world, OPERATOR)
    try:
        subject = CALL_CONTEXT_SUBJECT_PREFIX + call_context_key(TOOLS_ID, forged_id)
        await operator.jetstream().publish(subject, data)
    finally:
        await operator.close()
    verdict = await propose(world, build(forged_id))
    assert (verdict.outcome, verdict.reason_codes) == ("deny", ("tool_call_context_invalid",))


async def test_a_history_naming_a_forged_record_or_too_many_ids_is_refused(world: World) -> None:
    """The gateway reads back the records its history names as the gate does: one no
    gateway key signed refuses the turn (503 ``call_context_invalid``) before the
    provider is asked; a history naming more gateway ids than it reads is refused
    whole (413 ``request_too_many_tool_calls``), never judged on part of it."""
    assert (await attest(world, TOOLS, TOOLS_ID)).accepted
    forged_id = new_call_id()
    operator = await connect(world, OPERATOR)
    try:
        subject = CALL_CONTEXT_SUBJECT_PREFIX + call_context_key(TOOLS_ID, forged_id)
        await operator.jetstream().publish(
            subject, signed(context_record(forged_id), world.key(TOOLS))
        )
    finally:
        await operator.close()
    asked = len(world.model.requests)
    status, data = await chat(
        world, TOOLS_ID, body=body(USER, called(forged_id), result(forged_id, "x"))
    )
    assert (status, error_code(data)) == (503, "call_context_invalid")
    a, b = new_call_id(), new_call_id()
    gateway = world.gateway.gateway
    gateway.settings = dataclasses.replace(gateway.settings, max_lineage_ids=1)
    status, data = await chat(
        world, TOOLS_ID, body=body(USER, called(a), result(a, "x"), called(b), result(b, "y"))
    )
    assert (status, error_code(data)) == (413, "request_too_many_tool_calls")
    assert len(world.model.requests) == asked  # the provider was asked neither time


# -- outages ------------------------------------------------------------------------------


async def delete_bucket(world: World) -> None:
    operator = await connect(world, OPERATOR)
    try:
        assert await operator.jetstream().delete_stream(CALL_CONTEXT_STREAM)
    finally:
        await operator.close()


async def test_a_bucket_outage_refuses_the_turn_and_denies_the_lookup(world: World) -> None:
    assert (await attest(world, TOOLS, TOOLS_ID)).accepted
    issued = await emitted(world, body(USER))  # recorded before the outage
    await delete_bucket(world)
    mirror = world.stack.gate.call_contexts
    assert mirror is not None
    mirror.forget()  # a gate that has not kept it (restarted, or its watch behind)

    # the gateway: no record can be written, so no call goes out and nothing is decided
    decided = len(decisions(world.state))
    world.model.queue.append(Reply(content="Sending it now.", tool_calls=(("c", *DELIVER),)))
    status, data = await chat(world, TOOLS_ID, body=body(USER))
    assert (status, error_code(data)) == (503, "call_context_unavailable")
    assert b"Sending it now" not in data
    assert len(decisions(world.state)) == decided

    # the gate: the record of a call issued before cannot be read: denied, not guessed
    verdict = await propose(world, build(issued))
    assert (verdict.outcome, verdict.reason_codes) == ("deny", ("tool_call_context_unavailable",))


# -- what an approval binds to --------------------------------------------------------------


async def test_an_approval_binds_to_the_raised_operation_and_its_order_names_it(
    world: World,
) -> None:
    """A filing the model emitted after reading privileged text: its proposal declared
    ``internal``; the gate holds it as ``privileged`` (raised). The binding the attorney
    signs, the outcome the runtime verifies (as OpenClaw's exact hold does: the held
    verdict's approval, decision and operation) and the order's ``Smf-Operation-Hash``
    all name the raised operation, which is the one that was decided."""
    assert (await attest(world, TOOLS, TOOLS_ID)).accepted
    # a provider the release approves for privileged text (model egress is governed)
    gateway = world.gateway.gateway
    gateway.upstream = Upstream(provider="firm-private-model", base_url=world.model.url)
    call_id = await emitted(world, body(USER, called("c-dms"), result("c-dms", PRIVILEGED)), FILING)
    proposal = build(call_id, FILING)
    raised = msgspec.structs.replace(proposal, facts=raise_facts(DECLARED, "privileged", "clear"))
    operator = await connect(world, OPERATOR)
    try:
        outcomes: asyncio.Queue[bytes] = asyncio.Queue()

        async def on_outcome(msg: Any) -> None:
            await outcomes.put(msg.data)

        await operator.subscribe(f"{names.APPROVAL_OUTCOME_PREFIX}.>", cb=on_outcome)
        await operator.flush()
        held = await propose(world, proposal)
        assert held.outcome == "held", held
        assert held.approval_id is not None
        assert held.decision_id is not None
        assert held.operation_hash == operation_hash(raised) != operation_hash(proposal)
        assert "facts_raised_by_call_context" in held.reason_codes

        attorney = ApproverClient(operator, world.key(ATTORNEY), ATTORNEY)
        view, reply = await attorney.review_and_resolve(held.approval_id, "allow-once")
        assert reply.accepted, reply
        assert view.binding.operation_hash == held.operation_hash

        outcome = open_outcome(
            await asyncio.wait_for(outcomes.get(), 10),
            world.state.gate_keys(),
            approval_id=held.approval_id,
            decision_id=held.decision_id,
            operation_hash=held.operation_hash,
        )
        assert outcome.outcome == "allow"
        order = await operator.jetstream().get_last_msg(
            names.EXECUTE_STREAM, names.execute_subject("court-efiling")
        )
        assert (order.headers or {})[names.HEADER_OPERATION_HASH] == held.operation_hash
    finally:
        await operator.close()


# -- units ----------------------------------------------------------------------------------


def context_record(call_id: str, **facts: Any) -> CallContext:
    return CallContext(
        schema="smf.call-context/1",
        runtime_id=TOOLS_ID,
        tool_call_id=call_id,
        tool_name=DELIVER[0],
        classification=facts.get("classification", "public"),
        injection_taint=facts.get("injection_taint", "clear"),
        found=(),
        issued_at_ms=1,
    )


def signed(record: CallContext, key: SigningKey) -> bytes:
    return dsse.encode_envelope(dsse.sign_struct(PAYLOAD_CALL_CONTEXT, record, [key]))


def test_a_record_is_read_only_for_its_own_key_and_a_gateway_signer() -> None:
    gateway, runtime = SigningKey.from_seed(b"\x01" * 32), SigningKey.from_seed(b"\x02" * 32)
    keys = {gateway.key_id: gateway.verify_key}
    call_id = new_call_id()
    record, key_ids = open_call_context(
        signed(context_record(call_id), gateway), keys, TOOLS_ID, call_id
    )
    assert (record.tool_call_id, key_ids) == (call_id, frozenset({gateway.key_id}))
    for data, runtime_id, wanted in (
        (signed(context_record(call_id), runtime), TOOLS_ID, call_id),
        (signed(context_record(call_id), gateway), "another-runtime", call_id),
        (signed(context_record(call_id), gateway), TOOLS_ID, new_call_id()),
        (b"{not an envelope", TOOLS_ID, call_id),
    ):
        with pytest.raises(CallContextInvalid):
            open_call_context(data, keys, runtime_id, wanted)


def test_the_history_names_the_gateway_ids_of_calls_and_results_once() -> None:
    a, b, c = new_call_id(), new_call_id(), new_call_id()
    chat_request = model_turns.read_request(
        body(
            USER,
            {**called(a), "tool_calls": [called(a)["tool_calls"][0], called(b)["tool_calls"][0]]},
            result(a, "x"),
            result(b, "y"),
            called("call_provider_1"),
            result("call_provider_1", "z"),
            result(c, "an answer to a call the history does not show"),
            {"role": "user", "tool_call_id": new_call_id(), "content": "not a tool result"},
        )
    )
    assert chat_request.history_call_ids() == [a, b, c]


@pytest.mark.parametrize(
    ("results", "ancestors", "facts", "found"),
    [
        ((), (), ("public", "clear"), ()),
        ((INJECTED,), (), ("public", "suspected"), ("detected_injection_marker",)),
        ((PRIVILEGED,), (), ("privileged", "clear"), ("detected_privilege_marker",)),
        (
            (),
            (("public", "suspected"), ("public", "clear")),
            ("public", "suspected"),
            ("call_context_inherited",),
        ),
        ((), (None,), ("unknown", "unknown"), ("call_context_lineage_unknown",)),
        (
            (INJECTED,),
            (("public", "suspected"),),
            ("public", "suspected"),
            ("detected_injection_marker",),
        ),
    ],
)
def test_a_calls_context_is_what_was_found_and_what_it_inherits(
    results: tuple[str, ...],
    ancestors: tuple[tuple[str, str] | None, ...],
    facts: tuple[str, str],
    found: tuple[str, ...],
) -> None:
    messages = [USER, *(result(f"c{i}", text) for i, text in enumerate(results))]
    records = [
        None
        if a is None
        else context_record(new_call_id(), classification=a[0], injection_taint=a[1])
        for a in ancestors
    ]
    got, codes = model_turns.call_context(model_turns.read_request(body(*messages)), records)
    assert (got.classification, got.injection_taint, codes) == (*facts, found)


CLASSES: Final[tuple[Classification, ...]] = (
    "public",
    "internal",
    "confidential",
    "unknown",
    "privileged",
)
TAINTS: Final[tuple[InjectionTaint, ...]] = ("clear", "suspected", "unknown", "tainted")
"""Each in the order the detectors rank it (what is not known ranks worse)."""


@pytest.mark.parametrize("declared_class", CLASSES)
@pytest.mark.parametrize("declared_taint", TAINTS)
def test_raising_never_lowers_a_fact(
    declared_class: Classification, declared_taint: InjectionTaint
) -> None:
    declared = DataFacts(
        classification=declared_class, injection_taint=declared_taint, legal_hold=True
    )
    for classification in CLASSES:
        for taint in TAINTS:
            got = raise_facts(declared, classification, taint)
            assert CLASSES.index(got.classification) == max(
                CLASSES.index(declared_class), CLASSES.index(classification)
            )
            assert TAINTS.index(got.injection_taint) == max(
                TAINTS.index(declared_taint), TAINTS.index(taint)
            )
            assert (got.redaction_status, got.legal_hold) == (
                declared.redaction_status,
                declared.legal_hold,
            )
