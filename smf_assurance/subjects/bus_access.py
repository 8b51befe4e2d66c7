"""Who may do what on the bus: the permissions of each role, as the server enforces them.

ARCHITECTURE.md, "Trust and identity on the bus" and "Enforcement outside
the runtime". Signatures stay the control for authenticity; these
permissions add confidentiality and stop every other client. They are part
of the contract (docs/SUBJECTS.md): an adapter that needs a subject not
listed here for its role is refused by the server.

Rules the table keeps:

- Every principal reads only its own inbox (``_INBOX.<principal>``): replies
  to one principal's requests, and its consumers' deliveries, reach nobody else.
- Only the gate publishes orders (``smf.execute.>``), approval outcomes,
  pending announcements and ledger checkpoints, and only the gate serves the
  gate's subjects (propose, output, attest, approvals, stages).
- A runtime proposes, streams output, attests, reports on its own
  ``smf.result.<runtime_id>``, reads releases and approval outcomes, and asks
  an approval's state (``smf.approval.status``: the OpenClaw plugin's hold
  asks it once per held call, for an outcome published before it listened or
  lost across a reconnect; the reply is the id and a state, which the
  outcomes it may read already tell); it reads no order, no announcement, no
  binding (``smf.approval.show``), resolves nothing and reads no other
  principal's replies. (Outcomes are
  gate-signed ids and a disposition, the ids already public to approvers; their
  subject does not yet name the runtime, so one runtime can read another's.)
- A connector consumes only its own durable on ``smf.execute.<own>``, created
  with exactly that filter, and publishes only ``smf.result.<own>``.
- An approver asks resolve, show and status, and reads only its tenants'
  pending announcements; the console relay reads them for every tenant.
- Gate replicas tell each other what they learn (``smf.gate.sync.>``: attestations,
  decided tool-call ids, stops); nobody else reads or writes it. Only gates read or
  write the KV buckets behind them (``$KV.>``: on a cluster the runtime stops and
  decided tool calls of ``smf_tool_calls``, the claims, the approvals); besides the
  operator, only release publishers hold a ``$KV`` subject, their bucket's.
- A runtime may ask the gate's legal-hold list (``smf.holds``: its launcher asks it
  with the runtime's credential before the sandbox starts and every second after);
  the hold bucket behind it (``SMF_HOLDS``) is in the gate's account, which only the
  gate and the operator reach: no runtime can read or write it but through the gate.
- A runtime's launcher (``runtime run``, outside the runtime's sandbox) asks only
  ``smf.confinement`` with its signed confinement attestation; it reads nothing of the
  runtime's or anyone's but the gate's ack, and answers nothing.
- The model gateway asks ``smf.gateway.admit`` and ``smf.gateway.calls``
  (tool-call accounting) and streams the output
  of the runtimes it serves (``smf.output.>``, closes signed with its own key);
  it reads no order, no approval and nothing of another principal.
- Only the model gateway writes the call-context bucket (``SMF_CALL_CONTEXT``,
  ``smf_assurance.subjects.call_context``: the context each tool call it issued was made in);
  and reads records back one key at a time (lineage). Gates read and watch it
  (and create it when absent), and may not write, delete or reconfigure it;
  runtimes and everyone else may do neither, so no runtime can record a clean
  context for its own call. (A record removed is a call of unknown context to
  the gate and the gateway: removal can only make decisions stricter.)
- Only model gateways write and read the tainted-content bucket
  (``SMF_TAINTED_CONTENT``, ``smf_assurance.subjects.tainted_content``: digests of what
  tainted sessions wrote through tool calls), by single keys and by sequence. Gates
  create it when absent and may not write, delete or reconfigure it; nobody else has
  access. (A record removed is content no longer known tainted: only an operator can
  remove one.)
- Release publishers write the release bucket and ask the gates what they did
  with it (``smf.release.report``: every gate answers with its active release and
  recent refusals, ids and reason codes only), and nothing else; Swarm serves
  ``smf.swarm.analyze``.
- Only an operator lifts a runtime's stop (``smf.gateway.clear``), and only an
  operator asks the gates' status (``smf.gate.status``: each runtime's last
  attestation and the ledger's tail against its last checkpoint); every
  gate answers, signed.
- Nobody but an operator deletes or purges a stream or a bucket, or a
  message of the checkpoint, order or result streams.

No deputy (ARCHITECTURE.md, "Trust and identity on the bus"). A requester
names the subject its reply goes to, and NATS lets whoever answers write there:
a responder's reply, or JetStream's own answer to an API call, a pull, an ack or
a publish, lands on any subject the requester chose (``$JS.API.STREAM.DELETE.…``,
a KV key, an order subject). Subject permissions cannot confine that subject, so
the accounts do:

- Only the gate's replicas, the operator and Swarm share the account that holds
  JetStream (:data:`GATE_ACCOUNT`). Every other principal is alone in an account
  of its own, without JetStream, which imports from the gate's account exactly the
  subjects its role may use (:func:`account_plan`). A request that crosses into the
  gate's account is answered on a reply subject the server made (``_R_.…``) and
  maps back into the requester's own account, whatever it named: the most a
  requester can make anyone write is a message to itself.
- Inside the gate's account the responders answer only on inboxes
  (:func:`answerable_reply`): their permissions hold no ``allow_responses``
  (which would let any reply subject through their denials), and their code drops
  a request with any other reply subject, and counts it.
- Outside the gate's account a client reaches JetStream only through
  :data:`CLIENT_API`, under which its account imports the API calls of its role
  and nothing else; the calls that create, change or delete are never imported
  (a consumer's delivery subject would be another reply subject chosen by the
  client), so connector durables are created by the gate and approvers read the
  announcements through the gate (``smf.approval.announcements``).

JetStream is reached through its API subjects; each role gets the API calls its
code makes and nothing more, so what a permission names is what a client can do.
"""

