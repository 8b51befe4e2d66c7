"""Model-gateway benchmark: what putting the gateway in front of the model costs.

Four series, each run direct to the fake provider (``smf_tools.fake_model``)
and through the gateway, alternately, in one process and one run, over one
kept-alive HTTP connection each:

- a short non-streamed completion;
- a 4 KB streamed reply (64-byte SSE deltas, as a provider streams);
- a 64 KB streamed reply;
- a 4 KB streamed reply of a runtime bound to its process: a proof per request:
  the gate admits the process's first proof, and the gateway checks the
  next ones itself on that kept admission (a signature check, the body's digest, its
  own seen-once set of nonces).

Through the gateway every request is admitted (the gate's answer is kept for
up to a second), the provider's answer assembled whole, its text decided by
the real output gate (signed close, detectors, policy, an fsync'd ledger
entry) and the released turn written back. The gateway reports the time its
turn waited for that decision (``Server-Timing: output``), so the report
gives the gateway's own added latency, per sample: through the gateway,
minus direct, minus the wait for the decision. Every reply through the
gateway must be the exact text the provider sent, or the run fails.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import aiohttp
import msgspec
import nats

from smf_assurance.gateway.assembly import start_model_gateway
from smf_assurance.ops.cli.output import Progress
from smf_assurance.ops.local.model_gateway import (
    gateway_config,
    provision_gateway_runtime,
    set_upstream,
)
from smf_assurance.ops.local.stack import gate_config, start_embedded_server
from smf_assurance.ops.local.state import StateDir, provision_demo
from smf_assurance.ops.runtimes.provision import provision_runtime
from smf_assurance.pipeline.assembly import start_gate
from smf_assurance.subjects import dsse, names
from smf_assurance.subjects.attestation import AttestationAck, RuntimeAttestation
from smf_assurance.subjects.clock import wall_clock_ms
from smf_assurance.subjects.keys import SigningKey
from smf_assurance.subjects.messages import ActorContext, DataFacts, ProposedDestination
from smf_assurance.subjects.model_gateway import (
    InstanceProof,
    new_instance_id,
    new_proof_nonce,
    request_digest,
    seal_instance_proof,
)
from smf_tools.bench.stats import Summary, summarize
from smf_tools.fake_model import FakeModel, Reply

DEFAULT_ROUNDS: Final = 60
WARM_UP: Final = 5
RUNTIME_ID: Final = "bench-gateway"
PRINCIPAL: Final = "bench-gateway-runtime"
PIN: Final = "bench-1"
FACTS: Final = DataFacts(
    classification="internal", injection_taint="clear", redaction_status="none"
)
"""What the scripted runtime declares of its replies (the bench's and the tests')."""
ACTOR: Final = ActorContext(
    domain="litigation",
    tenant_id="tenant-acme",
    organization_id="org-acme-llp",
    matter_id="matter-2026-0042",
    actor_id="associate-ann",
    actor_roles=("associate",),
    governing_laws=("US-NY",),
)
PROVEN_ID: Final = "bench-gateway-proven"
PROVEN_PRINCIPAL: Final = "bench-gateway-proven-runtime"
SERIES: Final = (
    ("completion, not streamed", 16, False, False),
    ("4 KB streamed", 4096, True, False),
    ("64 KB streamed", 65536, True, False),
    ("4 KB streamed, proof per request", 4096, True, True),
)
"""(label, reply size, streamed, proven): a proven series is a runtime whose attestation
names its process, as both shipped adapters' do, so every request carries a proof for
that very request, accepted once: checked by the gateway on the kept admission of its
process, or by the gate when none is kept.
The proof is sealed before the clock starts (the runtime's cost, not the gateway's)."""


class GatewayBenchError(RuntimeError):
    """The gateway did not return what the provider sent."""


@dataclass(frozen=True, slots=True)
class GatewayRow:
    direct: Summary
    gateway: Summary
    decision: Summary
    own: Summary
    """Per sample: through the gateway - direct - the wait for the output decision."""


@dataclass(frozen=True, slots=True)
class GatewayResult:
    rows: tuple[GatewayRow, ...]
    rounds: int


def _text(size: int) -> str:
    return secrets.token_hex(size // 2)[:size]


def _body(stream: bool) -> bytes:
    request = {
        "model": "fake-model",
        "stream": stream,
        "messages": [{"role": "user", "content": "benchmark"}],
    }
    return json.dumps(request).encode()


def _proof(key: SigningKey, instance: str, body: bytes) -> str:
    """One request's proof, as an adapter seals it (``hooks.model_request``)."""
    proof = InstanceProof(
        schema="smf.instance-proof/1",
        runtime_id=PROVEN_ID,
        instance_id=instance,
        issued_at_ms=wall_clock_ms(),
        nonce=new_proof_nonce(),
        request_digest=request_digest(json.loads(body)["messages"]),
    )
    return seal_instance_proof(proof, key)


def _released(data: bytes, stream: bool) -> str:
    if not stream:
        content = json.loads(data)["choices"][0]["message"]["content"]
        return str(content)
    text = ""
    for line in data.split(b"\n"):
        if line.startswith(b"data: {"):
            text += json.loads(line[6:])["choices"][0]["delta"].get("content") or ""
    return text


def _decision_ns(header: str | None) -> int:
    if header is None or not header.startswith("output;dur="):
        raise GatewayBenchError("the gateway reported no output decision time")
    return round(float(header.removeprefix("output;dur=")) * 1e6)


