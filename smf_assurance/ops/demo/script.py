"""The scripted runtime adapter's proposals for the governed scenarios.

What a runtime would send for each scenario, as a Proposal: tool, final
arguments, content, destination, actor and data facts. The demo and the bus
tests drive the gate with these.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final

from smf_assurance.subjects.attachments import attachment_argument
from smf_assurance.subjects.messages import ActorContext, DataFacts, ProposedDestination


def one_page_pdf(lines: tuple[str, ...]) -> bytes:
    """A real one-page PDF (PDF 1.4, Helvetica, one line per entry of ``lines``, ASCII),
    written byte by byte with a correct cross-reference table, so any PDF reader opens
    it; the demo's filing attaches one (issue 23) and the tests need one without a new
    dependency."""

    def literal(text: str) -> str:
        escaped = text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")
        return f"({escaped.encode('ascii', 'replace').decode('ascii')})"

    shown = " 0 -22 Td ".join(f"{literal(line)} Tj" for line in lines)
    stream = f"BT /F1 14 Tf 72 720 Td {shown} ET".encode("ascii")
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] "
        b"/Resources << /Font << /F1 4 0 R >> >> /Contents 5 0 R >>",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
        b"<< /Length %d >>\nstream\n%s\nendstream" % (len(stream), stream),
    ]
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n%s\nendobj\n" % (number, body)
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (
        len(objects) + 1,
        xref,
    )
    return bytes(out)


MOTION_PDF: Final = one_page_pdf(
    (
        "UNITED STATES DISTRICT COURT, SOUTHERN DISTRICT OF NEW YORK",
        "Acme Corp. v. Globex Inc.",
        "MOTION TO COMPEL DISCOVERY",
        "Plaintiff moves to compel production of documents.",
    )
)
"""Scenario 1's filing, as the court would receive it (issue 23: the approver sees it)."""


def actor(actor_id: str, *roles: str) -> ActorContext:
    """An actor of the demo firm, on the demo matter."""
    return ActorContext(
        domain="litigation",
        tenant_id="tenant-acme",
        organization_id="org-acme-llp",
        matter_id="matter-2026-0042",
        actor_id=actor_id,
        actor_roles=roles,
        governing_laws=("US-NY",),
    )


@dataclass(frozen=True, slots=True)
class ScriptedAction:
    name: str
    expected_outcome: str
    expected_reason: str
    native_tool: str
    arguments: dict[str, Any]
    actor: ActorContext
    facts: DataFacts
    content: str = ""
    destination: ProposedDestination = field(default_factory=ProposedDestination)
    connector: str | None = None


SCENARIOS: Final[tuple[ScriptedAction, ...]] = (
    ScriptedAction(
        name="1 court filing by a paralegal",
        expected_outcome="held",
        expected_reason="attorney_approval_required_for_transmission",
        native_tool="court_efile",
        arguments={
            "court": "sdny",
            "document": "motion-to-compel.pdf",
            "document_file": attachment_argument(
                "motion-to-compel.pdf", "application/pdf", MOTION_PDF
            ),
        },
        content="Motion to compel discovery, Acme v. Globex (privileged draft).",
        actor=actor("paralegal-pat", "paralegal"),
        facts=DataFacts(
            classification="privileged",
            injection_taint="clear",
            redaction_status="none",
            legal_hold=False,
        ),
        connector="court-efiling",
    ),
    ScriptedAction(
        name="2 deletion under legal hold",
        expected_outcome="deny",
        expected_reason="legal_hold_blocks_deletion",
        native_tool="dms_delete",
        arguments={"document_id": "doc-4711"},
        actor=actor("associate-ann", "associate"),
        facts=DataFacts(classification="confidential", injection_taint="clear", legal_hold=True),
        connector="dms",
    ),
    ScriptedAction(
        name="3 tainted external email",
        expected_outcome="deny",
        expected_reason="injection_tainted_egress",
        native_tool="send_message",
        arguments={"to": "opposing@globex.example", "body": "Our settlement floor is $2M."},
        actor=actor("associate-ann", "associate"),
        facts=DataFacts(
            classification="confidential", injection_taint="tainted", redaction_status="none"
        ),
        destination=ProposedDestination(locality="external"),
    ),
    ScriptedAction(
        name="5 floor: uncovered command",
        expected_outcome="deny",
        expected_reason="no_applicable_policy_for_consequential_operation",
        native_tool="terminal",
        arguments={"command": "rm -rf build"},
        actor=actor("associate-ann", "associate"),
        facts=DataFacts(classification="internal", injection_taint="clear"),
    ),
    ScriptedAction(
        name="6 retention deletion (allowed)",
        expected_outcome="allow",
        expected_reason="retention_schedule_deletion",
        native_tool="dms_delete",
        arguments={"document_id": "doc-1207"},
        actor=actor("associate-ann", "associate"),
        facts=DataFacts(classification="internal", injection_taint="clear", legal_hold=False),
        connector="dms",
    ),
)
