"""Admission bound to the process that attested (docs/HERMES.md, finding 10),
against a real gate, a real nats-server and a fake provider, through the gateway's real
HTTP server.

Proves: once a runtime's attestation names its process (``instance_id``), a request
carrying the runtime's own gateway token is served only with a fresh proof
(``Smf-Instance-Proof``) signed by that runtime's key for an instance whose latest
attestation the gate accepted within its lease, sealed for that very request (its
messages' digest) and accepted once, within seconds: the same proof again,
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

A process's later proofs are checked by the gateway on the gate's kept admission of its
first (the admission names the runtime's public keys): served without a gate round
trip only when every check holds; any other proof, and a replay of one served so, is
asked about and refused by the gate, recorded.

Does not prove: that the plugin-less process cannot get a proof some other way (the
runtime key is denied to the agent's tools, but the OS user can read it);
a proof replayed to another gate replica or another gateway process within its seconds
(each remembers the nonces it saw), or across a restart of either within them; a
replay to the gate while the gateway's clock is ahead of the gate's by more than the
window; that a refused re-attestation stops a kept admission before it ends
(``admission_cache_ms``: the provider may be asked; the reply is withheld, as the gate
decides a turn served on a proof by that process's own latest attestation).
The real Hermes: tests/test_hermes_gateway.py.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import msgspec
import nats
import pytest
from structlog.testing import capture_logs

from smf_assurance.core.seen_once import SeenOnce
from smf_assurance.gateway.server import (
    GatewayRuntime,
    GatewaySettings,
    ModelGateway,
    Refusal,
    _Standing,
)
from smf_assurance.ops.local.defaults import OPERATOR
from smf_assurance.pipeline.desks.attestation import AttestationDesk
from smf_assurance.subjects import names
from smf_assurance.subjects.keys import SigningKey
from smf_assurance.subjects.model_gateway import (
    MAX_INSTANCE_PROOF_CHARS,
    GatewayAdmission,
    GatewayAdmit,
    InstanceProof,
    ProofKey,
    ProofStanding,
    new_instance_id,
    proof_keys,
    seal_instance_proof,
    trusted_proof_keys,
)
from tests.support.bus_helpers import wait_for
from tests.support.model_gateway import (
    ACTOR,
    BOUND,
    BOUND_ID,
    OTHER,
    OTHER_ID,
    PRINCIPAL,
    RUNTIME_ID,
    TERMINAL,
    World,
    attest,
    chat,
    decisions,
    error_code,
    gateway_world,
    ledger_reasons,
    sse_text,
)
from tests.support.model_gateway_instances import HI, REFUSED, proof, refused, world

__all__ = ["world"]


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


@pytest.mark.claim("model-gateway.proof-bound-to-request")
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


async def _refused_once_kept_admission_ends(
    world: World, key: SigningKey, instance: str, reason: str
) -> None:
    """Requests with ``instance``'s proof until the gate refuses one at admission with
    ``reason`` (the gateway may still hold a kept admission of the process for up to
    ``admission_cache_ms``, 1 s here); every reply served meanwhile is the withheld
    notice, never the provider's text."""
    shown: list[bytes] = []

    async def refused_at_admission() -> bool:
        status, data = await chat(world, RUNTIME_ID, headers=proof(key, RUNTIME_ID, instance))
        if status == 200:
            shown.append(data)
            return False
        assert (status, error_code(data)) == (403, reason)
        return True

    await wait_for(refused_at_admission, timeout=15)
    for data in shown:
        text, _, _ = sse_text(data)
        assert "withheld" in text
        assert "OK." not in text  # the fake provider's reply


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
    # the runtime's latest word is a refusal: nobody is served. A kept admission of
    # either process may still reach the provider; nothing of its reply reaches the
    # runtime (the gate decides the output by the same standing).
    await _refused_once_kept_admission_ends(world, key, first, "runtime_attestation_rejected")
    assert ["runtime_attestation_rejected", REFUSED] in ledger_reasons(world.state)
    assert (await attest(world, PRINCIPAL, RUNTIME_ID, instance_id=first)).accepted
    status, _ = await chat(world, RUNTIME_ID, headers=proof(key, RUNTIME_ID, first))
    assert status == 200
    # ``first`` attesting again does not stand for ``second``, kept admission or not
    await _refused_once_kept_admission_ends(world, key, second, "runtime_instance_not_attested")


