"""Keep a NATS cluster's authorization that of the release in force (issue 15).

On one machine ``up`` owns its server and reloads it itself
(``smf_assurance.ops.local.stack.follow_releases``). A cluster's nodes belong to nobody's
process, so a follower does it over the bus: it watches ``SMF_RELEASES`` as
the gates do (``ReleaseWatcher``: signature, threshold, chain, lease and
rollback checked against the trust root, its own persisted state), writes the
authorization file the nodes include from the verified release's registry,
and asks every node to reload it with the system account's request
(``$SYS.REQ.SERVER.<id>.RELOAD``). A principal a new release removes is
disconnected and refused from then on; nothing restarts.

Only a verified release changes who may connect; a refused candidate
changes nothing, as at a gate.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import structlog
from nats.aio.client import Client
from nats.errors import Error as NatsError

from smf_assurance.core.release_trust import VerifiedRelease
from smf_assurance.ops.local.bus_auth import (
    authorization_steps,
    read_authorization,
    write_authorization,
)
from smf_assurance.pipeline.followers.releases import ReleaseWatcher
from smf_assurance.subjects.release import TrustRoot

log = structlog.get_logger(__name__)

PING_SUBJECT: Final = "$SYS.REQ.SERVER.PING"
RELOAD_SUBJECT: Final = "$SYS.REQ.SERVER.{}.RELOAD"
DISCOVERY_SECONDS: Final = 1.0
RELOAD_TIMEOUT_S: Final = 5.0


class ReloadError(RuntimeError):
    """A node did not confirm the reload (it keeps its previous authorization)."""


async def server_ids(system: Client, expected: int | None = None) -> list[str]:
    """The id of every server that answers the system ping within a second
    (or as soon as ``expected`` have answered)."""
    inbox = system.new_inbox()
    found: list[str] = []
    done = asyncio.Event()

    async def on_reply(msg: object) -> None:
        data = json.loads(getattr(msg, "data", b"{}"))
        server = data.get("server", {})
        if isinstance(server, dict) and isinstance(server.get("id"), str):
            found.append(server["id"])
            if expected is not None and len(found) >= expected:
                done.set()

    sub = await system.subscribe(inbox, cb=on_reply)
    try:
        await system.publish(PING_SUBJECT, b"", reply=inbox)
        await system.flush()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(done.wait(), DISCOVERY_SECONDS)
    finally:
        await sub.unsubscribe()
    return sorted(set(found))


async def reload_all(system: Client, expected: int | None = None) -> list[str]:
    """Ask every server to reload its config; return the ids that confirmed.

    Raises ``ReloadError`` naming a server that answered with an error (a
    config it refused) or not at all.
    """
    ids = await server_ids(system, expected)
    if expected is not None and len(ids) < expected:
        raise ReloadError(f"{len(ids)} of {expected} servers answered the system ping")
    for server_id in ids:
        try:
            reply = await system.request(
                RELOAD_SUBJECT.format(server_id), b"", timeout=RELOAD_TIMEOUT_S
            )
        except (NatsError, TimeoutError) as exc:
            raise ReloadError(f"server {server_id} did not answer the reload") from exc
        answer = json.loads(reply.data)
        if answer.get("error"):
            raise ReloadError(f"server {server_id} refused the reload: {answer['error']}")
    return ids


@dataclass
class ClusterFollower:
    """Writes ``authorization`` from each verified release and reloads every node."""

    authorization: Path
    system_user: str
    system: Client
    expected_servers: int | None = None
    confirmed: bool = True
    """Every node confirmed a reload of the file as it is now written. False after
    a failed reload: a node may still admit a revoked principal, so the next
    ``apply`` reloads again even though the file did not change."""

    async def apply(self, release: VerifiedRelease) -> bool:
        """Apply one release's registry; whether every node reloaded.

        Raises ``ReloadError`` when a node did not confirm; ``confirmed`` stays
        False until a later call succeeds.
        """
        entries = [p.entry for p in release.registry.principals.values()]
        steps = authorization_steps(
            read_authorization(self.authorization), entries, self.system_user
        )
        ids: list[str] = []
        for text in steps:  # an added account is made empty, then filled: two reloads
            if write_authorization(self.authorization, text) or not self.confirmed:
                self.confirmed = False
                ids = await reload_all(self.system, self.expected_servers)
                self.confirmed = True
        if not ids:
            return False
        log.info(
            "bus_authorization_followed_release",
            release_id=release.release_id,
            servers=len(ids),
        )
        return True


async def follow(
    *,
    js_client: Client,
    follower: ClusterFollower,
    trust_root: TrustRoot,
    state: Path,
    clock: Callable[[], int],
    tick_seconds: float = 5.0,
    retry_seconds: float = 2.0,
    stop: asyncio.Event,
) -> None:
    """Run until ``stop``: every release the watcher switches to is applied, and a
    reload a node did not confirm is tried again every ``retry_seconds`` until
    every node confirms (or a newer release replaces it)."""
    pending: asyncio.Queue[VerifiedRelease] = asyncio.Queue()
    watcher = await ReleaseWatcher.open(trust_root, state, clock, on_switch=pending.put_nowait)

    async def apply(release: VerifiedRelease) -> None:
        try:
            await follower.apply(release)
        except ReloadError as exc:
            log.error("bus_authorization_reload_failed", reason=str(exc))

    try:
        await watcher.start(js_client.jetstream(), tick_seconds=tick_seconds)
        current = watcher.active
        if current is not None:
            await apply(current)
        while not stop.is_set():
            getter = asyncio.ensure_future(pending.get())
            stopper = asyncio.ensure_future(stop.wait())
            retry = None if follower.confirmed else retry_seconds
            await asyncio.wait(
                (getter, stopper), timeout=retry, return_when=asyncio.FIRST_COMPLETED
            )
            stopper.cancel()
            if getter.done():
                current = getter.result()
            else:
                getter.cancel()
            due = getter.done() or not follower.confirmed
            if current is not None and due and not stop.is_set():
                await apply(current)
    finally:
        await watcher.close()
