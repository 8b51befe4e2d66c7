"""``approvals resolve`` is deliberate.

The command line in-process (``smf_assurance.ops.cli.main.main``) against a real nats-server on
which a stand-in gate answers show requests with a view and records every
resolution it is sent (``tests/support/cli_ops.py``'s ``stand_in_gate``): what the
command signs is read back from those bytes and verified with the attorney's key.

What these tests prove:

- Without ``--yes`` and with no terminal on stdin, it exits 1 with one line,
  prints its refusal as JSON with ``--json``, and signs and sends nothing; it
  does not even reach the bus (against a bus with no gate it still says so,
  not "no gate answers").
- On a terminal it names the decision, the tool and the destination and signs
  only when the approver types ``yes``: any other answer exits 1 and sends
  nothing.
- A deny needs ``--reason`` from the closed list: an unknown reason, a deny
  without one, a reason or note on an allow-once, and a note that is not
  bounded plain text are usage errors (exit 2) and nothing is sent.
- ``deny --reason --note --yes`` sends one resolution whose signed payload
  carries the reason and the note as given.

What they do not prove: a real terminal's line discipline (stdin here is a
text stream that says it is a terminal); the gate's handling of the reason
(``tests/bus/test_deny_reasons.py``).
"""

from __future__ import annotations

import base64
import io
import json
from pathlib import Path

import pytest
from nats.aio.client import Client

from smf_assurance.ops.cli.main import main
from smf_assurance.subjects import dsse, names
from smf_assurance.subjects.approvals import ApprovalResolution
from smf_assurance.subjects.keys import load_private_key
from tests.support.cli_ops import arun, assert_one_line_failure, forged_view, run, stand_in_gate

VIEW = forged_view("the real filing")
APPROVAL = VIEW.binding.approval_id


class Terminal(io.StringIO):
    """Typed answers on a stream that says it is a terminal."""

    def isatty(self) -> bool:
        return True


@pytest.fixture
def attorney_key(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    path = tmp_path / "attorney-alex.key"
    assert run(["keys", "new", "--id", "attorney-alex", "--out", str(path)], capsys)[0] == 0
    return path


def opened(signed: bytes, key_file: Path) -> ApprovalResolution:
    key, _ = load_private_key(key_file)
    resolution, _ = dsse.open_struct(
        dsse.decode_envelope(signed),
        {key.key_id: key.verify_key},
        ApprovalResolution,
        names.PAYLOAD_RESOLUTION,
    )
    return resolution


async def test_no_terminal_and_no_yes_signs_nothing(
    nc: Client, nats_url: str, attorney_key: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    resolutions = await stand_in_gate(nc, VIEW)
    argv = ["approvals", "resolve", APPROVAL, "allow-once", "--nats", nats_url]
    code, out, err = await arun([*argv, "--key", str(attorney_key), "--json"], capsys)
    assert_one_line_failure(code, err, "no terminal to confirm on", "--yes", "nothing was signed")
    assert code == 1
    refusal = json.loads(out)
    assert (refusal["accepted"], refusal["reason_code"]) == (False, "confirmation_required")
    await nc.flush()
    assert resolutions == []


def test_no_terminal_refuses_before_reaching_the_bus(
    nats_url: str, attorney_key: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """No gate on this bus: a command that asked anything would say so instead."""
    argv = ["approvals", "resolve", APPROVAL, "deny", "--reason", "other", "--nats", nats_url]
    code, _, err = run([*argv, "--key", str(attorney_key)], capsys)
    assert_one_line_failure(code, err, "no terminal to confirm on")
    assert "no gate answers" not in err


@pytest.mark.parametrize("typed", ["no\n", "\n", "", "yes please\n"])
async def test_only_yes_on_the_terminal_signs(
    typed: str,
    nc: Client,
    nats_url: str,
    attorney_key: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    resolutions = await stand_in_gate(nc, VIEW)
    argv = ["approvals", "resolve", APPROVAL, "allow-once", "--nats", nats_url]
    argv += ["--key", str(attorney_key)]

    monkeypatch.setattr("sys.stdin", Terminal(typed))
    code, out, err = await arun(argv, capsys)
    assert code == 1
    assert err.startswith(f"ALLOW ONCE: court_efile to sdny, approval {APPROVAL}. Type yes")
    assert err.endswith("smf-assurance: not confirmed: nothing was signed\n")
    assert out == ""
    await nc.flush()
    assert resolutions == []

    monkeypatch.setattr("sys.stdin", Terminal("yes\n"))
    code, _, err = await arun(argv, capsys)
    assert err.startswith("ALLOW ONCE: court_efile to sdny")
    await nc.flush()
    assert len(resolutions) == 1
    assert opened(resolutions[0], attorney_key).decision == "allow-once"


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (["deny", "--reason", "because"], "invalid choice: 'because'"),
        (["deny"], "deny needs --reason, one of: wrong_recipient, wrong_document"),
        (["allow-once", "--reason", "other"], "--reason and --note go with deny only"),
        (["allow-once", "--note", "fine"], "--reason and --note go with deny only"),
        (["deny", "--reason", "other", "--note", "ok\x1b[2J"], "--note must be plain text"),
        (["deny", "--reason", "other", "--note", "x" * 501], "--note must be plain text"),
    ],
    ids=["unknown-reason", "no-reason", "reason-on-allow", "note-on-allow", "escape", "long"],
)
async def test_a_reason_outside_the_list_is_refused_before_anything_is_sent(
    extra: list[str],
    needle: str,
    nc: Client,
    nats_url: str,
    attorney_key: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    resolutions = await stand_in_gate(nc, VIEW)
    argv = ["approvals", "resolve", APPROVAL, *extra, "--yes", "--nats", nats_url]
    argv += ["--key", str(attorney_key)]
    capsys.readouterr()
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse's own usage error
        code = int(str(exc.code))
    _, err = capsys.readouterr()
    assert code == 2
    assert needle in err, err
    await nc.flush()
    assert resolutions == []


async def test_a_deny_signs_its_reason_and_note(
    nc: Client, nats_url: str, attorney_key: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    resolutions = await stand_in_gate(nc, VIEW)
    note = "Wrong court.\nRefile in the Eastern District."
    argv = ["approvals", "resolve", APPROVAL, "deny", "--reason", "wrong_recipient"]
    argv += ["--note", note, "--yes", "--nats", nats_url, "--key", str(attorney_key)]
    code, _, err = await arun(argv, capsys)
    await nc.flush()
    assert len(resolutions) == 1, err
    resolution = opened(resolutions[0], attorney_key)
    assert (resolution.decision, resolution.deny_reason, resolution.note) == (
        "deny",
        "wrong_recipient",
        note,
    )
    payload = json.loads(base64.b64decode(json.loads(resolutions[0])["payload"]))
    assert (payload["deny_reason"], payload["note"]) == ("wrong_recipient", note)
    # The stand-in answers "{}", which is no ResolutionReply: the command fails, in one line.
    assert_one_line_failure(code, err)
