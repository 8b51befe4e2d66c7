"""``candidate``: one immutable candidate of the product and what holds for it (issue 24).

``candidate status`` (``smf_assurance.ops.candidate.status``) shows which signed
reviews hold for a candidate's commit.
"""

from __future__ import annotations

import argparse

from smf_assurance.ops.candidate.status import add_status_parser


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("candidate", help="one immutable candidate: its commit and its reviews")
    candidate_sub = p.add_subparsers(dest="candidate_command", required=True, metavar="SUBCOMMAND")
    add_status_parser(candidate_sub)
