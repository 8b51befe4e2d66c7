"""Shadow releases at a running gate: real nats-server, real gate, real SQLite.

Proves:
- a shadow that tightens two policies (a retention deletion: allow -> held for a
  licensed attorney; an internal output: allow -> deny), published to the bucket
  beside the active release, records exactly the decisions that would change: a
  known mix of proposals and output closes is sent and the ``shadow`` entries are
  checked one by one (decision id, operation hash, both releases, both
  dispositions and reason codes, the differing policy, rule and layer as
  identities, the capability, the tenant pseudonym, nothing raw); a proposal
  refused before any policy ran is not judged; the gate's report counts them;
- what is enforced does not change: for the same signed proposals, under the
  same clock, a gate with the shadow answers byte-identical verdicts and stores
  byte-identical orders in ``SMF_EXECUTE`` as a gate without it;
- the shadow survives a gate restart (verified again from the release-state
  file, also on a bus whose bucket lost it), a withdrawal made while the gate was
  down is honoured, and a new active release stops it (promoted, or no longer
  chaining);
- a shadow that fails verification (tampered, rolled back, replayed, expired,
  foreign-signed, or with no active release) is refused with the reason code any
  release gets, is reported, and changes nothing: no shadow runs (or the one
  running stays), the release-state file is unchanged, and verdicts are the same;
- a shadow whose lease runs out stops being evaluated; one whose queue is full
  drops and counts, and the verdicts do not wait for it.

Does not prove: a shadow on a cluster (each replica judges its own decisions into
its own ledger; one server here); the latency cost (``bench --bus``,
docs/PERFORMANCE.md).
"""

from __future__ import annotations

import asyncio
import shutil
import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

from nats.aio.client import Client

from smf_assurance.adapters.output import OutputStreamer
from smf_assurance.core.shadow import policy_ref, rule_ref
from smf_assurance.governance.releases import (
    prior_of,
    publish_shadow_to_bucket,
    publish_to_bucket,
    withdraw_shadow_from_bucket,
)
from smf_assurance.ops.demo.script import SCENARIOS
from smf_assurance.ops.local.natsserver import EmbeddedNatsServer
from smf_assurance.ops.local.state import ADAPTER_ID, RUNTIME_ID, StateDir
from smf_assurance.pipeline.assembly import RunningGate
from smf_assurance.pipeline.followers.releases import ensure_release_bucket
from smf_assurance.pipeline.stores.evidence import TENANT_DOMAIN, release_ref
from smf_assurance.pipeline.stores.ledger import verify_ledger
from smf_assurance.pipeline.stores.release_state import read_shadow_state
from smf_assurance.subjects.clock import wall_clock_ms
from smf_assurance.subjects.keys import generate_signing_key
from smf_assurance.subjects.messages import Verdict
from smf_assurance.subjects.release import SHADOW_KEY, ReleaseBundle, encode_bundle
from tests.support.bus_helpers import wait_for
from tests.support.bus_properties import stored_orders
from tests.support.clocks import FrozenClock
from tests.support.release_distribution import (
    current_inbox,
    next_release,
    refusals_at,
)
from tests.support.release_helpers import swap
from tests.support.shadow_release import (
    ASSOCIATE,
    CLEAN,
    INTERNAL,
    OUTPUT,
    OUTPUT_RULE,
    RETENTION,
    RETENTION_RULE,
    GateFactory,
    gates,
    retention_deletion,
    runtime,
    scenario,
    shadow_entries,
    shadow_id,
    tight_corpus,
    tight_shadow,
)

__all__ = ["gates"]

HOLD = next(a for a in SCENARIOS if a.expected_reason == "legal_hold_blocks_deletion")


async def closed(gate: RunningGate) -> None:
    await gate.close()
    gate.close = _noop  # type: ignore[method-assign]


async def _noop() -> None:
    return None


async def with_shadow(gate: RunningGate, bundle: ReleaseBundle) -> None:
    await publish_shadow_to_bucket(gate.js, bundle)
    wanted = prior_of(bundle).release_id
    await wait_for(lambda: shadow_id(gate) == wanted, timeout=10)


# --- what a shadow records -----------------------------------------------------------------


