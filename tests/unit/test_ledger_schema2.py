"""Schema 2 of the evidence ledger: the ``shadow`` kind and the migration.

Proves, on real SQLite files:
- a ``shadow`` entry (both sides of a disagreement, as identities and closed
  words) is chained, checkpointed, verified and exported like every entry, and
  its shadow fields are covered by its hash;
- a ``shadow`` entry must fill every shadow field and no other kind may carry
  one, in Python before any SQL runs and in the table's CHECKs for a writer
  who bypasses Python; free text fits in no shadow column;
- a ledger written by schema 1 (``tests/data/ledger-v1.db``, written by the
  code of commit 6d058f6: seven entries of every kind, two signed checkpoints
  in the file, a claim beside them) is audited as it is, and opened by the
  store it is rebuilt in place as schema 2: every row, hash and checkpoint the
  same, every append-only trigger back, and a shadow entry then extends its
  chain; a migration that cannot copy a row changes nothing.

Does not prove: migration of a file larger than the fixture (the copy is one
``INSERT ... SELECT`` in one transaction, so its time grows with the ledger).
"""

from __future__ import annotations

import io
import shutil
import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any, Final

import pytest
from structlog.testing import capture_logs

from smf_assurance.pipeline.stores import ledger_schema
from smf_assurance.pipeline.stores.claims import ClaimStore
from smf_assurance.pipeline.stores.ledger import (
    EvidenceEntry,
    EvidenceEntryRejected,
    EvidenceStoreUnavailable,
    Ledger,
    export_jsonl,
    verify_ledger,
)
from smf_assurance.pipeline.stores.ledger_schema import (
    DDL,
    ENTRY_COLUMNS,
    GENESIS_HASH,
    INSERT_ENTRY,
    SHADOW_FIELDS,
    V1_COLUMNS,
    entry_hash_of,
    parse_export_line,
)
from smf_assurance.subjects.canonical import identity_of
from smf_assurance.subjects.keyed import keyed_identifier
from smf_assurance.subjects.keys import SigningKey, VerifyKey
from tests.support.ledger import attacker

FIXTURE: Final = Path(__file__).parents[1] / "data" / "ledger-v1.db"
FIXTURE_KEY: Final = SigningKey.from_seed(b"\x0b" * 32)
"""The gate key that signed the fixture's checkpoints."""
TENANT: Final = keyed_identifier(b"k" * 32, "tenant", "acme-legal")
RAW: Final = "Dear Ms. Smith, re matter 2024-117: settlement draft attached"


def trusted(key: SigningKey = FIXTURE_KEY) -> dict[str, VerifyKey]:
    return {key.key_id: key.verify_key}


def decision_entry(i: int, **changes: Any) -> EvidenceEntry:
    fields: dict[str, Any] = {
        "kind": "decision",
        "operation_hash": identity_of({"operation": i}),
        "decision_id": identity_of({"decision": i}),
        "release_id": identity_of({"release_id": "active"}),
        "projection_id": identity_of({"projection": "active"}),
        "tenant_ref": TENANT,
        "at": 1_700_000_000_000 + i,
        "disposition": "allow",
        "reason_codes": ("retention_schedule_deletion",),
    }
    fields.update(changes)
    return EvidenceEntry(**fields)


def shadow_entry(i: int, **changes: Any) -> EvidenceEntry:
    """What the gate writes when a shadow release would have held an allowed deletion."""
    shadow: dict[str, Any] = {
        "kind": "shadow",
        "shadow_release_id": identity_of({"release_id": "shadow"}),
        "shadow_projection_id": identity_of({"projection": "shadow"}),
        "shadow_disposition": "hold",
        "shadow_reason_codes": ("retention_deletion_needs_attorney",),
        "capability": "document.delete",
        "differing_policy_refs": (identity_of({"policy_id": "customer.acme.retention"}),),
        "differing_rule_refs": (identity_of({"rule_id": "urn:smf:rule:retention"}),),
        "differing_layers": ("customer",),
    }
    return decision_entry(i, **{**shadow, **changes})


def rows(db: Path, columns: tuple[str, ...] = V1_COLUMNS) -> list[tuple[Any, ...]]:
    with attacker(db) as conn:
        return conn.execute(
            f"SELECT {', '.join(columns)} FROM evidence_entries ORDER BY seq"
        ).fetchall()


def version_of(db: Path) -> int:
    with attacker(db) as conn:
        return int(conn.execute("SELECT schema_version FROM ledger_meta").fetchone()[0])


# --- the shadow kind ---------------------------------------------------------------------


