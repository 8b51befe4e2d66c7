"""Logs never carry a secret or a raw value, on any refusal path.

A real gate (stages over the bus, so the stage services log too) runs with
the product's own logging (``smf_assurance.ops.local.logs.configure_logging``, JSON, at debug
level). Every refusal family is driven at it: input that is not JSON, not an
envelope, bad base64, a tampered signature, an unknown signer, another
payload type, arguments nested 20,000 deep, an unknown
field, a stale proposal, an unknown tool, an unauthenticated stage call,
garbage to the approval and attestation endpoints, and the evidence and claim
stores taken away. Then every line written is scanned for the bytes of every
private key and bus credential of the state directory and the tenant
pseudonym key (raw, hex, both base64 alphabets and their ``repr``) and for
every raw value the requests carried. None may appear.

Also: arguments nested 20,000 deep are refused ``malformed_proposal`` (the
issue's reproduction once ended as ``stage_internal_error`` with frame locals
in the log).
"""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator
from typing import Final

import msgspec
import pytest
from nats.aio.client import Client

from smf_assurance.adapters.client import ProposalClient
from smf_assurance.ops.demo.script import actor
from smf_assurance.ops.local.logs import configure_logging
from smf_assurance.ops.local.natsserver import EmbeddedNatsServer
from smf_assurance.ops.local.stack import gate_config
from smf_assurance.ops.local.state import ADAPTER_ID, RUNTIME_ID, StateDir
from smf_assurance.pipeline.assembly import RunningGate, start_gate
from smf_assurance.subjects import dsse, names
from smf_assurance.subjects.canonical import canonical_bytes
from smf_assurance.subjects.keys import SigningKey, generate_signing_key, load_private_key
from smf_assurance.subjects.messages import ActorContext, DataFacts, Proposal, ProposedDestination

MATTER: Final = "matter-zx81-sealed"
ACTOR: Final = "associate-quinn-rarely"
DOCUMENT: Final = "doc-lantern-4711"
CONTENT: Final = "PRIVILEGED-MEMO-ORCHID-NINE"
RECIPIENT: Final = "opposing.counsel@walrus-law.example"
RAW_VALUES: Final = (MATTER, ACTOR, DOCUMENT, CONTENT, RECIPIENT)


def secret_forms(secret: bytes) -> set[str]:
    """How a secret could show up in a log line."""
    forms = {
        secret.hex(),
        base64.b64encode(secret).decode(),
        base64.urlsafe_b64encode(secret).decode(),
        repr(secret)[2:26],
    }
    return {form for form in forms if len(form) >= 12}


def secrets_of(state: StateDir) -> set[str]:
    found: set[str] = set()
    for path in state.keys.iterdir():
        if path.suffix == ".key" and path.name != state.tenant_key.name:
            key, _ = load_private_key(path)
            found |= secret_forms(key.seed())
        elif path.suffix == ".nkey":
            seed = path.read_bytes().strip()
            found.add(seed.decode())
    found |= secret_forms(state.tenant_key.read_bytes())
    return found


def proposal(runtime: ProposalClient, **changes: object) -> Proposal:
    base = actor(ACTOR, "associate")
    who = msgspec.structs.replace(base, matter_id=MATTER)
    assert isinstance(who, ActorContext)
    built = runtime.build(
        native_tool="dms_delete",
        arguments={"document_id": DOCUMENT},
        actor=who,
        facts=DataFacts(classification="confidential", injection_taint="clear", legal_hold=False),
        content=CONTENT,
        destination=ProposedDestination(address=RECIPIENT, locality="external"),
    )
    return msgspec.structs.replace(built, **changes) if changes else built


def signed(key: SigningKey, payload: bytes, payload_type: str) -> bytes:
    return dsse.encode_envelope(dsse.sign(payload_type, payload, [key]))


@pytest.fixture
async def gate(state: StateDir, nats_server: EmbeddedNatsServer) -> AsyncIterator[RunningGate]:
    configure_logging(json=True, level="debug")
    running = await start_gate(gate_config(state, nats_server.url, co_located=False))
    yield running
    await running.close()


async def ask(nc: Client, subject: str, data: bytes) -> dict[str, str]:
    reply = await nc.request(subject, data, timeout=10)
    return dict(reply.headers or {})


async def test_no_refusal_path_logs_a_secret_or_a_raw_value(
    gate: RunningGate, nc: Client, state: StateDir, capsys: pytest.CaptureFixture[str]
) -> None:
    key = state.key("runtime")
    runtime = ProposalClient(nc, key, RUNTIME_ID, "1.0", ADAPTER_ID, gate_keys=state.gate_keys())
    good = proposal(runtime)
    text = canonical_bytes(msgspec.to_builtins(good)).decode()
    deep = text.replace(
        json.dumps({"document_id": DOCUMENT}, separators=(",", ":")),
        '{"a":' * 20_000 + '"' + DOCUMENT + '"' + "}" * 20_000,
    )
    assert deep != text
    unknown_field = text[:-1] + ',"zz_unknown":"' + CONTENT + '"}'
    envelope = dsse.decode_envelope(runtime.sign(good)).envelope
    forged = base64.b64encode(text.replace(DOCUMENT, DOCUMENT + "-2").encode()).decode()
    tampered = dsse.encode_envelope(msgspec.structs.replace(envelope, payload=forged))
    foreign = generate_signing_key()

    refusals = {
        "not json": b"\x00garbage " + CONTENT.encode(),
        "not an envelope": json.dumps({"payload": CONTENT}).encode(),
        "bad base64": json.dumps(
            {"payload": "!!" + CONTENT, "payloadType": names.PAYLOAD_PROPOSAL, "signatures": []}
        ).encode(),
        "tampered": tampered,
        "unknown signer": signed(foreign, text.encode(), names.PAYLOAD_PROPOSAL),
        "other payload type": signed(key, text.encode(), names.PAYLOAD_RESOLUTION),
        "deep nesting": signed(key, deep.encode(), names.PAYLOAD_PROPOSAL),
        "unknown field": signed(key, unknown_field.encode(), names.PAYLOAD_PROPOSAL),
        "stale": runtime.sign(proposal(runtime, issued_at_ms=1)),
        "unknown tool": runtime.sign(proposal(runtime, native_tool="exfiltrate_" + DOCUMENT)),
    }
    answers = {name: await ask(nc, names.PROPOSE, data) for name, data in refusals.items()}
    assert answers["deep nesting"].get(names.HEADER_SERVICE_ERROR) == "malformed_proposal"
    assert answers["not json"].get(names.HEADER_SERVICE_ERROR) == "malformed_proposal"
    # The other endpoints and a stage, with the same raw values.
    for subject in (names.APPROVAL_RESOLVE, names.APPROVAL_SHOW, names.ATTEST):
        await nc.request(subject, refusals["deep nesting"], timeout=10)
    await ask(nc, names.STAGE_DISPATCH, CONTENT.encode())
    await ask(nc, names.STAGE_NORMALIZE, canonical_bytes(msgspec.to_builtins(good)))
    # The stores taken away: a decision cannot be recorded, a claim cannot be made.
    await gate.claims.close()
    await runtime.propose(proposal(runtime))
    await gate.ledger.close()
    denied = await runtime.propose(proposal(runtime))
    assert denied.reason_codes == ("evidence_store_unavailable",)

    logs = capsys.readouterr().err
    assert "ledger.appended" in logs  # the capture saw the gate's own events
    assert "stage_request_unauthenticated" in logs
    leaked = [s for s in sorted(secrets_of(state)) if s in logs]
    leaked += [v for v in RAW_VALUES if v in logs]
    assert leaked == [], leaked
