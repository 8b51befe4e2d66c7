"""The fixtures, builders and constants of tests/runtimes/test_hermes_patch_release.py
that other test modules use too: here, so that no test module imports another."""

from __future__ import annotations

import json
import shutil
import unicodedata
from pathlib import Path

from smf_assurance.governance.projections import SCENARIO_CORPUS, package_path
from smf_assurance.subjects.canonical import sha256_identity

__all__ = ["ALLOWED_WRITE", "permissive_corpus"]

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
            "locator": f"tests/runtimes/test_hermes_patch_release.py#{RULE_ID}",
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
