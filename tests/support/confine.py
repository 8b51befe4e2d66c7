"""The fixtures, builders and constants of tests/runtimes/test_confine.py
that other test modules use too: here, so that no test module imports another."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from smf_assurance.ops.demo.script import actor
from smf_assurance.ops.local.confine.profile import (
    PROFILE_SCHEMA,
    ConfinementProfile,
    encode_profile,
    profile_path,
)
from smf_assurance.ops.local.model_gateway import (
    provision_gateway_runtime,
    set_upstream,
)
from smf_assurance.ops.local.state import StateDir, provision_demo
from smf_assurance.ops.runtimes.provision import (
    HERMES_PRINCIPAL,
    HERMES_RUNTIME_ID,
    provision_runtime,
)
from smf_assurance.subjects.messages import ProposedDestination

__all__ = ["PROJECT", "onboarded_state", "one_line", "processes_with", "write_profile"]

PROJECT = Path(__file__).resolve().parents[2]


@pytest.fixture
def onboarded_state(tmp_path: Path) -> StateDir:
    """A gate's state with the Hermes runtime onboarded: key, seed, token, context."""
    onboarded_state = StateDir(tmp_path / "state")
    provision_demo(onboarded_state)
    provision_runtime(onboarded_state)
    set_upstream(onboarded_state, "http://127.0.0.1:9/v1", "local-model")
    provision_gateway_runtime(
        onboarded_state,
        HERMES_RUNTIME_ID,
        adapter_id="smf-hermes-adapter",
        actor=actor("associate-ann", "associate"),
        destination=ProposedDestination(address="cli:operator", locality="internal"),
    )
    (onboarded_state.root / "runtimes").mkdir()
    context = {"schema": "smf.hermes-context/1", "legal_hold_paths": []}
    (onboarded_state.root / "runtimes" / f"{HERMES_RUNTIME_ID}.context.json").write_text(
        json.dumps(context)
    )
    return onboarded_state


def write_profile(state: StateDir, tmp_path: Path, **fields: Any) -> ConfinementProfile:
    home, workspace = tmp_path / "home", tmp_path / "ws"
    home.mkdir(exist_ok=True)
    workspace.mkdir(exist_ok=True)
    (home / "config.yaml").write_text("model: {}\n")
    base: dict[str, Any] = {
        "schema": PROFILE_SCHEMA,
        "runtime_id": HERMES_RUNTIME_ID,
        "principal": HERMES_PRINCIPAL,
        "kind": "hermes",
        "home": str(home),
        "workspace": str(workspace),
        "nats_url": "nats://127.0.0.1:4222",
        "gateway_url": "http://127.0.0.1:8787/v1",
        # the sandbox alone: no gate runs (tests/bus/test_holds.py asks a real one)
        "gate_holds": False,
    }
    profile = ConfinementProfile(**{**base, **fields})
    profile_path(state, HERMES_RUNTIME_ID).write_bytes(encode_profile(profile))
    return profile


def one_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("smf-assurance: "), err
    return lines[0]


def processes_with(token: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if token.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found
