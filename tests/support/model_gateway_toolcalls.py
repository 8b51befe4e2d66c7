"""The fixtures, builders and constants of tests/bus/test_model_gateway_toolcalls.py
that other test modules use too: here, so that no test module imports another."""

from __future__ import annotations

import io
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import msgspec
import nats
import pytest

from smf_assurance.adapters.client import ProposalClient
from smf_assurance.gateway.assembly import start_model_gateway
from smf_assurance.gateway.server import (
    GatewaySettings,
)
from smf_assurance.ops.local.defaults import OPERATOR
from smf_assurance.ops.local.model_gateway import (
    gateway_config,
    provision_gateway_runtime,
    set_upstream,
)
from smf_assurance.ops.local.stack import start_stack
from smf_assurance.ops.local.state import StateDir, provision_demo
from smf_assurance.ops.runtimes.provision import provision_runtime
from smf_assurance.pipeline.stores.ledger_audit import export_jsonl
from smf_assurance.subjects.messages import Verdict
from smf_assurance.subjects.model_gateway import GatewayClear, GatewayCleared
from smf_assurance.subjects.names import GATEWAY_CLEAR
from smf_assurance.subjects.registry import load_registry
from smf_tools.fake_model import FakeModel, Reply
from tests.support.model_gateway import (
    ACTOR,
    CLEAN,
    PIN,
    TERMINAL,
    World,
    chat,
    sse_text,
)

__all__ = [
    "REFUSED_BY_CHECK",
    "STOPPED",
    "TOOLS",
    "TOOLS_ID",
    "UNGATED",
    "clear",
    "emitted_call",
    "emitted_with",
    "ledger_entries",
    "propose",
    "tool_call_world",
    "with_result",
]

TOOLS_ID = "gw-tools"


TOOLS = "gw-tools-runtime"


LOOSE_ID = "gw-loose"


LOOSE = "gw-loose-runtime"


UNCHECKED_ID = "gw-unchecked"


UNCHECKED = "gw-unchecked-runtime"


HERMES_ID = "gw-hermes"


HERMES = "gw-hermes-runtime"


UNGATED = ["ungated_tool_result", "model_request_refused"]


STOPPED = "runtime_stopped_ungated_tool_result"


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    async with tool_call_world(tmp_path) as built:
        yield built


@asynccontextmanager
async def tool_call_world(tmp_path: Path) -> AsyncIterator[World]:
    """Four runtimes the gateway serves: one with tool-call accounting whose runtime
    checks arguments against the offered schema (as OpenClaw does), one with accounting
    whose runtime does not, one with accounting whose runtime refuses a turn whose
    arguments are not JSON whole (as Hermes: ``runtime add --kind hermes``), and one
    without accounting."""
    state = StateDir(tmp_path / "state")
    provision_demo(state)
    provision_runtime(state, TOOLS, TOOLS_ID, runtime_pin=PIN, require_release=False)
    provision_runtime(state, LOOSE, LOOSE_ID, runtime_pin=PIN, require_release=False)
    provision_runtime(state, UNCHECKED, UNCHECKED_ID, runtime_pin=PIN, require_release=False)
    provision_runtime(state, HERMES, HERMES_ID, runtime_pin=PIN, require_release=False)
    model = await FakeModel().start()
    set_upstream(state, model.url, "local-model")
    common: dict[str, Any] = {
        "adapter_id": "smf-hermes-adapter",
        "actor": ACTOR,
        "destination": TERMINAL,
        "facts": CLEAN,
    }
    tokens = {
        TOOLS_ID: provision_gateway_runtime(state, TOOLS_ID, checks_tool_arguments=True, **common),
        LOOSE_ID: provision_gateway_runtime(state, LOOSE_ID, account_tool_calls=False, **common),
        UNCHECKED_ID: provision_gateway_runtime(state, UNCHECKED_ID, **common),
        HERMES_ID: provision_gateway_runtime(
            state, HERMES_ID, refuses_invalid_json_turns=True, **common
        ),
    }
    stack = await start_stack(state, with_connectors=False)
    # a long admission cache: a stop must end the gateway's cached admission itself
    settings = GatewaySettings(upstream_read_s=5.0, admission_cache_ms=60_000)
    gateway = await start_model_gateway(gateway_config(state, stack.url, settings=settings))
    try:
        yield World(state, stack, model, gateway, tokens, [])
    finally:
        await gateway.close()
        await stack.stop()
        await model.stop()


