"""The model gateway's admission at its edges in time and size ("Model egress is
governed"), against a real gate, a real nats-server and the fake provider, through the
gateway's real HTTP server.

Proves: a runtime that holds a fresh, accepted attestation is still refused when the
gate has no release in force to govern its egress (``no_verified_release``), or once
that release's lease has ended (``release_expired``); and a process proven by its
instance proof is refused once its own attestation's lease ends, although its runtime's
later attestation (of another process) still stands and the gateway would keep the
admission longer: the gate's admission names the earlier of the two ends, and the
gateway keeps it no longer. Each refusal is seen as its effect: the provider was not
asked, and the gate's ledger records the refusal with its reason. On the admission
subject itself (the gateway's own credential): what is not one question (one byte
over the size limit, not an admit, not JSON) gets ``malformed_admit``, no signed
answer and no ledger entry; a question of exactly the limit is answered and recorded.

Does not prove: anything of the time between a release's lease end and the end of an
admission the gateway already kept (``admission_cache_ms``: the reply of such a turn
is output-decided, and the gate denies it with no release in force); clocks that
disagree between the gate and the gateway (both read one clock here).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import msgspec
import pytest

from smf_assurance.ops.local.state import MODEL_GATEWAY
from smf_assurance.subjects import dsse, names
from smf_assurance.subjects.messages import ErrorReply
from smf_assurance.subjects.model_gateway import GatewayAdmission, new_instance_id
from tests.support.clocks import OffsetClock
from tests.support.model_gateway import (
    OTHER,
    OTHER_ID,
    PRINCIPAL,
    RUNTIME_ID,
    World,
    admit_question,
    attest,
    chat,
    gateway_world,
    ledger_reasons,
)
from tests.support.model_gateway_context import connect
from tests.support.model_gateway_instances import REFUSED, proof, refused

MAX_ADMIT_BYTES = 4096
"""The largest admission question the gate reads, written out here (not imported) so
that a changed limit in the desk is seen."""
LEASE_MS = 180_000
"""``RUNTIME_ID``'s attestation lease (the default requirement's)."""


@pytest.fixture
def clock() -> OffsetClock:
    return OffsetClock()


@pytest.fixture
async def world(tmp_path: Path, clock: OffsetClock) -> AsyncIterator[World]:
    async with gateway_world(tmp_path, clock=clock, admission_cache_ms=600_000) as made:
        yield made


@pytest.mark.claim("model-gateway.release-in-force")
async def test_with_no_release_in_force_an_attested_runtime_is_refused(tmp_path: Path) -> None:
    async with gateway_world(tmp_path, release=False) as world:
        assert world.stack.gate.releases is not None
        assert world.stack.gate.releases.active is None
        assert (await attest(world, OTHER, OTHER_ID)).accepted
        assert await refused(world, OTHER_ID, None) == "no_verified_release"
        assert world.model.requests == []
        assert ["no_verified_release", REFUSED] in ledger_reasons(world.state)


@pytest.mark.claim("model-gateway.release-in-force")
async def test_after_the_releases_lease_an_attested_runtime_is_refused(
    world: World, clock: OffsetClock
) -> None:
    """Served while the release is in force; once the gate's clock is past its lease, a
    runtime attested at that time is refused before the provider is asked."""
    assert (await attest(world, PRINCIPAL, RUNTIME_ID)).accepted
    assert (await chat(world, RUNTIME_ID))[0] == 200
    assert len(world.model.requests) == 1
    releases = world.stack.gate.releases
    assert releases is not None
    assert releases.active is not None
    clock.offset_ms = releases.active.manifest.lease_expires_at_ms - clock() + 1
    assert (await attest(world, OTHER, OTHER_ID, age_ms=-clock.offset_ms)).accepted
    assert await refused(world, OTHER_ID, None) == "release_expired"
    assert len(world.model.requests) == 1
    assert ["release_expired", REFUSED] in ledger_reasons(world.state)


@pytest.mark.claim("model-gateway.release-in-force")
async def test_a_proven_process_is_refused_after_its_own_lease(
    world: World, clock: OffsetClock
) -> None:
    """Two processes of one runtime: ``first`` attested 170 s before ``second``. A proof
    of ``first`` is served, and the gateway keeps that admission (it would keep it ten
    minutes); 11 s later ``first``'s lease has ended while ``second``'s runs for almost
    three minutes more, and a fresh proof of ``first`` is refused by the gate: the kept
    admission ended with ``first``'s lease, not its runtime's."""
    key = world.key(PRINCIPAL)
    first, second = new_instance_id(), new_instance_id()
    assert (await attest(world, PRINCIPAL, RUNTIME_ID, instance_id=first)).accepted
    clock.advance(LEASE_MS - 10_000)
    ahead = -clock.offset_ms
    assert (await attest(world, PRINCIPAL, RUNTIME_ID, instance_id=second, age_ms=ahead)).accepted
    status, _ = await chat(world, RUNTIME_ID, headers=proof(key, RUNTIME_ID, first, age_ms=ahead))
    assert status == 200
    assert len(world.model.requests) == 1
    clock.advance(11_000)
    ahead = -clock.offset_ms
    assert (
        await refused(world, RUNTIME_ID, proof(key, RUNTIME_ID, first, age_ms=ahead))
        == "runtime_instance_not_attested"
    )
    assert len(world.model.requests) == 1
    assert ["runtime_instance_not_attested", REFUSED] in ledger_reasons(world.state)
    # the runtime itself still stands: its later process is served
    status, _ = await chat(world, RUNTIME_ID, headers=proof(key, RUNTIME_ID, second, age_ms=ahead))
    assert status == 200
    assert len(world.model.requests) == 2


def padded(size: int) -> bytes:
    """A well-formed admission question of exactly ``size`` bytes (JSON whitespace)."""
    ask = admit_question(OTHER_ID, 0)
    data = msgspec.json.encode(ask)
    assert len(data) <= size
    return data + b" " * (size - len(data))


@pytest.mark.parametrize(
    ("data", "detail"),
    [
        (b'{"schema": "smf.gateway-admit/1"}', "invalid message"),
        (b"{not json", "not JSON"),
    ],
    ids=["not-an-admit", "not-json"],
)
async def test_a_malformed_admission_question_is_refused_unanswered_and_unrecorded(
    world: World, data: bytes, detail: str
) -> None:
    """What is not one admission question gets the desk's ``malformed_admit`` error, no
    signed admission (nothing a gateway could serve on), and no ledger entry."""
    await refused_malformed(world, data, detail)


async def test_a_question_one_byte_over_the_size_limit_is_refused_unanswered_and_unrecorded(
    world: World,
) -> None:
    """``MAX_ADMIT_BYTES`` + 1 bytes of an otherwise well-formed question: refused as
    too large before it is read (the limit's other side is the test below)."""
    await refused_malformed(world, padded(MAX_ADMIT_BYTES + 1), "too large")


async def refused_malformed(world: World, data: bytes, detail: str) -> None:
    before = ledger_reasons(world.state)
    gateway = await connect(world, MODEL_GATEWAY)
    try:
        reply = await gateway.request(names.GATEWAY_ADMIT, data, 5)
    finally:
        await gateway.close()
    assert (reply.headers or {}).get(names.HEADER_SERVICE_ERROR) == "malformed_admit"
    error = msgspec.json.decode(reply.data, type=ErrorReply)
    assert (error.reason_code, error.detail) == ("malformed_admit", detail)
    assert ledger_reasons(world.state) == before
    assert world.model.requests == []


async def answer_of(world: World, data: bytes) -> GatewayAdmission:
    """The gate's signed answer to ``data`` asked on the admission subject with the model
    gateway's own credential, opened with the gate's keys."""
    gateway = await connect(world, MODEL_GATEWAY)
    try:
        reply = await gateway.request(names.GATEWAY_ADMIT, data, 5)
    finally:
        await gateway.close()
    assert names.HEADER_SERVICE_ERROR not in (reply.headers or {})
    answer, _ = dsse.open_struct(
        dsse.decode_envelope(reply.data),
        world.state.gate_keys(),
        GatewayAdmission,
        names.PAYLOAD_GATEWAY_ADMISSION,
    )
    return answer


async def test_a_question_of_exactly_the_size_limit_is_answered(world: World) -> None:
    """The limit is inclusive: a well-formed question of ``MAX_ADMIT_BYTES`` bytes gets
    the gate's signed answer (here a refusal, its runtime never attested), recorded."""
    answer = await answer_of(world, padded(MAX_ADMIT_BYTES))
    assert not answer.admitted
    assert answer.reason_codes == ("runtime_attestation_missing", REFUSED)
    assert ["runtime_attestation_missing", REFUSED] in ledger_reasons(world.state)


async def test_an_admission_names_the_release_detection_window(
    world: World, clock: OffsetClock
) -> None:
    """The gateway sends the window with each turn's output close, so the admission
    carries it: the release in force sets none, so the output gate's default, 4096
    characters, is named (written out here, not imported)."""
    assert (await attest(world, OTHER, OTHER_ID)).accepted
    answer = await answer_of(world, msgspec.json.encode(admit_question(OTHER_ID, clock())))
    assert answer.admitted, answer
    assert answer.detection_window_chars == 4096


async def test_a_seen_proof_refuses_nothing_of_a_runtime_not_bound_to_a_process(
    world: World, clock: OffsetClock
) -> None:
    """``proof_seen`` speaks of an instance proof: a runtime whose attestation names no
    process needs none, so the gate reads none, and a proof the gateway saw before
    (sent along all the same) is no replay of anything the gate admitted on. Its
    admission stands, with no proof standing to keep."""
    assert (await attest(world, OTHER, OTHER_ID)).accepted
    ask = msgspec.structs.replace(admit_question(OTHER_ID, clock()), proof_seen=True)
    answer = await answer_of(world, msgspec.json.encode(ask))
    assert answer.admitted, answer
    assert answer.proof_standing is msgspec.UNSET
