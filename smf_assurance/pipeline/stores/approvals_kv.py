"""The approval store on JetStream KV, for gates on more than one machine.

ARCHITECTURE.md, "Scale": beyond one machine "the one-shot claim moves to a
store that is atomic across instances (JetStream KV compare-and-set by
revision), behind the same store interface and the same contract tests".
Implements :class:`smf_assurance.pipeline.stores.approvals.ApprovalStore`; the
rules (states, transitions, refusals and their order) live in
:mod:`smf_assurance.pipeline.stores.approvals` and are the SQLite store's. How this file
keeps them:

- One record per approval, key ``approval.<hex of the id>`` in a KV bucket
  with ``history=1`` and file storage (R3 on a cluster). Every state write is
  ``kv.update(key, value, last=revision)``: JetStream stores it only if the
  key's last sequence is still ``revision`` (header
  ``Nats-Expected-Last-Subject-Sequence``), so a write decided on what was
  read cannot overwrite a write made since. ``create`` writes with expected
  last sequence 0 (``kv.create``'s condition, without nats-py's fallback read,
  which on a cluster can fail for a write not yet applied), so a held id is
  never overwritten.
- A conflict means someone else moved the record: re-read and decide again
  (:meth:`KvApprovalStore._step`). Of two racing claimants both read
  ``approved``, exactly one CAS lands; the other re-reads ``executing`` and
  gets :class:`NotPending` (ARCHITECTURE.md, "Exact-action approval":
  "exactly one claimant wins"). The claim re-checks the state, the expiry,
  every binding field and the digest on the revision it then writes against.
- Every write goes through :func:`_moved`, which checks the transition table
  and drops the content reference when the target is terminal; the content
  message is erased once that write has landed.
- Fail closed: a NATS error, a timeout, a closed store, a record that does not
  decode or does not match its key, an open approval whose content is
  missing: :class:`ApprovalStoreUnavailable`, never a success.

The held content (what the approver sees) never enters the bucket: it is a
message in a plain stream, referenced from the record by its sequence and
erased at every terminal state (:mod:`smf_assurance.pipeline.stores.approvals_kv_content`,
which says why and what the erase does not reach). An order's approval is
found through a second key per order (:mod:`smf_assurance.pipeline.stores.approvals_kv_orders`);
the record's ``order_id`` stays the authority.

Logs carry approval ids, states and reason codes; never the content.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final

import msgspec
import structlog
from nats.js.client import JetStreamContext
from nats.js.errors import (
    KeyWrongLastSequenceError,
)
from nats.js.kv import KeyValue

from smf_assurance.pipeline.stores.approvals import (
    OPEN_STATES,
    ApprovalError,
    ApprovalExists,
    ApprovalExpired,
    ApprovalNotFound,
    ApprovalRecord,
    ApprovalStoreUnavailable,
    FinishOutcome,
    admit_binding,
    check_transition,
    order_refusal,
    order_taken,
    step_refusal,
    transition_refusal,
)
from smf_assurance.pipeline.stores.approvals_kv_content import (
    CONTENT_STREAM,
    CONTENT_SUBJECT_ROOT,
    ORPHAN_GRACE_MS,
    ContentMissing,
    HeldContent,
    ensure_content_stream,
)
from smf_assurance.pipeline.stores.approvals_kv_orders import ORDER_KEY, OrderIndex
from smf_assurance.pipeline.stores.kv import (
    DEFAULT_TIMEOUT,
    NATS_FAILURES,
    KvEntry,
    Retry,
    compare_and_set,
    fail_closed,
    kv_entries,
    open_strict_bucket,
    read_entry,
    token,
)
from smf_assurance.subjects.approvals import (
    TERMINAL_STATES,
    ApprovalBinding,
    ApprovalState,
    binding_digest,
)
from smf_assurance.subjects.canonical import IDENTITY_PREFIX, is_identity

__all__ = [
    "APPROVAL_KEY",
    "BUCKET",
    "CONTENT_STREAM",
    "CONTENT_SUBJECT_ROOT",
    "MAX_ATTEMPTS",
    "NATS_FAILURES",
    "ORDER_KEY",
    "ORPHAN_GRACE_MS",
    "KvApprovalStore",
    "KvEntry",
    "kv_entries",
    "token",
]

log = structlog.get_logger(__name__)

BUCKET: Final = "smf_approvals"
MAX_ATTEMPTS: Final = 16
"""CAS attempts per step. Each conflict is another writer's committed write, and
a record has at most four after its creation (approve, claim, order, finish),
so more conflicts than this is not contention but a fault: refuse."""

APPROVAL_KEY: Final = "approval."

BINDING_FIELDS: Final[tuple[str, ...]] = ApprovalBinding.__struct_fields__


def _approval_key(approval_id: str) -> str | None:
    """``approval.<hex>``, or None for a string that is no identity (no approval
    can have it: :func:`~smf_assurance.pipeline.stores.approvals.admit_binding` requires one)."""
    if not is_identity(approval_id):
        return None
    return APPROVAL_KEY + approval_id.removeprefix(IDENTITY_PREFIX)


class _Stored(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One approval as kept in the bucket: the record without its content.

    ``content_seq`` is the content message's sequence in the content stream,
    ``None`` exactly in the terminal states (the SQLite table's purge CHECK).
    """

    binding: ApprovalBinding
    digest: str
    state: ApprovalState
    resolver_id: str | None
    order_id: str | None
    updated_at_ms: int
    content_seq: int | None
    outcome_codes: tuple[str, ...] = ()
    """A denial's reason codes; absent from records written before them."""
    receipt: str | None = None
    """The connector's receipt of a ``consumed`` execution."""

    @property
    def approval_id(self) -> str:
        return self.binding.approval_id


