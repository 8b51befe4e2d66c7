"""The fixtures, builders and constants of tests/bus/test_release_distribution.py
that other test modules use too: here, so that no test module imports another."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from smf_assurance.governance.releases import (
    build_release,
    latest_in_inbox,
    prior_of,
)
from smf_assurance.ops.cli.main import main
from smf_assurance.ops.local.logs import configure_logging
from smf_assurance.ops.local.state import (
    RELEASE_SIGNER,
    StateDir,
)
from smf_assurance.pipeline.assembly import RunningGate
from smf_assurance.subjects.clock import wall_clock_ms
from smf_assurance.subjects.keys import (
    SigningKey,
)
from smf_assurance.subjects.release import (
    ReleaseBundle,
)
from tests.support.release_helpers import scenario_corpus

__all__ = ["acli", "current_inbox", "next_release", "refusals_at"]


def signer(state: StateDir) -> SigningKey:
    return state.key(RELEASE_SIGNER)


def current_inbox(state: StateDir) -> ReleaseBundle:
    bundle = latest_in_inbox(state.release_inbox)
    assert bundle is not None
    return bundle


def next_release(
    state: StateDir,
    tmp: Path,
    prior: ReleaseBundle,
    name: str,
    *,
    signers: list[SigningKey] | None = None,
    registry: bytes | None = None,
    at_ms: int | None = None,
    **options: Any,
) -> ReleaseBundle:
    """A release of the scenario corpus named ``name`` (its legal-hold reason is
    ``hold_<name>``), chained to ``prior`` and signed by the state's release key."""
    folder = tmp / f"corpus-{name}"
    corpus = (
        folder
        if folder.exists()
        else scenario_corpus(
            folder, release_id=name, legal_hold_reason=f"hold_{name.replace('-', '_')}"
        )
    )
    return build_release(
        corpus,
        signers or [signer(state)],
        registry if registry is not None else state.registry.read_bytes(),
        now_ms=at_ms if at_ms is not None else wall_clock_ms(),
        prior=prior_of(prior),
        **options,
    )


def refusals_at(gate: RunningGate, origin_prefix: str) -> set[str]:
    """The reason codes a gate gave for candidates from one origin."""
    assert gate.releases is not None
    return {r.reason_code for r in gate.releases.refusals if r.origin.startswith(origin_prefix)}


def cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    configure_logging(json=True, level="critical")  # gate events stay off stdout
    code = main(args)
    out, err = capsys.readouterr()
    return code, out, err


async def acli(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    return await asyncio.to_thread(cli, args, capsys)
