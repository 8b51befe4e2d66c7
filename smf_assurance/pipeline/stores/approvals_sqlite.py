"""The approval store on one SQLite file.

Implements :class:`smf_assurance.pipeline.stores.approvals.ApprovalStore` for one machine;
the rules (states, transitions, refusals) live in
:mod:`smf_assurance.pipeline.stores.approvals`. ARCHITECTURE.md, "Exact-action approval".
How this file keeps them:

- One job, one transaction, one thread hop (:class:`SqliteWorker`): every
  write runs inside ``BEGIN IMMEDIATE`` as a single job on the store's worker
  thread, so the claim's check and its write cannot interleave with another
  claimant's, in this process (one connection, one thread) or in another (two
  connections on one file: ``BEGIN IMMEDIATE`` takes the write lock first).
- The claim is ONE conditional ``UPDATE``: its ``WHERE`` names the state
  ``approved``, the unexpired clock, the stored digest and every field of the
  expected binding, and the claim succeeds only when exactly one row changed.
  Only when no row changed does the same transaction read the row to name the
  refusal (and, if the approval has expired, move it to ``expired``).
- Every state write goes through :meth:`_Tx.move`, which checks the transition
  table first and purges the held content when the target is terminal. The
  table's own ``CHECK`` constraints back this up: the state vocabulary, the
  600 s TTL, and "content is NULL exactly in the terminal states", so even a
  write that forgot the purge would be rejected by SQLite.
- ``PRAGMA secure_delete`` zeroes freed cell space, so purged content does not
  linger in the main database file. It can still sit in old frames of the
  ``-wal`` file until a checkpoint overwrites or truncates them: a limit of
  the WAL journal, named here so no one claims more.
- Refusals that must persist a change (expiry found at approve, deny or claim)
  are returned from the job rather than raised, so the transaction commits the
  move to ``expired`` and the caller still gets :class:`ApprovalExpired`.
- Logs carry approval ids, states and reason codes, emitted only after the
  transaction committed; never the content.

A claim whose awaiting task is cancelled still completes on the worker thread:
the approval stays ``executing`` with no one to finish it, and start-up
recovery moves it to ``execution_unknown``. It can never be claimed twice.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable, Sequence
from typing import Any, Final, TypeVar, cast

import msgspec
import structlog

from smf_assurance.pipeline.stores.approvals import (
    ALL_STATES,
    OPEN_STATES,
    ApprovalError,
    ApprovalExists,
    ApprovalExpired,
    ApprovalNotFound,
    ApprovalRecord,
    ApprovalStoreUnavailable,
    FinishOutcome,
    IllegalTransition,
    admit_binding,
    check_transition,
    order_refusal,
    order_taken,
    step_refusal,
    transition_refusal,
)
from smf_assurance.pipeline.stores.sqlite_worker import SqliteWorker, StoreUnavailable, immediate
from smf_assurance.subjects.approvals import (
    MAX_TTL_MS,
    TERMINAL_STATES,
    ApprovalBinding,
    ApprovalState,
    binding_digest,
)

__all__ = ["SCHEMA", "SqliteApprovalStore"]

log = structlog.get_logger(__name__)

T = TypeVar("T")

BINDING_FIELDS: Final[tuple[str, ...]] = ApprovalBinding.__struct_fields__


def _json_fields() -> frozenset[str]:
    info = cast(msgspec.inspect.StructType, msgspec.inspect.type_info(ApprovalBinding))
    scalars = (msgspec.inspect.StrType, msgspec.inspect.IntType)
    return frozenset(f.name for f in info.fields if not isinstance(f.type, scalars))


_JSON_FIELDS: Final = _json_fields()
"""Binding fields that are not one string or integer (``required_roles``): stored
as their JSON text, which is deterministic for a given value, so the claim's
column comparison is as exact as the digest's."""


