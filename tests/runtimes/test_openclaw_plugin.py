"""The compiled OpenClaw plugin's hooks against a real gate over a real nats-server.

The plugin (``smf_assurance/adapters/openclaw``, TypeScript) is built by
``smf_assurance/adapters/openclaw/scripts/build.sh`` and loaded by a Node 24 child process
(``smf_assurance/adapters/openclaw/test/driver.mjs``) exactly as OpenClaw loads it: the
default export's ``register(api)`` against a stand-in for the part of the
plugin API it uses. The gate is ``smf_assurance.pipeline.assembly.start_gate`` with all its stages
on a real nats-server on 127.0.0.1 and real SQLite files; the runtime key is
provisioned by ``smf_assurance.ops.runtimes.provision.provision_openclaw_runtime``; the approver is
synthetic (``smf_assurance.approver.client.ApproverClient``, the demo's attorney).

What these tests prove:

- allow: the hook returns ``{params}`` equal, byte for byte in canonical form,
  to the ``arguments`` of the signed Proposal the gate received (captured on
  ``smf.propose`` and verified with the runtime's key), NFC-normalized.
- deny: a block whose reason names the gate's reason codes.
- signed verdicts: the plugin reads a reply on ``smf.propose`` only as a Verdict
  signed by a registry ``gate`` key for this proposal. A rogue responder that
  answers first (a plain NATS subscriber on ``smf.propose``, the real gate a
  little slower) with an unsigned JSON allow, an allow signed by the runtime's
  own key, or the gate's genuine signed allow of an earlier call replayed,
  cannot make the plugin run a call the real policy denies: it is blocked
  (``verdict_not_signed_by_gate``, ``verdict_for_another_proposal``) and not
  reported as executed, while the gate's own (late) answer was a deny.
- held + an attorney's allow-once: one ``{params}`` for that request, with the
  approval's state ``executing``; a second resolution is refused by the gate
  and a forged second allow on the outcome subject changes nothing; an
  attorney who answers the moment the hold is announced (before the plugin has
  read ``held``) is not lost.
- forged outcomes: an unsigned allow, an allow signed by a key that is not a
  registry ``gate`` key (the runtime's, the attorney's, a connector's), and
  the gate's own signed allow of another approval or naming another decision,
  all published on the held call's outcome subject, release nothing: alone
  the call blocks (``approval_wait_timeout``, approval still ``pending``);
  before the gate's genuine allow, the call waits on and the genuine allow
  releases it, once.
- held + deny, held + expiry (the gate's sweep), held past ``holdTimeoutMs``,
  gate unreachable (no server; a server with no gate), a runtime off the pin:
  all block with their reason codes.
- after_tool_call: a signed ExecutionReport on ``smf.result.openclaw-demo``,
  ``confirmed`` when the executed params are the allowed ones and
  ``ambiguous``/``executed_params_mismatch`` when they differ; for a held call
  the gate settles the approval with it (the proposing runtime's key, its
  order only): ``consumed``, ``failed`` for a tool error, and
  ``execution_unknown`` with ``binding_broken`` in the ledger for a mismatch.
- configuration: no ``trustRootFile`` is refusing mode (and ``registryFile`` is
  gone: the gate keys come from a verified release only).
- governed release and start-up attestation: the plugin
  verifies the newest release of the ``SMF_RELEASES`` bucket itself and
  attests it on ``smf.attest`` (profile ``exact-hold``, the pin, both hooks);
  the gate accepts it and admits the plugin's proposals. With no release in the
  bucket, a newest release signed by a key outside the trust root, an expired
  one, or no trust root, the plugin blocks every call before proposing and the
  gate refuses its attestation; a runtime that never attests (``openclaw agent
  exec`` loads no plugin) has its proposals refused
  (``runtime_attestation_missing``).

What they do not prove: anything about OpenClaw itself (which hooks it calls,
in which order, with which params; tests/runtimes/test_openclaw_conformance.py drives
the real runtime), NATS account permissions (this file's server runs without
authorization; tests/runtimes/test_openclaw_bus_auth.py drives the plugin on an
enforcing one), or timing under load.
"""

from __future__ import annotations

import asyncio
import json
import time
import unicodedata
from collections.abc import AsyncIterator
from typing import Any, Final

import msgspec
import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg

from smf_assurance.adapters.client import ProposalClient
from smf_assurance.approver.client import ApproverClient, ApproverError
from smf_assurance.governance.releases import (
    latest_in_inbox,
    publish_to_bucket,
    unverified_manifest,
)
from smf_assurance.ops.local.natsserver import EmbeddedNatsServer
from smf_assurance.ops.local.stack import gate_config
from smf_assurance.ops.local.state import DEMO_TENANT, RELEASE_SIGNER, StateDir
from smf_assurance.ops.runtimes.provision import (
    OPENCLAW_PIN,
    OPENCLAW_PRINCIPAL,
    OPENCLAW_RUNTIME_ID,
)
from smf_assurance.pipeline.assembly import RunningGate, start_gate
from smf_assurance.subjects import dsse, names
from smf_assurance.subjects.approvals import DenyReason, PendingAnnouncement, approval_id_for
from smf_assurance.subjects.attestation import AttestationAck
from smf_assurance.subjects.canonical import canonical_bytes, canonical_value
from smf_assurance.subjects.keys import SigningKey, VerifyKey, load_private_key
from smf_assurance.subjects.messages import (
    ActorContext,
    DataFacts,
    ExecutionReport,
    Proposal,
    Verdict,
    order_id_for,
)
from smf_assurance.subjects.release import PAYLOAD_RELEASE_MANIFEST, ReleaseBundle
from tests.support.approval_desk import ledger_rows
from tests.support.builders import Decided
from tests.support.bus_helpers import (
    Rogue,
    consumer_drained,
    random_identity,
    signed_reply,
    stream_count,
    unsigned,
    wait_for,
)
from tests.support.clocks import OffsetClock
from tests.support.openclaw_plugin import (
    CLOSE_TIMEOUT_S,
    CONTEXT,
    PLUGIN,
    Driver,
    clock,
    driver,
    node_bin,
    openclaw_state,
    plugin_config,
)

