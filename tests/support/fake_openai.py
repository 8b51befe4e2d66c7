"""A scripted OpenAI-compatible model server on 127.0.0.1, for driving a real runtime offline.

RUNTIMES.md, "Offline driving": the runtime always streams from the
provider (SSE) and asks ``GET /v1/models`` for metadata. The script is keyed
by a scenario tag (``SCENARIO:<name>``) found in the conversation's user
messages, so one server serves a whole suite and a subagent (whose goal
text carries its own tag) gets its own script.

A script is ``{"calls": [{"name": ..., "arguments": {...}}, ...], "final": str}``
(optionally ``"final_delay": seconds``; ``"final_after": "<scenario>"`` holds the
final answer until that scenario's conversation got its own final answer, and
``"final_after_file": path`` until that file exists, each at most
``WAIT_CAP_S``: background work finishes inside the turn, waited for by its
effect; ``"final_chunks": n`` with ``"chunk_delay_s": seconds`` streams the final
answer in ``n`` content deltas that far apart, as a provider streams a long reply,
so a runtime's live preview has partial text to show). A call's string argument
may hold ``{{result:REGEX}}``, replaced by the
first group of REGEX's first match in the tool results shown so far (a process
session id a previous call returned). A call may carry ``"content": str``:
assistant text sent in the same message as that tool call (the interim text
a runtime may show while the tool runs); without it the message has none. A call
may carry ``"raw_arguments": str`` instead of ``"arguments"``: sent as they are, not
encoded (arguments that are not JSON, as a model sometimes emits).
The n-th request of a conversation that offers tools gets ``calls[n]`` as a
tool call, where n is the number of tool results already in it; once the
calls are used up (or when no tools are offered), the reply is ``final`` as
plain text. Every request is recorded (scenario, the tool results the model
was shown), so a test can read what the runtime told the model.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

_TAG = re.compile(r"SCENARIO:([A-Za-z0-9_-]+)")
PACE = "_pace"
"""Key of an answer's streaming plan (deltas, seconds between them), taken off the
message before it is sent."""
_FROM_RESULT = re.compile(r"\{\{result:(.+?)\}\}")
WAIT_CAP_S = 60.0


@dataclass
class Recorded:
    scenario: str
    tool_results: list[str]
    answered: str
    offered: list[str] = field(default_factory=list)
    """The names of the tools the request offered the model (``tools[].function.name``)."""
    headers: dict[str, str] = field(default_factory=dict)
    """The request's headers named in ``Scripts.record_headers`` (lowercase names), and
    no other: nothing is kept unless a test asks for it by name."""
    in_system: list[str] = field(default_factory=list)
    """Which of ``Scripts.system_needles`` the request's system messages held (a context
    file the runtime put into its system prompt); the prompt itself is not kept."""


@dataclass
class Scripts:
    scripts: dict[str, dict[str, Any]] = field(default_factory=dict)
    requests: list[Recorded] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    record_headers: frozenset[str] = frozenset()
    """Lowercase names of the request headers to keep with each request (default none)."""
    system_needles: frozenset[str] = frozenset()
    """Texts to look for in each request's system messages (default none)."""

    def set(self, scripts: dict[str, dict[str, Any]]) -> None:
        with self.lock:
            self.scripts.update(scripts)

    def take_requests(self) -> list[Recorded]:
        with self.lock:
            taken, self.requests = self.requests, []
        return taken

    def answered_text(self, scenario: str) -> bool:
        with self.lock:
            return any(r.scenario == scenario and r.answered == "text" for r in self.requests)


def _from_results(value: Any, results: list[str]) -> Any:
    """``{{result:REGEX}}`` in a string argument -> REGEX's first group in the results."""
    if isinstance(value, dict):
        return {k: _from_results(v, results) for k, v in value.items()}
    if isinstance(value, list):
        return [_from_results(v, results) for v in value]
    if not isinstance(value, str):
        return value

    def pick(match: re.Match[str]) -> str:
        pattern = re.compile(match.group(1))
        for text in results:
            found = pattern.search(text)
            if found:
                return found.group(1)
        return "no-match"

    return _FROM_RESULT.sub(pick, value)


def _hold_final(scripts: Scripts, script: dict[str, Any]) -> None:
    """Wait for the effect the script names before its final answer (bounded)."""
    deadline = time.monotonic() + WAIT_CAP_S
    after, path = script.get("final_after"), script.get("final_after_file")
    while time.monotonic() < deadline:
        if (after is None or scripts.answered_text(str(after))) and (
            path is None or Path(str(path)).exists()
        ):
            return
        time.sleep(0.05)


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""


