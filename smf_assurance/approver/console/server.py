"""The approver console's server: the page, the list, and a relay that holds no key.

ARCHITECTURE.md, "Exact-action approval"; docs/CONSOLE.md. What the
server keeps true:

- It holds no signing key and never signs. The approver's key is loaded into
  the page, which signs its login, every show request and every resolution
  with WebCrypto Ed25519; the server relays the signed envelopes to
  ``smf.approval.show`` and ``smf.approval.resolve`` (and, for a person's own
  requests, ``smf.approval.track`` and ``smf.approval.rerequest``) and
  hands back the gate's answer. The gate verifies every signature against the roster, and an
  allow-once names the binding digest the page computed from what it showed,
  so neither this process nor anyone on the bus can forge or redirect one.
- It lists for an approver only what the roster lets them resolve, to a
  session proven by a signed login (:mod:`smf_assurance.approver.console.access`).
- It holds no content. The list is built from announcements (identities and
  reasons only, :mod:`smf_assurance.approver.console.board`); content comes from the gate per
  signed show request, is relayed to the page and is never stored or logged.

What it does not guarantee: that the states and answers the page displays are
true if this process is compromised (the gate's replies are not signed; the
evidence ledger is the record). A compromised relay can hide or delay, never
make the gate execute anything the approver did not sign.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from http import HTTPStatus
from importlib import resources
from pathlib import Path
from typing import Final, Literal, TypeVar

import msgspec
import nats
import structlog
from aiohttp import web
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.errors import Error as NatsError
from nats.errors import NoRespondersError

from smf_assurance.approver.console.access import LoginRefused, Roster, Sessions
from smf_assurance.approver.console.board import ApprovalBoard
from smf_assurance.approver.console.http import (
    READ_TIMEOUT_SECONDS,
    AnswerCounts,
    Request,
    Response,
    bound_port,
    json_response,
    refusal,
    serve,
)
from smf_assurance.approver.console.renderer import RENDERER_CONTENT_TYPE, load_renderer
from smf_assurance.approver.directory import Directory, DirectoryShown, load_directory
from smf_assurance.subjects import names
from smf_assurance.subjects.approvals import (
    DENIED_BY_APPROVER,
    DENY_REASONS,
    ApprovalView,
    ReRequestReply,
    ResolutionReply,
    TrackedApproval,
    TrackReply,
    deny_reason_code,
)
from smf_assurance.subjects.bus_access import BusCredential, bus_error_reason, connect_options
from smf_assurance.subjects.clock import monotonic_s, wall_clock_ms
from smf_assurance.subjects.passkeys import MAX_GRANT_MS
from smf_assurance.subjects.registry import Principal

log = structlog.get_logger(__name__)

SESSION_COOKIE: Final = "smf_console"
CLOSE_GRACE_SECONDS: Final = 5.0
"""How long closing waits for the refresh loop to end."""
STATIC_FILES: Final = {
    "/": ("index.html", "text/html; charset=utf-8"),
    "/static/app.js": ("app.js", "text/javascript; charset=utf-8"),
    "/static/style.css": ("style.css", "text/css; charset=utf-8"),
}


@dataclass
class ConsoleSettings:
    nats_url: str
    registry: Path
    credential: BusCredential | None = None
    """The console relay's own bus credential (role ``console``)."""
    host: str = "127.0.0.1"
    port: int = 0
    """0: any free port (tests); the command line defaults to 8765."""
    refresh_seconds: float = 1.0
    request_timeout: float = 5.0
    challenge_seconds: int = 120
    session_seconds: int = 8 * 3600
    read_timeout: float = READ_TIMEOUT_SECONDS
    """A client whose request takes longer to arrive is cut off."""
    clock: Callable[[], int] = wall_clock_ms
    directory: Path | None = None
    """The tenant directory's folder (:mod:`smf_assurance.approver.directory`):
    read once at start; a malformed file stops the start. ``None``: every id shown raw."""
    tls: ssl.SSLContext | None = None
    """HTTPS with this server context; ``None``: plain HTTP, which the command line
    allows on loopback only."""
    pdf_renderer: Path | None = None
    """The folder holding pdf.js's pinned files (:mod:`smf_assurance.approver.console.renderer`):
    read and checked once at start, a file that is not the pinned one stops the start.
    ``None``: the page shows a PDF in the browser's own viewer."""


