"""docs/EVIDENCE.md's claim table, generated from the same data as the matrix.

docs/EVIDENCE.md is generated from the same data, and a test fails when the
committed page differs from what the data and the tests say. The
section between :data:`BEGIN` and :data:`END` lists every claim of
``docs/claims.toml`` (id, family, sentence, what it does not prove) with the
tests that carry its marker, read from the test source; a claim with none is
shown open. The rest of the page stays hand-written prose. Regenerate with
``python -m smf_tools.candidate.evidence`` (``make evidence``);
``tests/tools/test_candidate_evidence.py`` fails when the page is stale.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Final

from smf_tools.candidate.claims import CLAIMS_FILE, claimed_tests, load_claims

ROOT: Final = Path(__file__).resolve().parents[2]
PAGE: Final = ROOT / "docs" / "EVIDENCE.md"
BEGIN: Final = "<!-- claims:begin -->"
END: Final = "<!-- claims:end -->"

OPEN: Final = "**open**: no test carries its marker yet"


class EvidencePageError(Exception):
    """The page has no single pair of markers to generate between."""


def section(root: Path = ROOT) -> str:
    """The generated table: one row per declared claim, in the file's order."""
    claims = load_claims(root / CLAIMS_FILE)
    marked = claimed_tests(root)
    lines = [
        BEGIN,
        "<!-- Generated from docs/claims.toml and the tests' @pytest.mark.claim markers by",
        "     `make evidence`; edit those, not this table. -->",
        "",
        "| claim | family | sentence | proven by | does not prove |",
        "| --- | --- | --- | --- | --- |",
    ]
    for claim in claims:
        tests = marked.get(claim.id, ())
        proven = "<br>".join(f"`{t}`" for t in tests) or OPEN
        cells = (f"`{claim.id}`", claim.family, claim.sentence, proven, claim.not_proven)
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    lines.append(END)
    return "\n".join(lines)


def render(page: str, generated: str) -> str:
    """``page`` with the text between its markers (markers included) replaced."""
    if page.count(BEGIN) != 1 or page.count(END) != 1 or page.index(BEGIN) > page.index(END):
        raise EvidencePageError(f"the page needs exactly one {BEGIN} ... {END} pair")
    head, rest = page.split(BEGIN)
    return head + generated + rest.split(END)[1]


def main(argv: list[str]) -> int:
    """Rewrite the section of docs/EVIDENCE.md; with ``--check``, exit 1 if it is stale."""
    page = PAGE.read_text(encoding="utf-8")
    text = render(page, section())
    if "--check" in argv:
        return 0 if text == page else 1
    PAGE.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
