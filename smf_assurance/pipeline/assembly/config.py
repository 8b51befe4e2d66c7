"""What a gate is built from: explicit settings, nothing read from a state directory.

Every field is a value the caller decided: the bus servers, the gate's key
and the tenant pseudonym key, the registry, where the stores live, where
policy comes from (a verified release source, or a policy set the caller
loaded), which runtimes must attest. Keys never appear in a ``repr``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from smf_assurance.core.normalize import MapperTable, decode_mapper
from smf_assurance.core.projection import PolicySet
from smf_assurance.core.release_trust import VerifiedRelease
from smf_assurance.pipeline.chain.approvals import DEFAULT_CLAIM_GRACE_MS
from smf_assurance.pipeline.chain.buffer import BufferLimits
from smf_assurance.pipeline.chain.dispatch import DEFAULT_ORDER_TTL_MS
from smf_assurance.pipeline.chain.outcomes import DEFAULT_EXECUTION_DEADLINE_MS
from smf_assurance.pipeline.desks.attestation import RuntimeRequirement
from smf_assurance.pipeline.stores.call_context import DEFAULT_MAX_AGE_S, DEFAULT_MIRROR_RECORDS
from smf_assurance.pipeline.stores.tainted_content import DEFAULT_MAX_BYTES as TAINTED_MAX_BYTES
from smf_assurance.subjects import names
from smf_assurance.subjects.bus_access import BusCredential
from smf_assurance.subjects.clock import wall_clock_ms
from smf_assurance.subjects.keyed import PseudonymKey
from smf_assurance.subjects.keys import SigningKey
from smf_assurance.subjects.registry import KeyRegistry
from smf_assurance.subjects.release import TrustRoot


def shipped_mapper_tables() -> dict[str, MapperTable]:
    """The shipped per-adapter mapper tables (``smf_assurance/pipeline/mappers/*.json``)."""
    tables: dict[str, MapperTable] = {}
    folder = resources.files("smf_assurance.pipeline").joinpath("mappers")
    for entry in folder.iterdir():
        if entry.name.endswith(".json"):
            table = decode_mapper(entry.read_bytes())
            tables[table.adapter_id] = table
    return tables


@dataclass(frozen=True)
class ClusterSettings:
    """Run as one replica of several on a NATS cluster (ARCHITECTURE.md, "Scale").

    The approval and proposal-claim stores move to replicated JetStream KV
    buckets (compare-and-set by revision), and every stream and bucket the gate
    creates gets ``replicas`` copies.
    """

    replicas: int = 3


@dataclass(frozen=True)
class StorePaths:
    """The SQLite files of one gate (the claim and approval files are not used on a cluster)."""

    ledger: Path
    """The evidence ledger; on one machine it holds the claims and the order book too
    (a claim and its order commit with the decision's evidence entry)."""
    claims: Path
    """Where earlier versions kept the claims and the order book: merged into the
    ledger file at start (:func:`smf_assurance.pipeline.stores.claims.merge_claim_file`)."""
    approvals: Path

    @property
    def streams(self) -> Path:
        """When this gate's streams were made (``streams.ensure_gate_streams``): beside
        the ledger, so a stream deleted or made again under it is noticed at start."""
        return self.ledger.with_name(self.ledger.stem + ".streams.json")


@dataclass(frozen=True)
class ReleaseSource:
    """Release mode: the gate decides only under a verified release.

    Candidates come from the ``SMF_RELEASES`` bucket and, when given, an inbox
    folder; the last accepted release is persisted at ``state`` (rollback
    protection across restarts).
    """

    trust_root: TrustRoot
    state: Path
    inbox: Path | None = None
    tick_seconds: float = 5.0


@dataclass(frozen=True)
class GateConfig:
    """Everything ``start_gate`` needs, explicitly."""

    servers: tuple[str, ...]
    """One NATS URL, or a cluster's seeds."""
    gate_key: SigningKey = field(repr=False)
    tenant_key: PseudonymKey
    registry: KeyRegistry
    """The registry to start with; a verified release's registry replaces it."""
    stores: StorePaths
    policy: ReleaseSource | PolicySet
    """Where decisions get their policy: a verified release (production), or a
    policy set the caller loaded and vouches for (tests, offline evaluation)."""
    mapper_tables: Mapping[str, MapperTable] = field(default_factory=shipped_mapper_tables)
    attestation: Mapping[str, RuntimeRequirement] = field(default_factory=dict)
    """Runtimes that must attest before they propose, and to what."""
    credential: BusCredential | None = None
    """Who the gate is on the bus; ``None`` only on a bus without authorization."""
    name: str = names.DEFAULT_GATE_NAME
    co_located: bool = False
    """Call the stages in process (their services still answer on the bus)."""
    cluster: ClusterSettings | None = None
    """One replica of several (``smf_assurance.pipeline.assembly.deployment.Cluster``);
    ``None``: one machine (``OneMachine``)."""
    clock: Callable[[], int] = wall_clock_ms
    join_seconds: float = 30.0
    """How long the first connection may take before the start fails
    (``BusUnavailableError``, with the server's reason); a refusal of the
    credential ends it at once."""
    stage_timeout: float = 2.0
    sweep_seconds: float = 1.0
    buffer_limits: BufferLimits | None = None
    claim_prune_seconds: float = 60.0
    """How often the gate forgets proposal claims past their retention."""
    execution_deadline_ms: int = DEFAULT_EXECUTION_DEADLINE_MS
    """How long an order, approved or allowed directly, may go without its signed
    report before it ends ``execution_unknown`` (terminal, never retried)."""
    order_ttl_ms: int = DEFAULT_ORDER_TTL_MS
    """The order budget: an order is executable until it was given plus this (signed
    into it, enforced by its connector, promised by its allow's ``expires_at_ms``)."""
    claim_grace_ms: int = DEFAULT_CLAIM_GRACE_MS
    """How long an accepted allow-once may stay unclaimed before any gate's sweep
    invalidates it (a gate, or replica, died between accepting and claiming)."""
    call_context_max_age_s: float = DEFAULT_MAX_AGE_S
    """How long the ``SMF_CALL_CONTEXT`` bucket keeps a tool call's recorded context
    when this gate creates it (why 30 days:
    ``smf_assurance.pipeline.stores.call_context``)."""
    call_context_mirror: int = DEFAULT_MIRROR_RECORDS
    """How many recent call contexts the gate keeps from its watch of the bucket; a
    proposal whose record is not kept reads it from the bucket. 0: no watch, every
    lookup a direct read."""
    tainted_content_max_bytes: int = TAINTED_MAX_BYTES
    """The size of the ``SMF_TAINTED_CONTENT`` bucket when this gate creates it: past it
    the model gateway's writes are refused, and so the turns of tainted sessions that
    write (``smf_assurance.pipeline.stores.tainted_content``). Its records are kept as
    long as the call contexts (``call_context_max_age_s``)."""
    restored_at_ms: int | None = None
    """When this state was restored from a backup (``smf-assurance restore``'s marker),
    or None. The backup may be older than the last moment the gate it came from served:
    what that gate decided or resolved after the backup began is not in it. So a
    proposal (or an output close) that gate could have accepted (issued up to this
    moment plus the freshness window and the clock skew,
    ``GateSettings.record_only_until_ms``) is answered from the record only, never
    decided again (``Gate.decide``), and every approval the restored state holds open is
    invalidated at start (``ApprovalDesk.recover``)."""
    notice_content_tenants: frozenset[str] = frozenset()
    """The tenants whose pending approvals the notifier may ask words of for its notices
    (matter, destination, document: ``smf_assurance.pipeline.chain.summaries``); none by
    default, so every notice is content-free."""
    on_release: Callable[[VerifiedRelease], None] | None = None
    """Called after the gate switched to a newly verified release (its registry is in
    force): what runs the bus may follow it, e.g. regenerate the server's
    authorization. An exception here is logged, never fatal."""

    def __post_init__(self) -> None:
        if not self.servers:
            raise ValueError("a gate needs at least one NATS server")
        if self.execution_deadline_ms <= 0:
            raise ValueError("execution_deadline_ms must be positive")
        if self.order_ttl_ms <= 0 or self.claim_grace_ms <= 0:
            raise ValueError("order_ttl_ms and claim_grace_ms must be positive")
        if self.call_context_max_age_s <= 0 or self.call_context_mirror < 0:
            raise ValueError(
                "call_context_max_age_s must be positive and call_context_mirror not negative"
            )
        if self.tainted_content_max_bytes <= 0:
            raise ValueError("tainted_content_max_bytes must be positive")
