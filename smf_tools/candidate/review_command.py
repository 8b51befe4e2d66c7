"""``review start`` and ``review sign``: a reviewer's verdict, bound to one commit.

Reviews bound to the SHA: a reviewer attests the SHA at the start and at the
end of a review; a mismatch is no verdict.

- ``review start --candidate FILE`` checks that the working tree's HEAD is the
  candidate's commit, with the candidate's tree, and clean (nothing modified,
  staged or untracked), then records that start inside the git directory
  (``smf-reviews/start-<sha>.json``), where it does not dirty the tree.
- ``review sign`` checks HEAD again, the same way: a moved HEAD, another tree
  or a dirty tree is no verdict (exit 1, nothing written). It signs only with a
  key whose registry principal holds the ``reviewer`` role
  (``smf_tools.candidate.reviews``), opens the signed record again as
  ``candidate status`` will, and writes it, never over an existing file.
"""

from __future__ import annotations

import argparse
import os
import re
from pathlib import Path
from typing import Final

import msgspec

from smf_assurance.ops.cli.output import emit, fail, format_instant, table
from smf_assurance.ops.local.defaults import default_state_dir
from smf_assurance.ops.local.state import StateDir
from smf_assurance.subjects.clock import wall_clock_ms
from smf_assurance.subjects.keys import KeyFileError, load_private_key
from smf_assurance.subjects.registry import RegistryError, load_registry
from smf_tools.candidate.claims import FAMILIES
from smf_tools.candidate.gitrepo import (
    GitError,
    commit_of,
    dirty_files,
    git_dir_path,
    tree_of,
)
from smf_tools.candidate.reviews import (
    MAX_NOTE_CHARS,
    REVIEW_SCHEMA,
    Candidate,
    CandidateError,
    ReviewRecord,
    ReviewRefused,
    ReviewStart,
    load_candidate,
    open_review,
    sign_review,
)
from smf_tools.cli_json import ReviewSignJson, ReviewStartJson

START_FOLDER: Final = "smf-reviews"
_UNSAFE: Final = re.compile(r"[^A-Za-z0-9._-]+")
_SHOWN_DIRTY: Final = 5


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("review", help="sign a review of a candidate's claim, bound to its commit")
    review_sub = p.add_subparsers(dest="review_command", required=True, metavar="SUBCOMMAND")

    s = review_sub.add_parser("start", help="attest that the candidate's commit is checked out")
    s.add_argument("--candidate", type=Path, required=True, help="candidate JSON file")
    s.add_argument("--repo", type=Path, default=Path("."), help="the working tree (default: .)")
    s.add_argument("--json", action="store_true", help="print the start as JSON")
    s.set_defaults(func=run_start)

    g = review_sub.add_parser("sign", help="attest the commit again and sign the verdict")
    g.add_argument("--candidate", type=Path, required=True, help="candidate JSON file")
    target = g.add_mutually_exclusive_group(required=True)
    target.add_argument("--claim", metavar="ID", help="the claim reviewed")
    target.add_argument(
        "--family", choices=FAMILIES, metavar="FAMILY", help="the gate family reviewed"
    )
    g.add_argument(
        "--verdict", required=True, choices=("pass", "fail", "pass-with-notes"), help="the finding"
    )
    g.add_argument("--key", type=Path, required=True, help="the reviewer's private key file")
    g.add_argument("--note", default="", help="what was checked (required with pass-with-notes)")
    g.add_argument(
        "--registry",
        type=Path,
        metavar="FILE",
        help="the key registry naming the reviewers (default: registry.json in the state dir)",
    )
    g.add_argument(
        "--reviews",
        type=Path,
        metavar="DIR",
        help=f"where to write the record (default: {START_FOLDER}/ in the git directory)",
    )
    g.add_argument("--repo", type=Path, default=Path("."), help="the working tree (default: .)")
    g.add_argument("--json", action="store_true", help="print the record written as JSON")
    g.set_defaults(func=run_sign)


def _load(path: Path) -> Candidate:
    try:
        return load_candidate(path)
    except CandidateError as exc:
        fail(str(exc))


def attest_head(repo: Path, candidate: Candidate) -> str:
    """HEAD, once checked to be the candidate's commit with its tree and a clean tree;
    the refusal names what differs."""
    try:
        head = commit_of(repo, "HEAD")
        tree = tree_of(repo, "HEAD")
        dirty = dirty_files(repo)
    except GitError as exc:
        fail(f"refused: {exc}")
    if head != candidate.sha:
        fail(f"no verdict: HEAD is {head[:12]}, the candidate is {candidate.sha[:12]}")
    if tree != candidate.tree:
        fail(f"no verdict: {head[:12]}'s tree is not the candidate's tree")
    if dirty:
        more = f" and {len(dirty) - _SHOWN_DIRTY} more" if len(dirty) > _SHOWN_DIRTY else ""
        fail(f"no verdict: the working tree is not clean: {', '.join(dirty[:_SHOWN_DIRTY])}{more}")
    return head


