"""Bus benchmark: propose -> verdict through the gate, beside a bare echo on the same server.

In one run on one embedded nats-server (127.0.0.1, a
temporary store), measure

1. the floor: a nats-py request to a plain subscription that replies with the
   same bytes (the signed proposal, so both carry the same payload);
2. propose -> verdict with the stages called over the bus, for an allow (a
   DMS deletion: verify, normalize, evaluate, evidence append, claim, signed
   order published to JetStream and acknowledged, claim settled, reply) and a
   deny (the legal hold: the same up to the evidence append, then the reply);
3. the same with the stages co-located (called in-process);
4. throughput with ``in_flight`` requests outstanding, echo vs allow (and
   deny, which shows what the allow's two extra fsync'd commits cost);
5. the co-located allow again, with and without a tool-call id the model
   gateway issued, for which the gate looks up the recorded
   context first: kept from the gate's watch of ``SMF_CALL_CONTEXT`` (the
   usual case), or read from the bucket (one ``STREAM.MSG.GET`` and a
   signature check). The three are interleaved request by request on one gate,
   so they meet the same load; every record is clean, so the decision is the
   plain allow's and the difference is the lookup;
6. the co-located allow again, with a shadow release beside the active one
   and without, interleaved request by request on one gate: the
   shadow holds every one of these deletions for an attorney, so each allow is
   also judged under it after its verdict and writes a ``shadow`` entry (the
   worst case: a disagreement every time). Without, the gate's shadow desk is
   unhooked for that request (``Gate.shadow``), so nothing is handed to it; the
   shadow's entries of earlier requests are still written when their window
   closes, as in production. The shadow's evaluation alone is timed as a step;
7. the allow (co-located and with the stages over the bus) and the JetStream
   publish + ack alone, on the product's server (``sync_interval: always``, every
   write synced before its PubAck: ``JETSTREAM_SYNC_INTERVAL``) beside a second
   server with nats-server's default (a forced sync every two minutes), each with
   a gate and a state of its own, interleaved request by request so both meet the
   same load; then the allow's throughput on each, one after the other. Each
   server's ``/varz`` is read first: a server that does not report the setting its
   series is named after is a bench error. Every other series runs on the
   product's server, so on ``sync_interval: always``.

and, as a second baseline that explains the gap, the durable steps alone:
one evidence append (SQLite WAL, ``synchronous=FULL``: an fsync per commit),
one claim with its settle (two more fsync'd transactions), one JetStream
publish with its PubAck (file storage), and the signature every verdict
carries (the gate signs it, the runtime's client opens it; CPU only).

How it is measured, so the figures can be compared: the client, the echo
responder and the gate share one process and one asyncio loop (the gate is
started with ``start_gate``, as ``up`` runs it; no connector runs, so an
allow ends when its order is stored). Every proposal is built and signed
before its series starts, with a fresh proposal id and, for an allow, a
fresh document id (claims are per proposal), so signing is not timed;
decoding the Verdict is. Each series is preceded by untimed warm-up
requests. Outcomes are checked: a series whose proposals do not all get the
expected verdict is an error, never a figure.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import tempfile
import time
import urllib.request
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import nats
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeoutError
from nats.js.api import StorageType, StreamConfig

from smf_assurance.adapters.client import ProposalClient
from smf_assurance.core.evaluator import evaluate
from smf_assurance.core.release_trust import VerifiedRelease
from smf_assurance.core.shadow import difference, shadow_decision
from smf_assurance.gateway.server import new_call_id
from smf_assurance.governance.projections import SCENARIO_CORPUS, package_path
from smf_assurance.governance.releases import build_release, prior_of, publish_shadow_to_bucket
from smf_assurance.ops.cli.output import Progress
from smf_assurance.ops.demo.script import actor
from smf_assurance.ops.local.bus_auth import render_open_config
from smf_assurance.ops.local.natsserver import (
    HOST,
    EmbeddedNatsServer,
    PortReservation,
    reserve_port,
)
from smf_assurance.ops.local.stack import gate_config
from smf_assurance.ops.local.state import (
    ADAPTER_ID,
    MODEL_GATEWAY,
    RELEASE_SIGNER,
    RUNTIME_ID,
    StateDir,
    provision_demo,
)
from smf_assurance.pipeline.assembly import RunningGate, start_gate
from smf_assurance.pipeline.followers.shadow_releases import ShadowReleases
from smf_assurance.pipeline.stores.call_context import CallContextWriter
from smf_assurance.pipeline.stores.claims import ClaimStore
from smf_assurance.pipeline.stores.evidence import EvidenceWriter
from smf_assurance.pipeline.stores.ledger import Ledger
from smf_assurance.pipeline.stores.ledger_schema import EvidenceEntry
from smf_assurance.subjects.call_context import CallContext
from smf_assurance.subjects.clock import monotonic_s, wall_clock_ms
from smf_assurance.subjects.keyed import PseudonymKey
from smf_assurance.subjects.messages import DataFacts, Verdict
from smf_assurance.subjects.release import ReleaseBundle, decode_bundle
from smf_assurance.subjects.verdicts import open_verdict, sign_verdict
from smf_tools.bench.stats import Summary, summarize

DEFAULT_ROUNDS: Final = 1000
"""Sequential requests per latency series; the default run stays near a minute."""
DEFAULT_IN_FLIGHT: Final = 64
WARM_UP: Final = 20
ECHO_SUBJECT: Final = "smf.bench.echo"
BENCH_STREAM: Final = "SMF_BENCH"
BENCH_SUBJECT: Final = "smf.bench.js"

TARGET_P50: Final = 2.0
TARGET_P99: Final = 3.0
TARGET_THROUGHPUT: Final = 0.5
"""Targets, as ratios to the echo floor."""

MODES: Final = ((False, "bus stages"), (True, "co-located"))
DURABLE_STEPS: Final = (
    "ledger append",
    "claim + settle",
    "jetstream publish + ack",
    "verdict sign + open",
)
"""The steps an allow waits for besides the bus, each timed on its own."""
CALL_CONTEXT_SERIES: Final = (
    "propose allow (co-located, no call id, paired)",
    "propose allow (co-located, call context kept)",
    "propose allow (co-located, call context read)",
)
"""Series 5: the co-located allow without a tool-call id, and with a gateway-issued one
whose record the gate kept from its watch, or had to read from the bucket."""
CALL_CONTEXT_STEPS: Final = (
    "call context write (gateway)",
    "call context lookup (kept)",
    "call context lookup (read)",
)
"""The gateway's signed create of one record, and the gate's lookup alone
(``CallContextMirror.get``) of the same records, kept and read."""
SHADOW_SERIES: Final = (
    "propose allow (co-located, no shadow, paired)",
    "propose allow (co-located, shadow beside)",
)
"""Series 6: the co-located allow without and with a shadow release beside the active one."""
SHADOW_STEPS: Final = ("shadow judge alone (CPU)",)
"""The shadow's evaluation of one decision and its entry built (no I/O)."""
SHADOW_TARGET: Final = 1.10
"""Target: the allow's p50 with a shadow within 10 % of without."""
SYNC_SETTINGS: Final = ("sync always", "2 min default")
"""Series 7: the product's setting and nats-server's default, side by side."""
SYNC_SERIES: Final = tuple(
    f"propose allow ({mode}, {setting}, paired)" for _, mode in MODES for setting in SYNC_SETTINGS
)
SYNC_THROUGHPUT: Final = tuple(
    f"propose allow ({mode}, {setting})" for _, mode in MODES for setting in SYNC_SETTINGS
)
SYNC_STEPS: Final = tuple(
    f"jetstream publish + ack ({setting}, paired)" for setting in SYNC_SETTINGS
)
SYNC_STREAM: Final = "SMF_BENCH_SYNC"
SERIES: Final = (
    2
    + 4 * len(MODES)
    + len(CALL_CONTEXT_SERIES)
    + len(CALL_CONTEXT_STEPS)
    + len(SHADOW_SERIES)
    + len(SHADOW_STEPS)
    + len(DURABLE_STEPS)
    + len(SYNC_SERIES)
    + len(SYNC_THROUGHPUT)
    + len(SYNC_STEPS)
)
"""Echo latency and throughput; per mode allow and deny, each latency and
throughput; the allow with a call-context lookup; the durable steps; the allow and
the publish on each sync setting. Counted
from the tuples, never by hand, so the progress never ends at 14/13."""


