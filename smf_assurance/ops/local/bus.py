"""Finding and reaching the bus from the command line.

``up`` writes ``<state>/nats.url`` once its gate serves and removes it when
it stops; every other command takes ``--nats`` or reads that file
(``bus_url``), and connects once with a deadline (``connect_bus``): an
unreachable server is a one-line refusal, never a hang or a retry loop.
"""

from __future__ import annotations

import asyncio
import os
import re
import ssl
from pathlib import Path
from typing import Final

import nats
from nats.aio.client import Client
from nats.errors import Error as NatsError

from smf_assurance.ops.cli.boundary import exception_chain
from smf_assurance.ops.cli.output import CommandError, fail, first_line
from smf_assurance.ops.local.cluster import nats_servers
from smf_assurance.ops.local.defaults import NKEY_SUFFIX, default_state_dir
from smf_assurance.ops.local.state import StateDir
from smf_assurance.subjects.bus_access import (
    TLS_CA_ENV,
    BusCredential,
    ConnectOptions,
    CredentialFileError,
    bus_error_reason,
    connect_options,
    read_credential,
)

NATS_URL_FILE: Final = "nats.url"
"""Written by ``up`` once the gate serves, removed when it stops."""
CONNECT_TIMEOUT_SECONDS: Final = 2.0


def nats_url_path(root: Path) -> Path:
    return root / NATS_URL_FILE


def write_url(root: Path, url: str) -> None:
    """Atomic: a reader sees the whole URL or no file, never half a line."""
    target = nats_url_path(root)
    partial = target.with_name(f".{NATS_URL_FILE}.{os.getpid()}")
    partial.unlink(missing_ok=True)
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)  # a state file
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(url + "\n")
    partial.replace(target)


def bus_url(nats_url: str | None, state_dir: Path | None) -> str:
    """``--nats`` wins; else the URL a running ``up`` wrote into the state dir."""
    if nats_url:
        return nats_url
    path = nats_url_path(state_dir or default_state_dir())
    try:
        text = path.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        fail(f"no NATS URL: pass --nats URL, or start `smf-assurance up` first (no {path})")
    except OSError as exc:
        fail(f"cannot read {path}: {exc.strerror}")
    if not text:
        fail(f"no NATS URL in {path}")
    return text


def credential_for(
    explicit: Path | None, state_dir: Path | None, default_principal: str
) -> BusCredential | None:
    """The credential a command connects with: ``--credential``, else the state
    directory's ``keys/<default_principal>.nkey``; ``None`` (anonymous, which a
    bus with authorization refuses) when there is neither."""
    if explicit is not None:
        if explicit.suffix != NKEY_SUFFIX or not explicit.is_file():
            fail(f"--credential: {explicit} is not a <principal>{NKEY_SUFFIX} file")
        return BusCredential(explicit.stem, explicit)
    return StateDir(state_dir or default_state_dir()).existing_credential(default_principal)


_VIOLATION: Final = re.compile(
    r'permissions violation for (publish|subscription) to "([^"]*)"', re.IGNORECASE
)
"""The server's ``-ERR`` for a subject a principal may not use (nats-py hands it on
lower-cased, the subject with it)."""


def _who(credential: BusCredential | None) -> str:
    """Who a refusal names: the principal, never the seed."""
    return f"principal {credential.principal}" if credential else "an anonymous client"


class BusRefusals:
    """A command's error callback (``on_error``): a refusal of what the principal asked ends the
    command at once, naming it.

    The server answers a publish or subscription the principal may not make with
    ``-ERR 'Permissions Violation ...'`` and drops it; nats-py hands that to this
    callback and leaves the request waiting for its timeout (``nats: timeout``
    seconds later, which reads like a gate that is down). Each request still
    waiting is failed here with a line naming the principal and the subject.
    Anything else is left to the caller (nats-py's default logs a traceback per
    failed attempt; a command reports its one line instead)."""

    def __init__(self, credential: BusCredential | None) -> None:
        self.who = _who(credential)
        self.client: Client | None = None
        self.refusal: str | None = None

    async def on_error(self, exc: Exception) -> None:
        if bus_error_reason(exc) != "permissions_violation":
            return
        found = _VIOLATION.search(str(exc))
        what = (
            f"permission to {found.group(1).lower()} to {found.group(2)}"
            if found
            else "a permission"
        )
        self.refusal = (
            f"the bus refused {self.who} {what} (Permissions Violation): connect with the "
            "credential of a principal allowed to (--credential)"
        )
        waiting: dict[str, asyncio.Future[object]] = (
            self.client._resp_map if self.client is not None else {}
        )
        for future in list(waiting.values()):
            if not future.done():
                future.set_exception(CommandError(self.refusal))


