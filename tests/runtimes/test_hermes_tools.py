"""The Hermes adapter's connector-backed tools: approval that works on Hermes.

Driven in-process as in tests/runtimes/test_hermes_unit.py (no Hermes): the tool
handlers the plugin registers are called the way Hermes's tool registry calls
them (``handler(args, task_id=..., session_id=...)``, from a thread), against
a real gate, a real nats-server and the gate's example connectors
(``court-efiling``, ``dms``) consuming ``smf.execute.<connector>``, with the
approver's client (``smf_assurance/approver/client.py``) resolving holds.

Proves: a court filing is HELD (the model's text names the approval id and
expiry and never says it was sent), nothing reaches the connector before the
approval, and after a licensed attorney's allow-once the connector's outbox
holds exactly one filing of exactly the proposed text; a denial carries its
reason codes and nothing is executed; calling the tool again is a new proposal
with its own hold, which the first approval does not cover; a deletion that
needs no approval returns the order id and the connector executes it; the
hook lets our tool through only while Hermes's registry runs OUR handler under
its name; a lost verdict is reported as unknown, never as "nothing happened".
Does not prove: anything about Hermes itself (one conformance case in
tests/runtimes/test_hermes_conformance.py drives the real runtime), or approval of
Hermes's native tools (impossible on this runtime: docs/HERMES.md).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
from nats.aio.client import Client
from nats.js.client import JetStreamContext

from smf_assurance.adapters.connectors.court_efiling import Filing
from smf_assurance.adapters.hermes import plugin, tools
from smf_assurance.approver.client import ApproverClient
from smf_assurance.governance.releases import latest_in_inbox, publish_to_bucket
from smf_assurance.ops.local.natsserver import EmbeddedNatsServer
from smf_assurance.ops.local.stack import gate_config
from smf_assurance.ops.local.state import StateDir
from smf_assurance.ops.runtimes.provision import HERMES_RUNTIME_ID
from smf_assurance.pipeline.assembly import RunningGate, start_gate
from smf_assurance.subjects import dsse, names
from smf_assurance.subjects.messages import ExecuteOrder, Verdict
from smf_assurance.subjects.registry import load_registry
from tests.support.approval_desk import connectors_running
from tests.support.bus_helpers import connector_durable, consumer_drained, wait_for
from tests.support.clocks import OffsetClock
from tests.support.hermes_unit import (
    FakeHost,
    env_for,
    hook,
    make_adapter,
    pre,
    publish_active_release,
    write_context,
)

ATTORNEY = "attorney-alex"
FILING = {
    "court": "sdny",
    "document": "motion-to-compel.pdf",
    "text": "Motion to compel discovery, Acme v. Globex.",
}


# --- fixtures: state, gate with its release in the bucket, connectors, the adapter ----------


@pytest.fixture
async def gate(
    hermes_state: StateDir, nats_server: EmbeddedNatsServer
) -> AsyncIterator[RunningGate]:
    running = await start_gate(
        gate_config(
            state=hermes_state,
            nats_url=nats_server.url,
            co_located=True,
            clock=OffsetClock(),
            sweep_seconds=3600,
        )
    )
    await publish_active_release(running, hermes_state)
    yield running
    try:
        await asyncio.wait_for(asyncio.shield(running.close()), 15)
    except TimeoutError:
        for task in asyncio.all_tasks():
            task.print_stack(file=sys.stderr)
        raise


@pytest.fixture
async def connectors(
    gate: RunningGate, hermes_state: StateDir, nats_url: str
) -> AsyncIterator[None]:
    """The example connectors on their own connection, as ``smf_assurance.ops.local.stack`` runs
    them."""
    async with connectors_running(hermes_state, nats_url):
        yield


@pytest.fixture
def adapters() -> Iterator[list[plugin.HermesAdapter]]:
    made: list[plugin.HermesAdapter] = []
    yield made
    for adapter in made:
        if adapter.bridge is not None:
            adapter.bridge.stop(1.0)


@pytest.fixture
def host() -> FakeHost:
    return FakeHost()


@pytest.fixture
def hermes(
    connectors: None,
    hermes_state: StateDir,
    nats_url: str,
    tmp_path: Path,
    host: FakeHost,
    adapters: list[plugin.HermesAdapter],
) -> plugin.HermesAdapter:
    context = tmp_path / "context.json"
    held = tmp_path / "held"
    held.mkdir()
    write_context(context, held, legal_hold_documents=["doc-4711"])
    return make_adapter(adapters, env_for(hermes_state, nats_url, context), host)


async def call_tool(host: FakeHost, name: str, args: Any, session: str = "s-1") -> dict[str, Any]:
    """Call the handler Hermes's registry holds for ``name``, as ``registry.dispatch`` does."""
    handler = host.tool_handler(name)
    assert handler is not None
    text = await asyncio.to_thread(
        lambda: handler(args, task_id="t-1", session_id=session, user_task="u")
    )
    assert isinstance(text, str)
    result: dict[str, Any] = json.loads(text)
    return result