def binding_columns(binding: ApprovalBinding) -> dict[str, Any]:
    """The binding as column values (one column per field)."""
    return {
        name: msgspec.json.encode(value).decode() if name in _JSON_FIELDS else value
        for name, value in msgspec.structs.asdict(binding).items()
    }


def _sql_list(values: Sequence[str]) -> str:
    return ", ".join(f"'{value}'" for value in values)


SCHEMA: Final = f"""
PRAGMA secure_delete = ON;
CREATE TABLE IF NOT EXISTS approvals (
    approval_id TEXT PRIMARY KEY,
    decision_id TEXT NOT NULL UNIQUE,
    operation_hash TEXT NOT NULL,
    canonical_args_hash TEXT NOT NULL,
    content_hash TEXT NOT NULL,
    destination_identity_hash TEXT NOT NULL,
    release_id TEXT NOT NULL,
    projection_id TEXT NOT NULL,
    policy_fingerprint TEXT NOT NULL,
    tenant_id TEXT NOT NULL,
    organization_id TEXT NOT NULL,
    matter_id TEXT NOT NULL,
    actor_id TEXT NOT NULL,
    required_roles TEXT NOT NULL,
    required_approvals INTEGER NOT NULL,
    created_at_ms INTEGER NOT NULL CHECK (created_at_ms >= 0),
    expires_at_ms INTEGER NOT NULL,
    digest TEXT NOT NULL,
    state TEXT NOT NULL CHECK (state IN ({_sql_list(ALL_STATES)})),
    resolver_id TEXT,
    order_id TEXT UNIQUE,
    held_payload BLOB,
    updated_at_ms INTEGER NOT NULL,
    outcome_codes TEXT,
    receipt TEXT,
    CHECK (expires_at_ms > created_at_ms AND expires_at_ms - created_at_ms <= {MAX_TTL_MS}),
    CHECK ((held_payload IS NULL) = (state IN ({_sql_list(sorted(TERMINAL_STATES))})))
) STRICT;
CREATE INDEX IF NOT EXISTS approvals_by_state ON approvals (state, tenant_id);
"""
"""``secure_delete`` is a per-connection setting, so it sits in the script every
connection runs at open. The two table ``CHECK`` s are the TTL cap and the purge
rule (held content exists exactly while the approval is not terminal).
``outcome_codes`` and ``receipt`` are added to a file made before them
by :data:`OUTCOME_COLUMNS`."""

OUTCOME_COLUMNS: Final = (("outcome_codes", "TEXT"), ("receipt", "TEXT"))
"""Columns the table's first layout lacks (a denial's reason codes and the connector's
receipt, for the requester's view); added at open when missing."""

_INSERT: Final = """
INSERT INTO approvals (
    approval_id, decision_id, operation_hash, canonical_args_hash, content_hash,
    destination_identity_hash, release_id, projection_id, policy_fingerprint,
    tenant_id, organization_id, matter_id, actor_id, required_roles,
    required_approvals, created_at_ms, expires_at_ms,
    digest, state, resolver_id, order_id, held_payload, updated_at_ms
) VALUES (
    :approval_id, :decision_id, :operation_hash, :canonical_args_hash, :content_hash,
    :destination_identity_hash, :release_id, :projection_id, :policy_fingerprint,
    :tenant_id, :organization_id, :matter_id, :actor_id, :required_roles,
    :required_approvals, :created_at_ms, :expires_at_ms,
    :digest, 'pending', NULL, NULL, :held_payload, :now_ms
) RETURNING *
"""

_SELECT_ONE: Final = "SELECT * FROM approvals WHERE approval_id = :approval_id"

_SELECT_CONFLICT: Final = """
SELECT approval_id FROM approvals
WHERE approval_id = :approval_id OR decision_id = :decision_id
"""

_SELECT_OPEN: Final = """
SELECT * FROM approvals
WHERE state IN ('pending', 'approved') AND (:tenant_id IS NULL OR tenant_id = :tenant_id)
ORDER BY created_at_ms, approval_id
"""

