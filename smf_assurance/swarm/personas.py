"""Personas: who writes claims, offline or through an OpenAI-compatible model.

A persona receives the question, the matter facts and
the rule selection, and returns claims through the same reader
(``smf_assurance.swarm.claims.parse_output``) whether it is a deterministic offline
template or a real model: there is one road from answer to report, so the
offline demo exercises the path a model's answer takes.

Invariants:

- A persona that fails (unreachable, HTTP error, timeout, an answer that is
  not JSON or not the expected shape) is reported as failed with a reason
  code (:class:`PersonaFailure`); nothing is invented to fill the gap and
  the other personas still answer.
- The offline set is deterministic: the same request gives the same claims,
  which is what makes a whole report reproducible byte for byte.
- One offline persona, ``citation-stress-test``, cites an excluded, an
  unresolved, an invented and a foreign-release rule on purpose. It is
  labelled ``deliberately_invalid`` so no reader mistakes it for analysis;
  it is there to show the validator rejecting each case.
- The model client sends only the facts some rule of the projection reads
  (data minimization: matter, tenant and actor identifiers stay home unless
  a rule needs them), never logs the API key, and bounds the response size
  and the time spent. Standard library HTTP (``http.client``) in a worker
  thread, so no new dependency enters the analysis path.
"""

from __future__ import annotations

import http.client
import json
import os
import ssl
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal, Protocol
from urllib.parse import urlsplit

import anyio
import msgspec
import structlog

from smf_assurance.swarm.claims import PersonaOutput, ShapeError, parse_output
from smf_assurance.swarm.selector import AnalysisRelease, Selection

log = structlog.get_logger(__name__)

DEFAULT_TIMEOUT_S: Final = 30.0
MAX_RESPONSE_BYTES: Final = 1024 * 1024
API_KEY_ENV: Final = "SMF_SWARM_API_KEY"
INVENTED_RULE_ID: Final = "urn:smf:rule:invented:not-in-any-release"
FOREIGN_RELEASE_ID: Final = "smf-foreign-release-1999.1"

FailureReason = Literal[
    "persona_unreachable",
    "persona_http_error",
    "persona_bad_response",
    "persona_invalid_json",
    "persona_wrong_shape",
    "persona_timeout",
    "persona_config_error",
    "persona_internal_error",
]