class BenchError(RuntimeError):
    """A series did not get the outcomes it measures: its figures would mislead."""


REACH_S: Final = 30.0
REACH_RETRY_S: Final = 0.05


async def until_answered(client: Client, subject: str, payload: bytes) -> None:
    """Untimed requests until one is answered, before a series is timed.

    A responder's subscription reaches another connection's requests some time
    after the responder's own flush: on one nats-server 2.15.1 a request right
    after it found no responder a few times in a hundred (tests/support/bus_helpers.py,
    ``Rogue.start``), and on a cluster it has the routes to cross as well (CI saw
    ``no responders`` on both benches' warm-up). An answer proves the path both
    ways; none within ``REACH_S`` is a bench error, not a figure."""
    deadline = monotonic_s() + REACH_S
    while True:
        try:
            await client.request(subject, payload, timeout=REACH_RETRY_S * 10)
            return
        except (NoRespondersError, NatsTimeoutError) as exc:
            if monotonic_s() > deadline:
                raise BenchError(
                    f"{subject}: no answer within {REACH_S:g} s ({type(exc).__name__})"
                ) from exc
            await asyncio.sleep(REACH_RETRY_S)


@dataclass(frozen=True, slots=True)
class Throughput:
    label: str
    requests: int
    in_flight: int
    seconds: float

    @property
    def per_second(self) -> float:
        return self.requests / self.seconds


