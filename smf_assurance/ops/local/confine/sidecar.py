"""The launcher's forwarders: the runtime's secrets stay here, outside the sandbox.

Three unix-socket servers in the launcher's process, each socket in the run
folder bound into the sandbox (``smf_assurance.ops.local.confine.relay`` reaches the
first two from the loopback ports the runtime is configured with):

- **NATS** (:class:`NatsForwarder`): for each connection, one TCP connection to
  the bus. The server's ``INFO`` goes to the runtime as it is; the runtime's
  first line must be ``CONNECT``, whose credentials are replaced by the
  runtime's nkey and its signature over the server's nonce (what nats-py does
  with a seed file); after that both directions are relayed byte for byte, so
  it works whatever account or permissions the server gives that user. Given
  the bus's TLS (the launcher's ``SMF_NATS_CA``), the connection to the bus is
  TLS from its first byte, and the greeting the runtime sees says no TLS (its
  leg is the unix socket); without it, a server that asks for TLS is refused.
- **Model gateway** (:class:`GatewayForwarder`): HTTP/1.1 relayed byte for byte,
  but for each request's head: its ``Authorization`` (and
  ``Proxy-Authorization``) is dropped and the runtime's bearer token put in. The
  request body is framed by ``Content-Length`` or chunked encoding, so a
  keep-alive connection's every request is rewritten; a request the relay
  cannot frame (``Upgrade``, both framings, a bad head) closes the connection.
  The adapter's ``Smf-Instance-Proof`` passes as the adapter made it: a
  process inside the sandbox without our adapter still sends none and is
  refused by the gateway (docs/HERMES.md, finding 10).
- **Signer** (:class:`SignerServer`): ``smf_assurance.subjects.signer``'s wire; signs
  with the runtime's key only a DSSE pre-authentication encoding of a payload
  type a runtime signs, whose payload names this runtime (``runtime_id``, or
  ``connector_id`` of the report on its own result subject). Before it answers a
  runtime attestation naming a process, it tells the launcher's attester
  (``smf_assurance.ops.local.confine.attest``), which tells the gate that process runs here.

Nothing here logs a secret or a payload: connection counts and reason codes.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Final

import nkeys
import structlog

from smf_assurance.subjects import names
from smf_assurance.subjects.keys import SigningKey
from smf_assurance.subjects.signer import MAX_LINE_BYTES, RUNTIME_PAYLOAD_TYPES, parse_pae

log = structlog.get_logger(__name__)

MAX_HEAD_BYTES: Final = 64 * 1024
"""A NATS INFO or CONNECT line, or an HTTP request head, at most this long."""
CHUNK: Final = 64 * 1024
CONNECT_TIMEOUT_S: Final = 5.0
DROPPED_CONNECT_FIELDS: Final = ("user", "pass", "auth_token", "jwt", "nkey", "sig")
TLS_INFO_FIELDS: Final = ("tls_required", "tls_verify", "tls_available")
"""What a TLS bus's greeting says of TLS, which the runtime's plain leg must not read."""
DROPPED_HEADERS: Final = (b"authorization", b"proxy-authorization")


class ForwardRefused(Exception):
    """One connection ends here; ``reason`` is a code for the log."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Bytes from ``reader`` to ``writer`` until end of file, then half-close."""
    try:
        while chunk := await reader.read(CHUNK):
            writer.write(chunk)
            await writer.drain()
    finally:
        with contextlib.suppress(OSError, RuntimeError):
            if writer.can_write_eof():
                writer.write_eof()


async def _close(*writers: asyncio.StreamWriter) -> None:
    for writer in writers:
        writer.close()
    for writer in writers:
        with contextlib.suppress(OSError, asyncio.CancelledError, ConnectionError):
            await writer.wait_closed()