def refused_credential(exc: BaseException, credential: BusCredential | None) -> str | None:
    """The server's refusal of who we are, in one line naming the principal, or
    ``None`` when ``exc`` is not one.

    The server answers an unknown or revoked nkey with ``-ERR 'Authorization
    Violation'`` at once; said as a connection failure it reads like a server that
    is down, so it is named for what it is."""
    if bus_error_reason(exc) != "authorization_violation":
        return None
    return (
        f"the bus refused the credential of {_who(credential)} (Authorization Violation): "
        "the server does not know this nkey; use a credential of the registry in force"
    )


def tls_trouble(exc: BaseException) -> str | None:
    """A connection that failed for TLS, in words that say what to fix, or None.

    The server's certificate not verifying against the CA a client was given
    (``SMF_NATS_CA``) is named as such, never as a server that is down; a plain
    client (no CA given) whose server said nothing is told that a bus requiring TLS
    says nothing to a plain client. Only fixed phrases and the verification's own
    reason are kept: no certificate content."""
    chain = list(exception_chain(exc))
    for link in chain:
        if isinstance(link, ssl.SSLCertVerificationError):
            return (
                f"the bus's certificate does not verify ({link.verify_message}): give the "
                f"bus's own CA as {TLS_CA_ENV}, and a host name its certificate names"
            )
        if isinstance(link, ssl.SSLError):
            return (
                f"TLS with the bus failed ({link.reason or type(link).__name__}): check "
                f"{TLS_CA_ENV} and that the server is configured for TLS"
            )
    if not os.environ.get(TLS_CA_ENV) and any(
        isinstance(link, TimeoutError) or "expecting INFO" in str(link) for link in chain
    ):
        return (
            "the server sent no greeting: a bus that requires TLS says nothing to a "
            f"plain client; set {TLS_CA_ENV} to its CA certificate (docs/OPERATIONS.md, TLS)"
        )
    return None


def bus_options(credential: BusCredential | None) -> ConnectOptions:
    """``connect_options``, with a CA file that cannot be used named in one line."""
    try:
        return connect_options(credential)
    except CredentialFileError as exc:
        fail(exc.detail)


def checked_credential(credential: BusCredential | None) -> BusCredential | None:
    """The seed file checked before it is offered (``read_credential``: a missing,
    unreadable, too open or malformed file is named, never a library's
    ``ErrInvalidSeed`` or a connection error)."""
    if credential is None:
        return None
    try:
        return read_credential(credential.principal, credential.seed_file)
    except CredentialFileError as exc:
        fail(f"bus credential of principal {credential.principal}: {exc.detail}")


async def connect_bus(url: str, name: str, credential: BusCredential | None = None) -> Client:
    """One short connection attempt, no reconnect loop: a command fails fast.

    nats-py retries forever with ``allow_reconnect=False`` alone; a bounded
    ``max_reconnect_attempts`` is what makes an unreachable server an error.
    ``url`` may be a cluster's seeds, ``URL,URL,...``: any one that answers will do.
    A credential the server refuses is named as such (:func:`refused_credential`), and
    so is a subject it may not use (:class:`BusRefusals`).
    """
    credential = checked_credential(credential)
    refusals = BusRefusals(credential)
    try:
        refusals.client = await nats.connect(
            nats_servers(url),
            name=name,
            allow_reconnect=False,
            max_reconnect_attempts=1,
            reconnect_time_wait=0.1,
            connect_timeout=CONNECT_TIMEOUT_SECONDS,
            error_cb=refusals.on_error,
            **bus_options(credential),
        )
    except (OSError, NatsError, ValueError) as exc:
        refused = refused_credential(exc, credential)
        if refused is not None:
            fail(refused)
        trouble = tls_trouble(exc)
        if trouble is not None:
            fail(f"cannot connect to NATS at {url}: {trouble}")
        fail(
            f"cannot connect to NATS at {url}: {first_line(exc)}; "
            "start the server, or check the URL given with --nats"
        )
    return refusals.client
