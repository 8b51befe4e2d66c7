"""Distribution of governed releases to running gates, on a real nats-server.

Proves:
- a demo state directory runs its gate on a signed, verified release, and
  every Decision names the release it used;
- a gate under load switches releases between two proposals: publish v2
  while 100 proposals run, every verdict names v1 or v2 and carries that
  version's reason code, none errors;
- a rolled-back, expired, tampered, under-signed or foreign-signed release
  published to the bucket is refused by every running gate (two gates) and
  logged with the reason code of its threat, and both keep the good release;
- a gate restarted after a rollback attempt still refuses it, even with the
  newer release purged from the bucket;
- once the lease is gone the gate denies everything (``release_expired``),
  and with no verified release at all (``no_verified_release``); a verified
  release published later is picked up and decisions resume;
- releases published out of order, or missed while a gate was down, still
  chain; a new release's registry replaces the gate's;
- the ``release`` commands build, verify, publish and report;
- ``release publish`` waits for every gate's signed report and exits 1 on a
  refusal (with the gate and reason) or when no gate's signed word came;
  ``release status`` shows each gate's release and refusals.

Does not prove: convergence across a NATS cluster (one server here), or an
adapter or Swarm consumer verifying releases (they are not wired yet).
"""

from __future__ import annotations

import asyncio
import json
import shutil
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest
from nats.aio.client import Client
from structlog.testing import capture_logs

from smf_assurance.adapters.client import ProposalClient
from smf_assurance.core.release_trust import NoVerifiedReleaseError, TrustedTime
from smf_assurance.governance.releases import (
    ReleaseError,
    bucket_entries,
    build_release,
    load_trust_root,
    make_trust_root,
    prior_of,
    publish_to_bucket,
    publish_to_inbox,
    read_bundle_file,
    read_public_record,
    read_release_dir,
    unverified_manifest,
    write_release_dir,
    write_trust_root,
)
from smf_assurance.ops.demo.script import SCENARIOS
from smf_assurance.ops.local.logs import configure_logging
from smf_assurance.ops.local.natsserver import EmbeddedNatsServer
from smf_assurance.ops.local.stack import gate_config
from smf_assurance.ops.local.state import (
    ADAPTER_ID,
    RELEASE_SIGNER,
    RUNTIME_ID,
    StateDir,
    refresh_demo_release,
)
from smf_assurance.pipeline.assembly import RunningGate, start_gate
from smf_assurance.pipeline.assembly.gate import _desk_policy_set
from smf_assurance.pipeline.chain.approvals import DeskError
from smf_assurance.pipeline.chain.contracts import EvaluateRequest
from smf_assurance.pipeline.chain.decide import EvaluateStage
from smf_assurance.pipeline.chain.transport import serve
from smf_assurance.pipeline.followers.releases import ReleaseWatcher, ensure_release_bucket
from smf_assurance.pipeline.service import StageRefusal
from smf_assurance.pipeline.stores.release_state import ReleaseStateStore, StoreUnavailable
from smf_assurance.subjects import names
from smf_assurance.subjects.clock import wall_clock_ms
from smf_assurance.subjects.keys import (
    generate_signing_key,
    public_record,
    write_private_key,
)
from smf_assurance.subjects.messages import Verdict
from smf_assurance.subjects.registry import RegistryFile, encode_registry
from smf_assurance.subjects.release import (
    MAX_REPORT_TEXT,
    RELEASE_REPORT_SCHEMA,
    ExpiredReleaseError,
    ReleaseBundle,
    ReleaseReport,
    ReleaseReportRequest,
    ReportedRelease,
    encode_bundle,
    release_key,
    sign_release_report,
)
from tests.support.bus_helpers import wait_for
from tests.support.clocks import OffsetClock as Clock
from tests.support.release_distribution import (
    acli,
    cli,
    current_inbox,
    next_release,
    refusals_at,
    signer,
)
from tests.support.release_helpers import manifest_of, scenario_corpus, swap

HOLD = next(a for a in SCENARIOS if a.expected_reason == "legal_hold_blocks_deletion")
V1_REASON = "legal_hold_blocks_deletion"
DAY = 24 * 3_600_000


def reason_of(release_id: str) -> str:
    return (
        V1_REASON
        if release_id.startswith("smf-scenarios")
        else f"hold_{release_id.replace('-', '_')}"
    )


def runtime(nc: Client, state: StateDir) -> ProposalClient:
    return ProposalClient(
        nc, state.key("runtime"), RUNTIME_ID, "1.0", ADAPTER_ID, gate_keys=state.gate_keys()
    )


async def propose_hold(client: ProposalClient, at_ms: int | None = None) -> Verdict:
    proposal = client.build(
        native_tool=HOLD.native_tool,
        arguments=HOLD.arguments,
        actor=HOLD.actor,
        facts=HOLD.facts,
        content=HOLD.content,
        destination=HOLD.destination,
        issued_at_ms=at_ms,
    )
    return await client.propose(proposal)


async def put(js: Any, key: str, bundle: ReleaseBundle) -> None:
    """Write a bundle under any key, as an attacker with bucket access could."""
    kv = await ensure_release_bucket(js)
    await kv.put(key, encode_bundle(bundle))


