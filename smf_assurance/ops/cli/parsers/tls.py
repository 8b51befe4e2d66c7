"""``tls``'s options; ``smf_assurance.ops.cli.commands.tls`` makes the certificates."""

from __future__ import annotations

import argparse

from smf_assurance.ops.cli.output import given_path
from smf_assurance.ops.cli.parsers import Handler


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "tls",
        help="a local CA and the bus's certificate, for a cluster or clients on other hosts",
        description="TLS for the bus where it crosses a network (docs/OPERATIONS.md, "
        "'TLS'). A firm with its own CA gives its own certificates instead.",
    )
    actions = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    q = actions.add_parser(
        "init",
        help="make a CA and the nodes' certificate, and the node config's TLS includes",
        description="Writes ca.pem (give it to every client: SMF_NATS_CA), ca-key.pem "
        "(keep it off the servers), bus.pem and bus-key.pem (the nodes'), and "
        "client.conf and route.conf (deploy/nats/cluster.conf includes them from its "
        "tls/ folder). Refused if the folder already holds a CA or certificate.",
    )
    q.add_argument(
        "--out", type=given_path, required=True, metavar="DIR", help="the folder to write"
    )
    q.add_argument(
        "--host",
        action="append",
        default=[],
        metavar="NAME",
        help="a name or IP address the nodes are reached by (repeat; localhost and "
        "127.0.0.1 are always in)",
    )
    q.add_argument("--json", action="store_true", help="print JSON")
    q.set_defaults(func=Handler("tls", "run_init"))
    q = actions.add_parser(
        "issue",
        help="a certificate for one more server (the console, the model gateway)",
        description="Writes NAME.pem and NAME-key.pem (0600) into --out, signed by the CA "
        "`tls init` made in --ca (its ca-key.pem is needed). Give them to the server as "
        "--tls-cert and --tls-key. Refused if either file exists.",
    )
    q.add_argument("--ca", type=given_path, required=True, metavar="DIR", help="the CA's folder")
    q.add_argument("--name", required=True, help="the server, e.g. console (the files' name)")
    q.add_argument(
        "--host",
        action="append",
        default=[],
        metavar="NAME",
        help="a name or IP address the server is reached by (repeat; localhost and "
        "127.0.0.1 are always in)",
    )
    q.add_argument(
        "--out", type=given_path, required=True, metavar="DIR", help="the folder to write"
    )
    q.add_argument("--json", action="store_true", help="print JSON")
    q.set_defaults(func=Handler("tls", "run_issue"))
