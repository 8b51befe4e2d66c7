"""One model turn, whole: read it from an OpenAI-compatible response, write it back out.

Issue 16, "Output held until the verdict": the model gateway never passes a
provider's stream through. It assembles the complete turn first (text, tool
calls, finish reason), the output gate decides on the text, and only then is
the turn written to the runtime, in the form it asked for (one JSON body, or
an SSE stream of a few events ending ``[DONE]``). A stream that breaks off
is an error, never a partial turn: Hermes prints a truncated stream's
fragments and skips its own output hook (RUNTIMES.md; docs/HERMES.md), so a
partial reply must not reach it at all.

What is not carried over: reasoning text (``reasoning_content``,
``reasoning``). It is never forwarded, because it would be model text no
output decision covered.

Pure and synchronous (ARCHITECTURE.md, "Layers of the code"): bytes in,
values out.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final

import msgspec

from pipeline.core.detectors import detect
from subjects.messages import DataFacts

MAX_MESSAGES: Final = 4096
MAX_TOOL_CALLS: Final = 128
_DONE: Final = b"[DONE]"


class TurnError(ValueError):
    """The request or the provider's answer cannot be used; ``reason_code`` says why."""

    def __init__(self, reason_code: str) -> None:
        super().__init__(reason_code)
        self.reason_code = reason_code


@dataclass(frozen=True, slots=True)
class ChatRequest:
    """A runtime's ``POST /v1/chat/completions`` body, checked just enough to forward."""

    body: dict[str, Any]
    stream: bool

    def tool_results(self) -> str:
        """The text of every tool result the runtime is showing the model: what an
        injection arrives in (a fetched page, a read file)."""
        parts = [
            _message_text(m.get("content"))
            for m in self.body["messages"]
            if m.get("role") == "tool"
        ]
        return "\n".join(p for p in parts if p)

    def tool_result_ids(self) -> list[str]:
        """The ``tool_call_id`` of every tool result in the conversation (the ids
        the runtime says the results answer; only strings count)."""
        return [
            m["tool_call_id"]
            for m in self.body["messages"]
            if m.get("role") == "tool" and isinstance(m.get("tool_call_id"), str)
        ]


def _message_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str)
        )
    return ""


def context_facts(facts: DataFacts, chat: ChatRequest) -> tuple[DataFacts, tuple[str, ...]]:
    """The declared facts of a runtime's replies, raised by what its conversation
    carries (issue 16, "Session taint outside the runtime"): a reply written by a
    model that was shown injected text is decided as tainted, whatever the runtime
    says. Raise only, never lower (``pipeline.core.detectors``)."""
    return detect(chat.tool_results(), facts)


def read_request(data: bytes) -> ChatRequest:
    """The request body as a JSON object with a ``messages`` list; refused otherwise."""
    try:
        body = msgspec.json.decode(data)
    except msgspec.DecodeError as exc:
        raise TurnError("malformed_json") from exc
    if not isinstance(body, dict):
        raise TurnError("request_not_an_object")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages or len(messages) > MAX_MESSAGES:
        raise TurnError("request_messages_invalid")
    if not all(isinstance(m, dict) for m in messages):
        raise TurnError("request_messages_invalid")
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise TurnError("request_stream_invalid")
    return ChatRequest(body=body, stream=stream)


@dataclass(slots=True)
class ToolCall:
    id: str = ""
    name: str = ""
    arguments: str = ""


@dataclass(slots=True)
class Turn:
    """The assistant's whole answer: what the output gate decides on and the runtime gets."""

    id: str = ""
    model: str = ""
    created: int = 0
    content: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    finish_reason: str | None = None
    usage: dict[str, Any] | None = None


def _text(value: Any) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise TurnError("upstream_answer_invalid")
    return value


def _head(turn: Turn, obj: dict[str, Any]) -> dict[str, Any]:
    """The first choice of a provider object, and its id, model and time."""
    if isinstance(obj.get("id"), str) and not turn.id:
        turn.id = obj["id"]
    if isinstance(obj.get("model"), str) and not turn.model:
        turn.model = obj["model"]
    if isinstance(obj.get("created"), int) and not turn.created:
        turn.created = obj["created"]
    if isinstance(obj.get("usage"), dict):
        turn.usage = obj["usage"]
    choices = obj.get("choices")
    if not isinstance(choices, list):
        raise TurnError("upstream_answer_invalid")
    if not choices:
        return {}
    choice = choices[0]
    if not isinstance(choice, dict):
        raise TurnError("upstream_answer_invalid")
    reason = choice.get("finish_reason")
    if reason is not None:
        turn.finish_reason = _text(reason)
    return choice


def _tool_calls(raw: Any) -> list[dict[str, Any]]:
    if raw is None:
        return []
    if not isinstance(raw, list) or not all(isinstance(c, dict) for c in raw):
        raise TurnError("upstream_answer_invalid")
    return raw


def _function(call: dict[str, Any]) -> dict[str, Any]:
    function = call.get("function") or {}
    if not isinstance(function, dict):
        raise TurnError("upstream_answer_invalid")
    return function


