"""Contract tests of the proposal claim store (ARCHITECTURE.md, "One proposal
through the bus": allow means "claim once, then publish"; "Scale": on a
cluster the claim is atomic across instances on JetStream KV).

Every test in the contract section runs against each backend
(``tests/support/store_backends.py``: the SQLite ``ClaimStore`` and the
JetStream ``KvClaimStore``), each opening new store instances (their own
connections) on one storage. The
KV section checks what only a NATS backend has: outages of a real server,
tampered values, and compare-and-set conflicts.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Final

import nats
import pytest
from nats.js.api import StorageType
from nats.js.errors import KeyWrongLastSequenceError
from nats.js.kv import KeyValue

from smf_assurance.ops.local.cluster import LocalNatsCluster
from smf_assurance.ops.local.natsserver import EmbeddedNatsServer
from smf_assurance.pipeline.stores import claims_kv
from smf_assurance.pipeline.stores.approvals_kv import token
from smf_assurance.pipeline.stores.claims import (
    ClaimStore,
    ClaimStoreUnavailable,
    ProposalClaims,
    StoreUnavailable,
)
from smf_assurance.pipeline.stores.claims_kv import KvClaimStore
from tests.support.builders import AT_MS, fake_identity
from tests.support.bus_helpers import wait_for
from tests.support.store_backends import (
    KvConnections,
    SqliteFile,
    StoreBackend,
    only_kv,
    opened_on_backend,
    opened_on_kv,
    over_backends,
)

T0: Final = AT_MS
OPERATION: Final = fake_identity("operation")
DECISION: Final = fake_identity("decision")


@dataclass
class SqliteBackend(SqliteFile):
    async def open(self) -> ClaimStore:
        return await ClaimStore.open(self.path)


@dataclass
class KvBackend(KvConnections):
    async def open(self) -> KvClaimStore:
        return await KvClaimStore.open_bucket(await self.jetstream())

    async def bucket(self) -> KeyValue:
        """The claim bucket through a connection of its own, around the store."""
        return await (await self.jetstream()).key_value(claims_kv.BUCKET)


Backend = StoreBackend[ProposalClaims]
backend = over_backends(lambda tmp_path: SqliteBackend(tmp_path / "claims.db"), KvBackend)
claims = opened_on_backend()


# --- the contract -----------------------------------------------------------


async def test_first_claim_wins_and_every_later_one_is_refused(claims: ProposalClaims) -> None:
    assert await claims.claim("p-1", OPERATION, DECISION, T0) is True
    assert await claims.claim("p-1", OPERATION, DECISION, T0 + 1) is False
    assert await claims.claim("p-1", fake_identity("other"), DECISION, T0 + 2) is False
    assert await claims.state("p-1") == "claimed"
    assert await claims.claim("p-2", OPERATION, DECISION, T0) is True


async def test_unknown_proposal_has_no_state(claims: ProposalClaims) -> None:
    assert await claims.state("never") is None
    await claims.settle("never", "published")
    assert await claims.state("never") is None


@pytest.mark.parametrize("first", ["published", "failed"])
async def test_settle_moves_a_claim_once(claims: ProposalClaims, first: Any) -> None:
    await claims.claim("p-1", OPERATION, DECISION, T0)
    await claims.settle("p-1", first)
    assert await claims.state("p-1") == first
    await claims.settle("p-1", "failed" if first == "published" else "published")
    assert await claims.state("p-1") == first
    assert await claims.claim("p-1", OPERATION, DECISION, T0) is False


async def test_settle_to_a_state_outside_the_vocabulary_is_refused(
    claims: ProposalClaims,
) -> None:
    await claims.claim("p-1", OPERATION, DECISION, T0)
    bogus: Any = "allowed"
    with pytest.raises(StoreUnavailable):
        await claims.settle("p-1", bogus)
    assert await claims.state("p-1") == "claimed"


async def test_prune_forgets_only_claims_older_than_the_cutoff(claims: ProposalClaims) -> None:
    """Past the freshness window a replay is refused as stale anyway, so the claim
    can go; a pruned proposal id can be claimed again, a newer one cannot."""
    await claims.claim("old-1", OPERATION, DECISION, T0)
    await claims.claim("old-2", OPERATION, DECISION, T0 + 9)
    await claims.settle("old-2", "published")
    await claims.claim("new", OPERATION, DECISION, T0 + 10)

    assert await claims.prune(T0 + 10) == 2

    assert await claims.state("old-1") is None
    assert await claims.state("old-2") is None
    assert await claims.state("new") == "claimed"
    assert await claims.prune(T0 + 10) == 0
    assert await claims.claim("old-1", OPERATION, DECISION, T0 + 20) is True
    assert await claims.claim("new", OPERATION, DECISION, T0 + 20) is False


@pytest.mark.parametrize(
    "ids",
    [
        pytest.param(("a", "b"), id="plain"),
        pytest.param(("output-close:s1", "output-close:s2"), id="colon"),
        pytest.param(("p.1", "p_1"), id="dot-underscore"),
        pytest.param(("é", "e"), id="unicode"),
        pytest.param(("x" * 300, "x" * 301), id="long"),
    ],
)
async def test_distinct_proposal_ids_never_share_a_claim(
    claims: ProposalClaims, ids: tuple[str, str]
) -> None:
    first, second = ids
    assert await claims.claim(first, OPERATION, DECISION, T0) is True
    assert await claims.claim(second, OPERATION, DECISION, T0) is True
    assert await claims.claim(first, OPERATION, DECISION, T0) is False


async def test_racing_claims_on_two_instances_have_exactly_one_winner(
    backend: Backend, claims: ProposalClaims
) -> None:
    """20 tasks on each of two instances (two connections: two gate processes, or
    on KV two machines), interleaved, over 50 rounds."""
    other = await backend.open()
    try:
        for round_no in range(50):
            proposal = f"race-{round_no}"
            contenders = [s for _ in range(20) for s in (claims, other)]
            results = await asyncio.gather(
                *(s.claim(proposal, OPERATION, DECISION, T0) for s in contenders)
            )
            assert results.count(True) == 1, f"round {round_no}: {results.count(True)} winners"
            assert await other.state(proposal) == "claimed"
    finally:
        await other.close()


async def test_closed_store_is_unavailable(backend: Backend) -> None:
    closed = await backend.open()
    await closed.claim("p-1", OPERATION, DECISION, T0)
    await closed.close()
    await closed.close()  # idempotent
    steps: list[Callable[[], Awaitable[object]]] = [
        lambda: closed.claim("p-2", OPERATION, DECISION, T0),
        lambda: closed.settle("p-1", "published"),
        lambda: closed.state("p-1"),
        lambda: closed.prune(T0 + 1),
    ]
    for step in steps:
        with pytest.raises(StoreUnavailable):
            await step()


# --- JetStream KV only --------------------------------------------------------


kv_backend = only_kv(KvBackend)
kv_claims = opened_on_kv()


def claim_key(proposal_id: str) -> str:
    return claims_kv.CLAIM_KEY + token(proposal_id)


async def test_kv_outage_is_unavailable_never_a_claim(nats_server: EmbeddedNatsServer) -> None:
    """Server stopped: ClaimStoreUnavailable (a StoreUnavailable, so the gate denies
    ``claim_store_unavailable``), never True; after a restart the claims made
    before the outage still hold and the same instance works again."""
    kv_backend = KvBackend(nats_server)  # the suite's timeout: before and after must succeed
    try:
        store = await kv_backend.open()
        assert await store.claim("before", OPERATION, DECISION, T0) is True
        nats_server.stop()
        steps: list[Callable[[], Awaitable[object]]] = [
            lambda: store.claim("during", OPERATION, DECISION, T0),
            lambda: store.settle("before", "published"),
            lambda: store.state("before"),
            lambda: store.prune(T0 + 1),
        ]
        failures = await asyncio.wait_for(
            asyncio.gather(*(step() for step in steps), return_exceptions=True), timeout=30
        )
        for step, failure in zip(steps, failures, strict=True):  # all at once: one timeout
            assert isinstance(failure, ClaimStoreUnavailable), (step, failure)
        nats_server.start()
        await wait_for(lambda: all(c.is_connected for c in kv_backend.connections), timeout=10)
        assert await store.state("before") == "claimed"
        assert await store.claim("before", OPERATION, DECISION, T0) is False
        assert await store.claim("after", OPERATION, DECISION, T0) is True
    finally:
        await kv_backend.aclose()


@pytest.mark.parametrize(
    "value",
    [
        pytest.param(b"not json", id="not-json"),
        pytest.param(b'{"proposal_id": "p-1"}', id="missing-fields"),
        pytest.param(
            b'{"proposal_id": "p-2", "operation_hash": "x", "decision_id": "y",'
            b' "claimed_at": 1, "state": "claimed"}',
            id="another-proposal",
        ),
        pytest.param(
            b'{"proposal_id": "p-1", "operation_hash": "x", "decision_id": "y",'
            b' "claimed_at": 1, "state": "granted"}',
            id="unknown-state",
        ),
    ],
)
async def test_kv_tampered_claim_is_unavailable_and_never_reclaimable(
    kv_backend: KvBackend, kv_claims: KvClaimStore, value: bytes
) -> None:
    await kv_claims.claim("p-1", OPERATION, DECISION, T0)
    bucket = await kv_backend.bucket()
    await bucket.put(claim_key("p-1"), value)
    for step in (
        lambda: kv_claims.state("p-1"),
        lambda: kv_claims.settle("p-1", "published"),
        lambda: kv_claims.prune(T0 + 10),
    ):
        with pytest.raises(ClaimStoreUnavailable):
            await step()
    assert await kv_claims.claim("p-1", OPERATION, DECISION, T0) is False


async def test_kv_settle_meeting_a_concurrent_settle_keeps_the_first(
    kv_backend: KvBackend, kv_claims: KvClaimStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both read ``claimed``; the rival's settle lands first; ours meets a newer
    revision, re-reads ``failed`` and leaves it (settle moves only from claimed)."""
    await kv_claims.claim("p-1", OPERATION, DECISION, T0)
    rival = await kv_backend.open()
    real_update = kv_claims._kv.update
    attempts: list[int] = []

    async def update(key: str, value: bytes, last: int | None = None, **kw: Any) -> int:
        attempts.append(last or 0)
        if len(attempts) == 1:
            await rival.settle("p-1", "failed")
        return await real_update(key, value, last=last, **kw)

    monkeypatch.setattr(kv_claims._kv, "update", update)
    await kv_claims.settle("p-1", "published")
    assert len(attempts) == 1
    assert await rival.state("p-1") == "failed"


