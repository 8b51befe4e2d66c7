"""Stage plumbing: nats.micro services with concurrent handlers, and stage clients.

Each gate stage is a request/reply service endpoint (STYLE.md, "nats.py
nats/micro"): it answers ``$SRV.PING|INFO|STATS`` and joins a queue group,
so scaling out is starting another process. nats-py runs one
subscription's callbacks one at a time; a stage that awaited I/O inside the
callback would serialize the whole gate (issue 3). So the callback only
takes a slot from a bounded semaphore and spawns a task; when every slot is
busy the callback waits, which is back-pressure, not loss.

A stage is called through a ``StageClient``: over the bus (its subject), or
in-process when the deployment co-locates stages. The refusal contract is
the same either way: ``StageRefusal(reason_code)``.

Stage traffic over the bus is authenticated (``StageAuth``): the stage
subjects are reachable by every client on the bus, and NATS permissions are
defence in depth, not the only control (ARCHITECTURE.md, "Trust and
identity on the bus"). Without it, any client could ask the dispatch stage
to sign and publish an order for an "allow" it made up, or answer
``smf.stage.evaluate`` before the real stage with one. A request must carry
a MAC over its subject and bytes, and a reply a MAC that also binds the
request's, so a captured reply cannot answer another request.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Final, Protocol

import msgspec
import structlog
from nats.aio.client import Client
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeoutError
from nats.micro import add_service
from nats.micro.request import ERROR_CODE_HEADER, ERROR_HEADER, Request
from nats.micro.service import EndpointConfig, Service

from subjects.messages import ErrorReply
from subjects.names import QUEUE_GROUP

log = structlog.get_logger(__name__)

DEFAULT_MAX_IN_FLIGHT: Final = 256
STAGE_VERSION: Final = "0.1.0"
STAGE_MAC_HEADER: Final = "Smf-Stage-Mac"
STAGE_UNAUTHENTICATED: Final = "stage_unauthenticated"
"""A stage request without a valid MAC: not sent by a gate holding the stage key."""
STAGE_REPLY_UNAUTHENTICATED: Final = "stage_reply_unauthenticated"
"""A stage reply without a valid MAC: someone other than the stage answered first."""
_STAGE_KEY_LABEL: Final = b"smf.stage-auth/1"

StageHandler = Callable[[bytes], Awaitable[bytes]]


class StageRefusal(Exception):
    """A stage refused its input; ``reason_code`` becomes the denial's reason."""

    def __init__(self, reason_code: str, detail: str = "") -> None:
        super().__init__(reason_code if not detail else f"{reason_code}: {detail}")
        self.reason_code = reason_code
        self.detail = detail


def refusal_payload(refusal: StageRefusal) -> bytes:
    return msgspec.json.encode(
        ErrorReply(
            schema="smf.error/1", reason_code=refusal.reason_code, detail=refusal.detail[:512]
        )
    )


@dataclass(frozen=True, slots=True)
class StageAuth:
    """HMAC-SHA256 over the gate's own stage traffic on the bus.

    Symmetric, because every party is the gate itself (one trust domain) and
    a stage hop must stay cheap: a MAC costs microseconds where an Ed25519
    signature and check would add a large share of a hop. The key is derived
    from the gate's signing key, so a stage process that can act for the gate
    already holds what it needs and nothing else can produce a valid MAC.
    """

    key: bytes

    @classmethod
    def from_seed(cls, seed: bytes) -> StageAuth:
        """Derive the stage key from the gate key's seed, domain-separated."""
        return cls(hmac.new(seed, _STAGE_KEY_LABEL, hashlib.sha256).digest())

    def _tag(self, *parts: bytes) -> str:
        mac = hmac.new(self.key, digestmod=hashlib.sha256)
        for part in parts:
            mac.update(len(part).to_bytes(8, "big"))
            mac.update(part)
        return mac.hexdigest()

    def request_tag(self, subject: str, data: bytes) -> str:
        return self._tag(b"request", subject.encode(), data)

    def reply_tag(self, subject: str, request_tag: str, data: bytes) -> str:
        """Binds the reply to the request it answers: a replayed reply does not fit."""
        return self._tag(b"reply", subject.encode(), request_tag.encode(), data)

    @staticmethod
    def matches(expected: str, presented: str | None) -> bool:
        return presented is not None and hmac.compare_digest(expected, presented)


