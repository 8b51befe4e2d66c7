"""Swarm personas: the offline set, and the OpenAI-compatible client against a real local server.

The fake model server is a real HTTP server on 127.0.0.1 in a thread
(``http.server``), scripted per route: good answers, answers that are not
JSON or not the expected shape, HTTP errors, and answers that never come in
time. A persona that fails is reported as failed with its reason; nothing
is invented to fill the gap.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from smf_assurance.governance.compiler import compile_corpus
from smf_assurance.ops.cli.main import main
from smf_assurance.swarm.claims import PersonaOutput, parse_output
from smf_assurance.swarm.personas import (
    INVENTED_RULE_ID,
    ChatCompletionsPersona,
    ChatConfig,
    OfflinePersona,
    PersonaInfo,
    PersonaRequest,
    build_request,
    model_personas,
    offline_personas,
    run_personas,
)
from smf_assurance.swarm.report import build_report, report_bytes
from smf_assurance.swarm.selector import analysis_release, select_rules, validate_facts
from smf_assurance.swarm.service import analyze

CORPUS = Path(__file__).parents[1] / "data" / "swarm" / "corpus"
AT_MS = int(dt.datetime(2026, 6, 1, tzinfo=dt.UTC).timestamp() * 1000)
FACTS = validate_facts(
    {
        "capability": "external.transmit",
        "effects.egress": True,
        "destination.channel": "email",
        "destination.locality": "external",
        "data.classification": "confidential",
        "workflow.legal_hold": False,
        "professional.matter_id": "matter-secret-0042",
    }
)
SELECTED = "urn:smf:rule:test:transmit-approval"
RELEASE = analysis_release(compile_corpus(CORPUS).analysis)
SELECTION = select_rules(RELEASE, FACTS, AT_MS)
REQUEST = build_request("May we email the brief?", FACTS, RELEASE, SELECTION)


# --- the fake OpenAI-compatible server ---------------------------------------------------


@dataclass
class Route:
    status: int = 200
    content: str | None = None
    body: bytes | None = None
    delay_s: float = 0.0
    hang_up: bool = False


@dataclass
class FakeModelServer:
    """Routes by the first path segment: ``http://127.0.0.1:PORT/<route>/v1``."""

    server: ThreadingHTTPServer
    routes: dict[str, Route] = field(default_factory=dict)
    requests: list[dict[str, Any]] = field(default_factory=list)
    release: threading.Event = field(default_factory=threading.Event)

    def url(self, route: str) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host!s}:{port}/{route}/v1"

    def answer(self, route: str, value: Any) -> str:
        self.routes[route] = Route(content=value if isinstance(value, str) else json.dumps(value))
        return self.url(route)


def _handler(holder: list[FakeModelServer]) -> type[BaseHTTPRequestHandler]:
    """The request handler; it reads the scripted routes of ``holder[0]`` per request."""

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            fake = holder[0]
            length = int(self.headers.get("Content-Length", "0"))
            body = json.loads(self.rfile.read(length))
            route_name = self.path.strip("/").split("/")[0]
            fake.requests.append({"path": self.path, "headers": dict(self.headers), "body": body})
            route = fake.routes.get(route_name, Route(status=404, body=b"{}"))
            if route.delay_s:
                fake.release.wait(route.delay_s)
            if route.hang_up:
                self.close_connection = True
                return
            payload = route.body
            if payload is None:
                message = {"role": "assistant", "content": route.content}
                payload = json.dumps(
                    {
                        "id": "chatcmpl-test",
                        "model": body.get("model"),
                        "choices": [{"index": 0, "finish_reason": "stop", "message": message}],
                    }
                ).encode()
            try:
                self.send_response(route.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)
            except OSError:
                pass  # the client gave up (timeout tests)

    return Handler


@pytest.fixture
def fake() -> Iterator[FakeModelServer]:
    holder: list[FakeModelServer] = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(holder))
    server.daemon_threads = True
    holder.append(FakeModelServer(server))
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield holder[0]
    holder[0].release.set()
    server.shutdown()
    server.server_close()
    thread.join(5)


def persona(base_url: str, *, timeout_s: float = 5.0, **config: Any) -> ChatCompletionsPersona:
    (first, *_) = model_personas(
        ChatConfig(base_url=base_url, model="test-model", timeout_s=timeout_s, **config)
    )
    return first


