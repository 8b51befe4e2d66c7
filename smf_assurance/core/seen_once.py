"""A bounded seen-once set: each key is accepted once until its own expiry.

What a replay check needs (an instance proof's nonce, accepted once within its
freshness window): the gate's attestation desk and the model gateway keep one
each. Pure and synchronous: the caller says what time it is.

Bounded, and refusing when full rather than forgetting early: a key dropped
before its expiry could be accepted a second time, which is the replay the set
exists to stop. Keys are kept in acceptance order and forgotten from the front
once expired; one that expires later than the next is kept until the next
expires too (kept longer, never dropped early).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Literal

Seen = Literal["accepted", "replayed", "full"]


@dataclass
class SeenOnce:
    limit: int
    _until: OrderedDict[Hashable, int] = field(default_factory=OrderedDict)

    def accept(self, key: Hashable, until_ms: int, now_ms: int) -> Seen:
        """Accept ``key`` (kept until ``until_ms``), or say it was seen before or that
        the set is full (then it is not kept)."""
        while self._until:
            first, until = next(iter(self._until.items()))
            if until >= now_ms:
                break
            del self._until[first]
        if key in self._until:
            return "replayed"
        if len(self._until) >= self.limit:
            return "full"
        self._until[key] = until_ms
        return "accepted"

    def __len__(self) -> int:
        return len(self._until)
