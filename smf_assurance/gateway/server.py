"""The model gateway: the model endpoint as an enforcement point the runtime cannot switch off.

Both runtimes reach their model through an OpenAI-compatible
``base_url``; that endpoint sits outside the runtime and every turn crosses
it, whatever the runtime's settings, its plugins, or its safe mode. Here:

- **Admission.** Each runtime presents its own bearer token (only its hash is
  configured here). It is served only while the gate says it holds a fresh,
  accepted attestation (``smf.gateway.admit``, answered signed by the gate,
  ``smf_assurance.pipeline.desks.model_admission``); the answer is kept for at most
  :attr:`GatewaySettings.admission_cache_ms` and never past the attestation's
  lease. A runtime in safe mode, with its plugin disabled, unattested or on
  another release gets an HTTP error, and the gate records the refusal. The
  request's instance proof (header ``Smf-Instance-Proof``) goes to the gate
  with the question, so a runtime whose adapter proves its process is served
  only in that process. The gate's admission of a proof names the process and
  the runtime's public keys (``ProofStanding``); it is kept per runtime,
  classification and process, and a later request of that process is served on
  it only once the gateway has checked its proof as the gate does: signed by one
  of those keys, for that runtime and process, fresh within the gate's window,
  for the body received, its nonce never seen here before (a bounded seen-once
  set, ``pipeline.core.seen_once``). A proof that fails any of it is asked
  about, so the gate refuses it and records why; one whose nonce was seen here
  is asked about as seen (``proof_seen``), and the gate refuses it as replayed.
- **Output held until the verdict.** The provider's answer is assembled whole
  (``smf_assurance.core.model_turns``); everything of it the runtime may
  show goes through the output buffer (``smf.output.<id>``, the same detectors,
  policy and evidence as any output), as the runtime's declared
  delivery surface, with a close signed by the gateway's key: its text, and each
  tool call's name and arguments (a runtime prints them: Hermes's tool-progress
  line, "Unknown tool '…'"), whether the turn has text or not. Only then is
  anything written to the runtime: the released turn, or a notice in its place
  with no tool call. Nothing is streamed through, so no partial text ever
  reaches it, and no other string of the provider's reaches it at all: the
  turn's id, model, finish reason and usage are the gateway's own
  (``model_turns.own_turn``), and the model list is decided like a reply.
- **Detected across turns.** The close carries a window: the tail of what the
  conversation was given to show before (its assistant messages, text and tool
  calls, as the request's history has them), as long as the release in force
  says (``detection_window_chars``, told by the gate with each admission). The
  detectors read the turn after it, so a marker split across two turns or two
  calls is seen; the window is never released. Two more readings see pieces
  the display puts something between: the assistant's texts across turns (tool
  calls are printed between them), and the tool calls' argument values across
  calls (their names stand between them); what only they find raises the
  close's facts.
- **Facts of a turn.** A turn with text is decided in the runtime's declared
  facts raised by the context below (classification and taint), as before. A
  turn with tool calls and no text is decided in the declared facts raised by
  the context's classification only: the session's taint is carried to each
  call's own decision by its record (withholding the display would withhold the
  calls, and no decision would be recorded for them); markers in what the turn
  shows still raise it.
- **Tool-call accounting.** Every tool call in a turn the gateway returns gets
  an id it issued (:func:`new_call_id`, remembered per runtime, bounded). When
  a later request carries a tool result for one of them that the gate has not
  yet said was decided, the gateway asks (``smf.gateway.calls``, answered
  signed by the gate, ``smf_assurance.pipeline.desks.tool_calls``); a result no proposal
  covered is refused ``ungated_tool_result`` before the provider is asked, and
  the gate has stopped the runtime until an operator clears it. A call to a tool the
  request did not offer (the runtime answers it with an error before any hook sees
  it) is named in the question (``not_offered``): the gate records it as a refusal
  and the runtime keeps being served. So is a call whose arguments certainly fail the
  schema the request offered for its tool (``invalid_arguments``; OpenClaw checks them
  before any hook, ``smf_assurance.core.tool_arguments`` says when the
  gateway is sure it must have refused them). So is each call of a turn the runtime
  refuses whole because some call's arguments are not JSON (Hermes, on a turn it did
  not stream: ``invalid_arguments`` for those, ``invalid_turn`` for the others), when
  its result is the runtime's own text for that case; any other result stops it. A
  call the adapter refused itself was reported by it as a refusal, so it is covered
  like any decided call.
- **Session taint outside the runtime.** Before a turn with tool calls
  is returned, each issued id gets its record in ``SMF_CALL_CONTEXT``
  (``smf_assurance.subjects.call_context``): what the detectors raised over the request's
  tool results, the taint of injection phrasing anywhere else the model reads
  (system prompt and the context files in it, history, tool definitions), the
  taint of content a tainted session wrote (below), raised again by the records
  of every gateway id the history names (lineage, so taint survives a resume, a
  restart, a new session id and a compacted history). The gate raises the
  proposal of that id by it. A record that cannot be written, or a history whose
  records cannot be read, refuses the turn (``call_context_unavailable``): no
  call goes out without its record. The reply is decided under the same context.
- **Files carry taint.** A tool call issued in a tainted context has the digests
  of the lines its arguments could write recorded in ``SMF_TAINTED_CONTENT``
  (``smf_assurance.core.written_content``, before the turn is returned; a
  record not written refuses the turn, ``tainted_content_unavailable``); every
  request's messages are digested the same way and looked up, and one carrying
  such a line is tainted (``content_written_by_tainted_session``): a context file
  a tainted session wrote taints the session that loads it.
- **Fail closed.** A missing or wrong token, bad JSON, an oversized body, an
  upstream that hangs, errors or breaks its stream, a gate that does not
  answer: a clear HTTP error (OpenAI's error shape, our reason code), nothing
  released, and every other runtime keeps being served.

No prompt, reply or token is logged at any level: only runtime ids, reason
codes and sizes.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import secrets
import ssl
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Final, Literal, TypeVar

import aiohttp
import msgspec
import structlog
from aiohttp import web
from nats.aio.client import Client
from nats.errors import Error as NatsError

from smf_assurance.adapters.output import OutputStreamer, new_stream_id
from smf_assurance.core import model_turns
from smf_assurance.core.detectors import detect, injection_found, raise_facts
from smf_assurance.core.model_turns import Turn, TurnError
from smf_assurance.core.projection import DEFAULT_DETECTION_WINDOW_CHARS
from smf_assurance.core.seen_once import Seen, SeenOnce
from smf_assurance.core.tool_arguments import (
    InvalidJsonAnswer,
    certainly_invalid,
    invalid_json_turn,
)
from smf_assurance.core.written_content import read_digests, written_digests
from smf_assurance.pipeline.stores.call_context import (
    CallContextInvalid,
    CallContextUnavailable,
    CallContextWriter,
    read_call_context,
)
from smf_assurance.pipeline.stores.tainted_content import (
    TaintedContentIndex,
    TaintedContentUnavailable,
)
from smf_assurance.subjects import dsse, names
from smf_assurance.subjects.bus_access import CLIENT_API
from smf_assurance.subjects.call_context import CALL_ID_PREFIX, CallContext
from smf_assurance.subjects.canonical import CanonicalJSONError
from smf_assurance.subjects.clock import wall_clock_ms
from smf_assurance.subjects.envelope import Classification, InjectionTaint, Name, Surface
from smf_assurance.subjects.keys import SigningKey, VerifyKey
from smf_assurance.subjects.messages import (
    ActorContext,
    DataFacts,
    OutputVerdict,
    ProposedDestination,
)
from smf_assurance.subjects.model_gateway import (
    MAX_CALLS_PER_ASK,
    MAX_INSTANCE_PROOF_CHARS,
    GatewayAdmission,
    GatewayAdmit,
    GatewayCalls,
    GatewayCallsAnswer,
    InstanceProof,
    ProviderName,
    open_instance_proof,
    request_digest,
    trusted_proof_keys,
    unverified_instance_proof,
)
from smf_assurance.subjects.patterns import Token
from smf_assurance.subjects.tainted_content import (
    MAX_DIGESTS_PER_RECORD,
    MAX_PARTS_PER_CALL,
    TaintedContent,
)

log = structlog.get_logger(__name__)
A = TypeVar("A", GatewayAdmission, GatewayCallsAnswer)

TOKEN_PREFIX: Final = "sha256:"  # noqa: S105 - the prefix of a hash, not a secret
OUTPUT_CHUNK_BYTES: Final = 32 * 1024
_INVALID_JSON_TEXTS: Final[Mapping[InvalidJsonAnswer, Callable[[str], bool]]] = {
    "arguments": model_turns.is_invalid_json_refusal,
    "same_tool": model_turns.is_invalid_json_refusal,
    "skipped": lambda text: text == model_turns.INVALID_JSON_SKIPPED,
}
"""The runtime's own text for each call of a turn it refused whole for arguments that are
not JSON: only a result of exactly that form counts as its refusal; anything else (a
tool's output) is a result no proposal decided, and stops the runtime."""
WITHHELD_NOTICE: Final = "[SMF Assurance Gate: this reply was withheld ({reasons}).]"
HELD_NOTICE: Final = (
    "[SMF Assurance Gate: this reply is held for approval ({reasons}); approval {approval}.]"
)


class GatewayRuntime(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One runtime the gateway serves, as its operator declared it.

    ``destination`` and ``surface`` are where the runtime delivers replies
    (a CLI terminal, a client chat): the output gate decides each reply for
    that destination, whatever the runtime says at run time.
    """

    runtime_id: Token
    token_sha256: str
    adapter_id: Name
    actor: ActorContext
    destination: ProposedDestination
    surface: Surface = "direct_reply"
    facts: DataFacts = DataFacts()
    account_tool_calls: bool = True
    """Tool-call accounting: a tool result for a call this gateway issued must have been
    decided by the gate. Only for a runtime whose adapter puts the call id into its
    proposals (Hermes does; the OpenClaw adapter does not yet, docs/OPENCLAW.md)."""
    checks_tool_arguments: bool = False
    """The runtime checks each call's arguments against the schema it offered before any
    hook, and runs none that fails (OpenClaw: ``validateToolCallForBatchAdmission``;
    not Hermes, which coerces what it can and runs the call). Only then is a call whose
    arguments certainly fail that schema told to the gate as refused by the runtime;
    for any other runtime such a call may run, so its unproposed result stops it."""
    refuses_invalid_json_turns: bool = False
    """The runtime refuses, before any hook, a turn it did not stream in which some
    call's arguments are not JSON, and answers each of its calls with a text of its own
    (Hermes 0.19: after three such turns in a row; it retries the first two unanswered).
    Only then are the calls of such a turn remembered, their results checked against
    those texts and told to the gate as refused by the runtime. Not OpenClaw, which
    ends such a turn as a failed stream (``malformed_tool_call_arguments``) and gives
    its calls no text of this kind (docs/OPENCLAW.md)."""


class Upstream(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """The model provider the gateway forwards to (``base_url`` ends in ``/v1``), by
    the name the release approves it under (``model_providers`` of the release)."""

    provider: ProviderName
    base_url: str
    api_key_file: str | None = None


@dataclass(frozen=True, slots=True)
class GatewaySettings:
    max_body_bytes: int = 8 * 1024 * 1024
    max_answer_bytes: int = 8 * 1024 * 1024
    upstream_connect_s: float = 5.0
    upstream_read_s: float = 60.0
    """No byte from the provider for this long ends the turn ``upstream_timeout``."""
    upstream_total_s: float = 300.0
    admit_timeout_s: float = 2.0
    output_timeout_s: float = 10.0
    admission_cache_ms: int = 1000
    max_in_flight: int = 16
    """Per runtime: a runtime cannot take every slot of the gateway."""
    calls_timeout_s: float = 2.0
    max_issued_calls: int = 8192
    """Per runtime: the tool-call ids this gateway issued and still checks (oldest
    forgotten first; a result for a forgotten id is not checked, docs/EVIDENCE.md)."""
    max_covered_calls: int = 8192
    """Per runtime: ids the gate said were decided, not asked again."""
    context_timeout_s: float = 2.0
    """One write or read of the call-context bucket; past it the turn is refused."""
    max_kept_contexts: int = 65_536
    """Call contexts kept in memory (written or read here), oldest forgotten first; a
    forgotten one is read from the bucket again."""
    max_lineage_ids: int = 4096
    """Gateway ids one request's history may name; more is refused
    (``request_too_many_tool_calls``), never read in part."""
    lineage_reads: int = 64
    """Reads of the bucket in flight at once for one request."""
    read_cache_entries: int = 4096
    """Messages whose reading (injection phrasing found, line digests) is kept, so a
    history is not read again every turn; oldest forgotten first."""
    read_cache_chars: int = 32 * 1024 * 1024
    """The characters of those messages kept at most (they are the cache's keys)."""
    proof_window_ms: int = 10_000
    """The widest proof freshness window checked here (the gate's, as its admission
    says, when narrower); each nonce is kept twice this long past its proof's issue
    time, so a proof served here cannot be replayed to the gate while the two clocks
    differ by less than this."""
    max_proof_nonces: int = 65_536
    """Nonces kept at once; when full no request is served on a kept admission (each
    is asked about) until every nonce that could not be kept is past its window."""


class Refusal(Exception):
    """An HTTP error for the runtime: a status and one of our reason codes."""

    def __init__(self, status: int, reason_code: str) -> None:
        super().__init__(reason_code)
        self.status = status
        self.reason_code = reason_code


def token_hash(token: str) -> str:
    return TOKEN_PREFIX + hashlib.sha256(token.encode()).hexdigest()


def error_response(status: int, reason_code: str) -> web.Response:
    """OpenAI's error shape: the runtime shows ``message`` as the failure."""
    body = {
        "error": {
            "message": f"SMF model gateway refused the request: {reason_code}",
            "type": "smf_gateway_error",
            "code": reason_code,
        }
    }
    return web.json_response(body, status=status)


def _request_digest(chat: model_turns.ChatRequest) -> str | None:
    """The digest a proof of this request must name (``subjects.model_gateway``), or None
    for messages with no canonical form (a proof bound to a body then never matches)."""
    try:
        return request_digest(chat.body["messages"])
    except CanonicalJSONError:
        return None


def new_call_id() -> str:
    """A gateway tool-call id: ``smfc`` and 24 lowercase hex digits, alphanumeric, so a
    runtime that sanitizes ids (OpenClaw's ``sanitizeToolCallId``) keeps it as is."""
    return CALL_ID_PREFIX + secrets.token_hex(12)


@dataclass
class _Bounded:
    """A set of ids, oldest dropped first beyond ``limit``."""

    limit: int
    _ids: OrderedDict[str, None] = field(default_factory=OrderedDict)

    def add(self, value: str) -> None:
        self._ids[value] = None
        self._ids.move_to_end(value)
        while len(self._ids) > self.limit:
            self._ids.popitem(last=False)

    def __contains__(self, value: object) -> bool:
        return value in self._ids


@dataclass
class _Marks:
    """Ids with what the runtime answers each, oldest dropped first beyond ``limit``."""

    limit: int
    _marks: OrderedDict[str, InvalidJsonAnswer] = field(default_factory=OrderedDict)

    def add(self, value: str, mark: InvalidJsonAnswer) -> None:
        self._marks[value] = mark
        self._marks.move_to_end(value)
        while len(self._marks) > self.limit:
            self._marks.popitem(last=False)

    def get(self, value: str) -> InvalidJsonAnswer | None:
        return self._marks.get(value)


@dataclass(slots=True)
class _Standing:
    runtime_version: str
    valid_until_ms: int
    window_chars: int = DEFAULT_DETECTION_WINDOW_CHARS
    """The release's detection window, as the gate's admission said."""
    proof_keys: Mapping[str, VerifyKey] | None = None
    """An admission of an instance proof: the keys its process's next proofs are
    checked by here (None: an admission given without a proof)."""
    proof_window_ms: int = 0
    instance_id: str | None = None
    """The process the gate proved for this admission (its ``proof_standing``): each
    output close of a turn served on it names that process (``OutputClose.instance_id``),
    so the gate releases the turn only while that process still stands."""


@dataclass(frozen=True, slots=True)
class _Reading:
    """What one message shows the model, as the gateway judges it."""

    injection: bool
    digests: frozenset[str]


@dataclass
class _ReadCache:
    """Readings by message text, bounded by entries and characters, oldest out first."""

    entries: int
    chars: int
    _kept: OrderedDict[str, _Reading] = field(default_factory=OrderedDict)
    _size: int = 0

    def read(self, text: str) -> _Reading:
        kept = self._kept.get(text)
        if kept is not None:
            self._kept.move_to_end(text)
            return kept
        reading = _Reading(injection_found(text), read_digests(text))
        if len(text) <= self.chars:
            self._kept[text] = reading
            self._size += len(text)
            while len(self._kept) > self.entries or self._size > self.chars:
                old, _ = self._kept.popitem(last=False)
                self._size -= len(old)
        return reading


@dataclass
class ModelGateway:
    nc: Client
    key: SigningKey
    """The gateway's own key: signs the output closes of the runtimes it serves."""
    gate_keys: Callable[[], Mapping[str, VerifyKey]]
    runtimes: tuple[GatewayRuntime, ...]
    upstream: Upstream
    settings: GatewaySettings = field(default_factory=GatewaySettings)
    clock: Callable[[], int] = field(default=wall_clock_ms)
    _by_token: dict[str, GatewayRuntime] = field(init=False)
    _standing: dict[tuple[str, str, str | None, bool], _Standing] = field(
        init=False, default_factory=dict
    )
    """Kept admissions by (runtime, classification, the process its proof proved or None
    when given without a proof, whether it was a model list's: that admission serves no
    turn)."""
    _nonces: SeenOnce = field(init=False)
    """``(runtime_id, nonce)`` of every proof that reached this gateway."""
    _blind_until_ms: int = field(init=False, default=0)
    """Until then a nonce may have gone unkept (the set was full): nothing is served on
    a kept admission of a proof."""
    _in_flight: dict[str, int] = field(init=False, default_factory=dict)
    _confined: dict[str, str | None] = field(init=False, default_factory=dict)
    """Per runtime: the profile digest its last admission named (None: not confined)."""
    _issued: dict[str, _Bounded] = field(init=False, default_factory=dict)
    _covered: dict[str, _Bounded] = field(init=False, default_factory=dict)
    _not_offered: dict[str, _Bounded] = field(init=False, default_factory=dict)
    """Per runtime: issued ids whose call named a tool its request did not offer."""
    _invalid_arguments: dict[str, _Bounded] = field(init=False, default_factory=dict)
    """Per runtime: issued ids whose arguments certainly failed the offered schema."""
    _invalid_json: dict[str, _Marks] = field(init=False, default_factory=dict)
    """Per runtime: issued ids of turns the runtime refuses whole for arguments that are
    not JSON, with the answer it gives each (``refuses_invalid_json_turns``)."""
    _session: aiohttp.ClientSession | None = field(init=False, default=None)
    _upstream_key: str | None = field(init=False, default=None)
    call_context_keys: Callable[[], Mapping[str, VerifyKey]] | None = None
    """The keys a call-context record may be signed by (the registry's ``gateway``
    role: another gateway replica wrote it); ``None``: this gateway's own key only."""
    _contexts: OrderedDict[tuple[str, str], CallContext] = field(
        init=False, default_factory=OrderedDict
    )
    _writer: CallContextWriter = field(init=False)
    _tainted: TaintedContentIndex = field(init=False)
    """What tainted sessions wrote (``SMF_TAINTED_CONTENT``), by digest."""
    _reads: _ReadCache = field(init=False)

    def __post_init__(self) -> None:
        self._by_token = {r.token_sha256: r for r in self.runtimes}
        if len(self._by_token) != len(self.runtimes):
            raise ValueError("two runtimes share one gateway token")
        js = self.nc.jetstream(prefix=CLIENT_API, timeout=self.settings.context_timeout_s)
        self._writer = CallContextWriter(js, self.key, self.settings.context_timeout_s)
        self._tainted = TaintedContentIndex(
            js, self.key, self._record_keys, self.clock, self.settings.context_timeout_s
        )
        self._reads = _ReadCache(self.settings.read_cache_entries, self.settings.read_cache_chars)
        self._nonces = SeenOnce(self.settings.max_proof_nonces)

    def _record_keys(self) -> Mapping[str, VerifyKey]:
        """The keys a record of another gateway may be signed by."""
        if self.call_context_keys is not None:
            return self.call_context_keys()
        return {self.key.key_id: self.key.verify_key}

    # -- lifecycle -------------------------------------------------------------

    def application(self) -> web.Application:
        app = web.Application(client_max_size=self.settings.max_body_bytes)
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_get("/v1/models", self._models)
        app.on_startup.append(self._open)
        app.on_cleanup.append(self._close)
        return app

    async def _open(self, _app: web.Application) -> None:
        if self.upstream.api_key_file is not None:
            with open(self.upstream.api_key_file, encoding="utf-8") as handle:
                self._upstream_key = handle.read().strip()
        timeout = aiohttp.ClientTimeout(
            total=self.settings.upstream_total_s,
            sock_connect=self.settings.upstream_connect_s,
            sock_read=self.settings.upstream_read_s,
        )
        self._session = aiohttp.ClientSession(timeout=timeout)

    async def _close(self, _app: web.Application) -> None:
        if self._session is not None:
            await self._session.close()

    # -- endpoints -------------------------------------------------------------

    async def _models(self, request: web.Request) -> web.StreamResponse:
        """The provider's model list, for an admitted runtime, decided like a reply: every
        string in it (ids, owners, any field a provider adds) is what the runtime may
        show, so it goes through the output gate first; anything but an allow is a 502
        (``model_list_withheld``) and no byte of the list. Its admission needs no process
        proof (:attr:`GatewayAdmit.model_list`): the request carries nothing to the
        provider, and no turn is served on it."""
        try:
            runtime = self._authenticate(request)
            standing = await self._admit(runtime, "public", None, model_list=True)
            status, data = await self._upstream_get("/models")
            try:
                listed = msgspec.json.decode(data)
            except msgspec.DecodeError as exc:
                raise Refusal(502, "upstream_answer_invalid") from exc
            shown = "\n".join(model_turns.string_leaves(listed))
            verdict = await self._decide(runtime, standing.runtime_version, shown, runtime.facts)
            if _outcome(verdict, shown) != "allow":
                log.warning("model_list_withheld", runtime_id=runtime.runtime_id)
                raise Refusal(502, "model_list_withheld")
        except Refusal as refusal:
            return error_response(refusal.status, refusal.reason_code)
        except Exception as exc:  # noqa: BLE001 - fail closed, logged by type, never by value
            log.error("model_list_failed", error=type(exc).__name__)
            return error_response(500, "gateway_internal_error")
        return web.Response(
            status=status, body=msgspec.json.encode(listed), content_type="application/json"
        )

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        try:
            runtime = self._authenticate(request)
        except Refusal as refusal:
            return error_response(refusal.status, refusal.reason_code)
        runtime_id = runtime.runtime_id
        if self._in_flight.get(runtime_id, 0) >= self.settings.max_in_flight:
            return error_response(429, "gateway_runtime_busy")
        self._in_flight[runtime_id] = self._in_flight.get(runtime_id, 0) + 1
        try:
            return await self._serve(request, runtime)
        except Refusal as refusal:
            log.warning("model_turn_refused", runtime_id=runtime_id, reason=refusal.reason_code)
            return error_response(refusal.status, refusal.reason_code)
        except Exception as exc:  # noqa: BLE001 - fail closed, logged by type, never by value
            log.error("model_turn_failed", runtime_id=runtime_id, error=type(exc).__name__)
            return error_response(500, "gateway_internal_error")
        finally:
            self._in_flight[runtime_id] -= 1

    async def _serve(self, request: web.Request, runtime: GatewayRuntime) -> web.StreamResponse:
        try:
            data = await request.read()
        except web.HTTPRequestEntityTooLarge as exc:
            raise Refusal(413, "request_too_large") from exc
        try:
            chat = model_turns.read_request(data)
        except TurnError as exc:
            raise Refusal(400, exc.reason_code) from exc
        classification = model_turns.request_classification(runtime.facts, chat)
        proof = self._proof(request)
        digest = None if proof is None else _request_digest(chat)
        standing = await self._admit(runtime, classification, proof, request_digest=digest)
        if runtime.account_tool_calls:
            await self._account(runtime, chat)
        context, found = await self._context(runtime, chat)
        if found:
            log.warning("model_context_tainted", runtime_id=runtime.runtime_id, found=list(found))
        turn = await self._ask_upstream(data, chat.stream)
        turn = model_turns.own_turn(
            turn, turn_id="chatcmpl-smf-" + secrets.token_hex(12), model=chat.model()
        )
        await self._issue_call_ids(
            runtime,
            turn,
            context,
            found,
            chat.offered_parameters(),
            json_turns=runtime.refuses_invalid_json_turns and not chat.stream,
        )
        started = time.perf_counter_ns()
        # a turn's text is decided in its session's whole context; the calls of a turn
        # without text carry the session's taint to their own decisions (their records)
        taint = context.injection_taint if turn.content else "clear"
        facts = raise_facts(runtime.facts, context.classification, taint)
        facts = self._across_pieces(runtime, chat, turn, facts, standing.window_chars)
        window = chat.shown_history(standing.window_chars)
        turn = await self._gate_output(runtime, standing, turn, facts, window)
        # Server-Timing (W3C): how long the turn waited for its output decision, so a
        # benchmark can tell the gateway's own cost from the decision's (no content).
        timing = {"Server-Timing": f"output;dur={(time.perf_counter_ns() - started) / 1e6:.3f}"}
        if chat.stream:
            return web.Response(
                body=model_turns.stream_events(turn),
                content_type="text/event-stream",
                headers={"Cache-Control": "no-cache", **timing},
            )
        return web.Response(
            body=model_turns.completion_body(turn), content_type="application/json", headers=timing
        )

    # -- admission ---------------------------------------------------------------

    def _authenticate(self, request: web.Request) -> GatewayRuntime:
        header = request.headers.get("Authorization", "")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise Refusal(401, "gateway_token_missing")
        digest = token_hash(token.strip())
        for known, runtime in self._by_token.items():
            if hmac.compare_digest(known, digest):
                return runtime
        raise Refusal(401, "gateway_token_unknown")

    @staticmethod
    def _proof(request: web.Request) -> str | None:
        proof = request.headers.get(names.HEADER_INSTANCE_PROOF)
        if proof is not None and not 0 < len(proof) <= MAX_INSTANCE_PROOF_CHARS:
            raise Refusal(400, "instance_proof_malformed")
        return proof

    async def _admit(
        self,
        runtime: GatewayRuntime,
        classification: Classification,
        proof: str | None,
        *,
        model_list: bool = False,
        request_digest: str | None = None,
    ) -> _Standing:
        """The attested runtime version and the release's detection window, or a refusal
        the gate has recorded. The gate also decides the request as an egress to the
        provider, for its classification, and checks the process proof, so an admission
        is kept per runtime, classification and process. A request with a proof is
        served on a kept admission of its process only when :meth:`_proven_here`; every
        other is asked about (a request without a proof never uses one given for a
        proof)."""
        now = self.clock()
        claimed = None if proof is None else unverified_instance_proof(proof)
        instance = None if claimed is None else claimed.instance_id
        key = (runtime.runtime_id, classification, instance, model_list)
        cached = self._standing.get(key)
        proof_seen: bool | msgspec.UnsetType = msgspec.UNSET
        if proof is None:
            if cached is not None and now < cached.valid_until_ms:
                return cached
        elif claimed is not None and claimed.nonce is not None:
            proven = (
                cached is not None
                and now < cached.valid_until_ms
                and self._proven_here(cached, runtime, proof, claimed, request_digest, now)
            )
            # every nonce is noted before any wait, so a copy arriving meanwhile is not
            # served on a kept admission while the gate decides the first
            seen = self._note_nonce(runtime.runtime_id, claimed, now)
            if proven and seen == "accepted" and now >= self._blind_until_ms:
                assert cached is not None
                return cached
            if seen == "replayed":
                proof_seen = True
        # proofs rotate, so a kept admission's key is often never asked again
        for old in [k for k, v in self._standing.items() if v.valid_until_ms <= now]:
            del self._standing[old]
        ask = GatewayAdmit(
            schema="smf.gateway-admit/1",
            request_id="m-" + secrets.token_hex(16),
            runtime_id=runtime.runtime_id,
            tenant_id=runtime.actor.tenant_id,
            provider=self.upstream.provider,
            classification=classification,
            issued_at_ms=now,
            instance_proof=proof,
            model_list=model_list,
            request_digest=request_digest,
            proof_seen=proof_seen,
        )
        answer = await self._ask_gate(
            names.GATEWAY_ADMIT,
            ask,
            GatewayAdmission,
            names.PAYLOAD_GATEWAY_ADMISSION,
            self.settings.admit_timeout_s,
            "admission",
        )
        if not answer.admitted or answer.runtime_version is None:
            raise Refusal(403, answer.reason_codes[0] if answer.reason_codes else "not_admitted")
        if self._confined.get(runtime.runtime_id, "") != answer.confined_profile:
            self._confined[runtime.runtime_id] = answer.confined_profile
            log.info(
                "runtime_confinement_learned",
                runtime_id=runtime.runtime_id,
                confined=answer.confined_profile is not None,
                profile_digest=answer.confined_profile,
            )
        until = now + self.settings.admission_cache_ms
        if answer.expires_at_ms is not None:
            until = min(until, answer.expires_at_ms)
        window = answer.detection_window_chars
        standing = _Standing(
            answer.runtime_version,
            until,
            DEFAULT_DETECTION_WINDOW_CHARS if isinstance(window, msgspec.UnsetType) else window,
        )
        if proof is None:
            self._standing[key] = standing
        elif not isinstance(answer.proof_standing, msgspec.UnsetType):
            standing.instance_id = answer.proof_standing.instance_id
            self._keep_proof_standing(runtime, classification, proof, answer, standing)
        return standing

    def _keep_proof_standing(
        self,
        runtime: GatewayRuntime,
        classification: Classification,
        proof: str,
        answer: GatewayAdmission,
        standing: _Standing,
    ) -> None:
        """Keep the gate's admission of a proof for its process's next requests, when
        the proof it admitted checks with the keys it named for the process it named
        (anything else is not kept: the next request is asked about)."""
        named = answer.proof_standing
        assert not isinstance(named, msgspec.UnsetType)
        try:
            keys = trusted_proof_keys(named.keys)
            admitted, _ = open_instance_proof(proof, keys)
        except (ValueError, dsse.SignatureError, msgspec.ValidationError):
            log.warning("proof_standing_not_kept", runtime_id=runtime.runtime_id)
            return
        if admitted.runtime_id != runtime.runtime_id or admitted.instance_id != named.instance_id:
            log.warning("proof_standing_not_kept", runtime_id=runtime.runtime_id)
            return
        standing.proof_keys = keys
        standing.proof_window_ms = min(named.window_ms, self.settings.proof_window_ms)
        self._standing[(runtime.runtime_id, classification, named.instance_id, False)] = standing

    def _proven_here(
        self,
        standing: _Standing,
        runtime: GatewayRuntime,
        sealed: str,
        claimed: InstanceProof,
        digest: str | None,
        now: int,
    ) -> bool:
        """The gate's checks of an instance proof (``AttestationDesk.admit_instance``),
        for a process it admitted: signed by a key of that runtime, for that runtime
        and process, issued within the gate's window, for this body when it names
        one. Its nonce is checked by the caller. False: ask the gate."""
        if standing.proof_keys is None:
            return False
        try:
            verified, _ = open_instance_proof(sealed, standing.proof_keys)
        except (dsse.SignatureError, msgspec.ValidationError):
            return False
        return (
            verified == claimed
            and verified.runtime_id == runtime.runtime_id
            and abs(now - verified.issued_at_ms) <= standing.proof_window_ms
            and (verified.request_digest is None or verified.request_digest == digest)
        )

    def _note_nonce(self, runtime_id: str, claimed: InstanceProof, now: int) -> Seen:
        """Note a proof's nonce as seen here, kept until twice the window past its issue
        time (bounded around now, as the time is the sender's claim). A nonce that could
        not be kept blinds the kept admissions until it is past any window."""
        window = self.settings.proof_window_ms
        issued = min(max(claimed.issued_at_ms, now - window), now + window)
        seen = self._nonces.accept((runtime_id, claimed.nonce), issued + 2 * window, now)
        if seen == "full":
            log.warning("proof_nonces_full", runtime_id=runtime_id)
            self._blind_until_ms = now + 3 * window
        return seen

    # -- tool-call accounting ------------------------------------------------------

    async def _issue_call_ids(
        self,
        runtime: GatewayRuntime,
        turn: Turn,
        context: DataFacts,
        found: tuple[str, ...],
        offered: Mapping[str, list[object]] | None = None,
        *,
        json_turns: bool = False,
    ) -> None:
        """Every tool call the runtime gets carries an id this gateway issued and
        remembers, so its result can be checked against the gate's decisions, and
        has its context recorded first: the gate raises the
        proposal of that id by it. A record not written refuses the whole turn
        before anything is decided or released (fail closed). A call to a name the
        request did not offer, or whose arguments certainly fail every schema it
        offered under that name (:func:`certainly_invalid`), is remembered as such:
        the runtime answers it with an error before any hook, and the gate is told so
        when its result comes back. With ``json_turns`` (a runtime that refuses a turn
        it did not stream whole when some call's arguments are not JSON), every call of
        such a turn is remembered with the answer the runtime gives it
        (:func:`invalid_json_turn`), and its record says it is never to be allowed."""
        if not turn.tool_calls:
            return
        issued = self._issued.setdefault(
            runtime.runtime_id, _Bounded(self.settings.max_issued_calls)
        )
        for call in turn.tool_calls:
            call.id = new_call_id()
        schemas = offered or {}
        checked = runtime.checks_tool_arguments
        refused = (
            invalid_json_turn([(c.name, c.arguments) for c in turn.tool_calls], schemas)
            if json_turns
            else None
        )
        answers: list[InvalidJsonAnswer | None] = (
            list(refused) if refused is not None else [None] * len(turn.tool_calls)
        )
        records = [
            CallContext(
                schema="smf.call-context/1",
                runtime_id=runtime.runtime_id,
                tool_call_id=call.id,
                tool_name=call.name,
                classification=context.classification,
                injection_taint=context.injection_taint,
                found=found,
                issued_at_ms=self.clock(),
                arguments_invalid=answer == "arguments"
                or (
                    checked
                    and call.name in schemas
                    and all(certainly_invalid(call.arguments, s) for s in schemas[call.name])
                ),
                turn_invalid=answer in ("same_tool", "skipped"),
            )
            for call, answer in zip(turn.tool_calls, answers, strict=True)
        ]
        written = self._written(runtime, turn, context.injection_taint)
        try:
            await asyncio.gather(*(self._writer.create(r) for r in records))
        except CallContextUnavailable as exc:
            log.error("call_context_not_written", runtime_id=runtime.runtime_id, calls=len(records))
            raise Refusal(503, "call_context_unavailable") from exc
        not_offered = self._not_offered.setdefault(
            runtime.runtime_id, _Bounded(self.settings.max_issued_calls)
        )
        invalid = self._invalid_arguments.setdefault(
            runtime.runtime_id, _Bounded(self.settings.max_issued_calls)
        )
        marks = self._invalid_json.setdefault(
            runtime.runtime_id, _Marks(self.settings.max_issued_calls)
        )
        for record, answer in zip(records, answers, strict=True):
            self._keep_context(record)
            issued.add(record.tool_call_id)
            if record.tool_name not in schemas:
                not_offered.add(record.tool_call_id)
            elif answer is not None:
                marks.add(record.tool_call_id, answer)
            elif record.arguments_invalid:
                invalid.add(record.tool_call_id)
        try:
            await self._tainted.write(written)
        except TaintedContentUnavailable as exc:
            log.error("tainted_content_not_written", runtime_id=runtime.runtime_id)
            raise Refusal(503, "tainted_content_unavailable") from exc

    def _written(
        self, runtime: GatewayRuntime, turn: Turn, taint: InjectionTaint
    ) -> list[TaintedContent]:
        """The records of what the turn's calls could write, when they are issued in a
        tainted context: the digests of each call's argument lines, in parts. A call
        that would need more parts than a call may have is refused whole."""
        if taint == "clear":
            return []
        records: list[TaintedContent] = []
        for call in turn.tool_calls:
            digests = written_digests(call.arguments)
            step = MAX_DIGESTS_PER_RECORD
            parts = [digests[i : i + step] for i in range(0, len(digests), step)]
            if len(parts) > MAX_PARTS_PER_CALL:
                log.error("tainted_content_too_large", runtime_id=runtime.runtime_id)
                raise Refusal(502, "tainted_content_too_large")
            records += [
                TaintedContent(
                    schema="smf.tainted-content/1",
                    runtime_id=runtime.runtime_id,
                    tool_call_id=call.id,
                    part=number,
                    injection_taint=taint,
                    digests=part,
                    issued_at_ms=self.clock(),
                )
                for number, part in enumerate(parts)
            ]
        return records

    def _keep_context(self, record: CallContext) -> None:
        key = (record.runtime_id, record.tool_call_id)
        self._contexts[key] = record
        self._contexts.move_to_end(key)
        while len(self._contexts) > self.settings.max_kept_contexts:
            self._contexts.popitem(last=False)

    async def _context(
        self, runtime: GatewayRuntime, chat: model_turns.ChatRequest
    ) -> tuple[DataFacts, tuple[str, ...]]:
        """The context the model answers this request in: the detectors over its tool
        results, raised by the record of every gateway id its history names (kept
        here, or read from the bucket). A history whose records cannot all be read
        is refused, never judged on part of it."""
        ids = chat.history_call_ids()
        if len(ids) > self.settings.max_lineage_ids:
            raise Refusal(413, "request_too_many_tool_calls")
        readings = [self._reads.read(text) for text in chat.read_texts()]
        digests = frozenset().union(*(r.digests for r in readings))
        recalled = await self._recall(runtime, digests)
        known = {i: self._contexts.get((runtime.runtime_id, i)) for i in ids}
        missing = [i for i, record in known.items() if record is None]
        keys = (
            self.call_context_keys()
            if self.call_context_keys is not None
            else {self.key.key_id: self.key.verify_key}
        )
        step = max(1, self.settings.lineage_reads)
        for start in range(0, len(missing), step):
            batch = missing[start : start + step]
            reads = await asyncio.gather(
                *(read_call_context(self._writer.js, keys, runtime.runtime_id, i) for i in batch),
                return_exceptions=True,
            )
            for call_id, read in zip(batch, reads, strict=True):
                if isinstance(read, CallContextInvalid):
                    log.error("call_context_refused", runtime_id=runtime.runtime_id)
                    raise Refusal(503, "call_context_invalid") from read
                if isinstance(read, BaseException):
                    log.error("call_context_not_read", runtime_id=runtime.runtime_id)
                    raise Refusal(503, "call_context_unavailable") from read
                if read is not None:
                    self._keep_context(read[0])
                    known[call_id] = read[0]
        return model_turns.call_context(
            chat,
            known.values(),
            read_injection=any(r.injection for r in readings),
            recalled=recalled,
        )

    async def _recall(
        self, runtime: GatewayRuntime, digests: frozenset[str]
    ) -> InjectionTaint | None:
        """The highest taint under which a tainted session wrote one of these lines, or
        None; what was written since the last look is read first (a request with no
        line long enough to look up asks nothing)."""
        if not digests:
            return None
        try:
            await self._tainted.sync()
        except TaintedContentUnavailable as exc:
            log.error("tainted_content_not_read", runtime_id=runtime.runtime_id)
            raise Refusal(503, "tainted_content_unavailable") from exc
        return self._tainted.taint_of(digests)

    async def _account(self, runtime: GatewayRuntime, chat: model_turns.ChatRequest) -> None:
        """Refuse a request carrying a tool result for a call this gateway issued that no
        proposal decided (``ungated_tool_result``: the gate has recorded it and stopped
        the runtime). Results for ids it never issued are not checked."""
        issued = self._issued.get(runtime.runtime_id)
        if issued is None:
            return
        covered = self._covered.setdefault(
            runtime.runtime_id, _Bounded(self.settings.max_covered_calls)
        )
        not_offered = self._not_offered.get(runtime.runtime_id)
        invalid = self._invalid_arguments.get(runtime.runtime_id)
        marks = self._invalid_json.get(runtime.runtime_id)
        ask = [i for i in dict.fromkeys(chat.tool_result_ids()) if i in issued and i not in covered]
        for start in range(0, len(ask), MAX_CALLS_PER_ASK):
            batch = tuple(ask[start : start + MAX_CALLS_PER_ASK])
            unoffered = tuple(i for i in batch if not_offered is not None and i in not_offered)
            rejected = [
                i
                for i in batch
                if invalid is not None and i in invalid and chat.refused_by_argument_check(i)
            ]
            skipped: list[str] = []
            for i in batch:
                mark = None if marks is None else marks.get(i)
                if mark is not None and chat.answered_only_by(i, _INVALID_JSON_TEXTS[mark]):
                    (rejected if mark == "arguments" else skipped).append(i)
            answer = await self._ask_calls(
                runtime, batch, unoffered, tuple(rejected), tuple(skipped)
            )
            if answer.uncovered:
                # stopped: every kept admission of this runtime is void, ask the gate again
                for key in [k for k in self._standing if k[0] == runtime.runtime_id]:
                    del self._standing[key]
                raise Refusal(403, "ungated_tool_result")
            if answer.unrecorded:
                # a refusal the ledger did not take: nothing is served without its evidence
                raise Refusal(503, "tool_refusal_not_recorded")
            for call_id in batch:
                covered.add(call_id)

    async def _ask_calls(
        self,
        runtime: GatewayRuntime,
        batch: tuple[str, ...],
        not_offered: tuple[str, ...],
        invalid_arguments: tuple[str, ...] = (),
        invalid_turn: tuple[str, ...] = (),
    ) -> GatewayCallsAnswer:
        ask = GatewayCalls(
            schema="smf.gateway-calls/1",
            request_id="m-" + secrets.token_hex(16),
            runtime_id=runtime.runtime_id,
            tenant_id=runtime.actor.tenant_id,
            tool_call_ids=batch,
            issued_at_ms=self.clock(),
            not_offered=not_offered,
            invalid_arguments=invalid_arguments,
            invalid_turn=invalid_turn,
        )
        return await self._ask_gate(
            names.GATEWAY_CALLS,
            ask,
            GatewayCallsAnswer,
            names.PAYLOAD_GATEWAY_CALLS,
            self.settings.calls_timeout_s,
            "calls_answer",
        )

    async def _ask_gate(
        self,
        subject: str,
        ask: GatewayAdmit | GatewayCalls,
        answer_type: type[A],
        payload_type: str,
        timeout: float,
        what: str,
    ) -> A:
        """Ask the gate and believe only its signed answer to this very question;
        every other ending is a 503 with its reason (the runtime gets nothing)."""
        try:
            reply = await self.nc.request(subject, msgspec.json.encode(ask), timeout=timeout)
        except (NatsError, TimeoutError) as exc:
            raise Refusal(503, "gate_unreachable") from exc
        if names.HEADER_SERVICE_ERROR in (reply.headers or {}):
            refused = (
                "gate_refused_admission_request"
                if what == "admission"
                else ("gate_refused_calls_request")
            )
            raise Refusal(503, refused)
        try:
            answer, _ = dsse.open_struct(
                dsse.decode_envelope(reply.data), self.gate_keys(), answer_type, payload_type
            )
        except (dsse.SignatureError, msgspec.ValidationError) as exc:
            raise Refusal(503, f"{what}_not_signed_by_gate") from exc
        if answer.request_id != ask.request_id or answer.runtime_id != ask.runtime_id:
            raise Refusal(503, f"{what}_for_another_request")
        return answer

    # -- the provider --------------------------------------------------------------

    def _upstream_headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json"}
        if self._upstream_key:
            headers["Authorization"] = f"Bearer {self._upstream_key}"
        return headers

    def _url(self, path: str) -> str:
        return self.upstream.base_url.rstrip("/") + path

    async def _upstream_get(self, path: str) -> tuple[int, bytes]:
        assert self._session is not None
        try:
            async with self._session.get(self._url(path), headers=self._upstream_headers()) as resp:
                data = await resp.content.read(self.settings.max_answer_bytes + 1)
                if resp.status >= 400 or len(data) > self.settings.max_answer_bytes:
                    raise Refusal(502, "upstream_error")
                return resp.status, data
        except TimeoutError as exc:
            raise Refusal(504, "upstream_timeout") from exc
        except aiohttp.ClientError as exc:
            raise Refusal(502, "upstream_unreachable") from exc

    async def _ask_upstream(self, body: bytes, stream: bool) -> Turn:
        """The provider's whole turn; every way it can fail is a refusal, never a part."""
        assert self._session is not None
        limit = self.settings.max_answer_bytes
        try:
            async with self._session.post(
                self._url("/chat/completions"), data=body, headers=self._upstream_headers()
            ) as resp:
                if resp.status >= 400:
                    raise Refusal(502, "upstream_error")
                if not stream:
                    data = await resp.content.read(limit + 1)
                    if len(data) > limit:
                        raise Refusal(502, "upstream_answer_too_large")
                    return model_turns.read_completion(data)
                assembler = model_turns.StreamAssembler()
                size = 0
                async for part in resp.content.iter_any():
                    size += len(part)
                    if size > limit:
                        raise Refusal(502, "upstream_answer_too_large")
                    assembler.feed(part)
                return assembler.finish()
        except TurnError as exc:
            raise Refusal(502, exc.reason_code) from exc
        except TimeoutError as exc:
            raise Refusal(504, "upstream_timeout") from exc
        except aiohttp.ClientPayloadError as exc:
            raise Refusal(502, "upstream_stream_broken") from exc
        except aiohttp.ClientError as exc:
            raise Refusal(502, "upstream_unreachable") from exc

    # -- the output gate -------------------------------------------------------------

    @staticmethod
    def _across_pieces(
        runtime: GatewayRuntime,
        chat: model_turns.ChatRequest,
        turn: Turn,
        facts: DataFacts,
        window_chars: int,
    ) -> DataFacts:
        """``facts`` raised by a marker written in pieces that the output gate's own
        reading (the turn after the conversation's shown tail, in display order) sees
        with something between them: the assistant's texts read as one across turns
        (a runtime prints its tool calls between them), and the tool calls' argument
        values read as one across calls (their names stand between them). The close's
        facts are raised by what only these readings find; what the output gate finds
        itself it records under its own reason codes."""
        views = []
        texts = chat.text_history(window_chars)
        if texts and turn.content:
            views.append((turn.content, texts))
        if turn.tool_calls:
            views.append((model_turns.turn_arguments(turn), chat.arguments_history(window_chars)))
        if not views:
            return facts
        _, seen = detect(model_turns.shown_text(turn), facts, chat.shown_history(window_chars))
        raised = facts
        for text, window in views:
            after, found = detect(text, facts, window)
            if not set(found) <= set(seen):
                log.warning("model_marker_in_pieces", runtime_id=runtime.runtime_id, found=found)
                raised = raise_facts(raised, after.classification, after.injection_taint)
        return raised

    async def _decide(
        self,
        runtime: GatewayRuntime,
        version: str,
        shown: str,
        facts: DataFacts,
        window: str = "",
        instance_id: str | None = None,
    ) -> OutputVerdict:
        """``shown`` through the output gate as this runtime's output (of the process
        ``instance_id``, when it was served on a proof), read after ``window``; the
        gate's verdict (every failure a withholding one)."""
        streamer = OutputStreamer(
            self.nc,
            self.key,
            runtime.runtime_id,
            version,
            runtime.adapter_id,
            timeout=self.settings.output_timeout_s,
            gate_keys=self.gate_keys(),
        )
        raw = shown.encode()
        # an empty output is one empty chunk: the buffer knows a stream by its chunks
        chunks = [raw[i : i + OUTPUT_CHUNK_BYTES] for i in range(0, len(raw), OUTPUT_CHUNK_BYTES)]
        stream_id = new_stream_id()
        committed = await streamer.send_chunks(stream_id, chunks or [b""])
        signed = streamer.close_message(
            stream_id,
            committed,
            actor=runtime.actor,
            facts=facts,
            destination=runtime.destination,
            surface=runtime.surface,
            window=window,
            instance_id=instance_id,
        )
        return await streamer.close(stream_id, signed)

    async def _gate_output(
        self,
        runtime: GatewayRuntime,
        standing: _Standing,
        turn: Turn,
        facts: DataFacts,
        window: str,
    ) -> Turn:
        """The turn the runtime may have: itself when everything it shows (its text, its
        tool calls' names and arguments) is released, else the notice alone. A tool
        call never passes beside withheld text, nor its own withheld name or
        arguments."""
        shown = model_turns.shown_text(turn)
        verdict = await self._decide(
            runtime, standing.runtime_version, shown, facts, window, standing.instance_id
        )
        outcome = _outcome(verdict, shown)
        log.info(
            "model_turn_decided",
            runtime_id=runtime.runtime_id,
            outcome=outcome,
            reasons=list(verdict.verdict.reason_codes),
            text_bytes=len(turn.content.encode()),
            shown_bytes=len(shown.encode()),
            tool_calls=len(turn.tool_calls),
        )
        if outcome == "allow":
            return turn
        reasons = ", ".join(verdict.verdict.reason_codes) or "no reason given"
        if outcome == "held":
            text = HELD_NOTICE.format(reasons=reasons, approval=verdict.verdict.approval_id)
        else:
            text = WITHHELD_NOTICE.format(reasons=reasons)
        return model_turns.notice_turn(turn, text)


def _outcome(verdict: OutputVerdict, text: str) -> Literal["allow", "deny", "held"]:
    """Released only as decided: an allow whose released text is not the text sent
    counts as withheld."""
    if verdict.verdict.outcome == "allow" and verdict.released != text:
        return "deny"
    return verdict.verdict.outcome


async def serve_gateway(
    gateway: ModelGateway, host: str, port: int, tls: ssl.SSLContext | None = None
) -> tuple[web.AppRunner, int]:
    """Start the HTTP side (HTTPS only, with ``tls``); returns the runner (``cleanup()``
    stops it) and the bound port."""
    runner = web.AppRunner(gateway.application(), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port, ssl_context=tls)
    await site.start()
    bound = runner.addresses[0][1] if runner.addresses else port
    return runner, int(bound)


__all__ = [
    "GatewayRuntime",
    "GatewaySettings",
    "ModelGateway",
    "Upstream",
    "serve_gateway",
    "token_hash",
]
