"""Run inside the pinned Hermes venv by tests/test_hermes_patch.py.

For each patch text on stdin (JSON ``{"texts": [...]}``, ``{dir}`` standing for
a fresh folder), it seeds the folder, asks the adapter which paths the patch
targets (``smf_assurance.adapters.hermes.mapping.target_paths`` with Hermes's own parser, as
the plugin does), applies the text with Hermes's real ``patch`` tool, and
reports which files changed on disk. One JSON line per text on stdout.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

SEED = ("free.txt", "other.txt", "held/a.txt", "held/b.txt")
SEED_TEXT = "a\nb\nc\n"


def snapshot(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in folder.rglob("*")
        if p.is_file()
    }


def main() -> None:
    root = Path(tempfile.mkdtemp(prefix="smf-patch-"))
    os.environ["HERMES_HOME"] = str(root / "home")
    os.environ["TERMINAL_CWD"] = str(root)
    mapping = importlib.import_module("smf_assurance.adapters.hermes.mapping")
    host = importlib.import_module("smf_assurance.adapters.hermes.attestation").HermesHost(None)
    patch_tool = importlib.import_module("tools.file_tools").patch_tool
    texts: list[str] = json.loads(sys.stdin.read())["texts"]
    for n, template in enumerate(texts):
        folder = root / f"case-{n}"
        for name in SEED:
            (folder / name).parent.mkdir(parents=True, exist_ok=True)
            (folder / name).write_text(SEED_TEXT)
        text = template.replace("{dir}", str(folder))
        targets = mapping.target_paths(
            "patch", {"mode": "patch", "patch": text}, host.patch_targets
        )
        parsed = host.patch_targets(text)
        before = snapshot(folder)
        answer = patch_tool(mode="patch", patch=text, task_id=f"probe-{n}")
        after = snapshot(folder)
        changed = sorted(
            name for name in set(before) | set(after) if before.get(name) != after.get(name)
        )
        report: dict[str, Any] = {
            "case": n,
            "changed": [os.path.realpath(folder / name) for name in changed],
            "targets": sorted({os.path.realpath(os.path.join(folder, p)) for p in targets}),
            "parsed": sorted({os.path.realpath(os.path.join(folder, p)) for p in parsed}),
            "applied": '"success": true' in answer,
        }
        sys.stdout.write(json.dumps(report) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