__all__ = ["clock", "node_bin", "openclaw_state"]

ATTORNEY: Final = "attorney-alex"
CUSTOMER_TTL_MS: Final = 300_000
"""customer.acme.transmission-window (smf_assurance/governance/corpus/scenarios/policies.json)."""

FILING_MESSAGE: Final = {
    "action": "send",
    "channel": "slack",
    "target": "#client-acme",
    "message": "Draft motion to compel, for filing Friday.",
}


# --- build, state, gate ---------------------------------------------------------------


@pytest.fixture
async def gate(
    openclaw_state: StateDir, nats_server: EmbeddedNatsServer, clock: OffsetClock
) -> AsyncIterator[RunningGate]:
    running = await start_gate(
        gate_config(
            state=openclaw_state, nats_url=nats_server.url, clock=clock, sweep_seconds=3600.0
        )
    )
    release = latest_in_inbox(openclaw_state.release_inbox)
    assert release is not None
    await publish_to_bucket(running.js, release)  # where the plugin verifies it
    yield running
    await asyncio.wait_for(running.close(), CLOSE_TIMEOUT_S)


# --- what crossed the bus ---------------------------------------------------------------


def gate_keys(state: StateDir) -> dict[str, VerifyKey]:
    """The verify key of the state's gate: the only signer of a verdict a runtime reads."""
    key = state.key("gate")
    return {key.key_id: key.verify_key}


def only_refusals(tap: Tap) -> bool:
    """Nothing was proposed: whatever reached the gate only reported a refusal the plugin
    made itself (tool-call accounting: ``refused_locally``, no params)."""
    return all(p.refused_locally is not None and p.arguments == {} for p in tap.proposals)


class Tap:
    """Core subscriptions beside the gate: signed proposals, the gate's signed verdict
    replies (as sent, and opened), reports."""

    def __init__(self, nc: Client, state: StateDir) -> None:
        self.nc = nc
        key, _ = load_private_key(state.key_path("openclaw-runtime"))
        self.runtime_key = key.verify_key
        self.gate_keys = gate_keys(state)
        self.proposals: list[Proposal] = []
        self.verdicts: list[Verdict] = []
        self.replies: dict[str, bytes] = {}
        """The gate's signed reply bytes, by the proposal id its Verdict names."""
        self.reports: list[ExecutionReport] = []
        self.pending: list[PendingAnnouncement] = []
        self.status_asked: list[str] = []

    async def start(self) -> Tap:
        trusted = {self.runtime_key.key_id: self.runtime_key}

        async def on_proposal(msg: Msg) -> None:
            proposal, _ = dsse.open_struct(
                dsse.decode_envelope(msg.data), trusted, Proposal, names.PAYLOAD_PROPOSAL
            )
            self.proposals.append(proposal)

        async def on_inbox(msg: Msg) -> None:
            try:
                verdict, _ = dsse.open_struct(
                    dsse.decode_envelope(msg.data), self.gate_keys, Verdict, names.PAYLOAD_VERDICT
                )
            except dsse.SignatureError:
                return  # another reply (status, ack, JetStream), or not the gate's verdict
            self.verdicts.append(verdict)
            self.replies.setdefault(verdict.proposal_id, msg.data)

        async def on_report(msg: Msg) -> None:
            report, _ = dsse.open_struct(
                dsse.decode_envelope(msg.data), trusted, ExecutionReport, names.PAYLOAD_REPORT
            )
            self.reports.append(report)

        async def on_pending(msg: Msg) -> None:
            self.pending.append(msgspec.json.decode(msg.data, type=PendingAnnouncement))

        await self.nc.subscribe(names.PROPOSE, cb=on_proposal)
        await self.nc.subscribe("_INBOX.>", cb=on_inbox)
        await self.nc.subscribe(names.result_subject(OPENCLAW_RUNTIME_ID), cb=on_report)

        async def on_status(msg: Msg) -> None:
            self.status_asked.append(msg.data.decode())

        await self.nc.subscribe(names.approval_pending_subject(DEMO_TENANT), cb=on_pending)
        await self.nc.subscribe(names.APPROVAL_STATUS, cb=on_status)
        await self.nc.flush()
        return self

    def verdict_for(self, proposal: Proposal) -> Verdict:
        return next(v for v in self.verdicts if v.proposal_id == proposal.proposal_id)


@pytest.fixture
async def tap(nc: Client, openclaw_state: StateDir) -> Tap:
    return await Tap(nc, openclaw_state).start()


async def status(nc: Client, approval_id: str) -> str:
    reply = await nc.request(names.APPROVAL_STATUS, approval_id.encode(), timeout=5)
    state: str = json.loads(reply.data)["state"]
    return state


async def wait_for_state(nc: Client, approval_id: str, wanted: str) -> None:
    async def reached() -> bool:
        return await status(nc, approval_id) == wanted

    await wait_for(reached, timeout=10)


async def reports_handled(gate: RunningGate) -> None:
    """The gate finished every report it read: it writes the settled state to the
    store, then the evidence, then acks; a status reply can come in between."""
    await wait_for(
        lambda: consumer_drained(gate.js, "smf-gate-results", names.RESULT_STREAM), timeout=10
    )


async def wait_for_ledger(state: StateDir, approval_id: str, wanted: str) -> None:
    """The store moves first and the ledger entry follows (``ApprovalDesk._finish``),
    so a test that saw the state waits for the entry before reading the ledger."""
    await wait_for(lambda: ledger_rows(state.ledger, approval_id)[-1][0] == wanted, timeout=10)


