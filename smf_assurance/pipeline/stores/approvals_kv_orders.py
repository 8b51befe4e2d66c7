"""The order index of the KV approval store: which approval an order was published for.

ARCHITECTURE.md, "One proposal through the bus": a connector's report names
its order, and the gate routes it to the approval the order was published for
(``find_by_order``): one claim, one order. The KV approval store
(:mod:`smf_assurance.pipeline.stores.approvals_kv`) keeps that with a second key per order,
``order.<token of the order id>``, holding the approval id:

- The index key is created (expected last sequence 0) before the record's
  CAS and never rewritten, so an order id names at most one approval, for
  good.
- The record's ``order_id``, set once by CAS, is the authority: a crash
  between the two writes leaves an index entry that the store's
  ``find_by_order`` ignores (the record does not name the order), and never a
  second order.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Final

from nats.js.errors import KeyNotFoundError, KeyWrongLastSequenceError
from nats.js.kv import KeyValue

from smf_assurance.pipeline.stores.approvals import ApprovalStoreUnavailable
from smf_assurance.pipeline.stores.kv import Backoff, fail_closed, token

__all__ = ["ORDER_KEY", "OrderIndex"]

ORDER_KEY: Final = "order."


def _unavailable(during: str) -> contextlib.AbstractContextManager[None]:
    return fail_closed(ApprovalStoreUnavailable, "approval", during)


def _key(order_id: str) -> str:
    return ORDER_KEY + token(order_id)


class OrderIndex:
    """``order.<token> -> approval id`` in the approval store's bucket.

    ``check_open`` is the store's; ``attempts`` bounds the reads of an index
    that another instance won but that is not readable yet.
    """

    def __init__(self, kv: KeyValue, check_open: Callable[[], None], *, attempts: int) -> None:
        self._kv = kv
        self._check_open = check_open
        self._attempts = attempts

    async def create(self, order_id: str, approval_id: str) -> str:
        """Create ``order_id -> approval_id`` unless it exists; return the approval it names.

        A conflicting index written by another instance may not be readable yet
        (a cluster's leader refuses the create before it applies the write that
        won): read again with a backoff, and refuse as unavailable if it never
        shows.
        """
        self._check_open()
        index = _key(order_id)
        backoff = Backoff()
        with _unavailable("index order"):
            try:
                await self._kv.update(index, approval_id.encode(), last=0)
            except KeyWrongLastSequenceError:
                pass
            else:
                return approval_id
            for _ in range(self._attempts):
                try:
                    entry = await self._kv.get(index)
                except KeyNotFoundError:
                    await backoff.wait()
                    continue
                return (entry.value or b"").decode("utf-8", "replace")
        raise ApprovalStoreUnavailable(
            f"approval {approval_id}: the order index that won is not readable",
            approval_id=approval_id,
        )

    async def owner(self, order_id: str) -> str | None:
        """The approval id the index names for ``order_id``, or None. Only a claim:
        the caller checks that the approval's record names the order too."""
        self._check_open()
        with _unavailable("find order"):
            try:
                entry = await self._kv.get(_key(order_id))
            except KeyNotFoundError:
                return None
        return (entry.value or b"").decode("utf-8", "replace")