@pytest.mark.claim("model-gateway.kept-admission-output-per-process")
async def test_a_kept_admission_of_a_process_since_refused_gets_no_output(
    tmp_path: Path,
) -> None:
    """The event order the test above meets only by chance: the gateway still keeps
    ``second``'s admission (here for a minute) after ``second``'s latest attestation was
    refused and ``first``'s accepted again. The request reaches the provider on the kept
    admission; the output close names ``second`` (``OutputClose.instance_id``), so the
    gate decides it by ``second``'s own standing, not by the runtime's latest word, and
    the runtime sees the withheld notice only."""
    async with gateway_world(tmp_path, admission_cache_ms=60_000) as world:
        first, second = new_instance_id(), new_instance_id()
        key = world.key(PRINCIPAL)
        assert (await attest(world, PRINCIPAL, RUNTIME_ID, instance_id=first)).accepted
        assert (await attest(world, PRINCIPAL, RUNTIME_ID, instance_id=second)).accepted
        status, data = await chat(world, RUNTIME_ID, headers=proof(key, RUNTIME_ID, second))
        assert status == 200
        assert "OK." in sse_text(data)[0]
        ack = await attest(world, PRINCIPAL, RUNTIME_ID, instance_id=second, problems=("x_broken",))
        assert not ack.accepted
        assert (await attest(world, PRINCIPAL, RUNTIME_ID, instance_id=first)).accepted
        asked = len(world.model.requests)
        status, data = await chat(world, RUNTIME_ID, headers=proof(key, RUNTIME_ID, second))
        assert status == 200
        assert len(world.model.requests) == asked + 1  # served on the kept admission
        text, _, _ = sse_text(data)
        assert "withheld" in text
        assert "runtime_instance_not_attested" in text
        assert "OK." not in text
        # ``first`` stands: its output is released on the same runtime's standing
        status, data = await chat(world, RUNTIME_ID, headers=proof(key, RUNTIME_ID, first))
        assert status == 200
        assert "OK." in sse_text(data)[0]


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


@contextlib.asynccontextmanager
async def admit_tap(world: World, marker: str = BOUND_ID) -> AsyncIterator[list[GatewayAdmit]]:
    """Every question the gateway puts to the gate (``smf.gateway.admit``), in the order it
    put them: an operator's subscription on the subject the gate serves (in the gate's
    account; the gateway asks from its own, through the server's service import).

    Counted from the first question it is seen to receive: a tap subscribed and flushed
    before the first question crossed into the gate's account was seen to miss that
    question while the gate answered it (5 of 80 runs under load, nats-server 2.15.1;
    cause not found). So it first receives a question about ``marker`` (a runtime the
    test leaves unattested, refused), asking again every half second unseen; questions
    about ``marker`` are not listed."""
    credential = world.state.existing_credential(OPERATOR)
    assert credential is not None
    errors: list[str] = []

    async def failed(exc: Exception) -> None:
        errors.append(type(exc).__name__)

    nc = await nats.connect(world.stack.url, error_cb=failed, **credential.connect_options())
    asked: list[GatewayAdmit] = []
    marks: list[GatewayAdmit] = []

    async def record(msg: Any) -> None:
        try:
            question = msgspec.json.decode(msg.data, type=GatewayAdmit)
        except msgspec.DecodeError:
            errors.append("undecodable question")
            return
        (marks if question.runtime_id == marker else asked).append(question)

    await nc.subscribe(names.GATEWAY_ADMIT, cb=record)
    await nc.flush()
    try:
        for _ in range(10):
            assert await refused(world, marker, None) == "runtime_attestation_missing"
            with contextlib.suppress(AssertionError):
                await wait_for(lambda: bool(marks), timeout=0.5)
                break
        assert marks, "the tap saw none of ten questions"
        yield asked
    finally:
        await nc.close()
    assert errors == []