@dataclass
class ConcurrentHandler:
    """Runs each request in its own task, at most ``limit`` at once.

    With ``auth``, a request without a valid MAC is refused before the
    handler sees it, and every reply carries the MAC binding it to its request.
    """

    handler: StageHandler
    limit: int = DEFAULT_MAX_IN_FLIGHT
    auth: StageAuth | None = None
    _slots: asyncio.Semaphore = field(init=False)
    _tasks: set[asyncio.Task[None]] = field(init=False, default_factory=set)

    def __post_init__(self) -> None:
        self._slots = asyncio.Semaphore(self.limit)

    async def __call__(self, request: Request) -> None:
        await self._slots.acquire()
        task = asyncio.create_task(self._serve(request))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _serve(self, request: Request) -> None:
        request_tag: str | None = None
        try:
            if self.auth is not None:
                request_tag = self.auth.request_tag(request.subject, request.data)
                presented = (request.headers or {}).get(STAGE_MAC_HEADER)
                if not self.auth.matches(request_tag, presented):
                    log.warning("stage_request_unauthenticated", subject=request.subject)
                    await _respond_error(
                        request, "401", StageRefusal(STAGE_UNAUTHENTICATED, request.subject)
                    )
                    return
            reply = await self.handler(request.data)
        except StageRefusal as refusal:
            await _respond_error(request, "400", refusal)
        except Exception:
            log.exception("stage_handler_failed", subject=request.subject)
            await _respond_error(request, "500", StageRefusal("stage_internal_error"))
        else:
            headers = None
            if self.auth is not None and request_tag is not None:
                tag = self.auth.reply_tag(request.subject, request_tag, reply)
                headers = {STAGE_MAC_HEADER: tag}
            try:
                await request.respond(reply, headers=headers)
            except Exception:
                log.exception("stage_reply_failed", subject=request.subject)
        finally:
            self._slots.release()

    async def drain(self) -> None:
        """Wait for every request in flight (used on shutdown)."""
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)


async def _respond_error(request: Request, code: str, refusal: StageRefusal) -> None:
    try:
        await request.respond_error(code, refusal.reason_code, refusal_payload(refusal))
    except Exception:
        log.exception("stage_error_reply_failed", subject=request.subject)


@dataclass(frozen=True, slots=True)
class Endpoint:
    name: str
    subject: str
    handler: StageHandler


async def start_service(
    nc: Client,
    name: str,
    endpoints: list[Endpoint],
    *,
    description: str = "",
    limit: int = DEFAULT_MAX_IN_FLIGHT,
    queue_group: str = QUEUE_GROUP,
    auth: StageAuth | None = None,
) -> tuple[Service, list[ConcurrentHandler]]:
    """Start one nats.micro service with the given endpoints in a queue group.

    Pass ``auth`` for the gate's internal stages; public endpoints (propose,
    approvals) verify their callers' signatures themselves.
    """
    service = await add_service(
        nc, name=name, version=STAGE_VERSION, description=description, queue_group=queue_group
    )
    handlers = []
    for endpoint in endpoints:
        handler = ConcurrentHandler(endpoint.handler, limit, auth)
        handlers.append(handler)
        await service.add_endpoint(
            EndpointConfig(name=endpoint.name, subject=endpoint.subject, handler=handler)
        )
    return service, handlers


class StageClient(Protocol):
    async def call(self, data: bytes, timeout: float) -> bytes: ...


@dataclass(frozen=True, slots=True)
class BusStage:
    """Call a stage over its subject; a missing, slow or failing stage is a refusal.

    With ``auth``, a reply is used only if its MAC binds it to this request;
    otherwise (someone else answered first) the call is refused, so a forged
    reply can at worst cause a denial, never an allow.
    """

    nc: Client
    subject: str
    auth: StageAuth | None = None

    async def call(self, data: bytes, timeout: float) -> bytes:
        tag = self.auth.request_tag(self.subject, data) if self.auth is not None else None
        headers = {STAGE_MAC_HEADER: tag} if tag is not None else None
        try:
            msg = await self.nc.request(self.subject, data, timeout=timeout, headers=headers)
        except NoRespondersError as exc:
            raise StageRefusal("stage_unavailable", self.subject) from exc
        except NatsTimeoutError as exc:
            raise StageRefusal("stage_timeout", self.subject) from exc
        reply_headers = msg.headers or {}
        if ERROR_CODE_HEADER in reply_headers:
            raise StageRefusal(reply_headers.get(ERROR_HEADER) or "stage_error", self.subject)
        if self.auth is not None and tag is not None:
            expected = self.auth.reply_tag(self.subject, tag, msg.data)
            if not self.auth.matches(expected, reply_headers.get(STAGE_MAC_HEADER)):
                # Someone other than the stage answered first: never act on it.
                raise StageRefusal(STAGE_REPLY_UNAUTHENTICATED, self.subject)
        return msg.data


@dataclass(frozen=True, slots=True)
class LocalStage:
    """Call a co-located stage in-process, under the same deadline."""

    handler: StageHandler

    async def call(self, data: bytes, timeout: float) -> bytes:
        try:
            return await asyncio.wait_for(self.handler(data), timeout)
        except TimeoutError as exc:
            raise StageRefusal("stage_timeout") from exc