from __future__ import annotations

import os
import re
import ssl
import stat
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal, TypedDict

from smf_assurance.subjects import names
from smf_assurance.subjects.call_context import CALL_CONTEXT_BUCKET, CALL_CONTEXT_STREAM
from smf_assurance.subjects.registry import RegistryEntry
from smf_assurance.subjects.release import RELEASE_BUCKET
from smf_assurance.subjects.tainted_content import TAINTED_CONTENT_BUCKET, TAINTED_CONTENT_STREAM

API: Final = "$JS.API"
CLIENT_API: Final = "$JS.SMF.API"
"""The JetStream API as every client but the gate's replicas calls it. Outside the gate's
account each call a role may make is imported under this prefix (and nothing else is);
inside it, and on a bus without authorization, the server maps it onto :data:`API`
(:data:`CLIENT_API_MAPPING`), so a client needs to know no more than this name."""
CLIENT_API_MAPPING: Final = {f"{CLIENT_API}.>": f"{API}.>"}
"""The subject mapping of the gate's account (and of a bus without authorization)."""
INBOX_ROOT: Final = "_INBOX"
RESPONSE_ROOT: Final = "_R_"
"""Where the server answers a request that crossed accounts: it maps the reply back
into the requester's own account (NATS service imports)."""
RELEASE_STREAM: Final = f"KV_{RELEASE_BUCKET}"

OPERATOR_ROLE: Final = "operator"
BUS_ONLY_ROLES: Final = ("console", "publisher", "swarm", OPERATOR_ROLE)
"""Roles that exist only on the bus: they sign no message the gate verifies."""
GATE_ACCOUNT: Final = "SMF"
"""The account holding JetStream: the gate's replicas, the operator and Swarm."""
GATE_ACCOUNT_ROLES: Final = frozenset({"gate", OPERATOR_ROLE, "swarm"})
SYSTEM_ACCOUNT: Final = "SYS"
REQUEST_INFO_HEADER: Final = "Nats-Request-Info"
"""What the server adds to a request that crossed accounts through an import with
``share``: the requesting account and user. The server sets it; a client's own
header of that name is replaced."""


def inbox_prefix(principal: str) -> str:
    """The reply-subject prefix a principal must connect with (nats-py
    ``inbox_prefix``, nats.js ``inboxPrefix``)."""
    return f"{INBOX_ROOT}.{names.token(principal)}"


