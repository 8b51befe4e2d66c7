"""One check for every signed request the gate accepts: proposals and output closes,
attestations (runtime and launcher), approvers' resolutions and show requests,
people's track and re-request requests, executors' reports.

ARCHITECTURE.md, "Trust and identity on the bus". Each step refuses with a
:class:`StageRefusal` whose reason code names what failed, so every desk answers
the same fault with the same code:

- :func:`open_request`: the envelope decodes within the endpoint's size bound and a
  key the endpoint trusts signed it, for this payload type; the refusal is the DSSE
  error's own reason code (:func:`dsse.reason_code`), a malformed or oversized
  message named by what the endpoint expected (``malformed_proposal``,
  ``proposal_too_large``, ...). The signers come back as registry principals, for
  the endpoint's identity rule.
- :func:`check_runtime_signer`: a signer of the role registered for the runtime the
  message names (``signer_role_mismatch``, ``runtime_identity_mismatch``: one runtime
  cannot speak for another). A person's identity rule is
  ``approval_rules.approver_of``.
- :func:`check_fresh`: issued within the window of the desk's clock, so a request
  captured on the bus is not good later (the endpoint's ``stale_*`` code).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Literal, TypeVar

import msgspec

from smf_assurance.pipeline.service import StageRefusal
from smf_assurance.subjects import dsse, passkeys
from smf_assurance.subjects.keys import VerifyKey
from smf_assurance.subjects.registry import KeyRegistry, Principal

T = TypeVar("T", bound=msgspec.Struct)
PersonRequest = Literal["decision", "request"]
"""A person's decision (signed by an envelope or a passkey's assertion), or any other
request of a person's (also by a passkey's session key)."""


def every_key(registry: KeyRegistry) -> dict[str, VerifyKey]:
    """Every registered key: for an endpoint whose identity rule picks the role."""
    return {k: p.verify_key for k, p in registry.principals.items()}


def open_request(
    data: bytes,
    registry: KeyRegistry,
    type_: type[T],
    payload_type: str,
    *,
    malformed: str,
    too_large: str = "",
    wrong_type: str = "",
    max_size: int = dsse.MAX_ENVELOPE_BYTES,
    trusted: Mapping[str, VerifyKey] | None = None,
    person: PersonRequest | None = None,
    now_ms: int = 0,
) -> tuple[T, tuple[Principal, ...]]:
    """The request in ``data`` and the registry principals who signed it; raises
    :class:`StageRefusal` with the signature error's reason code (detail: its class).

    ``trusted``: the keys this endpoint accepts (default: every registered key);
    ``malformed``, ``too_large``, ``wrong_type``: the endpoint's names for a message
    that is not its request, an oversized one, and one signed for another purpose
    (empty: the error's own code).

    ``person``: a person's request, which may instead be signed with one of the
    person's enrolled passkeys (:func:`~smf_assurance.subjects.passkeys.open_passkey_signed`):
    a ``decision`` (allow-once or deny) only by the passkey's own assertion, any other
    ``request`` (show, track, re-request) also by the session key a passkey granted at
    sign-in (:func:`~smf_assurance.subjects.passkeys.open_delegated`, in its time at
    ``now_ms``). The signer is then the principal the enrolment names. Every other
    request is an envelope only.
    """
    keys = every_key(registry) if trusted is None else trusted
    kind = passkeys.passkey_kind(data) if person is not None else None
    try:
        if kind == passkeys.PASSKEY_SIGNED_SCHEMA:
            opened = passkeys.open_passkey_signed(data, registry.passkeys, payload_type)
            return _person_signed(opened, registry, type_)
        if kind == passkeys.PASSKEY_DELEGATED_SCHEMA and person == "request":
            opened = passkeys.open_delegated(data, registry.passkeys, payload_type, now_ms)
            return _person_signed(opened, registry, type_)
        request, verified = dsse.open_struct(
            dsse.decode_envelope(data, max_size), keys, type_, payload_type
        )
    except dsse.SignatureError as exc:
        reason = dsse.reason_code(exc, malformed, too_large)
        if wrong_type and isinstance(exc, dsse.PayloadTypeMismatchError):
            reason = wrong_type
        raise StageRefusal(reason, type(exc).__name__) from exc
    return request, tuple(registry.principals[k] for k in sorted(verified.key_ids))


def _person_signed(
    opened: passkeys.PasskeyVerified, registry: KeyRegistry, type_: type[T]
) -> tuple[T, tuple[Principal, ...]]:
    """The request and the one principal whose enrolled passkey signed it (or granted
    the key that did): the principal's active roster entry (its standing is the same
    under every key)."""
    request = dsse.decode_verified(opened.verified, type_)
    signer = registry.person(opened.principal)
    if signer is None:  # the registry checks every enrolment names an active entry
        raise passkeys.UnenrolledPasskeyError("the passkey's principal is not on the roster")
    return request, (signer,)


def check_runtime_signer(
    signers: Iterable[Principal], runtime_id: str | None, role: str | None = "runtime"
) -> None:
    """A signer of ``role`` (any role when None) is registered for ``runtime_id``."""
    of_role = [p for p in signers if role is None or p.entry.role == role]
    if not of_role:
        # a key of another role (a gateway, a connector) cannot speak as a runtime
        raise StageRefusal("signer_role_mismatch")
    if all(p.entry.runtime_id != runtime_id for p in of_role):
        # one runtime, or its launcher, cannot vouch for another
        raise StageRefusal("runtime_identity_mismatch")


def check_fresh(issued_at_ms: int, now_ms: int, window_ms: int, stale: str) -> None:
    """Issued within ``window_ms`` of now, either side (clocks drift both ways)."""
    if abs(now_ms - issued_at_ms) > window_ms:
        # a request captured on the bus is not replayed later
        raise StageRefusal(stale)
