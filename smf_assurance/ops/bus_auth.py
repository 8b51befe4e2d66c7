"""The bus's own permissions, generated from the registry (issue 15).

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

from smf_assurance.subjects.bus_access import Permissions, permissions_for
from smf_assurance.subjects.registry import RegistryEntry

NKEY_SUFFIX: Final = ".nkey"
AUTHORIZATION_FILE: Final = "authorization.conf"
SMF_ACCOUNT: Final = "SMF"
SYSTEM_ACCOUNT: Final = "SYS"
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
"""How many replies a principal with ``allow_responses`` may send to one request it
received. The server's default is one, and a gate holds all of its ``nats.micro``
services on one connection: a bare ``$SRV.PING``/``INFO``/``STATS`` reaches every one of
them, and with one reply allowed the server refused them all as publish violations,
so NATS tooling (``nats micro ls``) saw no gate on an authorizing bus (issue 21's
finding). Above the number of services one process serves; it widens nothing beyond
the reply subject of a request that principal was allowed to receive."""


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


def render_authorization(entries: Iterable[RegistryEntry], system_user: str) -> str:
    """The server's accounts for every entry with a bus credential.

    Every principal is a user of the ``SMF`` account (JetStream on), with its
    role's permissions; entries without a credential cannot connect at all, and
    neither can an anonymous client (no ``no_auth_user``). ``system_user`` is
    the one user of the server's system account (``SYS``), which may ask every
    node of a cluster to reload this file (``$SYS.REQ.SERVER.<id>.RELOAD``);
    it holds no permission in ``SMF``. The text is JSON inside the blocks, which
    nats-server reads as config. A registry with no credential at all is
    refused: it would be a bus nobody can use.
    """
    users = [
        {"nkey": entry.nats_user, "permissions": _permissions_block(permissions_for(entry))}
        for entry in entries
        if entry.nats_user is not None
    ]
    if not users:
        raise BusCredentialError("no principal has a bus credential: nobody could connect")
    accounts = {
        SMF_ACCOUNT: {"jetstream": "enabled", "users": users},
        SYSTEM_ACCOUNT: {"users": [{"nkey": system_user}]},
    }
    body = json.dumps(accounts, indent=2, sort_keys=True)
    return (
        "# Generated from the registry by smf-assurance"
        " (smf_assurance/ops/bus_auth.py); do not edit.\n"
        f"accounts = {body}\nsystem_account = {SYSTEM_ACCOUNT}\n"
    )


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
