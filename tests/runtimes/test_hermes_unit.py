"""The Hermes adapter's hooks driven directly, against a real gate over a real nats-server.

No Hermes here: the hooks are called the way Hermes 0.19.0 calls
them (keyword arguments, from a thread other than the event loop), with a
fake host standing in for the plugin manager, the version and the config.

Proves: allow lets the call run (``None``) and only with the allowed
arguments; deny, approval-required, timeout, unreachable gate, no gate,
internal error and garbage input all block; callbacks take ``**kwargs`` and
never raise; a reply is released only on ``allow`` and withheld otherwise;
streaming switched on, a version off the pin or a missing configuration put
the adapter in refusing mode while ``register()`` still does not raise; the
gate refuses a runtime that must attest and has not (missing, stale,
rejected), and keeps serving the scripted runtime that need not attest.
The gate's release is published to the ``SMF_RELEASES`` bucket by the gate
fixture, because the adapter verifies it there itself
(tests/runtimes/test_hermes_release.py tests that part).
Does not prove: anything about Hermes itself (tests/runtimes/test_hermes_conformance.py).
"""

from __future__ import annotations

import io
import json
import re
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import msgspec
import nats
import pytest
from nats.aio.client import Client

from smf_assurance.adapters.client import ProposalClient
from smf_assurance.adapters.hermes import mapping, plugin
from smf_assurance.adapters.hermes.attestation import (
    hook_presence,
    observed_cli_streaming,
    streaming_settings,
    with_observed_cli,
)
from smf_assurance.adapters.hermes.bridge import Bridge, BridgeError
from smf_assurance.adapters.hermes.config import protected_files
from smf_assurance.ops.demo.script import actor
from smf_assurance.ops.local.model_gateway import provision_gateway_runtime, set_upstream
from smf_assurance.ops.local.natsserver import EmbeddedNatsServer
from smf_assurance.ops.local.state import ADAPTER_ID, RUNTIME_ID, StateDir
from smf_assurance.ops.runtimes.provision import (
    HERMES_PRINCIPAL,
    HERMES_RUNTIME_ID,
    load_attestation_requirements,
    provision_runtime,
)
from smf_assurance.pipeline.assembly import RunningGate
from smf_assurance.pipeline.desks.attestation import MAX_INSTANCES, AttestationDesk
from smf_assurance.pipeline.stores.ledger_audit import export_jsonl
from smf_assurance.subjects import names
from smf_assurance.subjects.attestation import AttestationAck, StreamingSetting
from smf_assurance.subjects.dsse import encode_envelope, sign_struct
from smf_assurance.subjects.messages import DataFacts, ProposedDestination
from smf_assurance.subjects.model_gateway import (
    InstanceProof,
    new_instance_id,
    new_proof_nonce,
    open_instance_proof,
    request_digest,
    seal_instance_proof,
)
from smf_assurance.subjects.registry import load_registry
from smf_assurance.subjects.verdicts import NOT_SIGNED_BY_GATE
from tests.support.bus_helpers import FORGED_TEXT, Rogue, unsigned
from tests.support.clocks import FrozenClock as Clock
from tests.support.hermes_unit import (
    LEASE_MS,
    PIN,
    FakeCtx,
    FakeHost,
    adapters,
    clock,
    context_file,
    env_for,
    gate,
    held_dir,
    hermes,
    hook,
    make_adapter,
    pre,
    write_context,
)

__all__ = ["adapters", "clock", "context_file", "gate", "held_dir", "hermes"]

RELEASE_ID = "rel-attested"
"""A release id for the pure attestation-desk tests (no release is built there)."""


# --- pre_tool_call: verdicts -------------------------------------------------------


def ledger_rows(state: StateDir) -> list[dict[str, Any]]:
    out = io.StringIO()
    export_jsonl(state.ledger, out)
    return [json.loads(line) for line in out.getvalue().splitlines()]


@pytest.mark.claim("model-gateway.local-refusals-accounted")
async def test_a_call_the_adapter_refuses_itself_is_reported_as_a_recorded_denial(
    hermes: plugin.HermesAdapter, hermes_state: StateDir
) -> None:
    """Tool-call accounting without false stops: arguments the adapter cannot map are
    blocked here, and the refusal (not the arguments) is reported to the real gate,
    which records a denial with the adapter's reason for that call id. A call without
    an id has no result to account for: nothing is reported."""
    blocked = await hook(hermes.pre_tool_call, **pre("read_file", ["x"], tool_call_id="call-r1"))
    assert blocked is not None
    assert "arguments_not_an_object" in blocked["message"]
    refused = [
        r["reason_codes"]
        for r in ledger_rows(hermes_state)
        if r["reason_codes"][:1] == ["refused_by_adapter"]
    ]
    assert refused == [["refused_by_adapter", "arguments_not_an_object"]]
    assert await hook(hermes.pre_tool_call, **pre("read_file", ["x"], tool_call_id=None))
    assert (
        len([r for r in ledger_rows(hermes_state) if "refused_by_adapter" in r["reason_codes"]])
        == 1
    )


async def test_allowed_read_runs_and_only_with_the_allowed_arguments(
    hermes: plugin.HermesAdapter, tmp_path: Path
) -> None:
    args = {"path": str(tmp_path / "notes.txt")}
    assert await hook(hermes.pre_tool_call, **pre("read_file", args)) is None
    ran: list[int] = []

    def next_call(_payload: Any = None) -> str:
        ran.append(1)
        return '{"content": "ok"}'

    same = {"tool_name": "read_file", "args": dict(args), "tool_call_id": "call-1"}
    assert hermes.tool_execution(**same, next_call=next_call) == '{"content": "ok"}'
    assert ran == [1]
    other = {"tool_name": "read_file", "args": {"path": "/etc/shadow"}, "tool_call_id": "call-1"}
    refused = hermes.tool_execution(**other, next_call=next_call)
    assert "executed_arguments_not_allowed" in json.loads(refused)["error"]
    never = {"tool_name": "terminal", "args": {"command": "id"}, "tool_call_id": "call-9"}
    assert "executed_arguments_not_allowed" in hermes.tool_execution(**never, next_call=next_call)
    assert ran == [1]


