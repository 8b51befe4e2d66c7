"""The pure approval rules of the desk, without a bus
(smf_assurance/core/approval_rules.py).

ARCHITECTURE.md, "Exact-action approval": the binding covers what will
actually be sent; the resolver must hold every required role in the governed
roster for the binding's tenant and must not be the requesting actor; only
the party an order was given to settles it; a report that the executed
parameters were not the approved ones breaks the binding. The checks are the
pure functions of ``smf_assurance/core/approval_rules.py``; the desk's bus tests
(``tests/bus/test_approval_desk.py``) prove them end to end, these prove each
rule alone, fast enough to run against every mutant of it.

Real parts: a proposal normalized through the shipped scripted mapper table,
evaluated under the shipped scenario release, a registry of real keys.
"""

from __future__ import annotations

from typing import Any, Final, get_args

import msgspec
import pytest

from smf_assurance.core.approval_rules import (
    BINDING_BROKEN,
    PARAMS_MISMATCH,
    ApprovalRuleError,
    HeldAction,
    SelfApprovalError,
    approver_of,
    bind,
    check_entitled,
    check_may_resolve,
    executor_of,
    settlement,
    signed_by_executor,
)
from smf_assurance.core.decision import Decision
from smf_assurance.pipeline.stores.approvals import BindingInvalid, TtlExceeded, admit_binding
from smf_assurance.subjects import approvals, dsse
from smf_assurance.subjects.approvals import (
    DENY_REASONS,
    MAX_TTL_MS,
    AnnouncementsReply,
    AnnouncementsRequest,
    ApprovalResolution,
    ApprovalView,
    AskAgain,
    DenyReason,
    KeptAnnouncement,
    OutcomeMismatchError,
    PendingAnnouncement,
    ReRequestReply,
    TrackedApproval,
    TrackRequest,
    approval_id_for,
    binding_digest,
    deny_reason_code,
    open_ask_again,
    open_outcome,
    sign_ask_again,
    sign_outcome,
)
from smf_assurance.subjects.canonical import identity_of
from smf_assurance.subjects.envelope import content_hash_of, destination_identity_of
from smf_assurance.subjects.keys import SigningKey
from smf_assurance.subjects.messages import ExecutionReport, Verdict, order_id_for
from smf_assurance.subjects.registry import KeyRegistry, Principal, RegistryFile, entry_for
from tests.support.approval_rules import binding_of, held_filing
from tests.support.builders import AT_MS, DEFAULT_TENANT, fake_identity
from tests.support.structs import structs_defined_in

ANN: Final = SigningKey.from_seed(b"\x21" * 32)
BOB: Final = SigningKey.from_seed(b"\x22" * 32)
CONNECTOR: Final = SigningKey.from_seed(b"\x23" * 32)
RUNTIME: Final = SigningKey.from_seed(b"\x24" * 32)
OTHER_RUNTIME: Final = SigningKey.from_seed(b"\x25" * 32)
CAROL: Final = SigningKey.from_seed(b"\x26" * 32)
RUNTIME_NAMING_CONNECTOR: Final = SigningKey.from_seed(b"\x27" * 32)
CONNECTOR_NAMING_RUNTIME: Final = SigningKey.from_seed(b"\x28" * 32)

REGISTRY: Final = KeyRegistry.from_file(
    RegistryFile(
        schema="smf.registry/1",
        entries=(
            entry_for(
                ANN,
                "attorney-ann",
                "approver",
                tenants=(DEFAULT_TENANT,),
                licensed_roles=("licensed_attorney", "partner"),
            ),
            entry_for(
                BOB, "paralegal-bob", "approver", tenants=(DEFAULT_TENANT,), licensed_roles=()
            ),
            entry_for(CONNECTOR, "court-connector", "connector", connector_id="court-efiling"),
            entry_for(RUNTIME, "runtime-test", "runtime", runtime_id="rt-test"),
            entry_for(OTHER_RUNTIME, "runtime-other", "runtime", runtime_id="rt-other"),
            entry_for(
                CAROL,
                "attorney-carol",
                "approver",
                tenants=(DEFAULT_TENANT,),
                licensed_roles=("licensed_attorney",),
            ),
            # Entries whose optional ids name another role's party: the role decides.
            entry_for(
                RUNTIME_NAMING_CONNECTOR,
                "runtime-naming-connector",
                "runtime",
                runtime_id="rt-third",
                connector_id="court-efiling",
            ),
            entry_for(
                CONNECTOR_NAMING_RUNTIME,
                "connector-naming-runtime",
                "connector",
                connector_id="dms",
                runtime_id="rt-test",
            ),
        ),
    )
)


