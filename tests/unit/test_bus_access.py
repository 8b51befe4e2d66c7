"""The bus's pure rules in ``smf_assurance.subjects.bus_access``: which reply subjects a
responder may answer on, how a server refusal is named, which account a principal
connects in, what an outside account imports, and what a seed file must be.

``answerable_reply`` is the guard against reply-subject deputies (docs/BUS-PERMISSIONS.md):
a requester who names a JetStream API call, a KV key or a stream's subject as its reply
must never get a trusted responder to write there.
"""

from __future__ import annotations

import os
from pathlib import Path

import msgspec
import pytest

from smf_assurance.subjects import names
from smf_assurance.subjects.bus_access import (
    API,
    CLIENT_API,
    CREDENTIAL_INVALID,
    CREDENTIAL_TOO_OPEN,
    CREDENTIAL_UNREADABLE,
    GATE_ACCOUNT,
    INBOX_ROOT,
    MAX_SEED_FILE_BYTES,
    RESPONSE_ROOT,
    SERVER_REFUSALS,
    CredentialFileError,
    Import,
    Permissions,
    account_of,
    account_plan,
    answerable_reply,
    bus_error_reason,
    connect_options,
    imports_for,
    inbox_prefix,
    permissions_for,
    read_credential,
)
from smf_assurance.subjects.keys import generate_signing_key, public_record
from smf_assurance.subjects.registry import RegistryEntry

SEED = "SU" + "A" * 56
"""Text of the shape of a NATS user nkey seed (the check is of its shape)."""
USER = "U" + "A" * 55


def entry(principal: str, role: str, **fields: object) -> RegistryEntry:
    return RegistryEntry(
        key=public_record(generate_signing_key(), principal),
        role=role,  # type: ignore[arg-type]
        nats_user=USER,
        **fields,  # type: ignore[arg-type]
    )


@pytest.mark.parametrize(
    "reply",
    ["_INBOX.runtime.abc", "_INBOX.x", "_R_.abc", "_R_.a.b.c"],
)
def test_an_inbox_or_a_mapped_reply_is_answered(reply: str) -> None:
    assert answerable_reply(reply) is True


@pytest.mark.parametrize(
    "reply",
    [
        None,
        "",
        "_INBOX",
        "_INBOX.",
        "_R_",
        "_R_.",
        f"{API}.STREAM.DELETE.{names.EXECUTE_STREAM}",
        f"{API}.STREAM.PURGE.{names.EXECUTE_STREAM}",
        "$KV.SMF_RELEASES.release.2",
        "smf.execute.dms",
        "smf.propose",
        "_INBOXES.runtime",
        "runtime._INBOX.x",
    ],
)
def test_a_reply_subject_chosen_to_make_the_responder_write_is_never_answered(
    reply: str | None,
) -> None:
    assert answerable_reply(reply) is False


REFUSALS = [
    ("authorization violation", "authorization_violation"),
    ("permissions violation", "permissions_violation"),
    ("authentication timeout", "authentication_timeout"),
    ("authentication expired", "authentication_expired"),
    ("maximum connections exceeded", "maximum_connections_exceeded"),
]
"""The server's fixed -ERR phrases, written out: an entry dropped from the table is seen."""


def test_the_refusal_table_names_every_phrase() -> None:
    assert dict(REFUSALS) == SERVER_REFUSALS


@pytest.mark.parametrize(("phrase", "reason"), REFUSALS)
def test_a_server_refusal_is_named_by_its_phrase_never_by_its_text(
    phrase: str, reason: str
) -> None:
    error = Exception(f"nats: '{phrase.title()}' for subject 'smf.secret.matter-42'")
    assert bus_error_reason(error) == reason


def test_a_bus_without_authorization_connects_with_no_options() -> None:
    assert connect_options(None) == {}


def test_any_other_bus_error_is_named_by_its_type() -> None:
    assert bus_error_reason(TimeoutError("smf.secret.matter-42")) == "TimeoutError"


@pytest.mark.parametrize("role", ["gate", "operator", "swarm"])
def test_the_gate_operator_and_swarm_connect_in_the_gate_account(role: str) -> None:
    assert account_of(entry(f"p-{role}", role)) == GATE_ACCOUNT


def test_every_other_principal_connects_in_an_account_of_its_own() -> None:
    assert account_of(entry("attorney-alex", "approver", tenants=("tenant-acme",))) == (
        "attorney-alex"
    )


@pytest.mark.parametrize("principal", ["SMF", "SYS", "$G"])
def test_a_principal_named_as_a_reserved_account_is_refused(principal: str) -> None:
    with pytest.raises(ValueError, match="reserved account"):
        account_of(entry(principal, "console"))