async def publish_forgeries(nc: Client, state: StateDir, held: Verdict, drv: Driver) -> None:
    """Allows for this held call that no runtime may act on, on its outcome subject:
    unsigned; signed by keys that are not the gate's; and signed by the GATE key but
    for another approval, or naming this approval with another decision."""
    assert held.outcome == "held"
    assert held.approval_id is not None
    allow = msgspec.structs.replace(
        held, outcome="allow", reason_codes=("approved_once",), expires_at_ms=None, evidence=()
    )
    other_decision = random_identity()

    def signed(verdict: Verdict, key: SigningKey) -> bytes:
        return dsse.encode_envelope(
            dsse.sign_struct(names.PAYLOAD_APPROVAL_OUTCOME, verdict, [key])
        )

    forgeries = [
        msgspec.json.encode(allow),
        *(signed(allow, state.key(who)) for who in ("openclaw-runtime", ATTORNEY, "court-efiling")),
        signed(
            msgspec.structs.replace(
                allow, decision_id=other_decision, approval_id=approval_id_for(other_decision)
            ),
            state.key("gate"),
        ),
        signed(msgspec.structs.replace(allow, decision_id=other_decision), state.key("gate")),
    ]
    subject = names.approval_outcome_subject(held.approval_id)
    before = ignored(drv)
    for data in forgeries:
        await nc.publish(subject, data)
    await nc.publish(subject, b"smf-test-mark: not an outcome")  # read after every forgery
    await nc.flush()
    # The plugin reads outcomes one at a time, in order, and logs each one it cannot
    # verify: every forgery but the one signed for another approval (kept for that
    # approval, silently), then the mark. Its line means all of them were read.
    await wait_for(lambda: ignored(drv) == before + len(forgeries), timeout=10)


IGNORED: Final = "smf: ignored an approval outcome that is not the gate's"


def ignored(drv: Driver) -> int:
    """Outcomes the plugin read and dropped as not the gate's, by its own log."""
    return sum(IGNORED in line for line in drv.stderr)


def blocked(result: Any) -> str:
    assert isinstance(result, dict), result
    assert result.get("block") is True, result
    assert set(result) == {"block", "blockReason"}, result
    reason: str = result["blockReason"]
    return reason


# --- allow, deny -------------------------------------------------------------------------


@pytest.mark.claim("runtime-hold-openclaw.exact-params")
async def test_allow_returns_exactly_the_params_the_gate_hashed(
    node_bin: str, openclaw_state: StateDir, gate: RunningGate, nats_url: str, tap: Tap
) -> None:
    params = {"path": "/srv/matters/2026-0042/cafe\u0301.txt", "offset": 1, "limit": 40}
    async with driver(node_bin, plugin_config(openclaw_state, nats_url)) as drv:
        result = await drv.before("read", params, "call-allow")
        await wait_for(lambda: len(tap.proposals) == 1 and len(tap.verdicts) >= 1, timeout=10)
        proposal = tap.proposals[0]
        verdict = tap.verdict_for(proposal)
        assert verdict.outcome == "allow", verdict
        assert set(result) == {"params"}
        # exactly the signed arguments, NFC-normalized, nothing added or dropped
        assert canonical_bytes(result["params"]) == canonical_bytes(proposal.arguments)
        assert result["params"] == canonical_value(params)
        assert unicodedata.is_normalized("NFC", result["params"]["path"])
        assert proposal.native_tool == "read"
        assert proposal.adapter_id == "smf-openclaw-adapter"
        assert proposal.runtime_id == OPENCLAW_RUNTIME_ID

        await drv.after("read", result["params"], "call-allow", result={"ok": True})
        await wait_for(lambda: len(tap.reports) == 1, timeout=10)
    report = tap.reports[0]
    assert (report.status, report.reason_code) == ("confirmed", "executed_as_approved")
    assert report.connector_id == OPENCLAW_RUNTIME_ID
    assert report.external_ref == "call-allow"
    assert report.order_id == order_id_for(Decided.of(verdict))


async def test_executed_params_that_differ_are_reported_as_a_broken_binding(
    node_bin: str, openclaw_state: StateDir, gate: RunningGate, nats_url: str, tap: Tap
) -> None:
    params = {"path": "/srv/matters/2026-0042/notes.txt"}
    async with driver(node_bin, plugin_config(openclaw_state, nats_url)) as drv:
        result = await drv.before("read", params, "call-rewritten")
        assert set(result) == {"params"}
        # What a later hook or a finaliser could have done to the executed params.
        await drv.after("read", {**result["params"], "path": "/etc/shadow"}, "call-rewritten")
        await wait_for(lambda: len(tap.reports) == 1, timeout=10)
        assert any("BROKEN BINDING" in line for line in drv.stderr)
    report = tap.reports[0]
    assert (report.status, report.reason_code) == ("ambiguous", "executed_params_mismatch")


async def test_deny_blocks_with_the_gates_reason_codes(
    node_bin: str, openclaw_state: StateDir, gate: RunningGate, nats_url: str, tap: Tap
) -> None:
    params = {"url": "https://pastebin.example/upload?matter=2026-0042"}
    async with driver(node_bin, plugin_config(openclaw_state, nats_url)) as drv:
        result = await drv.before("web_fetch", params, "call-deny")
        await drv.after("web_fetch", params, "call-deny", error="blocked")
    reason = blocked(result)
    assert reason.startswith("SMF Assurance gate denied web_fetch: ")
    assert "confidential_egress_to_public_service" in reason
    assert "It did not run." in reason
    assert tap.reports == []  # a blocked call is not reported as executed


# --- a rogue responder on smf.propose ----------------------------------------------------------

