"""A stand-in runtime that proposes the demo's court filing and leaves it held for the desk.

``python -m smf_tools.held_filing --state-dir DIR [--nats URL]``: the
README's quick start uses it to put one filing in front of an attorney in the console.
The quick start's runtimes answer with a stand-in model that calls no tool, so this plays
the demo's scripted runtime instead (its key and bus credential are the demo state's):
it proposes scenario 1 (a paralegal's court filing, ``smf_assurance.ops.demo.script``)
to the running gate, signed as any runtime signs, and prints the approval it is held
under. It approves nothing and holds no approver's key: only an attorney can let the
filing go, and the gate's example court connector files it then. One line and a non-zero
exit when the gate does not hold it (any other verdict, or no gate).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from datetime import UTC, datetime
from pathlib import Path

from smf_assurance.adapters.client import ProposalClient
from smf_assurance.ops.cli.output import CommandError, fail, say
from smf_assurance.ops.demo.script import SCENARIOS
from smf_assurance.ops.local.bus import bus_url, connect_bus
from smf_assurance.ops.local.state import ADAPTER_ID, RUNTIME_ID, StateDir
from smf_assurance.subjects.messages import Verdict

FILING = SCENARIOS[0]
PROG = "python -m smf_tools.held_filing"


class NotHeld(Exception):
    """The gate did not hold the filing; the message says what it did."""


async def propose(state: StateDir, nats_url: str) -> Verdict:
    """Propose the demo's court filing as the demo runtime; the gate's verdict."""
    nc = await connect_bus(nats_url, "smf-held-filing", state.existing_credential("runtime"))
    try:
        runtime = ProposalClient(
            nc, state.key("runtime"), RUNTIME_ID, "1.0", ADAPTER_ID, gate_keys=state.gate_keys()
        )
        proposal = runtime.build(
            native_tool=FILING.native_tool,
            arguments=FILING.arguments,
            actor=FILING.actor,
            facts=FILING.facts,
            content=FILING.content,
            destination=FILING.destination,
        )
        return await runtime.propose(proposal)
    finally:
        await nc.drain()


def held_line(verdict: Verdict) -> str:
    """What the reader sees: the approval and when it expires, or why it is not held."""
    if verdict.outcome != "held" or verdict.approval_id is None:
        reasons = ", ".join(verdict.reason_codes)
        raise NotHeld(f"the gate did not hold the filing: {verdict.outcome} ({reasons})")
    line = f"held for an attorney: {verdict.approval_id}"
    if verdict.expires_at_ms is not None:
        expires = datetime.fromtimestamp(verdict.expires_at_ms / 1000, UTC)
        line += f" (expires {expires:%H:%M:%S} UTC)"
    return line


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Propose the demo's court filing to the running gate as the demo's "
        "runtime, and print the approval it is held under: a filing for an attorney to "
        "decide in the console. Approves nothing.",
    )
    parser.add_argument(
        "--state-dir", type=Path, required=True, help="the demo state the gate runs on"
    )
    parser.add_argument("--nats", help="the gate's bus (default: the state's nats.url)")
    args = parser.parse_args(argv)
    try:
        say(held_line(asyncio.run(propose_from(StateDir(args.state_dir), args.nats))))
    except (CommandError, NotHeld) as exc:
        sys.stderr.write(f"{PROG}: {exc}\n")
        return exc.code if isinstance(exc, CommandError) else 1
    return 0


async def propose_from(state: StateDir, nats_url: str | None) -> Verdict:
    """:func:`propose` on the bus ``--nats`` names, else the one the state's ``up`` wrote."""
    if not state.registry.is_file():
        fail(f"no demo state in {state.root} (no registry.json)")
    return await propose(state, bus_url(nats_url, state.root))


if __name__ == "__main__":
    sys.exit(main())
