"""The fixtures, builders and constants of tests/runtimes/test_hermes_unit.py
that other test modules use too: here, so that no test module imports another."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import msgspec
import pytest

from smf_assurance.adapters.hermes import mapping, plugin
from smf_assurance.adapters.hermes.attestation import (
    with_observed_cli,
)
from smf_assurance.governance.releases import (
    latest_in_inbox,
    publish_to_bucket,
    unverified_manifest,
)
from smf_assurance.ops.demo.script import actor
from smf_assurance.ops.local.natsserver import EmbeddedNatsServer
from smf_assurance.ops.local.stack import gate_config
from smf_assurance.ops.local.state import StateDir
from smf_assurance.ops.runtimes.provision import (
    HERMES_PRINCIPAL,
    HERMES_RUNTIME_ID,
)
from smf_assurance.pipeline.assembly import RunningGate, start_gate
from smf_assurance.subjects.attestation import StreamingSetting
from tests.support.clocks import FrozenClock as Clock

__all__ = [
    "LEASE_MS",
    "PIN",
    "FakeHost",
    "adapters",
    "clock",
    "context_file",
    "env_for",
    "held_dir",
    "hermes",
    "hook",
    "make_adapter",
    "pre",
    "publish_active_release",
    "write_context",
]

PIN = "0.19.0"


LEASE_MS = 60_000
"""Shorter than the gate's proposal freshness (120 s), so a stale attestation is visible."""


ALL_OFF = (StreamingSetting(surface="cli", enabled=False),)


class FakeManager:
    def __init__(self) -> None:
        self._hooks: dict[str, list[Callable[..., Any]]] = {}
        self._middleware: dict[str, list[Callable[..., Any]]] = {}
        self._tools: dict[str, tuple[str, Callable[..., Any]]] = {}
        """Stands in for Hermes's tool registry: name -> (toolset, handler)."""


class FakeCtx:
    """What ``register(ctx)`` uses of Hermes's PluginContext."""

    def __init__(self, fail_on: str | None = None) -> None:
        self._manager = FakeManager()
        self.fail_on = fail_on

    def register_hook(self, name: str, callback: Callable[..., Any]) -> None:
        if name == self.fail_on:
            raise RuntimeError("register_hook exploded")
        self._manager._hooks.setdefault(name, []).append(callback)

    def register_middleware(self, kind: str, callback: Callable[..., Any]) -> None:
        self._manager._middleware.setdefault(kind, []).append(callback)

    def register_tool(self, name: str, toolset: str, **kwargs: Any) -> None:
        """Like Hermes's registry: a name held by another toolset is not replaced."""
        held = self._manager._tools.get(name)
        if held is None or held[0] == toolset:
            self._manager._tools[name] = (toolset, kwargs["handler"])


class FakeHost:
    def __init__(
        self,
        manager: FakeManager | None = None,
        version: str = PIN,
        streaming: tuple[StreamingSetting, ...] = ALL_OFF,
    ) -> None:
        self.manager = manager or FakeManager()
        self._version = version
        self._streaming = streaming

    def version(self) -> str:
        return self._version

    def hooks(self) -> Mapping[str, list[Callable[..., Any]]] | None:
        return self.manager._hooks

    def streaming(self) -> tuple[StreamingSetting, ...]:
        """As ``HermesHost`` composes it: the configured value, then the running CLI's."""
        return with_observed_cli(self._streaming, sys.modules.get("cli"))

    def coerce(self, tool: str, args: dict[str, Any]) -> dict[str, Any]:
        return args

    def patch_targets(self, text: str) -> list[str]:
        """No Hermes here: the plain ``*** Update File: x`` headers stand in for its
        parser (the real one is checked against Hermes in test_hermes_patch.py)."""
        return [
            line[len("*** Update File: ") :].strip()
            for line in text.splitlines()
            if line.startswith("*** Update File: ")
        ]

    def tool_handler(self, name: str) -> Callable[..., Any] | None:
        held = self.manager._tools.get(name)
        return None if held is None else held[1]


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
async def gate(
    hermes_state: StateDir, nats_server: EmbeddedNatsServer, clock: Clock
) -> AsyncIterator[RunningGate]:
    running = await start_gate(
        gate_config(
            state=hermes_state,
            nats_url=nats_server.url,
            co_located=True,
            clock=clock,
            sweep_seconds=3600,
        )
    )
    await publish_active_release(running, hermes_state)
    yield running
    try:
        await asyncio.wait_for(asyncio.shield(running.close()), 15)
    except TimeoutError:
        # A hang at shutdown must fail this test loudly, with what was still pending.
        for task in asyncio.all_tasks():
            task.print_stack(file=sys.stderr)
        raise