GATE_DELAY_S: Final = 1.0
"""How much later than a rogue the real gate answers (its decision is held back)."""
EGRESS: Final = {"url": "https://pastebin.example/upload?matter=2026-0042"}
"""A call the real policy denies (``confidential_egress_to_public_service``)."""


@pytest.mark.parametrize(
    ("forgery", "reason"),
    [
        ("unsigned", "verdict_not_signed_by_gate"),
        ("runtime-signed", "verdict_not_signed_by_gate"),
        ("replayed-gate-allow", "verdict_for_another_proposal"),
    ],
)
async def test_a_rogue_responder_on_propose_cannot_run_a_denied_call(
    node_bin: str,
    openclaw_state: StateDir,
    gate: RunningGate,
    nats_url: str,
    nc: Client,
    tap: Tap,
    monkeypatch: pytest.MonkeyPatch,
    forgery: str,
    reason: str,
) -> None:
    """The rogue answers first with an allow; the plugin blocks the call, which the real
    gate (answering later, with a deny nobody reads) does not allow either."""
    decide = gate.gate.decide

    async def later(proposal: Proposal, notes: tuple[str, ...] = ()) -> Verdict:
        await asyncio.sleep(GATE_DELAY_S)
        return await decide(proposal, notes)

    monkeypatch.setattr(gate.gate, "decide", later)
    rogue = await Rogue(nc).start(nc)  # silent until the case arms it
    runtime_key = openclaw_state.key(OPENCLAW_PRINCIPAL)
    async with driver(node_bin, plugin_config(openclaw_state, nats_url)) as drv:
        if forgery == "unsigned":
            rogue.encode = unsigned
        elif forgery == "runtime-signed":
            rogue.encode = signed_reply(runtime_key, names.PAYLOAD_VERDICT)
        else:
            # The gate's genuine signed allow of an earlier call, recorded off the bus.
            allowed = await drv.before("read", {"path": "/srv/matters/2026-0042/a.txt"}, "c-ok")
            assert set(allowed) == {"params"}, allowed
            await wait_for(lambda: tap.proposals[0].proposal_id in tap.replies, timeout=10)
            recorded = tap.replies[tap.proposals[0].proposal_id]
            assert tap.verdict_for(tap.proposals[0]).outcome == "allow"
            rogue.encode = lambda _forged: recorded
        result = await drv.before("web_fetch", EGRESS, "c-rogue")
        await drv.after("web_fetch", EGRESS, "c-rogue", result={"ok": True})
        assert len(rogue.answered) == 1  # the rogue did answer this call
        proposal_id = rogue.answered[0]
        # The real gate's answer, read off the bus: it never allowed this call.
        await wait_for(lambda: proposal_id in tap.replies, timeout=10)
    message = blocked(result)
    assert f": {reason}." in message, message
    assert "confidential_egress_to_public_service" not in message  # the rogue's was first
    genuine = next(v for v in tap.verdicts if v.proposal_id == proposal_id)
    assert genuine.outcome == "deny", genuine
    assert "confidential_egress_to_public_service" in genuine.reason_codes
    # A blocked call is not reported as executed, under any decision.
    assert all(r.external_ref != "c-rogue" for r in tap.reports)


# --- held ----------------------------------------------------------------------------------


async def _announced(tap: Tap) -> PendingAnnouncement:
    """The pending approval, once the plugin is subscribed to its outcome.

    The gate announces a hold BEFORE it answers ``held``; waiting until the
    plugin has asked ``smf.approval.status`` (it does so after reading ``held``)
    makes the states these tests assert deterministic. An approver faster
    than that has its own test below.
    """
    await wait_for(lambda: len(tap.pending) == 1, timeout=10)
    announcement = tap.pending[0]
    await wait_for(lambda: announcement.approval_id in tap.status_asked, timeout=10)
    return announcement


async def test_an_approver_faster_than_the_held_reply_is_not_lost(
    node_bin: str, openclaw_state: StateDir, gate: RunningGate, nats_url: str, nc: Client, tap: Tap
) -> None:
    """The attorney answers the moment the hold is announced, before the plugin has
    even read ``held``: the plugin subscribed to every outcome before proposing."""
    attorney = ApproverClient(nc, openclaw_state.key(ATTORNEY), ATTORNEY)
    replies: list[Any] = []

    async def approve_at_once(msg: Msg) -> None:
        announcement = msgspec.json.decode(msg.data, type=PendingAnnouncement)
        view = await attorney.show(announcement.approval_id)
        replies.append(
            await attorney.resolve(announcement.approval_id, "allow-once", view.binding_digest)
        )

    await nc.subscribe(names.approval_pending_subject(DEMO_TENANT), cb=approve_at_once)
    await nc.flush()
    async with driver(node_bin, plugin_config(openclaw_state, nats_url)) as drv:
        result = await drv.before("message", FILING_MESSAGE, "c-fast")
    assert len(replies) == 1
    assert replies[0].accepted
    assert set(result) == {"params"}, result
    assert canonical_bytes(result["params"]) == canonical_bytes(tap.proposals[0].arguments)


