"""``holds``: the gate's legal-hold list (docs/CONFINEMENT.md, "Legal holds").

- ``holds add PATH...``: hold documents; every confined runtime started afterwards has
  them read-only, and every one running stops within a second or two (its sandbox
  cannot follow a change: start it again).
- ``holds remove PATH...``: lift holds (the same stop).
- ``holds list``: what is held, and the list's revision.

As the operator, in the bucket behind the gate (``SMF_HOLDS``: the gate's account only;
no runtime reaches it). Paths are absolute and kept normalised; a relative path, the
root or a control character is refused in one line and nothing is changed.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence

from smf_assurance.ops.cli.cli_json import HoldsJson
from smf_assurance.ops.cli.output import emit, fail, first_line, say, table
from smf_assurance.ops.local.bus import bus_url, connect_bus
from smf_assurance.ops.local.defaults import OPERATOR, default_state_dir
from smf_assurance.ops.local.logs import configure_logging
from smf_assurance.ops.local.state import StateDir
from smf_assurance.pipeline.stores.holds import (
    HoldsInvalid,
    HoldsUnavailable,
    change_holds,
    open_holds,
    read_holds,
)
from smf_assurance.subjects.holds import HoldPathError, hold_path


def _paths(given: Sequence[str]) -> tuple[str, ...]:
    try:
        return tuple(hold_path(p) for p in given)
    except HoldPathError as exc:
        fail(f"not held, nothing changed: {exc}", 2)


async def _change(
    url: str, state: StateDir, add: Sequence[str], remove: Sequence[str]
) -> tuple[tuple[str, ...], int]:
    nc = await connect_bus(url, "smf-holds", state.existing_credential(OPERATOR))
    try:
        kv = await open_holds(nc.jetstream())
        if add or remove:
            held, revision = await change_holds(kv, add, remove)
        else:
            held, revision = await read_holds(kv)
    except HoldsUnavailable as exc:
        fail(f"the hold list is unavailable: {first_line(exc)}")
    except HoldsInvalid as exc:
        fail(first_line(exc))
    finally:
        await nc.close()
    return held.paths, revision


def _run(args: argparse.Namespace, add: Sequence[str], remove: Sequence[str]) -> int:
    configure_logging(json=not sys.stderr.isatty(), level="warning")
    state = StateDir(args.state_dir or default_state_dir())
    url = bus_url(args.nats, state.root)
    paths, revision = asyncio.run(_change(url, state, add, remove))
    if args.json:
        emit(HoldsJson(revision=revision, paths=paths))
        return 0
    table(("held", "path"), [("yes", p) for p in paths])
    say(f"revision {revision}: {len(paths)} held")
    return 0


def run_add(args: argparse.Namespace) -> int:
    return _run(args, _paths(args.paths), ())


def run_remove(args: argparse.Namespace) -> int:
    return _run(args, (), _paths(args.paths))


def run_list(args: argparse.Namespace) -> int:
    return _run(args, (), ())
