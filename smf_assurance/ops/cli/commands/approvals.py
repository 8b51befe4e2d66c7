"""``approvals``: the approver's console for exact-action approvals.

ARCHITECTURE.md, "Exact-action
approval". What the commands guarantee an approver:

- ``pending`` reads the announcements kept on the ``SMF_APPROVALS`` stream
  (so approvals announced before the console started are seen) and asks the
  gate for each one's current state, through :mod:`smf_assurance.approver.pending`, the
  reader the web console's list uses too; only open ones (pending, approved)
  are listed unless ``--all`` is given. Announcements carry identities, never
  the content or the recipient.
- ``show`` makes a signed request, so only an approver on the roster sees the
  held content, and checks the content against the binding's content hash
  and the binding against its digest (:func:`smf_assurance.approver.client.content_matches`).
- ``resolve`` signs only what it has checked: it fetches the view, refuses to
  sign when the content does not match the digest or the approval is no
  longer pending, and signs the digest it checked, so the signature cannot be
  spent on any other action. The gate's refusal is the exit status.
- ``resolve`` is deliberate: it names the
  action and its destination and signs only after the approver types ``yes``,
  unless ``--yes``; with no terminal on stdin and no ``--yes`` it signs
  nothing. A deny names its reason from the closed list
  (``smf_assurance.subjects.approvals.DENY_REASONS``) with ``--reason``, and may carry a
  ``--note`` for the requester; both are signed. A reason outside the list,
  or a note that is not bounded plain text, is refused before anything is sent.

Content an agent produced may carry terminal control sequences; it is shown
with every control and format character escaped, so it cannot rewrite the
screen around it (for example a forged "matches" line).
"""

from __future__ import annotations

import argparse
import asyncio
import re
import sys
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import msgspec
from nats.aio.client import Client
from nats.errors import Error as NatsError
from nats.errors import NoRespondersError

from smf_assurance.approver.client import ApproverClient, ApproverError, content_matches
from smf_assurance.approver.directory import DirectoryError, DirectoryShown, load_directory
from smf_assurance.approver.pending import AnnouncementsRefused, approval_state, read_pending
from smf_assurance.ops.cli.cli_json import (
    ApprovalsPendingJson,
    ApprovalsRerequestJson,
    ApprovalsResolveJson,
    ApprovalsResolveRefusal,
    ApprovalsShowJson,
    PendingItem,
)
from smf_assurance.ops.cli.output import (
    CommandError,
    emit,
    fail,
    first_line,
    format_instant,
    say,
    table,
)
from smf_assurance.ops.cli.parsers.approvals import DECISIONS
from smf_assurance.ops.local.bus import (
    bus_url,
    connect_bus,
    credential_for,
)
from smf_assurance.ops.local.defaults import CONSOLE, default_state_dir
from smf_assurance.ops.local.logs import configure_logging
from smf_assurance.ops.local.state import StateDir
from smf_assurance.subjects import names
from smf_assurance.subjects.approvals import (
    DENY_REASONS,
    RULE_NOT_DESCRIBED,
    ApprovalView,
    DenyReason,
    PendingAnnouncement,
    ReRequestReply,
    ResolutionDecision,
    ResolutionReply,
)
from smf_assurance.subjects.attachments import AttachmentError, claims_attachment, open_attachment
from smf_assurance.subjects.bus_access import BusCredential
from smf_assurance.subjects.clock import wall_clock_ms
from smf_assurance.subjects.keys import KeyFileError, SigningKey, load_private_key
from smf_assurance.subjects.patterns import MAX_NOTE_CHARS, ApproverNote

OPEN_STATES: Final = frozenset({"pending", "approved"})
"""States in which an approval still waits on an approver or on its claim."""
REQUEST_TIMEOUT_SECONDS: Final = 5.0
_HEX_ID: Final = re.compile(r"[0-9a-f]{64}")
CONTENT_MISMATCH: Final = "content_does_not_match_binding"
"""The console's own refusal to sign: the content shown is not what the digest covers."""
GATE_UNREACHABLE: Final = "gate_unreachable"
"""No gate answered the request (no responders, or no answer in time)."""
_KEEP: Final = frozenset("\n\t")
CONFIRMATION_REQUIRED: Final = "confirmation_required"
"""No ``--yes`` and no terminal to ask on: nothing is signed."""
NOT_CONFIRMED: Final = "not_confirmed"
"""The approver did not type ``yes``: nothing is signed."""