def principal(key: SigningKey) -> Principal:
    found = REGISTRY.principal(key.key_id)
    assert found is not None
    return found


def signers_of(key_ids: frozenset[str]) -> list[Principal]:
    return [REGISTRY.principals[k] for k in key_ids]


# --- the binding covers what would be sent ------------------------------------------


@pytest.mark.claim("exact-action-approval.binding-changed")
def test_the_binding_is_recomputed_from_the_held_bytes_not_copied_from_the_envelope() -> None:
    held = held_filing()
    binding = binding_of(held)
    decision = held.decision
    assert binding.approval_id == approval_id_for(decision.decision_id)
    assert binding.decision_id == decision.decision_id
    assert binding.operation_hash == decision.operation_hash
    assert binding.policy_fingerprint == decision.policy_fingerprint
    assert binding.required_roles == ("licensed_attorney",)
    assert binding.canonical_args_hash == identity_of(held.arguments)
    assert binding.content_hash == content_hash_of("The brief, as filed.")
    assert binding.destination_identity_hash == destination_identity_of("electronic_filing", "sdny")
    assert (binding.tenant_id, binding.actor_id) == (DEFAULT_TENANT, "associate-ann")
    assert (binding.release_id, binding.created_at_ms) == ("rel-1", AT_MS)

    swapped = held_filing(
        arguments={"court": "edny", "document": "other.pdf"},
        content="Another text.",
        destination_address="edny",
    )
    changed = binding_of(swapped)
    # The envelope (and so the decision) is the same; what would be sent is not.
    assert changed.operation_hash == binding.operation_hash
    assert changed.canonical_args_hash != binding.canonical_args_hash
    assert changed.content_hash != binding.content_hash
    assert changed.destination_identity_hash != binding.destination_identity_hash


def test_a_conditional_decision_always_needs_at_least_one_approval() -> None:
    held = held_filing()
    requirements = msgspec.structs.replace(held.decision.requirements, approval_count=0)
    decision: Decision = msgspec.structs.replace(held.decision, requirements=requirements)
    assert binding_of(msgspec.structs.replace(held, decision=decision)).required_approvals == 1
    assert binding_of(held).required_approvals == 1


def test_a_binding_lives_more_than_zero_and_at_most_600_seconds() -> None:
    held = held_filing()
    projection = identity_of({"projection": 1})
    for ttl in (1, MAX_TTL_MS):
        assert bind(held, "rel-1", projection, AT_MS, AT_MS + ttl).expires_at_ms == AT_MS + ttl
    for ttl in (0, -1, MAX_TTL_MS + 1):
        with pytest.raises(ValueError, match="TTL"):
            bind(held, "rel-1", projection, AT_MS, AT_MS + ttl)


# --- who may resolve --------------------------------------------------------------------


@pytest.mark.parametrize("key", [ANN, CAROL], ids=["more-roles", "exactly-the-roles"])
def test_an_attorney_of_the_tenant_with_every_required_role_is_entitled(key: SigningKey) -> None:
    binding = binding_of(held_filing())
    check_may_resolve(principal(key), binding)
    check_entitled(principal(key), binding)


def test_a_resolver_of_another_tenant_is_not_entitled() -> None:
    binding = msgspec.structs.replace(binding_of(held_filing()), tenant_id="tenant-other")
    with pytest.raises(ApprovalRuleError) as refused:
        check_entitled(principal(ANN), binding)
    assert refused.value.reason_code == "resolver_not_entitled_for_tenant"
    with pytest.raises(ApprovalRuleError) as refused:
        check_may_resolve(principal(ANN), binding)
    assert refused.value.reason_code == "resolver_not_entitled_for_tenant"


