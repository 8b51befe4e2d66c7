"""The one check every signed request passes (``pipeline.desks.signed``): each fault
refused with its own reason code, the endpoint's names only where it has them."""

from __future__ import annotations

from typing import Final

import pytest

from smf_assurance.pipeline.desks.signed import check_fresh, check_runtime_signer, open_request
from smf_assurance.pipeline.service import StageRefusal
from smf_assurance.subjects import dsse, names
from smf_assurance.subjects.approvals import ShowRequest
from smf_assurance.subjects.keys import SigningKey
from smf_assurance.subjects.registry import REGISTRY_SCHEMA, KeyRegistry, RegistryFile, entry_for

APPROVER: Final = SigningKey.from_seed(b"\x31" * 32)
RUNTIME: Final = SigningKey.from_seed(b"\x32" * 32)
OUTSIDER: Final = SigningKey.from_seed(b"\x33" * 32)
REGISTRY: Final = KeyRegistry.from_file(
    RegistryFile(
        schema=REGISTRY_SCHEMA,
        entries=(
            entry_for(APPROVER, "attorney-ann", "approver"),
            entry_for(RUNTIME, "runtime-one", "runtime", runtime_id="rt-1"),
        ),
    )
)
REQUEST: Final = ShowRequest(
    schema="smf.approval-show/1",
    approval_id="sha256:" + "a" * 64,
    resolver_id="attorney-ann",
    requested_at_ms=1_000,
)


def signed(key: SigningKey, payload_type: str = names.PAYLOAD_SHOW_REQUEST) -> bytes:
    return dsse.encode_envelope(dsse.sign_struct(payload_type, REQUEST, [key]))


def refusal(data: bytes, *, too_large: str = "", wrong_type: str = "") -> tuple[str, str]:
    """The code and detail an endpoint that names its malformed requests
    ``malformed_request`` refuses ``data`` with."""
    with pytest.raises(StageRefusal) as caught:
        open_request(
            data,
            REGISTRY,
            ShowRequest,
            names.PAYLOAD_SHOW_REQUEST,
            malformed="malformed_request",
            too_large=too_large,
            wrong_type=wrong_type,
            max_size=2048,
        )
    return caught.value.reason_code, caught.value.detail


def test_a_registered_signer_opens_the_request_and_is_named() -> None:
    request, signers = open_request(
        signed(APPROVER),
        REGISTRY,
        ShowRequest,
        names.PAYLOAD_SHOW_REQUEST,
        malformed="malformed_request",
    )
    assert request == REQUEST
    assert [p.name for p in signers] == ["attorney-ann"]


def tampered() -> bytes:
    envelope = dsse.sign_struct(names.PAYLOAD_SHOW_REQUEST, REQUEST, [APPROVER])
    other = dsse.sign_struct(names.PAYLOAD_SHOW_REQUEST, REQUEST, [RUNTIME])
    # the approver's key id over the runtime's signature: names a trusted key, verifies not
    forged = dsse.Envelope(
        payload=envelope.payload,
        payload_type=envelope.payload_type,
        signatures=(dsse.Signature(keyid=APPROVER.key_id, sig=other.signatures[0].sig),),
    )
    return dsse.encode_envelope(forged)


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (signed(OUTSIDER), "unknown_signer"),
        (tampered(), "bad_signature"),
        (signed(APPROVER, names.PAYLOAD_RESOLUTION), "wrong_payload_type"),
        (b"not an envelope", "malformed_request"),
        (b" " * 4096, "malformed_request"),
    ],
    ids=["unknown-signer", "forged", "other-purpose", "malformed", "oversized"],
)
def test_each_fault_is_refused_with_its_own_code(data: bytes, reason: str) -> None:
    code, detail = refusal(data)
    assert code == reason
    assert detail.endswith("Error")  # the DSSE error class, never the payload


def test_an_endpoint_names_what_it_expected() -> None:
    assert refusal(b" " * 4096, too_large="request_too_large")[0] == "request_too_large"
    assert refusal(b"{}", too_large="request_too_large")[0] == "malformed_request"
    other = signed(APPROVER, names.PAYLOAD_RESOLUTION)
    assert refusal(other, wrong_type="bad_signature")[0] == "bad_signature"
    assert refusal(signed(OUTSIDER), wrong_type="bad_signature")[0] == "unknown_signer"


def test_only_the_trusted_keys_of_an_endpoint_count() -> None:
    with pytest.raises(StageRefusal, match="unknown_signer"):
        open_request(
            signed(APPROVER),
            REGISTRY,
            ShowRequest,
            names.PAYLOAD_SHOW_REQUEST,
            malformed="malformed_request",
            trusted=REGISTRY.trusted("runtime"),
        )


def test_a_runtime_speaks_only_for_itself() -> None:
    runtime, approver = REGISTRY.principals[RUNTIME.key_id], REGISTRY.principals[APPROVER.key_id]
    check_runtime_signer([runtime], "rt-1")
    with pytest.raises(StageRefusal, match="runtime_identity_mismatch"):
        check_runtime_signer([runtime], "rt-2")
    with pytest.raises(StageRefusal, match="signer_role_mismatch"):
        check_runtime_signer([approver], "rt-1")
    with pytest.raises(StageRefusal, match="signer_role_mismatch"):
        check_runtime_signer([runtime], "rt-1", "launcher")
    with pytest.raises(StageRefusal, match="runtime_identity_mismatch"):
        check_runtime_signer([approver], "rt-1", None)


@pytest.mark.parametrize("issued", [10_000 - 500, 10_000, 10_000 + 500])
def test_a_request_within_the_window_either_side_is_fresh(issued: int) -> None:
    check_fresh(issued, 10_000, 500, "stale_request")


@pytest.mark.parametrize("issued", [10_000 - 501, 10_000 + 501])
def test_a_request_outside_the_window_is_stale(issued: int) -> None:
    with pytest.raises(StageRefusal, match="stale_request"):
        check_fresh(issued, 10_000, 500, "stale_request")
