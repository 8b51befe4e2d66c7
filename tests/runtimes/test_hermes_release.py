"""The Hermes adapter verifies the governed release itself ("release verified").

Two halves.

Pure (no bus): the checks every consumer runs, defined once in
``smf_assurance.subjects.release`` and used both by the adapter's ``ReleaseVerifier`` and
by the gate's ``ReleaseTrust``: one test per subjects-level error (bad
signature, below threshold, digest mismatch, issued later / expired lease,
rollback within a process), that a failed check never moves the in-memory
floor, and that the gate maps each shared check to its own named error with
the same reason code.

Bus (a real gate, a real nats-server, the plugin's hooks driven in-process as
in tests/runtimes/test_hermes_unit.py): the adapter reads the newest release of the
``SMF_RELEASES`` bucket, attests its id, and the gate accepts it only when it
is the gate's active release; an empty bucket, a release the trust root did
not sign, an expired lease under the adapter's clock and a rollback of the
bucket within the process each put the adapter in refusing mode and make the
gate refuse its attestation; the gate refuses attestations naming no release
or another release, and proposals after it switched release, until the
adapter re-attests.

Does not prove: that the adapter checks the prior-hash chain or accumulated
revocations (it does not; the gate does, and refuses a runtime whose release
is not the gate's own), persistence of the adapter's floor across restarts
(there is none), or anything about Hermes itself.
"""

from __future__ import annotations

import asyncio
import base64
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
from nats.aio.client import Client

from smf_assurance.adapters.client import ProposalClient
from smf_assurance.adapters.hermes import plugin
from smf_assurance.adapters.hermes.release import ReleaseVerifier
from smf_assurance.core.release_trust import ReleaseTrust, TrustedTime
from smf_assurance.governance.projections import SCENARIO_CORPUS, package_path
from smf_assurance.governance.releases import (
    build_release,
    latest_in_inbox,
    prior_of,
    publish_to_bucket,
    unverified_manifest,
)
from smf_assurance.ops.demo.script import actor
from smf_assurance.ops.local.natsserver import EmbeddedNatsServer
from smf_assurance.ops.local.stack import gate_config
from smf_assurance.ops.local.state import RELEASE_SIGNER, StateDir
from smf_assurance.ops.runtimes.provision import HERMES_PRINCIPAL
from smf_assurance.pipeline.assembly import RunningGate, start_gate
from smf_assurance.pipeline.desks.attestation import AttestationDesk, RuntimeRequirement, _judge
from smf_assurance.subjects import names
from smf_assurance.subjects.attestation import AttestationAck, RuntimeAttestation
from smf_assurance.subjects.canonical import sha256_identity
from smf_assurance.subjects.dsse import encode_envelope, sign_struct
from smf_assurance.subjects.messages import DataFacts
from smf_assurance.subjects.registry import load_registry
from smf_assurance.subjects.release import (
    DEFAULT_MAX_SKEW_MS,
    RELEASE_BUCKET,
    BadReleaseSignatureError,
    ExpiredReleaseError,
    MalformedReleaseError,
    ReleaseBelowThresholdError,
    ReleaseBundle,
    ReleaseCheckError,
    ReleaseDigestMismatchError,
    ReleaseRollbackError,
    SequenceFloor,
    UntrustedClockError,
    authenticate_release,
    check_release_digests,
    manifest_hash,
    release_key,
    release_keys_newest_first,
    trust_root_keys,
)
from tests.support.bus_helpers import wait_for
from tests.support.clocks import FrozenClock
from tests.support.hermes_unit import (
    PIN,
    env_for,
    hook,
    make_adapter,
    pre,
    publish_active_release,
    write_context,
)
from tests.support.release_helpers import (
    GATE_KEY,
    HOUR,
    OUTSIDER,
    SIGNERS,
    T0,
    build,
    data,
    manifest_of,
    registry,
    resign,
    root_of,
    small_corpus,
    swap,
)