HealthReason = Literal["bus_disconnected", "board_not_fed", "gate_not_answering"]


class Health(msgspec.Struct, frozen=True, kw_only=True):
    """``GET /healthz``: states and an age, never an approval, a tenant or a key."""

    ok: bool
    reason: HealthReason | None
    bus_connected: bool
    gate_answering: bool
    board_age_ms: int | None
    """Since the board's last complete refresh; ``None`` before its first."""


Handler = Callable[[Request], Awaitable[Response]]
GateAnswer = TypeVar("GateAnswer", TrackReply, ReRequestReply)
SessionHandler = Callable[[Request, Principal], Awaitable[Response]]


def _static_files(renderer: Path | None) -> dict[str, tuple[bytes, str]]:
    """The page's own files, and pdf.js's when ``renderer`` names its folder
    (:func:`~smf_assurance.approver.console.renderer.load_renderer`, which raises
    when a file is not the pinned one)."""
    folder = resources.files("smf_assurance.approver.console").joinpath("static")
    files = {
        path: (folder.joinpath(name).read_bytes(), content_type)
        for path, (name, content_type) in STATIC_FILES.items()
    }
    if renderer is not None:
        for path, data in load_renderer(renderer).items():
            files[path] = (data, RENDERER_CONTENT_TYPE)
    return files


