"""Helpers for the SQLite stores' group-commit tests."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from smf_assurance.pipeline.stores.sqlite_worker import SqliteWorker


@asynccontextmanager
async def parked(worker: SqliteWorker) -> AsyncIterator[Callable[[], None]]:
    """Hold the worker thread on a job until the returned callable releases it, so
    transactions made meanwhile queue up; always released on exit."""
    gate, holding = threading.Event(), threading.Event()

    def park(_: sqlite3.Connection) -> None:
        holding.set()
        gate.wait(timeout=60)

    job = asyncio.ensure_future(worker.run(park))
    try:
        assert await asyncio.to_thread(holding.wait, 60)
        yield gate.set
    finally:
        gate.set()
        await job


async def statements(worker: SqliteWorker) -> list[str]:
    """Every SQL statement the worker's connection runs from now on."""
    seen: list[str] = []
    await worker.run(lambda conn: conn.set_trace_callback(seen.append))
    return seen
