"""The fixtures, builders and constants of tests/runtimes/test_openclaw_conformance.py
that other test modules use too: here, so that no test module imports another."""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from smf_assurance.ops.runtimes.openclaw_env import (
    OPENCLAW_VERSION,
    OpenClawEnv,
    ensure_openclaw_env,
)
from tests.support.harness_client import HarnessClient, harness_process

__all__ = [
    "ACTOR",
    "E2E_CONTEXT",
    "E2E_RUNTIME",
    "OPENCLAW_TMP",
    "PLUGIN_ID",
    "OpenClawRuns",
    "_progress",
    "_start_harness",
    "build_plugin",
    "call",
    "netns_available",
    "openclaw_tmp_kept_clean",
    "smf_plugin",
    "tool_results",
    "verdicts",
]

PROJECT = Path(__file__).resolve().parents[2]


PLUGIN_DIR = PROJECT / "smf_assurance" / "adapters" / "openclaw"


PLUGIN_DIST = PLUGIN_DIR / "dist" / "index.js"


def build_plugin() -> None:
    """Build the plugin's dist/ (scripts/build.sh: idempotent, locked) or fail: a
    missing dist/ must never turn these tests into skips, or a fresh clone would
    "pass" without gating anything."""
    built = subprocess.run(
        [str(PLUGIN_DIR / "scripts" / "build.sh")],
        check=False,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert built.returncode == 0, f"plugin build failed:\n{built.stderr[-4000:]}"
    assert PLUGIN_DIST.exists(), f"{PLUGIN_DIST} was not built"


OPENCLAW_TMP = (
    Path("/tmp/openclaw"),
    Path(f"/tmp/openclaw-state-locks-{os.getuid()}"),
    Path(f"/tmp/.openclaw-terminal-staging-{os.getuid()}"),
)
"""OpenClaw always creates the first two (RUNTIMES.md), a Gateway the third (its terminal
upload lock); :func:`openclaw_tmp_kept_clean` removes the ones a test created."""


@contextlib.contextmanager
def openclaw_tmp_kept_clean() -> Iterator[None]:
    """Around a use of OpenClaw: the :data:`OPENCLAW_TMP` folders that did not exist
    before are removed after, unless another test process (``make test`` runs two) still
    uses OpenClaw: each use holds a shared lock on one file per user, and only a use
    that can then take it alone removes anything (an OpenClaw running elsewhere keeps its
    log and lock folders; one left behind is what OpenClaw leaves in real use)."""
    existed = {path: path.exists() for path in OPENCLAW_TMP}
    users = Path(tempfile.gettempdir()) / f"smf-tests-openclaw-{os.getuid()}.lock"
    with users.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_SH)
        try:
            yield
        finally:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                alone = True
            except BlockingIOError:
                alone = False
            for path, was_there in existed.items():
                if alone and not was_there:
                    shutil.rmtree(path, ignore_errors=True)


E2E_RUNTIME = {
    "principal": "openclaw-runtime",
    "runtime_id": "openclaw-demo",
    "pin": OPENCLAW_VERSION,
    "require_attestation": True,
    "hooks": ["before_tool_call", "after_tool_call"],
}
"""The OpenClaw runtime principal the gate knows, as
``smf_assurance.ops.runtimes.provision.provision_openclaw_runtime``
provisions it: the gate refuses its proposals until the plugin has attested (profile
``exact-hold``) the pin, both hooks and the release it verified itself."""


def netns_available() -> bool:
    if os.geteuid() != 0 or shutil.which("unshare") is None or shutil.which("ip") is None:
        return False
    probe = subprocess.run(
        ["unshare", "-n", "ip", "link", "set", "lo", "up"], capture_output=True, check=False
    )
    return probe.returncode == 0


class OpenClawRuns(HarnessClient):
    """The test side of the harness: one JSON line out, one JSON line back."""

    def __init__(self, proc: subprocess.Popen[str], env: OpenClawEnv) -> None:
        super().__init__(proc)
        self.env = env

    def run(self, name: str, scripts: dict[str, Any], **command: Any) -> dict[str, Any]:
        prompt = command.pop("prompt", f"SCENARIO:{name} do what the script says.")
        return self.send({"name": name, "prompt": prompt, "scripts": scripts, **command})