@pytest.mark.parametrize(
    ("key", "roles"),
    [(BOB, ("licensed_attorney",)), (ANN, ("licensed_attorney", "managing_partner"))],
    ids=["no-role", "one-role-missing"],
)
def test_a_resolver_lacking_any_required_role_is_not_entitled(
    key: SigningKey, roles: tuple[str, ...]
) -> None:
    binding = msgspec.structs.replace(binding_of(held_filing()), required_roles=roles)
    with pytest.raises(ApprovalRuleError) as refused:
        check_may_resolve(principal(key), binding)
    assert refused.value.reason_code == "resolver_lacks_required_role"


def test_nobody_approves_their_own_request() -> None:
    binding = msgspec.structs.replace(binding_of(held_filing()), actor_id="attorney-ann")
    with pytest.raises(ApprovalRuleError) as refused:
        check_may_resolve(principal(ANN), binding)
    assert refused.value.reason_code == "self_approval"


# --- who settles an order ------------------------------------------------------------------


def report(
    held: HeldAction, executor: str, reason: str = "filed", **changes: Any
) -> ExecutionReport:
    value = ExecutionReport(
        schema="smf.execution-report/1",
        order_id=order_id_for(held.decision),
        connector_id=executor,
        status="confirmed",
        reason_code=reason,
        at_ms=AT_MS,
    )
    return msgspec.structs.replace(value, **changes)


def test_a_connector_order_is_settled_by_that_connectors_key_only() -> None:
    held = held_filing()
    binding = binding_of(held)
    assert held.connector_id == "court-efiling"
    good = report(held, "court-efiling")
    assert signed_by_executor(held, binding, good, [principal(CONNECTOR)])
    assert not signed_by_executor(held, binding, good, [principal(RUNTIME)])
    assert not signed_by_executor(held, binding, good, [principal(RUNTIME_NAMING_CONNECTOR)])
    assert not signed_by_executor(held, binding, good, [principal(ANN)])
    assert not signed_by_executor(held, binding, good, [])
    other = report(held, "dms")
    assert not signed_by_executor(held, binding, other, [principal(CONNECTOR)])
    elsewhere = held_filing(connector_id="dms")
    assert not signed_by_executor(
        elsewhere, binding, report(elsewhere, "dms"), [principal(CONNECTOR)]
    )


def test_a_runtime_executed_order_is_settled_by_its_proposing_runtime_only() -> None:
    held = held_filing(connector_id=None)
    binding = binding_of(held)
    good = report(held, "rt-test")
    assert signed_by_executor(held, binding, good, [principal(RUNTIME)])
    assert signed_by_executor(held, binding, good, [principal(ANN), principal(RUNTIME)])
    assert not signed_by_executor(held, binding, good, [principal(OTHER_RUNTIME)])
    assert not signed_by_executor(held, binding, good, [principal(CONNECTOR)])
    assert not signed_by_executor(held, binding, good, [principal(CONNECTOR_NAMING_RUNTIME)])
    naming_other = report(held, "rt-other")
    assert not signed_by_executor(held, binding, naming_other, [principal(OTHER_RUNTIME)])
    assert not signed_by_executor(held, binding, naming_other, [principal(RUNTIME)])
    other_order = report(held, "rt-test", order_id="f" * 64)
    assert not signed_by_executor(held, binding, other_order, [principal(RUNTIME)])
    unknown_proposer = held_filing(connector_id=None, runtime_id=None)
    assert executor_of(unknown_proposer) is None  # not "a runtime" with no id
    assert not signed_by_executor(unknown_proposer, binding, good, [principal(RUNTIME)])


@pytest.mark.parametrize(
    ("status", "outcome"),
    [("confirmed", "consumed"), ("failed", "failed"), ("ambiguous", "execution_unknown")],
)
def test_a_report_settles_where_its_status_says(status: str, outcome: str) -> None:
    settled = settlement(report(held_filing(), "court-efiling", status=status))
    assert settled == (outcome, ("filed",))


@pytest.mark.claim("exact-action-approval.binding-changed")
@pytest.mark.parametrize("status", ["confirmed", "failed", "ambiguous"])
def test_executed_params_that_were_not_approved_break_the_binding(status: str) -> None:
    mismatch = report(held_filing(), "court-efiling", PARAMS_MISMATCH, status=status)
    assert settlement(mismatch) == ("execution_unknown", (BINDING_BROKEN, PARAMS_MISMATCH))