class PersonaFailure(Exception):
    """A persona gave no usable answer; ``reason`` goes into the report as is."""

    def __init__(self, reason: FailureReason, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason: FailureReason = reason
        self.detail = detail[:512]


# --- the request every persona answers ------------------------------------------


@dataclass(frozen=True, slots=True)
class RuleBrief:
    """What a persona is told about one rule."""

    rule_id: str
    title: str
    statement: str
    authority_type: str
    reads: tuple[str, ...]
    missing_facts: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class PersonaRequest:
    question: str
    facts: Mapping[str, Any]
    relevant_facts: Mapping[str, Any]
    """Only the facts some rule of the projection reads: what leaves the machine."""
    release_id: str
    projection_id: str
    selected: tuple[RuleBrief, ...]
    unresolved: tuple[RuleBrief, ...]
    excluded: tuple[RuleBrief, ...]


def build_request(
    question: str, facts: Mapping[str, Any], release: AnalysisRelease, selection: Selection
) -> PersonaRequest:
    def brief(rule_id: str, missing: tuple[str, ...]) -> RuleBrief:
        rule = release.rules[rule_id]
        return RuleBrief(
            rule_id=rule_id,
            title=rule.title,
            statement=rule.statement,
            authority_type=rule.authority_type,
            reads=tuple(sorted(release.predicates[rule_id].paths())),
            missing_facts=missing,
        )

    read = set().union(*(p.paths() for p in release.predicates.values()))
    return PersonaRequest(
        question=question,
        facts=facts,
        relevant_facts={k: v for k, v in facts.items() if k in read},
        release_id=release.release_id,
        projection_id=release.projection_id,
        selected=tuple(brief(r.rule_id, ()) for r in selection.selected),
        unresolved=tuple(brief(r.rule_id, r.missing_facts) for r in selection.unresolved),
        excluded=tuple(brief(r.rule_id, ()) for r in selection.excluded),
    )


# --- the interface ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PersonaInfo:
    name: str
    label: str
    source: Literal["offline", "model"]
    model: str | None = None
    deliberately_invalid: bool = False


class Persona(Protocol):
    """Anything that answers a request with claims, or raises PersonaFailure."""

    @property
    def info(self) -> PersonaInfo: ...

    async def answer(self, request: PersonaRequest) -> PersonaOutput: ...


# --- deterministic offline personas ------------------------------------------------

Compose = Callable[[PersonaRequest], dict[str, Any]]


@dataclass(frozen=True, slots=True)
class OfflinePersona:
    """A template persona: ``compose`` builds the JSON answer a model would send."""

    info: PersonaInfo
    compose: Compose = field(repr=False)

    async def answer(self, request: PersonaRequest) -> PersonaOutput:
        return parse_output(self.compose(request))


def _reads_any(rule: RuleBrief, prefixes: tuple[str, ...]) -> bool:
    return any(path.startswith(prefixes) for path in rule.reads)


def _litigation_associate(request: PersonaRequest) -> dict[str, Any]:
    """Every selected rule, cited in the qualified ``release/rule`` form."""
    claims: list[dict[str, Any]] = [
        {
            "text": f"{rule.title}: {rule.statement}",
            "kind": "normative",
            "citations": [f"{request.release_id}/{rule.rule_id}"],
            "quote": rule.statement,
        }
        for rule in request.selected
    ]
    claims.append(
        {
            "text": (
                f"The question as put was: {request.question} The rules cited here were "
                "selected from the matter facts and the evaluation time alone; the wording "
                "of the question did not change which rules apply."
            ),
            "kind": "analysis",
            "citations": [],
        }
    )
    if request.unresolved:
        missing = sorted({m for rule in request.unresolved for m in rule.missing_facts})
        claims.append(
            {
                "text": (
                    f"{len(request.unresolved)} rule(s) could not be resolved on these facts; "
                    f"establishing {', '.join(missing)} would settle whether they apply."
                ),
                "kind": "analysis",
                "citations": [],
            }
        )
    return {"claims": claims}


def _ethics_counsel(request: PersonaRequest) -> dict[str, Any]:
    """Rules about transmissions and professional roles, cited as objects."""
    claims: list[dict[str, Any]] = [
        {
            "text": f"Professional-conduct view: {rule.statement}",
            "kind": "normative",
            "citations": [
                {
                    "rule_id": rule.rule_id,
                    "release_id": request.release_id,
                    "projection_id": request.projection_id,
                }
            ],
            "basis": "professional_conduct",
        }
        for rule in request.selected
        if _reads_any(rule, ("capability", "destination.channel", "professional."))
    ]
    claims.append(
        {
            "text": (
                "This analysis was written by a template persona, not by a lawyer; a licensed "
                "attorney should confirm it before anyone relies on it."
            ),
            "kind": "analysis",
            "citations": [],
        }
    )
    return {"claims": claims}


def _privacy_officer(request: PersonaRequest) -> dict[str, Any]:
    """Rules about data leaving the firm; unresolved ones become open questions."""
    claims: list[dict[str, Any]] = [
        {
            "text": f"Data-protection view: {rule.statement}",
            "kind": "normative",
            "citations": [rule.rule_id],
        }
        for rule in request.selected
        if _reads_any(rule, ("data.", "effects.egress"))
    ]
    claims.extend(
        {
            "text": (
                f"Open question: whether '{rule.title}' applies depends on "
                f"{', '.join(rule.missing_facts)}, which the matter facts do not state."
            ),
            "kind": "analysis",
            "citations": [],
        }
        for rule in request.unresolved
        if _reads_any(rule, ("data.", "effects.egress"))
    )
    return {"claims": claims}


def _citation_stress_test(request: PersonaRequest) -> dict[str, Any]:
    """Deliberately invalid citations, one per rejection the validator must make."""
    claims: list[dict[str, Any]] = []
    if request.excluded:
        rule = request.excluded[0]
        claims.append(
            {
                "text": f"[deliberately invalid: cites an excluded rule] {rule.statement}",
                "kind": "normative",
                "citations": [rule.rule_id],
            }
        )
    if request.unresolved:
        rule = request.unresolved[0]
        claims.append(
            {
                "text": f"[deliberately invalid: cites an unresolved rule] {rule.statement}",
                "kind": "normative",
                "citations": [rule.rule_id],
            }
        )
    claims.append(
        {
            "text": "[deliberately invalid: cites an invented rule] Client consent waives "
            "every approval requirement.",
            "kind": "normative",
            "citations": [INVENTED_RULE_ID],
        }
    )
    if request.selected:
        rule = request.selected[0]
        claims.append(
            {
                "text": f"[deliberately invalid: cites another release] {rule.statement}",
                "kind": "normative",
                "citations": [f"{FOREIGN_RELEASE_ID}/{rule.rule_id}"],
            }
        )
    claims.append(
        {
            "text": "[deliberately invalid: normative without citation] The firm may always "
            "send documents to opposing counsel.",
            "kind": "normative",
            "citations": [],
        }
    )
    return {"claims": claims, "deliberately_invalid": True}


def offline_personas(*, include_stress_test: bool = True) -> tuple[OfflinePersona, ...]:
    """The default persona set: three template roles and the validator demonstration."""
    personas = [
        OfflinePersona(
            PersonaInfo("litigation-associate", "Litigation associate", "offline"),
            _litigation_associate,
        ),
        OfflinePersona(PersonaInfo("ethics-counsel", "Ethics counsel", "offline"), _ethics_counsel),
        OfflinePersona(
            PersonaInfo("privacy-officer", "Privacy officer", "offline"), _privacy_officer
        ),
    ]
    if include_stress_test:
        personas.append(
            OfflinePersona(
                PersonaInfo(
                    "citation-stress-test",
                    "Citation stress test (deliberately invalid, shows the validator working)",
                    "offline",
                    deliberately_invalid=True,
                ),
                _citation_stress_test,
            )
        )
    return tuple(personas)


# --- OpenAI-compatible chat completions ------------------------------------------


@dataclass(frozen=True, slots=True)
class ChatConfig:
    """Where and how to reach an OpenAI-compatible ``/chat/completions`` endpoint.

    ``base_url`` is the API root (``https://api.openai.com/v1``,
    ``http://127.0.0.1:11434/v1``); the key is read from ``api_key_env`` at
    call time and sent as a bearer token only when set.
    """

    base_url: str
    model: str
    api_key_env: str = API_KEY_ENV
    timeout_s: float = DEFAULT_TIMEOUT_S
    max_response_bytes: int = MAX_RESPONSE_BYTES
    json_mode: bool = True


_ROLES: Final = (
    ("litigation-associate", "Litigation associate", "a litigation associate"),
    ("ethics-counsel", "Ethics counsel", "a law firm's professional-responsibility counsel"),
    ("privacy-officer", "Privacy officer", "a law firm's data-protection officer"),
)

_ANSWER_SHAPE: Final = (
    'Answer with one JSON object and nothing else: {"claims": [{"text": string, '
    '"kind": "normative" or "analysis", "citations": [rule_id, ...]}]}. '
    "A normative claim says what a rule requires and must cite one or more rule ids "
    "from SELECTED RULES, and nothing else. Never cite an UNRESOLVED or EXCLUDED rule "
    "or a rule id that is not listed. Anything that is your own reasoning is kind "
    '"analysis" with no citations. You may add "quote" (verbatim text of the cited '
    "rule's statement) to a claim."
)


def _system_prompt(role: str, request: PersonaRequest) -> str:
    def rules(briefs: Sequence[RuleBrief], *, missing: bool = False) -> str:
        items = [
            {"rule_id": b.rule_id, "title": b.title, "statement": b.statement}
            | ({"missing_facts": list(b.missing_facts)} if missing else {})
            for b in briefs
        ]
        return json.dumps(items, ensure_ascii=False, sort_keys=True)

    return (
        f"You are {role} analysing a matter for a law firm. {_ANSWER_SHAPE}\n"
        f"Release: {request.release_id}. Projection: {request.projection_id}.\n"
        f"SELECTED RULES: {rules(request.selected)}\n"
        f"UNRESOLVED RULES (do not cite; say which facts are missing): "
        f"{rules(request.unresolved, missing=True)}\n"
        f"EXCLUDED RULE IDS (do not cite): {json.dumps([b.rule_id for b in request.excluded])}"
    )


def _strip_fence(content: str) -> str:
    """Accept one Markdown code fence around the whole answer, as models often add."""
    text = content.strip()
    if text.startswith("```") and text.endswith("```") and len(text) >= 6:
        first_line, _, rest = text[3:-3].partition("\n")
        return rest if first_line.strip() in ("", "json") else text
    return text


def _content_of(body: bytes) -> str:
    try:
        response = json.loads(body)
        content = response["choices"][0]["message"]["content"]
    except (ValueError, KeyError, IndexError, TypeError) as exc:
        raise PersonaFailure(
            "persona_bad_response", f"not a chat-completions response: {exc!r}"
        ) from exc
    if not isinstance(content, str):
        raise PersonaFailure("persona_bad_response", "message content is not text")
    return content


@dataclass(frozen=True, slots=True)
class ChatCompletionsPersona:
    """One role answered by a model behind an OpenAI-compatible endpoint."""

    info: PersonaInfo
    role: str
    config: ChatConfig

    def _payload(self, request: PersonaRequest) -> bytes:
        body: dict[str, Any] = {
            "model": self.config.model,
            "temperature": 0,
            "messages": [
                {"role": "system", "content": _system_prompt(self.role, request)},
                {
                    "role": "user",
                    "content": json.dumps(
                        {"question": request.question, "facts": dict(request.relevant_facts)},
                        ensure_ascii=False,
                        sort_keys=True,
                    ),
                },
            ],
        }
        if self.config.json_mode:
            body["response_format"] = {"type": "json_object"}
        return json.dumps(body, ensure_ascii=False).encode("utf-8")

    def _connection(self) -> tuple[http.client.HTTPConnection, str]:
        url = urlsplit(self.config.base_url)
        if url.scheme not in ("http", "https") or not url.hostname:
            raise PersonaFailure("persona_config_error", "base URL must be http(s)://host[:port]")
        path = url.path.rstrip("/") + "/chat/completions"
        if url.scheme == "https":
            context = ssl.create_default_context()
            return (
                http.client.HTTPSConnection(
                    url.hostname, url.port, timeout=self.config.timeout_s, context=context
                ),
                path,
            )
        return http.client.HTTPConnection(
            url.hostname, url.port, timeout=self.config.timeout_s
        ), path

    def _post(self, payload: bytes) -> bytes:
        """Blocking POST, run in a worker thread; every failure is a PersonaFailure."""
        connection, path = self._connection()
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        api_key = os.environ.get(self.config.api_key_env)
        if api_key:
            headers["Authorization"] = f"Bearer {api_key}"
        try:
            connection.request("POST", path, body=payload, headers=headers)
            response = connection.getresponse()
            body = response.read(self.config.max_response_bytes + 1)
        except TimeoutError as exc:
            raise PersonaFailure(
                "persona_timeout", f"no answer in {self.config.timeout_s} s"
            ) from exc
        except http.client.HTTPException as exc:
            raise PersonaFailure("persona_bad_response", repr(exc)) from exc
        except OSError as exc:
            raise PersonaFailure("persona_unreachable", exc.strerror or repr(exc)) from exc
        finally:
            connection.close()
        if not 200 <= response.status < 300:
            raise PersonaFailure("persona_http_error", f"HTTP {response.status}")
        if len(body) > self.config.max_response_bytes:
            raise PersonaFailure(
                "persona_bad_response",
                f"response larger than {self.config.max_response_bytes} bytes",
            )
        return body

    async def answer(self, request: PersonaRequest) -> PersonaOutput:
        body = await anyio.to_thread.run_sync(
            self._post, self._payload(request), abandon_on_cancel=True
        )
        content = _strip_fence(_content_of(body))
        try:
            value = msgspec.json.decode(content)
        except msgspec.DecodeError as exc:
            raise PersonaFailure("persona_invalid_json", str(exc)) from exc
        try:
            return parse_output(value)
        except ShapeError as exc:
            raise PersonaFailure("persona_wrong_shape", str(exc)) from exc


def model_personas(config: ChatConfig) -> tuple[ChatCompletionsPersona, ...]:
    """The three roles, each answered by the configured model."""
    return tuple(
        ChatCompletionsPersona(PersonaInfo(name, label, "model", config.model), role, config)
        for name, label, role in _ROLES
    )


# --- running a set of personas ------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PersonaResult:
    info: PersonaInfo
    output: PersonaOutput | None
    failure: FailureReason | None = None
    detail: str = ""


async def _run_one(persona: Persona, request: PersonaRequest, deadline_s: float) -> PersonaResult:
    try:
        with anyio.fail_after(deadline_s):
            output = await persona.answer(request)
    except PersonaFailure as failure:
        return PersonaResult(persona.info, None, failure.reason, failure.detail)
    except TimeoutError:
        return PersonaResult(persona.info, None, "persona_timeout", f"no answer in {deadline_s} s")
    except ShapeError as exc:
        return PersonaResult(persona.info, None, "persona_wrong_shape", str(exc)[:512])
    except Exception as exc:
        # A persona bug must not take the report down, nor be hidden in it.
        log.exception("swarm_persona_failed", persona=persona.info.name)
        return PersonaResult(persona.info, None, "persona_internal_error", type(exc).__name__)
    return PersonaResult(persona.info, output)


async def run_personas(
    personas: Sequence[Persona],
    request: PersonaRequest,
    deadline_s: float = 2 * DEFAULT_TIMEOUT_S,
    on_done: Callable[[int], None] | None = None,
) -> tuple[PersonaResult, ...]:
    """Ask every persona at once; results come back in the personas' order.

    ``on_done`` is told how many personas have finished (for progress output).
    """
    names = [p.info.name for p in personas]
    if len(set(names)) != len(names):
        raise ValueError("persona names must be unique: claim ids are built from them")
    results: list[PersonaResult | None] = [None] * len(personas)

    async def run(index: int, persona: Persona) -> None:
        results[index] = await _run_one(persona, request, deadline_s)
        if on_done is not None:
            on_done(sum(r is not None for r in results))

    async with anyio.create_task_group() as group:
        for index, persona in enumerate(personas):
            group.start_soon(run, index, persona)
    return tuple(r for r in results if r is not None)