async def test_a_shadow_entry_is_chained_verified_and_exported(tmp_path: Path) -> None:
    db = tmp_path / "ledger.db"
    key = FIXTURE_KEY
    published: list[bytes] = []

    async def sink(envelope: bytes) -> None:
        published.append(envelope)

    entries = [decision_entry(1), shadow_entry(1), decision_entry(2), shadow_entry(2)]
    async with await Ledger.open(db, signer=key, checkpoint_every=3, on_checkpoint=sink) as ledger:
        receipts = [await ledger.append(entry) for entry in entries]
    report = verify_ledger(db, published, trusted(key))
    assert (report.ok, report.entries, report.checkpoint_seq) == (True, 4, 3)
    out = io.StringIO()
    assert export_jsonl(db, out) == 4
    prev = GENESIS_HASH
    for line, entry, receipt in zip(out.getvalue().splitlines(), entries, receipts, strict=True):
        stored = parse_export_line(line)
        assert stored.entry == entry
        assert entry_hash_of(stored.seq, prev, stored.entry) == receipt.entry_hash
        prev = receipt.entry_hash
        shown = set(line.split('"')[1::2])
        assert all((name in shown) == (entry.kind == "shadow") for name in SHADOW_FIELDS)


def test_the_shadow_fields_are_covered_by_the_entry_hash() -> None:
    entry = shadow_entry(1)
    base = entry_hash_of(1, GENESIS_HASH, entry)
    other: dict[str, Any] = {
        "shadow_release_id": identity_of("another"),
        "shadow_projection_id": identity_of("another"),
        "shadow_disposition": "deny",
        "shadow_reason_codes": ("another_reason",),
        "capability": "external.transmit",
        "differing_policy_refs": (),
        "differing_rule_refs": (identity_of("another"),),
        "differing_layers": ("matter",),
    }
    assert set(other) == set(SHADOW_FIELDS)
    for name, value in other.items():
        changed = EvidenceEntry(**{**_fields(entry), name: value})
        assert entry_hash_of(1, GENESIS_HASH, changed) != base, name


def _fields(entry: EvidenceEntry) -> dict[str, Any]:
    return {name: getattr(entry, name) for name in entry.__struct_fields__}


@pytest.mark.parametrize("missing", [*SHADOW_FIELDS, "disposition"])
async def test_a_shadow_entry_must_fill_every_shadow_field(missing: str, tmp_path: Path) -> None:
    async with await Ledger.open(tmp_path / "l.db", signer=FIXTURE_KEY) as ledger:
        with pytest.raises(EvidenceEntryRejected) as caught:
            await ledger.append(shadow_entry(1, **{missing: None}))
    assert caught.value.field == missing


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("status", "consumed"),
        ("approval_id", identity_of("approval")),
    ],
)
async def test_a_shadow_entry_names_no_status_or_approval(
    name: str, value: str, tmp_path: Path
) -> None:
    async with await Ledger.open(tmp_path / "l.db", signer=FIXTURE_KEY) as ledger:
        with pytest.raises(EvidenceEntryRejected) as caught:
            await ledger.append(shadow_entry(1, **{name: value}))
    assert caught.value.field == name


@pytest.mark.parametrize("name", SHADOW_FIELDS)
async def test_no_other_kind_carries_a_shadow_field(name: str, tmp_path: Path) -> None:
    value = getattr(shadow_entry(1), name)
    async with await Ledger.open(tmp_path / "l.db", signer=FIXTURE_KEY) as ledger:
        with pytest.raises(EvidenceEntryRejected) as caught:
            await ledger.append(decision_entry(1, **{name: value}))
        assert caught.value.field == name
        await ledger.append(decision_entry(1))  # the store is still usable


@pytest.mark.parametrize(
    ("field", "changes"),
    [
        ("shadow_release_id", {"shadow_release_id": RAW}),
        ("shadow_projection_id", {"shadow_projection_id": "sha256:" + "0" * 63}),
        ("shadow_disposition", {"shadow_disposition": "conditional"}),
        ("shadow_reason_codes[0]", {"shadow_reason_codes": (RAW,)}),
        ("shadow_reason_codes", {"shadow_reason_codes": ("ok",) * 33}),
        ("capability", {"capability": RAW}),
        ("differing_policy_refs[0]", {"differing_policy_refs": ("customer.acme.retention",)}),
        ("differing_policy_refs", {"differing_policy_refs": (identity_of(1),) * 33}),
        ("differing_rule_refs[1]", {"differing_rule_refs": (identity_of(1), RAW)}),
        ("differing_layers[0]", {"differing_layers": ("tenant",)}),
        ("differing_layers", {"differing_layers": ["customer"]}),
    ],
)
async def test_a_disallowed_shadow_value_is_refused_before_insert(
    field: str, changes: dict[str, Any], tmp_path: Path
) -> None:
    db = tmp_path / "l.db"
    async with await Ledger.open(db, signer=FIXTURE_KEY) as ledger:
        with capture_logs() as logs, pytest.raises(EvidenceEntryRejected) as caught:
            await ledger.append(shadow_entry(1, **changes))
    assert caught.value.field == field
    assert RAW not in str(caught.value)
    assert RAW not in repr(logs)
    assert rows(db) == []