# --- refusals of signed requests ---------------------------------------------------------


@pytest.mark.parametrize(
    ("error", "reason"),
    [
        (dsse.MalformedEnvelopeError, "malformed_resolution"),
        (dsse.MalformedPayloadError, "malformed_resolution"),
        (dsse.EnvelopeTooLargeError, "malformed_resolution"),
        (dsse.PayloadTypeMismatchError, "wrong_payload_type"),
        (dsse.UnknownSignerError, "unknown_signer"),
        (dsse.BadSignatureError, "bad_signature"),
        (dsse.BelowThresholdError, "bad_signature"),
    ],
)
def test_each_signature_refusal_has_its_reason(
    error: type[dsse.SignatureError], reason: str
) -> None:
    assert dsse.reason_code(error("refused"), "malformed_resolution") == reason


def test_the_resolver_is_the_approver_who_signed() -> None:
    both = frozenset({ANN.key_id, BOB.key_id})
    assert approver_of(signers_of(both), "paralegal-bob") == principal(BOB)
    assert approver_of(signers_of(frozenset({ANN.key_id})), "attorney-ann") == principal(ANN)
    with pytest.raises(ApprovalRuleError) as refused:
        approver_of(signers_of(frozenset({ANN.key_id})), "paralegal-bob")
    assert refused.value.reason_code == "resolver_identity_mismatch"


@pytest.mark.parametrize("key", [RUNTIME, CONNECTOR], ids=["runtime", "connector"])
def test_a_key_that_is_not_an_approvers_never_resolves(key: SigningKey) -> None:
    name = principal(key).name
    with pytest.raises(ApprovalRuleError) as refused:
        approver_of(signers_of(frozenset({key.key_id})), name)
    assert refused.value.reason_code == "signer_role_mismatch"


# --- the binding's contract bounds ----------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("tenant_id", ""),
        ("actor_id", "a" * 257),
        ("required_roles", ()),
        ("required_roles", tuple(f"role_{n}" for n in range(17))),
        ("required_approvals", 0),
        ("required_approvals", 17),
    ],
    ids=["empty-name", "name-257", "no-role", "17-roles", "0-approvals", "17-approvals"],
)
def test_a_binding_outside_the_contract_is_never_held(field: str, value: Any) -> None:
    """The wire contract (``smf_assurance.subjects.approvals``, read by the console and the
    TypeScript adapter alike): names of 1 to 256 characters, 1 to 16 required roles,
    1 to 16 approvals. The store admits nothing a reader would refuse."""
    binding = msgspec.structs.replace(binding_of(held_filing()), **{field: value})
    with pytest.raises(BindingInvalid):
        admit_binding(binding, AT_MS)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("tenant_id", "t"),
        ("actor_id", "a" * 256),
        ("required_roles", tuple(f"role_{n}" for n in range(16))),
        ("required_approvals", 16),
    ],
    ids=["name-1", "name-256", "16-roles", "16-approvals"],
)
def test_a_binding_at_the_contract_bounds_is_held(field: str, value: Any) -> None:
    binding = msgspec.structs.replace(binding_of(held_filing()), **{field: value})
    assert admit_binding(binding, AT_MS) == binding_digest(binding)


@pytest.mark.parametrize("ttl_ms", [1, MAX_TTL_MS])
def test_the_store_holds_a_binding_whose_ttl_is_1_ms_to_the_cap(ttl_ms: int) -> None:
    """``admit_binding``: 0 < TTL <= 600 s, both ends of what is allowed held."""
    binding = binding_of(held_filing())
    binding = msgspec.structs.replace(binding, expires_at_ms=binding.created_at_ms + ttl_ms)
    assert admit_binding(binding, binding.created_at_ms) == binding_digest(binding)


@pytest.mark.parametrize("ttl_ms", [0, -1, MAX_TTL_MS + 1])
def test_the_store_refuses_a_binding_whose_ttl_is_not_above_0_or_over_the_cap(
    ttl_ms: int,
) -> None:
    """Past the binding's own check (``force_setattr``, as a caller could), the store's."""
    binding = binding_of(held_filing())
    msgspec.structs.force_setattr(binding, "expires_at_ms", binding.created_at_ms + ttl_ms)
    with pytest.raises(TtlExceeded):
        admit_binding(binding, binding.created_at_ms)