_SELECT_BY_ORDER: Final = "SELECT approval_id FROM approvals WHERE order_id = :order_id"
_SELECT_EXECUTING_BEFORE: Final = (
    "SELECT * FROM approvals WHERE state = 'executing' AND updated_at_ms < :before_ms"
)

# State writes. Each takes :source and :target from _Tx.move, which checks the
# transition table, and :purge, which is true exactly for a terminal target.
_SET_STATE: Final = """
UPDATE approvals SET
    state = :target,
    updated_at_ms = :now_ms,
    held_payload = CASE WHEN :purge THEN NULL ELSE held_payload END
"""

_RESOLVE: Final = """
UPDATE approvals SET
    state = :target,
    updated_at_ms = :now_ms,
    held_payload = CASE WHEN :purge THEN NULL ELSE held_payload END,
    resolver_id = :resolver_id,
    outcome_codes = :outcome_codes
WHERE approval_id = :approval_id AND state = :source
  AND expires_at_ms > :now_ms AND digest = :digest
RETURNING *
"""

_CLAIM: Final = """
UPDATE approvals SET
    state = :target,
    updated_at_ms = :now_ms,
    held_payload = CASE WHEN :purge THEN NULL ELSE held_payload END
WHERE approval_id = :approval_id AND state = :source
  AND expires_at_ms > :now_ms AND digest = :digest
  AND approval_id = :x_approval_id
  AND decision_id = :x_decision_id
  AND operation_hash = :x_operation_hash
  AND canonical_args_hash = :x_canonical_args_hash
  AND content_hash = :x_content_hash
  AND destination_identity_hash = :x_destination_identity_hash
  AND release_id = :x_release_id
  AND projection_id = :x_projection_id
  AND policy_fingerprint = :x_policy_fingerprint
  AND tenant_id = :x_tenant_id
  AND organization_id = :x_organization_id
  AND matter_id = :x_matter_id
  AND actor_id = :x_actor_id
  AND required_roles = :x_required_roles
  AND required_approvals = :x_required_approvals
  AND created_at_ms = :x_created_at_ms
  AND expires_at_ms = :x_expires_at_ms
RETURNING *
"""
"""The one conditional UPDATE of the claim: ``x_<field>`` is the
expected binding's field, ``digest`` is ``binding_digest(expected)``."""

_MOVE_ONE: Final = _SET_STATE + "WHERE approval_id = :approval_id AND state = :source RETURNING *"

_FINISH: Final = (
    _SET_STATE
    + ", receipt = :receipt WHERE approval_id = :approval_id AND state = :source RETURNING *"
)

_EXPIRE_ONE: Final = (
    _SET_STATE
    + "WHERE approval_id = :approval_id AND state = :source AND expires_at_ms <= :now_ms"
    + " RETURNING *"
)

_MOVE_ALL: Final = _SET_STATE + "WHERE state = :source RETURNING approval_id"

_ABANDON_ALL: Final = (
    _SET_STATE + "WHERE state = :source AND updated_at_ms < :before_ms RETURNING approval_id"
)

_EXPIRE_ALL: Final = (
    _SET_STATE + "WHERE state = :source AND expires_at_ms <= :now_ms RETURNING approval_id"
)

_RECORD_ORDER: Final = """
UPDATE approvals SET order_id = :order_id, updated_at_ms = :now_ms
WHERE approval_id = :approval_id AND state = 'executing' AND order_id IS NULL
"""

for _field in BINDING_FIELDS:
    # The claim must compare EVERY binding field and the insert must store it;
    # a field added to ApprovalBinding without a column stops the import here
    # rather than leaving a field the claim silently ignores.
    if f"{_field} = :x_{_field}" not in _CLAIM or f":{_field}," not in _INSERT:
        raise RuntimeError(f"approval store SQL does not cover binding field {_field}")

_Moved = tuple[str, ApprovalState, ApprovalState]
"""(approval_id, from_state, to_state) of one committed move, for the log."""


