"""Faults on a real nats-server, real SQLite and real processes.

Every fault here is made, not simulated: nats-server is SIGKILLed and
started again on the same store; the gate runs in its own process
(``tests/support/gate_child.py``) and is SIGKILLed; the connector process dies by
``os._exit`` between its side effect and its ack
(``tests/support/connector_crash_child.py``); the evidence ledger is closed under
the running gate, or extended by a second writer behind its back.

The invariants checked after each, from outside the gate:

- Fail closed: a proposal caught in the fault gets a deny (the client's
  ``gate_timeout``/transport reason, or the gate's own) or its true verdict;
  never an ``allow`` whose order is not in SMF_EXECUTE.
- Nothing executes twice: at most one order per proposal and per document in
  the stream, and the connector's own evidence (DMS tombstones, filings in
  the outbox) counts each side effect once.
- Service resumes: after the fault, new proposals get their verdicts.
- No order without evidence: every order in the stream has its decision in
  the ledger.

What the runtime learns of an order published just before the crash (its reply is
lost with the gate) is its recorded verdict, asked for after its deadline
(``ProposalClient.recorded``): it agrees with what the connector did. What these do
not prove: anything about crashes inside SQLite's commit or of the disk.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sqlite3
import subprocess
import sys
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path

import msgspec
import nats
import pytest
from nats.aio.client import Client
from nats.js.client import JetStreamContext

from smf_assurance.adapters.client import ProposalClient, unsettled
from smf_assurance.adapters.connector.sdk import ConnectorRunner, RunnerConfig
from smf_assurance.adapters.connectors.court_efiling import CourtEFilingConnector
from smf_assurance.adapters.connectors.dms import DELETED_DIR, DocumentStoreConnector
from smf_assurance.approver.client import ApproverClient
from smf_assurance.ops.demo.script import SCENARIOS
from smf_assurance.ops.local.natsserver import EmbeddedNatsServer
from smf_assurance.ops.local.state import StateDir
from smf_assurance.pipeline.stores.ledger import Ledger
from smf_assurance.pipeline.stores.ledger_schema import EvidenceEntry
from smf_assurance.subjects import names
from smf_assurance.subjects.approvals import open_outcome
from smf_assurance.subjects.keyed import keyed_identifier
from smf_assurance.subjects.messages import Proposal, Verdict
from smf_assurance.subjects.registry import load_registry
from tests.support.bus_faults import DMS_DURABLE, seed_documents, tombstones
from tests.support.bus_helpers import (
    ExecuteSpy,
    ReportInbox,
    consumer_drained,
    wait_for,
)
from tests.support.bus_properties import (
    MODES,
    GateStarter,
    deletion,
    execute_count,
    from_scenario,
    ledger_entries,
    open_order,
    provisioned_state,
    runtime_client,
    stored_orders,
)

REPO = Path(__file__).resolve().parents[2]
GATE_CHILD = Path(__file__).parents[1] / "support" / "gate_child.py"
CONNECTOR_CHILD = Path(__file__).parents[1] / "support" / "connector_crash_child.py"
FAST_RUNNER = RunnerConfig(
    create_durable=True, ack_wait=1.0, fetch_timeout=0.1, retry_delay=0.1, stream_wait=5.0
)


@pytest.fixture
async def running_gates(
    state: StateDir, nats_server: EmbeddedNatsServer
) -> AsyncIterator[GateStarter]:
    starter = GateStarter(state, nats_server.url)
    yield starter
    await starter.close()


async def count_or_zero(js: JetStreamContext) -> int:
    """SMF_EXECUTE's count, 0 while the stream (or JetStream) is not there yet."""
    try:
        return await execute_count(js)
    except Exception:
        return 0


def ledger_decisions(state: StateDir) -> set[str]:
    uri = state.ledger.resolve().as_uri() + "?mode=ro"
    with sqlite3.connect(uri, uri=True) as conn:
        rows = conn.execute("SELECT decision_id FROM evidence_entries WHERE kind = 'decision'")
        return {row[0] for row in rows}


async def assert_orders_have_evidence(js: JetStreamContext, state: StateDir) -> None:
    decided = ledger_decisions(state)
    for stored in await stored_orders(js):
        order = open_order(stored.data or b"", state.key("gate"))
        assert order.decision_id in decided, order.order_id


# --- (a) nats-server restarts while proposals are in flight -------------------


