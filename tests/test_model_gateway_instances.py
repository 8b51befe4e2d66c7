"""Admission bound to the process that attested (issue 16; docs/HERMES.md, finding 10),
against a real gate, a real nats-server and a fake provider, through the gateway's real
HTTP server.

Proves: once a runtime's attestation names its process (``instance_id``), a request
carrying the runtime's own gateway token is served only with a fresh proof
(``Smf-Instance-Proof``) signed by that runtime's key for an instance whose latest
attestation the gate accepted within its lease, sealed for that very request (its
messages' digest) and accepted once, within seconds (issue 36): the same proof again,
a proof for another body, one without a nonce are refused; a request with no proof, a proof of
another (never attested, or refused) instance, one signed by another runtime's key,
one issued outside the freshness window, one that is garbage, non-canonical or too
long, is refused before the provider is asked, and the gate's ledger records why; a
runtime provisioned ``instance_bound`` is held to it even when its attestation names
no instance; an admission kept for one proof is not reused for a request without it;
a model list is served without a proof (it carries nothing to the provider and is
decided as output) and its admission serves no turn; a runtime whose attestation names
no instance (an adapter that cannot prove its process,
and was not provisioned ``instance_bound``) is served by its token as before (every other
test of the gateway).

Does not prove: that the plugin-less process cannot get a proof some other way (the
runtime key is denied to the agent's tools, issue 17, but the OS user can read it);
a proof replayed to another gate replica within its seconds (each replica remembers
the nonces it accepted), or across a gate restart within them.
The real Hermes: tests/test_hermes_gateway.py.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from smf_assurance.pipeline.stages.attestation import AttestationDesk
from smf_assurance.subjects import names
from smf_assurance.subjects.keys import SigningKey
from smf_assurance.subjects.model_gateway import (
    MAX_INSTANCE_PROOF_CHARS,
    InstanceProof,
    new_instance_id,
    new_proof_nonce,
    request_digest,
    seal_instance_proof,
)
from tests.test_model_gateway import (
    BOUND,
    BOUND_ID,
    OTHER,
    OTHER_ID,
    PRINCIPAL,
    RUNTIME_ID,
    World,
    attest,
    chat,
    decisions,
    error_code,
    gateway_world,
    ledger_reasons,
)

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


async def test_only_the_attested_process_is_served(world: World) -> None:
    """The issue's reproduction: the same runtime id, the same token, a process without
    the adapter (no proof) inside the lease of a fresh attestation."""
    mine = new_instance_id()
    assert (await attest(world, OTHER, OTHER_ID, instance_id=mine)).accepted
    key = world.key(OTHER)
    status, _ = await chat(world, OTHER_ID, headers=proof(key, OTHER_ID, mine))
    assert status == 200
    assert len(world.model.requests) == 1
    # the admission kept for that proof is not one for a request without a proof
    assert await refused(world, OTHER_ID, None) == "instance_proof_missing"
    # a process that never attested, proving with the runtime's own key
    assert (
        await refused(world, OTHER_ID, proof(key, OTHER_ID, new_instance_id()))
        == "runtime_instance_not_attested"
    )
    assert ["instance_proof_missing", REFUSED] in ledger_reasons(world.state)
    assert ["runtime_instance_not_attested", REFUSED] in ledger_reasons(world.state)


async def test_a_proof_signed_for_or_by_another_runtime_is_refused(world: World) -> None:
    mine = new_instance_id()
    assert (await attest(world, PRINCIPAL, RUNTIME_ID, instance_id=mine)).accepted
    assert (await attest(world, OTHER, OTHER_ID, instance_id=mine)).accepted
    # another runtime's key, naming this runtime
    assert (
        await refused(world, RUNTIME_ID, proof(world.key(OTHER), RUNTIME_ID, mine))
        == "instance_proof_invalid"
    )
    # another runtime's own valid proof, sent with this runtime's token
    assert (
        await refused(world, RUNTIME_ID, proof(world.key(OTHER), OTHER_ID, mine))
        == "instance_proof_invalid"
    )
    # a key the registry does not know
    stranger = SigningKey.from_seed(b"\x09" * 32)
    assert (
        await refused(world, RUNTIME_ID, proof(stranger, RUNTIME_ID, mine))
        == "instance_proof_invalid"
    )


async def test_a_proof_outside_its_freshness_window_is_refused(world: World) -> None:
    mine = new_instance_id()
    assert (await attest(world, OTHER, OTHER_ID, instance_id=mine)).accepted
    key = world.key(OTHER)
    for age in (11_000, -11_000):  # captured seconds ago, or dated ahead
        assert (
            await refused(world, OTHER_ID, proof(key, OTHER_ID, mine, age_ms=age))
            == "instance_proof_stale"
        )


@pytest.mark.parametrize(
    "mangle",
    [
        pytest.param(lambda s: s[:-8], id="truncated"),
        pytest.param(lambda s: s + "=", id="padded"),
        pytest.param(lambda s: s[:10] + "+" + s[11:], id="standard-alphabet"),
        pytest.param(lambda _s: "not a proof!", id="garbage"),
        pytest.param(lambda s: s[:40] + ("A" if s[40] != "A" else "B") + s[41:], id="one-char"),
    ],
)
async def test_a_mangled_proof_is_refused(world: World, mangle: object) -> None:
    mine = new_instance_id()
    assert (await attest(world, OTHER, OTHER_ID, instance_id=mine)).accepted
    sealed = proof(world.key(OTHER), OTHER_ID, mine)[names.HEADER_INSTANCE_PROOF]
    assert callable(mangle)
    bad = mangle(sealed)
    assert bad != sealed
    headers = {names.HEADER_INSTANCE_PROOF: bad}
    assert await refused(world, OTHER_ID, headers) == "instance_proof_invalid"


async def test_an_oversized_proof_is_a_bad_request_that_reaches_nobody(world: World) -> None:
    mine = new_instance_id()
    assert (await attest(world, OTHER, OTHER_ID, instance_id=mine)).accepted
    headers = {names.HEADER_INSTANCE_PROOF: "A" * (MAX_INSTANCE_PROOF_CHARS + 1)}
    status, data = await chat(world, OTHER_ID, headers=headers)
    assert (status, error_code(data)) == (400, "instance_proof_malformed")
    assert world.model.requests == []


async def test_an_instance_whose_latest_attestation_was_refused_is_not_served(
    world: World,
) -> None:
    """Two processes of one runtime: each is held to its own latest attestation."""
    first, second = new_instance_id(), new_instance_id()
    key = world.key(PRINCIPAL)
    assert (await attest(world, PRINCIPAL, RUNTIME_ID, instance_id=first)).accepted
    assert (await attest(world, PRINCIPAL, RUNTIME_ID, instance_id=second)).accepted
    for instance in (first, second):
        status, _ = await chat(world, RUNTIME_ID, headers=proof(key, RUNTIME_ID, instance))
        assert status == 200
    ack = await attest(world, PRINCIPAL, RUNTIME_ID, instance_id=second, problems=("x_broken",))
    assert not ack.accepted
    # the runtime's latest word is a refusal: nobody is served
    assert (
        await refused(world, RUNTIME_ID, proof(key, RUNTIME_ID, first))
        == "runtime_attestation_rejected"
    )
    assert (await attest(world, PRINCIPAL, RUNTIME_ID, instance_id=first)).accepted
    status, _ = await chat(world, RUNTIME_ID, headers=proof(key, RUNTIME_ID, first))
    assert status == 200
    assert (
        await refused(world, RUNTIME_ID, proof(key, RUNTIME_ID, second))
        == "runtime_instance_not_attested"
    )


async def test_a_runtime_provisioned_instance_bound_needs_a_proof_whatever_it_attests(
    world: World,
) -> None:
    assert (await attest(world, BOUND, BOUND_ID)).accepted  # names no instance
    assert await refused(world, BOUND_ID, None) == "instance_proof_missing"
    assert (
        await refused(world, BOUND_ID, proof(world.key(BOUND), BOUND_ID, new_instance_id()))
        == "runtime_instance_not_attested"
    )
    mine = new_instance_id()
    assert (await attest(world, BOUND, BOUND_ID, instance_id=mine)).accepted
    status, _ = await chat(world, BOUND_ID, headers=proof(world.key(BOUND), BOUND_ID, mine))
    assert status == 200


async def test_a_runtime_that_names_no_instance_is_served_by_its_token(world: World) -> None:
    """An adapter that cannot prove its process attests no instance: served as before
    unless it was provisioned ``instance_bound`` (both shipped adapters do prove it)."""
    assert (await attest(world, OTHER, OTHER_ID)).accepted
    status, _ = await chat(world, OTHER_ID)
    assert status == 200


async def test_a_model_list_needs_no_proof_and_serves_no_turn(world: World) -> None:
    """Hermes asks for the provider's model list outside its request middleware, so a
    proof-bound runtime's list request carries no proof: it is served (decided as the
    runtime's output), and its admission does not let a turn without a proof through."""
    mine = new_instance_id()
    assert (await attest(world, BOUND, BOUND_ID, instance_id=mine)).accepted
    headers = {"Authorization": f"Bearer {world.tokens[BOUND_ID]}"}
    async with (
        aiohttp.ClientSession() as session,
        session.get(world.gateway.url + "/models", headers=headers) as resp,
    ):
        assert resp.status == 200
        assert (await resp.json())["data"][0]["id"] == "fake-model"
    assert decisions(world.state) == ["allow"]
    assert await refused(world, BOUND_ID, None) == "instance_proof_missing"


