"""``smf.swarm.analyze`` over a real nats-server, separation from enforcement, and the CLI.

A Swarm run publishes nothing on
``smf.propose``, ``smf.approval.*`` or ``smf.execute.*``, and the gate's
decisions on the scenario envelopes are byte-identical whether Swarm ran or
not (in this process, while a Swarm request is in flight, and in a fresh
interpreter where ``swarm`` was never imported).
"""

from __future__ import annotations

import ast
import asyncio
import datetime as dt
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import msgspec
import nats
import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg

from smf_assurance.core.evaluator import evaluate
from smf_assurance.governance.compiler import compile_corpus
from smf_assurance.governance.projections import (
    SCENARIO_CORPUS,
    SCENARIO_ENVELOPES,
    SCENARIO_PROJECTION,
    load_policy_set,
    package_path,
)
from smf_assurance.governance.releases import read_release_dir, write_release_dir, write_trust_root
from smf_assurance.governance.scenarios_catalog import load_scenarios
from smf_assurance.ops.cli.main import main
from smf_assurance.pipeline.service import StageRefusal
from smf_assurance.subjects.canonical import canonical_bytes
from smf_assurance.subjects.keys import generate_signing_key, write_private_key
from smf_assurance.subjects.names import SWARM_ANALYZE
from smf_assurance.swarm.report import decode_report, report_bytes, verified_faithfulness
from smf_assurance.swarm.selector import AnalysisRelease, decode_matter, load_analysis_release
from smf_assurance.swarm.service import (
    REQUEST_SCHEMA,
    analyze,
    request_analysis,
    start_swarm_service,
)
from tests.support import release_helpers
from tests.support.bus_helpers import caught_up
from tests.support.release_helpers import scenario_corpus

ROOT = Path(__file__).resolve().parents[2]
MATTER_FILE = package_path(SCENARIO_ENVELOPES) / "swarm-matter.json"
MATTER = decode_matter(MATTER_FILE.read_bytes())
GATE_AT_MS = int(dt.datetime(2026, 11, 29, 10, tzinfo=dt.UTC).timestamp() * 1000)
TEST_CORPUS = Path(__file__).parents[1] / "data" / "swarm" / "corpus"


def shipped_release() -> AnalysisRelease:
    folder = package_path(SCENARIO_PROJECTION)
    index = json.loads((folder / "index.json").read_bytes())
    return load_analysis_release(
        (folder / "analysis.json").read_bytes(), index["analysis_projection_id"]
    )


RELEASE = shipped_release()
QUESTION = MATTER.question or ""
AT_MS = MATTER.at_ms or 0


# --- the service ----------------------------------------------------------------------------


async def test_bus_reply_is_the_in_process_report(nc: Client) -> None:
    service, _ = await start_swarm_service(nc, RELEASE)
    try:
        report = await request_analysis(nc, QUESTION, MATTER.facts, AT_MS, timeout=10)
        info = json.loads((await nc.request("$SRV.INFO.smf-swarm", b"", timeout=2)).data)
    finally:
        await service.stop()
    local = await analyze(QUESTION, MATTER.facts, AT_MS, RELEASE)
    assert report_bytes(report) == report_bytes(local)
    assert [e["subject"] for e in info["endpoints"]] == [SWARM_ANALYZE]
    assert info["endpoints"][0]["queue_group"] == "smf-swarm"


async def test_scenario_matter_report_shows_every_outcome() -> None:
    report = await analyze(QUESTION, MATTER.facts, AT_MS, RELEASE.projection)
    sets = report.selection
    assert sets.selected
    assert sets.unresolved
    assert sets.excluded
    assert any(c.label == "rule_backed" for c in report.accepted)
    assert any(c.label == "model_analysis" and not c.rules for c in report.accepted)
    assert report.rejected
    stress = next(p for p in report.personas if p.persona == "citation-stress-test")
    assert stress.deliberately_invalid
    assert stress.label.startswith("Citation stress test (deliberately invalid")
    assert report.semantic_faithfulness.status == "not reviewed"


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        (b"not json", "swarm_bad_request"),
        (
            msgspec.json.encode({"schema": REQUEST_SCHEMA, "question": "Q?", "facts": {}}),
            "swarm_bad_request",
        ),
        (
            msgspec.json.encode(
                {"schema": REQUEST_SCHEMA, "question": " ", "facts": {}, "at_ms": 1}
            ),
            "swarm_bad_request",
        ),
        (
            msgspec.json.encode(
                {
                    "schema": REQUEST_SCHEMA,
                    "question": "Q?",
                    "facts": {"data.clasification": "x"},
                    "at_ms": 1,
                }
            ),
            "swarm_invalid_facts",
        ),
    ],
    ids=["not-json", "no-time", "blank-question", "unknown-fact"],
)
async def test_bad_requests_are_refused_with_a_reason(
    nc: Client, payload: bytes, reason: str
) -> None:
    service, _ = await start_swarm_service(nc, RELEASE)
    try:
        msg = await nc.request(SWARM_ANALYZE, payload, timeout=5)
    finally:
        await service.stop()
    assert msg.headers is not None
    assert msg.headers["Nats-Service-Error"] == reason
    assert msg.headers["Nats-Service-Error-Code"] == "400"


