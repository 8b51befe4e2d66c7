"""Every direct allow's order ends in the ledger with its outcome.

ARCHITECTURE.md, "One proposal through the bus": the connector reports on
``smf.result.<connector>``: confirmed -> consumed | failed -> failed |
ambiguous/no report -> execution_unknown. The attack on it: a direct allow's
report verified and then dropped. Real nats-server (the ``nats_server``
fixture, 127.0.0.1, a random port), real SQLite files in a provisioned state
directory, the whole gate from ``smf_assurance.pipeline.assembly.start_gate``, the example
DMS connector (``smf_assurance.ops.local.stack.example_connectors``) on its own connection, and a
connector process killed mid-order (``tests/support/connector_crash_child.py``). Every
test runs on both store backends: the SQLite claim file of one gate, and the
JetStream KV claim bucket of a cluster replica (``ClusterSettings(replicas=1)``
on one server). Assertions read the ledger file and the connector's own
folder (the document store and its tombstones); nothing of ours is mocked and
nothing waits a fixed time (each wait is for an observable effect: a ledger
row, the gate's durable consumer acknowledging a report).

What these tests prove:

- A DMS deletion allowed directly, carried out by the connector: the ledger
  shows its decision, then one ``consumed`` transition with the connector's
  reason; the document is gone and its tombstone names the order. A deletion
  of a missing document: one ``failed`` transition (``not_found``).
- The connector dies after deleting and before reporting: after the execution
  deadline the sweep records ``execution_unknown`` (``no_execution_report``);
  the restarted connector's late ``ambiguous`` report records nothing more.
- Reports signed by another connector's key, a runtime's key, an approver's or
  an unknown key, or naming another executor or an unknown order, record
  nothing; the connector's own report then records the outcome once, and the
  same report replayed, or a second one, adds nothing.
- Restart: an unsettled order is neither resumed nor ended by a restart within
  its deadline (its report, read afterwards, settles it), and one past its
  deadline is ended ``execution_unknown`` by the recovery of the restarted gate,
  before any sweep runs.
- Fail closed: with the order book down, a direct allow is denied
  (``order_record_failed`` on KV, whose retry is a duplicate;
  ``claim_store_unavailable`` in the SQLite claim file, where claim and order
  are one transaction) and nothing reaches SMF_EXECUTE; a sweep and a report
  meeting the outage record nothing, raise nothing.

What they do not prove: anything about a tool the runtime runs itself on a
direct allow (not recorded: see ``Gate._open_order``); a
ledger outage between the store's settle and the ledger entry (the outcome is
then only in the order book, logged); more than one gate replica racing a
report (the CAS is covered by the store tests); timing under load.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import sqlite3
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Final

import pytest
from nats.aio.client import Client

from smf_assurance.adapters.client import ProposalClient
from smf_assurance.ops.local.natsserver import EmbeddedNatsServer
from smf_assurance.ops.local.stack import gate_config
from smf_assurance.ops.local.state import StateDir
from smf_assurance.pipeline.assembly import RunningGate, start_gate
from smf_assurance.pipeline.assembly.config import ClusterSettings
from smf_assurance.pipeline.stores.claims import MERGED_SUFFIX
from smf_assurance.pipeline.stores.claims import SCHEMA as CLAIMS_SCHEMA
from smf_assurance.pipeline.stores.orders import SCHEMA as ORDERS_SCHEMA
from smf_assurance.subjects import names
from smf_assurance.subjects.dsse import encode_envelope, sign_struct
from smf_assurance.subjects.keys import SigningKey, generate_signing_key
from smf_assurance.subjects.messages import ExecutionReport, Verdict, order_id_for
from tests.support.approval_desk import connectors_running, file_report
from tests.support.builders import Decided
from tests.support.bus_helpers import wait_for
from tests.support.bus_properties import deletion, runtime_client
from tests.support.clocks import OffsetClock

REPO: Final = Path(__file__).resolve().parents[2]
CRASH_CHILD: Final = Path(__file__).parents[1] / "support" / "connector_crash_child.py"
DOCUMENT: Final = "doc-4711"
DEADLINE_MS: Final = 1_500
"""A short execution deadline, so the sweep ends an unreported order in a test."""
CLOSE_TIMEOUT_S: Final = 15.0
BACKENDS: Final = {"sqlite": None, "kv": ClusterSettings(replicas=1)}

Row = tuple[str, str | None, str | None, tuple[str, ...]]
"""(kind, disposition, status, reason codes) of one ledger entry."""


@pytest.fixture(params=sorted(BACKENDS))
def backend(request: pytest.FixtureRequest) -> ClusterSettings | None:
    return BACKENDS[request.param]


GateFactory = Callable[..., Awaitable[RunningGate]]


@pytest.fixture
async def gates(
    seeded_state: StateDir, nats_server: EmbeddedNatsServer, backend: ClusterSettings | None
) -> AsyncIterator[GateFactory]:
    """Starts gates on this state and backend; closes those still running."""
    started: list[RunningGate] = []

    async def start(
        *,
        clock: Callable[[], int] | None = None,
        sweep_seconds: float = 3600.0,
        deadline_ms: int = DEADLINE_MS,
    ) -> RunningGate:
        config = gate_config(
            state=seeded_state,
            nats_url=nats_server.url,
            sweep_seconds=sweep_seconds,
            cluster=backend,
            clock=OffsetClock() if clock is None else clock,
        )
        running = await start_gate(dataclasses.replace(config, execution_deadline_ms=deadline_ms))
        started.append(running)
        return running

    yield start
    for running in started:
        if not running.nc.is_closed:
            await asyncio.wait_for(running.close(), CLOSE_TIMEOUT_S)


def rows(ledger: Path, decision_id: str) -> list[Row]:
    """Every ledger entry of one decision, in order, read from the file."""
    uri = ledger.resolve().as_uri() + "?mode=ro"
    with contextlib.closing(sqlite3.connect(uri, uri=True)) as conn:
        found = conn.execute(
            "SELECT kind, disposition, status, reason_codes FROM evidence_entries"
            " WHERE decision_id = ? ORDER BY seq",
            (decision_id,),
        ).fetchall()
    return [(k, d, s, tuple(json.loads(r))) for k, d, s, r in found]


def outcomes(ledger: Path, decision_id: str) -> list[tuple[str | None, tuple[str, ...]]]:
    return [(s, r) for k, _, s, r in rows(ledger, decision_id) if k == "transition"]


async def wait_for_outcome(ledger: Path, decision_id: str, timeout: float = 15.0) -> None:
    await wait_for(lambda: outcomes(ledger, decision_id), timeout=timeout)


async def allowed_deletion(runtime: ProposalClient, document_id: str = DOCUMENT) -> Verdict:
    verdict = await runtime.propose(deletion(runtime, document_id))
    assert verdict.outcome == "allow", verdict
    assert verdict.order_id is not None
    assert verdict.decision_id is not None
    assert verdict.connector_id == "dms"
    return verdict


def decision_of(verdict: Verdict) -> str:
    assert verdict.decision_id is not None
    return verdict.decision_id


def report_bytes(
    key: SigningKey,
    *,
    order_id: str,
    reporter: str = "dms",
    status: str = "confirmed",
    reason: str = "executed",
) -> bytes:
    report = ExecutionReport(
        schema="smf.execution-report/1",
        order_id=order_id,
        connector_id=reporter,
        status=status,  # type: ignore[arg-type]
        reason_code=reason,
        at_ms=time.time_ns() // 1_000_000,
    )
    return encode_envelope(sign_struct(names.PAYLOAD_REPORT, report, [key]))


# --- a connector confirms, a connector fails --------------------------------------


async def test_a_confirmed_deletion_is_consumed_in_the_ledger(
    gates: GateFactory, nc: Client, seeded_state: StateDir, nats_server: EmbeddedNatsServer
) -> None:
    gate = await gates()
    store = seeded_state.connector_dir("dms") / "store"
    async with connectors_running(seeded_state, nats_server.url):
        verdict = await allowed_deletion(runtime_client(nc, seeded_state))
        await wait_for_outcome(seeded_state.ledger, decision_of(verdict))

    assert rows(seeded_state.ledger, decision_of(verdict))[0][:2] == ("decision", "allow")
    assert outcomes(seeded_state.ledger, decision_of(verdict)) == [("consumed", ("executed",))]
    assert not (store / DOCUMENT).exists()
    assert (store / ".deleted" / str(verdict.order_id)).exists()
    assert verdict.order_id is not None
    record = await gate.orders.get(verdict.order_id)
    assert record is not None
    assert (record.state, record.executor_role, record.executor_id) == (
        "consumed",
        "connector",
        "dms",
    )


async def test_a_failed_deletion_is_failed_in_the_ledger(
    gates: GateFactory, nc: Client, seeded_state: StateDir, nats_server: EmbeddedNatsServer
) -> None:
    await gates()
    async with connectors_running(seeded_state, nats_server.url):
        verdict = await allowed_deletion(runtime_client(nc, seeded_state), "doc-missing")
        await wait_for_outcome(seeded_state.ledger, decision_of(verdict))

    assert outcomes(seeded_state.ledger, decision_of(verdict)) == [("failed", ("not_found",))]
    assert not (
        seeded_state.connector_dir("dms") / "store" / ".deleted" / str(verdict.order_id)
    ).exists()


# --- a connector killed mid-order -----------------------------------------------


CRASHED_ACK_WAIT: Final = 1.0
"""The crashing connector's durable's ack wait: its order comes back a second after."""


def run_crashing_connector(state: StateDir, url: str) -> subprocess.CompletedProcess[bytes]:
    folder = state.connector_dir("dms")
    config = {
        "url": url,
        "state_dir": str(folder),
        "outbox": str(folder / "store"),
        "kind": "dms",
        "connector_id": "dms",
        "durable": "smf-connector-dms",
        "ack_wait": str(CRASHED_ACK_WAIT),
        "gate_public": state.key("gate").public_bytes.hex(),
        "connector_seed": state.key("dms").seed().hex(),
    }
    return subprocess.run(
        [sys.executable, str(CRASH_CHILD), json.dumps(config)],
        cwd=REPO,
        timeout=30,
        capture_output=True,
        check=False,
    )


async def test_a_connector_killed_mid_order_ends_execution_unknown(
    gates: GateFactory, nc: Client, seeded_state: StateDir, nats_server: EmbeddedNatsServer
) -> None:
    gate = await gates(sweep_seconds=0.2)
    verdict = await allowed_deletion(runtime_client(nc, seeded_state))
    child = await asyncio.to_thread(run_crashing_connector, seeded_state, nats_server.url)
    assert child.returncode == 137, child.stderr.decode(errors="replace")[-2000:]
    tombstones = seeded_state.connector_dir("dms") / "store" / ".deleted"
    assert (tombstones / str(verdict.order_id)).exists()  # the side effect happened

    await wait_for_outcome(seeded_state.ledger, decision_of(verdict))
    assert outcomes(seeded_state.ledger, decision_of(verdict)) == [
        ("execution_unknown", ("no_execution_report",))
    ]

    # The connector comes back: its idempotency record says the order was begun
    # and not finished, so it reports ``ambiguous`` and does not delete again; the
    # late report records nothing more.
    before = (await gate.js.stream_info(names.RESULT_STREAM)).state.messages
    # The crashed connector's durable has a 1 s ack wait. A runner that set its own 30 s
    # within that second (the gate's 0.2 s sweep records the outcome that fast) would
    # push the unacknowledged order's redelivery 30 s out: nats-server applies a changed
    # wait to a pending delivery. So the restarted connector keeps the crashed one's.
    async with connectors_running(seeded_state, nats_server.url, ack_wait=CRASHED_ACK_WAIT):

        async def late_report_read() -> bool:
            info = await gate.js.consumer_info(names.RESULT_STREAM, "smf-gate-results")
            return (info.ack_floor.stream_seq or 0) > before if info.ack_floor else False

        await wait_for(late_report_read, timeout=15)
    assert outcomes(seeded_state.ledger, decision_of(verdict)) == [
        ("execution_unknown", ("no_execution_report",))
    ]
    assert sorted(p.name for p in tombstones.iterdir()) == [str(verdict.order_id)]


# --- reports that must record nothing ----------------------------------------------

FORGERIES: Final[dict[str, tuple[str | None, str]]] = {
    # case: (signing principal, None for a key in no registry; executor it names)
    "another-connector-naming-itself": ("court-efiling", "court-efiling"),
    "another-connector-naming-dms": ("court-efiling", "dms"),
    "the-runtime": ("runtime", "dms"),
    "an-approver": ("attorney-alex", "dms"),
    "the-gate": ("gate", "dms"),
    "unknown-key": (None, "dms"),
    "dms-naming-another-executor": ("dms", "court-efiling"),
}


async def test_only_the_connectors_own_report_records_and_only_once(
    gates: GateFactory, nc: Client, seeded_state: StateDir
) -> None:
    """No connector runs: the test is the only reporter."""
    gate = await gates()
    verdict = await allowed_deletion(runtime_client(nc, seeded_state))
    order_id = verdict.order_id
    assert order_id is not None
    for case, (principal, reporter) in sorted(FORGERIES.items()):
        key = generate_signing_key() if principal is None else seeded_state.key(principal)
        await file_report(nc, reporter, report_bytes(key, order_id=order_id, reporter=reporter))
        assert outcomes(seeded_state.ledger, decision_of(verdict)) == [], case
    # The connector's key for an order the gate never gave.
    stranger = order_id_for(Decided(verdict.operation_hash or "", "sha256:" + "0" * 64))
    await file_report(nc, "dms", report_bytes(seeded_state.key("dms"), order_id=stranger))
    assert outcomes(seeded_state.ledger, decision_of(verdict)) == []
    record = await gate.orders.get(order_id)
    assert record is not None
    assert record.state == "executing"

    genuine = report_bytes(seeded_state.key("dms"), order_id=order_id)
    await file_report(nc, "dms", genuine)
    assert outcomes(seeded_state.ledger, decision_of(verdict)) == [("consumed", ("executed",))]

    # A replay of the same bytes, and a second report that says something else.
    await file_report(nc, "dms", genuine)
    second = report_bytes(
        seeded_state.key("dms"), order_id=order_id, status="failed", reason="late"
    )
    await file_report(nc, "dms", second)
    assert outcomes(seeded_state.ledger, decision_of(verdict)) == [("consumed", ("executed",))]
    record = await gate.orders.get(order_id)
    assert record is not None
    assert record.state == "consumed"


async def test_an_ambiguous_report_is_execution_unknown(
    gates: GateFactory, nc: Client, seeded_state: StateDir
) -> None:
    await gates()
    verdict = await allowed_deletion(runtime_client(nc, seeded_state))
    assert verdict.order_id is not None
    signed = report_bytes(
        seeded_state.key("dms"), order_id=verdict.order_id, status="ambiguous", reason="ambiguous"
    )
    await file_report(nc, "dms", signed)
    assert outcomes(seeded_state.ledger, decision_of(verdict)) == [
        ("execution_unknown", ("ambiguous",))
    ]


# --- a gate restart with an unsettled order ----------------------------------------


async def test_a_restart_within_the_deadline_keeps_waiting_for_the_report(
    gates: GateFactory, nc: Client, seeded_state: StateDir, nats_server: EmbeddedNatsServer
) -> None:
    first = await gates(deadline_ms=60_000)
    verdict = await allowed_deletion(runtime_client(nc, seeded_state))
    await asyncio.wait_for(first.close(), CLOSE_TIMEOUT_S)

    second = await gates(deadline_ms=60_000)
    assert verdict.order_id is not None
    record = await second.orders.get(verdict.order_id)
    assert record is not None
    assert record.state == "executing"  # not resumed, not ended
    assert outcomes(seeded_state.ledger, decision_of(verdict)) == []
    async with connectors_running(seeded_state, nats_server.url):
        await wait_for_outcome(seeded_state.ledger, decision_of(verdict))
    assert outcomes(seeded_state.ledger, decision_of(verdict)) == [("consumed", ("executed",))]
    stream = await second.js.stream_info(names.EXECUTE_STREAM)
    assert stream.state.messages == 1  # one order, never dispatched again


async def test_a_restart_past_the_deadline_ends_the_order_unknown(
    gates: GateFactory, nc: Client, seeded_state: StateDir, nats_server: EmbeddedNatsServer
) -> None:
    clock = OffsetClock()
    first = await gates(clock=clock)
    verdict = await allowed_deletion(runtime_client(nc, seeded_state))
    await asyncio.wait_for(first.close(), CLOSE_TIMEOUT_S)
    clock.advance(DEADLINE_MS + 1)

    second = await gates(clock=clock)  # its sweep never runs in this test
    assert outcomes(seeded_state.ledger, decision_of(verdict)) == [
        ("execution_unknown", ("no_execution_report",))
    ]
    # The connector then carries the order out once; its report changes nothing.
    async with connectors_running(seeded_state, nats_server.url):

        async def report_read() -> bool:
            info = await second.js.consumer_info(names.RESULT_STREAM, "smf-gate-results")
            return bool(info.ack_floor and (info.ack_floor.stream_seq or 0) >= 1)

        await wait_for(report_read, timeout=15)
    assert outcomes(seeded_state.ledger, decision_of(verdict)) == [
        ("execution_unknown", ("no_execution_report",))
    ]
    stream = await second.js.stream_info(names.EXECUTE_STREAM)
    assert stream.state.messages == 1


# --- fail closed ----------------------------------------------------------------------


async def test_an_order_book_outage_publishes_nothing_and_breaks_no_loop(
    gates: GateFactory, nc: Client, seeded_state: StateDir, backend: ClusterSettings | None
) -> None:
    """Not recorded, not published: the allow becomes a denial; a report or a sweep
    meeting the outage records nothing and raises nothing.

    On the KV bucket the claim is spent before the order book fails, so a retry
    of the same proposal is a duplicate, never a second order. In the SQLite
    claim file the claim and its order are one transaction, so the
    book's outage is the claim file's: ``claim_store_unavailable``, and nothing
    of either was written (the retry meets the same outage)."""
    gate = await gates()
    await gate.orders.close()
    runtime = runtime_client(nc, seeded_state)
    proposal = deletion(runtime, DOCUMENT)
    verdict = await runtime.propose(proposal)
    assert verdict.outcome == "deny"
    assert (await gate.js.stream_info(names.EXECUTE_STREAM)).state.messages == 0
    if backend is None:
        assert verdict.reason_codes == ("claim_store_unavailable",)
        recorded: list[tuple[str | None, tuple[str, ...]]] = []
        retry = ("deny", ("claim_store_unavailable",))
    else:
        assert "order_record_failed" in verdict.reason_codes
        recorded = [("failed", ("order_record_failed",))]
        retry = ("deny", ("duplicate_proposal",))
    assert outcomes(seeded_state.ledger, decision_of(verdict)) == recorded
    again = await runtime.propose(proposal)
    assert (again.outcome, again.reason_codes[-1:]) == retry

    assert await gate.outcomes.sweep() == 0
    stray = order_id_for(Decided.of(verdict))
    await file_report(nc, "dms", report_bytes(seeded_state.key("dms"), order_id=stray))
    assert outcomes(seeded_state.ledger, decision_of(verdict)) == recorded
    assert (await gate.js.stream_info(names.EXECUTE_STREAM)).state.messages == 0


# --- one durable commit per decision --------------------------------------


def claim_and_order_states(state: StateDir, proposal_id: str) -> tuple[str | None, list[str]]:
    """The claim's state and its orders' states, read from the ledger file (where one
    machine keeps them)."""
    uri = state.ledger.resolve().as_uri() + "?mode=ro"
    with contextlib.closing(sqlite3.connect(uri, uri=True)) as conn:
        claim = conn.execute(
            "SELECT state FROM proposal_claims WHERE proposal_id = ?", (proposal_id,)
        ).fetchone()
        orders = conn.execute(
            "SELECT state FROM direct_orders WHERE proposal_id = ?", (proposal_id,)
        ).fetchall()
    return (None if claim is None else claim[0]), [row[0] for row in orders]


@pytest.mark.parametrize("backend", [None], ids=["sqlite"])
async def test_evidence_that_does_not_commit_writes_no_claim_and_gives_no_order(
    gates: GateFactory, nc: Client, seeded_state: StateDir
) -> None:
    """The claim and its order are written in the evidence entry's transaction (issue
    20): when the ledger cannot commit, the allow is denied
    ``evidence_store_unavailable`` and neither a claim nor an order exists. The
    same signed proposal, sent to a restarted gate, is decided afresh and
    allowed ONCE: one order, its evidence in the ledger; sent again, it is a
    duplicate."""
    gate = await gates()
    runtime = runtime_client(nc, seeded_state)
    proposal = deletion(runtime, DOCUMENT)
    signed = runtime.sign(proposal)
    await gate.ledger.close()
    verdict = await runtime.send(proposal.proposal_id, signed)
    assert (verdict.outcome, verdict.reason_codes) == ("deny", ("evidence_store_unavailable",))
    assert (await gate.js.stream_info(names.EXECUTE_STREAM)).state.messages == 0
    assert claim_and_order_states(seeded_state, proposal.proposal_id) == (None, [])

    await asyncio.wait_for(gate.close(), CLOSE_TIMEOUT_S)
    second = await gates()
    allowed = await runtime.send(proposal.proposal_id, signed)
    assert allowed.outcome == "allow", allowed
    # the claim's "published" is recorded after the answer (Gate._settle_soon)
    await wait_for(
        lambda: (
            claim_and_order_states(seeded_state, proposal.proposal_id)
            == ("published", ["executing"])
        ),
        timeout=10,
    )
    assert [k for k, *_ in rows(seeded_state.ledger, decision_of(allowed))] == ["decision"]
    again = await runtime.send(proposal.proposal_id, signed)
    assert (again.outcome, again.reason_codes[-1:]) == ("deny", ("duplicate_proposal",))
    assert (await second.js.stream_info(names.EXECUTE_STREAM)).state.messages == 1


async def test_an_earlier_claim_file_is_merged_into_the_ledger(
    gates: GateFactory, nc: Client, seeded_state: StateDir, backend: ClusterSettings | None
) -> None:
    """A state of the older layout keeps its claims and orders in ``claims.db``. At
    start the gate merges them into the ledger file and sets the old file aside:
    the old claim still refuses its replay, and the old open order is still
    followed (its connector's report settles it in the ledger)."""
    if backend is not None:
        pytest.skip("a cluster keeps its claims in the claim bucket")
    first = await gates()
    runtime = runtime_client(nc, seeded_state)
    proposal = deletion(runtime, DOCUMENT)
    signed = runtime.sign(proposal)
    verdict = await allowed_deletion_signed(runtime, proposal.proposal_id, signed)
    await asyncio.wait_for(first.close(), CLOSE_TIMEOUT_S)
    # Move the rows out into a claim file as an earlier version kept it.
    uri = seeded_state.ledger.resolve()
    with contextlib.closing(sqlite3.connect(seeded_state.claims)) as old:
        old.executescript(CLAIMS_SCHEMA + ORDERS_SCHEMA)
        old.execute(f"ATTACH DATABASE '{uri}' AS ledger")
        old.execute("INSERT INTO proposal_claims SELECT * FROM ledger.proposal_claims")
        old.execute("INSERT INTO direct_orders SELECT * FROM ledger.direct_orders")
        old.execute("DELETE FROM ledger.proposal_claims")
        old.execute("DELETE FROM ledger.direct_orders")
        old.commit()
    seeded_state.claims.chmod(0o600)  # a state file: its owner's alone, or the gate refuses it
    assert claim_and_order_states(seeded_state, proposal.proposal_id) == (None, [])

    second = await gates()
    assert claim_and_order_states(seeded_state, proposal.proposal_id) == (
        "published",
        ["executing"],
    )
    assert not seeded_state.claims.exists()
    assert seeded_state.claims.with_name("claims.db" + MERGED_SUFFIX).exists()
    again = await runtime.send(proposal.proposal_id, signed)
    assert (again.outcome, again.reason_codes[-1:]) == ("deny", ("duplicate_proposal",))
    assert verdict.order_id is not None
    await file_report(nc, "dms", report_bytes(seeded_state.key("dms"), order_id=verdict.order_id))
    await wait_for_outcome(seeded_state.ledger, decision_of(verdict))
    assert outcomes(seeded_state.ledger, decision_of(verdict)) == [("consumed", ("executed",))]
    assert (await second.js.stream_info(names.EXECUTE_STREAM)).state.messages == 1


async def allowed_deletion_signed(
    runtime: ProposalClient, proposal_id: str, signed: bytes
) -> Verdict:
    verdict = await runtime.send(proposal_id, signed)
    assert verdict.outcome == "allow", verdict
    return verdict
