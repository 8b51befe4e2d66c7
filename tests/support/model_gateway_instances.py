"""The fixtures, builders and constants of tests/bus/test_model_gateway_instances.py
that other test modules use too: here, so that no test module imports another."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from smf_assurance.subjects import names
from smf_assurance.subjects.keys import SigningKey
from smf_assurance.subjects.model_gateway import (
    InstanceProof,
    new_proof_nonce,
    request_digest,
    seal_instance_proof,
)
from tests.support.model_gateway import (
    World,
    chat,
    error_code,
    gateway_world,
)

__all__ = ["REFUSED", "proof", "refused"]

REFUSED = "model_request_refused"


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    async with gateway_world(tmp_path) as made:
        yield made


HI = [{"role": "user", "content": "hi"}]
"""The messages of ``chat``'s default body."""


UNSET: Any = object()


def proof(
    key: SigningKey,
    runtime_id: str,
    instance_id: str,
    *,
    age_ms: int = 0,
    messages: Any = UNSET,
    nonce: str | None = UNSET,
) -> dict[str, str]:
    """A proof for one request (by default ``chat``'s default body), with a fresh nonce;
    ``messages=None`` seals one that names no request (the OpenClaw adapter's)."""
    sealed = seal_instance_proof(
        InstanceProof(
            schema="smf.instance-proof/1",
            runtime_id=runtime_id,
            instance_id=instance_id,
            issued_at_ms=time.time_ns() // 1_000_000 - age_ms,
            nonce=new_proof_nonce() if nonce is UNSET else nonce,
            request_digest=None
            if messages is None
            else request_digest(HI if messages is UNSET else messages),
        ),
        key,
    )
    return {names.HEADER_INSTANCE_PROOF: sealed}


async def refused(world: World, runtime_id: str, headers: dict[str, str] | None) -> str:
    """The reason the gateway gave; asserts the provider was never asked."""
    asked = len(world.model.requests)
    status, data = await chat(world, runtime_id, headers=headers)
    assert status == 403, data
    assert len(world.model.requests) == asked
    return error_code(data)