def _protocol_object(line: bytes, verb: bytes, not_that_verb: str) -> dict[str, Any]:
    """The JSON object of a NATS ``INFO`` or ``CONNECT`` line; anything else is refused
    (``not_that_verb``, or ``nats_<verb>_not_json``), so nothing unparsed is relayed."""
    said, _, body = line.strip().partition(b" ")
    if said.upper() != verb:
        raise ForwardRefused(not_that_verb)
    not_json = f"nats_{verb.decode().lower()}_not_json"
    try:
        value = json.loads(body)
    except ValueError as exc:
        raise ForwardRefused(not_json) from exc
    if not isinstance(value, dict):
        raise ForwardRefused(not_json)
    return value


async def _line(reader: asyncio.StreamReader, what: str) -> bytes:
    try:
        return await reader.readuntil(b"\n")
    except asyncio.LimitOverrunError as exc:
        raise ForwardRefused(f"{what}_too_long") from exc
    except asyncio.IncompleteReadError as exc:
        raise ForwardRefused(f"{what}_cut_short") from exc


@dataclass
class Counters:
    connections: int = 0
    refused: dict[str, int] = field(default_factory=dict)

    def refuse(self, reason: str) -> None:
        self.refused[reason] = self.refused.get(reason, 0) + 1


class _Forwarder:
    """A unix-socket server whose connections are each forwarded to ``host:port``."""

    name = "forwarder"

    def __init__(self, host: str, port: int, tls: ssl.SSLContext | None = None) -> None:
        self.host = host
        self.port = port
        self.tls = tls
        self.counters = Counters()
        self._tasks: set[asyncio.Task[None]] = set()

    async def serve(self, path: str) -> asyncio.Server:
        return await asyncio.start_unix_server(self._accept, path, limit=MAX_HEAD_BYTES)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.counters.connections += 1
        upstream_writer: asyncio.StreamWriter | None = None
        try:
            up_reader, up_writer = await asyncio.wait_for(
                asyncio.open_connection(
                    self.host,
                    self.port,
                    limit=MAX_HEAD_BYTES,
                    ssl=self.tls,
                    server_hostname=None if self.tls is None else self.host,
                ),
                CONNECT_TIMEOUT_S,
            )
            upstream_writer = up_writer
            await self.forward(reader, writer, up_reader, up_writer)
        except ForwardRefused as exc:
            self.counters.refuse(exc.reason)
            log.warning("confine_forward_refused", forwarder=self.name, reason=exc.reason)
        except asyncio.CancelledError:
            # the launcher is stopping: the connection ends with it
            pass
        except (OSError, TimeoutError) as exc:
            self.counters.refuse("upstream_unreachable")
            log.warning(
                "confine_upstream_unreachable", forwarder=self.name, error=type(exc).__name__
            )
        finally:
            await _close(writer, *([upstream_writer] if upstream_writer else []))

    async def forward(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        up_reader: asyncio.StreamReader,
        up_writer: asyncio.StreamWriter,
    ) -> None:
        raise NotImplementedError


async def _both(*jobs: Awaitable[None]) -> None:
    """Run the two directions until both ended; the first error ends the other."""
    tasks = [asyncio.ensure_future(job) for job in jobs]
    try:
        await asyncio.gather(*tasks)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


