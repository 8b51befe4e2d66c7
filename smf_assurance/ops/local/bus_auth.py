"""The bus's own permissions, generated from the registry.

ARCHITECTURE.md, "Enforcement outside the runtime": every principal connects
with its own NATS credential, and the server's authorization is generated
from the registry with the permissions of its role (``smf_assurance.subjects.bus_access``).
Anonymous connections are refused: only registered nkeys may connect.

Credentials are NATS user nkeys, issued separately from the principals'
Ed25519 signing keys (``smf_assurance.subjects.registry.NkeyUser`` says why: the server asks
for a signature over a nonce it chooses). A seed lives in its principal's
state directory as ``keys/<principal>.nkey`` (0600); only its public key goes
into the registry, and so into the signed release.

``render_authorization`` turns a registry into the server's
``authorization {}`` block; ``write_authorization`` replaces the file the
server includes, atomically; a server reloads it on SIGHUP
(``EmbeddedNatsServer.reload``), which disconnects a removed user and applies
changed permissions to connections already open, without a restart.
"""

from __future__ import annotations

import json
import os
import secrets
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Final

import nkeys

from smf_assurance.subjects.bus_access import (
    CLIENT_API_MAPPING,
    GATE_ACCOUNT,
    SHARED_REQUESTS,
    SYSTEM_ACCOUNT,
    AccountPlan,
    Import,
    Permissions,
    account_of,
    account_plan,
    permissions_for,
)
from smf_assurance.subjects.registry import RegistryEntry

AUTHORIZATION_FILE: Final = "authorization.conf"
SYSTEM_PRINCIPAL: Final = "bus-system"
"""The local credential of the server's system account: reloads the authorization on
every node. Not a registry principal: it administers the server, it acts on no subject."""


class BusCredentialError(ValueError):
    """A bus credential cannot be made, read, or is not a user nkey seed."""


def new_user_seed() -> bytes:
    """A fresh NATS user nkey seed (``SU...``), from the system's randomness."""
    return bytes(nkeys.encode_seed(secrets.token_bytes(32), nkeys.PREFIX_BYTE_USER))


def public_user(seed: bytes) -> str:
    """The ``U...`` public key of a user seed; refuses anything else."""
    try:
        pair = nkeys.from_seed(bytearray(seed.strip()))
        public: str = pair.public_key.decode("ascii")
    except (nkeys.NkeysError, ValueError, UnicodeDecodeError) as exc:
        raise BusCredentialError("not a NATS nkey seed") from exc
    if not public.startswith("U"):
        raise BusCredentialError("not a NATS user nkey seed")
    return public


def write_user_seed(path: Path) -> str:
    """Create a new seed at ``path`` (0600, never overwriting); return its public key."""
    seed = new_user_seed()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError as exc:
        raise BusCredentialError(f"{path} exists; a credential is never overwritten") from exc
    with os.fdopen(fd, "wb") as handle:
        handle.write(seed + b"\n")
    return public_user(seed)


def read_user_public(path: Path) -> str:
    try:
        return public_user(path.read_bytes())
    except OSError as exc:
        raise BusCredentialError(f"cannot read {path}: {exc.strerror}") from exc


RESPONSES_PER_REQUEST: Final = 32
"""How many replies the operator (the one principal with ``allow_responses``) may send
to one request it received; the server's default is one."""


def _permissions_block(permissions: Permissions) -> dict[str, object]:
    publish: dict[str, object] = {"allow": list(permissions.publish_allow)}
    if permissions.publish_deny:
        publish["deny"] = list(permissions.publish_deny)
    subscribe: dict[str, object] = {"allow": list(permissions.subscribe_allow)}
    if permissions.subscribe_deny:
        subscribe["deny"] = list(permissions.subscribe_deny)
    block: dict[str, object] = {"publish": publish, "subscribe": subscribe}
    if permissions.allow_responses:
        block["allow_responses"] = {"max": RESPONSES_PER_REQUEST}
    return block


def _user(entry: RegistryEntry) -> dict[str, object]:
    return {"nkey": entry.nats_user, "permissions": _permissions_block(permissions_for(entry))}


def _import(found: Import) -> dict[str, object]:
    source = {"account": GATE_ACCOUNT, "subject": found.subject}
    if found.kind == "stream":
        return {"stream": source}
    block: dict[str, object] = {"service": source}
    if found.local != found.subject:
        block["to"] = found.local
    if found.subject in SHARED_REQUESTS:
        block["share"] = True
    return block


