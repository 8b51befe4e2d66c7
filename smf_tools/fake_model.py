"""A fake OpenAI-compatible provider on 127.0.0.1 (aiohttp), for the model gateway.

Outside our system (the LLM provider), so faked, as a real local HTTP
server: the gateway's bench (``bench --gateway``) and its tests drive it. Each
request is answered by the :class:`Reply` at the head of the queue, or by
:attr:`FakeModel.default`: text or tool calls, streamed as SSE in small
deltas or as one JSON body, or a failure (hang, HTTP 500, a stream broken off
part way, bytes that are not SSE).

``python -m smf_tools.fake_model --url-file FILE [--reply TEXT]
[--api-key-file KEY]`` runs it on its own as the README's quick start does: a
stand-in for a real provider, answering every request with the same text, on a port the
kernel chooses (no fixed port), whose base URL it writes to ``FILE`` once it serves; it
stops on SIGINT or SIGTERM. With ``--api-key-file`` it behaves as a provider does with
its API key: every request without ``Authorization: Bearer <the key>`` is refused (401,
nothing answered). The key is read from ``KEY``, or made and written there (0600) when
the file does not exist yet: the model gateway's configuration names that file
(``model-gateway upstream --api-key-file``), so only the gateway holds the key and a
runtime pointed at the provider directly gets nothing (docs/CONFINEMENT.md).
"""

from __future__ import annotations

import argparse
import asyncio
import hmac
import json
import os
import secrets
import signal
import sys
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal

from aiohttp import web

from smf_assurance.ops.local.model_gateway import write_private

DEFAULT_REPLY: Final = "Hello from the local stand-in model."
Behaviour = Literal["answer", "hang", "error", "broken", "garbage"]


@dataclass(frozen=True)
class Reply:
    content: str = "OK."
    tool_calls: tuple[tuple[str, str, str], ...] = ()
    """(id, name, JSON arguments) of each tool call."""
    behaviour: Behaviour = "answer"
    delta_bytes: int = 64
    model: str = "fake-model"
    turn_id: str = "chatcmpl-fake"
    finish_reason: str | None = None
    """``None``: ``tool_calls`` when there are tool calls, else ``stop``."""
    usage: dict[str, Any] | None = None


@dataclass
class FakeModel:
    default: Reply = field(default_factory=Reply)
    queue: deque[Reply] = field(default_factory=deque)
    requests: list[dict[str, Any]] = field(default_factory=list)
    listed: tuple[dict[str, Any], ...] = ({"id": "fake-model", "object": "model"},)
    """What ``GET /v1/models`` lists."""
    port: int = 0
    api_key: str | None = None
    """When set, only a request carrying it as its bearer token is answered."""
    refused: int = 0
    """Requests refused for a missing or wrong API key (nothing of them is kept)."""
    _runner: web.AppRunner | None = None
    _shutting_down: asyncio.Event = field(default_factory=asyncio.Event)
    """Set when the server begins to shut down: a hung request ends then, so shutting
    down never waits out aiohttp's grace period for a handler that would never return."""

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    async def start(self) -> FakeModel:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_get("/v1/models", self._models)
        app.on_shutdown.append(self._on_shutdown)
        self._shutting_down = asyncio.Event()
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = int(self._runner.addresses[0][1])
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _on_shutdown(self, _app: web.Application) -> None:
        self._shutting_down.set()

    def _unauthorized(self, request: web.Request) -> web.Response | None:
        """A provider's answer to a request without its API key: 401, nothing read."""
        if self.api_key is None:
            return None
        scheme, _, given = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() == "bearer" and hmac.compare_digest(given.strip(), self.api_key):
            return None
        self.refused += 1
        error = {"message": "invalid API key", "type": "invalid_request_error"}
        return web.json_response({"error": error}, status=401)

    async def _models(self, request: web.Request) -> web.Response:
        refused = self._unauthorized(request)
        if refused is not None:
            return refused
        return web.json_response({"object": "list", "data": list(self.listed)})

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        refused = self._unauthorized(request)
        if refused is not None:
            return refused
        body = await request.json()
        self.requests.append(body)
        reply = self.queue.popleft() if self.queue else self.default
        if reply.behaviour == "hang":
            # no answer for as long as the server runs; at shutdown, an error
            await self._shutting_down.wait()
            return web.json_response({"error": {"message": "shutting down"}}, status=503)
        if reply.behaviour == "error":
            return web.json_response({"error": {"message": "upstream failed"}}, status=500)
        if not body.get("stream"):
            if reply.behaviour != "answer":
                return web.Response(body=b"{not json", content_type="application/json")
            return web.json_response(_completion(reply))
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        if reply.behaviour == "garbage":
            await response.write(b"data: {this is not json}\n\n")
            await response.write_eof()
            return response
        events = _events(reply)
        if reply.behaviour == "broken":
            # part of the text, then the connection is gone: no finish, no [DONE]
            await response.write(events[0] + events[1])
            assert request.transport is not None
            request.transport.close()
            return response
        await response.write(b"".join(events))
        await response.write_eof()
        return response


