"""A value that passed its check cannot be changed afterwards (issue 18).

ARCHITECTURE.md, "Subjects are the public API": the contract's Structs are
frozen. Checks run once, at the edge (STYLE.md, msgspec), so everything
after a check trusts the value it checked: a verified manifest's sequence, a
verification's signer set, a decision's requirements, an approval binding's
expiry, a normalized envelope's locality. If any of them could be assigned
to in place, code holding the value after the check (a stage, a plugin, a
later bug) could loosen what was checked without anyone re-checking it.

Each value here comes out of the production path that checks it (release
verification, DSSE verification, normalization through the shipped mapper
table, evaluation under the shipped release, the approval messages'
decoders), and every attempt to assign one of its fields is refused.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import Any, Final

import msgspec
import pytest

from smf_assurance.pipeline.core.normalize import Normalized
from smf_assurance.pipeline.core.projection import decode_enforcement, projection_bytes
from smf_assurance.pipeline.core.release_trust import ReleaseTrust, TrustedTime, VerifiedRelease
from smf_assurance.subjects import dsse, names
from smf_assurance.subjects.approvals import (
    ApprovalResolution,
    ApprovalView,
    PendingAnnouncement,
    ResolutionReply,
    ShowRequest,
    binding_digest,
)
from smf_assurance.subjects.keys import SigningKey
from smf_assurance.subjects.release import decode_bundle, decode_trust_root, encode_trust_root
from tests.builders import (
    ALWAYS,
    AT_MS,
    enforcement_projection,
    make_policy,
    make_rule,
    normalized_proposal,
    shipped_table,
)
from tests.release_helpers import HOUR, SIGNERS, T0, build, data, root_of, small_corpus
from tests.test_approval_rules import binding_of, held_filing

APPROVER: Final = SigningKey.from_seed(b"\x41" * 32)
ROOT: Final = root_of(SIGNERS, 2)


@pytest.fixture(scope="module")
def verified(tmp_path_factory: pytest.TempPathFactory) -> VerifiedRelease:
    bundle = build(small_corpus(tmp_path_factory.mktemp("corpus") / "c"))
    return ReleaseTrust(ROOT).verify_update(data(bundle), TrustedTime(T0 + HOUR))


@cache
def normalized_filing() -> Normalized:
    return normalized_proposal(
        native_tool="court_efile", arguments={"court": "sdny", "document": "brief.pdf"}
    )


def _signed(payload_type: str, value: msgspec.Struct) -> tuple[Any, dsse.Verified]:
    envelope = dsse.decode_envelope(
        dsse.encode_envelope(dsse.sign_struct(payload_type, value, [APPROVER]))
    )
    return dsse.open_struct(
        envelope, {APPROVER.key_id: APPROVER.verify_key}, type(value), payload_type
    )


@cache
def approval_messages() -> dict[str, msgspec.Struct]:
    """Each approval message as its receiver decodes it."""
    held = held_filing()
    decision = held.decision
    binding = binding_of(held)
    digest = binding_digest(binding)
    resolution, verified = _signed(
        names.PAYLOAD_RESOLUTION,
        ApprovalResolution(
            schema="smf.approval-resolution/1",
            approval_id=binding.approval_id,
            decision="allow-once",
            binding_digest=digest,
            resolver_id="attorney-ann",
            resolved_at_ms=AT_MS,
        ),
    )
    show, _ = _signed(
        names.PAYLOAD_SHOW_REQUEST,
        ShowRequest(
            schema="smf.approval-show/1",
            approval_id=binding.approval_id,
            resolver_id="attorney-ann",
            requested_at_ms=AT_MS,
        ),
    )

    def received(value: msgspec.Struct) -> msgspec.Struct:
        return msgspec.json.decode(msgspec.json.encode(value), type=type(value))

    announcement = PendingAnnouncement(
        schema="smf.approval-pending/2",
        approval_id=binding.approval_id,
        tenant_id=binding.tenant_id,
        required_roles=binding.required_roles,
        required_approvals=binding.required_approvals,
        created_at_ms=binding.created_at_ms,
        expires_at_ms=binding.expires_at_ms,
        capability="external.transmit",
        channel="electronic_filing",
        locality="external",
        native_tool="court_efile",
        rule_ids=decision.rule_ids,
        reason_codes=decision.reason_codes,
    )
    view = ApprovalView(
        schema="smf.approval-view/1",
        binding=binding,
        binding_digest=digest,
        state="pending",
        native_tool="court_efile",
        destination_address=held.destination_address,
        content=held.content,
        arguments_json="{}",
    )
    reply = ResolutionReply(
        schema="smf.resolution-reply/1", approval_id=binding.approval_id, accepted=True, state="x"
    )
    return {
        "Decision": decision,
        "Requirements": decision.requirements,
        "ApprovalBinding": binding,
        "ApprovalResolution": resolution,
        "Verified (resolution)": verified,
        "ShowRequest": show,
        "PendingAnnouncement": received(announcement),
        "ApprovalView": received(view),
        "ResolutionReply": received(reply),
    }


def _requirement_spec() -> msgspec.Struct:
    policy = make_policy("p", "r", effect="conditional", requirements={"approval_count": 1})
    raw = projection_bytes(enforcement_projection([make_rule("r", ALWAYS)], [policy]))
    return decode_enforcement(raw).policies[0].requirements


Source = Callable[[VerifiedRelease], Any]


def _approval_message(name: str) -> Source:
    return lambda _release: approval_messages()[name]


CHECKED: Final[dict[str, Source]] = {
    "ReleaseManifest": lambda r: r.manifest,
    "ReleaseDigests": lambda r: r.manifest.digests,
    "Revocations": lambda r: r.manifest.revocations,
    "ReleaseBundle": lambda r: decode_bundle(r.bundle_bytes),
    "Envelope": lambda r: decode_bundle(r.bundle_bytes).envelope,
    "Signature": lambda r: decode_bundle(r.bundle_bytes).envelope.signatures[0],
    "TrustRoot": lambda r: decode_trust_root(encode_trust_root(ROOT)),
    "MapperTable": lambda r: shipped_table(),
    "ToolMapping": lambda r: shipped_table().tools["court_efile"],
    "Normalized": lambda r: normalized_filing(),
    "OperationEnvelope": lambda r: normalized_filing().envelope,
    "Effects": lambda r: normalized_filing().envelope.effects,
    "Destination": lambda r: normalized_filing().envelope.destination,
    "Data": lambda r: normalized_filing().envelope.data,
    "Professional": lambda r: normalized_filing().envelope.professional,
    "Workflow": lambda r: normalized_filing().envelope.workflow,
    "Runtime": lambda r: normalized_filing().envelope.runtime,
    "RequirementSpec": lambda r: _requirement_spec(),
    **{
        name: _approval_message(name)
        for name in (
            "Decision",
            "Requirements",
            "ApprovalBinding",
            "ApprovalResolution",
            "Verified (resolution)",
            "ShowRequest",
            "PendingAnnouncement",
            "ApprovalView",
            "ResolutionReply",
        )
    },
}
"""Where each checked value comes from, by the name of its type."""


@pytest.mark.parametrize("name", sorted(CHECKED))
def test_a_checked_value_cannot_be_changed_afterwards(name: str, verified: VerifiedRelease) -> None:
    value = CHECKED[name](verified)
    fields = msgspec.structs.fields(value)
    assert fields, name
    for field in fields:
        with pytest.raises(AttributeError):
            setattr(value, field.name, getattr(value, field.name))