async def test_a_tightening_shadow_records_exactly_the_decisions_that_would_change(
    state: StateDir, gates: GateFactory, nc: Client, tmp_path: Path
) -> None:
    gate = await gates(state)
    active = gate.releases.active if gate.releases else None
    assert active is not None
    shadow = tight_shadow(state, tmp_path)
    await with_shadow(gate, shadow)
    client = runtime(nc, state)

    unchanged: list[Verdict] = [
        await client.propose(scenario(client, action))
        for action in SCENARIOS
        if action.expected_reason != "retention_schedule_deletion"
    ]
    refused = await client.propose(  # refused at normalization: no policy ran
        client.build(native_tool="dms_delete", arguments={}, actor=ASSOCIATE, facts=CLEAN)
    )
    changing = [
        await client.propose(retention_deletion(client, f"doc-shadow-{n}")) for n in range(3)
    ]
    streamer = OutputStreamer(
        nc, state.key("runtime"), RUNTIME_ID, "1.0", ADAPTER_ID, gate_keys=state.gate_keys()
    )
    released = await streamer.stream(
        [b"The memo is ready ", b"for review."],
        actor=ASSOCIATE,
        facts=CLEAN,
        destination=INTERNAL,
    )
    assert [v.outcome for v in unchanged] == ["held", "deny", "deny", "deny"]
    assert (refused.outcome, refused.reason_codes) == ("deny", ("missing_required_argument",))
    assert [v.outcome for v in changing] == ["allow"] * 3  # enforced: the active release
    assert released.verdict.outcome == "allow"
    assert released.released is not None

    assert gate.shadow is not None
    await gate.shadow.settled()
    entries = shadow_entries(state)
    expected = [*changing, released.verdict]
    assert [e.entry.decision_id for e in entries] == [v.decision_id for v in expected]
    tenant = state.pseudonym_key().identifier(TENANT_DOMAIN, "tenant-acme")
    shadow_manifest = prior_of(shadow)
    for stored, verdict in zip(entries, expected, strict=True):
        e = stored.entry
        assert e.operation_hash == verdict.operation_hash
        assert (e.release_id, e.shadow_release_id) == (
            release_ref(active.release_id),
            release_ref(shadow_manifest.release_id),
        )
        assert e.projection_id == active.policy_set.projection_id
        assert e.tenant_ref == tenant
        assert e.status is None
        assert e.approval_id is None
    deletions, output = entries[:3], entries[3]
    for stored in deletions:
        e = stored.entry
        assert (e.disposition, e.shadow_disposition) == ("allow", "hold")
        assert (e.reason_codes, e.shadow_reason_codes) == (
            ("retention_schedule_deletion",),
            ("retention_deletion_needs_attorney",),
        )
        assert e.capability == "document.delete"
        assert e.differing_policy_refs == (policy_ref(RETENTION),)
        assert e.differing_rule_refs == (rule_ref(RETENTION_RULE),)
        assert e.differing_layers == ("customer",)
    o = output.entry
    assert (o.disposition, o.shadow_disposition, o.capability) == (
        "allow",
        "deny",
        "output.deliver",
    )
    assert (o.reason_codes, o.shadow_reason_codes) == (
        ("internal_output_delivery",),
        ("internal_output_withheld",),
    )
    assert o.differing_policy_refs == (policy_ref(OUTPUT),)
    assert o.differing_rule_refs == (rule_ref(OUTPUT_RULE),)

    counts = gate.shadow.counts()
    assert counts is not None
    # the four unchanged scenarios, three deletions and the output; not the refused one
    assert (counts.evaluated, counts.disagreed, counts.recorded) == (8, 4, 4)
    assert (counts.dropped, counts.unrecorded, counts.failed, counts.skipped) == (0, 0, 0, 0)
    assert verify_ledger(state.ledger, [], {}).ok
    text = state.ledger.read_bytes()
    wal = Path(f"{state.ledger}-wal")
    text += wal.read_bytes() if wal.exists() else b""
    assert entries[0].entry_hash.encode() in text  # the bytes read hold the shadow's rows
    for raw in ("doc-shadow-0", "tenant-acme", "customer.acme", "The memo is ready"):
        assert raw.encode() not in text


