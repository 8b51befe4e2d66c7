"""The fixtures, builders and constants of tests/bus/test_holds.py
that other test modules use too: here, so that no test module imports another."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from smf_assurance.ops.cli.main import main
from smf_assurance.ops.local.natsserver import EmbeddedNatsServer
from smf_assurance.ops.local.stack import start_embedded_server
from smf_assurance.ops.local.state import StateDir

__all__ = ["holds_cli"]


@pytest.fixture
def server(onboarded_state: StateDir) -> Iterator[EmbeddedNatsServer]:
    server = start_embedded_server(onboarded_state)
    yield server
    server.close()


async def holds_cli(state: StateDir, server: EmbeddedNatsServer, *args: str) -> int:
    argv = ["holds", *args, "--state-dir", str(state.root), "--nats", server.url]
    return await asyncio.to_thread(main, argv)