async def test_client_raises_the_refusal(nc: Client) -> None:
    service, _ = await start_swarm_service(nc, RELEASE)
    try:
        with pytest.raises(StageRefusal) as info:
            await request_analysis(nc, QUESTION, {"effects.egress": "yes"}, AT_MS, timeout=5)
    finally:
        await service.stop()
    assert info.value.reason_code == "swarm_invalid_facts"


# --- separation from enforcement --------------------------------------------------------------

FORBIDDEN = ("smf.propose", "smf.approval.", "smf.execute.")
MARK_SUBJECT = "smf.test.mark"


async def test_swarm_run_publishes_nothing_on_enforcement_subjects(
    nats_url: str, nc: Client
) -> None:
    watcher = await nats.connect(nats_url)
    received: list[Msg] = []

    async def record(msg: Msg) -> None:
        received.append(msg)

    await watcher.subscribe(">", cb=record)
    await watcher.flush()
    service, _ = await start_swarm_service(nc, RELEASE)
    try:
        # The run's traffic all goes through ``nc``: marks from it both prove that
        # the watcher sees ``nc`` and, after the service stopped (it sends nothing
        # more), that everything the run published has reached the watcher.
        await caught_up(nc, MARK_SUBJECT, lambda: (m.data for m in received))
        await request_analysis(nc, QUESTION, MATTER.facts, AT_MS, timeout=10)
        await analyze(QUESTION, MATTER.facts, AT_MS, RELEASE)
    finally:
        await service.stop()
    try:
        await caught_up(nc, MARK_SUBJECT, lambda: (m.data for m in received))
    finally:
        await watcher.drain()
    seen = [m.subject for m in received if m.subject != MARK_SUBJECT]
    assert SWARM_ANALYZE in seen  # the watcher does see the run's traffic
    assert [s for s in seen if s == "smf.propose" or s.startswith(FORBIDDEN)] == []
    assert all(s == SWARM_ANALYZE or s.startswith("_INBOX.") for s in seen), seen


def gate_decisions() -> list[bytes]:
    policy_set = load_policy_set()
    return [
        canonical_bytes(msgspec.to_builtins(evaluate(s.envelope, policy_set, at_ms=GATE_AT_MS)))
        for s in load_scenarios()
    ]


FRESH_GATE = f"""
import sys
import msgspec
from smf_assurance.governance.projections import load_policy_set
from smf_assurance.governance.scenarios_catalog import load_scenarios
from smf_assurance.core.evaluator import evaluate
from smf_assurance.subjects.canonical import canonical_bytes
policy_set = load_policy_set()
out = [
    canonical_bytes(msgspec.to_builtins(evaluate(s.envelope, policy_set, at_ms={GATE_AT_MS})))
    for s in load_scenarios()
]
assert not [m for m in sys.modules if m.startswith("smf_assurance.swarm")], "swarm loaded"
sys.stdout.buffer.write(b"\\n".join(out))
"""


