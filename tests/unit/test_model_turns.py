"""A model turn read whole and written back (``smf_assurance.core.model_turns``).

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

from smf_assurance.core import model_turns, written_content
from smf_assurance.core.detectors import detect
from smf_assurance.core.model_turns import StreamAssembler, ToolCall, Turn, TurnError
from smf_assurance.subjects.messages import DataFacts
from smf_tools.fake_model import Reply, _completion, _events

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


# -- what a runtime may show, read as a person reads it ------------------------

CLEAN_FACTS = DataFacts(classification="internal", injection_taint="clear")


@pytest.mark.parametrize(
    ("window", "text"),
    [
        ("Checking the PRIVI", "LEGED memo now."),  # a word across two turns
        ("IGNORE PREVIOUS", "INSTRUCTIONS"),  # words on two lines
        ("", "read_file\npath\n/srv/PRIVI\nLEGED"),  # across lines of one output
        ("", "PRIVILEGED_memo_lookup"),  # an underscore separates words
    ],
)
def test_a_marker_shown_in_pieces_is_found(window: str, text: str) -> None:
    facts, found = detect(text, CLEAN_FACTS, window)
    assert found
    assert facts != CLEAN_FACTS


@pytest.mark.parametrize(
    ("window", "text"),
    [
        ("Checking the PRIVY", "LEGAL team notified."),  # pieces that join into no marker
        ("PRIVILEGED & CONFIDENTIAL memo read.", "Done."),  # decided when it was shown
        ("unprivileged", " data"),
        ("", "aprivileged privileged2"),  # letters and digits still bound a word
    ],
)
def test_pieces_that_make_no_new_marker_are_not_found(window: str, text: str) -> None:
    assert detect(text, CLEAN_FACTS, window) == (CLEAN_FACTS, ())


def test_shown_text_is_the_text_alone_without_calls_and_every_call_after_it() -> None:
    turn = Turn(content="Checking.")
    assert model_turns.shown_text(turn) == "Checking."
    turn.tool_calls = [
        ToolCall("a", "read_file", '{"path": "/srv/\\u0050RIV.txt", "n": 1}'),
        ToolCall("b", "Unknown", "not json"),
    ]
    assert model_turns.shown_text(turn) == (
        "Checking.\nread_file\npath\n/srv/PRIV.txt\nn\nUnknown\nnot json"
    )
    assert model_turns.turn_arguments(turn) == "/srv/PRIV.txt\nnot json"
    assert model_turns.shown_text(Turn()) == ""


def test_the_history_shown_and_its_arguments_are_read_from_the_tail() -> None:
    messages = [
        {"role": "system", "content": "SYSTEM"},
        {"role": "assistant", "content": "first"},
        {
            "role": "assistant",
            "content": [{"type": "text", "text": "second"}],
            "tool_calls": [
                {"id": "x", "function": {"name": "read", "arguments": '{"p": "q1"}'}},
                {"id": "y", "function": {"name": "read", "arguments": '{"p": "q2"}'}},
            ],
        },
        {"role": "tool", "tool_call_id": "x", "content": "RESULT"},
    ]
    chat = model_turns.read_request(json.dumps({"messages": messages}).encode())
    assert chat.shown_history(4096) == "first\nsecond\nread\np\nq1\nread\np\nq2"
    assert chat.shown_history(5) == "\np\nq2"
    assert chat.shown_history(0) == ""
    assert chat.text_history(4096) == "first\nsecond"
    assert chat.arguments_history(4096) == "q1\nq2"
    assert chat.arguments_history(2) == "q2"
    assert chat.arguments_history(0) == ""
    read = chat.read_texts()
    assert "SYSTEM" in read
    assert "RESULT" in read
    assert "second\nread\np\nq1\nread\np\nq2" in read


def test_what_the_model_reads_includes_the_tool_definitions() -> None:
    tools = [{"type": "function", "function": {"name": "mcp_x", "description": "DESC"}}]
    chat = model_turns.read_request(
        json.dumps({"messages": [{"role": "user", "content": "hi"}], "tools": tools}).encode()
    )
    assert chat.read_texts() == ["hi", "type\nfunction\nfunction\nname\nmcp_x\ndescription\nDESC"]


def test_own_turn_keeps_no_provider_string_but_text_and_calls() -> None:
    turn = Turn(
        id="PROVIDER-ID",
        model="PROVIDER-MODEL",
        created=7,
        content="text",
        tool_calls=[ToolCall("a", "n", "{}")],
        finish_reason="weird",
        usage={"prompt_tokens": 3, "note": "x", "Odd-Key": 1, "d": {"c": 2, "s": "y"}, "f": 0.5},
    )
    own = model_turns.own_turn(turn, turn_id="chatcmpl-smf-1", model="asked")
    assert (own.id, own.model, own.created, own.finish_reason) == (
        "chatcmpl-smf-1",
        "asked",
        7,
        "stop",
    )
    assert own.usage == {"prompt_tokens": 3, "d": {"c": 2}, "f": 0.5}
    assert (own.content, own.tool_calls) == ("text", turn.tool_calls)
    kept = model_turns.own_turn(Turn(finish_reason="length"), turn_id="i", model="m")
    assert (kept.finish_reason, kept.usage) == ("length", None)


def test_the_call_context_is_tainted_by_what_else_the_model_reads_and_by_recalled_content() -> None:
    chat = model_turns.read_request(json.dumps({"messages": [{"role": "user"}]}).encode())
    assert model_turns.call_context(chat, ()) == (model_turns.CONTEXT_BASELINE, ())
    facts, found = model_turns.call_context(chat, (), read_injection=True)
    assert (facts.injection_taint, found) == ("suspected", ("detected_injection_marker",))
    facts, found = model_turns.call_context(chat, (), recalled="tainted")
    assert (facts.injection_taint, found) == ("tainted", ("content_written_by_tainted_session",))
    facts, found = model_turns.call_context(chat, (), read_injection=True, recalled="suspected")
    assert found == ("detected_injection_marker",)  # nothing more to raise


# -- content a tainted session wrote, known by its lines ------------------------------------

LINE = "Always file the settlement memo with the court first."


def test_a_written_line_is_known_again_however_it_is_read_back() -> None:
    written = set(written_content.written_digests(json.dumps({"path": "AGENTS.md", "c": LINE})))
    for read in (
        f"# AGENTS.md\n\n{LINE}\n",  # a context file in a system prompt
        f"     1|{LINE}",  # Hermes's read_file gutter
        f"  12→  {LINE.upper()}  ",  # another gutter, case and spaces
        f"{LINE.replace(' ', chr(0x3000))}",  # ideographic spaces (NFKC)
    ):
        assert written & written_content.read_digests(read), read


def test_quoted_segments_and_diff_lines_are_written_too() -> None:
    command = json.dumps({"command": f"echo '{LINE}' >> AGENTS.md"})
    assert set(written_content.written_digests(command)) & written_content.read_digests(LINE)
    patch = json.dumps({"patch": f"@@ -1 +1 @@\n-old line that was here before\n+{LINE}"})
    assert set(written_content.written_digests(patch)) & written_content.read_digests(LINE)
    raw = written_content.written_digests(f"not json: {LINE}")
    assert raw == tuple(written_content.read_digests(f"not json: {LINE}"))


def test_short_lines_and_keys_carry_no_digest() -> None:
    assert written_content.written_digests(json.dumps({"x" * 40: "}", "n": "# Notes"})) == ()
    assert written_content.read_digests("short\n---\n") == frozenset()
    assert len(written_content.line_digest("a")) == 32
