"""``runtime confine`` and ``runtime run``'s options; ``smf_assurance.ops.cli.commands.confine``
writes the profile and launches the sandbox."""

from __future__ import annotations

import argparse
from pathlib import Path

from smf_assurance.ops.cli.parsers import Handler
from smf_assurance.ops.cli.parsers.model_gateway import DEFAULT_LISTEN
from smf_assurance.ops.local.defaults import BWRAP, default_state_dir

DEFAULT_GATEWAY_URL = f"http://{DEFAULT_LISTEN}/v1"


def add_parsers(actions: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    confine = actions.add_parser(
        "confine",
        help="write a runtime's confinement profile: what its sandbox shows, and how",
        description="Write STATE/runtimes/ID.confine.json, which `runtime run` builds the "
        "runtime's sandbox from: its home (configuration, plugins and scheduler read-only, "
        "session data read-write), its workspace (read-write), its software (read-only), "
        "and where the bus and the model gateway are. No secret is written: the launcher "
        "reads the runtime's key, bus seed and gateway token from the state's keys/.",
    )
    confine.add_argument("--id", required=True, dest="runtime_id", help="the runtime id")
    confine.add_argument(
        "--kind", required=True, choices=("hermes", "openclaw"), help="its runtime"
    )
    confine.add_argument(
        "--home", required=True, type=Path, help="HERMES_HOME or OpenClaw's state folder"
    )
    confine.add_argument("--workspace", required=True, type=Path, help="its workspace")
    confine.add_argument(
        "--runtime-dir",
        action="append",
        default=[],
        type=Path,
        metavar="DIR",
        help="its software, read-only (its venv or Node and OpenClaw, the adapter); repeatable",
    )
    confine.add_argument(
        "--read-only",
        action="append",
        default=[],
        type=Path,
        metavar="PATH",
        help="more data, read-only and searched for secrets; repeatable",
    )
    confine.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="more environment for the runtime (never a secret); repeatable",
    )
    confine.add_argument("--holds", type=Path, metavar="FILE", help='a hold list, {"paths": [...]}')
    confine.add_argument("--principal", help="its registry principal (default: the id)")
    confine.add_argument(
        "--cwd", type=Path, help="where its command starts (default: the workspace)"
    )
    confine.add_argument("--nats", help="the bus (default: the URL a running `up` wrote)")
    confine.add_argument(
        "--gateway-url",
        default=DEFAULT_GATEWAY_URL,
        help="the model gateway (default: %(default)s)",
    )
    confine.add_argument(
        "--state-dir", type=Path, help=f"the gate's state (default: {default_state_dir()})"
    )
    confine.add_argument("--json", action="store_true", help="print JSON")
    confine.set_defaults(func=Handler("confine", "run_confine"))

    run = actions.add_parser(
        "run",
        help="run a runtime's command confined: bubblewrap, no secret in view, the gate its "
        "only way out",
        description="Start COMMAND under bubblewrap from the runtime's confinement profile: "
        "its own PID and network namespaces (loopback only), the bus and the model gateway "
        "reachable only through the launcher's forwarders, which hold its key, bus seed and "
        "gateway token; documents under legal hold read-only. Refused in one line, and "
        "nothing runs, when anything is missing or a secret is in view. The exit status is "
        "the command's.",
    )
    run.add_argument("--id", required=True, dest="runtime_id", help="the runtime id")
    run.add_argument(
        "--state-dir", type=Path, help=f"the gate's state (default: {default_state_dir()})"
    )
    run.add_argument("--bwrap", default=BWRAP, help="bubblewrap (default: %(default)s)")
    run.add_argument(
        "--plan",
        action="store_true",
        help="show the sandbox (mounts, forwarders) and start nothing",
    )
    run.add_argument("--json", action="store_true", help="with --plan: print JSON")
    run.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND [ARGS...]")
    run.set_defaults(func=Handler("confine", "run_run"))
