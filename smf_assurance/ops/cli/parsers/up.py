"""``up``'s options; ``smf_assurance.ops.cli.commands.up`` runs the gate."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Final

from smf_assurance.ops.cli.parsers import Handler
from smf_assurance.ops.cli.parsers.model_gateway import DEFAULT_LISTEN
from smf_assurance.ops.local.defaults import LOG_LEVELS, default_state_dir
from smf_assurance.subjects import names

DEFAULT_REPLICAS: Final = 3
MAX_REPLICAS: Final = 5
"""JetStream keeps at most five copies of a stream."""


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "up",
        help="run the gate (and the example connectors) until interrupted",
        description="Run the gate until SIGINT or SIGTERM, then stop cleanly. "
        "Prints one readiness line once the gate serves.",
    )
    p.add_argument(
        "--state-dir", type=Path, help=f"keep all state here (default: {default_state_dir()})"
    )
    p.add_argument(
        "--nats",
        metavar="URL[,URL...]",
        help="use this NATS server instead of an embedded one; for a cluster, "
        "its seed URLs separated by commas",
    )
    p.add_argument("--no-connectors", action="store_true", help="do not run the example connectors")
    p.add_argument(
        "--bus-stages",
        action="store_true",
        help="call the stages over their NATS subjects (default: in-process)",
    )
    logs = p.add_mutually_exclusive_group()
    logs.add_argument(
        "--json-logs",
        dest="json_logs",
        action="store_true",
        help="log JSON lines on stderr (default when stderr is not a terminal)",
    )
    logs.add_argument(
        "--console-logs",
        dest="json_logs",
        action="store_false",
        help="log for a person at a terminal (default when stderr is one)",
    )
    p.add_argument(
        "--model-gateway",
        nargs="?",
        const=DEFAULT_LISTEN,
        metavar="HOST:PORT",
        help="also run the model gateway beside the gate, on HOST:PORT "
        f"(default {DEFAULT_LISTEN}); needs `model-gateway upstream` first",
    )
    p.add_argument(
        "--notify",
        type=Path,
        metavar="FILE",
        help="also run the approvers' notifier beside the gate, configured by this "
        "TOML file (see `notify --help`)",
    )
    p.add_argument("--log-level", choices=LOG_LEVELS, default="info", help="default: info")
    p.add_argument("--json", action="store_true", help="print the readiness line as JSON")
    cluster = p.add_argument_group(
        "cluster deployment", "several gates on one NATS cluster (needs --nats)"
    )
    cluster.add_argument(
        "--cluster",
        action="store_true",
        help="run this gate as one replica of several: approvals and proposal claims in "
        "replicated JetStream KV buckets, every stream and bucket with --replicas copies",
    )
    cluster.add_argument(
        "--replicas",
        type=int,
        metavar="N",
        help=f"copies of each stream and bucket with --cluster, 1 to {MAX_REPLICAS} "
        f"(default: {DEFAULT_REPLICAS})",
    )
    cluster.add_argument(
        "--gate-name",
        metavar="NAME",
        help="this gate's name on the bus and in its checkpoint subject, distinct for each "
        f"replica (default: {names.DEFAULT_GATE_NAME})",
    )
    cluster.add_argument(
        "--connectors-only",
        action="store_true",
        help="run only the example connectors, against the gates on --nats; the state dir "
        "must hold the registry and connector keys the gates were provisioned with",
    )
    p.set_defaults(func=Handler("up", "run_up"), json_logs=None)