def test_the_ttl_cap_is_600_seconds() -> None:
    """ARCHITECTURE.md, "Exact-action approval": TTL at most 600 s."""
    held = held_filing()
    projection = identity_of({"projection": 1})
    assert bind(held, "rel-1", projection, AT_MS, AT_MS + 600_000).expires_at_ms == AT_MS + 600_000
    with pytest.raises(ValueError, match="TTL"):
        bind(held, "rel-1", projection, AT_MS, AT_MS + 600_001)


# --- the outcome a runtime acts on ------------------------------------------------------------

GATE: Final = SigningKey.from_seed(b"\x29" * 32)


def outcome(**fields: Any) -> Verdict:
    decision_id = fields.pop("decision_id", fake_identity("decision-y"))
    return Verdict(
        schema="smf.verdict/1",
        proposal_id="",
        outcome=fields.pop("outcome", "allow"),
        reason_codes=("approved_once",),
        decision_id=decision_id,
        operation_hash=fake_identity("operation"),
        approval_id=fields.pop("approval_id", approval_id_for(decision_id)),
        **fields,
    )


def opened(verdict: Verdict, *, decision_id: str | None = None) -> Verdict:
    """The runtime's check of a gate-signed outcome, for the held call it waits on."""
    held_decision = decision_id or fake_identity("decision-y")
    return open_outcome(
        sign_outcome(verdict, GATE),
        {GATE.key_id: GATE.verify_key},
        approval_id=approval_id_for(held_decision),
        decision_id=held_decision,
        operation_hash=fake_identity("operation"),
    )


def test_the_gate_signed_outcome_of_this_call_is_acted_on() -> None:
    assert opened(outcome()) == outcome()
    assert opened(outcome(outcome="deny")).outcome == "deny"


@pytest.mark.parametrize(
    ("verdict", "held_decision", "message"),
    [
        (
            outcome(approval_id=approval_id_for(fake_identity("decision-x"))),
            None,
            "another approval",
        ),
        (outcome(decision_id=fake_identity("decision-x")), None, "another approval"),
        (
            outcome(
                decision_id=fake_identity("decision-x"),
                approval_id=approval_id_for(fake_identity("decision-y")),
            ),
            None,
            "is not its approval's decision",
        ),
        (
            outcome(decision_id=None, approval_id=approval_id_for(fake_identity("decision-y"))),
            None,
            "is not its approval's decision",
        ),
        (outcome(outcome="held"), None, "allow or deny"),
    ],
    ids=[
        "names-another-approval",
        "for-another-call",
        "decision-not-derived",
        "no-decision",
        "not-final",
    ],
)
def test_an_outcome_not_about_this_call_is_refused(
    verdict: Verdict, held_decision: str | None, message: str
) -> None:
    with pytest.raises(OutcomeMismatchError, match=message):
        opened(verdict, decision_id=held_decision)


def test_an_outcome_is_refused_for_a_call_whose_ids_do_not_agree() -> None:
    """A runtime whose held verdict named approval Y but another decision: the
    outcome for Y's decision is not about that call."""
    with pytest.raises(OutcomeMismatchError, match="another decision"):
        open_outcome(
            sign_outcome(outcome(), GATE),
            {GATE.key_id: GATE.verify_key},
            approval_id=approval_id_for(fake_identity("decision-y")),
            decision_id=fake_identity("decision-z"),
            operation_hash=fake_identity("operation"),
        )


# --- the rule errors and the held action's own contract ------------------------------------


def test_a_refusal_says_its_reason_unless_it_was_given_a_detail() -> None:
    """The message of a refusal is its reason code, or the detail it was raised with;
    the reason code is the same either way."""
    assert str(SelfApprovalError()) == "self_approval"
    detailed = SelfApprovalError("attorney-ann requested it")
    assert str(detailed) == "attorney-ann requested it"
    assert detailed.reason_code == "self_approval"


