"""A gate's background loop ends when cancelled, even when an awaited call lost the
cancel (smf_assurance/pipeline/assembly/loops.py).

Python 3.11's ``asyncio.wait_for`` drops a cancel that lands as the awaited call
completes: the call returns normally and the task goes on. A sweep loop that only
checked for a pending cancel where it caught an error then ran every 0.2 s for
ever, and ``RunningGate.close()`` waited for it (seen as a 15 s teardown timeout of
``tests/bus/test_direct_outcomes.py`` under load, one run in thirty). Here the
desks' ``sweep`` swallows the cancel outright, the way such a call does; the loop
must end within a pass, not run on.

The stand-ins are only what the loop calls (``sweep()`` on each desk): what is
proved is the loop's own control, whatever its collaborators do with a cancel.
"""

from __future__ import annotations

import asyncio
from typing import Any, cast

from smf_assurance.pipeline.assembly.loops import sweep


class _Swallowing:
    """A desk whose sweep loses a cancel that lands during it, as wait_for can."""

    def __init__(self) -> None:
        self.passes = 0
        self.inside = asyncio.Event()

    async def sweep(self) -> None:
        self.passes += 1
        self.inside.set()
        try:
            await asyncio.sleep(0.05)
        except asyncio.CancelledError:
            return  # the cancel is gone; the call returns normally


class _Buffer:
    def sweep(self) -> None:
        return None


async def test_a_sweep_whose_cancel_was_swallowed_still_ends() -> None:
    desk = _Swallowing()
    task = asyncio.create_task(
        sweep(cast(Any, desk), cast(Any, _Swallowing()), cast(Any, _Buffer()), every=0.0)
    )
    await desk.inside.wait()
    task.cancel()  # lands inside the desk's sweep, which swallows it
    done, _ = await asyncio.wait({task}, timeout=5)
    assert done == {task}, "the loop ran on after its cancel"
    assert task.cancelled()
    passes = desk.passes
    await asyncio.sleep(0.2)
    assert desk.passes == passes == 1  # no pass after the one the cancel landed in
