"""``tls init`` and ``tls issue``: the bus's local CA and certificates
(``smf_assurance.ops.local.tls``)."""

from __future__ import annotations

import argparse

from smf_assurance.ops.cli.cli_json import TlsInitJson, TlsIssueJson
from smf_assurance.ops.cli.output import emit, fail, format_instant, say, table
from smf_assurance.ops.local.tls import (
    NATS_CLIENT_INCLUDE,
    NATS_ROUTE_INCLUDE,
    TlsInitError,
    init_tls,
    issue_cert,
)


def run_init(args: argparse.Namespace) -> int:
    try:
        files = init_tls(args.out, args.host)
    except TlsInitError as exc:
        fail(str(exc))
    not_after_ms = int(files.not_after.timestamp() * 1000)
    if args.json:
        emit(
            TlsInitJson(
                directory=str(files.directory),
                ca_cert=str(files.ca_cert),
                ca_key=str(files.ca_key),
                cert=str(files.cert),
                key=str(files.key),
                includes=tuple(
                    str(files.directory / n) for n in (NATS_CLIENT_INCLUDE, NATS_ROUTE_INCLUDE)
                ),
                hosts=files.hosts,
                not_after_ms=not_after_ms,
            )
        )
        return 0
    table(
        ("file", "what"),
        [
            (files.ca_cert, "the CA: give it to every client (SMF_NATS_CA)"),
            (files.ca_key, "the CA's key (0600): keep it off the servers"),
            (files.cert, "the nodes' certificate"),
            (files.key, "the nodes' key (0600)"),
            (files.directory / NATS_CLIENT_INCLUDE, "the node config's TLS for clients"),
            (files.directory / NATS_ROUTE_INCLUDE, "the node config's TLS for routes"),
        ],
    )
    say(f"names: {', '.join(files.hosts)}; valid until {format_instant(not_after_ms)}")
    return 0


def run_issue(args: argparse.Namespace) -> int:
    try:
        issued = issue_cert(args.ca, args.name, args.host, args.out)
    except TlsInitError as exc:
        fail(str(exc))
    not_after_ms = int(issued.not_after.timestamp() * 1000)
    if args.json:
        emit(
            TlsIssueJson(
                cert=str(issued.cert),
                key=str(issued.key),
                hosts=issued.hosts,
                not_after_ms=not_after_ms,
            )
        )
        return 0
    table(
        ("file", "what"),
        [(issued.cert, "the certificate: --tls-cert"), (issued.key, "its key (0600): --tls-key")],
    )
    say(f"names: {', '.join(issued.hosts)}; valid until {format_instant(not_after_ms)}")
    return 0
