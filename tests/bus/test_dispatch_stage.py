"""The dispatch stage signs and publishes only what may execute.

Proves: a denied decision, and a conditional decision without the approval
that satisfied it, are refused before anything is signed or published; an
allowed one becomes exactly one signed order with the idempotency headers.
Does not prove: who may call the stage (see the stage authentication tests).
"""

from __future__ import annotations

import time

import msgspec
import pytest
from nats.aio.client import Client

from smf_assurance.core.decision import Decision
from smf_assurance.core.evaluator import evaluate
from smf_assurance.governance.projections import load_policy_set
from smf_assurance.governance.scenarios_catalog import load_scenarios
from smf_assurance.pipeline.chain.contracts import DispatchRequest
from smf_assurance.pipeline.chain.dispatch import DispatchStage
from smf_assurance.pipeline.chain.transport import serve
from smf_assurance.pipeline.service import StageRefusal
from smf_assurance.pipeline.stores.streams import ensure_gate_streams
from smf_assurance.subjects import dsse, names
from smf_assurance.subjects.keys import generate_signing_key
from smf_assurance.subjects.messages import ExecuteOrder


def decision_for(name: str) -> Decision:
    scenario = next(s for s in load_scenarios() if s.name == name)
    return evaluate(scenario.envelope, load_policy_set(), at_ms=1_780_000_000_000)


def request(
    decision: Decision, approval_id: str | None = None, connector_id: str = "court-efiling"
) -> DispatchRequest:
    return DispatchRequest(
        decision=decision,
        connector_id=connector_id,
        native_tool="court_efile",
        arguments={"court": "sdny"},
        content="text",
        destination_address="sdny",
        approval_id=approval_id,
    )


def allowed_decision() -> Decision:
    held = decision_for("1-court-filing-approval")
    return msgspec.structs.replace(held, disposition="allow")


@pytest.mark.parametrize(
    ("decision", "reason"),
    [
        (decision_for("2-legal-hold-deletion"), "dispatch_of_denied_decision"),
        (decision_for("1-court-filing-approval"), "dispatch_without_approval"),
    ],
    ids=["denied", "conditional-without-approval"],
)
async def test_refused_decisions_publish_nothing(
    nc: Client, decision: Decision, reason: str
) -> None:
    js = nc.jetstream()
    await ensure_gate_streams(js)
    stage = DispatchStage(js, generate_signing_key(), lambda: time.time_ns() // 1_000_000)
    with pytest.raises(StageRefusal) as refused:
        await stage(request(decision))
    assert refused.value.reason_code == reason
    assert (await js.stream_info(names.EXECUTE_STREAM)).state.messages == 0


async def test_malformed_and_bad_connector_requests_are_refused(nc: Client) -> None:
    js = nc.jetstream()
    await ensure_gate_streams(js)
    stage = DispatchStage(js, generate_signing_key(), lambda: 0)
    with pytest.raises(StageRefusal) as refused:
        await serve(stage, DispatchRequest)(b"{}")
    assert refused.value.reason_code == "malformed_stage_request"
    with pytest.raises(StageRefusal) as refused:
        await stage(request(allowed_decision(), connector_id="court.efiling"))
    assert refused.value.reason_code == "malformed_stage_request"
    assert (await js.stream_info(names.EXECUTE_STREAM)).state.messages == 0


async def test_an_allowed_decision_becomes_one_signed_order(nc: Client) -> None:
    js = nc.jetstream()
    await ensure_gate_streams(js)
    key = generate_signing_key()
    stage = DispatchStage(js, key, lambda: 1_000)
    decision = allowed_decision()
    receipt = await stage(request(decision))
    again = await stage(request(decision))
    assert again.order_id == receipt.order_id
    assert again.duplicate is True
    msg = await js.get_msg(names.EXECUTE_STREAM, receipt.stream_seq)
    assert msg.headers is not None
    assert msg.headers[names.HEADER_MSG_ID] == receipt.order_id
    assert msg.headers[names.HEADER_DECISION_ID] == decision.decision_id
    assert msg.data is not None
    order, _ = dsse.open_struct(
        dsse.decode_envelope(msg.data),
        {key.key_id: key.verify_key},
        ExecuteOrder,
        names.PAYLOAD_ORDER,
    )
    assert order.order_id == receipt.order_id
    assert order.not_after_ms == 1_000 + stage.order_ttl_ms
    assert (await js.stream_info(names.EXECUTE_STREAM)).state.messages == 1