async def test_verdicts_and_orders_are_the_same_bytes_with_and_without_the_shadow(
    state: StateDir,
    gates: GateFactory,
    nats_server: EmbeddedNatsServer,
    nc: Client,
    tmp_path: Path,
) -> None:
    """Twin states (the same keys, registry, release) on two servers, one gate each,
    the same clock and the same signed proposals: one gate runs the shadow. Its
    entries are held until every verdict is out (a long linger), so the two ledgers'
    decision entries, which verdicts name by hash, sit at the same places."""
    twin = StateDir(tmp_path / "twin")
    shutil.copytree(state.root, twin.root)
    shadow = tight_shadow(state, tmp_path)
    clock = FrozenClock()
    signing = runtime(nc, state)  # builds and signs only: each gate is called in process
    proposals = [scenario(signing, a, clock.now) for a in SCENARIOS]
    proposals += [retention_deletion(signing, f"doc-twin-{n}", clock.now) for n in range(3)]
    signed = [signing.sign(p) for p in proposals]

    second = EmbeddedNatsServer(tmp_path / "nats-2").start()
    try:
        runs: dict[str, tuple[list[bytes], list[tuple[str | None, bytes]]]] = {}
        for label, where, url in (
            ("without", state, nats_server.url),
            ("with", twin, second.url),
        ):
            if label == "with":
                publisher = Client()
                await publisher.connect(url)
                try:
                    await publish_shadow_to_bucket(publisher.jetstream(), shadow)
                finally:
                    await publisher.drain()
            gate = await gates(where, url, clock=clock)
            if label == "with":
                assert shadow_id(gate) == prior_of(shadow).release_id
                assert gate.shadow is not None
                gate.shadow.linger_s = 3600.0
            else:
                assert gate.shadow is not None
                assert gate.shadow.counts() is None  # no shadow runs there
            verdicts: list[bytes] = [await gate.gate.handle_propose(data) for data in signed]
            if gate.shadow is not None:
                await gate.shadow.settled()
            orders = [(m.subject, m.data or b"") for m in await stored_orders(gate.js)]
            runs[label] = (verdicts, orders)
            await closed(gate)
    finally:
        second.close()
    assert runs["with"][0] == runs["without"][0]
    assert runs["with"][1] == runs["without"][1]
    assert len(runs["with"][1]) == 4  # the retention scenario and three deletions
    assert [e.entry.kind for e in shadow_entries(twin)] == ["shadow"] * 4
    assert shadow_entries(state) == []


# --- restart, withdrawal, promotion ----------------------------------------------------------


async def test_the_shadow_survives_a_restart_and_a_bus_that_lost_it(
    state: StateDir, gates: GateFactory, nc: Client, tmp_path: Path
) -> None:
    shadow = tight_shadow(state, tmp_path)
    wanted = prior_of(shadow)
    gate = await gates(state)
    await with_shadow(gate, shadow)
    await closed(gate)
    stored = read_shadow_state(state.release_state)
    assert stored is not None
    assert (stored.manifest_hash, stored.origin) == (wanted.manifest_hash, f"kv:{SHADOW_KEY}@1")

    again = await gates(state)
    assert shadow_id(again) == wanted.release_id  # at start, before any proposal
    client = runtime(nc, state)
    verdict = await client.propose(retention_deletion(client, "doc-after-restart"))
    assert again.shadow is not None
    await again.shadow.settled()
    assert [e.entry.decision_id for e in shadow_entries(state)] == [verdict.decision_id]
    await closed(again)

    lost = EmbeddedNatsServer(tmp_path / "nats-empty").start()  # a bucket that never had it
    try:
        third = await gates(state, lost.url)
        assert shadow_id(third) == wanted.release_id  # from the release-state file alone
        await closed(third)
    finally:
        lost.close()


async def test_a_withdrawal_is_honoured_running_and_after_a_restart(
    state: StateDir, gates: GateFactory, nc: Client, tmp_path: Path
) -> None:
    shadow = tight_shadow(state, tmp_path)
    gate = await gates(state)
    await with_shadow(gate, shadow)
    assert await withdraw_shadow_from_bucket(nc.jetstream())
    await wait_for(
        lambda: shadow_id(gate) is None and read_shadow_state(state.release_state) is None,
        timeout=10,
    )
    client = runtime(nc, state)
    await client.propose(retention_deletion(client, "doc-withdrawn"))
    assert gate.shadow is not None
    await gate.shadow.settled()
    assert shadow_entries(state) == []
    assert not await withdraw_shadow_from_bucket(nc.jetstream())  # nothing left to withdraw

    await with_shadow(gate, shadow)  # published again: the same release runs again
    await closed(gate)
    assert await withdraw_shadow_from_bucket(nc.jetstream())  # while the gate is down
    again = await gates(state)
    assert shadow_id(again) is None
    assert read_shadow_state(state.release_state) is None


