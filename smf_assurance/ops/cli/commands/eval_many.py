"""``eval`` beyond one envelope and one projection.

- ``--jsonl``: the envelope file (or ``-``) holds one envelope per line; every
  line is decoded before anything is decided, and a malformed one is refused
  naming its line number (blank lines are skipped, and counted).
- ``--explain``: each decision is followed by its explanation, the same one
  ``explain DECISION_ID`` prints (``smf_assurance.ops.cli.explaining``), here with the
  consequential triggers too, since the envelope is at hand.
- ``--against RELEASE_DIR --trust-root FILE``: every envelope is decided under
  the ``--projection`` (or the shipped scenarios) and under the release
  folder, verified as ``release verify`` verifies it (lease judged at
  ``--at``); per envelope both dispositions and reason codes and whether they
  differ, then counts by from -> to disposition.

The single-envelope ``eval`` without these flags is ``smf_assurance.ops.cli.commands.decide``'s
own and is unchanged by them; only these flags lead here.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from smf_assurance.core.decision import Decision, Disposition
from smf_assurance.core.evaluator import consequential_triggers, evaluate
from smf_assurance.core.explanation import Explanation, explain, record_of
from smf_assurance.core.projection import (
    AnalysisProjection,
    EnforcementProjection,
    PolicySet,
    ProjectionError,
    build_policy_set,
    decode_analysis,
    decode_enforcement,
)
from smf_assurance.governance.projections import SCENARIO_PROJECTION, package_path
from smf_assurance.ops.cli.cli_json import (
    EvalAgainstJson,
    EvalComparedJson,
    EvalExplainedJson,
    EvalExplanationsJson,
    EvalLineJson,
    EvalLinesJson,
    EvalMoveJson,
    EvalOutcomeJson,
    EvalSideJson,
)
from smf_assurance.ops.cli.explaining import print_explanation
from smf_assurance.ops.cli.output import emit, fail, say, table
from smf_assurance.subjects.envelope import EnvelopeError, OperationEnvelope, decode_envelope
from smf_assurance.subjects.release import decode_bundle


def wanted(args: argparse.Namespace) -> bool:
    return bool(args.jsonl or args.explain or args.against or args.trust_root)


@dataclass(frozen=True, slots=True)
class Side:
    """One set of rules to decide under: its policy set and both projections."""

    label: str
    policy_set: PolicySet
    enforcement: EnforcementProjection
    analysis: AnalysisProjection | None
    about: dict[str, Any]

    def decide(self, envelope: OperationEnvelope, at_ms: int) -> Decision:
        return evaluate(envelope, self.policy_set, at_ms=at_ms)

    def explain(self, decision: Decision, envelope: OperationEnvelope) -> Explanation:
        if self.analysis is None:
            fail(f"cannot explain under {self.label}: it has no analysis projection")
        return explain(
            record_of(decision, consequential_triggers(envelope)), self.enforcement, self.analysis
        )


def _read(path: str) -> bytes:
    try:
        return sys.stdin.buffer.read() if path == "-" else Path(path).read_bytes()
    except OSError as exc:
        fail(f"cannot read {path}: {exc.strerror}", 2)


def envelopes(path: str, jsonl: bool) -> list[tuple[int, OperationEnvelope]]:
    """(line number, envelope) for each envelope; all decoded before any is decided."""
    data = _read(path)
    if not jsonl:
        lines = [(1, data)]
    else:
        lines = [(n, line) for n, line in enumerate(data.split(b"\n"), 1) if line.strip()]
        if not lines:
            fail(f"{path}: no envelope in it (one JSON envelope per line)", 2)
    found = []
    for number, line in lines:
        try:
            found.append((number, decode_envelope(line)))
        except EnvelopeError as exc:
            where = f"line {number}: " if jsonl else ""
            fail(f"{where}invalid envelope: {str(exc).splitlines()[0]}", 2)
    return found


def base_side(folder: Path | None, need_analysis: bool) -> Side:
    """The ``--projection`` folder, or the shipped scenario projections."""
    where = folder if folder is not None else package_path(SCENARIO_PROJECTION)
    try:
        enforcement = decode_enforcement(_projection_file(where / "enforcement.json"))
        analysis = (
            decode_analysis(_projection_file(where / "analysis.json")) if need_analysis else None
        )
        policy_set = build_policy_set(enforcement)
    except ProjectionError as exc:
        fail(f"cannot load projection: {exc}")
    about = {"projection": str(where), "release_id": enforcement.release_id}
    return Side(str(where), policy_set, enforcement, analysis, about)


def _projection_file(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise ProjectionError(f"cannot read {path}: {exc.strerror}") from exc


def against_side(folder: Path, trust_root: Path | None, at: str | None) -> Side:
    """The ``--against`` release folder, verified as a gate would (``release verify``)."""
    if trust_root is None:
        fail("--against needs --trust-root FILE to verify the release with", 2)
    from smf_assurance.ops.cli.commands.release import (  # noqa: PLC0415 - only --against verifies: release's module imports the bus client
        verify_release_dir,
    )

    release, _, _ = verify_release_dir(folder, trust_root, None, at)
    enforcement = decode_enforcement(decode_bundle(release.bundle_bytes).enforcement)
    about = {
        "folder": str(folder),
        "release_id": release.release_id,
        "sequence": release.sequence,
        "manifest_hash": release.manifest_hash,
    }
    return Side(str(folder), release.policy_set, enforcement, release.analysis, about)


def _summary(decision: Decision) -> EvalOutcomeJson:
    return EvalOutcomeJson(
        disposition=decision.disposition,
        reason_codes=decision.reason_codes,
        decision_id=decision.decision_id,
    )


def run(args: argparse.Namespace, at_ms: int, print_decision: Callable[[Decision], None]) -> int:
    """``eval`` with any of this module's flags (module docstring)."""
    if args.trust_root and not args.against:
        fail("--trust-root is for --against RELEASE_DIR", 2)
    found = envelopes(args.envelope, args.jsonl)
    base = base_side(args.projection, args.explain)
    if args.against:
        other = against_side(args.against, args.trust_root, args.at)
        return _compare(args, found, base, other, at_ms)
    results = []
    for number, envelope in found:
        decision = base.decide(envelope, at_ms)
        explained = base.explain(decision, envelope) if args.explain else None
        results.append((number, decision, explained))
    if args.json:
        if not args.jsonl:
            ((_, decision, explained),) = results
            emit(EvalExplainedJson(decision=decision, explanation=explained))
            return 0
        emit(
            EvalLinesJson(
                results=tuple(
                    EvalLineJson(line=n, decision=d, explanation=x) for n, d, x in results
                )
            )
        )
        return 0
    if not args.jsonl:
        ((_, decision, explained),) = results
        print_decision(decision)
        _say_explanation(explained)
        return 0
    table(
        ("line", "disposition", "reason codes", "rules", "decision id"),
        [(n, d.disposition, d.reason_codes, d.rule_ids, d.decision_id) for n, d, _ in results],
    )
    for number, _, explained in results:
        if explained is not None:
            say("")
            say(f"line {number}:")
            print_explanation(explained)
    return 0