def active_id(gate: RunningGate) -> str | None:
    assert gate.releases is not None
    active = gate.releases.active
    return None if active is None else active.release_id


def refused(gate: RunningGate) -> set[str]:
    assert gate.releases is not None
    return {r.reason_code for r in gate.releases.refusals}


GateFactory = Callable[..., Any]


@pytest.fixture
async def gates(nats_server: EmbeddedNatsServer) -> AsyncIterator[GateFactory]:
    """Start gates on the test's server; every one is closed at the end."""
    started: list[RunningGate] = []

    async def start(state: StateDir, **options: Any) -> RunningGate:
        options.setdefault("co_located", True)
        options.setdefault("sweep_seconds", 3600.0)
        options.setdefault("release_tick_seconds", 0.2)
        running = await start_gate(gate_config(state=state, nats_url=nats_server.url, **options))
        started.append(running)
        return running

    yield start
    for running in started:
        await running.close()


async def stop(gate: RunningGate) -> None:
    await gate.close()
    gate.close = _noop  # type: ignore[method-assign]


async def _noop() -> None:
    return None


# --- the gate runs on a verified release ----------------------------------------------


async def test_a_demo_gate_decides_under_its_signed_release(
    state: StateDir, gates: GateFactory, nc: Client
) -> None:
    gate = await gates(state)
    inbox = manifest_of(current_inbox(state))
    assert active_id(gate) == inbox.release_id
    verdict = await propose_hold(runtime(nc, state))
    assert verdict.outcome == "deny"
    assert verdict.release_id == inbox.release_id
    assert verdict.reason_codes[0] == V1_REASON
    stored = await ReleaseStateStore.open(state.release_state)
    try:
        persisted = await stored.load()
    finally:
        await stored.close()
    assert persisted is not None
    assert persisted.state.sequence == inbox.sequence


@pytest.mark.parametrize("co_located", [True, False], ids=["co-located", "bus-stages"])
async def test_a_gate_under_load_switches_releases_between_two_proposals(
    state: StateDir, gates: GateFactory, nc: Client, tmp_path: Path, co_located: bool
) -> None:
    gate = await gates(state, co_located=co_located)
    v1 = manifest_of(current_inbox(state)).release_id
    v2_bundle = next_release(state, tmp_path, current_inbox(state), "load-v2")
    v2 = manifest_of(v2_bundle).release_id
    client = runtime(nc, state)
    verdicts: list[Verdict] = []

    async def one() -> None:
        verdicts.append(await propose_hold(client))

    first = [asyncio.create_task(one()) for _ in range(50)]
    await wait_for(lambda: len(verdicts) >= 10, timeout=20)
    await publish_to_bucket(gate.js, v2_bundle)  # while proposals are in flight
    await wait_for(lambda: active_id(gate) == v2, timeout=10)
    second = [asyncio.create_task(one()) for _ in range(50)]
    await asyncio.gather(*first, *second)

    assert len(verdicts) == 100
    seen = {v.release_id for v in verdicts}
    assert seen == {v1, v2}
    for verdict in verdicts:
        assert verdict.outcome == "deny"
        assert verdict.release_id is not None
        assert verdict.reason_codes[0] == reason_of(verdict.release_id), verdict
        assert verdict.decision_id is not None
    assert sum(v.release_id == v2 for v in verdicts) >= 50


# --- unsafe releases are refused by every gate ------------------------------------------


def twin_state(state: StateDir, root: Path) -> StateDir:
    """A second gate's state directory with the same keys, registry, trust root and inbox."""
    shutil.copytree(state.root, root)
    return StateDir(root)


async def test_every_running_gate_refuses_unsafe_releases_and_logs_them(
    state: StateDir, gates: GateFactory, nc: Client, tmp_path: Path
) -> None:
    second_signer = generate_signing_key()
    # Two release keys, both must sign: the only way an under-signed release can exist.
    state.trust_root.unlink()
    write_trust_root(
        state.trust_root,
        make_trust_root(
            [
                public_record(signer(state), "release-signer"),
                public_record(second_signer, "second"),
            ],
            2,
        ),
    )
    both = [signer(state), second_signer]
    for stale in state.release_inbox.iterdir():
        stale.unlink()
    base = build_release(
        scenario_corpus(tmp_path / "corpus-base", release_id="base", legal_hold_reason="hold_base"),
        both,
        state.registry.read_bytes(),
        now_ms=wall_clock_ms(),
        lease_hours=24 * 60,  # the demo's renewal leaves a release with this much lease alone
    )
    publish_to_inbox(base, state.release_inbox)
    other = twin_state(state, tmp_path / "other")
    gate_a, gate_b = await gates(state), await gates(other)
    assert active_id(gate_a) == active_id(gate_b) == "base"

    good = next_release(state, tmp_path, base, "good", signers=both)
    await publish_to_bucket(gate_a.js, good)
    await wait_for(lambda: active_id(gate_a) == active_id(gate_b) == "good", timeout=10)

    unsafe = {
        "release_rollback": base,
        "release_expired": next_release(
            state,
            tmp_path,
            good,
            "expired",
            signers=both,
            at_ms=wall_clock_ms() - 3 * 3_600_000,
            lease_hours=1,
        ),
        "release_digest_mismatch": swap(
            next_release(state, tmp_path, good, "tampered", signers=both),
            enforcement=base.enforcement,
        ),
        "release_below_threshold": next_release(
            state, tmp_path, good, "undersigned", signers=[signer(state)]
        ),
        "release_bad_signature": next_release(
            state,
            tmp_path,
            good,
            "foreign",
            signers=[generate_signing_key(), generate_signing_key()],
        ),
    }
    keys = {reason: release_key(1000 + n) for n, reason in enumerate(unsafe)}
    with capture_logs() as logs:
        for reason, bundle in unsafe.items():
            await put(gate_a.js, keys[reason], bundle)
        await wait_for(
            lambda: all(
                refusals_at(gate, f"kv:{keys[reason]}@") == {reason}
                for gate in (gate_a, gate_b)
                for reason in unsafe
            ),
            timeout=10,
        )
    for gate in (gate_a, gate_b):
        assert active_id(gate) == "good"
    for reason, key in keys.items():
        warnings = [
            e
            for e in logs
            if e["event"] == "release_refused" and e["origin"].startswith(f"kv:{key}@")
        ]
        assert [e["reason"] for e in warnings] == [reason, reason], (reason, logs)  # per gate
        assert all(e["log_level"] == "warning" for e in warnings)
    verdict = await propose_hold(runtime(nc, state))
    assert verdict.release_id == "good"
    assert verdict.reason_codes[0] == "hold_good"


