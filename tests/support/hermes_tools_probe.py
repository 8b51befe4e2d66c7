"""Run inside the pinned Hermes venv by tests/test_surface_matrix.py.

Prints Hermes's own tool registry as JSON, tool -> toolset, after the
discovery Hermes runs at start-up (``tools/registry.py`` 0.19.0:
``discover_builtin_tools``, ``registry.get_tool_to_toolset_map``).
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import tempfile


def main() -> None:
    os.environ["HERMES_HOME"] = tempfile.mkdtemp(prefix="smf-tools-")
    registry = importlib.import_module("tools.registry")
    registry.discover_builtin_tools()
    tools = registry.registry.get_tool_to_toolset_map()
    sys.stdout.write(json.dumps(dict(sorted(tools.items()))) + "\n")


if __name__ == "__main__":
    main()
