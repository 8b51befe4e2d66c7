"""The key registry: who may sign what on the bus.

ARCHITECTURE.md, "Trust and identity on the bus": receivers verify against
keys named in a registry (runtime registry, approver roster with licensed
roles per tenant, connector registry). A message whose signer is unknown or
whose role does not fit the subject is refused with a reason code. Until
signed releases carry it, the registry is a local file.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Final, Literal

import msgspec

from smf_assurance.subjects.keys import (
    KeyFileError,
    PublicKeyRecord,
    SigningKey,
    VerifyKey,
    public_record,
    verify_key_from_record,
)
from smf_assurance.subjects.passkeys import PasskeyRecord, PasskeyRecordError, check_record
from smf_assurance.subjects.patterns import SUBJECT_TOKEN_PATTERN, ConnectorId, Token

Role = Literal[
    "runtime",
    "gate",
    "connector",
    "approver",
    "gateway",
    "launcher",
    "console",
    "publisher",
    "swarm",
    "operator",
]
"""The first six sign what the gate verifies (the model gateway signs the
output closes of the runtimes it serves; a launcher, bound to one runtime by its
``runtime_id``, signs that runtime's confinement attestations); the rest exist only on the bus
(``smf_assurance.subjects.bus_access``): the console relay, release publishers, Swarm, operators."""
REGISTRY_SCHEMA: Final = "smf.registry/1"
_TOKEN: Final = re.compile(SUBJECT_TOKEN_PATTERN)
NkeyUser = Annotated[str, msgspec.Meta(pattern=r"^U[A-Z2-7]{55}\Z")]
"""A NATS user nkey's public key (base32, ``U`` prefix): how the principal
authenticates to the bus. Never the Ed25519 key it signs with: a server asks
a client to sign a nonce of its choice, and a signature over attacker-chosen
bytes with a signing key would be a forged message."""


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
    nats_user: NkeyUser | None = None
    """The principal's bus credential; without it the principal cannot connect."""


class RegistryFile(msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True):
    schema: Literal["smf.registry/1"]
    entries: tuple[RegistryEntry, ...]
    retired: tuple[RegistryEntry, ...] = ()
    """Keys that sign nothing any more (a rotation retired them): no receiver
    trusts one for a new message and none holds a bus credential. They stay
    listed so that what they signed before (a gate's ledger checkpoints) still
    verifies (:meth:`KeyRegistry.evidence_keys`). A key that may have leaked is
    removed, not retired: its old signatures are no evidence either
    (docs/OPERATIONS.md, "Key rotation"). Omitted when empty, so a registry
    without one reads as before; a reader that predates it refuses the field
    rather than trusting a retired key."""
    passkeys: tuple[PasskeyRecord, ...] = ()
    """The people's enrolled passkeys (:mod:`smf_assurance.subjects.passkeys`), each
    naming an active ``approver`` principal: a person may sign their requests with one
    instead of a key file. The gate reads the registry from a release the operator's
    release keys signed, so each enrolment is the operator's. Omitted when empty."""


Passkeys = Mapping[str, tuple[PasskeyRecord, str]]
"""Enrolled credentials by credential id: the record and the principal it belongs to."""


@dataclass(frozen=True, slots=True)
class Principal:
    """A verified registry entry with its key parsed."""

    entry: RegistryEntry
    verify_key: VerifyKey

    @property
    def name(self) -> str:
        return self.entry.key.principal


def _parsed(entry: RegistryEntry) -> VerifyKey:
    try:
        return verify_key_from_record(entry.key)
    except KeyFileError as exc:
        raise RegistryError(f"registry entry {entry.key.principal}: {exc}") from exc


def _standing(entry: RegistryEntry) -> tuple[object, ...]:
    """What a principal is entitled to: every active key of it must say the same,
    so a second key (a rotation) never carries more than the first."""
    return (entry.role, entry.runtime_id, entry.connector_id, entry.tenants, entry.licensed_roles)


def _passkeys(records: tuple[PasskeyRecord, ...], principals: Mapping[str, Principal]) -> Passkeys:
    """Each record checked (:func:`~smf_assurance.subjects.passkeys.check_record`), for a
    person on the roster, and each credential enrolled once: one credential is one
    person's, so it can never sign as two."""
    people = {p.name for p in principals.values() if p.entry.role == "approver"}
    enrolled: dict[str, tuple[PasskeyRecord, str]] = {}
    for record in records:
        if record.principal not in people:
            raise RegistryError(
                f"passkey {record.credential_id} names {record.principal!r}, "
                "who is not an approver in the registry"
            )
        if record.credential_id in enrolled:
            raise RegistryError(f"passkey {record.credential_id} is enrolled twice")
        try:
            check_record(record)
        except PasskeyRecordError as exc:
            raise RegistryError(str(exc)) from exc
        enrolled[record.credential_id] = (record, record.principal)
    return enrolled


@dataclass(frozen=True, slots=True)
class KeyRegistry:
    """Lookup by key id, and the trusted-key maps each receiver verifies against.

    ``principals`` holds the active keys: everything that verifies a new message
    or grants the bus reads only them. ``retired`` holds the keys kept for the
    evidence they signed before (:attr:`RegistryFile.retired`).
    """

    principals: Mapping[str, Principal]
    retired: Mapping[str, Principal] = field(default_factory=dict)
    passkeys: Passkeys = field(default_factory=dict)

    @classmethod
    def from_file(cls, data: RegistryFile) -> KeyRegistry:
        principals: dict[str, Principal] = {}
        retired: dict[str, Principal] = {}
        standing: dict[str, tuple[object, ...]] = {}
        bus_users: set[str] = set()
        for entry in data.retired:
            key = _parsed(entry)
            if key.key_id in retired:
                raise RegistryError(f"key {key.key_id} is registered twice")
            if entry.nats_user is not None:
                raise RegistryError(
                    f"retired key {key.key_id} of {entry.key.principal} holds a bus credential"
                )
            retired[key.key_id] = Principal(entry, key)
        for entry in data.entries:
            key = _parsed(entry)
            if key.key_id in principals or key.key_id in retired:
                raise RegistryError(f"key {key.key_id} is registered twice")
            name = entry.key.principal
            if standing.setdefault(name, _standing(entry)) != _standing(entry):
                raise RegistryError(f"the keys of {name} are entitled to different things")
            if entry.role == "runtime" and entry.runtime_id is None:
                raise RegistryError(f"runtime {entry.key.principal} has no runtime_id")
            if entry.role == "launcher" and entry.runtime_id is None:
                raise RegistryError(f"launcher {entry.key.principal} names no runtime_id")
            if entry.role == "connector" and entry.connector_id is None:
                raise RegistryError(f"connector {entry.key.principal} has no connector_id")
            if entry.nats_user is not None:
                if entry.nats_user in bus_users:
                    raise RegistryError(f"bus credential {entry.nats_user} is registered twice")
                if _TOKEN.fullmatch(entry.key.principal) is None:
                    raise RegistryError(
                        f"principal {entry.key.principal!r} cannot name an inbox on the bus"
                    )
                bus_users.add(entry.nats_user)
            principals[key.key_id] = Principal(entry, key)
        return cls(principals, retired, _passkeys(data.passkeys, principals))

    def trusted(self, role: Role) -> dict[str, VerifyKey]:
        """Keys of one role: a signature by any other key does not count."""
        return {kid: p.verify_key for kid, p in self.principals.items() if p.entry.role == role}

    def evidence_keys(self, role: Role) -> dict[str, VerifyKey]:
        """Keys of one role whose signatures count on evidence made before now: the
        active ones and the retired ones. Only for checking what is already recorded
        (a ledger's checkpoints); a new message is verified with :meth:`trusted`."""
        return self.trusted(role) | {
            kid: p.verify_key for kid, p in self.retired.items() if p.entry.role == role
        }

    def principal(self, key_id: str) -> Principal | None:
        return self.principals.get(key_id)

    def person(self, name: str) -> Principal | None:
        """The ``approver`` entry of ``name``, whichever of its keys: what a person's
        enrolled passkey signs as (every active key of a principal has the same standing)."""
        return next(
            (p for p in self.principals.values() if p.name == name and p.entry.role == "approver"),
            None,
        )


class FollowedRegistry:
    """A registry file, read again whenever it changes (its mtime or size).

    For the long-running readers of a registry file (the console's roster, the model
    gateway's gate and gateway keys), so that ``keys rotate``, ``keys retire`` or
    ``approver add`` take effect without a restart. A file that cannot be read or
    does not check names nobody: fail closed, never the last good one kept. The
    reason is told to :meth:`refused` (a reader logs it) each time it is found.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._stamp: tuple[int, int] | None = None
        self._registry = KeyRegistry({})

    def current(self) -> KeyRegistry:
        try:
            stat = self.path.stat()
        except OSError:
            self._stamp, self._registry = None, KeyRegistry({})
            self.refused("unreadable", None)
            return self._registry
        stamp = (stat.st_mtime_ns, stat.st_size)
        if stamp != self._stamp:
            self._stamp = stamp
            try:
                self._registry = load_registry(self.path)
            except RegistryError as exc:
                self._registry = KeyRegistry({})
                self.refused("invalid", str(exc))
        return self._registry

    def refused(self, why: Literal["unreadable", "invalid"], detail: str | None) -> None:
        """The file names nobody now, and ``why``: for a subclass to log."""


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
    nats_user: str | None = None,
) -> RegistryEntry:
    """Build a registry entry for a key (used by ``keys`` tooling and tests)."""
    return RegistryEntry(
        key=public_record(key, principal),
        role=role,
        runtime_id=runtime_id,
        connector_id=connector_id,
        tenants=tenants,
        licensed_roles=licensed_roles,
        nats_user=nats_user,
    )


def encode_registry(
    entries: tuple[RegistryEntry, ...],
    retired: tuple[RegistryEntry, ...] = (),
    passkeys: tuple[PasskeyRecord, ...] = (),
) -> bytes:
    return msgspec.json.encode(RegistryFile(REGISTRY_SCHEMA, entries, retired, passkeys))
