"""The ``--json`` output of every subcommand, one declared type each.

``--json`` everywhere carries machine values (full ids, enums, numbers) with a
documented schema per command. So each command's JSON is a :class:`CliJson`
Struct declared here,
and :func:`smf_assurance.ops.cli.output.emit` prints only such a value, checked against its own
type first: a field nobody declared cannot be printed, and an id cut to a
display prefix fails its pattern instead of reaching a script.

- Ids and hashes are whole (``sha256:`` and 64 hex digits, order ids of 64
  hex digits, ``ed25519:`` key ids), enums are closed ``Literal`` sets in the
  gate's own words, counts and figures are integers (the output is canonical
  JSON, which has no floats: ratios are ``_x1000``), and times are Unix
  milliseconds. Display strings ("held -> allow", "3m 02s") stay in tables.
- Where a command reports a product record as it is (a Decision, a Swarm
  report, a public key record), its type here repeats that record's fields
  with their meaning, so the record and its printout cannot drift apart
  unnoticed: :func:`smf_assurance.ops.cli.output.emit` refuses a value its type rejects.
- :data:`COMMANDS` maps each command path to its types, the first for what
  the command prints when it runs, any others for a refusal it prints.

``docs/CLI-JSON.md`` is generated from these types (``python -m smf_assurance.ops.cli.cli_json``);
``tests/cli/test_cli_json.py`` fails when it is stale. The team's command line (``python -m
smf_tools``, not in the wheel) declares its types the same way in ``smf_tools/cli_json.py``, on a
page of its own (:class:`Page`); nothing here knows of it.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Final, Literal

import msgspec

from smf_assurance.core.decision import AppliedPolicy, Decision, Disposition, RuleSource
from smf_assurance.core.explanation import Explanation
from smf_assurance.core.policy import Requirements
from smf_assurance.core.release_diff import PolicyChange, ProviderChange, RuleChange
from smf_assurance.ops.doctor.kinds import Kind as DoctorKind
from smf_assurance.ops.doctor.kinds import Status as DoctorStatus
from smf_assurance.subjects.approvals import ApprovalBinding, ApprovalState, ResolutionDecision
from smf_assurance.subjects.canonical import Identity
from smf_assurance.subjects.envelope import Capability, Channel, Locality, Surface
from smf_assurance.subjects.keys import Principal
from smf_assurance.subjects.messages import Outcome
from smf_assurance.subjects.passkeys import CredentialId, Origin, RpId
from smf_assurance.subjects.patterns import Code, ConnectorId, Millis, OrderId, Token
from smf_assurance.subjects.registry import NkeyUser, Role
from smf_assurance.subjects.release import (
    KeyId,
    ReleaseDigests,
    ReleaseId,
    ReleaseOutcome,
    Revocations,
)
from smf_assurance.swarm.claims import AcceptedClaim, RejectedClaim
from smf_assurance.swarm.report import Faithfulness, PersonaReport, SelectionSets


def _(meaning: str) -> msgspec.Meta:
    """A field's one-line meaning, as its JSON Schema ``description``."""
    return msgspec.Meta(description=meaning)


Count = Annotated[int, msgspec.Meta(ge=0)]
OperationId = Annotated[str, msgspec.Meta(pattern=r"^op-[0-9a-f]{32}\Z")]
PublicKey = Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z0-9+/]{43}=\Z")]
"""An Ed25519 public key: 32 bytes, standard base64."""
Path_ = Annotated[str, msgspec.Meta(min_length=1)]
"""A file system path as the command used it."""


