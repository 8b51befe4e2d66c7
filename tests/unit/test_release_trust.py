"""The trusted release state machine (smf_assurance/core/release_trust.py).

One regression test per threat (TUF specification, "Detailed client
workflow"; DSSE ``protocol.md``): bad signature, below threshold,
mix-and-match digests, rollback and replay, broken chain, freeze (lease and
clock), revocation; plus the order in which the checks run, the reload of the
stored release, and that nothing but authenticated bytes is ever parsed.
Pure: no bus, no disk beyond the corpus the builder compiles.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from smf_assurance.core.release_trust import (
    BrokenReleaseChainError,
    LastAccepted,
    NoVerifiedReleaseError,
    ReleaseContentError,
    ReleaseTrust,
    ReplayedReleaseError,
    RevokedReleaseError,
    TrustedTime,
    VerifiedRelease,
    check_in_force,
)
from smf_assurance.subjects import dsse
from smf_assurance.subjects import release as contract
from smf_assurance.subjects.canonical import canonical_bytes, sha256_identity
from smf_assurance.subjects.release import (
    MAX_BUNDLE_BYTES,
    PAYLOAD_RELEASE_MANIFEST,
    AuthenticatedRelease,
    BadReleaseSignatureError,
    ExpiredReleaseError,
    MalformedReleaseError,
    ReleaseBelowThresholdError,
    ReleaseBundle,
    ReleaseCheckError,
    ReleaseDigestMismatchError,
    ReleaseRollbackError,
    Revocations,
    SequenceFloor,
    TrustRoot,
    UntrustedClockError,
    authenticate_release,
    check_sequence_floor,
    decode_trust_root,
    encode_trust_root,
    manifest_hash,
    release_key,
    release_keys_newest_first,
    trust_root_keys,
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
from tests.support.structs import structs_defined_in

ROOT = root_of(SIGNERS, 2)
"""Three release keys, any two must sign."""
NOW = TrustedTime(T0 + HOUR)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return small_corpus(tmp_path_factory.mktemp("corpus") / "c")


@pytest.fixture(scope="module")
def other_corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return small_corpus(tmp_path_factory.mktemp("corpus") / "o", reason="other_reason")


@pytest.fixture(scope="module")
def v1(corpus: Path) -> ReleaseBundle:
    return build(corpus)


@pytest.fixture(scope="module")
def v2(corpus: Path, v1: ReleaseBundle) -> ReleaseBundle:
    return build(corpus, now_ms=T0 + 10, prior=v1)


def accepted(bundle: ReleaseBundle, last: LastAccepted | None = None) -> LastAccepted:
    """The state after accepting ``bundle`` (verified, so the test builds on real state)."""
    return ReleaseTrust(ROOT, last).verify_update(data(bundle), NOW).accepted_state(NOW)


# --- the happy path ---------------------------------------------------------------


def test_a_signed_release_is_verified_with_its_content(v1: ReleaseBundle) -> None:
    release = ReleaseTrust(ROOT).verify_update(data(v1), NOW)
    assert isinstance(release, VerifiedRelease)
    manifest = manifest_of(v1)
    assert release.manifest == manifest
    assert release.manifest_hash == manifest_hash(base64.b64decode(v1.envelope.payload))
    assert release.signer_key_ids == {SIGNERS[0].key_id, SIGNERS[1].key_id}
    assert release.policy_set.release_id == release.release_id == "rel-test"
    assert release.policy_set.release_sequence == release.sequence == 1
    assert release.analysis.release_id == "rel-test"
    assert [p.name for p in release.registry.principals.values()] == ["runtime-test", "gate-test"]
    assert release.bundle_bytes == data(v1)


def test_a_chained_release_replaces_the_last_accepted(v1: ReleaseBundle, v2: ReleaseBundle) -> None:
    state = accepted(v1)
    release = ReleaseTrust(ROOT, state).verify_update(data(v2), NOW)
    assert release.sequence == 2
    assert release.manifest.prior_release_hash == state.manifest_hash
    assert release.release_id == "rel-test-r2"


def test_accepted_state_records_what_the_next_check_needs(v1: ReleaseBundle) -> None:
    release = ReleaseTrust(ROOT).verify_update(data(v1), NOW)
    state = release.accepted_state(NOW, high_water_ms=NOW.now_ms + 5)
    assert state.sequence == 1
    assert state.manifest_hash == release.manifest_hash
    assert state.lease_expires_at_ms == release.manifest.lease_expires_at_ms
    assert state.accepted_at_ms == NOW.now_ms
    assert state.clock_high_water_ms == NOW.now_ms + 5


# --- 1. malformed -------------------------------------------------------------------


@pytest.mark.parametrize(
    "raw",
    [b"", b"not json", b"{}", b'{"schema":"smf.release-bundle/1"}', b"[1,2]"],
)
def test_what_is_not_a_bundle_is_malformed(raw: bytes) -> None:
    with pytest.raises(MalformedReleaseError):
        ReleaseTrust(ROOT).verify_update(raw, NOW)


def test_an_oversized_bundle_is_refused_before_parsing(v1: ReleaseBundle) -> None:
    with pytest.raises(MalformedReleaseError, match="more than"):
        ReleaseTrust(ROOT).verify_update(b" " * (MAX_BUNDLE_BYTES + 1), NOW)
    padded = data(v1) + b" " * (MAX_BUNDLE_BYTES - len(data(v1)))
    assert ReleaseTrust(ROOT).verify_update(padded, NOW).sequence == 1  # at the bound


def test_invalid_base64_in_the_envelope_is_malformed(v1: ReleaseBundle) -> None:
    broken = v1.envelope.payload[:-4] + "!!!!"
    bundle = msgspec.structs.replace(
        v1, envelope=msgspec.structs.replace(v1.envelope, payload=broken)
    )
    with pytest.raises(MalformedReleaseError):
        ReleaseTrust(ROOT).verify_update(data(bundle), NOW)


def test_a_signed_payload_that_is_not_a_canonical_manifest_is_malformed(
    v1: ReleaseBundle,
) -> None:
    """Parse once, after the signature, and only a canonical manifest: a duplicate
    key (which msgspec reads as its last value) would let two parsers disagree."""
    payload = base64.b64decode(v1.envelope.payload)
    spaced = json.dumps(json.loads(payload), indent=1).encode()
    duplicated = payload[:-1] + b',"sequence":999}'
    for body in (spaced, duplicated, b'{"schema":"smf.release-manifest/1"}'):
        envelope = dsse.sign(PAYLOAD_RELEASE_MANIFEST, body, list(SIGNERS[:2]))
        with pytest.raises(MalformedReleaseError):
            ReleaseTrust(ROOT).verify_update(data(swap(v1, envelope=envelope)), NOW)


@pytest.mark.parametrize("sequence", [0, -1, 2**53], ids=["zero", "negative", "unsafe"])
def test_a_sequence_that_is_not_a_positive_safe_integer_is_malformed(
    v1: ReleaseBundle, sequence: int
) -> None:
    """Sequences start at 1 (``release.<sequence>`` keys, rollback floors) and stay
    within what a JavaScript consumer reads exactly (I-JSON)."""
    manifest = json.loads(base64.b64decode(v1.envelope.payload))
    manifest["sequence"] = sequence
    body = json.dumps(manifest, separators=(",", ":"), sort_keys=True).encode()
    envelope = dsse.sign(PAYLOAD_RELEASE_MANIFEST, body, list(SIGNERS[:2]))
    with pytest.raises(MalformedReleaseError, match="sequence"):
        ReleaseTrust(ROOT).verify_update(data(swap(v1, envelope=envelope)), NOW)


def test_the_largest_safe_sequence_is_a_valid_release(corpus: Path) -> None:
    last = 2**53 - 1
    assert (
        ReleaseTrust(ROOT).verify_update(data(build(corpus, sequence=last)), NOW).sequence == last
    )


def test_a_lease_ending_before_issue_is_malformed(v1: ReleaseBundle) -> None:
    bundle = resign(v1, lease_expires_at_ms=manifest_of(v1).issued_at_ms)
    with pytest.raises(MalformedReleaseError, match="lease"):
        ReleaseTrust(ROOT).verify_update(data(bundle), NOW)


# --- 2. bad signature (TUF 5.4.2, arbitrary software attack) ---------------------------


def test_a_tampered_manifest_is_a_bad_signature(v1: ReleaseBundle) -> None:
    manifest = manifest_of(v1)
    longer = msgspec.structs.replace(manifest, lease_expires_at_ms=manifest.lease_expires_at_ms * 2)
    payload = base64.b64encode(msgspec.json.encode(longer, order="sorted")).decode()
    bundle = swap(v1, envelope=msgspec.structs.replace(v1.envelope, payload=payload))
    with pytest.raises(BadReleaseSignatureError):
        ReleaseTrust(ROOT).verify_update(data(bundle), NOW)


def test_a_corrupted_signature_is_a_bad_signature(v1: ReleaseBundle) -> None:
    signatures = []
    for signature in v1.envelope.signatures:
        raw = bytearray(base64.b64decode(signature.sig))
        raw[0] ^= 1
        signatures.append(
            msgspec.structs.replace(signature, sig=base64.b64encode(bytes(raw)).decode())
        )
    envelope = msgspec.structs.replace(v1.envelope, signatures=tuple(signatures))
    with pytest.raises(BadReleaseSignatureError):
        ReleaseTrust(ROOT).verify_update(data(swap(v1, envelope=envelope)), NOW)


def test_an_outsiders_release_is_a_bad_signature(corpus: Path) -> None:
    with pytest.raises(BadReleaseSignatureError, match="UnknownSigner"):
        ReleaseTrust(ROOT).verify_update(data(build(corpus, [OUTSIDER])), NOW)


def test_a_trusted_signature_for_another_purpose_is_a_bad_signature(v1: ReleaseBundle) -> None:
    payload = base64.b64decode(v1.envelope.payload)
    envelope = dsse.sign("application/vnd.smf.execute-order+json;v=1", payload, list(SIGNERS))
    with pytest.raises(BadReleaseSignatureError, match="PayloadTypeMismatch"):
        ReleaseTrust(ROOT).verify_update(data(swap(v1, envelope=envelope)), NOW)


# --- 3. below threshold ---------------------------------------------------------------


def test_one_signature_is_below_a_threshold_of_two(corpus: Path) -> None:
    with pytest.raises(ReleaseBelowThresholdError):
        ReleaseTrust(ROOT).verify_update(data(build(corpus, [SIGNERS[0]])), NOW)


def test_one_key_signing_twice_counts_once(corpus: Path) -> None:
    single = build(corpus, [SIGNERS[0]])
    doubled = msgspec.structs.replace(single.envelope, signatures=single.envelope.signatures * 2)
    with pytest.raises(ReleaseBelowThresholdError):
        ReleaseTrust(ROOT).verify_update(data(swap(single, envelope=doubled)), NOW)


def test_an_outsider_does_not_make_up_the_threshold(corpus: Path) -> None:
    with pytest.raises(ReleaseBelowThresholdError):
        ReleaseTrust(ROOT).verify_update(data(build(corpus, [SIGNERS[0], OUTSIDER])), NOW)


def test_three_of_three_signers_meet_a_threshold_of_two(corpus: Path) -> None:
    release = ReleaseTrust(ROOT).verify_update(data(build(corpus, SIGNERS)), NOW)
    assert len(release.signer_key_ids) == 3


# --- 4. mix-and-match (TUF 5.5.2 / 5.6.2) ------------------------------------------------


@pytest.mark.parametrize("artifact", ["enforcement", "analysis", "registry"])
def test_an_artifact_from_another_release_is_a_digest_mismatch(
    artifact: str, v1: ReleaseBundle, other_corpus: Path
) -> None:
    other = build(
        other_corpus, release_id="rel-other", registry_bytes=registry(runtime_id="rt-other")
    )
    assert getattr(other, artifact) != getattr(v1, artifact)
    mixed = swap(v1, **{artifact: getattr(other, artifact)})
    with pytest.raises(ReleaseDigestMismatchError, match=artifact):
        ReleaseTrust(ROOT).verify_update(data(mixed), NOW)


@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    artifact=st.sampled_from(["enforcement", "analysis", "registry"]),
    position=st.integers(min_value=0),
    bit=st.integers(min_value=0, max_value=7),
)
def test_any_flipped_bit_in_an_artifact_is_caught(
    artifact: str, position: int, bit: int, v1: ReleaseBundle
) -> None:
    raw = bytearray(getattr(v1, artifact))
    raw[position % len(raw)] ^= 1 << bit
    with pytest.raises(ReleaseDigestMismatchError):
        ReleaseTrust(ROOT).verify_update(data(swap(v1, **{artifact: bytes(raw)})), NOW)


# --- 5. rollback and replay (TUF 5.4.3) ---------------------------------------------------


@pytest.mark.claim("release-state.rollback-refused")
def test_an_older_release_is_a_rollback(v1: ReleaseBundle, v2: ReleaseBundle) -> None:
    state = accepted(v2, accepted(v1))
    with pytest.raises(ReleaseRollbackError) as caught:
        ReleaseTrust(ROOT, state).verify_update(data(v1), NOW)
    assert not isinstance(caught.value, ReplayedReleaseError)


def test_the_same_sequence_with_other_content_is_a_rollback(
    corpus: Path, v1: ReleaseBundle
) -> None:
    state = accepted(v1)
    twin = build(corpus, now_ms=T0 + 99)  # sequence 1 again, another issue time
    with pytest.raises(ReleaseRollbackError, match="not above"):
        ReleaseTrust(ROOT, state).verify_update(data(twin), NOW)


@pytest.mark.claim("release-state.rollback-refused")
def test_the_accepted_release_offered_again_is_a_replay(v1: ReleaseBundle) -> None:
    state = accepted(v1)
    with pytest.raises(ReplayedReleaseError) as caught:
        ReleaseTrust(ROOT, state).verify_update(data(v1), NOW)
    assert isinstance(caught.value, ReleaseRollbackError)
    assert caught.value.reason_code == "release_replayed"


@settings(max_examples=25, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(sequence=st.integers(min_value=1, max_value=7))
def test_no_sequence_at_or_below_the_accepted_one_passes(
    sequence: int, corpus: Path, v1: ReleaseBundle
) -> None:
    state = accepted(v1)
    high = LastAccepted(**{**_fields(state), "sequence": 7})
    candidate = resign(v1, sequence=sequence, prior_release_hash=state.manifest_hash)
    with pytest.raises(ReleaseRollbackError):
        ReleaseTrust(ROOT, high).verify_update(data(candidate), NOW)


# --- 6. chain ---------------------------------------------------------------------------


@pytest.mark.claim("release-state.rollback-refused")
def test_a_release_chained_to_another_history_is_refused(corpus: Path, v1: ReleaseBundle) -> None:
    state = accepted(v1)
    fork_base = build(corpus, now_ms=T0 + 5)  # another sequence-1 release
    fork = build(corpus, now_ms=T0 + 10, prior=fork_base)
    with pytest.raises(BrokenReleaseChainError):
        ReleaseTrust(ROOT, state).verify_update(data(fork), NOW)


def test_an_unchained_release_cannot_follow_an_accepted_one(
    corpus: Path, v1: ReleaseBundle
) -> None:
    state = accepted(v1)
    loose = build(corpus, now_ms=T0 + 10, sequence=2, release_id="rel-loose")
    assert manifest_of(loose).prior_release_hash is None
    with pytest.raises(BrokenReleaseChainError):
        ReleaseTrust(ROOT, state).verify_update(data(loose), NOW)


def test_a_first_release_needs_no_chain(corpus: Path, v1: ReleaseBundle) -> None:
    """Trust on first use, anchored by the trust root (TUF's shipped root)."""
    v2 = build(corpus, now_ms=T0 + 10, prior=v1)
    assert ReleaseTrust(ROOT).verify_update(data(v2), NOW).sequence == 2


# --- 7. freeze: lease and trusted clock (TUF 5.4.4, 5.1) ---------------------------------


def test_an_expired_lease_is_refused(v1: ReleaseBundle) -> None:
    lease = manifest_of(v1).lease_expires_at_ms
    with pytest.raises(ExpiredReleaseError):
        ReleaseTrust(ROOT).verify_update(data(v1), TrustedTime(lease + 1))


def test_the_lease_is_judged_at_the_worst_case_within_the_skew(v1: ReleaseBundle) -> None:
    lease = manifest_of(v1).lease_expires_at_ms
    trust = ReleaseTrust(ROOT)
    trust.verify_update(data(v1), TrustedTime(lease - 1001, max_skew_ms=1000))
    with pytest.raises(ExpiredReleaseError):
        trust.verify_update(data(v1), TrustedTime(lease - 1000, max_skew_ms=1000))
    trust.verify_update(data(v1), TrustedTime(lease - 1, max_skew_ms=0))


def test_the_default_skew_bound_is_one_minute_for_gate_and_adapters(v1: ReleaseBundle) -> None:
    """One bound for every consumer (``smf_assurance.subjects.release.DEFAULT_MAX_SKEW_MS``)."""
    lease = manifest_of(v1).lease_expires_at_ms
    ReleaseTrust(ROOT).verify_update(data(v1), TrustedTime(lease - 60_001))
    with pytest.raises(ExpiredReleaseError):
        ReleaseTrust(ROOT).verify_update(data(v1), TrustedTime(lease - 60_000))


def test_a_clock_at_exactly_the_seen_high_water_mark_is_trusted(v1: ReleaseBundle) -> None:
    state = accepted(v1)
    seen = TrustedTime(state.clock_high_water_ms - 1000, max_skew_ms=1000)  # latest == seen
    ReleaseTrust(ROOT, state).verify_stored(data(v1), seen)
    with pytest.raises(UntrustedClockError):
        ReleaseTrust(ROOT, state).verify_stored(
            data(v1), TrustedTime(state.clock_high_water_ms - 1001, max_skew_ms=1000)
        )


def test_a_release_from_the_future_means_the_clock_is_untrusted(v1: ReleaseBundle) -> None:
    issued = manifest_of(v1).issued_at_ms
    with pytest.raises(UntrustedClockError, match="after the clock"):
        ReleaseTrust(ROOT).verify_update(data(v1), TrustedTime(issued - 1001, max_skew_ms=1000))
    ReleaseTrust(ROOT).verify_update(data(v1), TrustedTime(issued - 1000, max_skew_ms=1000))


def test_a_clock_set_back_below_what_was_seen_is_untrusted(
    v1: ReleaseBundle, v2: ReleaseBundle
) -> None:
    seen = LastAccepted(**{**_fields(accepted(v1)), "clock_high_water_ms": NOW.now_ms + 10 * HOUR})
    with pytest.raises(UntrustedClockError, match="before the already observed"):
        ReleaseTrust(ROOT, seen).verify_update(data(v2), NOW)


def test_negative_skew_is_a_programming_error() -> None:
    with pytest.raises(ValueError, match="skew"):
        TrustedTime(T0, max_skew_ms=-1)


def test_check_in_force_uses_the_clock_then_the_lease(v1: ReleaseBundle) -> None:
    state = accepted(v1)
    check_in_force(state, NOW)
    with pytest.raises(ExpiredReleaseError):
        check_in_force(state, TrustedTime(state.lease_expires_at_ms))
    with pytest.raises(UntrustedClockError):
        check_in_force(state, NOW, high_water_ms=NOW.now_ms + HOUR)


# --- 8. revocation ------------------------------------------------------------------------


def _fields(state: LastAccepted) -> dict[str, Any]:
    return {name: getattr(state, name) for name in LastAccepted.__slots__}


def test_a_revoked_release_id_is_refused_even_with_a_higher_sequence(
    corpus: Path, v1: ReleaseBundle
) -> None:
    """A pre-signed release with a higher sequence (fast-forward) is stopped by revocation."""
    state = accepted(v1)
    revoked = LastAccepted(**{**_fields(state), "revoked_release_ids": frozenset({"rel-test-r2"})})
    v2 = build(corpus, now_ms=T0 + 10, prior=v1)
    with pytest.raises(RevokedReleaseError, match="rel-test-r2"):
        ReleaseTrust(ROOT, revoked).verify_update(data(v2), NOW)


def test_a_threshold_met_only_with_a_revoked_key_is_refused(
    corpus: Path, v1: ReleaseBundle
) -> None:
    state = LastAccepted(
        **{**_fields(accepted(v1)), "revoked_key_ids": frozenset({SIGNERS[1].key_id})}
    )
    two = build(corpus, [SIGNERS[0], SIGNERS[1]], now_ms=T0 + 10, prior=v1)
    with pytest.raises(RevokedReleaseError, match="revoked"):
        ReleaseTrust(ROOT, state).verify_update(data(two), NOW)
    three = build(corpus, SIGNERS, now_ms=T0 + 10, prior=v1)
    assert ReleaseTrust(ROOT, state).verify_update(data(three), NOW).sequence == 2


def test_a_release_cannot_revoke_its_own_signer(corpus: Path) -> None:
    bundle = build(corpus, SIGNERS[:2], revoke_key_ids=[SIGNERS[0].key_id])
    with pytest.raises(RevokedReleaseError):
        ReleaseTrust(ROOT).verify_update(data(bundle), NOW)


def test_revocations_accumulate_and_cannot_be_lifted(corpus: Path, v1: ReleaseBundle) -> None:
    v2 = build(corpus, SIGNERS, now_ms=T0 + 10, prior=v1, revoke_release_ids=["rel-bad"])
    state2 = accepted(v2, accepted(v1))
    assert state2.revoked_release_ids == {"rel-bad"}
    v3 = resign(
        build(corpus, SIGNERS, now_ms=T0 + 20, prior=v2),
        SIGNERS,
        revocations=Revocations(),  # leaves the revocation out
    )
    state3 = accepted(v3, state2)
    assert state3.revoked_release_ids == {"rel-bad"}
    bad = build(corpus, SIGNERS, now_ms=T0 + 30, prior=v3, release_id="rel-bad")
    with pytest.raises(RevokedReleaseError):
        ReleaseTrust(ROOT, state3).verify_update(data(bad), NOW)


# --- the order of the checks --------------------------------------------------------------


def test_signatures_are_checked_before_digests(corpus: Path, other_corpus: Path) -> None:
    single = build(corpus, [SIGNERS[0]])
    mixed = swap(single, enforcement=build(other_corpus).enforcement)
    with pytest.raises(ReleaseBelowThresholdError):
        ReleaseTrust(ROOT).verify_update(data(mixed), NOW)


def test_digests_are_checked_before_rollback(
    v1: ReleaseBundle, v2: ReleaseBundle, other_corpus: Path
) -> None:
    state = accepted(v2, accepted(v1))
    mixed = swap(v1, enforcement=build(other_corpus).enforcement)
    with pytest.raises(ReleaseDigestMismatchError):
        ReleaseTrust(ROOT, state).verify_update(data(mixed), NOW)


def test_rollback_is_checked_before_the_chain_and_the_lease(
    v1: ReleaseBundle, v2: ReleaseBundle
) -> None:
    state = accepted(v2, accepted(v1))
    late = TrustedTime(manifest_of(v1).lease_expires_at_ms + 1)
    with pytest.raises(ReleaseRollbackError):
        ReleaseTrust(ROOT, state).verify_update(data(v1), late)


def test_the_chain_is_checked_before_the_lease(corpus: Path, v1: ReleaseBundle) -> None:
    state = accepted(v1)
    loose = build(corpus, now_ms=T0 + 10, sequence=2, release_id="rel-loose")
    with pytest.raises(BrokenReleaseChainError):
        ReleaseTrust(ROOT, state).verify_update(
            data(loose), TrustedTime(manifest_of(loose).lease_expires_at_ms + 1)
        )


def test_the_lease_is_checked_before_revocation(corpus: Path) -> None:
    bundle = build(corpus, SIGNERS[:2], revoke_key_ids=[SIGNERS[0].key_id])
    with pytest.raises(ExpiredReleaseError):
        ReleaseTrust(ROOT).verify_update(
            data(bundle), TrustedTime(manifest_of(bundle).lease_expires_at_ms)
        )


# --- content: parsed only once authenticated -----------------------------------------------


def test_signed_artifacts_naming_another_release_are_refused(
    v1: ReleaseBundle, other_corpus: Path
) -> None:
    """Consistent digests, inconsistent content: a signer's mix-up, still refused."""
    other = build(other_corpus, release_id="rel-other")
    digests = msgspec.structs.replace(
        manifest_of(v1).digests, enforcement=manifest_of(other).digests.enforcement
    )
    bundle = swap(resign(v1, digests=digests), enforcement=other.enforcement)
    with pytest.raises(ReleaseContentError, match="names release rel-other"):
        ReleaseTrust(ROOT).verify_update(data(bundle), NOW)


def _signed_with(bundle: ReleaseBundle, artifact: str, raw: bytes) -> ReleaseBundle:
    """``bundle`` with ``artifact`` replaced by ``raw`` and a manifest naming its digest,
    signed by the trust root: the signers' own mistake, not a mix-and-match."""
    digests = msgspec.structs.replace(
        manifest_of(bundle).digests, **{artifact: sha256_identity(raw)}
    )
    return swap(resign(bundle, digests=digests), **{artifact: raw})


@pytest.mark.parametrize("artifact", ["enforcement", "analysis"])
@pytest.mark.parametrize(
    ("field", "value"),
    [("release_sequence", 2), ("recipe_id", sha256_identity(b"another recipe"))],
)
def test_a_signed_projection_naming_another_sequence_or_recipe_is_refused(
    v1: ReleaseBundle, artifact: str, field: str, value: object
) -> None:
    """A projection compiled for release #2 (or by another recipe) under manifest #1
    would be evaluated as #1's policy: both projections must name the manifest's
    release, sequence and recipe."""
    projection = json.loads(getattr(v1, artifact))
    projection[field] = value
    bundle = _signed_with(v1, artifact, canonical_bytes(projection))
    with pytest.raises(ReleaseContentError, match=f"{artifact} projection names release"):
        ReleaseTrust(ROOT).verify_update(data(bundle), NOW)


@pytest.mark.parametrize("artifact", ["enforcement", "analysis"])
def test_a_signed_projection_with_a_duplicate_key_is_refused(
    v1: ReleaseBundle, artifact: str
) -> None:
    """Two parsers may read two values from one signed projection with a duplicate
    key (msgspec takes the last, others the first): only the canonical form is used."""
    raw: bytes = getattr(v1, artifact)
    doubled = b'{"release_id":"rel-evil",' + raw[1:]
    assert msgspec.json.decode(doubled)["release_id"] == "rel-test"
    bundle = _signed_with(v1, artifact, doubled)
    with pytest.raises(ReleaseContentError, match="canonical"):
        ReleaseTrust(ROOT).verify_update(data(bundle), NOW)


def test_signed_but_non_canonical_artifacts_are_refused(v1: ReleaseBundle) -> None:
    spaced = json.dumps(json.loads(v1.registry), indent=2).encode()
    digests = msgspec.structs.replace(manifest_of(v1).digests, registry=sha256_identity(spaced))
    bundle = swap(resign(v1, digests=digests), registry=spaced)
    with pytest.raises(ReleaseContentError, match="canonical"):
        ReleaseTrust(ROOT).verify_update(data(bundle), NOW)


def test_a_signed_registry_that_does_not_decode_is_content_invalid(v1: ReleaseBundle) -> None:
    broken = b'{"entries":[],"schema":"smf.registry/0"}'
    digests = msgspec.structs.replace(manifest_of(v1).digests, registry=sha256_identity(broken))
    bundle = swap(resign(v1, digests=digests), registry=broken)
    with pytest.raises(ReleaseContentError):
        ReleaseTrust(ROOT).verify_update(data(bundle), NOW)


# --- the stored release, on restart ---------------------------------------------------------


def test_the_stored_release_reloads(v1: ReleaseBundle) -> None:
    state = accepted(v1)
    release = ReleaseTrust(ROOT, state).verify_stored(data(v1), NOW)
    assert release.manifest_hash == state.manifest_hash


def test_a_stored_copy_that_is_not_the_accepted_release_is_refused(
    v1: ReleaseBundle, v2: ReleaseBundle
) -> None:
    state = accepted(v1)
    with pytest.raises(ReleaseDigestMismatchError, match="not the accepted"):
        ReleaseTrust(ROOT, state).verify_stored(data(v2), NOW)


def test_nothing_stored_means_no_verified_release(v1: ReleaseBundle) -> None:
    with pytest.raises(NoVerifiedReleaseError):
        ReleaseTrust(ROOT).verify_stored(data(v1), NOW)


def test_an_expired_stored_release_is_not_used(v1: ReleaseBundle) -> None:
    state = accepted(v1)
    with pytest.raises(ExpiredReleaseError):
        ReleaseTrust(ROOT, state).verify_stored(data(v1), TrustedTime(state.lease_expires_at_ms))


def test_a_stored_release_whose_signer_was_since_revoked_is_not_used(v1: ReleaseBundle) -> None:
    state = LastAccepted(
        **{**_fields(accepted(v1)), "revoked_key_ids": frozenset({SIGNERS[0].key_id})}
    )
    with pytest.raises(RevokedReleaseError):
        ReleaseTrust(ROOT, state).verify_stored(data(v1), NOW)


def test_a_rotated_trust_root_no_longer_trusts_the_stored_release(v1: ReleaseBundle) -> None:
    state = accepted(v1)
    with pytest.raises(BadReleaseSignatureError):
        ReleaseTrust(root_of([OUTSIDER], 1), state).verify_stored(data(v1), NOW)


# --- reason codes, trust roots, keys -----------------------------------------------------------


REASON_CODES: dict[type[ReleaseCheckError], str] = {
    ReleaseCheckError: "release_untrusted",
    MalformedReleaseError: "release_malformed",
    BadReleaseSignatureError: "release_bad_signature",
    ReleaseBelowThresholdError: "release_below_threshold",
    ReleaseDigestMismatchError: "release_digest_mismatch",
    ReleaseRollbackError: "release_rollback",
    ReplayedReleaseError: "release_replayed",
    BrokenReleaseChainError: "release_chain_broken",
    ExpiredReleaseError: "release_expired",
    UntrustedClockError: "release_clock_untrusted",
    RevokedReleaseError: "release_revoked",
    ReleaseContentError: "release_content_invalid",
    NoVerifiedReleaseError: "no_verified_release",
}
"""Every release error and the reason code the product emits for it (verdicts, the
CLI, the adapters, the TypeScript twin): stable, so pinned here one by one."""


def test_every_threat_has_its_own_reason_code() -> None:
    """One hierarchy (STYLE.md, python-tuf): one class per threat under the shared
    ``ReleaseCheckError``, each with its own stable code."""
    codes = [error.reason_code for error in REASON_CODES]
    assert len(set(codes)) == len(codes)
    assert all(issubclass(error, ReleaseCheckError) for error in REASON_CODES)
    assert {error: error.reason_code for error in REASON_CODES} == REASON_CODES


def test_the_gate_only_refusals_refine_the_shared_hierarchy() -> None:
    """Replay is a rollback (TUF 5.4.3.1), so a caller catching the shared rollback
    error also catches it; the other gate-only threats stand beside the shared ones."""
    assert issubclass(ReplayedReleaseError, ReleaseRollbackError)
    for error in (
        BrokenReleaseChainError,
        RevokedReleaseError,
        ReleaseContentError,
        NoVerifiedReleaseError,
    ):
        assert error.__module__ == "smf_assurance.core.release_trust"
        assert error.__mro__[1] is ReleaseCheckError


def test_a_trust_root_must_be_able_to_reach_its_threshold() -> None:
    with pytest.raises(MalformedReleaseError, match="exceeds"):
        decode_trust_root(
            encode_trust_root(
                TrustRoot(
                    schema="smf.release-trust-root/1",
                    threshold=3,
                    keys=root_of(SIGNERS[:2], 1).keys,
                )
            )
        )


def test_a_trust_root_lists_each_key_once() -> None:
    keys = root_of(SIGNERS[:1], 1).keys
    doubled = TrustRoot(schema="smf.release-trust-root/1", threshold=2, keys=keys * 2)
    with pytest.raises(MalformedReleaseError, match="twice"):
        trust_root_keys(doubled)
    with pytest.raises(MalformedReleaseError, match="twice"):
        ReleaseTrust(doubled)


def test_a_trust_root_key_under_a_false_id_is_refused() -> None:
    record = root_of(SIGNERS[:1], 1).keys[0]
    forged = msgspec.structs.replace(record, key_id=SIGNERS[1].key_id)
    root = TrustRoot(schema="smf.release-trust-root/1", threshold=1, keys=(forged,))
    with pytest.raises(MalformedReleaseError, match="does not match"):
        trust_root_keys(root)


def test_a_trust_root_file_that_is_not_one_is_refused() -> None:
    with pytest.raises(MalformedReleaseError):
        decode_trust_root(b'{"schema":"smf.release-trust-root/1","threshold":0,"keys":[]}')


def test_release_keys_sort_in_sequence_order() -> None:
    assert release_key(2) < release_key(10) < release_key(2**40)
    assert release_key(1) == "release.0000000000000001"
    assert release_key(2**53 - 1) == "release.9007199254740991"
    for outside in (0, -1, 2**53):
        with pytest.raises(ValueError, match="positive"):
            release_key(outside)


def test_bucket_keys_are_read_newest_first_and_other_keys_dropped() -> None:
    keys = [release_key(2), "release.2", release_key(10), "other", release_key(1) + "x"]
    assert release_keys_newest_first(keys) == [release_key(10), release_key(2)]


# --- an in-memory floor (runtime adapters) -----------------------------------------------


def test_an_in_memory_floor_refuses_older_and_forked_releases(
    corpus: Path, v1: ReleaseBundle, v2: ReleaseBundle
) -> None:
    """TUF 5.4.3 for a consumer that keeps its floor in memory: the sequence never goes
    back, one sequence names one release, the same release again is fine."""
    one, two = (_authenticated(b) for b in (v1, v2))
    twin = _authenticated(build(corpus, now_ms=T0 + 99))  # sequence 1, another release
    floor = check_sequence_floor(one.manifest, one.manifest_hash, None)
    assert floor == SequenceFloor(1, one.manifest_hash)
    assert check_sequence_floor(one.manifest, one.manifest_hash, floor) == floor
    higher = check_sequence_floor(two.manifest, two.manifest_hash, floor)
    assert higher == SequenceFloor(2, two.manifest_hash)
    with pytest.raises(ReleaseRollbackError, match="below"):
        check_sequence_floor(one.manifest, one.manifest_hash, higher)
    with pytest.raises(ReleaseRollbackError, match="another release"):
        check_sequence_floor(twin.manifest, twin.manifest_hash, floor)


def _authenticated(bundle: ReleaseBundle) -> AuthenticatedRelease:
    return authenticate_release(data(bundle), trust_root_keys(ROOT), ROOT.threshold)


# -- what a gate reports of its releases ------------------------------------------------------


@pytest.mark.parametrize("message", structs_defined_in(contract), ids=lambda t: t.__name__)
def test_every_release_message_refuses_a_field_it_does_not_know(
    message: type[msgspec.Struct],
) -> None:
    """A publisher counts a gate's report as an adoption only as the gate meant it: a
    field one reader drops and another reads is refused by every release message."""
    with pytest.raises(msgspec.ValidationError, match="unknown field `smf_not_a_field`"):
        msgspec.json.decode(b'{"smf_not_a_field": 1}', type=message)


def _refusal(**fields: Any) -> dict[str, Any]:
    return {
        "origin": "kv:release.1@1",
        "reason_code": "release_signature_invalid",
        "detail": "",
        "at_ms": T0,
        "retryable": False,
        **fields,
    }


def _report(**fields: Any) -> dict[str, Any]:
    return {
        "schema": contract.RELEASE_REPORT_SCHEMA,
        "gate": "gate-1",
        "at_ms": T0,
        "active": None,
        "in_force": False,
        "refusals": [],
        **fields,
    }


_COUNTS = dict.fromkeys(
    ("evaluated", "disagreed", "recorded", "unrecorded", "dropped", "skipped", "failed"), 0
)
REPORT_BOUNDS: list[tuple[str, type[msgspec.Struct], dict[str, Any], dict[str, Any]]] = [
    (
        "refusals",
        contract.ReleaseReport,
        _report(refusals=[_refusal()] * 32),  # docs/SUBJECTS.md: its last 32 refusals
        _report(refusals=[_refusal()] * 33),
    ),
    (
        "text",
        contract.ReportedRefusal,
        _refusal(detail="d" * 300),
        _refusal(detail="d" * 301),
    ),
    ("count", contract.ShadowCounts, _COUNTS, {**_COUNTS, "dropped": -1}),
]


@pytest.mark.parametrize(
    ("message", "at", "past"), [b[1:] for b in REPORT_BOUNDS], ids=[b[0] for b in REPORT_BOUNDS]
)
def test_each_release_report_bound_holds_exactly(
    message: type[msgspec.Struct], at: dict[str, Any], past: dict[str, Any]
) -> None:
    """A report holds at most 32 refusals of at most 300 characters of text each, and
    never a negative count: a gate cannot make a publisher read an unbounded report."""
    msgspec.json.decode(msgspec.json.encode(at), type=message)
    with pytest.raises(msgspec.ValidationError):
        msgspec.json.decode(msgspec.json.encode(past), type=message)


def test_a_release_report_counts_only_when_a_trusted_gate_key_signed_it() -> None:
    """A publisher reports "published" only on a gate's signed word: the report of a
    trusted gate key opens as it was signed; one signed by any other key is refused."""
    report = msgspec.json.decode(msgspec.json.encode(_report()), type=contract.ReleaseReport)
    trusted = {GATE_KEY.key_id: GATE_KEY.verify_key}
    signed = contract.sign_release_report(report, GATE_KEY)
    assert contract.open_release_report(signed, trusted) == report
    with pytest.raises(dsse.SignatureError):
        contract.open_release_report(contract.sign_release_report(report, OUTSIDER), trusted)