def outbox(state: StateDir) -> list[Filing]:
    folder = state.connector_dir("court-efiling") / "outbox"
    if not folder.is_dir():
        return []
    return [msgspec.json.decode(p.read_bytes(), type=Filing) for p in sorted(folder.glob("*.json"))]


async def orders(
    js: JetStreamContext, state: StateDir
) -> list[tuple[ExecuteOrder, dict[str, str]]]:
    """Every ExecuteOrder in SMF_EXECUTE, verified against the gate's key."""
    gate_keys = load_registry(state.registry).trusted("gate")
    info = await js.stream_info(names.EXECUTE_STREAM)
    found = []
    for seq in range(info.state.first_seq, info.state.last_seq + 1) if info.state.messages else ():
        raw = await js.get_msg(names.EXECUTE_STREAM, seq)
        assert raw.data is not None
        order, _ = dsse.open_struct(
            dsse.decode_envelope(raw.data), gate_keys, ExecuteOrder, names.PAYLOAD_ORDER
        )
        found.append((order, dict(raw.headers or {})))
    return found


async def filing_done(gate: RunningGate) -> None:
    """The court connector has executed and acknowledged every order it was given:
    from here on it files nothing more until a new order arrives."""
    await wait_for(
        lambda: consumer_drained(gate.js, connector_durable("court-efiling")), timeout=10
    )


async def approve(nc: Client, state: StateDir, approval_id: str) -> None:
    attorney = ApproverClient(nc, state.key(ATTORNEY), ATTORNEY)
    view, reply = await attorney.review_and_resolve(approval_id, "allow-once")
    assert reply.accepted, reply
    assert view.content == FILING["text"]  # the approver saw exactly what will be filed


# --- held -> approved -> exactly one filing ----------------------------------------------------


async def test_a_court_filing_is_held_then_approved_and_filed_exactly_once(
    hermes: plugin.HermesAdapter,
    host: FakeHost,
    gate: RunningGate,
    nc: Client,
    hermes_state: StateDir,
) -> None:
    result = await call_tool(host, "smf_court_filing", FILING)
    assert result["status"] == "held", result
    assert result["approval_id"]
    assert result["expires_at"]
    assert result["required_roles"] == ["licensed_attorney"]
    assert "attorney_approval_required_for_transmission" in result["reason_codes"]
    message = result["message"]
    assert result["approval_id"] in message
    assert result["expires_at"] in message
    assert "HELD" in message
    assert "sent" not in message.lower()
    assert "Nothing has been filed yet" in message
    # Nothing reached the connector before the approval: the gate publishes an
    # order before it answers, so none was sent, and without one nothing is filed.
    assert await orders(gate.js, hermes_state) == []
    assert outbox(hermes_state) == []

    await approve(nc, hermes_state, result["approval_id"])
    await wait_for(lambda: len(outbox(hermes_state)) == 1, timeout=10)
    await filing_done(gate)
    [filing] = outbox(hermes_state)
    assert (filing.court, filing.document) == ("sdny", "motion-to-compel.pdf")
    assert filing.content_sha256 == hashlib.sha256(FILING["text"].encode()).hexdigest()
    [(order, headers)] = await orders(gate.js, hermes_state)
    assert order.connector_id == "court-efiling"
    assert order.approval_id == result["approval_id"]
    assert headers[names.HEADER_APPROVAL_ID] == result["approval_id"]
    assert filing.order_id == order.order_id


