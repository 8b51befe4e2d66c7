"""One NATS connection on a private event-loop thread, called synchronously with a deadline.

RUNTIMES.md, "Hermes Agent": hooks are called synchronously, from the agent
loop and from its tool thread pool. nats-py is asyncio-only, so the adapter
owns one event loop on its own daemon thread holding one connection, and a
hook submits a coroutine to it and waits at most ``deadline`` seconds. Every
way that wait can end other than with a result raises :class:`BridgeError`
with a reason code, which the plugin turns into a block: a deadline passed
(``gate_timeout``), no connection (``gate_unreachable``), the server refused
the adapter's bus credential (``bus_credential_refused``), the bridge
stopped or was called from its own thread (``bridge_unavailable``).

The connection carries the runtime's credential (its nkey and the inbox
prefix ``_INBOX.<principal>``, ``smf_assurance.subjects.bus_access``): replies come back
only on the one inbox the server lets this principal read.

Confined (``smf-assurance runtime run``), the adapter holds no seed: the URL is the
launcher's forwarder, which signs the server's nonce for it, and the connection
carries only the inbox prefix of ``inbox_principal``.

The connection is made lazily and shared; a failed connect is retried by
the next call, never in a loop of its own. Once connected, nats-py
reconnects by itself a few times and then closes; a call made meanwhile
waits for its deadline and fails closed, and the next one connects anew.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
from collections.abc import Awaitable, Callable
from typing import Final, TypeVar

import nats
from nats.aio.client import Client
from nats.errors import AuthorizationError

from smf_assurance.subjects.bus_access import (
    BusCredential,
    ConnectOptions,
    connect_options,
    inbox_prefix,
)

T = TypeVar("T")
CONNECT_TIMEOUT_S: Final = 2.0
CANCEL_ROUNDS: Final = 5
CANCEL_ROUND_S: Final = 0.1


class BridgeError(Exception):
    def __init__(self, reason_code: str, detail: str = "") -> None:
        super().__init__(f"{reason_code}: {detail}" if detail else reason_code)
        self.reason_code = reason_code


async def _quiet(*_args: object) -> None:
    """nats-py logs every connection error through its callbacks; the adapter's
    verdicts already say what failed, so the callbacks stay quiet."""


def _authorization_refused(exc: BaseException) -> bool:
    """The server's ``-ERR 'Authorization Violation'`` (nats-py raises it as a plain
    ``nats.errors.Error``, or ``AuthorizationError`` on some paths)."""
    return isinstance(exc, AuthorizationError) or "authorization violation" in str(exc).lower()


class Bridge:
    def __init__(
        self,
        url: str,
        *,
        name: str = "smf-hermes-adapter",
        credential: BusCredential | None = None,
        inbox_principal: str | None = None,
    ) -> None:
        self.url = url
        self.name = name
        self.credential = credential
        self.inbox_principal = inbox_principal
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name="smf-hermes-bridge", daemon=True)
        self._nc: Client | None = None
        self._connecting: asyncio.Future[Client] | None = None
        self._started = threading.Event()
        self._stopped = False
        self._refused = False
        """The server refused our credential on the latest connect attempt."""

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._started.set()
        self._loop.run_forever()

    def start(self) -> Bridge:
        self._thread.start()
        self._started.wait(5.0)
        return self

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        return self._loop

    @property
    def stopped(self) -> bool:
        return self._stopped

    async def connection(self) -> Client:
        """The shared connection (on the bridge loop); one connect at a time."""
        nc = self._nc
        if nc is not None and not nc.is_closed:
            return nc
        if self._connecting is None or self._connecting.done():
            self._connecting = asyncio.ensure_future(self._connect())
        try:
            return await asyncio.shield(self._connecting)
        except Exception as exc:
            if self._refused or _authorization_refused(exc):
                # nats-py reports the server's refusal to the error callback and then
                # gives up with NoServersError: the callback is what tells them apart.
                raise BridgeError(
                    "bus_credential_refused", "the server refused this runtime's bus credential"
                ) from exc
            raise BridgeError("gate_unreachable", type(exc).__name__) from exc

    async def _on_error(self, exc: Exception) -> None:
        """Only remember whether the server refused the credential (never log it)."""
        if _authorization_refused(exc):
            self._refused = True

    async def _connect(self) -> Client:
        self._refused = False
        nc = await nats.connect(
            self.url,
            name=self.name,
            connect_timeout=CONNECT_TIMEOUT_S,
            allow_reconnect=True,
            # A few attempts, not forever: nats-py applies the same limit to the
            # first connect, and an unreachable bus must fail a call, not hang it.
            # A connection that gives up is closed and made anew by the next call.
            max_reconnect_attempts=3,
            reconnect_time_wait=0.2,
            error_cb=self._on_error,
            disconnected_cb=_quiet,
            reconnected_cb=_quiet,
            **self._identity(),
        )
        self._nc = nc
        return nc

    def _identity(self) -> ConnectOptions:
        """How this connection says who it is: the seed file and inbox prefix of its
        credential (with the bus's TLS, when given a CA), or (confined) only the inbox
        prefix, the forwarder outside the sandbox proving the rest and crossing the
        network."""
        if self.credential is None and self.inbox_principal is not None:
            return {"inbox_prefix": inbox_prefix(self.inbox_principal)}
        return connect_options(self.credential)

    def call(self, job: Callable[[Client], Awaitable[T]], deadline: float) -> T:
        """Run ``job(connection)`` on the bridge loop; wait at most ``deadline`` seconds."""
        if self._stopped or not self._thread.is_alive():
            raise BridgeError("bridge_unavailable", "the bridge thread is not running")
        if threading.current_thread() is self._thread:
            raise BridgeError("bridge_unavailable", "called from the bridge thread")

        async def run() -> T:
            return await job(await self.connection())

        future = asyncio.run_coroutine_threadsafe(
            asyncio.wait_for(run(), timeout=deadline), self._loop
        )
        try:
            return future.result(timeout=deadline + 0.5)
        except (TimeoutError, concurrent.futures.TimeoutError) as exc:
            future.cancel()
            raise BridgeError("gate_timeout", f"no answer within {deadline:.1f}s") from exc
        except BridgeError:
            raise
        except concurrent.futures.CancelledError as exc:
            raise BridgeError("bridge_unavailable", "cancelled") from exc

    def submit(self, job: Callable[[], Awaitable[None]]) -> concurrent.futures.Future[None]:
        """Fire and forget on the bridge loop (attestation timer)."""

        async def run() -> None:
            await job()

        return asyncio.run_coroutine_threadsafe(run(), self._loop)

    def stop(self, timeout: float = 2.0) -> None:
        if self._stopped:
            return
        self._stopped = True

        async def close() -> None:
            current = asyncio.current_task()
            for _ in range(CANCEL_ROUNDS):
                others = [t for t in asyncio.all_tasks() if t is not current and not t.done()]
                if not others:
                    break
                for task in others:
                    task.cancel()
                # In Python 3.11 ``asyncio.wait_for`` can swallow a cancel that races
                # its own completion (nats-py uses it inside requests and watchers),
                # and the task goes on: a task still running is cancelled again.
                await asyncio.wait(others, timeout=CANCEL_ROUND_S)
            if self._nc is not None and not self._nc.is_closed:
                await self._nc.close()

        if self._thread.is_alive():
            # Closing is best effort: the process may be exiting.
            with contextlib.suppress(Exception):
                asyncio.run_coroutine_threadsafe(close(), self._loop).result(timeout)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout)