ROOT = root_of(SIGNERS, 2)
"""Three release keys, any two must sign."""
AT = T0 + HOUR
"""The pure tests' clock reading: an hour after the releases were issued."""


def fixed(ms: int) -> Callable[[], int]:
    return lambda: ms


# --- pure: the shared checks, one error per threat -------------------------------------------


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return small_corpus(tmp_path_factory.mktemp("corpus") / "c")


@pytest.fixture(scope="module")
def v1(corpus: Path) -> ReleaseBundle:
    return build(corpus)


@pytest.fixture(scope="module")
def v2(corpus: Path, v1: ReleaseBundle) -> ReleaseBundle:
    return build(corpus, now_ms=T0 + 10, prior=v1)


def test_a_threshold_signed_release_verifies_and_is_named_by_its_hash(v1: ReleaseBundle) -> None:
    authenticated = authenticate_release(data(v1), trust_root_keys(ROOT), ROOT.threshold)
    assert authenticated.manifest == manifest_of(v1)
    assert authenticated.manifest_hash == manifest_hash(base64.b64decode(v1.envelope.payload))
    usable = ReleaseVerifier(ROOT, fixed(AT)).verify(data(v1))
    assert (usable.release_id, usable.sequence) == ("rel-test", 1)
    assert usable.manifest_hash == authenticated.manifest_hash
    # The only keys whose verdicts the adapter reads: the registry's gate keys.
    assert dict(usable.gate_keys) == {GATE_KEY.key_id: GATE_KEY.verify_key}


@pytest.mark.parametrize(
    ("registry_bytes", "match"),
    [(registry(gate=False), "no gate key"), (b'{"schema": "smf.registry/1"}', "release registry")],
)
def test_a_release_whose_registry_names_no_gate_key_is_refused(
    v1: ReleaseBundle, registry_bytes: bytes, match: str
) -> None:
    """Signed and intact, but the adapter could verify no verdict with it: refused up
    front (``release_malformed``) instead of refusing every verdict later. (Our
    release builder refuses such a registry; release signers need not use it.)"""
    digests = msgspec.structs.replace(
        manifest_of(v1).digests, registry=sha256_identity(registry_bytes)
    )
    bundle = resign(swap(v1, registry=registry_bytes), digests=digests)
    verifier = ReleaseVerifier(ROOT, fixed(AT))
    with pytest.raises(MalformedReleaseError, match=match) as caught:
        verifier.verify(data(bundle))
    assert caught.value.reason_code == "release_malformed"
    assert verifier.floor is None


def test_bad_signature_an_outsiders_release(corpus: Path) -> None:
    """TUF 5.4.2, arbitrary software attack: a key outside the trust root signed it."""
    with pytest.raises(BadReleaseSignatureError, match="UnknownSigner") as caught:
        ReleaseVerifier(ROOT, fixed(AT)).verify(data(build(corpus, [OUTSIDER])))
    assert caught.value.reason_code == "release_bad_signature"


def test_bad_signature_a_tampered_manifest(v1: ReleaseBundle) -> None:
    manifest = manifest_of(v1)
    longer = msgspec.structs.replace(manifest, lease_expires_at_ms=manifest.lease_expires_at_ms * 2)
    payload = base64.b64encode(msgspec.json.encode(longer, order="sorted")).decode()
    tampered = swap(v1, envelope=msgspec.structs.replace(v1.envelope, payload=payload))
    with pytest.raises(BadReleaseSignatureError):
        ReleaseVerifier(ROOT, fixed(AT)).verify(data(tampered))


def test_below_threshold_one_key_where_two_must_sign(corpus: Path) -> None:
    """Threshold of distinct keys: one trusted key alone is not enough."""
    with pytest.raises(ReleaseBelowThresholdError) as caught:
        ReleaseVerifier(ROOT, fixed(AT)).verify(data(build(corpus, SIGNERS[:1])))
    assert caught.value.reason_code == "release_below_threshold"


