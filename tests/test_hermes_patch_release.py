"""Patch spellings under legal hold, with a release that allows writes outside legal hold
(issue 17).

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
spellings end to end (tests/test_hermes_patch.py checks 300 generated texts against
Hermes's own ``patch`` tool, without the gate).
"""

from __future__ import annotations

import json
import shutil
import unicodedata
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from smf_assurance.governance.projections import SCENARIO_CORPUS, package_path
from smf_assurance.subjects.canonical import sha256_identity
from tests.test_hermes_conformance import (
    HermesRuns,
    call,
    harness,
    tool_results,
    verdicts,
)

pytestmark = pytest.mark.slow

STATEMENT = "A document in the matter workspace that is not under legal hold may be rewritten."
RULE_ID = "urn:smf:rule:test:workspace-writes-outside-hold"
ALLOWED_WRITE = "workspace_write_outside_hold"


def permissive_corpus(directory: Path) -> Path:
    """The shipped scenario corpus plus one rule and customer policy: writes are allowed
    outside legal hold (the floor still denies them under it)."""
    shutil.copytree(package_path(SCENARIO_CORPUS), directory)
    release = json.loads((directory / "release.json").read_text())
    release["release_id"] = "firm-writes-outside-hold"
    (directory / "release.json").write_text(json.dumps(release))
    rules = json.loads((directory / "rules.json").read_text())
    template = next(r for r in rules if r["rule_id"].endswith("retention-deletion"))
    rules.append(
        {
            **template,
            "rule_id": RULE_ID,
            "title": "Writes to the matter workspace outside legal hold",
            "locator": f"tests/test_hermes_patch_release.py#{RULE_ID}",
            "statement": STATEMENT,
            "source_hash": sha256_identity(unicodedata.normalize("NFC", STATEMENT).encode()),
            "when": {
                "all": [
                    {"eq": {"fact": "capability", "value": "document.write"}},
                    {"eq": {"fact": "workflow.legal_hold", "value": False}},
                ]
            },
        }
    )
    (directory / "rules.json").write_text(json.dumps(rules))
    policies = json.loads((directory / "policies.json").read_text())
    policies.append(
        {
            "policy_id": "customer.acme.workspace-writes",
            "layer": "customer",
            "scope": {"tenant_id": "tenant-acme"},
            "rule_id": RULE_ID,
            "effect": "allow",
            "reason_code": ALLOWED_WRITE,
        }
    )
    (directory / "policies.json").write_text(json.dumps(policies))
    return directory


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
