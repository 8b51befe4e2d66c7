"""The paths a Hermes ``patch`` names, read the way Hermes reads them.

Finding: the adapter's own regex missed ``***Update File:`` (no space),
``*** Move File: free -> held`` and ``*** Delete  File:``, which Hermes's
parser accepts; a patch under legal hold was proposed as ``legal_hold: false``.

Proves, against the pinned Hermes 0.19.0 (its own venv, no network): for five
well-formed patches and a few hundred generated texts (derandomized; header
spellings, moves, Begin/End markers in odd places, CRLF, hunks that apply and
hunks that do not), every file that Hermes's real ``patch`` tool changed on disk
is among the targets the adapter names, and every path Hermes's parser reports
is too; the well-formed ones and the three variants of the finding apply and are
named. Does not prove: the gate's decision on them (the
conformance case in tests/runtimes/test_hermes_conformance.py shows that), or any other
Hermes version.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.hermes_patch import run_probe

FILES = ("free.txt", "other.txt", "held/a.txt", "held/b.txt", "new.txt", "held/new.txt")
STARS = ("***", "*** ", "***\t", "***  ", " ***")
SEPARATORS = (" File: ", "  File: ", "\tFile:", " File:", " file: ", "File: ")
KINDS = ("Update", "Add", "Delete", "Move")
BODY = ("@@", "@@ a @@", " a", "-b", "+X", " c", "+Y", "-a", "", "+text *** End Patch here")
MARKERS = ("*** Begin Patch", "*** End Patch", "***Begin Patch", "***End Patch")
FINDING = (
    "*** Begin Patch\n***Update File: {dir}/held/a.txt\n@@\n a\n-b\n+X\n c\n*** End Patch\n",
    "*** Begin Patch\n*** Move File: {dir}/free.txt -> {dir}/held/moved.txt\n*** End Patch\n",
    "*** Begin Patch\n*** Delete  File: {dir}/held/b.txt\n*** End Patch\n",
)
GENERATED = 300
# Well-formed patches of every kind, one per line of the finding's table: they must all
# apply, so the property below is never checked over texts Hermes merely rejected.
WELL_FORMED = (
    "*** Begin Patch\n*** Update File: {dir}/free.txt\n@@\n a\n-b\n+X\n c\n*** End Patch\n",
    "*** Begin Patch\n*** Add File: {dir}/held/new.txt\n+text\n*** End Patch\n",
    "*** Begin Patch\n*** Delete File: {dir}/other.txt\n*** End Patch\n",
    "*** Begin Patch\n*** Move File: {dir}/other.txt -> {dir}/held/c.txt\n*** End Patch\n",
    "*** Begin Patch\n*** Update File: {dir}/held/a.txt\n@@\n a\n-b\n+Y\n c\n"
    "*** Delete File: {dir}/free.txt\n*** End Patch\n",
)


@st.composite
def header(draw: st.DrawFn) -> str:
    kind = draw(st.sampled_from(KINDS))
    name = draw(st.sampled_from(FILES))
    path = f"{{dir}}/{name}" if draw(st.booleans()) else name
    line = draw(st.sampled_from(STARS)) + kind + draw(st.sampled_from(SEPARATORS)) + path
    if kind == "Move":
        line += " -> {dir}/" + draw(st.sampled_from(FILES))
    return line


@st.composite
def patch_text(draw: st.DrawFn) -> str:
    lines: list[str] = []
    if draw(st.booleans()):
        lines.append(draw(st.sampled_from(MARKERS[:1] + MARKERS[2:3])))
    for _ in range(draw(st.integers(1, 3))):
        lines.append(draw(header()))
        lines += draw(st.lists(st.sampled_from(BODY), max_size=6))
        if draw(st.integers(0, 9)) == 0:
            lines.append(draw(st.sampled_from(MARKERS)))
    if draw(st.booleans()):
        lines.append("*** End Patch")
    return draw(st.sampled_from(("\n", "\r\n"))).join(lines) + "\n"


def generated_texts() -> list[str]:
    """Hypothesis draws the texts; Hermes applies them in one process afterwards
    (one Hermes start per text would take minutes). Derandomized: the same texts on
    every run of one Hypothesis version, so the share that applies cannot drift by luck."""
    texts: list[str] = []

    @settings(
        max_examples=GENERATED,
        database=None,
        derandomize=True,
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(patch_text())
    def collect(text: str) -> None:
        texts.append(text)

    collect()
    return texts


def probe(texts: list[str], tmp_path: Path) -> list[dict[str, Any]]:
    out = run_probe("hermes_patch_probe.py", tmp_path, json.dumps({"texts": texts}))
    reports = [json.loads(line) for line in out.splitlines()]
    assert len(reports) == len(texts)
    return reports


def test_the_findings_variants_apply_and_the_adapter_names_their_targets(tmp_path: Path) -> None:
    updated, moved, deleted = probe(list(FINDING), tmp_path)
    for report in (updated, moved, deleted):
        assert report["applied"], report
        assert report["changed"], report
        assert set(report["changed"]) <= set(report["targets"]), report
    assert [p.rsplit("/", 2)[-2:] for p in updated["changed"]] == [["held", "a.txt"]]
    assert {"/".join(p.rsplit("/", 2)[-2:]) for p in moved["changed"]} == {
        f"{moved['changed'][0].rsplit('/', 2)[-2]}/free.txt",
        "held/moved.txt",
    }
    assert [p.rsplit("/", 2)[-2:] for p in deleted["changed"]] == [["held", "b.txt"]]


def test_every_file_hermes_changes_is_a_target_the_adapter_names(tmp_path: Path) -> None:
    texts = [*WELL_FORMED, *generated_texts()]
    reports = probe(texts, tmp_path)
    missed = [
        (texts[r["case"]], sorted(set(r["changed"]) - set(r["targets"])))
        for r in reports
        if not set(r["changed"]) <= set(r["targets"])
    ]
    assert not missed, missed[:3]
    unparsed = [texts[r["case"]] for r in reports if not set(r["parsed"]) <= set(r["targets"])]
    assert not unparsed, unparsed[:3]
    # Not vacuous: every well-formed patch changed files (a move and a two-file patch
    # change more than one), and generated texts changed files too.
    well_formed = reports[: len(WELL_FORMED)]
    assert all(r["applied"] and r["changed"] for r in well_formed), well_formed
    assert [len(r["changed"]) for r in well_formed] == [1, 1, 1, 2, 2]
    assert any(r["changed"] for r in reports[len(WELL_FORMED) :])