@pytest.mark.claim("release-state.restart-keeps-the-floor")
async def test_a_restarted_gate_still_refuses_a_rollback(
    state: StateDir, gates: GateFactory, nc: Client, tmp_path: Path
) -> None:
    v1_bundle = current_inbox(state)
    gate = await gates(state)
    v2_bundle = next_release(state, tmp_path, v1_bundle, "restart-v2")
    await publish_to_bucket(gate.js, v2_bundle)
    await wait_for(lambda: active_id(gate) == "restart-v2", timeout=10)
    await put(gate.js, release_key(900), v1_bundle)  # the rollback attempt
    attempt = f"kv:{release_key(900)}@"
    await wait_for(lambda: refusals_at(gate, attempt) == {"release_rollback"}, timeout=10)
    await stop(gate)

    kv = await ensure_release_bucket(nc.jetstream())
    await kv.purge(release_key(2))  # the newer release is gone from the bucket, too
    again = await gates(state)
    assert active_id(again) == "restart-v2"
    await wait_for(lambda: refusals_at(again, attempt) == {"release_rollback"}, timeout=10)
    verdict = await propose_hold(runtime(nc, state))
    assert verdict.release_id == "restart-v2"


# --- freeze: the gate denies everything once the lease is gone ----------------------------


@pytest.mark.claim("release-state.restart-keeps-the-floor")
async def test_once_the_lease_is_gone_the_gate_denies_everything(
    state: StateDir, gates: GateFactory, nc: Client, tmp_path: Path
) -> None:
    clock = Clock()
    gate = await gates(state, clock=clock)
    client = runtime(nc, state)
    assert (await propose_hold(client)).release_id is not None
    lease = manifest_of(current_inbox(state)).lease_expires_at_ms
    clock.offset_ms = lease - wall_clock_ms() + 1
    for _ in range(3):
        verdict = await propose_hold(client, at_ms=clock())
        assert verdict.outcome == "deny"
        assert verdict.reason_codes == ("release_expired",)
        assert verdict.release_id is None
    # A new release, verified at the gate's time, restores decisions.
    fresh = next_release(state, tmp_path, current_inbox(state), "renewed", at_ms=clock())
    await publish_to_bucket(gate.js, fresh)
    await wait_for(lambda: active_id(gate) == "renewed", timeout=10)
    verdict = await propose_hold(client, at_ms=clock())
    assert verdict.release_id == "renewed"
    assert verdict.reason_codes[0] == "hold_renewed"


async def test_without_a_verified_release_the_gate_denies_until_one_arrives(
    state: StateDir, gates: GateFactory, nc: Client, tmp_path: Path
) -> None:
    key = signer(state)
    v1 = current_inbox(state)
    for path in state.release_inbox.iterdir():
        path.unlink()
    state.key_path(RELEASE_SIGNER).unlink()  # a production gate: no release key here
    gate = await gates(state)
    assert active_id(gate) is None
    client = runtime(nc, state)
    verdict = await propose_hold(client)
    assert verdict.outcome == "deny"
    assert verdict.reason_codes == ("no_verified_release",)
    publish_to_inbox(v1, state.release_inbox)  # `release publish --state-dir`
    await wait_for(lambda: active_id(gate) is not None, timeout=10)
    assert (await propose_hold(client)).reason_codes[0] == V1_REASON
    assert key.key_id  # the key object outlived its file: the release was signed offline


