"""Typed stages and the two ways to reach one: in process, or over the bus.

ARCHITECTURE.md, "Layers of the code": stages are typed functions, with the
bus encoding in the transport. A stage is an async callable from one frozen
Struct to another (``Proposal -> Normalized``, ``EvaluateRequest ->
Decision``, ``DispatchRequest -> DispatchReceipt``) that refuses with
``StageRefusal``. The gate calls it through a ``StageClient``:

- ``LocalStage`` (co-located): the Struct itself, under the same deadline;
  nothing is encoded or decoded (issue 19: the co-located path did six
  Struct -> JSON -> Struct round trips per allow);
- ``BusStage``: the Struct as JSON on the stage's subject, the stage MAC
  (``smf_assurance.pipeline.service.StageAuth``), the reply decoded as the stage's reply
  type; an undecodable reply is a refusal, never a guess.

``serve`` turns a typed stage into the bytes handler its endpoint runs; a
request that does not decode as the stage's request type is refused
``malformed_stage_request`` before the stage sees it. The refusal contract
is the same on both paths.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Final, Generic, Protocol, TypeVar

import msgspec
from nats.aio.client import Client

from smf_assurance.pipeline.service import Handler, StageAuth, StageRefusal
from smf_assurance.pipeline.service import request as bus_request

Req = TypeVar("Req", bound=msgspec.Struct)
Rep = TypeVar("Rep", bound=msgspec.Struct)
Req_contra = TypeVar("Req_contra", bound=msgspec.Struct, contravariant=True)
Rep_co = TypeVar("Rep_co", bound=msgspec.Struct, covariant=True)

MALFORMED_REQUEST: Final = "malformed_stage_request"
MALFORMED_REPLY: Final = "malformed_stage_reply"

Stage = Callable[[Req], Awaitable[Rep]]
"""A stage: one request Struct to one reply Struct, or ``StageRefusal``."""


class StageClient(Protocol[Req_contra, Rep_co]):
    async def call(self, request: Req_contra, timeout: float) -> Rep_co: ...


@dataclass(frozen=True, slots=True)
class LocalStage(Generic[Req, Rep]):
    """Call a co-located stage in process, under the same deadline.

    The stage runs in the caller's task under ``asyncio.timeout`` (issue 19):
    ``asyncio.wait_for`` wrapped each call in a task of its own, which cost a
    task and its scheduling per stage call for nothing; the deadline and the
    ``stage_timeout`` refusal are the same.
    """

    stage: Callable[[Req], Awaitable[Rep]]

    async def call(self, request: Req, timeout: float) -> Rep:
        try:
            async with asyncio.timeout(timeout):
                return await self.stage(request)
        except TimeoutError as exc:
            raise StageRefusal("stage_timeout") from exc


@dataclass(frozen=True, slots=True)
class BusStage(Generic[Req, Rep]):
    """Call a stage over its subject: encode, authenticate, decode the reply type."""

    nc: Client
    subject: str
    reply_type: type[Rep]
    auth: StageAuth | None = None

    async def call(self, request: Req, timeout: float) -> Rep:
        encoded = msgspec.json.encode(request)
        data = await bus_request(self.nc, self.subject, encoded, timeout, self.auth)
        try:
            return msgspec.json.decode(data, type=self.reply_type)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            raise StageRefusal(MALFORMED_REPLY, self.subject) from exc


def serve(stage: Callable[[Req], Awaitable[Rep]], request_type: type[Req]) -> Handler:
    """The bytes handler of ``stage``'s endpoint: decode, call, encode."""

    async def handle(data: bytes) -> bytes:
        try:
            decoded = msgspec.json.decode(data, type=request_type)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            raise StageRefusal(MALFORMED_REQUEST, type(exc).__name__) from exc
        return msgspec.json.encode(await stage(decoded))

    return handle
