"""The fixtures, builders and constants of tests/runtimes/test_openclaw_plugin.py
that other test modules use too: here, so that no test module imports another."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, Final

import pytest

from smf_assurance.ops.local.state import DEMO_TENANT, StateDir, provision_demo
from smf_assurance.ops.runtimes.provision import (
    OPENCLAW_RUNTIME_ID,
    provision_openclaw_runtime,
)
from tests.support.clocks import OffsetClock
from tests.support.openclaw_conformance import build_plugin

__all__ = ["CLOSE_TIMEOUT_S", "clock", "driver", "node_bin", "openclaw_state", "plugin_config"]

ROOT: Final = Path(__file__).resolve().parents[2]


PLUGIN: Final = ROOT / "smf_assurance" / "adapters" / "openclaw"


DRIVER: Final = PLUGIN / "test" / "driver.mjs"


CLOSE_TIMEOUT_S: Final = 15.0


CONTEXT: Final = {
    "schema": "smf.openclaw-context/1",
    "actor": {
        "domain": "litigation",
        "tenant_id": DEMO_TENANT,
        "organization_id": "org-acme-llp",
        "matter_id": "matter-2026-0042",
        "actor_id": "paralegal-pat",
        "actor_roles": ["paralegal"],
        "governing_laws": ["US-NY"],
    },
    "facts": {
        "classification": "confidential",
        "injection_taint": "clear",
        "redaction_status": "none",
    },
}


@pytest.fixture(scope="module")
def node_bin() -> str:
    """The pinned Node 24 bin dir; builds dist/ first (scripts/build.sh, idempotent, locked)."""
    build_plugin()
    return subprocess.run(
        [str(PLUGIN / "scripts" / "node.sh")], check=True, capture_output=True, text=True
    ).stdout.strip()


@pytest.fixture
def openclaw_state(tmp_path: Path) -> StateDir:
    openclaw_state = StateDir(tmp_path / "state")
    provision_demo(openclaw_state)
    provision_openclaw_runtime(openclaw_state)
    return openclaw_state


@pytest.fixture
def clock() -> OffsetClock:
    return OffsetClock()


def plugin_config(state: StateDir, url: str, **overrides: Any) -> dict[str, Any]:
    config: dict[str, Any] = {
        "natsUrl": url,
        "runtimeId": OPENCLAW_RUNTIME_ID,
        "keyFile": str(state.key_path("openclaw-runtime")),
        "credentialFile": str(state.bus_credential_path("openclaw-runtime")),
        "trustRootFile": str(state.trust_root),
        "context": CONTEXT,
        "gateTimeoutMs": 5000,
        "holdTimeoutMs": 60_000,
    }
    config.update(overrides)
    return config


class Driver:
    """One Node 24 process holding the plugin; commands are answered by id."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.next_id = 0
        self.pending: dict[int, asyncio.Future[Any]] = {}
        self.stderr: list[str] = []
        self.reader = asyncio.create_task(self._read())
        self.errors = asyncio.create_task(self._read_stderr())

    async def _read(self) -> None:
        assert self.proc.stdout is not None
        while line := await self.proc.stdout.readline():
            message = json.loads(line)
            future = self.pending.pop(message["id"], None)
            if future is None or future.done():
                continue
            if "error" in message:
                future.set_exception(AssertionError(f"driver error: {message['error']}"))
            else:
                future.set_result(message["result"])

    async def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        while line := await self.proc.stderr.readline():
            self.stderr.append(line.decode(errors="replace").rstrip())

    def start(self, op: str, **fields: Any) -> asyncio.Future[Any]:
        assert self.proc.stdin is not None
        self.next_id += 1
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.pending[self.next_id] = future
        self.proc.stdin.write(json.dumps({"id": self.next_id, "op": op, **fields}).encode() + b"\n")
        return future

    async def call(self, op: str, timeout: float = 30.0, **fields: Any) -> Any:
        return await asyncio.wait_for(self.start(op, **fields), timeout)

    async def before(self, tool: str, params: dict[str, Any], call_id: str, **kw: Any) -> Any:
        event = {"toolName": tool, "params": params, "runId": "run-1", "toolCallId": call_id}
        ctx = {"sessionKey": "agent:main:main", "runId": "run-1", "toolCallId": call_id}
        return await self.call("before", event=event, ctx=ctx, **kw)

    async def after(self, tool: str, params: dict[str, Any], call_id: str, **extra: Any) -> None:
        event = {"toolName": tool, "params": params, "runId": "run-1", "toolCallId": call_id}
        await self.call("after", event={**event, **extra}, ctx={"runId": "run-1"})


@contextlib.asynccontextmanager
async def driver(
    node_bin: str, config: dict[str, Any], version: str = "2026.9.6"
) -> AsyncIterator[Driver]:
    proc = await asyncio.create_subprocess_exec(
        str(Path(node_bin) / "node"),
        str(DRIVER),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "PATH": f"{node_bin}:{os.environ.get('PATH', '')}"},
    )
    drv = Driver(proc)
    try:
        await drv.call("register", config=config, runtimeVersion=version)
        yield drv
    finally:
        with contextlib.suppress(Exception):
            await drv.call("close", timeout=5.0)
        try:
            await asyncio.wait_for(proc.wait(), 5.0)
        except TimeoutError:
            proc.kill()
            await proc.wait()
        drv.reader.cancel()
        drv.errors.cancel()
