"""Who may do what on the bus: the permissions of each role, as the server enforces them.

ARCHITECTURE.md, "Trust and identity on the bus" and "Enforcement outside
the runtime"; issue 15. Signatures stay the control for authenticity; these
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
- The model gateway (issue 16) asks ``smf.gateway.admit`` and ``smf.gateway.calls``
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
- Release publishers write the release bucket and ask the gates what they did
  with it (``smf.release.report``: every gate answers with its active release and
  recent refusals, ids and reason codes only), and nothing else; Swarm serves
  ``smf.swarm.analyze``.
- Only an operator lifts a runtime's stop (``smf.gateway.clear``), and only an
  operator asks the gates' status (``smf.gate.status``: each runtime's last
  attestation and the ledger's tail against its last checkpoint, issue 21); every
  gate answers, signed.
- Nobody but an operator deletes or purges a stream or a bucket, or a
  message of the checkpoint, order or result streams.

JetStream is reached through its API subjects (``$JS.API...``); each role gets
the API calls its code makes and nothing more, so what a permission names is
what a client can do.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from smf_assurance.subjects import names
from smf_assurance.subjects.call_context import CALL_CONTEXT_BUCKET, CALL_CONTEXT_STREAM
from smf_assurance.subjects.registry import RegistryEntry
from smf_assurance.subjects.release import RELEASE_BUCKET

API: Final = "$JS.API"
INBOX_ROOT: Final = "_INBOX"
RELEASE_STREAM: Final = f"KV_{RELEASE_BUCKET}"

OPERATOR_ROLE: Final = "operator"
BUS_ONLY_ROLES: Final = ("console", "publisher", "swarm", OPERATOR_ROLE)
"""Roles that exist only on the bus: they sign no message the gate verifies."""


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

    def connect_options(self) -> dict[str, str]:
        """The keyword arguments ``nats.connect`` takes to connect as this principal."""
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
    """Check the seed file a client is about to connect with (issue 15); the
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
        with path.open("rb") as handle:
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


def connect_options(credential: BusCredential | None) -> dict[str, str]:
    """``credential.connect_options()``, or nothing for a bus without authorization."""
    return {} if credential is None else credential.connect_options()


def connector_durable(connector_id: str) -> str:
    """The one durable consumer a connector may bind on ``SMF_EXECUTE``."""
    return f"smf-connector-{names.token(connector_id)}"


@dataclass(frozen=True, slots=True)
class Permissions:
    """One principal's publish and subscribe allow and deny lists."""

    publish_allow: tuple[str, ...]
    subscribe_allow: tuple[str, ...]
    publish_deny: tuple[str, ...] = ()
    subscribe_deny: tuple[str, ...] = ()
    allow_responses: bool = False
    """May publish a reply to a request it received (services do)."""


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
    f"{API}.STREAM.UPDATE.{names.CHECKPOINT_STREAM}",
    f"{API}.CONSUMER.DELETE.{names.EXECUTE_STREAM}.>",
    f"$KV.{RELEASE_BUCKET}.>",
)
"""What only an operator may do: no other role deletes or purges evidence,
orders, reports, announcements, releases or call contexts, or loosens the
checkpoint stream."""

_READ_RELEASES: Final = (
    f"{API}.STREAM.INFO.{RELEASE_STREAM}",
    f"{API}.STREAM.MSG.GET.{RELEASE_STREAM}",
    f"{API}.DIRECT.GET.{RELEASE_STREAM}",
    f"{API}.DIRECT.GET.{RELEASE_STREAM}.>",
)


_GATE_KEEPS_OFF: Final = (
    f"{API}.CONSUMER.MSG.NEXT.{names.EXECUTE_STREAM}.>",
    f"{API}.CONSUMER.CREATE.{names.EXECUTE_STREAM}.>",
    f"{API}.CONSUMER.CREATE.{names.EXECUTE_STREAM}",
    f"{API}.CONSUMER.DURABLE.CREATE.{names.EXECUTE_STREAM}.>",
)
"""The gate publishes orders; it never consumes them, so it cannot take a
connector's order from its durable."""

