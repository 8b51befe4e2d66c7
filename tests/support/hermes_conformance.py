"""The fixtures, builders and constants of tests/runtimes/test_hermes_conformance.py
that other test modules use too: here, so that no test module imports another."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import pytest

from smf_assurance.ops.runtimes.hermes_env import ensure_hermes_env
from tests.support.harness_client import HarnessClient, harness_process

__all__ = [
    "ACTOR",
    "CLIENT_REPLY",
    "PROJECT",
    "HermesRuns",
    "call",
    "context",
    "harness",
    "netns_available",
    "tool_results",
    "verdicts",
]

PROJECT = Path(__file__).resolve().parents[2]


ACTOR = {
    "domain": "litigation",
    "tenant_id": "tenant-acme",
    "organization_id": "org-acme-llp",
    "matter_id": "matter-2026-0042",
    "actor_id": "associate-ann",
    "actor_roles": ["associate"],
    "governing_laws": ["US-NY"],
}


INTERNAL_REPLY = {"destination": {"address": "cli:operator", "locality": "internal"}}


CLIENT_REPLY = {"destination": {"address": "telegram:client-chat", "locality": "external"}}


def context(
    classification: str = "internal", reply: dict[str, Any] | None = None
) -> dict[str, Any]:
    return {
        "schema": "smf.hermes-context/1",
        "actor": ACTOR,
        "facts": {
            "classification": classification,
            "injection_taint": "clear",
            "redaction_status": "none",
        },
        "legal_hold_paths": ["{{root}}/held"],
        "reply": reply or INTERNAL_REPLY,
    }


def netns_available() -> bool:
    if os.geteuid() != 0 or shutil.which("unshare") is None or shutil.which("ip") is None:
        return False
    probe = subprocess.run(
        ["unshare", "-n", "ip", "link", "set", "lo", "up"], capture_output=True, check=False
    )
    return probe.returncode == 0


class HermesRuns(HarnessClient):
    """The test side of the harness: one JSON line out, one JSON line back."""

    def __init__(self, proc: subprocess.Popen[str], info: dict[str, Any]) -> None:
        super().__init__(proc)
        self.info = info

    def run(self, name: str, scripts: dict[str, Any], **command: Any) -> dict[str, Any]:
        command.setdefault("context", context())
        prompt = command.pop("prompt", f"SCENARIO:{name} do what the script says.")
        return self.send({"name": name, "prompt": prompt, "scripts": scripts, **command})


def _progress(request: pytest.FixtureRequest) -> Any:
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")

    def say(line: str) -> None:
        if reporter is not None:
            reporter.write_line(f"[hermes-conformance] {line}")
        else:
            sys.stderr.write(f"[hermes-conformance] {line}\n")

    return say


@contextlib.contextmanager
def harness(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    corpus: Path | None = None,
    mapper_extra: dict[str, Any] | None = None,
    surfaces: bool = False,
) -> Iterator[HermesRuns]:
    """One harness process for a module (tests/support/hermes_harness.py), stopped at its end;
    its gate runs on a release of ``corpus`` when one is given (else the demo's), with
    ``mapper_extra`` tools added to its mapper table for Hermes; ``surfaces``: Hermes
    from the venv that also holds the MCP SDK and python-telegram-bot."""
    say = _progress(request)
    started = time.monotonic()
    env = ensure_hermes_env(PROJECT, progress=say, surfaces=surfaces)
    cold = f"cold {env.cold_seconds:.1f}s" if env.cold_seconds else "reused"
    say(f"hermes venv ready in {time.monotonic() - started:.1f}s ({cold}; plugin {env.overlay})")
    workdir = tmp_path_factory.mktemp("hermes")
    isolated = netns_available()
    config = {
        "workdir": str(workdir),
        "venv": str(env.root),
        "pythonpath": env.pythonpath,
        "bring_up_loopback": isolated,
        "corpus": None if corpus is None else str(corpus),
        "mapper_extra": mapper_extra or {},
    }
    say("network: " + ("unshare -n, loopback only" if isolated else "no namespace; 127.0.0.1 only"))
    script = PROJECT / "tests" / "support" / "hermes_harness.py"
    with harness_process(script, config, workdir, isolated=isolated) as (proc, ready):
        yield HermesRuns(proc, json.loads(ready))


def tool_results(run: dict[str, Any], scenario: str) -> list[str]:
    """What the model was shown as tool results, in the last agent request of ``scenario``
    (one that offered tools: Hermes's background session-title request quotes the
    scenario's prompt but offers no tools and carries no results, and when it leaves
    before the one-shot CLI exits it is recorded last; CI of stop 32)."""
    requests = [r for r in run["requests"] if r["scenario"] == scenario and r["offered"]]
    assert requests, run
    return list(requests[-1]["tool_results"])


MODEL_LIST_SHOWN: Final = frozenset(
    {"object", "list", "data", "id", "fake-model", "model", "owned_by", "fake"}
)
"""Every string of the fake provider's model list (tests/support/fake_openai.py), keys and values,
as the model gateway decides it: the lines of that decision's released text."""


def verdicts(run: dict[str, Any], kind: str = "verdict") -> list[dict[str, Any]]:
    """The run's verdicts of ``kind``; for ``output``, the turns' decisions only: the
    model list's, which Hermes asks for at its start from a thread of its own (so in
    no fixed order with the turns) and the gateway decides as output, is left out."""
    return [b for b in run["bus"] if b["kind"] == kind and not is_model_list(b)]


def is_model_list(seen: dict[str, Any]) -> bool:
    released = seen.get("released")
    return isinstance(released, str) and set(released.splitlines()) == MODEL_LIST_SHOWN


def call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"name": name, "arguments": arguments}