def _decode(key: str, value: bytes | None) -> _Stored:
    """A record from the bucket, or ApprovalStoreUnavailable: a value no write of
    this store produces (tampered, truncated, filed under another key, content
    kept in a terminal state) is refused, not trusted."""
    try:
        stored = msgspec.json.decode(value or b"", type=_Stored)
    except msgspec.MsgspecError as exc:
        raise ApprovalStoreUnavailable(f"stored approval {key} does not decode") from exc
    if _approval_key(stored.approval_id) != key or (stored.content_seq is None) != (
        stored.state in TERMINAL_STATES
    ):
        raise ApprovalStoreUnavailable(
            f"stored approval {key} is inconsistent", approval_id=stored.approval_id
        )
    return stored


def _moved(stored: _Stored, target: ApprovalState, now_ms: int, **changes: object) -> _Stored:
    """The record after ``stored.state -> target``: the one place a state changes.

    Checks the transition table first (IllegalTransition before any write) and
    drops the content reference when the target is terminal (ARCHITECTURE.md:
    "purged at every terminal state").
    """
    check_transition(stored.approval_id, stored.state, target)
    return msgspec.structs.replace(
        stored,
        state=target,
        updated_at_ms=now_ms,
        content_seq=None if target in TERMINAL_STATES else stored.content_seq,
        **changes,
    )


@dataclass(frozen=True)
class _Step:
    """What one step decided on one revision: a write, a refusal, or both (an
    expired approval is moved to ``expired`` and then refused)."""

    write: _Stored | None = None
    refusal: ApprovalError | None = None


@dataclass(frozen=True)
class _Done:
    """A step that ended without a refusal: the record now, its content, and
    whether this step's own write landed (not another writer's)."""

    stored: _Stored
    payload: bytes | None
    wrote: bool

    def record(self) -> ApprovalRecord:
        return _record(self.stored, self.payload)


def _refuse(refusal: ApprovalError) -> _Step:
    return _Step(refusal=refusal)


