"""The state directory: every piece of state of ``up`` and ``demo`` in one place.

``up`` and ``demo`` keep keys, registry, SQLite databases, the
JetStream store and connector outboxes under ``--state-dir``. Provisioning
creates what is missing and never overwrites a key.
"""

from __future__ import annotations

import os
import secrets
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from smf_assurance.governance.projections import SCENARIO_CORPUS, package_path
from smf_assurance.governance.releases import provision_release
from smf_assurance.ops.local.bus_auth import AUTHORIZATION_FILE, read_user_public, write_user_seed
from smf_assurance.ops.local.defaults import (
    CONSOLE,
    NKEY_SUFFIX,
    OPERATOR,
    PUBLISHER,
)
from smf_assurance.subjects.bus_access import BusCredential
from smf_assurance.subjects.clock import wall_clock_ms
from smf_assurance.subjects.keyed import PseudonymKey
from smf_assurance.subjects.keys import (
    SigningKey,
    VerifyKey,
    generate_signing_key,
    load_private_key,
    write_private_key,
)
from smf_assurance.subjects.registry import (
    RegistryEntry,
    Role,
    encode_registry,
    entry_for,
    load_registry,
)

DEMO_TENANT: Final = "tenant-acme"
RUNTIME_ID: Final = "scripted-demo"
ADAPTER_ID: Final = "smf-scripted-adapter"
CONNECTORS: Final = ("court-efiling", "dms")
RELEASE_SIGNER: Final = "release-signer"
"""The demo's release-signing key. A state directory that holds it is
its own release authority (demo, ``up``); a production gate holds no release key."""
MODEL_GATEWAY: Final = "model-gateway"
"""The model gateway's principal: signs the output closes of the runtimes it serves."""