class Console:
    """The HTTP application: static page, sign-in, the list, and the relay."""

    def __init__(
        self,
        settings: ConsoleSettings,
        nc: Client,
        board: ApprovalBoard,
        directory: Directory,
        static: dict[str, tuple[bytes, str]],
    ) -> None:
        self.settings = settings
        self.nc = nc
        self.board = board
        self.roster = Roster(settings.registry)
        self.directory = directory
        self.sessions = Sessions(
            settings.clock, settings.challenge_seconds * 1000, settings.session_seconds * 1000
        )
        self.static = static
        self.routes: dict[tuple[str, str], Handler] = {
            ("GET", "/api/challenge"): self._challenge,
            ("POST", "/api/session"): self._login,
            ("POST", "/api/logout"): self._logout,
            ("GET", "/api/approvals"): self._signed_in(self._approvals),
            ("POST", "/api/show"): self._signed_in(self._show),
            ("POST", "/api/resolve"): self._signed_in(self._resolve),
            ("GET", "/api/requests"): self._signed_in(self._request_candidates),
            ("POST", "/api/track"): self._signed_in(self._track),
            ("POST", "/api/rerequest"): self._signed_in(self._rerequest),
            ("GET", "/healthz"): self._health,
            ("GET", "/metrics"): self._metrics,
        }
        self.answers = AnswerCounts([*self.static, *(path for _, path in self.routes)])

    async def handle(self, request: Request) -> Response:
        if request.path in self.static:
            if request.method != "GET":
                return refusal(HTTPStatus.METHOD_NOT_ALLOWED, "method_not_allowed")
            body, content_type = self.static[request.path]
            return Response(HTTPStatus.OK, body, content_type)
        handler = self.routes.get((request.method, request.path))
        if handler is None:
            if any(path == request.path for _, path in self.routes):
                return refusal(HTTPStatus.METHOD_NOT_ALLOWED, "method_not_allowed")
            return refusal(HTTPStatus.NOT_FOUND, "not_found")
        if request.method == "POST" and not request.headers.get("content-type", "").startswith(
            "application/json"
        ):
            # A cross-site form cannot send this type without a CORS preflight we never allow.
            return refusal(HTTPStatus.UNSUPPORTED_MEDIA_TYPE, "json_required")
        return await handler(request)

    def _signed_in(self, handler: SessionHandler) -> Handler:
        """Only for a live session whose key is still an approver on the roster."""

        async def guarded(request: Request) -> Response:
            token = request.cookie(SESSION_COOKIE)
            session = self.sessions.lookup(token)
            if session is None:
                return refusal(HTTPStatus.UNAUTHORIZED, "sign_in_required")
            principal = self.roster.approver(session.key_id, session.approver_id)
            if principal is None:
                self.sessions.end(token)
                return refusal(HTTPStatus.UNAUTHORIZED, "approver_not_on_roster")
            return await handler(request, principal)

        return guarded

    # -- sign-in ------------------------------------------------------------

    async def _challenge(self, _request: Request) -> Response:
        """A sign-in's nonce, with this console's time and session length: a passkey's
        session grant is dated by the clock the gate keeps too, not the browser's."""
        nonce, expires_at_ms = self.sessions.challenge()
        return json_response(
            {
                "nonce": nonce,
                "expires_at_ms": expires_at_ms,
                "server_now_ms": self.settings.clock(),
                "session_ms": min(self.settings.session_seconds * 1000, MAX_GRANT_MS),
            }
        )

    async def _login(self, request: Request) -> Response:
        try:
            token, session, principal = self.sessions.login(request.body, self.roster)
        except LoginRefused as exc:
            log.info("console_login_refused", reason=exc.reason_code)
            return refusal(HTTPStatus.FORBIDDEN, exc.reason_code)
        log.info("console_login", approver_id=session.approver_id)
        cookie = (
            f"{SESSION_COOKIE}={token}; HttpOnly; SameSite=Strict; Path=/; "
            f"Max-Age={self.settings.session_seconds}"
            # served over HTTPS, the browser sends the session back over HTTPS only
            + ("" if self.settings.tls is None else "; Secure")
        )
        return json_response(
            {
                "ok": True,
                "approver_id": session.approver_id,
                "key_id": session.key_id,
                "tenants": list(principal.entry.tenants),
                "licensed_roles": list(principal.entry.licensed_roles),
                "expires_at_ms": session.expires_at_ms,
            },
            headers=(("Set-Cookie", cookie),),
        )

    async def _logout(self, request: Request) -> Response:
        self.sessions.end(request.cookie(SESSION_COOKIE))
        expired = f"{SESSION_COOKIE}=; HttpOnly; SameSite=Strict; Path=/; Max-Age=0"
        return json_response({"ok": True}, headers=(("Set-Cookie", expired),))

    # -- the list -----------------------------------------------------------

    async def _approvals(self, _request: Request, principal: Principal) -> Response:
        return json_response(
            {
                "server_now_ms": self.settings.clock(),
                "gate_answering": self.board.gate_answering,
                "approvals": self.board.listed_for(principal),
            }
        )

    # -- health and counts --------------------------------------------------

    async def _health(self, _request: Request) -> Response:
        """Whether this console can show approvers what is held now (``/healthz``).

        200 only while its bus connection is up, its board completed a refresh
        recently and the gate answered that refresh; otherwise 503 naming the
        first of these that fails, so a console whose bus is gone says so. It
        names no approval, tenant or approver, so it asks for no session.
        """
        fed_at = self.board.fed_at
        age = None if fed_at is None else monotonic_s() - fed_at
        stale_after = 3 * self.settings.refresh_seconds + 2 * self.settings.request_timeout
        reason: HealthReason | None = None
        if not self.nc.is_connected:
            reason = "bus_disconnected"
        elif age is None or age > stale_after:
            reason = "board_not_fed"
        elif not self.board.gate_answering:
            reason = "gate_not_answering"
        health = Health(
            ok=reason is None,
            reason=reason,
            bus_connected=self.nc.is_connected,
            gate_answering=self.board.gate_answering,
            board_age_ms=None if age is None else int(age * 1000),
        )
        status = HTTPStatus.OK if health.ok else HTTPStatus.SERVICE_UNAVAILABLE
        return json_response(health, status)

    async def _metrics(self, _request: Request) -> Response:
        """Counts in Prometheus's text format: answers by route and status,
        and the approvals the board holds as pending; no id, tenant or name."""
        pending = sum(1 for t in self.board.entries.values() if t.state == "pending")
        lines = [
            "# HELP smf_console_http_responses_total Answers by route and status.",
            "# TYPE smf_console_http_responses_total counter",
            *(
                f'smf_console_http_responses_total{{route="{route}",status="{status}"}} {n}'
                for (route, status), n in sorted(self.answers.counts.items())
            ),
            "# HELP smf_console_approvals_pending Approvals the board holds as pending.",
            "# TYPE smf_console_approvals_pending gauge",
            f"smf_console_approvals_pending {pending}",
        ]
        body = ("\n".join(lines) + "\n").encode()
        return Response(HTTPStatus.OK, body, "text/plain; version=0.0.4; charset=utf-8")

    # -- the relay ----------------------------------------------------------

    async def _relay(self, subject: str, body: bytes) -> Msg | Response:
        try:
            return await self.nc.request(subject, body, timeout=self.settings.request_timeout)
        except NoRespondersError:
            return refusal(HTTPStatus.BAD_GATEWAY, "gate_unreachable")
        except TimeoutError:
            return refusal(HTTPStatus.GATEWAY_TIMEOUT, "gate_timeout")
        except NatsError:
            return refusal(HTTPStatus.BAD_GATEWAY, "gate_transport_error")

    async def _show(self, request: Request, approver: Principal) -> Response:
        """Relay a signed show request; the gate alone decides who sees the content."""
        reply = await self._relay(names.APPROVAL_SHOW, request.body)
        if isinstance(reply, Response):
            return reply
        headers = reply.headers or {}
        if names.HEADER_SERVICE_ERROR_CODE in headers:
            reason = headers.get(names.HEADER_SERVICE_ERROR, "gate_error")
            log.info("console_show_refused", approver_id=approver.name, reason=reason)
            return json_response({"ok": False, "reason": reason})
        try:
            view = msgspec.json.decode(reply.data, type=ApprovalView)
        except msgspec.DecodeError:
            return refusal(HTTPStatus.BAD_GATEWAY, "unreadable_gate_answer")
        log.info("console_show", approver_id=approver.name, approval_id=view.binding.approval_id)
        return json_response({"ok": True, "view": view, "display": self._display(view)})

    def _display(self, view: ApprovalView) -> DirectoryShown:
        """The destination and matter by the names the operator's directory gives them
        Beside the view, never inside it: the page checks the view's raw
        ids against the binding, and these names change nothing that is signed."""
        tracked = self.board.entries.get(view.binding.approval_id)
        channel = tracked.announcement.channel if tracked is not None else None
        b = view.binding
        return self.directory.shown(b.tenant_id, b.matter_id, view.destination_address, channel)

    async def _resolve(self, request: Request, approver: Principal) -> Response:
        """Relay a signed resolution and hand back the gate's answer, as it gave it."""
        reply = await self._relay(names.APPROVAL_RESOLVE, request.body)
        if isinstance(reply, Response):
            return reply
        headers = reply.headers or {}
        if names.HEADER_SERVICE_ERROR_CODE in headers:
            return json_response(
                {"ok": False, "reason": headers.get(names.HEADER_SERVICE_ERROR, "gate_error")}
            )
        try:
            answer = msgspec.json.decode(reply.data, type=ResolutionReply)
        except msgspec.DecodeError:
            return refusal(HTTPStatus.BAD_GATEWAY, "unreadable_gate_answer")
        self.board.wake()
        log.info(
            "console_resolution_relayed",
            approver_id=approver.name,
            approval_id=answer.approval_id,
            accepted=answer.accepted,
            reason_codes=list(answer.reason_codes),
        )
        return json_response({"ok": True, "reply": answer})

    # -- the requester's view and the receipt ---------------------

    async def _ask_gate(
        self, subject: str, body: bytes, kind: type[GateAnswer]
    ) -> GateAnswer | Response:
        """Relay a signed request and decode the gate's answer; a refusal (service error
        header: ``{"ok": false, "reason"}``), an unreachable gate or an answer that does
        not decode comes back as the page's Response, never as an answer."""
        reply = await self._relay(subject, body)
        if isinstance(reply, Response):
            return reply
        headers = reply.headers or {}
        if names.HEADER_SERVICE_ERROR_CODE in headers:
            reason = headers.get(names.HEADER_SERVICE_ERROR, "gate_error")
            return json_response({"ok": False, "reason": reason})
        try:
            return msgspec.json.decode(reply.data, type=kind)
        except msgspec.DecodeError:
            return refusal(HTTPStatus.BAD_GATEWAY, "unreadable_gate_answer")

    async def _request_candidates(self, _request: Request, principal: Principal) -> Response:
        """The ids held for the principal's tenants, for the page to ask the gate about
        in a signed track request. Ids only; which are the principal's own, and what
        they ended with, only the gate says (:meth:`_track`)."""
        return json_response(
            {"server_now_ms": self.settings.clock(), "candidates": self.board.tenant_ids(principal)}
        )

    async def _track(self, request: Request, person: Principal) -> Response:
        """Relay a signed track request; show each approval the gate answered for, with
        what the announcement says of it (tool, capability, channel) and the words of
        a denial's closed reason. The gate alone decides whose requests these are: the
        console adds nothing the gate left out."""
        answer = await self._ask_gate(names.APPROVAL_TRACK, request.body, TrackReply)
        if isinstance(answer, Response):
            log.info("console_track_refused", principal=person.name)
            return answer
        return json_response({"ok": True, "approvals": [self._shown(t) for t in answer.approvals]})

    async def _rerequest(self, request: Request, person: Principal) -> Response:
        """Relay a signed re-request of an expired approval; the gate decides whether it is
        the signer's and expired, and the runtime proposes the action anew."""
        answer = await self._ask_gate(names.APPROVAL_REREQUEST, request.body, ReRequestReply)
        if isinstance(answer, Response):
            return answer
        self.board.wake()
        log.info(
            "console_rerequest_relayed",
            principal=person.name,
            approval_id=answer.approval_id,
            accepted=answer.accepted,
            reason_codes=list(answer.reason_codes),
        )
        return json_response({"ok": True, "reply": answer})

    def _shown(self, tracked: TrackedApproval) -> dict[str, object]:
        listed = self.board.listed(tracked.approval_id)
        return {
            **msgspec.to_builtins(tracked),
            "native_tool": listed.native_tool if listed else None,
            "capability": listed.capability if listed else None,
            "channel": listed.channel if listed else None,
            "locality": listed.locality if listed else None,
            "reason_words": [_DENY_WORDS.get(code, code) for code in tracked.outcome_codes],
        }


