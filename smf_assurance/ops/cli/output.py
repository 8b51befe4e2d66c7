"""How the command line speaks: tables for people, JSON on request, one-line failures.

Every subcommand prints a human-readable table by default and JSON with
``--json``; a failure exits non-zero with a one-line reason on stderr;
anything that takes more than a second shows progress on stderr, so stdout
stays clean for pipes.
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TextIO

import msgspec

if TYPE_CHECKING:
    from smf_assurance.ops.cli.cli_json import CliJson
from smf_assurance.subjects.canonical import canonical_bytes
from smf_assurance.subjects.clock import monotonic_s


class CommandError(Exception):
    """A failure the user can act on; printed as one line, exit status ``code``.

    ``reason_code``, when the failure has one in the gate's words, is what a
    JSON refusal carries for a script, so a script need not parse prose."""

    def __init__(self, message: str, code: int = 1, reason_code: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.reason_code = reason_code


def fail(message: str, code: int = 1, reason_code: str | None = None) -> NoReturn:
    raise CommandError(message, code, reason_code)


def _whole_number(text: str, least: int, what: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < least:
        raise argparse.ArgumentTypeError(f"{value} is not {what}")
    return value


def positive_int(text: str) -> int:
    """An argparse ``type`` for a count: a whole number above zero, else a usage
    error (exit 2), so ``bench --rounds 0`` is refused rather than run on some default."""
    return _whole_number(text, 1, "a positive whole number")


def given_path(text: str) -> Path:
    """An argparse ``type`` for a path the command writes into or reads from: an empty
    value is a usage error (exit 2), never the current folder ``Path("")`` stands for."""
    if not text.strip():
        raise argparse.ArgumentTypeError("an empty path")
    return Path(text)


def non_negative_int(text: str) -> int:
    """An argparse ``type`` for a count where none is a choice (``--burners 0``): a
    whole number, zero or more, else a usage error (exit 2)."""
    return _whole_number(text, 0, "zero or more")


def positive_float(text: str) -> float:
    """An argparse ``type`` for a duration in seconds: a number above zero."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text} is not a positive number")
    return value


def port_number(text: str) -> int:
    """An argparse ``type`` for a TCP port: 0 (any free one) to 65535."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"{value} is not a port number (0 to 65535)")
    return value


def parse_time(text: str, option: str) -> int:
    """An RFC 3339 time with a zone (``2026-11-30T12:00:00Z``) as Unix ms, or a usage
    error naming ``option``: a time without a zone would mean this machine's."""
    try:
        moment = dt.datetime.fromisoformat(text)
    except ValueError:
        fail(f"{option}: {text!r} is not an RFC 3339 timestamp", 2)
    if moment.tzinfo is None:
        fail(f"{option}: the timestamp needs a time zone (e.g. Z)", 2)
    return int(moment.timestamp() * 1000)


def parse_instant(text: str) -> int:
    """``--at``: an RFC 3339 time with a zone as Unix ms (:func:`parse_time`)."""
    return parse_time(text, "--at")


def format_instant(ms: int) -> str:
    """Unix ms as RFC 3339 in UTC (``2026-11-29T10:00:00Z``). Here rather than in a
    command's module, so the commands that print a time (``eval``, ``swarm``,
    ``approvals``, the team's review) do not import one another's."""
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).isoformat().replace("+00:00", "Z")


def first_line(exc: BaseException) -> str:
    """An exception as one line for a refusal: its first line, or its type's name."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def say(text: str, out: TextIO | None = None) -> None:
    """One line of human-readable output."""
    (out or sys.stdout).write(text + "\n")


def emit(value: CliJson, out: TextIO | None = None) -> None:
    """A command's ``--json`` output: its declared type (``smf_assurance.ops.cli.cli_json``),
    checked
    against that type, as canonical JSON on one line (the same input always prints
    the same bytes).

    A documented schema per command: only a declared Struct can be
    printed, so no undeclared field reaches a script, and the value is validated
    against its own type first, so an id cut short or a display string where an
    enum belongs is an error here rather than a surprise for the reader."""
    builtins = msgspec.to_builtins(value)
    msgspec.convert(builtins, type=type(value))
    (out or sys.stdout).write(canonical_bytes(builtins).decode("utf-8") + "\n")


def cell(value: Any) -> str:
    """A value as a person reads it in a table, never Python's ``True`` or ``[]``:
    yes/no, ``-`` for nothing, a list as ``a, b``."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (list, tuple, set, frozenset)):
        return ", ".join(cell(v) for v in value) or "-"
    return str(value)


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]], out: TextIO | None = None) -> None:
    out = out or sys.stdout
    cells = [[str(h) for h in headers]] + [[cell(c) for c in r] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    for n, row in enumerate(cells):
        out.write("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() + "\n")
        if n == 0:
            out.write("  ".join("-" * w for w in widths) + "\n")


class Progress:
    """A one-line progress indicator on stderr, shown only on a terminal."""

    def __init__(self, label: str, total: int, stream: TextIO | None = None) -> None:
        self.label = label
        self.total = total
        self.stream = stream or sys.stderr
        self.enabled = self.stream.isatty()
        self._last = 0.0

    def update(self, done: int) -> None:
        now = monotonic_s()
        if self.enabled and (now - self._last > 0.2 or done >= self.total):
            self._last = now
            self.stream.write(f"\r{self.label}: {done}/{self.total}")
            self.stream.flush()

    def close(self) -> None:
        if self.enabled:
            self.stream.write("\n")
