"""One harness for the contracts of the stores with two backends.

Approvals, proposal claims, the direct-allow order book and tool-call accounting
each have a SQLite store and a JetStream KV store behind one Protocol
(``smf_assurance.pipeline.stores``), and the gate may run on either
(docs/CLUSTER.md). So each store's contract is written once and runs on both
backends through the ``backend`` fixture ``over_backends`` makes here; tests of
what only one backend has (SQLite's constraints, KV's compare-and-set, outages of
a real server, tampered values) stay beside it, on ``only_kv``'s ``kv_backend``.

A store's test module says only how its store opens on each backend and what its
own tests inspect around the store. Written here once: the SQLite file in the
test's ``tmp_path``; the KV connections to the test's real nats-server, each
``open`` on a connection of its own so that two instances race as two gate
processes on two machines would; the parametrization and the cleanup.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Protocol, TypeVar

import nats
import pytest
from nats.aio.client import Client
from nats.js.client import JetStreamContext

from smf_assurance.ops.local.natsserver import EmbeddedNatsServer

BACKEND_NAMES: Final = ("kv", "sqlite")
"""The backends every contract runs on, in the order of the test ids."""


class Closable(Protocol):
    async def close(self) -> None: ...


S_co = TypeVar("S_co", bound=Closable, covariant=True)


class StoreBackend(Protocol[S_co]):
    """Where a store keeps its state: ``open`` makes a new store instance (its own
    connection) on that same storage, as a restarted or a second gate would."""

    async def open(self) -> S_co: ...

    async def aclose(self) -> None:
        """Release what ``open`` and the inspections acquired (connections)."""
        ...


B = TypeVar("B", bound=StoreBackend[Any])


@dataclass
class SqliteFile:
    """The store's SQLite file in the test's ``tmp_path``; nothing to release."""

    path: Path

    async def aclose(self) -> None:
        return None


@dataclass
class KvConnections:
    """A real nats-server with JetStream (the ``nats_server`` fixture). Clients
    reconnect at once and without end, so a test that stops and restarts the
    server sees the same instance work again."""

    server: EmbeddedNatsServer
    request_timeout: float = 2.0
    connections: list[Client] = field(default_factory=list)

    async def connect(self) -> Client:
        """A new client connection, closed by ``aclose``."""
        client = await nats.connect(
            self.server.url, connect_timeout=2, max_reconnect_attempts=-1, reconnect_time_wait=0.2
        )
        self.connections.append(client)
        return client

    async def jetstream(self) -> JetStreamContext:
        """JetStream on a new connection, with the backend's request timeout."""
        return (await self.connect()).jetstream(timeout=self.request_timeout)

    async def aclose(self) -> None:
        for client in self.connections:
            await client.close()


def over_backends(sqlite: Callable[[Path], B], kv: Callable[[EmbeddedNatsServer], B]) -> Any:
    """The ``backend`` fixture of a store's contract: ``sqlite`` gets the test's
    ``tmp_path``, ``kv`` its started ``nats_server`` (tests/conftest.py); released
    after the test."""

    @pytest.fixture(params=BACKEND_NAMES)
    async def backend(request: pytest.FixtureRequest) -> AsyncIterator[B]:
        if request.param == "sqlite":
            built = sqlite(request.getfixturevalue("tmp_path"))
        else:
            built = kv(request.getfixturevalue("nats_server"))
        yield built
        await built.aclose()

    return backend


def only_kv(kv: Callable[[EmbeddedNatsServer], B]) -> Any:
    """The ``kv_backend`` fixture of a store's KV-only tests, on the test's ``nats_server``."""

    @pytest.fixture
    async def kv_backend(nats_server: EmbeddedNatsServer) -> AsyncIterator[B]:
        built = kv(nats_server)
        yield built
        await built.aclose()

    return kv_backend


def opened_on_backend() -> Any:
    """A fixture: the store opened on the test's ``backend``, closed after the test."""

    @pytest.fixture
    async def opened(backend: StoreBackend[Closable]) -> AsyncIterator[Closable]:
        store = await backend.open()
        yield store
        await store.close()

    return opened


def opened_on_kv() -> Any:
    """A fixture: the store opened on the test's ``kv_backend``, closed after the test."""

    @pytest.fixture
    async def opened(kv_backend: StoreBackend[Closable]) -> AsyncIterator[Closable]:
        store = await kv_backend.open()
        yield store
        await store.close()

    return opened