@dataclass(frozen=True, slots=True)
class Listed:
    announcement: PendingAnnouncement
    state: str


def _credential(args: argparse.Namespace, approver_id: str | None = None) -> BusCredential | None:
    """The approver's own bus credential when the state directory holds it, else the
    console relay's (which may read every tenant's announcements)."""
    if args.credential is None and approver_id is not None:
        own = credential_for(None, args.state_dir, approver_id)
        if own is not None:
            return own
    return credential_for(args.credential, args.state_dir, CONSOLE)


# --- helpers -----------------------------------------------------------------


def approval_ref(text: str) -> str:
    """Accept ``sha256:<hex>`` or the bare hex an outcome subject shows."""
    value = text.strip().lower()
    bare = value.removeprefix("sha256:")
    if _HEX_ID.fullmatch(bare) is None:
        fail(f"{text!r} is not an approval id (sha256:<64 hex digits>)", 2)
    return "sha256:" + bare


def printable(text: str) -> str:
    """Escape control and format characters (ANSI escapes, bidi overrides) but
    keep newlines and tabs, so held content cannot rewrite the terminal."""
    out: list[str] = []
    for char in text:
        if char not in _KEEP and unicodedata.category(char) in ("Cc", "Cf"):
            out.append(char.encode("unicode_escape").decode("ascii"))
        else:
            out.append(char)
    return "".join(out)


def expires_in(expires_at_ms: int, now_ms: int) -> str:
    left = (expires_at_ms - now_ms) // 1000
    if left <= 0:
        return "expired"
    minutes, seconds = divmod(left, 60)
    return f"{minutes}m {seconds:02d}s" if minutes else f"{seconds}s"


def _load_key(path: Path, approver_id: str | None) -> tuple[SigningKey, str]:
    try:
        key, principal = load_private_key(path)
    except KeyFileError as exc:
        fail(first_line(exc))
    return key, approver_id or principal


def _gate_unreachable(subject: str, exc: Exception) -> str:
    if isinstance(exc, NoRespondersError):
        return f"no gate answers on {subject}: is `smf-assurance up` running?"
    return f"no answer on {subject}: {first_line(exc)}"


def _setup(args: argparse.Namespace) -> str:
    configure_logging(json=not sys.stderr.isatty(), level="warning")
    return bus_url(args.nats, args.state_dir)


# --- pending -----------------------------------------------------------------


async def _announcements(nc: Client, tenant: str | None) -> list[PendingAnnouncement]:
    try:
        return await read_pending(nc, tenant)
    except names.SubjectError:
        fail(f"--tenant: {tenant!r} is not a tenant id", 2)
    except AnnouncementsRefused as exc:
        fail(f"the gate refused to list announcements: {exc.reason_code}")
    except (NatsError, TimeoutError) as exc:
        fail(_gate_unreachable(names.APPROVAL_ANNOUNCEMENTS, exc))


async def _state(nc: Client, approval_id: str) -> str:
    try:
        return await approval_state(nc, approval_id, REQUEST_TIMEOUT_SECONDS)
    except (NatsError, TimeoutError) as exc:
        fail(_gate_unreachable(names.APPROVAL_STATUS, exc))
    except msgspec.DecodeError:
        fail(f"unreadable answer on {names.APPROVAL_STATUS}")


async def _pending(
    url: str, credential: BusCredential | None, tenant: str | None, everything: bool
) -> list[Listed]:
    nc = await connect_bus(url, "smf-approvals-console", credential)
    try:
        announcements = await _announcements(nc, tenant)
        states = await asyncio.gather(*(_state(nc, a.approval_id) for a in announcements))
    finally:
        await nc.close()
    return [
        Listed(a, state)
        for a, state in zip(announcements, states, strict=True)
        if everything or state in OPEN_STATES
    ]