@pytest.mark.claim("runtime-hold-openclaw.exact-params")
async def test_held_then_allow_once_returns_the_params_exactly_once(
    node_bin: str, openclaw_state: StateDir, gate: RunningGate, nats_url: str, nc: Client, tap: Tap
) -> None:
    async with driver(node_bin, plugin_config(openclaw_state, nats_url)) as drv:
        waiting = drv.start(
            "before",
            event={
                "toolName": "message",
                "params": FILING_MESSAGE,
                "runId": "run-1",
                "toolCallId": "c-1",
            },
            ctx={"runId": "run-1", "toolCallId": "c-1"},
        )
        announcement = await _announced(tap)
        approval_id = announcement.approval_id
        assert not waiting.done()  # the call waits for the attorney
        assert await status(nc, approval_id) == "pending"

        # Forgeries before the attorney answers: none releases the call or ends its wait.
        await publish_forgeries(nc, openclaw_state, tap.verdict_for(tap.proposals[0]), drv)
        assert not waiting.done(), waiting.result()

        attorney = ApproverClient(nc, openclaw_state.key(ATTORNEY), ATTORNEY)
        view, reply = await attorney.review_and_resolve(approval_id, "allow-once")
        assert reply.accepted, reply
        result = await asyncio.wait_for(waiting, 10)

        proposal = tap.proposals[0]
        assert set(result) == {"params"}
        assert canonical_bytes(result["params"]) == canonical_bytes(proposal.arguments)
        held = tap.verdict_for(proposal)
        assert held.outcome == "held"
        assert held.decision_id is not None
        assert approval_id_for(held.decision_id) == approval_id
        assert await status(nc, approval_id) == "executing"

        # Once: the approval is spent at the gate, and a forged second allow on the
        # outcome subject reaches nobody (the plugin answered and unsubscribed).
        second = await attorney.resolve(approval_id, "allow-once", view.binding_digest)
        assert not second.accepted
        forged = msgspec.structs.replace(held, outcome="allow", approval_id=approval_id)
        before = ignored(drv)
        await nc.publish(names.approval_outcome_subject(approval_id), msgspec.json.encode(forged))
        await nc.flush()
        await wait_for(lambda: ignored(drv) == before + 1, timeout=10)  # read, and dropped

        await drv.after("message", result["params"], "c-1")
        await drv.after("message", result["params"], "c-1")  # no second record to report on
        await wait_for(lambda: len(tap.reports) == 2, timeout=10)
    first, again = tap.reports
    assert (first.status, first.reason_code) == ("confirmed", "executed_as_approved")
    assert (again.status, again.reason_code) == ("ambiguous", "executed_without_gate_decision")
    # The proposing runtime's signed report settles its approval, once; the ungated
    # second report names no recorded order and changes nothing.
    await wait_for_state(nc, approval_id, "consumed")
    await reports_handled(gate)
    await wait_for_ledger(openclaw_state, approval_id, "consumed")
    assert ledger_rows(openclaw_state.ledger, approval_id)[-1] == (
        "consumed",
        ("executed_as_approved",),
    )


@pytest.mark.parametrize(
    ("ending", "final", "evidence"),
    [
        ("tool_error", "failed", ("tool_error",)),
        ("params_changed", "execution_unknown", ("binding_broken", "executed_params_mismatch")),
    ],
)
async def test_the_runtimes_report_settles_a_held_call_that_failed_or_broke_its_binding(
    ending: str,
    final: str,
    evidence: tuple[str, ...],
    node_bin: str,
    openclaw_state: StateDir,
    gate: RunningGate,
    nats_url: str,
    nc: Client,
    tap: Tap,
) -> None:
    """A tool error -> ``failed``; executed params other than the approved ones (a
    later hook or a finaliser rewrote them) -> ``execution_unknown``, never
    ``consumed``, with ``binding_broken`` in the evidence."""
    async with driver(node_bin, plugin_config(openclaw_state, nats_url)) as drv:
        waiting = drv.start(
            "before",
            event={
                "toolName": "message",
                "params": FILING_MESSAGE,
                "runId": "run-1",
                "toolCallId": f"c-{ending}",
            },
            ctx={},
        )
        announcement = await _announced(tap)
        attorney = ApproverClient(nc, openclaw_state.key(ATTORNEY), ATTORNEY)
        _, reply = await attorney.review_and_resolve(announcement.approval_id, "allow-once")
        assert reply.accepted, reply
        result = await asyncio.wait_for(waiting, 10)
        assert set(result) == {"params"}, result
        if ending == "tool_error":
            await drv.after("message", result["params"], f"c-{ending}", error="channel down")
        else:
            changed = {**result["params"], "target": "#everyone"}
            await drv.after("message", changed, f"c-{ending}")
        await wait_for(lambda: len(tap.reports) == 1, timeout=10)
    await wait_for_state(nc, announcement.approval_id, final)
    await reports_handled(gate)
    await wait_for_ledger(openclaw_state, announcement.approval_id, final)
    assert ledger_rows(openclaw_state.ledger, announcement.approval_id)[-1] == (final, evidence)


async def test_forged_outcomes_alone_never_release_a_held_call(
    node_bin: str, openclaw_state: StateDir, gate: RunningGate, nats_url: str, nc: Client, tap: Tap
) -> None:
    """Unsigned, signed by the wrong keys, or the gate's own outcome of something
    else: the call waits them out and blocks; the approval was never spent."""
    config = plugin_config(openclaw_state, nats_url, holdTimeoutMs=2500)
    async with driver(node_bin, config) as drv:
        waiting = drv.start(
            "before",
            event={
                "toolName": "message",
                "params": FILING_MESSAGE,
                "runId": "run-1",
                "toolCallId": "c-forged",
            },
            ctx={},
        )
        announcement = await _announced(tap)
        await publish_forgeries(nc, openclaw_state, tap.verdict_for(tap.proposals[0]), drv)
        reason = blocked(await asyncio.wait_for(waiting, 10))
    assert "approval_wait_timeout" in reason
    assert await status(nc, announcement.approval_id) == "pending"


REASONED_NOTE = "Wrong recipient: send it to opposing counsel's new address.\nCall me."