def _checked(
    stored: _Stored,
    source: ApprovalState,
    target: ApprovalState,
    now_ms: int,
    digest: str,
    changed: Sequence[str] = (),
) -> _Step | None:
    """:func:`~smf_assurance.pipeline.stores.approvals.step_refusal` on this record, as a step:
    None when ``source -> target`` may be made; else its refusal, which for an
    expired approval comes with the move to ``expired``."""
    refusal = step_refusal(
        stored.approval_id,
        source,
        target,
        now_ms,
        state=stored.state,
        expires_at_ms=stored.binding.expires_at_ms,
        stored_digest=stored.digest,
        digest=digest,
        changed=changed,
    )
    if refusal is None:
        return None
    if isinstance(refusal, ApprovalExpired):
        return _Step(_moved(stored, "expired", now_ms), refusal)
    return _refuse(refusal)


def _unavailable(during: str) -> contextlib.AbstractContextManager[None]:
    return fail_closed(ApprovalStoreUnavailable, "approval", during)


class KvApprovalStore:
    """:class:`~smf_assurance.pipeline.stores.approvals.ApprovalStore` on JetStream KV.

    Any number of instances, on any machines, may share one bucket: atomicity
    comes from the server's compare-and-set by revision, not from this object.
    The instance does not own the NATS connection; ``close`` only stops it.
    """

    def __init__(
        self,
        js: JetStreamContext,
        kv: KeyValue,
        *,
        bucket: str,
        content_stream: str,
        timeout: float,
    ) -> None:
        self._js = js
        self._kv = kv
        self._bucket = bucket
        self._held = HeldContent(js, content_stream, self._check_open)
        self._orders = OrderIndex(kv, self._check_open, attempts=MAX_ATTEMPTS)
        self._timeout = timeout
        self._closed = False

    @classmethod
    async def open(
        cls,
        js: JetStreamContext,
        *,
        bucket: str = BUCKET,
        content_stream: str = CONTENT_STREAM,
        replicas: int = 1,
        timeout: float = DEFAULT_TIMEOUT,
    ) -> KvApprovalStore:
        """Bind the bucket and the content stream, creating them if absent.

        Both use file storage and ``replicas`` copies (a cluster uses 3). Each
        request is bounded by ``js``'s own timeout; ``timeout`` bounds a listing
        (``list_open``, ``expire_due``, ``recover``, ``list_executing``). An
        existing bucket or stream with other settings is refused, not used: a
        bucket with history, or with direct gets (reads from any replica, which
        may lag the CAS it is re-checked against), or with fewer replicas than
        asked, would weaken what this store promises.
        """
        description = "SMF approval records (content lives in the content stream)"
        kv = await open_strict_bucket(
            js, bucket, description, replicas, ApprovalStoreUnavailable, "approval"
        )
        with _unavailable("open"):
            content_fits = await ensure_content_stream(js, content_stream, replicas)
        if not content_fits:
            raise ApprovalStoreUnavailable(f"stream {content_stream} exists with other settings")
        return cls(js, kv, bucket=bucket, content_stream=content_stream, timeout=timeout)

    # -- reads and writes of one record ---------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise ApprovalStoreUnavailable("approval store is closed")

    async def _read(self, approval_id: str) -> tuple[_Stored, int] | None:
        """The record and its revision, or None when no such approval is held."""
        self._check_open()
        key = _approval_key(approval_id)
        if key is None:
            return None
        found = await read_entry(self._kv, key, ApprovalStoreUnavailable, "approval")
        return None if found is None else (_decode(key, found[0]), found[1])

    async def _cas(self, stored: _Stored, revision: int) -> bool:
        """Write ``stored`` only if its key is still at ``revision``; False on conflict."""
        self._check_open()
        key = _approval_key(stored.approval_id)
        assert key is not None  # a decoded record's id is an identity
        with _unavailable("write"):
            try:
                await self._kv.update(key, msgspec.json.encode(stored), last=revision)
            except KeyWrongLastSequenceError:
                return False
        return True

    async def _content(self, stored: _Stored) -> bytes | None:
        """The held content of an open record; an open record without it is a fault."""
        if stored.content_seq is None:
            return None
        return await self._held.read(stored.approval_id, stored.content_seq)

    async def _committed(self, before: _Stored, after: _Stored) -> None:
        """After a write landed: log the move (if the state changed) and erase the
        content the record no longer references."""
        if before.state != after.state:
            log.info(
                "approval_transition",
                approval_id=after.approval_id,
                from_state=before.state,
                to_state=after.state,
            )
        if before.content_seq is not None and after.content_seq is None:
            await self._held.erase(after.approval_id, before.content_seq)

    async def _step(
        self, approval_id: str, decide: Callable[[_Stored], _Step], *, with_content: bool = True
    ) -> _Done | None:
        """Read, decide, compare-and-set; on a conflict read again and decide again.

        Returns the record as written (or as read, when the step writes nothing)
        and whether this call's write landed, or None when no such approval is
        held. With ``with_content``, the content of a record that stays open is
        read BEFORE the write, so a step is never won by a caller that then
        cannot get what it won. A refusal is raised after its write (the move
        to ``expired``) committed.
        """

        async def attempt(stored: _Stored, revision: int) -> _Done | Retry:
            step = decide(stored)
            result = stored if step.write is None else step.write
            payload = None
            if with_content and step.refusal is None:
                try:
                    payload = await self._content(result)
                except ContentMissing:
                    if await self._moved_on(approval_id, revision):
                        return Retry.AGAIN
                    raise
            if step.write is not None:
                if not await self._cas(step.write, revision):
                    return Retry.LOST
                await self._committed(stored, step.write)
            if step.refusal is not None:
                _log_refusal(step.refusal)
                raise step.refusal
            return _Done(result, payload, wrote=step.write is not None)

        def exhausted() -> ApprovalStoreUnavailable:
            log.warning("approval_store_unavailable", during="contention", approval_id=approval_id)
            return ApprovalStoreUnavailable(
                f"approval {approval_id}: no step landed in {MAX_ATTEMPTS} attempts",
                approval_id=approval_id,
            )

        return await compare_and_set(
            lambda: self._read(approval_id), attempt, attempts=MAX_ATTEMPTS, exhausted=exhausted
        )

    async def _moved_on(self, approval_id: str, revision: int) -> bool:
        """Whether the record is no longer at ``revision`` (someone wrote since)."""
        again = await self._read(approval_id)
        return again is None or again[1] != revision

    async def _with_content(self, stored: _Stored, revision: int) -> tuple[_Stored, bytes | None]:
        """The record with its content. A record that moved on while its content was
        being read (a terminal move erases the content) is read again; content
        missing from a record that did not move is a fault."""
        for _ in range(MAX_ATTEMPTS):
            try:
                return stored, await self._content(stored)
            except ContentMissing:
                again = await self._read(stored.approval_id)
                if again is None or again[1] == revision:
                    raise
                stored, revision = again
        raise ApprovalStoreUnavailable(
            f"approval {stored.approval_id}: no stable read in {MAX_ATTEMPTS} attempts",
            approval_id=stored.approval_id,
        )

    async def _all(self) -> list[tuple[_Stored, int]]:
        """Every record with its revision (a snapshot per key, not across keys: each
        later write is a CAS on the record itself). One record that does not decode
        refuses all."""
        self._check_open()
        with _unavailable("list"):
            entries = await kv_entries(self._js, self._bucket, APPROVAL_KEY, self._timeout)
        return [(_decode(key, entry.value), entry.revision) for key, entry in entries.items()]

    async def _select(
        self, wanted: Callable[[_Stored], bool], order: Callable[[_Stored], tuple[int, str]]
    ) -> list[ApprovalRecord]:
        """The records ``wanted`` selects, with their content, sorted by ``order``; a
        record that moved on while it was read is judged again as it is now."""
        chosen: list[tuple[_Stored, bytes | None]] = []
        for stored, revision in await self._all():
            if wanted(stored):
                current, payload = await self._with_content(stored, revision)
                if wanted(current):
                    chosen.append((current, payload))
        chosen.sort(key=lambda pair: order(pair[0]))
        return [_record(stored, payload) for stored, payload in chosen]

    # -- the ApprovalStore protocol -------------------------------------------

    async def create(
        self, binding: ApprovalBinding, held_payload: bytes, now_ms: int
    ) -> ApprovalRecord:
        """Hold ``binding`` in ``pending``: content message first, then the record,
        created with expected last sequence 0 (the authority on whether the id
        is held). A record
        that lost to another creator erases the content it wrote; a write whose
        outcome is unknown (timeout) leaves it for the sweep, which will not
        erase content a record points at."""
        try:
            digest = admit_binding(binding, now_ms)
        except ApprovalError as exc:
            _log_refusal(exc)
            raise
        approval_id = binding.approval_id
        exists = ApprovalExists(
            f"approval {approval_id} (or its decision) is already held", approval_id=approval_id
        )
        if await self._read(approval_id) is not None:
            _log_refusal(exists)
            raise exists
        content_seq = await self._held.hold(approval_id, held_payload, now_ms)
        stored = _Stored(
            binding=binding,
            digest=digest,
            state="pending",
            resolver_id=None,
            order_id=None,
            updated_at_ms=now_ms,
            content_seq=content_seq,
        )
        key = _approval_key(approval_id)
        assert key is not None  # admit_binding checked the id
        self._check_open()
        with _unavailable("create"):
            try:
                await self._kv.update(key, msgspec.json.encode(stored), last=0)
            except KeyWrongLastSequenceError:
                await self._held.erase(approval_id, content_seq)
                _log_refusal(exists)
                raise exists from None
        log.info("approval_created", approval_id=approval_id, to_state="pending")
        return _record(stored, held_payload)

    async def get(self, approval_id: str) -> ApprovalRecord | None:
        found = await self._read(approval_id)
        if found is None:
            return None
        return _record(*await self._with_content(*found))

    async def list_open(self, tenant_id: str | None = None) -> list[ApprovalRecord]:
        def wanted(stored: _Stored) -> bool:
            return stored.state in OPEN_STATES and tenant_id in (None, stored.binding.tenant_id)

        return await self._select(wanted, lambda s: (s.binding.created_at_ms, s.approval_id))

    async def approve(
        self, approval_id: str, digest: str, resolver_id: str, now_ms: int
    ) -> ApprovalRecord:
        return await self._resolve(approval_id, digest, resolver_id, now_ms, "approved")

    async def deny(
        self,
        approval_id: str,
        digest: str,
        resolver_id: str,
        now_ms: int,
        reasons: tuple[str, ...] = (),
    ) -> ApprovalRecord:
        return await self._resolve(approval_id, digest, resolver_id, now_ms, "denied", reasons)

    async def _resolve(
        self,
        approval_id: str,
        digest: str,
        resolver_id: str,
        now_ms: int,
        target: ApprovalState,
        reasons: tuple[str, ...] = (),
    ) -> ApprovalRecord:
        """An approver's answer, accepted only while "the approval is still pending
        and unexpired; the binding digest matches", in that order."""

        def decide(stored: _Stored) -> _Step:
            refused = _checked(stored, "pending", target, now_ms, digest)
            if refused is not None:
                return refused
            return _Step(
                _moved(stored, target, now_ms, resolver_id=resolver_id, outcome_codes=reasons)
            )

        return (await self._must(approval_id, decide)).record()

    async def claim(
        self, approval_id: str, expected: ApprovalBinding, now_ms: int
    ) -> ApprovalRecord:
        """``approved -> executing`` once (ARCHITECTURE.md: "the claim re-checks the
        whole binding and moves approved -> executing in one atomic conditional
        update; exactly one claimant wins"): every check below is made on the
        revision the CAS then requires, so a record changed in between is
        re-read and re-checked, never overwritten."""
        digest = binding_digest(expected)

        def decide(stored: _Stored) -> _Step:
            changed = [
                f for f in BINDING_FIELDS if getattr(stored.binding, f) != getattr(expected, f)
            ]
            refused = _checked(stored, "approved", "executing", now_ms, digest, changed)
            if refused is not None:
                return refused
            return _Step(_moved(stored, "executing", now_ms))

        return (await self._must(approval_id, decide)).record()

    async def record_order(self, approval_id: str, order_id: str, now_ms: int) -> None:
        """Bind the one published order to its claimed approval: one claim, one order.

        The index key is created first and never rewritten, so an order id names
        one approval for good; the record's CAS from no order to ``order_id`` is
        what admits the order. The same order again is accepted (a redelivered
        step, or a retry after a crash between the two writes).
        """

        def check(stored: _Stored) -> _Step:
            refusal = order_refusal(approval_id, stored.state, stored.order_id, order_id)
            return _Step() if refusal is None else _refuse(refusal)

        current = await self._must(approval_id, check, with_content=False)
        if current.stored.order_id == order_id:
            return
        owner = await self._orders.create(order_id, approval_id)
        if owner != approval_id:
            refusal = order_taken(approval_id)
            _log_refusal(refusal)
            raise refusal

        def decide(stored: _Stored) -> _Step:
            step = check(stored)
            if step.refusal is not None or stored.order_id == order_id:
                return step
            return _Step(msgspec.structs.replace(stored, order_id=order_id, updated_at_ms=now_ms))

        await self._must(approval_id, decide, with_content=False)
        log.info("approval_order_recorded", approval_id=approval_id)

    async def finish(
        self,
        approval_id: str,
        outcome: FinishOutcome,
        now_ms: int,
        receipt: str | None = None,
    ) -> ApprovalRecord:
        """``executing -> consumed | failed | execution_unknown``; the content is erased.
        The connector's receipt is kept with ``consumed`` only."""
        check_transition(approval_id, "executing", outcome)
        kept = receipt if outcome == "consumed" else None

        def decide(stored: _Stored) -> _Step:
            refusal = transition_refusal(approval_id, stored.state, outcome)
            if refusal is not None:
                return _refuse(refusal)
            return _Step(_moved(stored, outcome, now_ms, receipt=kept))

        return (await self._must(approval_id, decide)).record()

    async def _must(
        self, approval_id: str, decide: Callable[[_Stored], _Step], *, with_content: bool = True
    ) -> _Done:
        """:meth:`_step` for an approval that must exist (ApprovalNotFound first)."""
        done = await self._step(approval_id, decide, with_content=with_content)
        if done is None:
            refusal = ApprovalNotFound(f"no approval {approval_id}", approval_id=approval_id)
            _log_refusal(refusal)
            raise refusal
        return done

    async def _close_each(
        self, chosen: list[_Stored], target: Callable[[_Stored], ApprovalState | None], now_ms: int
    ) -> list[str]:
        """Move each chosen record to ``target(record)`` (None: leave it), each by its
        own CAS with re-check; returns the ids this call moved, sorted (a record
        another instance moved first is not reported twice)."""

        def decide(stored: _Stored) -> _Step:
            to = target(stored)
            return _Step() if to is None else _Step(_moved(stored, to, now_ms))

        moved: list[str] = []
        for candidate in chosen:
            done = await self._step(candidate.approval_id, decide, with_content=False)
            if done is not None and done.wrote:
                moved.append(candidate.approval_id)
        return sorted(moved)

    async def expire_due(self, now_ms: int) -> list[str]:
        """Close open approvals whose expiry has passed (``expires_at_ms <= now_ms``),
        after sweeping content left behind (see the module docstring)."""
        every = [stored for stored, _ in await self._all()]
        await self._held.sweep({s.approval_id: s.content_seq for s in every}, now_ms)

        def target(stored: _Stored) -> ApprovalState | None:
            due = stored.state in OPEN_STATES and stored.binding.expires_at_ms <= now_ms
            return "expired" if due else None

        return await self._close_each([s for s in every if target(s)], target, now_ms)

    async def recover(self, now_ms: int) -> tuple[list[str], list[str]]:
        """Start-up recovery (:meth:`ApprovalStore.recover`): pending stays pending,
        an approved approval no claim followed is invalidated, and work that may have
        executed becomes ``execution_unknown``, which is never retried.

        On a shared bucket this closes the in-flight work of EVERY gate instance, as
        the contract says; call it when the gate as a whole restarts.
        """
        every = [stored for stored, _ in await self._all()]
        await self._held.sweep({s.approval_id: s.content_seq for s in every}, now_ms)

        def invalid(stored: _Stored) -> ApprovalState | None:
            return "invalidated" if stored.state == "approved" else None

        def unknown(stored: _Stored) -> ApprovalState | None:
            return "execution_unknown" if stored.state == "executing" else None

        invalidated = await self._close_each([s for s in every if invalid(s)], invalid, now_ms)
        unknowns = await self._close_each([s for s in every if unknown(s)], unknown, now_ms)
        log.info("approval_recovery", invalidated=len(invalidated), unknown=len(unknowns))
        return invalidated, unknowns

    async def invalidate_unclaimed(self, before_ms: int, now_ms: int) -> list[str]:
        """``approved`` approvals last changed before ``before_ms`` -> ``invalidated``,
        each by its own CAS with re-check (:meth:`ApprovalStore.invalidate_unclaimed`):
        on a shared bucket any replica may close what a dead replica left approved,
        and of two replicas sweeping at once one moves each."""

        def target(stored: _Stored) -> ApprovalState | None:
            abandoned = stored.state == "approved" and stored.updated_at_ms < before_ms
            return "invalidated" if abandoned else None

        every = [stored for stored, _ in await self._all()]
        return await self._close_each([s for s in every if target(s)], target, now_ms)

    async def invalidate(self, approval_id: str, now_ms: int) -> list[str]:
        """Close one open approval the gate could not complete, so it can never be
        approved later; empty when there is none open under that id."""
        found = await self._read(approval_id)
        if found is None:
            return []

        def target(stored: _Stored) -> ApprovalState | None:
            return "invalidated" if stored.state in OPEN_STATES else None

        return await self._close_each([found[0]], target, now_ms)

    async def list_executing(self, before_ms: int) -> list[ApprovalRecord]:
        """Executing approvals whose last change is older than ``before_ms``."""

        def wanted(stored: _Stored) -> bool:
            return stored.state == "executing" and stored.updated_at_ms < before_ms

        return await self._select(wanted, lambda s: (s.updated_at_ms, s.approval_id))

    async def find_by_order(self, order_id: str) -> str | None:
        """The approval the order was recorded for; the record must say so too (an
        index entry a crash left without its record write names nothing)."""
        approval_id = await self._orders.owner(order_id)
        if approval_id is None:
            return None
        found = await self._read(approval_id)
        if found is None or found[0].order_id != order_id:
            return None
        return approval_id

    async def close(self) -> None:
        """Stop this instance; every later call raises ApprovalStoreUnavailable.
        The NATS connection belongs to the caller and stays open."""
        self._closed = True


def _record(stored: _Stored, payload: bytes | None) -> ApprovalRecord:
    return ApprovalRecord(
        binding=stored.binding,
        digest=stored.digest,
        state=stored.state,
        resolver_id=stored.resolver_id,
        order_id=stored.order_id,
        held_payload=payload,
        updated_at_ms=stored.updated_at_ms,
        outcome_codes=stored.outcome_codes,
        receipt=stored.receipt,
    )


def _log_refusal(exc: ApprovalError) -> None:
    log.info("approval_refused", approval_id=exc.approval_id, reason_code=exc.reason_code)
