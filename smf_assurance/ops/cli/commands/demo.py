"""``demo``: the four governed scenarios end to end over a real NATS bus.

Starts an embedded nats-server, the gate and the example connectors under a
state directory, drives the scenarios from a scripted runtime adapter, has a
synthetic licensed attorney resolve the held court filing, and prints what
happened: verdict, what reached ``smf.execute.*``, what the connector did,
and the evidence entry. Exits 0 only when every outcome is the expected one.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import msgspec
from nats.aio.client import Client
from nats.aio.msg import Msg

from smf_assurance.adapters.client import ProposalClient
from smf_assurance.approver.client import ApproverClient
from smf_assurance.core.release_trust import NoVerifiedReleaseError
from smf_assurance.governance.projections import SCENARIO_ENVELOPES, package_path
from smf_assurance.ops.cli.cli_json import ConnectorReport, DemoJson, DemoOutcome, DemoScenario
from smf_assurance.ops.cli.output import Progress, emit, fail, table
from smf_assurance.ops.demo.script import SCENARIOS, ScriptedAction
from smf_assurance.ops.local.bus import connect_bus
from smf_assurance.ops.local.defaults import OPERATOR
from smf_assurance.ops.local.logs import configure_logging
from smf_assurance.ops.local.stack import (
    Stack,
    seed_demo_directory,
    seed_demo_documents,
    start_stack,
)
from smf_assurance.ops.local.state import (
    ADAPTER_ID,
    RUNTIME_ID,
    StateDir,
    private_files,
    provision_demo,
)
from smf_assurance.subjects import dsse, names
from smf_assurance.subjects.approvals import open_outcome
from smf_assurance.subjects.keys import VerifyKey
from smf_assurance.subjects.messages import ExecutionReport, Outcome, Verdict
from smf_assurance.subjects.registry import load_registry
from smf_assurance.subjects.release import ReleaseCheckError
from smf_assurance.swarm.selector import analysis_release, decode_matter
from smf_assurance.swarm.service import analyze

REPORT_WAIT_SECONDS = 10.0


@dataclass
class Row:
    """One scenario's result in machine values (``--json`` carries full ids
    and the gate's own words); the table's display strings are derived in ``cells``."""

    scenario: str
    outcome: DemoOutcome
    """The gate's first verdict (``allow``, ``deny``, ``held``), ``report`` for Swarm,
    ``refused`` when Swarm had no verified release."""
    reasons: tuple[str, ...]
    as_expected: bool
    final_outcome: Outcome | None = None
    """The outcome after the attorney's approval, for a held verdict."""
    order_id: str | None = None
    connector_id: str | None = None
    connector_report: ConnectorReport | None = None
    """What the connector's signed report said (``confirmed``, ``failed``, ...)."""
    evidence: str | None = None
    """The ledger entry hash of the decision, or the Swarm report id."""
    rule_backed: int | None = None
    rejected: int | None = None

    def cells(self) -> tuple[str, str, str, str, str, str, str]:
        verdict: str = self.outcome
        if self.final_outcome is not None:
            verdict = f"{self.outcome} -> {self.final_outcome}"
        if self.rule_backed is not None:
            verdict = f"report: {self.rule_backed} rule-backed, {self.rejected} rejected"
        executed = "nothing"
        if self.order_id is not None:
            executed = f"{self.connector_id} order {self.order_id[:12]}"
        return (
            self.scenario,
            verdict,
            self.reasons[0] if self.reasons else "-",
            executed,
            self.connector_report or ("no report" if self.order_id is not None else "-"),
            self.evidence[:19] if self.evidence else "-",
            "yes" if self.as_expected else "NO",
        )

    def json(self) -> DemoScenario:
        return DemoScenario(
            scenario=self.scenario,
            outcome=self.outcome,
            final_outcome=self.final_outcome,
            reason_codes=self.reasons,
            order_id=self.order_id,
            connector_id=self.connector_id,
            connector_report=self.connector_report,
            evidence=self.evidence,
            rule_backed=self.rule_backed,
            rejected=self.rejected,
            as_expected=self.as_expected,
        )