async def asked_about(asked: list[GatewayAdmit], headers: dict[str, str] | None) -> None:
    """Wait until the gate was asked about this request (its proof, or none)."""
    sealed = None if headers is None else headers[names.HEADER_INSTANCE_PROOF]
    await wait_for(lambda: any(a.instance_proof == sealed for a in asked))


@pytest.mark.claim("model-gateway.proof-checked-at-gateway")
async def test_a_proven_process_is_served_on_its_kept_admission_and_a_replay_still_refused(
    world: World,
) -> None:
    """The gate admits a process's first proof and names its keys; the next request of
    that process, with its own fresh proof, is served without asking the gate (the tap
    never sees it: a later question is seen, and questions arrive in the order asked).
    That proof, replayed, is refused though the admission is kept: the gateway saw its
    nonce, the gate refuses it as replayed and the ledger records it."""
    mine = new_instance_id()
    key = world.key(OTHER)
    async with admit_tap(world) as asked:
        assert (await attest(world, OTHER, OTHER_ID, instance_id=mine)).accepted
        first, second = proof(key, OTHER_ID, mine), proof(key, OTHER_ID, mine)
        for headers in (first, second):
            status, _ = await chat(world, OTHER_ID, headers=headers)
            assert status == 200
        assert len(world.model.requests) == 2
        # a request without a proof is asked about (and refused): a marker in the order
        assert await refused(world, OTHER_ID, None) == "instance_proof_missing"
        await asked_about(asked, None)
        sealed = [a.instance_proof for a in asked]
        assert sealed == [first[names.HEADER_INSTANCE_PROOF], None]
        # the second proof never reached the gate; replayed, it is refused all the same
        assert await refused(world, OTHER_ID, second) == "instance_proof_replayed"
        await asked_about(asked, second)
        assert asked[-1].proof_seen is True
        assert ["instance_proof_replayed", REFUSED] in ledger_reasons(world.state)
        # and the first, which the gate admitted, likewise
        assert await refused(world, OTHER_ID, first) == "instance_proof_replayed"
    assert len(world.model.requests) == 2


@pytest.mark.claim("model-gateway.proof-checked-at-gateway")
async def test_a_proof_the_gateway_cannot_check_itself_goes_to_the_gate(world: World) -> None:
    """On a kept admission of a process, a proof that fails any of the gate's checks is
    not served on it: it is asked about, and the gate refuses it and records why (for
    another body, stale, signed by another runtime's key, naming no nonce); a proof of
    another process of the same runtime is asked about too, and served."""
    mine, sibling = new_instance_id(), new_instance_id()
    assert (await attest(world, PRINCIPAL, RUNTIME_ID, instance_id=mine)).accepted
    assert (await attest(world, PRINCIPAL, RUNTIME_ID, instance_id=sibling)).accepted
    key = world.key(PRINCIPAL)
    other = [{"role": "user", "content": "File the memo with the court."}]
    async with admit_tap(world) as asked:
        assert (await chat(world, RUNTIME_ID, headers=proof(key, RUNTIME_ID, mine)))[0] == 200
        for headers, reason in (
            (proof(key, RUNTIME_ID, mine, messages=other), "instance_proof_for_another_request"),
            (proof(key, RUNTIME_ID, mine, age_ms=11_000), "instance_proof_stale"),
            (proof(key, RUNTIME_ID, mine, age_ms=-11_000), "instance_proof_stale"),
            (proof(world.key(OTHER), RUNTIME_ID, mine), "instance_proof_invalid"),
            (proof(key, RUNTIME_ID, mine, nonce=None), "instance_proof_without_nonce"),
        ):
            assert await refused(world, RUNTIME_ID, headers) == reason
            await asked_about(asked, headers)
            assert [reason, REFUSED] in ledger_reasons(world.state)
        theirs = proof(key, RUNTIME_ID, sibling)
        assert (await chat(world, RUNTIME_ID, headers=theirs))[0] == 200
        await asked_about(asked, theirs)
    assert len(world.model.requests) == 2


