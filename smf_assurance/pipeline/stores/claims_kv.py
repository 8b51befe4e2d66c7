"""The proposal claim store on JetStream KV, for gates on more than one machine.

Implements :class:`smf_assurance.pipeline.stores.claims.ProposalClaims` (ARCHITECTURE.md,
"One proposal through the bus": allow means "claim once, then publish";
"Scale": beyond one machine the claim is "atomic across instances (JetStream
KV compare-and-set by revision)"):

- A claim creates ``claim.<token of the proposal id>``: JetStream stores it
  only if the key has no live value (expected last subject sequence 0, or the
  sequence of a delete marker ``prune`` left), so of any number of gate
  instances exactly one creates it and every other gets False, whichever
  machine it runs on. ``Nats-Msg-Id`` de-duplication is not involved.
- ``settle`` is a CAS by revision from ``claimed`` only
  (:func:`smf_assurance.pipeline.stores.kv.compare_and_set`, the approval store's loop); a
  conflict is re-read and re-checked, never overwritten.
- ``prune`` deletes old claims with a delete marker, each conditional on the
  revision it judged, so a replay after the freshness window can claim again
  (as with the SQLite store) while a claim written meanwhile is kept.
- Fail closed: a NATS error, a timeout, a closed store, or a value that does not
  decode raises :class:`ClaimStoreUnavailable`, which the gate denies as
  ``claim_store_unavailable``. A ``claim`` whose write timed out may still have
  landed; it reports unavailable, never True, so nothing is published for it.

The values are identities and times only (no content), so the superseded
revisions a KV update leaves on disk hold nothing to purge.
"""

from __future__ import annotations

from typing import Final, get_args

import msgspec
import structlog
from nats.js.errors import (
    KeyWrongLastSequenceError,
    NotFoundError,
)
from nats.js.kv import KV_DEL, KV_OP, KV_PURGE

from smf_assurance.pipeline.stores.claims import ClaimRecord, ClaimState, ClaimStoreUnavailable
from smf_assurance.pipeline.stores.kv import (
    KvBucketStore,
    Retry,
    compare_and_set,
    decode_keyed,
    token,
)

__all__ = ["BUCKET", "KvClaimStore"]

log = structlog.get_logger(__name__)

BUCKET: Final = "smf_proposal_claims"
CLAIM_STATES: Final[frozenset[str]] = frozenset(get_args(ClaimState))
CLAIM_KEY: Final = "claim."
MAX_ATTEMPTS: Final = 8
"""CAS retries for ``settle``: a claim changes state once, so a second conflict
is already unusual; more than this is a fault."""

CLAIM_WHAT: Final = ("claim", "proposal")


class _Claim(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One claim as stored: the columns of the SQLite table, keyed by proposal id."""

    proposal_id: str
    operation_hash: str
    decision_id: str
    claimed_at: int
    state: ClaimState


def _key(proposal_id: str) -> str:
    return CLAIM_KEY + token(proposal_id)


def _decode(key: str, value: bytes | None) -> _Claim:
    return decode_keyed(
        key, value, _Claim, lambda c: _key(c.proposal_id), ClaimStoreUnavailable, CLAIM_WHAT
    )


class KvClaimStore(KvBucketStore):
    """:class:`~smf_assurance.pipeline.stores.claims.ProposalClaims` on JetStream KV; any number of
    instances may share the bucket. The NATS connection belongs to the caller."""

    unavailable = ClaimStoreUnavailable
    store = "claim"
    default_bucket = BUCKET
    description = "SMF proposal claims: one gate acts on each proposal"
    closed = "claim store is closed"

    async def _read(self, proposal_id: str) -> tuple[_Claim, int] | None:
        key = _key(proposal_id)
        found = await self._read_raw(key)
        return None if found is None else (_decode(key, found[0]), found[1])

    async def claim(
        self, proposal_id: str, operation_hash: str, decision_id: str, at_ms: int
    ) -> bool:
        """True for the first claim of ``proposal_id`` across every instance.

        The write requires expected last sequence 0 (no message for the key). If
        the key has one, it is a live claim (False), a delete marker left by
        :meth:`prune` (claim over it by CAS on the marker's revision), or a write
        not yet readable, which on a cluster is another instance's claim in
        flight (False). nats-py's ``kv.create`` would instead raise
        KeyNotFoundError there.
        """
        self._check_open()
        key = _key(proposal_id)
        value = msgspec.json.encode(
            _Claim(proposal_id, operation_hash, decision_id, at_ms, "claimed")
        )
        with self._failing("claim"):
            try:
                await self._kv.update(key, value, last=0)
            except KeyWrongLastSequenceError:
                pass
            else:
                return True
            try:
                last = await self._js.get_msg(f"KV_{self._bucket}", subject=self._subject(key))
            except NotFoundError:
                return False
            if last.seq is None or (last.headers or {}).get(KV_OP) not in (KV_DEL, KV_PURGE):
                return False
            try:
                await self._kv.update(key, value, last=last.seq)
            except KeyWrongLastSequenceError:
                return False
        return True

    def _subject(self, key: str) -> str:
        return f"$KV.{self._bucket}.{key}"

    async def settle(self, proposal_id: str, state: ClaimState) -> None:
        """``claimed -> state`` by CAS; anything else is left as it is. A state outside
        the vocabulary is refused before any write, as the SQLite table's CHECK
        refuses it, so no claim is left undecodable."""
        if state not in CLAIM_STATES:
            raise ClaimStoreUnavailable(f"claim {_key(proposal_id)}: {state!r} is no claim state")
        key = _key(proposal_id)

        async def attempt(current: _Claim, revision: int) -> Retry | None:
            if current.state != "claimed":
                return None
            settled = msgspec.structs.replace(current, state=state)
            with self._failing("settle"):
                try:
                    await self._kv.update(key, msgspec.json.encode(settled), last=revision)
                except KeyWrongLastSequenceError:
                    return Retry.LOST
            return None

        await compare_and_set(
            lambda: self._read(proposal_id),
            attempt,
            attempts=MAX_ATTEMPTS,
            exhausted=lambda: ClaimStoreUnavailable(f"claim {key}: no settle in {MAX_ATTEMPTS}"),
        )

    async def state(self, proposal_id: str) -> ClaimState | None:
        found = await self._read(proposal_id)
        return None if found is None else found[0].state

    async def get(self, proposal_id: str) -> ClaimRecord | None:
        found = await self._read(proposal_id)
        if found is None:
            return None
        claim = found[0]
        return ClaimRecord(claim.operation_hash, claim.decision_id, claim.claimed_at, claim.state)

    async def prune(self, before_ms: int) -> int:
        """Forget claims made before ``before_ms`` (a replay is stale by then). Each
        delete requires the revision that was judged old, so a claim re-made or
        settled meanwhile is kept (and pruned next time if still old)."""
        entries = await self._entries(CLAIM_KEY, "prune")
        old = {k: e for k, e in entries.items() if _decode(k, e.value).claimed_at < before_ms}
        pruned = 0
        for key, entry in old.items():
            pruned += await self._delete_at(key, entry.revision, "prune")
        return pruned