def answer(
    scripts: Scripts, body: dict[str, Any], headers: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """The assistant message for one chat completion request."""
    messages = body.get("messages") or []
    tags = [
        m
        for msg in messages
        if msg.get("role") == "user"
        for m in _TAG.findall(_text(msg.get("content")))
    ]
    scenario = tags[0] if tags else ""
    tool_results = [_text(m.get("content")) for m in messages if m.get("role") == "tool"]
    with scripts.lock:
        script = scripts.scripts.get(scenario, {"calls": [], "final": "OK."})
    calls = script.get("calls") or []
    step = len(tool_results)
    if body.get("tools") and step < len(calls):
        call = calls[step]
        message = {
            "role": "assistant",
            "content": call.get("content"),
            "tool_calls": [
                {
                    "id": f"call_{scenario}_{step}_{int(time.time() * 1000) % 100000}",
                    "type": "function",
                    "function": {
                        "name": call["name"],
                        "arguments": call["raw_arguments"]
                        if "raw_arguments" in call
                        else json.dumps(_from_results(call.get("arguments", {}), tool_results)),
                    },
                }
            ],
        }
        answered = f"tool:{call['name']}"
    else:
        # ``final_delay``: hold the final answer, so background work (a
        # subagent) finishes inside the turn instead of racing the exit.
        time.sleep(float(script.get("final_delay", 0)))
        _hold_final(scripts, script)
        message = {"role": "assistant", "content": str(script.get("final", "OK."))}
        pace = (int(script.get("final_chunks", 1)), float(script.get("chunk_delay_s", 0)))
        if pace[0] > 1:
            message[PACE] = pace
        answered = "text"
    with scripts.lock:
        offered = sorted(
            str(t.get("function", {}).get("name", ""))
            for t in body.get("tools") or []
            if isinstance(t, dict)
        )
        kept = {
            name.lower(): value
            for name, value in (headers or {}).items()
            if name.lower() in scripts.record_headers
        }
        system = "\n".join(_text(m.get("content")) for m in messages if m.get("role") == "system")
        found = sorted(n for n in scripts.system_needles if n in system)
        scripts.requests.append(Recorded(scenario, tool_results, answered, offered, kept, found))
    return message


def _split(text: str, parts: int) -> list[str]:
    """``text`` in ``parts`` consecutive pieces (the last takes the remainder)."""
    size = max(1, -(-len(text) // parts))
    return [text[i : i + size] for i in range(0, len(text), size)] or [text]


def _chunks(message: dict[str, Any], model: str, parts: int = 1) -> list[dict[str, Any]]:
    base = {"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": 0, "model": model}
    deltas: list[dict[str, Any]] = []
    if message.get("tool_calls"):
        if message.get("content"):  # interim text first, as providers send it
            deltas.append({"role": "assistant", "content": message["content"]})
        call = message["tool_calls"][0]
        deltas.append({"role": "assistant", "tool_calls": [{"index": 0, **call}]})
        finish = "tool_calls"
    else:
        for piece in _split(message["content"], parts):
            deltas.append({"role": "assistant", "content": piece})
        finish = "stop"
    usage = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
    return [
        *({**base, "choices": [{"index": 0, "delta": d, "finish_reason": None}]} for d in deltas),
        {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]},
        {**base, "choices": [], "usage": usage},
    ]


class _Handler(BaseHTTPRequestHandler):
    scripts: Scripts
    model = "fake-model"

    def log_message(self, *_args: Any) -> None:
        return None

    def _json(self, status: int, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        if self.path.rstrip("/").endswith("/models"):
            model = {"id": self.model, "object": "model", "owned_by": "fake"}
            self._json(200, {"object": "list", "data": [model]})
        else:
            self._json(404, {"error": {"message": "not found"}})

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length) or b"{}")
        if not self.path.rstrip("/").endswith("/chat/completions"):
            self._json(404, {"error": {"message": "not found"}})
            return
        message = answer(self.scripts, body, dict(self.headers.items()))
        parts, delay = message.pop(PACE, (1, 0.0))
        if not body.get("stream"):
            finish = "tool_calls" if message.get("tool_calls") else "stop"
            self._json(
                200,
                {
                    "id": "chatcmpl-fake",
                    "object": "chat.completion",
                    "created": 0,
                    "model": self.model,
                    "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                    "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
                },
            )
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.end_headers()
        for index, chunk in enumerate(_chunks(message, self.model, parts)):
            if index and delay and chunk["choices"] and chunk["choices"][0]["delta"]:
                self.wfile.flush()  # what was sent so far reaches the client now
                time.sleep(delay)  # the next content delta, as a provider paces one
            self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()
        self.close_connection = True


class FakeOpenAI:
    """``with FakeOpenAI() as server: server.url`` -> ``http://127.0.0.1:<port>/v1``."""

    def __init__(self) -> None:
        self.scripts = Scripts()
        handler = type("Handler", (_Handler,), {"scripts": self.scripts})
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def start(self) -> FakeOpenAI:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> FakeOpenAI:
        return self.start()

    def __exit__(self, *_exc: object) -> None:
        self.stop()
