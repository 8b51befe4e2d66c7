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
output decision covered. Nor is any other string of the provider's that the
output gate does not see (issue 36, "Decide everything shown"): the turn the
runtime gets names the gateway's own id and the model the runtime asked for,
a finish reason from OpenAI's vocabulary, and usage numbers only
(:func:`own_turn`). What it may show of a turn, its text and each tool call's
name and arguments, is :func:`shown_text`, which the output gate decides.

Pure and synchronous (ARCHITECTURE.md, "Layers of the code"): bytes in,
values out.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Annotated, Any, Final

import msgspec

from smf_assurance.core.detectors import detect, raise_facts
from smf_assurance.core.written_content import string_values
from smf_assurance.subjects.call_context import CallContext, is_gateway_call_id
from smf_assurance.subjects.envelope import Classification, InjectionTaint
from smf_assurance.subjects.messages import DataFacts

MAX_MESSAGES: Final = 4096
MAX_TOOL_CALLS: Final = 128
_DONE: Final = b"[DONE]"

CONTEXT_BASELINE: Final = DataFacts(classification="public", injection_taint="clear")
"""Where a call's context starts before anything raises it: the record holds only what
the gateway found, so a call in a clean context is decided as its proposal declared."""
INHERITED: Final = "call_context_inherited"
"""A call named in the request's history had a raised context: the new calls inherit it."""
LINEAGE_UNKNOWN: Final = "call_context_lineage_unknown"
"""A gateway id in the history has no record (expired, lost or never issued): the
context it stood for is not known, so it is assumed the worst (unknown)."""
READ_INJECTION: Final = "detected_injection_marker"
"""Injection phrasing in anything the request shows the model (its system prompt, the
context files in it, the history, the tool definitions, the tool results)."""
RECALLED: Final = "content_written_by_tainted_session"
"""The request carries content a tainted session wrote through a tool call
(``smf_assurance.core.written_content``)."""
FINISH_REASONS: Final = frozenset({"stop", "length", "tool_calls", "content_filter"})
"""The finish reasons a turn carries to the runtime; any other word of the provider's
is not forwarded (it is read as ``stop``)."""
_USAGE_KEY: Final = re.compile(r"^[a-z][a-z0-9_]{0,63}\Z")


class TurnError(ValueError):
    """The request or the provider's answer cannot be used; ``reason_code`` says why."""

    def __init__(self, reason_code: str) -> None:
        super().__init__(reason_code)
        self.reason_code = reason_code


ARGUMENT_CHECK_REFUSAL: Final = 'Validation failed for tool "'
"""How OpenClaw (2026.9.6, ``@openclaw/ai`` ``validateToolArguments``) answers a call
whose arguments fail the tool's schema, before any hook runs: the result's text starts
so, followed by the tool's name, the errors and the arguments received."""


INVALID_JSON_REFUSAL: Final = "Error: Invalid JSON arguments. "
INVALID_JSON_REFUSAL_END: Final = (
    ". For tools with no required parameters, use an empty object: {}. "
    "Please retry with valid JSON."
)
"""How Hermes (0.19.0, ``agent/conversation_loop.py``) answers, before any hook, a
call in a turn it gives up retrying because some call's arguments are not JSON,
when the call's tool name is that of a call whose arguments are not: the result's
text starts and ends so, the JSON parser's error message between."""
INVALID_JSON_SKIPPED: Final = "Skipped: other tool call in this response had invalid JSON."
"""How Hermes answers, in that turn, each other call (the whole text)."""