@pytest.mark.parametrize("artifact", ["enforcement", "analysis", "registry"])
def test_digest_mismatch_a_signed_manifest_with_other_artifacts(
    v1: ReleaseBundle, artifact: str
) -> None:
    """TUF 5.5.2/5.6.2, mix-and-match: the signature holds, an artifact is another."""
    mixed = swap(v1, **{artifact: getattr(v1, artifact) + b" "})
    authenticated = authenticate_release(data(mixed), trust_root_keys(ROOT), 2)
    with pytest.raises(ReleaseDigestMismatchError, match=artifact) as caught:
        check_release_digests(authenticated.bundle, authenticated.manifest)
    assert caught.value.reason_code == "release_digest_mismatch"
    with pytest.raises(ReleaseDigestMismatchError):
        ReleaseVerifier(ROOT, fixed(AT)).verify(data(mixed))


def test_expired_lease_under_the_adapters_clock(v1: ReleaseBundle) -> None:
    """TUF 5.4.4, freeze: the lease must outlast the clock reading plus the skew."""
    lease = manifest_of(v1).lease_expires_at_ms
    in_force = lease - DEFAULT_MAX_SKEW_MS - 1
    assert ReleaseVerifier(ROOT, fixed(in_force)).verify(data(v1)).sequence == 1
    with pytest.raises(ExpiredReleaseError) as caught:
        ReleaseVerifier(ROOT, fixed(in_force + 1)).verify(data(v1))
    assert caught.value.reason_code == "release_expired"


def test_a_release_issued_after_the_clocks_latest_time_is_refused(v1: ReleaseBundle) -> None:
    """A clock far behind cannot judge a lease: refused, not trusted."""
    behind = manifest_of(v1).issued_at_ms - DEFAULT_MAX_SKEW_MS - 1
    with pytest.raises(UntrustedClockError) as caught:
        ReleaseVerifier(ROOT, fixed(behind)).verify(data(v1))
    assert caught.value.reason_code == "release_clock_untrusted"


def test_rollback_within_a_process_is_refused(v1: ReleaseBundle, v2: ReleaseBundle) -> None:
    """TUF 5.4.3 with an in-memory floor: never back, one sequence names one release."""
    verifier = ReleaseVerifier(ROOT, fixed(AT))
    verifier.verify(data(v2))
    with pytest.raises(ReleaseRollbackError, match="below") as caught:
        verifier.verify(data(v1))
    assert caught.value.reason_code == "release_rollback"
    fork = resign(v2, release_id="rel-test-fork")
    with pytest.raises(ReleaseRollbackError, match="another release"):
        verifier.verify(data(fork))
    assert verifier.verify(data(v2)).sequence == 2  # the same release again is fine
    assert verifier.floor == SequenceFloor(2, manifest_hash(base64.b64decode(v2.envelope.payload)))


def test_a_failed_check_never_moves_the_floor(v1: ReleaseBundle, v2: ReleaseBundle) -> None:
    verifier = ReleaseVerifier(ROOT, fixed(AT))
    verifier.verify(data(v1))
    floor = verifier.floor
    with pytest.raises(ReleaseDigestMismatchError):
        verifier.verify(data(swap(v2, registry=v2.registry + b" ")))
    late = ReleaseVerifier(ROOT, fixed(manifest_of(v2).lease_expires_at_ms))
    late.floor = floor
    with pytest.raises(ExpiredReleaseError):
        late.verify(data(v2))
    assert verifier.floor == floor
    assert late.floor == floor
    assert verifier.verify(data(v2)).sequence == 2


def test_malformed_input_is_refused_before_any_signature_check() -> None:
    for raw in (b"", b"not json", b"{}", b" " * (1024 * 1024)):
        with pytest.raises(MalformedReleaseError) as caught:
            ReleaseVerifier(ROOT, fixed(AT)).verify(raw)
        assert caught.value.reason_code == "release_malformed"


