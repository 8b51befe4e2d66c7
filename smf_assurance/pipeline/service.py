"""Request/reply services on NATS: nats.micro endpoints that tell the truth.

Every gate stage, the gate's public endpoints (propose, approvals, attest)
and Swarm's analysis are request/reply service endpoints (STYLE.md, "nats.py
nats/micro"): each answers ``$SRV.PING|INFO|STATS`` and joins a queue group,
so scaling out is starting another process. This module is that plumbing,
and nothing about what a stage decides.

Invariants it keeps:

- Concurrency with back-pressure. nats-py runs one subscription's callbacks
  one at a time; a handler that awaited I/O inside the callback would
  serialize the whole gate. So the callback takes a slot from a
  bounded semaphore and spawns a task; when every slot is busy the callback
  waits, which is back-pressure, not loss.
- ``$SRV.STATS`` is measured where the work happens. nats.micro
  times the callback, which here only spawns a task, and counts only errors
  the callback raises, which is none. ``ConcurrentHandler`` counts each
  request when its task ends, its processing time from arrival to reply, and
  every error reply (refusals included) with its reason code;
  ``MeasuredService.stats`` reports those.
- Authenticated internal traffic (``StageAuth``). The stage subjects are
  reachable by every client the bus admits; without a MAC any such client
  could ask the dispatch stage to sign an order, or answer a stage first.
  A request carries a MAC over subject and bytes, a reply one that also binds
  the request's, so a captured reply cannot answer another request.
- One refusal contract: a handler raises ``StageRefusal(reason_code)``; the
  caller sees a NATS service error whose description is that reason code
  (docs/SUBJECTS.md, "Error replies"), and a caller over the bus raises the
  same ``StageRefusal`` again.
- No deputy. A request is answered only on a reply subject a responder may
  write (``bus_access.answerable_reply``: an inbox, or the server's mapped reply
  of a request from another account); any other is dropped unanswered, counted
  in ``$SRV.STATS`` (``data.refused_replies``) and logged with the subject only.
  Otherwise a requester could name a stream's subject, a KV key or a JetStream
  API call as its reply and have the gate write there.
- Who asks is the server's word: a handler that answers by requester gets the
  account the server named for a request that crossed into the gate's account
  (:class:`Requester`), never a name the request carries.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import hmac
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Final

import msgspec
import structlog
from nats.aio.client import Client
from nats.errors import Error as NatsError
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeoutError
from nats.micro.request import Request
from nats.micro.service import EndpointConfig, Service, ServiceConfig, ServiceStats

from smf_assurance.subjects import names
from smf_assurance.subjects.bus_access import (
    REQUEST_INFO_HEADER,
    RESPONSE_ROOT,
    BusCredential,
    answerable_reply,
    bus_error_reason,
    connect_options,
)
from smf_assurance.subjects.keyed import KEYED_PREFIX, PseudonymKey
from smf_assurance.subjects.messages import ErrorReply

log = structlog.get_logger(__name__)

DEFAULT_MAX_IN_FLIGHT: Final = 256
SERVICE_VERSION: Final = "0.1.0"
STAGE_MAC_HEADER: Final = "Smf-Stage-Mac"
STAGE_UNAUTHENTICATED: Final = "stage_unauthenticated"
"""A stage request without a valid MAC: not sent by a gate holding the stage key."""
STAGE_REPLY_UNAUTHENTICATED: Final = "stage_reply_unauthenticated"
"""A stage reply without a valid MAC: someone other than the stage answered first."""
INTERNAL_ERROR: Final = "stage_internal_error"
_STAGE_KEY_DOMAIN: Final = "smf.stage-auth/1"

Handler = Callable[[bytes], Awaitable[bytes]]
"""A service endpoint's work: request bytes -> reply bytes, or ``StageRefusal``."""


@dataclass(frozen=True, slots=True)
class Requester:
    """Who sent a request, as the server tells it.

    ``crossed``: the request came from another account (its reply is the server's
    mapped ``_R_.`` subject); ``account`` is then the account the server named in
    ``Nats-Request-Info`` (one principal per account, ``bus_access.account_of``), or
    None when it named none. A request that did not cross comes from inside the
    gate's account, or from any client of a bus without accounts.
    """

    crossed: bool
    account: str | None