@dataclass(frozen=True, slots=True)
class Ratio:
    """A series against the echo floor: >1 means slower (latency) or faster (throughput)."""

    label: str
    p50: float
    p99: float
    throughput: float | None


@dataclass(frozen=True, slots=True)
class BusResult:
    nats_server: str
    cpus: int
    cpu_model: str
    rounds: int
    in_flight: int
    throughput_requests: int
    latency: tuple[Summary, ...]
    throughput: tuple[Throughput, ...]

    def _latency(self, label: str) -> Summary:
        return next(s for s in self.latency if s.label == label)

    def _throughput(self, label: str) -> Throughput | None:
        return next((t for t in self.throughput if t.label == label), None)

    def sync_ratios(self) -> list[Ratio]:
        """Each series of the product's server over the same on the two-minute default:
        what syncing every write costs (>1: slower, or for throughput, faster)."""
        pairs = [
            (SYNC_SERIES[i], SYNC_SERIES[i + 1], SYNC_THROUGHPUT[i], SYNC_THROUGHPUT[i + 1])
            for i in range(0, len(SYNC_SERIES), 2)
        ]
        pairs.append((SYNC_STEPS[0], SYNC_STEPS[1], "", ""))
        ratios = []
        for always, default, rate_always, rate_default in pairs:
            if not any(s.label == always for s in self.latency):
                continue
            label = always.replace(f", {SYNC_SETTINGS[0]}, paired)", ")")
            ratios.append(
                _ratio(
                    label.replace(f" ({SYNC_SETTINGS[0]}, paired)", ""),
                    (self._latency(always), self._latency(default)),
                    (self._throughput(rate_always), self._throughput(rate_default)),
                )
            )
        return ratios

    def ratios(self) -> list[Ratio]:
        echo = self._latency("echo")
        echo_rate = self._throughput("echo")
        ratios = []
        for summary in self.latency:
            if not summary.label.startswith("propose"):
                continue
            rate = self._throughput(summary.label)
            ratios.append(_ratio(summary.label, (summary, echo), (rate, echo_rate)))
        return ratios


def _ratio(
    label: str,
    latency: tuple[Summary, Summary],
    rates: tuple[Throughput | None, Throughput | None],
) -> Ratio:
    """The first of each pair over the second; no throughput ratio without both."""
    (top, bottom), (rate, base) = latency, rates
    return Ratio(
        label=label,
        p50=top.p50_us / bottom.p50_us,
        p99=top.p99_us / bottom.p99_us,
        throughput=rate.per_second / base.per_second
        if rate is not None and base is not None
        else None,
    )


