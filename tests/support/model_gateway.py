"""The fixtures, builders and constants of tests/bus/test_model_gateway.py
that other test modules use too: here, so that no test module imports another."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import ssl
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import nats
import pytest
from nats.aio.client import Client

from smf_assurance.gateway.assembly import RunningModelGateway, start_model_gateway
from smf_assurance.gateway.server import GatewaySettings
from smf_assurance.ops.local.defaults import OPERATOR
from smf_assurance.ops.local.model_gateway import (
    gateway_config,
    provision_gateway_runtime,
    set_upstream,
)
from smf_assurance.ops.local.stack import Stack, start_stack
from smf_assurance.ops.local.state import RELEASE_SIGNER, StateDir, provision_demo
from smf_assurance.ops.runtimes.provision import provision_runtime
from smf_assurance.pipeline.stores.ledger_audit import export_jsonl
from smf_assurance.subjects import names
from smf_assurance.subjects.attestation import AttestationAck
from smf_assurance.subjects.clock import wall_clock_ms
from smf_assurance.subjects.keys import SigningKey
from smf_assurance.subjects.messages import ProposedDestination
from smf_assurance.subjects.model_gateway import GatewayAdmit, new_instance_id
from smf_tools.bench import gateway as scripted
from smf_tools.bench.gateway import attest as scripted_attest
from smf_tools.fake_model import FakeModel, api_key_of

__all__ = [
    "ACTOR",
    "BOUND",
    "BOUND_ID",
    "CLEAN",
    "OTHER",
    "OTHER_ID",
    "PIN",
    "PRINCIPAL",
    "RUNTIME_ID",
    "TERMINAL",
    "World",
    "attest",
    "chat",
    "decisions",
    "error_code",
    "gateway_world",
    "ledger_reasons",
    "sse_text",
]

PIN = "1.0.0"


RUNTIME_ID = "gw-demo"


PRINCIPAL = "gw-runtime"


OTHER_ID = "gw-other"


OTHER = "gw-other-runtime"


BOUND_ID = "gw-bound"


BOUND = "gw-bound-runtime"
"""Provisioned ``instance_bound``: served only for a proof of an attested process."""


ACTOR = scripted.ACTOR


CLIENT_CHAT = ProposedDestination(address="telegram:client-chat", locality="external")


TERMINAL = ProposedDestination(address="cli:operator", locality="internal")


CLEAN = scripted.FACTS


@dataclass
class World:
    state: StateDir
    stack: Stack
    model: FakeModel
    gateway: RunningModelGateway
    tokens: dict[str, str]
    tap: list[str]

    def key(self, principal: str) -> SigningKey:
        return self.state.key(principal)


async def attest(
    world: World,
    principal: str,
    runtime_id: str,
    *,
    problems: tuple[str, ...] = (),
    age_ms: int = 0,
    instance_id: str | None = None,
) -> AttestationAck:
    return await scripted_attest(
        world.state,
        world.stack.url,
        principal,
        runtime_id,
        PIN,
        problems=problems,
        age_ms=age_ms,
        instance_id=instance_id,
    )


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    async with gateway_world(tmp_path) as made:
        yield made


@contextlib.asynccontextmanager
async def gateway_world(
    tmp_path: Path,
    *,
    api_key: bool = False,
    release: bool = True,
    clock: Callable[[], int] | None = None,
    admission_cache_ms: int | None = None,
    tls: ssl.SSLContext | None = None,
) -> AsyncIterator[World]:
    """A gate, the fake provider and the model gateway serving three runtimes; with
    ``api_key`` the provider requires a key that only the gateway's configuration names.
    Without ``release`` the gate starts with no verified release (none in its inbox and
    no key to sign one); ``clock`` is the gate's and the gateway's time; ``tls``: the
    gateway serves HTTPS with this server context."""
    state = StateDir(tmp_path / "state")
    provision_demo(state)
    provision_runtime(state, PRINCIPAL, RUNTIME_ID, runtime_pin=PIN, require_release=False)
    provision_runtime(state, OTHER, OTHER_ID, runtime_pin=PIN, require_release=False, lease_ms=1500)
    provision_runtime(
        state, BOUND, BOUND_ID, runtime_pin=PIN, require_release=False, instance_bound=True
    )
    key_file = tmp_path / "provider.api-key" if api_key else None
    model = await FakeModel(api_key=None if key_file is None else api_key_of(key_file)).start()
    set_upstream(state, model.url, "local-model", None if key_file is None else str(key_file))
    tokens = {
        RUNTIME_ID: provision_gateway_runtime(
            state,
            RUNTIME_ID,
            adapter_id="smf-hermes-adapter",
            actor=ACTOR,
            destination=CLIENT_CHAT,
            facts=CLEAN,
        ),
        OTHER_ID: provision_gateway_runtime(
            state,
            OTHER_ID,
            adapter_id="smf-hermes-adapter",
            actor=ACTOR,
            destination=TERMINAL,
            facts=CLEAN,
        ),
        BOUND_ID: provision_gateway_runtime(
            state,
            BOUND_ID,
            adapter_id="smf-hermes-adapter",
            actor=ACTOR,
            destination=TERMINAL,
            facts=CLEAN,
        ),
    }
    if not release:
        for path in state.release_inbox.iterdir():
            path.unlink()
        state.key_path(RELEASE_SIGNER).unlink()
    stack = await start_stack(state, with_connectors=False, clock=clock or wall_clock_ms)
    settings = GatewaySettings(upstream_read_s=1.0, max_body_bytes=256 * 1024)
    if admission_cache_ms is not None:
        settings = dataclasses.replace(settings, admission_cache_ms=admission_cache_ms)
    gateway = await start_model_gateway(
        gateway_config(state, stack.url, settings=settings, tls=tls)
    )
    if clock is not None:
        gateway.gateway.clock = clock
    credential = state.existing_credential(OPERATOR)
    assert credential is not None
    tap_nc: Client = await nats.connect(stack.url, **credential.connect_options())
    tap: list[str] = []

    async def record(msg: Any) -> None:
        tap.append(msg.subject)

    await tap_nc.subscribe(f"{names.EXECUTE_PREFIX}.>", cb=record)
    try:
        yield World(state, stack, model, gateway, tokens, tap)
    finally:
        await tap_nc.close()
        await gateway.close()
        await stack.stop()
        await model.stop()


async def chat(
    world: World,
    runtime_id: str | None = RUNTIME_ID,
    *,
    stream: bool = True,
    body: bytes | None = None,
    token: str | None = None,
    headers: dict[str, str] | None = None,
    trust: ssl.SSLContext | None = None,
) -> tuple[int, bytes]:
    """One completion request as a runtime sends it (``trust``: the client's TLS, for a
    gateway serving HTTPS)."""
    headers = {"Content-Type": "application/json", **(headers or {})}
    bearer = token if token is not None else (world.tokens[runtime_id] if runtime_id else None)
    if bearer is not None:
        headers["Authorization"] = f"Bearer {bearer}"
    payload = body
    if payload is None:
        request = {
            "model": "fake-model",
            "stream": stream,
            "messages": [{"role": "user", "content": "hi"}],
        }
        payload = json.dumps(request).encode()
    url = world.gateway.url + "/chat/completions"
    async with (
        aiohttp.ClientSession() as session,
        session.post(url, data=payload, headers=headers, ssl=trust or True) as resp,
    ):
        return resp.status, await resp.read()


def sse_text(data: bytes) -> tuple[str, list[dict[str, Any]], list[str]]:
    """The text, tool calls and finish reasons a runtime reads from the gateway's stream."""
    text = ""
    calls: list[dict[str, Any]] = []
    finishes: list[str] = []
    assert data.endswith(b"data: [DONE]\n\n")
    for line in data.split(b"\n"):
        if not line.startswith(b"data: ") or line == b"data: [DONE]":
            continue
        choice = json.loads(line[6:])["choices"][0]
        text += choice["delta"].get("content") or ""
        calls += choice["delta"].get("tool_calls") or []
        if choice["finish_reason"]:
            finishes.append(choice["finish_reason"])
    return text, calls, finishes


