"""The model gateway's question to the gate: may this runtime be served now?

Both runtimes reach their model through an OpenAI-compatible endpoint; the
model gateway is that endpoint, outside the runtime. It serves a runtime
only while the gate holds a fresh, accepted attestation from it: a runtime
in safe mode or with its plugin disabled never attests (RUNTIMES.md,
"Hermes Agent"), so it gets no completion at all, and so no tool call to run.

The gateway asks on ``smf.gateway.admit`` with a :class:`GatewayAdmit`
(bus permissions let only the gateway role ask, ``smf_assurance.subjects.bus_access``);
the gate answers with a :class:`GatewayAdmission` signed with its key, which
the gateway verifies before it serves anything.

Admission is bound to the process that attested (docs/HERMES.md, finding 10):
a second process of the same runtime id without our plugin (safe mode, the
plugin left out of ``plugins.enabled``) holds the runtime's gateway token,
which lives in the runtime's configuration, but not its adapter. The adapter
draws a random :data:`~smf_assurance.subjects.patterns.InstanceId` at start, attests it,
and puts an :class:`InstanceProof` signed with the runtime key on every model
request (HTTP header :data:`~smf_assurance.subjects.names.HEADER_INSTANCE_PROOF`). The gate
serves a runtime whose attestation names an instance only for a fresh proof of
an instance it holds a fresh, accepted attestation from.

The gate's admission of a proof names what the gateway needs to check the next
proofs of that same instance itself (:class:`ProofStanding`: the instance, the
runtime's public keys, the gate's freshness window), so a proof-bound runtime is
not a gate round trip per request: the gateway serves on the kept admission only
after it verified the proof as the gate would, and asks the gate about any proof
it cannot (which the gate then refuses and records).
"""

from __future__ import annotations

import base64
import binascii
import secrets
from collections.abc import Mapping
from typing import Annotated, Final, Literal

import msgspec

from smf_assurance.subjects import dsse, names
from smf_assurance.subjects.canonical import Identity, identity_of
from smf_assurance.subjects.envelope import Classification, Name
from smf_assurance.subjects.keys import VerifyKey
from smf_assurance.subjects.messages import MAX_OUTPUT_WINDOW_CHARS
from smf_assurance.subjects.patterns import Code, InstanceId, MessageId, Millis, Token, ToolCallId
from smf_assurance.subjects.signer import Signer

MAX_CALLS_PER_ASK: Final = 256
"""At most this many tool-call ids in one :class:`GatewayCalls`; the gateway asks in
batches of it."""

ProviderName = Annotated[str, msgspec.Meta(pattern=r"^[a-z0-9][a-z0-9_.-]{0,63}\Z")]

MAX_INSTANCE_PROOF_CHARS: Final = 2048
"""Bound on the header's value, checked before any decoding (a sealed proof is ~600)."""
SealedProof = Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_INSTANCE_PROOF_CHARS)]


ProofNonce = Annotated[str, msgspec.Meta(pattern=r"^[0-9a-f]{32}\Z")]
"""128 random bits in lowercase hex: one model request's proof."""


class InstanceProof(msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True):
    """ "This model request comes from the adapter process ``instance_id`` of
    ``runtime_id``", signed with the runtime key (:data:`names.PAYLOAD_INSTANCE_PROOF`).

    What it proves is that the sender holds the runtime key now, which the
    plugin-less process of the same runtime does not (the adapter's key file is
    denied to the agent's own tools, ``credential_access``). Bound to one
    request so a captured proof is worth nothing to another process:

    - ``nonce``: drawn for one request; the gate accepts a proof once (a second
      request with the same proof is refused ``instance_proof_replayed``) and only
      within seconds of ``issued_at_ms`` (its proof freshness window), which bounds
      what it must remember;
    - ``request_digest``: :func:`request_digest` of the request's ``messages``, as
      the adapter handed them to its HTTP client; the gateway computes the same
      from the body it received, and the gate refuses a proof for another body
      (``instance_proof_for_another_request``). Absent where the runtime's adapter
      cannot see the messages as they are sent (OpenClaw: docs/OPENCLAW.md).

    The gate refuses a proof without a nonce. ``omit_defaults``: a proof without
    them encodes as before they existed (the golden vectors)."""

    schema: Literal["smf.instance-proof/1"]
    runtime_id: Token
    instance_id: InstanceId
    issued_at_ms: Millis
    nonce: ProofNonce | None = None
    request_digest: Identity | None = None


