"""Reading an operator's TOML file into a checked struct, one way for every such file.

The approver side reads two files the operator writes by hand: the tenant
directory (:mod:`smf_assurance.approver.directory`) and the notifier's
configuration (:mod:`smf_assurance.approver.notify.config`). Both must refuse a
file as a whole, in one line naming the file (a reader never runs on
half a file, and the command that reads it exits with one line, never a
traceback), before any later check of their own.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import TypeVar

import msgspec

T = TypeVar("T")


def one_line(exc: BaseException) -> str:
    """An error's words on one line (a TOML or schema error may span several)."""
    return " ".join(str(exc).split())


def read_toml(path: Path, kind: type[T], error: type[Exception]) -> T:
    """``path`` as ``kind``: unreadable, not UTF-8 TOML, or not of the schema (an unknown
    key, a wrong type, a value out of bounds) is ``error`` with one line naming the file."""
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise error(f"cannot read {path}: {exc.strerror}") from exc
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise error(f"{path} is not TOML: {one_line(exc)}") from exc
    try:
        return msgspec.convert(raw, type=kind)
    except msgspec.ValidationError as exc:
        raise error(f"{path}: {one_line(exc)}") from exc