async def test_a_new_active_release_stops_the_shadow(
    state: StateDir, gates: GateFactory, nc: Client, tmp_path: Path
) -> None:
    """Promoted: the shadow becomes the active release. Or another release is adopted:
    the shadow was a candidate for the release now gone and no longer chains."""
    shadow = tight_shadow(state, tmp_path)
    gate = await gates(state)
    await with_shadow(gate, shadow)
    await publish_to_bucket(gate.js, shadow)  # promoted
    wanted = prior_of(shadow).release_id
    await wait_for(
        lambda: (
            gate.releases is not None
            and gate.releases.active is not None
            and gate.releases.active.release_id == wanted
        ),
        timeout=10,
    )
    assert shadow_id(gate) is None
    await wait_for(lambda: read_shadow_state(state.release_state) is None, timeout=5)

    beside = gate.releases.active if gate.releases else None
    assert beside is not None
    tight_corpus(tmp_path, "tighter")
    second = next_release(state, tmp_path, shadow, "tighter")
    other = next_release(state, tmp_path, shadow, "other-v")
    await with_shadow(gate, second)
    await publish_to_bucket(gate.js, other)  # another release replaces the one it ran beside
    await wait_for(lambda: shadow_id(gate) is None, timeout=10)
    assert refusals_at(gate, f"kv:{SHADOW_KEY}@") == {"release_chain_broken"}
    await wait_for(lambda: read_shadow_state(state.release_state) is None, timeout=5)


# --- a shadow that fails verification ---------------------------------------------------------


async def test_a_shadow_that_fails_verification_is_refused_and_changes_nothing(
    state: StateDir, gates: GateFactory, nc: Client, tmp_path: Path
) -> None:
    v1 = current_inbox(state)
    gate = await gates(state)
    v2 = next_release(state, tmp_path, v1, "v2")
    await publish_to_bucket(gate.js, v2)
    await wait_for(
        lambda: (
            gate.releases is not None
            and gate.releases.active is not None
            and gate.releases.active.release_id == "v2"
        ),
        timeout=10,
    )
    tight_corpus(tmp_path, "good")
    good = next_release(state, tmp_path, v2, "good")
    await with_shadow(gate, good)
    kept = read_shadow_state(state.release_state)
    client = runtime(nc, state)
    before = await client.propose(retention_deletion(client, "doc-before"))

    unsafe = {
        "release_digest_mismatch": swap(
            next_release(state, tmp_path, v2, "tampered"), enforcement=v1.enforcement
        ),
        "release_rollback": v1,
        "release_replayed": v2,
        "release_chain_broken": next_release(state, tmp_path, v1, "fork", sequence=5),
        "release_expired": next_release(
            state, tmp_path, v2, "expired", at_ms=wall_clock_ms() - 3 * 3_600_000, lease_hours=1
        ),
        "release_bad_signature": next_release(
            state, tmp_path, v2, "foreign", signers=[generate_signing_key()]
        ),
    }
    kv = await ensure_release_bucket(gate.js)
    for reason, bundle in unsafe.items():
        revision = await kv.put(SHADOW_KEY, encode_bundle(bundle))
        origin = f"kv:{SHADOW_KEY}@{revision}"
        await wait_for(lambda o=origin: refusals_at(gate, o), timeout=10)
        assert refusals_at(gate, origin) == {reason}, reason
        assert shadow_id(gate) == prior_of(good).release_id, reason  # the running one stays
        assert read_shadow_state(state.release_state) == kept, reason
        assert gate.releases is not None
        assert gate.releases.active is not None
        assert gate.releases.active.release_id == "v2"
    after = await client.propose(retention_deletion(client, "doc-after"))
    assert (before.outcome, after.outcome) == ("allow", "allow")
    assert before.reason_codes == after.reason_codes
    assert gate.shadow is not None
    await gate.shadow.settled()
    assert [e.entry.decision_id for e in shadow_entries(state)] == [
        before.decision_id,
        after.decision_id,
    ]
    report = gate.releases.report("smf-gate", _asked()) if gate.releases else None
    assert report is not None
    assert {r.reason_code for r in report.refusals} >= set(unsafe)


def _asked() -> Any:
    from smf_assurance.subjects.release import ReleaseReportRequest  # noqa: PLC0415

    return ReleaseReportRequest()


async def test_a_shadow_refused_with_nothing_running_leaves_no_shadow(
    state: StateDir, gates: GateFactory, nc: Client, tmp_path: Path
) -> None:
    gate = await gates(state)
    foreign = next_release(
        state, tmp_path, current_inbox(state), "foreign", signers=[generate_signing_key()]
    )
    revision = await kv_put(gate, foreign)
    await wait_for(lambda: refusals_at(gate, f"kv:{SHADOW_KEY}@{revision}"), timeout=10)
    assert refusals_at(gate, f"kv:{SHADOW_KEY}@{revision}") == {"release_bad_signature"}
    assert shadow_id(gate) is None
    assert read_shadow_state(state.release_state) is None
    client = runtime(nc, state)
    await client.propose(retention_deletion(client, "doc-no-shadow"))
    assert gate.shadow is not None
    await gate.shadow.settled()
    assert gate.shadow.counts() is None
    assert shadow_entries(state) == []