def _fresh_schema() -> sqlite3.Connection:
    conn = sqlite3.connect(":memory:", isolation_level=None)
    for statement in DDL:
        conn.execute(statement)
    return conn


def _row(entry: EvidenceEntry) -> list[Any]:
    return list(ledger_schema.entry_row(1, GENESIS_HASH, identity_of("e"), entry))


def test_every_shadow_column_refuses_free_text_and_half_rows_in_sql() -> None:
    """The CHECKs hold for a writer who bypasses the Python validation. As for reason
    codes, SQL bounds a list's total length and alphabet (hex digits, the prefix's
    letters, colons, quotes, commas), not each element's: Python checks each."""
    valid = _row(shadow_entry(1))
    bad_values: dict[str, list[Any]] = {
        "shadow_release_id": [RAW, identity_of(1).upper()],
        "shadow_projection_id": [RAW],
        "shadow_disposition": [RAW, "conditional"],
        "shadow_reason_codes": [f'["{RAW}"]', "[1]", '"a"'],
        "capability": [RAW, "document"],
        "differing_policy_refs": [
            f'["{RAW}"]',
            '["customer.acme.retention"]',
            '["sha256:' + "a" * 60 + '"]',
            '["sha256:' + "a" * 64 + '","sha256:' + "b" * 63 + '"]',
            '["sha256:' + "g" * 64 + '"]',
        ],
        "differing_rule_refs": [f'["{RAW}"]', '[["sha256:' + "a" * 62 + '"]]'],
        "differing_layers": [f'["{RAW}"]', '["customer","1"]'],
    }
    assert set(bad_values) == set(SHADOW_FIELDS)
    with closing(_fresh_schema()) as conn:
        for name, values in bad_values.items():
            for value in values:
                row = list(valid)
                row[ENTRY_COLUMNS.index(name)] = value
                with pytest.raises(sqlite3.IntegrityError, match="CHECK"):
                    conn.execute(INSERT_ENTRY, row)
            half = list(valid)
            half[ENTRY_COLUMNS.index(name)] = None  # a shadow row without it
            with pytest.raises(sqlite3.IntegrityError, match="CHECK"):
                conn.execute(INSERT_ENTRY, half)
            foreign = _row(decision_entry(1))
            foreign[ENTRY_COLUMNS.index(name)] = valid[ENTRY_COLUMNS.index(name)]
            with pytest.raises(sqlite3.IntegrityError, match="CHECK"):
                conn.execute(INSERT_ENTRY, foreign)  # another kind with a shadow field
        two = list(valid)
        two[ENTRY_COLUMNS.index("differing_policy_refs")] = (
            '["sha256:' + "a" * 64 + '","sha256:' + "b" * 64 + '"]'
        )
        conn.execute(INSERT_ENTRY, two)
        assert conn.execute("SELECT count(*) FROM evidence_entries").fetchone() == (1,)


# --- schema 1 -> 2 --------------------------------------------------------------------


@pytest.fixture
def v1_ledger(tmp_path: Path) -> Path:
    """A copy of the schema-1 fixture (its WAL mode is in the file's header)."""
    db = tmp_path / "ledger.db"
    shutil.copyfile(FIXTURE, db)
    return db


def test_the_fixture_is_a_schema_1_ledger_and_audits_as_it_is(v1_ledger: Path) -> None:
    """The offline audit reads an old file without migrating it (read-only)."""
    before = v1_ledger.read_bytes()
    assert version_of(v1_ledger) == 1
    report = verify_ledger(v1_ledger, [], trusted())
    assert (report.ok, report.entries, report.checkpoints, report.checkpoint_seq) == (
        True,
        7,
        2,
        6,
    )
    assert export_jsonl(v1_ledger, io.StringIO()) == 7
    assert v1_ledger.read_bytes() == before