class _RequestInfo(msgspec.Struct, frozen=True):
    acc: str | None = None


def requester_of(reply: str | None, headers: dict[str, str] | None) -> Requester:
    """The :class:`Requester` of a request with this reply subject and headers."""
    if (reply or "").split(".", 1)[0] != RESPONSE_ROOT:
        return Requester(False, None)
    raw = (headers or {}).get(REQUEST_INFO_HEADER)
    try:
        info = msgspec.json.decode(raw or "", type=_RequestInfo)
    except msgspec.DecodeError:
        return Requester(True, None)
    return Requester(True, info.acc or None)


IdentifiedHandler = Callable[[bytes, Requester], Awaitable[bytes]]
"""An endpoint's work that depends on who asks (:class:`Requester`)."""


class StageRefusal(Exception):
    """A service refused its input; ``reason_code`` becomes the denial's reason."""

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
    from the gate's tenant key, a secret every replica of the gate holds and
    nothing else does, so a stage process that can act for the gate already
    holds what it needs and nothing else can produce a valid MAC. Not from the
    gate's signing key: that key rotates one replica at a time
    (docs/OPERATIONS.md, "Key rotation"), and replicas signing with two keys
    must still call each other's stages.
    """

    key: bytes = field(repr=False)

    @classmethod
    def from_tenant_key(cls, tenant_key: PseudonymKey) -> StageAuth:
        """Derive the stage key from the tenant key: an HMAC under it, in a domain of
        its own, so it is no tenant's identifier and no identifier is it."""
        derived = tenant_key.identifier(_STAGE_KEY_DOMAIN, "stage")
        return cls(bytes.fromhex(derived.removeprefix(KEYED_PREFIX)))

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


@dataclass(slots=True)
class EndpointCounters:
    """What ``$SRV.STATS`` reports for one endpoint, counted by the handler itself."""

    num_requests: int = 0
    num_errors: int = 0
    processing_time_ns: int = 0
    last_error: str | None = None
    refused_replies: int = 0
    """Requests dropped unanswered for their reply subject (``answerable_reply``)."""

    def count(self, started_ns: int, error: str | None) -> None:
        self.num_requests += 1
        self.processing_time_ns += time.perf_counter_ns() - started_ns
        if error is not None:
            self.num_errors += 1
            self.last_error = error


@dataclass
class ConcurrentHandler:
    """Runs each request in its own task, at most ``limit`` at once, and counts it.

    With ``auth``, a request without a valid MAC is refused before the
    handler sees it, and every reply carries the MAC binding it to its request.
    A handler's unexpected exception is logged by type only (never its
    message or frame locals, which may hold a key or a payload) and
    answered ``stage_internal_error``.
    """

    handler: Handler | None
    limit: int = DEFAULT_MAX_IN_FLIGHT
    auth: StageAuth | None = None
    counters: EndpointCounters = field(default_factory=EndpointCounters)
    identified: IdentifiedHandler | None = None
    """Used instead of ``handler`` when the answer depends on who asks."""
    _slots: asyncio.Semaphore = field(init=False)
    _tasks: set[asyncio.Task[None]] = field(init=False, default_factory=set)

    def __post_init__(self) -> None:
        self._slots = asyncio.Semaphore(self.limit)

    async def __call__(self, request: Request) -> None:
        started = time.perf_counter_ns()
        if not answerable_reply(_reply_of(request)):
            self.counters.refused_replies += 1
            log.warning("request_reply_refused", subject=request.subject)
            return
        await self._slots.acquire()
        task = asyncio.create_task(self._serve(request, started))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _serve(self, request: Request, started: int) -> None:
        request_tag: str | None = None
        error: str | None = None
        try:
            if self.auth is not None:
                request_tag = self.auth.request_tag(request.subject, request.data)
                presented = (request.headers or {}).get(STAGE_MAC_HEADER)
                if not self.auth.matches(request_tag, presented):
                    log.warning("stage_request_unauthenticated", subject=request.subject)
                    error = STAGE_UNAUTHENTICATED
                    await _respond_error(
                        request, "401", StageRefusal(STAGE_UNAUTHENTICATED, request.subject)
                    )
                    return
            if self.identified is None:
                assert self.handler is not None  # an endpoint has one or the other (Endpoint)
                reply = await self.handler(request.data)
            else:
                who = requester_of(_reply_of(request), request.headers)
                reply = await self.identified(request.data, who)
        except StageRefusal as refusal:
            error = refusal.reason_code
            await _respond_error(request, "400", refusal)
        except Exception as exc:  # noqa: BLE001 - fail-closed boundary, logged by type
            error = INTERNAL_ERROR
            log.error("stage_handler_failed", subject=request.subject, error=type(exc).__name__)
            await _respond_error(request, "500", StageRefusal(INTERNAL_ERROR))
        else:
            headers = None
            if self.auth is not None and request_tag is not None:
                headers = {
                    STAGE_MAC_HEADER: self.auth.reply_tag(request.subject, request_tag, reply)
                }
            try:
                await request.respond(reply, headers=headers)
            except Exception as exc:  # noqa: BLE001 - fail-closed boundary, logged by type
                error = "stage_reply_failed"
                log.error("stage_reply_failed", subject=request.subject, error=type(exc).__name__)
        finally:
            self.counters.count(started, error)
            self._slots.release()

    async def drain(self) -> None:
        """Wait for every request in flight (used on shutdown)."""
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)