async def test_a_new_releases_registry_replaces_the_gates(
    state: StateDir, gates: GateFactory, nc: Client, tmp_path: Path
) -> None:
    gate = await gates(state)
    client = runtime(nc, state)
    assert (await propose_hold(client)).reason_codes[0] == V1_REASON
    current = msgspec.json.decode(state.registry.read_bytes(), type=RegistryFile)
    without_runtime = encode_registry(tuple(e for e in current.entries if e.role != "runtime"))
    v2 = next_release(state, tmp_path, current_inbox(state), "no-runtime", registry=without_runtime)
    await publish_to_bucket(gate.js, v2)
    await wait_for(lambda: active_id(gate) == "no-runtime", timeout=10)
    verdict = await propose_hold(client)
    assert verdict.outcome == "deny"
    assert verdict.reason_codes == ("unknown_signer",)
    assert gate.desk.registry is gate.gate.registry


# --- chaining across order and absence ---------------------------------------------------


async def test_releases_published_out_of_order_and_missed_ones_still_chain(
    state: StateDir, gates: GateFactory, tmp_path: Path
) -> None:
    other = twin_state(state, tmp_path / "late")
    v1 = current_inbox(state)
    v2 = next_release(state, tmp_path, v1, "chain-v2")
    v3 = next_release(state, tmp_path, v2, "chain-v3")
    gate = await gates(state)
    await publish_to_bucket(gate.js, v3)
    await wait_for(lambda: "release_chain_broken" in refused(gate), timeout=10)
    assert active_id(gate) == manifest_of(v1).release_id
    await publish_to_bucket(gate.js, v2)
    await wait_for(lambda: active_id(gate) == "chain-v3", timeout=10)
    late = await gates(other)  # was down for v2 and v3: catches up from the bucket
    assert active_id(late) == "chain-v3"


# --- the watcher on its own ---------------------------------------------------------------


@pytest.fixture
async def watcher(state: StateDir) -> AsyncIterator[ReleaseWatcher]:
    clock = Clock()
    opened = await ReleaseWatcher.open(
        load_trust_root(state.trust_root), state.release_state, clock, inbox=state.release_inbox
    )
    opened.test_clock = clock  # type: ignore[attr-defined]
    yield opened
    await opened.close()


async def test_the_watcher_says_why_it_cannot_answer(watcher: ReleaseWatcher) -> None:
    with pytest.raises(Exception, match="no verified release") as caught:
        watcher.current()
    assert getattr(caught.value, "reason_code", None) == "no_verified_release"
    await watcher.scan_inbox()
    assert watcher.current().release_id == watcher.active.release_id  # type: ignore[union-attr]
    clock: Clock = watcher.test_clock  # type: ignore[attr-defined]
    clock.offset_ms = 40 * DAY
    with capture_logs() as logs:
        for _ in range(3):
            with pytest.raises(ExpiredReleaseError):
                watcher.current()
    assert [e["event"] for e in logs].count("release_not_in_force") == 1
    clock.offset_ms = -DAY  # set back further than the skew, below what was seen
    with pytest.raises(Exception, match="clock") as caught:
        watcher.current()
    assert getattr(caught.value, "reason_code", None) == "release_clock_untrusted"


async def test_an_expired_stored_release_reports_expiry_after_restart(
    state: StateDir, watcher: ReleaseWatcher
) -> None:
    await watcher.scan_inbox()
    await watcher.close()
    late = Clock()
    late.offset_ms = 40 * DAY
    again = await ReleaseWatcher.open(
        load_trust_root(state.trust_root), state.release_state, late, inbox=state.release_inbox
    )
    try:
        assert await again.load_stored() is None
        assert again.last_accepted is not None  # the rollback floor is kept
        with pytest.raises(ExpiredReleaseError):
            again.current()
    finally:
        await again.close()


async def test_the_watcher_persists_the_clock_and_retries_after_a_store_outage(
    state: StateDir, watcher: ReleaseWatcher, tmp_path: Path
) -> None:
    await watcher.scan_inbox()
    watcher.current()
    clock: Clock = watcher.test_clock  # type: ignore[attr-defined]
    clock.offset_ms = 60_000
    watcher.current()
    await watcher.tick()
    store = watcher._store
    stored = await store.load()
    assert stored is not None
    assert stored.state.clock_high_water_ms >= wall_clock_ms() + 50_000

    v2 = next_release(state, tmp_path, current_inbox(state), "outage-v2", at_ms=clock())

    async def unavailable(*_args: Any, **_kwargs: Any) -> None:
        raise StoreUnavailable("disk gone")

    original = store.accept
    store.accept = unavailable  # type: ignore[method-assign]
    await watcher.offer("test:v2", encode_bundle(v2))
    assert watcher.active.release_id != "outage-v2"  # type: ignore[union-attr]
    store.accept = original  # type: ignore[method-assign]
    await watcher.tick()
    assert watcher.active.release_id == "outage-v2"  # type: ignore[union-attr]


async def test_two_watchers_on_one_state_adopt_each_others_progress(
    state: StateDir, watcher: ReleaseWatcher, tmp_path: Path
) -> None:
    await watcher.scan_inbox()
    second = await ReleaseWatcher.open(
        load_trust_root(state.trust_root), state.release_state, Clock(), inbox=state.release_inbox
    )
    try:
        await second.load_stored()
        v2 = next_release(state, tmp_path, current_inbox(state), "shared-v2")
        await watcher.offer("test:v2", encode_bundle(v2))
        await second.offer("test:v2", encode_bundle(v2))  # stale -> reload -> already current
        assert second.active.release_id == "shared-v2"  # type: ignore[union-attr]
    finally:
        await second.close()


