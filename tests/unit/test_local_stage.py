"""A co-located stage is called under the gate's deadline (smf_assurance.pipeline.chain.transport).

Proves: a co-located stage's reply is returned as it is; a stage that outlasts
the deadline is refused ``stage_timeout`` and is cancelled, not left running;
a stage's own refusal reaches the caller unchanged. Does not prove: the bus
transport (see the stage authentication and bus gate tests).
"""

from __future__ import annotations

import asyncio

import msgspec
import pytest

from smf_assurance.pipeline.chain.transport import LocalStage
from smf_assurance.pipeline.service import StageRefusal


class Ask(msgspec.Struct, frozen=True):
    n: int


class Answer(msgspec.Struct, frozen=True):
    n: int


async def double(request: Ask) -> Answer:
    return Answer(request.n * 2)


async def test_a_co_located_stage_answers_with_its_struct() -> None:
    assert await LocalStage(double).call(Ask(21), timeout=1.0) == Answer(42)


async def test_a_stage_past_its_deadline_is_refused_and_cancelled() -> None:
    cancelled = asyncio.Event()

    async def stuck(request: Ask) -> Answer:
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return Answer(request.n)

    with pytest.raises(StageRefusal) as refusal:
        await LocalStage(stuck).call(Ask(1), timeout=0.05)
    assert refusal.value.reason_code == "stage_timeout"
    assert cancelled.is_set()


async def test_a_stage_refusal_reaches_the_caller_unchanged() -> None:
    async def refuse(request: Ask) -> Answer:
        raise StageRefusal("unmapped_tool", "detail")

    with pytest.raises(StageRefusal) as refusal:
        await LocalStage(refuse).call(Ask(1), timeout=1.0)
    assert refusal.value.reason_code == "unmapped_tool"
    # The caller's task is not left cancelled by the deadline it did not reach.
    task = asyncio.current_task()
    assert task is not None
    assert task.cancelling() == 0