async def publish_active_release(running: RunningGate, state: StateDir) -> str:
    """Put the gate's active release into the SMF_RELEASES bucket, where the adapter
    reads it (the demo gate takes it from its state directory's inbox)."""
    bundle = latest_in_inbox(state.release_inbox)
    assert bundle is not None
    release_id = unverified_manifest(bundle).release_id
    assert running.releases is not None
    assert running.releases.active is not None
    assert running.releases.active.release_id == release_id
    await publish_to_bucket(running.js, bundle)
    return release_id


@pytest.fixture
def held_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "matters" / "held"
    folder.mkdir(parents=True)
    return folder


@pytest.fixture
def context_file(tmp_path: Path, held_dir: Path) -> Path:
    path = tmp_path / "context.json"
    write_context(path, held_dir)
    return path


def write_context(path: Path, held_dir: Path, **overrides: Any) -> None:
    document: dict[str, Any] = {
        "schema": mapping.CONTEXT_SCHEMA,
        "actor": msgspec.to_builtins(actor("associate-ann", "associate")),
        "facts": {
            "classification": "internal",
            "injection_taint": "clear",
            "redaction_status": "none",
        },
        "legal_hold_paths": [str(held_dir)],
        "internal_targets": ["telegram:firm-partners"],
        "reply": {"destination": {"address": "cli:operator", "locality": "internal"}},
    }
    document.update(overrides)
    path.write_text(json.dumps(document))


def env_for(state: StateDir, url: str, context: Path, **extra: str) -> dict[str, str]:
    return {
        "SMF_NATS_URL": url,
        "SMF_RUNTIME_KEY": str(state.key_path(HERMES_PRINCIPAL)),
        "SMF_RUNTIME_ID": HERMES_RUNTIME_ID,
        "SMF_BUS_CREDENTIAL": str(state.bus_credential_path(HERMES_PRINCIPAL)),
        "SMF_CONTEXT_FILE": str(context),
        "SMF_RELEASE_TRUST_ROOT": str(state.trust_root),
        "SMF_GATE_TIMEOUT": "2",
        **extra,
    }


@pytest.fixture
def adapters() -> Iterator[list[plugin.HermesAdapter]]:
    made: list[plugin.HermesAdapter] = []
    yield made
    for adapter in made:
        if adapter.bridge is not None:
            adapter.bridge.stop(1.0)


def make_adapter(
    made: list[plugin.HermesAdapter],
    env: Mapping[str, str],
    host: FakeHost | None = None,
    **options: Any,
) -> plugin.HermesAdapter:
    """Build and register an adapter against a fake plugin manager, as register() does."""
    host = host or FakeHost()
    adapter = plugin.build_adapter(host, env, **options)
    for name, callback in adapter.callbacks().items():
        host.manager._hooks.setdefault(name, []).append(callback)
    ctx = FakeCtx()
    ctx._manager = host.manager
    plugin.register_connector_tools(ctx, adapter)
    adapter.start()
    made.append(adapter)
    return adapter


@pytest.fixture
def hermes(
    gate: RunningGate,
    hermes_state: StateDir,
    nats_server: EmbeddedNatsServer,
    context_file: Path,
    adapters: list[plugin.HermesAdapter],
) -> plugin.HermesAdapter:
    return make_adapter(adapters, env_for(hermes_state, nats_server.url, context_file))


async def hook(fn: Callable[..., Any], **kwargs: Any) -> Any:
    """Call a sync hook off the event loop, as Hermes's threads do."""
    return await asyncio.to_thread(lambda: fn(**kwargs))


def pre(tool: str, args: Any, **extra: Any) -> dict[str, Any]:
    return {
        "tool_name": tool,
        "args": args,
        "task_id": "t-1",
        "session_id": extra.pop("session_id", "s-1"),
        "tool_call_id": extra.pop("tool_call_id", "call-1"),
        "turn_id": "turn-1",
        "telemetry_schema_version": "hermes.observer.v1",
        **extra,
    }
