"""Runtime attestation at the gate: no attestation, no decision.

Invariants this stage keeps, each checked where it is named:

- Opt-in per runtime: only runtime ids named in ``required`` must attest (the
  Hermes runtime entry opts in; the scripted demo runtime does not), so a
  runtime that cannot attest keeps working as before.
- A proposal (or an output close, which the buffer turns into a proposal)
  from a runtime that must attest is refused by the gate chain's first link
  (``smf_assurance.pipeline.chain.gate``, ``admit``), before normalization, when the
  runtime has no accepted attestation (``runtime_attestation_missing``), when
  the last one is older than its lease (``runtime_attestation_stale``), when
  the last one was refused (``runtime_attestation_rejected``), or when the
  proposal names a runtime version other than the attested one
  (``runtime_version_not_attested``).
- An attestation counts only when signed by a registered runtime key whose
  ``runtime_id`` is the one attested (``runtime_identity_mismatch``), issued
  within the freshness window (``stale_attestation``), and not older than the
  one already held (``attestation_replayed``).
- The latest verified attestation wins, including a refusal: a runtime that
  reports a problem (streaming switched on, a hook missing, a version off
  its pin) is refused from then on, until it attests again without it.
- Release (verification in every consumer, before use): when the
  runtime's requirement says ``require_release``, an attestation that names
  no release the runtime verified itself is refused
  (``runtime_release_not_verified``), and so is one naming another release
  than the gate's active one (``runtime_release_mismatch``). A proposal is
  refused with ``runtime_release_mismatch`` too when the gate has moved to
  another release since the runtime attested: the runtime re-attests.

Admission bound to the process (docs/HERMES.md, finding 10): an
attestation may name the adapter's process (``instance_id``). Each accepted
one is held per instance too (bounded, oldest forgotten first), and the model
gateway is then served only for a fresh :class:`InstanceProof` of an instance
whose own latest attestation was accepted within its lease
(:meth:`AttestationDesk.admit_instance`): a second process of the runtime
without our plugin holds the gateway token but cannot prove an instance.

Attestations live in memory: a gate restart forgets them, so every runtime
that must attest is refused until it re-attests (adapters re-attest on a
timer and before their first proposal). RUNTIMES.md, "Hermes Agent":
``HERMES_SAFE_MODE=1`` loads no plugin, so no attestation is ever sent and the
gate refuses that runtime's proposals, which is the point.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final, Protocol, TypeVar

import msgspec
import structlog

from smf_assurance.core.seen_once import SeenOnce
from smf_assurance.pipeline.desks.signed import check_fresh, check_runtime_signer, open_request
from smf_assurance.pipeline.service import StageRefusal
from smf_assurance.subjects import dsse, names
from smf_assurance.subjects.attestation import AttestationAck, RuntimeAttestation
from smf_assurance.subjects.messages import Proposal
from smf_assurance.subjects.model_gateway import ProofStanding, open_instance_proof, proof_keys
from smf_assurance.subjects.registry import KeyRegistry, Principal

log = structlog.get_logger(__name__)

MISSING: Final = "runtime_attestation_missing"
STALE: Final = "runtime_attestation_stale"
REJECTED: Final = "runtime_attestation_rejected"
VERSION_NOT_ATTESTED: Final = "runtime_version_not_attested"
RELEASE_NOT_VERIFIED: Final = "runtime_release_not_verified"
RELEASE_MISMATCH: Final = "runtime_release_mismatch"
MAX_ATTESTATION_BYTES: Final = 64 * 1024
INSTANCE_PROOF_MISSING: Final = "instance_proof_missing"
INSTANCE_PROOF_INVALID: Final = "instance_proof_invalid"
INSTANCE_PROOF_STALE: Final = "instance_proof_stale"
INSTANCE_NOT_ATTESTED: Final = "runtime_instance_not_attested"
INSTANCE_PROOF_REPLAYED: Final = "instance_proof_replayed"
INSTANCE_PROOF_WITHOUT_NONCE: Final = "instance_proof_without_nonce"
INSTANCE_PROOF_OTHER_REQUEST: Final = "instance_proof_for_another_request"
INSTANCE_PROOFS_TOO_MANY: Final = "instance_proofs_too_many"
PROOF_FRESHNESS_MS: Final = 10_000
"""A model request's proof is good for this long around its issue time (seconds: it is
sealed for that very request), and the gate remembers each accepted nonce as long."""
MAX_PROOF_NONCES: Final = 65_536
"""Accepted nonces remembered at once (all gateways' requests within the freshness
window); past it a new proof is refused ``instance_proofs_too_many`` (fails closed)."""
MAX_INSTANCES: Final = 64
"""Per runtime: the attested processes held (oldest forgotten first; a forgotten one
is refused ``runtime_instance_not_attested`` until it attests again: fails closed)."""


@dataclass(frozen=True, slots=True)
class RuntimeRequirement:
    """What the gate demands of one runtime id's attestation."""

    runtime_pin: str | None = None
    """When set, the attested runtime version must equal it."""
    lease_ms: int = 180_000
    """An accepted attestation counts for this long after it was issued."""
    required_hooks: tuple[str, ...] = ()
    require_release: bool = False
    """When set, the runtime must have verified the gate's active release itself."""
    output_via_gateway: bool = False
    """The model gateway serves this runtime: it holds each turn whole until
    the output verdict, so a runtime that streams what it receives shows nothing the
    gate did not release, and streaming is not refused. Taken on the
    operator's word that the runtime reaches its model only through the gateway (the
    deployment's networks make it so; no attestation can show it)."""
    instance_bound: bool = False
    """The model gateway serves this runtime only for a proof of an attested process,
    even while its attestations name none (an adapter that cannot prove its process
    then gets no completion). Runtimes whose attestation names an instance are held
    to it whatever this says."""