_DENY_WORDS: Final = {
    DENIED_BY_APPROVER: "denied by the approver",
    **{deny_reason_code(reason): label for reason, label in DENY_REASONS.items()},
}
"""A denial's reason codes in the words the approver chose them by."""


# --- running it -------------------------------------------------------------------


@dataclass
class RunningConsole:
    console: Console
    runner: web.ServerRunner
    nc: Client
    tasks: list[asyncio.Task[None]] = field(default_factory=list)

    @property
    def port(self) -> int:
        return bound_port(self.runner)[1]

    @property
    def url(self) -> str:
        host, port = bound_port(self.runner)
        shown = f"[{host}]" if ":" in host else host
        scheme = "http" if self.console.settings.tls is None else "https"
        return f"{scheme}://{shown}:{port}/"

    async def close(self) -> None:
        for task in self.tasks:
            task.cancel()
        if self.tasks:
            # Bounded: a task that swallowed its cancel must not hold shutdown forever.
            _, stuck = await asyncio.wait(self.tasks, timeout=CLOSE_GRACE_SECONDS)
            for task in stuck:
                log.error("console_task_did_not_stop", task=task.get_name())
        await self.runner.cleanup()
        if not self.nc.is_closed:
            await self.nc.close()


async def _log_nats_error(exc: Exception) -> None:
    log.warning("console_bus_error", error=bus_error_reason(exc))