def _reply_of(request: Request) -> str | None:
    """The request's reply subject (nats.micro keeps the message it wraps private)."""
    reply: str | None = request._msg.reply
    return reply


async def _respond_error(request: Request, code: str, refusal: StageRefusal) -> None:
    try:
        await request.respond_error(code, refusal.reason_code, refusal_payload(refusal))
    except Exception as exc:  # noqa: BLE001 - fail-closed boundary, logged by type
        log.error("stage_error_reply_failed", subject=request.subject, error=type(exc).__name__)


class MeasuredService(Service):
    """A nats.micro service whose ``$SRV.STATS`` come from its handlers' own counters."""

    def __init__(self, client: Client, config: ServiceConfig) -> None:
        super().__init__(client, config)
        self.measured: dict[str, ConcurrentHandler] = {}

    def stats(self) -> ServiceStats:
        stats = super().stats()
        endpoints = []
        for reported in stats.endpoints:
            handler = self.measured.get(reported.name)
            endpoint = reported
            if handler is not None:
                counted = handler.counters
                endpoint = dataclasses.replace(
                    reported,
                    data={"refused_replies": counted.refused_replies},
                    num_requests=counted.num_requests,
                    num_errors=counted.num_errors,
                    last_error=counted.last_error,
                    processing_time=counted.processing_time_ns,
                    average_processing_time=(
                        counted.processing_time_ns // counted.num_requests
                        if counted.num_requests
                        else 0
                    ),
                )
            endpoints.append(endpoint)
        return dataclasses.replace(stats, endpoints=endpoints)


@dataclass(frozen=True, slots=True)
class Endpoint:
    name: str
    subject: str
    handler: Handler | None
    identified: IdentifiedHandler | None = None
    """Answers by who asks (:class:`Requester`); then ``handler`` is None."""

    def __post_init__(self) -> None:
        if (self.handler is None) == (self.identified is None):
            raise ValueError(f"endpoint {self.name}: exactly one of handler and identified")


async def start_service(
    nc: Client,
    name: str,
    endpoints: list[Endpoint],
    *,
    description: str = "",
    limit: int = DEFAULT_MAX_IN_FLIGHT,
    queue_group: str = names.QUEUE_GROUP,
    auth: StageAuth | None = None,
) -> tuple[Service, list[ConcurrentHandler]]:
    """Start one measured nats.micro service with the given endpoints in a queue group.

    Pass ``auth`` for the gate's internal stages; public endpoints (propose,
    approvals) verify their callers' signatures themselves.
    """
    service = MeasuredService(
        nc,
        ServiceConfig(
            name=name, version=SERVICE_VERSION, description=description, queue_group=queue_group
        ),
    )
    await service.start()
    handlers = []
    for endpoint in endpoints:
        handler = ConcurrentHandler(endpoint.handler, limit, auth, identified=endpoint.identified)
        handlers.append(handler)
        service.measured[endpoint.name] = handler
        await service.add_endpoint(
            EndpointConfig(name=endpoint.name, subject=endpoint.subject, handler=handler)
        )
    return service, handlers