_GATE_READS_ONLY: Final = (
    f"$KV.{CALL_CONTEXT_BUCKET}.>",
    f"{API}.STREAM.UPDATE.{CALL_CONTEXT_STREAM}",
)
"""The gate reads the call contexts the model gateway records (issue 16); it
writes none and cannot shorten how long they are kept."""


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
        ),
        publish_deny=(*_NO_DESTRUCTION, *_GATE_KEEPS_OFF, *_GATE_READS_ONLY),
        subscribe_allow=(
            names.PROPOSE,
            f"{names.OUTPUT_PREFIX}.>",
            names.ATTEST,
            names.APPROVAL_RESOLVE,
            names.APPROVAL_SHOW,
            names.APPROVAL_STATUS,
            names.APPROVAL_TRACK,
            names.APPROVAL_REREQUEST,
            names.GATEWAY_ADMIT,
            names.GATEWAY_CALLS,
            names.GATEWAY_CLEAR,
            names.RELEASE_REPORT,
            names.GATE_STATUS,
            f"{names.STAGE_PREFIX}.>",
            f"{names.GATE_SYNC_PREFIX}.>",
            "$SRV.>",
        ),
        allow_responses=True,
    )


def _runtime(runtime_id: str) -> Permissions:
    return Permissions(
        publish_allow=(
            names.PROPOSE,
            f"{names.OUTPUT_PREFIX}.>",
            names.ATTEST,
            names.result_subject(runtime_id),
            names.APPROVAL_STATUS,
            *_READ_RELEASES,
        ),
        subscribe_allow=(f"{names.APPROVAL_OUTCOME_PREFIX}.>", f"{names.APPROVAL_AGAIN_PREFIX}.>"),
    )


def _connector(connector_id: str) -> Permissions:
    durable = connector_durable(connector_id)
    stream = names.EXECUTE_STREAM
    return Permissions(
        publish_allow=(
            names.result_subject(connector_id),
            f"{API}.STREAM.INFO.{stream}",
            f"{API}.STREAM.NAMES",
            f"{API}.CONSUMER.INFO.{stream}.{durable}",
            f"{API}.CONSUMER.CREATE.{stream}.{durable}.{names.execute_subject(connector_id)}",
            f"{API}.CONSUMER.MSG.NEXT.{stream}.{durable}",
            f"$JS.ACK.{stream}.{durable}.>",
        ),
        subscribe_allow=(),
    )


def _pending_reader(subjects: Iterable[str]) -> tuple[str, ...]:
    """Read ``SMF_APPROVALS`` through a consumer filtered to ``subjects`` only.

    Any consumer name may be fetched from or asked about (a subject permission
    cannot match a name's prefix), but the reader names its consumer with 64
    random bits and no role here may list consumers, so another reader's
    consumer cannot be found to be read.
    """
    stream = names.APPROVAL_STREAM
    calls = [
        f"{API}.STREAM.INFO.{stream}",
        f"{API}.CONSUMER.INFO.{stream}.*",
        f"{API}.CONSUMER.MSG.NEXT.{stream}.*",
    ]
    for subject in subjects:
        calls.append(f"{API}.CONSUMER.CREATE.{stream}.*.{subject}")
    calls.append(f"{API}.CONSUMER.DELETE.{stream}.*")
    return tuple(calls)


_APPROVAL_REQUESTS: Final = (
    names.APPROVAL_RESOLVE,
    names.APPROVAL_SHOW,
    names.APPROVAL_STATUS,
    names.APPROVAL_TRACK,
    names.APPROVAL_REREQUEST,
)


def _approver(tenants: tuple[str, ...]) -> Permissions:
    pending = tuple(names.approval_pending_subject(t) for t in tenants)
    return Permissions(
        publish_allow=(*_APPROVAL_REQUESTS, *_pending_reader(pending)),
        subscribe_allow=pending,
    )


def _console() -> Permissions:
    every = f"{names.APPROVAL_PENDING_PREFIX}.>"
    return Permissions(
        publish_allow=(*_APPROVAL_REQUESTS, *_pending_reader((every,))),
        subscribe_allow=(every,),
    )


def _gateway() -> Permissions:
    return Permissions(
        publish_allow=(
            names.GATEWAY_ADMIT,
            names.GATEWAY_CALLS,
            f"{names.OUTPUT_PREFIX}.>",
            f"$KV.{CALL_CONTEXT_BUCKET}.>",
            f"{API}.STREAM.MSG.GET.{CALL_CONTEXT_STREAM}",
        ),
        subscribe_allow=(),
    )


def _publisher() -> Permissions:
    return Permissions(
        publish_allow=(f"$KV.{RELEASE_BUCKET}.>", *_READ_RELEASES, names.RELEASE_REPORT),
        subscribe_allow=(),
    )


def _swarm() -> Permissions:
    return Permissions(
        publish_allow=(),
        subscribe_allow=(names.SWARM_ANALYZE, "$SRV.>"),
        allow_responses=True,
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