def new_proof_nonce() -> str:
    return secrets.token_hex(16)


def request_digest(messages: object) -> str:
    """The identity (SHA-256 over JCS with NFC strings, ``smf_assurance.subjects.canonical``)
    of a chat request's ``messages``: what the adapter computes over the messages it
    hands its HTTP client and the gateway over the messages of the body it received,
    identically (raises :class:`CanonicalJSONError` for a value with no canonical
    form, a float for one: such a request cannot be proven)."""
    return identity_of({"messages": messages})


def new_instance_id() -> str:
    """A fresh process id: ``i-`` and 128 random bits in hex."""
    return "i-" + secrets.token_hex(16)


def seal_instance_proof(proof: InstanceProof, key: Signer) -> str:
    """The header value: the DSSE envelope's JSON in unpadded base64url (header-safe)."""
    envelope = dsse.encode_envelope(dsse.sign_struct(names.PAYLOAD_INSTANCE_PROOF, proof, [key]))
    return base64.urlsafe_b64encode(envelope).rstrip(b"=").decode("ascii")


def open_instance_proof(
    sealed: str, trusted: Mapping[str, VerifyKey]
) -> tuple[InstanceProof, dsse.Verified]:
    """Verify a header value against ``trusted`` (the runtime keys of the registry).

    Raises a :class:`dsse.SignatureError` subclass named after what it stops
    (``dsse.MalformedPayloadError`` for a verified payload that is not a proof)."""
    if not sealed or len(sealed) > MAX_INSTANCE_PROOF_CHARS:
        raise dsse.MalformedEnvelopeError("instance proof is empty or too long")
    try:
        raw = base64.b64decode(sealed + "=" * (-len(sealed) % 4), altchars=b"-_", validate=True)
    except (binascii.Error, ValueError) as exc:
        raise dsse.MalformedEnvelopeError("instance proof is not base64url") from exc
    if base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii") != sealed:
        # one proof, one spelling: the gateway keys its admissions by the header's text
        raise dsse.MalformedEnvelopeError("instance proof is not canonical base64url")
    envelope = dsse.decode_envelope(raw, MAX_INSTANCE_PROOF_CHARS)
    return dsse.open_struct(envelope, trusted, InstanceProof, names.PAYLOAD_INSTANCE_PROOF)


def unverified_instance_proof(sealed: str) -> InstanceProof | None:
    """The proof a header value claims to be, its signature NOT checked (None: not one).

    For bookkeeping only, never for a decision: the gateway notes a request's nonce
    as seen before it asks the gate about it, so a copy of the same proof arriving
    meanwhile is never served on a kept admission."""
    try:
        raw = base64.b64decode(sealed + "=" * (-len(sealed) % 4), altchars=b"-_", validate=True)
        envelope = dsse.decode_envelope(raw, MAX_INSTANCE_PROOF_CHARS)
        return msgspec.json.decode(envelope.raw_payload, type=InstanceProof)
    except (binascii.Error, ValueError, dsse.SignatureError, msgspec.DecodeError):
        return None


