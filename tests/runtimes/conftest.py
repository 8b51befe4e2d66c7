"""Fixtures shared by the runtime tests alone."""

from __future__ import annotations

from pathlib import Path

import pytest

from smf_assurance.adapters.hermes import plugin
from smf_assurance.ops.local.state import StateDir, provision_demo
from smf_assurance.ops.runtimes.provision import provision_runtime
from tests.support.hermes_unit import LEASE_MS, PIN


@pytest.fixture
def hermes_state(tmp_path: Path) -> StateDir:
    """The demo state with the Hermes runtime onboarded at the pinned version, with the
    adapter's required hooks and a lease of ``LEASE_MS``."""
    state = StateDir(tmp_path / "state")
    provision_demo(state)
    provision_runtime(
        state, runtime_pin=PIN, required_hooks=plugin.REQUIRED_HOOKS, lease_ms=LEASE_MS
    )
    return state