def test_a_held_action_is_read_back_exactly_or_not_at_all() -> None:
    """The desk stores the held action and decodes it again to show and to dispatch
    it: a stored action with a field this gate does not know is refused, and a
    decoded one cannot be changed in place."""
    held = held_filing()
    stored = msgspec.json.encode(held)
    assert msgspec.json.decode(stored, type=HeldAction) == held
    extended = msgspec.json.decode(stored)
    extended["also"] = "unknown"
    with pytest.raises(msgspec.ValidationError, match="also"):
        msgspec.json.decode(msgspec.json.encode(extended), type=HeldAction)
    with pytest.raises(AttributeError):
        held.content = "another text"  # type: ignore[misc]


# --- the approval messages' own contract (smf_assurance/subjects/approvals.py) ---------------


@pytest.mark.parametrize("message", structs_defined_in(approvals), ids=lambda t: t.__name__)
def test_every_approval_message_refuses_a_field_it_does_not_know(
    message: type[msgspec.Struct],
) -> None:
    """A field a receiver would silently drop is a field two readers see apart: a gate
    of another version, a console, a runtime. Every approval message refuses one,
    before it even looks at the fields it requires."""
    with pytest.raises(msgspec.ValidationError, match="unknown field `smf_not_a_field`"):
        msgspec.json.decode(b'{"smf_not_a_field": 1}', type=message)


def test_a_rerequest_reply_without_what_came_of_it_says_nothing_was_proposed() -> None:
    """A refusal, or a gate that does not say, reads as "nothing proposed, nothing
    waited for", never as asked again; a wait is never negative."""
    reply = msgspec.json.decode(
        b'{"schema":"smf.approval-rerequest-reply/1","approval_id":"a","accepted":false}',
        type=ReRequestReply,
    )
    assert (reply.proposed_again, reply.new_approval_id, reply.waited_ms) == (None, None, 0)
    with pytest.raises(msgspec.ValidationError, match="waited_ms"):
        msgspec.json.decode(
            b'{"schema":"smf.approval-rerequest-reply/1","approval_id":"a","accepted":true,'
            b'"waited_ms":-1}',
            type=ReRequestReply,
        )


def test_the_deny_reasons_offered_are_exactly_the_closed_list() -> None:
    """The console and the command line offer DENY_REASONS; every reason the contract
    accepts is offered with a label, and each has its own evidence code."""
    assert tuple(DENY_REASONS) == get_args(DenyReason)
    assert all(DENY_REASONS[reason] for reason in get_args(DenyReason))
    codes = [deny_reason_code(reason) for reason in get_args(DenyReason)]
    assert codes == [f"approver_denied_{reason}" for reason in get_args(DenyReason)]


def resolution(**fields: Any) -> dict[str, Any]:
    binding = binding_of(held_filing())
    return {
        "schema": "smf.approval-resolution/1",
        "approval_id": binding.approval_id,
        "decision": "deny",
        "binding_digest": binding_digest(binding),
        "resolver_id": "attorney-ann",
        "resolved_at_ms": AT_MS,
        **fields,
    }


def decoded_resolution(**fields: Any) -> ApprovalResolution:
    return msgspec.json.decode(msgspec.json.encode(resolution(**fields)), type=ApprovalResolution)


@pytest.mark.parametrize(
    "fields",
    [
        {"decision": "allow-once", "deny_reason": "other"},
        {"decision": "allow-once", "note": "looks fine"},
        {"decision": "allow-once", "deny_reason": "other", "note": "looks fine"},
        {"note": "a note without a reason"},
    ],
    ids=["allow-with-reason", "allow-with-note", "allow-with-both", "deny-note-only"],
)
def test_a_resolution_carries_a_reason_or_note_only_as_a_closed_deny(
    fields: dict[str, Any],
) -> None:
    """An allow-once carries no reason and no note, and a note comes only with a closed
    reason: evidence records a reason code from the closed list, never free text alone."""
    with pytest.raises(msgspec.ValidationError):
        decoded_resolution(**fields)


def test_a_deny_records_its_closed_reason_and_never_the_note() -> None:
    bare = decoded_resolution()
    assert bare.denial_reason_codes() == ("approver_denied",)
    reasoned = decoded_resolution(deny_reason="wrong_recipient", note="the other court")
    assert reasoned.denial_reason_codes() == ("approver_denied", "approver_denied_wrong_recipient")
    assert decoded_resolution(deny_reason="other").denial_reason_codes()[1] == (
        "approver_denied_other"
    )
    assert decoded_resolution(decision="allow-once").decision == "allow-once"