@pytest.mark.parametrize(
    ("make", "error"),
    [
        (lambda c, b: data(build(c, [OUTSIDER])), BadReleaseSignatureError),
        (lambda c, b: data(build(c, SIGNERS[:1])), ReleaseBelowThresholdError),
        (
            lambda c, b: data(swap(b, enforcement=b.enforcement + b" ")),
            ReleaseDigestMismatchError,
        ),
        (lambda c, b: b"{}", MalformedReleaseError),
    ],
    ids=["signature", "threshold", "digest", "malformed"],
)
def test_the_gate_runs_the_same_checks_and_raises_the_same_errors(
    corpus: Path,
    v1: ReleaseBundle,
    make: Callable[[Path, ReleaseBundle], bytes],
    error: type[ReleaseCheckError],
) -> None:
    """One definition, one hierarchy: the adapter's verifier and ``ReleaseTrust`` raise
    the very same class (not a translation of it), so the reason code is one too."""
    candidate = make(corpus, v1)
    with pytest.raises(error) as adapter:
        ReleaseVerifier(ROOT, fixed(AT)).verify(candidate)
    with pytest.raises(error) as gate:
        ReleaseTrust(ROOT).verify_update(candidate, TrustedTime(AT))
    assert type(adapter.value) is type(gate.value) is error
    assert gate.value.reason_code == adapter.value.reason_code == error.reason_code


def test_the_gates_time_checks_are_the_shared_ones(v1: ReleaseBundle) -> None:
    lease = manifest_of(v1).lease_expires_at_ms
    behind = T0 - 10 * DEFAULT_MAX_SKEW_MS
    for at, error in ((lease, ExpiredReleaseError), (behind, UntrustedClockError)):
        with pytest.raises(error) as adapter:
            ReleaseVerifier(ROOT, fixed(at)).verify(data(v1))
        with pytest.raises(error) as gate:
            ReleaseTrust(ROOT).verify_update(data(v1), TrustedTime(at))
        assert type(adapter.value) is type(gate.value) is error
        assert gate.value.reason_code == adapter.value.reason_code


def test_keys_are_tried_highest_sequence_first_and_junk_is_ignored() -> None:
    keys = [release_key(9), release_key(10), "release.x", "other", release_key(2) + "\n"]
    assert release_keys_newest_first(keys) == [release_key(10), release_key(9)]
    assert release_keys_newest_first(["release.1"]) == []
    assert release_keys_newest_first([]) == []


def test_the_gate_can_opt_a_runtime_out_of_the_release_requirement() -> None:
    """``require_release=False`` keeps the previous behaviour for runtimes that cannot verify."""
    att = _attestation(verified_release_id=None)
    assert _judge(att, RuntimeRequirement(require_release=False), "rel-a") == ()
    assert _judge(att, RuntimeRequirement(require_release=True), "rel-a") == (
        "runtime_release_not_verified",
    )
    other = _attestation(verified_release_id="rel-b")
    assert _judge(other, RuntimeRequirement(require_release=True), "rel-a") == (
        "runtime_release_mismatch",
    )
    assert _judge(other, RuntimeRequirement(require_release=True), None) == (
        "runtime_release_mismatch",
    )


def _attestation(**changes: Any) -> RuntimeAttestation:
    base = RuntimeAttestation(
        schema="smf.runtime-attestation/1",
        attestation_id="a-" + "0" * 32,
        runtime_id="hermes-demo",
        runtime_version=PIN,
        runtime_pin=PIN,
        adapter_id="smf-hermes-adapter",
        adapter_version="0.1.0",
        profile="block-only",
        hooks_present=plugin.REQUIRED_HOOKS,
        hooks_missing=(),
        streaming=(),
        verified_release_id=None,
        problems=(),
        issued_at_ms=T0,
    )
    return msgspec.structs.replace(base, **changes)


# --- bus: the adapter against a real gate ------------------------------------------------------