def cpu_model() -> str:
    """The CPU model Linux reports, for the machine description next to the figures."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


def run(
    rounds: int = DEFAULT_ROUNDS,
    in_flight: int = DEFAULT_IN_FLIGHT,
    progress: Progress | None = None,
) -> BusResult:
    """Run every series on a fresh embedded nats-server in a temporary directory."""
    if rounds < 1 or in_flight < 1:
        raise ValueError("rounds and in_flight must be at least 1")
    throughput_requests = max(rounds, 4 * in_flight)
    progress = progress or Progress("bus bench", SERIES)
    with tempfile.TemporaryDirectory(prefix="smf-bench-bus-") as tmp:
        root = Path(tmp)
        default_config = root / "nats-default.conf"
        default_config.write_text(render_open_config(), encoding="utf-8")
        server = MonitoredServer(root / "nats", reserve_port())
        default = MonitoredServer(root / "nats-default", reserve_port(), config_file=default_config)
        try:
            server.start()
            default.start()
            for which, wanted in ((server, True), (default, False)):
                if sync_always_of(which) is not wanted:
                    raise BenchError(f"{which.url}: sync_always is not {wanted} in /varz")
            latency, throughput = asyncio.run(
                _measure(
                    root,
                    server.url,
                    rounds,
                    in_flight,
                    throughput_requests,
                    progress,
                    default.url,
                )
            )
        finally:
            server.close()
            default.close()
            progress.close()
    return BusResult(
        nats_server=str(server.version),
        cpus=os.cpu_count() or 0,
        cpu_model=cpu_model(),
        rounds=rounds,
        in_flight=in_flight,
        throughput_requests=throughput_requests,
        latency=tuple(latency),
        throughput=tuple(throughput),
    )


# --- the servers -------------------------------------------------------------------


class MonitoredServer(EmbeddedNatsServer):
    """The embedded server exactly as the product runs it (its own config and
    ``command()``), plus a monitoring port the product does not open, so that what
    the running server does can be read from its ``/varz``."""

    def __init__(self, state_dir: Path, monitor: PortReservation, **kwargs: Any) -> None:
        super().__init__(state_dir, **kwargs)
        self.monitor: Final = monitor

    def command(self) -> list[str]:
        return [*super().command(), "-m", str(self.monitor.port)]

    def varz(self, timeout: float = 10.0) -> dict[str, Any]:
        """The running server's ``/varz``: served once ``start()`` returned, since
        nats-server writes the ports file ``start()`` waits for after every listener."""
        url = f"http://{HOST}:{self.monitor.port}/varz"
        with urllib.request.urlopen(url, timeout=timeout) as answer:
            found: dict[str, Any] = json.load(answer)
        return found

    def close(self) -> None:
        super().close()
        self.monitor.close()


def sync_always_of(server: MonitoredServer) -> bool:
    """Whether the running server syncs every JetStream write (``/varz``
    ``jetstream.config.sync_always``); its ``sync_interval`` there stays the
    two-minute default either way."""
    config = server.varz()["jetstream"]["config"]
    if not config.get("store_dir"):
        raise BenchError(f"{server.url}: JetStream is not on")
    return bool(config.get("sync_always", False))


# --- timing ------------------------------------------------------------------------

Call = Callable[[int], Awaitable[None]]
"""One request, by index into the series' prepared inputs."""


async def _sequential(call: Call, count: int, offset: int = 0) -> list[int]:
    clock = time.perf_counter_ns
    samples = []
    for n in range(offset, offset + count):
        start = clock()
        await call(n)
        samples.append(clock() - start)
    return samples


async def _series(label: str, call: Call, rounds: int) -> Summary:
    await _sequential(call, WARM_UP)
    return summarize(label, await _sequential(call, rounds, offset=WARM_UP))


async def _throughput(label: str, call: Call, requests: int, in_flight: int) -> Throughput:
    """``requests`` calls by ``in_flight`` workers, each starting its next when one ends."""
    await asyncio.gather(*(call(n) for n in range(min(WARM_UP, requests))))
    offset = min(WARM_UP, requests)
    counter = iter(range(offset, offset + requests))

    async def worker() -> None:
        for n in counter:
            await call(n)

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(in_flight)))
    return Throughput(label, requests, in_flight, time.perf_counter() - start)


# --- what is measured ---------------------------------------------------------------


def runtime_of(client: Client, state: StateDir) -> ProposalClient:
    """The demo runtime of ``state``, proposing over ``client``."""
    return ProposalClient(
        client,
        state.key("runtime"),
        RUNTIME_ID,
        "1.0",
        ADAPTER_ID,
        timeout=30.0,
        gate_keys=state.gate_keys(),
    )


class _Proposals:
    """Signed proposals prepared before a series, so signing is never timed."""

    def __init__(self, runtime: ProposalClient) -> None:
        self.runtime = runtime
        self._serial = 0

    def allows(self, count: int) -> list[tuple[str, bytes]]:
        """DMS deletions of distinct documents, each allowed by the retention policy."""
        return [self._signed(hold=False) for _ in range(count)]

    def denials(self, count: int) -> list[tuple[str, bytes]]:
        """Deletions of the document under legal hold: the floor denies them."""
        return [self._signed(hold=True) for _ in range(count)]

    def allows_with_calls(self, count: int) -> tuple[list[tuple[str, bytes]], list[CallContext]]:
        """Allowed deletions, each for a tool call the model gateway issued, and the
        clean record of each call's context (written before the series)."""
        signed, records = [], []
        for _ in range(count):
            call_id = new_call_id()
            signed.append(self._signed(hold=False, tool_call_id=call_id))
            records.append(
                CallContext(
                    schema="smf.call-context/1",
                    runtime_id=self.runtime.runtime_id,
                    tool_call_id=call_id,
                    tool_name="dms_delete",
                    classification="public",
                    injection_taint="clear",
                    found=(),
                    issued_at_ms=wall_clock_ms(),
                )
            )
        return signed, records

    def _signed(self, *, hold: bool, tool_call_id: str | None = None) -> tuple[str, bytes]:
        self._serial += 1
        proposal = self.runtime.build(
            native_tool="dms_delete",
            arguments={"document_id": "doc-4711" if hold else f"doc-bench-{self._serial}"},
            actor=actor("associate-ann", "associate"),
            facts=DataFacts(classification="internal", injection_taint="clear", legal_hold=hold),
            tool_call_id=tool_call_id,
        )
        return proposal.proposal_id, self.runtime.sign(proposal)


