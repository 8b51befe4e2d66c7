"""The example connectors: idempotent by order id and crash-safe on their own.

"a court e-filing connector that writes filings to an outbox folder,
and a document-management connector that deletes from a local store. They
must behave like real ones: idempotent by key, crash-safe." Each is checked
directly, then once end to end through a runner on a real nats-server.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import re
from pathlib import Path
from typing import Any

import msgspec
import pytest
from nats.aio.client import Client

from smf_assurance.adapters.connector import (
    AmbiguousExecution,
    ConnectorRunner,
    ExecutionOutcome,
    RunnerConfig,
)
from smf_assurance.adapters.connectors import create_atomically
from smf_assurance.adapters.connectors.court_efiling import (
    REASON_FILING_CONFLICT,
    REASON_FILING_UNREADABLE,
    CourtEFilingConnector,
    Filing,
    filing_number,
)
from smf_assurance.adapters.connectors.dms import (
    REASON_NOT_FOUND,
    REASON_TOMBSTONE_CONFLICT,
    REASON_TOMBSTONE_UNREADABLE,
    DocumentStoreConnector,
    Tombstone,
    valid_document_id,
)
from smf_assurance.subjects.keys import generate_signing_key
from smf_assurance.subjects.messages import ExecuteOrder
from tests.support.bus_helpers import ReportInbox, ensure_execute_stream, make_order, publish_order

INVALID = "invalid_arguments"
FILING_ARGS = {"court": "NYSCEF Supreme Court, New York County", "document": "Motion to dismiss"}


def fixed_clock(value: int) -> Any:
    return lambda: value


def court_order(**arguments: Any) -> ExecuteOrder:
    return make_order(
        "court_efiling", arguments=arguments or dict(FILING_ARGS), content="The filing text."
    )


def dms_order(document_id: Any) -> ExecuteOrder:
    return make_order("dms", arguments={"document_id": document_id})


def names(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


# --- the atomic file primitive -------------------------------------------------


def test_create_atomically_writes_once_and_never_overwrites(tmp_path: Path) -> None:
    target = tmp_path / "f.json"
    assert create_atomically(target, b"first") is True
    assert create_atomically(target, b"second") is False
    assert target.read_bytes() == b"first"
    assert names(tmp_path) == ["f.json"], "no temporary file is left behind"


# --- court e-filing --------------------------------------------------------------


async def test_filing_is_written_whole_with_its_fields(tmp_path: Path) -> None:
    connector = CourtEFilingConnector(tmp_path / "outbox", clock=fixed_clock(1_700_000_000_000))
    order = court_order()
    outcome = await connector.execute(order)
    number = filing_number(order.order_id)
    assert re.fullmatch(r"ECF-[0-9]{8}", number), number
    assert outcome == ExecutionOutcome.confirmed(number), "the receipt is the filing number"
    assert names(tmp_path / "outbox") == [f"{order.order_id}.json"]
    filing = msgspec.json.decode(connector.filing_path(order.order_id).read_bytes(), type=Filing)
    assert filing == Filing(
        order_id=order.order_id,
        court=FILING_ARGS["court"],
        document=FILING_ARGS["document"],
        content_sha256=hashlib.sha256(b"The filing text.").hexdigest(),
        filed_at=1_700_000_000_000,
        filing_number=number,
    )


async def test_a_filing_written_before_its_number_is_confirmed_with_the_same_number(
    tmp_path: Path,
) -> None:
    """A filing in the outbox from before filing numbers (no ``filing_number``) still
    decodes, and a repeat of its submission is answered with the number the court
    gives that submission id, the one a new filing under it would get."""
    order = court_order()
    old = {
        "order_id": order.order_id,
        "court": FILING_ARGS["court"],
        "document": FILING_ARGS["document"],
        "content_sha256": hashlib.sha256(b"The filing text.").hexdigest(),
        "filed_at": 1,
    }
    (tmp_path / f"{order.order_id}.json").write_bytes(msgspec.json.encode(old))
    again = await CourtEFilingConnector(tmp_path, clock=fixed_clock(2)).execute(order)
    assert again == ExecutionOutcome.confirmed(filing_number(order.order_id))


async def test_second_execution_of_the_same_order_files_nothing_new(tmp_path: Path) -> None:
    order = court_order()
    first = await CourtEFilingConnector(tmp_path, clock=fixed_clock(1)).execute(order)
    path = tmp_path / f"{order.order_id}.json"
    before = (path.read_bytes(), os.stat(path).st_ino)
    again = await CourtEFilingConnector(tmp_path, clock=fixed_clock(2)).execute(order)
    assert again == first
    assert (path.read_bytes(), os.stat(path).st_ino) == before
    assert names(tmp_path) == [path.name]


@pytest.mark.parametrize(
    "arguments",
    [
        {"document": "x"},
        {"court": "c"},
        {"court": "", "document": "x"},
        {"court": "c", "document": 7},
        {"court": ["c"], "document": "x"},
        {"court": "c" * 257, "document": "x"},
    ],
)
async def test_invalid_filing_arguments_file_nothing(
    tmp_path: Path, arguments: dict[str, Any]
) -> None:
    order = make_order("court_efiling", arguments=arguments)
    outcome = await CourtEFilingConnector(tmp_path / "outbox").execute(order)
    assert outcome == ExecutionOutcome.failed(INVALID)
    assert not (tmp_path / "outbox").exists()


async def test_other_filing_under_the_same_id_is_a_conflict(tmp_path: Path) -> None:
    order = court_order()
    other = Filing(order.order_id, "Other court", "Other doc", "0" * 64, 5)
    (tmp_path / f"{order.order_id}.json").write_bytes(msgspec.json.encode(other))
    outcome = await CourtEFilingConnector(tmp_path).execute(order)
    assert outcome == ExecutionOutcome.failed(REASON_FILING_CONFLICT)
    assert msgspec.json.decode((tmp_path / f"{order.order_id}.json").read_bytes()) == (
        msgspec.to_builtins(other)
    )


async def test_unreadable_filing_under_our_id_is_ambiguous(tmp_path: Path) -> None:
    order = court_order()
    (tmp_path / f"{order.order_id}.json").write_bytes(b"{truncated")
    with pytest.raises(AmbiguousExecution) as raised:
        await CourtEFilingConnector(tmp_path).execute(order)
    assert raised.value.reason_code == REASON_FILING_UNREADABLE


# --- document store ----------------------------------------------------------------


@pytest.fixture
def store(tmp_path: Path) -> Path:
    root = tmp_path / "store"
    root.mkdir()
    (root / "brief-1").write_bytes(b"privileged draft")
    (tmp_path / "outside").write_bytes(b"must survive")
    return root


async def test_document_is_deleted_with_a_tombstone(store: Path) -> None:
    connector = DocumentStoreConnector(store, clock=fixed_clock(42))
    order = dms_order("brief-1")
    outcome = await connector.execute(order)
    assert outcome == ExecutionOutcome.confirmed(f"tombstone:{order.order_id}")
    assert names(store) == [".deleted"]
    assert names(store / ".deleted") == [order.order_id], "the content is gone, not parked"
    tombstone = msgspec.json.decode(
        connector.tombstone_path(order.order_id).read_bytes(), type=Tombstone
    )
    assert tombstone == Tombstone(order.order_id, "brief-1", 42)


async def test_replaying_a_deletion_confirms_it_again(store: Path) -> None:
    connector = DocumentStoreConnector(store)
    order = dms_order("brief-1")
    first = await connector.execute(order)
    assert await connector.execute(order) == first


async def test_missing_document_under_a_new_order_is_not_found(store: Path) -> None:
    connector = DocumentStoreConnector(store)
    await connector.execute(dms_order("brief-1"))
    assert await connector.execute(dms_order("brief-1")) == ExecutionOutcome.failed(
        REASON_NOT_FOUND
    ), "another order for the same document finds nothing to delete"
    assert await connector.execute(dms_order("never-there")) == ExecutionOutcome.failed(
        REASON_NOT_FOUND
    )


async def test_only_regular_files_are_documents(store: Path) -> None:
    (store / "folder").mkdir()
    (store / "link").symlink_to(store.parent / "outside")
    connector = DocumentStoreConnector(store)
    for name in ("folder", "link"):
        assert await connector.execute(dms_order(name)) == ExecutionOutcome.failed(REASON_NOT_FOUND)
    assert (store / "folder").is_dir()
    assert (store.parent / "outside").read_bytes() == b"must survive"


@pytest.mark.parametrize(
    "document_id",
    [
        "../outside",
        "..",
        "/etc/passwd",
        "a/b",
        ".deleted",
        "brief-1\n",
        "",
        "x" * 65,
        "brïef",
        None,
        7,
        ["brief-1"],
    ],
)
async def test_path_tricks_are_refused_before_touching_the_store(
    store: Path, document_id: Any
) -> None:
    outcome = await DocumentStoreConnector(store).execute(dms_order(document_id))
    assert outcome == ExecutionOutcome.failed(INVALID)
    assert names(store) == ["brief-1"]
    assert (store.parent / "outside").read_bytes() == b"must survive"


def test_document_id_rule() -> None:
    assert valid_document_id("Brief_2024-01")
    assert not valid_document_id("brief.pdf")


async def test_crash_after_taking_the_document_is_completed(store: Path) -> None:
    """Step 1 happened (document renamed aside), then the process died."""
    connector = DocumentStoreConnector(store)
    order = dms_order("brief-1")
    (store / ".deleted").mkdir()
    os.rename(store / "brief-1", store / ".deleted" / f"{order.order_id}.doc")
    outcome = await connector.execute(order)
    assert outcome == ExecutionOutcome.confirmed(f"tombstone:{order.order_id}")
    assert names(store / ".deleted") == [order.order_id]


async def test_crash_after_the_tombstone_purges_the_leftover(store: Path) -> None:
    """Steps 1 and 2 happened, the content copy was not yet removed."""
    connector = DocumentStoreConnector(store)
    order = dms_order("brief-1")
    await connector.execute(order)
    leftover = store / ".deleted" / f"{order.order_id}.doc"
    leftover.write_bytes(b"privileged draft")
    assert (await connector.execute(order)).status == "confirmed"
    assert not leftover.exists()


async def test_tombstone_for_another_document_is_a_conflict(store: Path) -> None:
    order = dms_order("brief-1")
    (store / ".deleted").mkdir()
    other = Tombstone(order.order_id, "someone-else", 1)
    (store / ".deleted" / order.order_id).write_bytes(msgspec.json.encode(other))
    outcome = await DocumentStoreConnector(store).execute(order)
    assert outcome == ExecutionOutcome.failed(REASON_TOMBSTONE_CONFLICT)
    assert (store / "brief-1").exists()


async def test_unreadable_tombstone_is_ambiguous(store: Path) -> None:
    order = dms_order("brief-1")
    (store / ".deleted").mkdir()
    (store / ".deleted" / order.order_id).write_bytes(b"\x00")
    with pytest.raises(AmbiguousExecution) as raised:
        await DocumentStoreConnector(store).execute(order)
    assert raised.value.reason_code == REASON_TOMBSTONE_UNREADABLE


# --- end to end through a runner ---------------------------------------------------


@pytest.mark.parametrize("which", ["court_efiling", "dms"])
async def test_example_connector_runs_behind_the_sdk(
    nc: Client, tmp_path: Path, store: Path, which: str
) -> None:
    gate, own = generate_signing_key(), generate_signing_key()
    js = nc.jetstream()
    await ensure_execute_stream(js)
    if which == "court_efiling":
        connector: CourtEFilingConnector | DocumentStoreConnector = CourtEFilingConnector(
            tmp_path / "outbox"
        )
        order = court_order()
    else:
        connector = DocumentStoreConnector(store)
        order = dms_order("brief-1")
    inbox = await ReportInbox.open(nc, which, own.verify_key)
    runner = ConnectorRunner(
        nc,
        connector,
        connector_id=which,
        signing_key=own,
        gate_keys={gate.key_id: gate.verify_key},
        state_dir=tmp_path / "state",
        config=RunnerConfig(create_durable=True, ack_wait=1.0, fetch_timeout=0.1, stream_wait=2.0),
    )
    task = asyncio.create_task(runner.run())
    try:
        await publish_order(js, order, gate)
        report = await inbox.next()
    finally:
        runner.stop()
        await asyncio.wait_for(task, 3)
    assert (report.status, report.order_id) == ("confirmed", order.order_id)
    assert report.external_ref is not None
    if which == "court_efiling":
        assert report.external_ref == filing_number(order.order_id)
    else:
        assert report.external_ref.endswith(order.order_id)
    if which == "court_efiling":
        assert names(tmp_path / "outbox") == [f"{order.order_id}.json"]
    else:
        assert not (store / "brief-1").exists()
