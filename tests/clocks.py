"""Injected clocks for tests: the gate and its stages take time from a callable."""

from __future__ import annotations

import time


class OffsetClock:
    """Wall time plus an offset a test moves forward (``GateOptions.clock``)."""

    def __init__(self) -> None:
        self.offset_ms = 0

    def __call__(self) -> int:
        return time.time_ns() // 1_000_000 + self.offset_ms

    def advance(self, ms: int) -> None:
        self.offset_ms += ms


class FrozenClock:
    """A clock that stands still at ``now`` until a test sets it."""

    def __init__(self) -> None:
        self.now = time.time_ns() // 1_000_000

    def __call__(self) -> int:
        return self.now

    def advance(self, ms: int) -> None:
        self.now += ms
