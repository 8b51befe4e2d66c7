"""A long-lived OpenClaw Gateway with an operator client on it, for tests/openclaw_harness.py.

One ``openclaw gateway run --port P --bind loopback --auth token --token T``
serves several turns (``openclaw agent`` without ``--local``, one session key
per turn), so a module pays for the Gateway's start once. Beside it runs an
operator client (``tests/support/openclaw_operator.mjs``: OpenClaw's own
``GatewayClient``, connected as ``openclaw tui`` connects) that writes every
event frame it receives to ``operator-events.jsonl`` in the Gateway's folder.

Nothing here decides anything: it starts, asks, waits for what can be
observed (the port listening, the client's hello, the client's terminal
``chat`` event of a turn) and stops, always by process group.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

OPERATOR_SCRIPT = Path(__file__).resolve().parent / "openclaw_operator.mjs"
HELLO_S = 60.0
REQUEST_S = 30.0
TERMINAL_CHAT_STATES = frozenset({"final", "error", "aborted"})
"""A ``chat`` event in one of these states ends a run for its session (protocol v4)."""


class OperatorClientError(RuntimeError):
    """The operator client did not connect, died, or a request of it failed."""


@dataclass
class OperatorClient:
    """``tests/support/openclaw_operator.mjs`` as a child process: requests on its stdin,
    answers and its hello on its stdout, events into a file."""

    proc: asyncio.subprocess.Process
    events: Path
    hello: dict[str, Any] = field(default_factory=dict)
    _answers: dict[str, asyncio.Future[dict[str, Any]]] = field(default_factory=dict)
    _hello: asyncio.Future[dict[str, Any]] | None = None
    _reader: asyncio.Task[None] | None = None
    _next_id: int = 0

    @classmethod
    async def start(
        cls,
        *,
        node: Path,
        package: Path,
        url: str,
        token: str,
        events: Path,
        env: dict[str, str],
        cwd: Path,
        stderr: Path,
    ) -> OperatorClient:
        config = {"package": str(package), "url": url, "token": token, "events": str(events)}
        with stderr.open("wb") as err:
            proc = await asyncio.create_subprocess_exec(
                str(node),
                str(OPERATOR_SCRIPT),
                json.dumps(config),
                cwd=cwd,
                env=env,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
                start_new_session=True,
            )
        client = cls(proc=proc, events=events)
        client._hello = asyncio.get_running_loop().create_future()
        client._reader = asyncio.create_task(client._read())
        try:
            client.hello = await asyncio.wait_for(asyncio.shield(client._hello), HELLO_S)
        except TimeoutError as exc:
            await client.stop()
            raise OperatorClientError(f"no hello from the operator client in {HELLO_S}s") from exc
        return client

    async def _read(self) -> None:
        assert self.proc.stdout is not None
        while line := await self.proc.stdout.readline():
            try:
                said = json.loads(line)
            except ValueError:
                continue  # not one of the client's own lines (a stray print)
            if "hello" in said or "connect_error" in said:
                if self._hello is not None and not self._hello.done():
                    if "hello" in said:
                        self._hello.set_result(said["hello"])
                    else:
                        self._hello.set_exception(OperatorClientError(said["connect_error"]))
            elif "id" in said and (waiting := self._answers.pop(str(said["id"]), None)):
                waiting.set_result(said)
        for waiting in [*self._answers.values(), self._hello]:
            if waiting is not None and not waiting.done():
                waiting.set_exception(OperatorClientError("the operator client exited"))

    async def request(self, method: str, params: dict[str, Any]) -> Any:
        """One Gateway RPC through the client; its payload, or OperatorClientError."""
        assert self.proc.stdin is not None
        self._next_id += 1
        ident = str(self._next_id)
        answer = self._answers[ident] = asyncio.get_running_loop().create_future()
        line = json.dumps({"id": ident, "method": method, "params": params}) + "\n"
        self.proc.stdin.write(line.encode())
        await self.proc.stdin.drain()
        said = await asyncio.wait_for(answer, REQUEST_S)
        if not said["ok"]:
            raise OperatorClientError(f"{method}: {said['error']}")
        return said["payload"]

    def count(self) -> int:
        """How many lines the client has written so far (an offset for ``since``)."""
        return len(self.lines())

    def lines(self) -> list[dict[str, Any]]:
        if not self.events.exists():
            return []
        text = self.events.read_text(errors="replace")
        return [json.loads(line) for line in text.splitlines() if line.strip()]

    async def wait_for_run_end(self, session_key: str, since: int, seconds: float) -> bool:
        """Whether a terminal ``chat`` event for ``session_key`` arrived (after line
        ``since``) within ``seconds``."""
        deadline = time.monotonic() + seconds
        while True:
            for line in self.lines()[since:]:
                frame = line.get("event") or {}
                payload = frame.get("payload") or {}
                if (
                    frame.get("event") == "chat"
                    and payload.get("sessionKey") == session_key
                    and payload.get("state") in TERMINAL_CHAT_STATES
                ):
                    return True
            if time.monotonic() >= deadline or self.proc.returncode is not None:
                return False
            await asyncio.sleep(0.1)

    async def wait_for_session_phase(
        self, session_key: str, phase: str, since: int, seconds: float
    ) -> bool:
        """Whether a ``sessions.changed`` event of ``session_key`` in ``phase`` (``start``,
        ``end``) arrived (after line ``since``) within ``seconds``: the session list the
        client subscribed to reports every session's runs, a channel's included."""
        deadline = time.monotonic() + seconds
        while True:
            for line in self.lines()[since:]:
                frame = line.get("event") or {}
                payload = frame.get("payload") or {}
                if (
                    frame.get("event") == "sessions.changed"
                    and payload.get("sessionKey") == session_key
                    and payload.get("phase") == phase
                ):
                    return True
            if time.monotonic() >= deadline or self.proc.returncode is not None:
                return False
            await asyncio.sleep(0.1)

    async def stop(self) -> None:
        await stop_group(self.proc, grace_s=10)
        if self._reader is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._reader, 5)


@dataclass
class HostedGateway:
    """One running ``openclaw gateway run`` and the operator client on it."""

    name: str
    root: Path
    port: int
    env: dict[str, str]
    proc: asyncio.subprocess.Process
    operator: OperatorClient
    started_s: float

    def log(self) -> str:
        return (self.root / "gateway.log").read_text(errors="replace")

    def loaded_plugins(self) -> str:
        """The Gateway's ``http server listening (N plugins: ...)`` line, or ''."""
        lines = [line for line in self.log().splitlines() if "plugins:" in line]
        return lines[0] if lines else ""

    async def stop(self) -> int | None:
        await self.operator.stop()
        await stop_group(self.proc, grace_s=20)
        return self.proc.returncode


async def stop_group(proc: asyncio.subprocess.Process, grace_s: float) -> None:
    """SIGTERM the process group, SIGKILL it if it is still there after ``grace_s``."""
    if proc.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            await asyncio.wait_for(proc.wait(), grace_s)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            await proc.wait()
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
