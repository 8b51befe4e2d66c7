"""The order book on JetStream KV, for gates on more than one machine.

Implements :class:`smf_assurance.pipeline.stores.orders.OrderBook` in the proposal-claim
bucket (``claims_kv.BUCKET``), under its own prefix ``order.<token of the order
id>``, so it has the claim bucket's settings (history 1, file storage, the
cluster's replicas, no direct gets) and the bus permissions the gate already
holds. The claim store's own keys (``claim.``) are never touched.

- ``open`` creates the key only if it has no value (expected last sequence
  0): an order id is recorded once, whichever replica tries.
- ``settle`` is a compare-and-set from ``executing`` only
  (:func:`smf_assurance.pipeline.stores.kv.compare_and_set`, the claim store's loop): of a
  report, its replay and a sweep on any replicas, exactly one moves the order
  and is told so; a conflict is re-read and re-checked, never overwritten.
- ``prune`` deletes settled orders, each conditional on the revision judged.
- Fail closed: a NATS error, a timeout, a closed store or a value that does not
  decode raises :class:`OrderBookUnavailable`.
"""

from __future__ import annotations

from typing import Final

import msgspec
from nats.js.errors import KeyWrongLastSequenceError

from smf_assurance.core.execution_rules import Finish
from smf_assurance.pipeline.stores.claims_kv import BUCKET
from smf_assurance.pipeline.stores.kv import (
    KvBucketStore,
    Retry,
    compare_and_set,
    decode_keyed,
    token,
)
from smf_assurance.pipeline.stores.orders import SETTLED, OrderBookUnavailable, OrderRecord

__all__ = ["ORDER_KEY", "KvOrderBook"]


ORDER_KEY: Final = "order."
MAX_ATTEMPTS: Final = 8
"""CAS retries for ``settle``: an order settles once, so a second conflict is
already unusual; more than this is a fault."""
ORDER_WHAT: Final = ("order", "order")


def _key(order_id: str) -> str:
    return ORDER_KEY + token(order_id)


def _decode(key: str, value: bytes | None) -> OrderRecord:
    return decode_keyed(
        key, value, OrderRecord, lambda o: _key(o.order_id), OrderBookUnavailable, ORDER_WHAT
    )


class KvOrderBook(KvBucketStore):
    """:class:`~smf_assurance.pipeline.stores.orders.OrderBook` on JetStream KV; any number of
    instances may share the bucket. The NATS connection belongs to the caller."""

    unavailable = OrderBookUnavailable
    store = "order"
    default_bucket = BUCKET
    description = "SMF proposal claims: one gate acts on each proposal"
    closed = "order book is closed"

    async def _read(self, order_id: str) -> tuple[OrderRecord, int] | None:
        key = _key(order_id)
        found = await self._read_raw(key)
        return None if found is None else (_decode(key, found[0]), found[1])

    async def open(self, order: OrderRecord) -> bool:
        if order.state != "executing" or order.settled_at is not None:
            raise ValueError("an order is recorded executing, before any outcome")
        self._check_open()
        with self._failing("record"):
            try:
                await self._kv.update(_key(order.order_id), msgspec.json.encode(order), last=0)
            except KeyWrongLastSequenceError:
                return False
        return True

    async def get(self, order_id: str) -> OrderRecord | None:
        found = await self._read(order_id)
        return None if found is None else found[0]

    async def settle(self, order_id: str, outcome: Finish, at_ms: int) -> OrderRecord | None:
        if outcome not in SETTLED:
            raise ValueError(f"{outcome!r} is no outcome")
        key = _key(order_id)

        async def attempt(current: OrderRecord, revision: int) -> OrderRecord | Retry | None:
            if current.state != "executing":
                return None
            settled = msgspec.structs.replace(current, state=outcome, settled_at=at_ms)
            with self._failing("settle"):
                try:
                    await self._kv.update(key, msgspec.json.encode(settled), last=revision)
                except KeyWrongLastSequenceError:
                    return Retry.LOST
            return settled

        return await compare_and_set(
            lambda: self._read(order_id),
            attempt,
            attempts=MAX_ATTEMPTS,
            exhausted=lambda: OrderBookUnavailable(f"order {key}: no settle in {MAX_ATTEMPTS}"),
        )

    async def _all(self) -> dict[str, tuple[OrderRecord, int]]:
        entries = await self._entries(ORDER_KEY)
        return {k: (_decode(k, e.value), e.revision) for k, e in entries.items()}

    async def overdue(self, before_ms: int) -> list[OrderRecord]:
        found = [
            order
            for order, _ in (await self._all()).values()
            if order.state == "executing" and order.dispatched_at < before_ms
        ]
        return sorted(found, key=lambda order: order.dispatched_at)

    async def prune(self, before_ms: int) -> int:
        old = {
            key: revision
            for key, (order, revision) in (await self._all()).items()
            if order.settled_at is not None and order.settled_at < before_ms
        }
        pruned = 0
        for key, revision in old.items():
            pruned += await self._delete_at(key, revision, "prune")
        return pruned
