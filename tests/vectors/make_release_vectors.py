# ruff: noqa: E501 - vector data: one case per line reads better than split literals
"""Write ``releases.json``: golden vectors for release bundle verification.

Run from the repository root: ``.venv/bin/python tests/vectors/make_release_vectors.py``.

Consumed by ``tests/unit/test_vectors_messages.py`` (Python: ``smf_assurance.subjects.release``'s
checks, through ``smf_assurance.adapters.hermes.release.ReleaseVerifier``) and by
``smf_assurance/adapters/openclaw/test/vectors.test.ts`` (TypeScript: ``src/contract/release.ts``'s
checks, through ``src/release.ts``'s ``ReleaseVerifier``).
As for ``messages.json`` the expected values come from neither implementation:
manifests and registries are canonical JSON written by ``json.dumps`` in the
subset where that is the JCS form (ASCII, integers only), digests are
``hashlib.sha256``, signatures come from the OpenSSL command line over a DSSE
PAE assembled here, with the RFC 8032 TEST 1 and TEST 2 keys as the trust root
(threshold 2). The expected outcome of each case is the reason code both
implementations must give (the gate's reason code for the same check).
"""

from __future__ import annotations

import base64
import json
from typing import Any

from make_message_vectors import (  # type: ignore[import-not-found]
    RFC8032_TEST1,
    RFC8032_TEST2,
    key_id,
    openssl_public,
    openssl_sign,
    pae,
    sha,
    simple_canonical,
    write,
)

PAYLOAD_RELEASE_MANIFEST = "application/vnd.smf.release-manifest+json;v=1"
CLOCK_MS = 1_800_000_000_000
"""The verifier's clock reading for every case."""
MAX_SKEW_MS = 60_000
ENFORCEMENT = b'{"schema":"demo-enforcement/1","rules":[]}'
ANALYSIS = b'{"schema":"demo-analysis/1","notes":[]}'


def public_record(seed_hex: str, principal: str) -> dict[str, str]:
    public = openssl_public(seed_hex)
    return {
        "kind": "smf.ed25519.public/1",
        "key_id": key_id(public),
        "principal": principal,
        "public_key": base64.b64encode(public).decode(),
    }


GATE = public_record(RFC8032_TEST2["seed_hex"], "gate")
RUNTIME = public_record(RFC8032_TEST1["seed_hex"], "openclaw-runtime")


def registry(entries: list[dict[str, Any]]) -> bytes:
    # simple_canonical is Any here (the sibling-script import is untyped for mypy).
    text: str = simple_canonical({"schema": "smf.registry/1", "entries": entries})
    return text.encode()


REGISTRY = registry(
    [
        {
            "key": GATE,
            "role": "gate",
            "runtime_id": None,
            "connector_id": None,
            "tenants": [],
            "licensed_roles": [],
        },
        {
            "key": RUNTIME,
            "role": "runtime",
            "runtime_id": "openclaw-demo",
            "connector_id": None,
            "tenants": [],
            "licensed_roles": [],
        },
    ]
)


def manifest(**overrides: Any) -> dict[str, Any]:
    value: dict[str, Any] = {
        "schema": "smf.release-manifest/1",
        "release_id": "demo-7",
        "sequence": 7,
        "prior_release_hash": None,
        "issued_at_ms": CLOCK_MS - 3_600_000,
        "lease_expires_at_ms": CLOCK_MS + 86_400_000,
        "recipe_id": "sha256:" + "ab" * 32,
        "digests": {
            "enforcement": sha(ENFORCEMENT),
            "analysis": sha(ANALYSIS),
            "registry": sha(REGISTRY),
        },
        "revocations": {"key_ids": [], "release_ids": []},
    }
    value.update(overrides)
    return value