async def first_real_allow(runtime: ProposalClient, prefix: str, timeout: float = 15.0) -> Verdict:
    """Propose fresh allowed deletions until one is allowed, or fail.

    Right after a restart JetStream may not yet take the publish; the gate
    then denies (``dispatch_failed``), which is the point: it never allows
    without the stored order.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    attempt = 0
    while True:
        attempt += 1
        verdict = await runtime.propose(deletion(runtime, f"{prefix}-{attempt}"))
        if verdict.outcome == "allow":
            return verdict
        assert verdict.outcome == "deny"
        assert verdict.reason_codes
        if loop.time() > deadline:
            raise AssertionError(f"no allow after the restart: {verdict.reason_codes}")
        await asyncio.sleep(0.1)


@MODES
async def test_nats_server_killed_mid_flight_fails_closed_and_service_resumes(
    co_located: bool,
    running_gates: GateStarter,
    nats_server: EmbeddedNatsServer,
    state: StateDir,
) -> None:
    gate = await running_gates(co_located)
    nc = await nats.connect(
        nats_server.url, reconnect_time_wait=0.1, max_reconnect_attempts=-1, connect_timeout=2
    )
    try:
        runtime = runtime_client(nc, state, timeout=3.0)
        proposals = [deletion(runtime, f"doc-r-{i:02d}", hold=i % 3 == 0) for i in range(40)]
        in_flight = [asyncio.create_task(runtime.propose(p)) for p in proposals]
        await asyncio.sleep(0.01)
        nats_server.kill()
        # Both sides notice the loss before the server returns: requests wait or fail.
        await wait_for(lambda: not (nc.is_connected or gate.nc.is_connected), timeout=10)
        nats_server.start()
        verdicts = await asyncio.gather(*in_flight)

        await wait_for(lambda: nc.is_connected and gate.nc.is_connected, timeout=10)
        assert nc.stats["reconnects"] >= 1
        for proposal, verdict in zip(proposals, verdicts, strict=True):
            assert verdict.proposal_id == proposal.proposal_id
            assert verdict.outcome in ("allow", "deny"), verdict
            assert verdict.reason_codes
            if proposal.facts.legal_hold:
                assert verdict.outcome == "deny"

        fresh = await first_real_allow(runtime, "doc-after-restart")
        held = await runtime.propose(deletion(runtime, "doc-4711", hold=True))
        assert held.outcome == "deny"
        assert "legal_hold_blocks_deletion" in held.reason_codes

        stored_ids = {(m.headers or {})[names.HEADER_MSG_ID] for m in await stored_orders(gate.js)}
        allowed = [v for v in verdicts if v.outcome == "allow"]
        assert {v.order_id for v in allowed} <= stored_ids, "an allow without its order"
        assert fresh.order_id in stored_ids
        await assert_orders_have_evidence(gate.js, state)
    finally:
        await nc.close()


# --- (b) the gate is killed mid-flight and restarted -------------------------------


@contextlib.asynccontextmanager
async def gate_process(
    url: str, state: StateDir, co_located: bool
) -> AsyncIterator[asyncio.subprocess.Process]:
    config = {"url": url, "state_dir": str(state.root), "co_located": co_located}
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        str(GATE_CHILD),
        json.dumps(config),
        cwd=REPO,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )
    try:
        assert child.stdout is not None
        line = await asyncio.wait_for(child.stdout.readline(), 30)
        assert line == b"ready\n", line
        yield child
    finally:
        if child.returncode is None:
            child.kill()
            await child.wait()


@contextlib.asynccontextmanager
async def dms_connector(url: str, state: StateDir, store: Path) -> AsyncIterator[ConnectorRunner]:
    nc = await nats.connect(url)
    runner = ConnectorRunner(
        nc,
        DocumentStoreConnector(store),
        connector_id="dms",
        signing_key=state.key("dms"),
        gate_keys=load_registry(state.registry).trusted("gate"),
        state_dir=state.connector_dir("dms"),
        config=FAST_RUNNER,
    )
    task = asyncio.create_task(runner.run())
    try:
        await asyncio.wait_for(runner.ready.wait(), 10)
        yield runner
    finally:
        runner.stop()
        await asyncio.wait_for(task, 10)
        await nc.close()


@MODES
async def test_gate_killed_mid_flight_and_restarted_executes_nothing_twice(
    co_located: bool,
    running_gates: GateStarter,
    nats_server: EmbeddedNatsServer,
    nc: Client,
    state: StateDir,
) -> None:
    documents = [f"doc-k-{i:02d}" for i in range(60)]
    store = seed_documents(state, documents)
    runtime = runtime_client(nc, state, timeout=2.0)
    js = nc.jetstream()

    async with gate_process(nats_server.url, state, co_located) as child:
        # Built once the gate answers: each proposal's deadline is its issue time plus
        # the client's 2 s, and a gate that starts slowly on a loaded machine decides
        # nothing past a deadline (it answers from its records), so proposals built
        # before it started could all be past theirs and no order would ever be stored.
        proposals = [deletion(runtime, d) for d in documents]
        signed = [runtime.sign(p) for p in proposals]
        first_round = [
            asyncio.create_task(runtime.send(p.proposal_id, s))
            for p, s in zip(proposals, signed, strict=True)
        ]

        async def some_published() -> bool:
            return await count_or_zero(js) >= 5

        await wait_for(some_published, timeout=15, interval=0.002)
        child.kill()  # SIGKILL: no shutdown code runs
        await child.wait()
    first = await asyncio.gather(*first_round)
    allowed_first = {v.proposal_id for v in first if v.outcome == "allow"}
    # At least 5 orders were stored before the kill (their replies may or may
    # not have left), and not every proposal was answered: it landed mid-flight.
    assert len(allowed_first) < len(proposals), "the kill did not land mid-flight"

    # The same signed bytes again, to a fresh gate on the same state directory: past
    # their requester's deadline, so the gate answers each from its records, never by
    # deciding again. An order whose publish the kill left unconfirmed is settled by
    # the new gate (stored, or voided so it never runs); until then it is unsettled.
    gate = await running_gates(co_located)
    patient = runtime_client(nc, state, timeout=20.0)
    second = [
        await settled_record(patient, p.proposal_id, s)
        for p, s in zip(proposals, signed, strict=True)
    ]
    first_by_id = {v.proposal_id: v for v in first}
    for proposal, verdict in zip(proposals, second, strict=True):
        assert "recorded_verdict" in verdict.reason_codes, verdict
        if proposal.proposal_id in allowed_first:
            assert verdict.outcome == "allow", verdict
            assert verdict.order_id == first_by_id[proposal.proposal_id].order_id
        else:
            # never answered: the record says whether an order exists, never "decide again"
            assert verdict.outcome in ("allow", "deny"), verdict
    allowed = allowed_first | {v.proposal_id for v in second if v.outcome == "allow"}

    orders = [open_order(m.data or b"", state.key("gate")) for m in await stored_orders(js)]
    per_document = Counter(o.arguments["document_id"] for o in orders)
    assert set(per_document.values()) == {1}, per_document
    allowed_documents = {p.arguments["document_id"] for p in proposals if p.proposal_id in allowed}
    assert allowed_documents <= set(per_document)
    await assert_orders_have_evidence(js, state)

    # The connector carries out what is stored: each deletion exactly once.
    async with dms_connector(nats_server.url, state, store):
        await wait_for(lambda: consumer_drained(js, DMS_DURABLE), timeout=20)
    done = tombstones(store)
    assert sorted(t.document_id for t in done) == sorted(per_document)
    assert {t.order_id for t in done} == {o.order_id for o in orders}
    remaining = {p.name for p in store.iterdir() if p.name != DELETED_DIR}
    assert remaining == set(documents) - set(per_document)

    # What the runtime learns agrees with what the connector did: every recorded allow
    # is one tombstone, and no deletion ran behind a recorded deny.
    assert {v.order_id for v in second if v.outcome == "allow"} == {t.order_id for t in done}

    # A third replay, after execution: still nothing new.
    before = await execute_count(js)
    third = [await runtime.send(p.proposal_id, s) for p, s in zip(proposals, signed, strict=True)]
    assert [v.outcome for v in third] == [v.outcome for v in second]
    assert await execute_count(js) == before
    assert gate.nc.is_connected


async def settled_record(runtime: ProposalClient, proposal_id: str, signed: bytes) -> Verdict:
    """The proposal's recorded verdict once the gate knows it (polled, with a deadline)."""
    answer: list[Verdict] = []

    async def known() -> bool:
        answer[:] = [await runtime.recorded(proposal_id, signed)]
        return not unsettled(answer[0])

    await wait_for(known, timeout=30, interval=0.2)
    return answer[0]