@pytest.fixture
def clock() -> FrozenClock:
    return FrozenClock()


@pytest.fixture
async def bare_gate(
    hermes_state: StateDir, nats_server: EmbeddedNatsServer, clock: FrozenClock
) -> AsyncIterator[RunningGate]:
    """A gate on its inbox release; the bucket is left empty."""
    running = await start_gate(
        gate_config(
            state=hermes_state,
            nats_url=nats_server.url,
            co_located=True,
            clock=clock,
            sweep_seconds=3600,
        )
    )
    yield running
    try:
        await asyncio.wait_for(asyncio.shield(running.close()), 15)
    except TimeoutError:
        for task in asyncio.all_tasks():
            task.print_stack(file=sys.stderr)
        raise


@pytest.fixture
async def gate(bare_gate: RunningGate, hermes_state: StateDir) -> RunningGate:
    """The gate, with its active release published to the bucket."""
    await publish_active_release(bare_gate, hermes_state)
    return bare_gate


@pytest.fixture
def context_file(tmp_path: Path) -> Path:
    path = tmp_path / "context.json"
    held = tmp_path / "held"
    held.mkdir()
    write_context(path, held)
    return path


@pytest.fixture
def adapters() -> Iterator[list[plugin.HermesAdapter]]:
    made: list[plugin.HermesAdapter] = []
    yield made
    for adapter in made:
        if adapter.bridge is not None:
            adapter.bridge.stop(1.0)


def active_id(running: RunningGate) -> str:
    assert running.releases is not None
    assert running.releases.active is not None
    return running.releases.active.release_id


def next_release(state: StateDir, signer: Any = None, **options: Any) -> ReleaseBundle:
    """A release chained to the state's newest, signed by its release key unless told."""
    latest = latest_in_inbox(state.release_inbox)
    assert latest is not None
    return build_release(
        package_path(SCENARIO_CORPUS),
        [signer or state.key(RELEASE_SIGNER)],
        state.registry.read_bytes(),
        now_ms=time.time_ns() // 1_000_000,
        lease_hours=24,
        prior=prior_of(latest),
        **options,
    )


async def switch_gate_to(running: RunningGate, bundle: ReleaseBundle) -> str:
    release_id = unverified_manifest(bundle).release_id
    await publish_to_bucket(running.js, bundle)
    await wait_for(lambda: active_id(running) == release_id, timeout=10)
    return release_id


async def reattest(adapter: plugin.HermesAdapter) -> AttestationAck:
    assert adapter.bridge is not None
    return await asyncio.to_thread(adapter.bridge.call, adapter._attest_once, 3.0)


READ = ("read_file", {"path": "notes.txt"})


async def test_the_adapter_verifies_the_bucket_release_and_the_gate_accepts_it(
    gate: RunningGate,
    hermes_state: StateDir,
    nats_server: EmbeddedNatsServer,
    context_file: Path,
    adapters: list[plugin.HermesAdapter],
) -> None:
    adapter = make_adapter(adapters, env_for(hermes_state, nats_server.url, context_file))
    assert await hook(adapter.pre_tool_call, **pre(*READ)) is None
    assert adapter.release is not None
    assert adapter.release.release_id == active_id(gate)
    assert adapter.attestation().verified_release_id == active_id(gate)
    assert adapter.last_ack is not None
    assert adapter.last_ack.accepted, adapter.last_ack


