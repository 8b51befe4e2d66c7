"""The words a notice may carry where the firm allows them, in process.

``smf_assurance.pipeline.chain.summaries`` (what the gate says of a held action),
``smf_assurance.approver.notify.notice`` (how a notice names it, by the tenant directory) and
``smf_assurance.ops.local.notices`` (the gate operator's opt-in). What these tests prove: the
document's title is the first line of what would be sent and the attached files' names,
else the files, else the tool, on one line of at most 200 characters; a notice names a court
with the matter's caption and docket, a recipient by name, and an id the directory does not
hold as the raw id; an e-mail stays 7bit unless a directory name is not ASCII; the operator's
file opts in exactly the tenants it names, none without it, and a malformed one is refused
naming the file. The gate's answer and the notices themselves, end to end:
``tests/bus/test_notify.py``.
"""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from smf_assurance.approver.directory import (
    Case,
    Court,
    Directory,
    Matter,
    Recipient,
    TenantDirectory,
)
from smf_assurance.approver.notify.notice import Notice, email_for, words_for
from smf_assurance.ops.cli.main import main
from smf_assurance.ops.demo.script import SCENARIOS
from smf_assurance.ops.local.notices import NOTICES_FILE, NoticesError, notice_content_tenants
from smf_assurance.pipeline.chain.summaries import cut, document_title
from smf_assurance.subjects.approvals import MAX_SUMMARY_CHARS, ApprovalSummary

pytestmark = pytest.mark.claim("notifications.content-where-allowed")

FILING = SCENARIOS[0]
APPROVAL = "sha256:" + "a" * 64
TENANT = "tenant-acme"
DIRECTORY = Directory(
    {
        TENANT: TenantDirectory(
            schema="smf.tenant-directory/1",
            tenant_id=TENANT,
            courts={"sdny": Court(name="S.D.N.Y.")},
            matters={
                "m-1": Matter(
                    name="Acme v. Globex",
                    client="Acme",
                    cases={"sdny": Case(caption="Acme v. Globex", docket="1:26-cv-1")},
                ),
                "m-2": Matter(name="Ståhl estate", client="Ståhl"),
            },
            recipients={"dana@globex.example": Recipient(name="Dana Whitfield")},
        )
    }
)


def summary(matter: str = "m-1", destination: str | None = "sdny") -> ApprovalSummary:
    return ApprovalSummary(
        approval_id=APPROVAL,
        tenant_id=TENANT,
        matter_id=matter,
        document="Motion (motion.pdf)",
        destination=destination,
    )


@pytest.mark.parametrize(
    ("content", "arguments", "title"),
    [
        pytest.param(
            "Motion to compel.\nSecond line.",
            FILING.arguments,
            "Motion to compel. (motion-to-compel.pdf)",
            id="first-line-and-files",
        ),
        pytest.param("", FILING.arguments, "motion-to-compel.pdf", id="files-only"),
        pytest.param("  A letter.  \n", {"to": "x"}, "A letter.", id="text-only"),
        pytest.param("\n", {}, "court_efile", id="nothing-but-the-tool"),
    ],
)
def test_a_document_title_is_what_the_consoles_list_calls_it(
    content: str, arguments: dict[str, object], title: str
) -> None:
    assert document_title(content, arguments, "court_efile") == title


def test_a_long_line_is_cut_to_one_notice_line() -> None:
    cut_line = cut("word " * 100)
    assert len(cut_line) == MAX_SUMMARY_CHARS
    assert cut_line.endswith("...")
    assert cut("a\tb\n c") == "a b c"


def test_a_notice_names_the_court_with_the_matters_case_and_the_matter_by_name() -> None:
    words = words_for(summary(), DIRECTORY, "electronic_filing")
    assert words.pairs == (
        ("Document", "Motion (motion.pdf)"),
        ("To", "S.D.N.Y. (sdny), Acme v. Globex, Docket No. 1:26-cv-1"),
        ("Matter", "Acme v. Globex, client Acme (m-1)"),
    )


def test_a_recipient_by_name_and_what_the_directory_does_not_hold_as_raw_ids() -> None:
    to_recipient = words_for(summary("m-9", "dana@globex.example"), DIRECTORY, "email")
    assert dict(to_recipient.pairs)["To"] == "Dana Whitfield (dana@globex.example)"
    assert dict(to_recipient.pairs)["Matter"] == "m-9"
    unknown = words_for(summary(destination="nowhere@x.example"), DIRECTORY, "email")
    assert dict(unknown.pairs)["To"] == "nowhere@x.example"
    nowhere = words_for(summary(destination=None), Directory(), None)
    assert [name for name, _ in nowhere.pairs] == ["Document", "Matter"]


def test_an_email_stays_7bit_unless_a_name_is_not_ascii() -> None:
    def mail(matter: str) -> str:
        words = words_for(summary(matter), DIRECTORY, "electronic_filing")
        notice = Notice("pending", APPROVAL, TENANT, 0, "https://c/", words=words)
        return str(
            email_for(notice, "a@firm.example", "b@firm.example")["Content-Transfer-Encoding"]
        )

    assert mail("m-1") == "7bit"
    assert mail("m-2") == "8bit"


def test_the_operators_file_opts_in_exactly_the_tenants_it_names(tmp_path: Path) -> None:
    assert notice_content_tenants(tmp_path) == frozenset()
    (tmp_path / NOTICES_FILE).write_text('content_tenants = ["tenant-acme", "tenant-beta"]\n')
    assert notice_content_tenants(tmp_path) == {"tenant-acme", "tenant-beta"}
    for bad in ('content_tenants = ["a.b"]\n', "content = true\n", "not toml ["):
        (tmp_path / NOTICES_FILE).write_text(bad)
        with pytest.raises(NoticesError, match=NOTICES_FILE):
            notice_content_tenants(tmp_path)


def test_up_refuses_a_notices_file_it_cannot_read_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = tmp_path / "state"
    state.mkdir()
    (state / NOTICES_FILE).write_text("content_tenants = 3\n")

    code = main(["up", "--state-dir", str(state)])

    err = capsys.readouterr().err
    assert code == 1
    assert err.startswith(f"smf-assurance: {state / NOTICES_FILE}: "), err
    assert err.count("\n") == 1
    assert [p.name for p in state.iterdir()] == [NOTICES_FILE]  # nothing made, nothing started


def test_a_summary_says_one_to_200_characters_of_each_thing() -> None:
    def decodes(document: str) -> bool:
        value = {
            "approval_id": APPROVAL,
            "tenant_id": TENANT,
            "matter_id": "m-1",
            "document": document,
            "destination": None,
        }
        try:
            msgspec.convert(value, ApprovalSummary)
        except msgspec.ValidationError:
            return False
        return True

    for size, fits in ((0, False), (1, True), (200, True), (201, False)):
        assert decodes("d" * size) is fits, size
