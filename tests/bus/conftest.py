"""Fixtures shared by the bus tests alone: the state directories they provision
beyond the demo's (``tests/conftest.py``'s ``state``), each named by what it adds."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from nats.aio.client import Client

from smf_assurance.ops.local.stack import seed_demo_documents
from smf_assurance.ops.local.state import StateDir, provision_demo
from tests.support.approval_desk import provision_with_extra_approvers


@pytest.fixture
def seeded_state(tmp_path: Path) -> StateDir:
    """The demo state with the demo's documents seeded, for connectors that read them."""
    state = StateDir(tmp_path / "state")
    provision_demo(state)
    seed_demo_documents(state)
    return state


@pytest.fixture
def approvers_state(tmp_path: Path) -> StateDir:
    """The demo state with a self-approving attorney, another tenant's attorney and the
    OpenClaw runtime (``provision_with_extra_approvers``): who may and may not approve."""
    state = StateDir(tmp_path / "state")
    provision_with_extra_approvers(state)
    return state


@pytest.fixture
async def clients() -> AsyncIterator[list[Client]]:
    """Connections a test opened, drained afterwards."""
    opened: list[Client] = []
    yield opened
    for nc in opened:
        if nc.is_connected:
            await nc.drain()
