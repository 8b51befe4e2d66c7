"""The gate's legal-hold list: documents no confined runtime may change (docs/CONFINEMENT.md).

A runtime's operator-side files cannot be the authority over what is held: whoever
runs the runtime edits them. The gate's list is:

- kept in the KV bucket :data:`HOLDS_BUCKET`, one key (:data:`HOLDS_KEY`) holding a
  :class:`HoldList`; only the gate's account holds JetStream, so only the gate and the
  operator (``smf-assurance holds add|remove``) can write it, and no runtime can reach
  it at all (docs/BUS-PERMISSIONS.md);
- told to a runtime's launcher on request (:data:`names.HOLDS`): a
  :class:`HoldsAnswer` with the list and the bucket revision it was read at. The
  launcher mounts each path read-only in the sandbox, asks again every second and
  ends the run when the list changes or the gate stops answering (fail closed).

Every path is absolute and normalised (:func:`hold_path`): the list is compared and
mounted as written, so two spellings of one document would be two holds.
"""

from __future__ import annotations

import os
import re
from typing import Annotated, Final, Literal

import msgspec

from smf_assurance.subjects.patterns import Code

HOLDS_BUCKET: Final = "SMF_HOLDS"
HOLDS_KEY: Final = "list"
HOLDS_SCHEMA: Final = "smf.hold-list/1"
MAX_HOLDS: Final = 4096
MAX_HOLD_PATH: Final = 4096
MAX_HOLDS_BYTES: Final = MAX_HOLDS * 256
HOLDS_UNAVAILABLE: Final = "holds_unavailable"
"""The desk's answer when it cannot read the bucket: the launcher refuses to start."""
HOLDS_INVALID: Final = "holds_invalid"
"""The bucket holds what is not a hold list: the launcher refuses to start."""

HoldPath = Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_HOLD_PATH)]
_CONTROL: Final = re.compile(r"[\x00-\x1f\x7f]")


class HoldPathError(ValueError):
    """A path that cannot be held: one line, why."""


def hold_path(text: str) -> str:
    """``text`` as the list keeps it: absolute, normalised (no ``.``, ``..``, doubled or
    trailing ``/``), not the root, no control character. Raises :class:`HoldPathError`."""
    if not text or len(text) > MAX_HOLD_PATH:
        raise HoldPathError(f"a held path must be 1 to {MAX_HOLD_PATH} characters")
    if _CONTROL.search(text):
        raise HoldPathError(f"{text!r} holds a control character")
    if not text.startswith("/"):
        raise HoldPathError(f"{text!r} is not an absolute path")
    normal = os.path.normpath(text)
    if normal.startswith("//"):
        normal = "/" + normal.lstrip("/")
    if normal == "/":
        raise HoldPathError("the root folder cannot be held")
    return normal


def held_under(address: str, paths: frozenset[str]) -> bool | None:
    """Whether ``address`` is a held path or lies under one, compared on whole path
    components of its :func:`hold_path` form (``/a/b`` holds ``/a/b`` and ``/a/b/c``,
    never ``/a/bc``). None when ``address`` is not an absolute path (a relative one, a
    document id, a URL): the list cannot speak for it, so whoever asks keeps what it
    knew. One set lookup per ancestor, so the cost does not grow with the list."""
    if not address.startswith("/"):
        return None  # every proposal's document id or URL: not walked character by character
    try:
        path = hold_path(address)
    except HoldPathError:
        return None
    while path:
        if path in paths:
            return True
        path = path[: path.rfind("/")]
    return False


class HoldList(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """The stored list (:data:`HOLDS_KEY`): sorted, no duplicates, each a :func:`hold_path`."""

    schema: Literal["smf.hold-list/1"]
    paths: Annotated[tuple[HoldPath, ...], msgspec.Meta(max_length=MAX_HOLDS)]


def checked(held: HoldList) -> HoldList:
    """``held`` if every path is already normalised, sorted and unique; raises
    :class:`HoldPathError` otherwise (a stored list no launcher should mount)."""
    for path in held.paths:
        if hold_path(path) != path:
            raise HoldPathError(f"{path!r} is not normalised")
    if list(held.paths) != sorted(set(held.paths)):
        raise HoldPathError("the hold list is not sorted and unique")
    return held


def decode_hold_list(data: bytes) -> HoldList:
    """The stored value; raises ``msgspec.DecodeError`` or :class:`HoldPathError`."""
    if len(data) > MAX_HOLDS_BYTES:
        raise HoldPathError("the hold list is too large")
    return checked(msgspec.json.decode(data, type=HoldList))


class HoldsRequest(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """What a launcher sends on :data:`names.HOLDS`; it names nothing: the list is the
    deployment's, the same for every runtime."""

    schema: Literal["smf.holds-request/1"] = "smf.holds-request/1"


class HoldsAnswer(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """The gate's answer: the list at ``revision`` (the bucket's), or ``ok`` False with
    the reason code and no paths."""

    schema: Literal["smf.holds-answer/1"]
    ok: bool
    revision: int
    paths: Annotated[tuple[HoldPath, ...], msgspec.Meta(max_length=MAX_HOLDS)]
    reason: Code | None = None