@pytest.mark.parametrize(
    ("deny_reason", "note"),
    [(None, None), ("wrong_recipient", REASONED_NOTE)],
    ids=["no-reason", "reason-and-note"],
)
async def test_held_then_denied_blocks(
    deny_reason: DenyReason | None,
    note: str | None,
    node_bin: str,
    openclaw_state: StateDir,
    gate: RunningGate,
    nats_url: str,
    nc: Client,
    tap: Tap,
) -> None:
    """A deny blocks. The attorney's closed reason and note, signed with the
    deny, reach the plugin in the gate-signed outcome; its block names the reason's
    code and quotes the note, and the ledger holds the code."""
    async with driver(node_bin, plugin_config(openclaw_state, nats_url)) as drv:
        waiting = drv.start(
            "before",
            event={
                "toolName": "message",
                "params": FILING_MESSAGE,
                "runId": "run-1",
                "toolCallId": "c-2",
            },
            ctx={},
        )
        announcement = await _announced(tap)
        attorney = ApproverClient(nc, openclaw_state.key(ATTORNEY), ATTORNEY)
        _, reply = await attorney.review_and_resolve(
            announcement.approval_id, "deny", deny_reason=deny_reason, note=note
        )
        reason = blocked(await asyncio.wait_for(waiting, 10))
    codes: tuple[str, ...] = ("approver_denied",)
    if deny_reason is not None:
        codes += (f"approver_denied_{deny_reason}",)
    assert (reply.accepted, reply.reason_codes) == (True, codes)
    assert f"{', '.join(codes)}. It did not run" in reason
    if note is None:
        assert "note" not in reason
    else:
        assert reason.endswith(f"The approver's note: {json.dumps(note)}")
    rows = ledger_rows(openclaw_state.ledger, announcement.approval_id)
    assert rows[-1] == ("denied", codes)


async def test_held_then_expired_blocks(
    node_bin: str,
    openclaw_state: StateDir,
    gate: RunningGate,
    nats_url: str,
    nc: Client,
    tap: Tap,
    clock: OffsetClock,
) -> None:
    async with driver(node_bin, plugin_config(openclaw_state, nats_url)) as drv:
        waiting = drv.start(
            "before",
            event={
                "toolName": "message",
                "params": FILING_MESSAGE,
                "runId": "run-1",
                "toolCallId": "c-3",
            },
            ctx={},
        )
        announcement = await _announced(tap)
        clock.advance(CUSTOMER_TTL_MS + 1_000)
        await gate.desk.sweep()
        reason = blocked(await asyncio.wait_for(waiting, 10))
        assert await status(nc, announcement.approval_id) == "expired"
        # a late allow-once cannot revive it: the gate no longer shows it, and a
        # resolution signed blind is refused
        attorney = ApproverClient(nc, openclaw_state.key(ATTORNEY), ATTORNEY)
        with pytest.raises(ApproverError):
            await attorney.show(announcement.approval_id)
        late = await attorney.resolve(announcement.approval_id, "allow-once", "sha256:" + "0" * 64)
        assert not late.accepted
        assert await status(nc, announcement.approval_id) == "expired"
        assert await stream_count(gate.js) == 0
    assert "approval_expired" in reason


async def test_held_past_the_hold_timeout_blocks(
    node_bin: str, openclaw_state: StateDir, gate: RunningGate, nats_url: str, nc: Client, tap: Tap
) -> None:
    config = plugin_config(openclaw_state, nats_url, holdTimeoutMs=1500)
    async with driver(node_bin, config) as drv:
        result = await drv.before("message", FILING_MESSAGE, "c-4")
    # The plugin's own wait ran out (not "approval_wait_disabled", which blocks at
    # once) while it followed a live approval that nobody answered or expired.
    assert "approval_wait_timeout" in blocked(result)
    (announcement,) = tap.pending
    assert announcement.approval_id in tap.status_asked
    assert await status(nc, announcement.approval_id) == "pending"


async def test_held_with_waiting_disabled_blocks_at_once(
    node_bin: str, openclaw_state: StateDir, gate: RunningGate, nats_url: str, tap: Tap
) -> None:
    async with driver(node_bin, plugin_config(openclaw_state, nats_url, holdTimeoutMs=0)) as drv:
        reason = blocked(await drv.before("message", FILING_MESSAGE, "c-5"))
    assert "approval_wait_disabled" in reason
    assert "attorney_approval_required_for_transmission" in reason


# --- the gate out of reach, refusing mode ----------------------------------------------


async def test_unreachable_bus_blocks(
    node_bin: str, openclaw_state: StateDir, closed_port: int
) -> None:
    config = plugin_config(openclaw_state, f"nats://127.0.0.1:{closed_port}", gateTimeoutMs=500)
    async with driver(node_bin, config) as drv:
        reason = blocked(await drv.before("read", {"path": "/x"}, "c-6"))
    assert "gate_unreachable" in reason


async def test_bus_without_a_gate_blocks(
    node_bin: str, openclaw_state: StateDir, nats_url: str
) -> None:
    async with driver(node_bin, plugin_config(openclaw_state, nats_url, gateTimeoutMs=500)) as drv:
        reason = blocked(await drv.before("read", {"path": "/x"}, "c-7"))
    assert "gate_unreachable" in reason


async def test_runtime_off_the_pin_refuses_everything(
    node_bin: str, openclaw_state: StateDir, gate: RunningGate, nats_url: str, tap: Tap
) -> None:
    async with driver(node_bin, plugin_config(openclaw_state, nats_url), version="2026.9.7") as drv:
        reason = blocked(await drv.before("read", {"path": "/x"}, "c-8"))
        assert any("REFUSES to run" in line for line in drv.stderr)
    assert "runtime_version_not_pinned" in reason
    assert only_refusals(tap)  # nothing was even proposed


async def test_bad_configuration_refuses_everything(
    node_bin: str, openclaw_state: StateDir, nats_url: str
) -> None:
    config = plugin_config(
        openclaw_state, nats_url, keyFile=str(openclaw_state.root / "missing.key")
    )
    del config["context"]
    async with driver(node_bin, config) as drv:
        reason = blocked(await drv.before("read", {"path": "/x"}, "c-9"))
    assert "smf_runtime_key_unreadable" in reason
    assert "smf_context_missing" in reason