class CliJson(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """Base of every ``--json`` output: closed (an unknown field is an error) and
    keyword-only, so a reader decodes it strictly and a writer names each field."""


# --- compile, eval ------------------------------------------------------------------


class CompileJson(CliJson, kw_only=True):
    """``compile --json``: what was written."""

    recipe_id: Annotated[Identity, _("identity of the compiled corpus (the recipe)")]
    files: Annotated[dict[str, Path_], _("each projection file's name and the path written")]


class EvalJson(CliJson, kw_only=True):
    """``eval --json``: the Decision of ``smf_assurance.core.decision``, every field as
    decided."""

    schema: Annotated[Literal["smf.decision/1"], _("record schema")]
    decision_id: Annotated[Identity, _("identity of this decision (envelope, release, time)")]
    operation_id: Annotated[OperationId, _("the operation's id: op- and 32 hex of its hash")]
    operation_hash: Annotated[Identity, _("SHA-256 of the canonical operation envelope")]
    release_id: Annotated[str, _("release the policies came from")]
    release_sequence: Annotated[int, _("that release's sequence number")]
    projection_id: Annotated[Identity, _("identity of the enforcement projection used")]
    policy_fingerprint: Annotated[Identity, _("identity of the policy set evaluated")]
    disposition: Annotated[Disposition, _("the evaluator's decision; conditional needs approval")]
    consequential: Annotated[bool, _("whether the operation has effects the floor governs")]
    requirements: Annotated[Requirements, _("what an approval must satisfy (merged)")]
    rule_ids: Annotated[tuple[str, ...], _("rules the applied policies cite")]
    rule_sources: Annotated[tuple[RuleSource, ...], _("each cited rule with its source hash")]
    applied_policies: Annotated[tuple[AppliedPolicy, ...], _("policies that matched, by layer")]
    reason_codes: Annotated[tuple[Code, ...], _("why, most decisive first")]
    evaluated_at_ms: Annotated[Millis, _("evaluation time, Unix ms")]


# --- demo -----------------------------------------------------------------------------

DemoOutcome = Literal["allow", "deny", "held", "report", "refused"]
ConnectorReport = Literal["confirmed", "failed", "ambiguous"]


class DemoScenario(CliJson, kw_only=True):
    """One scenario's result."""

    scenario: Annotated[str, _("the scenario's name")]
    outcome: Annotated[
        DemoOutcome,
        _("the gate's first verdict; report for Swarm, refused when Swarm had no release"),
    ]
    final_outcome: Annotated[
        Outcome | None, _("the verdict after the attorney's approval, for held; else null")
    ]
    reason_codes: Annotated[tuple[Code, ...], _("the first verdict's reason codes")]
    order_id: Annotated[OrderId | None, _("the order sent to smf.execute, or null")]
    connector_id: Annotated[ConnectorId | None, _("the connector the order went to, or null")]
    connector_report: Annotated[
        ConnectorReport | None,
        _("what the connector's signed report said; null with no order or no report yet"),
    ]
    evidence: Annotated[Identity | None, _("the ledger entry hash, or the Swarm report id")]
    rule_backed: Annotated[Count | None, _("Swarm: rule-backed claims accepted; else null")]
    rejected: Annotated[Count | None, _("Swarm: claims rejected; else null")]
    as_expected: Annotated[bool, _("whether the scenario reached its expected outcome")]


class DemoJson(CliJson, kw_only=True):
    """``demo --json``; printed also when a scenario went wrong (then exit 1)."""

    ok: Annotated[bool, _("every scenario as expected")]
    scenarios: Annotated[tuple[DemoScenario, ...], _("one per scenario, by name")]


# --- up, console, model-gateway serve: readiness lines ---------------------------------

Stages = Literal["co-located", "bus", "none"]


class UpJson(CliJson, kw_only=True):
    """``up --json``: the readiness line, printed once everything is started."""

    ready: Annotated[Literal[True], _("always true: printed only when ready")]
    nats_url: Annotated[str, _("the bus the gate is on")]
    state_dir: Annotated[Path_, _("the state directory")]
    nats_server_pid: Annotated[int | None, _("the embedded nats-server's pid; null if external")]
    connectors: Annotated[tuple[Token, ...], _("example connectors started")]
    stages: Annotated[Stages, _("where the gate's stages run; none with --connectors-only")]
    model_gateway_url: Annotated[str | None, _("the model gateway's URL, or null")]
    gate_name: Annotated[str | None, _("this replica's name (--gate-name), or null")]
    cluster_replicas: Annotated[Count | None, _("claim-store replicas with --cluster, or null")]
    notify_config: Annotated[Path_ | None, _("the notifier's TOML file with --notify, or null")] = (
        None
    )


class ConsoleJson(CliJson, kw_only=True):
    """``console --json``: the readiness line."""

    ready: Annotated[Literal[True], _("always true: printed only when listening")]
    url: Annotated[str, _("the console's URL")]
    nats_url: Annotated[str, _("the bus it relays to")]
    registry: Annotated[Path_, _("the roster file it reads")]


class NotifyJson(CliJson, kw_only=True):
    """``notify --json``: the readiness line."""

    ready: Annotated[Literal[True], _("always true: printed only once the loop runs")]
    nats_url: Annotated[str, _("the bus it reads announcements from")]
    registry: Annotated[Path_, _("the roster file it reads")]
    config: Annotated[Path_, _("the notifier's TOML file")]
    record: Annotated[Path_, _("the SQLite record of what was sent")]
    tenants: Annotated[Count, _("tenants with notifier settings")]
    contacts: Annotated[Count, _("approver contacts across those tenants")]


class ModelGatewayServeJson(CliJson, kw_only=True):
    """``model-gateway serve --json``: the readiness line."""

    ready: Annotated[Literal[True], _("always true: printed only when listening")]
    model_gateway_url: Annotated[str, _("the gateway's URL")]


# --- keys, release ------------------------------------------------------------------------


class KeyRecordJson(CliJson, kw_only=True):
    """A public key record (``smf.ed25519.public/1``), exactly as a roster takes it."""

    kind: Annotated[Literal["smf.ed25519.public/1"], _("record kind")]
    key_id: Annotated[KeyId, _("ed25519: and the SHA-256 hex of the public key")]
    principal: Annotated[Principal, _("who the key belongs to")]
    public_key: Annotated[PublicKey, _("the 32-byte public key, base64")]


class ManifestJson(CliJson, kw_only=True):
    """A release manifest with its hash."""

    schema: Annotated[Literal["smf.release-manifest/1"], _("record schema")]
    release_id: Annotated[ReleaseId, _("the release's id")]
    sequence: Annotated[int, _("its sequence number (rollback protection)")]
    prior_release_hash: Annotated[Identity | None, _("manifest hash it replaces; null first")]
    issued_at_ms: Annotated[Millis, _("issue time, Unix ms")]
    lease_expires_at_ms: Annotated[Millis, _("the lease's end, Unix ms")]
    recipe_id: Annotated[Identity, _("identity of the compiled corpus")]
    digests: Annotated[ReleaseDigests, _("digests of the projections and registry")]
    revocations: Annotated[Revocations, _("revoked key and release ids")]
    manifest_hash: Annotated[Identity, _("SHA-256 of the signed manifest payload")]


class ReleaseBuildJson(CliJson, kw_only=True):
    """``release build --json``."""

    manifest: Annotated[ManifestJson, _("the signed manifest")]
    signers: Annotated[tuple[KeyId, ...], _("key ids that signed it")]
    files: Annotated[dict[str, Path_], _("each file of the release folder and its path")]


class ReleaseVerifyJson(CliJson, kw_only=True):
    """``release verify --json``; a refusal is one line on stderr, exit 1."""

    ok: Annotated[Literal[True], _("always true: a refused release prints no JSON")]
    already_accepted: Annotated[
        bool, _("it is the --state-dir's accepted release already (verified as stored)")
    ]
    manifest: Annotated[ManifestJson, _("the verified manifest")]
    signers: Annotated[tuple[KeyId, ...], _("key ids whose signatures counted")]
    checked_against: Annotated[
        Identity | None, _("the state's accepted manifest hash it was checked against, or null")
    ]


class TrustRootJson(CliJson, kw_only=True):
    """``release trust-root --json``: the trust root file as written."""

    schema: Annotated[Literal["smf.release-trust-root/1"], _("record schema")]
    threshold: Annotated[int, _("distinct signers a release needs")]
    keys: Annotated[tuple[KeyRecordJson, ...], _("the trusted release-signing keys")]


class PublishedToGate(CliJson, kw_only=True):
    """What one gate said of the published revision, in its signed report."""

    gate: Annotated[str, _("the gate's name (each gate answers for itself)")]
    outcome: Annotated[
        ReleaseOutcome,
        _("adopted, superseded (adopted, then replaced), refused, pending or unseen"),
    ]
    reason_code: Annotated[Code | None, _("why it refused; null unless refused")]
    detail: Annotated[str | None, _("the refusal in one sentence; null unless refused")]
    retryable: Annotated[
        bool | None, _("whether the gate tries a refused one again when its state moves")
    ]
    active_release_id: Annotated[ReleaseId | None, _("the release the gate uses now, or null")]


class ReleasePublishJson(CliJson, kw_only=True):
    """``release publish --json``: also printed when it exits 1 (a gate refused it,
    or no gate's signed word came within ``--wait``)."""

    release_id: Annotated[ReleaseId, _("the release published")]
    sequence: Annotated[int, _("its sequence number")]
    manifest_hash: Annotated[Identity, _("SHA-256 of its signed manifest payload")]
    to: Annotated[str, _("the bucket key and revision, or the inbox file, it went to")]
    waited: Annotated[bool, _("false with --no-wait: the gates were not asked")]
    gates: Annotated[
        tuple[PublishedToGate, ...],
        _("each gate that answered with a report a gate key of its registry signed"),
    ]
    unverified_answers: Annotated[Count, _("answers not signed so, and not counted")]
    shadow: Annotated[
        bool,
        _("published as the shadow (--shadow): verified, run beside, decides nothing"),
    ] = False


class BucketRow(CliJson, kw_only=True):
    """One value of the ``SMF_RELEASES`` bucket, as published (not verified)."""

    key: Annotated[str, _("the bucket key (release.<sequence>, or shadow for the shadow)")]
    revision: Annotated[Count, _("its bucket revision")]
    bytes: Annotated[Count, _("its size")]
    release_id: Annotated[ReleaseId | None, _("the manifest's release id; null if not a release")]
    sequence: Annotated[int | None, _("the manifest's sequence; null if not a release")]
    lease_expires_at_ms: Annotated[Millis | None, _("the manifest's lease end, Unix ms")]


class RefusalJson(CliJson, kw_only=True):
    """One candidate a gate refused, from its signed report."""

    origin: Annotated[str, _("where the gate found it: kv:<key>@<revision>, inbox:<file>")]
    reason_code: Annotated[str, _("the threat it was refused for")]
    detail: Annotated[str, _("the refusal in one sentence")]
    at_ms: Annotated[Millis, _("when, Unix ms on the gate's clock")]
    retryable: Annotated[bool, _("whether the gate tries it again when its state moves")]


class ShadowCountsJson(CliJson, kw_only=True):
    """What a gate did with its shadow release since it was loaded."""

    evaluated: Annotated[Count, _("decisions evaluated under the shadow")]
    disagreed: Annotated[Count, _("of those, the ones it would have decided otherwise")]
    recorded: Annotated[Count, _("disagreements written to the ledger as shadow entries")]
    unrecorded: Annotated[Count, _("disagreements the ledger did not take (an outage)")]
    dropped: Annotated[Count, _("decisions or disagreements dropped: the shadow's queue was full")]
    skipped: Annotated[
        Count, _("decisions not evaluated: the shadow not in force, or another release decided")
    ]
    failed: Annotated[Count, _("shadow evaluations that raised (no verdict changed)")]


class GateShadowJson(CliJson, kw_only=True):
    """The shadow release a gate runs beside its active one, from its report."""

    release_id: Annotated[ReleaseId, _("the shadow release")]
    sequence: Annotated[int, _("its sequence")]
    manifest_hash: Annotated[Identity, _("its manifest hash")]
    lease_expires_at_ms: Annotated[Millis, _("its lease end, Unix ms")]
    counts: Annotated[ShadowCountsJson | None, _("what the gate did with it")]


class GateReleaseJson(CliJson, kw_only=True):
    """One gate's release, from its signed report."""

    gate: Annotated[str, _("the gate's name")]
    active_release_id: Annotated[ReleaseId | None, _("the release it uses, or null")]
    sequence: Annotated[int | None, _("that release's sequence")]
    manifest_hash: Annotated[Identity | None, _("that release's manifest hash")]
    lease_expires_at_ms: Annotated[Millis | None, _("that release's lease end, Unix ms")]
    in_force: Annotated[bool, _("false: the gate denies everything (no release, lease out)")]
    refusals: Annotated[tuple[RefusalJson, ...], _("its most recent refusals, oldest first")]
    shadow: Annotated[GateShadowJson | None, _("the shadow release it runs, or null")] = None


class AcceptedJson(CliJson, kw_only=True):
    """The release a state directory's gate accepted (its persisted trusted state)."""

    release_id: Annotated[ReleaseId, _("the accepted release")]
    sequence: Annotated[int, _("its sequence number")]
    manifest_hash: Annotated[Identity, _("its manifest hash")]
    accepted_at_ms: Annotated[Millis, _("when the gate accepted it, Unix ms")]
    lease_expires_at_ms: Annotated[Millis, _("its lease end, Unix ms")]
    lease_in_force: Annotated[bool, _("whether the lease has not run out now")]
    revoked_key_ids: Annotated[tuple[KeyId, ...], _("release keys revoked so far")]
    revoked_release_ids: Annotated[tuple[ReleaseId, ...], _("releases revoked so far")]


class InboxNewestJson(CliJson, kw_only=True):
    """The newest bundle in a state directory's inbox, as written (not verified)."""

    release_id: Annotated[ReleaseId, _("its release id")]
    sequence: Annotated[int, _("its sequence number")]


class StoredShadowJson(CliJson, kw_only=True):
    """The shadow release a state directory's gate keeps, as stored: the
    gate verifies it again at every start."""

    release_id: Annotated[ReleaseId, _("the shadow release")]
    sequence: Annotated[int, _("its sequence")]
    manifest_hash: Annotated[Identity, _("its manifest hash")]
    beside_manifest_hash: Annotated[Identity, _("the accepted release it was verified against")]
    origin: Annotated[str, _("where the gate found it (kv:shadow@<revision>)")]
    loaded_at_ms: Annotated[Millis, _("when the gate loaded it, Unix ms")]


class ReleaseStatusJson(CliJson, kw_only=True):
    """``release status --json``: with ``--nats`` the bucket and every gate's report
    (``accepted`` and ``inbox_newest`` null); with ``--state-dir`` what that state
    accepted (``bucket`` and ``gates`` null)."""

    source: Annotated[Literal["bus", "state"], _("--nats (bus) or --state-dir (state)")]
    bucket: Annotated[
        tuple[BucketRow, ...] | None, _("the bucket's values, as published, not verified")
    ]
    gates: Annotated[tuple[GateReleaseJson, ...] | None, _("each gate that answered")]
    unverified_answers: Annotated[Count | None, _("answers no gate key signed, not counted")]
    accepted: Annotated[AcceptedJson | None, _("the state's accepted release, or null")]
    inbox_newest: Annotated[InboxNewestJson | None, _("the inbox's newest bundle, or null")]
    shadow: Annotated[
        StoredShadowJson | None, _("with --state-dir, the shadow its gate keeps, or null")
    ] = None


class WithdrawnAtGateJson(CliJson, kw_only=True):
    """What one gate said after the shadow was withdrawn, in its signed report."""

    gate: Annotated[str, _("the gate's name")]
    shadow_release_id: Annotated[
        ReleaseId | None, _("the shadow it still runs, or null: it runs none")
    ]


class ReleaseWithdrawShadowJson(CliJson, kw_only=True):
    """``release withdraw-shadow --json``; also printed when it exits 1 (a
    gate still runs a shadow, or no gate's signed word came within ``--wait``)."""

    withdrawn: Annotated[
        bool, _("the bucket held a shadow and a delete marker was written (false: none held)")
    ]
    release_id: Annotated[ReleaseId | None, _("the shadow withdrawn, as published, or null")]
    waited: Annotated[bool, _("false with --no-wait: the gates were not asked")]
    gates: Annotated[tuple[WithdrawnAtGateJson, ...], _("each gate that answered, signed")]
    unverified_answers: Annotated[Count, _("answers no known gate key signed, not counted")]


# --- approvals ------------------------------------------------------------------------

GateState = ApprovalState | Literal["unknown"]
"""An approval's state as the gate reports it; ``unknown`` when it holds no record."""


class PendingItem(CliJson, kw_only=True):
    """One announced approval and its current state."""

    approval_id: Annotated[Identity, _("the approval's id")]
    tenant_id: Annotated[str, _("the tenant it belongs to")]
    native_tool: Annotated[str, _("the runtime's tool that proposed it")]
    capability: Annotated[Capability, _("what the action does")]
    channel: Annotated[Channel, _("where it would go")]
    locality: Annotated[Locality, _("internal or external")]
    required_roles: Annotated[tuple[str, ...], _("professional roles that may approve")]
    expires_at_ms: Annotated[Millis, _("when the approval expires, Unix ms")]
    expires_in_s: Annotated[Count, _("seconds left when listed (0 when passed)")]
    state: Annotated[GateState, _("its current state, asked from the gate (unknown: no record)")]
    rule_ids: Annotated[tuple[str, ...], _("rules that held it")]
    reason_codes: Annotated[tuple[Code, ...], _("why it was held")]


class ApprovalsPendingJson(CliJson, kw_only=True):
    """``approvals pending --json``."""

    approvals: Annotated[tuple[PendingItem, ...], _("open approvals (all with --all)")]


class ShownRule(CliJson, kw_only=True):
    """A rule that requires the approval, in the deciding release's words."""

    rule_id: Annotated[str, _("the rule's id")]
    described: Annotated[bool, _("the deciding release describes it (false: id only)")]
    title: Annotated[str | None, _("its title in the release, or null")]
    statement: Annotated[str | None, _("its statement in the release, or null")]
    citation: Annotated[str | None, _("its citation in the release, or null")]


class ShownReason(CliJson, kw_only=True):
    """A reason code the decision carries, with its plain-English words."""

    code: Annotated[Code, _("the reason code")]
    words: Annotated[str | None, _("what it means in plain English, or null (no entry)")]


class ShownDestination(CliJson, kw_only=True):
    """The destination as the tenant directory names it; never guessed."""

    id: Annotated[str, _("the raw destination address, as bound")]
    kind: Annotated[Literal["court", "recipient", "other"], _("which directory section")]
    in_directory: Annotated[bool, _("the directory names it (false: shown as the raw id)")]
    name: Annotated[str | None, _("the court's or recipient's name, or null")] = None
    caption: Annotated[str | None, _("the matter's case caption at this court, or null")] = None
    docket: Annotated[str | None, _("the matter's docket at this court, or null")] = None


class ShownMatter(CliJson, kw_only=True):
    """The matter and its client as the tenant directory names them."""

    id: Annotated[str, _("the raw matter id, as bound")]
    in_directory: Annotated[bool, _("the directory names it (false: shown as the raw id)")]
    name: Annotated[str | None, _("the matter's display name, or null")] = None
    client: Annotated[str | None, _("the client's display name, or null")] = None


class ShownDirectory(CliJson, kw_only=True):
    """Display names from the operator's tenant directory; not part of the binding."""

    destination: Annotated[ShownDestination, _("the destination's display form")]
    matter: Annotated[ShownMatter, _("the matter's display form")]


class ApprovalsShowJson(CliJson, kw_only=True):
    """``approvals show --json``; printed also on a mismatch (then exit 1)."""

    approval_id: Annotated[Identity, _("the approval's id")]
    state: Annotated[ApprovalState, _("its state at the gate")]
    native_tool: Annotated[str, _("the runtime's tool")]
    destination_address: Annotated[str, _("where it would be sent, as given")]
    arguments_json: Annotated[str, _("the tool's arguments as JSON text")]
    content: Annotated[str, _("what would be sent, unescaped")]
    binding: Annotated[ApprovalBinding, _("everything the approval is bound to")]
    binding_digest: Annotated[Identity, _("the digest an approver signs")]
    content_matches: Annotated[bool, _("the content and binding match the digest")]
    rules: Annotated[tuple[ShownRule, ...], _("each rule that requires the approval")]
    reasons: Annotated[tuple[ShownReason, ...], _("each reason code, explained")]
    display: Annotated[ShownDirectory, _("destination and matter by the tenant directory's names")]


class ApprovalsResolveJson(CliJson, kw_only=True):
    """``approvals resolve --json``: the gate's answer (exit 1 when not accepted)."""

    decision: Annotated[ResolutionDecision, _("what was signed")]
    schema: Annotated[Literal["smf.resolution-reply/1"], _("the gate's reply schema")]
    approval_id: Annotated[Identity, _("the approval's id")]
    accepted: Annotated[bool, _("whether the gate accepted the resolution")]
    state: Annotated[GateState, _("the approval's state after it (unknown: no record)")]
    reason_codes: Annotated[
        tuple[Code, ...], _("the gate's reasons for a refusal, or the reason codes a deny recorded")
    ]
    order_id: Annotated[OrderId | None, _("the order sent on allow-once, or null")]


class ApprovalsResolveRefusal(CliJson, kw_only=True):
    """``approvals resolve --json`` refused before the gate answered (exit 1)."""

    approval_id: Annotated[Identity, _("the approval's id")]
    decision: Annotated[ResolutionDecision, _("what would have been signed")]
    accepted: Annotated[Literal[False], _("always false")]
    reason_code: Annotated[
        Code | None,
        _(
            "why, in the gate's words, or confirmation_required / not_confirmed when "
            "nothing was signed; null when the bus could not be reached"
        ),
    ]
    refusal: Annotated[str, _("the one line printed on stderr, for people")]


class ApprovalsRerequestJson(CliJson, kw_only=True):
    """``approvals rerequest --json``: the gate's answer (exit 1 when not accepted)."""

    approval_id: Annotated[Identity, _("the expired approval asked again")]
    accepted: Annotated[
        bool, _("whether the gate told the runtime to propose it anew (a new approval)")
    ]
    reason_codes: Annotated[tuple[Code, ...], _("why not, when refused")]
    proposed_again: Annotated[
        Literal["allow", "deny", "held"] | None,
        _(
            "the verdict of a new proposal of the same action the gate decided within "
            "waited_ms; null: none (nothing was proposed anew)"
        ),
    ] = None
    new_approval_id: Annotated[
        Identity | None, _("the new approval, when proposed_again is held")
    ] = None
    waited_ms: Annotated[Count, _("how long the gate waited for the new proposal")] = 0


# --- ledger -----------------------------------------------------------------------------

LedgerResult = Literal["verified", "self-consistent", "unanchored", "failed"]


class LedgerVerifyJson(CliJson, kw_only=True):
    """``ledger verify --json``; printed also when it fails or is unanchored (exit 1)."""

    result: Annotated[
        LedgerResult,
        _("verified against checkpoints; self-consistent (none asked); unanchored; failed"),
    ]
    ok: Annotated[bool, _("the chain and every checkpoint verified")]
    reason: Annotated[Code | None, _("what is wrong, or null")]
    seq: Annotated[int | None, _("the first bad entry's seq, or null")]
    ledger_id: Annotated[str | None, _("the ledger's id, or null when unreadable")]
    entries: Annotated[Count, _("entries verified")]
    last_seq: Annotated[int, _("the end of the verified prefix")]
    last_entry_hash: Annotated[str, _("that entry's hash")]
    checkpoints: Annotated[Count, _("distinct checkpoints verified")]
    checkpoint_seq: Annotated[int, _("the highest checkpoint's seq")]
    skipped_checkpoints: Annotated[
        Count, _("messages of the stream (--nats) that are no trusted gate's checkpoint: skipped")
    ]
    external_checkpoints: Annotated[Count, _("checkpoints read from --nats or --checkpoints")]
    checkpoints_from: Annotated[
        Literal["nats", "file"] | None, _("--nats or --checkpoints; null when none was asked")
    ]
    checkpoints_at: Annotated[str | None, _("the server URL or the file path, or null")]
    checkpoints_gate: Annotated[str | None, _("with --nats: whose checkpoint stream, or null")]


# --- backup, restore ---------------------------------------------------------------------

Sha256Hex = Annotated[str, msgspec.Meta(pattern=r"^[0-9a-f]{64}\Z")]


class BackupStreamJson(CliJson, kw_only=True):
    """One stream a backup took through the server, as the server described it."""

    name: Annotated[str, _("the stream (orders SMF_EXECUTE, KV_* buckets, ...)")]
    messages: Annotated[Count, _("messages it held")]
    first_seq: Annotated[Count, _("its first sequence")]
    last_seq: Annotated[Count, _("its last sequence")]
    consumers: Annotated[Count, _("consumers taken with it (their acknowledgements)")]


class BackupFileJson(CliJson, kw_only=True):
    """One member of the archive, as its manifest names it."""

    path: Annotated[str, _("the member's path in the archive (state/..., jetstream/...)")]
    sha256: Annotated[Sha256Hex, _("its SHA-256, hex")]
    size: Annotated[Count, _("its size in bytes")]
    kind: Annotated[
        Literal["sqlite", "file", "stream", "stream-config"],
        _("sqlite (online backup API), file, stream (a server snapshot) or its configuration"),
    ]


class BackupJson(CliJson, kw_only=True):
    """``backup --json``: the archive written and its manifest."""

    archive: Annotated[Path_, _("the archive written (0600: it holds private keys)")]
    archive_sha256: Annotated[Sha256Hex, _("the archive's SHA-256, hex")]
    archive_bytes: Annotated[Count, _("its size")]
    state_dir: Annotated[Path_, _("the state folder backed up")]
    online: Annotated[bool, _("true when taken from a running up's server")]
    keys_included: Annotated[bool, _("always true: the state's private keys are in it")]
    version: Annotated[str, _("the version that wrote it")]
    commit: Annotated[str, _("the commit that wrote it, or unknown (an installed wheel)")]
    started_at_ms: Annotated[Millis, _("when the backup began, Unix ms")]
    finished_at_ms: Annotated[Millis, _("when its last copy was taken, Unix ms")]
    streams: Annotated[tuple[BackupStreamJson, ...], _("each stream taken, by name")]
    files: Annotated[tuple[BackupFileJson, ...], _("each member, in the order copied")]


class RestoreJson(CliJson, kw_only=True):
    """``restore --json``: printed once the restored state is in place and its ledger
    verified."""

    archive: Annotated[Path_, _("the archive restored")]
    state_dir: Annotated[Path_, _("the state folder restored")]
    replaced: Annotated[Path_ | None, _("where the folder it replaced was set aside, or null")]
    version: Annotated[str, _("the version that wrote the backup")]
    commit: Annotated[str, _("the commit that wrote the backup, or unknown")]
    started_at_ms: Annotated[Millis, _("when the backup began, Unix ms")]
    files: Annotated[Count, _("archive members checked and written")]
    streams: Annotated[tuple[BackupStreamJson, ...], _("each stream restored")]
    ledger_result: Annotated[
        Literal["verified", "self-consistent", "no-ledger"],
        _(
            "verified against the restored checkpoint stream; self-consistent (no "
            "checkpoint there); no-ledger (the backup holds none: no gate ever ran)"
        ),
    ]
    ledger_entries: Annotated[Count, _("entries of the restored ledger verified (0: none)")]
    ledger_last_seq: Annotated[int, _("its last seq (0: none)")]
    checkpoints: Annotated[Count, _("distinct checkpoints verified")]
    external_checkpoints: Annotated[Count, _("checkpoints read from the restored stream")]


# --- swarm ------------------------------------------------------------------------------


class SwarmReportJson(CliJson, kw_only=True):
    """``swarm analyze --json`` and ``swarm review --json``: the report, byte for byte
    the file written (``smf.swarm-report/1``); analyze prints it also when every
    persona failed (then exit 1)."""

    schema: Annotated[Literal["smf.swarm-report/1"], _("record schema")]
    report_id: Annotated[Identity, _("identity of the report body")]
    release_id: Annotated[str, _("the release analysed from")]
    release_sequence: Annotated[int, _("its sequence")]
    projection_id: Annotated[Identity, _("the analysis projection's identity")]
    question: Annotated[str, _("the question asked")]
    at_ms: Annotated[Millis, _("the time the rules were judged at, Unix ms")]
    facts: Annotated[dict[str, Any], _("the matter's facts")]
    facts_id: Annotated[Identity, _("identity of the facts")]
    selection: Annotated[SelectionSets, _("rules selected, unresolved and excluded")]
    personas: Annotated[tuple[PersonaReport, ...], _("each persona's run")]
    accepted: Annotated[tuple[AcceptedClaim, ...], _("claims accepted")]
    rejected: Annotated[tuple[RejectedClaim, ...], _("claims rejected, with why")]
    limits: Annotated[str, _("what the check does not prove")]
    semantic_faithfulness: Annotated[Faithfulness, _("the signed review, or not reviewed")]


# --- bus ---------------------------------------------------------------------------------

May = Literal["publish", "not publish", "subscribe", "not subscribe", "publish replies"]


class BusAuthorizationJson(CliJson, kw_only=True):
    """``bus authorization --json``."""

    out: Annotated[Path_, _("the authorization file")]
    changed: Annotated[bool, _("whether its content changed")]
    principals: Annotated[Count, _("principals it names")]


class PermissionRow(CliJson, kw_only=True):
    """One grant or denial of one principal."""

    principal: Annotated[str, _("the principal")]
    role: Annotated[Role, _("its registry role")]
    account: Annotated[
        str, _("the account it connects in: SMF (the gate's, with JetStream) or its own")
    ]
    may: Annotated[May, _("granted or denied; publish replies: may answer requests made to it")]
    subject: Annotated[str | None, _("the subject pattern; null for publish replies")]


class BusPermissionsJson(CliJson, kw_only=True):
    """``bus permissions --json``."""

    permissions: Annotated[tuple[PermissionRow, ...], _("by principal")]


# --- model-gateway -------------------------------------------------------------------------


class ModelGatewayUpstreamJson(CliJson, kw_only=True):
    """``model-gateway upstream --json``."""

    upstream: Annotated[str, _("the provider's base URL")]
    file: Annotated[Path_, _("the gateway settings file written")]


class ModelGatewayAddRuntimeJson(CliJson, kw_only=True):
    """``model-gateway add-runtime --json``."""

    runtime_id: Annotated[Token, _("the runtime")]
    token_file: Annotated[Path_, _("its bearer token file (0600)")]


class ModelGatewayClearJson(CliJson, kw_only=True):
    """``model-gateway clear --json``: the gate's answer (exit 1 when the stop stands)."""

    runtime_id: Annotated[Token, _("the runtime")]
    was_stopped: Annotated[bool, _("whether it was stopped before the clear")]
    stopped: Annotated[
        bool, _("still stopped: the clear was not recorded or stored, or a newer stop stands")
    ]
    reason_codes: Annotated[
        tuple[Code, ...], _("why the clear did not take effect; empty when it did")
    ]
    evidence: Annotated[tuple[Identity, ...], _("the ledger entry that records the clear")]


class GatewayRuntime(CliJson, kw_only=True):
    """One runtime the model gateway serves."""

    runtime: Annotated[Token, _("the runtime's id")]
    adapter: Annotated[str, _("its adapter's id")]
    destination: Annotated[str, _("where it delivers replies")]
    locality: Annotated[Locality, _("internal or external")]
    surface: Annotated[Surface, _("its delivery surface")]


class ModelGatewayListJson(CliJson, kw_only=True):
    """``model-gateway list --json``."""

    runtimes: Annotated[tuple[GatewayRuntime, ...], _("runtimes the gateway serves")]


# --- explain, eval with --jsonl, --explain and --against, release diff -----------------------


class LedgerStepJson(CliJson, kw_only=True):
    """One ledger entry of the decision, in order."""

    seq: Annotated[int, _("its place in the ledger's chain")]
    kind: Annotated[str, _("decision, or what happened after it (transition, shadow, ...)")]
    status: Annotated[str | None, _("the transition's status (consumed, failed, ...), or null")]
    reason_codes: Annotated[tuple[str, ...], _("its reason codes")]
    at: Annotated[Millis, _("when, Unix ms")]
    shadow_disposition: Annotated[
        str | None, _("a shadow entry: what the shadow release would have decided; else null")
    ] = None
    shadow_reason_codes: Annotated[
        tuple[str, ...] | None, _("a shadow entry: the shadow's reason codes; else null")
    ] = None


class ExplainLedgerJson(CliJson, kw_only=True):
    """Where ``explain`` read the decision: the ledger entry and its history."""

    db: Annotated[Path_, _("the ledger file read (read-only)")]
    seq: Annotated[int, _("the decision entry's place in the chain")]
    entry_hash: Annotated[Identity, _("the decision entry's hash")]
    at: Annotated[Millis, _("when it was decided, Unix ms")]
    checkpoints: Annotated[Count, _("signed checkpoints the ledger was held against")]
    history: Annotated[tuple[LedgerStepJson, ...], _("every entry of the decision, in order")]


class ExplainReleaseJson(CliJson, kw_only=True):
    """The release that made the decision, authenticated against the trust root."""

    release_id: Annotated[ReleaseId, _("the release's id")]
    sequence: Annotated[int, _("its sequence number")]
    manifest_hash: Annotated[Identity, _("its manifest hash")]
    source: Annotated[str, _("where it was found: the accepted release, or an inbox file")]


class ExplainJson(CliJson, kw_only=True):
    """``explain DECISION_ID --json``: the decision in words, from the ledger and the
    release that made it."""

    explanation: Annotated[Explanation, _("which policies, rules and layers decided it")]
    ledger: Annotated[ExplainLedgerJson, _("the ledger entry it was read from")]
    release: Annotated[ExplainReleaseJson, _("the release that decided it")]


class EvalExplainedJson(CliJson, kw_only=True):
    """``eval --explain --json``: the Decision and its explanation."""

    decision: Annotated[Decision, _("the Decision, as ``eval --json`` prints it")]
    explanation: Annotated[Explanation | None, _("the decision in words")]


class EvalLineJson(CliJson, kw_only=True):
    """One envelope of a JSON Lines file and its Decision."""

    line: Annotated[int, _("the line number of the envelope")]
    decision: Annotated[Decision, _("its Decision")]
    explanation: Annotated[Explanation | None, _("with --explain, the decision in words")]


class EvalLinesJson(CliJson, kw_only=True):
    """``eval --jsonl --json``: a Decision per envelope line."""

    results: Annotated[tuple[EvalLineJson, ...], _("one per envelope, in line order")]


class EvalSideJson(CliJson, kw_only=True):
    """What one side of ``eval --against`` decided with."""

    release_id: Annotated[str, _("the release id its projection names")]
    projection: Annotated[Path_ | None, _("the projection folder (the base side)")] = None
    folder: Annotated[Path_ | None, _("the release folder (the --against side)")] = None
    sequence: Annotated[int | None, _("the verified release's sequence")] = None
    manifest_hash: Annotated[Identity | None, _("the verified release's manifest hash")] = None


class EvalOutcomeJson(CliJson, kw_only=True):
    """One side's decision of one envelope."""

    disposition: Annotated[Disposition, _("allow, conditional or deny")]
    reason_codes: Annotated[tuple[str, ...], _("its reason codes")]
    decision_id: Annotated[Identity, _("its decision id")]


class EvalExplanationsJson(CliJson, kw_only=True):
    """With --explain, each side's decision in words."""

    base: Annotated[Explanation | None, _("under the base")]
    against: Annotated[Explanation | None, _("under --against")]


class EvalComparedJson(CliJson, kw_only=True):
    """One envelope decided under both."""

    line: Annotated[int, _("the envelope's line number")]
    operation_hash: Annotated[Identity, _("the operation's identity")]
    base: Annotated[EvalOutcomeJson, _("its decision under the base")]
    against: Annotated[EvalOutcomeJson, _("its decision under --against")]
    changed: Annotated[bool, _("whether the disposition or reason codes differ")]
    explanations: Annotated[EvalExplanationsJson | None, _("with --explain, both in words")]


class EvalMoveJson(CliJson, kw_only=True):
    """How many envelopes went from one disposition to another."""

    from_: Annotated[Disposition, _("under the base")] = msgspec.field(name="from")
    to: Annotated[Disposition, _("under --against")]
    count: Annotated[Count, _("envelopes")]


class EvalAgainstJson(CliJson, kw_only=True):
    """``eval --against RELEASE --json``: every envelope under both, and the moves."""

    base: Annotated[EvalSideJson, _("what the base decided with")]
    against: Annotated[EvalSideJson, _("the verified --against release")]
    results: Annotated[tuple[EvalComparedJson, ...], _("one per envelope, in line order")]
    counts: Annotated[tuple[EvalMoveJson, ...], _("from -> to disposition counts")]
    total: Annotated[Count, _("envelopes decided")]
    changed: Annotated[Count, _("envelopes that decide differently")]


class DiffSideJson(CliJson, kw_only=True):
    """One release of ``release diff``."""

    release_id: Annotated[str, _("its release id")]
    release_sequence: Annotated[int, _("its sequence")]
    manifest_hash: Annotated[Identity, _("its manifest hash")]


class ReleaseDiffJson(CliJson, kw_only=True):
    """``release diff OLD NEW --json``: rules, policies and model providers added,
    removed or changed, and per policy each requirement that changed."""

    schema: Annotated[Literal["smf.release-diff/1"], _("record schema")]
    old: Annotated[DiffSideJson, _("the release compared from")]
    new: Annotated[DiffSideJson, _("the release compared to")]
    rules: Annotated[tuple[RuleChange, ...], _("rules added, removed or changed")]
    policies: Annotated[tuple[PolicyChange, ...], _("policies added, removed or changed")]
    model_providers: Annotated[tuple[ProviderChange, ...], _("model providers that changed")]
    authenticated: Annotated[bool, _("both read through --trust-root (else as written)")]
    unchanged: Annotated[bool, _("nothing differs")]


class TalliedJson(CliJson, kw_only=True):
    """Recorded decisions that would change, for one value of one dimension."""

    value: Annotated[str, _("the capability, rule, policy, layer or tenant pseudonym")]
    count: Annotated[Count, _("decisions (one differing in two policies counts under each)")]
    examples: Annotated[tuple[Identity, ...], _("up to three of their decision ids")]


class MoveJson(CliJson, kw_only=True):
    """Recorded decisions that would go from one disposition to another."""

    from_: Annotated[Literal["allow", "hold", "deny"], _("enforced")] = msgspec.field(name="from")
    to: Annotated[Literal["allow", "hold", "deny"], _("under the shadow")]
    count: Annotated[Count, _("decisions")]
    examples: Annotated[tuple[Identity, ...], _("up to three of their decision ids")]


class RecordedTrafficJson(CliJson, kw_only=True):
    """What the ledger's shadow entries of a pair say (recorded traffic)."""

    ledger: Annotated[Path_, _("the ledger file read (verified first, read-only)")]
    checkpoints: Annotated[Count, _("signed checkpoints the ledger was held against")]
    since_ms: Annotated[Millis | None, _("the window's start (--since), Unix ms, or null")]
    until_ms: Annotated[Millis | None, _("the window's end (--until, excluded), or null")]
    total: Annotated[Count, _("decisions made under OLD that NEW would decide otherwise")]
    moves: Annotated[tuple[MoveJson, ...], _("from -> to disposition counts, most first")]
    by_capability: Annotated[tuple[TalliedJson, ...], _("by the operation's capability")]
    by_rule: Annotated[tuple[TalliedJson, ...], _("by rule a differing policy rests on")]
    by_policy: Annotated[tuple[TalliedJson, ...], _("by differing policy")]
    by_layer: Annotated[tuple[TalliedJson, ...], _("by the differing policies' layers")]
    by_tenant: Annotated[tuple[TalliedJson, ...], _("by tenant pseudonym (never a name)")]
    unresolved: Annotated[
        tuple[Identity, ...], _("policy or rule identities neither release names")
    ]


class ReleaseTrafficDiffJson(CliJson, kw_only=True):
    """``release diff --state-dir ... --json`` (``--shadow``, ``--from/--to`` or OLD NEW
    with a state): the static diff and the recorded traffic."""

    schema: Annotated[Literal["smf.release-traffic-diff/1"], _("record schema")]
    diff: Annotated[ReleaseDiffJson, _("the static diff of the two releases")]
    recorded: Annotated[RecordedTrafficJson, _("what the ledger's shadow entries say")]
    chart: Annotated[Path_ | None, _("the SVG chart written (--chart), or null")]


# --- onboarding and doctor ---------------------------------------------------------


class BusUserJson(CliJson, kw_only=True):
    """``keys nkey --json``: a new bus credential's public half, the one thing to hand over."""

    principal: Annotated[Token, _("who connects with it: the seed file's name before .nkey")]
    nats_user: Annotated[NkeyUser, _("its public user key, for `approver add --bus-user`")]
    seed_file: Annotated[Path_, _("the seed file written (0600; never handed over)")]


class AttestationRequirementJson(CliJson, kw_only=True):
    """What the gate requires of a runtime's start-up attestation
    (``smf_assurance.ops.runtimes.provision``)."""

    runtime_pin: Annotated[str | None, _("the runtime version it must attest, or null")]
    required_hooks: Annotated[tuple[str, ...], _("hooks it must attest as present")]
    lease_ms: Annotated[Count, _("how long an accepted attestation counts, ms")]
    require_release: Annotated[bool, _("it must attest the gate's active release")]
    instance_bound: Annotated[
        bool, _("the model gateway serves only a process that proves it attested")
    ]


class RuntimeFilesJson(CliJson, kw_only=True):
    """A new runtime's files on this machine."""

    key: Annotated[Path_, _("its Ed25519 key file (0600)")]
    bus_credential: Annotated[Path_, _("its bus nkey seed (0600)")]
    gateway_token: Annotated[Path_, _("its model-gateway token (0600)")]
    context: Annotated[Path_, _("its per-matter context file (0600)")]
    snippet: Annotated[Path_, _("its configuration snippet (0600; holds the token)")]


PoliciesFrom = Literal["prior", "corpus"]
"""Where the new release's policies came from: the prior release, carried forward
unchanged, or ``--corpus`` compiled."""


class RuntimeAddJson(CliJson, kw_only=True):
    """``runtime add --json``; printed also when the gates refused or did not adopt the
    release (exit 1; the release is out, the files stay)."""

    runtime_id: Annotated[Token, _("the runtime's id")]
    kind: Annotated[Literal["hermes", "openclaw"], _("its runtime")]
    principal: Annotated[Principal, _("its principal in the registry")]
    tenant_id: Annotated[str, _("the tenant it works for")]
    key_id: Annotated[KeyId, _("its signing key's id")]
    nats_user: Annotated[NkeyUser, _("its bus credential's public user key")]
    adapter_id: Annotated[str, _("its adapter (mapper table)")]
    attestation: Annotated[AttestationRequirementJson, _("what it must attest")]
    files: Annotated[RuntimeFilesJson, _("its files (no secret is printed)")]
    policies_from: Annotated[PoliciesFrom, _("prior (carried forward) or corpus")]
    release: Annotated[ReleasePublishJson, _("the release that names it, and the gates' word")]


class RuntimeRemoveJson(CliJson, kw_only=True):
    """``runtime remove --json``; printed also when the gates refused or did not adopt the
    release (exit 1)."""

    runtime_id: Annotated[Token, _("the runtime revoked")]
    principals: Annotated[tuple[Principal, ...], _("its registry principals removed")]
    key_ids: Annotated[tuple[KeyId, ...], _("their key ids, no longer trusted")]
    attestation_requirement_removed: Annotated[bool, _("its attestation requirement was removed")]
    gateway_profile_removed: Annotated[bool, _("its model-gateway profile was removed")]
    left_files: Annotated[tuple[Path_, ...], _("its files left in place (keys, token, snippet)")]
    policies_from: Annotated[PoliciesFrom, _("prior (carried forward) or corpus")]
    release: Annotated[ReleasePublishJson, _("the release without it, and the gates' word")]


class RuntimeConfineJson(CliJson, kw_only=True):
    """``runtime confine --json``: the confinement profile written."""

    runtime_id: Annotated[Token, _("the runtime")]
    kind: Annotated[Literal["hermes", "openclaw"], _("its runtime")]
    profile: Annotated[Path_, _("the profile file written")]
    home: Annotated[Path_, _("its home: configuration read-only, session data read-write")]
    workspace: Annotated[Path_, _("its workspace, read-write")]
    runtime_dirs: Annotated[tuple[Path_, ...], _("its software, read-only")]
    read_only: Annotated[tuple[Path_, ...], _("more data, read-only")]
    nats_url: Annotated[str, _("the bus, reached through the launcher's forwarder")]
    gateway_url: Annotated[str, _("the model gateway, reached through the launcher's forwarder")]


class ConfineMountJson(CliJson, kw_only=True):
    """One mount of a sandbox."""

    kind: Annotated[Literal["ro", "rw", "symlink", "proc", "dev", "tmpfs"], _("how it is mounted")]
    source: Annotated[str | None, _("the host path (null for proc, dev, tmpfs)")]
    dest: Annotated[Path_, _("where it appears in the sandbox")]


class HoldsJson(CliJson, kw_only=True):
    """``holds add|remove|list --json``: the gate's legal-hold list after the command."""

    revision: Annotated[int, _("the list's revision in the bucket")]
    paths: Annotated[tuple[Path_, ...], _("the documents held, sorted, absolute, normalised")]


class TlsInitJson(CliJson, kw_only=True):
    """``tls init --json``: the files written."""

    directory: Annotated[Path_, _("the folder written")]
    ca_cert: Annotated[Path_, _("the CA's certificate: every client's SMF_NATS_CA")]
    ca_key: Annotated[Path_, _("the CA's private key (0600)")]
    cert: Annotated[Path_, _("the nodes' certificate")]
    key: Annotated[Path_, _("the nodes' private key (0600)")]
    includes: Annotated[
        tuple[Path_, ...], _("the node config's TLS includes: client.conf, route.conf")
    ]
    hosts: Annotated[tuple[str, ...], _("the names and addresses the certificate holds")]
    not_after_ms: Annotated[Millis, _("when the nodes' certificate expires, Unix ms")]


class TlsIssueJson(CliJson, kw_only=True):
    """``tls issue --json``: the server's certificate and key written."""

    cert: Annotated[Path_, _("the certificate: the server's --tls-cert")]
    key: Annotated[Path_, _("its private key (0600): the server's --tls-key")]
    hosts: Annotated[tuple[str, ...], _("the names and addresses the certificate holds")]
    not_after_ms: Annotated[Millis, _("when the certificate expires, Unix ms")]


class RuntimeRunPlanJson(CliJson, kw_only=True):
    """``runtime run --plan --json``: the sandbox the runtime would start in."""

    runtime_id: Annotated[Token, _("the runtime")]
    profile_digest: Annotated[
        str,
        msgspec.Meta(pattern=r"^sha256:[0-9a-f]{64}\Z"),
        _("digest of mounts, namespaces, forwarders"),
    ]
    mounts: Annotated[tuple[ConfineMountJson, ...], _("the view, in mount order")]
    holds: Annotated[tuple[Path_, ...], _("documents under legal hold, read-only")]
    gate_holds: Annotated[
        tuple[Path_, ...] | None,
        _("the gate's hold list, part of holds; null: not asked (the profile or the gate)"),
    ] = None
    gate_holds_unasked: Annotated[
        str | None, _("why the gate could not be asked; a start would be refused")
    ] = None
    namespaces: Annotated[tuple[str, ...], _("the namespaces it gets of its own")]
    forwarders: Annotated[dict[str, int], _("loopback port of each forwarder inside")]
    env: Annotated[tuple[str, ...], _("the names of its environment (values not shown)")]
    command: Annotated[tuple[str, ...], _("the runtime command")]


class ApproverAddJson(CliJson, kw_only=True):
    """``approver add --json``; printed also when the gates refused or did not adopt the
    release (exit 1)."""

    principal: Annotated[Principal, _("the approver")]
    key_id: Annotated[KeyId, _("the key id of the public record handed over")]
    licensed_roles: Annotated[tuple[str, ...], _("the professional roles it holds")]
    tenants: Annotated[tuple[Token, ...], _("the tenants it approves for")]
    nats_user: Annotated[NkeyUser, _("its bus credential's public user key")]
    policies_from: Annotated[PoliciesFrom, _("prior (carried forward) or corpus")]
    release: Annotated[ReleasePublishJson, _("the release that names it, and the gates' word")]


class ApproverRemoveJson(CliJson, kw_only=True):
    """``approver remove --json``; printed also when the gates refused or did not adopt
    the release (exit 1)."""

    principal: Annotated[Principal, _("the approver removed")]
    key_ids: Annotated[tuple[KeyId, ...], _("its key ids, no longer trusted")]
    policies_from: Annotated[PoliciesFrom, _("prior (carried forward) or corpus")]
    release: Annotated[ReleasePublishJson, _("the release without it, and the gates' word")]
    passkeys_removed: Annotated[
        Count, _("its enrolled passkeys, removed with it (absent in older output: 0)")
    ] = 0


Fingerprint = Annotated[str, msgspec.Meta(pattern=r"^[0-9a-f]{4}(?:-[0-9a-f]{4}){3}\Z")]
"""A credential's fingerprint: the first 16 hex digits of SHA-256 of its raw id, in
fours, short enough to read out over the phone."""


class ApproverPasskeyAddJson(CliJson, kw_only=True):
    """``approver passkey-add --json``, printed also when the gates did not adopt it.

    The gates refused the release, or gave no word within ``--wait``: exit 1."""

    principal: Annotated[Principal, _("the approver whose passkey was enrolled")]
    credential_id: Annotated[CredentialId, _("the credential id, base64url")]
    fingerprint: Annotated[
        Fingerprint, _("to read to the approver, who confirms it is their credential's")
    ]
    rp_id: Annotated[RpId, _("the relying party the credential is bound to")]
    origins: Annotated[tuple[Origin, ...], _("the origins it may sign from")]
    label: Annotated[
        Annotated[str, msgspec.Meta(max_length=64)] | None,
        _("the operator's name for it (none: not given)"),
    ]
    enrolled_at_ms: Annotated[Millis, _("when it was enrolled")]
    policies_from: Annotated[PoliciesFrom, _("prior (carried forward) or corpus")]
    release: Annotated[ReleasePublishJson, _("the release that enrols it, and the gates' word")]


class ApproverPasskeyRemoveJson(CliJson, kw_only=True):
    """``approver passkey-remove --json``, printed also when the gates did not adopt it.

    The gates refused the release, or gave no word within ``--wait``: exit 1."""

    principal: Annotated[Principal, _("the approver whose passkeys were removed")]
    credential_ids: Annotated[
        tuple[CredentialId, ...], _("the credentials removed, no longer accepted")
    ]
    policies_from: Annotated[PoliciesFrom, _("prior (carried forward) or corpus")]
    release: Annotated[ReleasePublishJson, _("the release without them, and the gates' word")]


class KeyRotateJson(CliJson, kw_only=True):
    """``keys rotate --json``; printed also when the gates refused or did not adopt the
    release (exit 1)."""

    principal: Annotated[Principal, _("the principal given a second key")]
    role: Annotated[Role, _("its role, the same for both keys")]
    old_key_id: Annotated[KeyId, _("the key it had, trusted until `keys retire`")]
    new_key_id: Annotated[KeyId, _("the key added")]
    nats_user: Annotated[
        NkeyUser | None, _("the new key's bus credential (none: the principal has none)")
    ]
    policies_from: Annotated[PoliciesFrom, _("prior (carried forward) or corpus")]
    release: Annotated[
        ReleasePublishJson, _("the release that names both keys, and the gates' word")
    ]


class KeyRetireJson(CliJson, kw_only=True):
    """``keys retire --json``; printed also when the gates refused or did not adopt the
    release (exit 1)."""

    principal: Annotated[Principal, _("the principal")]
    retired_key_id: Annotated[KeyId, _("the key retired: it signs nothing more")]
    active_key_ids: Annotated[tuple[KeyId, ...], _("the principal's keys still trusted")]
    policies_from: Annotated[PoliciesFrom, _("prior (carried forward) or corpus")]
    release: Annotated[ReleasePublishJson, _("the release that retires it, and the gates' word")]


class DoctorCheckJson(CliJson, kw_only=True):
    """One check of ``doctor``."""

    kind: Annotated[DoctorKind, _("what was checked")]
    subject: Annotated[str | None, _("which one: a service, runtime, connector, gate; or null")]
    status: Annotated[DoctorStatus, _("ok, warn, fail, or skip (not checked)")]
    detail: Annotated[str, _("what was found, in one line")]
    fix: Annotated[str | None, _("what to do about it; null when ok")]
    age_ms: Annotated[
        Count | None,
        _("age of what was found: an attestation, a checkpoint, unanchored entries' wait"),
    ]
    remaining_ms: Annotated[int | None, _("a release's lease left (negative: ended); or null")]


class DoctorJson(CliJson, kw_only=True):
    """``doctor --json``; printed also when a check failed (then exit 1)."""

    ok: Annotated[bool, _("no check failed")]
    nats_url: Annotated[str, _("the bus checked")]
    checks: Annotated[tuple[DoctorCheckJson, ...], _("every check, in order")]
    failed: Annotated[Count, _("checks that failed")]
    warned: Annotated[Count, _("checks that warned")]
    lease_warn_hours: Annotated[Count, _("a lease ending sooner than this warns")]
    checkpoint_age_s: Annotated[Count, _("entries unanchored longer than this warn")]


VARIANTS: Final[dict[type[CliJson], str]] = {
    EvalExplainedJson: "--explain",
    EvalLinesJson: "--jsonl",
    EvalAgainstJson: "--against",
    ReleaseTrafficDiffJson: "--state-dir",
}
"""Types a command prints instead of its first one when given a flag (not refusals)."""


# --- the table of commands -----------------------------------------------------------------

COMMANDS: Final[dict[tuple[str, ...], tuple[type[CliJson], ...]]] = {
    ("compile",): (CompileJson,),
    ("eval",): (EvalJson, EvalExplainedJson, EvalLinesJson, EvalAgainstJson),
    ("explain",): (ExplainJson,),
    ("demo",): (DemoJson,),
    ("up",): (UpJson,),
    ("keys", "new"): (KeyRecordJson,),
    ("keys", "public"): (KeyRecordJson,),
    ("approvals", "pending"): (ApprovalsPendingJson,),
    ("approvals", "show"): (ApprovalsShowJson,),
    ("approvals", "resolve"): (ApprovalsResolveJson, ApprovalsResolveRefusal),
    ("approvals", "rerequest"): (ApprovalsRerequestJson,),
    ("ledger", "verify"): (LedgerVerifyJson,),
    ("backup",): (BackupJson,),
    ("restore",): (RestoreJson,),
    ("swarm", "analyze"): (SwarmReportJson,),
    ("swarm", "review"): (SwarmReportJson,),
    ("release", "build"): (ReleaseBuildJson,),
    ("release", "verify"): (ReleaseVerifyJson,),
    ("release", "trust-root"): (TrustRootJson,),
    ("release", "publish"): (ReleasePublishJson,),
    ("release", "status"): (ReleaseStatusJson,),
    ("release", "diff"): (ReleaseDiffJson, ReleaseTrafficDiffJson),
    ("release", "withdraw-shadow"): (ReleaseWithdrawShadowJson,),
    ("console",): (ConsoleJson,),
    ("notify",): (NotifyJson,),
    ("bus", "authorization"): (BusAuthorizationJson,),
    ("bus", "permissions"): (BusPermissionsJson,),
    ("model-gateway", "upstream"): (ModelGatewayUpstreamJson,),
    ("model-gateway", "add-runtime"): (ModelGatewayAddRuntimeJson,),
    ("model-gateway", "clear"): (ModelGatewayClearJson,),
    ("model-gateway", "list"): (ModelGatewayListJson,),
    ("model-gateway", "serve"): (ModelGatewayServeJson,),
    ("keys", "nkey"): (BusUserJson,),
    ("keys", "rotate"): (KeyRotateJson,),
    ("keys", "retire"): (KeyRetireJson,),
    ("runtime", "add"): (RuntimeAddJson,),
    ("runtime", "remove"): (RuntimeRemoveJson,),
    ("runtime", "confine"): (RuntimeConfineJson,),
    ("runtime", "run"): (RuntimeRunPlanJson,),
    ("holds", "add"): (HoldsJson,),
    ("holds", "remove"): (HoldsJson,),
    ("holds", "list"): (HoldsJson,),
    ("tls", "init"): (TlsInitJson,),
    ("tls", "issue"): (TlsIssueJson,),
    ("approver", "add"): (ApproverAddJson,),
    ("approver", "remove"): (ApproverRemoveJson,),
    ("approver", "passkey-add"): (ApproverPasskeyAddJson,),
    ("approver", "passkey-remove"): (ApproverPasskeyRemoveJson,),
    ("doctor",): (DoctorJson,),
}
"""Each command with ``--json`` and its types: what it prints, then any refusal it prints."""


# --- the document ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Page:
    """One command line's ``--json`` page: its table of commands, the flags that
    print another type, the page's opening and where it is written."""

    commands: Mapping[tuple[str, ...], tuple[type[CliJson], ...]]
    variants: Mapping[type[CliJson], str]
    head: str
    doc: Path


DOC: Final = Path(__file__).resolve().parents[3] / "docs" / "CLI-JSON.md"

_HEAD = """\
# The `--json` output of each command

Generated from `smf_assurance/ops/cli/cli_json.py` by
`python -m smf_assurance.ops.cli.cli_json` (or `make cli-json`); `tests/cli/test_cli_json.py`
fails when this page is stale. Do not edit it by hand. The team's tools (`python -m smf_tools`,
not in the wheel) have their own page, `docs/TOOLS-JSON.md`.

`--json` carries machine values. Every command prints one line of
canonical JSON (RFC 8785 key order), one object, closed: a reader may decode
it strictly, and an unknown field is an error. Ids and hashes are whole
(`sha256:` and 64 hex digits; order ids 64 hex digits; `ed25519:` key ids),
enums are closed sets, numbers are integers (ratios `_x1000`, latencies in
ns), times are Unix milliseconds. What a table shows for people (`held ->
allow`, `3m 02s`, an id cut to 12 digits) is never in the JSON.

A command that fails prints nothing on stdout and one line on stderr, unless
its entry below names what it prints then.
"""


PAGE: Final = Page(COMMANDS, VARIANTS, _HEAD, DOC)
"""The product's page: the commands of ``smf-assurance``."""


def _describe(component: dict[str, Any]) -> list[str]:
    lines = ["| field | type | meaning |", "| --- | --- | --- |"]
    for name, schema in component["properties"].items():
        kind = _kind(schema).replace("|", "\\|")
        lines.append(f"| `{name}` | {kind} | {schema.get('description', '')} |")
    return lines


def _json(value: object) -> str:
    """An enum member as it appears in the output: ``held``, ``false``, ``1``."""
    return value if isinstance(value, str) else msgspec.json.encode(value).decode()


def _kind(schema: dict[str, Any]) -> str:
    """A short type for the table; the schema below has the whole of it."""
    if "$ref" in schema:
        return f"`{str(schema['$ref']).rsplit('/', 1)[-1]}`"
    if "enum" in schema:
        return " | ".join(f"`{_json(v)}`" for v in schema["enum"])
    if "const" in schema:
        return f"`{_json(schema['const'])}`"
    if "anyOf" in schema:
        return " | ".join(_kind(s) for s in schema["anyOf"])
    kind = schema.get("type", "any")
    if kind == "array":
        return f"list of {_kind(schema.get('items', {}))}"
    if kind == "object" and "additionalProperties" in schema:
        return f"map to {_kind(schema['additionalProperties'])}"
    pattern = schema.get("pattern")
    return f"{kind} `{pattern}`" if pattern else str(kind)


def _first_line(struct: type) -> str:
    lines = (struct.__doc__ or "").strip().splitlines()
    return lines[0].replace("``", "`") if lines else ""


def render(page: Page | None = None) -> str:
    """The whole of a ``--json`` page (``docs/CLI-JSON.md`` unless told), from the types."""
    page = page or PAGE
    printed = {t for ts in page.commands.values() for t in ts}
    _, components = msgspec.json.schema_components(
        sorted(printed, key=lambda t: t.__name__), ref_template="#/$defs/{name}"
    )
    out = [page.head]
    for path, declared in page.commands.items():
        out.append(f"## `{' '.join(path)} --json`\n")
        for n, struct in enumerate(declared):
            flag = page.variants.get(struct)
            role = (
                "Prints"
                if n == 0
                else f"With `{flag}`, prints"
                if flag is not None
                else "When refused, prints"
            )
            out.append(f"{role} `{struct.__name__}`: {_first_line(struct)}\n")
            out.extend(_describe(components[struct.__name__]))
            out.append("")
    # Only the types this page's commands use: another command line's types are
    # CliJson too, and are on its own page.
    nested = {
        t.__name__: t for t in _nested(CliJson) if t not in printed and t.__name__ in components
    }
    out.append("## Types inside them\n")
    for name in sorted(components):
        if name in nested:
            out.append(f"### `{name}`\n")
            line = _first_line(nested[name])
            out.extend([f"{line}\n"] if line else [])
            out.extend(_describe(components[name]))
            out.append("")
    product = sorted(
        name
        for name in components
        if name not in nested and name not in {t.__name__ for t in printed}
    )
    if product:
        out.append(
            "Records of the gate and of Swarm, reported as they are (their meaning is in "
            "their modules and in `docs/SUBJECTS.md`): "
            + ", ".join(f"`{name}`" for name in product)
            + ".\n"
        )
    out.append("## Schemas\n")
    out.append("Every type above and every type it uses, as JSON Schema (`$defs`).\n")
    out.append("```json")
    whole = {"$defs": dict(sorted(components.items()))}
    out.append(msgspec.json.format(msgspec.json.encode(whole), indent=2).decode())
    out.append("```\n")
    return "\n".join(out)


def _nested(base: type[CliJson]) -> list[type[CliJson]]:
    found: list[type[CliJson]] = []
    for sub in base.__subclasses__():
        found += [sub, *_nested(sub)]
    return found


def main(argv: list[str], page: Page | None = None) -> int:
    """Write a ``--json`` page (``docs/CLI-JSON.md`` unless told); with ``--check``, exit 1
    if it differs."""
    page = page or PAGE
    text = render(page)
    if "--check" in argv:
        return 0 if page.doc.exists() and page.doc.read_text(encoding="utf-8") == text else 1
    page.doc.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