def test_the_gateway_keeps_every_nonce_twice_its_window_and_is_blind_when_full() -> None:
    """The gateway's seen-once set: a nonce noted is kept twice the window past its issue
    time (clamped around now: the time is the sender's claim), and a set too full to keep
    one stops every kept admission of a proof from serving until that nonce is past any
    window (the gate, asked instead, holds its own)."""
    now = 1_000_000
    gateway = ModelGateway.__new__(ModelGateway)
    gateway.settings = GatewaySettings(proof_window_ms=10, max_proof_nonces=1)
    gateway._nonces = SeenOnce(1)
    gateway._blind_until_ms = 0

    def claim(nonce: str, issued: int) -> InstanceProof:
        return InstanceProof(
            schema="smf.instance-proof/1",
            runtime_id="r",
            instance_id="i-" + "0" * 32,
            issued_at_ms=issued,
            nonce=nonce,
        )

    assert gateway._note_nonce("r", claim("a" * 32, now - 5), now) == "accepted"
    assert gateway._note_nonce("r", claim("a" * 32, now), now + 15) == "replayed"
    assert gateway._note_nonce("r", claim("b" * 32, now), now + 15) == "full"
    assert gateway._blind_until_ms == now + 15 + 30
    # kept until issue + 2 windows: forgotten after it, so another fits
    assert gateway._note_nonce("r", claim("b" * 32, now), now + 16) == "accepted"
    # a claimed issue time far ahead is clamped to now + window
    gateway._nonces = SeenOnce(1)
    assert gateway._note_nonce("r", claim("c" * 32, now + 10**9), now) == "accepted"
    assert gateway._note_nonce("r", claim("d" * 32, now), now + 30) == "full"
    assert gateway._note_nonce("r", claim("d" * 32, now), now + 31) == "accepted"


def test_keys_named_in_an_admission_are_checked_against_their_ids() -> None:
    """The gateway believes a named key only under its own id (the id is the key's hash):
    an admission naming a key under another's id, or bytes that are not a key, keeps
    nothing checkable (``trusted_proof_keys`` raises, the admission is not kept)."""
    mine, theirs = SigningKey.from_seed(b"\x01" * 32), SigningKey.from_seed(b"\x02" * 32)
    named = proof_keys({mine.key_id: mine.verify_key})
    assert trusted_proof_keys(named) == {mine.key_id: mine.verify_key}
    swapped = (ProofKey(key_id=theirs.key_id, public_key=named[0].public_key),)
    with pytest.raises(ValueError, match="not its key's"):
        trusted_proof_keys(swapped)
    with pytest.raises(ValueError, match="not base64"):
        trusted_proof_keys((ProofKey(key_id=mine.key_id, public_key="not base64!"),))
    with pytest.raises(ValueError, match="32 bytes"):
        trusted_proof_keys((ProofKey(key_id=mine.key_id, public_key="AAAA"),))


def frozen(world: World) -> int:
    """Stop the gateway's clock at now (the gate's runs on): returns that moment."""
    gateway = world.gateway.gateway
    now = gateway.clock()
    gateway.clock = lambda: now
    return now


def questions(asked: list[GatewayAdmit], runtime_id: str) -> int:
    return sum(a.runtime_id == runtime_id for a in asked)