def test_swarm_answers_only_its_requests_and_reads_only_its_subjects() -> None:
    swarm = permissions_for(entry("swarm", "swarm"))
    assert swarm.publish_allow == (f"{INBOX_ROOT}.>", f"{RESPONSE_ROOT}.>"), "replies only"
    assert swarm.subscribe_allow == (names.SWARM_ANALYZE, "$SRV.>", inbox_prefix("swarm") + ".>")
    assert not swarm.allow_responses


def test_a_launcher_attests_its_runtimes_confinement_and_reads_only_its_own_inbox() -> None:
    launcher = permissions_for(entry("launcher-a", "launcher", runtime_id="runtime-a"))
    assert launcher.publish_allow == (names.CONFINEMENT,)
    assert launcher.subscribe_allow == (inbox_prefix("launcher-a") + ".>",)
    assert not launcher.allow_responses


def test_an_outside_account_imports_what_it_may_publish_and_read_and_no_more() -> None:
    own = inbox_prefix("rt") + ".>"
    permissions = Permissions(
        publish_allow=(
            names.PROPOSE,
            f"{CLIENT_API}.CONSUMER.MSG.NEXT.SMF_EXECUTE.x",
            f"{CLIENT_API}.STREAM.INFO.SMF_EXECUTE",
            names.RELEASE_REPORT,
        ),
        subscribe_allow=("smf.output.rt", own),
    )
    assert imports_for(permissions, own) == (
        Import("service", names.PROPOSE, names.PROPOSE),
        Import(
            "service",
            f"{API}.CONSUMER.MSG.NEXT.SMF_EXECUTE.x",
            f"{CLIENT_API}.CONSUMER.MSG.NEXT.SMF_EXECUTE.x",
            many_replies=True,
        ),
        Import(
            "service", f"{API}.STREAM.INFO.SMF_EXECUTE", f"{CLIENT_API}.STREAM.INFO.SMF_EXECUTE"
        ),
        Import("service", names.RELEASE_REPORT, names.RELEASE_REPORT, many_replies=True),
        Import("stream", "smf.output.rt", "smf.output.rt"),
    )


def test_a_principal_without_a_bus_credential_is_in_no_account() -> None:
    gate, approver = entry("gate", "gate"), entry("attorney-alex", "approver")
    plan = account_plan([gate, approver, msgspec.structs.replace(approver, nats_user=None)])
    assert plan.gate_account_users == (gate,)
    assert [e for e, _ in plan.outside] == [approver]


def seed_file(tmp_path: Path, content: bytes, mode: int = 0o600) -> Path:
    path = tmp_path / "seed.nk"
    path.write_bytes(content)
    path.chmod(mode)
    return path


def test_a_seed_padded_to_the_size_limit_is_read_and_one_byte_more_is_refused(
    tmp_path: Path,
) -> None:
    # 4096 bytes, the bound the TypeScript twin shares (bus_access.ts): a literal, so a
    # bound moved on one side only is seen
    padded = SEED.encode() + b" " * (4096 - len(SEED))
    assert MAX_SEED_FILE_BYTES == 4096
    assert read_credential("rt", seed_file(tmp_path, padded)).principal == "rt"
    with pytest.raises(CredentialFileError) as refused:
        read_credential("rt", seed_file(tmp_path, padded + b" "))
    assert refused.value.reason_code == CREDENTIAL_INVALID


@pytest.mark.parametrize("mode", [0o640, 0o620, 0o610, 0o604, 0o602, 0o601, 0o660])
def test_a_seed_any_other_account_may_touch_is_refused(tmp_path: Path, mode: int) -> None:
    with pytest.raises(CredentialFileError) as refused:
        read_credential("rt", seed_file(tmp_path, SEED.encode(), mode))
    assert refused.value.reason_code == CREDENTIAL_TOO_OPEN
    assert str(refused.value).startswith(f"{CREDENTIAL_TOO_OPEN}: ")
    assert SEED not in str(refused.value)


@pytest.mark.parametrize("mode", [0o600, 0o400, 0o700])
def test_a_seed_only_its_owner_may_touch_is_read(tmp_path: Path, mode: int) -> None:
    assert read_credential("rt", seed_file(tmp_path, SEED.encode(), mode)).seed_file.is_file()


def test_a_device_in_the_seed_files_place_is_refused_as_unreadable() -> None:
    with pytest.raises(CredentialFileError) as refused:
        read_credential("rt", "/dev/null")
    assert refused.value.reason_code == CREDENTIAL_UNREADABLE
    assert "not a regular file" in refused.value.detail


def test_a_fifo_in_the_seed_files_place_is_refused_at_once_not_waited_on(
    tmp_path: Path,
) -> None:
    fifo = tmp_path / "seed.nk"
    os.mkfifo(fifo, 0o600)
    with pytest.raises(CredentialFileError) as refused:
        read_credential("rt", fifo)  # no writer: a blocking open would never return
    assert refused.value.reason_code == CREDENTIAL_UNREADABLE