def test_a_resolution_without_reason_or_note_signs_the_bytes_it_signed_before_them() -> None:
    """``deny_reason`` and ``note`` are left out when absent, so the canonical bytes of a
    resolution signed before they existed are unchanged and its signature verifies."""
    allow = decoded_resolution(decision="allow-once")
    assert set(msgspec.json.decode(msgspec.json.encode(allow))) == set(
        resolution(decision="allow-once")
    )


@pytest.mark.parametrize(
    ("message", "value", "omitted"),
    [
        (
            "TrackedApproval",
            {
                "approval_id": fake_identity("a"),
                "state": "pending",
                "relation": "requester",
                "tenant_id": DEFAULT_TENANT,
                "created_at_ms": AT_MS,
                "expires_at_ms": AT_MS + 1,
            },
            {"outcome_codes", "receipt", "order_id"},
        ),
        ("RuleShown", {"rule_id": "urn:smf:rule:x"}, {"title", "statement", "citation"}),
        ("ReasonShown", {"code": "x"}, {"words"}),
    ],
)
def test_an_optional_field_left_empty_is_not_sent(
    message: str, value: dict[str, Any], omitted: set[str]
) -> None:
    """Additive fields are left out when empty, so a reader that predates them (and
    refuses an unknown field) still decodes the message."""
    struct = msgspec.json.decode(msgspec.json.encode(value), type=getattr(approvals, message))
    assert set(msgspec.json.decode(msgspec.json.encode(struct))) == set(value)
    assert not omitted & set(value)


def test_a_view_without_rules_or_reasons_is_sent_as_before_them() -> None:
    held = held_filing()
    binding = binding_of(held)
    view = ApprovalView(
        schema="smf.approval-view/1",
        binding=binding,
        binding_digest=binding_digest(binding),
        state="pending",
        native_tool="court_efile",
        destination_address=held.destination_address,
        content=held.content,
        arguments_json="{}",
    )
    assert not {"rules", "reasons"} & set(msgspec.json.decode(msgspec.json.encode(view)))


def announcement(**fields: Any) -> dict[str, Any]:
    return {
        "schema": "smf.approval-pending/2",
        "approval_id": fake_identity("a"),
        "tenant_id": DEFAULT_TENANT,
        "required_roles": ["licensed_attorney"],
        "required_approvals": 1,
        "created_at_ms": AT_MS,
        "expires_at_ms": AT_MS + 1,
        "capability": "external.transmit",
        "channel": "electronic_filing",
        "locality": "external",
        "native_tool": "court_efile",
        "rule_ids": [],
        "reason_codes": [],
        **fields,
    }


def _reply(count: int, **fields: Any) -> dict[str, Any]:
    kept = [{"seq": n + 1, "announcement": announcement()} for n in range(count)]
    return {
        "schema": "smf.approval-announcements-reply/1",
        "epoch": "e",
        "next_after": 0,
        "more": False,
        "announcements": kept,
        **fields,
    }


def _track(**fields: Any) -> dict[str, Any]:
    return {
        "schema": "smf.approval-track/1",
        "viewer_id": "attorney-ann",
        "approval_ids": [],
        "requested_at_ms": AT_MS,
        **fields,
    }


def _tracked(**fields: Any) -> dict[str, Any]:
    return {
        "approval_id": fake_identity("a"),
        "state": "consumed",
        "relation": "requester",
        "tenant_id": DEFAULT_TENANT,
        "created_at_ms": AT_MS,
        "expires_at_ms": AT_MS + 1,
        **fields,
    }


_REQUEST: Final = {"schema": "smf.approval-announcements/1"}
_IDS: Final = [fake_identity(f"a{n}") for n in range(257)]
"""One more than the 256 candidate ids docs/SUBJECTS.md lets a track request carry."""

