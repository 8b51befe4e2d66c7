"""Builders for signed releases in tests.

Deterministic keys, a small synthetic corpus, and helpers to sign arbitrary
manifests or swap one artifact of a bundle, so each test changes exactly the
one thing its threat is about. Releases are built with the real
``smf_assurance.governance.releases.build_release`` (the real compiler, the real DSSE signing).
"""

from __future__ import annotations

import base64
import json
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

import msgspec
import nats

from smf_assurance.governance.projections import SCENARIO_CORPUS, package_path
from smf_assurance.governance.releases import (
    PriorRelease,
    build_release,
    make_trust_root,
    prior_of,
    publish_to_bucket,
)
from smf_assurance.ops.local.defaults import PUBLISHER
from smf_assurance.ops.local.state import StateDir
from smf_assurance.subjects import dsse
from smf_assurance.subjects.bus_access import CLIENT_API
from smf_assurance.subjects.keys import SigningKey, public_record
from smf_assurance.subjects.registry import encode_registry, entry_for
from smf_assurance.subjects.release import (
    PAYLOAD_RELEASE_MANIFEST,
    ReleaseBundle,
    ReleaseManifest,
    TrustRoot,
    encode_bundle,
)
from tests.support.builders import make_policy, make_release, make_rule, write_corpus

T0: Final = 1_795_953_600_000
"""2026-11-29T12:00:00Z, the test clock's origin."""
HOUR: Final = 3_600_000

SIGNERS: Final = tuple(SigningKey.from_seed(bytes([n]) * 32) for n in (1, 2, 3))
OUTSIDER: Final = SigningKey.from_seed(b"\x07" * 32)
RUNTIME_KEY: Final = SigningKey.from_seed(b"\x09" * 32)
GATE_KEY: Final = SigningKey.from_seed(b"\x0a" * 32)


def root_of(keys: Sequence[SigningKey], threshold: int) -> TrustRoot:
    return make_trust_root(
        [public_record(key, f"release-signer-{n}") for n, key in enumerate(keys)], threshold
    )


def registry(*, runtime_id: str = "rt-test", gate: bool = True) -> bytes:
    """A runtime and (unless ``gate`` is False) the gate key whose verdicts it reads."""
    runtime = entry_for(RUNTIME_KEY, "runtime-test", "runtime", runtime_id=runtime_id)
    gates = (entry_for(GATE_KEY, "gate-test", "gate"),) if gate else ()
    return encode_registry((runtime, *gates))


def small_corpus(directory: Path, *, release_id: str = "rel-test", reason: str = "held") -> Path:
    """A two-rule synthetic corpus; ``reason`` changes the floor policy's reason code."""
    return write_corpus(
        directory,
        [
            make_rule("hold", {"eq": {"fact": "workflow.legal_hold", "value": True}}),
            make_rule("read"),
        ],
        [
            make_policy("floor.hold", "hold", layer="smf_safety_floor", reason_code=reason),
            make_policy("customer.read", "read", layer="customer", effect="allow"),
        ],
        make_release(release_id),
    )


def build(
    corpus: Path,
    signers: Sequence[SigningKey] = SIGNERS[:2],
    *,
    now_ms: int = T0,
    prior: ReleaseBundle | PriorRelease | None = None,
    registry_bytes: bytes | None = None,
    **options: Any,
) -> ReleaseBundle:
    """A release of ``corpus`` issued at ``now_ms``, chained to ``prior`` if given."""
    chained = prior_of(prior) if isinstance(prior, ReleaseBundle) else prior
    return build_release(
        corpus,
        list(signers),
        registry() if registry_bytes is None else registry_bytes,
        now_ms=now_ms,
        prior=chained,
        **options,
    )


def data(bundle: ReleaseBundle) -> bytes:
    return encode_bundle(bundle)


def manifest_of(bundle: ReleaseBundle) -> ReleaseManifest:
    return msgspec.json.decode(base64.b64decode(bundle.envelope.payload), type=ReleaseManifest)


def resign(
    bundle: ReleaseBundle, signers: Sequence[SigningKey] = SIGNERS[:2], **changes: Any
) -> ReleaseBundle:
    """The bundle with its manifest changed by ``changes`` and signed again."""
    manifest = msgspec.structs.replace(manifest_of(bundle), **changes)
    envelope = dsse.sign_struct(PAYLOAD_RELEASE_MANIFEST, manifest, list(signers))
    return msgspec.structs.replace(bundle, envelope=envelope)


def swap(bundle: ReleaseBundle, **artifacts: bytes | dsse.Envelope) -> ReleaseBundle:
    """The bundle with artifacts replaced and the signed manifest left as it was."""
    return msgspec.structs.replace(bundle, **artifacts)


def scenario_corpus(directory: Path, *, release_id: str, legal_hold_reason: str) -> Path:
    """A copy of the shipped scenario corpus with its own release id and with the
    legal-hold floor policy's reason code set to ``legal_hold_reason``, so two
    releases decide the same proposal observably differently."""
    shutil.copytree(package_path(SCENARIO_CORPUS), directory)
    release = json.loads((directory / "release.json").read_text())
    release["release_id"] = release_id
    (directory / "release.json").write_text(json.dumps(release))
    policies = json.loads((directory / "policies.json").read_text())
    hits = [p for p in policies if p["policy_id"] == "floor.legal-hold"]
    assert len(hits) == 1, "the shipped corpus has no floor.legal-hold policy"
    hits[0]["reason_code"] = legal_hold_reason
    (directory / "policies.json").write_text(json.dumps(policies))
    return directory


async def publish_as_publisher(url: str, state: StateDir, bundle: ReleaseBundle) -> None:
    """Put ``bundle`` into the ``SMF_RELEASES`` bucket as the state's release publisher.

    On a bus with authorization only the publisher (and the operator)
    may write the bucket; the gate reads it and cannot."""
    credential = state.existing_credential(PUBLISHER)
    assert credential is not None, "the state directory has no publisher credential"
    nc = await nats.connect(url, **credential.connect_options())
    try:
        # outside the gate's account JetStream is reached under the client prefix
        await publish_to_bucket(nc.jetstream(prefix=CLIENT_API), bundle)
    finally:
        await nc.close()