@dataclass(frozen=True, slots=True)
class BusCredential:
    """Who a client is on the bus: a principal and the file holding its nkey seed.

    The seed never enters a ``repr`` or a log: only its path is held here.
    """

    principal: str
    seed_file: Path

    def connect_options(self) -> ConnectOptions:
        """The keyword arguments ``nats.connect`` takes to connect as this principal
        (its TLS, when any, is :func:`connect_options`')."""
        return {"nkeys_seed": str(self.seed_file), "inbox_prefix": inbox_prefix(self.principal)}


MAX_SEED_FILE_BYTES: Final = 4096
USER_SEED_PATTERN: Final = re.compile(r"\ASU[A-Z2-7]{56}\Z")
"""A NATS user nkey seed as text: base32 of prefix, key and checksum, 58 characters."""
SEED_FILE_MODE_MASK: Final = 0o077
"""Permission bits a seed file must not have: none for the group, none for others."""

CREDENTIAL_UNREADABLE: Final = "smf_bus_credential_unreadable"
CREDENTIAL_TOO_OPEN: Final = "smf_bus_credential_too_open"
CREDENTIAL_INVALID: Final = "smf_bus_credential_invalid"


class CredentialFileError(Exception):
    """A runtime's seed file cannot be used; ``reason_code`` says why.

    The message names the file and the problem, never a byte of its content.
    """

    def __init__(self, reason_code: str, detail: str) -> None:
        super().__init__(f"{reason_code}: {detail}")
        self.reason_code = reason_code
        self.detail = detail


def read_credential(principal: str, seed_file: str | os.PathLike[str]) -> BusCredential:
    """Check the seed file a client is about to connect with; the
    TypeScript twin is ``smf_assurance/adapters/openclaw/src/contract/bus_access.ts``.

    Refused, each with its reason code: a file that cannot be opened or is not
    a regular file (``smf_bus_credential_unreadable``); one whose mode grants
    the group or others any access (``smf_bus_credential_too_open``, as ssh
    refuses an open private key: a seed another account could read is a
    credential that may already be someone else's); one that is not a single
    user nkey seed (``smf_bus_credential_invalid``). The principal names the
    inbox prefix and must be one subject token.
    """
    path = Path(seed_file)
    try:
        names.token(principal)
    except names.SubjectError as exc:
        raise CredentialFileError(
            CREDENTIAL_INVALID, "the principal is not a subject token"
        ) from exc
    try:
        # O_NONBLOCK: a FIFO put in the seed file's place opens at once (and is refused
        # below as not a regular file) instead of waiting for a writer for ever. The
        # descriptor is not inherited: os.open makes it so (PEP 446).
        with os.fdopen(os.open(path, os.O_RDONLY | os.O_NONBLOCK), "rb") as handle:
            info = os.fstat(handle.fileno())
            if not stat.S_ISREG(info.st_mode):
                raise CredentialFileError(CREDENTIAL_UNREADABLE, f"{path} is not a regular file")
            if info.st_mode & SEED_FILE_MODE_MASK:
                raise CredentialFileError(
                    CREDENTIAL_TOO_OPEN,
                    f"{path} has mode {stat.S_IMODE(info.st_mode):04o}; "
                    "it must be 0600 or stricter",
                )
            data = handle.read(MAX_SEED_FILE_BYTES + 1)
    except OSError as exc:
        raise CredentialFileError(
            CREDENTIAL_UNREADABLE, f"cannot read {path}: {exc.strerror or type(exc).__name__}"
        ) from exc
    try:
        text = data.decode("ascii").strip()
    except UnicodeDecodeError:
        text = ""
    if len(data) > MAX_SEED_FILE_BYTES or not USER_SEED_PATTERN.fullmatch(text):
        raise CredentialFileError(
            CREDENTIAL_INVALID, f"{path} does not hold one NATS user nkey seed"
        )
    return BusCredential(principal, path)


SERVER_REFUSALS: Final = {
    "authorization violation": "authorization_violation",
    "permissions violation": "permissions_violation",
    "authentication timeout": "authentication_timeout",
    "authentication expired": "authentication_expired",
    "maximum connections exceeded": "maximum_connections_exceeded",
}
"""The server's fixed ``-ERR`` phrases, as the reason a log line carries."""