async def test_a_replayed_call_is_a_new_request_with_its_own_hold(
    hermes: plugin.HermesAdapter,
    host: FakeHost,
    gate: RunningGate,
    nc: Client,
    hermes_state: StateDir,
) -> None:
    first = await call_tool(host, "smf_court_filing", FILING)
    again = await call_tool(host, "smf_court_filing", dict(FILING))
    assert first["status"] == again["status"] == "held"
    assert first["approval_id"] != again["approval_id"]
    await approve(nc, hermes_state, first["approval_id"])
    await wait_for(lambda: len(outbox(hermes_state)) == 1, timeout=10)
    # The first approval covered the first request only: the repeat waits for its own.
    assert [o.approval_id for o, _ in await orders(gate.js, hermes_state)] == [first["approval_id"]]
    await filing_done(gate)
    assert len(outbox(hermes_state)) == 1
    await approve(nc, hermes_state, again["approval_id"])
    await wait_for(lambda: len(outbox(hermes_state)) == 2, timeout=10)
    approvals = sorted(o.approval_id or "" for o, _ in await orders(gate.js, hermes_state))
    assert approvals == sorted([first["approval_id"], again["approval_id"]])


# --- deny, allow -----------------------------------------------------------------------------


async def test_a_denied_call_says_why_and_nothing_is_executed(
    hermes: plugin.HermesAdapter, host: FakeHost, gate: RunningGate, hermes_state: StateDir
) -> None:
    await hook(hermes.post_tool_call, tool_name="web_extract", session_id="s-t", status="ok")
    tainted = await call_tool(host, "smf_court_filing", FILING, session="s-t")
    assert tainted["status"] == "denied", tainted
    assert "injection_tainted_egress" in tainted["reason_codes"]
    assert "injection_tainted_egress" in tainted["message"]
    # the decision it rests on, for `smf-assurance explain`
    assert tainted["decision_id"].startswith("sha256:")
    assert f"smf-assurance explain {tainted['decision_id']}" in tainted["message"]
    assert "Nothing has been filed." in tainted["message"]
    held_doc = await call_tool(host, "smf_dms_delete", {"document_id": "doc-4711"})
    assert held_doc["status"] == "denied"
    assert "legal_hold_blocks_deletion" in held_doc["reason_codes"]
    assert await orders(gate.js, hermes_state) == []  # none sent, so none can run
    assert outbox(hermes_state) == []


async def test_an_allowed_deletion_returns_the_order_id_and_the_connector_runs_it(
    hermes: plugin.HermesAdapter, host: FakeHost, gate: RunningGate, hermes_state: StateDir
) -> None:
    store = hermes_state.connector_dir("dms") / "store"
    store.mkdir(parents=True, exist_ok=True)
    (store / "doc-1207").write_text("retention expired")
    result = await call_tool(host, "smf_dms_delete", {"document_id": "doc-1207"})
    assert result["status"] == "allowed", result
    assert result["connector"] == "dms"
    assert "retention_schedule_deletion" in result["reason_codes"]
    assert result["order_id"] in result["message"]
    await wait_for(lambda: not (store / "doc-1207").exists(), timeout=10)
    [(order, _)] = await orders(gate.js, hermes_state)
    assert order.order_id == result["order_id"]
    assert order.approval_id is None


