"""The gate's legal-hold bucket (``smf_assurance.subjects.holds`` is the contract).

- :func:`open_holds`: the bucket, created when absent (history 1, file storage, no
  direct gets: a read is the leader's, never a lagging replica's), with an empty list
  written when it has none, so the key exists from the first open on;
- :func:`read_holds`: the list and its revision; a key that is not there (the bucket
  or the key deleted under the gate: nats-py reads both as "no key") is
  :class:`HoldsUnavailable`, never "nothing held";
- :func:`change_holds`: add and remove paths by compare-and-set on that revision, so
  two operators changing the list at once both land, neither overwrites the other.

Every failure is :class:`HoldsUnavailable` or :class:`HoldsInvalid`, never an empty
list: a hold that cannot be read must not read as no hold.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from typing import Final

import msgspec
from nats.js.client import JetStreamContext
from nats.js.errors import KeyWrongLastSequenceError
from nats.js.kv import KeyValue

from smf_assurance.pipeline.stores.kv import (
    Retry,
    compare_and_set,
    fail_closed,
    open_strict_bucket,
    read_entry,
)
from smf_assurance.subjects.holds import (
    HOLDS_BUCKET,
    HOLDS_KEY,
    HOLDS_SCHEMA,
    MAX_HOLDS,
    HoldList,
    HoldPathError,
    decode_hold_list,
)

CAS_ATTEMPTS: Final = 16


class HoldsUnavailable(Exception):
    """The bucket did not answer, or refused a write."""


class HoldsInvalid(Exception):
    """The bucket holds what is not a hold list."""


async def open_holds(js: JetStreamContext, replicas: int = 1) -> KeyValue:
    kv = await open_strict_bucket(
        js,
        HOLDS_BUCKET,
        "SMF legal holds: set by the operator, read by the gate for launchers",
        replicas,
        HoldsUnavailable,
        "holds",
    )
    # written before: never overwritten here
    with (
        fail_closed(HoldsUnavailable, "holds", "open"),
        contextlib.suppress(KeyWrongLastSequenceError),
    ):
        await kv.create(HOLDS_KEY, msgspec.json.encode(HoldList(HOLDS_SCHEMA, ())))
    return kv


async def read_holds(kv: KeyValue) -> tuple[HoldList, int]:
    """The list and its revision."""
    found = await read_entry(kv, HOLDS_KEY, HoldsUnavailable, "holds")
    if found is None:
        raise HoldsUnavailable("the hold list is gone from its bucket")
    data, revision = found
    try:
        return decode_hold_list(data or b""), revision
    except (msgspec.DecodeError, HoldPathError) as exc:
        raise HoldsInvalid(f"the stored hold list is not one: {exc}") from exc


async def change_holds(
    kv: KeyValue, add: Iterable[str] = (), remove: Iterable[str] = ()
) -> tuple[HoldList, int]:
    """Add ``add`` and remove ``remove`` (each already a normalised hold path); the list
    and revision written, or as read when nothing changed."""
    adding, removing = set(add), set(remove)

    async def read() -> tuple[HoldList, int]:
        return await read_holds(kv)

    async def attempt(held: HoldList, revision: int) -> tuple[HoldList, int] | Retry:
        paths = tuple(sorted((set(held.paths) | adding) - removing))
        if paths == held.paths:
            return held, revision
        if len(paths) > MAX_HOLDS:
            raise HoldsInvalid(f"the hold list would have more than {MAX_HOLDS} paths")
        new = HoldList(HOLDS_SCHEMA, paths)
        data = msgspec.json.encode(new)
        with fail_closed(HoldsUnavailable, "holds", "write"):
            try:
                written = await kv.update(HOLDS_KEY, data, last=revision)
            except KeyWrongLastSequenceError:
                return Retry.LOST
        return new, written

    def exhausted() -> Exception:
        return HoldsUnavailable("the hold list kept changing; try again")

    result = await compare_and_set(read, attempt, attempts=CAS_ATTEMPTS, exhausted=exhausted)
    assert result is not None  # read never returns None
    return result
