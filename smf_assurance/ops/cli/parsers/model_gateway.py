"""``model-gateway``'s options; ``smf_assurance.ops.cli.commands.model_gateway`` runs it."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Final

from smf_assurance.ops.cli.parsers import Handler, add_https_arguments
from smf_assurance.ops.local.defaults import default_state_dir

DEFAULT_LISTEN: Final = "127.0.0.1:8787"
_SURFACES: Final = ("direct_reply", "stream", "gateway_delivery", "cron", "background")


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "model-gateway",
        help="the model endpoint runtimes are pointed at: serve, upstream, add-runtime, list, "
        "clear",
        description="The OpenAI-compatible model gateway: serves only attested "
        "runtimes and releases model text only after the output gate decided it.",
    )
    inner = p.add_subparsers(dest="gateway_command", required=True, metavar="SUBCOMMAND")

    def common(q: argparse.ArgumentParser) -> None:
        q.add_argument(
            "--state-dir", type=Path, help=f"the gate's state (default: {default_state_dir()})"
        )
        q.add_argument("--json", action="store_true", help="print JSON")

    q = inner.add_parser("upstream", help="name the provider the gateway forwards to")
    q.add_argument("base_url", help="the provider's OpenAI-compatible base URL, ending in /v1")
    q.add_argument(
        "--provider",
        required=True,
        help="the provider's name in the release's model_providers (what it may receive)",
    )
    q.add_argument("--api-key-file", help="a file holding the provider's API key")
    common(q)
    q.set_defaults(func=Handler("model_gateway", "run_upstream"))

    q = inner.add_parser("add-runtime", help="issue a runtime its gateway token")
    q.add_argument("runtime_id", help="the runtime id of its registry entry")
    q.add_argument("--adapter", required=True, help="its adapter id (mapper table)")
    q.add_argument(
        "--actor", required=True, type=Path, help="JSON file: the ActorContext it works for"
    )
    q.add_argument("--destination", required=True, help="where its replies go, e.g. cli:operator")
    q.add_argument(
        "--locality",
        required=True,
        choices=("internal", "external"),
        help="whether that destination is inside the firm",
    )
    q.add_argument(
        "--surface",
        default="direct_reply",
        choices=_SURFACES,
        help="the runtime surface its replies are delivered on (default: direct_reply)",
    )
    q.add_argument("--facts", type=Path, help="JSON file: the DataFacts of its replies")
    q.add_argument(
        "--no-tool-call-accounting",
        action="store_true",
        help="do not check its tool results against the gate's decisions (only for an "
        "adapter that puts no tool-call ids into its proposals; both shipped adapters do)",
    )
    q.add_argument(
        "--checks-tool-arguments",
        action="store_true",
        help="the runtime runs no call whose arguments fail the tool's schema (OpenClaw; "
        "not Hermes): such a call's result is recorded as a refusal, not a stop",
    )
    q.add_argument(
        "--refuses-invalid-json-turns",
        action="store_true",
        help="the runtime answers every call of a turn it did not stream, in which some "
        "call's arguments are not JSON, with its own text and runs none (Hermes; not "
        "OpenClaw): such results are recorded as refusals, not a stop",
    )
    common(q)
    q.set_defaults(func=Handler("model_gateway", "run_add_runtime"))

    q = inner.add_parser("clear", help="lift a runtime's ungated_tool_result stop (operator)")
    q.add_argument("runtime_id", help="the stopped runtime's id")
    q.add_argument("--nats", metavar="URL[,URL...]", help="the gate's bus (default: up's)")
    common(q)
    q.set_defaults(func=Handler("model_gateway", "run_clear"))

    q = inner.add_parser("list", help="the runtimes the gateway serves")
    common(q)
    q.set_defaults(func=Handler("model_gateway", "run_list"))

    q = inner.add_parser("serve", help="run the gateway until SIGINT or SIGTERM")
    q.add_argument("--nats", metavar="URL[,URL...]", help="the gate's bus (default: up's)")
    q.add_argument("--listen", default=DEFAULT_LISTEN, help=f"HOST:PORT (default {DEFAULT_LISTEN})")
    add_https_arguments(q)
    common(q)
    q.set_defaults(func=Handler("model_gateway", "run_serve"))