def bus_error_reason(exc: BaseException) -> str:
    """Why a bus call failed, as a log field: the server's refusal by its fixed
    phrase (an unknown credential is ``authorization_violation``), else the
    exception's type. nats-py raises its base ``Error`` for every ``-ERR``, whose
    type name alone says nothing; its message may carry a subject, so only the
    fixed phrase is kept."""
    text = str(exc).lower()
    for phrase, reason in SERVER_REFUSALS.items():
        if phrase in text:
            return reason
    return type(exc).__name__


TLS_CA_ENV: Final = "SMF_NATS_CA"
"""The CA certificate file a client trusts for the bus (``smf-assurance tls init``'s
``ca.pem``, or a firm's own). Set, every connection is TLS from its first byte;
unset, connections are plain, as they may be only to a server on loopback (the
embedded one): a server reached over a network requires TLS first
(``deploy/nats/cluster.conf``) and refuses a plain client."""
CA_UNUSABLE: Final = "smf_bus_ca_unusable"


class ConnectOptions(TypedDict, total=False):
    """The keyword arguments of ``nats.connect`` that say who connects and how."""

    nkeys_seed: str
    inbox_prefix: str
    tls: ssl.SSLContext
    tls_handshake_first: bool


def bus_tls(environ: Mapping[str, str] = os.environ) -> ConnectOptions:
    """TLS for the bus when :data:`TLS_CA_ENV` names a CA file, else nothing.

    The context trusts that CA and nothing else (not the system's store: a public
    CA's certificate for the bus's name is not the firm's bus), checks the server's
    name against its certificate, and speaks TLS 1.2 or later. The handshake comes
    first (``tls_handshake_first``), before the server's greeting: a client that
    expects TLS never reads or answers a plain greeting, so a server (or a machine
    in between) that offers none gets no nkey signature over its nonce, and the
    connection fails instead of going on in clear. A CA file that cannot be read or
    holds no certificate is refused (``smf_bus_ca_unusable``), naming the file.
    """
    ca_file = environ.get(TLS_CA_ENV, "")
    if not ca_file:
        return {}
    try:
        context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=ca_file)
    except (OSError, ssl.SSLError) as exc:
        raise CredentialFileError(
            CA_UNUSABLE, f"{TLS_CA_ENV}={ca_file} is not a readable CA certificate file"
        ) from exc
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    return {"tls": context, "tls_handshake_first": True}


def connect_options(credential: BusCredential | None) -> ConnectOptions:
    """``credential.connect_options()`` (nothing for a bus without authorization),
    with the bus's TLS when this process is given a CA (:func:`bus_tls`)."""
    options = bus_tls()
    if credential is not None:
        options.update(credential.connect_options())
    return options


def connector_durable(connector_id: str) -> str:
    """The one durable consumer a connector may bind on ``SMF_EXECUTE``; the gate
    creates it (a connector may create no consumer: see the module docstring)."""
    return f"smf-connector-{names.token(connector_id)}"


def answerable_reply(reply: str | None) -> bool:
    """Whether a responder inside the gate's account may answer on ``reply``.

    An inbox (``_INBOX.…``: a requester inside the gate's account, or any client of a
    bus without accounts) or a reply the server mapped across accounts (``_R_.…``).
    Anything else (a stream's subject, a KV key, a JetStream API call, another
    ``smf.`` subject) is a reply subject chosen to make the responder write there:
    the request is dropped, never answered.
    """
    if not reply:
        return False
    root, _, rest = reply.partition(".")
    return root in (INBOX_ROOT, RESPONSE_ROOT) and bool(rest)


def account_of(entry: RegistryEntry) -> str:
    """The account a principal connects in: the gate's, or one of its own."""
    if entry.role in GATE_ACCOUNT_ROLES:
        return GATE_ACCOUNT
    principal = entry.key.principal
    if principal in (GATE_ACCOUNT, SYSTEM_ACCOUNT) or principal.startswith("$"):
        raise ValueError(f"principal {principal!r} would take a reserved account name")
    return principal


@dataclass(frozen=True, slots=True)
class Permissions:
    """One principal's publish and subscribe allow and deny lists, in its own account."""

    publish_allow: tuple[str, ...]
    subscribe_allow: tuple[str, ...]
    publish_deny: tuple[str, ...] = ()
    subscribe_deny: tuple[str, ...] = ()
    allow_responses: bool = False
    """May publish a reply to a request it received, whatever its subject (only the
    operator: a responder with it is a deputy for every requester, see above)."""


