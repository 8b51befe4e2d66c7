"""The fixtures, builders and constants of tests/bus/test_bus_permissions.py
that other test modules use too: here, so that no test module imports another."""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from typing import Final, Literal

import nats
from nats.aio.client import Client
from nats.errors import Error as NatsError
from nats.errors import NoRespondersError

from smf_assurance.ops.local.defaults import OPERATOR
from smf_assurance.subjects.bus_access import (
    CLIENT_API,
    INBOX_ROOT,
    BusCredential,
)

__all__ = ["Action", "Prober", "who"]

Outcome = Literal["allowed", "refused"]


ANSWER_TIMEOUT_S: Final = 5.0


@dataclass(frozen=True)
class Action:
    name: str
    kind: Literal["pub", "sub", "req"]
    subject: str
    allowed: frozenset[str]
    """Who may; the operator may everything."""
    payload: bytes = b"{}"


def who(*roles: str) -> frozenset[str]:
    return frozenset({*roles, OPERATOR})


API = "$JS.API"


def concrete(subject: str) -> str:
    """A subject a wildcard subscription would receive."""
    return subject.replace(">", "probe").replace("*", "probe")


class Prober:
    """One principal's connection, telling "allowed" from "refused by the server".

    Both answers are positive observations, never the absence of one: a refusal
    is the server's permissions violation naming the subject; an allowance is
    the server acting on the message (a reply, a JetStream acknowledgement, or
    "no responders" for a request it routed; for a subscription, a message the
    operator publishes on it arriving). A deadline only bounds a failure.
    """

    def __init__(
        self, nc: Client, errors: list[str], changed: asyncio.Event, ping: str | None = None
    ) -> None:
        self.nc = nc
        self.errors = errors
        self.changed = changed
        self.ping = ping
        """Outside the gate's account only: a subject this principal may publish, which
        nothing serves here, so a request on it is answered "no responders" by the
        server, into this principal's own inbox (the operator cannot publish there)."""

    @classmethod
    async def connect(
        cls, servers: list[str], credential: BusCredential, ping: str | None = None
    ) -> Prober:
        errors: list[str] = []
        changed = asyncio.Event()

        async def on_error(exc: Exception) -> None:
            errors.append(str(exc).lower())
            changed.set()

        nc = await nats.connect(
            servers=servers,
            connect_timeout=5,
            allow_reconnect=False,
            error_cb=on_error,
            **credential.connect_options(),
        )
        return cls(nc, errors, changed, ping)

    def _refused(self, verb: str, subject: str) -> bool:
        # Inside the gate's account the server maps the client prefix onto the API
        # before it checks a permission, and names the mapped subject when it refuses.
        forms = {subject, subject.replace(CLIENT_API + ".", API + ".", 1)}
        wanted = {f'permissions violation for {verb} to "{form}"'.lower() for form in forms}
        return any(w in error for error in self.errors for w in wanted)

    async def _race(self, verb: str, subject: str, allowed: asyncio.Future[None]) -> Outcome:
        deadline = asyncio.get_running_loop().time() + ANSWER_TIMEOUT_S
        try:
            while True:
                if self._refused(verb, subject):
                    return "refused"
                if allowed.done():
                    if allowed.exception() is None:
                        return "allowed"
                    raise AssertionError(f"{subject}: {allowed.exception()!r}")
                remaining = deadline - asyncio.get_running_loop().time()
                if remaining <= 0:
                    raise AssertionError(f"{subject}: neither answered nor refused")
                self.changed.clear()
                waiter: asyncio.Future[None] = asyncio.ensure_future(self._error_seen())
                await asyncio.wait(
                    (waiter, allowed), timeout=remaining, return_when=asyncio.FIRST_COMPLETED
                )
                waiter.cancel()
        finally:
            if not allowed.done():
                allowed.cancel()

    async def _error_seen(self) -> None:
        await self.changed.wait()

    async def _answered(self, subject: str, payload: bytes) -> None:
        try:
            await self.nc.request(subject, payload, timeout=ANSWER_TIMEOUT_S)
        except NoRespondersError:
            return  # the server routed the request; nobody serves it here

    async def try_action(self, action: Action, operator: Client) -> Outcome:
        self.errors.clear()
        if action.kind == "sub":
            received: asyncio.Future[None] = asyncio.get_running_loop().create_future()

            async def on_msg(_msg: object) -> None:
                if not received.done():
                    received.set_result(None)

            sub = await self.nc.subscribe(action.subject, cb=on_msg)
            await self.nc.flush()
            own_inbox = self.ping is not None and action.subject.startswith(INBOX_ROOT + ".")

            async def publish_until_received() -> None:
                # each flush is shielded: cancelling nats-py while it waits for a PONG
                # leaves a cancelled future that the PONG then fails on, which ends the
                # connection's read loop (seen as a later flush timing out)
                while not received.done():
                    if own_inbox:
                        assert self.ping is not None
                        reply = concrete(action.subject)
                        await self.nc.publish(self.ping, b"{}", reply=reply)
                        await asyncio.shield(self.nc.flush())
                    else:
                        await operator.publish(concrete(action.subject), b"probe")
                        await asyncio.shield(operator.flush())
                    await asyncio.sleep(0.05)

            pusher = asyncio.create_task(publish_until_received())
            try:
                return await self._race("subscription", action.subject, received)
            finally:
                pusher.cancel()
                with contextlib.suppress(NatsError, asyncio.CancelledError):
                    await sub.unsubscribe()
        answered = asyncio.ensure_future(self._answered(action.subject, action.payload))
        return await self._race("publish", action.subject, answered)

    async def close(self) -> None:
        with contextlib.suppress(NatsError):
            await self.nc.close()
