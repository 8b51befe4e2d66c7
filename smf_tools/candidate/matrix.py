"""The evidence matrix of one candidate: each claim, its tests' results at one SHA.

For each claim: its tests and their results at this SHA, conformance tests
against which pinned runtime versions, and the review status; a claim whose
tests are missing, skipped or failing is open, never green. Output: Markdown,
JSON, and a DSSE envelope signed by a release key, all naming the SHA.

A row is ``green`` only when every one of these holds, and ``open`` with the
reasons otherwise (fail closed: an unknown is a reason, never a pass):

- the claim has at least one test carrying its marker at this SHA;
- every such test ran and passed in a report bound to this SHA and tree
  (:mod:`smf_tools.candidate.junit`): missing, skipped, failed and
  errored tests each keep the row open;
- a conformance test's runtime pin is known at this SHA;
- a ``packaging`` claim also needs the artifacts built from this commit.

The review status is ``not reviewed`` here: signed reviews bound to the SHA are
judged by ``candidate status``, which reads
:data:`SCHEMA`, ``sha``, ``tree`` and each claim's ``id``, ``family``,
``tests``, ``results`` and ``state`` from the JSON: keep those names.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Final, Literal

import msgspec

from smf_assurance.subjects.canonical import canonical_bytes
from smf_assurance.subjects.dsse import (
    decode_envelope,
    encode_envelope,
    open_struct,
    sign_struct,
)
from smf_assurance.subjects.keys import SigningKey, VerifyKey
from smf_tools.candidate.claims import Claim
from smf_tools.candidate.junit import Outcome, outcome_of

SCHEMA: Final = "smf.candidate/1"
PAYLOAD_CANDIDATE: Final = "application/vnd.smf.candidate+json;v=1"
"""The DSSE payload type of a signed matrix: inside the PAE, so a release key's
signature over a candidate is never read as a release manifest, nor one as the other."""

NOT_REVIEWED: Final = "not reviewed"

RUNTIME_PINS: Final = (
    ("hermes-agent", "hermes", "smf_assurance/ops/runtimes/hermes_env.py", "HERMES_VERSION"),
    ("openclaw", "openclaw", "smf_assurance/ops/runtimes/provision.py", "OPENCLAW_PIN"),
)
"""(runtime, the word in a conformance test file's name, where its pin is declared,
the constant): a test file named after a runtime drives the pinned build of it."""

State = Literal["green", "open"]
DistState = Literal["built", "no-target", "skipped"]
"""``make dist`` ran; the commit has no ``dist`` target; ``--no-dist`` was asked."""


class TestResult(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    test: str
    outcome: Outcome


class Row(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One claim at one commit."""

    sha: str
    id: str
    family: str
    sentence: str
    not_proven: str
    covers: tuple[str, ...]
    tests: tuple[str, ...]
    results: tuple[TestResult, ...]
    runtimes: dict[str, str]
    """Runtime -> the pinned version its conformance tests ran against at this SHA."""
    review: str
    state: State
    open_because: tuple[str, ...]