def _start_file(repo: Path, sha: str) -> Path:
    try:
        return git_dir_path(repo, f"{START_FOLDER}/start-{sha}.json")
    except GitError as exc:
        fail(f"refused: {exc}")


def run_start(args: argparse.Namespace) -> int:
    candidate = _load(args.candidate)
    head = attest_head(args.repo, candidate)
    start = ReviewStart(
        schema="smf.review-start/1", sha=head, tree=candidate.tree, started_at_ms=wall_clock_ms()
    )
    path = _start_file(args.repo, head)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(".tmp")
    temporary.write_bytes(msgspec.json.encode(start) + b"\n")
    os.replace(temporary, path)
    if args.json:
        emit(
            ReviewStartJson(
                sha=head,
                tree=candidate.tree,
                started_at_ms=start.started_at_ms,
                start_file=str(path),
            )
        )
    else:
        table(
            ("field", "value"),
            [
                ("candidate", head),
                ("started at", format_instant(start.started_at_ms)),
                ("recorded in", str(path)),
            ],
        )
    return 0


def _read_start(repo: Path, candidate: Candidate) -> ReviewStart:
    path = _start_file(repo, candidate.sha)
    try:
        start = msgspec.json.decode(path.read_bytes(), type=ReviewStart)
    except FileNotFoundError:
        fail(f"no verdict: no review of {candidate.sha[:12]} was started (run review start)")
    except (OSError, msgspec.DecodeError) as exc:
        fail(f"no verdict: the review start {path} cannot be read: {type(exc).__name__}")
    return start


def run_sign(args: argparse.Namespace) -> int:
    candidate = _load(args.candidate)
    if args.claim is not None and candidate.claim(args.claim) is None:
        fail(f"refused: claim {args.claim} is not in the candidate")
    if args.family is not None and not candidate.family(args.family):
        fail(f"refused: the candidate has no claim of family {args.family}")
    if args.verdict == "pass-with-notes" and not args.note.strip():
        fail("refused: pass-with-notes needs --note saying what the notes are", 2)
    if len(args.note) > MAX_NOTE_CHARS:
        fail(f"refused: the note is longer than {MAX_NOTE_CHARS} characters", 2)
    start = _read_start(args.repo, candidate)
    end = attest_head(args.repo, candidate)
    try:
        key, principal = load_private_key(args.key)
        registry = load_registry(args.registry or StateDir(default_state_dir()).registry)
    except (KeyFileError, RegistryError) as exc:
        fail(str(exc))
    record = ReviewRecord(
        schema=REVIEW_SCHEMA,
        sha=candidate.sha,
        tree=candidate.tree,
        scope="claim" if args.claim is not None else "family",
        target=args.claim if args.claim is not None else args.family,
        verdict=args.verdict,
        reviewer=principal,
        start_sha=start.sha,
        end_sha=end,
        started_at_ms=start.started_at_ms,
        signed_at_ms=wall_clock_ms(),
        note=args.note,
    )
    try:
        signed = sign_review(record, key)
        open_review(signed, registry)
    except ReviewRefused as exc:
        fail(f"refused: {exc.code}: {exc}")
    folder = args.reviews or _start_file(args.repo, candidate.sha).parent
    path = folder / "-".join(
        _UNSAFE.sub("_", part)
        for part in (record.target, candidate.sha[:12], principal, str(record.signed_at_ms))
    )
    path = path.with_name(path.name + ".json")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with path.open("xb") as handle:
            handle.write(signed + b"\n")
    except OSError as exc:
        fail(f"cannot write {path}: {exc.strerror}")
    if args.json:
        emit(
            ReviewSignJson(
                sha=record.sha,
                scope=record.scope,
                target=record.target,
                verdict=record.verdict,
                reviewer=principal,
                key_id=key.key_id,
                started_at_ms=record.started_at_ms,
                signed_at_ms=record.signed_at_ms,
                file=str(path),
            )
        )
    else:
        table(
            ("field", "value"),
            [
                ("candidate", record.sha),
                (record.scope, record.target),
                ("verdict", record.verdict),
                ("reviewer", f"{principal} ({key.key_id})"),
                ("started at", format_instant(record.started_at_ms)),
                ("signed at", format_instant(record.signed_at_ms)),
                ("written to", str(path)),
            ],
        )
    return 0
