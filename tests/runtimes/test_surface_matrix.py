"""docs/HERMES.md names every tool the pinned Hermes registers, and says what the gate does
with each (the OpenClaw twin runs in tests/runtimes/test_openclaw_conformance.py).

Proves: the tool registry of hermes-agent 0.19.0, as Hermes builds it at start-up,
read inside its own venv with no network, is exactly the list in the docs' surface
matrix, and each row's verdict is what the gate's mapper table says (mapped, with
its capability, or denied as ``unknown_tool``). Does not prove: tools that plugins,
MCP servers or platforms add at run time (the gate denies any it does not map).
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.hermes_patch import run_probe
from tests.support.surface_matrix import ROOT, compare, mapper_capabilities, render

ADAPTER_ID = "smf-hermes-adapter"
OWN_TOOLS = ("smf_court_filing", "smf_dms_delete", "send_message")
"""Mapped tools outside the built-in registry: the adapter's connector tools (the plugin
registers them) and ``send_message``, whose schema 0.19.0 ships but no built-in module
registers (``tools/send_message_tool.py``)."""


def registry_tools(tmp_path: Path) -> dict[str, str]:
    out = run_probe("hermes_tools_probe.py", tmp_path, timeout=300)
    tools: dict[str, str] = json.loads(out.splitlines()[-1])
    return tools


def test_the_hermes_surface_matrix_names_every_tool_hermes_registers(tmp_path: Path) -> None:
    tools = registry_tools(tmp_path)
    assert len(tools) > 50, tools  # the registry was really read
    mapper = mapper_capabilities(ADAPTER_ID)
    assert set(OWN_TOOLS) <= set(mapper)
    problem = compare(ROOT / "docs" / "HERMES.md", "hermes", render(tools, mapper, OWN_TOOLS))
    assert problem is None, problem