# --- (c) the connector dies after executing, before acking: through the stack ------


async def approved_court_filing(runtime: ProposalClient, nc: Client, state: StateDir) -> Verdict:
    """Scenario 1 held, then allowed once by the licensed attorney: the order."""
    held = await runtime.propose(from_scenario(runtime, SCENARIOS[0]))
    assert held.outcome == "held", held
    assert held.approval_id is not None
    assert held.decision_id is not None
    assert held.operation_hash is not None
    outcome = await nc.subscribe(names.approval_outcome_subject(held.approval_id))
    attorney = ApproverClient(nc, state.key("attorney-alex"), "attorney-alex")
    _, reply = await attorney.review_and_resolve(held.approval_id, "allow-once")
    assert reply.accepted, reply
    allowed = open_outcome(
        (await outcome.next_msg(timeout=5)).data,
        load_registry(state.registry).trusted("gate"),
        approval_id=held.approval_id,
        decision_id=held.decision_id,
        operation_hash=held.operation_hash,
    )
    assert allowed.outcome == "allow", allowed
    assert allowed.order_id is not None
    return allowed


async def approval_state(nc: Client, approval_id: str) -> str:
    reply = await nc.request(names.APPROVAL_STATUS, approval_id.encode(), timeout=5)
    state: str = json.loads(reply.data)["state"]
    return state


