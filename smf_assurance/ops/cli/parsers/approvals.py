"""``approvals``'s options; ``smf_assurance.ops.cli.commands.approvals`` lists, shows
and resolves."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Final

from smf_assurance.ops.cli.parsers import Handler, add_bus_location, add_credential_argument
from smf_assurance.ops.local.defaults import CONSOLE
from smf_assurance.subjects.approvals import DENY_REASONS, ResolutionDecision
from smf_assurance.subjects.patterns import MAX_NOTE_CHARS

DECISIONS: Final[dict[str, ResolutionDecision]] = {"allow-once": "allow-once", "deny": "deny"}
"""Only these two exist (ARCHITECTURE.md, "Exact-action approval")."""


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("approvals", help="list, inspect and resolve held actions")
    actions = p.add_subparsers(dest="approvals_command", required=True, metavar="ACTION")

    pending = actions.add_parser(
        "pending",
        help="list open approvals",
        description="List approvals announced on the SMF_APPROVALS stream that are still "
        "pending or approved, with their current state from the gate.",
    )
    _bus_arguments(pending)
    pending.add_argument("--tenant", help="only this tenant's approvals")
    pending.add_argument("--all", action="store_true", help="also list closed approvals")
    pending.add_argument("--json", action="store_true", help="print JSON")
    pending.set_defaults(func=Handler("approvals", "run_pending"))

    show = actions.add_parser(
        "show",
        help="show what an approval would send, and check it against its digest",
        description="Ask the gate (signed with your key) for the binding and the held "
        "content of one approval, and check the content against the binding digest. "
        "Exits 1 when they do not match.",
    )
    show.add_argument("approval_id", metavar="ID", help="approval id (sha256:<hex> or <hex>)")
    _bus_arguments(show)
    _approver_arguments(show)
    show.add_argument(
        "--directory",
        type=Path,
        metavar="DIR",
        help="the tenant directory, one <tenant>.toml each (default: directory/ in the state dir)",
    )
    show.add_argument("--json", action="store_true", help="print JSON")
    show.set_defaults(func=Handler("approvals", "run_show"))

    resolve = actions.add_parser(
        "resolve",
        help="sign allow-once or deny for one approval",
        description="Fetch the approval, refuse to sign unless its content matches the "
        "binding digest and it is pending, name the action and its destination and ask "
        "you to type yes (unless --yes), sign the checked digest, send it, and print "
        "the gate's answer. A deny needs --reason. Exits 1 when the gate refuses, when "
        "you do not confirm, or when there is no terminal to ask on and no --yes.",
    )
    resolve.add_argument("approval_id", metavar="ID", help="approval id (sha256:<hex> or <hex>)")
    resolve.add_argument("decision", choices=tuple(DECISIONS), help="allow-once or deny")
    resolve.add_argument(
        "--reason",
        choices=tuple(DENY_REASONS),
        help="why you deny (required with deny): "
        + "; ".join(f"{code}: {label}" for code, label in DENY_REASONS.items()),
    )
    resolve.add_argument(
        "--note",
        metavar="TEXT",
        help=f"a note to the requester with a deny (plain text, at most {MAX_NOTE_CHARS} "
        "characters; it goes to the requester and the runtime, never into the ledger)",
    )
    resolve.add_argument("--yes", action="store_true", help="sign without asking for confirmation")
    _bus_arguments(resolve)
    _approver_arguments(resolve)
    resolve.add_argument("--json", action="store_true", help="print JSON")
    resolve.set_defaults(func=Handler("approvals", "run_resolve"))

    again = actions.add_parser(
        "rerequest",
        help="ask an expired approval of yours again, as a new approval",
        description="Sign, with your key, a request that your expired approval be asked "
        "again. The gate checks that you requested it and that it expired, "
        "and tells the runtime that proposed it, which proposes the action anew: a new "
        "approval with a new binding, decided from the start. The expired one stays "
        "expired. Exits 1 when the gate refuses.",
    )
    again.add_argument("approval_id", metavar="ID", help="approval id (sha256:<hex> or <hex>)")
    _bus_arguments(again)
    _approver_arguments(again)
    again.add_argument("--json", action="store_true", help="print JSON")
    again.set_defaults(func=Handler("approvals", "run_rerequest"))


def _bus_arguments(p: argparse.ArgumentParser) -> None:
    add_bus_location(p)
    add_credential_argument(p, f"<approver> or {CONSOLE}")


def _approver_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--key", required=True, type=Path, help="your private key file")
    p.add_argument(
        "--id", dest="approver_id", help="your approver id (default: the key file's principal)"
    )
