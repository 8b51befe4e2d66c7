"""The key registry: who may sign what on the bus.

ARCHITECTURE.md, "Trust and identity on the bus": receivers verify against
keys named in a registry (runtime registry, approver roster with licensed
roles per tenant, connector registry). A message whose signer is unknown or
whose role does not fit the subject is refused with a reason code. Until
signed releases carry it (issue 6), the registry is a local file.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal

import msgspec

from subjects.keys import (
    KeyFileError,
    PublicKeyRecord,
    SigningKey,
    VerifyKey,
    public_record,
    verify_key_from_record,
)
from subjects.patterns import ConnectorId, Token

Role = Literal["runtime", "gate", "connector", "approver"]
REGISTRY_SCHEMA: Final = "smf.registry/1"


class RegistryError(ValueError):
    """The registry file is missing, malformed, or inconsistent."""


class RegistryEntry(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One principal: its key, its bus role and what it is entitled to."""

    key: PublicKeyRecord
    role: Role
    runtime_id: Token | None = None
    connector_id: ConnectorId | None = None
    tenants: tuple[str, ...] = ()
    licensed_roles: tuple[str, ...] = ()


class RegistryFile(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    schema: Literal["smf.registry/1"]
    entries: tuple[RegistryEntry, ...]


@dataclass(frozen=True, slots=True)
class Principal:
    """A verified registry entry with its key parsed."""

    entry: RegistryEntry
    verify_key: VerifyKey

    @property
    def name(self) -> str:
        return self.entry.key.principal


@dataclass(frozen=True, slots=True)
class KeyRegistry:
    """Lookup by key id, and the trusted-key maps each receiver verifies against."""

    principals: Mapping[str, Principal]

    @classmethod
    def from_file(cls, data: RegistryFile) -> KeyRegistry:
        principals: dict[str, Principal] = {}
        for entry in data.entries:
            try:
                key = verify_key_from_record(entry.key)
            except KeyFileError as exc:
                raise RegistryError(f"registry entry {entry.key.principal}: {exc}") from exc
            if key.key_id in principals:
                raise RegistryError(f"key {key.key_id} is registered twice")
            if entry.role == "runtime" and entry.runtime_id is None:
                raise RegistryError(f"runtime {entry.key.principal} has no runtime_id")
            if entry.role == "connector" and entry.connector_id is None:
                raise RegistryError(f"connector {entry.key.principal} has no connector_id")
            principals[key.key_id] = Principal(entry, key)
        return cls(principals)

    def trusted(self, role: Role) -> dict[str, VerifyKey]:
        """Keys of one role: a signature by any other key does not count."""
        return {kid: p.verify_key for kid, p in self.principals.items() if p.entry.role == role}

    def principal(self, key_id: str) -> Principal | None:
        return self.principals.get(key_id)


def load_registry(path: Path) -> KeyRegistry:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise RegistryError(f"cannot read registry {path}: {exc.strerror}") from exc
    return decode_registry(data, f"registry {path}")


def decode_registry(data: bytes, source: str = "registry") -> KeyRegistry:
    """A registry from its bytes (a file, or the artifact of a verified release)."""
    try:
        parsed = msgspec.json.decode(data, type=RegistryFile)
    except msgspec.DecodeError as exc:
        raise RegistryError(f"{source}: {exc}") from exc
    return KeyRegistry.from_file(parsed)


def entry_for(
    key: SigningKey | VerifyKey,
    principal: str,
    role: Role,
    *,
    runtime_id: str | None = None,
    connector_id: str | None = None,
    tenants: tuple[str, ...] = (),
    licensed_roles: tuple[str, ...] = (),
) -> RegistryEntry:
    """Build a registry entry for a key (used by ``keys`` tooling and tests)."""
    return RegistryEntry(
        key=public_record(key, principal),
        role=role,
        runtime_id=runtime_id,
        connector_id=connector_id,
        tenants=tenants,
        licensed_roles=licensed_roles,
    )


def encode_registry(entries: tuple[RegistryEntry, ...]) -> bytes:
    return msgspec.json.encode(RegistryFile(schema=REGISTRY_SCHEMA, entries=entries))