async def test_unreadable_or_oversized_inbox_files_are_refused(
    state: StateDir, watcher: ReleaseWatcher
) -> None:
    (state.release_inbox / "release.9999999999999999-huge.json").write_bytes(b" " * 1_000_000)
    await watcher.scan_inbox()
    assert "release_malformed" in {r.reason_code for r in watcher.refusals}
    assert watcher.active is not None


async def test_the_evaluate_stage_and_desk_fail_closed_without_a_release() -> None:
    stage = EvaluateStage(None, wall_clock_ms)
    with pytest.raises(StageRefusal) as refusal:
        await serve(stage, EvaluateRequest)(
            msgspec.json.encode({"envelope": {}, "operation_id": "x"})
        )
    assert refusal.value.reason_code == "malformed_stage_request"

    def expired() -> Any:
        raise ExpiredReleaseError("lease over")

    with pytest.raises(NoVerifiedReleaseError):
        stage.current()
    with pytest.raises(DeskError) as desk:
        _desk_policy_set(EvaluateStage(None, wall_clock_ms, release=expired))()
    assert desk.value.reason_code == "release_expired"
    assert TrustedTime(1).latest_ms == 1 + 60_000


async def test_a_projection_dir_cannot_bypass_a_trust_root(
    state: StateDir, nats_server: EmbeddedNatsServer, tmp_path: Path
) -> None:
    with pytest.raises(ValueError, match="bypass"):
        await start_gate(
            gate_config(state=state, nats_url=nats_server.url, projection_dir=tmp_path)
        )


# --- the command line ---------------------------------------------------------------------


@pytest.fixture
def keys(tmp_path: Path) -> tuple[Path, Path]:
    a, b = tmp_path / "a.key", tmp_path / "b.key"
    write_private_key(a, generate_signing_key(), "signer-a")
    write_private_key(b, generate_signing_key(), "signer-b")
    return a, b