async def test_a_proposal_carries_the_tool_call_id_the_contract_can_carry(
    hermes: plugin.HermesAdapter, gate: RunningGate, tmp_path: Path
) -> None:
    """Tool-call accounting: the gate records the call id of every proposal,
    whatever its verdict; an id the contract cannot carry is left out, never sent
    malformed (its result is then reported ungated by the model gateway: fail closed)."""
    calls = gate.gate.decided_calls
    assert calls is not None
    args = {"path": str(tmp_path / "notes.txt")}
    assert await hook(hermes.pre_tool_call, **pre("read_file", args, tool_call_id="smfc01")) is None
    denied = await hook(
        hermes.pre_tool_call, **pre("terminal", {"command": "id"}, tool_call_id="c2")
    )
    assert denied["action"] == "block"
    odd = pre("read_file", args, tool_call_id="functions.read_file:0")
    assert await hook(hermes.pre_tool_call, **odd) is None  # still decided, without the id
    assert calls.covered(HERMES_RUNTIME_ID, "smfc01")
    assert calls.covered(HERMES_RUNTIME_ID, "c2")
    assert not calls.covered(HERMES_RUNTIME_ID, "functions.read_file:0")


async def test_terminal_is_denied_with_the_reason_codes(hermes: plugin.HermesAdapter) -> None:
    result = await hook(hermes.pre_tool_call, **pre("terminal", {"command": "touch /tmp/x"}))
    assert result["action"] == "block"
    assert "SMF Assurance gate denied terminal" in result["message"]
    assert "no_applicable_policy_for_consequential_operation" in result["message"]
    # it names the decision, so `explain` can say why in words
    decision = re.search(
        r"Decision (sha256:[0-9a-f]{64}): `smf-assurance explain \1`", result["message"]
    )
    assert decision is not None, result["message"]


@pytest.mark.claim("runtime-block-hermes.hooks-fail-closed")
async def test_a_rogue_answering_first_cannot_release_a_denied_call_or_a_withheld_reply(
    gate: RunningGate,
    hermes_state: StateDir,
    nats_server: EmbeddedNatsServer,
    nc: Client,
    tmp_path: Path,
    held_dir: Path,
    adapters: list[plugin.HermesAdapter],
) -> None:
    """A client on the bus answers proposals and output closes with an unsigned
    allow before the gate can: the adapter reads only verdicts a gate key of its
    verified release signed (``smf_assurance.subjects.verdicts``), so it still blocks and
    withholds."""
    context = tmp_path / "external.json"
    external = {"address": "telegram:client-chat", "locality": "external"}
    write_context(context, held_dir, reply={"destination": external})
    adapter = make_adapter(adapters, env_for(hermes_state, nats_server.url, context))
    rogue_nc = await nats.connect(nats_server.url)
    try:
        rogue = await Rogue(rogue_nc, unsigned).start(nc)
        result = await hook(adapter.pre_tool_call, **pre("terminal", {"command": "touch /tmp/x"}))
        text = "PRIVILEGED & CONFIDENTIAL: our settlement floor is $2M."
        reply = await hook(adapter.transform_llm_output, response_text=text, platform="telegram")
    finally:
        await rogue_nc.close()
    assert len(rogue.answered) == 2
    assert result["action"] == "block"
    # Whichever answer came first: the forgery refused, or the gate's own denial.
    assert any(
        reason in result["message"]
        for reason in (NOT_SIGNED_BY_GATE, "no_applicable_policy_for_consequential_operation")
    ), result
    assert text not in reply
    assert FORGED_TEXT not in reply


async def test_write_under_legal_hold_is_denied(
    hermes: plugin.HermesAdapter, held_dir: Path
) -> None:
    args = {"path": str(held_dir / "memo.txt"), "content": "overwrite"}
    result = await hook(hermes.pre_tool_call, **pre("write_file", args))
    assert result["action"] == "block"
    assert "legal_hold_blocks_deletion" in result["message"]


async def test_execute_code_and_unknown_tools_are_denied(hermes: plugin.HermesAdapter) -> None:
    code = await hook(hermes.pre_tool_call, **pre("execute_code", {"code": "open('x','w')"}))
    assert "no_applicable_policy_for_consequential_operation" in code["message"]
    mcp = await hook(hermes.pre_tool_call, **pre("mcp_acme_export_all", {"q": "everything"}))
    assert mcp["action"] == "block"
    assert "unknown_tool" in mcp["message"]


async def test_approval_requirement_is_an_explicit_block_not_an_approval(
    hermes: plugin.HermesAdapter,
) -> None:
    args = {"action": "send", "target": "telegram:client-chat", "message": "Hearing moved."}
    result = await hook(hermes.pre_tool_call, **pre("send_message", args))
    assert result["action"] == "block"
    assert "attorney_approval_required_for_transmission" in result["message"]
    assert "Approval is not supported on this runtime profile" in result["message"]
    assert "will not run even if the approval is granted" in result["message"]


async def test_untrusted_output_taints_the_session_family(
    hermes: plugin.HermesAdapter,
) -> None:
    args = {"action": "send", "target": "telegram:client-chat", "message": "Hearing moved."}
    await hook(hermes.subagent_start, parent_session_id="s-1", child_session_id="s-child")
    await hook(hermes.post_tool_call, tool_name="web_extract", session_id="s-child", status="ok")
    result = await hook(hermes.pre_tool_call, **pre("send_message", args, session_id="s-1"))
    assert "injection_tainted_egress" in result["message"]
    blocked_only = await hook(
        hermes.post_tool_call, tool_name="read_file", session_id="s-2", status="blocked"
    )
    assert blocked_only is None
    assert not hermes.taint.is_tainted("s-2")


# --- pre_tool_call: every failure blocks ---------------------------------------------


@pytest.mark.claim("runtime-block-hermes.hooks-fail-closed")
async def test_gate_timeout_blocks(
    nats_server: EmbeddedNatsServer,
    nc: Client,
    hermes_state: StateDir,
    context_file: Path,
    adapters: list[plugin.HermesAdapter],
) -> None:
    async def silent(_msg: Any) -> None:
        return None

    await nc.subscribe(names.PROPOSE, cb=silent)
    await nc.subscribe(names.ATTEST, cb=silent)
    await nc.subscribe(f"{names.OUTPUT_PREFIX}.>", cb=silent)
    await nc.flush()
    env = env_for(hermes_state, nats_server.url, context_file, SMF_GATE_TIMEOUT="0.5")
    adapter = make_adapter(adapters, env)
    result = await hook(adapter.pre_tool_call, **pre("read_file", {"path": "a"}))
    assert result["action"] == "block"
    assert "gate_timeout" in result["message"]
    # The reply's verdict never comes either: the reply is withheld, not released.
    text = "The hearing is on Friday at 10:00."
    withheld = await hook(adapter.transform_llm_output, response_text=text, session_id="s")
    assert text not in withheld
    assert "withheld" in withheld
    # The wait that ran out is the configured one, not the 5 s default (read from
    # the settings, not measured: timing is never asserted).
    assert adapter.config is not None
    assert adapter.config.gate_timeout == 0.5


