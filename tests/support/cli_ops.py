"""The fixtures, builders and constants of tests/cli/test_cli_ops.py
that other test modules use too: here, so that no test module imports another."""

from __future__ import annotations

import asyncio
import os
import select
import signal
import subprocess
import threading
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg

from smf_assurance.ops.cli.main import main
from smf_assurance.ops.demo.script import SCENARIOS
from smf_assurance.ops.local.logs import configure_logging
from smf_assurance.ops.local.stack import Stack, start_stack
from smf_assurance.ops.local.state import (
    StateDir,
    provision_demo,
)
from smf_assurance.subjects import names
from smf_assurance.subjects.approvals import (
    ApprovalBinding,
    ApprovalView,
    binding_digest,
)
from smf_assurance.subjects.canonical import identity_of, sha256_identity
from smf_tools import held_filing

__all__ = [
    "ROOT",
    "Result",
    "arun",
    "assert_one_line_failure",
    "drive_up",
    "forged_view",
    "hold_court_filing",
    "key_args",
    "read_line",
    "run",
    "stack",
    "stand_in_gate",
    "table_value",
]

ROOT = Path(__file__).resolve().parents[2]


FILING = SCENARIOS[0]
"""The held court filing: a paralegal's transmission that needs a licensed attorney."""


Result = tuple[int, str, str]


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> Result:
    capsys.readouterr()
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


async def arun(argv: list[str], capsys: pytest.CaptureFixture[str]) -> Result:
    """The CLI runs its own event loop; beside a test's loop it needs a thread."""
    capsys.readouterr()
    code = await asyncio.to_thread(main, argv)
    out, err = capsys.readouterr()
    return code, out, err


def assert_one_line_failure(
    code: int, err: str, *needles: str, prog: str = "smf-assurance"
) -> None:
    assert code != 0
    assert err.startswith(f"{prog}: "), err
    assert err.count("\n") == 1, err
    for needle in needles:
        assert needle in err, err


def wait_for_file(path: Path, timeout: float = 30.0) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists():
            return path.read_text().strip()
        time.sleep(0.05)
    raise AssertionError(f"{path} did not appear within {timeout} s")


def table_value(out: str, field: str) -> str:
    """The value column of a two-column ``field  value`` table row."""
    for line in out.splitlines():
        if line.startswith(field + "  "):
            return line[len(field) :].strip()
    raise AssertionError(f"no row {field!r} in:\n{out}")


def read_line(proc: subprocess.Popen[str], timeout: float) -> str:
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    if not ready:
        raise AssertionError(f"no readiness line within {timeout} s")
    return proc.stdout.readline()


def drive_up(
    argv: list[str],
    capsys: pytest.CaptureFixture[str],
    url_file: Path,
    driver: Callable[[], Any],
    terminate: bool = True,
) -> tuple[Result, Any]:
    """Run ``up`` in this (main) thread, as a process would; ``driver`` runs in
    another thread once ``up`` has written its URL, then ``up`` gets SIGTERM
    (with ``terminate=False`` only if it has not stopped on its own in 30 s)."""
    outcome: dict[str, Any] = {}
    finished = threading.Event()

    def drive() -> None:
        try:
            wait_for_file(url_file)
            outcome["value"] = driver()
        except BaseException as exc:
            outcome["error"] = exc
        finally:
            if not terminate:
                deadline = time.monotonic() + 30
                while url_file.exists() and time.monotonic() < deadline:
                    time.sleep(0.05)
            if not finished.is_set() and url_file.exists():
                os.kill(os.getpid(), signal.SIGTERM)

    thread = threading.Thread(target=drive)
    thread.start()
    try:
        result = run(argv, capsys)
    finally:
        finished.set()
        thread.join(60)
    if "error" in outcome:
        raise outcome["error"]
    return result, outcome.get("value")


@pytest.fixture
async def stack(tmp_path: Path) -> AsyncIterator[Stack]:
    state = StateDir(tmp_path / "state")
    provision_demo(state)
    configure_logging(json=True, level="error")
    running = await start_stack(state)
    yield running
    await running.stop()


async def hold_court_filing(stack: Stack) -> str:
    """Propose scenario 1 as the scripted runtime; the gate holds it for an attorney
    (as the quick start's stand-in runtime, ``smf_tools.held_filing``, does)."""
    verdict = await held_filing.propose(stack.state, stack.url)
    assert verdict.outcome == "held", verdict
    assert verdict.approval_id is not None
    return verdict.approval_id


def key_args(stack: Stack, principal: str) -> list[str]:
    """The approver's signing key and its own bus credential."""
    credential = stack.state.bus_credential_path(principal)
    return ["--key", str(stack.state.key_path(principal)), "--credential", str(credential)]


def forged_view(content: str, state: str = "pending") -> ApprovalView:
    """A view whose binding covers ``"the real filing"``; ``content`` may differ."""
    binding = ApprovalBinding(
        approval_id=identity_of({"approval": 1}),
        decision_id=identity_of({"decision": 1}),
        operation_hash=identity_of({"operation": 1}),
        canonical_args_hash=identity_of({}),
        content_hash=sha256_identity(b"the real filing"),
        destination_identity_hash=identity_of({"destination": 1}),
        release_id="release-1",
        projection_id=identity_of({"projection": 1}),
        policy_fingerprint=identity_of({"policy": 1}),
        tenant_id="tenant-acme",
        organization_id="org-acme-llp",
        matter_id="matter-2026-0042",
        actor_id="paralegal-pat",
        required_roles=("licensed_attorney",),
        required_approvals=1,
        created_at_ms=1_000,
        expires_at_ms=301_000,
    )
    return ApprovalView(
        schema="smf.approval-view/1",
        binding=binding,
        binding_digest=binding_digest(binding),
        state=state,
        native_tool="court_efile",
        destination_address="sdny",
        content=content,
        arguments_json="{}",
    )


async def stand_in_gate(
    nc: Client,
    view: ApprovalView,
    resolve_reply: bytes | None = b"{}",
    resolve_headers: dict[str, str] | None = None,
) -> list[bytes]:
    """Something on the bus answers show requests (and resolutions, unless
    ``resolve_reply`` is None); it records every resolution it is sent."""
    resolutions: list[bytes] = []

    async def on_show(msg: Msg) -> None:
        await msg.respond(msgspec.json.encode(view))

    async def on_resolve(msg: Msg) -> None:
        resolutions.append(msg.data)
        assert msg.reply
        await nc.publish(msg.reply, resolve_reply or b"", headers=resolve_headers)

    await nc.subscribe(names.APPROVAL_SHOW, cb=on_show)
    if resolve_reply is not None:
        await nc.subscribe(names.APPROVAL_RESOLVE, cb=on_resolve)
    await nc.flush()
    return resolutions
