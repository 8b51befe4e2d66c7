"""``backup`` and ``restore``'s options; ``smf_assurance.ops.cli.commands.backup`` runs them."""

from __future__ import annotations

import argparse
from pathlib import Path

from smf_assurance.ops.cli.parsers import Handler, add_credential_argument
from smf_assurance.ops.local.defaults import OPERATOR, default_state_dir


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    backup = sub.add_parser(
        "backup",
        help="copy a state folder's stores, keys and streams into one archive, online",
        description="Write one archive of the state folder while the gate runs: each "
        "JetStream stream through the server's snapshot API, each SQLite file through "
        "SQLite's online backup API, then the other files (registry, keys, releases, "
        "connectors). The archive holds private keys: it is written 0600. Without a "
        "running `up` (no nats.url), `up`'s lock is taken and the state's own server "
        "started for the streams.",
    )
    _state_argument(backup)
    backup.add_argument(
        "--out", required=True, type=Path, metavar="PATH", help="archive to create (never over one)"
    )
    backup.add_argument(
        "--nats",
        metavar="URL",
        help="the state's server (default: the nats.url a running `up` wrote in the state)",
    )
    add_credential_argument(backup, OPERATOR)
    backup.add_argument("--json", action="store_true", help="print JSON")
    backup.set_defaults(func=Handler("backup", "run_backup"))

    restore = sub.add_parser(
        "restore",
        help="restore a state folder from a backup archive, then verify its ledger",
        description="Check every member of the archive against its manifest before "
        "writing anything, write the state into a new folder beside --state-dir, restore "
        "the streams through a server started on it, verify the ledger against the "
        "restored checkpoints, and only then put it in place. Refused while a gate runs "
        "on --state-dir; a folder with anything in it is set aside (not deleted), and "
        "only with --force.",
    )
    restore.add_argument(
        "--from",
        dest="archive",
        required=True,
        type=Path,
        metavar="PATH",
        help="the archive `backup` wrote",
    )
    _state_argument(restore)
    restore.add_argument(
        "--force",
        action="store_true",
        help="restore over a state folder that is not empty (it is renamed aside)",
    )
    restore.add_argument("--json", action="store_true", help="print JSON")
    restore.set_defaults(func=Handler("backup", "run_restore"))


def _state_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--state-dir",
        "--state",
        dest="state_dir",
        type=Path,
        metavar="DIR",
        help=f"the state folder (default: {default_state_dir()})",
    )