async def request(
    nc: Client, subject: str, data: bytes, timeout: float, auth: StageAuth | None = None
) -> bytes:
    """Call a service endpoint over the bus; a missing, slow or failing one is a refusal.

    With ``auth``, a reply is used only if its MAC binds it to this request;
    otherwise (someone else answered first) the call is refused, so a forged
    reply can at worst cause a denial, never an allow.
    """
    tag = auth.request_tag(subject, data) if auth is not None else None
    headers = {STAGE_MAC_HEADER: tag} if tag is not None else None
    try:
        msg = await nc.request(subject, data, timeout=timeout, headers=headers)
    except NoRespondersError as exc:
        raise StageRefusal("stage_unavailable", subject) from exc
    except NatsTimeoutError as exc:
        raise StageRefusal("stage_timeout", subject) from exc
    reply_headers = msg.headers or {}
    if names.HEADER_SERVICE_ERROR_CODE in reply_headers:
        reason = reply_headers.get(names.HEADER_SERVICE_ERROR) or "stage_error"
        raise StageRefusal(reason, subject)
    if auth is not None and tag is not None:
        expected = auth.reply_tag(subject, tag, msg.data)
        if not auth.matches(expected, reply_headers.get(STAGE_MAC_HEADER)):
            raise StageRefusal(STAGE_REPLY_UNAUTHENTICATED, subject)
    return msg.data


# --- joining the bus ----------------------------------------------------------------


class BusUnavailableError(RuntimeError):
    """No server of the bus let a service in within its join time (the gate's
    ``GateConfig.join_seconds``, the model gateway's own).

    A credential the bus refuses (revoked, unknown, or none where
    authorization is on) ends the start with the server's reason; it is not
    retried forever behind a start that seems to hang.
    """


async def join_bus(
    servers: tuple[str, ...] | list[str],
    name: str,
    credential: BusCredential | None,
    seconds: float,
) -> Client:
    """A service's connection: the first join bounded by ``seconds``, reconnects
    after it unbounded (a service that was in keeps trying to get back; the gate's
    stages deny meanwhile). A bus that refuses the credential ends the join at once
    with the server's reason.

    The server writes its ``-ERR 'Authorization Violation'`` and closes; a client
    that has more bytes in flight can see the close as a reset first and never
    read the reason (seen in a fresh-clone run: "ConnectionResetError"). So every
    attempt's error is kept, and a reason the server gave wins over a transport
    error in what the failure says."""
    failures: list[str] = []
    refused = asyncio.Event()
    joined = False

    async def on_error(exc: Exception) -> None:
        if joined:
            log.warning("bus_error", error=bus_error_reason(exc))
            return
        reason = str(exc) if isinstance(exc, NatsError) else type(exc).__name__
        failures.append(reason)
        if isinstance(exc, NatsError) and "authoriz" in reason.lower():
            refused.set()

    options: dict[str, Any] = {
        "servers": list(servers),
        "name": name,
        "max_reconnect_attempts": -1,
        "reconnect_time_wait": 0.5,
        "error_cb": on_error,
        **connect_options(credential),
    }
    nc = Client()
    connecting = asyncio.ensure_future(nc.connect(**options))
    refusal = asyncio.ensure_future(refused.wait())
    try:
        done, _ = await asyncio.wait(
            {connecting, refusal}, timeout=seconds, return_when=asyncio.FIRST_COMPLETED
        )
    finally:
        refusal.cancel()
    if connecting in done:
        connecting.result()  # a connect that failed outright raises here
        joined = True
        return nc
    connecting.cancel()
    with contextlib.suppress(BaseException):
        await connecting
    await nc.close()
    given = [f for f in failures if f.startswith("nats:")]
    last = given[-1] if given else failures[-1] if failures else "no answer"
    if refused.is_set():
        raise BusUnavailableError(f"the NATS server refused {name} ({last})")
    raise BusUnavailableError(f"no NATS server let {name} in within {seconds:g} s ({last})")