@pytest.mark.claim("runtime-block-hermes.hooks-fail-closed")
async def test_unreachable_bus_blocks(
    hermes_state: StateDir,
    context_file: Path,
    adapters: list[plugin.HermesAdapter],
    closed_port: int,
) -> None:
    env = env_for(hermes_state, f"nats://127.0.0.1:{closed_port}", context_file)
    adapter = make_adapter(adapters, env)
    result = await hook(adapter.pre_tool_call, **pre("read_file", {"path": "a"}))
    assert result["action"] == "block"
    assert "gate_unreachable" in result["message"]
    withheld = await hook(adapter.transform_llm_output, response_text="Hello", session_id="s")
    assert withheld != "Hello"
    assert "withheld" in withheld


@pytest.mark.claim("runtime-block-hermes.hooks-fail-closed")
async def test_bus_without_a_gate_blocks(
    nats_server: EmbeddedNatsServer,
    hermes_state: StateDir,
    context_file: Path,
    adapters: list[plugin.HermesAdapter],
) -> None:
    adapter = make_adapter(adapters, env_for(hermes_state, nats_server.url, context_file))
    result = await hook(adapter.pre_tool_call, **pre("read_file", {"path": "a"}))
    assert result["action"] == "block"
    assert "did not run" in result["message"]
    withheld = await hook(adapter.transform_llm_output, response_text="Hello", session_id="s")
    assert "Hello" not in withheld
    assert "withheld" in withheld


@pytest.mark.claim("runtime-block-hermes.hooks-fail-closed")
async def test_internal_error_blocks_and_withholds(
    hermes: plugin.HermesAdapter, monkeypatch: pytest.MonkeyPatch
) -> None:
    def boom(*_args: Any, **_kwargs: Any) -> Any:
        raise ZeroDivisionError("inside the adapter")

    monkeypatch.setattr(mapping, "propose_call", boom)
    monkeypatch.setattr(mapping, "session_facts", boom)
    result = await hook(hermes.pre_tool_call, **pre("read_file", {"path": "a"}))
    assert result == plugin.block(
        "SMF Assurance adapter blocked read_file: adapter_internal_error. It did not run."
    )
    reply = await hook(hermes.transform_llm_output, response_text="secret", session_id="s")
    assert reply == plugin.WITHHELD_INTERNAL


