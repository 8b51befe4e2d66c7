"""Content a tainted session wrote, known again by its lines (issue 36, "Taint from
everything the model reads").

A session that read injected text can write a file (a context file such as
``AGENTS.md``, a note, a script) that a later session loads into what its model
reads: the taint would be laundered through the file. The model gateway sees
every tool call's arguments as the model wrote them, so for a call it issues in
a tainted context it records digests of what those arguments could put in a
file (:func:`written_digests`), and for every request it computes the digests
of what the model is shown (:func:`read_digests`); a request that carries one
is tainted like the session that wrote it.

The unit is the normalized line (:func:`normalize_line`), of at least
:data:`MIN_LINE_CHARS` characters:

- why lines: a file is written and read back by lines; a runtime puts a context
  file into its system prompt whole, and a read tool shows it line by line (a
  line-number gutter is taken off, ``12|``, ``   12→``); lines match wherever
  they sit in a request, in any order, among any other text. A digest per line
  is cheap to compute over a whole request (one pass, no rolling window) and
  can be kept per message, so a history is not digested again every turn.
- why a minimum: short lines (``}``, ``# Notes``, ``---``) are in every file;
  their digests would taint every request. Lines under the minimum carry no
  taint, whoever wrote them.
- what else is a unit on the write side: a quoted segment of an argument
  (``echo "..." >> AGENTS.md`` writes the quoted text as a line of its own), and
  a line of a diff with its leading ``+`` taken off (a patch adds it so).

Limits (what this does not see): a line reworded, reflowed, split or joined, or
edited by a character; content shorter than the minimum; content a command
builds (``sed``, ``base64 -d``, a script's output) or fetches (``curl > file``)
rather than carries in its arguments; anything written before the gateway saw
the session, or by a tool call whose context was clear. It over-approximates
too: every argument string of a tainted session is treated as written (a long
path or a command line as much as a file's text), so a later request carrying
such a line verbatim is tainted. Taint only ever raises a decision.

Digest: the first 16 bytes of SHA-256 over ``smf.content-line/1``, a NUL and the
normalized line's UTF-8, in lowercase hex (the contract's form,
``smf_assurance.subjects.tainted_content``). Not keyed: a reader of the bucket
(only model gateways and the operator, docs/BUS-PERMISSIONS.md) can confirm a
line it guesses; the bucket holds no text.

Pure and synchronous (ARCHITECTURE.md, "Layers of the code").
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections.abc import Iterable, Iterator
from typing import Final

import msgspec

MIN_LINE_CHARS: Final = 24
_DOMAIN: Final = b"smf.content-line/1\x00"
_GUTTER: Final = re.compile(r"^\s*\d{1,9}\s*[|│:→\t]\s?")
"""A line-number gutter a read tool puts before each line (``12|``, ``   12→``)."""
_QUOTED: Final = re.compile(r'"([^"\r\n]+)"|\'([^\'\r\n]+)\'')


def normalize_line(line: str) -> str:
    """A line as compared: NFKC (compatibility forms folded), a line-number gutter
    taken off, case folded, runs of whitespace one space, no space at either end."""
    line = _GUTTER.sub("", unicodedata.normalize("NFKC", line), count=1)
    return " ".join(line.casefold().split())


def line_digest(normalized: str) -> str:
    return hashlib.sha256(_DOMAIN + normalized.encode("utf-8")).hexdigest()[:32]


def _digests(units: Iterable[str]) -> Iterator[str]:
    for unit in units:
        normalized = normalize_line(unit)
        if len(normalized) >= MIN_LINE_CHARS:
            yield line_digest(normalized)


def read_digests(text: str) -> frozenset[str]:
    """The digests of the lines of ``text`` (one message, as the model is shown it)."""
    return frozenset(_digests(text.splitlines()))


def _written_units(value: str) -> Iterator[str]:
    for line in value.splitlines():
        yield line
        if line.startswith("+"):
            yield line[1:]
        for match in _QUOTED.finditer(line):
            yield match.group(1) or match.group(2)


def written_digests(arguments: str) -> tuple[str, ...]:
    """The digests of what a tool call's arguments could put in a file: the lines and
    quoted segments of every string value of the decoded JSON (of the text as written
    when it is not JSON), each once, in order of first appearance."""
    try:
        decoded = msgspec.json.decode(arguments)
    except msgspec.DecodeError:
        values: list[str] = [arguments]
    else:
        values = list(string_values(decoded))
    return tuple(dict.fromkeys(_digests(u for v in values for u in _written_units(v))))


def string_values(value: object) -> Iterator[str]:
    """The string values (not the keys) of a decoded JSON value, by an explicit stack."""
    stack: list[object] = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            yield item
        elif isinstance(item, dict):
            stack.extend(reversed(list(item.values())))
        elif isinstance(item, list):
            stack.extend(reversed(item))


__all__ = [
    "MIN_LINE_CHARS",
    "line_digest",
    "normalize_line",
    "read_digests",
    "string_values",
    "written_digests",
]