class Artifact(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    name: str
    sha256: str
    size: int


class SuiteRun(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Where the results came from: ``clone`` (``make test`` in a fresh clone, and its
    exit status) or ``file`` (``--junit``, exit unknown), the report's digest, and its
    totals beside ``collected``: the tests the commit's clone collects, counted by the
    build itself (``pytest --collect-only``), never read from the report, and
    ``modules_from_clone``: how many of our modules that collection imported, every one
    from the clone (the build refuses one found elsewhere)."""

    source: Literal["clone", "file"]
    junit_sha256: str
    exit_status: int | None
    collected: int
    modules_from_clone: int
    ran: int
    passed: int
    failed: int
    errors: int
    skipped: int


class Candidate(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    schema: Literal["smf.candidate/1"]
    sha: str
    tree: str
    suite: SuiteRun
    dist: DistState
    artifacts: tuple[Artifact, ...]
    runtimes: dict[str, str]
    claims: tuple[Row, ...]


def runtime_pins(root: Path) -> dict[str, str]:
    """The runtime versions pinned at this commit, read from the source (not imported:
    the running code may be of another commit). A pin not found is left out."""
    pins: dict[str, str] = {}
    for runtime, _, file, constant in RUNTIME_PINS:
        try:
            tree = ast.parse((root / file).read_text(encoding="utf-8"))
        except (OSError, SyntaxError, UnicodeDecodeError):
            continue
        for node in tree.body:
            target = node.target if isinstance(node, ast.AnnAssign) else None
            if (
                isinstance(target, ast.Name)
                and target.id == constant
                and isinstance(node, ast.AnnAssign)
                and isinstance(node.value, ast.Constant)
                and isinstance(node.value.value, str)
            ):
                pins[runtime] = node.value.value
    return pins


def row_of(
    claim: Claim,
    sha: str,
    tests: Sequence[str],
    results: Mapping[tuple[str, str], list[Outcome]],
    pins: Mapping[str, str],
    dist: DistState,
) -> Row:
    """The claim's row; ``open`` with every reason found, ``green`` only with none."""
    outcomes = tuple(TestResult(test=t, outcome=outcome_of(t, results)) for t in tests)
    because: list[str] = []
    if not tests:
        because.append("no test carries its marker")
    because.extend(f"{r.test} {r.outcome}" for r in outcomes if r.outcome != "passed")
    runtimes: dict[str, str] = {}
    for runtime, word, _, _ in RUNTIME_PINS:
        if any(word in Path(t.partition("::")[0]).name for t in tests):
            if runtime in pins:
                runtimes[runtime] = pins[runtime]
            else:
                because.append(f"no {runtime} pin at this commit")
    if claim.family == "packaging" and dist != "built":
        because.append(f"no artifacts built from this commit (dist {dist})")
    return Row(
        sha=sha,
        id=claim.id,
        family=claim.family,
        sentence=claim.sentence,
        not_proven=claim.not_proven,
        covers=claim.covers,
        tests=tuple(tests),
        results=outcomes,
        runtimes=runtimes,
        review=NOT_REVIEWED,
        state="open" if because else "green",
        open_because=tuple(because),
    )


def encode_candidate(candidate: Candidate) -> bytes:
    """The JSON file's bytes: the same canonical bytes the envelope signs."""
    return canonical_bytes(msgspec.to_builtins(candidate)) + b"\n"


def sign_candidate(candidate: Candidate, key: SigningKey) -> bytes:
    return encode_envelope(sign_struct(PAYLOAD_CANDIDATE, candidate, [key])) + b"\n"


def open_candidate(data: bytes, trusted: Mapping[str, VerifyKey]) -> Candidate:
    """The matrix a trusted release key signed; any other is refused
    (``smf_assurance.subjects.dsse``'s errors, each named after its attack)."""
    envelope = decode_envelope(data.strip())
    candidate, _ = open_struct(envelope, trusted, Candidate, PAYLOAD_CANDIDATE)
    return candidate


def markdown(candidate: Candidate) -> str:
    """The matrix for people: the commit, how it was tested and built, one row per claim."""
    green = sum(row.state == "green" for row in candidate.claims)
    lines = [
        f"# Candidate {candidate.sha}",
        "",
        f"- commit: `{candidate.sha}`, tree `{candidate.tree}`",
        f"- suite: {candidate.suite.source}, JUnit sha256 `{candidate.suite.junit_sha256}`"
        + (
            f", exit status {candidate.suite.exit_status}"
            if candidate.suite.exit_status is not None
            else ""
        ),
        f"- tests: {candidate.suite.collected} collected at this commit, "
        f"{candidate.suite.ran} in the report: {candidate.suite.passed} passed, "
        f"{candidate.suite.failed} failed, {candidate.suite.errors} errors, "
        f"{candidate.suite.skipped} skipped",
        f"- imports: the count's collection imported {candidate.suite.modules_from_clone} "
        "modules of ours, each from the clone",
        f"- runtimes pinned: {_pairs(candidate.runtimes)}",
        f"- artifacts ({candidate.dist}): "
        + (", ".join(f"`{a.name}` sha256 `{a.sha256}`" for a in candidate.artifacts) or "none"),
        f"- claims: {green} green, {len(candidate.claims) - green} open",
        "",
        "| sha | claim | family | state | tests | runtimes | review | open because |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in candidate.claims:
        tests = "<br>".join(f"`{r.test}` {r.outcome}" for r in row.results) or "-"
        lines.append(
            "| "
            + " | ".join(
                _cell(c)
                for c in (
                    row.sha,
                    row.id,
                    row.family,
                    row.state,
                    tests,
                    _pairs(row.runtimes),
                    row.review,
                    "; ".join(row.open_because) or "-",
                )
            )
            + " |"
        )
    return "\n".join(lines) + "\n"


def _cell(text: str) -> str:
    """A table cell: a ``|`` in a sentence or a test id must not end the cell."""
    return text.replace("|", "\\|")


def _pairs(values: Mapping[str, str]) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(values.items())) or "-"


def decode_candidate(data: bytes) -> Candidate:
    """A ``candidate.json`` as written, NOT verified (:func:`open_candidate` verifies the
    envelope): for a reader holding the file beside its signed envelope."""
    return msgspec.json.decode(data, type=Candidate)