@pytest.mark.claim("model-gateway.proof-bound-to-request")
async def test_a_replayed_proof_is_refused(world: World) -> None:
    """The issue's capture: a proof seen on the wire, sent again with the same body within
    its seconds. The first request is served; the second is refused before the provider
    is asked, and the ledger says why. A fresh proof for the same body is served."""
    mine = new_instance_id()
    assert (await attest(world, OTHER, OTHER_ID, instance_id=mine)).accepted
    key = world.key(OTHER)
    captured = proof(key, OTHER_ID, mine)
    status, _ = await chat(world, OTHER_ID, headers=captured)
    assert status == 200
    assert await refused(world, OTHER_ID, captured) == "instance_proof_replayed"
    assert ["instance_proof_replayed", REFUSED] in ledger_reasons(world.state)
    status, _ = await chat(world, OTHER_ID, headers=proof(key, OTHER_ID, mine))
    assert status == 200
    assert len(world.model.requests) == 2


@pytest.mark.claim("model-gateway.proof-bound-to-request")
async def test_a_proof_for_another_body_is_refused(world: World) -> None:
    """A proof sealed for one conversation, lent to another request (never used itself):
    refused, and still good for its own request afterwards (it was never accepted)."""
    mine = new_instance_id()
    assert (await attest(world, OTHER, OTHER_ID, instance_id=mine)).accepted
    key = world.key(OTHER)
    other = [{"role": "user", "content": "File the memo with the court."}]
    lent = proof(key, OTHER_ID, mine, messages=other)
    assert await refused(world, OTHER_ID, lent) == "instance_proof_for_another_request"
    assert ["instance_proof_for_another_request", REFUSED] in ledger_reasons(world.state)
    status, _ = await chat(world, OTHER_ID, headers=proof(key, OTHER_ID, mine, messages=HI))
    assert status == 200