class NatsForwarder(_Forwarder):
    name = "nats"

    def __init__(
        self, host: str, port: int, seed: bytes, tls: ssl.SSLContext | None = None
    ) -> None:
        super().__init__(host, port, tls)
        pair = nkeys.from_seed(bytearray(seed.strip()))
        self._pair = pair
        self.public = pair.public_key.decode("ascii")

    def connect_line(self, line: bytes, nonce: str | None) -> bytes:
        """The runtime's ``CONNECT`` with its credentials replaced by the nkey's."""
        options = _protocol_object(line, b"CONNECT", "nats_first_line_not_connect")
        for name in DROPPED_CONNECT_FIELDS:
            options.pop(name, None)
        if nonce is not None:
            options["nkey"] = self.public
            options["sig"] = base64.b64encode(self._pair.sign(nonce.encode())).decode()
        return b"CONNECT " + json.dumps(options, separators=(",", ":")).encode() + b"\r\n"

    async def forward(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        up_reader: asyncio.StreamReader,
        up_writer: asyncio.StreamWriter,
    ) -> None:
        info_line = await _line(up_reader, "nats_info")
        info = _protocol_object(info_line, b"INFO", "nats_no_info")
        if self.tls is not None:
            # the TLS is this leg's; the runtime's is the unix socket, where none is asked
            for name in TLS_INFO_FIELDS:
                info.pop(name, None)
            info_line = b"INFO " + json.dumps(info, separators=(",", ":")).encode() + b"\r\n"
        elif info.get("tls_required"):
            raise ForwardRefused("nats_tls_required")
        nonce = info.get("nonce")
        writer.write(info_line)
        await writer.drain()
        connect = self.connect_line(
            await _line(reader, "nats_connect"), nonce if isinstance(nonce, str) else None
        )
        up_writer.write(connect)
        await up_writer.drain()
        await _both(_pipe(reader, up_writer), _pipe(up_reader, writer))


class GatewayForwarder(_Forwarder):
    name = "gateway"

    def __init__(self, host: str, port: int, token: str) -> None:
        super().__init__(host, port)
        self._authorization = b"Authorization: Bearer " + token.strip().encode("ascii") + b"\r\n"

    def rewrite_head(self, head: bytes) -> tuple[bytes, int | None, bool]:
        """The request head with the runtime's token; the body's ``Content-Length`` (None:
        none) and whether it is chunked."""
        lines = head.split(b"\r\n")
        if len(lines) < 2 or lines[-1] != b"" or lines[-2] != b"":
            raise ForwardRefused("http_head_malformed")
        request_line = lines[0]
        parts = request_line.split(b" ")
        if len(parts) != 3 or not parts[2].startswith(b"HTTP/1.") or parts[0] == b"CONNECT":
            raise ForwardRefused("http_request_line_refused")
        kept = [request_line]
        length: int | None = None
        chunked = False
        for line in lines[1:-2]:
            name, sep, value = line.partition(b":")
            if not sep or not name or name != name.strip() or b" " in name:
                raise ForwardRefused("http_header_malformed")
            lowered = name.lower()
            if lowered in DROPPED_HEADERS:
                continue
            if lowered == b"upgrade":
                raise ForwardRefused("http_upgrade_refused")
            if lowered == b"content-length":
                text = value.strip()
                if not text.isdigit() or length is not None:
                    raise ForwardRefused("http_length_refused")
                length = int(text)
            if lowered == b"transfer-encoding":
                if value.strip().lower() != b"chunked" or chunked:
                    raise ForwardRefused("http_encoding_refused")
                chunked = True
            kept.append(line)
        if chunked and length is not None:
            raise ForwardRefused("http_framing_ambiguous")
        return b"\r\n".join(kept) + b"\r\n" + self._authorization + b"\r\n", length, chunked

    async def forward(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        up_reader: asyncio.StreamReader,
        up_writer: asyncio.StreamWriter,
    ) -> None:
        await _both(self._requests(reader, up_writer), _pipe(up_reader, writer))

    async def _requests(
        self, reader: asyncio.StreamReader, up_writer: asyncio.StreamWriter
    ) -> None:
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except asyncio.IncompleteReadError as exc:
                    if exc.partial:
                        raise ForwardRefused("http_head_cut_short") from exc
                    return
                except asyncio.LimitOverrunError as exc:
                    raise ForwardRefused("http_head_too_long") from exc
                rewritten, length, chunked = self.rewrite_head(head)
                up_writer.write(rewritten)
                if chunked:
                    await self._chunked(reader, up_writer)
                elif length:
                    await self._exactly(reader, up_writer, length)
                await up_writer.drain()
        finally:
            with contextlib.suppress(OSError, RuntimeError):
                if up_writer.can_write_eof():
                    up_writer.write_eof()

    @staticmethod
    async def _exactly(
        reader: asyncio.StreamReader, up_writer: asyncio.StreamWriter, length: int
    ) -> None:
        left = length
        while left:
            chunk = await reader.read(min(CHUNK, left))
            if not chunk:
                raise ForwardRefused("http_body_cut_short")
            up_writer.write(chunk)
            left -= len(chunk)
            await up_writer.drain()

    async def _chunked(self, reader: asyncio.StreamReader, up_writer: asyncio.StreamWriter) -> None:
        while True:
            size_line = await _line(reader, "http_chunk")
            up_writer.write(size_line)
            text = size_line.split(b";", 1)[0].strip()
            try:
                size = int(text, 16)
            except ValueError as exc:
                raise ForwardRefused("http_chunk_malformed") from exc
            if size == 0:
                while (trailer := await _line(reader, "http_trailer")) not in (b"\r\n", b"\n"):
                    up_writer.write(trailer)
                up_writer.write(trailer)
                return
            await self._exactly(reader, up_writer, size + 2)