@dataclass(frozen=True, slots=True)
class Held:
    issued_at_ms: int
    accepted: bool
    runtime_version: str
    reasons: tuple[str, ...]
    release_id: str | None = None
    instance_id: str | None = None


def _judge(
    att: RuntimeAttestation, need: RuntimeRequirement, active_release: str | None
) -> tuple[str, ...]:
    """Reason codes for refusing a verified attestation; empty means accepted."""
    reasons: list[str] = list(att.problems)
    if att.hooks_missing:
        reasons.append("runtime_hook_missing")
    if any(hook not in att.hooks_present for hook in need.required_hooks):
        reasons.append("runtime_hook_missing")
    if any(s.enabled for s in att.streaming) and not need.output_via_gateway:
        reasons.append("runtime_streaming_enabled")
    if att.runtime_version != att.runtime_pin:
        reasons.append("runtime_version_not_pinned")
    if need.runtime_pin is not None and att.runtime_version != need.runtime_pin:
        reasons.append("runtime_version_not_pinned")
    if need.require_release:
        if att.verified_release_id is None:
            # the runtime did not verify a release before use
            reasons.append(RELEASE_NOT_VERIFIED)
        elif active_release is None or att.verified_release_id != active_release:
            # it verified another release than the one this gate decides with
            reasons.append(RELEASE_MISMATCH)
    return tuple(dict.fromkeys(reasons))


class _Attested(Protocol):
    @property
    def runtime_id(self) -> str: ...

    @property
    def issued_at_ms(self) -> int: ...


class _HeldSince(Protocol):
    @property
    def issued_at_ms(self) -> int: ...


A = TypeVar("A", bound=_Attested)


def verify_attested(
    att: A,
    signers: Iterable[Principal],
    role: str | None,
    now_ms: int,
    window_ms: int,
    held: Callable[[str], _HeldSince | None],
) -> A:
    """``att``, opened by :func:`~smf_assurance.pipeline.desks.signed.open_request`,
    once it may be held; else :class:`StageRefusal` with the ack's reason code. One
    check for runtime and launcher attestations alike:

    - when ``role`` is named, a signer holds it (``signer_role_mismatch``: a runtime's
      key cannot say it is confined), and a signer is registered for the runtime
      attested (``runtime_identity_mismatch``: one runtime, or its launcher, cannot
      vouch for another);
    - it was issued within ``window_ms`` of now (``stale_attestation``: one captured on
      the bus is not replayed later) and not before the one held
      (``attestation_replayed``).
    """
    check_runtime_signer(signers, att.runtime_id, role)
    check_fresh(att.issued_at_ms, now_ms, window_ms, "stale_attestation")
    before = held(att.runtime_id)
    if before is not None and att.issued_at_ms < before.issued_at_ms:
        raise StageRefusal("attestation_replayed")
    return att


