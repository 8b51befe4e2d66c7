"""Product code says what holds and why, never which issue asked for it.

A docstring or a comment in the product states the rule the code keeps and the
attack it refuses. "Issue 23: ..." tells a reader where a change came from, not
what must stay true; git keeps that history and docs/EVIDENCE.md keeps the
claims. So no source file the product ships (its Python, and the OpenClaw
plugin's and the console's TypeScript, JavaScript, CSS and HTML) names an
issue by number, nor tells its reasons as a story of what was once seen in CI.
Docs (``docs/``, the READMEs) are history documents and may.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import pytest

ROOT: Final = Path(__file__).resolve().parents[2]
PRODUCT: Final = ROOT / "smf_assurance"
SOURCE_SUFFIXES: Final = frozenset({".py", ".ts", ".js", ".mjs", ".css", ".html", ".sh"})
"""What the product ships as code, in every language it is written in."""
NOT_OURS: Final = frozenset({"node_modules", "dist", "dist-test", "__pycache__"})
"""Folders of installed or built files: no one writes them here."""

ISSUE_NUMBER: Final = re.compile(r"\b[Ii]ssues?[ -]?#?\d+")
"""An issue named by its number: "issue 23", "Issue 4:", "issues 6 and 10", "issue #12",
"issue-25"."""
HISTORY: Final = re.compile(r"\bseen in CI\b|\bbefore this change\b|\bearlier waves?\b")
"""Rationale told as change history, in the words that can mean nothing else."""


def product_sources() -> Iterator[Path]:
    for folder, subfolders, files in os.walk(PRODUCT):
        subfolders[:] = sorted(name for name in subfolders if name not in NOT_OURS)
        for name in sorted(files):
            if Path(name).suffix in SOURCE_SUFFIXES:
                yield Path(folder) / name


def history_lines(text: str) -> list[tuple[int, str]]:
    """The lines of ``text`` that name an issue by number or tell history, numbered from 1."""
    return [
        (number, line.strip())
        for number, line in enumerate(text.splitlines(), start=1)
        if ISSUE_NUMBER.search(line) or HISTORY.search(line)
    ]


def test_product_code_names_no_issue_and_tells_no_history() -> None:
    sources = list(product_sources())
    assert len(sources) > 200, "the walk found the product's sources"
    found = [
        f"{path.relative_to(ROOT)}:{number}: {line}"
        for path in sources
        for number, line in history_lines(path.read_text(encoding="utf-8"))
    ]
    assert not found, (
        "say what holds and why (the rule, the attack refused), not which issue asked "
        "for it:\n" + "\n".join(found)
    )


@pytest.mark.parametrize(
    "line",
    [
        '"""The approval store on one SQLite file (issue 4, "The store").',
        "    Issue 22: ``release publish`` said published for a refused release.",
        "# --- onboarding and doctor (issue 21) ---",
        " * (issues 10 and 6): the twin of the Hermes adapter's `_attest_once`,",
        "/* Issue 23: the confirm step and the deny form. */",
        "    # a node ranked first by its name, issue #18",
        "# --- explain, eval with its issue-25 flags ---",
        "    # close waits for this loop forever (seen in CI).",
    ],
)
def test_the_check_finds_history(line: str) -> None:
    assert history_lines(line) == [(1, line.strip())]


@pytest.mark.parametrize(
    "line",
    [
        "    issued_at_ms: Millis",
        '    "tissue 3 of the sample"',
        "    the issue time plus the timeout, ``reply_by_ms``",
        "    an issuer 2 keys may sign for",
    ],
)
def test_the_check_leaves_other_words_alone(line: str) -> None:
    assert history_lines(line) == []