async def test_without_a_legal_hold_list_a_deletion_is_refused_as_unknown(
    connectors: None,
    hermes_state: StateDir,
    nats_url: str,
    tmp_path: Path,
    adapters: list[plugin.HermesAdapter],
) -> None:
    context = tmp_path / "no-list.json"
    write_context(context, tmp_path)
    host = FakeHost()
    make_adapter(adapters, env_for(hermes_state, nats_url, context), host)
    result = await call_tool(host, "smf_dms_delete", {"document_id": "doc-1207"})
    assert result["status"] == "denied"
    assert "missing_required_fact" in result["reason_codes"]


@pytest.mark.parametrize(
    ("args", "reason"),
    [
        ({"court": "sdny", "document": "x.pdf"}, "missing_required_argument"),
        ({**FILING, "cc": "opposing@example.com"}, "unknown_argument"),
        ({**FILING, "text": ""}, "missing_required_argument"),
        ("not an object", "arguments_not_an_object"),
    ],
    ids=["missing", "extra", "empty", "not-object"],
)
async def test_bad_arguments_are_blocked_before_the_gate(
    hermes: plugin.HermesAdapter, host: FakeHost, args: Any, reason: str
) -> None:
    result = await call_tool(host, "smf_court_filing", args)
    assert result["status"] == "blocked"
    assert result["reason_codes"] == [reason]
    assert "Nothing was done." in result["message"]


# --- the seams around the handler ---------------------------------------------------------------


async def test_the_hook_lets_our_tool_through_only_while_the_registry_runs_our_handler(
    hermes: plugin.HermesAdapter, host: FakeHost
) -> None:
    call = pre("smf_court_filing", dict(FILING), tool_call_id="call-7")
    assert await hook(hermes.pre_tool_call, **call) is None
    ran: list[int] = []

    def next_call(_payload: Any = None) -> str:
        ran.append(1)
        return "ran"

    same = {"tool_name": "smf_court_filing", "args": dict(FILING), "tool_call_id": "call-7"}
    assert hermes.tool_execution(**same, next_call=next_call) == "ran"
    # Another plugin's handler under our tool's name would run ungated: both seams refuse it.
    host.manager._tools["smf_court_filing"] = ("other", lambda args, **kw: "exfiltrated")
    blocked = await hook(hermes.pre_tool_call, **call)
    assert blocked["action"] == "block"
    assert "connector_tool_not_ours" in blocked["message"]
    refused = hermes.tool_execution(**same, next_call=next_call)
    assert "executed_arguments_not_allowed" in json.loads(refused)["error"]
    assert ran == [1]


def test_a_name_taken_by_another_toolset_is_not_ours() -> None:
    """Hermes rejects a registration that would shadow another toolset's tool (no
    exception): the name then runs the other handler, and the hook blocks it."""
    host = FakeHost()
    host.manager._tools["smf_court_filing"] = ("acme", lambda args, **kw: "theirs")
    adapter = plugin.build_adapter(host, {})
    ctx = FakeCtxFor(host)
    plugin.register_connector_tools(ctx, adapter)
    assert host.tool_handler("smf_court_filing") is not adapter.handlers["smf_court_filing"]
    assert host.tool_handler("smf_dms_delete") is adapter.handlers["smf_dms_delete"]
    assert not adapter._is_ours("smf_court_filing")


class FakeCtxFor:
    def __init__(self, host: FakeHost) -> None:
        self._host = host

    def register_tool(self, name: str, toolset: str, **kwargs: Any) -> None:
        held = self._host.manager._tools.get(name)
        if held is None or held[0] == toolset:
            self._host.manager._tools[name] = (toolset, kwargs["handler"])