def is_invalid_json_refusal(text: str) -> bool:
    """``text`` is Hermes's own answer to a call refused for invalid JSON arguments
    (:data:`INVALID_JSON_REFUSAL`): its fixed start and end, one line between (the
    parser's message names a position, never the arguments)."""
    middle = text[len(INVALID_JSON_REFUSAL) : len(text) - len(INVALID_JSON_REFUSAL_END)]
    return (
        len(text) > len(INVALID_JSON_REFUSAL) + len(INVALID_JSON_REFUSAL_END)
        and text.startswith(INVALID_JSON_REFUSAL)
        and text.endswith(INVALID_JSON_REFUSAL_END)
        and "\n" not in middle
    )


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

    def history_call_ids(self) -> list[str]:
        """Every id of the model gateway's form the conversation names, once each, in
        order: the ids of the assistant's tool calls and those tool results answer.
        These are the calls whose contexts the next calls inherit (lineage)."""
        ids: list[object] = []
        for message in self.body["messages"]:
            calls = message.get("tool_calls") if message.get("role") == "assistant" else None
            if isinstance(calls, list):
                ids += [c.get("id") for c in calls if isinstance(c, dict)]
            if message.get("role") == "tool":
                ids.append(message.get("tool_call_id"))
        return list(dict.fromkeys(i for i in ids if is_gateway_call_id(i)))

    def tool_result_ids(self) -> list[str]:
        """The ``tool_call_id`` of every tool result in the conversation (the ids
        the runtime says the results answer; only strings count)."""
        return [
            m["tool_call_id"]
            for m in self.body["messages"]
            if m.get("role") == "tool" and isinstance(m.get("tool_call_id"), str)
        ]

    def refused_by_argument_check(self, call_id: str) -> bool:
        """Whether every result answering ``call_id`` (one at least) is the runtime's own
        refusal of the call's arguments (:data:`ARGUMENT_CHECK_REFUSAL`), so the call ran
        nowhere. A call whose arguments failed the offered schema but that the runtime
        repaired and ran (OpenClaw's ``prepareArguments``) answers with the tool's
        output instead: that result is not taken for a refusal, and stops the runtime
        when no proposal decided it."""
        return self.answered_only_by(call_id, lambda t: t.startswith(ARGUMENT_CHECK_REFUSAL))

    def answered_only_by(self, call_id: str, accepts: Callable[[str], bool]) -> bool:
        """Whether there is a result answering ``call_id`` and ``accepts`` the text of
        every one: a runtime's own refusal is recognised by its whole text, so a call
        that ran and answered with anything else is not taken for refused."""
        texts = [
            _message_text(m.get("content"))
            for m in self.body["messages"]
            if m.get("role") == "tool" and m.get("tool_call_id") == call_id
        ]
        return bool(texts) and all(accepts(t) for t in texts)

    def offered_tools(self) -> frozenset[str]:
        """The names of the functions the request offers the model (``tools``): a call
        to any other name is one no runtime runs (it answers it with an error)."""
        tools = self.body.get("tools")
        names: set[str] = set()
        if isinstance(tools, list):
            for tool in tools:
                function = tool.get("function") if isinstance(tool, dict) else None
                name = function.get("name") if isinstance(function, dict) else None
                if isinstance(name, str):
                    names.add(name)
        return frozenset(names)

    def offered_parameters(self) -> dict[str, list[object]]:
        """Per offered function name, the ``parameters`` schemas the request gave it (a
        name offered twice has both: a call fails only what every one of them rejects)."""
        tools = self.body.get("tools")
        schemas: dict[str, list[object]] = {}
        if isinstance(tools, list):
            for tool in tools:
                function = tool.get("function") if isinstance(tool, dict) else None
                name = function.get("name") if isinstance(function, dict) else None
                if isinstance(name, str) and isinstance(function, dict):
                    schemas.setdefault(name, []).append(function.get("parameters"))
        return schemas

    def read_texts(self) -> list[str]:
        """Everything the request shows the model, one text per message (any role: the
        system prompt with the context files a runtime puts in it, the user's words,
        the history, the tool results) and one for the tool definitions (their names
        and descriptions are read too: an MCP server writes its own)."""
        texts = [_read_text(m) for m in self.body["messages"]]
        tools = self.body.get("tools")
        if tools is not None:
            texts.append("\n".join(string_leaves(tools)))
        return [t for t in texts if t]

    def message_texts(self) -> list[str]:
        """The text content of every message (what a file the model was given arrives
        in: a context file in the system prompt, a tool result, a pasted text)."""
        texts = [_message_text(m.get("content")) for m in self.body["messages"]]
        return [t for t in texts if t]

    def shown_history(self, limit: int) -> str:
        """The last ``limit`` characters of what the runtime was given to show in this
        conversation before now: each assistant message of the history as
        :func:`shown_text` renders a turn, in order (what a marker split across turns
        is read against). Only the tail is built."""
        return self._history_tail(limit, _shown_message)

    def text_history(self, limit: int) -> str:
        """The last ``limit`` characters of the assistant's text in the history, in
        order, without the tool calls between (a runtime prints each turn's text in a
        box of its own and its calls on progress lines: the texts are read as one)."""
        return self._history_tail(limit, lambda m: _message_text(m.get("content")))

    def arguments_history(self, limit: int) -> str:
        """The last ``limit`` characters of the values of every tool call's arguments in
        the history, in order, one per line (:func:`argument_values`): what a marker
        written in pieces across calls, one piece per call, is read against."""
        return self._history_tail(limit, _message_arguments)

    def _history_tail(self, limit: int, render: Callable[[dict[str, Any]], str]) -> str:
        if limit <= 0:
            return ""
        parts: list[str] = []
        size = 0
        for message in reversed(self.body["messages"]):
            if message.get("role") != "assistant":
                continue
            rendered = render(message)
            if not rendered:
                continue
            parts.append(rendered)
            size += len(rendered) + 1
            if size >= limit:
                break
        return "\n".join(reversed(parts))[-limit:]

    def model(self) -> str:
        """The model the runtime asked for (its own words, given back in the turn)."""
        model = self.body.get("model")
        return model if isinstance(model, str) else ""