def write_private(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` atomically, 0600 whatever the umask (a file of the
    state directory: ``doctor`` fails one others may read)."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as handle:  # mkstemp made it 0600
            handle.write(data)
        Path(tmp).replace(path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


PRIVATE_UMASK: Final = 0o077
"""What ``up`` and ``demo`` create under the state directory is their user's alone:
files 0600, folders 0700, the embedded nats-server's store included (it inherits the
mask). The gate refuses to start on a store file or folder others may enter
(``smf_assurance.pipeline.stores.state_check``); ``doctor`` reports any such path."""


def private_files() -> None:
    """From now on this process creates files 0600 and folders 0700 (and so do the
    processes it starts): the state directory holds content, approvals and keys."""
    os.umask(PRIVATE_UMASK)


@dataclass(frozen=True, slots=True)
class StateDir:
    root: Path

    def create(self) -> None:
        """The state directory, 0700 when it is new (an existing one keeps its mode:
        the gate and ``doctor`` judge it)."""
        self.root.mkdir(parents=True, exist_ok=True, mode=0o700)

    @property
    def keys(self) -> Path:
        return self.root / "keys"

    @property
    def registry(self) -> Path:
        return self.root / "registry.json"

    @property
    def directory(self) -> Path:
        """The tenant directory: one ``<tenant>.toml`` per tenant, display
        names for the console and ``approvals show``; never read by the gate."""
        return self.root / "directory"

    @property
    def ledger(self) -> Path:
        return self.root / "ledger.db"

    @property
    def claims(self) -> Path:
        return self.root / "claims.db"

    @property
    def approvals(self) -> Path:
        return self.root / "approvals.db"

    @property
    def nats(self) -> Path:
        return self.root / "nats"

    @property
    def trust_root(self) -> Path:
        """Release trust root: when present, the gate runs only on verified releases."""
        return self.root / "release-trust-root.json"

    @property
    def release_state(self) -> Path:
        """The persisted last accepted release (rollback protection across restarts)."""
        return self.root / "release-state.db"

    @property
    def release_inbox(self) -> Path:
        """Signed release bundles published to this state directory (``release publish``)."""
        return self.root / "releases"

    @property
    def tenant_key(self) -> Path:
        return self.root / "keys" / "tenant-pseudonym.key"

    def connector_dir(self, connector_id: str) -> Path:
        return self.root / "connectors" / connector_id

    def key_path(self, principal: str) -> Path:
        return self.keys / f"{principal}.key"

    def gate_keys(self) -> dict[str, VerifyKey]:
        """The ``gate`` keys of this state's registry: what a runtime client started
        from this state verifies the gate's signed verdicts with
        (``smf_assurance.subjects.verdicts``)."""
        return load_registry(self.registry).trusted("gate")

    def bus_credential_path(self, principal: str) -> Path:
        return self.keys / f"{principal}{NKEY_SUFFIX}"

    def bus_credential(self, principal: str) -> BusCredential:
        """The principal's bus credential, creating its nkey seed on first use."""
        path = self.bus_credential_path(principal)
        if not path.exists():
            self.keys.mkdir(parents=True, exist_ok=True, mode=0o700)
            write_user_seed(path)
        return BusCredential(principal, path)

    def existing_credential(self, principal: str) -> BusCredential | None:
        """The principal's bus credential if this state directory holds one; a state
        directory of the older layout has none (and a bus that needs one refuses it)."""
        path = self.bus_credential_path(principal)
        return BusCredential(principal, path) if path.exists() else None

    def bus_user(self, principal: str) -> str:
        """The public ``U...`` key of the principal's bus credential (created if missing)."""
        return read_user_public(self.bus_credential(principal).seed_file)

    @property
    def authorization(self) -> Path:
        """The server's authorization include, generated from the registry."""
        return self.nats / AUTHORIZATION_FILE

    def key(self, principal: str) -> SigningKey:
        """Load a principal's key, creating it on first use."""
        path = self.key_path(principal)
        if not path.exists():
            self.keys.mkdir(parents=True, exist_ok=True, mode=0o700)
            write_private_key(path, generate_signing_key(), principal)
        key, _ = load_private_key(path)
        return key

    def pseudonym_key(self) -> PseudonymKey:
        """The tenant pseudonym key, created on first use (0600)."""
        path = self.tenant_key
        if not path.exists():
            self.keys.mkdir(parents=True, exist_ok=True, mode=0o700)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as handle:
                handle.write(secrets.token_bytes(32))
        return PseudonymKey(path.read_bytes())


def provision_demo(state: StateDir) -> None:
    """Keys and bus credentials for the gate, the scripted runtime, both connectors,
    two approvers, the console relay, the release publisher, the model gateway and
    the operator; the
    registry naming them; and a signed release carrying it."""
    state.create()

    def entry(principal: str, role: Role, **fields: Any) -> RegistryEntry:
        return entry_for(
            state.key(principal), principal, role, nats_user=state.bus_user(principal), **fields
        )

    entries: list[RegistryEntry] = [
        entry("gate", "gate"),
        entry("runtime", "runtime", runtime_id=RUNTIME_ID),
        entry(
            "attorney-alex",
            "approver",
            tenants=(DEMO_TENANT,),
            licensed_roles=("licensed_attorney",),
        ),
        entry("paralegal-pat", "approver", tenants=(DEMO_TENANT,), licensed_roles=("paralegal",)),
        entry(CONSOLE, "console"),
        entry(PUBLISHER, "publisher"),
        entry(MODEL_GATEWAY, "gateway"),
        entry(OPERATOR, "operator"),
    ]
    entries.extend(entry(c, "connector", connector_id=c) for c in CONNECTORS)
    write_private(state.registry, encode_registry(tuple(entries)))
    state.pseudonym_key()
    refresh_demo_release(state)


def refresh_demo_release(state: StateDir) -> Path | None:
    """Sign the shipped scenario corpus and this state's registry as a release.

    Only for a state directory that is its own release authority: it creates
    the release key and a trust root naming it, and drops a new signed release
    into the inbox when the newest one there carries another registry or is
    within a day of its lease; the gate verifies it like any other release.
    """
    if not state.registry.exists():
        return None
    return provision_release(
        corpus=package_path(SCENARIO_CORPUS),
        signer=state.key(RELEASE_SIGNER),
        signer_principal=RELEASE_SIGNER,
        trust_root=state.trust_root,
        inbox=state.release_inbox,
        registry=state.registry.read_bytes(),
        now_ms=wall_clock_ms(),
    )