async def start_console(settings: ConsoleSettings) -> RunningConsole:
    """Connect to the bus (reconnecting for as long as the console runs), read what
    is held, then serve. The caller checks first that the bus answers at all.

    The tenant directory and the PDF renderer are read first: a malformed directory
    raises :class:`~smf_assurance.approver.directory.DirectoryError`, a renderer that
    is not the pinned one :class:`~smf_assurance.approver.console.renderer.RendererError`,
    before anything connects."""
    directory = load_directory(settings.directory)
    static = _static_files(settings.pdf_renderer)
    nc = await nats.connect(
        settings.nats_url,
        name="smf-approver-console",
        connect_timeout=2,
        max_reconnect_attempts=-1,
        reconnect_time_wait=1,
        error_cb=_log_nats_error,
        **connect_options(settings.credential),
    )
    try:
        board = ApprovalBoard(nc, settings.clock, settings.request_timeout)
        with contextlib.suppress(NatsError, TimeoutError):
            await board.refresh()
        console = Console(settings, nc, board, directory, static)
        runner = await serve(
            console.handle,
            settings.host,
            settings.port,
            settings.read_timeout,
            console.answers,
            settings.tls,
        )
    except BaseException:
        await nc.close()
        raise
    running = RunningConsole(console, runner, nc)
    running.tasks.append(asyncio.create_task(board.run(settings.refresh_seconds)))
    return running
