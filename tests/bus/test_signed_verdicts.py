"""A runtime acts only on a verdict the gate signed (``smf_assurance.subjects.verdicts``).

The attack: a client on the bus answers ``smf.propose`` (or an output close)
before the gate, with an allow it made. Before verdicts were signed, only NATS
permissions stood in its way. Each forgery here is refused by the runtime's
client with its own reason, and a rogue racing the real gate never turns a
denial into an allow, an order or released output. A control case shows that
the same forged value signed by the gate key IS accepted, so the refusals come
from the signature and not from a malformed forgery.

What these tests do not prove: that a genuine gate verdict cannot be withheld
(a rogue can still make a runtime deny: fail closed, a denial of service, not a
bypass), nor anything about a stolen gate key.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import msgspec
import nats
import pytest
from nats.aio.client import Client

from smf_assurance.adapters.client import ProposalClient
from smf_assurance.adapters.output import OutputStreamer
from smf_assurance.ops.demo.script import actor
from smf_assurance.ops.local.natsserver import EmbeddedNatsServer
from smf_assurance.ops.local.state import ADAPTER_ID, RUNTIME_ID, StateDir
from smf_assurance.subjects import dsse, names
from smf_assurance.subjects.canonical import canonical_bytes
from smf_assurance.subjects.keys import generate_signing_key
from smf_assurance.subjects.messages import DataFacts, OutputVerdict, ProposedDestination, Verdict
from smf_assurance.subjects.verdicts import (
    NOT_SIGNED_BY_GATE,
    VerdictMismatchError,
    open_output_verdict,
    open_verdict,
    sign_output_verdict,
    sign_verdict,
)
from tests.support.bus_helpers import (
    FORGED_TEXT,
    Forger,
    Rogue,
    forged_allow,
    forged_release,
    signed_reply,
    unsigned,
)
from tests.support.bus_properties import (
    GateStarter,
    deletion,
    execute_count,
    runtime_client,
)


@pytest.fixture
async def running_gates(
    state: StateDir, nats_server: EmbeddedNatsServer
) -> AsyncIterator[GateStarter]:
    starter = GateStarter(state, nats_server.url)
    yield starter
    await starter.close()


@pytest.fixture
async def rogue_nc(nats_server: EmbeddedNatsServer) -> AsyncIterator[Client]:
    client = await nats.connect(nats_server.url)
    yield client
    await client.close()


def streamer(nc: Client, state: StateDir) -> OutputStreamer:
    return OutputStreamer(
        nc, state.key("runtime"), RUNTIME_ID, "1.0", ADAPTER_ID, gate_keys=state.gate_keys()
    )


async def stream_reply(nc: Client, state: StateDir) -> OutputVerdict:
    return await streamer(nc, state).stream(
        [b"The hearing is on Friday."],
        actor=actor("associate-ann", "associate"),
        facts=DataFacts(classification="internal", injection_taint="clear"),
        destination=ProposedDestination(address="cli:operator", locality="internal"),
    )


def forgers(state: StateDir) -> dict[str, Forger]:
    """Every way to make an allow without the gate key, or with it for another purpose."""
    return {
        "unsigned JSON": unsigned,
        "signed by the runtime's key": signed_reply(state.key("runtime"), names.PAYLOAD_VERDICT),
        "signed by a connector's key": signed_reply(state.key("dms"), names.PAYLOAD_VERDICT),
        "the gate key, as an approval outcome": signed_reply(
            state.key("gate"), names.PAYLOAD_APPROVAL_OUTCOME
        ),
        "the gate key, as an execute order": signed_reply(state.key("gate"), names.PAYLOAD_ORDER),
    }


FORGERIES = [
    "unsigned JSON",
    "signed by the runtime's key",
    "signed by a connector's key",
    "the gate key, as an approval outcome",
    "the gate key, as an execute order",
]


# --- no gate: the rogue is the only one answering -------------------------------------


@pytest.mark.parametrize("forgery", FORGERIES)
async def test_a_forged_allow_is_a_denial_naming_the_signature(
    nc: Client, rogue_nc: Client, state: StateDir, forgery: str
) -> None:
    rogue = await Rogue(rogue_nc, forgers(state)[forgery]).start(nc)
    runtime = runtime_client(nc, state)
    verdict = await runtime.propose(deletion(runtime, "doc-1207"))
    assert len(rogue.answered) == 1, verdict
    assert (verdict.outcome, verdict.reason_codes) == ("deny", (NOT_SIGNED_BY_GATE,))


@pytest.mark.parametrize("forgery", FORGERIES)
async def test_forged_released_output_is_withheld(
    nc: Client, rogue_nc: Client, state: StateDir, forgery: str
) -> None:
    rogue = await Rogue(rogue_nc, forgers(state)[forgery]).start(nc)
    reply = await stream_reply(nc, state)
    assert len(rogue.answered) == 1
    assert reply.released is None
    assert reply.verdict.reason_codes == (NOT_SIGNED_BY_GATE,)


async def test_control_the_same_forgery_signed_by_the_gate_key_is_read(
    nc: Client, rogue_nc: Client, state: StateDir
) -> None:
    """Only the signature differs from the refused cases: the forged values are well
    formed, and the client reads exactly what the gate key signed."""
    gate_key = state.key("gate")

    def as_the_gate(value: Verdict | OutputVerdict) -> bytes:
        if isinstance(value, Verdict):
            return sign_verdict(value, gate_key)
        return sign_output_verdict(value, gate_key)

    await Rogue(rogue_nc, as_the_gate).start(nc)
    runtime = runtime_client(nc, state)
    assert (await runtime.propose(deletion(runtime, "doc-1207"))).outcome == "allow"
    assert (await stream_reply(nc, state)).released == FORGED_TEXT


async def test_a_gate_signed_verdict_for_another_request_is_refused(
    nc: Client, rogue_nc: Client, state: StateDir
) -> None:
    """A recorded genuine verdict answers no other request: it names its proposal
    (and an output verdict its stream), which the client checks."""
    gate_key = state.key("gate")

    def as_the_gate(value: Verdict | OutputVerdict) -> bytes:
        if isinstance(value, Verdict):
            return sign_verdict(value, gate_key)
        return sign_output_verdict(value, gate_key)

    await Rogue(rogue_nc, as_the_gate, proposal_id="p-recorded", stream_id="s-recorded").start(nc)
    runtime = runtime_client(nc, state)
    verdict = await runtime.propose(deletion(runtime, "doc-1207"))
    assert verdict.reason_codes == ("verdict_for_another_proposal",)
    reply = await stream_reply(nc, state)
    assert (reply.released, reply.verdict.reason_codes) == (None, ("verdict_for_another_stream",))


async def test_a_gate_signed_payload_that_is_not_one_canonical_verdict_is_unreadable(
    nc: Client, rogue_nc: Client, state: StateDir
) -> None:
    """Signed by the gate key but not in canonical form (another spelling of the
    same JSON, which other parsers may read differently): refused, never half-read."""
    gate_key = state.key("gate")

    def spelled_otherwise(value: Verdict | OutputVerdict) -> bytes:
        payload_type = (
            names.PAYLOAD_VERDICT if isinstance(value, Verdict) else names.PAYLOAD_OUTPUT_VERDICT
        )
        spaced = b"{ " + canonical_bytes(msgspec.to_builtins(value))[1:]
        return dsse.encode_envelope(dsse.sign(payload_type, spaced, [gate_key]))

    await Rogue(rogue_nc, spelled_otherwise).start(nc)
    runtime = runtime_client(nc, state)
    verdict = await runtime.propose(deletion(runtime, "doc-1207"))
    assert verdict.reason_codes == ("unreadable_verdict",)
    assert (await stream_reply(nc, state)).verdict.reason_codes == ("unreadable_verdict",)


def test_open_verdict_checks_signer_type_and_request() -> None:
    gate, other = generate_signing_key(), generate_signing_key()
    keys = {gate.key_id: gate.verify_key}
    allow = forged_allow("p-1")
    assert open_verdict(sign_verdict(allow, gate), keys, proposal_id="p-1") == allow
    with pytest.raises(dsse.UnknownSignerError):
        open_verdict(sign_verdict(allow, other), keys, proposal_id="p-1")
    with pytest.raises(dsse.UnknownSignerError):
        open_verdict(sign_verdict(allow, gate), {}, proposal_id="p-1")
    with pytest.raises(VerdictMismatchError):
        open_verdict(sign_verdict(allow, gate), keys, proposal_id="p-2")
    with pytest.raises(dsse.PayloadTypeMismatchError):
        open_verdict(sign_output_verdict(forged_release("s", "p-1"), gate), keys, proposal_id="p-1")
    release = forged_release("s-1", "p-1")
    assert open_output_verdict(sign_output_verdict(release, gate), keys, stream_id="s-1") == release
    with pytest.raises(VerdictMismatchError):
        open_output_verdict(sign_output_verdict(release, gate), keys, stream_id="s-2")
    with pytest.raises(dsse.MalformedEnvelopeError):
        open_verdict(unsigned(allow), keys, proposal_id="p-1")


# --- a rogue racing the real gate --------------------------------------------------------


async def test_a_rogue_racing_the_gate_never_turns_a_denial_into_an_order(
    running_gates: GateStarter, nc: Client, rogue_nc: Client, state: StateDir
) -> None:
    gate = await running_gates(True)
    rogue = await Rogue(rogue_nc, unsigned).start(nc)
    runtime = runtime_client(nc, state)
    verdicts = [await runtime.propose(deletion(runtime, "doc-4711", hold=True)) for _ in range(10)]
    assert len(rogue.answered) == 10
    assert all(v.outcome == "deny" for v in verdicts), verdicts
    # Whichever answer came first: the forgery refused, or the gate's own denial.
    reasons = {r for v in verdicts for r in v.reason_codes}
    assert reasons <= {NOT_SIGNED_BY_GATE, "legal_hold_blocks_deletion"}, reasons
    assert await execute_count(gate.js) == 0


async def test_with_the_rogue_gone_the_gates_own_verdicts_are_read(
    running_gates: GateStarter, nc: Client, state: StateDir
) -> None:
    """The other half: the real gate's signed verdicts verify with the registry's keys."""
    await running_gates(True)
    runtime: ProposalClient = runtime_client(nc, state)
    assert (await runtime.propose(deletion(runtime, "doc-1207"))).outcome == "allow"
    held = await runtime.propose(deletion(runtime, "doc-4711", hold=True))
    assert held.reason_codes == ("legal_hold_blocks_deletion",)
    assert (await stream_reply(nc, state)).released == "The hearing is on Friday."