async def test_a_schema_1_ledger_is_migrated_in_place(v1_ledger: Path) -> None:
    before = rows(v1_ledger)
    with attacker(v1_ledger) as conn:
        checkpoints = conn.execute("SELECT * FROM ledger_checkpoints ORDER BY seq").fetchall()
        claims = conn.execute("SELECT * FROM proposal_claims").fetchall()
        (ledger_id,) = conn.execute("SELECT ledger_id FROM ledger_meta").fetchone()
    with capture_logs() as logs:
        ledger = await Ledger.open(v1_ledger, signer=FIXTURE_KEY, checkpoint_seconds=10**9)
    assert [e["event"] for e in logs].count("ledger.migrated") == 1
    try:
        assert ledger.ledger_id == ledger_id
        assert (ledger.tail_seq, ledger.checkpoint_seq) == (7, 6)
        assert version_of(v1_ledger) == 2
        assert rows(v1_ledger) == before
        assert set(rows(v1_ledger, SHADOW_FIELDS)) == {(None,) * len(SHADOW_FIELDS)}
        with attacker(v1_ledger) as conn:
            assert conn.execute("SELECT * FROM ledger_checkpoints ORDER BY seq").fetchall() == (
                checkpoints
            )
            assert conn.execute("SELECT * FROM proposal_claims").fetchall() == claims
        receipt = await ledger.append(shadow_entry(8))
        assert receipt.seq == 8
    finally:
        await ledger.close()
    report = verify_ledger(v1_ledger, [], trusted())
    assert (report.ok, report.entries, report.checkpoints) == (True, 8, 2)
    again = await Ledger.open(v1_ledger, signer=FIXTURE_KEY)  # no second migration
    await again.close()
    assert version_of(v1_ledger) == 2


@pytest.mark.parametrize(
    "statement",
    [
        "UPDATE evidence_entries SET status = 'released' WHERE seq = 2",
        "DELETE FROM evidence_entries WHERE seq = 2",
        "INSERT OR REPLACE INTO evidence_entries (seq, prev_hash, entry_hash, kind, "
        "operation_hash, decision_id, release_id, projection_id, reason_codes, tenant_ref, at) "
        "SELECT seq, prev_hash, entry_hash, kind, operation_hash, decision_id, release_id, "
        "projection_id, reason_codes, tenant_ref, 0 FROM evidence_entries WHERE seq = 2",
        "UPDATE ledger_checkpoints SET at = 0",
        "DELETE FROM ledger_checkpoints",
        "UPDATE ledger_meta SET schema_version = 1",
        "DELETE FROM ledger_meta",
    ],
    ids=[
        "update",
        "delete",
        "replace",
        "update_checkpoint",
        "delete_checkpoint",
        "lower_version",
        "delete_meta",
    ],
)
async def test_the_migrated_file_is_as_append_only_as_a_new_one(
    statement: str, v1_ledger: Path
) -> None:
    await (await Ledger.open(v1_ledger, signer=FIXTURE_KEY)).close()
    before = rows(v1_ledger, ENTRY_COLUMNS)
    with attacker(v1_ledger) as conn, pytest.raises(sqlite3.IntegrityError):
        conn.execute(statement)
    assert rows(v1_ledger, ENTRY_COLUMNS) == before
    assert verify_ledger(v1_ledger, [], trusted()).ok


async def test_a_checkpoint_after_the_migration_must_name_a_stored_entry(
    v1_ledger: Path,
) -> None:
    """The checkpoint trigger, dropped for the rebuild, names the new table."""
    await (await Ledger.open(v1_ledger, signer=FIXTURE_KEY)).close()
    with attacker(v1_ledger) as conn, pytest.raises(sqlite3.IntegrityError, match="stored"):
        conn.execute(
            "INSERT INTO ledger_checkpoints VALUES (7, ?, 0, x'00')", (identity_of("other"),)
        )


async def test_a_migration_that_cannot_copy_a_row_changes_nothing(v1_ledger: Path) -> None:
    """A schema-1 row no valid append could write (put there around its CHECKs)
    fails the copy: the whole transaction is undone and the store refuses to open."""
    with attacker(v1_ledger) as conn:
        conn.execute("PRAGMA ignore_check_constraints = ON")
        conn.execute("DROP TRIGGER evidence_entries_no_update")
        conn.execute("UPDATE evidence_entries SET kind = 'bogus' WHERE seq = 7")
    with pytest.raises(EvidenceStoreUnavailable):
        await Ledger.open(v1_ledger, signer=FIXTURE_KEY)
    assert version_of(v1_ledger) == 1
    with attacker(v1_ledger) as conn:
        names = {name for (name,) in conn.execute("SELECT name FROM sqlite_master")}
    assert "evidence_entries_v2" not in names
    assert {"ledger_checkpoints_forward_only", "ledger_meta_no_update"} <= names
    assert rows(v1_ledger)[6][3] == "bogus"


async def test_the_claims_beside_the_entries_survive_the_migration(v1_ledger: Path) -> None:
    ledger = await Ledger.open(v1_ledger, signer=FIXTURE_KEY)
    try:
        claims = await ClaimStore.in_ledger(ledger.worker)
        assert not await claims.claim("p-v1", identity_of({"operation": 1}), identity_of(1), 2)
        assert await claims.claim("p-v2", identity_of({"operation": 2}), identity_of(2), 2)
        await claims.close()
    finally:
        await ledger.close()
