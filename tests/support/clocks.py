"""Injected clocks for tests: the gate and its stages take time from a callable."""

from __future__ import annotations

from smf_assurance.subjects.clock import wall_clock_ms


class OffsetClock:
    """Wall time plus an offset a test moves forward (``GateOptions.clock``)."""

    def __init__(self) -> None:
        self.offset_ms = 0

    def __call__(self) -> int:
        return wall_clock_ms() + self.offset_ms

    def advance(self, ms: int) -> None:
        self.offset_ms += ms


class FrozenClock:
    """A clock that stands still at ``now`` until a test sets it."""

    def __init__(self) -> None:
        self.now = wall_clock_ms()

    def __call__(self) -> int:
        return self.now

    def advance(self, ms: int) -> None:
        self.now += ms
