"""The fixtures, builders and constants of tests/bus/test_approval_store.py
that other test modules use too: here, so that no test module imports another."""

from __future__ import annotations

import contextlib
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Protocol

import msgspec
from nats.js.errors import (
    NotFoundError,
)

from smf_assurance.pipeline.stores.approvals import (
    ApprovalStore,
)
from smf_assurance.pipeline.stores.approvals_kv import KvApprovalStore
from smf_assurance.pipeline.stores.approvals_sqlite import SqliteApprovalStore
from smf_assurance.subjects.approvals import (
    ApprovalBinding,
    approval_id_for,
    binding_digest,
)
from tests.support.builders import AT_MS, DEFAULT_TENANT, fake_identity
from tests.support.store_backends import (
    KvConnections,
    SqliteFile,
    StoreBackend,
    opened_on_backend,
    over_backends,
)

__all__ = [
    "ATTORNEY",
    "T0",
    "approved",
    "backend",
    "changed",
    "held",
    "make_binding",
    "state_of",
    "store",
]

T0: Final = AT_MS


TTL: Final = 300_000


ATTORNEY: Final = "attorney-alice"


PAYLOAD: Final = b"To the Clerk of Court: PRIVILEGED filing body"


def make_binding(
    label: str = "filing",
    *,
    created_at_ms: int = T0,
    ttl_ms: int = TTL,
    tenant_id: str = DEFAULT_TENANT,
) -> ApprovalBinding:
    """A valid binding; ``label`` makes the decision (and so the approval) distinct."""
    decision_id = fake_identity(f"decision:{label}")
    return ApprovalBinding(
        approval_id=approval_id_for(decision_id),
        decision_id=decision_id,
        operation_hash=fake_identity(f"operation:{label}"),
        canonical_args_hash=fake_identity(f"args:{label}"),
        content_hash=fake_identity(f"content:{label}"),
        destination_identity_hash=fake_identity("court:sdny"),
        release_id="release-2026-11-29",
        projection_id=fake_identity("projection"),
        policy_fingerprint=fake_identity("policy"),
        tenant_id=tenant_id,
        organization_id="org-acme-llp",
        matter_id="matter-2026-0042",
        actor_id="paralegal-pat",
        required_roles=("licensed_attorney",),
        required_approvals=1,
        created_at_ms=created_at_ms,
        expires_at_ms=created_at_ms + ttl_ms,
    )


def changed(binding: ApprovalBinding, field: str) -> ApprovalBinding:
    """``binding`` with ``field`` changed to another valid value (TTL kept in range)."""
    value = getattr(binding, field)
    shrink = binding.expires_at_ms - binding.created_at_ms > 1  # else grow the TTL by 1
    new: Any
    if field == "created_at_ms":
        new = value + 1 if shrink else value - 1
    elif field == "expires_at_ms":
        new = value - 1 if shrink else value + 1
    elif isinstance(value, int):
        new = value + 1
    elif isinstance(value, tuple):
        new = (*value, "partner")
    elif value.startswith("sha256:"):
        new = fake_identity(f"changed {field}")
    else:
        new = value + "-changed"
    return msgspec.structs.replace(binding, **{field: new})


class Backend(StoreBackend[ApprovalStore], Protocol):
    async def holds_bytes(self, needle: bytes) -> bool:
        """True when ``needle`` is still anywhere in the backend's durable storage.

        For a backend that keeps history (JetStream KV keeps revisions per key),
        "anywhere" includes the history: a purged value must be gone, not merely
        superseded by a newer revision."""
        ...


@dataclass
class SqliteBackend(SqliteFile):
    async def open(self) -> ApprovalStore:
        return await SqliteApprovalStore.open(self.path)

    async def holds_bytes(self, needle: bytes) -> bool:
        """Asks through a connection, then checkpoints the WAL into the main file
        (and truncates it) and reads the raw files: the bytes must be gone from the
        table, from the database pages and from the journal."""
        with contextlib.closing(sqlite3.connect(self.path)) as raw:
            (hits,) = raw.execute(
                "SELECT count(*) FROM approvals WHERE instr(held_payload, ?) > 0", (needle,)
            ).fetchone()
            busy, _, _ = raw.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        assert busy == 0, "checkpoint could not run"
        files = [self.path, self.path.with_name(self.path.name + "-wal")]
        return hits > 0 or any(f.exists() and needle in f.read_bytes() for f in files)


@dataclass
class KvBackend(KvConnections):
    async def open(self) -> KvApprovalStore:
        return await KvApprovalStore.open(await self.jetstream())

    async def holds_bytes(self, needle: bytes) -> bool:
        """Reads every message of every stream on the server through the API (the
        KV bucket's live revisions and the content stream), then every file under
        the server's store directory: message blocks hold messages the API no
        longer shows (superseded revisions, deletes without erase). A block
        whose messages are all gone is deleted as a file, which would hide a
        delete without erase; the KV-only purge test keeps the block in use."""
        js = await self.jetstream()
        for info in await js.streams_info():
            name = info.config.name
            assert name is not None
            seq = 1
            while True:
                try:
                    msg = await js.get_msg(name, seq=seq, subject=">", next=True)
                except NotFoundError:
                    break
                if needle in (msg.data or b"") or needle in repr(msg.headers).encode():
                    return True
                assert msg.seq is not None
                seq = msg.seq + 1
        return on_disk(self.server.store_dir, needle)


def on_disk(root: Path, needle: bytes) -> bool:
    """Whether any file under ``root`` contains ``needle`` (raw bytes, no parsing)."""
    return any(p.is_file() and needle in p.read_bytes() for p in root.rglob("*"))


backend = over_backends(lambda tmp_path: SqliteBackend(tmp_path / "approvals.db"), KvBackend)
store = opened_on_backend()


async def held(store: ApprovalStore, label: str = "filing", **kw: Any) -> ApprovalBinding:
    binding = make_binding(label, **kw)
    await store.create(binding, PAYLOAD, binding.created_at_ms)
    return binding


async def approved(store: ApprovalStore, label: str = "filing", **kw: Any) -> ApprovalBinding:
    binding = await held(store, label, **kw)
    await store.approve(binding.approval_id, binding_digest(binding), ATTORNEY, T0 + 1)
    return binding


async def state_of(store: ApprovalStore, approval_id: str) -> str:
    record = await store.get(approval_id)
    assert record is not None
    return record.state


def raw(tmp_path: Path) -> contextlib.closing[sqlite3.Connection]:
    conn = sqlite3.connect(tmp_path / "approvals.db", isolation_level=None, timeout=5)
    return contextlib.closing(conn)