@pytest.mark.claim("runtime-block-hermes.hooks-fail-closed")
async def test_an_internal_error_in_the_observer_or_the_middleware_fails_closed(
    hermes: plugin.HermesAdapter, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The hooks that do not ask the gate fail closed too: an allowed call whose
    execution middleware meets an internal error does not run, and an observer
    that fails taints the process, so the next reply of an unrelated session,
    released before, is withheld by the gate."""
    args = {"path": str(tmp_path / "notes.txt")}
    assert await hook(hermes.pre_tool_call, **pre("read_file", args)) is None
    text = "The hearing is on Friday at 10:00."
    assert await hook(hermes.transform_llm_output, response_text=text, session_id="s-x") == text

    def boom(*_args: Any, **_kwargs: Any) -> Any:
        raise ZeroDivisionError("inside the adapter")

    ran: list[int] = []

    def next_call(_payload: Any = None) -> str:
        ran.append(1)
        return '{"content": "ok"}'

    monkeypatch.setattr(mapping, "final_arguments", boom)
    call = {"tool_name": "read_file", "args": dict(args), "tool_call_id": "call-1"}
    refused = hermes.tool_execution(**call, next_call=next_call)
    assert "did not run" in json.loads(refused)["error"]
    assert ran == []

    monkeypatch.setattr(mapping, "is_untrusted", boom)
    post_tool_call: Callable[..., object] = hermes.post_tool_call  # as Hermes holds the hook
    assert post_tool_call(tool_name="read_file", session_id="s-y", status="ok") is None
    reply = await hook(hermes.transform_llm_output, response_text=text, session_id="s-x")
    assert text not in reply
    assert "withheld by the gate" in reply


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"tool_name": None, "args": None},
        {"tool_name": 42, "args": []},
        {"tool_name": "read_file", "args": "not a dict"},
        {"tool_name": "read_file", "args": {"path": float("nan")}},
        {"tool_name": "read_file", "args": {"path": 1.5}},
        {"tool_name": "x" * 300, "args": {}},
        {"tool_name": "terminal", "args": {"command": object()}},
        {"tool_name": "read_file", "args": {"path": "a"}, "brand_new_kwarg": object()},
    ],
    ids=[
        "nothing",
        "nones",
        "wrong-types",
        "args-not-dict",
        "nan",
        "float",
        "long-name",
        "not-json",
        "unknown-kwarg",
    ],
)
async def test_garbage_input_blocks_and_never_raises(
    hermes: plugin.HermesAdapter, kwargs: dict[str, Any]
) -> None:
    result = await hook(hermes.pre_tool_call, **kwargs)
    if kwargs.get("brand_new_kwarg") is not None:
        assert result is None  # an unknown keyword is tolerated, the call is still decided
        return
    assert result["action"] == "block"
    assert result["message"]


async def test_observers_and_middleware_never_raise(hermes: plugin.HermesAdapter) -> None:
    # Held as Hermes holds hooks (any return type), so the None result can be checked.
    post_tool_call: Callable[..., object] = hermes.post_tool_call
    subagent_start: Callable[..., object] = hermes.subagent_start
    assert post_tool_call() is None
    assert post_tool_call(tool_name=object(), session_id=object()) is None
    assert subagent_start(parent_session_id=1) is None
    assert "error" in json.loads(hermes.tool_execution())
    assert "error" in json.loads(hermes.tool_execution(next_call="not callable", args={}))


@pytest.mark.claim("runtime-block-hermes.hooks-fail-closed")
def test_a_failing_subagent_link_taints_everything(
    hermes: plugin.HermesAdapter, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An unlinked child must not look clean while its parent is tainted."""

    def broken(parent: str, child: str) -> None:
        raise RuntimeError("link failed")

    monkeypatch.setattr(hermes.taint, "link", broken)
    assert not hermes.taint.is_tainted("s-child")
    subagent_start: Callable[..., object] = hermes.subagent_start  # as Hermes holds the hook
    assert subagent_start(parent_session_id="s-1", child_session_id="s-child") is None
    assert hermes.taint.is_tainted("s-child")
    assert hermes.taint.is_tainted("s-unrelated")


# --- transform_llm_output -------------------------------------------------------------


@pytest.mark.claim("runtime-block-hermes.hooks-fail-closed")
async def test_reply_is_released_only_on_allow(hermes: plugin.HermesAdapter) -> None:
    text = "The hearing is on Friday at 10:00."
    assert await hook(hermes.transform_llm_output, response_text=text, session_id="s-r") == text


@pytest.mark.claim("runtime-block-hermes.hooks-fail-closed")
async def test_privileged_reply_to_a_client_is_withheld(
    gate: RunningGate,
    hermes_state: StateDir,
    nats_server: EmbeddedNatsServer,
    tmp_path: Path,
    held_dir: Path,
    adapters: list[plugin.HermesAdapter],
) -> None:
    context = tmp_path / "external.json"
    external = {"address": "telegram:client-chat", "locality": "external"}
    write_context(context, held_dir, reply={"destination": external})
    adapter = make_adapter(adapters, env_for(hermes_state, nats_server.url, context))
    text = "PRIVILEGED & CONFIDENTIAL: our settlement floor is $2M."
    reply = await hook(adapter.transform_llm_output, response_text=text, platform="telegram")
    assert text not in reply
    assert "Approval is not supported on this runtime profile" in reply
    clean = "Your hearing is on Friday."
    assert await hook(adapter.transform_llm_output, response_text=clean) == clean


@pytest.mark.claim("runtime-block-hermes.hooks-fail-closed")
async def test_reply_after_untrusted_input_is_withheld(hermes: plugin.HermesAdapter) -> None:
    await hook(hermes.post_tool_call, tool_name="read_file", session_id="s-t", status="ok")
    text = "Summary of the document."
    reply = await hook(hermes.transform_llm_output, response_text=text, session_id="s-t")
    assert reply != text
    assert "withheld by the gate" in reply


# --- refusing mode and register() -------------------------------------------------------


def _streaming_on() -> tuple[StreamingSetting, ...]:
    return (
        StreamingSetting(surface="cli", enabled=False),
        StreamingSetting(surface="gateway:telegram", enabled=True),
    )


async def test_streaming_is_attested_and_the_gate_refuses_the_runtime(
    gate: RunningGate,
    hermes_state: StateDir,
    nats_server: EmbeddedNatsServer,
    context_file: Path,
    adapters: list[plugin.HermesAdapter],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Streaming is attested as Hermes does it and judged by the gate, which
    refuses a streaming runtime the model gateway does not serve: every call blocked,
    every reply withheld. The operator is told how to turn it off."""
    host = FakeHost(streaming=_streaming_on())
    adapter = make_adapter(adapters, env_for(hermes_state, nats_server.url, context_file), host)
    assert "streaming.enabled: false" in caplog.text
    assert "gateway:telegram" in caplog.text
    result = await hook(adapter.pre_tool_call, **pre("read_file", {"path": "a"}))
    assert "runtime_attestation_rejected" in result["message"]
    reply = await hook(adapter.transform_llm_output, response_text="hi")
    assert reply != "hi"
    ack = adapter.last_ack
    assert ack is not None
    assert not ack.accepted
    assert "runtime_streaming_enabled" in ack.reason_codes


async def test_a_cli_that_starts_streaming_is_attested_before_the_next_proposal(
    gate: RunningGate,
    hermes_state: StateDir,
    nats_server: EmbeddedNatsServer,
    context_file: Path,
    adapters: list[plugin.HermesAdapter],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Attested off at start-up (no CLI yet); once the CLI's agent streams, the next
    call first attests what it does, and the gate refuses the runtime."""
    adapter = make_adapter(
        adapters, env_for(hermes_state, nats_server.url, context_file), FakeHost()
    )
    allowed = await hook(adapter.pre_tool_call, **pre("read_file", {"path": "a"}))
    assert allowed is None
    assert adapter.last_ack is not None
    assert adapter.last_ack.accepted
    monkeypatch.setitem(sys.modules, "cli", FakeCli(FakeAgent(print), {"streaming": True}))
    blocked = await hook(adapter.pre_tool_call, **pre("read_file", {"path": "b"}))
    assert "runtime_attestation_rejected" in blocked["message"]
    assert not adapter.last_ack.accepted
    assert "runtime_streaming_enabled" in adapter.last_ack.reason_codes
    assert adapter.streaming == (StreamingSetting(surface="cli", enabled=True),)


def test_a_runtime_the_model_gateway_serves_may_stream(hermes_state: StateDir) -> None:
    """The gateway holds each turn whole until its verdict, so its runtimes'
    streaming is not refused; every other runtime's is."""
    set_upstream(hermes_state, "http://127.0.0.1:9/v1", "local-model")
    provision_gateway_runtime(
        hermes_state,
        HERMES_RUNTIME_ID,
        adapter_id="smf-hermes-adapter",
        actor=actor("associate-ann", "associate"),
        destination=ProposedDestination(address="operator-terminal", locality="internal"),
    )
    provision_runtime(hermes_state, "other-runtime", "hermes-other", runtime_pin=PIN)
    need = load_attestation_requirements(hermes_state)
    assert need[HERMES_RUNTIME_ID].output_via_gateway
    assert not need["hermes-other"].output_via_gateway


@pytest.mark.parametrize(
    ("env_change", "host", "problem"),
    [
        ({"SMF_CONTEXT_FILE": ""}, None, "smf_context_missing"),
        ({"SMF_RUNTIME_KEY": "/nonexistent/key"}, None, "smf_runtime_key_unreadable"),
        ({"SMF_RUNTIME_ID": ""}, None, "smf_runtime_id_missing"),
        ({"SMF_RELEASE_TRUST_ROOT": ""}, None, "smf_release_trust_root_missing"),
        ({"SMF_RELEASE_TRUST_ROOT": "/nonexistent"}, None, "smf_release_trust_root_unreadable"),
        ({}, FakeHost(version="0.20.0"), "runtime_version_not_pinned"),
        ({"SMF_BUS_CREDENTIAL": ""}, None, "smf_bus_credential_missing"),
        ({"SMF_BUS_CREDENTIAL": "/nonexistent.nkey"}, None, "smf_bus_credential_unreadable"),
    ],
    ids=[
        "no-context",
        "bad-key",
        "no-runtime-id",
        "no-trust-root",
        "bad-trust-root",
        "off-pin",
        "no-credential",
        "bad-credential",
    ],
)
async def test_misconfiguration_refuses(
    hermes_state: StateDir,
    context_file: Path,
    adapters: list[plugin.HermesAdapter],
    env_change: dict[str, str],
    host: FakeHost | None,
    problem: str,
) -> None:
    env = {**env_for(hermes_state, "nats://127.0.0.1:1", context_file), **env_change}
    adapter = make_adapter(adapters, env, host)
    assert problem in adapter.problems
    result = await hook(adapter.pre_tool_call, **pre("read_file", {"path": "a"}))
    assert result["action"] == "block"
    assert problem in result["message"]


def test_register_never_raises_and_registers_every_hook(
    monkeypatch: pytest.MonkeyPatch, hermes_state: StateDir, context_file: Path
) -> None:
    monkeypatch.setattr(plugin, "HermesHost", lambda ctx: FakeHost(ctx._manager))
    for key, value in env_for(hermes_state, "nats://127.0.0.1:1", context_file).items():
        monkeypatch.setenv(key, value)
    ctx = FakeCtx()
    plugin.register(ctx)
    assert sorted(ctx._manager._hooks) == sorted(plugin._ADAPTER.callbacks())  # type: ignore[union-attr]
    assert ctx._manager._middleware["tool_execution"]
    assert ctx._manager._middleware["llm_request"] == [plugin._ADAPTER.llm_request]  # type: ignore[union-attr]
    assert sorted(ctx._manager._tools) == ["smf_court_filing", "smf_dms_delete"]
    assert {toolset for toolset, _ in ctx._manager._tools.values()} == {"smf_connectors"}
    broken = FakeCtx(fail_on="transform_llm_output")
    plugin.register(broken)  # does not raise
    assert "pre_tool_call" in broken._manager._hooks
    if plugin._ADAPTER is not None and plugin._ADAPTER.bridge is not None:
        plugin._ADAPTER.bridge.stop(1.0)


# --- every model request proves its process (docs/HERMES.md finding 10) --------


def test_every_model_request_carries_a_proof_of_this_process(
    hermes_state: StateDir, context_file: Path, adapters: list[plugin.HermesAdapter]
) -> None:
    """The proof the middleware adds verifies with this runtime's key and names the
    instance the adapter attests; headers already set are kept; one proof is reused
    for a while, then sealed again; an adapter with no key adds none (the gateway
    then refuses the request, so nothing is let through)."""
    now = [1_800_000_000_000]
    adapter = make_adapter(
        adapters, env_for(hermes_state, "nats://127.0.0.1:1", context_file), clock=lambda: now[0]
    )
    assert adapter.config is not None
    request = {"model": "m", "messages": [], "extra_headers": {"X-Keep": "1"}}
    changed = adapter.llm_request(request=request, session_id="s-1")
    assert changed is not None
    headers = changed["request"]["extra_headers"]
    assert headers["X-Keep"] == "1"
    assert request["extra_headers"] == {"X-Keep": "1"}  # Hermes's own dict is not changed
    runtime_keys = load_registry(hermes_state.registry).trusted("runtime")
    proof, verified = open_instance_proof(headers[names.HEADER_INSTANCE_PROOF], runtime_keys)
    assert (proof.runtime_id, proof.instance_id) == (
        adapter.config.runtime_id,
        adapter.instance_id,
    )
    assert verified.key_ids == {adapter.config.key.key_id}
    assert adapter.attestation().instance_id == adapter.instance_id
    assert proof.issued_at_ms == now[0]

    def sealed() -> str:
        out = adapter.llm_request(request={"messages": []})
        assert out is not None
        value = out["request"]["extra_headers"][names.HEADER_INSTANCE_PROOF]
        assert isinstance(value, str)
        return value

    # bound to one request: a fresh nonce every time, and the digest of the messages
    # as handed to the client (what the gateway computes from the body it receives)
    first, again = sealed(), sealed()
    opened = [open_instance_proof(v, runtime_keys)[0] for v in (first, again)]
    assert opened[0].nonce != opened[1].nonce
    assert opened[0].request_digest == opened[1].request_digest == request_digest([])
    assert proof.request_digest == request_digest([])
    said = [{"role": "user", "content": "Caf\u00e9 r\u00e9sum\u00e9"}]
    out = adapter.llm_request(request={"messages": said})
    assert out is not None
    bound, _ = open_instance_proof(
        out["request"]["extra_headers"][names.HEADER_INSTANCE_PROOF], runtime_keys
    )
    assert bound.request_digest == request_digest(json.loads(json.dumps(said)))
    # messages with no canonical form (a float) get no proof: the gateway refuses them
    assert adapter.llm_request(request={"messages": [{"role": "user", "n": 0.5}]}) is None
    other = make_adapter(adapters, env_for(hermes_state, "nats://127.0.0.1:1", context_file))
    assert other.instance_id != adapter.instance_id  # one id per process
    unconfigured = make_adapter(adapters, {})
    assert unconfigured.llm_request(request={"messages": []}) is None
    assert adapter.llm_request(request="not a dict") is None


# --- the gate's side of attestation -------------------------------------------------------


async def test_gate_refuses_a_runtime_that_has_not_attested_and_serves_the_scripted_one(
    gate: RunningGate, nc: Client, hermes_state: StateDir
) -> None:
    hermes_client = ProposalClient(
        nc,
        hermes_state.key(HERMES_PRINCIPAL),
        HERMES_RUNTIME_ID,
        PIN,
        "smf-hermes-adapter",
        gate_keys=hermes_state.gate_keys(),
    )
    facts = DataFacts(classification="internal", injection_taint="clear")
    proposal = hermes_client.build(
        native_tool="read_file",
        arguments={"path": "a"},
        actor=actor("associate-ann", "associate"),
        facts=facts,
    )
    verdict = await hermes_client.propose(proposal)
    assert verdict.outcome == "deny"
    assert verdict.reason_codes == ("runtime_attestation_missing",)
    # refused at admission, before any policy, and still in the ledger
    (entry,) = verdict.evidence
    out = io.StringIO()
    export_jsonl(hermes_state.ledger, out)
    rows = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [(r["disposition"], r["reason_codes"]) for r in rows if r["entry_hash"] == entry] == [
        ("deny", ["runtime_attestation_missing"])
    ]
    scripted = ProposalClient(
        nc,
        hermes_state.key("runtime"),
        RUNTIME_ID,
        "1.0",
        ADAPTER_ID,
        gate_keys=hermes_state.gate_keys(),
    )
    read = scripted.build(
        native_tool="dms_read",
        arguments={"document_id": "doc-1207"},
        actor=actor("associate-ann", "associate"),
        facts=facts,
    )
    assert (await scripted.propose(read)).outcome == "allow"


async def test_attestation_is_accepted_then_goes_stale(
    hermes: plugin.HermesAdapter, clock: Clock, tmp_path: Path
) -> None:
    assert await hook(hermes.pre_tool_call, **pre("read_file", {"path": "a"})) is None
    ack = hermes.last_ack
    assert ack is not None
    assert ack.accepted
    assert ack.release_id is not None
    assert hermes.release is not None
    assert hermes.attestation().verified_release_id == ack.release_id
    assert ack.evidence_store == "reachable"
    clock.now += LEASE_MS + 30_000
    result = await hook(hermes.pre_tool_call, **pre("read_file", {"path": "b"}))
    assert "runtime_attestation_stale" in result["message"]


async def test_attestation_from_another_runtimes_key_is_refused(
    gate: RunningGate, nc: Client, hermes_state: StateDir, context_file: Path
) -> None:
    host = FakeHost()
    env = env_for(hermes_state, "nats://127.0.0.1:1", context_file)
    adapter = plugin.build_adapter(host, env)
    forged = encode_envelope(
        sign_struct(names.PAYLOAD_ATTESTATION, adapter.attestation(), [hermes_state.key("runtime")])
    )
    reply = await nc.request(names.ATTEST, forged, timeout=2)
    ack = msgspec.json.decode(reply.data, type=AttestationAck)
    assert not ack.accepted
    assert ack.reason_codes == ("runtime_identity_mismatch",)


def test_provision_runtime_is_idempotent_and_opts_in(hermes_state: StateDir) -> None:
    before = hermes_state.registry.read_bytes()
    provision_runtime(hermes_state, runtime_pin=PIN, required_hooks=plugin.REQUIRED_HOOKS)
    assert hermes_state.registry.read_bytes() == before
    need = load_attestation_requirements(hermes_state)
    assert set(need) == {HERMES_RUNTIME_ID}
    assert need[HERMES_RUNTIME_ID].runtime_pin == PIN
    assert need[HERMES_RUNTIME_ID].require_release  # the Hermes adapter verifies releases
    provision_runtime(hermes_state, require_attestation=False)
    assert load_attestation_requirements(hermes_state) == {}


# --- pure pieces ------------------------------------------------------------------------------


def test_streaming_settings_follow_hermes_precedence() -> None:
    def per_platform(raw: Mapping[str, Any], name: str) -> object:
        return ((raw.get("display") or {}).get("platforms") or {}).get(name, {}).get("streaming")

    # Nothing set: the CLI streams (its own default, cli.py 510); the gateway does not.
    default = {s.surface: s.enabled for s in streaming_settings({}, ["telegram"], per_platform)}
    assert default == {"cli": True, "gateway": False, "gateway:telegram": False}
    quiet = {"display": {"streaming": False}}
    off = streaming_settings(quiet, ["telegram"], per_platform)
    assert not any(s.enabled for s in off)
    master = {"streaming": {"enabled": True}}
    assert all(s.enabled for s in streaming_settings(master, ["telegram"], per_platform)[1:])
    transport_off = {"streaming": {"enabled": True, "transport": "off"}, **quiet}
    assert not any(s.enabled for s in streaming_settings(transport_off, ["x"], per_platform))
    override = {"display": {"streaming": False, "platforms": {"telegram": {"streaming": True}}}}
    found = {s.surface: s.enabled for s in streaming_settings(override, [], per_platform)}
    assert found == {"cli": False, "gateway": False, "gateway:telegram": True}
    cli = {"display": {"streaming": "yes"}}
    assert streaming_settings(cli, [], per_platform)[0].enabled
    # The gateway's own loader wins over the raw file for the master switch.
    alias = {"streaming": {"mode": "auto"}, **quiet}
    loaded = {s.surface: s.enabled for s in streaming_settings(alias, ["x"], per_platform, True)}
    assert loaded == {"cli": False, "gateway": True, "gateway:x": True}


class FakeAgent:
    def __init__(self, stream: object) -> None:
        self.stream_delta_callback = stream


class FakeCli:
    """What the adapter reads of Hermes's ``cli`` module (cli.py 0.19.0)."""

    def __init__(self, agent: FakeAgent | None, display: dict[str, Any] | None) -> None:
        self._active_agent_ref = agent
        self.CLI_CONFIG = {} if display is None else {"display": display}


def test_the_cli_surface_is_what_the_running_cli_does() -> None:
    """The default CLI streams, so the adapter attests it streaming, not off."""
    configured = (StreamingSetting(surface="cli", enabled=False),)
    streams = with_observed_cli(configured, FakeCli(FakeAgent(print), {"streaming": False}))
    assert streams == (StreamingSetting(surface="cli", enabled=True),)
    # -Q clears the agent's callback although the merged config still says on
    quiet = with_observed_cli(streams, FakeCli(FakeAgent(None), {"streaming": True}))
    assert quiet == (StreamingSetting(surface="cli", enabled=False),)
    # before the agent exists: the CLI's merged config (its defaults applied)
    assert with_observed_cli(configured, FakeCli(None, {"streaming": True}))[0].enabled
    # no CLI in this process, or nothing readable: the configured value stays
    assert with_observed_cli(streams, None) == streams
    assert with_observed_cli(streams, FakeCli(None, None)) == streams
    assert observed_cli_streaming(FakeCli(None, {"other": 1})) is None


def test_hook_presence_requires_ours_first_on_the_reply() -> None:
    def ours(**_kw: Any) -> None:
        return None

    def theirs(**_kw: Any) -> None:
        return None

    table = {"pre_tool_call": [theirs, ours], "transform_llm_output": [theirs, ours]}
    present, missing, problems = hook_presence(
        table, {"pre_tool_call": ours, "transform_llm_output": ours, "post_tool_call": ours}
    )
    assert present == ("pre_tool_call", "transform_llm_output")
    assert missing == ("post_tool_call",)
    assert problems == ("transform_llm_output_not_first",)
    assert hook_presence(None, {"x": ours})[2] == ("plugin_manager_unreadable",)


def test_legal_hold_is_known_only_where_the_operator_said(tmp_path: Path) -> None:
    held = (str(tmp_path / "held"),)
    cwd = str(tmp_path)
    assert mapping.legal_hold_of("write_file", {"path": "held/a.txt"}, held, cwd) is True
    assert mapping.legal_hold_of("write_file", {"path": "heldout/a"}, held, cwd) is False
    assert mapping.legal_hold_of("write_file", {"path": "held/a"}, None, cwd) is None
    assert mapping.legal_hold_of("patch", {}, held, cwd) is None
    patch = "*** Begin Patch\n*** Update File: held/b.txt\n@@\n-a\n+b\n*** End Patch"
    assert mapping.legal_hold_of("patch", {"patch": patch}, held, cwd, parse_none) is True
    assert mapping.legal_hold_of("terminal", {"command": "rm -rf held"}, held, cwd) is None


def parse_none(text: str) -> list[str]:
    """A parser that finds nothing: what the header patterns add is visible alone."""
    return []


def test_a_patch_without_the_runtimes_parser_is_refused(tmp_path: Path) -> None:
    """Without Hermes's parser the call is refused: our own reading of a patch alone
    could differ from Hermes's."""
    held = (str(tmp_path / "held"),)
    patch = {"patch": "*** Update File: free.txt\n@@\n-a\n+b"}
    with pytest.raises(mapping.MappingError) as missing:
        mapping.legal_hold_of("patch", patch, held, str(tmp_path))
    assert missing.value.reason_code == "patch_parser_unavailable"

    def broken(text: str) -> list[str]:
        raise ImportError("tools.patch_parser")

    with pytest.raises(mapping.MappingError) as failing:
        mapping.legal_hold_of("patch", patch, held, str(tmp_path), broken)
    assert failing.value.reason_code == "patch_parser_unavailable"


@pytest.mark.parametrize(
    "header",
    [
        "***Update File: held/b.txt",
        "*** Move File: free.txt -> held/b.txt",
        "*** Delete  File: held/b.txt",
        "***\tAdd\tFile:held/b.txt",
        "*** Begin Patch\n*** End Patch\n*** Delete File: held/b.txt",
    ],
)
def test_every_header_hermes_accepts_is_read_as_a_target(tmp_path: Path, header: str) -> None:
    """The three header variants a regex of our own would miss (and a tab and a header
    after an early End Patch): the legal hold is seen even when the parser reports nothing."""
    held = (str(tmp_path / "held"),)
    text = {"patch": f"{header}\n@@\n-a\n+b\n"}
    assert mapping.legal_hold_of("patch", text, held, str(tmp_path), parse_none) is True


def test_a_move_destination_found_only_by_the_parser_counts(tmp_path: Path) -> None:
    held = (str(tmp_path / "held"),)

    def parser(text: str) -> list[str]:
        return ["free.txt", "held/moved.txt"]

    text = {"patch": "no header our patterns know"}
    assert mapping.legal_hold_of("patch", text, held, str(tmp_path), parser) is True
    assert mapping.target_paths("patch", text, parser) == ["free.txt", "held/moved.txt"]


def test_send_message_destination_and_surfaces() -> None:
    context = mapping.HermesContext(
        schema="smf.hermes-context/1",
        actor=actor("associate-ann", "associate"),
        internal_targets=("telegram:firm",),
    )
    taint = mapping.SessionTaint()
    taint.link("parent", "child")
    inside = mapping.propose_call(
        "send_message",
        {"target": "telegram:firm", "message": "m"},
        session_id="parent",
        context=context,
        taint=taint,
    )
    assert inside.destination == ProposedDestination(address="telegram:firm", locality="internal")
    assert inside.surface == "tool_call"
    child = mapping.propose_call(
        "send_message",
        {"target": "x", "message": "m"},
        session_id="child",
        context=context,
        taint=taint,
    )
    assert child.destination.locality == "unknown"
    assert child.surface == "delegation"
    mcp = mapping.propose_call("mcp_x_y", {}, session_id="p", context=context, taint=taint)
    assert mcp.surface == "mcp"


def test_bridge_refuses_calls_after_stop() -> None:
    bridge = Bridge("nats://127.0.0.1:1").start()
    bridge.stop(1.0)

    async def job(_nc: Client) -> int:
        return 1

    with pytest.raises(BridgeError) as caught:
        bridge.call(job, 0.5)
    assert caught.value.reason_code == "bridge_unavailable"


# --- the gate's attestation checks, one per threat -------------------------------------------


def _signed(state: StateDir, principal: str, **changes: Any) -> bytes:
    adapter = plugin.build_adapter(FakeHost(), {})
    adapter.config = plugin.AdapterConfig(
        nats_url="nats://127.0.0.1:1",
        key=state.key(principal),
        runtime_id=HERMES_RUNTIME_ID,
        context=mapping.HermesContext(
            schema="smf.hermes-context/1", actor=actor("associate-ann", "associate")
        ),
    )
    adapter.problems.clear()
    base = msgspec.structs.replace(
        adapter.attestation(),
        hooks_present=plugin.REQUIRED_HOOKS,
        hooks_missing=(),
        problems=(),
        verified_release_id=RELEASE_ID,
    )
    attestation = msgspec.structs.replace(base, **changes)
    return encode_envelope(
        sign_struct(names.PAYLOAD_ATTESTATION, attestation, [state.key(principal)])
    )


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"hooks_missing": ("transform_llm_output",)}, "runtime_hook_missing"),
        ({"hooks_present": ("pre_tool_call",)}, "runtime_hook_missing"),
        ({"runtime_version": "0.20.0"}, "runtime_version_not_pinned"),
        (
            {"streaming": (StreamingSetting(surface="cli", enabled=True),)},
            "runtime_streaming_enabled",
        ),
        ({"problems": ("smf_context_missing",)}, "smf_context_missing"),
    ],
    ids=["hook-missing", "hook-not-present", "version", "streaming", "adapter-problem"],
)
async def test_gate_rejects_an_unfit_attestation_and_then_the_runtime(
    hermes_state: StateDir, clock: Clock, changes: dict[str, Any], reason: str
) -> None:
    desk = AttestationDesk(
        required=load_attestation_requirements(hermes_state),
        registry=lambda: load_registry(hermes_state.registry),
        clock=clock,
        release_id=lambda: RELEASE_ID,
    )
    good = msgspec.json.decode(
        await desk.handle(_signed(hermes_state, HERMES_PRINCIPAL, issued_at_ms=clock.now)),
        type=AttestationAck,
    )
    assert good.accepted, good
    clock.now += 1
    bad = _signed(hermes_state, HERMES_PRINCIPAL, issued_at_ms=clock.now, **changes)
    ack = msgspec.json.decode(await desk.handle(bad), type=AttestationAck)
    assert not ack.accepted
    assert reason in ack.reason_codes
    proposal = ProposalClient(
        None,  # type: ignore[arg-type]
        hermes_state.key(HERMES_PRINCIPAL),
        HERMES_RUNTIME_ID,
        PIN,
        "smf-hermes-adapter",
        gate_keys={},  # builds only: nothing is sent
    ).build(
        native_tool="read_file",
        arguments={},
        actor=actor("associate-ann", "associate"),
        facts=DataFacts(),
    )
    assert desk.admit(proposal) == "runtime_attestation_rejected"


