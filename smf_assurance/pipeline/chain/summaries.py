"""``smf.approval.summary``: the words a notice may carry, where the firm allows it.

A notice is content-free by default (``smf_assurance.approver.notify.notice``): it goes
by e-mail and chat, out of the firm's control, to approvers who have not signed in. A
firm may choose otherwise for some tenants, so that a lawyer with five held filings can
tell from the notice which one is for the hearing. Two opt-ins make that happen, each
able to refuse alone:

- **The gate's operator** names the tenants whose notices may carry words
  (``GateConfig.notice_content_tenants``, from the state's ``notices.toml``); this desk
  answers for no other tenant. None by default.
- **The notifier's configuration** asks only for its tenants marked ``content = true``.

What a summary holds: the matter id, the destination address and the document's title
(the first line of what would be sent, and the attached files' names), each cut to
:data:`~smf_assurance.subjects.approvals.MAX_SUMMARY_CHARS`; never the content beyond
that line, the arguments, the actor or a rule. Only a pending approval is summarized.

Who asks is the server's word (:class:`~smf_assurance.pipeline.service.Requester`), as
for announcements, but stricter: only the console principal, in its own account on a bus
with authorization, is answered. A request from inside the gate's account or on a bus
without accounts could come from anyone, and is refused (``requester_not_console``), as
is one from any other principal. Refusals name no approval; the log carries counts only.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

import msgspec
import structlog

from smf_assurance.core.approval_rules import HeldAction
from smf_assurance.pipeline.service import Requester, StageRefusal
from smf_assurance.pipeline.stores.approvals import ApprovalError, ApprovalStore
from smf_assurance.subjects.approvals import (
    MAX_SUMMARY_CHARS,
    ApprovalSummary,
    SummaryReply,
    SummaryRequest,
)
from smf_assurance.subjects.attachments import claims_attachment
from smf_assurance.subjects.registry import KeyRegistry

log = structlog.get_logger(__name__)

REQUESTER_NOT_CONSOLE: Final = "requester_not_console"
MALFORMED_REQUEST: Final = "malformed_request"


def cut(text: str) -> str:
    """``text`` on one line, at most :data:`MAX_SUMMARY_CHARS` characters."""
    line = " ".join(text.split())
    if len(line) <= MAX_SUMMARY_CHARS:
        return line
    return line[: MAX_SUMMARY_CHARS - 3] + "..."


def document_title(content: str, arguments: Mapping[str, Any], native_tool: str) -> str:
    """What the console's list calls the document of a held action: the first line of
    what would be sent and the attached files' names (``app.js``, ``documentWords``),
    else the tool."""
    files = [
        str(value.get("filename") or name)
        for name, value in arguments.items()
        if claims_attachment(value)
    ]
    first = content.strip().split("\n", 1)[0].strip()
    if first and files:
        return cut(f"{first} ({', '.join(files)})")
    return cut(first or ", ".join(files) or native_tool)


def is_console(requester: Requester, registry: KeyRegistry) -> bool:
    """The console principal, named by the server as the account the request crossed from."""
    if not requester.crossed or requester.account is None:
        return False
    return any(
        p.name == requester.account and p.entry.role == "console"
        for p in registry.principals.values()
    )


@dataclass
class SummaryDesk:
    """Answers ``smf.approval.summary`` from the gate's approval store."""

    store: Callable[[], ApprovalStore]
    registry: Callable[[], KeyRegistry]
    """The release in force's registry, read at each request."""
    tenants: frozenset[str]
    """The tenants the gate's operator lets notices carry words of."""

    async def handle(self, data: bytes, requester: Requester) -> bytes:
        if not is_console(requester, self.registry()):
            raise StageRefusal(REQUESTER_NOT_CONSOLE)
        try:
            request = msgspec.json.decode(data, type=SummaryRequest)
        except msgspec.DecodeError as exc:
            raise StageRefusal(MALFORMED_REQUEST) from exc
        summaries = []
        for approval_id in dict.fromkeys(request.approval_ids):
            summary = await self._summary(approval_id) if self.tenants else None
            if summary is not None:
                summaries.append(summary)
        log.info("summaries_given", asked=len(request.approval_ids), given=len(summaries))
        reply = SummaryReply(schema="smf.approval-summary-reply/1", summaries=tuple(summaries))
        return msgspec.json.encode(reply)

    async def _summary(self, approval_id: str) -> ApprovalSummary | None:
        """A pending approval of an opted-in tenant, summarized; anything else is None
        (a store that cannot answer too: the notice stays content-free)."""
        try:
            record = await self.store().get(approval_id)
        except ApprovalError:
            return None
        if record is None or record.state != "pending" or record.held_payload is None:
            return None
        binding = record.binding
        if binding.tenant_id not in self.tenants:
            return None
        held = msgspec.json.decode(record.held_payload, type=HeldAction)
        return ApprovalSummary(
            approval_id=binding.approval_id,
            tenant_id=binding.tenant_id,
            matter_id=binding.matter_id,
            document=document_title(held.content, held.arguments, held.native_tool),
            destination=cut(held.destination_address) if held.destination_address else None,
        )
