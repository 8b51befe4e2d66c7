"""How a long-running command stops: by SIGINT or SIGTERM, through its own clean-up.

A module of its own so ``console``, ``notify``, the model gateway and the bus
follower take it without importing ``up``'s supervisor (and with it the whole
stack a gate is made of).
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Iterator
from typing import Final

STOP_SIGNALS: Final = (signal.SIGINT, signal.SIGTERM)


@contextlib.contextmanager
def stop_on_signals() -> Iterator[asyncio.Event]:
    """An event that SIGINT or SIGTERM sets while the block runs, so a long-running
    command stops through its own clean-up rather than mid-write; the handlers are
    removed after. Installed first: a supervisor may stop the command the moment it
    listens, before its readiness line is printed."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in STOP_SIGNALS:
        loop.add_signal_handler(sig, stop.set)
    try:
        yield stop
    finally:
        for sig in STOP_SIGNALS:
            loop.remove_signal_handler(sig)