async def kv_put(gate: RunningGate, bundle: ReleaseBundle) -> int:
    kv = await ensure_release_bucket(gate.js)
    return await kv.put(SHADOW_KEY, encode_bundle(bundle))


async def test_a_tampered_stored_shadow_is_refused_at_restart(
    state: StateDir, gates: GateFactory, nats_server: EmbeddedNatsServer, tmp_path: Path
) -> None:
    """Someone with the state directory swaps the stored shadow's bytes: the restarted
    gate verifies them again and refuses them; nothing runs, the row is forgotten."""
    gate = await gates(state)
    await with_shadow(gate, tight_shadow(state, tmp_path))
    await closed(gate)
    bare = EmbeddedNatsServer(tmp_path / "nats-bare").start()  # no bucket to reload it from
    try:
        tampered = swap(
            tight_shadow(state, tmp_path / "t"), enforcement=current_inbox(state).enforcement
        )
        with closing(sqlite3.connect(state.release_state)) as conn:
            conn.execute("UPDATE release_shadow SET bundle = ?", (encode_bundle(tampered),))
            conn.commit()
        again = await gates(state, bare.url)
        assert shadow_id(again) is None
        assert refusals_at(again, "stored-shadow") == {"release_digest_mismatch"}
        assert read_shadow_state(state.release_state) is None
        await closed(again)
    finally:
        bare.close()


# --- lease, overload, outage --------------------------------------------------------------------


async def test_a_shadow_whose_lease_ran_out_is_not_evaluated(
    state: StateDir, gates: GateFactory, nc: Client, tmp_path: Path
) -> None:
    clock = FrozenClock()
    gate = await gates(state, clock=clock)
    await with_shadow(gate, tight_shadow(state, tmp_path, at_ms=clock.now, lease_hours=1))
    client = runtime(nc, state)
    await client.propose(retention_deletion(client, "doc-in-lease", clock.now))
    clock.advance(2 * 3_600_000)
    late = await client.propose(retention_deletion(client, "doc-past-lease", clock.now))
    assert late.outcome == "allow"  # the active release's lease is a month
    assert gate.shadow is not None
    await gate.shadow.settled()
    assert len(shadow_entries(state)) == 1
    counts = gate.shadow.counts()
    assert counts is not None
    assert (counts.evaluated, counts.recorded, counts.skipped) == (1, 1, 1)


async def test_an_overloaded_shadow_drops_and_counts_and_never_holds_a_verdict(
    state: StateDir, gates: GateFactory, nc: Client, tmp_path: Path
) -> None:
    """A desk whose worker is not running (as if it could not keep up) with room for
    two: every verdict still comes, the rest are dropped and counted; a ledger that
    then fails loses the entries waiting (counted ``unrecorded``), raising nothing."""
    from smf_assurance.pipeline.followers.shadow import ShadowDesk  # noqa: PLC0415
    from smf_assurance.pipeline.stores.evidence import EvidenceWriter  # noqa: PLC0415

    gate = await gates(state)
    await with_shadow(gate, tight_shadow(state, tmp_path))
    assert gate.shadows is not None
    desk = ShadowDesk(
        gate.shadows,
        EvidenceWriter(gate.ledger, state.pseudonym_key(), wall_clock_ms),
        max_queued=2,
        linger_s=3600.0,
    )
    gate.gate.shadow = desk  # not started: nothing takes from its queue
    client = runtime(nc, state)
    verdicts = [
        await asyncio.wait_for(client.propose(retention_deletion(client, f"doc-load-{n}")), 10)
        for n in range(5)
    ]
    assert [v.outcome for v in verdicts] == ["allow"] * 5
    counts = desk.counts()
    assert counts is not None
    assert (counts.dropped, counts.evaluated) == (3, 0)
    desk.start()
    await asyncio.wait_for(_judged(desk, 2), 10)
    await gate.ledger.close()  # an outage under the two waiting entries
    await desk.settled()
    counts = desk.counts()
    assert counts is not None
    assert (counts.disagreed, counts.recorded, counts.unrecorded) == (2, 0, 2)
    await desk.close()
    assert shadow_entries(state) == []


async def _judged(desk: Any, count: int) -> None:
    while (desk.counts() is None) or desk.counts().disagreed < count:
        await asyncio.sleep(0.01)