async def attest(
    state: StateDir,
    url: str,
    principal: str,
    runtime_id: str,
    version: str,
    *,
    problems: tuple[str, ...] = (),
    age_ms: int = 0,
    instance_id: str | None = None,
) -> AttestationAck:
    """Attest as a scripted runtime would (signed with ``principal``'s key, on its own
    bus credential), issued ``age_ms`` ago, for process ``instance_id`` when given;
    the gate's ack. For the bench and tests."""
    att = RuntimeAttestation(
        schema="smf.runtime-attestation/1",
        attestation_id="a-" + secrets.token_hex(16),
        runtime_id=runtime_id,
        runtime_version=version,
        runtime_pin=version,
        adapter_id="smf-hermes-adapter",
        adapter_version="scripted",
        profile="block-only",
        hooks_present=(),
        hooks_missing=(),
        streaming=(),
        verified_release_id=None,
        problems=problems,
        issued_at_ms=wall_clock_ms() - age_ms,
        instance_id=instance_id,
    )
    signed = dsse.encode_envelope(
        dsse.sign_struct(names.PAYLOAD_ATTESTATION, att, [state.key(principal)])
    )
    credential = state.existing_credential(principal)
    assert credential is not None
    nc = await nats.connect(url, **credential.connect_options())
    try:
        reply = await nc.request(names.ATTEST, signed, timeout=5)
    finally:
        await nc.close()
    return msgspec.json.decode(reply.data, type=AttestationAck)


def _provision(state: StateDir, model_url: str) -> tuple[str, str]:
    """The bench's two runtimes on the gateway (one proves its process per request);
    their tokens."""
    provision_demo(state)
    set_upstream(state, model_url, "local-model")
    tokens = []
    for principal, runtime_id in ((PRINCIPAL, RUNTIME_ID), (PROVEN_PRINCIPAL, PROVEN_ID)):
        provision_runtime(state, principal, runtime_id, runtime_pin=PIN, require_release=False)
        tokens.append(
            provision_gateway_runtime(
                state,
                runtime_id,
                adapter_id="smf-hermes-adapter",
                actor=ACTOR,
                destination=ProposedDestination(address="cli:operator", locality="internal"),
                facts=FACTS,
            )
        )
    return tokens[0], tokens[1]


async def _measure(root: Path, rounds: int, progress: Progress) -> GatewayResult:
    state = StateDir(root / "state")
    model = await FakeModel().start()
    token, proven_token = _provision(state, model.url)
    instance = new_instance_id()
    server = start_embedded_server(state)
    gate = await start_gate(gate_config(state, server.url, co_located=True))
    gateway = await start_model_gateway(gateway_config(state, server.url))
    try:
        for principal, runtime_id, process in (
            (PRINCIPAL, RUNTIME_ID, None),
            (PROVEN_PRINCIPAL, PROVEN_ID, instance),
        ):
            ack = await attest(state, server.url, principal, runtime_id, PIN, instance_id=process)
            if not ack.accepted:
                raise GatewayBenchError("the bench runtime's attestation was refused")
        plain = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
        bound = {"Authorization": f"Bearer {proven_token}", "Content-Type": "application/json"}
        key = state.key(PROVEN_PRINCIPAL)
        rows = []
        done = 0
        async with aiohttp.ClientSession() as direct, aiohttp.ClientSession() as through:
            for label, size, stream, proven in SERIES:
                text = _text(size)
                model.default = Reply(content=text, delta_bytes=64)
                body = _body(stream)
                samples: dict[str, list[int]] = {"direct": [], "gateway": [], "decision": []}
                own: list[int] = []
                for n in range(rounds + WARM_UP):
                    headers = (
                        {**bound, names.HEADER_INSTANCE_PROOF: _proof(key, instance, body)}
                        if proven
                        else plain
                    )
                    start = time.perf_counter_ns()
                    async with direct.post(model.url + "/chat/completions", data=body) as resp:
                        await resp.read()
                    direct_ns = time.perf_counter_ns() - start
                    start = time.perf_counter_ns()
                    async with through.post(
                        gateway.url + "/chat/completions", data=body, headers=headers
                    ) as resp:
                        data = await resp.read()
                        timing = resp.headers.get("Server-Timing")
                    gateway_ns = time.perf_counter_ns() - start
                    if resp.status != 200 or _released(data, stream) != text:
                        raise GatewayBenchError(f"{label}: the gateway did not release the reply")
                    decision_ns = _decision_ns(timing)
                    if n >= WARM_UP:
                        samples["direct"].append(direct_ns)
                        samples["gateway"].append(gateway_ns)
                        samples["decision"].append(decision_ns)
                        own.append(gateway_ns - direct_ns - decision_ns)
                    done += 1
                    progress.update(done)
                rows.append(
                    GatewayRow(
                        direct=summarize(f"{label}, direct", samples["direct"]),
                        gateway=summarize(f"{label}, through the gateway", samples["gateway"]),
                        decision=summarize(f"{label}, output decision", samples["decision"]),
                        own=summarize(f"{label}, gateway's own added", own),
                    )
                )
        return GatewayResult(tuple(rows), rounds)
    finally:
        await gateway.close()
        await gate.close()
        server.close()
        await model.stop()


def run(rounds: int = DEFAULT_ROUNDS) -> GatewayResult:
    progress = Progress("gateway bench", (rounds + WARM_UP) * len(SERIES))
    try:
        with tempfile.TemporaryDirectory(prefix="smf-bench-gateway-") as tmp:
            return asyncio.run(_measure(Path(tmp), rounds, progress))
    finally:
        progress.close()