def _progress(request: pytest.FixtureRequest) -> Any:
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")

    def say(line: str) -> None:
        if reporter is not None:
            reporter.write_line(f"[openclaw-conformance] {line}")
        else:
            sys.stderr.write(f"[openclaw-conformance] {line}\n")

    return say


def _start_harness(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    name: str,
    gate: dict[str, Any] | None,
) -> Iterator[OpenClawRuns]:
    say = _progress(request)
    started = time.monotonic()
    env = ensure_openclaw_env(progress=say)
    how = f"installed in {env.cold_seconds:.1f}s" if env.cold_seconds else "reused"
    say(f"openclaw {OPENCLAW_VERSION} ready in {time.monotonic() - started:.1f}s ({how})")
    with openclaw_tmp_kept_clean():
        workdir = tmp_path_factory.mktemp(name)
        isolated = netns_available()
        config = {
            "workdir": str(workdir),
            "node_bin": str(env.node_bin),
            "openclaw": str(env.openclaw),
            "openclaw_package": str(env.package),
            "bring_up_loopback": isolated,
            "gate": gate,
        }
        say(
            "network: "
            + ("unshare -n, loopback only" if isolated else "no namespace; 127.0.0.1 only")
        )
        script = PROJECT / "tests" / "support" / "openclaw_harness.py"
        with harness_process(script, config, workdir, isolated=isolated) as (proc, _):
            yield OpenClawRuns(proc, env)


def call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"name": name, "arguments": arguments}


def tool_results(run: dict[str, Any], scenario: str) -> list[str]:
    """What the model was shown as tool results, in the last request of ``scenario``."""
    requests = [r for r in run["requests"] if r["scenario"] == scenario]
    assert requests, run
    return list(requests[-1]["tool_results"])


PLUGIN_ID = "smf-assurance"


ACTOR = {
    "domain": "litigation",
    "tenant_id": "tenant-acme",
    "organization_id": "org-acme-llp",
    "matter_id": "matter-2026-0042",
    "actor_id": "associate-ann",
    "actor_roles": ["associate"],
    "governing_laws": ["US-NY"],
}


E2E_CONTEXT = {
    "schema": "smf.openclaw-context/1",
    "actor": ACTOR,
    # Confidential matter data: an ``exec`` (egress, destination unknown) is held for a
    # licensed attorney by the safety floor; it stands in for a court filing.
    "facts": {
        "classification": "confidential",
        "injection_taint": "clear",
        "redaction_status": "none",
    },
    "legal_hold_paths": ["{{root}}/held"],
    "workspace_dir": "{{root}}/workspace",
    "untrusted_tools": ["read"],
}


def smf_plugin(
    nats_url: str = "{{nats_url}}",
    *,
    gate_timeout_ms: int = 5000,
    hold_timeout_ms: int = 6000,
    credential_file: str | None = "{{credential_file}}",
) -> dict[str, Any]:
    """OpenClaw config that loads our plugin from the checkout
    (smf_assurance/adapters/openclaw/README.md);
    ``credential_file=None`` leaves ``credentialFile`` out."""
    credential = {} if credential_file is None else {"credentialFile": credential_file}
    return {
        "plugins": {
            "load": {"paths": [str(PLUGIN_DIR)]},
            "entries": {
                PLUGIN_ID: {
                    "enabled": True,
                    "config": {
                        "natsUrl": nats_url,
                        "runtimeId": "{{runtime_id}}",
                        "keyFile": "{{runtime_key}}",
                        **credential,
                        "trustRootFile": "{{trust_root_file}}",
                        "contextFile": "{{root}}/context.json",
                        "gateTimeoutMs": gate_timeout_ms,
                        "holdTimeoutMs": hold_timeout_ms,
                    },
                }
            },
        }
    }


def verdicts(run: dict[str, Any], via: str = "reply") -> list[dict[str, Any]]:
    return [b for b in run["bus"] if b["kind"] == "verdict" and b["via"] == via]