def _expecting(
    runtime: ProposalClient, signed: Sequence[tuple[str, bytes]], outcome: str
) -> tuple[Call, list[Verdict]]:
    wrong: list[Verdict] = []

    async def call(n: int) -> None:
        proposal_id, data = signed[n]
        verdict = await runtime.send(proposal_id, data)
        if verdict.outcome != outcome:
            wrong.append(verdict)

    return call, wrong


def _check(label: str, wrong: list[Verdict]) -> None:
    if wrong:
        raise BenchError(
            f"{label}: {len(wrong)} proposals got another verdict, e.g. "
            f"{wrong[0].outcome} {list(wrong[0].reason_codes)}"
        )


async def _measure(
    root: Path,
    url: str,
    rounds: int,
    in_flight: int,
    throughput_requests: int,
    progress: Progress,
    default_url: str,
) -> tuple[list[Summary], list[Throughput]]:
    state = StateDir(root / "state")
    provision_demo(state)
    client = await nats.connect(url, name="smf-bench-client")
    responder = await nats.connect(url, name="smf-bench-echo")
    latency: list[Summary] = []
    throughput: list[Throughput] = []
    step = 0

    def done(what: Summary | Throughput) -> None:
        nonlocal step
        if isinstance(what, Summary):
            latency.append(what)
        else:
            throughput.append(what)
        step += 1
        progress.update(step)

    try:
        runtime = runtime_of(client, state)
        proposals = _Proposals(runtime)

        # 1. The floor: a plain subscription echoing the same bytes.
        async def echo_back(msg: Msg) -> None:
            await msg.respond(msg.data)

        await responder.subscribe(ECHO_SUBJECT, cb=echo_back)
        await responder.flush()
        payload = proposals.allows(1)[0][1]
        await until_answered(client, ECHO_SUBJECT, payload)

        async def echo(n: int) -> None:
            await client.request(ECHO_SUBJECT, payload, timeout=30.0)

        done(await _series("echo", echo, rounds))
        done(await _throughput("echo", echo, throughput_requests, in_flight))

        # 2-4. The gate, stages over the bus and co-located.
        for co_located, mode in MODES:
            gate = await start_gate(gate_config(state, url, co_located=co_located))
            try:
                kinds = (("allow", proposals.allows), ("deny", proposals.denials))
                for outcome, make in kinds:
                    label = f"propose {outcome} ({mode})"
                    call, wrong = _expecting(runtime, make(WARM_UP + rounds), outcome)
                    done(await _series(label, call, rounds))
                    _check(label, wrong)
                for outcome, make in kinds:
                    label = f"propose {outcome} ({mode})"
                    signed = make(min(WARM_UP, throughput_requests) + throughput_requests)
                    call, wrong = _expecting(runtime, signed, outcome)
                    done(await _throughput(label, call, throughput_requests, in_flight))
                    _check(label, wrong)
            finally:
                await gate.close()

        later: tuple[Callable[[], Awaitable[Sequence[Summary | Throughput]]], ...] = (
            # 5. The co-located allow with a call-context lookup, kept and read.
            lambda: _call_context_lookups(state, url, client, proposals, rounds),
            # 6. The co-located allow with a shadow release beside the active one, and without.
            lambda: _shadow_beside(root, state, url, client, proposals, rounds),
            # The durable steps alone: what an allow waits for besides the bus.
            lambda: _durable_steps(root, state, client, rounds),
            # 7. Every write synced (the product's server) beside the two-minute default.
            lambda: _sync_beside(
                root,
                state,
                url,
                client,
                proposals,
                default_url,
                rounds,
                in_flight,
                throughput_requests,
            ),
        )
        for series in later:
            for figure in await series():
                done(figure)
    finally:
        await responder.drain()
        await client.drain()
    return latency, throughput