async def test_kv_prune_keeps_a_claim_that_changed_after_it_was_judged(
    kv_backend: KvBackend, kv_claims: KvClaimStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The delete is conditional on the revision that was judged old: a claim
    settled in between is kept (and not counted), the others go."""
    await kv_claims.claim("changing", OPERATION, DECISION, T0)
    await kv_claims.claim("stale", OPERATION, DECISION, T0)
    rival = await kv_backend.open()
    real_delete = kv_claims._kv.delete
    settled: list[str] = []

    async def delete(key: str, last: int | None = None, **kw: Any) -> bool:
        if key == claim_key("changing") and not settled:
            settled.append(key)
            await rival.settle("changing", "published")
        return await real_delete(key, last=last, **kw)

    monkeypatch.setattr(kv_claims._kv, "delete", delete)
    assert await kv_claims.prune(T0 + 1) == 1
    assert await kv_claims.state("changing") == "published"
    assert await kv_claims.state("stale") is None


async def test_kv_claims_on_two_connections_share_one_bucket(kv_backend: KvBackend) -> None:
    """What makes the store cluster-wide: an instance on another connection sees
    the claim and cannot claim again."""
    first, second = await kv_backend.open(), await kv_backend.open()
    assert await first.claim("p-1", OPERATION, DECISION, T0) is True
    assert await second.claim("p-1", OPERATION, DECISION, T0) is False
    await second.settle("p-1", "published")
    assert await first.state("p-1") == "published"


@pytest.mark.parametrize(
    "settings",
    [
        pytest.param({"history": 3}, id="history"),
        pytest.param({"storage": StorageType.MEMORY}, id="memory-storage"),
        pytest.param({"direct": True}, id="direct-gets"),
    ],
)
async def test_kv_open_refuses_a_bucket_with_other_settings(
    kv_backend: KvBackend, settings: dict[str, Any]
) -> None:
    client = await kv_backend.connect()
    js = client.jetstream(timeout=2)
    config: dict[str, Any] = {"history": 1, "storage": StorageType.FILE} | settings
    await js.create_key_value(bucket=claims_kv.BUCKET, **config)
    with pytest.raises(ClaimStoreUnavailable):
        await KvClaimStore.open_bucket(js)


async def test_kv_open_refuses_fewer_replicas_than_asked(kv_backend: KvBackend) -> None:
    client = await kv_backend.connect()
    js = client.jetstream(timeout=2)
    await KvClaimStore.open_bucket(js)
    with pytest.raises(ClaimStoreUnavailable):
        await KvClaimStore.open_bucket(js, replicas=3)


async def test_kv_claim_losing_to_a_write_not_yet_readable_is_refused(
    kv_claims: KvClaimStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a cluster the leader refuses a create that conflicts with a claim it has
    accepted but not yet applied, and a read right after finds no message. That is
    another instance's claim in flight: False (duplicate), never True, and not an
    outage (nats-py's ``kv.create`` raises KeyNotFoundError there)."""

    async def lost_to_an_unapplied_write(*_: Any, **__: Any) -> int:
        raise KeyWrongLastSequenceError

    monkeypatch.setattr(kv_claims._kv, "update", lost_to_an_unapplied_write)
    assert await kv_claims.claim("p-1", OPERATION, DECISION, T0) is False
    monkeypatch.undo()
    assert await kv_claims.state("p-1") is None


async def test_kv_r3_cluster_two_nodes_race_claims_with_one_winner(
    nats_cluster: LocalNatsCluster,
) -> None:
    """ARCHITECTURE.md "Scale": gate instances on different nodes of an R3 cluster.
    Two stores with ``replicas=3`` on two nodes, 10 claimants each, 30 proposals:
    exactly one True per proposal, never an outage."""
    operator = nats_cluster.operator.connect_options()
    clients = [
        await nats.connect(url, connect_timeout=5, **operator) for url in nats_cluster.urls[:2]
    ]
    try:
        stores = [
            await KvClaimStore.open_bucket(c.jetstream(timeout=5), replicas=3) for c in clients
        ]
        for round_no in range(30):
            results = await asyncio.gather(
                *(s.claim(f"r3-{round_no}", OPERATION, DECISION, T0) for s in stores * 10)
            )
            assert results.count(True) == 1, f"round {round_no}: {results}"
    finally:
        for client in clients:
            await client.close()
