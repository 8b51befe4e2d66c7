"""A value that passed its check cannot be changed afterwards.

ARCHITECTURE.md, "Subjects are the public API": the contract's Structs are
frozen. Checks run once, at the edge (STYLE.md, msgspec), so everything
after a check trusts the value it checked: a verified manifest's sequence, a
verification's signer set, a decision's requirements, an approval binding's
expiry, a normalized envelope's locality. If any of them could be assigned
to in place, code holding the value after the check (a stage, a plugin, a
later bug) could loosen what was checked without anyone re-checking it.

Each value here comes out of the production path that checks it (release
verification, DSSE verification, normalization through the shipped mapper
table, evaluation under the shipped release, predicate compilation, the
approval messages' decoders), and every attempt to assign one of its fields is
refused. And every dataclass and Struct the trust code defines (``subjects/``
and ``core/``, found by walking their modules, not listed by hand) is
declared frozen, except the few named mutable accumulators, each with why it
holds nothing verified.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import pkgutil
from collections.abc import Callable, Iterator
from functools import cache
from types import ModuleType
from typing import Any, Final

import msgspec
import pytest

import smf_assurance.core
import smf_assurance.subjects
from smf_assurance.core.normalize import Normalized
from smf_assurance.core.predicates import Node, compile_predicate
from smf_assurance.core.projection import decode_enforcement, projection_bytes
from smf_assurance.core.release_trust import ReleaseTrust, TrustedTime, VerifiedRelease
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
from smf_assurance.subjects.release import (
    authenticate_release,
    check_sequence_floor,
    decode_bundle,
    decode_trust_root,
    encode_trust_root,
    trust_root_keys,
)
from tests.support.approval_rules import binding_of, held_filing
from tests.support.builders import (
    ALWAYS,
    AT_MS,
    enforcement_projection,
    make_policy,
    make_rule,
    normalized_proposal,
    shipped_table,
)
from tests.support.release_helpers import HOUR, SIGNERS, T0, build, data, root_of, small_corpus

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


def _compiled_nodes() -> dict[str, Node]:
    """One compiled node of each kind, as the compiler builds them from a rule's text."""
    root = compile_predicate(
        {
            "all": [
                {"eq": {"fact": "capability", "value": "external.transmit"}},
                {"any": [{"exists": {"fact": "destination.target_identity_hash"}}]},
                {"not": {"eq": {"fact": "destination.locality", "value": "internal"}}},
            ]
        },
        "urn:smf:rule:test:frozen",
    )
    nodes: dict[str, Node] = {}
    stack = [root]
    while stack:
        node = stack.pop()
        nodes[type(node).__name__] = node
        stack.extend(getattr(node, "children", ()))
        child = getattr(node, "child", None)
        if isinstance(child, Node):
            stack.append(child)
    return nodes


Source = Callable[[VerifiedRelease], Any]


def _compiled_node(kind: str) -> Source:
    return lambda _release: _compiled_nodes()[kind]


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
    "VerifiedRelease": lambda r: r,
    "LastAccepted": lambda r: r.accepted_state(TrustedTime(T0 + HOUR)),
    "TrustedTime": lambda r: TrustedTime(T0 + HOUR),
    "AuthenticatedRelease": lambda r: authenticate_release(
        r.bundle_bytes, trust_root_keys(ROOT), ROOT.threshold
    ),
    "SequenceFloor": lambda r: check_sequence_floor(r.manifest, r.manifest_hash, None),
    **{kind: _compiled_node(kind) for kind in ("_Leaf", "_All", "_Any", "_Not")},
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


@pytest.mark.claim("release-state.verified-state-frozen")
@pytest.mark.parametrize("name", sorted(CHECKED))
def test_a_checked_value_cannot_be_changed_afterwards(name: str, verified: VerifiedRelease) -> None:
    value = CHECKED[name](verified)
    assert type(value).__name__ == name.split(" ", maxsplit=1)[0]
    names_ = _field_names(value)
    assert names_, name
    for field in names_:
        with pytest.raises(AttributeError):
            setattr(value, field, getattr(value, field))


def _field_names(value: Any) -> list[str]:
    if dataclasses.is_dataclass(value):
        return [f.name for f in dataclasses.fields(value)]
    return [f.name for f in msgspec.structs.fields(value)]


MUTABLE: Final = {
    "smf_assurance.core.model_turns.StreamAssembler": "assembles a turn as it streams",
    "smf_assurance.core.model_turns.Turn": "the assembler's turn, before any check",
    "smf_assurance.core.model_turns.ToolCall": "a call being assembled from deltas",
    "smf_assurance.core.seen_once.SeenOnce": "the set of nonces seen, a store",
    "smf_assurance.core.shadow._Counts": "a shadow run's running tallies",
}
"""The trust code's mutable types: accumulators of what is not checked yet, or records
of what was seen, never a value a check passed."""


def _trust_modules() -> Iterator[ModuleType]:
    for package in (smf_assurance.subjects, smf_assurance.core):
        for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            yield importlib.import_module(info.name)


def _value_types() -> dict[str, type]:
    """Every dataclass and Struct the trust code defines, by qualified name."""
    found: dict[str, type] = {}
    for module in _trust_modules():
        for name, obj in vars(module).items():
            if not inspect.isclass(obj) or obj.__module__ != module.__name__:
                continue
            if dataclasses.is_dataclass(obj) or issubclass(obj, msgspec.Struct):
                found[f"{module.__name__}.{name}"] = obj
    return found


def _frozen(cls: type) -> bool:
    if dataclasses.is_dataclass(cls):
        params: Any = getattr(cls, "__dataclass_params__")  # noqa: B009
        return bool(params.frozen)
    return bool(getattr(cls, "__struct_config__").frozen)  # noqa: B009


@pytest.mark.claim("release-state.verified-state-frozen")
def test_every_value_type_of_the_trust_code_is_frozen() -> None:
    """A type added to, or unfrozen in, ``subjects/`` or ``core/`` fails here
    unless it is named mutable, with why; the named ones still exist."""
    found = _value_types()
    assert len(found) > 100  # the walk reached the modules
    unfrozen = sorted(name for name, cls in found.items() if not _frozen(cls))
    assert unfrozen == sorted(MUTABLE)


def test_every_checked_value_is_of_a_type_the_walk_finds() -> None:
    """The values above are the trust code's own types, so the walk covers them."""
    found = {cls.__name__ for cls in _value_types().values()}
    assert {n.split(" ", maxsplit=1)[0] for n in CHECKED} <= found
