"""docs/HERMES.md names every tool the pinned Hermes registers, and says what the gate does
with each (issue 17; the OpenClaw twin runs in tests/test_openclaw_conformance.py).

Proves: the tool registry of hermes-agent 0.19.0, as Hermes builds it at start-up,
read inside its own venv with no network, is exactly the list in the docs' surface
matrix, and each row's verdict is what the gate's mapper table says (mapped, with
its capability, or denied as ``unknown_tool``). Does not prove: tools that plugins,
MCP servers or platforms add at run time (the gate denies any it does not map).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from ops.hermes_env import ensure_hermes_env
from tests.surface_matrix import ROOT, compare, mapper_capabilities, render
from tests.test_hermes_conformance import netns_available

ADAPTER_ID = "smf-hermes-adapter"
OWN_TOOLS = ("smf_court_filing", "smf_dms_delete", "send_message")
"""Mapped tools outside the built-in registry: the adapter's connector tools (the plugin
registers them) and ``send_message``, whose schema 0.19.0 ships but no built-in module
registers (``tools/send_message_tool.py``)."""


def registry_tools(tmp_path: Path) -> dict[str, str]:
    env = ensure_hermes_env(ROOT)
    prefix = ["unshare", "-n"] if netns_available() else []
    done = subprocess.run(
        [*prefix, str(env.python), str(ROOT / "tests" / "hermes_tools_probe.py")],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": env.pythonpath, "HOME": str(tmp_path)},
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    tools: dict[str, str] = json.loads(done.stdout.splitlines()[-1])
    return tools


def test_the_hermes_surface_matrix_names_every_tool_hermes_registers(tmp_path: Path) -> None:
    tools = registry_tools(tmp_path)
    assert len(tools) > 50, tools  # the registry was really read
    mapper = mapper_capabilities(ADAPTER_ID)
    assert set(OWN_TOOLS) <= set(mapper)
    problem = compare(ROOT / "docs" / "HERMES.md", "hermes", render(tools, mapper, OWN_TOOLS))
    assert problem is None, problem
