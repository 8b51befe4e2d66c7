"""A contract message with a field the contract does not define is refused where
it is decoded.

ARCHITECTURE.md, "Subjects are the public API": msgspec Structs that are
frozen and reject unknown fields. A decoder that ignored an unknown field
would half-read the message: a newer sender's restriction (a revocation, a
requirement) silently dropped, or a view with more in it than the reader
checked. Each case below feeds one unknown field through the path that
decodes that message in production, on real parts (a real nats-server and
JetStream where the message travels on the bus, real SQLite stores), next
to the same message without the field, which goes through:

- the approver's side: pending announcements as the ``approvals`` command
  lists them, the view and the resolution reply as the approver client
  reads them (it signs nothing after a view it could not read);
- the gate's side: signed resolutions and show requests at the approval
  desk, the normalized operation at the evaluate stage, the decision inside
  a dispatch request;
- releases: a bundle the gate verifies, a trust root file it loads, and the
  manifest of a prior release the publisher chains onto.

Signed payloads (resolutions, show requests, release manifests) are refused
by the gate even without the Struct's own check, because a decoded value
must re-encode to exactly the signed bytes (``dsse.open_struct``); the
publisher's chaining reads a manifest without that check, so there the
Struct is what refuses.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any, Final

import msgspec
import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg

from smf_assurance.approver.client import ApproverClient
from smf_assurance.approver.pending import AnnouncementsRefused, read_pending
from smf_assurance.core.decision import Decision
from smf_assurance.core.evaluator import evaluate
from smf_assurance.core.release_trust import ReleaseTrust, TrustedTime
from smf_assurance.governance.projections import load_policy_set
from smf_assurance.governance.releases import ReleaseError, load_trust_root, prior_of
from smf_assurance.governance.scenarios_catalog import load_scenarios
from smf_assurance.pipeline.chain.announcements import AnnouncementDesk
from smf_assurance.pipeline.chain.approvals import ApprovalDesk
from smf_assurance.pipeline.chain.contracts import DispatchRequest, EvaluateRequest
from smf_assurance.pipeline.chain.decide import EvaluateStage
from smf_assurance.pipeline.chain.dispatch import DispatchStage
from smf_assurance.pipeline.chain.transport import LocalStage, serve
from smf_assurance.pipeline.service import Requester, StageRefusal
from smf_assurance.pipeline.stores.approvals_sqlite import SqliteApprovalStore
from smf_assurance.pipeline.stores.ledger import Ledger
from smf_assurance.pipeline.stores.streams import ensure_gate_streams
from smf_assurance.subjects import dsse, names
from smf_assurance.subjects.approvals import (
    ApprovalBinding,
    ApprovalResolution,
    ApprovalView,
    PendingAnnouncement,
    ResolutionReply,
    ShowRequest,
    binding_digest,
)
from smf_assurance.subjects.canonical import canonical_bytes, identity_of
from smf_assurance.subjects.envelope import content_hash_of
from smf_assurance.subjects.keyed import PseudonymKey
from smf_assurance.subjects.keys import SigningKey
from smf_assurance.subjects.registry import KeyRegistry, RegistryFile, entry_for
from smf_assurance.subjects.release import (
    PAYLOAD_RELEASE_MANIFEST,
    MalformedReleaseError,
    ReleaseBundle,
    encode_trust_root,
)
from tests.support.approval_store import make_binding
from tests.support.builders import AT_MS, DEFAULT_TENANT, normalized_proposal
from tests.support.release_helpers import (
    HOUR,
    SIGNERS,
    T0,
    build,
    data,
    manifest_of,
    root_of,
    small_corpus,
)

APPROVER: Final = SigningKey.from_seed(b"\x31" * 32)
CONTENT: Final = "The brief, as filed."
EXTRA: Final = {"also": "a field the contract does not define"}


def with_extra(value: msgspec.Struct | dict[str, Any], *path: str) -> dict[str, Any]:
    """The JSON form of ``value`` with one unknown field added at ``path``."""
    document = value if isinstance(value, dict) else msgspec.to_builtins(value)
    node = document
    for part in path:
        node = node[part]
    node.update(EXTRA)
    return document


ARGUMENTS: Final = '{"court":"sdny"}'


def binding(label: str = "filing") -> ApprovalBinding:
    """The approval store's test binding, covering the content and the arguments the views
    show (the approver's check compares both)."""
    return msgspec.structs.replace(
        make_binding(label),
        content_hash=content_hash_of(CONTENT),
        canonical_args_hash=identity_of(json.loads(ARGUMENTS)),
    )


def announcement(label: str) -> PendingAnnouncement:
    bound = binding(label)
    return PendingAnnouncement(
        schema="smf.approval-pending/2",
        approval_id=bound.approval_id,
        tenant_id=bound.tenant_id,
        required_roles=bound.required_roles,
        required_approvals=bound.required_approvals,
        created_at_ms=bound.created_at_ms,
        expires_at_ms=bound.expires_at_ms,
        capability="external.transmit",
        channel="electronic_filing",
        locality="external",
        native_tool="court_efile",
        rule_ids=("urn:smf:rule:attorney-approval",),
        reason_codes=("attorney_approval_required_for_transmission",),
    )


def view() -> ApprovalView:
    bound = binding()
    return ApprovalView(
        schema="smf.approval-view/1",
        binding=bound,
        binding_digest=binding_digest(bound),
        state="pending",
        native_tool="court_efile",
        destination_address="sdny",
        content=CONTENT,
        arguments_json=ARGUMENTS,
    )


async def answer(nc: Client, subject: str, reply: Callable[[], bytes]) -> list[bytes]:
    """A responder on ``subject`` standing in for the gate's desk; returns what it got."""
    received: list[bytes] = []

    async def respond(msg: Msg) -> None:
        received.append(msg.data)
        await msg.respond(reply())

    await nc.subscribe(subject, cb=respond)
    return received


# --- the approver's side ------------------------------------------------------------


async def test_an_announcement_with_an_unknown_field_is_never_listed(nc: Client) -> None:
    js = nc.jetstream()
    await ensure_gate_streams(js)
    subject = names.approval_pending_subject(DEFAULT_TENANT)
    valid, odd = announcement("valid"), announcement("odd")
    await js.publish(subject, msgspec.json.encode(valid))
    await js.publish(subject, json.dumps(with_extra(odd)).encode())
    desk = AnnouncementDesk(js, lambda: KeyRegistry({}))  # the gate's side reads the stream

    async def listing(msg: Msg) -> None:
        await msg.respond(await desk.handle(msg.data, Requester(crossed=False, account=None)))

    sub = await nc.subscribe(names.APPROVAL_ANNOUNCEMENTS, cb=listing)
    listed = await read_pending(nc, DEFAULT_TENANT)
    assert [a.approval_id for a in listed] == [valid.approval_id]
    await sub.unsubscribe()
    # and a listing that carries more than the reader could read lists nothing
    extra = {"schema": "smf.approval-announcements-reply/1", "epoch": "", "next_after": 0}
    await answer(
        nc,
        names.APPROVAL_ANNOUNCEMENTS,
        lambda: json.dumps({**extra, "more": False, "announcements": [], "also": 1}).encode(),
    )
    with pytest.raises(AnnouncementsRefused, match="malformed_reply"):
        await read_pending(nc, DEFAULT_TENANT)


@pytest.mark.parametrize("path", [(), ("binding",)], ids=["view", "binding"])
async def test_a_view_with_an_unknown_field_is_refused_and_nothing_is_signed(
    nc: Client, path: tuple[str, ...]
) -> None:
    """The approver checks the content against the binding it was shown; a view
    carrying more than it could read is not a view it may sign on."""
    client = ApproverClient(nc, APPROVER, "attorney-ann")
    await answer(nc, names.APPROVAL_SHOW, lambda: json.dumps(with_extra(view(), *path)).encode())
    resolutions = await answer(nc, names.APPROVAL_RESOLVE, lambda: b"{}")
    with pytest.raises(msgspec.ValidationError, match="also"):
        await client.review_and_resolve(binding().approval_id, "allow-once")
    assert resolutions == []


async def test_a_valid_view_is_read_and_signed(nc: Client) -> None:
    """The control for the test above: the same view without the field goes through."""
    client = ApproverClient(nc, APPROVER, "attorney-ann")
    await answer(nc, names.APPROVAL_SHOW, lambda: msgspec.json.encode(view()))
    reply = ResolutionReply(
        schema="smf.resolution-reply/1",
        approval_id=binding().approval_id,
        accepted=True,
        state="executing",
    )
    resolutions = await answer(nc, names.APPROVAL_RESOLVE, lambda: msgspec.json.encode(reply))
    shown, answered = await client.review_and_resolve(binding().approval_id, "allow-once")
    assert shown == view()
    assert answered == reply
    assert len(resolutions) == 1


async def test_a_resolution_reply_with_an_unknown_field_is_refused(nc: Client) -> None:
    client = ApproverClient(nc, APPROVER, "attorney-ann")
    reply = ResolutionReply(
        schema="smf.resolution-reply/1",
        approval_id=binding().approval_id,
        accepted=False,
        state="pending",
        reason_codes=("self_approval",),
    )
    await answer(nc, names.APPROVAL_RESOLVE, lambda: json.dumps(with_extra(reply)).encode())
    with pytest.raises(msgspec.ValidationError, match="also"):
        await client.resolve(binding().approval_id, "allow-once", binding_digest(binding()))


# --- the gate's side ---------------------------------------------------------------------


@pytest.fixture
async def desk(nc: Client, tmp_path: Path) -> AsyncIterator[ApprovalDesk]:
    """The gate's approval desk on real stores, with ``APPROVER`` in its roster."""
    gate_key = SigningKey.from_seed(b"\x33" * 32)
    registry = KeyRegistry.from_file(
        RegistryFile(
            schema="smf.registry/1",
            entries=(
                entry_for(
                    APPROVER,
                    "attorney-ann",
                    "approver",
                    tenants=(DEFAULT_TENANT,),
                    licensed_roles=("licensed_attorney",),
                ),
            ),
        )
    )
    js = nc.jetstream()
    store = await SqliteApprovalStore.open(tmp_path / "approvals.db")
    ledger = await Ledger.open(tmp_path / "ledger.db", signer=gate_key)
    yield ApprovalDesk(
        store=store,
        nc=nc,
        js=js,
        registry=registry,
        ledger=ledger,
        dispatch=LocalStage(DispatchStage(js, gate_key, lambda: AT_MS)),
        policy_set=load_policy_set,
        clock=lambda: AT_MS,
        tenant_key=PseudonymKey(b"\x34" * 32),
        signer=gate_key,
    )
    await ledger.close()
    await store.close()


def _signed_payload(payload_type: str, document: dict[str, Any]) -> bytes:
    """``document`` as a canonical payload signed by ``APPROVER``."""
    envelope = dsse.sign(payload_type, canonical_bytes(document), [APPROVER])
    return dsse.encode_envelope(envelope)


async def test_a_signed_resolution_with_an_unknown_field_is_refused(desk: ApprovalDesk) -> None:
    resolution = ApprovalResolution(
        schema="smf.approval-resolution/1",
        approval_id=binding().approval_id,
        decision="allow-once",
        binding_digest=binding_digest(binding()),
        resolver_id="attorney-ann",
        resolved_at_ms=AT_MS,
    )
    odd = _signed_payload(names.PAYLOAD_RESOLUTION, with_extra(resolution))
    reply = msgspec.json.decode(await desk.handle_resolve(odd), type=ResolutionReply)
    assert (reply.accepted, reply.reason_codes) == (False, ("malformed_resolution",))
    plain = _signed_payload(names.PAYLOAD_RESOLUTION, msgspec.to_builtins(resolution))
    reply = msgspec.json.decode(await desk.handle_resolve(plain), type=ResolutionReply)
    assert reply.reason_codes == ("approval_not_found",)  # the control: read, then looked up


async def test_a_signed_show_request_with_an_unknown_field_is_refused(desk: ApprovalDesk) -> None:
    request = ShowRequest(
        schema="smf.approval-show/1",
        approval_id=binding().approval_id,
        resolver_id="attorney-ann",
        requested_at_ms=AT_MS,
    )
    odd = _signed_payload(names.PAYLOAD_SHOW_REQUEST, with_extra(request))
    with pytest.raises(StageRefusal) as refused:
        await desk.handle_show(odd)
    assert refused.value.reason_code == "malformed_resolution"
    with pytest.raises(StageRefusal) as refused:
        await desk.handle_show(
            _signed_payload(names.PAYLOAD_SHOW_REQUEST, msgspec.to_builtins(request))
        )
    assert refused.value.reason_code == "approval_not_found"  # the control


@pytest.mark.parametrize("path", [("decision",), ("decision", "requirements")])
async def test_a_decision_with_an_unknown_field_is_not_dispatched(
    nc: Client, path: tuple[str, ...]
) -> None:
    """An allowed decision that carries, say, a requirement this gate does not know
    is not dispatched on the part it could read."""
    scenario = next(s for s in load_scenarios() if s.name == "1-court-filing-approval")
    decision = evaluate(scenario.envelope, load_policy_set(), at_ms=AT_MS)
    request = DispatchRequest(
        decision=msgspec.structs.replace(decision, disposition="allow"),
        connector_id="court-efiling",
        native_tool="court_efile",
        arguments={"court": "sdny"},
        content=CONTENT,
        destination_address="sdny",
    )
    js = nc.jetstream()
    await ensure_gate_streams(js)
    stage = DispatchStage(js, SigningKey.from_seed(b"\x32" * 32), lambda: time.time_ns() // 10**6)
    handle = serve(stage, DispatchRequest)
    with pytest.raises(StageRefusal) as refused:
        await handle(json.dumps(with_extra(request, *path)).encode())
    assert refused.value.reason_code == "malformed_stage_request"
    assert (await js.stream_info(names.EXECUTE_STREAM)).state.messages == 0
    await handle(msgspec.json.encode(request))  # the control: without the field it goes out
    assert (await js.stream_info(names.EXECUTE_STREAM)).state.messages == 1


@pytest.mark.parametrize("path", [("envelope",), ("envelope", "data")])
async def test_a_normalized_operation_with_an_unknown_field_is_not_evaluated(
    path: tuple[str, ...],
) -> None:
    """The evaluate stage decides on what normalization produced, all of it."""
    normalized = normalized_proposal()
    request = EvaluateRequest(
        envelope=normalized.envelope,
        operation_hash=normalized.operation_hash,
        operation_id="op-1",
    )
    handle = serve(EvaluateStage(load_policy_set(), lambda: AT_MS), EvaluateRequest)
    with pytest.raises(StageRefusal) as refused:
        await handle(json.dumps(with_extra(request, *path)).encode())
    assert refused.value.reason_code == "malformed_stage_request"
    decision = msgspec.json.decode(await handle(msgspec.json.encode(request)), type=Decision)
    assert decision.operation_id == "op-1"  # the control: without the field it is decided


# --- releases ------------------------------------------------------------------------------

ROOT = root_of(SIGNERS, 2)


@pytest.fixture(scope="module")
def v1(tmp_path_factory: pytest.TempPathFactory) -> ReleaseBundle:
    return build(small_corpus(tmp_path_factory.mktemp("corpus") / "c"))


def test_a_bundle_with_an_unknown_field_is_malformed(v1: ReleaseBundle) -> None:
    document = with_extra(json.loads(data(v1)))
    with pytest.raises(MalformedReleaseError):
        ReleaseTrust(ROOT).verify_update(json.dumps(document).encode(), TrustedTime(T0 + HOUR))
    assert ReleaseTrust(ROOT).verify_update(data(v1), TrustedTime(T0 + HOUR)).sequence == 1


def test_a_trust_root_file_with_an_unknown_field_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "trust-root.json"
    path.write_text(json.dumps(with_extra(json.loads(encode_trust_root(ROOT)))))
    with pytest.raises(ReleaseError):
        load_trust_root(path)
    path.write_bytes(encode_trust_root(ROOT))
    assert load_trust_root(path) == ROOT


def _resigned_payload(bundle: ReleaseBundle, document: dict[str, Any]) -> ReleaseBundle:
    """``bundle`` whose manifest payload is the canonical ``document``, signed by the
    trust root."""
    envelope = dsse.sign(PAYLOAD_RELEASE_MANIFEST, canonical_bytes(document), list(SIGNERS[:2]))
    return msgspec.structs.replace(bundle, envelope=envelope)


@pytest.mark.parametrize(
    "path", [(), ("revocations",), ("digests",)], ids=["manifest", "revocations", "digests"]
)
def test_a_release_is_never_chained_onto_a_manifest_with_an_unknown_field(
    v1: ReleaseBundle, path: tuple[str, ...]
) -> None:
    """The publisher carries the prior release's revocations forward: reading a
    manifest while dropping what it does not know could drop a revocation (a
    ``revocations`` field of a newer format) from the next release."""
    odd = _resigned_payload(v1, with_extra(manifest_of(v1), *path))
    with pytest.raises(ReleaseError, match="does not decode"):
        prior_of(odd)
    with pytest.raises(MalformedReleaseError):
        ReleaseTrust(ROOT).verify_update(data(odd), TrustedTime(T0 + HOUR))
    control = _resigned_payload(v1, json.loads(base64.b64decode(v1.envelope.payload)))
    assert prior_of(control).manifest_hash == prior_of(v1).manifest_hash