async def test_connector_killed_after_executing_before_ack_is_ambiguous_not_repeated(
    running_gates: GateStarter, nats_server: EmbeddedNatsServer, nc: Client, state: StateDir
) -> None:
    await running_gates(False)
    runtime = runtime_client(nc, state)
    allowed = await approved_court_filing(runtime, nc, state)
    assert allowed.approval_id is not None
    assert allowed.order_id is not None
    folder = state.connector_dir("court-efiling")
    outbox = folder / "outbox"
    config = {
        "url": nats_server.url,
        "state_dir": str(folder),
        "outbox": str(outbox),
        "connector_id": "court-efiling",
        "durable": "smf-connector-court-efiling",
        "ack_wait": "1.0",
        "gate_public": state.key("gate").public_bytes.hex(),
        "connector_seed": state.key("court-efiling").seed().hex(),
    }
    child = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, str(CONNECTOR_CHILD), json.dumps(config)],
        cwd=REPO,
        timeout=30,
        capture_output=True,
        check=False,
    )
    assert child.returncode == 137, child.stderr.decode(errors="replace")[-2000:]
    filed = [p.name for p in outbox.iterdir()]
    assert filed == [f"{allowed.order_id}.json"]
    assert await approval_state(nc, allowed.approval_id) == "executing"

    reports = await ReportInbox.open(nc, "court-efiling", state.key("court-efiling").verify_key)
    connector_nc = await nats.connect(nats_server.url)
    runner = ConnectorRunner(
        connector_nc,
        CourtEFilingConnector(outbox),
        connector_id="court-efiling",
        signing_key=state.key("court-efiling"),
        gate_keys=load_registry(state.registry).trusted("gate"),
        state_dir=folder,
        config=FAST_RUNNER,
    )
    task = asyncio.create_task(runner.run())
    try:
        report = await reports.next(timeout=10)
        assert (report.order_id, report.status) == (allowed.order_id, "ambiguous")

        async def unknown() -> bool:
            assert allowed.approval_id is not None
            return await approval_state(nc, allowed.approval_id) == "execution_unknown"

        await wait_for(unknown, timeout=10)
        # Acknowledged: nothing is left to redeliver, so nothing can execute again,
        # and every report the runner sent before its ack has been read here.
        await wait_for(lambda: consumer_drained(nc.jetstream(), runner.durable), timeout=10)
        assert reports.none_pending()
    finally:
        runner.stop()
        await asyncio.wait_for(task, 10)
        await connector_nc.close()
    assert [p.name for p in outbox.iterdir()] == filed


# --- the evidence store fails mid-run ---------------------------------------------


async def _second_writer(state: StateDir) -> None:
    """Another writer extends the chain behind the gate's back: the gate's
    ledger must refuse to extend (and later sign) a chain it did not write."""
    identity = "sha256:" + "ee" * 32
    async with await Ledger.open(state.ledger, signer=state.key("gate")) as other:
        await other.append(
            EvidenceEntry(
                kind="decision",
                operation_hash=identity,
                decision_id=identity,
                release_id=identity,
                projection_id=identity,
                tenant_ref=keyed_identifier(b"k" * 32, "smf.tenant", "tenant-x"),
                at=1,
                disposition="deny",
                reason_codes=("test_second_writer",),
            )
        )


