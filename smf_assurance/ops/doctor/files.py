"""``doctor``'s look at the state folder's modes: who but its owner may read it?

ARCHITECTURE.md, "Evidence", and docs/EVIDENCE.md ("file modes"): the state folder
holds the ledger, the approvals with the content of every held action, the keys and
the embedded nats-server's store of orders. Its files are 0600 and its folders 0700
(``up`` and ``demo`` create them so, the stores whatever the umask); the gate itself
refuses to start on a store file or folder others may enter
(``smf_assurance.pipeline.stores.state_check``). This check covers the whole tree,
asked of the files, not the bus: each path with a group or other permission bit is a
``fail`` naming it and the ``chmod`` that fixes it (the first few by name, the rest
counted), symbolic links are not followed, and nothing is changed.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Final

from smf_assurance.ops.doctor.checks import Check, Settings
from smf_assurance.pipeline.stores.state_check import PRIVATE

__all__ = ["NAMED", "file_checks"]

NAMED: Final = 5
"""Too-open paths named one row each; the others are counted in one more row."""


def file_checks(settings: Settings) -> list[Check]:
    state = settings.state
    if state is None or not state.root.is_dir():
        where = "no state directory" if state is None else f"no state directory at {state.root}"
        return [Check("files", None, "skip", f"{where}: its modes were not checked")]
    root = state.root
    too_open: list[tuple[Path, int]] = []
    folders = files = 0
    for path in _tree(root):
        info = path.lstat()
        if stat.S_ISDIR(info.st_mode):
            folders += 1
        elif stat.S_ISREG(info.st_mode):
            files += 1
        else:
            continue  # a link, a socket: not followed, holds nothing itself
        if stat.S_IMODE(info.st_mode) & PRIVATE:
            too_open.append((path, stat.S_IMODE(info.st_mode)))
    if not too_open:
        detail = f"{files} file(s) and {folders} folder(s): its owner's alone (0600/0700)"
        return [Check("files", str(root), "ok", detail)]
    checks = [
        Check(
            "files",
            str(path),
            "fail",
            f"mode {mode:04o}: others may {'enter' if path.is_dir() else 'read'} it",
            f"chmod {'700' if path.is_dir() else '600'} '{path}'",
        )
        for path, mode in too_open[:NAMED]
    ]
    if len(too_open) > NAMED:
        checks.append(
            Check(
                "files",
                str(root),
                "fail",
                f"{len(too_open) - NAMED} more path(s) others may read or enter",
                f"chmod -R go-rwx '{root}'",
            )
        )
    return checks


def _tree(root: Path) -> list[Path]:
    """The root and everything beneath it, folders before their contents, in name order."""
    found = [root]
    for folder, subfolders, names in os.walk(root, followlinks=False):
        subfolders.sort()
        base = Path(folder)
        found += [base / name for name in subfolders]
        found += [base / name for name in sorted(names)]
    return found
