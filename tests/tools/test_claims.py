"""Claims are declared once and bound to tests by a marker, read from the source."""

from __future__ import annotations

from pathlib import Path

import pytest

from smf_tools.candidate.claims import (
    CLAIMS_FILE,
    ClaimsError,
    claimed_tests,
    load_claims,
    undeclared,
)

ROOT = Path(__file__).resolve().parents[2]

GOOD = """
[[claim]]
id = "bus-access.one"
family = "bus-access"
sentence = "s"
not_proven = "n"
covers = ["smf_assurance/ops/local/bus_auth.py"]
"""


def test_the_shipped_claims_load_and_every_marker_names_one() -> None:
    claims = load_claims(ROOT / CLAIMS_FILE)
    assert claims
    assert undeclared(claims, claimed_tests(ROOT)) == []


@pytest.mark.parametrize(
    ("text", "says"),
    [
        (GOOD.replace('"bus-access"\n', '"nope"\n'), "unknown family"),
        (GOOD.replace("bus-access.one", "bus-access"), "not family.name"),
        (GOOD.replace("bus-access.one", "model-gateway.one"), "start with its family"),
        (GOOD + GOOD, "declared twice"),
        (GOOD.replace('not_proven = "n"', 'not_proven = " "'), "must say something"),
        (GOOD.replace('sentence = "s"', 'sentence = "s"\nextra = 1'), "extra"),
        ("[[claim]\n", "claims.toml"),
    ],
)
def test_a_bad_claims_file_is_refused(tmp_path: Path, text: str, says: str) -> None:
    path = tmp_path / "claims.toml"
    path.write_text(text)
    with pytest.raises(ClaimsError, match=says):
        load_claims(path)


def test_a_missing_claims_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ClaimsError, match="cannot read"):
        load_claims(tmp_path / "absent.toml")


def test_markers_are_read_from_functions_classes_and_pytestmark(tmp_path: Path) -> None:
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_a.py").write_text(
        "import pytest\n"
        "pytestmark = [pytest.mark.slow, pytest.mark.claim('m.all')]\n"
        "@pytest.mark.claim('f.one', 'f.two')\n"
        "def test_f(): pass\n"
        "def test_plain(): pass\n"
        "def helper(): pass\n"
        "@pytest.mark.claim('c.cls')\n"
        "class TestC:\n"
        "    @pytest.mark.claim('c.meth')\n"
        "    async def test_m(self): pass\n"
    )
    found = claimed_tests(tmp_path)
    assert found == {
        "c.cls": ("tests/test_a.py::TestC::test_m",),
        "c.meth": ("tests/test_a.py::TestC::test_m",),
        "f.one": ("tests/test_a.py::test_f",),
        "f.two": ("tests/test_a.py::test_f",),
        "m.all": (
            "tests/test_a.py::test_f",
            "tests/test_a.py::test_plain",
            "tests/test_a.py::TestC::test_m",
        ),
    }
    assert undeclared((), found) == sorted(found)


def test_a_marker_must_name_its_ids_literally(tmp_path: Path) -> None:
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_b.py").write_text(
        "import pytest\nX = 'a.b'\n@pytest.mark.claim(X)\ndef test_f(): pass\n"
    )
    with pytest.raises(ClaimsError, match="string literals"):
        claimed_tests(tmp_path)