class ReportWatch:
    """Collects verified connector reports from ``smf.result.>`` by order id."""

    def __init__(self, connector_keys: Mapping[str, VerifyKey]) -> None:
        self.connector_keys = connector_keys
        self.reports: dict[str, ConnectorReport] = {}
        self.orders: list[str] = []
        self.changed = asyncio.Event()

    async def on_report(self, msg: Msg) -> None:
        try:
            report, _ = dsse.open_struct(
                dsse.decode_envelope(msg.data),
                self.connector_keys,
                ExecutionReport,
                names.PAYLOAD_REPORT,
            )
        except (dsse.SignatureError, msgspec.ValidationError):
            return
        self.reports[report.order_id] = report.status
        self.changed.set()

    async def on_order(self, msg: Msg) -> None:
        self.orders.append(msg.subject)

    async def wait_for(self, order_id: str) -> ConnectorReport | None:
        """The connector's report of ``order_id``, or None when none came in time."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + REPORT_WAIT_SECONDS
        while order_id not in self.reports and loop.time() < deadline:
            self.changed.clear()
            try:
                await asyncio.wait_for(self.changed.wait(), max(0.0, deadline - loop.time()))
            except TimeoutError:
                break
        return self.reports.get(order_id)


ATTORNEY = "attorney-alex"
"""The demo's licensed attorney (``smf_assurance.ops.local.state.provision_demo``)."""


async def _approve(nc: Client, stack: Stack, held: Verdict) -> Verdict | None:
    """A synthetic licensed attorney reviews the content and allows it once.

    The outcome counts only once verified as the gate's (``open_outcome``,
    docs/SUBJECTS.md): anything else on the outcome subject is ignored.
    """
    approval_id, decision_id, operation_hash = (
        held.approval_id,
        held.decision_id,
        held.operation_hash,
    )
    if approval_id is None or decision_id is None or operation_hash is None:
        return None
    gate_keys = load_registry(stack.state.registry).trusted("gate")
    outcome: asyncio.Future[Verdict] = asyncio.get_running_loop().create_future()

    async def on_outcome(msg: Msg) -> None:
        try:
            verdict = open_outcome(
                msg.data,
                gate_keys,
                approval_id=approval_id,
                decision_id=decision_id,
                operation_hash=operation_hash,
            )
        except dsse.SignatureError:
            return
        if not outcome.done():
            outcome.set_result(verdict)

    sub = await nc.subscribe(names.approval_outcome_subject(approval_id), cb=on_outcome)
    # The attorney is on the bus as herself: her credential may ask resolve and show.
    desk = await _connect(stack, ATTORNEY, "smf-demo-attorney")
    try:
        attorney = ApproverClient(desk, stack.state.key(ATTORNEY), ATTORNEY)
        _, reply = await attorney.review_and_resolve(approval_id, "allow-once")
        if not reply.accepted:
            return None
        return await asyncio.wait_for(outcome, REPORT_WAIT_SECONDS)
    finally:
        await sub.unsubscribe()
        await desk.drain()


async def _connect(stack: Stack, principal: str, name: str) -> Client:
    """A connection as ``principal``, with its own bus credential,
    bounded and quiet (one short attempt, no raw nats-py error)."""
    return await connect_bus(stack.url, name, stack.state.existing_credential(principal))


async def _run_one(
    action: ScriptedAction, runtime: ProposalClient, nc: Client, stack: Stack, watch: ReportWatch
) -> Row:
    proposal = runtime.build(
        native_tool=action.native_tool,
        arguments=action.arguments,
        actor=action.actor,
        facts=action.facts,
        content=action.content,
        destination=action.destination,
    )
    verdict = await runtime.propose(proposal)
    final = verdict
    final_outcome: Outcome | None = None
    if verdict.outcome == "held" and verdict.approval_id is not None:
        approved = await _approve(nc, stack, verdict)
        if approved is not None:
            final = approved
            final_outcome = approved.outcome
    order = final.order_id
    connector = await watch.wait_for(order) if order else None
    expected_final = "allow" if action.expected_outcome in ("held", "allow") else "deny"
    ok = (
        verdict.outcome == action.expected_outcome
        and action.expected_reason in verdict.reason_codes
        and final.outcome == expected_final
        and (order is None) == (expected_final == "deny")
        and (order is None or connector == "confirmed")
    )
    return Row(
        scenario=action.name,
        outcome=verdict.outcome,
        final_outcome=final_outcome,
        reasons=verdict.reason_codes,
        order_id=order,
        connector_id=final.connector_id if order else None,
        connector_report=connector,
        evidence=verdict.evidence[0] if verdict.evidence else None,
        as_expected=ok,
    )