def _say_explanation(explanation: Explanation | None) -> None:
    if explanation is not None:
        say("")
        print_explanation(explanation)


def _compare(
    args: argparse.Namespace,
    found: Sequence[tuple[int, OperationEnvelope]],
    base: Side,
    other: Side,
    at_ms: int,
) -> int:
    """Each envelope under both; what differs and the from -> to counts."""
    rows = []
    moves: Counter[tuple[Disposition, Disposition]] = Counter()
    for number, envelope in found:
        old, new = base.decide(envelope, at_ms), other.decide(envelope, at_ms)
        changed = (old.disposition, old.reason_codes) != (new.disposition, new.reason_codes)
        moves[(old.disposition, new.disposition)] += 1
        explained = (
            (base.explain(old, envelope), other.explain(new, envelope)) if args.explain else None
        )
        rows.append((number, envelope, old, new, changed, explained))
    counts = [{"from": a, "to": b, "count": n} for (a, b), n in sorted(moves.items())]
    changed_lines = [row[0] for row in rows if row[4]]
    if args.json:
        emit(
            EvalAgainstJson(
                base=msgspec.convert(base.about, EvalSideJson),
                against=msgspec.convert(other.about, EvalSideJson),
                results=tuple(
                    EvalComparedJson(
                        line=number,
                        operation_hash=old.operation_hash,
                        base=_summary(old),
                        against=_summary(new),
                        changed=changed,
                        explanations=None
                        if explained is None
                        else EvalExplanationsJson(base=explained[0], against=explained[1]),
                    )
                    for number, _, old, new, changed, explained in rows
                ),
                counts=tuple(
                    EvalMoveJson(from_=a, to=b, count=n) for (a, b), n in sorted(moves.items())
                ),
                total=len(rows),
                changed=len(changed_lines),
            )
        )
        return 0
    table(
        ("line", "base", "base reasons", "against", "against reasons", "changed"),
        [
            (n, old.disposition, old.reason_codes, new.disposition, new.reason_codes, changed)
            for n, _, old, new, changed, _ in rows
        ],
    )
    say("")
    table(("from", "to", "envelopes"), [(c["from"], c["to"], c["count"]) for c in counts])
    say("")
    say(
        f"{len(changed_lines)} of {len(rows)} envelopes decide differently under "
        f"{other.about['release_id']} (seq {other.about['sequence']}) than under "
        f"{base.about['release_id']}"
    )
    for number, _, _, _, changed, explained in rows:
        if explained is not None and changed:
            for label, side in (("base", explained[0]), ("against", explained[1])):
                say("")
                say(f"line {number}, {label}:")
                print_explanation(side)
    return 0