@pytest.mark.claim("protected-evidence.outage-denies")
@MODES
@pytest.mark.parametrize("outage", ["closed", "second-writer"])
async def test_ledger_outage_denies_everything_and_releases_nothing_unrecorded(
    outage: str, co_located: bool, running_gates: GateStarter, nc: Client, state: StateDir
) -> None:
    gate = await running_gates(co_located)
    spy = await ExecuteSpy.attach(nc)
    runtime = runtime_client(nc, state)
    before = await runtime.propose(deletion(runtime, "doc-before"))
    assert before.outcome == "allow"

    if outage == "closed":
        await gate.ledger.close()
    else:
        await _second_writer(state)
    entries = ledger_entries(state)

    proposals: list[Proposal] = [from_scenario(runtime, s) for s in SCENARIOS]
    proposals += [deletion(runtime, f"doc-during-{i}") for i in range(5)]
    for proposal in proposals:
        verdict = await runtime.propose(proposal)
        assert (verdict.outcome, verdict.reason_codes) == ("deny", ("evidence_store_unavailable",))
        assert verdict.order_id is None
        assert verdict.evidence == ()

    assert len(await spy.settled()) == 1
    assert await execute_count(gate.js) == 1
    assert ledger_entries(state) == entries
    await assert_orders_have_evidence(gate.js, state)


# --- shutdown always completes ------------------------------------------------------


async def test_gate_shutdown_completes_every_time(tmp_path: Path) -> None:
    """``RunningGate.close`` must not hang. A cancel that lands as the report
    follower's fetch reaches a deadline came out of nats-py as a TimeoutError
    (asyncio.wait_for in 3.11), the follower took it for "no report yet" and
    close waited for it forever. Closing right after start, on a fresh server,
    hit that in most runs of 8 cycles before the fix."""
    for cycle in range(8):
        state = provisioned_state(tmp_path / f"cycle-{cycle}")
        with EmbeddedNatsServer(tmp_path / f"nats-{cycle}") as server:
            starter = GateStarter(state, server.url)
            await starter(co_located=cycle % 2 == 1)
            await asyncio.wait_for(starter.close(), 10)


# --- (d) killed while the decision's one commit waits ---------------------


async def test_a_gate_killed_before_its_one_commit_records_nothing_and_orders_once(
    running_gates: GateStarter, nats_server: EmbeddedNatsServer, nc: Client, state: StateDir
) -> None:
    """The claim, its order and the evidence entry are one transaction in the ledger
    file. The test holds the ledger file's write lock, so that commit
    waits, and SIGKILLs the gate process there: no claim, no order record, no
    evidence and nothing in SMF_EXECUTE. The same signed bytes sent to a
    restarted gate are allowed once, with one order and its evidence; sent
    again, they are a duplicate."""
    seed_documents(state, ["doc-crash"])
    runtime = runtime_client(nc, state, timeout=2.0)
    js = nc.jetstream()
    # No requester's deadline: the same bytes are decided again by the restarted gate
    # (one with a deadline would be answered from the record: no_order_recorded).
    proposal = msgspec.structs.replace(deletion(runtime, "doc-crash"), reply_by_ms=None)
    signed = runtime.sign(proposal)

    def rows_of(table: str) -> int:
        uri = state.ledger.resolve().as_uri() + "?mode=ro"
        with contextlib.closing(sqlite3.connect(uri, uri=True)) as conn:
            return int(conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0])

    async with gate_process(nats_server.url, state, co_located=True) as child:
        lock = sqlite3.connect(state.ledger, isolation_level=None, timeout=10)
        try:
            lock.execute("BEGIN IMMEDIATE")  # the gate's commit now waits for the lock
            # The client gives up after its 2 s; the gate's commit waits up to its
            # busy timeout (5 s) for the lock, so at the client's timeout the gate
            # has decided and is inside its one commit, not yet committed.
            first = await runtime.send(proposal.proposal_id, signed)
            assert (first.outcome, first.reason_codes) == ("deny", ("gate_timeout",)), first
            child.kill()  # SIGKILL while the commit waits: no shutdown code runs
            await child.wait()
        finally:
            lock.execute("ROLLBACK")
            lock.close()
    assert (rows_of("proposal_claims"), rows_of("direct_orders")) == (0, 0)
    assert ledger_decisions(state) == set()
    assert await count_or_zero(js) == 0

    gate = await running_gates(True)
    allowed = await runtime.send(proposal.proposal_id, signed)
    assert allowed.outcome == "allow", allowed
    again = await runtime.send(proposal.proposal_id, signed)
    assert (again.outcome, again.reason_codes[-1:]) == ("deny", ("duplicate_proposal",))
    assert await execute_count(gate.js) == 1
    assert (rows_of("proposal_claims"), rows_of("direct_orders")) == (1, 1)
    await assert_orders_have_evidence(js, state)