def string_leaves(value: Any) -> Iterator[str]:
    """Every string in a decoded JSON value, keys and values, in document order (an
    explicit stack: the depth of the value is not bounded by Python's recursion)."""
    stack: list[Any] = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            yield item
        elif isinstance(item, dict):
            for key, inner in reversed(list(item.items())):
                stack.append(inner)
                stack.append(key)
        elif isinstance(item, list):
            stack.extend(reversed(item))


def arguments_shown(arguments: str) -> str:
    """A tool call's arguments as a runtime shows them: the strings of the decoded
    JSON (keys and values, escapes decoded), each on a line of its own; arguments
    that are not JSON, as written."""
    try:
        decoded = msgspec.json.decode(arguments)
    except msgspec.DecodeError:
        return arguments
    return "\n".join(string_leaves(decoded))


def argument_values(arguments: str) -> str:
    """The values (not the keys) of a tool call's decoded arguments, one per line; the
    arguments as written when they are not JSON."""
    try:
        decoded = msgspec.json.decode(arguments)
    except msgspec.DecodeError:
        return arguments
    return "\n".join(string_values(decoded))


def turn_arguments(turn: Turn) -> str:
    """The values of every tool call's arguments in ``turn``, in order, one per line."""
    return "\n".join(argument_values(call.arguments) for call in turn.tool_calls)


def _call_shown(name: str, arguments: str) -> str:
    return name + "\n" + arguments_shown(arguments)


def _shown_message(message: dict[str, Any]) -> str:
    """An assistant message of the history as :func:`shown_text` renders a turn."""
    parts = [_message_text(message.get("content"))]
    calls = message.get("tool_calls")
    for call in calls if isinstance(calls, list) else ():
        function = call.get("function") if isinstance(call, dict) else None
        if isinstance(function, dict):
            name, arguments = function.get("name"), function.get("arguments")
            parts.append(
                _call_shown(
                    name if isinstance(name, str) else "",
                    arguments if isinstance(arguments, str) else "",
                )
            )
    return "\n".join(p for p in parts if p)


def _message_arguments(message: dict[str, Any]) -> str:
    """The values of an assistant message's tool calls' arguments, one per line."""
    values = []
    calls = message.get("tool_calls")
    for call in calls if isinstance(calls, list) else ():
        function = call.get("function") if isinstance(call, dict) else None
        arguments = function.get("arguments") if isinstance(function, dict) else None
        if isinstance(arguments, str):
            values.append(argument_values(arguments))
    return "\n".join(v for v in values if v)


def _read_text(message: dict[str, Any]) -> str:
    """A message as the model reads it: its content and, for an assistant message, the
    names and arguments of its tool calls."""
    if message.get("role") == "assistant":
        return _shown_message(message)
    return _message_text(message.get("content"))


def _message_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str)
        )
    return ""