async def _swarm_row(nc: Client, stack: Stack) -> Row:
    """Scenario 4: a Swarm report citing only rules selected from the verified
    release the gate is running on (its analysis projection), with
    nothing published on the gate's subjects while it runs."""
    leaked: list[str] = []

    async def watch(msg: Msg) -> None:
        if msg.subject.startswith(("smf.propose", "smf.approval.", "smf.execute.")):
            leaked.append(msg.subject)

    sub = await nc.subscribe(">", cb=watch)
    matter = decode_matter((package_path(SCENARIO_ENVELOPES) / "swarm-matter.json").read_bytes())
    watcher = stack.gate.releases
    try:
        if watcher is None or watcher.active is None:
            raise NoVerifiedReleaseError("the gate runs on no verified release")
        watcher.current()  # the lease must still hold
        release = analysis_release(watcher.active.analysis)
    except ReleaseCheckError as exc:
        return Row(
            scenario="4 Swarm legal analysis",
            outcome="refused",
            reasons=(exc.reason_code,),
            as_expected=False,
        )
    if matter.question is None or matter.at_ms is None:
        fail("the shipped Swarm matter has no question or time")
    report = await analyze(matter.question, matter.facts, matter.at_ms, release)
    await nc.flush()
    await sub.unsubscribe()
    selected = {rule.rule_id for rule in report.selection.selected}
    rule_backed = [c for c in report.accepted if c.label == "rule_backed"]
    cites_selected_only = all(r.rule_id in selected for c in report.accepted for r in c.rules)
    ok = bool(rule_backed) and bool(report.rejected) and cites_selected_only and not leaked
    return Row(
        scenario="4 Swarm legal analysis",
        outcome="report",
        reasons=("citations_limited_to_selected_rules",),
        evidence=report.report_id,
        rule_backed=len(rule_backed),
        rejected=len(report.rejected),
        as_expected=ok,
    )


async def _demo(state: StateDir, nats_url: str | None) -> list[Row]:
    provision_demo(state)
    seed_demo_documents(state)
    seed_demo_directory(state)
    if nats_url is not None:
        # The gate's join waits for a bus that may come; a demo asks
        # once, so a wrong URL is one line at once, not a wait.
        probe = await connect_bus(nats_url, "smf-demo-probe", state.existing_credential("gate"))
        await probe.close()
    stack = await start_stack(state, nats_url=nats_url)
    async with contextlib.AsyncExitStack() as running:
        running.push_async_callback(stack.stop)
        # The scripted runtime may not read orders or reports; what the demo
        # shows of them it watches as the operator.
        nc = await _connect(stack, "runtime", "smf-demo-runtime")
        running.push_async_callback(nc.drain)
        observer = await _connect(stack, OPERATOR, "smf-demo-observer")
        running.push_async_callback(observer.drain)
        watch = ReportWatch(load_registry(state.registry).trusted("connector"))
        await observer.subscribe("smf.result.>", cb=watch.on_report)
        await observer.subscribe("smf.execute.>", cb=watch.on_order)
        await observer.flush()
        runtime = ProposalClient(
            nc, state.key("runtime"), RUNTIME_ID, "1.0", ADAPTER_ID, gate_keys=state.gate_keys()
        )
        progress = Progress("scenarios", len(SCENARIOS) + 1)
        rows = []
        for action in SCENARIOS:
            rows.append(await _run_one(action, runtime, nc, stack, watch))
            progress.update(len(rows))
        rows.append(await _swarm_row(observer, stack))
        progress.update(len(rows))
        progress.close()
        return sorted(rows, key=lambda row: row.scenario)
    raise AssertionError("unreachable")  # pragma: no cover - the block returns or raises


def run_demo(args: argparse.Namespace) -> int:
    configure_logging(json=False, level="error")
    private_files()
    if args.state_dir is not None:
        rows = asyncio.run(_demo(StateDir(args.state_dir), args.nats))
    else:
        with tempfile.TemporaryDirectory(prefix="smf-demo-") as tmp:
            rows = asyncio.run(_demo(StateDir(Path(tmp)), args.nats))
    ok = all(r.as_expected for r in rows)
    if args.json:
        emit(DemoJson(ok=ok, scenarios=tuple(r.json() for r in rows)))
    else:
        table(
            (
                "scenario",
                "verdict",
                "first reason",
                "reached smf.execute",
                "connector",
                "evidence",
                "ok",
            ),
            [r.cells() for r in rows],
        )
    if not ok:
        fail("a scenario did not reach its expected outcome")
    return 0
