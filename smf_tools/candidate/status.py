"""``candidate status``: which signed reviews hold for this candidate's commit.

Reviews bound to the SHA: per gate family and per claim, a review
is

- **current** when it was signed for this candidate's SHA (and tree);
- **stale** when it was signed for an older SHA and, between that SHA and this
  one (``git diff --name-only OLD NEW``), a file the claim ``covers``, a file of
  one of its tests, or the claim's own declaration changed. A review made for
  an older SHA where none of those changed still applies: it is current, and
  its row names the SHA it was made for;
- **refused** when its record does not verify, its signer is not a reviewer, it
  is no verdict, or it names a commit this repository lacks: such a record is
  printed and never counted;

and a claim with no current review, of itself or of its family, is
**missing**. Nothing is guessed: a claim whose declaration cannot be read at
either commit counts every changed file against it (fail closed).
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal

from smf_assurance.ops.cli.output import Progress, emit, fail, say, table
from smf_assurance.ops.local.defaults import default_state_dir
from smf_assurance.ops.local.state import StateDir
from smf_assurance.subjects.registry import KeyRegistry, RegistryError, load_registry
from smf_tools.candidate.claims import (
    CLAIMS_FILE,
    FAMILIES,
    Claim,
    ClaimsError,
    covered,
    decode_claims,
)
from smf_tools.candidate.gitrepo import (
    GitError,
    changed_files,
    commit_of,
    show_file,
    tree_of,
)
from smf_tools.candidate.reviews import (
    Candidate,
    CandidateClaim,
    CandidateError,
    ReviewRecord,
    ReviewRefused,
    Verdict,
    load_candidate,
    open_review,
)
from smf_tools.cli_json import CandidateStatusJson, ReviewRowJson

ReviewState = Literal["current", "stale", "missing", "refused"]
_SHOWN_CHANGES: Final = 3


@dataclass(frozen=True, slots=True)
class Row:
    """One line of the status: a review (or its absence) for a claim or a family."""

    family: str | None
    claim: str | None
    state: ReviewState
    why: str
    verdict: Verdict | None = None
    reviewer: str | None = None
    reviewed_sha: str | None = None
    file: str | None = None


@dataclass(frozen=True, slots=True)
class _Declared:
    """The claims declared at one commit, or None when they cannot be read there."""

    claims: Mapping[str, Claim] | None


def _declared(repo: Path, sha: str) -> _Declared:
    try:
        text = show_file(repo, sha, CLAIMS_FILE.as_posix())
        if text is None:
            return _Declared(None)
        return _Declared({c.id: c for c in decode_claims(text, f"{sha[:12]}:{CLAIMS_FILE}")})
    except (GitError, ClaimsError):
        return _Declared(None)


def _depends_on(
    claim: CandidateClaim, now: _Declared, then: _Declared, changed: frozenset[str]
) -> list[str]:
    """The changed paths this claim's review rests on (module docstring)."""
    new = now.claims.get(claim.id) if now.claims is not None else None
    old = then.claims.get(claim.id) if then.claims is not None else None
    if new is None or old is None:
        return sorted(changed)
    tests = {node.split("::", 1)[0] for node in claim.tests}
    hits = [p for p in sorted(changed) if p in tests or covered(p, new.covers + old.covers)]
    if CLAIMS_FILE.as_posix() in changed and new != old:
        hits.append(f"{CLAIMS_FILE} ({claim.id} re-declared)")
    return hits


def _judge(
    repo: Path,
    candidate: Candidate,
    record: ReviewRecord,
    claims: tuple[CandidateClaim, ...],
    now: _Declared,
) -> tuple[ReviewState, str]:
    if record.sha == candidate.sha:
        if record.tree != candidate.tree:
            raise ReviewRefused("tree_mismatch", "the record names another tree for this SHA")
        return "current", "signed for this SHA"
    try:
        commit_of(repo, record.sha)
        tree = tree_of(repo, record.sha)
        changed = changed_files(repo, record.sha, candidate.sha)
    except GitError as exc:
        raise ReviewRefused(
            "unknown_commit", f"{record.sha[:12]} cannot be compared here: {exc}"
        ) from exc
    if tree != record.tree:
        raise ReviewRefused("tree_mismatch", f"the record's tree is not {record.sha[:12]}'s")
    then = _declared(repo, record.sha)
    hits = sorted({p for claim in claims for p in _depends_on(claim, now, then, changed)})
    if hits:
        shown = ", ".join(hits[:_SHOWN_CHANGES])
        more = f" and {len(hits) - _SHOWN_CHANGES} more" if len(hits) > _SHOWN_CHANGES else ""
        return "stale", f"changed since {record.sha[:12]}: {shown}{more}"
    return "current", f"signed for {record.sha[:12]}; nothing it rests on changed since"