GOOD_ANSWER = {
    "claims": [
        {
            "text": "An email transmission needs a licensed attorney's approval first.",
            "kind": "normative",
            "citations": [SELECTED],
            "confidence": 0.91,
        },
        {"text": "The taint of the data is not known.", "kind": "analysis", "citations": []},
    ],
    "model_notes": {"tokens": 42},
}


# --- offline personas --------------------------------------------------------------------


async def test_offline_personas_are_deterministic_and_label_the_stress_test() -> None:
    personas = offline_personas()
    first = await run_personas(personas, REQUEST)
    again = await run_personas(offline_personas(), REQUEST)
    assert first == again
    names = [r.info.name for r in first]
    assert names == [
        "litigation-associate",
        "ethics-counsel",
        "privacy-officer",
        "citation-stress-test",
    ]
    assert [r.info.deliberately_invalid for r in first] == [False, False, False, True]
    stress = first[-1].output
    assert stress is not None
    assert stress.extensions == {"deliberately_invalid": True}
    assert any(INVENTED_RULE_ID in [c.rule_id for c in claim.citations] for claim in stress.claims)
    assert len(offline_personas(include_stress_test=False)) == 3
    # With nothing excluded, unresolved or selected, only the rule-free cases remain.
    bare = dataclasses.replace(REQUEST, selected=(), unresolved=(), excluded=())
    (only,) = await run_personas(offline_personas()[-1:], bare)
    assert only.output is not None
    assert [c.citations[0].rule_id if c.citations else None for c in only.output.claims] == [
        INVENTED_RULE_ID,
        None,
    ]


async def test_offline_report_has_accepted_rejected_and_uncited_analysis() -> None:
    report = await analyze("May we email the brief?", FACTS, AT_MS, RELEASE)
    assert any(c.label == "rule_backed" for c in report.accepted)
    assert any(c.label == "model_analysis" and not c.rules for c in report.accepted)
    rejected = {p.reason for c in report.rejected for p in c.problems}
    assert {
        "cites_excluded_rule",
        "cites_unresolved_rule",
        "cites_unknown_rule",
        "cites_other_release",
        "normative_claim_without_citation",
    } <= rejected
    assert {c.persona for c in report.rejected} == {"citation-stress-test"}
    again = await analyze("May we email the brief?", dict(reversed(FACTS.items())), AT_MS, RELEASE)
    assert report_bytes(report) == report_bytes(again)


async def test_offline_personas_with_nothing_selected_or_unresolved() -> None:
    facts = validate_facts(
        {
            "capability": "document.read",
            "effects.egress": False,
            "destination.channel": "dms",
            "data.classification": "internal",
            "data.redaction_status": "none",
            "workflow.legal_hold": False,
        }
    )
    selection = select_rules(RELEASE, facts, AT_MS)
    assert not selection.selected
    assert not selection.unresolved
    request = build_request("Anything?", facts, RELEASE, selection)
    results = await run_personas(offline_personas(), request)
    report = build_report("Anything?", facts, RELEASE, selection, results)
    assert all(c.label == "model_analysis" for c in report.accepted)
    assert [p.status for p in report.personas] == ["answered"] * 4


# --- the chat-completions client against the fake server ------------------------------------


