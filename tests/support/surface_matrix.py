"""Every model-callable tool of a pinned runtime, against the adapter's mapper table.

The tables in docs/HERMES.md and docs/OPENCLAW.md between the ``surface-matrix``
markers are generated here, from what the installed runtime itself offers
(Hermes: its tool registry, ``tests/support/hermes_tools_probe.py``; OpenClaw: the
``tools`` of the model request of a default turn), and the gate's mapper table
(``smf_assurance/pipeline/mappers/<adapter>.json``). A tool the table does not map is
denied by the gate as ``unknown_tool``. The tests fail when the runtime offers
a tool the docs do not name, or the docs name one it does not offer; run them
with ``SMF_UPDATE_SURFACES=1`` to rewrite the tables instead.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Final

ROOT: Final = Path(__file__).resolve().parents[2]
UPDATE_ENV: Final = "SMF_UPDATE_SURFACES"


def mapper_capabilities(adapter_id: str) -> dict[str, str]:
    """Native tool -> capability, from the gate's mapper table for ``adapter_id``."""
    table = json.loads(
        (ROOT / "smf_assurance" / "pipeline" / "mappers" / f"{adapter_id}.json").read_text()
    )
    return {name: str(entry["capability"]) for name, entry in table["tools"].items()}


def render(offered: Mapping[str, str], mapper: Mapping[str, str], elsewhere: Iterable[str]) -> str:
    """One row per offered tool (``offered``: tool -> toolset), then the mapper's tools
    named in ``elsewhere`` that the runtime registers outside what was listed."""
    rows = ["| tool | toolset | at the gate |", "| --- | --- | --- |"]
    for name in sorted(offered):
        verdict = f"mapped: `{mapper[name]}`" if name in mapper else "denied: `unknown_tool`"
        rows.append(f"| `{name}` | {offered[name] or '-'} | {verdict} |")
    for name in sorted(set(elsewhere) - set(offered)):
        rows.append(f"| `{name}` | not offered here | mapped: `{mapper[name]}` |")
    return "\n".join(rows)


def markers(runtime: str) -> tuple[str, str]:
    return (
        f"<!-- surface-matrix:{runtime}:begin (tests/support/surface_matrix.py; do not edit) -->",
        f"<!-- surface-matrix:{runtime}:end -->",
    )


def compare(doc: Path, runtime: str, table: str) -> str | None:
    """``None`` when ``doc`` holds ``table`` between the runtime's markers; otherwise
    what differs (or, with ``SMF_UPDATE_SURFACES=1``, rewrite it and return None)."""
    begin, end = markers(runtime)
    text = doc.read_text()
    if begin not in text or end not in text:
        return f"{doc.name} has no {begin} ... {end} section"
    head, rest = text.split(begin, 1)
    current, tail = rest.split(end, 1)
    if current.strip() == table.strip():
        return None
    if os.environ.get(UPDATE_ENV) == "1":
        doc.write_text(f"{head}{begin}\n{table}\n{end}{tail}")
        return None
    have = {line for line in current.strip().splitlines()}
    want = set(table.splitlines())
    return (
        f"{doc.name}'s {runtime} surface matrix is stale (rerun with {UPDATE_ENV}=1): "
        f"missing {sorted(want - have)}, not offered {sorted(have - want)}"
    )
