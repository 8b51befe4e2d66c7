"""Shared pytest fixtures, one section per concern; add new sections at the end.

Integration tests run against a real nats-server (ARCHITECTURE.md, "Layers
of the code": tests use a real nats-server, real SQLite), never a mock.

Hypothesis runs every property under the ``smf`` profile registered below:
``deadline=None``. Hypothesis's default fails any example slower than 200 ms,
which is a wall-clock assertion in disguise; properties here write SQLite
files, compile corpora, sign and verify releases, and share two cores with
nats-server processes, so one slow example says nothing about the property.
Performance is measured by ``python -m smf_tools bench``, never asserted in tests.
The profile is loaded here, before any test module is imported, so a test
without its own ``@settings`` cannot fall back to the 200 ms default; a test
that sets its own ``settings`` inherits ``deadline=None`` from the profile
unless it names a deadline itself (none does).
``tests/unit/test_hypothesis_profile.py`` checks the profile is the one in force.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import nats
import pytest
import structlog
from _pytest.junitxml import xml_key
from hypothesis import settings
from nats.aio.client import Client

from smf_assurance.ops.local.cluster import LocalNatsCluster
from smf_assurance.ops.local.natsserver import EmbeddedNatsServer, reserve_port
from smf_assurance.ops.local.state import StateDir, provision_demo
from smf_assurance.subjects.bus_access import TLS_CA_ENV
from smf_tools.candidate.junit import identity_properties
from tests.support.gate_wheel import GateWheel, build_and_install

# --- hypothesis: no per-example wall-clock deadline (see the module docstring) ---

HYPOTHESIS_PROFILE = "smf"
settings.register_profile(HYPOTHESIS_PROFILE, deadline=None)
settings.load_profile(HYPOTHESIS_PROFILE)


# --- bus: a real nats-server with JetStream, one per test -------------------


@pytest.fixture
def nats_server(tmp_path: Path) -> Iterator[EmbeddedNatsServer]:
    """A started server whose store and log live in this test's ``tmp_path / "nats"``."""
    with EmbeddedNatsServer(tmp_path / "nats") as server:
        yield server


@pytest.fixture
def nats_url(nats_server: EmbeddedNatsServer) -> str:
    return nats_server.url


@pytest.fixture
def state(tmp_path: Path) -> StateDir:
    """A state directory provisioned as ``demo`` and ``up`` provision theirs (a test
    module with its own ``state`` fixture shadows this one)."""
    state = StateDir(tmp_path / "state")
    provision_demo(state)
    return state


@pytest.fixture
def closed_port() -> Iterator[int]:
    """A port on 127.0.0.1 that nothing listens on for the whole test: it is
    reserved (``smf_assurance.ops.local.natsserver.PortReservation``), so no other process can be
    handed it, and connecting to it is refused."""
    reservation = reserve_port()
    yield reservation.port
    reservation.close()


@pytest.fixture
async def nc(nats_url: str) -> AsyncIterator[Client]:
    """A connected client, drained afterwards so pending publishes reach the server."""
    client = await nats.connect(nats_url, connect_timeout=2)
    yield client
    if client.is_connected:
        await client.drain()
    else:
        await client.close()


# --- logging: commands configure structlog globally; undo it after each test -----


@pytest.fixture(autouse=True)
def _reset_structlog() -> Iterator[None]:
    yield
    structlog.reset_defaults()


# --- cluster: three nats-server nodes from deploy/nats/cluster.conf ------


@pytest.fixture
async def nats_cluster(tmp_path: Path) -> AsyncIterator[LocalNatsCluster]:
    """A started three-node JetStream cluster (a meta leader elected) whose stores
    and logs live in this test's ``tmp_path / "cluster"``; stopped afterwards."""
    async with LocalNatsCluster(tmp_path / "cluster") as cluster:
        yield cluster


@pytest.fixture
async def tls_cluster(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[LocalNatsCluster]:
    """A started three-node cluster requiring TLS (its own CA and certificate,
    ``LocalNatsCluster(tls=True)``), and this process told its CA (``SMF_NATS_CA``, which
    every connection made with ``bus_access.connect_options`` reads)."""
    async with LocalNatsCluster(tmp_path / "cluster", tls=True) as cluster:
        assert cluster.tls is not None
        monkeypatch.setenv(TLS_CA_ENV, str(cluster.tls.ca_cert))
        yield cluster


# --- candidate: a JUnit report names the commit it ran against ---------


def pytest_sessionstart(session: pytest.Session) -> None:
    """With ``--junitxml``, the report names HEAD's SHA and tree when the working tree
    is clean as the session starts, and nothing when it is not: ``candidate
    build --junit`` refuses a report that does not name its commit
    (``smf_tools.candidate.junit``). Written by the process that writes the report:
    when the suite runs in several processes (``make test``, pytest-xdist) that is the
    controller, and a worker's ``record_testsuite_property`` would record nothing."""
    report = session.config.stash.get(xml_key, None)
    if report is None:  # no --junitxml, or an xdist worker (it writes no report)
        return
    for name, value in identity_properties(session.config.rootpath):
        report.add_global_property(name, value)


# --- file modes: ``up`` and ``demo`` make their process's files private ------------


@pytest.fixture(autouse=True)
def _restore_umask() -> Iterator[None]:
    """``up`` and ``demo`` set the process umask to 0o077 (``ops.state.private_files``);
    a test that runs them in process must not change the modes of every later test."""
    mask = os.umask(0o022)
    os.umask(mask)
    yield
    os.umask(mask)


# --- the gate's wheel: built and installed once per session -------------------------


@pytest.fixture(scope="session")
def gate_wheel(tmp_path_factory: pytest.TempPathFactory) -> GateWheel:
    """The gate's wheel, sdist and a venv with the wheel installed
    (``tests.support.gate_wheel.build_and_install``); the tests only read them."""
    return build_and_install(tmp_path_factory.mktemp("gate-wheel"))
