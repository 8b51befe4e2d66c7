"""The local deployment's names and defaults that a command's options show.

The default state directory, the principals a state provisions, the log levels, the
credential files' suffix and where bubblewrap is: a command's parser names them in
its options and help, and is built (``--help``, ``completion``) without importing
what provisions a state, connects to the bus or launches a sandbox, so these live
here, apart from them, and import nothing.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Final

OPERATOR: Final = "operator"
"""The local operator: the one principal that may delete or purge streams."""
CONSOLE: Final = "console"
"""The approvers' console relay: reads every tenant's pending announcements, signs nothing."""
PUBLISHER: Final = "release-publisher"
"""Writes signed releases into the release bucket (the signature is the release key's)."""

LOG_LEVELS: Final = ("debug", "info", "warning", "error")
NKEY_SUFFIX: Final = ".nkey"
BWRAP: Final = "/usr/bin/bwrap"


def default_state_dir() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "smf-assurance"