async def test_no_trust_root_refuses_everything(
    node_bin: str, openclaw_state: StateDir, gate: RunningGate, nats_url: str, tap: Tap
) -> None:
    """Without the release trust root the plugin could verify no release, so it could not
    tell the gate's allow from a forged one: no ``trustRootFile``, an unreadable one, or
    the retired ``registryFile`` in its place, blocks every call before anything is
    proposed."""
    missing = plugin_config(openclaw_state, nats_url)
    del missing["trustRootFile"]
    with_registry = {**missing, "registryFile": str(openclaw_state.registry)}
    for config, code in (
        (missing, "smf_release_trust_root_missing"),
        (
            plugin_config(
                openclaw_state, nats_url, trustRootFile=str(openclaw_state.root / "nope.json")
            ),
            "smf_release_trust_root_unreadable",
        ),
        (with_registry, "smf_config_invalid"),
    ):
        async with driver(node_bin, config) as drv:
            reason = blocked(await drv.before("read", {"path": "/x"}, "c-10"))
        assert "adapter_refuses_to_run(" in reason, reason
        assert code in reason, reason
    assert only_refusals(tap)


# --- the governed release and the start-up attestation -----------------------------------


class AttestTap:
    """The gate's acks on ``smf.attest`` replies (the plugin's attestation, as judged)."""

    def __init__(self) -> None:
        self.acks: list[AttestationAck] = []

    async def start(self, nc: Client) -> AttestTap:
        inboxes: set[str] = set()

        async def on_attest(msg: Msg) -> None:
            if msg.reply:
                inboxes.add(msg.reply)

        async def on_inbox(msg: Msg) -> None:
            if msg.subject in inboxes:
                self.acks.append(msgspec.json.decode(msg.data, type=AttestationAck))

        await nc.subscribe(names.ATTEST, cb=on_attest)
        await nc.subscribe("_INBOX.>", cb=on_inbox)
        await nc.flush()
        return self


async def test_the_plugin_attests_its_verified_release_and_is_admitted(
    node_bin: str, openclaw_state: StateDir, gate: RunningGate, nats_url: str, nc: Client, tap: Tap
) -> None:
    acks = await AttestTap().start(nc)
    async with driver(node_bin, plugin_config(openclaw_state, nats_url)) as drv:
        # Attested at start, before any tool call, and accepted.
        await wait_for(lambda: len(acks.acks) >= 1, timeout=10)
        ack = acks.acks[0]
        assert (ack.accepted, ack.reason_codes) == (True, ()), ack
        assert gate.releases is not None
        assert gate.releases.active is not None
        assert ack.release_id == gate.releases.active.release_id
        assert any("release verified by the adapter" in line for line in drv.stderr)
        result = await drv.before("read", {"path": "/srv/matters/2026-0042/a.txt"}, "c-att")
    assert set(result) == {"params"}, result
    assert len(tap.proposals) == 1
    assert len(acks.acks) == 1  # attested once: the call did not need another


async def test_an_unattested_runtime_is_refused(
    openclaw_state: StateDir, gate: RunningGate, nc: Client
) -> None:
    """What the gate sees of ``openclaw agent exec`` (no plugin loaded, no hook): nothing
    attests, so a proposal under the runtime's own key is refused before any decision."""
    verdict = await propose_unattested(runtime_client(nc, openclaw_state))
    assert (verdict.outcome, verdict.reason_codes) == ("deny", ("runtime_attestation_missing",))


async def test_a_hook_budget_below_the_approval_wait_is_attested_and_refused(
    node_bin: str, openclaw_state: StateDir, gate: RunningGate, nats_url: str, nc: Client, tap: Tap
) -> None:
    """OpenClaw caps the hook at 600 000 ms: a hold that may wait longer would be cut
    short (the allow-once then spent for nothing). The plugin refuses to run and says so
    in its attestation, which the gate refuses."""
    acks = await AttestTap().start(nc)
    async with driver(
        node_bin, plugin_config(openclaw_state, nats_url, holdTimeoutMs=600_000)
    ) as drv:
        await wait_for(lambda: len(acks.acks) >= 1, timeout=10)
        reason = blocked(await drv.before("read", {"path": "/x"}, "c-hook"))
    assert "hook_timeout_below_approval_wait" in reason
    assert not acks.acks[0].accepted
    assert "hook_timeout_below_approval_wait" in acks.acks[0].reason_codes
    assert only_refusals(tap)


ROGUE: Final[dict[str, Any]] = {
    "pluginId": "rogue",
    "hookName": "before_tool_call",
    "priority": -1e308,
}
"""The attack: a second plugin's hook below ours, whose params OpenClaw takes."""


async def test_a_foreign_hook_after_ours_blocks_every_call_and_is_attested(
    node_bin: str, openclaw_state: StateDir, gate: RunningGate, nats_url: str, nc: Client, tap: Tap
) -> None:
    acks = await AttestTap().start(nc)
    async with driver(node_bin, plugin_config(openclaw_state, nats_url)) as drv:
        await wait_for(lambda: len(acks.acks) >= 1, timeout=10)
        assert acks.acks[0].accepted
        await drv.call("foreign", **ROGUE)
        reason = blocked(await drv.before("read", {"path": "/x"}, "c-rogue"))
        assert "adapter_refuses_to_run(foreign_param_hooks)" in reason
        await wait_for(lambda: "foreign_param_hooks" in acks.acks[-1].reason_codes, timeout=10)
        again = blocked(await drv.before("read", {"path": "/y"}, "c-rogue-2"))
        assert "foreign_param_hooks" in again
    assert not acks.acks[-1].accepted
    assert only_refusals(tap)  # nothing was proposed while the hook was loaded


