"""``swarm analyze`` and ``swarm review``: Swarm legal analysis on the command line.

``analyze`` builds a report from the analysis projection (the shipped
scenarios by default) for a question and a matter-facts file; Markdown for
people, canonical JSON with ``--json``. Personas are the deterministic
offline set unless ``--personas openai`` names an OpenAI-compatible
endpoint (``--base-url``, ``--model``; key from ``SMF_SWARM_API_KEY``).

Where the rules come from (verification in every consumer, before use):
``--release DIR --trust-root FILE`` verifies a signed release folder
exactly as a gate would (threshold, digests, lease, revocations; rollback and
chain too with ``--state-dir``) and analyses with its analysis projection.
Without ``--release`` the projection folder is unverified: the command says so
on stderr every time, so such a report is never mistaken for one built from
the governed release.

``review`` records a named reviewer's signed semantic-faithfulness verdict
on a report (docs/SWARM.md). It refuses a report whose body does not match
its id, and a report built from another release or projection than the
loaded one: a reviewer must never sign off an analysis against
rules it was not selected from.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from pathlib import Path

import msgspec

from smf_assurance.core.projection import ProjectionError
from smf_assurance.governance.projections import SCENARIO_PROJECTION, package_path
from smf_assurance.ops.cli.cli_json import SwarmReportJson
from smf_assurance.ops.cli.output import (
    Progress,
    emit,
    fail,
    format_instant,
    parse_instant,
    say,
    table,
)
from smf_assurance.ops.cli.parsers.swarm import BASE_URL_ENV, DEFAULT_MODEL, MODEL_ENV
from smf_assurance.subjects.clock import wall_clock_ms
from smf_assurance.subjects.keys import KeyFileError, load_private_key
from smf_assurance.swarm.personas import (
    API_KEY_ENV,
    ChatConfig,
    Persona,
    model_personas,
    offline_personas,
)
from smf_assurance.swarm.report import (
    Report,
    ReportError,
    apply_review,
    check_release,
    decode_report,
    render_markdown,
    report_bytes,
    sign_review,
)
from smf_assurance.swarm.selector import (
    AnalysisRelease,
    FactError,
    MatterError,
    analysis_release,
    decode_matter,
    load_analysis_release,
)
from smf_assurance.swarm.service import analyze


def release_for(args: argparse.Namespace) -> AnalysisRelease:
    """The analysis rules to use: a verified release's, or an unverified folder's, said so."""
    if args.release is None:
        if args.trust_root is not None or args.state_dir is not None:
            fail("--trust-root and --state-dir verify a release: pass --release DIR", 2)
        source = args.projection or package_path(SCENARIO_PROJECTION)
        sys.stderr.write(
            f"note: {source} is not a verified release; "
            "pass --release DIR --trust-root FILE to analyse from the governed release\n"
        )
        return load_release(args.projection)
    if args.trust_root is None:
        fail("--release needs --trust-root FILE", 2)
    from smf_assurance.ops.cli.commands.release import (  # noqa: PLC0415 - only --release verifies: release's module imports the bus client
        verify_release_dir,
    )

    verified, _last, _note = verify_release_dir(args.release, args.trust_root, args.state_dir, None)
    try:
        return analysis_release(verified.analysis)
    except ProjectionError as exc:
        fail(f"cannot load the release's analysis projection: {exc}")


def load_release(directory: Path | None) -> AnalysisRelease:
    """Load ``analysis.json``; when ``index.json`` is there, its projection id must match."""
    folder = directory if directory is not None else package_path(SCENARIO_PROJECTION)
    try:
        data = (folder / "analysis.json").read_bytes()
    except OSError as exc:
        fail(f"cannot read {folder / 'analysis.json'}: {exc.strerror}")
    expected = None
    index_path = folder / "index.json"
    if index_path.exists():
        try:
            expected = json.loads(index_path.read_bytes())["analysis_projection_id"]
        except (OSError, ValueError, KeyError, TypeError):
            fail(f"cannot read the analysis projection id from {index_path}")
    try:
        return load_analysis_release(data, expected)
    except ProjectionError as exc:
        fail(f"cannot load analysis projection: {exc}")


def _personas(args: argparse.Namespace) -> list[Persona]:
    if args.personas == "offline":
        return list(offline_personas())
    base_url = args.base_url or os.environ.get(BASE_URL_ENV)
    if not base_url:
        fail(f"--personas openai needs --base-url or ${BASE_URL_ENV}", 2)
    if args.timeout <= 0:
        fail("--timeout must be positive", 2)
    model = args.model or os.environ.get(MODEL_ENV) or DEFAULT_MODEL
    config = ChatConfig(
        base_url=base_url, model=model, api_key_env=API_KEY_ENV, timeout_s=args.timeout
    )
    return list(model_personas(config))


def _write_new(path: Path, data: bytes) -> None:
    try:
        with path.open("xb") as handle:
            handle.write(data)
    except FileExistsError:
        fail(f"{path} exists; refusing to overwrite it")
    except OSError as exc:
        fail(f"cannot write {path}: {exc.strerror}")


def run_analyze(args: argparse.Namespace) -> int:
    try:
        matter = decode_matter(args.facts.read_bytes())
    except OSError as exc:
        fail(f"cannot read {args.facts}: {exc.strerror}", 2)
    except (FactError, MatterError) as exc:
        fail(f"invalid facts file: {exc}", 2)
    question = args.question or matter.question
    if not question:
        fail("no question: pass --question or put one in the facts file", 2)
    if args.at:
        at_ms = parse_instant(args.at)
    elif matter.at_ms is not None:
        at_ms = matter.at_ms
    else:
        at_ms = wall_clock_ms()
    release = release_for(args)
    personas = _personas(args)
    progress = Progress("swarm personas", len(personas))
    try:
        report = asyncio.run(
            analyze(question, matter.facts, at_ms, release, personas, on_done=progress.update)
        )
    except (FactError, MatterError) as exc:
        fail(str(exc), 2)
    finally:
        progress.close()
    if args.out is not None:
        _write_new(args.out, report_bytes(report) + b"\n")
    if args.json:
        emit(msgspec.convert(msgspec.to_builtins(report), type=SwarmReportJson))
    else:
        say(render_markdown(report).rstrip("\n"))
    refuse_if_nobody_answered(report)
    return 0


def refuse_if_nobody_answered(report: Report) -> None:
    """A report no persona answered analyses nothing, so it exits non-zero.

    The report is still printed and written, so the failures can be read;
    the exit status says that no analysis was made."""
    if report.personas and all(p.status == "failed" for p in report.personas):
        reasons = sorted({p.failure or "unknown" for p in report.personas})
        fail(
            f"every persona failed ({', '.join(reasons)}): no analysis was made; "
            "check --base-url, the model and the server, then run again"
        )


def _load_report(path: Path) -> Report:
    try:
        return decode_report(path.read_bytes())
    except OSError as exc:
        fail(f"cannot read {path}: {exc.strerror}", 2)
    except ReportError as exc:
        fail(f"refused: {exc}")


def run_review(args: argparse.Namespace) -> int:
    report = _load_report(args.report)
    release = release_for(args)
    try:
        check_release(report, release)
        key, principal = load_private_key(args.key)
    except ReportError as exc:
        fail(f"refused: {exc}")
    except KeyFileError as exc:
        fail(str(exc))
    if principal != args.reviewer:
        fail(f"refused: the key belongs to {principal!r}, not to reviewer {args.reviewer!r}")
    at_ms = wall_clock_ms()
    try:
        envelope = sign_review(report, args.reviewer, key, args.verdict, args.note, at_ms)
        reviewed = apply_review(report, envelope, {key.key_id: key.verify_key})
    except ReportError as exc:
        fail(f"refused: {exc}")
    out = args.out or args.report.with_suffix(".reviewed.json")
    _write_new(out, report_bytes(reviewed) + b"\n")
    if args.json:
        emit(msgspec.convert(msgspec.to_builtins(reviewed), type=SwarmReportJson))
    else:
        faith = reviewed.semantic_faithfulness
        rows = [
            ("report", reviewed.report_id),
            ("release", f"{reviewed.release_id} / {reviewed.projection_id}"),
            ("semantic faithfulness", faith.status),
            ("reviewer", f"{faith.reviewer} ({faith.key_id})"),
            ("reviewed at", format_instant(at_ms)),
            ("written to", str(out)),
        ]
        table(("field", "value"), rows)
    return 0
