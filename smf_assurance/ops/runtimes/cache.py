"""The per-user cache where pinned runtimes are installed once and reused.

The brief: "cache their installs in a per-user cache folder keyed by the pinned
version, so a second run on the same machine is fast and a new machine still
works". Hermes (:mod:`smf_assurance.ops.runtimes.hermes_env`) and OpenClaw
(:mod:`smf_assurance.ops.runtimes.openclaw_env`)
each install into ``cache_root() / <name>-<version>`` and hold
:func:`install_lock` while they check or build it, so concurrent test processes
never install into one folder at the same time.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def cache_root() -> Path:
    """``${XDG_CACHE_HOME:-~/.cache}/smf-assurance``."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "smf-assurance"


@contextmanager
def install_lock(folder: Path) -> Iterator[None]:
    """An exclusive ``flock`` on ``<folder>.lock`` beside the install folder."""
    path = folder.with_name(folder.name + ".lock")
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)
