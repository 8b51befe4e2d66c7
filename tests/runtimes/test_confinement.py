"""Releases that require confinement, and the launcher's attestation that counts for it.

A real nats-server with authorization generated from the registry, a real gate on a
signed release (the shipped scenario corpus, which requires confinement for opaque
operations, plus a firm policy allowing them), the launcher's real attester
(``smf_assurance.ops.local.confine.attest``) on its own bus credential; no runtime process
(tests/runtimes/test_hermes_confined.py and tests/runtimes/test_openclaw_confined.py drive
the real ones).

Proves:

- an unconfined runtime under that release is denied every opaque operation (a
  terminal command, a process, code to run, a patch, a scheduled job) with
  ``runtime_not_confined``, each denial a ledger entry; once its launcher attests the
  runtime's attested process, the same operations are allowed (control), and an
  operation that needs no confinement (a read) is allowed either way;
- what does not count: a confinement attestation signed by the runtime's own key
  (``signer_role_mismatch``), by another runtime's launcher
  (``runtime_identity_mismatch``), by an unknown key (``unknown_signer``), one issued
  outside the freshness window (``stale_attestation``), an older one replayed
  (``attestation_replayed``), and a genuine one naming another process than the one
  the runtime attested (``confined_process_not_attested``); after each the opaque
  operation is still denied;
- confinement ends: past the launcher's lease, or when it says ``ended``, or when
  another process of the runtime attests; the gate's signed status (``doctor``) and
  the model gateway's admission say which runtimes are confined, with the digest;
- the runtime's own bus credential cannot even send a confinement attestation (the
  server refuses the publish; the gate never sees it);
- the launcher counts a refusal by its reason code and a bus it cannot reach, and
  neither stops it; a replica verifies a shared attestation before it holds it.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
from typing import Any

import msgspec
import nats
import pytest
from nats.aio.client import Client

from smf_assurance.ops.cli.main import main
from smf_assurance.ops.local.confine.attest import Attester
from smf_assurance.ops.local.confine.profile import launcher_principal
from smf_assurance.ops.local.defaults import OPERATOR
from smf_assurance.ops.local.natsserver import EmbeddedNatsServer
from smf_assurance.ops.local.state import StateDir
from smf_assurance.ops.runtimes.provision import (
    HERMES_PRINCIPAL,
    HERMES_RUNTIME_ID,
)
from smf_assurance.pipeline.assembly import RunningGate
from smf_assurance.pipeline.desks.confinement import ConfinementDesk
from smf_assurance.subjects import dsse, names
from smf_assurance.subjects.confinement import (
    CONFINEMENT_LEASE_MS,
    CONFINEMENT_SCHEMA,
    ConfinementAck,
    ConfinementAttestation,
    sign_confinement,
)
from smf_assurance.subjects.gate_status import GateStatusRequest, open_gate_status
from smf_assurance.subjects.keys import SigningKey, generate_signing_key
from smf_assurance.subjects.messages import Verdict
from smf_assurance.subjects.model_gateway import (
    GatewayAdmission,
    InstanceProof,
    new_instance_id,
    new_proof_nonce,
    seal_instance_proof,
)
from smf_assurance.subjects.registry import load_registry
from tests.support.bus_helpers import wait_for
from tests.support.clocks import FrozenClock
from tests.support.confinement import (
    ALLOWED,
    OTHER_RUNTIME,
    Runtime,
    buses,
    clock,
    confinement_state,
    connect,
    gate,
    ledger_reasons,
    server,
)
from tests.support.model_gateway import admit_question

__all__ = ["buses", "clock", "confinement_state", "gate", "server"]

DIGEST = "sha256:" + "ab" * 32
OPAQUE: tuple[tuple[str, dict[str, Any]], ...] = (
    ("terminal", {"command": "rm -f brief.txt"}),
    ("process", {"action": "start"}),
    ("execute_code", {"code": "open('brief.txt', 'w').close()"}),
    ("patch", {"mode": "patch", "patch": "*** Begin Patch\n*** End Patch\n"}),
    ("cronjob", {"action": "create", "schedule": "* * * * *"}),
)
READ = ("read_file", {"path": "notes.txt"})


def attester(
    state: StateDir, server: EmbeddedNatsServer, clock: FrozenClock, runtime: str
) -> Attester:
    principal = launcher_principal(runtime)
    credential = state.existing_credential(principal)
    assert credential is not None
    return Attester(
        state.key(principal), credential, server.url, HERMES_RUNTIME_ID, DIGEST, clock=clock
    )


def confinement(key: SigningKey, clock: FrozenClock, instance: str, **changes: Any) -> bytes:
    att = ConfinementAttestation(
        schema=CONFINEMENT_SCHEMA,
        attestation_id="ca-" + new_instance_id()[2:],
        runtime_id=HERMES_RUNTIME_ID,
        profile_digest=DIGEST,
        instances=(instance,),
        state="running",
        issued_at_ms=clock.now,
    )
    return sign_confinement(msgspec.structs.replace(att, **changes), key)


async def send(nc: Client, signed: bytes) -> ConfinementAck:
    reply = await nc.request(names.CONFINEMENT, signed, timeout=3)
    return msgspec.json.decode(reply.data, type=ConfinementAck)


async def all_opaque(runtime: Runtime) -> list[Verdict]:
    return [await runtime.propose(tool, args) for tool, args in OPAQUE]


# --- the release's requirement, and its control ----------------------------------------------


@pytest.mark.claim("confinement.release-requires-it")
async def test_an_unconfined_runtime_is_denied_every_opaque_operation_a_confined_one_is_not(
    confinement_state: StateDir,
    server: EmbeddedNatsServer,
    clock: FrozenClock,
    buses: dict[str, Client],
) -> None:
    runtime = Runtime(confinement_state, buses[HERMES_PRINCIPAL], clock)
    instance = new_instance_id()
    await runtime.attest(instance)
    for verdict in await all_opaque(runtime):
        assert verdict.outcome == "deny", verdict
        assert "runtime_not_confined" in verdict.reason_codes, verdict
        assert ledger_reasons(confinement_state, verdict) == ("deny", verdict.reason_codes)
    read = await runtime.propose(*READ)
    assert read.outcome == "allow", read  # no confinement needed: allowed unconfined
    explained = await explain(confinement_state, verdict)
    # the ledger keeps reason codes: the confinement policy that denied, and the firm's
    # allow it overrode (deny dominates)
    assert [p["policy_id"] for p in explained["explanation"]["policies"]] == [
        "floor.opaque-needs-confinement",
        "customer.acme.opaque",
    ]

    launcher = attester(confinement_state, server, clock, HERMES_RUNTIME_ID)
    try:
        await launcher.launched(instance)
        assert launcher.accepted == 1, launcher.refused
        for verdict in await all_opaque(runtime):
            assert verdict.outcome == "allow", verdict
            assert verdict.reason_codes == (ALLOWED,), verdict
            assert ledger_reasons(confinement_state, verdict) == ("allow", (ALLOWED,))
        assert (await runtime.propose(*READ)).outcome == "allow"
    finally:
        await launcher.end()


async def explain(state: StateDir, verdict: Verdict) -> dict[str, Any]:
    """``explain DECISION_ID --json`` of a decision, as an auditor runs it."""
    assert verdict.decision_id is not None
    out = io.StringIO()
    argv = ["explain", verdict.decision_id, "--state-dir", str(state.root), "--json"]
    with contextlib.redirect_stdout(out):
        code = await asyncio.to_thread(main, argv)
    assert code == 0
    explained: dict[str, Any] = json.loads(out.getvalue())
    return explained


# --- what does not count ------------------------------------------------------------------------


async def still_denied(runtime: Runtime) -> None:
    verdict = await runtime.propose(*OPAQUE[0])
    assert verdict.outcome == "deny"
    assert "runtime_not_confined" in verdict.reason_codes


@pytest.mark.claim("confinement.attestation-only-by-its-launcher")
async def test_a_forged_foreign_stale_or_replayed_confinement_does_not_count(
    confinement_state: StateDir,
    server: EmbeddedNatsServer,
    clock: FrozenClock,
    buses: dict[str, Client],
) -> None:
    runtime = Runtime(confinement_state, buses[HERMES_PRINCIPAL], clock)
    operator = buses[OPERATOR]  # may publish anything: the gate's checks are what is tested
    instance = new_instance_id()
    await runtime.attest(instance)
    own_launcher = confinement_state.key(launcher_principal(HERMES_RUNTIME_ID))
    refused = {
        "signer_role_mismatch": confinement(runtime.key, clock, instance),
        "runtime_identity_mismatch": confinement(
            confinement_state.key(launcher_principal(OTHER_RUNTIME)), clock, instance
        ),
        "unknown_signer": confinement(generate_signing_key(), clock, instance),
        "stale_attestation": confinement(
            own_launcher, clock, instance, issued_at_ms=clock.now - CONFINEMENT_LEASE_MS - 1
        ),
    }
    for reason, signed in refused.items():
        ack = await send(operator, signed)
        assert (ack.accepted, ack.reason_codes) == (False, (reason,)), reason
        await still_denied(runtime)

    # a genuine attestation of another process: held, but the runtime is not confined
    other_process = new_instance_id()
    ack = await send(operator, confinement(own_launcher, clock, other_process))
    assert ack.accepted
    await still_denied(runtime)
    status = await gate_status(confinement_state, operator)
    assert (status.confined_profile, status.confinement) == (None, "confined_process_not_attested")

    # the genuine one for the attested process counts; an older one replayed does not
    earlier = confinement(own_launcher, clock, instance, issued_at_ms=clock.now - 1000)
    assert (await send(operator, confinement(own_launcher, clock, instance))).accepted
    assert (await runtime.propose(*OPAQUE[0])).outcome == "allow"
    replayed = await send(operator, earlier)
    assert replayed.reason_codes == ("attestation_replayed",)
    assert (await runtime.propose(*OPAQUE[0])).outcome == "allow"


@pytest.mark.claim("confinement.attestation-only-by-its-launcher")
async def test_the_runtimes_own_credential_cannot_send_a_confinement_attestation(
    confinement_state: StateDir,
    server: EmbeddedNatsServer,
    clock: FrozenClock,
    buses: dict[str, Client],
    gate: RunningGate,
) -> None:
    runtime = Runtime(confinement_state, buses[HERMES_PRINCIPAL], clock)
    instance = new_instance_id()
    await runtime.attest(instance)
    own_launcher = confinement_state.key(launcher_principal(HERMES_RUNTIME_ID))
    errors: list[Exception] = []

    async def on_error(exc: Exception) -> None:
        errors.append(exc)

    credential = confinement_state.existing_credential(HERMES_PRINCIPAL)
    assert credential is not None
    nc = await nats.connect(
        server.url, connect_timeout=2, error_cb=on_error, **credential.connect_options()
    )
    try:
        # even the launcher's genuine signature, sent on the runtime's connection
        await nc.publish(names.CONFINEMENT, confinement(own_launcher, clock, instance))
        await wait_for(lambda: any("permissions violation" in str(e).lower() for e in errors))
    finally:
        await nc.close()
    await still_denied(runtime)
    assert gate.gate.confinement is not None
    assert gate.gate.confinement.standing(HERMES_RUNTIME_ID).reason == "confinement_not_attested"


# --- confinement ends; who learns it ------------------------------------------------------------


async def gate_status(state: StateDir, nc: Client) -> Any:
    reply = await nc.request(names.GATE_STATUS, msgspec.json.encode(GateStatusRequest()), 3)
    status = open_gate_status(reply.data, state.gate_keys())
    return next(s for s in status.runtimes if s.runtime_id == HERMES_RUNTIME_ID)


@pytest.mark.claim("confinement.attested-and-shown")
async def test_confinement_ends_with_its_lease_the_sandbox_or_another_process(
    confinement_state: StateDir,
    server: EmbeddedNatsServer,
    clock: FrozenClock,
    buses: dict[str, Client],
) -> None:
    runtime = Runtime(confinement_state, buses[HERMES_PRINCIPAL], clock)
    operator = buses[OPERATOR]
    instance = new_instance_id()
    await runtime.attest(instance)
    launcher = attester(confinement_state, server, clock, HERMES_RUNTIME_ID)
    try:
        await launcher.launched(instance)
        shown = await gate_status(confinement_state, operator)
        assert (shown.confined_profile, shown.confinement) == (DIGEST, None)
        assert (await runtime.propose(*OPAQUE[0])).outcome == "allow"

        clock.advance(CONFINEMENT_LEASE_MS + 1)  # the launcher went quiet
        await runtime.attest(instance)
        await still_denied(runtime)
        assert (await gate_status(confinement_state, operator)).confinement == "confinement_stale"

        await launcher.attest("running")  # it speaks again: confined again
        assert (await runtime.propose(*OPAQUE[0])).outcome == "allow"

        await runtime.attest(new_instance_id())  # a process the launcher did not start
        await still_denied(runtime)
        assert (
            await gate_status(confinement_state, operator)
        ).confinement == "confined_process_not_attested"
        await runtime.attest(instance)
        assert (await runtime.propose(*OPAQUE[0])).outcome == "allow"
    finally:
        await launcher.end()
    await still_denied(runtime)
    assert (await gate_status(confinement_state, operator)).confinement == "confinement_ended"


@pytest.mark.claim("confinement.attested-and-shown")
async def test_the_model_gateways_admission_names_the_confinement(
    confinement_state: StateDir,
    server: EmbeddedNatsServer,
    clock: FrozenClock,
    buses: dict[str, Client],
) -> None:
    runtime = Runtime(confinement_state, buses[HERMES_PRINCIPAL], clock)
    instance = new_instance_id()
    await runtime.attest(instance)
    gateway = await connect(confinement_state, server, "model-gateway")

    async def admit() -> GatewayAdmission:
        proof = seal_instance_proof(
            InstanceProof(
                schema="smf.instance-proof/1",
                runtime_id=HERMES_RUNTIME_ID,
                instance_id=instance,
                issued_at_ms=clock.now,
                nonce=new_proof_nonce(),
            ),
            runtime.key,
        )
        ask = admit_question(HERMES_RUNTIME_ID, clock.now, proof)
        reply = await gateway.request(names.GATEWAY_ADMIT, msgspec.json.encode(ask), 3)
        answer, _ = dsse.open_struct(
            dsse.decode_envelope(reply.data),
            confinement_state.gate_keys(),
            GatewayAdmission,
            names.PAYLOAD_GATEWAY_ADMISSION,
        )
        assert answer.admitted, answer
        return answer

    launcher = attester(confinement_state, server, clock, HERMES_RUNTIME_ID)
    try:
        assert (await admit()).confined_profile is None
        await launcher.launched(instance)
        assert (await admit()).confined_profile == DIGEST
    finally:
        await launcher.end()
        await gateway.close()


@pytest.mark.claim("confinement.attestation-only-by-its-launcher")
async def test_the_launcher_counts_a_refusal_and_a_bus_it_cannot_reach_and_runs_on(
    confinement_state: StateDir,
    server: EmbeddedNatsServer,
    clock: FrozenClock,
    buses: dict[str, Client],
    closed_port: int,
) -> None:
    """What the launcher does when its word does not count: a key the gate refuses
    (here the runtime's, on the launcher's credential) is counted by its reason code;
    a bus it cannot reach is counted too; neither raises, and the runtime stays not
    confined at the gate."""
    runtime = Runtime(confinement_state, buses[HERMES_PRINCIPAL], clock)
    instance = new_instance_id()
    await runtime.attest(instance)
    credential = confinement_state.existing_credential(launcher_principal(HERMES_RUNTIME_ID))
    assert credential is not None
    wrong_key = Attester(runtime.key, credential, server.url, HERMES_RUNTIME_ID, DIGEST, clock)
    unreachable = Attester(
        confinement_state.key(launcher_principal(HERMES_RUNTIME_ID)),
        credential,
        f"nats://127.0.0.1:{closed_port}",
        HERMES_RUNTIME_ID,
        DIGEST,
        clock,
    )
    for launcher in (wrong_key, unreachable):
        await launcher.launched(instance)
        await launcher.launched("not-an-instance")  # ignored: never named
        await launcher.end()
        assert launcher.accepted == 0
        assert list(launcher.instances) == [instance]
    assert wrong_key.refused == {"signer_role_mismatch": 2}  # running, then ended
    assert unreachable.refused == {"bus_unreachable": 2}
    await still_denied(runtime)


@pytest.mark.claim("confinement.attestation-only-by-its-launcher")
async def test_a_replica_verifies_what_another_shares_before_it_holds_it(
    confinement_state: StateDir, clock: FrozenClock
) -> None:
    """On a cluster a replica hears another's attestation (``replica_sync``) and verifies
    it itself: a forged one shared is not held, a genuine one is."""
    instance = new_instance_id()
    desk = ConfinementDesk(
        registry=lambda: load_registry(confinement_state.registry),
        clock=clock,
        attested_instance=lambda runtime_id: instance,
    )
    await desk.adopt(confinement(confinement_state.key(HERMES_PRINCIPAL), clock, instance))
    assert desk.standing(HERMES_RUNTIME_ID).reason == "confinement_not_attested"
    await desk.adopt(b"not an envelope")
    assert not desk.confined(HERMES_RUNTIME_ID)
    genuine = confinement(
        confinement_state.key(launcher_principal(HERMES_RUNTIME_ID)), clock, instance
    )
    await desk.adopt(genuine)
    assert desk.standing(HERMES_RUNTIME_ID).profile_digest == DIGEST
    assert desk.instance_confined(HERMES_RUNTIME_ID, instance) == DIGEST
    assert desk.instance_confined(HERMES_RUNTIME_ID, new_instance_id()) is None
    assert desk.instance_confined(OTHER_RUNTIME, instance) is None


async def test_a_launcher_no_gate_answers_keeps_trying_and_says_so(
    confinement_state: StateDir, nats_server: EmbeddedNatsServer
) -> None:
    """A bus without a gate: every attestation (the first, from the periodic loop, and
    the last) is counted ``no_gate_answer``; the connection is closed at the end."""
    credential = confinement_state.existing_credential(launcher_principal(HERMES_RUNTIME_ID))
    assert credential is not None
    launcher = Attester(
        confinement_state.key(launcher_principal(HERMES_RUNTIME_ID)),
        credential,
        nats_server.url,
        HERMES_RUNTIME_ID,
        DIGEST,
    )
    await launcher.start()
    await wait_for(lambda: launcher.refused.get("no_gate_answer", 0) >= 1)
    await launcher.end()
    await launcher.end()  # once only
    assert set(launcher.refused) == {"no_gate_answer"}
    assert launcher.refused["no_gate_answer"] >= 2  # the first, and the last (ended)
    assert launcher.accepted == 0
