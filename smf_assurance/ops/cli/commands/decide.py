"""``compile`` and ``eval``: build projections and decide one envelope offline."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import msgspec

from smf_assurance.core.decision import Decision
from smf_assurance.core.evaluator import evaluate
from smf_assurance.core.projection import ProjectionError
from smf_assurance.governance.compiler import CompileError, compile_corpus, write_release
from smf_assurance.governance.projections import load_policy_set
from smf_assurance.ops.cli.cli_json import CompileJson, EvalJson
from smf_assurance.ops.cli.commands import eval_many
from smf_assurance.ops.cli.output import emit, fail, format_instant, parse_instant, table
from smf_assurance.subjects.clock import wall_clock_ms
from smf_assurance.subjects.envelope import EnvelopeError, decode_envelope


def run_compile(args: argparse.Namespace) -> int:
    try:
        compiled = compile_corpus(args.corpus)
        written = write_release(compiled, args.out)
    except CompileError as exc:
        fail(f"compile failed: {exc}")
    files = compiled.files()
    if args.json:
        paths = {name: str(path) for name, path in written.items()}
        emit(CompileJson(recipe_id=compiled.recipe_id, files=paths))
    else:
        rows = [(name, str(path), len(files[name])) for name, path in written.items()]
        table(("file", "path", "bytes"), rows)
    return 0


def run_eval(args: argparse.Namespace) -> int:
    at_ms = parse_instant(args.at) if args.at else wall_clock_ms()
    if eval_many.wanted(args):
        return eval_many.run(args, at_ms, print_decision)
    try:
        data = sys.stdin.buffer.read() if args.envelope == "-" else Path(args.envelope).read_bytes()
    except OSError as exc:
        fail(f"cannot read {args.envelope}: {exc.strerror}", 2)
    try:
        envelope = decode_envelope(data)
    except EnvelopeError as exc:
        fail(f"invalid envelope: {str(exc).splitlines()[0]}", 2)
    try:
        policy_set = load_policy_set(args.projection)
    except ProjectionError as exc:
        fail(f"cannot load projection: {exc}")
    decision = evaluate(envelope, policy_set, at_ms=at_ms)
    if args.json:
        emit(msgspec.convert(msgspec.to_builtins(decision), type=EvalJson))
    else:
        print_decision(decision)
    return 0


def print_decision(decision: Decision) -> None:
    req = decision.requirements
    rows = [
        ("disposition", decision.disposition),
        ("reason codes", ", ".join(decision.reason_codes)),
        ("rules", ", ".join(decision.rule_ids) or "-"),
        ("approvals", f"{req.approval_count} by {', '.join(req.required_roles) or '-'}"),
        ("approval ttl", f"{req.ttl_seconds} s"),
        ("exact action / one shot", f"{req.exact_action_binding} / {req.one_shot}"),
        ("operation hash", decision.operation_hash),
        ("decision id", decision.decision_id),
        ("release", f"{decision.release_id} (seq {decision.release_sequence})"),
        ("evaluated at", format_instant(decision.evaluated_at_ms)),
    ]
    table(("field", "value"), rows)
