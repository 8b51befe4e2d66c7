"""Signed customer overlays: a tenant's own policy, authored and signed by the customer.

Issue 6, "The corpus": customer overlays are signed by the customer's key,
versioned, bound to one tenant, and cannot weaken the safety floor. A corpus
may carry them as:

- ``customers.json``: for each customer tenant, the public keys that sign its
  overlay, the signature threshold, and the overlay version this corpus pins;
- ``overlays/<tenant_id>.dsse.json``: the DSSE envelope of that tenant's
  :class:`CustomerOverlay`, signed over ``PAYLOAD_CUSTOMER_OVERLAY``.

:func:`overlay_policies` verifies every overlay before the compiler uses one
policy of it, and refuses, with an error named after the problem:

- a signature that is not a threshold of the customer's keys
  (:class:`OverlaySignatureError`);
- an overlay whose version is not the pinned one, so an older signed
  overlay cannot be replayed (:class:`StaleOverlayError`);
- an overlay for another tenant, or with a policy outside its tenant or above
  the customer layer (:class:`OverlayScopeError`);
- a declared customer without its overlay, or an overlay without a declared
  customer (:class:`OverlayMissingError`): dropping an overlay would drop the
  tenant's restrictions;
- an overlay policy less severe than a binding-authority or safety-floor
  policy on the same rule (:class:`OverlayWeakensFloorError`).

The last check catches an *attempt* on the rule the floor names. It is not the
only line: the evaluator's merge is monotonic (``smf_assurance.core.policy``), so a
weaker layer can only add restrictions, and an overlay policy on any other
rule that matches the same operation cannot relax the floor either.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Final, Literal

import msgspec

from smf_assurance.core.policy import SEVERITY
from smf_assurance.core.projection import PolicyRecord
from smf_assurance.subjects import dsse
from smf_assurance.subjects.keys import (
    KeyFileError,
    PublicKeyRecord,
    SigningKey,
    VerifyKey,
    verify_key_from_record,
)
from smf_assurance.subjects.patterns import SUBJECT_TOKEN_PATTERN

PAYLOAD_CUSTOMER_OVERLAY: Final = "application/vnd.smf.customer-overlay+json;v=1"
OVERLAY_SCHEMA: Final = "smf.customer-overlay/1"
CUSTOMERS_SCHEMA: Final = "smf.customers/1"
CUSTOMERS_FILE: Final = "customers.json"
OVERLAY_FOLDER: Final = "overlays"
OVERLAY_SUFFIX: Final = ".dsse.json"

CUSTOMER_LAYERS: Final = frozenset({"customer", "matter", "user"})
FLOOR_LAYERS: Final = frozenset({"binding_authority", "smf_safety_floor"})

TenantId = Annotated[str, msgspec.Meta(pattern=SUBJECT_TOKEN_PATTERN)]
Version = Annotated[int, msgspec.Meta(ge=1, le=2**53 - 1)]


class OverlayError(ValueError):
    """A customer overlay is refused; the compiler writes nothing."""


class OverlaySignatureError(OverlayError):
    """Not signed by a threshold of the customer's keys (or not an overlay at all)."""


class StaleOverlayError(OverlayError):
    """The overlay's version is not the one the corpus pins (replay of an old overlay)."""


class OverlayScopeError(OverlayError):
    """The overlay reaches outside its one tenant, or above the customer layer."""


class OverlayMissingError(OverlayError):
    """A declared customer has no overlay, or an overlay has no declared customer."""


class OverlayWeakensFloorError(OverlayError):
    """An overlay policy is less severe than the floor on the same rule."""


