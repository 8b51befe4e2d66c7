"""``smf.holds``: the gate tells a runtime's launcher which documents are under legal hold.

The launcher mounts them read-only in the runtime's sandbox (docs/CONFINEMENT.md, "Legal
holds"). The answer is read from the bucket at each request, so it is the list as the
operator last set it; a bucket that cannot be read, or holds what is not a hold list,
is answered ``ok: false`` with its reason code and no path, which the launcher takes
as a refusal to start (or to go on): never as an empty list.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import msgspec
import structlog
from nats.js.kv import KeyValue

from smf_assurance.pipeline.stores.holds import HoldsInvalid, HoldsUnavailable, read_holds
from smf_assurance.subjects.holds import (
    HOLDS_INVALID,
    HOLDS_UNAVAILABLE,
    HoldsAnswer,
    HoldsRequest,
)

log = structlog.get_logger(__name__)

SCHEMA: Final = "smf.holds-answer/1"


def _refused(reason: str) -> bytes:
    return msgspec.json.encode(HoldsAnswer(SCHEMA, False, 0, (), reason))


@dataclass
class HoldsDesk:
    """Answers ``smf.holds`` from the hold bucket the gate opened at its start."""

    bucket: KeyValue

    async def handle(self, data: bytes) -> bytes:
        try:
            msgspec.json.decode(data or b"{}", type=HoldsRequest)
        except msgspec.DecodeError:
            return _refused("malformed_request")
        try:
            held, revision = await read_holds(self.bucket)
        except HoldsUnavailable:
            log.warning("holds_refused", reason=HOLDS_UNAVAILABLE)
            return _refused(HOLDS_UNAVAILABLE)
        except HoldsInvalid:
            log.error("holds_refused", reason=HOLDS_INVALID)
            return _refused(HOLDS_INVALID)
        return msgspec.json.encode(HoldsAnswer(SCHEMA, True, revision, held.paths))