def run_pending(args: argparse.Namespace) -> int:
    url = _setup(args)
    listed = asyncio.run(_pending(url, _credential(args), args.tenant, args.all))
    now = wall_clock_ms()
    if args.json:
        emit(ApprovalsPendingJson(approvals=tuple(_listed_json(item, now) for item in listed)))
        return 0
    if not listed:
        say("no open approvals" if not args.all else "no approvals on the stream")
        return 0
    table(
        ("approval id", "tool", "capability", "channel", "required roles", "expires in", "state"),
        [
            (
                item.announcement.approval_id,
                item.announcement.native_tool,
                item.announcement.capability,
                item.announcement.channel,
                ", ".join(item.announcement.required_roles),
                # A consumed approval's time has passed too, but it
                # did not expire; only an open one has time left to show.
                expires_in(item.announcement.expires_at_ms, now)
                if item.state in OPEN_STATES
                else "-",
                item.state,
            )
            for item in listed
        ],
    )
    return 0


def _listed_json(item: Listed, now: int) -> PendingItem:
    a = item.announcement
    listed = {
        "approval_id": a.approval_id,
        "tenant_id": a.tenant_id,
        "native_tool": a.native_tool,
        "capability": a.capability,
        "channel": a.channel,
        "locality": a.locality,
        "required_roles": a.required_roles,
        "expires_at_ms": a.expires_at_ms,
        "expires_in_s": max(0, (a.expires_at_ms - now) // 1000),
        "state": item.state,
        "rule_ids": a.rule_ids,
        "reason_codes": a.reason_codes,
    }
    # The announcement's capability, channel, locality and state are words of the
    # gate's closed vocabularies on the wire as plain strings; convert checks them.
    return msgspec.convert(listed, type=PendingItem)


# --- show ----------------------------------------------------------------------


async def _fetch_view(
    client: ApproverClient, approval_id: str, purpose: str = "show"
) -> ApprovalView:
    """The approval's content and binding, or one line saying why not; a resolve
    reads it first, so its refusal says the resolve failed and that nothing was signed."""
    try:
        return await client.show(approval_id)
    except ApproverError as exc:
        if exc.reason_code == "approval_closed":
            state = await _state(client.nc, approval_id)
            fail(
                f"approval {approval_id} is closed: approval_not_pending (state {state})"
                + await _standing(client, approval_id),
                reason_code="approval_not_pending",
            )
        if purpose == "show":
            fail(
                f"the gate refused to show {approval_id}: {exc.reason_code}",
                reason_code=exc.reason_code,
            )
        fail(
            f"cannot resolve {approval_id}: the gate refused to show its content first "
            f"({exc.reason_code}); nothing was signed",
            reason_code=exc.reason_code,
        )
    except (NatsError, TimeoutError) as exc:
        fail(_gate_unreachable(names.APPROVAL_SHOW, exc), reason_code=GATE_UNREACHABLE)


async def _standing(client: ApproverClient, approval_id: str) -> str:
    """What a closed approval ended with, as far as the gate lets this person see:
    a denial's reason codes, the connector's receipt; '' when nothing
    more can be said (not theirs to see, or the gate does not answer)."""
    try:
        reply = await client.track([approval_id])
    except (ApproverError, NatsError, TimeoutError):
        return ""
    parts = []
    for tracked in reply.approvals:
        if tracked.outcome_codes:
            parts.append(f"reasons {', '.join(tracked.outcome_codes)}")
        if tracked.receipt is not None:
            parts.append(f"the connector's receipt {printable(tracked.receipt)}")
    return "".join(f"; {part}" for part in parts)


async def _show(
    url: str, credential: BusCredential | None, approval_id: str, key: SigningKey, approver_id: str
) -> ApprovalView:
    nc = await connect_bus(url, "smf-approvals-console", credential)
    try:
        return await _fetch_view(ApproverClient(nc, key, approver_id), approval_id)
    finally:
        await nc.close()


def run_show(args: argparse.Namespace) -> int:
    approval_id = approval_ref(args.approval_id)
    key, approver_id = _load_key(args.key, args.approver_id)
    url = _setup(args)
    try:
        directory = load_directory(
            args.directory or StateDir(args.state_dir or default_state_dir()).directory
        )
    except DirectoryError as exc:
        fail(f"cannot read the tenant directory: {first_line(exc)}")
    view = asyncio.run(_show(url, _credential(args, approver_id), approval_id, key, approver_id))
    matches = content_matches(view)
    b = view.binding
    display = directory.shown(b.tenant_id, b.matter_id, view.destination_address, None)
    if args.json:
        emit(_view_json(view, matches, display))
    else:
        _print_view(view, matches, display)
    if not matches:
        fail("the content shown does not match the binding digest: do not approve it")
    return 0


def _view_json(view: ApprovalView, matches: bool, display: DirectoryShown) -> ApprovalsShowJson:
    shown = {
        "approval_id": view.binding.approval_id,
        "state": view.state,
        "native_tool": view.native_tool,
        "destination_address": view.destination_address,
        "arguments_json": view.arguments_json,
        "content": view.content,
        "binding": view.binding,
        "binding_digest": view.binding_digest,
        "content_matches": matches,
        "rules": [
            {
                "rule_id": r.rule_id,
                "described": r.title is not None,
                "title": r.title,
                "statement": r.statement,
                "citation": r.citation,
            }
            for r in view.rules
        ],
        "reasons": [{"code": r.code, "words": r.words} for r in view.reasons],
        "display": display,
    }
    return msgspec.convert(msgspec.to_builtins(shown), type=ApprovalsShowJson)


def _print_reasons(view: ApprovalView) -> None:
    """Why the approval is required, in words: each rule as the deciding release
    words it, or its id and :data:`RULE_NOT_DESCRIBED`; each reason code with its words,
    or the code alone."""
    for rule in view.rules:
        if rule.title is None:
            say(f"rule {printable(rule.rule_id)}: {RULE_NOT_DESCRIBED}")
            continue
        say(f"rule {printable(rule.rule_id)}: {printable(rule.title)}")
        say(f"  {printable(rule.statement or '')}")
        say(f"  citation: {printable(rule.citation or '')}")
    for reason in view.reasons:
        words = f": {printable(reason.words)}" if reason.words else ""
        say(f"reason {printable(reason.code)}{words}")


def _directory_rows(display: DirectoryShown) -> list[tuple[str, str]]:
    """The destination and matter by their directory names, each with its raw id; an id
    the directory does not hold is printed raw and marked so."""
    d, m = display.destination, display.matter
    raw = printable(d.id) or "-"
    if not d.in_directory:
        rows = [("destination", f"{raw} (not in the directory)")]
    elif d.kind == "court":
        rows = [("court", f"{printable(d.name or '')} ({raw})")]
        case = (
            f"{printable(d.caption)}, docket {printable(d.docket or '')}"
            if d.caption is not None
            else "(no case for this matter at this court in the directory)"
        )
        rows.append(("case", case))
    else:
        rows = [("recipient", f"{printable(d.name or '')} <{raw}>")]
    if m.in_directory:
        rows.append(("matter", f"{printable(m.name or '')} ({printable(m.id)})"))
        rows.append(("client", printable(m.client or "")))
    else:
        rows.append(("matter", f"{printable(m.id)} (not in the directory)"))
    return rows


def _documents(view: ApprovalView) -> tuple[str, list[tuple[str, str]]]:
    """The arguments with each document's bytes left out, and a row per document: its
    name, type, size and digest once its bytes match it, or why not."""
    try:
        arguments = msgspec.json.decode(view.arguments_json, type=dict[str, Any])
    except msgspec.DecodeError:
        return printable(view.arguments_json), []
    rows = []
    for name, value in sorted(arguments.items()):
        if not claims_attachment(value):
            continue
        try:
            attachment, data = open_attachment(value)
        except AttachmentError as exc:
            rows.append((f"document {name}", f"NOT SHOWN: {exc.reason_code}"))
            continue
        shown = f"{printable(attachment.filename)}, {attachment.media_type}, {len(data)} bytes"
        rows.append((f"document {name}", f"{shown}, {attachment.sha256} (matches its bytes)"))
        arguments[name] = {**value, "data_b64": f"(the bytes of document {name})"}
    return printable(msgspec.json.encode(arguments).decode()), rows


def _print_view(view: ApprovalView, matches: bool, display: DirectoryShown) -> None:
    b = view.binding
    now = wall_clock_ms()
    arguments, documents = _documents(view)
    rows: Sequence[tuple[str, str]] = [
        ("approval id", b.approval_id),
        ("state", view.state),
        ("tool", view.native_tool),
        *_directory_rows(display),
        ("arguments", arguments),
        *documents,
        ("required roles", ", ".join(b.required_roles)),
        ("tenant / organization", f"{b.tenant_id} / {b.organization_id}"),
        ("requested by", b.actor_id),
        ("created", format_instant(b.created_at_ms)),
        ("expires", f"{format_instant(b.expires_at_ms)} ({expires_in(b.expires_at_ms, now)})"),
        ("release", b.release_id),
        ("content hash", b.content_hash),
        ("binding digest", view.binding_digest),
    ]
    table(("field", "value"), rows)
    if view.rules or view.reasons:
        say("")
        _print_reasons(view)
    say("")
    say(f"--- content ({len(view.content)} characters) ---")
    say(printable(view.content))
    say("--- end of content ---")
    if matches:
        say("content check: matches the binding digest")
    else:
        say("content check: MISMATCH: the content or binding shown is not what the digest covers")


# --- resolve -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Choice:
    """What the approver asked to sign: the decision, a deny's reason and note,
    and whether they confirmed it up front (``--yes``)."""

    decision: ResolutionDecision
    deny_reason: DenyReason | None = None
    note: str | None = None
    confirmed: bool = False


def choice_of(args: argparse.Namespace) -> Choice:
    """The approver's choice, or a usage error (exit 2) before anything is sent:
    a deny without ``--reason``, a reason or note on an allow-once, or a note
    that is not bounded plain text (``smf_assurance.subjects.patterns.ApproverNote``)."""
    decision = DECISIONS[args.decision]
    if decision == "deny" and args.reason is None:
        fail(f"deny needs --reason, one of: {', '.join(DENY_REASONS)}", 2)
    if decision != "deny" and (args.reason is not None or args.note is not None):
        fail("--reason and --note go with deny only", 2)
    if args.note is not None:
        try:
            msgspec.convert(args.note, type=ApproverNote)
        except msgspec.ValidationError:
            fail(
                f"--note must be plain text of 1 to {MAX_NOTE_CHARS} characters "
                "(newlines and tabs allowed, no other control characters)",
                2,
            )
    return Choice(decision, args.reason, args.note, bool(args.yes))


def _question(view: ApprovalView, choice: Choice) -> str:
    what = "ALLOW ONCE" if choice.decision == "allow-once" else f"DENY ({choice.deny_reason})"
    destination = printable(view.destination_address) or "(no destination address)"
    return (
        f"{what}: {printable(view.native_tool)} to {destination}, "
        f"approval {view.binding.approval_id}. Type yes to sign: "
    )


async def _confirm(view: ApprovalView, choice: Choice) -> None:
    """Name the action and its destination and sign only on ``yes``."""
    if choice.confirmed:
        return
    sys.stderr.write(_question(view, choice))
    sys.stderr.flush()
    answer = await asyncio.to_thread(sys.stdin.readline)
    if answer.strip().lower() not in ("yes", "y"):
        fail("not confirmed: nothing was signed", reason_code=NOT_CONFIRMED)


async def _resolve(
    url: str,
    credential: BusCredential | None,
    approval_id: str,
    choice: Choice,
    key: SigningKey,
    approver_id: str,
) -> ResolutionReply:
    nc = await connect_bus(url, "smf-approvals-console", credential)
    try:
        client = ApproverClient(nc, key, approver_id)
        view = await _fetch_view(client, approval_id, "resolve")
        if not content_matches(view):
            fail(
                "refusing to sign: the content shown does not match the binding digest",
                reason_code=CONTENT_MISMATCH,
            )
        if view.state != "pending":
            fail(
                f"cannot resolve {approval_id}: approval_not_pending (state {view.state})",
                reason_code="approval_not_pending",
            )
        await _confirm(view, choice)
        try:
            return await client.resolve(
                approval_id,
                choice.decision,
                view.binding_digest,
                deny_reason=choice.deny_reason,
                note=choice.note,
            )
        except ApproverError as exc:
            fail(f"resolution refused: {exc.reason_code}", reason_code=exc.reason_code)
        except (NatsError, TimeoutError) as exc:
            fail(_gate_unreachable(names.APPROVAL_RESOLVE, exc), reason_code=GATE_UNREACHABLE)
    finally:
        await nc.close()


def run_resolve(args: argparse.Namespace) -> int:
    approval_id = approval_ref(args.approval_id)
    choice = choice_of(args)
    key, approver_id = _load_key(args.key, args.approver_id)
    url = _setup(args)
    credential = _credential(args, approver_id)
    try:
        if not choice.confirmed and not sys.stdin.isatty():
            fail(
                "no terminal to confirm on: pass --yes to resolve without asking; "
                "nothing was signed",
                reason_code=CONFIRMATION_REQUIRED,
            )
        reply = asyncio.run(_resolve(url, credential, approval_id, choice, key, approver_id))
    except CommandError as exc:
        if args.json:
            # A refusal prints its JSON on stdout too, so a script reading the
            # JSON always has an answer.
            emit(
                ApprovalsResolveRefusal(
                    approval_id=approval_id,
                    decision=args.decision,
                    accepted=False,
                    reason_code=exc.reason_code,
                    refusal=str(exc),
                )
            )
        raise
    if args.json:
        answer = {"decision": args.decision, **msgspec.to_builtins(reply)}
        emit(msgspec.convert(answer, type=ApprovalsResolveJson))
    elif reply.accepted:
        table(
            ("field", "value"),
            [
                ("approval id", reply.approval_id),
                ("decision", args.decision),
                ("reason", ", ".join(reply.reason_codes) or "-"),
                ("accepted", "yes"),
                ("state", reply.state),
                ("order id", reply.order_id or "-"),
            ],
        )
    if not reply.accepted:
        reasons = ", ".join(reply.reason_codes) or "no reason given"
        fail(f"resolution refused: {reasons} (state {reply.state})")
    return 0


# --- rerequest -----------------------------------------------------------------


async def _rerequest(
    url: str, credential: BusCredential | None, approval_id: str, key: SigningKey, person: str
) -> ReRequestReply:
    nc = await connect_bus(url, "smf-approvals-console", credential)
    try:
        return await ApproverClient(nc, key, person).rerequest(approval_id)
    except (NatsError, TimeoutError) as exc:
        fail(_gate_unreachable(names.APPROVAL_REREQUEST, exc), reason_code=GATE_UNREACHABLE)
    except msgspec.DecodeError:
        fail(f"unreadable answer on {names.APPROVAL_REREQUEST}")
    finally:
        await nc.close()


def asked_again_words(reply: ReRequestReply) -> str:
    """What came of an accepted re-request, as the gate answered it: never "asked
    again" when no new proposal of the action was decided."""
    if reply.proposed_again == "held":
        return "proposed anew by its runtime: held for approval again, as a new approval"
    if reply.proposed_again is not None:
        return (
            f"proposed anew by its runtime and decided {reply.proposed_again} under the "
            "release in force (no new approval)"
        )
    return (
        f"not proposed anew: no runtime proposed the action again within "
        f"{reply.waited_ms / 1000:g} s (a runtime that no longer holds it, as the Hermes and "
        "OpenClaw adapters hold none, cannot); ask the agent to do it again"
    )


def run_rerequest(args: argparse.Namespace) -> int:
    """An expired approval is asked again as a new one, never revived."""
    approval_id = approval_ref(args.approval_id)
    key, person = _load_key(args.key, args.approver_id)
    url = _setup(args)
    reply = asyncio.run(_rerequest(url, _credential(args, person), approval_id, key, person))
    if args.json:
        emit(
            ApprovalsRerequestJson(
                approval_id=approval_id,
                accepted=reply.accepted,
                reason_codes=reply.reason_codes,
                proposed_again=reply.proposed_again,
                new_approval_id=reply.new_approval_id,
                waited_ms=reply.waited_ms,
            )
        )
    elif reply.accepted:
        rows = [("approval id", approval_id), ("asked again", asked_again_words(reply))]
        if reply.new_approval_id is not None:
            rows.append(("new approval id", reply.new_approval_id))
        table(("field", "value"), rows)
    if not reply.accepted:
        fail(f"not asked again: {', '.join(reply.reason_codes) or 'no reason given'}")
    return 0
