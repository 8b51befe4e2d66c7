"""The OpenClaw plugin's TypeScript twins of ``subjects/`` stand on their own.

``smf_assurance/adapters/openclaw/src/contract/`` holds the TypeScript twins of the bus
contract (its README.md lists them), proven byte for byte by the golden
vectors in ``tests/vectors/``. As ``subjects/`` imports nothing else of ours
(ARCHITECTURE.md, "Layers of the code"), the twins import only each other
and Node's own modules, never the plugin around them (hooks, transport,
configuration): read from the source, because one stray import would make a
contract file depend on the plugin's behaviour and the vectors would no
longer prove the contract alone.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CONTRACT = ROOT / "smf_assurance" / "adapters" / "openclaw" / "src" / "contract"
IMPORT = re.compile(r'^\s*(?:import|export)\b[^;]*?\bfrom\s+"([^"]+)"', re.MULTILINE)


def test_the_twins_import_only_each_other_and_node() -> None:
    files = sorted(CONTRACT.glob("*.ts"))
    assert {p.name for p in files} >= {"canonical.ts", "dsse.ts", "messages.ts", "release.ts"}
    found = 0
    for path in files:
        for spec in IMPORT.findall(path.read_text(encoding="utf-8")):
            found += 1
            if spec.startswith("node:"):
                continue
            assert spec.startswith("./"), f"{path.name} imports {spec}"
            assert "/" not in spec.removeprefix("./"), f"{path.name} imports {spec}"
            assert (CONTRACT / spec.removeprefix("./")).with_suffix(".ts").is_file(), spec
    assert found >= len(files)  # the reader sees imports at all