async def test_a_proof_without_a_nonce_is_refused_and_one_naming_no_request_is_once(
    world: World,
) -> None:
    """Every proof is once: one without a nonce is refused. One with a nonce that names no
    request (the OpenClaw adapter's, which cannot see the body it sends) is served once,
    for any body, and refused the second time."""
    mine = new_instance_id()
    assert (await attest(world, OTHER, OTHER_ID, instance_id=mine)).accepted
    key = world.key(OTHER)
    assert (
        await refused(world, OTHER_ID, proof(key, OTHER_ID, mine, nonce=None))
        == "instance_proof_without_nonce"
    )
    unbound = proof(key, OTHER_ID, mine, messages=None)
    assert (await chat(world, OTHER_ID, headers=unbound))[0] == 200
    assert await refused(world, OTHER_ID, unbound) == "instance_proof_replayed"


def test_accepted_nonces_are_forgotten_after_their_window_and_bounded() -> None:
    """The seen-once set holds a nonce until its proof's window ends, then forgets it
    (a proof that old is refused as stale anyway); a full set refuses new proofs."""

    def no_registry() -> Any:
        raise AssertionError("not asked")

    desk = AttestationDesk(required={}, registry=no_registry, clock=lambda: 0, max_proof_nonces=2)
    window = desk.proof_freshness_ms
    assert desk._accept_once("r", "a" * 32, 0, 0) is None
    assert desk._accept_once("r", "a" * 32, 0, window) == "instance_proof_replayed"
    assert desk._accept_once("other", "a" * 32, 0, 0) is None  # per runtime
    assert desk._accept_once("r", "b" * 32, 0, 0) == "instance_proofs_too_many"
    assert desk._accept_once("r", "b" * 32, 0, window + 1) is None  # both forgotten
    assert len(desk._nonces) == 1


async def test_a_body_whose_messages_have_no_canonical_form_is_proven_by_no_proof(
    world: World,
) -> None:
    """Messages with a float have no canonical form, so no digest: a proof that names a
    body never matches one (refused, the provider not asked); the adapter seals none."""
    mine = new_instance_id()
    assert (await attest(world, OTHER, OTHER_ID, instance_id=mine)).accepted
    messages = [{"role": "user", "content": "hi", "weight": 0.5}]
    body = json.dumps({"model": "fake-model", "stream": True, "messages": messages}).encode()
    status, data = await chat(
        world, OTHER_ID, body=body, headers=proof(world.key(OTHER), OTHER_ID, mine)
    )
    assert (status, error_code(data)) == (403, "instance_proof_for_another_request")
    assert world.model.requests == []