class SignerServer:
    """Signs as the runtime, and only what a runtime signs for itself."""

    def __init__(
        self,
        key: SigningKey,
        principal: str,
        runtime_id: str,
        launched: Callable[[str], Awaitable[None]] | None = None,
    ) -> None:
        self._key = key
        self.principal = principal
        self.runtime_id = runtime_id
        self.counters = Counters()
        self.signed: dict[str, int] = {}
        self.launched = launched
        """Told the process an attestation names before its signature is returned
        (``smf_assurance.ops.local.confine.attest.Attester.launched``)."""
        self._named: str | None = None

    async def serve(self, path: str) -> asyncio.Server:
        return await asyncio.start_unix_server(self._accept, path, limit=MAX_LINE_BYTES)

    def answer(self, line: bytes) -> dict[str, str]:
        try:
            request = json.loads(line)
        except ValueError:
            return self._refuse("signer_request_not_json")
        if not isinstance(request, dict):
            return self._refuse("signer_request_not_json")
        op = request.get("op")
        if op == "identity":
            return {
                "principal": self.principal,
                "key_id": self._key.key_id,
                "public_key": base64.b64encode(self._key.public_bytes).decode(),
            }
        if op != "sign" or not isinstance(request.get("message"), str):
            return self._refuse("signer_unknown_request")
        try:
            message = base64.b64decode(request["message"], validate=True)
            payload_type, payload = parse_pae(message)
        except ValueError:
            return self._refuse("signer_not_dsse")
        field = RUNTIME_PAYLOAD_TYPES.get(payload_type)
        if field is None:
            return self._refuse("signer_payload_type_refused")
        try:
            body = json.loads(payload)
            named = body.get(field)
        except (ValueError, AttributeError):
            body, named = None, None
        if named != self.runtime_id:
            return self._refuse("signer_other_runtime")
        if payload_type == names.PAYLOAD_ATTESTATION and isinstance(body, dict):
            instance = body.get("instance_id")
            self._named = instance if isinstance(instance, str) else None
        self.signed[payload_type] = self.signed.get(payload_type, 0) + 1
        return {"signature": base64.b64encode(self._key.sign(message)).decode()}

    def _refuse(self, reason: str) -> dict[str, str]:
        self.counters.refuse(reason)
        log.warning("confine_sign_refused", reason=reason)
        return {"error": reason}

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.counters.connections += 1
        try:
            while True:
                try:
                    line = await reader.readuntil(b"\n")
                except (asyncio.IncompleteReadError, asyncio.LimitOverrunError):
                    return
                reply = self.answer(line)
                named, self._named = self._named, None
                if named is not None and self.launched is not None:
                    # the gate hears of the process from the launcher before it attests
                    await self.launched(named)
                writer.write(json.dumps(reply).encode() + b"\n")
                await writer.drain()
        except (OSError, asyncio.CancelledError):
            return
        finally:
            await _close(writer)


Serve = Callable[[str], Awaitable[asyncio.Server]]