async def test_gate_decisions_are_byte_identical_with_or_without_swarm(nc: Client) -> None:
    before = gate_decisions()
    assert len(before) >= 4
    service, _ = await start_swarm_service(nc, RELEASE)
    try:
        in_flight = asyncio.create_task(
            request_analysis(nc, QUESTION, MATTER.facts, AT_MS, timeout=10)
        )
        during = gate_decisions()
        await in_flight
        await analyze(QUESTION, MATTER.facts, AT_MS, RELEASE)
    finally:
        await service.stop()
    after = gate_decisions()
    fresh = subprocess.run(
        [sys.executable, "-c", FRESH_GATE], cwd=ROOT, capture_output=True, check=True, timeout=60
    )
    assert before == during == after
    assert fresh.stdout.split(b"\n") == before


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_layering_swarm_and_gate_do_not_import_each_other() -> None:
    for path in sorted((ROOT / "smf_assurance" / "swarm").glob("*.py")):
        allowed = {"smf_assurance.pipeline.service"} if path.name == "service.py" else set()
        for name in _imports(path) - allowed:
            assert not name.startswith(
                (
                    "smf_assurance.ops",
                    "smf_assurance.pipeline.chain",
                    "smf_assurance.pipeline.desks",
                    "smf_assurance.pipeline.followers",
                    "smf_assurance.pipeline.stores",
                    "smf_assurance.adapters",
                )
            ), f"{path.name} imports {name}"
    for package in ("pipeline", "subjects", "adapters"):
        for path in sorted((ROOT / "smf_assurance" / package).rglob("*.py")):
            assert not any(n.startswith("smf_assurance.swarm") for n in _imports(path)), path


# --- the command line ---------------------------------------------------------------------------