def ledger_reasons(state: StateDir) -> list[list[str]]:
    out = io.StringIO()
    export_jsonl(state.ledger, out)
    return [json.loads(line)["reason_codes"] for line in out.getvalue().splitlines()]


def error_code(data: bytes) -> str:
    code = json.loads(data)["error"]["code"]
    assert isinstance(code, str)
    return code


def decisions(state: StateDir) -> list[str]:
    """The dispositions of the gate's decision entries, in order (the ledger is
    written before any verdict is answered, so it is complete when a reply is)."""
    out = io.StringIO()
    export_jsonl(state.ledger, out)
    rows = [json.loads(line) for line in out.getvalue().splitlines()]
    return [r["disposition"] for r in rows if r["kind"] == "decision"]


def admit_question(
    runtime_id: str, issued_at_ms: int, instance_proof: str | None = None
) -> GatewayAdmit:
    """The model gateway's question to the gate for one internal request of
    ``runtime_id`` to the local provider, as the gateway asks it
    (``ModelGateway._admit``)."""
    return GatewayAdmit(
        schema="smf.gateway-admit/1",
        request_id="m-" + new_instance_id()[2:],
        runtime_id=runtime_id,
        tenant_id="tenant-acme",
        provider="local-model",
        classification="internal",
        issued_at_ms=issued_at_ms,
        instance_proof=instance_proof,
    )
