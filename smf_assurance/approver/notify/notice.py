"""What a notification says: that an approval waits, where, and until when; what else, only
where the firm allows it.

A notification carries a link to the approval and, by default, no content. A
:class:`Notice` is built from three fields of the announcement (approval id, tenant,
expiry), the console's base URL and the tenant's time zone (the operator's
configuration: the expiry in the time its approvers read), and every message format
below is rendered from a Notice alone, so no held text, argument, actor, tool or rule
can reach an inbox or a chat channel: they are not in scope here. (The announcement
itself carries no content either, ``smf_assurance.subjects.approvals.PendingAnnouncement``;
this is the second wall.) E-mail and chat leave the firm's control.

Where a firm chooses otherwise for a tenant (its notifier configuration's
``content = true``, and the gate's operator's ``notices.toml``), a notice also carries
:class:`NoticeWords`: the matter, the destination and the document's title as the gate's
summary gives them (``smf.approval.summary``), by the names the tenant directory keeps
for them. Nothing else of the action: not the content beyond its first line, the
arguments, the actor or a rule.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, tzinfo
from email.message import EmailMessage
from typing import Any, Literal
from urllib.parse import quote

import msgspec

from smf_assurance.approver.directory import Directory
from smf_assurance.subjects.approvals import ApprovalSummary, PendingAnnouncement

NoticeKind = Literal["pending", "reminder"]


@dataclass(frozen=True, slots=True)
class NoticeWords:
    """What a notice may say of the action, where the firm allows it: each a line."""

    matter: str
    destination: str | None
    document: str

    @property
    def pairs(self) -> tuple[tuple[str, str], ...]:
        to = () if self.destination is None else (("To", self.destination),)
        return (("Document", self.document), *to, ("Matter", self.matter))


def words_for(summary: ApprovalSummary, directory: Directory, channel: str | None) -> NoticeWords:
    """The summary's ids by the names the tenant's directory keeps for them (a court's
    name with the matter's caption and docket, a recipient's name, the matter's name and
    client), else the raw ids, as the console shows them."""
    address = summary.destination or ""
    shown = directory.shown(summary.tenant_id, summary.matter_id, address, channel)
    matter = shown.matter
    matter_words = (
        f"{matter.name}, client {matter.client} ({summary.matter_id})"
        if matter.in_directory
        else summary.matter_id
    )
    where = shown.destination
    destination = summary.destination
    if summary.destination is not None and where.in_directory:
        destination = f"{where.name} ({summary.destination})"
        if where.caption is not None:
            destination += f", {where.caption}, Docket No. {where.docket}"
    return NoticeWords(matter=matter_words, destination=destination, document=summary.document)


@dataclass(frozen=True, slots=True)
class Notice:
    kind: NoticeKind
    approval_id: str
    tenant_id: str
    expires_at_ms: int
    link: str
    zone: tzinfo = field(default=UTC)
    words: NoticeWords | None = None
    """Only where the firm allows content in this tenant's notices; else None."""

    @property
    def expiry(self) -> str:
        """Absolute and with its time zone, never a locale's "12/1/2026, 8:50:19 AM":
        ``2026-12-05 03:16:55 UTC-05:00 (America/New_York)`` in the tenant's zone, as
        the console writes it, or ``2026-12-05 08:16:55 UTC``."""
        moment = datetime.fromtimestamp(self.expires_at_ms / 1000, tz=self.zone)
        if self.zone is UTC:
            return moment.strftime("%Y-%m-%d %H:%M:%S UTC")
        offset = moment.strftime("%z")
        return f"{moment:%Y-%m-%d %H:%M:%S} UTC{offset[:3]}:{offset[3:]} ({self.zone})"

    @property
    def headline(self) -> str:
        if self.kind == "reminder":
            return f"Reminder: an approval for {self.tenant_id} expires at {self.expiry}"
        return f"An approval for {self.tenant_id} is waiting"

    @property
    def subject(self) -> str:
        """Short enough for one header line; the body says the rest."""
        if self.kind == "reminder":
            return f"Reminder: approval expiring ({self.tenant_id})"
        return f"Approval waiting ({self.tenant_id})"

    @property
    def pairs(self) -> tuple[tuple[str, str], ...]:
        """What the notice states, by name: the action's words (where allowed), then the
        approval, its tenant and its expiry."""
        words = self.words.pairs if self.words is not None else ()
        return (
            *words,
            ("Approval", self.approval_id),
            ("Tenant", self.tenant_id),
            ("Expires", self.expiry),
        )

    @property
    def facts(self) -> tuple[str, ...]:
        """Every line but the headline and the link."""
        lines = [f"{name}: {value}" for name, value in self.pairs]
        lines[-1] += " (denied if nobody decides by then)"
        return tuple(lines)

    @property
    def lines(self) -> tuple[str, ...]:
        return (self.headline, *self.facts, f"Review it in the console: {self.link}")


def notice_for(
    announcement: PendingAnnouncement,
    kind: NoticeKind,
    console_url: str,
    zone: tzinfo = UTC,
    words: NoticeWords | None = None,
) -> Notice:
    """The only fields of an announcement that may leave: id, tenant, expiry (written in
    ``zone``); and ``words``, where the firm allows them."""
    link = f"{console_url.rstrip('/')}/?approval={quote(announcement.approval_id, safe='')}"
    return Notice(
        kind=kind,
        approval_id=announcement.approval_id,
        tenant_id=announcement.tenant_id,
        expires_at_ms=announcement.expires_at_ms,
        link=link,
        zone=zone,
        words=words,
    )


def email_for(notice: Notice, sender: str, recipient: str) -> EmailMessage:
    message = EmailMessage()
    message["From"] = sender
    message["To"] = recipient
    message["Subject"] = notice.subject
    # 7bit, not quoted-printable: the ids and the link stay whole in the bytes sent;
    # 8bit only for words a directory spells beyond ASCII (a name like "Ståhl")
    text = "\n".join(notice.lines) + "\n"
    message.set_content(text, cte="7bit" if text.isascii() else "8bit")
    return message


def slack_body(notice: Notice) -> bytes:
    """Slack's incoming-webhook format: ``text`` (the fallback) plus blocks with a button."""
    body: dict[str, Any] = {
        "text": notice.headline,
        "blocks": [
            {
                "type": "section",
                "text": {"type": "mrkdwn", "text": "\n".join((notice.headline, *notice.facts))},
            },
            {
                "type": "actions",
                "elements": [
                    {
                        "type": "button",
                        "text": {"type": "plain_text", "text": "Review in the console"},
                        "url": notice.link,
                    }
                ],
            },
        ],
    }
    return msgspec.json.encode(body)


def teams_body(notice: Notice) -> bytes:
    """A Teams connector MessageCard: title, facts, one OpenUri action to the console."""
    body: dict[str, Any] = {
        "@type": "MessageCard",
        "@context": "https://schema.org/extensions",
        "summary": notice.headline,
        "title": notice.headline,
        "sections": [{"facts": [{"name": name, "value": value} for name, value in notice.pairs]}],
        "potentialAction": [
            {
                "@type": "OpenUri",
                "name": "Review in the console",
                "targets": [{"os": "default", "uri": notice.link}],
            }
        ],
    }
    return msgspec.json.encode(body)
