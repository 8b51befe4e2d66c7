"""What a notification says: that an approval waits, where, and until when. Nothing else.

A notification carries a link to the approval and
no content. A :class:`Notice` is built from three fields of the announcement
(approval id, tenant, expiry), the console's base URL and the tenant's time zone
(the operator's configuration: the expiry in the time its approvers read), and every message
format below is rendered from a Notice alone, so no held text, argument,
destination, matter, actor, tool or rule can reach an inbox or a chat channel:
they are not in scope here. (The announcement itself carries no content
either, ``smf_assurance.subjects.approvals.PendingAnnouncement``; this is the second wall.)
E-mail and chat leave the firm's control, which is why even the kind of action
stays out: the approver reads it in the console, signed in.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, tzinfo
from email.message import EmailMessage
from typing import Any, Literal
from urllib.parse import quote

import msgspec

from smf_assurance.subjects.approvals import PendingAnnouncement

NoticeKind = Literal["pending", "reminder"]


@dataclass(frozen=True, slots=True)
class Notice:
    kind: NoticeKind
    approval_id: str
    tenant_id: str
    expires_at_ms: int
    link: str
    zone: tzinfo = field(default=UTC)

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
    def lines(self) -> tuple[str, ...]:
        return (
            self.headline,
            f"Approval: {self.approval_id}",
            f"Tenant: {self.tenant_id}",
            f"Expires: {self.expiry} (denied if nobody decides by then)",
            f"Review it in the console: {self.link}",
        )


def notice_for(
    announcement: PendingAnnouncement, kind: NoticeKind, console_url: str, zone: tzinfo = UTC
) -> Notice:
    """The only fields of an announcement that may leave: id, tenant, expiry (written in
    ``zone``)."""
    link = f"{console_url.rstrip('/')}/?approval={quote(announcement.approval_id, safe='')}"
    return Notice(
        kind=kind,
        approval_id=announcement.approval_id,
        tenant_id=announcement.tenant_id,
        expires_at_ms=announcement.expires_at_ms,
        link=link,
        zone=zone,
    )


def email_for(notice: Notice, sender: str, recipient: str) -> EmailMessage:
    message = EmailMessage()
    message["From"] = sender
    message["To"] = recipient
    message["Subject"] = notice.subject
    # 7bit, not quoted-printable: the ids and the link stay whole in the bytes sent
    message.set_content("\n".join(notice.lines) + "\n", cte="7bit")
    return message


def slack_body(notice: Notice) -> bytes:
    """Slack's incoming-webhook format: ``text`` (the fallback) plus blocks with a button."""
    body: dict[str, Any] = {
        "text": notice.headline,
        "blocks": [
            {"type": "section", "text": {"type": "mrkdwn", "text": "\n".join(notice.lines[:4])}},
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
        "sections": [
            {
                "facts": [
                    {"name": "Approval", "value": notice.approval_id},
                    {"name": "Tenant", "value": notice.tenant_id},
                    {"name": "Expires", "value": notice.expiry},
                ]
            }
        ],
        "potentialAction": [
            {
                "@type": "OpenUri",
                "name": "Review in the console",
                "targets": [{"os": "default", "uri": notice.link}],
            }
        ],
    }
    return msgspec.json.encode(body)