async def marked(world: World, asked: list[GatewayAdmit], unattested: str) -> None:
    """Ask the gate about runtime ``unattested`` (which it refuses, so the gateway keeps
    nothing and asks every time) and wait until the tap saw it: every question the
    gateway put before it has been seen too (one connection, in order)."""
    before = questions(asked, unattested)
    await refused(world, unattested, None)
    await wait_for(lambda: questions(asked, unattested) > before)


async def test_while_a_nonce_may_have_gone_unkept_no_kept_admission_of_a_proof_serves(
    world: World,
) -> None:
    """Blind (the nonce set was full, ``_blind_until_ms``): a fresh proof of a process the
    gate admitted is asked about, not served on its kept admission; from the moment the
    blind window ends, it is served on it again."""
    key = world.key(BOUND)
    mine = new_instance_id()
    assert (await attest(world, BOUND, BOUND_ID, instance_id=mine)).accepted
    gateway = world.gateway.gateway
    now = frozen(world)
    async with admit_tap(world, marker=OTHER_ID) as asked:
        first = proof(key, BOUND_ID, mine)
        assert (await chat(world, BOUND_ID, headers=first))[0] == 200
        await asked_about(asked, first)
        gateway._blind_until_ms = now + 1
        blind = proof(key, BOUND_ID, mine)
        assert (await chat(world, BOUND_ID, headers=blind))[0] == 200
        await asked_about(asked, blind)
        gateway._blind_until_ms = now
        kept = proof(key, BOUND_ID, mine)
        assert (await chat(world, BOUND_ID, headers=kept))[0] == 200
        await marked(world, asked, RUNTIME_ID)
    assert kept[names.HEADER_INSTANCE_PROOF] not in [a.instance_proof for a in asked]
    assert questions(asked, BOUND_ID) == 2
    assert len(world.model.requests) == 3


async def test_a_kept_admission_serves_until_its_end_and_not_at_it(world: World) -> None:
    """A runtime's admission is kept while other runtimes are asked about (their
    questions clear out only admissions that have ended), and serves until the
    millisecond it ends: at that one the gate is asked again."""
    assert (await attest(world, PRINCIPAL, RUNTIME_ID)).accepted
    gateway = world.gateway.gateway
    frozen(world)
    async with admit_tap(world, marker=OTHER_ID) as asked:
        assert (await chat(world, RUNTIME_ID))[0] == 200
        await marked(world, asked, BOUND_ID)  # another runtime asked about meanwhile
        assert (await chat(world, RUNTIME_ID))[0] == 200
        await marked(world, asked, BOUND_ID)
        assert questions(asked, RUNTIME_ID) == 1
        (end,) = [v.valid_until_ms for k, v in gateway._standing.items() if k[0] == RUNTIME_ID]
        gateway.clock = lambda: end
        assert (await chat(world, RUNTIME_ID))[0] == 200
        await marked(world, asked, BOUND_ID)
    assert questions(asked, RUNTIME_ID) == 2


# --- a kept admission of a proof, checked here as the gate checks it -------------------

RT_KEY = SigningKey.from_seed(b"\x11" * 32)
STRANGER_KEY = SigningKey.from_seed(b"\x12" * 32)
PROCESS = "i-" + "1" * 32
SIBLING = "i-" + "2" * 32
T = 1_000_000
RUNTIME = GatewayRuntime(
    runtime_id="rt",
    token_sha256="0" * 64,
    adapter_id="smf-hermes-adapter",
    actor=ACTOR,
    destination=TERMINAL,
)


def bare_gateway(window_ms: int = 10) -> ModelGateway:
    """The gateway's admission bookkeeping alone: no bus, no HTTP side."""
    gateway = ModelGateway.__new__(ModelGateway)
    gateway.settings = GatewaySettings(proof_window_ms=window_ms)
    gateway._standing = {}
    return gateway