async def test_gate_refuses_replayed_stale_and_malformed_attestations(
    hermes_state: StateDir, clock: Clock
) -> None:
    desk = AttestationDesk(
        required=load_attestation_requirements(hermes_state),
        registry=lambda: load_registry(hermes_state.registry),
        clock=clock,
        release_id=lambda: RELEASE_ID,
    )

    async def reasons(data: bytes) -> tuple[str, ...]:
        return msgspec.json.decode(await desk.handle(data), type=AttestationAck).reason_codes

    hooks = {"hooks_present": plugin.REQUIRED_HOOKS}
    first = _signed(hermes_state, HERMES_PRINCIPAL, issued_at_ms=clock.now, **hooks)
    older = _signed(hermes_state, HERMES_PRINCIPAL, issued_at_ms=clock.now - 1000, **hooks)
    assert await reasons(first) == ()
    assert await reasons(older) == ("attestation_replayed",)
    ancient = _signed(
        hermes_state, HERMES_PRINCIPAL, issued_at_ms=clock.now - 10 * 60 * 1000, **hooks
    )
    assert await reasons(ancient) == ("stale_attestation",)
    assert await reasons(b"not an envelope") == ("bad_signature",)
    unknown_key = _signed(hermes_state, "nobody-registered", **hooks)
    assert await reasons(unknown_key) == ("unknown_signer",)


