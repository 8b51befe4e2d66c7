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
"""

from __future__ import annotations

import asyncio
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


@dataclass
class ConcurrentHandler:
    """Runs each request in its own task, at most ``limit`` at once."""

    handler: StageHandler
    limit: int = DEFAULT_MAX_IN_FLIGHT
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
        try:
            reply = await self.handler(request.data)
        except StageRefusal as refusal:
            await _respond_error(request, "400", refusal)
        except Exception:
            log.exception("stage_handler_failed", subject=request.subject)
            await _respond_error(request, "500", StageRefusal("stage_internal_error"))
        else:
            try:
                await request.respond(reply)
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
) -> tuple[Service, list[ConcurrentHandler]]:
    """Start one nats.micro service with the given endpoints in a queue group."""
    service = await add_service(
        nc, name=name, version=STAGE_VERSION, description=description, queue_group=queue_group
    )
    handlers = []
    for endpoint in endpoints:
        handler = ConcurrentHandler(endpoint.handler, limit)
        handlers.append(handler)
        await service.add_endpoint(
            EndpointConfig(name=endpoint.name, subject=endpoint.subject, handler=handler)
        )
    return service, handlers


class StageClient(Protocol):
    async def call(self, data: bytes, timeout: float) -> bytes: ...


@dataclass(frozen=True, slots=True)
class BusStage:
    """Call a stage over its subject; a missing, slow or failing stage is a refusal."""

    nc: Client
    subject: str

    async def call(self, data: bytes, timeout: float) -> bytes:
        try:
            msg = await self.nc.request(self.subject, data, timeout=timeout)
        except NoRespondersError as exc:
            raise StageRefusal("stage_unavailable", self.subject) from exc
        except NatsTimeoutError as exc:
            raise StageRefusal("stage_timeout", self.subject) from exc
        headers = msg.headers or {}
        if ERROR_CODE_HEADER in headers:
            raise StageRefusal(headers.get(ERROR_HEADER) or "stage_error", self.subject)
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