async def test_an_empty_bucket_refuses_the_adapter_and_the_gate_its_attestation(
    bare_gate: RunningGate,
    hermes_state: StateDir,
    nats_server: EmbeddedNatsServer,
    context_file: Path,
    adapters: list[plugin.HermesAdapter],
    capsys: pytest.CaptureFixture[str],
) -> None:
    adapter = make_adapter(adapters, env_for(hermes_state, nats_server.url, context_file))
    result = await hook(adapter.pre_tool_call, **pre(*READ))
    assert result["action"] == "block"
    assert "release_unavailable" in result["message"]
    reply = await hook(adapter.transform_llm_output, response_text="hello")
    assert reply != "hello"
    assert adapter.last_ack is not None
    assert not adapter.last_ack.accepted
    assert "release_unavailable" in adapter.last_ack.reason_codes
    assert "runtime_release_not_verified" in adapter.last_ack.reason_codes
    assert "REFUSES to run (release_unavailable" in capsys.readouterr().err
    # Once the release is in the bucket, the next attestation verifies it and runs again.
    await publish_active_release(bare_gate, hermes_state)
    assert (await reattest(adapter)).accepted
    assert await hook(adapter.pre_tool_call, **pre(*READ)) is None


async def test_a_release_the_trust_root_did_not_sign_refuses_everything(
    gate: RunningGate,
    hermes_state: StateDir,
    nats_server: EmbeddedNatsServer,
    context_file: Path,
    adapters: list[plugin.HermesAdapter],
) -> None:
    before = active_id(gate)
    forged = next_release(hermes_state, signer=OUTSIDER)
    await publish_to_bucket(gate.js, forged)  # the newest key now holds a forgery
    adapter = make_adapter(adapters, env_for(hermes_state, nats_server.url, context_file))
    result = await hook(adapter.pre_tool_call, **pre(*READ))
    assert "release_bad_signature" in result["message"]
    assert adapter.release is None
    assert adapter.attestation().verified_release_id is None
    assert active_id(gate) == before  # the gate refused the forgery too


async def test_an_expired_lease_under_the_adapters_clock_refuses(
    gate: RunningGate,
    hermes_state: StateDir,
    nats_server: EmbeddedNatsServer,
    context_file: Path,
    adapters: list[plugin.HermesAdapter],
) -> None:
    later = time.time_ns() // 1_000_000 + 31 * 24 * HOUR  # the demo lease is 30 days
    adapter = make_adapter(
        adapters, env_for(hermes_state, nats_server.url, context_file), clock=lambda: later
    )
    result = await hook(adapter.pre_tool_call, **pre(*READ))
    assert "release_expired" in result["message"]
    assert adapter.last_ack is not None
    assert "release_expired" in adapter.last_ack.reason_codes


