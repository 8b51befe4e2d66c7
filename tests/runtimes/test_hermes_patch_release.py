"""Patch spellings under legal hold, with a release that allows writes outside legal hold.

Finding: ``***Update File:``, ``*** Move File: free -> held`` and ``*** Delete  File:``
were proposed as ``legal_hold: false``; only the demo release's default deny of
writes stopped them, and a firm's release that allows writes outside legal hold
turned that into a real bypass. This module's gate runs on such a release: the
shipped scenario corpus plus one customer policy allowing ``document.write`` when
``workflow.legal_hold`` is false.

Proves, against the real Hermes 0.19.0 in its own venv inside ``unshare -n``: under
that release a patch of a free file by a confined Hermes is allowed and changes it
(the release really allows writes outside hold; the shipped corpus's confinement
requirement makes a patch need a confined runtime), and each of the three
spellings touching a held file is denied by the legal-hold floor and changes no
file. Does not prove: other patch
spellings end to end (tests/runtimes/test_hermes_patch.py checks 300 generated texts against
Hermes's own ``patch`` tool, without the gate).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.hermes_conformance import (
    HermesRuns,
    call,
    harness,
    tool_results,
    verdicts,
)
from tests.support.hermes_patch_release import ALLOWED_WRITE, permissive_corpus

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def hermes(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[HermesRuns]:
    corpus = permissive_corpus(tmp_path_factory.mktemp("corpus") / "firm")
    with harness(request, tmp_path_factory, corpus) as runs:
        yield runs


PATCH_VARIANTS = (
    "*** Begin Patch\n***Update File: {{root}}/held/brief.txt\n@@\n-original\n+rewritten\n"
    "*** End Patch\n",
    "*** Begin Patch\n*** Move File: {{root}}/free.txt -> {{root}}/held/moved.txt\n*** End Patch\n",
    "*** Begin Patch\n*** Delete  File: {{root}}/held/brief.txt\n*** End Patch\n",
)
"""The three spellings of the finding, each touching a held file."""
FILES = {"held/brief.txt": "original\n", "free.txt": "free\n"}


def patch_run(hermes: HermesRuns, name: str, texts: list[str], **command: Any) -> dict[str, Any]:
    return hermes.run(
        name,
        {name: {"calls": [call("patch", mode="patch", patch=t) for t in texts], "final": "ok"}},
        toolsets="file",
        files=FILES,
        **command,
    )


def test_the_release_allows_a_patch_outside_legal_hold(hermes: HermesRuns) -> None:
    """Confined (``runtime run``): the shipped corpus requires confinement for a patch,
    whose effects its proposal cannot show; unconfined it is ``runtime_not_confined``."""
    text = (
        "*** Begin Patch\n*** Update File: {{root}}/free.txt\n@@\n-free\n+rewritten\n"
        "*** End Patch\n"
    )
    run = patch_run(hermes, "patch-free", [text], confined={}, via_gateway=True)
    assert [(v["outcome"], v["reason_codes"]) for v in verdicts(run)] == [
        ("allow", [ALLOWED_WRITE])
    ]
    assert Path(run["root"], "free.txt").read_text() == "rewritten\n"


def test_every_spelling_hermes_accepts_is_denied_under_legal_hold(hermes: HermesRuns) -> None:
    run = patch_run(hermes, "patch-held", list(PATCH_VARIANTS))
    results = tool_results(run, "patch-held")
    assert len(results) == len(PATCH_VARIANTS)
    assert all("legal_hold_blocks_deletion" in result for result in results), results
    assert [v["outcome"] for v in verdicts(run)] == ["deny"] * len(PATCH_VARIANTS)
    root = Path(run["root"])
    assert (root / "held" / "brief.txt").read_text() == "original\n"
    assert (root / "free.txt").read_text() == "free\n"
    assert not (root / "held" / "moved.txt").exists()
