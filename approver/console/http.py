"""Just enough HTTP/1.1 for one page and a small JSON API, on asyncio streams.

The console runs on the same event loop as its NATS connection, and the
standard library's ``http.server`` is thread-based, so requests are parsed
here, deliberately narrowly: one request per connection (``Connection:
close``, no keep-alive state), bodies only by one ``Content-Length`` of at
most ``MAX_BODY_BYTES`` (no chunked bodies, no duplicate lengths: stops a
request being read two ways), bounded line length and header count (stops
memory exhaustion), and every answer carries the security headers below.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any, Final
from urllib.parse import urlsplit

import msgspec

MAX_LINE_BYTES: Final = 8192
MAX_HEADERS: Final = 64
MAX_BODY_BYTES: Final = 64 * 1024
"""A signed envelope is a few hundred bytes; anything larger is refused unread."""
READ_TIMEOUT_SECONDS: Final = 10.0
"""A client that sends its request slower than this is disconnected."""
SECURITY_HEADERS: Final = (
    # Held content is written by an agent: the page renders it as text, and even
    # a markup injection could run no script and reach no other origin.
    (
        "Content-Security-Policy",
        "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
        "img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
    ),
    ("X-Content-Type-Options", "nosniff"),
    ("X-Frame-Options", "DENY"),
    ("Referrer-Policy", "no-referrer"),
    ("Cross-Origin-Opener-Policy", "same-origin"),
    ("Cache-Control", "no-store"),
)


class HttpError(Exception):
    """A request that is refused before it reaches a route."""

    def __init__(self, status: HTTPStatus, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


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


async def _line(reader: asyncio.StreamReader) -> bytes:
    try:
        return await reader.readline()
    except ValueError as exc:  # longer than the reader's limit
        raise HttpError(HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE, "line_too_long") from exc


async def read_request(reader: asyncio.StreamReader) -> Request | None:
    """One request, or ``None`` when the client closed before sending one.

    Only ``Content-Length`` bodies, at most ``MAX_BODY_BYTES``; one
    ``Content-Length`` header (two could be read two ways); no chunked bodies.
    """
    first = await _line(reader)
    if not first:
        return None
    parts = first.decode("latin-1").rstrip("\r\n").split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise HttpError(HTTPStatus.BAD_REQUEST, "malformed_request_line")
    method, target, _ = parts
    headers: dict[str, str] = {}
    for _ in range(MAX_HEADERS + 1):
        raw = await _line(reader)
        if raw in (b"\r\n", b"\n"):
            break
        name, sep, value = raw.decode("latin-1").partition(":")
        key = name.lower()
        if not raw.endswith(b"\n") or not sep or not key or key != key.strip():
            raise HttpError(HTTPStatus.BAD_REQUEST, "malformed_header")
        if key == "content-length" and key in headers:
            raise HttpError(HTTPStatus.BAD_REQUEST, "duplicate_content_length")
        headers[key] = value.strip()
    else:
        raise HttpError(HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE, "too_many_headers")
    if "transfer-encoding" in headers:
        raise HttpError(HTTPStatus.NOT_IMPLEMENTED, "transfer_encoding_not_supported")
    length = headers.get("content-length", "0")
    if not length.isascii() or not length.isdigit():
        raise HttpError(HTTPStatus.BAD_REQUEST, "malformed_content_length")
    if int(length) > MAX_BODY_BYTES:
        raise HttpError(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, "body_too_large")
    body = await reader.readexactly(int(length)) if int(length) else b""
    return Request(method, urlsplit(target).path, headers, body)


def encode_response(response: Response) -> bytes:
    status = response.status
    lines = [
        f"HTTP/1.1 {status.value} {status.phrase}",
        f"Content-Type: {response.content_type}",
        f"Content-Length: {len(response.body)}",
        "Connection: close",
        *(f"{k}: {v}" for k, v in SECURITY_HEADERS + response.headers),
    ]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + response.body