def _completion(reply: Reply) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": reply.content}
    if reply.tool_calls:
        message["tool_calls"] = [
            {"id": i, "type": "function", "function": {"name": n, "arguments": a}}
            for i, n, a in reply.tool_calls
        ]
    answer: dict[str, Any] = {
        "id": reply.turn_id,
        "object": "chat.completion",
        "created": 1,
        "model": reply.model,
        "choices": [{"index": 0, "message": message, "finish_reason": _finish(reply)}],
    }
    if reply.usage is not None:
        answer["usage"] = reply.usage
    return answer


def _finish(reply: Reply) -> str:
    if reply.finish_reason is not None:
        return reply.finish_reason
    return "tool_calls" if reply.tool_calls else "stop"


def _events(reply: Reply) -> list[bytes]:
    def event(delta: dict[str, Any], finish: str | None = None) -> bytes:
        chunk: dict[str, Any] = {
            "id": reply.turn_id,
            "object": "chat.completion.chunk",
            "created": 1,
            "model": reply.model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }
        if finish is not None and reply.usage is not None:
            chunk["usage"] = reply.usage
        return b"data: " + json.dumps(chunk).encode() + b"\n\n"

    text = reply.content
    step = max(1, reply.delta_bytes)
    events = [event({"role": "assistant", "content": ""})]
    events += [event({"content": text[i : i + step]}) for i in range(0, len(text), step)]
    for index, (call_id, name, arguments) in enumerate(reply.tool_calls):
        head = {"index": index, "id": call_id, "type": "function", "function": {"name": name}}
        events.append(event({"tool_calls": [head]}))
        events.append(
            event({"tool_calls": [{"index": index, "function": {"arguments": arguments}}]})
        )
    events.append(event({}, _finish(reply)))
    events.append(b"data: [DONE]\n\n")
    return events


def api_key_of(path: Path) -> str:
    """The stand-in's API key: read from ``path``, or made and written there (0600, never
    printed) when it does not exist."""
    try:
        key = path.read_text().strip()
    except FileNotFoundError:
        key = "sk-local-" + secrets.token_urlsafe(32)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(key + "\n")
    if not key:
        raise ValueError(f"{path} holds no API key")
    return key


async def serve(
    reply: str, url_file: Path, stop: asyncio.Event, api_key: str | None = None
) -> None:
    """Serve ``reply`` to every request until ``stop`` is set; the URL file names the
    server only while it serves (written whole once bound, so a reader waiting for it
    never reads half a URL; removed when it stops)."""
    model = await FakeModel(default=Reply(content=reply), api_key=api_key).start()
    try:
        write_private(url_file, (model.url + "\n").encode())
        who = "every request" if api_key is None else "every request with its API key"
        sys.stdout.write(f"fake model: {model.url} (answers {who} with {reply!r})\n")
        sys.stdout.flush()
        await stop.wait()
    finally:
        url_file.unlink(missing_ok=True)
        await model.stop()


async def _until_signalled(reply: str, url_file: Path, api_key: str | None) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await serve(reply, url_file, stop, api_key)


def main(argv: list[str] | None = None) -> int:
    """``python -m smf_tools.fake_model``: the quick start's stand-in model
    provider."""
    parser = argparse.ArgumentParser(
        prog="python -m smf_tools.fake_model",
        description="A stand-in for a real OpenAI-compatible model provider, on 127.0.0.1 "
        "and a port the kernel chooses: every chat completion is answered with --reply. "
        "For trying the gate on one machine; never a model.",
    )
    parser.add_argument(
        "--url-file",
        type=Path,
        required=True,
        metavar="FILE",
        help="write the server's base URL (http://127.0.0.1:PORT/v1) here once it serves",
    )
    parser.add_argument(
        "--reply", default=DEFAULT_REPLY, help="the text of every answer (default: %(default)s)"
    )
    parser.add_argument(
        "--api-key-file",
        type=Path,
        metavar="FILE",
        help="require this API key on every request; made and written here (0600) when "
        "the file does not exist (give the model gateway the same file)",
    )
    args = parser.parse_args(argv)
    if not args.url_file.parent.is_dir():
        parser.exit(1, f"fake model: no folder {args.url_file.parent} for --url-file\n")
    api_key = None
    if args.api_key_file is not None:
        try:
            api_key = api_key_of(args.api_key_file)
        except (OSError, ValueError) as exc:
            parser.exit(1, f"fake model: --api-key-file: {exc}\n")
    asyncio.run(_until_signalled(args.reply, args.url_file, api_key))
    return 0


if __name__ == "__main__":
    sys.exit(main())