async def _call_context_lookups(
    state: StateDir, url: str, client: Client, proposals: _Proposals, rounds: int
) -> list[Summary]:
    """Series 5 on one co-located gate, interleaved round by round so all three meet
    the same load: a plain allow, an allow whose record the gate kept from its watch,
    and one whose record it must read (dropped from the mirror just before, untimed).
    The records are written first with the model gateway's key, as the gateway
    writes them before a runtime ever sees the call."""
    writer = CallContextWriter(client.jetstream(), state.key(MODEL_GATEWAY), timeout=30.0)
    count = WARM_UP + rounds
    plain = proposals.allows(count)
    kept, kept_records = proposals.allows_with_calls(count)
    read, read_records = proposals.allows_with_calls(count)
    gate = await start_gate(gate_config(state, url, co_located=True))
    try:
        mirror = gate.call_contexts
        assert mirror is not None
        clock = time.perf_counter_ns
        writes: list[int] = []
        for record in (*kept_records, *read_records):
            start = clock()
            await writer.create(record)
            writes.append(clock() - start)
        deadline = monotonic_s() + REACH_S
        while len(mirror) < 2 * count:
            if monotonic_s() > deadline:
                raise BenchError(f"the gate's watch kept {len(mirror)} of {2 * count} records")
            await asyncio.sleep(REACH_RETRY_S)
        calls = [_expecting(proposals.runtime, signed, "allow") for signed in (plain, kept, read)]
        samples: list[list[int]] = [[], [], []]
        for n in range(count):
            mirror.forget((read_records[n].runtime_id, read_records[n].tool_call_id))
            for series, (call, _) in enumerate(calls):
                start = clock()
                await call(n)
                if n >= WARM_UP:
                    samples[series].append(clock() - start)
        for label, (_, wrong) in zip(CALL_CONTEXT_SERIES, calls, strict=True):
            _check(label, wrong)
        # the lookup alone, kept and read, for the records just used
        steps: list[list[int]] = [[], []]
        for n in range(WARM_UP, count):
            for step, record in enumerate((kept_records[n], read_records[n])):
                key = (record.runtime_id, record.tool_call_id)
                if step == 1:
                    mirror.forget(key)
                start = clock()
                found = await mirror.get(*key)
                steps[step].append(clock() - start)
                if found != record:
                    raise BenchError(f"{CALL_CONTEXT_STEPS[step + 1]}: another record came back")
        labels = (*CALL_CONTEXT_SERIES, *CALL_CONTEXT_STEPS)
        taken = (*samples, writes[-rounds:], *steps)
        return [summarize(label, t) for label, t in zip(labels, taken, strict=True)]
    finally:
        await gate.close()


def _tight_shadow(root: Path, active: VerifiedRelease, state: StateDir) -> ReleaseBundle:
    """The next release after ``active``, signed by the bench state's release key, in
    which the retention deletion (every allow this bench sends) is held for a licensed
    attorney: the shadow disagrees with every allow."""
    corpus = root / "corpus-shadow"
    shutil.copytree(package_path(SCENARIO_CORPUS), corpus)
    policies = json.loads((corpus / "policies.json").read_text(encoding="utf-8"))
    for policy in policies:
        if policy["policy_id"] == "customer.acme.retention-deletion":
            policy.update(
                effect="conditional",
                reason_code="retention_deletion_needs_attorney",
                requirements={"approval_count": 1, "required_roles": ["licensed_attorney"]},
            )
    (corpus / "policies.json").write_text(json.dumps(policies), encoding="utf-8")
    return build_release(
        corpus,
        [state.key(RELEASE_SIGNER)],
        state.registry.read_bytes(),
        now_ms=wall_clock_ms(),
        prior=prior_of(decode_bundle(active.bundle_bytes)),
    )