def test_build_verify_and_refuse_on_the_command_line(
    state: StateDir, keys: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a, b = keys
    root, corpus = tmp_path / "root.json", tmp_path / "corpus"
    scenario_corpus(corpus, release_id="cli-rel", legal_hold_reason="hold_cli")
    shutil.copy(state.registry, corpus / "registry.json")
    code, out, _ = cli(
        [
            "release",
            "trust-root",
            "--key",
            str(a),
            "--key",
            str(b),
            "--threshold",
            "2",
            "--out",
            str(root),
            "--json",
        ],
        capsys,
    )
    assert code == 0
    assert json.loads(out)["threshold"] == 2
    code, _, err = cli(["release", "trust-root", "--key", str(a), "--out", str(root)], capsys)
    assert code == 1
    assert "refusing to overwrite" in err

    r1, r2, r3 = tmp_path / "r1", tmp_path / "r2", tmp_path / "r3"
    code, out, _ = cli(
        [
            "release",
            "build",
            "--corpus",
            str(corpus),
            "--key",
            str(a),
            "--key",
            str(b),
            "--out",
            str(r1),
            "--lease-hours",
            "2",
            "--json",
        ],
        capsys,
    )
    assert code == 0
    built = json.loads(out)
    assert built["manifest"]["sequence"] == 1
    assert built["manifest"]["lease_expires_at_ms"] - built["manifest"]["issued_at_ms"] == 7_200_000
    code, out, _ = cli(["release", "verify", str(r1), "--trust-root", str(root), "--json"], capsys)
    assert code == 0
    assert json.loads(out)["ok"] is True
    code, out, _ = cli(["release", "verify", str(r1), "--trust-root", str(root)], capsys)
    assert "verified" in out

    code, out, _ = cli(
        [
            "release",
            "build",
            "--corpus",
            str(corpus),
            "--key",
            str(a),
            "--out",
            str(r2),
            "--prior",
            str(r1),
            "--revoke-release",
            "old-rel",
        ],
        capsys,
    )
    assert code == 0
    assert "cli-rel-r2" in out
    code, _, err = cli(["release", "verify", str(r2), "--trust-root", str(root)], capsys)
    assert code == 1
    assert "release_below_threshold" in err
    assert len(err.strip().splitlines()) == 1

    later = "2100-01-01T00:00:00Z"
    code, _, err = cli(
        ["release", "verify", str(r1), "--trust-root", str(root), "--at", later], capsys
    )
    assert code == 1
    assert "release_expired" in err
    for bad_at in ("yesterday", "2026-11-29T10:00:00"):
        code, _, _ = cli(
            ["release", "verify", str(r1), "--trust-root", str(root), "--at", bad_at], capsys
        )
        assert code == 2

    code, _, err = cli(
        [
            "release",
            "build",
            "--corpus",
            str(corpus),
            "--key",
            str(a),
            "--out",
            str(r3),
            "--prior",
            str(r1),
            "--sequence",
            "1",
        ],
        capsys,
    )
    assert code == 1
    assert "not above the prior" in err
    code, _, err = cli(
        ["release", "build", "--corpus", str(tmp_path), "--key", str(a), "--out", str(r3)], capsys
    )
    assert code == 2
    assert "--registry" in err
    code, _, err = cli(
        [
            "release",
            "build",
            "--corpus",
            str(corpus),
            "--key",
            str(tmp_path / "none.key"),
            "--out",
            str(r3),
        ],
        capsys,
    )
    assert code == 2
    code, _, err = cli(
        ["release", "verify", str(tmp_path / "nothing"), "--trust-root", str(root)], capsys
    )
    assert code == 2
    code, _, err = cli(
        ["release", "verify", str(r1), "--trust-root", str(tmp_path / "none")], capsys
    )
    assert code == 2


async def test_publish_and_status_on_the_command_line(
    state: StateDir,
    gates: GateFactory,
    nats_server: EmbeddedNatsServer,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    configure_logging(json=True, level="critical")  # gate events stay off stdout
    v1 = current_inbox(state)
    gate = await gates(state)
    capsys.readouterr()
    v2_dir = tmp_path / "v2"
    write_release_dir(next_release(state, tmp_path, v1, "cli-v2"), v2_dir)
    url = nats_server.url
    root = str(state.trust_root)

    code, out, _ = await acli(
        ["release", "publish", str(v2_dir), "--nats", url, "--trust-root", root, "--json"], capsys
    )
    assert code == 0
    assert json.loads(out)["sequence"] == 2
    code, out, _ = await acli(["release", "publish", str(v2_dir), "--nats", url], capsys)
    assert code == 0  # the same bytes again: a no-op
    await wait_for(lambda: active_id(gate) == "cli-v2", timeout=10)

    other_v2 = tmp_path / "v2-other"
    write_release_dir(next_release(state, tmp_path, v1, "cli-v2b"), other_v2)
    code, _, err = await acli(["release", "publish", str(other_v2), "--nats", url], capsys)
    assert code == 1
    assert "already published with different content" in err

    code, out, _ = await acli(["release", "status", "--nats", url, "--json"], capsys)
    assert code == 0
    assert [row["release_id"] for row in json.loads(out)["bucket"]] == ["cli-v2"]
    code, out, _ = await acli(["release", "status", "--nats", url], capsys)
    assert "not verified" in out

    code, out, _ = await acli(
        ["release", "status", "--state-dir", str(state.root), "--json"], capsys
    )
    status = json.loads(out)
    assert status["accepted"]["release_id"] == "cli-v2"
    assert status["accepted"]["lease_in_force"] is True
    code, out, _ = await acli(["release", "status", "--state-dir", str(state.root)], capsys)
    assert "cli-v2" in out

    code, out, _ = await acli(
        ["release", "verify", str(v2_dir), "--trust-root", root, "--state-dir", str(state.root)],
        capsys,
    )
    assert code == 0
    assert "accepted release" in out
    v1_dir = tmp_path / "v1"
    write_release_dir(v1, v1_dir)
    code, _, err = await acli(
        ["release", "verify", str(v1_dir), "--trust-root", root, "--state-dir", str(state.root)],
        capsys,
    )
    assert code == 1
    assert "release_rollback" in err
    code, _, err = await acli(
        ["release", "publish", str(v1_dir), "--nats", url, "--trust-root", str(tmp_path / "x")],
        capsys,
    )
    assert code == 1

    v3_dir = tmp_path / "v3"
    write_release_dir(next_release(state, tmp_path, read_release_dir(v2_dir), "cli-v3"), v3_dir)
    code, out, _ = await acli(
        ["release", "publish", str(v3_dir), "--state-dir", str(state.root)], capsys
    )
    assert code == 0
    assert "published cli-v3" in out
    await wait_for(lambda: active_id(gate) == "cli-v3", timeout=10)

    fresh = tmp_path / "fresh"
    code, out, _ = await acli(["release", "status", "--state-dir", str(fresh)], capsys)
    assert "no release accepted yet" in out
    code, _, err = await acli(["release", "status", "--nats", "nats://127.0.0.1:1"], capsys)
    assert code == 1
    assert "cannot connect" in err


def test_building_refuses_what_it_cannot_sign(state: StateDir, tmp_path: Path) -> None:
    corpus = scenario_corpus(tmp_path / "c", release_id="x-rel", legal_hold_reason="hold_x")
    registry = state.registry.read_bytes()
    with pytest.raises(ReleaseError, match="lease"):
        build_release(corpus, [signer(state)], registry, now_ms=wall_clock_ms(), lease_hours=0)
    with pytest.raises(ReleaseError, match="registry"):
        build_release(corpus, [signer(state)], b"{}", now_ms=wall_clock_ms())
    with pytest.raises(ReleaseError, match="compile failed"):
        build_release(tmp_path, [signer(state)], registry, now_ms=wall_clock_ms())
    with pytest.raises(ReleaseError, match="manifest"):
        build_release(
            corpus, [signer(state)], registry, now_ms=wall_clock_ms(), release_id="Bad Id"
        )
    v1 = build_release(corpus, [signer(state)], registry, now_ms=wall_clock_ms())
    with pytest.raises(ReleaseError, match="unique"):
        build_release(
            corpus,
            [signer(state)],
            registry,
            now_ms=wall_clock_ms(),
            prior=prior_of(v1),
            release_id="x-rel",
        )
    out = tmp_path / "out"
    write_release_dir(v1, out)
    with pytest.raises(ReleaseError, match="not empty"):
        write_release_dir(v1, out)


def test_release_files_and_keys_are_read_strictly(state: StateDir, tmp_path: Path) -> None:
    key_path = state.key_path(RELEASE_SIGNER)
    record = read_public_record(key_path)
    assert record.key_id == signer(state).key_id
    public = tmp_path / "public.json"
    public.write_bytes(msgspec.json.encode(record))
    assert read_public_record(public) == record
    (tmp_path / "junk.json").write_text("{}")
    with pytest.raises(ReleaseError, match="neither"):
        read_public_record(tmp_path / "junk.json")
    with pytest.raises(ReleaseError, match="not a release trust root"):
        load_trust_root(tmp_path / "junk.json")
    (tmp_path / "big.json").write_bytes(b" " * 1_000_000)
    with pytest.raises(ReleaseError, match="larger than"):
        read_bundle_file(tmp_path / "big.json")
    with pytest.raises(ReleaseError, match="not a release bundle"):
        read_bundle_file(tmp_path / "junk.json")
    folder = tmp_path / "release"
    write_release_dir(current_inbox(state), folder)
    (folder / "manifest.dsse.json").write_text('{"payload":"!","payloadType":"x","signatures":[]}')
    with pytest.raises(ReleaseError, match=r"manifest\.dsse\.json"):
        read_release_dir(folder)
    bundle = current_inbox(state)
    garbled = swap(bundle, envelope=msgspec.structs.replace(bundle.envelope, payload="e30="))
    with pytest.raises(ReleaseError, match="does not decode"):
        unverified_manifest(garbled)
    assert publish_to_inbox(bundle, state.release_inbox) == publish_to_inbox(
        bundle, state.release_inbox
    )


def test_the_demo_release_is_renewed_when_its_registry_or_lease_changes(
    state: StateDir,
) -> None:
    first = manifest_of(current_inbox(state))
    assert refresh_demo_release(state) is None  # fresh, same registry: nothing to do
    current = msgspec.json.decode(state.registry.read_bytes(), type=RegistryFile)
    state.registry.write_bytes(encode_registry(current.entries[:-1]))
    renewed = refresh_demo_release(state)
    assert renewed is not None
    second = manifest_of(current_inbox(state))
    assert second.sequence == first.sequence + 1
    assert (
        second.prior_release_hash
        == prior_of(read_bundle_file_of(state, first.sequence)).manifest_hash
    )
    assert second.release_id == f"{first.release_id}-r2"


def read_bundle_file_of(state: StateDir, sequence: int) -> ReleaseBundle:
    (path,) = state.release_inbox.glob(f"{release_key(sequence)}-*.json")
    return read_bundle_file(path)


async def test_status_shows_a_bucket_entry_that_is_not_a_release(
    state: StateDir, nc: Client
) -> None:
    kv = await ensure_release_bucket(nc.jetstream())
    await kv.put(release_key(5), b"garbage")
    entries = await bucket_entries(nc.jetstream())
    assert [(e.key, e.manifest) for e in entries] == [(release_key(5), None)]


# --- publishers hear what the gates did -------------------------------------


def one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


async def test_publish_reports_each_gates_refusal_then_adoption(
    state: StateDir,
    gates: GateFactory,
    nats_server: EmbeddedNatsServer,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``release publish`` never says "published" for a release every gate
    refuses (``release_chain_broken``, which the gates tell their logs): it waits
    for each gate's signed report: a refusal exits 1 with the gate and reason,
    ``status`` lists each gate's refusals, and an adoption names every gate that
    answered (two gates here, one queue group each, so both are heard)."""
    configure_logging(json=True, level="critical")
    v1 = current_inbox(state)
    other = twin_state(state, tmp_path / "other")
    gate_a = await gates(state, name="gate-a")
    gate_b = await gates(other, name="gate-b")
    first = active_id(gate_a)
    v2 = next_release(state, tmp_path, v1, "heard-v2")
    v3 = next_release(state, tmp_path, v2, "heard-v3")
    write_release_dir(v2, tmp_path / "v2")
    write_release_dir(v3, tmp_path / "v3")
    url = nats_server.url

    code, out, err = await acli(
        ["release", "publish", str(tmp_path / "v3"), "--nats", url, "--json"], capsys
    )
    assert code == 1
    line = one_line(err)
    assert "refused it (release_chain_broken)" in line
    assert "tried again" in line
    assert {(g["gate"], g["outcome"], g["reason_code"]) for g in json.loads(out)["gates"]} == {
        ("gate-a", "refused", "release_chain_broken"),
        ("gate-b", "refused", "release_chain_broken"),
    }
    assert active_id(gate_a) == active_id(gate_b) == first  # the refusal changed nothing

    code, out, _ = await acli(["release", "status", "--nats", url, "--json"], capsys)
    assert code == 0
    reported = {g["gate"]: g for g in json.loads(out)["gates"]}
    assert set(reported) == {"gate-a", "gate-b"}
    for gate in reported.values():
        assert gate["active_release_id"] == first
        assert gate["in_force"] is True
        assert any(
            r["reason_code"] == "release_chain_broken"
            and r["origin"].startswith("kv:release.0000000000000003@")
            and r["retryable"] is True
            for r in gate["refusals"]
        )
    code, out, _ = await acli(["release", "status", "--nats", url], capsys)
    assert f"gate gate-a: {first}" in out
    assert "(release_chain_broken)" in out

    # v2 fills the chain: each gate adopts v2, retries v3 and adopts it too, so v2
    # is already superseded when the publisher asks; that is an adoption.
    code, out, err = await acli(["release", "publish", str(tmp_path / "v2"), "--nats", url], capsys)
    assert (code, err) == (0, "")
    assert "adopted by gate-a, gate-b" in out
    await wait_for(lambda: active_id(gate_a) == active_id(gate_b) == "heard-v3", timeout=10)
    code, out, err = await acli(
        ["release", "publish", str(tmp_path / "v3"), "--nats", url, "--json"], capsys
    )
    assert (code, err) == (0, "")
    assert {g["outcome"] for g in json.loads(out)["gates"]} == {"adopted"}

    # A request that does not decode gets an unsigned refusal, which counts for nothing.
    reply = await gate_a.nc.request(names.RELEASE_REPORT, b"not json", timeout=5)
    assert reply.data == b'{"error":"malformed_request"}'


async def test_publish_without_a_gates_signed_word_is_not_success(
    state: StateDir,
    nats_server: EmbeddedNatsServer,
    nc: Client,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """No gate on the bus: the release is in the bucket, but publish exits 1 saying no
    gate adopted it. Answers that claim adoption are ignored unless a gate key
    of the release's registry signed them: here one is signed by a stranger's
    key and one is not signed at all. ``--no-wait`` publishes and says it did not ask."""
    configure_logging(json=True, level="critical")
    v2 = next_release(state, tmp_path, current_inbox(state), "unheard-v2")
    write_release_dir(v2, tmp_path / "v2")
    url = nats_server.url
    args = ["release", "publish", str(tmp_path / "v2"), "--nats", url, "--wait", "1"]

    code, out, err = await acli(args, capsys)
    assert (code, out) == (1, "")
    assert "no gate reported adopting it within 1 s" in one_line(err)
    assert [e.key for e in await bucket_entries(nc.jetstream())] == [release_key(2)]

    stranger = generate_signing_key()
    prior = prior_of(v2)

    async def forge(msg: Any) -> None:
        claim = ReleaseReport(
            schema=RELEASE_REPORT_SCHEMA,
            gate="forged",
            at_ms=wall_clock_ms(),
            active=ReportedRelease(
                release_id="unheard-v2",
                sequence=2,
                manifest_hash=prior.manifest_hash,
                lease_expires_at_ms=wall_clock_ms() + DAY,
            ),
            in_force=True,
            refusals=(),
            asked="adopted",
        )
        await nc.publish(msg.reply, sign_release_report(claim, stranger))
        await nc.publish(msg.reply, msgspec.json.encode(claim))

    await nc.subscribe(names.RELEASE_REPORT, cb=forge)
    await nc.flush()
    code, out, err = await acli(args, capsys)
    assert code == 1
    line = one_line(err)
    assert "no gate reported adopting it" in line
    assert "answer(s) not signed by a gate key of its registry ignored" in line

    code, out, err = await acli([*args, "--no-wait"], capsys)
    assert (code, err) == (0, "")
    assert "adoption not checked (--no-wait)" in out


async def test_the_watcher_reports_what_it_did_with_each_candidate(
    watcher: ReleaseWatcher,
) -> None:
    """What ``smf.release.report`` answers, straight from the watcher: nothing in force
    without a release; ``unseen`` for a candidate it never had, ``pending`` for
    one it holds undecided, ``adopted`` for its release, the refusal for a bad one."""
    empty = watcher.report("g", ReleaseReportRequest())
    assert (empty.active, empty.in_force, empty.asked) == (None, False, None)
    assert watcher.report("g", ReleaseReportRequest(origin="kv:x@1")).asked == "unseen"
    await watcher.scan_inbox()
    active = watcher.active
    assert active is not None
    adopted = watcher.report("g", ReleaseReportRequest(manifest_hash=active.manifest_hash))
    assert (adopted.asked, adopted.in_force) == ("adopted", True)
    watcher._pending["kv:held@1"] = b""  # a candidate not yet drained
    assert watcher.report("g", ReleaseReportRequest(origin="kv:held@1")).asked == "pending"
    del watcher._pending["kv:held@1"]
    await watcher.offer("kv:junk@2", b"not a bundle")
    refused = watcher.report("g", ReleaseReportRequest(origin="kv:junk@2"))
    assert refused.asked == "refused"
    assert refused.asked_refusal is not None
    assert refused.asked_refusal.reason_code == "release_malformed"
    assert refused.asked_refusal.retryable is False
    long = "x" * 1000
    await watcher.offer(long, b"not a bundle")
    assert all(
        len(r.origin) <= MAX_REPORT_TEXT
        for r in watcher.report("g", ReleaseReportRequest()).refusals
    )