def claim(
    runtime_id: str = "rt", instance: str = PROCESS, issued: int = T, **more: Any
) -> InstanceProof:
    return InstanceProof(
        schema="smf.instance-proof/1",
        runtime_id=runtime_id,
        instance_id=instance,
        issued_at_ms=issued,
        nonce=more.pop("nonce", "a" * 32),
        **more,
    )


def admitted_with(instance: str = PROCESS, window_ms: int = 10) -> GatewayAdmission:
    named = ProofStanding(
        instance_id=instance,
        keys=proof_keys({RT_KEY.key_id: RT_KEY.verify_key}),
        window_ms=window_ms,
    )
    return GatewayAdmission(
        schema="smf.gateway-admission/1",
        request_id="m-" + "0" * 32,
        runtime_id="rt",
        admitted=True,
        reason_codes=(),
        runtime_version="1.0",
        expires_at_ms=T + 60_000,
        proof_standing=named,
    )


def kept(gateway: ModelGateway, proof: InstanceProof, answer: GatewayAdmission) -> list[Any]:
    standing = _Standing("1.0", T + 60_000)
    sealed = seal_instance_proof(proof, RT_KEY)
    gateway._keep_proof_standing(RUNTIME, "internal", sealed, answer, standing)
    return list(gateway._standing.items())


def test_an_admission_of_a_proof_is_kept_only_for_the_runtime_and_process_it_names() -> None:
    """Kept under the process the gate named, with the keys it named and the narrower of
    its window and the gateway's; a proof of another runtime (signed with this
    runtime's key all the same) or of another process than the one named keeps
    nothing, so the next request is asked about."""
    [(key, standing)] = kept(bare_gateway(window_ms=10), claim(), admitted_with(window_ms=20))
    assert key == ("rt", "internal", PROCESS, False)
    assert standing.proof_keys == {RT_KEY.key_id: RT_KEY.verify_key}
    assert standing.proof_window_ms == 10
    [(_, narrower)] = kept(bare_gateway(window_ms=10), claim(), admitted_with(window_ms=5))
    assert narrower.proof_window_ms == 5
    assert kept(bare_gateway(), claim(runtime_id="rt-other"), admitted_with()) == []
    assert kept(bare_gateway(), claim(), admitted_with(instance=SIBLING)) == []
    both = claim(runtime_id="rt-other", instance=SIBLING)
    assert kept(bare_gateway(), both, admitted_with()) == []


def proven(
    proof: InstanceProof,
    *,
    key: SigningKey = RT_KEY,
    claimed: InstanceProof | None = None,
    digest: str | None = None,
    now: int = T,
    keys: bool = True,
) -> bool:
    standing = _Standing(
        "1.0",
        T + 60_000,
        proof_keys={RT_KEY.key_id: RT_KEY.verify_key} if keys else None,
        proof_window_ms=10,
    )
    sealed = seal_instance_proof(proof, key)
    return bare_gateway()._proven_here(standing, RUNTIME, sealed, claimed or proof, digest, now)


def test_a_proof_is_proven_here_only_as_the_gate_would_prove_it() -> None:
    """The gateway's own check of a proof on a kept admission: signed by a key the gate
    named, the very proof the request claims, for this runtime, within the window (its
    edge included), for this body when it names one. Anything else is False: ask."""
    assert proven(claim()) is True
    assert proven(claim(), now=T + 10) is True  # the window's edge
    assert proven(claim(), now=T - 10) is True
    assert proven(claim(), now=T + 11) is False
    assert proven(claim(), keys=False) is False  # an admission given without a proof
    assert proven(claim(), key=STRANGER_KEY) is False
    assert proven(claim(), claimed=claim(nonce="b" * 32)) is False
    assert proven(claim(runtime_id="rt-other")) is False
    assert proven(claim(request_digest="sha256:" + "a" * 64), digest="sha256:" + "a" * 64)
    assert proven(claim(request_digest="sha256:" + "a" * 64), digest="sha256:" + "b" * 64) is False
    assert proven(claim(), digest="sha256:" + "b" * 64) is True  # a proof naming no body