def run_cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_cli_analyze_json_is_deterministic_and_markdown_is_readable(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["swarm", "analyze", "--facts", str(MATTER_FILE), "--json"]
    code, first, _ = run_cli([*argv, "--out", str(tmp_path / "r.json")], capsys)
    assert code == 0
    assert run_cli(argv, capsys)[1] == first
    report = decode_report(first.encode())
    assert (report.question, report.at_ms) == (QUESTION, AT_MS)
    assert (tmp_path / "r.json").read_text() == first
    code, _, err = run_cli([*argv, "--out", str(tmp_path / "r.json")], capsys)
    assert code == 1
    assert "refusing to overwrite" in err
    code, _, err = run_cli([*argv, "--out", str(tmp_path / "no" / "r.json")], capsys)
    assert code == 1
    assert "cannot write" in err
    code, text, _ = run_cli(["swarm", "analyze", "--facts", str(MATTER_FILE)], capsys)
    assert code == 0
    assert text.startswith("# Swarm legal-analysis report")
    assert "## Model analysis (not rule-backed)" in text


def _keys_reversed(value: Any) -> Any:
    """The same JSON value with every object's keys in reverse order; lists keep
    theirs (a predicate's operands are written text, hashed as written)."""
    if isinstance(value, dict):
        return {k: _keys_reversed(value[k]) for k in reversed(list(value))}
    if isinstance(value, list):
        return [_keys_reversed(item) for item in value]
    return value


def _reordered(value: Any) -> Any:
    """A corpus file or matter as a careless editor may leave it: its records in
    reverse order (a file that is a list of them) and every object's keys reversed."""
    value = _keys_reversed(value)
    return value[::-1] if isinstance(value, list) else value


def _analyse_in_a_fresh_interpreter(work: Path, corpus: Path, facts: Path, hash_seed: str) -> Path:
    """Compile ``corpus`` and analyse ``facts`` with the command line, in two new
    interpreters started with ``PYTHONHASHSEED=hash_seed``; returns the output folder."""
    env = dict(os.environ, PYTHONHASHSEED=hash_seed, NO_COLOR="1")
    env.pop("SMF_NATS_URL", None)
    prog = (sys.executable, "-m", "smf_assurance.ops.cli.main")
    work.mkdir()
    for argv in (
        ["compile", "--corpus", str(corpus), "--out", str(work / "projection")],
        [
            "swarm",
            "analyze",
            "--facts",
            str(facts),
            "--projection",
            str(work / "projection"),
            "--out",
            str(work / "report.json"),
            "--json",
        ],
    ):
        done = subprocess.run(
            [*prog, *argv], env=env, capture_output=True, timeout=120, check=False
        )
        assert done.returncode == 0, done.stderr.decode()
    return work


@pytest.mark.claim("swarm-traceability.deterministic-report")
@pytest.mark.claim("projection-integrity.reproducible")
def test_the_report_is_the_same_bytes_across_hash_seeds_and_input_orders(tmp_path: Path) -> None:
    """Rule selection and the report are deterministic bytes, not only within one
    interpreter: a second interpreter with another string-hash seed, given the
    corpus's records in reverse order and every object's keys reversed, compiles
    the same projection bytes and writes the same report bytes. A set or dict
    iterated in hash order anywhere on the path would show here."""
    shipped = package_path(SCENARIO_CORPUS)
    reordered = tmp_path / "reordered-corpus"
    reordered.mkdir()
    for source in sorted(shipped.iterdir()):
        (reordered / source.name).write_text(json.dumps(_reordered(json.loads(source.read_text()))))
    reordered_facts = tmp_path / "reordered-matter.json"
    reordered_facts.write_text(json.dumps(_reordered(json.loads(MATTER_FILE.read_text()))))
    assert reordered_facts.read_bytes() != MATTER_FILE.read_bytes()
    assert (reordered / "rules.json").read_bytes() != (shipped / "rules.json").read_bytes()

    first = _analyse_in_a_fresh_interpreter(tmp_path / "a", shipped, MATTER_FILE, "0")
    second = _analyse_in_a_fresh_interpreter(
        tmp_path / "b", reordered, reordered_facts, "2718281828"
    )

    names = sorted(p.name for p in (first / "projection").iterdir())
    assert names == sorted(p.name for p in (second / "projection").iterdir())
    assert "analysis.json" in names
    for name in names:
        assert (first / "projection" / name).read_bytes() == (
            second / "projection" / name
        ).read_bytes(), name
    report = (first / "report.json").read_bytes()
    assert report == (second / "report.json").read_bytes()
    # Equal bytes of an empty analysis would say little: this one selects, leaves
    # rules unresolved or excluded, and judges claims both ways.
    decoded = decode_report(report.rstrip(b"\n"))
    assert decoded.selection.selected
    assert decoded.selection.unresolved or decoded.selection.excluded
    assert decoded.accepted
    assert decoded.rejected
    assert report.rstrip(b"\n") == report_bytes(decoded)


def test_cli_analyze_question_and_time_overrides(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    facts = tmp_path / "facts.json"
    facts.write_text(json.dumps({"capability": "document.read", "effects.egress": False}))
    code, out, _ = run_cli(
        [
            "swarm",
            "analyze",
            "--facts",
            str(facts),
            "--question",
            "Can I read it?",
            "--at",
            "2026-01-01T00:00:00Z",
            "--json",
        ],
        capsys,
    )
    assert code == 0
    report = json.loads(out)
    assert report["question"] == "Can I read it?"
    assert report["at_ms"] == int(dt.datetime(2026, 1, 1, tzinfo=dt.UTC).timestamp() * 1000)
    code, out, _ = run_cli(
        ["swarm", "analyze", "--facts", str(facts), "--question", "Now?", "--json"], capsys
    )
    assert code == 0
    assert json.loads(out)["at_ms"] > report["at_ms"]


@pytest.mark.parametrize(
    ("content", "extra", "message"),
    [
        ({"capability": "document.read"}, [], "no question"),
        ({"data.clasification": "public"}, ["--question", "Q?"], "unknown fact path"),
        (None, ["--question", "Q?"], "cannot read"),
        (
            {"capability": "document.read"},
            ["--question", " ", "--at", "2026-01-01T00:00:00Z"],
            "non-empty",
        ),
        (
            {"capability": "document.read"},
            ["--question", "Q?", "--personas", "openai"],
            "--base-url",
        ),
    ],
    ids=["no-question", "unknown-fact", "missing-file", "blank-question", "openai-no-url"],
)
def test_cli_analyze_input_errors_exit_2(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    content: Any,
    extra: list[str],
    message: str,
) -> None:
    monkeypatch.delenv("SMF_SWARM_BASE_URL", raising=False)
    facts = tmp_path / "facts.json"
    if content is not None:
        facts.write_text(json.dumps(content))
    code, _, err = run_cli(["swarm", "analyze", "--facts", str(facts), *extra], capsys)
    assert code == 2
    assert message in err


def test_cli_analyze_refuses_a_projection_that_does_not_match_its_index(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "projection"
    folder.mkdir()
    shipped = package_path(SCENARIO_PROJECTION)
    (folder / "analysis.json").write_bytes(compile_corpus(TEST_CORPUS).files()["analysis.json"])
    (folder / "index.json").write_bytes((shipped / "index.json").read_bytes())
    argv = ["swarm", "analyze", "--facts", str(MATTER_FILE), "--projection", str(folder)]
    code, _, err = run_cli(argv, capsys)
    assert code == 1
    assert "its index names" in err
    (folder / "index.json").write_text("[]")
    assert run_cli(argv, capsys)[0] == 1
    assert run_cli([*argv[:-1], str(tmp_path / "missing")], capsys)[0] == 1


# --- swarm review ------------------------------------------------------------------------------


@pytest.fixture
def report_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    path = tmp_path / "report.json"
    code = main(["swarm", "analyze", "--facts", str(MATTER_FILE), "--out", str(path), "--json"])
    capsys.readouterr()
    assert code == 0
    return path


def test_cli_review_records_a_signed_verdict(
    tmp_path: Path, report_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    key = generate_signing_key()
    key_file = tmp_path / "rita.key"
    write_private_key(key_file, key, "reviewer-rita")
    review = [
        "swarm",
        "review",
        "--report",
        str(report_file),
        "--reviewer",
        "reviewer-rita",
        "--key",
        str(key_file),
        "--verdict",
        "partially_faithful",
        "--note",
        "Checked each rule-backed claim against its rule statement.",
    ]
    code, out, _ = run_cli(review, capsys)
    assert code == 0
    assert "partially_faithful" in out
    reviewed = decode_report((tmp_path / "report.reviewed.json").read_bytes())
    faith = verified_faithfulness(reviewed, {key.key_id: key.verify_key})
    assert (faith.status, faith.reviewer, faith.key_id) == (
        "partially_faithful",
        "reviewer-rita",
        key.key_id,
    )
    original = decode_report(report_file.read_bytes())
    assert reviewed.report_id == original.report_id
    # A second review of the reviewed report, and an existing output file, are refused.
    again = [*review[:3], str(tmp_path / "report.reviewed.json"), *review[4:]]
    code, _, err = run_cli([*again, "--json"], capsys)
    assert code == 1, err
    assert "already reviewed" in err
    code, _, err = run_cli(review, capsys)
    assert code == 1, err
    assert "refusing to overwrite" in err
    code, out, _ = run_cli([*review, "--out", str(tmp_path / "second.json"), "--json"], capsys)
    assert code == 0
    assert json.loads(out)["semantic_faithfulness"]["status"] == "partially_faithful"


def test_cli_review_refusals(
    tmp_path: Path, report_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    key_file = tmp_path / "rita.key"
    write_private_key(key_file, generate_signing_key(), "reviewer-rita")
    base = ["swarm", "review", "--verdict", "faithful", "--note", "ok", "--key", str(key_file)]
    # Someone else's key.
    code, _, err = run_cli(
        [*base, "--report", str(report_file), "--reviewer", "reviewer-bob"], capsys
    )
    assert code == 1, err
    assert "not to reviewer" in err
    # A report built from another release than the loaded one.
    other = tmp_path / "other-projection"
    assert main(["compile", "--corpus", str(TEST_CORPUS), "--out", str(other)]) == 0
    capsys.readouterr()
    code, _, err = run_cli(
        [
            *base,
            "--report",
            str(report_file),
            "--reviewer",
            "reviewer-rita",
            "--projection",
            str(other),
        ],
        capsys,
    )
    assert code == 1, err
    assert "refused: report is for release" in err
    # A tampered report.
    value = json.loads(report_file.read_text())
    value["accepted"][0]["text"] = "Anything goes."
    tampered = tmp_path / "tampered.json"
    tampered.write_text(json.dumps(value))
    code, _, err = run_cli(
        [*base, "--report", str(tampered), "--reviewer", "reviewer-rita"], capsys
    )
    assert code == 1, err
    assert "does not match its report_id" in err
    # Unreadable inputs.
    code, _, _ = run_cli(
        [*base, "--report", str(tmp_path / "none.json"), "--reviewer", "reviewer-rita"], capsys
    )
    assert code == 2
    bad_key = [*base[:-1], str(tmp_path / "none.key")]
    code, _, err = run_cli(
        [*bad_key, "--report", str(report_file), "--reviewer", "reviewer-rita"], capsys
    )
    assert code == 1, err
    assert "cannot read key file" in err


async def test_report_round_trips_exactly_through_json() -> None:
    report = await analyze(QUESTION, MATTER.facts, AT_MS, RELEASE)
    assert decode_report(report_bytes(report)) == report


# --- verified releases: verification in every consumer, before use -----------------


@pytest.fixture
def signed_release(tmp_path: Path) -> tuple[Path, Path]:
    """A release of the shipped scenario corpus, signed by two of three trusted keys."""
    corpus = scenario_corpus(
        tmp_path / "corpus", release_id="rel-swarm-verified", legal_hold_reason="held"
    )
    bundle = release_helpers.build(corpus, now_ms=time.time_ns() // 1_000_000)
    folder = tmp_path / "release"
    write_release_dir(bundle, folder)
    root = tmp_path / "trust-root.json"
    write_trust_root(root, release_helpers.root_of(release_helpers.SIGNERS, 2))
    return folder, root


def test_cli_analyze_uses_the_verified_release_and_says_when_a_projection_is_unverified(
    signed_release: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    folder, root = signed_release
    argv = ["swarm", "analyze", "--facts", str(MATTER_FILE), "--json"]
    code, out, err = run_cli([*argv, "--release", str(folder), "--trust-root", str(root)], capsys)
    assert code == 0, err
    report = json.loads(out)
    assert report["release_id"] == "rel-swarm-verified"
    assert "not a verified release" not in err
    code, out, err = run_cli(argv, capsys)
    assert code == 0
    assert json.loads(out)["release_id"] != "rel-swarm-verified"
    assert "is not a verified release" in err


@pytest.mark.parametrize("threat", ["tampered", "under_signed", "expired", "foreign_root"])
def test_cli_analyze_refuses_a_release_a_gate_would_refuse(
    signed_release: tuple[Path, Path],
    tmp_path: Path,
    threat: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    folder, root = signed_release
    bundle = read_release_dir(folder)
    now = time.time_ns() // 1_000_000
    if threat == "tampered":
        analysis = json.loads(bundle.analysis)
        analysis["rules"] = analysis["rules"][:1]
        bundle = release_helpers.swap(bundle, analysis=json.dumps(analysis).encode())
        expected = "release_digest_mismatch"
    elif threat == "under_signed":
        bundle = release_helpers.resign(bundle, release_helpers.SIGNERS[:1])
        expected = "release_below_threshold"
    elif threat == "expired":
        corpus = scenario_corpus(tmp_path / "old", release_id="rel-old", legal_hold_reason="held")
        bundle = release_helpers.build(corpus, now_ms=now - 2 * release_helpers.HOUR, lease_hours=1)
        expected = "release_expired"
    else:
        other = tmp_path / "other-root.json"
        write_trust_root(other, release_helpers.root_of([release_helpers.OUTSIDER], 1))
        root = other
        expected = "release_bad_signature"
    target = tmp_path / f"release-{threat}"
    write_release_dir(bundle, target)
    argv = ["swarm", "analyze", "--facts", str(MATTER_FILE), "--release", str(target)]
    code, out, err = run_cli([*argv, "--trust-root", str(root)], capsys)
    assert code == 1
    assert out == ""
    assert f"release refused ({expected})" in err


@pytest.mark.parametrize(
    "extra",
    [["--release", "R"], ["--trust-root", "T"], ["--state-dir", "S"]],
    ids=["release_without_root", "root_without_release", "state_without_release"],
)
def test_cli_analyze_refuses_half_a_release_source(
    extra: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run_cli(["swarm", "analyze", "--facts", str(MATTER_FILE), *extra], capsys)
    assert code == 2
    assert "--release" in err


def test_cli_review_refuses_a_report_from_another_source_than_the_verified_release(
    signed_release: tuple[Path, Path],
    report_file: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    folder, root = signed_release
    key = generate_signing_key()
    key_file = tmp_path / "rita.key"
    write_private_key(key_file, key, "reviewer-rita")
    review = ["swarm", "review", "--report", str(report_file), "--reviewer", "reviewer-rita"]
    review += ["--key", str(key_file), "--verdict", "faithful", "--note", "checked"]
    code, _, err = run_cli([*review, "--release", str(folder), "--trust-root", str(root)], capsys)
    assert code == 1
    assert "refused" in err
    assert not report_file.with_suffix(".reviewed.json").exists()