async def propose(
    world: World,
    principal: str,
    runtime_id: str,
    call_id: str | None,
    version: str = PIN,
    *,
    refused_locally: str | None = None,
) -> Verdict:
    credential = world.state.existing_credential(principal)
    assert credential is not None
    nc = await nats.connect(world.stack.url, **credential.connect_options())
    try:
        client = ProposalClient(
            nc,
            world.key(principal),
            runtime_id,
            version,
            "smf-hermes-adapter",
            gate_keys=load_registry(world.state.registry).trusted("gate"),
        )
        proposal = client.build(
            native_tool="read_file",
            arguments={} if refused_locally else {"path": "notes.txt"},
            actor=ACTOR,
            facts=CLEAN,
            tool_call_id=call_id,
            refused_locally=refused_locally,
        )
        return await client.propose(proposal)
    finally:
        await nc.close()


READ_FILE_TOOL = {
    "type": "function",
    "function": {
        "name": "read_file",
        "description": "Read a file.",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
    },
}


def offering(*tools: dict[str, Any]) -> bytes:
    """A request that offers the model these tools (as every runtime's request does)."""
    request = {
        "model": "fake-model",
        "stream": True,
        "messages": [{"role": "user", "content": "Read my notes."}],
        "tools": list(tools),
    }
    return json.dumps(request).encode()


async def emitted_call(world: World, runtime_id: str, *, offered: bool = True) -> str:
    """Let the model emit one ``read_file`` call, in answer to a request that offers that
    tool (or, ``offered=False``, one that offers none); the id the runtime gets back."""
    world.model.queue.append(
        Reply(content="", tool_calls=(("call_up1", "read_file", '{"path": "notes.txt"}'),))
    )
    status, data = await chat(
        world, runtime_id, body=offering(READ_FILE_TOOL) if offered else offering()
    )
    assert status == 200
    _, calls, finishes = sse_text(data)
    assert finishes == ["tool_calls"]
    assert len(calls) == 1
    call_id = calls[0]["id"]
    assert isinstance(call_id, str)
    return call_id


REFUSED_BY_CHECK = 'Validation failed for tool "read_file":\n  - path: must be string'
"""The result OpenClaw gives a call whose arguments fail the tool's schema (its form)."""


def with_result(call_id: str, content: str = "Hearing on Monday.") -> bytes:
    messages = [
        {"role": "user", "content": "Read my notes."},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": "read_file", "arguments": '{"path": "notes.txt"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": call_id, "content": content},
    ]
    return json.dumps({"model": "fake-model", "stream": True, "messages": messages}).encode()


async def clear(world: World, runtime_id: str) -> GatewayCleared:
    credential = world.state.existing_credential(OPERATOR)
    assert credential is not None
    nc = await nats.connect(world.stack.url, **credential.connect_options())
    try:
        ask = GatewayClear(schema="smf.gateway-clear/1", runtime_id=runtime_id)
        reply = await nc.request(GATEWAY_CLEAR, msgspec.json.encode(ask), timeout=5)
    finally:
        await nc.close()
    return msgspec.json.decode(reply.data, type=GatewayCleared)


def ledger_entries(state: StateDir, entry_hash: str | None = None) -> list[dict[str, Any]]:
    """The ledger's entries as its export prints them (with ``entry_hash``), or the one
    with that hash."""
    out = io.StringIO()
    export_jsonl(state.ledger, out)
    entries = [json.loads(line) for line in out.getvalue().splitlines()]
    return [e for e in entries if entry_hash is None or e["entry_hash"] == entry_hash]


STRICT_READ_FILE = {
    "type": "function",
    "function": {
        "name": "read_file",
        "description": "Read a file.",
        "parameters": {
            "type": "object",
            "properties": {"path": {"type": "string"}, "limit": {"type": "integer"}},
            "required": ["path"],
            "additionalProperties": False,
        },
    },
}


async def emitted_with(world: World, arguments: str, runtime_id: str = TOOLS_ID) -> str:
    """Let the model emit one ``read_file`` call with these arguments, in answer to a
    request that offers ``read_file`` with a schema (``STRICT_READ_FILE``)."""
    world.model.queue.append(Reply(content="", tool_calls=(("call_up2", "read_file", arguments),)))
    status, data = await chat(world, runtime_id, body=offering(STRICT_READ_FILE))
    assert status == 200
    _, calls, _ = sse_text(data)
    (call,) = calls
    assert call["function"]["arguments"] == arguments  # given to the runtime as emitted
    call_id = call["id"]
    assert isinstance(call_id, str)
    return call_id