async def _shadow_beside(
    root: Path, state: StateDir, url: str, client: Client, proposals: _Proposals, rounds: int
) -> list[Summary]:
    """Series 6 on one co-located gate, interleaved round by round: an allow with the
    gate's shadow desk unhooked, then one with it (module docstring). Every shadow
    judgement must be recorded, none dropped: a dropped one would be work not
    measured, so the run fails instead of printing."""
    count = WARM_UP + rounds
    plain, beside = proposals.allows(count), proposals.allows(count)
    gate = await start_gate(gate_config(state, url, co_located=True))
    try:
        assert gate.releases is not None
        active = gate.releases.active
        desk, shadows = gate.shadow, gate.shadows
        if active is None or desk is None or shadows is None:
            raise BenchError("the bench gate runs no verified release, so no shadow")
        shadow = _tight_shadow(root, active, state)
        await publish_shadow_to_bucket(client.jetstream(), shadow)
        deadline = monotonic_s() + REACH_S
        while shadows.active is None:
            if monotonic_s() > deadline:
                raise BenchError(
                    f"the gate did not load the shadow: {list(gate.releases.refusals)}"
                )
            await asyncio.sleep(REACH_RETRY_S)
        calls = [_expecting(proposals.runtime, signed, "allow") for signed in (plain, beside)]
        samples: list[list[int]] = [[], []]
        clock = time.perf_counter_ns
        for n in range(count):
            for series, (call, _) in enumerate(calls):
                gate.gate.shadow = desk if series == 1 else None
                start = clock()
                await call(n)
                if n >= WARM_UP:
                    samples[series].append(clock() - start)
        gate.gate.shadow = desk
        for label, (_, wrong) in zip(SHADOW_SERIES, calls, strict=True):
            _check(label, wrong)
        await desk.settled()
        counts = desk.counts()
        if counts is None or (counts.disagreed, counts.recorded, counts.dropped) != (
            count,
            count,
            0,
        ):
            raise BenchError(f"{SHADOW_SERIES[1]}: the shadow did not record every allow: {counts}")
        judge = await _shadow_judge_alone(gate, shadows, proposals, rounds)
        return [
            *(summarize(label, t) for label, t in zip(SHADOW_SERIES, samples, strict=True)),
            summarize(SHADOW_STEPS[0], judge),
        ]
    finally:
        await gate.close()


async def _shadow_judge_alone(
    gate: RunningGate, shadows: ShadowReleases, proposals: _Proposals, rounds: int
) -> list[int]:
    """The shadow's work for one decision, without the queue or the ledger: evaluate the
    envelope under the shadow, compare, build the entry (CPU only)."""
    running = shadows.current()
    active = gate.releases.active if gate.releases is not None else None
    if running is None or active is None:
        raise BenchError("the shadow is not in force for its step")
    proposal = proposals.runtime.build(
        native_tool="dms_delete",
        arguments={"document_id": "doc-bench-judge"},
        actor=actor("associate-ann", "associate"),
        facts=DataFacts(classification="internal", injection_taint="clear", legal_hold=False),
    )
    normalized = await gate.gate.normalize.call(proposal, 5.0)
    envelope = normalized.envelope
    enforced = evaluate(
        envelope,
        active.policy_set,
        at_ms=wall_clock_ms(),
        op_hash=normalized.operation_hash,
    )
    writer = EvidenceWriter(gate.ledger, state_key(gate), wall_clock_ms)
    tenant = writer.tenant_ref("tenant-acme")
    clock = time.perf_counter_ns
    taken = []
    for _ in range(WARM_UP + rounds):
        start = clock()
        judged = shadow_decision(envelope, enforced, running.release.policy_set)
        found = difference(enforced, judged)
        if found is None:
            raise BenchError(f"{SHADOW_STEPS[0]}: the shadow agreed with the allow")
        writer.for_shadow(enforced, judged, found, tenant, envelope.capability)
        taken.append(clock() - start)
    return taken[WARM_UP:]


def state_key(gate: RunningGate) -> PseudonymKey:
    """The gate's tenant pseudonym key (the shadow's entries name tenants by it)."""
    return gate.gate.settings.tenant_key


