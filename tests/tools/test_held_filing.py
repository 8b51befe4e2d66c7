"""The quick start's stand-in runtime (``python -m smf_tools.held_filing``) against a real gate.

A real nats-server and the full stack on the demo state. What these tests prove: the command
proposes the demo's court filing as the demo runtime and prints the approval the gate holds
it under, which the gate then holds as pending (nothing approved, no order); a filing no
gate holds (none answers, and the runtime's client denies) and a folder with no demo state
each end in one line and a non-zero exit.
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import msgspec
import nats
import pytest

from smf_assurance.ops.local.bus import write_url
from smf_assurance.ops.local.defaults import OPERATOR
from smf_assurance.ops.local.stack import Stack
from smf_assurance.ops.local.state import StateDir
from smf_assurance.subjects import names
from smf_assurance.subjects.bus_access import connect_options
from smf_assurance.subjects.messages import Verdict
from smf_tools import held_filing
from tests.support.cli_ops import stack

__all__ = ["stack"]


async def command(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """The command as the README runs it; its one-line failures are its exit status."""
    capsys.readouterr()
    code = await asyncio.to_thread(held_filing.main, argv)
    out, err = capsys.readouterr()
    return code, out, err


async def test_the_filing_is_held_for_an_attorney_and_nothing_more(
    stack: Stack, capsys: pytest.CaptureFixture[str]
) -> None:
    write_url(stack.state.root, stack.url)  # as `up` does once the gate serves
    code, out, err = await command(["--state-dir", str(stack.state.root)], capsys)

    assert code == 0, err
    found = re.fullmatch(
        r"held for an attorney: (sha256:[0-9a-f]{64}) \(expires \d\d:\d\d:\d\d UTC\)\n", out
    )
    assert found, out
    nc = await nats.connect(stack.url, **connect_options(stack.state.existing_credential(OPERATOR)))
    try:
        reply = await nc.request(names.APPROVAL_STATUS, found[1].encode(), timeout=5)
        info = await nc.jetstream().stream_info(names.EXECUTE_STREAM)
    finally:
        await nc.drain()
    assert msgspec.json.decode(reply.data)["state"] == "pending"
    assert info.state.messages == 0


async def test_a_filing_no_gate_holds_is_one_line_and_a_failure(
    state: StateDir, nats_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A bus with no gate on it: the runtime's client denies (fail closed), and the
    command says the filing is not held rather than printing an approval."""
    argv = ["--state-dir", str(state.root), "--nats", nats_url]

    code, out, err = await command(argv, capsys)

    assert (code, out) == (1, "")
    assert err.startswith(f"{held_filing.PROG}: the gate did not hold the filing: deny ("), err
    assert err.count("\n") == 1


def test_no_demo_state_is_one_line_and_a_failure(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert held_filing.main(["--state-dir", str(tmp_path)]) == 1
    assert capsys.readouterr() == (
        "",
        f"{held_filing.PROG}: no demo state in {tmp_path} (no registry.json)\n",
    )


def test_a_verdict_without_an_approval_is_not_held() -> None:
    verdict = Verdict(
        schema="smf.verdict/1", proposal_id="p-1", outcome="held", reason_codes=("x",)
    )
    with pytest.raises(held_filing.NotHeld, match="held"):
        held_filing.held_line(verdict)