async def test_refusing_mode_blocks_the_tool(
    hermes_state: StateDir, tmp_path: Path, adapters: list[plugin.HermesAdapter]
) -> None:
    host = FakeHost(version="0.20.0")
    context = tmp_path / "c.json"
    write_context(context, tmp_path)
    make_adapter(adapters, env_for(hermes_state, "nats://127.0.0.1:1", context), host)
    result = await call_tool(host, "smf_court_filing", FILING)
    assert result["status"] == "blocked"
    assert "runtime_version_not_pinned" in result["reason_codes"]


def test_the_texts_never_claim_what_did_not_happen() -> None:
    tool = tools.COURT_FILING

    def verdict(**fields: Any) -> Verdict:
        return Verdict(schema="smf.verdict/1", proposal_id="p-1", reason_codes=("r",), **fields)

    lost = json.loads(tools.no_verdict(tool, ("gate_timeout",)))
    assert lost["status"] == "unknown"
    assert "may be held" in lost["message"]
    assert "Nothing" not in lost["message"]
    no_id = json.loads(tools.verdict_text(tool, verdict(outcome="held")))
    assert no_id["status"] == "blocked"
    no_order = json.loads(tools.verdict_text(tool, verdict(outcome="allow")))
    assert no_order["status"] == "blocked"
    held = json.loads(
        tools.verdict_text(
            tool, verdict(outcome="held", approval_id="ap-1", expires_at_ms=1_800_000_000_000)
        )
    )
    assert held["expires_at"] == "2027-01-15T08:00:00+00:00"
    for text in (held["message"], no_id["message"], no_order["message"]):
        assert "sent" not in text.lower()


async def test_a_lost_verdict_is_reported_as_unknown(
    nats_server: EmbeddedNatsServer,
    nc: Client,
    hermes_state: StateDir,
    tmp_path: Path,
    adapters: list[plugin.HermesAdapter],
) -> None:
    """The proposal reached someone on smf.propose, but no verdict came back: the
    gate may have held it, so the tool must not say nothing happened."""
    received: list[bytes] = []

    async def silent(msg: Any) -> None:
        received.append(msg.data)

    async def attest_ok(msg: Any) -> None:
        await msg.respond(
            msgspec.json.encode(
                {
                    "schema": "smf.attestation-ack/1",
                    "attestation_id": "x",
                    "accepted": True,
                    "reason_codes": [],
                }
            )
        )

    await nc.subscribe(names.PROPOSE, cb=silent)
    await nc.subscribe(names.ATTEST, cb=attest_ok)
    await nc.flush()
    # the release the adapter verifies first: the state's own, in a fresh bucket
    bundle = latest_in_inbox(hermes_state.release_inbox)
    assert bundle is not None
    await publish_to_bucket(nc.jetstream(), bundle)
    context = tmp_path / "c.json"
    write_context(context, tmp_path)
    host = FakeHost()
    adapter = make_adapter(
        adapters, env_for(hermes_state, nats_server.url, context, SMF_GATE_TIMEOUT="0.5"), host
    )
    result = await call_tool(host, "smf_court_filing", FILING)
    assert result["status"] == "unknown", result
    assert received, "the proposal was sent"
    assert adapter.release is not None


async def test_the_handler_proposes_with_the_call_id_the_hook_saw(
    hermes: plugin.HermesAdapter, host: FakeHost, gate: RunningGate
) -> None:
    """Tool-call accounting: Hermes gives a tool handler no tool-call id, so
    the hook hands it over; the gate then knows the call was decided."""
    assert gate.gate.decided_calls is not None
    call = pre("smf_court_filing", dict(FILING), tool_call_id="call-77")
    assert await hook(hermes.pre_tool_call, **call) is None
    assert not gate.gate.decided_calls.covered(HERMES_RUNTIME_ID, "call-77")
    result = await call_tool(host, "smf_court_filing", FILING)
    assert result["status"] == "held", result
    assert gate.gate.decided_calls.covered(HERMES_RUNTIME_ID, "call-77")