async def test_model_answer_is_read_with_extension_fields_and_minimized_facts(
    fake: FakeModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SMF_SWARM_API_KEY", "sk-test-secret")
    url = fake.answer("ok", GOOD_ANSWER)
    report = await analyze("May we email the brief?", FACTS, AT_MS, RELEASE, [persona(url)])
    (persona_report,) = report.personas
    assert (persona_report.status, persona_report.source, persona_report.model) == (
        "answered",
        "model",
        "test-model",
    )
    assert persona_report.extensions == {"model_notes": '{"tokens":42}'}
    backed, analysis = report.accepted
    assert (backed.label, backed.extensions) == ("rule_backed", {"confidence": "0.91"})
    assert analysis.label == "model_analysis"
    (request,) = fake.requests
    assert request["path"] == "/ok/v1/chat/completions"
    assert request["headers"]["Authorization"] == "Bearer sk-test-secret"
    body = request["body"]
    assert (body["model"], body["temperature"], body["response_format"]) == (
        "test-model",
        0,
        {"type": "json_object"},
    )
    user = json.loads(body["messages"][1]["content"])
    # Data minimization: a fact no rule reads never leaves the machine.
    assert "professional.matter_id" not in user["facts"]
    assert user["facts"]["capability"] == "external.transmit"
    system = body["messages"][0]["content"]
    assert SELECTED in system
    assert RELEASE.projection_id in system
    assert b"sk-test-secret" not in report_bytes(report)


async def test_no_api_key_means_no_authorization_header(
    fake: FakeModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SMF_SWARM_API_KEY", raising=False)
    url = fake.answer("ok", GOOD_ANSWER)
    await persona(url, json_mode=False).answer(REQUEST)
    (request,) = fake.requests
    assert "Authorization" not in request["headers"]
    assert "response_format" not in request["body"]


async def test_model_citing_an_invented_rule_is_rejected_not_repaired(
    fake: FakeModelServer,
) -> None:
    answer = {
        "claims": [
            {"text": "Consent waives it.", "kind": "normative", "citations": [INVENTED_RULE_ID]}
        ]
    }
    url = fake.answer("invented", answer)
    report = await analyze("Q?", FACTS, AT_MS, RELEASE, [persona(url)])
    assert not report.accepted
    (rejected,) = report.rejected
    assert [p.reason for p in rejected.problems] == ["cites_unknown_rule"]


async def test_fenced_json_answer_is_accepted(fake: FakeModelServer) -> None:
    url = fake.answer("fenced", "```json\n" + json.dumps(GOOD_ANSWER) + "\n```")
    output = await persona(url).answer(REQUEST)
    assert len(output.claims) == 2


@pytest.mark.parametrize(
    ("route", "expected"),
    [
        (Route(content="Sure! The brief may be sent once approved."), "persona_invalid_json"),
        (Route(content="```python\nprint(1)\n```"), "persona_invalid_json"),
        (Route(content=json.dumps({"answer": "yes"})), "persona_wrong_shape"),
        (
            Route(content=json.dumps({"claims": [{"text": "x", "kind": "opinion"}]})),
            "persona_wrong_shape",
        ),
        (Route(body=b"<html>gateway</html>"), "persona_bad_response"),
        (Route(body=json.dumps({"choices": []}).encode()), "persona_bad_response"),
        (
            Route(body=json.dumps({"choices": [{"message": {"content": None}}]}).encode()),
            "persona_bad_response",
        ),
        (Route(status=500, body=b'{"error": "overloaded"}'), "persona_http_error"),
        (Route(status=401, body=b'{"error": "bad key"}'), "persona_http_error"),
        (Route(hang_up=True), "persona_bad_response"),
    ],
    ids=[
        "prose",
        "wrong-fence",
        "wrong-shape",
        "wrong-kind",
        "not-json-body",
        "no-choices",
        "null-content",
        "http-500",
        "http-401",
        "hang-up",
    ],
)
async def test_failed_model_answer_is_reported_as_a_failed_persona(
    fake: FakeModelServer, route: Route, expected: str
) -> None:
    fake.routes["r"] = route
    good = fake.answer("ok", GOOD_ANSWER)
    bad_persona = persona(fake.url("r"))
    (good_persona,) = [
        ChatCompletionsPersona(
            PersonaInfo("good", "Good", "model", "test-model"),
            "a litigation associate",
            ChatConfig(base_url=good, model="test-model"),
        )
    ]
    report = await analyze("Q?", FACTS, AT_MS, RELEASE, [bad_persona, good_persona])
    failed, answered = report.personas
    assert (failed.status, failed.failure) == ("failed", expected)
    assert (failed.accepted, failed.rejected) == (0, 0)
    # Nothing is invented in the failed persona's place; the other still answers.
    claimed = {c.persona for c in report.accepted} | {c.persona for c in report.rejected}
    assert claimed == {"good"}
    assert answered.status == "answered"


async def test_model_server_that_times_out(fake: FakeModelServer) -> None:
    fake.routes["slow"] = Route(content=json.dumps(GOOD_ANSWER), delay_s=10)
    report = await analyze("Q?", FACTS, AT_MS, RELEASE, [persona(fake.url("slow"), timeout_s=0.3)])
    (failed,) = report.personas
    assert (failed.status, failed.failure) == ("failed", "persona_timeout")
    assert not report.accepted
    assert not report.rejected


async def test_overall_deadline_abandons_a_slow_model(fake: FakeModelServer) -> None:
    fake.routes["slow"] = Route(content=json.dumps(GOOD_ANSWER), delay_s=10)
    slow = persona(fake.url("slow"), timeout_s=30)
    (result,) = await run_personas([slow], REQUEST, deadline_s=0.3)
    assert (result.failure, result.output) == ("persona_timeout", None)


async def test_unreachable_oversized_and_misconfigured_endpoints(fake: FakeModelServer) -> None:
    fake.routes["big"] = Route(content="x" * 5000)
    host, port = fake.server.server_address[:2]
    personas = [
        ChatCompletionsPersona(
            PersonaInfo(name, name, "model", "m"), "an associate", ChatConfig(**config)
        )
        for name, config in (
            ("big", {"base_url": fake.url("big"), "model": "m", "max_response_bytes": 1000}),
            ("ftp", {"base_url": "ftp://127.0.0.1/v1", "model": "m"}),
            ("tls", {"base_url": f"https://{host!s}:{port}/ok/v1", "model": "m", "timeout_s": 2}),
        )
    ]
    closed = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    closed_port = closed.server_address[1]
    closed.server_close()
    personas.append(
        ChatCompletionsPersona(
            PersonaInfo("down", "down", "model", "m"),
            "an associate",
            ChatConfig(base_url=f"http://127.0.0.1:{closed_port}/v1", model="m", timeout_s=2),
        )
    )
    results = await run_personas(personas, REQUEST)
    assert [r.failure for r in results] == [
        "persona_bad_response",
        "persona_config_error",
        "persona_unreachable",
        "persona_unreachable",
    ]


# --- persona failures that are not the model's --------------------------------------------


async def test_a_broken_persona_is_an_internal_failure_and_names_must_be_unique() -> None:
    def explode(request: PersonaRequest) -> dict[str, Any]:
        raise RuntimeError("template bug")

    def misshapen(request: PersonaRequest) -> dict[str, Any]:
        return {"claims": [{"text": "x"}]}

    broken = OfflinePersona(PersonaInfo("broken", "Broken", "offline"), explode)
    shapeless = OfflinePersona(PersonaInfo("shapeless", "Shapeless", "offline"), misshapen)
    results = await run_personas([broken, shapeless], REQUEST)
    assert [(r.failure, r.detail) for r in results] == [
        ("persona_internal_error", "RuntimeError"),
        ("persona_wrong_shape", "$.claims[0].kind must be 'normative' or 'analysis'"),
    ]
    with pytest.raises(ValueError, match="unique"):
        await run_personas([broken, broken], REQUEST)


class _Recorder:
    info = PersonaInfo("recorder", "Recorder", "offline")

    def __init__(self) -> None:
        self.seen: list[PersonaRequest] = []

    async def answer(self, request: PersonaRequest) -> PersonaOutput:
        self.seen.append(request)
        return parse_output({"claims": []})


async def test_personas_see_the_selection_not_just_the_question() -> None:
    recorder = _Recorder()
    await analyze("Q?", FACTS, AT_MS, RELEASE, [recorder])
    (request,) = recorder.seen
    assert [r.rule_id for r in request.selected] == [r.rule_id for r in SELECTION.selected]
    assert request.unresolved[0].missing_facts
    assert "professional.matter_id" in request.facts
    assert "professional.matter_id" not in request.relevant_facts


# --- the command line with --personas openai -------------------------------------------------


def test_cli_analyze_with_openai_personas(
    fake: FakeModelServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = fake.answer("ok", GOOD_ANSWER)
    facts = tmp_path / "facts.json"
    facts.write_text(json.dumps({k: v for k, v in FACTS.items()}))
    projection = tmp_path / "projection"
    projection.mkdir()
    (projection / "analysis.json").write_bytes(compile_corpus(CORPUS).files()["analysis.json"])
    argv = [
        "swarm",
        "analyze",
        "--question",
        "May we email the brief?",
        "--facts",
        str(facts),
        "--projection",
        str(projection),
        "--at",
        "2026-06-01T00:00:00Z",
        "--personas",
        "openai",
        "--base-url",
        url,
        "--model",
        "test-model",
        "--json",
    ]
    assert main(argv) == 0
    report = json.loads(capsys.readouterr().out)
    assert [p["persona"] for p in report["personas"]] == [
        "litigation-associate",
        "ethics-counsel",
        "privacy-officer",
    ]
    assert {p["status"] for p in report["personas"]} == {"answered"}
    assert len(fake.requests) == 3
    with pytest.raises(SystemExit) as usage:
        main([*argv, "--timeout", "0"])
    assert usage.value.code == 2
    assert "error: argument --timeout: 0 is not a positive number" in capsys.readouterr().err