async def test_the_gate_holds_a_bounded_number_of_processes_each_to_its_lease(
    hermes_state: StateDir, clock: Clock
) -> None:
    """``AttestationDesk.admit_instance``: the oldest of more than ``MAX_INSTANCES``
    attested processes is forgotten (and refused: fails closed), and a process whose
    own attestation is older than the lease is refused although a newer process of the
    same runtime keeps the runtime standing."""
    desk = AttestationDesk(
        required=load_attestation_requirements(hermes_state),
        registry=lambda: load_registry(hermes_state.registry),
        clock=clock,
        release_id=lambda: RELEASE_ID,
    )
    key = hermes_state.key(HERMES_PRINCIPAL)
    hooks = {"hooks_present": plugin.REQUIRED_HOOKS}

    def sealed(instance: str) -> str:
        return seal_instance_proof(
            InstanceProof(
                schema="smf.instance-proof/1",
                runtime_id=HERMES_RUNTIME_ID,
                instance_id=instance,
                issued_at_ms=clock.now,
                nonce=new_proof_nonce(),
            ),
            key,
        )

    def admitted(instance: str) -> str | None:
        reason, held = desk.standing(HERMES_RUNTIME_ID)
        assert reason is None
        assert held is not None
        return desk.admit_instance(HERMES_RUNTIME_ID, held, sealed(instance))[0]

    instances = [new_instance_id() for _ in range(MAX_INSTANCES + 1)]
    issued: list[int] = []
    for instance in instances:
        clock.now += 1
        issued.append(clock.now)
        data = _signed(
            hermes_state, HERMES_PRINCIPAL, issued_at_ms=clock.now, instance_id=instance, **hooks
        )
        ack = msgspec.json.decode(await desk.handle(data), type=AttestationAck)
        assert ack.accepted, ack
    assert admitted(instances[0]) == "runtime_instance_not_attested"  # forgotten
    assert admitted(instances[1]) is None
    assert admitted(instances[-1]) is None
    lease = load_attestation_requirements(hermes_state)[HERMES_RUNTIME_ID].lease_ms
    clock.now = issued[1] + lease + 1  # instances[1] is just past its lease, the last not
    assert admitted(instances[1]) == "runtime_instance_not_attested"
    assert admitted(instances[-1]) is None