class CustomerOverlay(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """What a customer signs: its tenant, a version, and its policies."""

    schema: Literal["smf.customer-overlay/1"]
    tenant_id: TenantId
    version: Version
    policies: tuple[PolicyRecord, ...]


class CustomerKeys(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One customer: who signs its overlay, how many must, and which version is in force."""

    tenant_id: TenantId
    overlay_version: Version
    keys: tuple[PublicKeyRecord, ...]
    threshold: Annotated[int, msgspec.Meta(ge=1, le=16)] = 1


class CustomersFile(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    schema: Literal["smf.customers/1"]
    customers: tuple[CustomerKeys, ...]


def sign_overlay(overlay: CustomerOverlay, signers: Sequence[SigningKey]) -> bytes:
    """The DSSE envelope bytes of ``overlay`` signed by the customer's ``signers``."""
    return dsse.encode_envelope(dsse.sign_struct(PAYLOAD_CUSTOMER_OVERLAY, overlay, signers))


def overlay_path(corpus: Path, tenant_id: str) -> Path:
    return corpus / OVERLAY_FOLDER / f"{tenant_id}{OVERLAY_SUFFIX}"


def _customers(corpus: Path) -> tuple[CustomerKeys, ...]:
    path = corpus / CUSTOMERS_FILE
    if not path.exists():
        return ()
    try:
        parsed = msgspec.json.decode(path.read_bytes(), type=CustomersFile)
    except (OSError, msgspec.DecodeError) as exc:
        raise OverlayError(f"{CUSTOMERS_FILE}: {exc}") from exc
    tenants = [c.tenant_id for c in parsed.customers]
    if len(set(tenants)) != len(tenants):
        raise OverlayError(f"{CUSTOMERS_FILE}: a tenant is declared twice")
    return parsed.customers


def _trusted(customer: CustomerKeys) -> dict[str, VerifyKey]:
    keys: dict[str, VerifyKey] = {}
    for record in customer.keys:
        try:
            key = verify_key_from_record(record)
        except KeyFileError as exc:
            raise OverlayError(f"customer {customer.tenant_id}: {exc}") from exc
        keys[key.key_id] = key
    if customer.threshold > len(keys):
        raise OverlayError(
            f"customer {customer.tenant_id}: threshold {customer.threshold} "
            f"exceeds its {len(keys)} distinct keys"
        )
    return keys


def _open(customer: CustomerKeys, data: bytes) -> CustomerOverlay:
    """Verify a threshold of the customer's keys, then decode the verified bytes once."""
    where = f"overlay of {customer.tenant_id}"
    try:
        envelope = dsse.decode_envelope(data)
        overlay, _ = dsse.open_struct(
            envelope,
            _trusted(customer),
            CustomerOverlay,
            PAYLOAD_CUSTOMER_OVERLAY,
            customer.threshold,
        )
    except dsse.SignatureError as exc:
        raise OverlaySignatureError(f"{where}: {type(exc).__name__}: {exc}") from exc
    except msgspec.ValidationError as exc:
        raise OverlaySignatureError(f"{where}: {exc}") from exc
    return overlay


def _check_scope(overlay: CustomerOverlay, tenant_id: str) -> None:
    """Bound to one tenant: the overlay and every policy in it name that tenant."""
    if overlay.tenant_id != tenant_id:
        raise OverlayScopeError(f"overlay signed for {tenant_id} names tenant {overlay.tenant_id}")
    for policy in overlay.policies:
        if policy.layer not in CUSTOMER_LAYERS:
            raise OverlayScopeError(
                f"overlay of {tenant_id}: policy {policy.policy_id} is in layer {policy.layer}"
            )
        if policy.scope.tenant_id != tenant_id:
            raise OverlayScopeError(
                f"overlay of {tenant_id}: policy {policy.policy_id} is scoped to "
                f"tenant {policy.scope.tenant_id}"
            )


def _check_floor(overlay: CustomerOverlay, base: Sequence[PolicyRecord]) -> None:
    """No overlay policy may be less severe than the floor's policy on the same rule."""
    floor: dict[str, int] = {}
    for policy in base:
        if policy.layer in FLOOR_LAYERS:
            severity = SEVERITY[policy.effect]
            floor[policy.rule_id] = max(floor.get(policy.rule_id, severity), severity)
    for policy in overlay.policies:
        required = floor.get(policy.rule_id)
        if required is not None and SEVERITY[policy.effect] < required:
            raise OverlayWeakensFloorError(
                f"overlay of {overlay.tenant_id}: policy {policy.policy_id} would "
                f"{policy.effect} what the floor restricts on {policy.rule_id}"
            )


def overlay_policies(corpus: Path, base: Sequence[PolicyRecord]) -> tuple[PolicyRecord, ...]:
    """Every verified overlay policy of ``corpus`` (none when it declares no customer)."""
    customers = _customers(corpus)
    declared = {c.tenant_id for c in customers}
    folder = corpus / OVERLAY_FOLDER
    present = (
        {p.name.removesuffix(OVERLAY_SUFFIX) for p in folder.glob(f"*{OVERLAY_SUFFIX}")}
        if folder.is_dir()
        else set()
    )
    if stray := sorted(present - declared):
        raise OverlayMissingError(f"overlay for undeclared customer: {', '.join(stray)}")
    policies: list[PolicyRecord] = []
    for customer in sorted(customers, key=lambda c: c.tenant_id):
        path = overlay_path(corpus, customer.tenant_id)
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise OverlayMissingError(
                f"customer {customer.tenant_id} has no readable overlay ({exc.strerror})"
            ) from exc
        overlay = _open(customer, data)
        if overlay.version != customer.overlay_version:
            raise StaleOverlayError(
                f"overlay of {customer.tenant_id} is version {overlay.version}; "
                f"the corpus pins version {customer.overlay_version}"
            )
        _check_scope(overlay, customer.tenant_id)
        _check_floor(overlay, base)
        policies.extend(overlay.policies)
    return tuple(policies)
