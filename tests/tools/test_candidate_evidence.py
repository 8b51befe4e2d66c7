"""docs/EVIDENCE.md's claim table is generated from docs/claims.toml and the tests'
claim markers, and the committed page says what they say."""

from __future__ import annotations

from pathlib import Path

import pytest

from smf_tools.candidate import evidence
from smf_tools.candidate.claims import CLAIMS_FILE, claimed_tests, load_claims

CLAIMS = """
[[claim]]
id = "bus-access.proven"
family = "bus-access"
sentence = "A | in a sentence stays in its cell."
not_proven = "Nothing else."

[[claim]]
id = "bus-access.unproven"
family = "bus-access"
sentence = "Nobody proves this yet."
not_proven = "Anything."
"""


def test_the_committed_page_is_what_the_claims_and_the_markers_say() -> None:
    """docs/EVIDENCE.md is stale: run ``make evidence``."""
    page = evidence.PAGE.read_text(encoding="utf-8")
    assert evidence.render(page, evidence.section()) == page
    assert evidence.main(["--check"]) == 0
    marked = claimed_tests(evidence.ROOT)
    for claim in load_claims(evidence.ROOT / CLAIMS_FILE):
        row = next(line for line in page.splitlines() if line.startswith(f"| `{claim.id}` |"))
        for test in marked.get(claim.id, ()):
            assert f"`{test}`" in row
        assert (evidence.OPEN in row) is (claim.id not in marked)


def test_a_claim_whose_only_test_goes_is_shown_open(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "tests").mkdir()
    (tmp_path / CLAIMS_FILE).write_text(CLAIMS)
    test_file = tmp_path / "tests" / "test_p.py"
    test_file.write_text(
        "import pytest\n\n\n@pytest.mark.claim('bus-access.proven')\ndef test_p() -> None:\n"
        "    pass\n"
    )
    page = f"# Evidence\n\nprose before\n\n{evidence.BEGIN}\nstale\n{evidence.END}\n\nprose after\n"
    before = evidence.render(page, evidence.section(tmp_path))
    assert before.startswith("# Evidence\n\nprose before\n\n")
    assert before.endswith("\n\nprose after\n")
    rows = [line for line in before.splitlines() if line.startswith("| `bus-access.")]
    assert rows[0].count(" | ") == 4  # the escaped | did not add a cell
    assert "`tests/test_p.py::test_p`" in rows[0]
    assert evidence.OPEN in rows[1]
    test_file.write_text("def test_p() -> None:\n    pass\n")
    after = evidence.render(before, evidence.section(tmp_path))
    assert after != before
    assert evidence.OPEN in next(line for line in after.splitlines() if "bus-access.proven" in line)


@pytest.mark.parametrize(
    "page",
    [
        "no markers",
        f"{evidence.END}\n{evidence.BEGIN}",
        f"{evidence.BEGIN}{evidence.BEGIN}{evidence.END}",
    ],
    ids=["none", "reversed", "twice"],
)
def test_a_page_without_one_pair_of_markers_is_refused(page: str) -> None:
    with pytest.raises(evidence.EvidencePageError):
        evidence.render(page, "x")


def test_make_evidence_rewrites_a_stale_page(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    page = evidence.PAGE.read_text(encoding="utf-8")
    stale = tmp_path / "EVIDENCE.md"
    stale.write_text(evidence.render(page, f"{evidence.BEGIN}\nstale\n{evidence.END}"))
    monkeypatch.setattr(evidence, "PAGE", stale)
    assert evidence.main(["--check"]) == 1
    assert evidence.main([]) == 0
    assert stale.read_text(encoding="utf-8") == page
    assert evidence.main(["--check"]) == 0
