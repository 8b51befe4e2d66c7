"""The tenant directory: display names for the bound ids, never guessed, never in evidence.

The destination "resolved to a
display form (court name, case caption/docket for a filing, recipient name and address
for e-mail), matter and client display names from a tenant directory the operator
maintains (never in the ledger)". :mod:`smf_assurance.approver.directory`.

What these tests prove:

- A court the directory names is shown by name with the matter's caption and docket
  there; a recipient by name; a matter with its client. Every id the directory does not
  hold (an unknown court, recipient or matter, a court with no case for this matter, an
  id only another tenant's file holds, a near miss in case) is shown as the raw id with
  ``in_directory = false`` and no name.
- A malformed file (not TOML, an unknown key, a missing name, the wrong schema, a file
  named for another tenant, a case at a court the file does not name, a folder that is a
  file) is refused whole with one line naming the file; the console does not start on it
  (``start_console`` raises before it connects; ``smf-assurance console`` and
  ``approvals show`` exit 1 with one line), and no directory is an empty one.
- Through the real stack, ``approvals show --directory`` prints the court's name, the
  caption and docket, the matter and client by name beside their raw ids, and its
  ``--json`` carries them in ``display``; none of those names reaches the evidence
  ledger file.

What they do not prove: the page's rendering of them (``tests/browser/test_lawyer_view.py``
does, in a browser), or that the operator's names are right (the directory is the
operator's word, shown as theirs).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Final

import pytest

from smf_assurance.approver.console.server import ConsoleSettings, start_console
from smf_assurance.approver.directory import (
    DestinationShown,
    Directory,
    DirectoryError,
    DirectoryShown,
    MatterShown,
    load_directory,
)
from smf_assurance.ops.local.natsserver import reserve_port
from smf_assurance.ops.local.stack import Stack
from tests.support.cli_ops import (
    arun,
    assert_one_line_failure,
    hold_court_filing,
    key_args,
    stack,
    table_value,
)
from tests.support.tenant_directory import (
    CAPTION,
    CLIENT,
    COURT_NAME,
    DIRECTORY_TOML,
    DOCKET,
    MATTER,
    MATTER_NAME,
    TENANT,
    write_directory,
)

__all__ = ["stack"]


@pytest.fixture
def directory(tmp_path: Path) -> Directory:
    other = DIRECTORY_TOML.replace(TENANT, "tenant-other").replace(COURT_NAME, "Other court")
    folder = write_directory(tmp_path / "directory")
    write_directory(
        folder, other + '\n[courts.nysd]\nname = "Only the other tenant"\n', "tenant-other"
    )
    return load_directory(folder)


def test_a_court_filing_is_shown_with_the_court_caption_docket_matter_and_client(
    directory: Directory,
) -> None:
    shown = directory.shown(TENANT, MATTER, "sdny", "electronic_filing")
    assert shown == DirectoryShown(
        destination=DestinationShown(
            id="sdny",
            kind="court",
            in_directory=True,
            name=COURT_NAME,
            caption=CAPTION,
            docket=DOCKET,
        ),
        matter=MatterShown(id=MATTER, in_directory=True, name=MATTER_NAME, client=CLIENT),
    )


def test_a_known_recipient_is_shown_by_name(directory: Directory) -> None:
    shown = directory.shown(TENANT, MATTER, "counsel@globex.example", "email")
    assert shown.destination == DestinationShown(
        id="counsel@globex.example",
        kind="recipient",
        in_directory=True,
        name="Dana Whitfield, counsel for Globex",
    )


@pytest.mark.parametrize(
    ("tenant", "matter", "address", "channel", "kind"),
    [
        (TENANT, MATTER, "nysd", "electronic_filing", "court"),  # only the other tenant's file
        (TENANT, MATTER, "SDNY", "electronic_filing", "court"),  # a near miss is not a match
        (TENANT, MATTER, "someone@globex.example", "email", "recipient"),
        (TENANT, MATTER, "sdny", "email", "recipient"),  # a court id is not a recipient
        (TENANT, MATTER, "counsel@globex.example", "electronic_filing", "court"),
        (TENANT, MATTER, "sdny", "web", "other"),
        ("tenant-nobody", MATTER, "sdny", "electronic_filing", "court"),
    ],
)
def test_an_id_the_directory_does_not_hold_is_shown_raw_and_marked(
    directory: Directory, tenant: str, matter: str, address: str, channel: str, kind: str
) -> None:
    shown = directory.shown(tenant, matter, address, channel)
    assert shown.destination == DestinationShown(id=address, kind=kind, in_directory=False)  # type: ignore[arg-type]


def test_an_unknown_matter_is_shown_raw_and_a_court_without_its_case_names_no_case(
    directory: Directory,
) -> None:
    unknown = directory.shown(TENANT, "matter-unknown", "sdny", "electronic_filing")
    assert unknown.matter == MatterShown(id="matter-unknown", in_directory=False)
    # The court is known, but this matter has no case there: no caption is borrowed.
    assert (unknown.destination.name, unknown.destination.caption) == (COURT_NAME, None)
    edny = directory.shown(TENANT, MATTER, "edny", "electronic_filing").destination
    assert (edny.in_directory, edny.caption, edny.docket) == (True, None, None)


def test_without_a_channel_the_address_is_looked_up_as_court_then_recipient(
    directory: Directory,
) -> None:
    assert directory.shown(TENANT, MATTER, "sdny", None).destination.caption == CAPTION
    email = directory.shown(TENANT, MATTER, "counsel@globex.example", None).destination
    assert (email.kind, email.in_directory) == ("recipient", True)
    assert directory.shown(TENANT, MATTER, "x", None).destination.kind == "other"


def test_no_directory_is_an_empty_one(tmp_path: Path) -> None:
    for folder in (None, tmp_path / "absent"):
        shown = load_directory(folder).shown(TENANT, MATTER, "sdny", "electronic_filing")
        assert not shown.destination.in_directory
        assert not shown.matter.in_directory


BROKEN: Final = {
    "not_toml": ("schema = ", "is not TOML"),
    "unknown_key": (DIRECTORY_TOML + "\nbanner = 'x'\n", "banner"),
    "missing_client": (DIRECTORY_TOML.replace(f'client = "{CLIENT}"', ""), "client"),
    "empty_name": (DIRECTORY_TOML.replace(COURT_NAME, ""), "name"),
    "wrong_schema": (DIRECTORY_TOML.replace("/1", "/9"), "schema"),
    "another_tenant": (DIRECTORY_TOML.replace(f'"{TENANT}"', '"tenant-other"'), "file's name"),
    "case_at_unknown_court": (
        DIRECTORY_TOML + f'\n[matters.{MATTER}.cases.cdca]\ncaption = "c"\ndocket = "d"\n',
        "no [courts.cdca]",
    ),
}


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_a_malformed_file_is_refused_whole_in_one_line(tmp_path: Path, case: str) -> None:
    text, needle = BROKEN[case]
    folder = write_directory(tmp_path / "directory", text)
    with pytest.raises(DirectoryError) as caught:
        load_directory(folder)
    message = str(caught.value)
    assert "\n" not in message
    assert needle in message
    assert str(folder / f"{TENANT}.toml") in message


def test_a_tenant_id_that_is_no_tenant_and_an_unreadable_file_are_refused(
    tmp_path: Path,
) -> None:
    spaced = DIRECTORY_TOML.replace(f'"{TENANT}"', '"tenant acme"')
    folder = write_directory(tmp_path / "spaced", spaced, "tenant acme")
    with pytest.raises(DirectoryError, match="tenant_id is not a tenant id"):
        load_directory(folder)
    unreadable = tmp_path / "unreadable"
    (unreadable / f"{TENANT}.toml").mkdir(parents=True)
    with pytest.raises(DirectoryError, match="cannot read"):
        load_directory(unreadable)


def test_a_folder_that_is_a_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "directory"
    path.write_text("")
    with pytest.raises(DirectoryError, match="is not a folder"):
        load_directory(path)


async def test_the_console_does_not_start_on_a_malformed_directory(tmp_path: Path) -> None:
    """Refused before it connects: the bus URL here has nothing listening."""
    folder = write_directory(tmp_path / "directory", "schema = ")
    dead = reserve_port()
    try:
        settings = ConsoleSettings(
            nats_url=f"nats://127.0.0.1:{dead.port}",
            registry=tmp_path / "registry.json",
            directory=folder,
        )
        with pytest.raises(DirectoryError, match="is not TOML"):
            await start_console(settings)
    finally:
        dead.close()


async def test_the_console_command_refuses_a_malformed_directory_in_one_line(
    tmp_path: Path, stack: Stack, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = write_directory(tmp_path / "directory", DIRECTORY_TOML + "\nbanner = 'x'\n")
    argv = ["console", "--nats", stack.url, "--registry", str(stack.state.registry)]
    code, _, err = await arun([*argv, "--directory", str(folder), "--port", "0"], capsys)
    assert_one_line_failure(code, err, "cannot read the tenant directory", "banner")


async def test_approvals_show_names_the_court_case_matter_and_client(
    tmp_path: Path, stack: Stack, capsys: pytest.CaptureFixture[str]
) -> None:
    approval = await hold_court_filing(stack)
    folder = write_directory(tmp_path / "directory")
    common = ["approvals", "show", approval, "--nats", stack.url, *key_args(stack, "attorney-alex")]
    argv = [*common, "--directory", str(folder)]

    code, out, _ = await arun(argv, capsys)
    assert code == 0, out
    assert table_value(out, "court") == f"{COURT_NAME} (sdny)"
    assert table_value(out, "case") == f"{CAPTION}, docket {DOCKET}"
    assert table_value(out, "matter") == f"{MATTER_NAME} ({MATTER})"
    assert table_value(out, "client") == CLIENT

    code, out, _ = await arun([*argv, "--json"], capsys)
    assert code == 0
    display = json.loads(out)["display"]
    assert display["destination"] == {
        "id": "sdny",
        "kind": "court",
        "in_directory": True,
        "name": COURT_NAME,
        "caption": CAPTION,
        "docket": DOCKET,
    }
    assert display["matter"]["client"] == CLIENT

    # Without the directory: the raw ids, each marked; nothing guessed.
    empty = tmp_path / "no-directory"
    code, out, _ = await arun([*common, "--directory", str(empty)], capsys)
    assert code == 0, out
    assert table_value(out, "destination") == "sdny (not in the directory)"
    assert table_value(out, "matter") == f"{MATTER} (not in the directory)"

    # A malformed directory: one line, and nothing is asked of the gate.
    write_directory(folder, "schema = ")
    code, _, err = await arun(argv, capsys)
    assert_one_line_failure(code, err, "cannot read the tenant directory", "is not TOML")

    # The names are the operator's display data: none of them is in the evidence.
    files = stack.state.ledger.parent.glob(stack.state.ledger.name + "*")
    ledger = b"".join(path.read_bytes() for path in files)
    assert ledger
    for name in (COURT_NAME, CAPTION, DOCKET, CLIENT, MATTER_NAME):
        assert name.encode() not in ledger
