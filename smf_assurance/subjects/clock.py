"""The system's clocks, in the lowest layer, so every part reads time the same way.

- :func:`wall_clock_ms`: milliseconds since the epoch, the unit of every time on the
  wire (``*_at_ms``, ``not_after_ms``, ``reply_by_ms``) and in the ledger. It is the
  default of every injectable :data:`Clock`; a test passes its own clock instead
  (a decision's deadlines and expiries are judged by the clock it was given, never by
  a second read of the system's).
- :func:`monotonic_s`: seconds that never go back, for how long something took or
  how stale a read is; a wall clock that jumps (NTP, a frozen test clock) must not
  make a stale read look fresh.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Final

Clock = Callable[[], int]
"""Milliseconds since the epoch; injected wherever a deadline or an expiry is judged."""

MonotonicClock = Callable[[], float]
"""Seconds on a clock that never goes back; injected where staleness is judged."""


def wall_clock_ms() -> int:
    """Now, in milliseconds since the epoch (integer arithmetic: no float rounding)."""
    return time.time_ns() // 1_000_000


monotonic_s: Final[MonotonicClock] = time.monotonic
"""Now on the monotonic clock, in seconds: ``time.monotonic`` itself, named here so a
part that judges staleness takes its default from the same place as its wall clock."""