_NO_DESTRUCTION: Final = (
    f"{API}.STREAM.DELETE.>",
    f"{API}.STREAM.PURGE.>",
    f"{API}.ACCOUNT.PURGE.>",
    f"{API}.STREAM.MSG.DELETE.{names.EXECUTE_STREAM}",
    f"{API}.STREAM.MSG.DELETE.{names.RESULT_STREAM}",
    f"{API}.STREAM.MSG.DELETE.{names.CHECKPOINT_STREAM}",
    f"{API}.STREAM.MSG.DELETE.{names.APPROVAL_STREAM}",
    f"{API}.STREAM.MSG.DELETE.{RELEASE_STREAM}",
    f"{API}.STREAM.MSG.DELETE.{CALL_CONTEXT_STREAM}",
    f"{API}.STREAM.MSG.DELETE.{TAINTED_CONTENT_STREAM}",
    f"{API}.STREAM.UPDATE.{names.CHECKPOINT_STREAM}",
    f"{API}.CONSUMER.DELETE.{names.EXECUTE_STREAM}.>",
    f"$KV.{RELEASE_BUCKET}.>",
)
"""What only an operator may do: no other role deletes or purges evidence,
orders, reports, announcements, releases, call contexts or tainted content, or
loosens the checkpoint stream."""

_READ_RELEASES: Final = (
    f"{CLIENT_API}.STREAM.INFO.{RELEASE_STREAM}",
    f"{CLIENT_API}.STREAM.MSG.GET.{RELEASE_STREAM}",
    f"{CLIENT_API}.DIRECT.GET.{RELEASE_STREAM}",
    f"{CLIENT_API}.DIRECT.GET.{RELEASE_STREAM}.>",
)


_GATE_KEEPS_OFF: Final = (
    f"{API}.CONSUMER.MSG.NEXT.{names.EXECUTE_STREAM}.>",
    f"$JS.ACK.{names.EXECUTE_STREAM}.>",
    f"{API}.CONSUMER.CREATE.{names.EXECUTE_STREAM}",
    f"{API}.CONSUMER.CREATE.{names.EXECUTE_STREAM}.*",
    f"{API}.CONSUMER.DURABLE.CREATE.{names.EXECUTE_STREAM}.>",
)
"""The gate publishes orders and creates each connector's durable with its filter
(``CONSUMER.CREATE.SMF_EXECUTE.<durable>.<filter>``); it never consumes or acks an
order, so it cannot take a connector's order from its durable."""

_GATE_READS_ONLY: Final = (
    f"$KV.{CALL_CONTEXT_BUCKET}.>",
    f"{API}.STREAM.UPDATE.{CALL_CONTEXT_STREAM}",
    f"$KV.{TAINTED_CONTENT_BUCKET}.>",
    f"{API}.STREAM.UPDATE.{TAINTED_CONTENT_STREAM}",
)
"""The gate reads the call contexts the model gateway records; it writes none, and no
tainted-content record (it only creates that bucket), and cannot shorten how long
either is kept."""

_INBOXES: Final = (f"{INBOX_ROOT}.>", f"{RESPONSE_ROOT}.>")
"""What a responder of the gate's account answers on (:func:`answerable_reply`)."""


def _gate() -> Permissions:
    return Permissions(
        publish_allow=(
            f"{names.EXECUTE_PREFIX}.>",
            f"{names.APPROVAL_PENDING_PREFIX}.>",
            f"{names.APPROVAL_OUTCOME_PREFIX}.>",
            f"{names.APPROVAL_AGAIN_PREFIX}.>",
            f"{names.CHECKPOINT_PREFIX}.>",
            f"{names.STAGE_PREFIX}.>",
            f"{names.STORE_PREFIX}.>",
            f"{names.GATE_SYNC_PREFIX}.>",
            f"{API}.>",
            "$JS.ACK.>",
            "$JS.FC.>",
            "$KV.>",
            # a replica's own health check (compose: `approvals pending` as the gate)
            names.APPROVAL_ANNOUNCEMENTS,
            names.APPROVAL_STATUS,
            *_INBOXES,
        ),
        publish_deny=(*_NO_DESTRUCTION, *_GATE_KEEPS_OFF, *_GATE_READS_ONLY),
        subscribe_allow=(
            names.PROPOSE,
            f"{names.OUTPUT_PREFIX}.>",
            names.ATTEST,
            names.CONFINEMENT,
            names.HOLDS,
            *_APPROVAL_REQUESTS,
            names.APPROVAL_SUMMARY,
            names.GATEWAY_ADMIT,
            names.GATEWAY_CALLS,
            names.GATEWAY_CLEAR,
            names.RELEASE_REPORT,
            names.GATE_STATUS,
            f"{names.STAGE_PREFIX}.>",
            f"{names.GATE_SYNC_PREFIX}.>",
            "$SRV.>",
        ),
    )


