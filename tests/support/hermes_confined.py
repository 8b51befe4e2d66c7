"""The fixtures, builders and constants of tests/runtimes/test_hermes_confined.py
that other test modules use too: here, so that no test module imports another."""

from __future__ import annotations

import json
import unicodedata
from pathlib import Path

from smf_assurance.subjects.canonical import sha256_identity
from tests.support.hermes_patch_release import permissive_corpus

__all__ = ["ALLOWED_TERMINAL", "terminal_corpus"]

TERMINAL_RULE = "urn:smf:rule:test:firm-terminal"


TERMINAL_STATEMENT = "The firm allows terminal commands in the matter workspace."


ALLOWED_TERMINAL = "firm_terminal_allowed"


def terminal_corpus(directory: Path) -> Path:
    """The permissive firm corpus plus a customer policy allowing terminal commands."""
    permissive_corpus(directory)
    rules = json.loads((directory / "rules.json").read_text())
    template = next(r for r in rules if r["rule_id"].endswith("retention-deletion"))
    rules.append(
        {
            **template,
            "rule_id": TERMINAL_RULE,
            "title": "Terminal commands in the matter workspace",
            "locator": f"tests/runtimes/test_hermes_confined.py#{TERMINAL_RULE}",
            "statement": TERMINAL_STATEMENT,
            "source_hash": sha256_identity(
                unicodedata.normalize("NFC", TERMINAL_STATEMENT).encode()
            ),
            "when": {"all": [{"eq": {"fact": "capability", "value": "process.execute"}}]},
        }
    )
    (directory / "rules.json").write_text(json.dumps(rules))
    policies = json.loads((directory / "policies.json").read_text())
    policies.append(
        {
            "policy_id": "customer.acme.terminal",
            "layer": "customer",
            "scope": {"tenant_id": "tenant-acme"},
            "rule_id": TERMINAL_RULE,
            "effect": "allow",
            "reason_code": ALLOWED_TERMINAL,
        }
    )
    (directory / "policies.json").write_text(json.dumps(policies))
    return directory