def request_classification(facts: DataFacts, chat: ChatRequest) -> Classification:
    """The highest classification a request carries to its provider: the runtime's
    declared classification, raised by the detectors over every message's text."""
    text = "\n".join(_message_text(m.get("content")) for m in chat.body["messages"])
    return detect(text, facts)[0].classification


def context_facts(facts: DataFacts, chat: ChatRequest) -> tuple[DataFacts, tuple[str, ...]]:
    """The declared facts of a runtime's replies, raised by what its conversation
    carries (issue 16, "Session taint outside the runtime"): a reply written by a
    model that was shown injected text is decided as tainted, whatever the runtime
    says. Raise only, never lower (``smf_assurance.core.detectors``)."""
    return detect(chat.tool_results(), facts)


def call_context(
    chat: ChatRequest,
    ancestors: Iterable[CallContext | None],
    *,
    read_injection: bool = False,
    recalled: InjectionTaint | None = None,
) -> tuple[DataFacts, tuple[str, ...]]:
    """The context of the tool calls a model emits for ``chat`` (issue 16, "Session
    taint outside the runtime"): what the detectors raise over its tool results
    (:func:`context_facts`, from :data:`CONTEXT_BASELINE`); the taint of injection
    phrasing anywhere else the model reads (``read_injection``: the system prompt,
    its context files, the history, the tool definitions, issue 36); the taint of
    content a tainted session wrote (``recalled``, the highest such taint the
    request carries); all raised again by the record of every call its history
    names (``None``: a gateway id with no record, assumed unknown). Sticky: once a
    call's context is raised, every call made in a conversation that names it is
    raised too, after a resume, a restart, a new session id, or a history the
    runtime compacted. Raise only."""
    facts, detected = context_facts(CONTEXT_BASELINE, chat)
    found = list(detected)
    if read_injection:
        raised = raise_facts(facts, "public", "suspected")
        if raised != facts and READ_INJECTION not in found:
            found.append(READ_INJECTION)
        facts = raised
    if recalled is not None:
        raised = raise_facts(facts, "public", recalled)
        if raised != facts:
            found.append(RECALLED)
        facts = raised
    for ancestor in ancestors:
        if ancestor is None:
            raised, code = raise_facts(facts, "unknown", "unknown"), LINEAGE_UNKNOWN
        else:
            raised = raise_facts(facts, ancestor.classification, ancestor.injection_taint)
            code = INHERITED
        if raised != facts and code not in found:
            found.append(code)
        facts = raised
    return facts, tuple(found)


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


class _Function(msgspec.Struct, frozen=True):
    name: str | None = None
    arguments: str | None = None


class _Call(msgspec.Struct, frozen=True):
    """A tool call in a completion, or one delta of it in a stream (by ``index``)."""

    index: Annotated[int, msgspec.Meta(ge=0, lt=MAX_TOOL_CALLS)] = 0
    id: str | None = None
    function: _Function | None = None


class _Message(msgspec.Struct, frozen=True):
    """A completion's message or a stream chunk's delta; other fields (reasoning,
    refusal, audio, ...) are not read, so they are never carried over."""

    content: str | None = None
    tool_calls: list[_Call] | None = None


class _Choice(msgspec.Struct, frozen=True):
    message: _Message | None = None
    delta: _Message | None = None
    finish_reason: str | None = None


class _Answer(msgspec.Struct, frozen=True):
    """A provider object: a whole completion or one stream chunk. Unknown fields are
    ignored (providers add their own); a field of the wrong type is refused."""

    id: str | None = None
    model: str | None = None
    created: int | None = None
    choices: list[_Choice] = []
    usage: dict[str, Any] | None = None
    error: Any = None


_ANSWER: Final = msgspec.json.Decoder(_Answer)
_CHUNKS: Final = msgspec.json.Decoder(list[_Answer])


def _head(turn: Turn, answer: _Answer) -> _Choice | None:
    """The first choice of a provider object; its id, model, time and usage kept."""
    if answer.error is not None:
        raise TurnError("upstream_error")
    turn.id = turn.id or answer.id or ""
    turn.model = turn.model or answer.model or ""
    turn.created = turn.created or answer.created or 0
    if answer.usage is not None:
        turn.usage = answer.usage
    if not answer.choices:
        return None
    choice = answer.choices[0]
    if choice.finish_reason is not None:
        turn.finish_reason = choice.finish_reason
    return choice