def review_status(
    repo: Path, candidate: Candidate, records: Iterable[tuple[str, bytes]], registry: KeyRegistry
) -> list[Row]:
    """Every row of the status, families in their declared order, then refused records.

    ``records`` are (file name, bytes) pairs; each is opened with
    :func:`smf_tools.candidate.reviews.open_review`."""
    try:
        if commit_of(repo, candidate.sha) != candidate.sha or tree_of(repo, candidate.sha) != (
            candidate.tree
        ):
            raise CandidateError(f"{candidate.sha[:12]} does not have the candidate's tree")
    except GitError as exc:
        raise CandidateError(f"the candidate's commit is not in {repo}: {exc}") from exc
    now = _declared(repo, candidate.sha)
    by_target: dict[tuple[str, str], list[Row]] = {}
    refused: list[Row] = []
    for name, data in records:
        try:
            record, reviewer = open_review(data, registry)
            claims = (
                candidate.family(record.target)
                if record.scope == "family"
                else tuple(c for c in (candidate.claim(record.target),) if c is not None)
            )
            if not claims:
                raise ReviewRefused(
                    "not_in_candidate", f"{record.scope} {record.target} is not in this candidate"
                )
            state, why = _judge(repo, candidate, record, claims, now)
        except ReviewRefused as exc:
            refused.append(Row(None, None, "refused", f"{exc.code}: {exc}", file=name))
            continue
        row = Row(
            family=claims[0].family,
            claim=record.target if record.scope == "claim" else None,
            state=state,
            why=why,
            verdict=record.verdict,
            reviewer=reviewer.name,
            reviewed_sha=record.sha,
            file=name,
        )
        by_target.setdefault((record.scope, record.target), []).append(row)
    return [*_ordered(candidate, by_target), *refused]


def _ordered(candidate: Candidate, by_target: Mapping[tuple[str, str], list[Row]]) -> list[Row]:
    rows: list[Row] = []
    order = {family: n for n, family in enumerate(FAMILIES)}
    families = sorted({c.family for c in candidate.claims}, key=lambda f: (order.get(f, 99), f))
    for family in families:
        family_rows = by_target.get(("family", family), [])
        rows.extend(family_rows)
        family_current = any(r.state == "current" for r in family_rows)
        for claim in sorted(candidate.family(family), key=lambda c: c.id):
            own = by_target.get(("claim", claim.id), [])
            rows.extend(own)
            if not family_current and not any(r.state == "current" for r in own):
                rows.append(
                    Row(family, claim.id, "missing", "no current review of it or its family")
                )
    return rows


def complete(candidate: Candidate, rows: Iterable[Row]) -> bool:
    """Every claim has a current review, of itself or its family, that did not fail."""
    passed = [r for r in rows if r.state == "current" and r.verdict in ("pass", "pass-with-notes")]
    return all(
        any(r.claim == c.id or (r.claim is None and r.family == c.family) for r in passed)
        for c in candidate.claims
    )


def read_records(folder: Path) -> list[tuple[str, bytes]]:
    """Every ``*.json`` file of the reviews folder, by name, read whole."""
    try:
        paths = sorted(p for p in folder.iterdir() if p.suffix == ".json" and p.is_file())
        return [(p.name, p.read_bytes()) for p in paths]
    except OSError as exc:
        fail(f"cannot read reviews folder {folder}: {exc.strerror}", 2)


# --- the command line ------------------------------------------------------------------


def add_status_parser(candidate_sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``candidate status``; registered under the ``candidate`` command."""
    p = candidate_sub.add_parser(
        "status", help="which signed reviews hold for a candidate's commit, per family and claim"
    )
    p.add_argument("--candidate", type=Path, required=True, help="candidate JSON file")
    p.add_argument("--reviews", type=Path, required=True, metavar="DIR", help="review records")
    p.add_argument(
        "--registry",
        type=Path,
        metavar="FILE",
        help="the key registry naming the reviewers (default: registry.json in the state dir)",
    )
    p.add_argument("--repo", type=Path, default=Path("."), help="the git repository (default: .)")
    p.add_argument("--json", action="store_true", help="print the status as JSON")
    p.set_defaults(func=run_status)


def run_status(args: argparse.Namespace) -> int:
    registry_path = args.registry or StateDir(default_state_dir()).registry
    try:
        candidate = load_candidate(args.candidate)
        registry = load_registry(registry_path)
    except (CandidateError, RegistryError) as exc:
        fail(str(exc))
    records = read_records(args.reviews)
    progress = Progress("reviews checked", len(records))
    try:
        rows = review_status(args.repo, candidate, _counted(records, progress), registry)
    except CandidateError as exc:
        fail(f"refused: {exc}")
    finally:
        progress.close()
    if args.json:
        emit(
            CandidateStatusJson(
                sha=candidate.sha,
                tree=candidate.tree,
                complete=complete(candidate, rows),
                rows=tuple(
                    ReviewRowJson(
                        family=r.family,
                        claim=r.claim,
                        state=r.state,
                        verdict=r.verdict,
                        reviewer=r.reviewer,
                        reviewed_sha=r.reviewed_sha,
                        file=r.file,
                        why=r.why,
                    )
                    for r in rows
                ),
            )
        )
        return 0
    table(
        ("family", "claim", "review", "verdict", "reviewer", "sha", "file", "why"),
        [
            (
                r.family,
                r.claim or ("(family)" if r.family else None),
                r.state,
                r.verdict,
                r.reviewer,
                r.reviewed_sha[:12] if r.reviewed_sha else None,
                r.file,
                r.why,
            )
            for r in rows
        ],
    )
    verdict = "complete" if complete(candidate, rows) else "not complete"
    say(f"candidate {candidate.sha}: review {verdict}")
    return 0


def _counted(records: list[tuple[str, bytes]], progress: Progress) -> Iterable[tuple[str, bytes]]:
    for done, record in enumerate(records, 1):
        yield record
        progress.update(done)
