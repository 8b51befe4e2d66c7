"""``bus``: the bus's own authorization, from the registry.

- ``bus authorization --state-dir DIR --out FILE``: write the server's
  accounts for the state's registry (every principal with a credential, its
  role's permissions; the system account for reloads). The cluster's nodes
  include this file (deploy/nats/cluster.conf); ``init`` writes it before
  they start.
- ``bus permissions --state-dir DIR``: what each principal of the registry
  may publish and subscribe to, as the server enforces it (docs/BUS-PERMISSIONS.md
  is this command's output for the demo registry).
- ``bus follow --state-dir DIR --nats URL --out FILE``: keep that file the
  one of the release in force and reload every node when it changes, until
  SIGINT or SIGTERM (``smf_assurance.ops.local.bus_follow``).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence

from nats.errors import Error as NatsError

from smf_assurance.governance.releases import ReleaseError, load_trust_root
from smf_assurance.ops.cli.cli_json import (
    BusAuthorizationJson,
    BusPermissionsJson,
    May,
    PermissionRow,
)
from smf_assurance.ops.cli.output import emit, fail, first_line, say, table
from smf_assurance.ops.local.bus import connect_bus
from smf_assurance.ops.local.bus_auth import (
    SYSTEM_PRINCIPAL,
    BusCredentialError,
    render_authorization,
    write_authorization,
)
from smf_assurance.ops.local.bus_follow import ClusterFollower, follow
from smf_assurance.ops.local.defaults import OPERATOR
from smf_assurance.ops.local.logs import configure_logging
from smf_assurance.ops.local.signals import stop_on_signals
from smf_assurance.ops.local.state import StateDir
from smf_assurance.subjects.bus_access import account_of, permissions_for
from smf_assurance.subjects.clock import wall_clock_ms
from smf_assurance.subjects.registry import RegistryError, load_registry

FOLLOW_STATE_FILE = "bus-follow-release-state.db"


def _render(state: StateDir) -> str:
    try:
        entries = [p.entry for p in load_registry(state.registry).principals.values()]
        return render_authorization(entries, state.bus_user(SYSTEM_PRINCIPAL))
    except (RegistryError, BusCredentialError, OSError) as exc:
        fail(f"cannot generate the bus authorization: {first_line(exc)}")


def run_authorization(args: argparse.Namespace) -> int:
    state = StateDir(args.state_dir)
    text = _render(state)
    try:
        changed = write_authorization(args.out, text)
    except OSError as exc:
        fail(f"cannot write {args.out}: {exc.strerror}")
    users = text.count('"nkey"') - 1
    if args.json:
        emit(BusAuthorizationJson(out=str(args.out), changed=changed, principals=users))
    else:
        say(f"bus authorization for {users} principals written to {args.out}")
    return 0


def permission_rows(state: StateDir) -> list[PermissionRow]:
    """Every grant and denial of every principal of the state's registry, ordered by
    principal; ``may`` is ``publish``, ``subscribe``, their denials, or ``publish
    replies`` (NATS ``allow_responses``: answer requests made to it; no subject)."""
    try:
        principals = load_registry(state.registry).principals.values()
    except (RegistryError, OSError) as exc:
        fail(f"cannot read the registry: {first_line(exc)}")
    rows: list[PermissionRow] = []
    for principal in sorted(principals, key=lambda p: p.name):
        granted = permissions_for(principal.entry)
        grants: tuple[tuple[May, Sequence[str | None]], ...] = (
            ("publish", granted.publish_allow),
            ("not publish", granted.publish_deny),
            ("subscribe", granted.subscribe_allow),
            ("not subscribe", granted.subscribe_deny),
            ("publish replies", (None,) if granted.allow_responses else ()),
        )
        for may, subjects in grants:
            rows += [
                PermissionRow(
                    principal=principal.name,
                    role=principal.entry.role,
                    account=account_of(principal.entry),
                    may=may,
                    subject=s,
                )
                for s in subjects
            ]
    return rows


def _permission_cells(row: PermissionRow) -> tuple[str, str, str, str, str]:
    if row.may == "publish replies":
        return (row.principal, row.role, row.account, "publish", "(replies to requests)")
    return (row.principal, row.role, row.account, row.may, row.subject or "-")


def run_permissions(args: argparse.Namespace) -> int:
    rows = permission_rows(StateDir(args.state_dir))
    if args.json:
        emit(BusPermissionsJson(permissions=tuple(rows)))
    else:
        table(
            ("principal", "role", "account", "may", "subject"),
            [_permission_cells(r) for r in rows],
        )
    return 0


async def _follow(args: argparse.Namespace, state: StateDir) -> None:
    with stop_on_signals() as stop:
        await _follow_until(args, state, stop)


async def _follow_until(args: argparse.Namespace, state: StateDir, stop: asyncio.Event) -> None:
    try:
        trust_root = load_trust_root(state.trust_root)
    except ReleaseError as exc:
        fail(f"cannot read the trust root: {first_line(exc)}")
    operator = await connect_bus(args.nats, "smf-bus-follow", state.existing_credential(OPERATOR))
    system = await connect_bus(
        args.nats, "smf-bus-follow-system", state.bus_credential(SYSTEM_PRINCIPAL)
    )
    try:
        follower = ClusterFollower(
            authorization=args.out,
            system_user=state.bus_user(SYSTEM_PRINCIPAL),
            system=system,
            expected_servers=args.servers,
        )
        await follow(
            js_client=operator,
            follower=follower,
            trust_root=trust_root,
            state=state.root / FOLLOW_STATE_FILE,
            clock=wall_clock_ms,
            stop=stop,
        )
    except (NatsError, TimeoutError, OSError) as exc:
        fail(f"the bus follower stopped: {first_line(exc)}")
    finally:
        await operator.close()
        await system.close()


def run_follow(args: argparse.Namespace) -> int:
    configure_logging(json=not sys.stderr.isatty(), level=args.log_level)
    asyncio.run(_follow(args, StateDir(args.state_dir)))
    return 0
