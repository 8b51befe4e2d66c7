"""Attachments: the documents an action sends are shown, bound, and sent as approved.

The approver sees the exact action, documents included: the connector declares which
arguments are attachments; the held content includes them, hashed into the binding
like the rest. The design and who reads the
bytes: :mod:`smf_assurance.subjects.attachments`.

What these tests prove:

- The demo filing's PDF is a real PDF (its cross-reference table points at its
  objects); an attachment opens only when it is what it says: valid base64, at most
  the size limit, a PDF that starts ``%PDF-``, text that is UTF-8, a media type the
  page can show, a plain file name, and bytes whose SHA-256 is the digest they carry.
  Each failure has its own reason code.
- Through the real gate (real nats-server, real SQLite): a filing whose declared
  attachment does not match its digest is denied ``attachment_digest_mismatch`` and
  held nowhere; so is one that merely claims an attachment in an undeclared argument.
- The held filing shows the attorney the PDF's bytes inside the arguments the binding
  hashes; after allow-once the order on ``smf.execute.court-efiling`` carries exactly
  those bytes.
- Bytes changed in the gate's store after the attorney looked (a well-formed PDF with
  its own correct digest, so only the binding can catch it) break the binding: the
  allow-once signed for what was shown is refused ``binding_changed``, the approval is
  closed, and no order reaches the connector's subject (stream and a live subscriber).

What they do not prove: the page's own digest check and rendering (see
``tests/browser/test_lawyer_view.py``); anything about documents larger than the bus's 1 MiB
message limit (refused by the bus before the gate sees them).
"""

from __future__ import annotations

import base64
import json
import re
from typing import Any, Final

import msgspec
import pytest
from nats.aio.client import Client

from smf_assurance.approver.client import content_matches
from smf_assurance.approver.directory import Directory
from smf_assurance.ops.cli.commands.approvals import _print_view
from smf_assurance.ops.demo.script import MOTION_PDF, SCENARIOS
from smf_assurance.ops.local.stack import Stack
from smf_assurance.ops.local.state import StateDir
from smf_assurance.pipeline.assembly import RunningGate
from smf_assurance.subjects import names
from smf_assurance.subjects.approvals import ApprovalView
from smf_assurance.subjects.attachments import (
    MAX_ATTACHMENT_BYTES,
    AttachmentError,
    attachment_argument,
    open_attachment,
)
from smf_assurance.subjects.canonical import identity_of, sha256_identity
from tests.support.approval_desk import (
    ATTORNEY,
    approver,
    clock,
    court_filing,
    gate,
    held_filing,
    ledger_rows,
    order_count,
    orders,
    runtime,
    state_of,
)
from tests.support.attachments import OTHER_PDF, _tamper
from tests.support.cli_ops import arun, hold_court_filing, key_args, stack, table_value
from tests.support.console import a_binding

__all__ = ["clock", "gate", "stack"]

FILING: Final = SCENARIOS[0]


def test_the_demo_filing_is_a_real_pdf() -> None:
    """Every cross-reference entry points at its object, and startxref at the table."""
    pdf = MOTION_PDF
    assert pdf.startswith(b"%PDF-1.4\n")
    assert pdf.endswith(b"%%EOF\n")
    startxref = int(re.findall(rb"startxref\n(\d+)\n", pdf)[-1])
    assert pdf[startxref:].startswith(b"xref\n0 6\n")
    entries = re.findall(rb"(\d{10}) 00000 n \n", pdf[startxref:])
    assert len(entries) == 5
    for number, offset in enumerate(entries, start=1):
        assert pdf[int(offset) :].startswith(b"%d 0 obj\n" % number)
    stream = re.search(rb"<< /Length (\d+) >>\nstream\n(.*?)\nendstream", pdf, re.S)
    assert stream is not None
    assert int(stream[1]) == len(stream[2])
    assert b"(MOTION TO COMPEL DISCOVERY) Tj" in pdf