def _runtime(runtime_id: str) -> Permissions:
    return Permissions(
        publish_allow=(
            names.PROPOSE,
            f"{names.OUTPUT_PREFIX}.>",
            names.ATTEST,
            names.result_subject(runtime_id),
            names.APPROVAL_STATUS,
            names.HOLDS,
            *_READ_RELEASES,
        ),
        subscribe_allow=(f"{names.APPROVAL_OUTCOME_PREFIX}.>", f"{names.APPROVAL_AGAIN_PREFIX}.>"),
    )


def _connector(connector_id: str) -> Permissions:
    """Its own durable only, and only to read where it stands, fetch and ack: the
    gate created it, so no request of the connector's can set where it delivers.
    It may ask which stream keeps its reports (``STREAM.NAMES``, names only)."""
    durable = connector_durable(connector_id)
    stream = names.EXECUTE_STREAM
    return Permissions(
        publish_allow=(
            names.result_subject(connector_id),
            f"{CLIENT_API}.STREAM.NAMES",
            f"{CLIENT_API}.CONSUMER.INFO.{stream}.{durable}",
            f"{CLIENT_API}.CONSUMER.MSG.NEXT.{stream}.{durable}",
            f"$JS.ACK.{stream}.{durable}.>",
        ),
        subscribe_allow=(),
    )


_APPROVAL_REQUESTS: Final = (
    names.APPROVAL_RESOLVE,
    names.APPROVAL_SHOW,
    names.APPROVAL_STATUS,
    names.APPROVAL_TRACK,
    names.APPROVAL_REREQUEST,
    names.APPROVAL_ANNOUNCEMENTS,
)


def _approver(tenants: tuple[str, ...]) -> Permissions:
    """Its tenants' announcements as they are published, and the backlog through the
    gate (which tells from the server who asks): no JetStream at all, so no stream
    information that names another tenant."""
    pending = tuple(names.approval_pending_subject(t) for t in tenants)
    return Permissions(publish_allow=_APPROVAL_REQUESTS, subscribe_allow=pending)


def _console() -> Permissions:
    """An approver's requests (it relays them), and the summaries a notice may carry (the
    notifier runs as the console): no approver asks for those."""
    return Permissions(
        publish_allow=(*_APPROVAL_REQUESTS, names.APPROVAL_SUMMARY),
        subscribe_allow=(f"{names.APPROVAL_PENDING_PREFIX}.>",),
    )


def _gateway() -> Permissions:
    return Permissions(
        publish_allow=(
            names.GATEWAY_ADMIT,
            names.GATEWAY_CALLS,
            f"{names.OUTPUT_PREFIX}.>",
            f"$KV.{CALL_CONTEXT_BUCKET}.>",
            f"{CLIENT_API}.STREAM.MSG.GET.{CALL_CONTEXT_STREAM}",
            f"$KV.{TAINTED_CONTENT_BUCKET}.>",
            f"{CLIENT_API}.STREAM.MSG.GET.{TAINTED_CONTENT_STREAM}",
        ),
        subscribe_allow=(),
    )


def _launcher() -> Permissions:
    """Its runtime's confinement attestation and nothing else: it reads no reply but the
    gate's ack on its own inbox, and answers nothing."""
    return Permissions(publish_allow=(names.CONFINEMENT,), subscribe_allow=())


def _publisher() -> Permissions:
    return Permissions(
        publish_allow=(f"$KV.{RELEASE_BUCKET}.>", *_READ_RELEASES, names.RELEASE_REPORT),
        subscribe_allow=(),
    )


