"""A model turn read whole and written back (``smf_assurance.pipeline.core.model_turns``, issue 16).

Proves: however a provider's SSE bytes are split on the wire, the assembled
turn is the same; a stream without its finish and ``[DONE]`` is refused, so a
partial turn never exists; tool calls are assembled by index; reasoning text
is never carried over; what is written back reads as the same turn (JSON and
SSE); every malformed shape is refused with a reason code, never an exception
of another kind. Does not prove: any provider's dialect beyond OpenAI's chat
completions shape.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from smf_assurance.ops.bench.fake_model import Reply, _completion, _events
from smf_assurance.pipeline.core import model_turns
from smf_assurance.pipeline.core.model_turns import StreamAssembler, Turn, TurnError

CALLS = (("call_a", "terminal", '{"command": "ls"}'), ("call_b", "read_file", '{"path": "x"}'))


def stream_of(reply: Reply) -> bytes:
    return b"".join(_events(reply))


def assemble(data: bytes, cuts: list[int] | None = None) -> Turn:
    assembler = StreamAssembler()
    points = sorted({c % (len(data) + 1) for c in cuts or []})
    start = 0
    for point in [*points, len(data)]:
        assembler.feed(data[start:point])
        start = point
    return assembler.finish()


@given(st.lists(st.integers(min_value=0, max_value=10_000), max_size=40))
def test_the_turn_does_not_depend_on_how_the_bytes_were_split(cuts: list[int]) -> None:
    data = stream_of(Reply(content="Héllo, wörld — ünïcode", tool_calls=CALLS, delta_bytes=3))
    turn = assemble(data, cuts)
    assert turn.content == "Héllo, wörld — ünïcode"
    assert [(c.id, c.name, c.arguments) for c in turn.tool_calls] == list(CALLS)
    assert turn.finish_reason == "tool_calls"


@pytest.mark.parametrize("drop", ["done", "finish", "both"])
def test_a_stream_that_ends_early_is_refused(drop: str) -> None:
    events = _events(Reply(content="PARTIAL"))
    if drop in ("done", "both"):
        events = events[:-1]
    if drop in ("finish", "both"):
        events = [e for e in events if b'"finish_reason": "stop"' not in e]
    with pytest.raises(TurnError) as refused:
        assemble(b"".join(events))
    assert refused.value.reason_code == "upstream_stream_broken"


def chunk(delta: Any, finish: str | None = None, **extra: Any) -> bytes:
    body = {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}], **extra}
    return b"data: " + json.dumps(body).encode() + b"\n\n"


def test_reasoning_is_never_carried_over_and_comments_are_ignored() -> None:
    data = (
        b": keep-alive\n\nevent: x\n"
        + chunk({"reasoning_content": "secret plan", "content": "A"})
        + chunk({"reasoning": "more", "content": "B"}, "stop", usage={"total_tokens": 3})
        + b"data: [DONE]\r\n\r\n"
    )
    turn = assemble(data)
    assert (turn.content, turn.usage) == ("AB", {"total_tokens": 3})
    written = model_turns.stream_events(turn) + model_turns.completion_body(turn)
    assert b"secret" not in written
    assert b"more" not in written


@pytest.mark.parametrize(
    ("data", "code"),
    [
        (b"data: {nope\n\n", "upstream_stream_invalid"),
        (b"data: [1]\n\n", "upstream_stream_invalid"),
        (b'data: {"error": {"message": "x"}}\n\n', "upstream_error"),
        (b'data: {"choices": "x"}\n\n', "upstream_stream_invalid"),
        (b'data: {"choices": [1]}\n\n', "upstream_stream_invalid"),
        (b'data: {"choices": [{"delta": 5}]}\n\n', "upstream_stream_invalid"),
        (b'data: {"choices": [{"delta": {"content": 5}}]}\n\n', "upstream_stream_invalid"),
        (b'data: {"choices": [{"delta": {"tool_calls": 5}}]}\n\n', "upstream_stream_invalid"),
        (
            b'data: {"choices": [{"delta": {"tool_calls": [{"index": -1}]}}]}\n\n',
            "upstream_stream_invalid",
        ),
        (
            b'data: {"choices": [{"delta": {"tool_calls": [{"function": 3}]}}]}\n\n',
            "upstream_stream_invalid",
        ),
        (b"data: [DONE]\n\ndata: {}\n\n", "upstream_stream_invalid"),
    ],
)
def test_a_malformed_stream_is_refused_with_a_reason(data: bytes, code: str) -> None:
    with pytest.raises(TurnError) as refused:
        assemble(data)
    assert refused.value.reason_code == code


def test_tool_calls_need_an_id_and_a_name_and_are_bounded() -> None:
    nameless = chunk({"tool_calls": [{"index": 0, "id": "c1"}]}, "tool_calls") + b"data: [DONE]\n\n"
    with pytest.raises(TurnError) as refused:
        assemble(nameless)
    assert refused.value.reason_code == "upstream_answer_invalid"
    many = tuple((f"c{i}", "t", "{}") for i in range(model_turns.MAX_TOOL_CALLS + 1))
    with pytest.raises(TurnError) as refused:
        model_turns.read_completion(json.dumps(_completion(Reply(tool_calls=many))).encode())
    assert refused.value.reason_code == "upstream_too_many_tool_calls"


def test_a_completion_round_trips() -> None:
    turn = model_turns.read_completion(
        json.dumps(_completion(Reply(content="Done.", tool_calls=CALLS))).encode()
    )
    again = model_turns.read_completion(model_turns.completion_body(turn))
    assert again == turn
    streamed = assemble(model_turns.stream_events(turn))
    assert (streamed.content, streamed.tool_calls) == (turn.content, turn.tool_calls)


@pytest.mark.parametrize(
    ("data", "code"),
    [
        (b"{not json", "upstream_answer_invalid"),
        (b"[]", "upstream_answer_invalid"),
        (b'{"choices": [{"message": 3, "finish_reason": "stop"}]}', "upstream_answer_invalid"),
        (b'{"choices": [{"message": {"content": "x"}}]}', "upstream_answer_incomplete"),
        (b'{"choices": []}', "upstream_answer_incomplete"),
    ],
)
def test_a_malformed_completion_is_refused(data: bytes, code: str) -> None:
    with pytest.raises(TurnError) as refused:
        model_turns.read_completion(data)
    assert refused.value.reason_code == code


@pytest.mark.parametrize(
    ("body", "code"),
    [
        (b"{", "malformed_json"),
        (b'"x"', "request_not_an_object"),
        (b'{"messages": []}', "request_messages_invalid"),
        (b'{"messages": [1]}', "request_messages_invalid"),
        (b'{"messages": [{}], "stream": 1}', "request_stream_invalid"),
    ],
)
def test_a_bad_request_is_refused(body: bytes, code: str) -> None:
    with pytest.raises(TurnError) as refused:
        model_turns.read_request(body)
    assert refused.value.reason_code == code


def test_a_notice_replaces_the_whole_turn() -> None:
    turn = Turn(id="x", model="m", content="secret", tool_calls=[model_turns.ToolCall("c", "t")])
    notice = model_turns.notice_turn(turn, "[withheld]")
    assert (notice.content, notice.tool_calls, notice.finish_reason) == ("[withheld]", [], "stop")