class _Tx:
    """One ``BEGIN IMMEDIATE`` transaction: its connection and the moves it made."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        self.moves: list[_Moved] = []

    def rows(self, sql: str, params: dict[str, Any]) -> list[sqlite3.Row]:
        cursor = self.conn.cursor()
        cursor.row_factory = sqlite3.Row
        rows: list[sqlite3.Row] = cursor.execute(sql, params).fetchall()
        return rows

    def get(self, approval_id: str) -> sqlite3.Row | None:
        found = self.rows(_SELECT_ONE, {"approval_id": approval_id})
        return found[0] if found else None

    def move(
        self,
        sql: str,
        approval_id: str,
        source: ApprovalState,
        target: ApprovalState,
        now_ms: int,
        **params: Any,
    ) -> list[sqlite3.Row]:
        """Run one state write, after checking ``source -> target`` against the table.

        The only place state changes: a move not in ``TRANSITIONS`` raises
        :class:`IllegalTransition` before any SQL runs, and the content is purged
        whenever the target is terminal (ARCHITECTURE.md: "purged at every
        terminal state"). ``approval_id`` is ``"*"`` for the bulk moves.
        """
        check_transition(approval_id, source, target)
        params.update(
            approval_id=approval_id,
            source=source,
            target=target,
            now_ms=now_ms,
            purge=target in TERMINAL_STATES,
        )
        rows = self.rows(sql, params)
        self.moves.extend((row["approval_id"], source, target) for row in rows)
        return rows


def _only(rows: list[sqlite3.Row]) -> sqlite3.Row | None:
    """The one changed row, or None when the conditional write matched nothing."""
    if len(rows) > 1:  # approval_id is the primary key: this cannot happen
        raise ApprovalStoreUnavailable("a single-approval write changed several rows")
    return rows[0] if rows else None


def _record(row: sqlite3.Row) -> ApprovalRecord:
    """Decode a row; a row that no valid write could produce makes the store unavailable."""
    try:
        fields = {
            f: msgspec.json.decode(row[f]) if f in _JSON_FIELDS else row[f] for f in BINDING_FIELDS
        }
        binding = msgspec.convert(fields, ApprovalBinding)
        outcome_codes = _codes(row["outcome_codes"])
    except (msgspec.MsgspecError, TypeError) as exc:
        raise ApprovalStoreUnavailable(
            f"stored approval {row['approval_id']} does not decode",
            approval_id=row["approval_id"],
        ) from exc
    return ApprovalRecord(
        binding=binding,
        digest=row["digest"],
        state=row["state"],
        resolver_id=row["resolver_id"],
        order_id=row["order_id"],
        held_payload=row["held_payload"],
        updated_at_ms=row["updated_at_ms"],
        outcome_codes=outcome_codes,
        receipt=row["receipt"],
    )


def _codes(stored: str | None) -> tuple[str, ...]:
    """A denial's reason codes from their JSON text (``None``: none were kept)."""
    if stored is None:
        return ()
    return tuple(msgspec.json.decode(stored, type=list[str]))


def _add_outcome_columns(conn: sqlite3.Connection) -> None:
    """Bring a table made before :data:`OUTCOME_COLUMNS` up to date, in one write
    transaction so that two processes opening one file do not both add a column."""

    def body(conn: sqlite3.Connection) -> None:
        present = {row[1] for row in conn.execute("PRAGMA table_info(approvals)")}
        for name, kind in OUTCOME_COLUMNS:
            if name not in present:
                conn.execute(f"ALTER TABLE approvals ADD COLUMN {name} {kind}")

    immediate(conn, body)


def _refusal(
    tx: _Tx,
    approval_id: str,
    source: ApprovalState,
    target: ApprovalState,
    now_ms: int,
    digest: str,
    expected: ApprovalBinding | None = None,
) -> ApprovalError:
    """Name why a conditional resolve or claim changed no row, in its transaction.

    Existence first, then :func:`~smf_assurance.pipeline.stores.approvals.step_refusal` on the
    row (state, expiry, binding fields for the claim, digest: the contract's
    order, shared with the KV store). An expired approval is moved to
    ``expired`` here, in the same transaction as the refusal.
    """
    row = tx.get(approval_id)
    if row is None:
        return ApprovalNotFound(f"no approval {approval_id}", approval_id=approval_id)
    changed: list[str] = []
    if expected is not None:
        columns = binding_columns(expected)
        changed = [f for f in BINDING_FIELDS if columns[f] != row[f]]
    refusal = step_refusal(
        approval_id,
        source,
        target,
        now_ms,
        state=row["state"],
        expires_at_ms=row["expires_at_ms"],
        stored_digest=row["digest"],
        digest=digest,
        changed=changed,
    )
    if isinstance(refusal, ApprovalExpired):
        tx.move(_EXPIRE_ONE, approval_id, source, "expired", now_ms)
    if refusal is not None:
        return refusal
    # Inside one IMMEDIATE transaction the row cannot have changed between the
    # UPDATE and this read; refuse rather than guess.
    return IllegalTransition(
        f"approval {approval_id}: conditional update matched no row", approval_id=approval_id
    )


class SqliteApprovalStore:
    """:class:`~smf_assurance.pipeline.stores.approvals.ApprovalStore` on a SQLite file (WAL,
    ``synchronous=FULL``). Several instances (processes) may share one file: the
    claim's atomicity comes from ``BEGIN IMMEDIATE``, not from this object."""

    def __init__(self, worker: SqliteWorker) -> None:
        self._worker = worker

    @classmethod
    async def open(
        cls, path: str | os.PathLike[str], *, busy_timeout_ms: int = 5000
    ) -> SqliteApprovalStore:
        try:
            worker = await SqliteWorker.open(
                path, SCHEMA, name="approvals", busy_timeout_ms=busy_timeout_ms
            )
        except StoreUnavailable as exc:
            log.warning("approval_store_unavailable", during="open")
            raise ApprovalStoreUnavailable(str(exc)) from exc
        store = cls(worker)
        try:
            await store._run(_add_outcome_columns)
        except ApprovalStoreUnavailable:
            await worker.close()
            raise
        return store

    async def _run(self, job: Callable[[sqlite3.Connection], T]) -> T:
        """One job on the worker; an outage becomes ApprovalStoreUnavailable (a denial)."""
        try:
            return await self._worker.run(job)
        except StoreUnavailable as exc:
            log.warning("approval_store_unavailable")
            raise ApprovalStoreUnavailable(f"approval store unavailable: {exc}") from exc
        except ApprovalError as exc:
            _log_refusal(exc)
            raise

    async def _transact(self, body: Callable[[_Tx], T | ApprovalError]) -> T:
        """Run ``body`` as one ``BEGIN IMMEDIATE`` job (one thread hop), log the moves
        it committed, then raise a refusal it returned. Returning (not raising) the
        refusal lets its transaction commit, e.g. the move to ``expired``."""

        def job(conn: sqlite3.Connection) -> tuple[T | ApprovalError, list[_Moved]]:
            tx = _Tx(conn)
            return immediate(conn, lambda _conn: body(tx)), tx.moves

        result, moves = await self._run(job)
        for approval_id, source, target in moves:
            log.info(
                "approval_transition", approval_id=approval_id, from_state=source, to_state=target
            )
        if isinstance(result, ApprovalError):
            _log_refusal(result)
            raise result
        return result

    async def create(
        self, binding: ApprovalBinding, held_payload: bytes, now_ms: int
    ) -> ApprovalRecord:
        """Hold ``binding`` in ``pending`` with its content; see :func:`admit_binding`
        for the checks made before anything is written."""
        try:
            digest = admit_binding(binding, now_ms)
        except ApprovalError as exc:
            _log_refusal(exc)
            raise
        params = binding_columns(binding)
        params.update(digest=digest, held_payload=held_payload, now_ms=now_ms)

        def body(tx: _Tx) -> ApprovalRecord | ApprovalError:
            if tx.rows(_SELECT_CONFLICT, params):
                return ApprovalExists(
                    f"approval {binding.approval_id} (or its decision) is already held",
                    approval_id=binding.approval_id,
                )
            return _record(tx.rows(_INSERT, params)[0])

        record = await self._transact(body)
        log.info("approval_created", approval_id=binding.approval_id, to_state="pending")
        return record

    async def get(self, approval_id: str) -> ApprovalRecord | None:
        def job(conn: sqlite3.Connection) -> ApprovalRecord | None:
            row = _Tx(conn).get(approval_id)
            return None if row is None else _record(row)

        return await self._run(job)

    async def list_open(self, tenant_id: str | None = None) -> list[ApprovalRecord]:
        def job(conn: sqlite3.Connection) -> list[ApprovalRecord]:
            return [_record(r) for r in _Tx(conn).rows(_SELECT_OPEN, {"tenant_id": tenant_id})]

        return await self._run(job)

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
        """An approver's answer, in one conditional UPDATE: accepted only while the
        approval is still pending and unexpired and the binding digest matches."""

        def body(tx: _Tx) -> ApprovalRecord | ApprovalError:
            rows = tx.move(
                _RESOLVE,
                approval_id,
                "pending",
                target,
                now_ms,
                digest=digest,
                resolver_id=resolver_id,
                outcome_codes=msgspec.json.encode(reasons).decode() if reasons else None,
            )
            row = _only(rows)
            if row is not None:
                return _record(row)
            return _refusal(tx, approval_id, "pending", target, now_ms, digest)

        return await self._transact(body)

    async def claim(
        self, approval_id: str, expected: ApprovalBinding, now_ms: int
    ) -> ApprovalRecord:
        """``approved -> executing`` once (ARCHITECTURE.md: "the claim re-checks the
        whole binding and moves approved -> executing in one atomic conditional
        update; exactly one claimant wins"). One job, one UPDATE, exactly one
        affected row; a loser's refusal is named afterwards in the same
        transaction."""
        digest = binding_digest(expected)
        expected_params = {f"x_{f}": v for f, v in binding_columns(expected).items()}

        def body(tx: _Tx) -> ApprovalRecord | ApprovalError:
            rows = tx.move(
                _CLAIM,
                approval_id,
                "approved",
                "executing",
                now_ms,
                digest=digest,
                **expected_params,
            )
            row = _only(rows)
            if row is not None:
                return _record(row)
            return _refusal(tx, approval_id, "approved", "executing", now_ms, digest, expected)

        return await self._transact(body)

    async def record_order(self, approval_id: str, order_id: str, now_ms: int) -> None:
        """Bind the one published order to its claimed approval.

        Only while ``executing``. Recording the same order again is accepted (a
        redelivered step); a second, different order for one approval, or one
        order for two approvals, is refused: one claim, one order.
        """
        params = {"approval_id": approval_id, "order_id": order_id, "now_ms": now_ms}

        def body(tx: _Tx) -> ApprovalError | None:
            row = tx.get(approval_id)
            if row is None:
                return ApprovalNotFound(f"no approval {approval_id}", approval_id=approval_id)
            refusal = order_refusal(approval_id, row["state"], row["order_id"], order_id)
            if refusal is not None or row["order_id"] == order_id:
                return refusal
            if tx.rows(_SELECT_BY_ORDER, params):
                return order_taken(approval_id)
            tx.conn.execute(_RECORD_ORDER, params)
            return None

        await self._transact(body)
        log.info("approval_order_recorded", approval_id=approval_id)

    async def finish(
        self,
        approval_id: str,
        outcome: FinishOutcome,
        now_ms: int,
        receipt: str | None = None,
    ) -> ApprovalRecord:
        """``executing -> consumed | failed | execution_unknown``; the content is purged.
        The connector's receipt is kept with ``consumed`` only."""
        kept = receipt if outcome == "consumed" else None

        def body(tx: _Tx) -> ApprovalRecord | ApprovalError:
            row = _only(tx.move(_FINISH, approval_id, "executing", outcome, now_ms, receipt=kept))
            if row is not None:
                return _record(row)
            current = tx.get(approval_id)
            if current is None:
                return ApprovalNotFound(f"no approval {approval_id}", approval_id=approval_id)
            refusal = transition_refusal(approval_id, current["state"], outcome)
            return refusal or IllegalTransition(
                f"approval {approval_id}: conditional update matched no row",
                approval_id=approval_id,
            )

        return await self._transact(body)

    async def expire_due(self, now_ms: int) -> list[str]:
        """Close open approvals whose expiry has passed (``expires_at_ms <= now_ms``)."""

        def body(tx: _Tx) -> list[str]:
            rows = [
                row
                for source in sorted(OPEN_STATES)
                for row in tx.move(_EXPIRE_ALL, "*", source, "expired", now_ms)
            ]
            return sorted(row["approval_id"] for row in rows)

        return await self._transact(body)

    async def recover(self, now_ms: int) -> tuple[list[str], list[str]]:
        """Start-up recovery (:meth:`ApprovalStore.recover`): a pending approval stays
        pending with its content, an approved one no claim followed is invalidated,
        and work that may have executed becomes ``execution_unknown``, which is never
        retried. The caller writes both lists to the evidence record."""

        def body(tx: _Tx) -> tuple[list[str], list[str]]:
            invalidated = tx.move(_MOVE_ALL, "*", "approved", "invalidated", now_ms)
            unknown = tx.move(_MOVE_ALL, "*", "executing", "execution_unknown", now_ms)
            return (
                sorted(row["approval_id"] for row in invalidated),
                sorted(row["approval_id"] for row in unknown),
            )

        invalidated, unknown = await self._transact(body)
        log.info("approval_recovery", invalidated=len(invalidated), unknown=len(unknown))
        return invalidated, unknown

    async def invalidate_unclaimed(self, before_ms: int, now_ms: int) -> list[str]:
        """``approved`` approvals last changed before ``before_ms`` -> ``invalidated``
        (:meth:`ApprovalStore.invalidate_unclaimed`)."""

        def body(tx: _Tx) -> list[str]:
            rows = tx.move(
                _ABANDON_ALL, "*", "approved", "invalidated", now_ms, before_ms=before_ms
            )
            return sorted(row["approval_id"] for row in rows)

        return await self._transact(body)

    async def invalidate(self, approval_id: str, now_ms: int) -> list[str]:
        """Close one open approval the gate could not complete (announcement or
        evidence failed after it was stored), so it can never be approved later."""

        def body(tx: _Tx) -> list[str]:
            return [
                row["approval_id"]
                for source in sorted(OPEN_STATES)
                for row in tx.move(_MOVE_ONE, approval_id, source, "invalidated", now_ms)
            ]

        return await self._transact(body)

    async def list_executing(self, before_ms: int) -> list[ApprovalRecord]:
        """Executing approvals whose last change is older than ``before_ms``:
        their connector report is overdue (no report -> execution_unknown)."""

        def job(conn: sqlite3.Connection) -> list[ApprovalRecord]:
            rows = _Tx(conn).rows(_SELECT_EXECUTING_BEFORE, {"before_ms": before_ms})
            return [_record(r) for r in rows]

        return await self._run(job)

    async def find_by_order(self, order_id: str) -> str | None:
        def job(conn: sqlite3.Connection) -> str | None:
            rows = _Tx(conn).rows(_SELECT_BY_ORDER, {"order_id": order_id})
            return str(rows[0]["approval_id"]) if rows else None

        return await self._run(job)

    async def close(self) -> None:
        """Close the connection; every later call raises ApprovalStoreUnavailable."""
        await self._worker.close()


def _log_refusal(exc: ApprovalError) -> None:
    log.info("approval_refused", approval_id=exc.approval_id, reason_code=exc.reason_code)