def _exports(plan: AccountPlan) -> list[dict[str, object]]:
    """One export per subject the outside accounts import, naming exactly them."""
    takers: dict[tuple[str, str, bool], set[str]] = {}
    for entry, imports in plan.outside:
        for found in imports:
            key = (found.kind, found.subject, found.many_replies)
            takers.setdefault(key, set()).add(account_of(entry))
    exports: list[dict[str, object]] = []
    for (kind, subject, many), accounts in sorted(takers.items()):
        export: dict[str, object] = {kind: subject, "accounts": sorted(accounts)}
        if many:
            export["response_type"] = "stream"
        exports.append(export)
    return exports


def render_authorization(
    entries: Iterable[RegistryEntry], system_user: str, hollow: frozenset[str] = frozenset()
) -> str:
    """The server's accounts for every entry with a bus credential.

    The gate's replicas, the operator and Swarm are users of the ``SMF`` account
    (JetStream on, :data:`~smf_assurance.subjects.bus_access.CLIENT_API` mapped onto
    the JetStream API); every other principal is the one user of an account of its
    own, which imports from ``SMF`` what its role may use and nothing else
    (``smf_assurance.subjects.bus_access``, "No deputy"). Each user has its role's
    permissions; entries without a credential cannot connect at all, and neither can
    an anonymous client (no ``no_auth_user``). ``system_user`` is the one user of the
    server's system account (``SYS``), which may ask every node of a cluster to reload
    this file (``$SYS.REQ.SERVER.<id>.RELOAD``); it holds no permission in ``SMF``.
    The text is JSON inside the blocks, which nats-server reads as config. A registry
    with no credential at all is refused: it would be a bus nobody can use.

    Accounts named in ``hollow`` are rendered empty (no user, no import): the first
    of the two steps that add an account to a running server
    (:func:`authorization_steps`).
    """
    try:
        plan = account_plan(entries)
    except ValueError as exc:
        raise BusCredentialError(str(exc)) from exc
    if not plan.gate_account_users and not plan.outside:
        raise BusCredentialError("no principal has a bus credential: nobody could connect")
    accounts: dict[str, object] = {
        GATE_ACCOUNT: {
            "jetstream": "enabled",
            "users": [_user(entry) for entry in plan.gate_account_users],
            "exports": _exports(plan),
            "mappings": dict(CLIENT_API_MAPPING),
        },
        SYSTEM_ACCOUNT: {"users": [{"nkey": system_user}]},
    }
    for entry, imports in plan.outside:
        name = account_of(entry)
        accounts[name] = (
            {}
            if name in hollow
            else {"users": [_user(entry)], "imports": [_import(found) for found in imports]}
        )
    body = json.dumps(accounts, indent=2, sort_keys=True)
    return (
        "# Generated from the registry by smf-assurance"
        " (smf_assurance/ops/local/bus_auth.py); do not edit.\n"
        f"accounts = {body}\nsystem_account = {SYSTEM_ACCOUNT}\n"
    )


def _accounts_in(text: str) -> frozenset[str]:
    """The account names of an authorization file this module rendered."""
    body = text.split("accounts = ", 1)[-1].rsplit("\nsystem_account", 1)[0]
    try:
        return frozenset(json.loads(body))
    except ValueError:
        return frozenset()


def authorization_steps(
    current: str | None, entries: Iterable[RegistryEntry], system_user: str
) -> tuple[str, ...]:
    """The files to write and reload, in order, to go from ``current`` to ``entries``.

    nats-server (2.15.1, measured) does not wire the imports of an account that a
    reload creates: its principal is let in, but every request it makes finds no
    responder until the server reloads once more. Filling an account that already
    exists works at once. So an account a release adds is made first, empty, and
    filled by a second reload; with no new account, one step.
    """
    entries = list(entries)
    final = render_authorization(entries, system_user)
    if current is None:
        return (final,)
    added = _accounts_in(final) - _accounts_in(current)
    if not added:
        return (final,)
    return (render_authorization(entries, system_user, hollow=added), final)


def render_open_config() -> str:
    """A server config for a bus without authorization (one global account): only the
    mapping that lets every client call the JetStream API as
    :data:`~smf_assurance.subjects.bus_access.CLIENT_API`."""
    return f"mappings = {json.dumps(CLIENT_API_MAPPING, sort_keys=True)}\n"


def read_authorization(path: Path) -> str | None:
    """The authorization a server was last given, or None when there is none."""
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None


def write_authorization(path: Path, text: str) -> bool:
    """Replace ``path`` atomically with ``text``; return whether it changed."""
    try:
        if path.read_text(encoding="utf-8") == text:
            return False
    except FileNotFoundError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".")
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)
    os.chmod(tmp, 0o600)
    Path(tmp).replace(path)
    return True