BOUNDS: Final[list[tuple[str, type[msgspec.Struct], dict[str, Any], dict[str, Any]]]] = [
    (
        "required-approvals-1",
        PendingAnnouncement,
        announcement(required_approvals=1),
        announcement(required_approvals=0),
    ),
    (
        "required-approvals-16",
        PendingAnnouncement,
        announcement(required_approvals=16),
        announcement(required_approvals=17),
    ),
    (
        "after-seq",
        AnnouncementsRequest,
        {**_REQUEST, "after_seq": 0},
        {**_REQUEST, "after_seq": -1},
    ),
    (
        "request-epoch-64",
        AnnouncementsRequest,
        {**_REQUEST, "epoch": "e" * 64},
        {**_REQUEST, "epoch": "e" * 65},
    ),
    (
        "kept-seq",
        KeptAnnouncement,
        {"seq": 1, "announcement": announcement()},
        {"seq": 0, "announcement": announcement()},
    ),
    (
        "reply-size",
        AnnouncementsReply,
        _reply(256),  # docs/SUBJECTS.md: at most 256 announcements a reply
        _reply(257),
    ),
    ("reply-epoch-64", AnnouncementsReply, _reply(0, epoch="e" * 64), _reply(0, epoch="e" * 65)),
    ("next-after", AnnouncementsReply, _reply(0, next_after=0), _reply(0, next_after=-1)),
    (
        "tracked-ids",
        TrackRequest,
        _track(approval_ids=_IDS[:-1]),
        _track(approval_ids=_IDS),
    ),
    ("receipt-long", TrackedApproval, _tracked(receipt="r" * 256), _tracked(receipt="r" * 257)),
    ("receipt-empty", TrackedApproval, _tracked(receipt="r"), _tracked(receipt="")),
]
"""Each bound of the approval messages: a value exactly at it, and one just past it."""


@pytest.mark.parametrize(
    ("message", "at", "past"), [b[1:] for b in BOUNDS], ids=[b[0] for b in BOUNDS]
)
def test_each_approval_message_bound_holds_exactly(
    message: type[msgspec.Struct], at: dict[str, Any], past: dict[str, Any]
) -> None:
    """A bound is where a gate's answer stops and a reader's check starts: both sides
    must draw it at the same place (256 announcements, 256 tracked ids, a 64-character
    epoch, a receipt of 1 to 256 characters, at least one approval, at most 16)."""
    msgspec.json.decode(msgspec.json.encode(at), type=message)
    with pytest.raises(msgspec.ValidationError):
        msgspec.json.decode(msgspec.json.encode(past), type=message)


def test_an_announcements_request_without_a_position_starts_at_the_beginning() -> None:
    """An approver that has read nothing yet gets every kept announcement, seq 1 first."""
    request = msgspec.json.decode(msgspec.json.encode(_REQUEST), type=AnnouncementsRequest)
    assert (request.after_seq, request.epoch, request.tenant) == (0, None, None)


def _notice(**fields: Any) -> AskAgain:
    decision_id = fields.pop("decision_id", fake_identity("decision-y"))
    return AskAgain(
        schema="smf.approval-ask-again/1",
        approval_id=fields.pop("approval_id", approval_id_for(decision_id)),
        decision_id=decision_id,
        operation_hash=fake_identity("operation"),
        asked_at_ms=AT_MS,
    )


def test_a_gate_signed_ask_again_for_this_approval_is_acted_on() -> None:
    notice = _notice()
    opened_notice = open_ask_again(
        sign_ask_again(notice, GATE),
        {GATE.key_id: GATE.verify_key},
        approval_id=approval_id_for(fake_identity("decision-y")),
    )
    assert opened_notice == notice


@pytest.mark.parametrize(
    ("notice", "message"),
    [
        (_notice(decision_id=fake_identity("decision-x")), "another approval"),
        (
            _notice(
                decision_id=fake_identity("decision-x"),
                approval_id=approval_id_for(fake_identity("decision-y")),
            ),
            "not its approval's decision",
        ),
    ],
    ids=["another-approval", "decision-not-derived"],
)
def test_an_ask_again_not_about_this_approval_is_refused(notice: AskAgain, message: str) -> None:
    """A genuine notice re-published on another approval's subject, or one whose decision
    does not derive its approval, makes no runtime propose anything again."""
    with pytest.raises(OutcomeMismatchError, match=message):
        open_ask_again(
            sign_ask_again(notice, GATE),
            {GATE.key_id: GATE.verify_key},
            approval_id=approval_id_for(fake_identity("decision-y")),
        )
