"""A principal with two keys, and a retired key (``smf_assurance.subjects.registry``).

Proves, on the decoded registry: a retired key is trusted for no new message, by
no role's key map nor by key-id lookup, and holds no bus credential; it still
counts among the keys whose past signatures are evidence; a key cannot be both
active and retired, nor retired twice; two active keys of one principal must be
entitled to the same things, so a rotation cannot widen what a principal may
do; and a registry without retired keys encodes to the bytes it had before the
field existed (old readers and published digests are unchanged).
"""

from __future__ import annotations

import msgspec
import pytest

from smf_assurance.subjects.keys import SigningKey, generate_signing_key
from smf_assurance.subjects.registry import (
    RegistryEntry,
    RegistryError,
    decode_registry,
    encode_registry,
    entry_for,
)

USER_A = "U" + "A" * 55
USER_B = "U" + "B" * 55


def gate(key: SigningKey, user: str | None = None) -> RegistryEntry:
    return entry_for(key, "gate", "gate", nats_user=user)


def approver(key: SigningKey, tenants: tuple[str, ...] = ("tenant-acme",)) -> RegistryEntry:
    return entry_for(
        key, "attorney-alex", "approver", tenants=tenants, licensed_roles=("licensed_attorney",)
    )


def test_a_retired_key_verifies_evidence_and_nothing_new() -> None:
    old, new = generate_signing_key(), generate_signing_key()
    registry = decode_registry(encode_registry((gate(new, USER_A),), (gate(old),)))
    assert registry.trusted("gate") == {new.key_id: new.verify_key}
    assert registry.principal(old.key_id) is None
    assert old.key_id not in registry.principals
    assert registry.evidence_keys("gate") == {
        new.key_id: new.verify_key,
        old.key_id: old.verify_key,
    }
    assert registry.evidence_keys("runtime") == {}


def test_evidence_keys_are_per_role() -> None:
    old_gate, new_gate, old_approver = (generate_signing_key() for _ in range(3))
    registry = decode_registry(
        encode_registry((gate(new_gate),), (gate(old_gate), approver(old_approver)))
    )
    assert set(registry.evidence_keys("gate")) == {new_gate.key_id, old_gate.key_id}
    assert set(registry.evidence_keys("approver")) == {old_approver.key_id}
    assert registry.trusted("approver") == {}


def test_two_active_keys_of_one_principal_are_both_trusted() -> None:
    old, new = generate_signing_key(), generate_signing_key()
    registry = decode_registry(encode_registry((approver(old), approver(new))))
    assert set(registry.trusted("approver")) == {old.key_id, new.key_id}
    assert {p.name for p in registry.principals.values()} == {"attorney-alex"}


@pytest.mark.parametrize(
    ("second", "why"),
    [
        ({"tenants": ("tenant-acme", "tenant-other")}, "a tenant more"),
        ({"licensed_roles": ("licensed_attorney", "partner")}, "a role more"),
        ({"role": "gate"}, "another role"),
    ],
)
def test_a_second_key_is_entitled_to_exactly_what_the_first_is(
    second: dict[str, object], why: str
) -> None:
    first = approver(generate_signing_key())
    widened = msgspec.structs.replace(approver(generate_signing_key()), **second)
    with pytest.raises(RegistryError, match="entitled to different things"):
        decode_registry(encode_registry((first, widened)))


def test_a_retired_key_holds_no_bus_credential() -> None:
    with pytest.raises(RegistryError, match="holds a bus credential"):
        decode_registry(
            encode_registry(
                (gate(generate_signing_key()),), (gate(generate_signing_key(), USER_B),)
            )
        )


@pytest.mark.parametrize("where", ["active and retired", "retired twice"])
def test_one_key_is_listed_once(where: str) -> None:
    key = generate_signing_key()
    if where == "active and retired":
        data = encode_registry((gate(key),), (gate(key),))
    else:
        data = encode_registry((gate(generate_signing_key()),), (gate(key), gate(key)))
    with pytest.raises(RegistryError, match="registered twice"):
        decode_registry(data)


def test_a_retired_key_needs_no_bus_token_nor_ids() -> None:
    """What it is entitled to no longer matters: it grants nothing."""
    old = msgspec.structs.replace(approver(generate_signing_key()), role="runtime")
    registry = decode_registry(encode_registry((gate(generate_signing_key()),), (old,)))
    assert set(registry.retired) == {old.key.key_id}


def test_a_registry_without_retired_keys_encodes_as_before() -> None:
    entries = (gate(generate_signing_key(), USER_A),)
    data = encode_registry(entries)
    assert b"retired" not in data
    assert data == msgspec.json.encode({"schema": "smf.registry/1", "entries": entries})
    assert b'"retired":[' in encode_registry(entries, (gate(generate_signing_key()),))