async def test_a_foreign_hook_loaded_while_a_call_is_held_blocks_it_after_the_approval(
    node_bin: str, openclaw_state: StateDir, gate: RunningGate, nats_url: str, nc: Client, tap: Tap
) -> None:
    async with driver(node_bin, plugin_config(openclaw_state, nats_url)) as drv:
        event = {"toolName": "message", "params": FILING_MESSAGE, "toolCallId": "c-held"}
        waiting = drv.start("before", event=event, ctx={"toolCallId": "c-held"})
        approval_id = (await _announced(tap)).approval_id
        await drv.call("foreign", **ROGUE)
        attorney = ApproverClient(nc, openclaw_state.key(ATTORNEY), ATTORNEY)
        _, reply = await attorney.review_and_resolve(approval_id, "allow-once")
        assert reply.accepted, reply
        result = await asyncio.wait_for(waiting, 10)
    assert "adapter_refuses_to_run(foreign_param_hooks)" in blocked(result)  # no params back


def forged_release(state: StateDir, signer: str, *, expired: bool = False) -> ReleaseBundle:
    """The gate's release re-issued one sequence later: signed by ``signer``, and
    with a lease that already ran out when ``expired``."""
    genuine = latest_in_inbox(state.release_inbox)
    assert genuine is not None
    manifest = unverified_manifest(genuine)
    now = time.time_ns() // 1_000_000
    changes: dict[str, Any] = {
        "sequence": manifest.sequence + 1,
        "release_id": manifest.release_id + "-next",
    }
    if expired:
        changes |= {"issued_at_ms": now - 7_200_000, "lease_expires_at_ms": now - 3_600_000}
    signed = dsse.sign_struct(
        PAYLOAD_RELEASE_MANIFEST, msgspec.structs.replace(manifest, **changes), [state.key(signer)]
    )
    return msgspec.structs.replace(genuine, envelope=signed)


@pytest.mark.parametrize(
    ("case", "reason"),
    [
        ("no-release", "release_unavailable"),
        ("forged", "release_bad_signature"),
        ("expired", "release_expired"),
    ],
)
async def test_no_verified_release_refuses_everything_and_the_gate_refuses_it(
    node_bin: str,
    openclaw_state: StateDir,
    gate: RunningGate,
    nats_url: str,
    nc: Client,
    tap: Tap,
    case: str,
    reason: str,
) -> None:
    """The newest release in the bucket is what the plugin must verify: none at all, one
    signed by a key outside the trust root (the runtime's), or a genuine signer's whose
    lease ran out all leave the plugin without trusted gate keys: every call blocks
    before it is proposed, and its attestation (naming no release, the reason as a
    problem) is refused by the gate."""
    js = nc.jetstream()
    genuine = latest_in_inbox(openclaw_state.release_inbox)
    assert genuine is not None
    if case == "no-release":
        # the only key purged: a purge marker, which the plugin skips
        kv = await js.key_value("SMF_RELEASES")
        await kv.purge(f"release.{unverified_manifest(genuine).sequence:016d}")
    else:
        signer = "openclaw-runtime" if case == "forged" else RELEASE_SIGNER
        await publish_to_bucket(
            js, forged_release(openclaw_state, signer, expired=case == "expired")
        )
    acks = await AttestTap().start(nc)
    async with driver(node_bin, plugin_config(openclaw_state, nats_url)) as drv:
        await wait_for(lambda: len(acks.acks) >= 1, timeout=10)
        result = await drv.before("read", {"path": "/srv/matters/2026-0042/a.txt"}, "c-rel")
        assert any("REFUSES to run" in line and reason in line for line in drv.stderr), drv.stderr
    assert f"adapter_refuses_to_run({reason})" in blocked(result)
    assert only_refusals(tap)
    ack = acks.acks[0]
    assert not ack.accepted
    assert reason in ack.reason_codes
    assert "runtime_release_not_verified" in ack.reason_codes
    # and were anything proposed under this runtime's key, the gate refuses it
    verdict = await propose_unattested(runtime_client(nc, openclaw_state))
    assert (verdict.outcome, verdict.reason_codes) == ("deny", ("runtime_attestation_rejected",))


def runtime_client(nc: Client, state: StateDir) -> ProposalClient:
    return ProposalClient(
        nc,
        state.key(OPENCLAW_PRINCIPAL),
        OPENCLAW_RUNTIME_ID,
        OPENCLAW_PIN,
        "smf-openclaw-adapter",
        gate_keys=gate_keys(state),
    )


async def propose_unattested(client: ProposalClient) -> Verdict:
    """A well-formed proposal under the runtime's key that no hook made."""
    proposal = client.build(
        native_tool="read",
        arguments={"path": "/srv/matters/2026-0042/a.txt"},
        actor=msgspec.convert(CONTEXT["actor"], type=ActorContext),
        facts=DataFacts(
            classification="confidential", injection_taint="clear", redaction_status="none"
        ),
    )
    return await client.propose(proposal)


def test_plugin_files_are_what_openclaw_loads() -> None:
    """package.json points OpenClaw at dist/index.js; the manifest names the plugin id."""
    package = json.loads((PLUGIN / "package.json").read_text())
    manifest = json.loads((PLUGIN / "openclaw.plugin.json").read_text())
    assert package["type"] == "module"
    assert package["openclaw"]["extensions"] == ["./dist/index.js"]
    assert set(package["dependencies"]) == {"@nats-io/transport-node"}
    assert manifest["id"] == "smf-assurance"
    # The Gateway loads only plugins activated on start-up; without this, tools run
    # ungated in Gateway-hosted runs (docs/OPENCLAW.md, negative finding).
    assert manifest["activation"] == {"onStartup": True}
    assert set(manifest["configSchema"]["properties"]) == {
        "natsUrl",
        "runtimeId",
        "keyFile",
        "credentialFile",
        "trustRootFile",
        "contextFile",
        "context",
        "gateTimeoutMs",
        "holdTimeoutMs",
        "attestIntervalMs",
        "caFile",
    }