async def test_a_proof_from_a_runtime_not_bound_to_a_process_is_served_and_not_kept(
    world: World,
) -> None:
    """A runtime whose attestation names no process needs no proof; one sent all the same
    is served on the gate's admission, which names no proof standing to keep."""
    assert (await attest(world, PRINCIPAL, RUNTIME_ID)).accepted
    headers = proof(world.key(PRINCIPAL), RUNTIME_ID, new_instance_id())
    assert (await chat(world, RUNTIME_ID, headers=headers))[0] == 200
    assert all(standing.proof_keys is None for standing in world.gateway.gateway._standing.values())


async def test_what_the_gateway_keeps_of_an_admission_is_what_the_gate_said() -> None:
    """The release's detection window the gate names (here 100 characters, not the
    default), and an end no later than the admission's own: what the gateway serves
    the runtime's next requests on until then."""
    gateway = bare_gateway()
    gateway.clock = lambda: T
    gateway._confined = {}
    loose: Any = gateway
    loose.upstream = type("Upstream", (), {"provider": "local-model"})()
    answer = msgspec.structs.replace(
        admitted_with(), expires_at_ms=T + 500, detection_window_chars=100
    )
    answer = msgspec.structs.replace(answer, proof_standing=msgspec.UNSET)

    async def gate_says(*_: Any) -> GatewayAdmission:
        return answer

    loose._ask_gate = gate_says
    standing = await gateway._admit(RUNTIME, "internal", None)
    assert (standing.window_chars, standing.valid_until_ms) == (100, T + 500)
    assert gateway._standing == {("rt", "internal", None, False): standing}
    # no end named: the gateway's own cache bound; no window named: the default
    answer = msgspec.structs.replace(
        answer, expires_at_ms=None, detection_window_chars=msgspec.UNSET
    )
    standing = await gateway._admit(RUNTIME, "confidential", None)
    assert (standing.window_chars, standing.valid_until_ms) == (4096, T + 1000)
    # an admission that names no runtime version is none: nothing to serve it as
    answer = msgspec.structs.replace(answer, runtime_version=None)
    with pytest.raises(Refusal) as refusal:
        await gateway._admit(RUNTIME, "privileged", None)
    assert (refusal.value.status, refusal.value.reason_code) == (403, "not_admitted")
    # a refusal is a refusal, whatever else the answer carries
    answer = msgspec.structs.replace(
        answer,
        admitted=False,
        reason_codes=("runtime_attestation_missing",),
        runtime_version="1.0",
    )
    with pytest.raises(Refusal) as refusal:
        await gateway._admit(RUNTIME, "public", None)
    assert (refusal.value.status, refusal.value.reason_code) == (
        403,
        "runtime_attestation_missing",
    )


async def test_the_gateway_logs_a_runtimes_confinement_when_it_learns_or_changes() -> None:
    """One ``runtime_confinement_learned`` line when an admission first names the
    runtime's confinement and whenever it changes, none while it stays the same."""
    gateway = bare_gateway()
    gateway.clock = lambda: T
    gateway._confined = {}
    loose: Any = gateway
    loose.upstream = type("Upstream", (), {"provider": "local-model"})()
    profiles = iter([None, None, "sha256:" + "c" * 64, "sha256:" + "c" * 64, None])

    async def gate_says(*_: Any) -> GatewayAdmission:
        answer = msgspec.structs.replace(admitted_with(), confined_profile=next(profiles))
        return msgspec.structs.replace(answer, proof_standing=msgspec.UNSET)

    loose._ask_gate = gate_says
    with capture_logs() as logs:
        for classification in ("public", "internal", "confidential", "privileged", "unknown"):
            await gateway._admit(RUNTIME, classification, None)
    learned = [e["confined"] for e in logs if e["event"] == "runtime_confinement_learned"]
    assert learned == [False, True, False]