async def _durable_steps(root: Path, state: StateDir, client: Client, rounds: int) -> list[Summary]:
    """Evidence append, claim + settle, JetStream publish + ack, each on its own."""
    ledger = await Ledger.open(root / "ledger-alone.db", signer=state.key("gate"))
    identity = "sha256:" + "ab" * 32
    entry = EvidenceEntry(
        kind="decision",
        operation_hash=identity,
        decision_id=identity,
        release_id=identity,
        projection_id=identity,
        tenant_ref=state.pseudonym_key().identifier("smf.tenant", "tenant-acme"),
        at=wall_clock_ms(),
        disposition="allow",
        reason_codes=("retention_schedule_deletion",),
    )

    async def append(n: int) -> None:
        await ledger.append(entry)

    claims = await ClaimStore.open(root / "claims-alone.db")

    async def claim_and_settle(n: int) -> None:
        await claims.claim(f"p-bench-{n}", identity, identity, n)
        await claims.settle(f"p-bench-{n}", "published")

    js = client.jetstream()
    await js.add_stream(
        StreamConfig(
            name=BENCH_STREAM,
            subjects=[f"{BENCH_SUBJECT}.>"],
            storage=StorageType.FILE,
            duplicate_window=120.0,
        )
    )
    order = os.urandom(1400)

    async def publish(n: int) -> None:
        await js.publish(f"{BENCH_SUBJECT}.dms", order, headers={"Nats-Msg-Id": f"bench-{n}"})

    # The signature on every verdict (smf_assurance.subjects.verdicts): the gate signs, the
    # runtime's client opens; CPU only, no I/O.
    gate_key = state.key("gate")
    gate_keys = {gate_key.key_id: gate_key.verify_key}
    verdict = Verdict(
        schema="smf.verdict/1",
        proposal_id="p-bench",
        outcome="allow",
        reason_codes=("retention_schedule_deletion",),
        decision_id=identity,
        operation_hash=identity,
        release_id=identity,
        order_id="ab" * 32,
        connector_id="dms",
    )

    async def sign_and_open_verdict(n: int) -> None:
        open_verdict(sign_verdict(verdict, gate_key), gate_keys, proposal_id="p-bench")

    try:
        calls = (append, claim_and_settle, publish, sign_and_open_verdict)
        return [
            await _series(label, call, rounds)
            for label, call in zip(DURABLE_STEPS, calls, strict=True)
        ]
    finally:
        await ledger.close()
        await claims.close()


async def _sync_beside(
    root: Path,
    state: StateDir,
    url: str,
    client: Client,
    proposals: _Proposals,
    default_url: str,
    rounds: int,
    in_flight: int,
    throughput_requests: int,
) -> list[Summary | Throughput]:
    """Series 7 (module docstring). The default server gets a state of its own (its
    gate keeps its own ledger and claims), so two gates run side by side; per mode,
    one allow on each, round by round, then each one's throughput."""
    other = StateDir(root / "state-default")
    provision_demo(other)
    other_client = await nats.connect(default_url, name="smf-bench-default")
    try:
        other_proposals = _Proposals(runtime_of(other_client, other))
        sides = ((state, url, proposals), (other, default_url, other_proposals))
        count = WARM_UP + rounds
        latency: list[Summary] = []
        rates: list[Throughput] = []
        for mode_index, (co_located, _) in enumerate(MODES):
            gates = [
                await start_gate(gate_config(s, u, co_located=co_located)) for s, u, _ in sides
            ]
            try:
                labels = SYNC_SERIES[2 * mode_index : 2 * mode_index + 2]
                calls = [_expecting(p.runtime, p.allows(count), "allow") for _, _, p in sides]
                samples: list[list[int]] = [[], []]
                clock = time.perf_counter_ns
                for n in range(count):
                    for side, (call, _) in enumerate(calls):
                        start = clock()
                        await call(n)
                        if n >= WARM_UP:
                            samples[side].append(clock() - start)
                for label, (_, wrong), taken in zip(labels, calls, samples, strict=True):
                    _check(label, wrong)
                    latency.append(summarize(label, taken))
                for label, (_, _, p) in zip(
                    SYNC_THROUGHPUT[2 * mode_index : 2 * mode_index + 2], sides, strict=True
                ):
                    signed = p.allows(min(WARM_UP, throughput_requests) + throughput_requests)
                    call, wrong = _expecting(p.runtime, signed, "allow")
                    rates.append(await _throughput(label, call, throughput_requests, in_flight))
                    _check(label, wrong)
            finally:
                for gate in gates:
                    await gate.close()
        latency += await _publish_beside((client, other_client), rounds)
        return [*latency, *rates]
    finally:
        await other_client.drain()


async def _publish_beside(clients: tuple[Client, Client], rounds: int) -> list[Summary]:
    """One JetStream publish + PubAck (file storage, 1,400 bytes as an order) on each
    server, round by round."""
    publishers = []
    for nc in clients:
        js = nc.jetstream()
        await js.add_stream(
            StreamConfig(
                name=SYNC_STREAM,
                subjects=["smf.bench.sync.>"],
                storage=StorageType.FILE,
                duplicate_window=120.0,
            )
        )
        publishers.append(js)
    order = os.urandom(1400)
    samples: list[list[int]] = [[], []]
    clock = time.perf_counter_ns
    for n in range(WARM_UP + rounds):
        for side, js in enumerate(publishers):
            start = clock()
            await js.publish("smf.bench.sync.dms", order, headers={"Nats-Msg-Id": f"sync-{n}"})
            if n >= WARM_UP:
                samples[side].append(clock() - start)
    return [summarize(label, taken) for label, taken in zip(SYNC_STEPS, samples, strict=True)]