def read_completion(data: bytes) -> Turn:
    """A non-streamed provider answer (one JSON object)."""
    try:
        answer = _ANSWER.decode(data)
    except msgspec.DecodeError as exc:
        raise TurnError("upstream_answer_invalid") from exc
    turn = Turn()
    choice = _head(turn, answer)
    message = choice.message if choice is not None else None
    if message is not None:
        turn.content = message.content or ""
        for call in message.tool_calls or ():
            function = call.function or _Function()
            turn.tool_calls.append(
                ToolCall(call.id or "", function.name or "", function.arguments or "")
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
    """Takes a provider's SSE bytes as they come; :meth:`finish` reads them once,
    whole, and gives the turn only when the stream ended as a stream must (a
    finish reason, then ``[DONE]`` as its last event)."""

    _parts: list[bytes] = field(default_factory=list)

    def feed(self, data: bytes) -> None:
        self._parts.append(data)

    def finish(self) -> Turn:
        payloads: list[bytes] = []
        done = False
        for line in b"".join(self._parts).split(b"\n"):
            if not line.startswith(b"data:"):
                continue  # comments, event names, ids and blank separators carry no turn
            if done:
                raise TurnError("upstream_stream_invalid")  # an event after [DONE]
            payload = line[5:].strip()
            if payload == _DONE:
                done = True
            else:
                payloads.append(payload)
        try:
            chunks = _CHUNKS.decode(b"[" + b",".join(payloads) + b"]")
        except msgspec.DecodeError as exc:
            raise TurnError("upstream_stream_invalid") from exc
        turn = Turn()
        text: list[str] = []
        calls: dict[int, ToolCall] = {}
        for chunk in chunks:
            choice = _head(turn, chunk)
            delta = choice.delta if choice is not None else None
            if delta is None:
                continue
            if delta.content:
                text.append(delta.content)
            for part in delta.tool_calls or ():
                call = calls.setdefault(part.index, ToolCall())
                call.id = call.id or part.id or ""
                if part.function is not None:
                    call.name += part.function.name or ""
                    call.arguments += part.function.arguments or ""
        if not done or turn.finish_reason is None:
            raise TurnError("upstream_stream_broken")
        turn.content = "".join(text)
        turn.tool_calls = [calls[i] for i in sorted(calls)]
        _check_calls(turn)
        return turn


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


def shown_text(turn: Turn) -> str:
    """Everything of ``turn`` a runtime may show, as the output gate decides it: its
    text, then each tool call's name and arguments (:func:`arguments_shown`), each on
    lines of their own. A turn without tool calls is its text alone."""
    if not turn.tool_calls:
        return turn.content
    parts = [turn.content] if turn.content else []
    parts += [_call_shown(call.name, call.arguments) for call in turn.tool_calls]
    return "\n".join(parts)


def _numbers(value: Any) -> Any:
    """``value`` with only numbers left: nested objects of lowercase keys (what a usage
    object holds); every string, list and other key dropped."""
    if isinstance(value, dict):
        return {
            key: _numbers(inner)
            for key, inner in value.items()
            if isinstance(key, str)
            and _USAGE_KEY.match(key)
            and (isinstance(inner, dict) or _is_number(inner))
        }
    return value


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def own_turn(turn: Turn, *, turn_id: str, model: str) -> Turn:
    """``turn`` with no string of the provider's left but its text and tool calls (what
    the output gate decides): the gateway's id, the model the runtime asked for, a
    finish reason of :data:`FINISH_REASONS`, usage numbers only."""
    finish = turn.finish_reason if turn.finish_reason in FINISH_REASONS else "stop"
    usage = _numbers(turn.usage) if turn.usage is not None else None
    return Turn(
        id=turn_id,
        model=model,
        created=turn.created,
        content=turn.content,
        tool_calls=turn.tool_calls,
        finish_reason=finish,
        usage=usage,
    )


def notice_turn(turn: Turn, text: str) -> Turn:
    """What the runtime gets in place of a turn the output gate did not release:
    the notice as the whole text, no tool call, a normal stop."""
    return Turn(
        id=turn.id, model=turn.model, created=turn.created, content=text, finish_reason="stop"
    )
