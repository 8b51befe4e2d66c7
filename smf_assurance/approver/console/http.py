"""The console's HTTP transport, on aiohttp's low-level server.

aiohttp parses HTTP/1.1; this module keeps true around it what the console
promises (docs/CONSOLE.md):

- Every answer carries :data:`SECURITY_HEADERS`, aiohttp's own refusals of a
  malformed request included (:class:`_GuardedRequest`): held content is
  written by an agent, and no answer of this origin may run a script or be
  framed.
- HTTP/1.x only, one request per connection (``Connection: close`` on every
  answer): no keep-alive or pipelining state to get wrong.
- A request is read one way only: aiohttp refuses duplicate
  ``Content-Length`` and ``Content-Length`` beside ``Transfer-Encoding``;
  the console refuses any ``Transfer-Encoding`` (501) and a declared body
  over :data:`MAX_BODY_BYTES` (413), both unread.
- A slow client holds one connection for at most the read timeout: a request
  head not complete by then is dropped (:class:`_ConsoleServer`), a body not
  complete by then is answered 408.
- No request bytes in the log: aiohttp's own log of a malformed request
  quotes them, so it is replaced by :class:`_TypeOnlyLog`, which logs the
  error's type and nothing else; there is no access log.

Routes see :class:`Request` (method, path, lower-cased headers, the whole
bounded body) and answer :class:`Response`; they never touch aiohttp.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any, Final

import msgspec
import structlog
from aiohttp import web
from aiohttp.abc import AbstractStreamWriter
from aiohttp.http_parser import RawRequestMessage
from aiohttp.streams import StreamReader
from aiohttp.web_protocol import RequestHandler

log = structlog.get_logger(__name__)

MAX_LINE_BYTES: Final = 8192
"""Longest request line and header field aiohttp accepts (stops memory exhaustion)."""
MAX_HEADERS: Final = 64
MAX_BODY_BYTES: Final = 64 * 1024
"""A signed envelope is a few hundred bytes; anything larger is refused unread."""
READ_TIMEOUT_SECONDS: Final = 10.0
"""A client that sends its request slower than this is disconnected."""
SHUTDOWN_GRACE_SECONDS: Final = 5.0
"""How long closing waits for answers in progress."""
SECURITY_HEADERS: Final = (
    # Held content is written by an agent: the page renders it as text, and even
    # a markup injection could run no script and reach no other origin.
    # ``frame-src blob:``, the one extension: a held PDF is shown in a frame
    # whose source is a blob the page made from bytes whose SHA-256 it checked. Only
    # this page can mint its blob: URLs, so no frame can load anything from elsewhere,
    # and a blob document inherits this policy (no script, no connection). pdf.js,
    # which draws a PDF's pages in the page, is served from this origin (/vendor/, only
    # as the pinned files) and runs under ``script-src 'self'``, its worker too
    # (``worker-src`` falls back to it); no eval, no WebAssembly is allowed.
    (
        "Content-Security-Policy",
        "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
        "img-src 'self'; frame-src blob:; base-uri 'none'; form-action 'none'; "
        "frame-ancestors 'none'",
    ),
    ("X-Content-Type-Options", "nosniff"),
    ("X-Frame-Options", "DENY"),
    ("Referrer-Policy", "no-referrer"),
    ("Cross-Origin-Opener-Policy", "same-origin"),
    ("Cache-Control", "no-store"),
)


@dataclass(frozen=True, slots=True)
class Request:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes = b""

    def cookie(self, name: str) -> str | None:
        for part in self.headers.get("cookie", "").split(";"):
            key, _, value = part.strip().partition("=")
            if key == name:
                return value
        return None


@dataclass(frozen=True, slots=True)
class Response:
    status: HTTPStatus
    body: bytes
    content_type: str = "application/json"
    headers: tuple[tuple[str, str], ...] = ()


def json_response(
    value: Any, status: HTTPStatus = HTTPStatus.OK, headers: tuple[tuple[str, str], ...] = ()
) -> Response:
    return Response(status, msgspec.json.encode(value), "application/json", headers)


def refusal(status: HTTPStatus, reason: str) -> Response:
    return json_response({"ok": False, "reason": reason}, status)


Route = Callable[[Request], Awaitable[Response]]
_Handler = Callable[[web.BaseRequest], Awaitable[web.Response]]


class AnswerCounts:
    """Answers by route and status, for ``GET /metrics``: counts only.

    A path that is not one of ``routes`` counts as ``other``, so a client can
    neither grow the set of labels nor put text of its own into them.
    """

    def __init__(self, routes: Iterable[str]) -> None:
        self.routes = frozenset(routes)
        self.counts: Counter[tuple[str, int]] = Counter()

    def add(self, method: str, path: str, status: int) -> None:
        known = method in ("GET", "POST") and path in self.routes
        self.counts[path if known else "other", status] += 1


class _GuardedRequest(web.BaseRequest):
    """aiohttp's request, whose every answer gets the security headers and closes.

    ``_prepare_hook`` is where aiohttp itself attaches ``on_response_prepare``;
    it runs for every answer on the connection, the ones aiohttp writes for a
    request it could not parse included, which no middleware or signal sees.
    ``test_console.py::test_aiohttp_refuses_a_request_read_two_ways`` fails if an
    aiohttp release stops calling it there. It counts the answer too.
    """

    ATTRS = web.BaseRequest.ATTRS | frozenset(["counts"])

    def __init__(self, *args: Any, counts: AnswerCounts, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.counts = counts

    async def _prepare_hook(self, response: web.StreamResponse) -> None:
        response.headers.extend(SECURITY_HEADERS)
        response.headers["Connection"] = "close"
        response.force_close()
        self.counts.add(self.method, self.path, response.status)


class _TypeOnlyLog(logging.Logger):
    """aiohttp's server log, reduced to the error's type (no payload in logs).

    aiohttp logs a request it could not parse with its exception, whose message
    quotes the offending bytes (a cookie, a body); stdlib logging is not
    configured here, so they would reach stderr through its last-resort handler.
    Every record becomes one event naming the exception's type (``none`` for the
    rare record without one); aiohttp's debug traces are off (no ``debug=True``).
    """

    def __init__(self) -> None:
        super().__init__(__name__, logging.DEBUG)

    def handle(self, record: logging.LogRecord) -> None:
        error = record.exc_info[0] if record.exc_info else None
        log.info("console_http_refused", error=getattr(error, "__name__", "none"))


def _answer(response: Response) -> web.Response:
    headers = [("Content-Type", response.content_type), *response.headers]
    return web.Response(status=response.status, body=response.body, headers=headers)


async def _read(request: web.BaseRequest, read_timeout: float) -> Request | Response:
    """The request as routes see it, or the refusal of one that is not read at all."""
    if request.version.major != 1:  # HTTP/0.9 has no headers to refuse a body by
        return refusal(HTTPStatus.HTTP_VERSION_NOT_SUPPORTED, "http_version_not_supported")
    if "Transfer-Encoding" in request.headers:
        return refusal(HTTPStatus.NOT_IMPLEMENTED, "transfer_encoding_not_supported")
    length = request.content_length or 0
    if length > MAX_BODY_BYTES:
        return refusal(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, "body_too_large")
    try:
        async with asyncio.timeout(read_timeout):
            body = await request.read() if length else b""
    except TimeoutError:
        return refusal(HTTPStatus.REQUEST_TIMEOUT, "read_timeout")
    headers = {name.lower(): value for name, value in request.headers.items()}
    return Request(request.method, request.path, headers, body)


def _handler(route: Route, read_timeout: float) -> _Handler:
    async def handle(request: web.BaseRequest) -> web.Response:
        read = await _read(request, read_timeout)
        if isinstance(read, Response):
            return _answer(read)
        try:
            return _answer(await route(read))
        except Exception:  # one failed request must not take the console down
            log.exception("console_request_failed", path=read.path)
            return _answer(refusal(HTTPStatus.INTERNAL_SERVER_ERROR, "internal_error"))

    return handle


class _ConsoleServer(web.Server):
    """aiohttp's low-level server, with the console's request type and a head deadline.

    A connection whose request head is not complete ``read_timeout`` after it
    opened is closed unanswered (a slow client cannot hold the
    console). aiohttp's own keep-alive timer does this from connect only in its
    newest releases, and bytes arriving reset nothing here, so trickling a head
    does not extend it. Once the head is complete the body has its own timeout
    (:func:`_read`).
    """

    def __init__(
        self, route: Route, read_timeout: float, counts: AnswerCounts, **kwargs: Any
    ) -> None:
        super().__init__(_handler(route, read_timeout), request_factory=self._request, **kwargs)
        self.read_timeout = read_timeout
        self.counts = counts
        self.deadlines: dict[RequestHandler, asyncio.TimerHandle] = {}

    def connection_made(self, handler: RequestHandler, transport: asyncio.Transport) -> None:
        super().connection_made(handler, transport)
        loop = asyncio.get_running_loop()
        self.deadlines[handler] = loop.call_later(self.read_timeout, transport.close)

    def connection_lost(self, handler: RequestHandler, exc: BaseException | None = None) -> None:
        self._head_done(handler)
        super().connection_lost(handler, exc)

    def _head_done(self, handler: RequestHandler) -> None:
        deadline = self.deadlines.pop(handler, None)
        if deadline is not None:
            deadline.cancel()

    def _request(
        self,
        message: RawRequestMessage,
        payload: StreamReader,
        protocol: RequestHandler,
        writer: AbstractStreamWriter,
        task: asyncio.Task[None],
    ) -> web.BaseRequest:
        """aiohttp calls this once a head is parsed (or refused): the deadline is met."""
        self._head_done(protocol)
        return _GuardedRequest(
            message,
            payload,
            protocol,
            writer,
            task,
            asyncio.get_running_loop(),
            client_max_size=MAX_BODY_BYTES,
            counts=self.counts,
        )


async def serve(
    route: Route,
    host: str,
    port: int,
    read_timeout: float,
    counts: AnswerCounts,
    tls: ssl.SSLContext | None = None,
) -> web.ServerRunner:
    """Serve ``route`` on ``host:port`` until the returned runner's ``cleanup()``;
    every answer is counted in ``counts``. With ``tls``, HTTPS only.

    A client that hangs up mid-request cancels its handler, so it holds nothing
    after it left; a signed resolution already relayed still reaches the gate,
    which alone decides (only the gate's answer to that client is lost).
    Raises ``OSError`` when the address cannot be bound (nothing is left running).
    """
    server = _ConsoleServer(
        route,
        read_timeout,
        counts,
        handler_cancellation=True,
        lingering_time=0,
        max_line_size=MAX_LINE_BYTES,
        max_field_size=MAX_LINE_BYTES,
        max_headers=MAX_HEADERS,
        access_log=None,
        logger=_TypeOnlyLog(),
    )
    runner = web.ServerRunner(server, shutdown_timeout=SHUTDOWN_GRACE_SECONDS)
    await runner.setup()
    try:
        await web.TCPSite(runner, host, port, ssl_context=tls).start()
    except BaseException:
        await runner.cleanup()
        raise
    return runner


def bound_port(runner: web.ServerRunner) -> tuple[str, int]:
    host, port = runner.addresses[0][:2]
    return str(host), int(port)