def test_an_attachment_opens_to_its_own_bytes() -> None:
    attachment, data = open_attachment(attachment_argument("m.pdf", "application/pdf", MOTION_PDF))
    assert data == MOTION_PDF
    assert attachment.sha256 == sha256_identity(MOTION_PDF)
    text = b"Exhibit A: the letter of 3 March.\n"
    assert open_attachment(attachment_argument("a.txt", "text/plain", text))[1] == text


def _with(**changes: Any) -> dict[str, Any]:
    return {**attachment_argument("m.pdf", "application/pdf", MOTION_PDF), **changes}


REFUSED: Final[dict[str, tuple[Any, str]]] = {
    "other_bytes": (_with(data_b64=base64.b64encode(OTHER_PDF).decode()), "digest_mismatch"),
    "not_base64": (_with(data_b64="not base64!"), "not_base64"),
    "pdf_that_is_not": (
        attachment_argument("m.pdf", "application/pdf", b"<html>"),
        "type_mismatch",
    ),
    "text_not_utf8": (attachment_argument("a.txt", "text/plain", b"\xff\xfe"), "type_mismatch"),
    "too_large": (
        attachment_argument("a.txt", "text/plain", b"a" * (MAX_ATTACHMENT_BYTES + 1)),
        "too_large",
    ),
    "far_too_large": (
        attachment_argument("a.txt", "text/plain", b"a" * (2 * MAX_ATTACHMENT_BYTES)),
        "attachment_invalid",  # its base64 is over the length bound: never decoded
    ),
    "html": (_with(media_type="text/html"), "attachment_invalid"),
    "path_in_name": (_with(filename="../etc/passwd"), "attachment_invalid"),
    "unknown_field": (_with(url="https://example.com/m.pdf"), "attachment_invalid"),
    "not_an_object": ("m.pdf", "attachment_invalid"),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_an_attachment_that_is_not_what_it_says_is_refused(case: str) -> None:
    value, reason = REFUSED[case]
    with pytest.raises(AttachmentError) as caught:
        open_attachment(value)
    assert caught.value.reason_code.endswith(reason)


# --- through the gate ---------------------------------------------------------------------


async def test_a_filing_whose_document_is_not_its_digest_is_denied_and_not_held(
    gate: RunningGate, nc: Client, approvers_state: StateDir
) -> None:
    client = runtime(nc, approvers_state)
    swapped = _with(data_b64=base64.b64encode(OTHER_PDF).decode())
    for arguments in (
        {**FILING.arguments, "document_file": swapped},
        # Undeclared, but it says it is an attachment: it is checked all the same.
        {**FILING.arguments, "exhibit": swapped},
    ):
        verdict = await client.propose(court_filing(client, arguments=arguments))
        assert (verdict.outcome, verdict.approval_id) == ("deny", None)
        assert "attachment_digest_mismatch" in verdict.reason_codes
    assert await order_count(gate.js) == 0


async def test_the_attorney_sees_the_pdf_and_the_order_carries_those_bytes(
    gate: RunningGate, nc: Client, approvers_state: StateDir
) -> None:
    verdict = await held_filing(nc, approvers_state)
    assert verdict.approval_id is not None
    view = await approver(nc, approvers_state, ATTORNEY).show(verdict.approval_id)
    shown = json.loads(view.arguments_json)["document_file"]
    assert base64.b64decode(shown["data_b64"]) == MOTION_PDF
    assert shown["sha256"] == sha256_identity(MOTION_PDF)
    # The bytes are inside what the binding hashes.
    assert identity_of(json.loads(view.arguments_json)) == view.binding.canonical_args_hash
    assert content_matches(view)

    reply = await approver(nc, approvers_state, ATTORNEY).resolve(
        verdict.approval_id, "allow-once", view.binding_digest
    )
    assert reply.accepted, reply
    ((order, _),) = await orders(gate.js, approvers_state)
    sent = order.arguments["document_file"]
    assert base64.b64decode(sent["data_b64"]) == MOTION_PDF
    assert open_attachment(sent)[1] == MOTION_PDF


@pytest.mark.claim("exact-action-approval.binding-changed")
async def test_a_document_changed_after_approval_breaks_the_binding_and_nothing_is_sent(
    gate: RunningGate, nc: Client, approvers_state: StateDir
) -> None:
    verdict = await held_filing(nc, approvers_state)
    approval_id = verdict.approval_id
    assert approval_id is not None
    attorney = approver(nc, approvers_state, ATTORNEY)
    view = await attorney.show(approval_id)
    assert content_matches(view)
    connector_subject = await nc.subscribe(names.execute_subject("court-efiling"))
    await nc.flush()

    _tamper(approvers_state, approval_id, OTHER_PDF)
    reply = await attorney.resolve(approval_id, "allow-once", view.binding_digest)

    assert (reply.accepted, reply.reason_codes) == (False, ("binding_changed",))
    assert await order_count(gate.js) == 0
    await nc.flush()
    assert connector_subject.pending_msgs == 0
    assert await state_of(gate, approval_id) == "invalidated"
    assert ("invalidated", ("binding_changed",)) in ledger_rows(approvers_state.ledger, approval_id)


# --- the approver's command line -------------------------------------------------------


async def test_the_python_check_refuses_a_swapped_or_broken_document(
    gate: RunningGate, nc: Client, approvers_state: StateDir
) -> None:
    """``content_matches`` (the CLI's and the Python approver's check) covers the
    arguments and each document, as the page's checks do."""
    verdict = await held_filing(nc, approvers_state)
    assert verdict.approval_id is not None
    view = await approver(nc, approvers_state, ATTORNEY).show(verdict.approval_id)
    assert content_matches(view)
    arguments = json.loads(view.arguments_json)
    swapped = attachment_argument("motion-to-compel.pdf", "application/pdf", OTHER_PDF)
    broken = arguments["document_file"] | {"sha256": sha256_identity(OTHER_PDF)}
    for changed in (
        json.dumps({**arguments, "document_file": swapped}),  # a true digest, not the bound one
        json.dumps({**arguments, "document_file": broken}),
        "not json",
        "[]",
    ):
        assert not content_matches(msgspec.structs.replace(view, arguments_json=changed))


async def test_approvals_show_names_each_document_and_leaves_its_bytes_out(
    stack: Stack, capsys: pytest.CaptureFixture[str]
) -> None:
    approval = await hold_court_filing(stack)
    argv = ["approvals", "show", approval, "--nats", stack.url, *key_args(stack, "attorney-alex")]
    code, out, _ = await arun(argv, capsys)
    assert code == 0, out
    assert table_value(out, "document document_file") == (
        f"motion-to-compel.pdf, application/pdf, {len(MOTION_PDF)} bytes, "
        f"{sha256_identity(MOTION_PDF)} (matches its bytes)"
    )
    data_b64 = FILING.arguments["document_file"]["data_b64"]
    assert data_b64[:40] not in out
    assert "(the bytes of document document_file)" in table_value(out, "arguments")

    # A document whose bytes are not its digest: named, not described, and a mismatch.
    broken = _with(data_b64=base64.b64encode(OTHER_PDF).decode())
    view = ApprovalView(
        schema="smf.approval-view/1",
        binding=a_binding("tenant-acme", 1_000_000),
        binding_digest="sha256:" + "c" * 64,
        state="pending",
        native_tool="court_efile",
        destination_address="sdny",
        content="text",
        arguments_json=json.dumps({"document_file": broken}),
    )
    assert not content_matches(view)
    _print_view(view, False, Directory().shown("tenant-acme", "m", "sdny", None))
    printed = capsys.readouterr().out
    assert table_value(printed, "document document_file") == "NOT SHOWN: attachment_digest_mismatch"