def read_completion(data: bytes) -> Turn:
    """A non-streamed provider answer (one JSON object)."""
    try:
        obj = msgspec.json.decode(data)
    except msgspec.DecodeError as exc:
        raise TurnError("upstream_answer_invalid") from exc
    if not isinstance(obj, dict):
        raise TurnError("upstream_answer_invalid")
    turn = Turn()
    choice = _head(turn, obj)
    message = choice.get("message") or {}
    if not isinstance(message, dict):
        raise TurnError("upstream_answer_invalid")
    turn.content = _text(message.get("content"))
    for call in _tool_calls(message.get("tool_calls")):
        function = _function(call)
        turn.tool_calls.append(
            ToolCall(
                _text(call.get("id")), _text(function.get("name")), _text(function.get("arguments"))
            )
        )
    if turn.finish_reason is None:
        raise TurnError("upstream_answer_incomplete")
    _check_calls(turn)
    return turn


def _check_calls(turn: Turn) -> None:
    if len(turn.tool_calls) > MAX_TOOL_CALLS:
        raise TurnError("upstream_too_many_tool_calls")
    if any(not c.id or not c.name for c in turn.tool_calls):
        raise TurnError("upstream_answer_invalid")


@dataclass(slots=True)
class StreamAssembler:
    """Feeds on a provider's SSE bytes; :meth:`finish` gives the turn only when the
    stream ended as a stream must (a finish reason and ``[DONE]``)."""

    turn: Turn = field(default_factory=Turn)
    _pending: bytes = b""
    _done: bool = False
    _calls: dict[int, ToolCall] = field(default_factory=dict)

    def feed(self, data: bytes) -> None:
        self._pending += data
        *lines, self._pending = self._pending.split(b"\n")
        for line in lines:
            self._line(line.rstrip(b"\r"))

    def _line(self, line: bytes) -> None:
        if not line.startswith(b"data:"):
            return  # comments, event names, ids and blank separators carry no turn
        if self._done:
            raise TurnError("upstream_stream_invalid")
        payload = line[5:].strip()
        if payload == _DONE:
            self._done = True
            return
        try:
            obj = msgspec.json.decode(payload)
        except msgspec.DecodeError as exc:
            raise TurnError("upstream_stream_invalid") from exc
        if not isinstance(obj, dict):
            raise TurnError("upstream_stream_invalid")
        if "error" in obj:
            raise TurnError("upstream_error")
        choice = _head(self.turn, obj)
        delta = choice.get("delta") or {}
        if not isinstance(delta, dict):
            raise TurnError("upstream_stream_invalid")
        self.turn.content += _text(delta.get("content"))
        for part in _tool_calls(delta.get("tool_calls")):
            index = part.get("index", 0)
            if not isinstance(index, int) or index < 0 or index >= MAX_TOOL_CALLS:
                raise TurnError("upstream_stream_invalid")
            call = self._calls.setdefault(index, ToolCall())
            call.id = call.id or _text(part.get("id"))
            function = _function(part)
            call.name += _text(function.get("name"))
            call.arguments += _text(function.get("arguments"))

    def finish(self) -> Turn:
        if self._pending.strip():
            self._line(self._pending.rstrip(b"\r"))
            self._pending = b""
        if not self._done or self.turn.finish_reason is None:
            raise TurnError("upstream_stream_broken")
        self.turn.tool_calls = [self._calls[i] for i in sorted(self._calls)]
        _check_calls(self.turn)
        return self.turn


def _calls_out(turn: Turn, *, streamed: bool) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for index, call in enumerate(turn.tool_calls):
        item: dict[str, Any] = {
            "id": call.id,
            "type": "function",
            "function": {"name": call.name, "arguments": call.arguments},
        }
        if streamed:
            item["index"] = index
        out.append(item)
    return out


def completion_body(turn: Turn) -> bytes:
    """The turn as one ``chat.completion`` object."""
    message: dict[str, Any] = {"role": "assistant", "content": turn.content or None}
    if turn.tool_calls:
        message["tool_calls"] = _calls_out(turn, streamed=False)
    body: dict[str, Any] = {
        "id": turn.id or "chatcmpl-smf",
        "object": "chat.completion",
        "created": turn.created,
        "model": turn.model,
        "choices": [{"index": 0, "message": message, "finish_reason": turn.finish_reason}],
    }
    if turn.usage is not None:
        body["usage"] = turn.usage
    return msgspec.json.encode(body)


def stream_events(turn: Turn) -> bytes:
    """The turn as a complete SSE stream: the text in one delta, the tool calls in one,
    the finish reason, ``[DONE]``. Written at once, so a runtime never reads a part."""

    def event(delta: dict[str, Any], finish: str | None, usage: bool = False) -> bytes:
        chunk: dict[str, Any] = {
            "id": turn.id or "chatcmpl-smf",
            "object": "chat.completion.chunk",
            "created": turn.created,
            "model": turn.model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }
        if usage and turn.usage is not None:
            chunk["usage"] = turn.usage
        return b"data: " + msgspec.json.encode(chunk) + b"\n\n"

    parts = [event({"role": "assistant", "content": turn.content}, None)]
    if turn.tool_calls:
        parts.append(event({"tool_calls": _calls_out(turn, streamed=True)}, None))
    parts.append(event({}, turn.finish_reason, usage=True))
    parts.append(b"data: [DONE]\n\n")
    return b"".join(parts)


def notice_turn(turn: Turn, text: str) -> Turn:
    """What the runtime gets in place of a turn the output gate did not release:
    the notice as the whole text, no tool call, a normal stop."""
    return Turn(
        id=turn.id, model=turn.model, created=turn.created, content=text, finish_reason="stop"
    )