def _swarm() -> Permissions:
    return Permissions(
        publish_allow=_INBOXES,
        subscribe_allow=(names.SWARM_ANALYZE, "$SRV.>"),
    )


def _operator() -> Permissions:
    return Permissions(publish_allow=(">",), subscribe_allow=(">",), allow_responses=True)


def permissions_for(entry: RegistryEntry) -> Permissions:
    """The permissions of one registry entry: its role's, for its own ids."""
    own = inbox_prefix(entry.key.principal) + ".>"
    if entry.role == "gate":
        base = _gate()
    elif entry.role == "runtime":
        assert entry.runtime_id is not None  # the registry refuses a runtime without one
        base = _runtime(entry.runtime_id)
    elif entry.role == "connector":
        assert entry.connector_id is not None
        base = _connector(entry.connector_id)
    elif entry.role == "approver":
        base = _approver(entry.tenants)
    elif entry.role == "gateway":
        base = _gateway()
    elif entry.role == "launcher":
        base = _launcher()
    elif entry.role == "console":
        base = _console()
    elif entry.role == "publisher":
        base = _publisher()
    elif entry.role == "swarm":
        base = _swarm()
    else:
        # never a default: a role added to the registry gets no operator rights by omission
        assert entry.role == OPERATOR_ROLE, entry.role
        base = _operator()
    return Permissions(
        publish_allow=base.publish_allow,
        publish_deny=base.publish_deny,
        subscribe_allow=(*base.subscribe_allow, own),
        subscribe_deny=base.subscribe_deny,
        allow_responses=base.allow_responses,
    )


# --- accounts ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Import:
    """One subject an outside account takes from the gate's account.

    ``kind`` ``service``: requests and publishes go to the gate's account under
    ``subject`` and every answer comes back as the server's mapped reply; the
    account sees it as ``local``. ``stream``: messages published in the gate's
    account on ``subject`` reach the account's subscribers.
    """

    kind: Literal["service", "stream"]
    subject: str
    local: str
    many_replies: bool = False
    """A pull's answers: one request, a message per delivery."""


@dataclass(frozen=True, slots=True)
class AccountPlan:
    """Who connects in which account, and what each outside account imports."""

    gate_account_users: tuple[RegistryEntry, ...]
    outside: tuple[tuple[RegistryEntry, tuple[Import, ...]], ...]


SHARED_REQUESTS: Final = frozenset({names.APPROVAL_ANNOUNCEMENTS})
"""Services whose requests carry :data:`REQUEST_INFO_HEADER`: the gate answers them by
who asks, as the server names the account."""
MANY_REPLIES: Final = frozenset({names.RELEASE_REPORT})
"""Services answered more than once per request: every gate answers a release report."""


def imports_for(permissions: Permissions, own_inbox: str) -> tuple[Import, ...]:
    """What an outside account imports: every subject its user may publish, as a
    service of the gate's account (JetStream API calls renamed from :data:`CLIENT_API`
    to :data:`API`), and every subject it may subscribe to but its own inbox, as a
    stream of the gate's account. Nothing else reaches it; nothing it publishes reaches
    anyone but through these."""
    found: list[Import] = []
    for subject in permissions.publish_allow:
        if subject.startswith(CLIENT_API + "."):
            remote = API + subject.removeprefix(CLIENT_API)
            many = ".CONSUMER.MSG.NEXT." in remote
            found.append(Import("service", remote, subject, many_replies=many))
        else:
            many = subject in MANY_REPLIES
            found.append(Import("service", subject, subject, many_replies=many))
    for subject in permissions.subscribe_allow:
        if subject != own_inbox:
            found.append(Import("stream", subject, subject))
    return tuple(found)


def account_plan(entries: Iterable[RegistryEntry]) -> AccountPlan:
    """Every principal with a bus credential, in its account (:func:`account_of`)."""
    inside: list[RegistryEntry] = []
    outside: list[tuple[RegistryEntry, tuple[Import, ...]]] = []
    for entry in entries:
        if entry.nats_user is None:
            continue
        if account_of(entry) == GATE_ACCOUNT:
            inside.append(entry)
            continue
        own = inbox_prefix(entry.key.principal) + ".>"
        outside.append((entry, imports_for(permissions_for(entry), own)))
    return AccountPlan(tuple(inside), tuple(outside))
