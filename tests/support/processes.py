"""The processes a test started and left running, read from ``/proc``."""

from __future__ import annotations

import os
from pathlib import Path


def children() -> set[int]:
    """Live child processes of this test process."""
    mine = str(os.getpid())
    found = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # it ended while we looked
        if fields[1] == mine and fields[0] != "Z":
            found.add(int(stat.parent.name))
    return found