@dataclass
class AttestationDesk:
    """Receives attestations on ``smf.attest`` and admits proposals by them."""

    required: Mapping[str, RuntimeRequirement]
    registry: Callable[[], KeyRegistry]
    clock: Callable[[], int]
    release_id: Callable[[], str | None] = lambda: None
    evidence_probe: Callable[[], Awaitable[bool]] | None = None
    freshness_ms: int = 120_000
    proof_freshness_ms: int = PROOF_FRESHNESS_MS
    max_proof_nonces: int = MAX_PROOF_NONCES
    _held: dict[str, Held] = field(default_factory=dict)
    _nonces: SeenOnce = field(init=False)
    """Accepted proofs' ``(runtime_id, nonce)``, until the end of their freshness window."""
    _instances: dict[str, OrderedDict[str, int]] = field(default_factory=dict)
    """Per runtime: each process whose latest attestation was accepted, and when it
    was issued."""
    _stopped: dict[str, str] = field(default_factory=dict)
    """Runtimes stopped until an operator clears them (tool-call accounting)."""
    share: Callable[[bytes], Awaitable[None]] | None = None
    """On a cluster: tell the other replicas of an attestation this one verified
    (``smf_assurance.pipeline.followers.replica_sync``); they verify and judge it themselves."""

    def __post_init__(self) -> None:
        self._nonces = SeenOnce(self.max_proof_nonces)

    # -- the ``smf.attest`` endpoint -----------------------------------------

    async def handle(self, data: bytes) -> bytes:
        """Verify and record one attestation; reply with an ack (never raises for input)."""
        try:
            att = self._verify(data)
        except StageRefusal as refusal:
            log.warning("attestation_refused", reason=refusal.reason_code)
            return msgspec.json.encode(
                AttestationAck(
                    schema="smf.attestation-ack/1",
                    attestation_id="",
                    accepted=False,
                    reason_codes=(refusal.reason_code,),
                )
            )
        ack = await self.record(att)
        if self.share is not None:
            try:
                await self.share(data)
            except Exception as exc:  # noqa: BLE001 - the others then refuse it: fails closed
                log.error("attestation_share_failed", error=type(exc).__name__)
        return msgspec.json.encode(ack)

    async def adopt(self, data: bytes) -> None:
        """An attestation another replica verified: verified and judged here again,
        as if it had come on ``smf.attest`` (no ack, no evidence probe). One this
        replica refuses (replayed, stale, unknown signer) is only logged."""
        try:
            att = self._verify(data)
        except StageRefusal as refusal:
            log.warning("attestation_not_adopted", reason=refusal.reason_code)
            return
        self._remember(att)

    def _verify(self, data: bytes) -> RuntimeAttestation:
        """A runtime key signed it (an attestation names every signature fault but an
        unknown signer ``bad_signature``), then :func:`verify_attested`."""
        registry = self.registry()
        att, signers = open_request(
            data,
            registry,
            RuntimeAttestation,
            names.PAYLOAD_ATTESTATION,
            malformed="bad_signature",
            wrong_type="bad_signature",
            max_size=MAX_ATTESTATION_BYTES,
            trusted=registry.trusted("runtime"),
        )
        return verify_attested(
            att, signers, "runtime", self.clock(), self.freshness_ms, self._held.get
        )

    def _remember(self, att: RuntimeAttestation) -> tuple[str, ...]:
        """Judge a verified attestation and hold it; the reasons it was refused for."""
        need = self.required.get(att.runtime_id, RuntimeRequirement())
        reasons = _judge(att, need, self.release_id())
        self._held[att.runtime_id] = Held(
            att.issued_at_ms,
            not reasons,
            att.runtime_version,
            reasons or ("accepted",),
            att.verified_release_id,
            att.instance_id,
        )
        if att.instance_id is not None:
            instances = self._instances.setdefault(att.runtime_id, OrderedDict())
            instances.pop(att.instance_id, None)
            if not reasons:
                instances[att.instance_id] = att.issued_at_ms
                while len(instances) > MAX_INSTANCES:
                    instances.popitem(last=False)
        return reasons

    async def record(self, att: RuntimeAttestation) -> AttestationAck:
        need = self.required.get(att.runtime_id, RuntimeRequirement())
        active_release = self.release_id()
        reasons = self._remember(att)
        accepted = not reasons
        evidence: bool | None = None
        if self.evidence_probe is not None:
            try:
                evidence = await self.evidence_probe()
            except Exception:
                log.exception("attestation_evidence_probe_failed")
                evidence = False
        log.info(
            "runtime_attested",
            runtime_id=att.runtime_id,
            accepted=accepted,
            reasons=list(reasons),
            runtime_version=att.runtime_version,
            verified_release_id=att.verified_release_id,
            active_release_id=active_release,
        )
        return AttestationAck(
            schema="smf.attestation-ack/1",
            attestation_id=att.attestation_id,
            accepted=accepted,
            reason_codes=reasons,
            expires_at_ms=att.issued_at_ms + need.lease_ms if accepted else None,
            release_id=active_release,
            evidence_store=None if evidence is None else "reachable" if evidence else "unavailable",
        )

    # -- stops (tool-call accounting, ``smf_assurance.pipeline.desks.tool_calls``) ----------

    def known_runtimes(self) -> frozenset[str]:
        """The runtime ids of the registry's runtime keys."""
        return frozenset(
            p.entry.runtime_id
            for p in self.registry().principals.values()
            if p.entry.role == "runtime" and p.entry.runtime_id is not None
        )

    def stop(self, runtime_id: str, reason: str) -> None:
        """Refuse ``runtime_id`` with ``reason``, whatever it attests, until cleared."""
        self._stopped[runtime_id] = reason

    def clear(self, runtime_id: str) -> bool:
        """Lift a stop (an operator's act); the runtime must attest again before it is
        served or may propose. Returns whether it was stopped."""
        was = self._stopped.pop(runtime_id, None) is not None
        if was:
            self._held.pop(runtime_id, None)
            self._instances.pop(runtime_id, None)
        return was

    # -- admission -------------------------------------------------------------

    def standing(self, runtime_id: str) -> tuple[str | None, Held | None]:
        """Whether ``runtime_id`` holds a fresh, accepted attestation, whatever its
        opt-in: the model gateway serves only attested runtimes, so a
        runtime that never attests (safe mode, plugin off) is never served. A
        stopped runtime (an ungated tool result) is refused first, whatever it holds.
        Returns the refusal reason (None when standing) and the attestation held."""
        need = self.required.get(runtime_id, RuntimeRequirement())
        held = self._held.get(runtime_id)
        stopped = self._stopped.get(runtime_id)
        if stopped is not None:
            return stopped, held
        if held is None:
            return MISSING, None
        if not held.accepted:
            return REJECTED, held
        if self.clock() - held.issued_at_ms > need.lease_ms:
            return STALE, held
        if need.require_release and held.release_id != self.release_id():
            # the gate switched releases since the runtime attested: it must re-attest
            return RELEASE_MISMATCH, held
        return None, held

    def attested_instance(self, runtime_id: str) -> str | None:
        """The process its latest verified attestation names (accepted or not), or None:
        what the runtime is now, for its confinement (``confinement.ConfinementDesk``)."""
        held = self._held.get(runtime_id)
        return None if held is None else held.instance_id

    def lease_end(self, runtime_id: str, held: Held) -> int:
        return held.issued_at_ms + self.required.get(runtime_id, RuntimeRequirement()).lease_ms

    def admit_instance(
        self,
        runtime_id: str,
        held: Held,
        sealed: str | None,
        request_digest: str | None = None,
    ) -> tuple[str | None, int | None, str | None]:
        """Whether a model request of a standing ``runtime_id`` comes from a process
        that attested (admission bound to the process): the refusal reason,
        or None, when that process's lease ends and the process the proof proved
        (both None: not instance-bound).

        Bound when the runtime's requirement says so or its latest accepted
        attestation names an instance; then the request must carry a proof signed by
        a key of that very runtime (one runtime cannot prove for another), issued
        within the proof freshness window (seconds), with a nonce, for this request
        when it names one (``request_digest``: the gateway's digest of the body it
        received), of an instance whose latest attestation was accepted within its
        lease, and never accepted before (its nonce): a captured proof is good for
        nothing but the one request it was sealed for, once."""
        need = self.required.get(runtime_id, RuntimeRequirement())
        if not need.instance_bound and held.instance_id is None:
            return None, None, None
        if sealed is None:
            return INSTANCE_PROOF_MISSING, None, None
        registry = self.registry()
        try:
            proof, verified = open_instance_proof(sealed, registry.trusted("runtime"))
        except (dsse.SignatureError, msgspec.ValidationError):
            return INSTANCE_PROOF_INVALID, None, None
        signers = [registry.principals[k] for k in verified.key_ids]
        # check the signer is that runtime, and the proof is for the runtime asked about
        if proof.runtime_id != runtime_id or all(p.entry.runtime_id != runtime_id for p in signers):
            return INSTANCE_PROOF_INVALID, None, None
        now = self.clock()
        # check freshness: a proof seen on the wire is not good for long
        if abs(now - proof.issued_at_ms) > self.proof_freshness_ms:
            return INSTANCE_PROOF_STALE, None, None
        if proof.nonce is None:
            return INSTANCE_PROOF_WITHOUT_NONCE, None, None
        # check the binding: a proof sealed for one body is not lent to another
        if proof.request_digest is not None and proof.request_digest != request_digest:
            return INSTANCE_PROOF_OTHER_REQUEST, None, None
        instances = self._instances.get(runtime_id)
        attested = None if instances is None else instances.get(proof.instance_id)
        if attested is None or now - attested > need.lease_ms:
            return INSTANCE_NOT_ATTESTED, None, None
        refused = self._accept_once(runtime_id, proof.nonce, proof.issued_at_ms, now)
        if refused is not None:
            return refused, None, None
        return None, attested + need.lease_ms, proof.instance_id

    def proof_standing(self, runtime_id: str, instance_id: str) -> ProofStanding:
        """What the gateway checks the next proofs of ``instance_id`` by, as
        :meth:`admit_instance` does: that runtime's registered keys (public) and the
        proof freshness window."""
        keys = {
            kid: p.verify_key
            for kid, p in self.registry().principals.items()
            if p.entry.role == "runtime" and p.entry.runtime_id == runtime_id
        }
        return ProofStanding(
            instance_id=instance_id, keys=proof_keys(keys), window_ms=self.proof_freshness_ms
        )

    def _accept_once(self, runtime_id: str, nonce: str, issued_at_ms: int, now: int) -> str | None:
        """Check for a replay: a proof's nonce is accepted once within its window."""
        seen = self._nonces.accept((runtime_id, nonce), issued_at_ms + self.proof_freshness_ms, now)
        if seen == "replayed":
            return INSTANCE_PROOF_REPLAYED
        if seen == "full":
            return INSTANCE_PROOFS_TOO_MANY
        return None

    def admit(self, proposal: Proposal, instance_id: str | None = None) -> str | None:
        """The reason to refuse ``proposal``, or None when its runtime may propose.

        ``instance_id``: the process the proposal was produced for, as a signed output
        close names it (``OutputClose.instance_id``: the model gateway served that
        process on its proof). It must stand on its own latest attestation, accepted
        within its lease, whatever the runtime's latest word (another process's) says:
        a gateway's kept admission of a process whose attestation was since refused
        gets no output released (``runtime_instance_not_attested``). Checked whatever
        the runtime's opt-in, as the gateway serves only attested runtimes."""
        stopped = self._stopped.get(proposal.runtime_id)
        if stopped is not None:
            return stopped  # stopped, whatever its opt-in
        if instance_id is not None:
            need = self.required.get(proposal.runtime_id, RuntimeRequirement())
            instances = self._instances.get(proposal.runtime_id)
            attested = None if instances is None else instances.get(instance_id)
            if attested is None or self.clock() - attested > need.lease_ms:
                return INSTANCE_NOT_ATTESTED
        if proposal.runtime_id not in self.required:
            return None  # opt-in: this runtime does not attest
        reason, held = self.standing(proposal.runtime_id)
        if reason is not None:
            return reason
        assert held is not None
        if proposal.runtime_version != held.runtime_version:
            return VERSION_NOT_ATTESTED
        return None