async def test_a_verified_lease_that_runs_out_later_refuses_without_a_new_read(
    gate: RunningGate,
    hermes_state: StateDir,
    nats_server: EmbeddedNatsServer,
    context_file: Path,
    adapters: list[plugin.HermesAdapter],
) -> None:
    now = [time.time_ns() // 1_000_000]
    adapter = make_adapter(
        adapters, env_for(hermes_state, nats_server.url, context_file), clock=lambda: now[0]
    )
    assert await hook(adapter.pre_tool_call, **pre(*READ)) is None
    assert adapter.release is not None
    now[0] = adapter.release.lease_expires_at_ms
    result = await hook(adapter.pre_tool_call, **pre("read_file", {"path": "other.txt"}))
    assert "release_expired" in result["message"]
    assert adapter.attestation().verified_release_id is None


async def test_a_rollback_of_the_bucket_within_the_process_is_refused(
    gate: RunningGate,
    hermes_state: StateDir,
    nats_server: EmbeddedNatsServer,
    context_file: Path,
    adapters: list[plugin.HermesAdapter],
) -> None:
    newer = next_release(hermes_state)
    newer_id = await switch_gate_to(gate, newer)
    adapter = make_adapter(adapters, env_for(hermes_state, nats_server.url, context_file))
    assert await hook(adapter.pre_tool_call, **pre(*READ)) is None
    assert adapter.release is not None
    assert adapter.release.release_id == newer_id
    # Someone with write access purges the newest key: the newest left is older.
    kv = await gate.js.key_value(RELEASE_BUCKET)
    await kv.purge(release_key(unverified_manifest(newer).sequence))
    ack = await reattest(adapter)
    assert not ack.accepted
    assert "release_rollback" in ack.reason_codes
    result = await hook(adapter.pre_tool_call, **pre(*READ))
    assert "release_rollback" in result["message"]
    assert active_id(gate) == newer_id  # the gate keeps the newer release


async def test_the_gate_refuses_an_attestation_naming_no_or_another_release(
    gate: RunningGate,
    hermes_state: StateDir,
    nc: Client,
    nats_server: EmbeddedNatsServer,
    context_file: Path,
    adapters: list[plugin.HermesAdapter],
) -> None:
    env = env_for(hermes_state, nats_server.url, context_file, SMF_ATTEST_INTERVAL="600")
    adapter = make_adapter(adapters, env)
    assert await hook(adapter.pre_tool_call, **pre(*READ)) is None  # attested and verified

    async def attest(verified: str | None) -> AttestationAck:
        att = msgspec.structs.replace(
            adapter.attestation(),
            verified_release_id=verified,
            issued_at_ms=time.time_ns() // 1_000_000,
        )
        signed = sign_struct(names.PAYLOAD_ATTESTATION, att, [hermes_state.key(HERMES_PRINCIPAL)])
        reply = await nc.request(names.ATTEST, encode_envelope(signed), timeout=3)
        return msgspec.json.decode(reply.data, type=AttestationAck)

    missing = await attest(None)
    assert not missing.accepted
    assert missing.reason_codes == ("runtime_release_not_verified",)
    other = await attest("rel-other")
    assert not other.accepted
    assert other.reason_codes == ("runtime_release_mismatch",)
    assert other.release_id == active_id(gate)
    # The refusal stands for the runtime's proposals until it attests again.
    result = await hook(adapter.pre_tool_call, **pre(*READ))
    assert "runtime_attestation_rejected" in result["message"]
    assert (await attest(active_id(gate))).accepted
    assert await hook(adapter.pre_tool_call, **pre(*READ)) is None


async def test_after_the_gate_switches_release_the_runtime_must_reattest(
    gate: RunningGate,
    hermes_state: StateDir,
    nats_server: EmbeddedNatsServer,
    context_file: Path,
    adapters: list[plugin.HermesAdapter],
) -> None:
    env = env_for(hermes_state, nats_server.url, context_file, SMF_ATTEST_INTERVAL="600")
    adapter = make_adapter(adapters, env)
    assert await hook(adapter.pre_tool_call, **pre(*READ)) is None
    first = active_id(gate)
    second = await switch_gate_to(gate, next_release(hermes_state))
    assert second != first
    refused = await hook(adapter.pre_tool_call, **pre(*READ))
    assert "runtime_release_mismatch" in refused["message"]
    # The refusal makes the adapter re-read the bucket and attest before its next call.
    assert await hook(adapter.pre_tool_call, **pre(*READ)) is None
    assert adapter.release is not None
    assert adapter.release.release_id == second


async def test_the_desk_admits_by_the_release_in_force(
    hermes_state: StateDir, clock: FrozenClock
) -> None:
    """Pure desk: an accepted attestation stops admitting once the gate's release moves."""
    current = ["rel-a"]
    desk = AttestationDesk(
        required={"hermes-demo": RuntimeRequirement(require_release=True)},
        registry=lambda: load_registry(hermes_state.registry),
        clock=clock,
        release_id=lambda: current[0],
    )
    ack = await desk.record(_attestation(verified_release_id="rel-a", issued_at_ms=clock.now))
    assert ack.accepted
    proposal = ProposalClient(
        None,  # type: ignore[arg-type]
        hermes_state.key(HERMES_PRINCIPAL),
        "hermes-demo",
        PIN,
        "smf-hermes-adapter",
        gate_keys={},  # builds only: nothing is sent
    ).build(native_tool="read_file", arguments={}, actor=actor("a", "associate"), facts=DataFacts())
    assert desk.admit(proposal) is None
    current[0] = "rel-b"
    assert desk.admit(proposal) == "runtime_release_mismatch"