def bundle(
    payload: bytes,
    signers: list[str],
    *,
    signed_payload: bytes | None = None,
    registry_bytes: bytes = REGISTRY,
) -> str:
    """The bundle as JSON text; ``signed_payload``: what the signatures were made over."""
    message = pae(PAYLOAD_RELEASE_MANIFEST, payload if signed_payload is None else signed_payload)
    sigs = []
    for seed in signers:
        public = openssl_public(seed)
        sigs.append(
            {"keyid": key_id(public), "sig": base64.b64encode(openssl_sign(seed, message)).decode()}
        )
    return json.dumps(
        {
            "schema": "smf.release-bundle/1",
            "envelope": {
                "payload": base64.b64encode(payload).decode(),
                "payloadType": PAYLOAD_RELEASE_MANIFEST,
                "signatures": sigs,
            },
            "enforcement": base64.b64encode(ENFORCEMENT).decode(),
            "analysis": base64.b64encode(ANALYSIS).decode(),
            "registry": base64.b64encode(registry_bytes).decode(),
        },
        separators=(",", ":"),
    )


def releases() -> dict[str, Any]:
    both = [RFC8032_TEST1["seed_hex"], RFC8032_TEST2["seed_hex"]]
    good = simple_canonical(manifest()).encode()
    edited = simple_canonical(manifest(release_id="demo-7-evil")).encode()
    expired = simple_canonical(manifest(lease_expires_at_ms=CLOCK_MS + MAX_SKEW_MS - 1)).encode()
    later = simple_canonical(manifest(issued_at_ms=CLOCK_MS + MAX_SKEW_MS + 1)).encode()
    spaced = json.dumps(manifest(), sort_keys=True).encode()  # not the canonical form
    other_registry = registry(
        [
            {
                "key": RUNTIME,
                "role": "gate",
                "runtime_id": None,
                "connector_id": None,
                "tenants": [],
                "licensed_roles": [],
            }
        ]
    )
    cases = [
        {
            "name": "accepted",
            "bundle": bundle(good, both),
            "expect": "accepted",
            "release_id": "demo-7",
            "sequence": 7,
            "manifest_hash": sha(good),
            "gate_key_ids": [GATE["key_id"]],
        },
        {
            "name": "bad_signature_edited_manifest",
            "bundle": bundle(edited, both, signed_payload=good),
            "expect": "release_bad_signature",
        },
        {
            "name": "bad_signature_outsider",
            "bundle": bundle(good, [RFC8032_TEST2["seed_hex"]]).replace(
                GATE["key_id"], "ed25519:" + "0" * 64
            ),
            "expect": "release_bad_signature",
        },
        {
            "name": "below_threshold_one_key",
            "bundle": bundle(good, [RFC8032_TEST1["seed_hex"]]),
            "expect": "release_below_threshold",
        },
        {
            "name": "digest_mismatch_registry",
            "bundle": bundle(good, both, registry_bytes=other_registry),
            "expect": "release_digest_mismatch",
        },
        {
            "name": "expired_within_skew",
            "bundle": bundle(expired, both),
            "expect": "release_expired",
        },
        {
            "name": "issued_after_the_clock",
            "bundle": bundle(later, both),
            "expect": "release_clock_untrusted",
        },
        {
            "name": "manifest_not_canonical",
            "bundle": bundle(spaced, both),
            "expect": "release_malformed",
        },
        {
            "name": "not_a_bundle",
            "bundle": '{"schema":"smf.release-bundle/1"}',
            "expect": "release_malformed",
        },
    ]
    return {
        "comment": "Release bundle verification (smf_assurance/subjects/release.py; smf_assurance/adapters/openclaw/src/release.ts). Generated by make_release_vectors.py.",
        "payload_type": PAYLOAD_RELEASE_MANIFEST,
        "trust_root": {
            "schema": "smf.release-trust-root/1",
            "threshold": 2,
            "keys": [
                RUNTIME | {"principal": "release-signer-1"},
                GATE | {"principal": "release-signer-2"},
            ],
        },
        "clock_ms": CLOCK_MS,
        "max_skew_ms": MAX_SKEW_MS,
        "cases": cases,
    }


if __name__ == "__main__":
    write("releases.json", releases())