class ProofKey(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A runtime's public verify key: its id and the 32 raw bytes in standard base64."""

    key_id: Annotated[str, msgspec.Meta(max_length=128)]
    public_key: Annotated[str, msgspec.Meta(max_length=64)]


MAX_PROOF_KEYS: Final = 16


class ProofStanding(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """In an admission of a proof: what checks the next proofs of the same process
    as the gate did (public material only). ``keys``: the registry's keys of that
    runtime (a proof signed by any other is not checked by the gateway, it asks);
    ``window_ms``: the gate's proof freshness window."""

    instance_id: InstanceId
    keys: Annotated[tuple[ProofKey, ...], msgspec.Meta(min_length=1, max_length=MAX_PROOF_KEYS)]
    window_ms: Annotated[int, msgspec.Meta(ge=0, le=60_000)]


def proof_keys(keys: Mapping[str, VerifyKey]) -> tuple[ProofKey, ...]:
    return tuple(
        ProofKey(key_id=kid, public_key=base64.b64encode(key.public_bytes).decode("ascii"))
        for kid, key in sorted(keys.items())
    )


def trusted_proof_keys(keys: tuple[ProofKey, ...]) -> dict[str, VerifyKey]:
    """The verify keys named; raises ``ValueError`` for one whose id is not its own."""
    trusted: dict[str, VerifyKey] = {}
    for named in keys:
        try:
            key = VerifyKey(base64.b64decode(named.public_key, validate=True))
        except binascii.Error as exc:
            raise ValueError("proof key is not base64") from exc
        if key.key_id != named.key_id:
            raise ValueError("proof key id is not its key's")
        trusted[key.key_id] = key
    return trusted


class GatewayAdmit(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One model request's admission question; ``tenant_id`` names whose ledger
    pseudonym a refusal is recorded under.

    ``provider`` and ``classification`` make the model request a governed egress
    the provider the request would go to, and the highest
    classification of what it carries (the runtime's declared facts, raised by
    the gate's detectors over the messages). The gate admits it only when the
    release in force names that provider for that classification."""

    schema: Literal["smf.gateway-admit/1"]
    request_id: MessageId
    runtime_id: Token
    tenant_id: Name
    provider: ProviderName
    classification: Classification
    issued_at_ms: Millis
    instance_proof: SealedProof | None = None
    """The request's :data:`names.HEADER_INSTANCE_PROOF`, as the runtime sent it (the
    gate verifies it; the gateway holds no runtime keys)."""
    model_list: bool = False
    """A request for the provider's model list, which carries nothing of the runtime to
    the provider and whose answer is decided as the runtime's output before it is shown:
    it needs the runtime's standing and the release's approval of the provider, not a
    process proof (Hermes asks for the list outside its request middleware, so a
    proof-bound runtime's list request never carries one; docs/HERMES.md)."""
    request_digest: Identity | None = None
    """:func:`request_digest` of the body the gateway received (None: a model list, or
    a body whose messages have no canonical form); a proof naming another is refused."""
    proof_seen: bool | msgspec.UnsetType = msgspec.UNSET
    """The gateway saw this proof's nonce before (it may have served that request on a
    kept admission, unknown to the gate): the gate refuses it as replayed and records
    it. Only ever a reason to refuse. Unset: left out of the encoding."""


class GatewayAdmission(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """The gate's answer: ``admitted`` with the attested runtime version, or the
    reason codes of the refusal and the ledger entry that records it."""

    schema: Literal["smf.gateway-admission/1"]
    request_id: str
    runtime_id: str
    admitted: bool
    reason_codes: tuple[Code, ...]
    runtime_version: str | None = None
    """The attested version; the gateway's output closes name it (the gate admits
    a close only under the attested version)."""
    expires_at_ms: int | None = None
    """When the attestation's lease ends; the gateway never serves past it."""
    evidence: tuple[str, ...] = ()
    confined_profile: str | None = None
    """On an admission: the profile digest the runtime's launcher attests while the
    runtime runs confined (``smf_assurance.subjects.confinement``); None: not confined."""
    detection_window_chars: (
        Annotated[int, msgspec.Meta(ge=0, le=MAX_OUTPUT_WINDOW_CHARS)] | msgspec.UnsetType
    ) = msgspec.UNSET
    """How much of what a conversation showed before (its tail) the output gate reads
    with each turn: the release's setting. Unset by default, so left out
    of the encoding and an admission without it reads as before; the gateway then
    sends the release's default."""
    proof_standing: ProofStanding | msgspec.UnsetType = msgspec.UNSET
    """On an admission of an instance proof: what lets the gateway check the next proofs
    of that instance itself until ``expires_at_ms``. Unset: left out of the encoding."""


class GatewayCalls(msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True):
    """``smf.gateway.calls`` (tool-call accounting): did the gate decide a proposal for
    each of these tool calls of this runtime? The ids are those the gateway issued
    itself, for tool results a request now carries back to the model.

    ``not_offered``: those of the ids whose call named a tool the request the model
    answered did not offer (no runtime runs such a call: it answers it with an
    error, before any hook of ours sees it). One no proposal carried is recorded as
    a refusal (``unknown_tool``, ``tool_not_offered_by_runtime``) and noted decided,
    not a stop. ``invalid_arguments``: those of the ids whose arguments certainly
    failed the ``parameters`` schema that request offered for the tool (a runtime that
    checks them, as OpenClaw does, answers the call with an error before any hook); one
    no proposal carried is recorded as a refusal (``tool_arguments_invalid``,
    ``tool_arguments_rejected_by_runtime``) and noted decided, not a stop; so is one
    whose arguments were not JSON in a turn its runtime refused whole for that (Hermes).
    ``invalid_turn``: those of the ids whose own arguments were fine in such a turn,
    answered by the runtime's own text for it; one no proposal carried is recorded as a
    refusal (``tool_call_turn_invalid``, ``tool_call_skipped_by_runtime``) and noted
    decided, not a stop. ``omit_defaults``: an ask without them encodes as before they
    existed."""

    schema: Literal["smf.gateway-calls/1"]
    request_id: MessageId
    runtime_id: Token
    tenant_id: Name
    tool_call_ids: Annotated[
        tuple[ToolCallId, ...], msgspec.Meta(min_length=1, max_length=MAX_CALLS_PER_ASK)
    ]
    issued_at_ms: Millis
    not_offered: Annotated[tuple[ToolCallId, ...], msgspec.Meta(max_length=MAX_CALLS_PER_ASK)] = ()
    invalid_arguments: Annotated[
        tuple[ToolCallId, ...], msgspec.Meta(max_length=MAX_CALLS_PER_ASK)
    ] = ()
    invalid_turn: Annotated[tuple[ToolCallId, ...], msgspec.Meta(max_length=MAX_CALLS_PER_ASK)] = ()


class GatewayCallsAnswer(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """The gate's answer, signed with its key: the ids no verified proposal carried.
    When any is uncovered the gate has recorded ``ungated_tool_result`` and stopped
    the runtime (``stopped``) until an operator clears it.

    ``refused``: ids of ``not_offered``, ``invalid_arguments`` or ``invalid_turn``
    calls no proposal carried, now recorded as refusals (``evidence``) and decided.
    ``unrecorded``: such ids whose refusal the ledger did not take
    (``evidence_store_unavailable``): neither decided nor a stop; the gateway refuses
    the request and asks again next time. Both are left out of the encoding when empty,
    so an answer without them has the bytes it had before."""

    schema: Literal["smf.gateway-calls-answer/1"]
    request_id: str
    runtime_id: str
    uncovered: tuple[str, ...]
    stopped: bool = False
    reason_codes: tuple[Code, ...] = ()
    evidence: tuple[str, ...] = ()
    refused: tuple[str, ...] | msgspec.UnsetType = msgspec.UNSET
    unrecorded: tuple[str, ...] | msgspec.UnsetType = msgspec.UNSET


class GatewayClear(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """``smf.gateway.clear``: an operator lifts the stop of one runtime (only the
    operator role may publish it, ``smf_assurance.subjects.bus_access``)."""

    schema: Literal["smf.gateway-clear/1"]
    runtime_id: Token


class GatewayCleared(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """The gate's answer to a clear. A stop is lifted only once the clear is in the
    gate's ledger (``evidence``) and the stop is gone from its store; otherwise the
    runtime stays ``stopped`` and ``reason_codes`` say why."""

    schema: Literal["smf.gateway-cleared/1"]
    runtime_id: str
    was_stopped: bool
    stopped: bool = False
    """Still stopped after this clear (it could not be recorded or stored, or a newer
    stop stands)."""
    reason_codes: tuple[Code, ...] = ()
    evidence: tuple[str, ...] = ()