def test_a_proof_that_cannot_be_sealed_is_left_out_never_raised(
    hermes_state: StateDir,
    context_file: Path,
    adapters: list[plugin.HermesAdapter],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A raising middleware is skipped by Hermes (the request goes without a proof and
    the gateway refuses it); ours returns None instead of raising."""
    adapter = make_adapter(adapters, env_for(hermes_state, "nats://127.0.0.1:1", context_file))

    def broken(*_args: Any) -> str:
        raise RuntimeError("no signer")

    monkeypatch.setattr(
        "smf_assurance.adapters.hermes.hooks.model_request.seal_instance_proof", broken
    )
    assert adapter.llm_request(request={"messages": []}) is None


def test_no_tool_call_may_touch_the_adapters_own_files(tmp_path: Path) -> None:
    """The runtime's key must not reach the model through ``read_file`` or any tool."""
    keys = tmp_path / "state" / "keys"
    keys.mkdir(parents=True)
    key = keys / "hermes-runtime.key"
    key.write_text("seed")
    (tmp_path / "link").symlink_to(keys)
    protected = mapping.Protected.of((str(key), ""), (str(tmp_path / "trust-root.json"),))
    cwd = str(tmp_path)

    def refused(tool: str, arguments: dict[str, Any]) -> bool:
        try:
            mapping.check_protected(tool, arguments, protected, cwd, parse_none)
        except mapping.MappingError as exc:
            return exc.reason_code == "credential_access"
        return False

    assert refused("read_file", {"path": str(key)})
    assert refused("read_file", {"path": "state/keys/hermes-runtime.key"})
    assert refused("read_file", {"path": "link/hermes-runtime.key"})  # through a symlink
    assert refused("write_file", {"path": "trust-root.json", "content": "{}"})
    assert refused("search_files", {"path": "state", "pattern": "seed"})  # a folder holding it
    assert refused("search_files", {"pattern": "seed"})  # no path: the working folder
    assert refused("patch", {"patch": "*** Update File: link/hermes-runtime.key\n@@\n-a\n+b"})
    assert refused("terminal", {"command": "cat state/keys/hermes-runtime.key | base64"})
    assert refused("execute_code", {"code": f"print(open({str(key)!r}).read())"})
    assert refused("delegate_task", {"tasks": [{"goal": "read hermes-runtime.key"}]})
    assert not refused("read_file", {"path": "state/notes.txt"})
    assert not refused("search_files", {"path": "state/keys/other", "pattern": "x"})
    assert not refused("terminal", {"command": "ls"})
    assert not mapping.Protected.of(("", ""), ()).paths


def test_the_adapters_files_come_from_its_own_settings(tmp_path: Path) -> None:
    env = {
        "SMF_RUNTIME_KEY": str(tmp_path / "k.key"),
        "SMF_BUS_CREDENTIAL": str(tmp_path / "k.nkey"),
        "SMF_RELEASE_TRUST_ROOT": str(tmp_path / "root.json"),
        "SMF_CONTEXT_FILE": str(tmp_path / "context.json"),
        "HERMES_HOME": str(tmp_path / "home"),
    }
    protected = protected_files(env)
    for name in ("k.key", "k.nkey", "root.json", "context.json", "home/config.yaml", "home/.env"):
        assert str(tmp_path / name) in protected.paths
    assert protected.names == ("k.key", "k.nkey")
    # Without HERMES_HOME, Hermes's default home under HOME.
    default = protected_files({"HOME": str(tmp_path)})
    assert str(tmp_path / ".hermes" / "config.yaml") in default.paths
