"""What the evidence ledger may hold, how an entry is hashed, and the SQL that keeps it so.

ARCHITECTURE.md, "Evidence", and issue 7: the ledger stores identities,
release and projection ids, disposition, reason codes, status, a
pseudonymous tenant identity and time, and never raw prompts, arguments,
content, recipients or matter ids. Minimization is structural here, not a
promise in a comment: every column is one of

- an identity: ``sha256:<64 hex>`` (operation, decision, approval, release,
  projection, entry hashes), or ``hmac-sha256:<64 hex>`` (the tenant, keyed by
  the caller with :func:`smf_assurance.subjects.keyed.keyed_identifier`);
- a closed vocabulary (kind, disposition, status);
- an integer (seq, unix milliseconds);
- a JSON array of reason codes, each ``[a-z][a-z0-9_]{0,63}``, of layer
  words, or of ``sha256:`` identities;
- (checkpoints only) a bounded signed DSSE envelope whose payload is four
  identity or integer fields.

Python refuses a bad value before any SQL runs (:func:`validate_entry`), and
each TEXT column carries a CHECK so that a writer who bypasses Python (a
second program, a bug) still cannot put free text in the file. The tables are
STRICT, so an INTEGER column cannot hold text either.

Append-only is enforced by triggers; see :data:`DDL`. They stop every SQL
route around the chain (UPDATE, DELETE, INSERT OR REPLACE, REPLACE, duplicate
insert, upsert), including REPLACE's implicit delete, which fires no DELETE
trigger while ``recursive_triggers`` is off: the BEFORE INSERT trigger admits
only the row that extends the chain, so REPLACE never finds a row to displace.
An attacker with the file can drop triggers; the hash chain and the signed
checkpoints (``ledger.verify_ledger``) are what detect that.

Changing a vocabulary changes the CHECK baked into existing files, so it
needs a new :data:`SCHEMA_VERSION` and a migration, not just an edit here.

Schema 2 (issue 25, shadow releases) adds the entry kind ``shadow``: one
decision on which a shadow release disagrees with the release that decided
it. Its own columns (:data:`SHADOW_FIELDS`: the shadow's release and
projection ids, disposition and reason codes, the operation's capability, and
the policies, rules and layers whose application differs, as identities and
layer words) are NULL in every other kind's row, and a table CHECK keeps them
so. An entry's hashed document names them only for a ``shadow`` entry, so
every entry written under schema 1 keeps its hash, its chain and its signed
checkpoints: :func:`migrate_v1` rebuilds a schema-1 table in place
(SQLite's documented table-rebuild procedure, one transaction) without
touching a row.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Callable
from typing import Annotated, Any, Final, Literal, NamedTuple, get_args

import msgspec

from smf_assurance.core.policy import Layer
from smf_assurance.subjects.canonical import (
    SAFE_INTEGER_MAX,
    canonical_bytes,
    identity_of,
    parse_canonical,
)
from smf_assurance.subjects.envelope import Capability

SCHEMA_VERSION: Final = 2
"""1: issue 7. 2: issue 25, the ``shadow`` kind and its columns (:func:`migrate_v1`)."""

CHECKPOINT_PAYLOAD_TYPE: Final = "application/vnd.smf.ledger-checkpoint+json;v=1"
"""DSSE payload type of a ledger checkpoint; inside the PAE, so a checkpoint
signature cannot be replayed as any other signed message of the gate."""

SHA256_PREFIX: Final = "sha256:"
KEYED_PREFIX: Final = "hmac-sha256:"
_HEX_DIGITS: Final = 64

GENESIS_HASH: Final = SHA256_PREFIX + "0" * _HEX_DIGITS
"""prev_hash of entry 1 (issue 7)."""

MAX_REASON_CODES: Final = 32
MAX_REASON_CODE_LENGTH: Final = 64
MAX_ENVELOPE_BYTES: Final = 8192
"""A checkpoint envelope is well under 1 KiB; the bound keeps the one BLOB
column from becoming a place to store anything else."""

EntryKind = Literal["decision", "transition", "output", "recovery", "release", "shadow"]
Disposition = Literal["allow", "deny", "hold"]
Status = Literal[
    "pending",
    "held",
    "approved",
    "executing",
    "consumed",
    "execution_unknown",
    "denied",
    "expired",
    "invalidated",
    "failed",
    "released",
    "withheld",
]

ENTRY_KINDS: Final[tuple[str, ...]] = get_args(EntryKind)
DISPOSITIONS: Final[tuple[str, ...]] = get_args(Disposition)
STATUSES: Final[tuple[str, ...]] = get_args(Status)
CAPABILITIES: Final[tuple[str, ...]] = get_args(Capability)
LAYERS: Final[tuple[str, ...]] = get_args(Layer)
MAX_DIFFERING: Final = 32
"""Bound on each list of differing policies, rules and layers in a ``shadow`` entry."""

# fullmatch, not match with "$": "$" also matches before a trailing newline.
_SHA256_RE: Final = re.compile(r"sha256:[0-9a-f]{64}")
_KEYED_RE: Final = re.compile(r"hmac-sha256:[0-9a-f]{64}")
_REASON_RE: Final = re.compile(r"[a-z][a-z0-9_]{0,63}")

# For msgspec decoding at an edge; the exact length also rules out the
# trailing newline that "$" would let through.
Sha256Id = Annotated[
    str, msgspec.Meta(pattern=r"^sha256:[0-9a-f]{64}$", min_length=71, max_length=71)
]
KeyedId = Annotated[
    str, msgspec.Meta(pattern=r"^hmac-sha256:[0-9a-f]{64}$", min_length=76, max_length=76)
]
ReasonCode = Annotated[str, msgspec.Meta(pattern=r"^[a-z][a-z0-9_]*$", min_length=1, max_length=64)]
UnixMillis = Annotated[int, msgspec.Meta(ge=0, le=SAFE_INTEGER_MAX)]
ReasonCodes = Annotated[tuple[ReasonCode, ...], msgspec.Meta(max_length=32)]
Refs = Annotated[tuple[Sha256Id, ...], msgspec.Meta(max_length=MAX_DIFFERING)]
Layers = Annotated[tuple[Layer, ...], msgspec.Meta(max_length=MAX_DIFFERING)]


class EvidenceEntry(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """One fact for the ledger, as a caller hands it over (issue 7).

    Only identities, vocabularies, reason codes and time: there is no field
    into which a prompt, an argument, content, a recipient or a matter id
    could be put. ``tenant_ref`` is the caller's keyed identifier
    (``hmac-sha256:``), never the tenant's name; ``at`` comes from the
    caller's injected clock, in unix milliseconds.
    """

    kind: EntryKind
    operation_hash: Sha256Id
    decision_id: Sha256Id
    release_id: Sha256Id
    projection_id: Sha256Id
    tenant_ref: KeyedId
    at: UnixMillis
    approval_id: Sha256Id | None = None
    disposition: Disposition | None = None
    status: Status | None = None
    reason_codes: ReasonCodes = ()
    # -- a ``shadow`` entry only (issue 25); None in every other kind ---------------
    shadow_release_id: Sha256Id | None = None
    """The shadow release, as an identity (``release_ref``, as ``release_id``)."""
    shadow_projection_id: Sha256Id | None = None
    shadow_disposition: Disposition | None = None
    """What the shadow would have decided; ``disposition`` is what was enforced."""
    shadow_reason_codes: ReasonCodes | None = None
    capability: Capability | None = None
    """The operation's capability (a closed word of the envelope's vocabulary)."""
    differing_policy_refs: Refs | None = None
    """Policies applied under one release and not the other (or with another
    effect, reason, rule or layer), each as ``identity_of({"policy_id": id})``:
    a customer's policy id may name the customer, so only its identity is kept."""
    differing_rule_refs: Refs | None = None
    """Their rules, each as ``identity_of({"rule_id": id})``."""
    differing_layers: Layers | None = None
    """Their layers."""


class EvidenceError(Exception):
    """Base of every ledger error: a caller that cannot write evidence denies
    (ARCHITECTURE.md, "Evidence": no decision is released unless its evidence
    was written first)."""


class EvidenceEntryRejected(EvidenceError, ValueError):
    """An entry field is not an identity, vocabulary word, reason code or time.

    The message names the field and never repeats the value: a refused value
    is exactly the raw text that must not reach logs or evidence.
    """

    def __init__(self, field: str) -> None:
        super().__init__(f"evidence entry field {field!r} is not an allowed value")
        self.field = field


_SHA256_FIELDS: Final = ("operation_hash", "decision_id", "release_id", "projection_id")
SHADOW_FIELDS: Final = (
    "shadow_release_id",
    "shadow_projection_id",
    "shadow_disposition",
    "shadow_reason_codes",
    "capability",
    "differing_policy_refs",
    "differing_rule_refs",
    "differing_layers",
)
"""The columns only a ``shadow`` entry fills (schema 2), in column order."""
_LIST_FIELDS: Final = (
    "shadow_reason_codes",
    "differing_policy_refs",
    "differing_rule_refs",
    "differing_layers",
)
"""The shadow columns stored as a JSON array."""


def _check_identity(entry: EvidenceEntry, name: str, pattern: re.Pattern[str]) -> None:
    value = getattr(entry, name)
    if not isinstance(value, str) or pattern.fullmatch(value) is None:
        raise EvidenceEntryRejected(name)


def _check_word(value: object, name: str, vocabulary: tuple[str, ...], optional: bool) -> None:
    if value is None and optional:
        return
    if not isinstance(value, str) or value not in vocabulary:
        raise EvidenceEntryRejected(name)


def validate_entry(entry: EvidenceEntry) -> None:
    """Refuse anything but identities, vocabulary, reason codes and time.

    msgspec does not validate a Struct built in Python, only one decoded from
    bytes, so the store calls this before every insert; the CHECKs in
    :data:`DDL` are the second line behind it.
    """
    if not isinstance(entry, EvidenceEntry):
        raise EvidenceEntryRejected("entry")
    _check_word(entry.kind, "kind", ENTRY_KINDS, optional=False)
    for name in _SHA256_FIELDS:
        _check_identity(entry, name, _SHA256_RE)
    if entry.approval_id is not None:
        _check_identity(entry, "approval_id", _SHA256_RE)
    _check_identity(entry, "tenant_ref", _KEYED_RE)
    _check_word(entry.disposition, "disposition", DISPOSITIONS, optional=True)
    _check_word(entry.status, "status", STATUSES, optional=True)
    _check_codes(entry.reason_codes, "reason_codes")
    at = entry.at
    if type(at) is not int or not 0 <= at <= SAFE_INTEGER_MAX:
        raise EvidenceEntryRejected("at")
    if entry.kind == "shadow":
        _validate_shadow(entry)
    else:
        for name in SHADOW_FIELDS:
            if getattr(entry, name) is not None:
                raise EvidenceEntryRejected(name)


def _check_codes(codes: object, name: str) -> None:
    if not isinstance(codes, tuple) or len(codes) > MAX_REASON_CODES:
        raise EvidenceEntryRejected(name)
    for index, code in enumerate(codes):
        if not isinstance(code, str) or _REASON_RE.fullmatch(code) is None:
            raise EvidenceEntryRejected(f"{name}[{index}]")


def _check_list(value: object, name: str, ok: Callable[[object], bool]) -> None:
    if not isinstance(value, tuple) or len(value) > MAX_DIFFERING:
        raise EvidenceEntryRejected(name)
    for index, item in enumerate(value):
        if not ok(item):
            raise EvidenceEntryRejected(f"{name}[{index}]")


def _is_identity(item: object) -> bool:
    return isinstance(item, str) and _SHA256_RE.fullmatch(item) is not None


def _is_layer(item: object) -> bool:
    return isinstance(item, str) and item in LAYERS


def _validate_shadow(entry: EvidenceEntry) -> None:
    """A ``shadow`` entry (issue 25) names both sides: what was enforced
    (``disposition``, ``reason_codes``, ``release_id``) and what the shadow would
    have decided, and nothing but identities and closed words."""
    if entry.disposition is None:
        raise EvidenceEntryRejected("disposition")
    if entry.status is not None:
        raise EvidenceEntryRejected("status")
    if entry.approval_id is not None:
        raise EvidenceEntryRejected("approval_id")
    for name in ("shadow_release_id", "shadow_projection_id"):
        if not _is_identity(getattr(entry, name)):
            raise EvidenceEntryRejected(name)
    _check_word(entry.shadow_disposition, "shadow_disposition", DISPOSITIONS, optional=False)
    _check_word(entry.capability, "capability", CAPABILITIES, optional=False)
    _check_codes(entry.shadow_reason_codes, "shadow_reason_codes")
    _check_list(entry.differing_policy_refs, "differing_policy_refs", _is_identity)
    _check_list(entry.differing_rule_refs, "differing_rule_refs", _is_identity)
    _check_list(entry.differing_layers, "differing_layers", _is_layer)


ENTRY_FIELDS: Final = (
    "kind",
    "operation_hash",
    "decision_id",
    "approval_id",
    "release_id",
    "projection_id",
    "disposition",
    "status",
    "reason_codes",
    "tenant_ref",
    "at",
)
ENTRY_COLUMNS: Final = ("seq", "prev_hash", "entry_hash", *ENTRY_FIELDS, *SHADOW_FIELDS)
V1_COLUMNS: Final = ("seq", "prev_hash", "entry_hash", *ENTRY_FIELDS)
"""The columns of a schema-1 ``evidence_entries`` table (what :func:`migrate_v1` copies)."""


def fields_of(kind: str) -> tuple[str, ...]:
    """The fields an entry of ``kind`` is hashed and exported with: schema 1's for
    every kind, and :data:`SHADOW_FIELDS` too for a ``shadow`` entry (whose kind is
    in the document, so the two forms can never be taken for one another)."""
    return (*ENTRY_FIELDS, *SHADOW_FIELDS) if kind == "shadow" else ENTRY_FIELDS


def entry_document(seq: int, prev_hash: str, entry: EvidenceEntry) -> dict[str, Any]:
    """The JSON value an entry hash covers: seq, prev_hash and every field of its kind
    (:func:`fields_of`).

    Absent optional fields are explicit nulls, so adding a value later can
    never produce the same document as leaving it out. A schema-1 entry's
    document is unchanged by schema 2: its hash still recomputes.
    """
    document: dict[str, Any] = {"seq": seq, "prev_hash": prev_hash}
    for name in fields_of(entry.kind):
        value = getattr(entry, name)
        document[name] = list(value) if isinstance(value, tuple) else value
    return document


def entry_hash_of(seq: int, prev_hash: str, entry: EvidenceEntry) -> str:
    """``sha256:`` over the canonical JSON of :func:`entry_document` (issue 7)."""
    return identity_of(entry_document(seq, prev_hash, entry))


def entry_row(seq: int, prev_hash: str, entry_hash: str, entry: EvidenceEntry) -> tuple[Any, ...]:
    """The row for ``evidence_entries`` in :data:`ENTRY_COLUMNS` order."""
    values: dict[str, Any] = {"seq": seq, "prev_hash": prev_hash, "entry_hash": entry_hash}
    for name in (*ENTRY_FIELDS, *SHADOW_FIELDS):
        values[name] = getattr(entry, name)
    for name in ("reason_codes", *_LIST_FIELDS):
        if values[name] is not None:
            values[name] = canonical_bytes(list(values[name])).decode("utf-8")
    return tuple(values[name] for name in ENTRY_COLUMNS)


class StoredEntry(NamedTuple):
    """An entry as read back from the file, not yet checked against its hash."""

    seq: int
    prev_hash: str
    entry_hash: str
    entry: EvidenceEntry


class MalformedEntry(ValueError):
    """A stored row or exported line does not decode to a valid entry: it was
    written around the store."""


def stored_entry(row: tuple[Any, ...]) -> StoredEntry:
    """Decode a row in :data:`ENTRY_COLUMNS` order, refusing anything a valid
    append could not have written (the verifier's minimization check too)."""
    values = dict(zip(ENTRY_COLUMNS, row, strict=True))
    seq, prev_hash, entry_hash = values["seq"], values["prev_hash"], values["entry_hash"]
    if type(seq) is not int or not isinstance(prev_hash, str) or not isinstance(entry_hash, str):
        raise MalformedEntry("seq, prev_hash or entry_hash has the wrong type")
    if _SHA256_RE.fullmatch(prev_hash) is None or _SHA256_RE.fullmatch(entry_hash) is None:
        raise MalformedEntry("prev_hash or entry_hash is not an identity")
    fields = {name: values[name] for name in (*ENTRY_FIELDS, *SHADOW_FIELDS)}
    for name in ("reason_codes", *_LIST_FIELDS):
        if name != "reason_codes" and fields[name] is None:
            continue
        fields[name] = _json_list(fields[name], name)
    entry = EvidenceEntry(**fields)
    try:
        validate_entry(entry)
    except EvidenceEntryRejected as exc:
        raise MalformedEntry(f"field {exc.field!r} is not an allowed value") from exc
    return StoredEntry(seq, prev_hash, entry_hash, entry)


def _json_list(text: object, name: str) -> tuple[Any, ...]:
    if not isinstance(text, str):
        raise MalformedEntry(f"{name} is not text")
    try:
        items = parse_canonical(text)
    except ValueError as exc:
        raise MalformedEntry(f"{name} is not canonical JSON") from exc
    if not isinstance(items, list):
        raise MalformedEntry(f"{name} is not a JSON array")
    return tuple(items)


def export_document(stored: StoredEntry) -> dict[str, Any]:
    """The auditor's form of an entry: :func:`entry_document` plus its hash."""
    document = entry_document(stored.seq, stored.prev_hash, stored.entry)
    document["entry_hash"] = stored.entry_hash
    return document


def parse_export_line(line: str) -> StoredEntry:
    """Read one line written by ``export_jsonl`` back into a :class:`StoredEntry`.

    The line must be canonical JSON with exactly the exported fields; the
    caller recomputes :func:`entry_hash_of` to check it.
    """
    try:
        value = parse_canonical(line.rstrip("\n"))
    except ValueError as exc:
        raise MalformedEntry("export line is not canonical JSON") from exc
    if not isinstance(value, dict):
        raise MalformedEntry("export line does not have exactly the entry fields")
    expected = {"seq", "prev_hash", "entry_hash", *fields_of(str(value.get("kind")))}
    if set(value) != expected:
        raise MalformedEntry("export line does not have exactly the entry fields")
    for name in ("reason_codes", *_LIST_FIELDS):
        items = value.get(name)
        if name in value and (name == "reason_codes" or items is not None):
            if not isinstance(items, list):
                raise MalformedEntry(f"{name} is not a JSON array")
            value[name] = canonical_bytes(items).decode("utf-8")
    return stored_entry(tuple(value.get(name) for name in ENTRY_COLUMNS))


def checkpoint_payload(ledger_id: str, seq: int, entry_hash: str, at: int) -> bytes:
    """The signed bytes of a checkpoint: ``{ledger_id, seq, entry_hash, at}``."""
    return canonical_bytes({"ledger_id": ledger_id, "seq": seq, "entry_hash": entry_hash, "at": at})


class CheckpointClaim(NamedTuple):
    """What a verified checkpoint asserts about one ledger."""

    ledger_id: str
    seq: int
    entry_hash: str
    at: int


def parse_checkpoint_payload(payload: bytes) -> CheckpointClaim:
    """Decode verified checkpoint bytes; exactly the four fields, canonical form.

    Raises ``ValueError`` on anything else.
    """
    value = parse_canonical(payload)
    if not isinstance(value, dict) or set(value) != {"ledger_id", "seq", "entry_hash", "at"}:
        raise ValueError("checkpoint payload does not have exactly its four fields")
    ledger_id, seq, entry_hash, at = (
        value["ledger_id"],
        value["seq"],
        value["entry_hash"],
        value["at"],
    )
    if not (
        isinstance(ledger_id, str)
        and _SHA256_RE.fullmatch(ledger_id)
        and isinstance(entry_hash, str)
        and _SHA256_RE.fullmatch(entry_hash)
        and type(seq) is int
        and seq >= 1
        and type(at) is int
        and at >= 0
    ):
        raise ValueError("checkpoint payload field out of range")
    return CheckpointClaim(ledger_id, seq, entry_hash, at)


# --- SQL -----------------------------------------------------------------


def _hex_identity(column: str, prefix: str) -> str:
    """SQL: ``column`` is ``prefix`` followed by exactly 64 lower-case hex digits."""
    start = len(prefix) + 1
    return (
        f"(typeof({column}) = 'text' AND length({column}) = {len(prefix) + _HEX_DIGITS}"
        f" AND substr({column}, 1, {len(prefix)}) = '{prefix}'"
        f" AND NOT (substr({column}, {start}) GLOB '*[^0-9a-f]*'))"
    )


def _optional(column: str, expression: str) -> str:
    return f"({column} IS NULL OR {expression})"


def _one_of(column: str, vocabulary: tuple[str, ...]) -> str:
    words = ", ".join(f"'{word}'" for word in vocabulary)
    return f"({column} IN ({words}))"


_REASON_CODES_MAX_TEXT: Final = 2 + MAX_REASON_CODES * (MAX_REASON_CODE_LENGTH + 3)

_REASON_CODES_CHECK: Final = f"""(
        typeof(reason_codes) = 'text'
        AND length(reason_codes) <= {_REASON_CODES_MAX_TEXT}
        AND json_valid(reason_codes)
        AND json_type(reason_codes) = 'array'
        AND (reason_codes = '[]' OR (
            reason_codes GLOB '[[]"*"[]]'
            AND NOT (substr(reason_codes, 2, length(reason_codes) - 2) GLOB '*[^a-z0-9_",]*')
            AND NOT (reason_codes GLOB '*[[,][^"]*')
            AND NOT (reason_codes GLOB '*"[^],a-z]*')
        ))
    )"""
"""A JSON array of strings each matching ``[a-z][a-z0-9_]*``: only those
characters, quotes and commas between the brackets; every element opens with
a quote (no numbers, true/false/null, and no comma inside a code); every
opening quote is followed by a letter (no empty code, none starting with a
digit or underscore). The 64-character bound per code needs a subquery,
which SQLite does not allow in a CHECK, so only the total length is bounded
here and Python checks each code."""

_SHA = SHA256_PREFIX

_IDENTITY_LIST_MAX_TEXT: Final = 2 + MAX_DIFFERING * (len(SHA256_PREFIX) + _HEX_DIGITS + 3)
_LAYERS_MAX_TEXT: Final = 2 + MAX_DIFFERING * (max(len(word) for word in LAYERS) + 3)


def _identity_list(column: str) -> str:
    """SQL: ``column`` is NULL or a canonical JSON array of ``sha256:`` identities:
    every element is 73 characters (quotes included) and opens with ``"sha256:``,
    and between the brackets only hex digits, the prefix's letters, colons,
    quotes and commas appear. Python checks each identity exactly (as it checks
    each reason code's length, which SQL cannot without a subquery); this is the
    second line, for a writer who bypasses it: no free text fits."""
    inner = f"substr({column}, 2, length({column}) - 2)"
    return f"""({column} IS NULL OR (
        typeof({column}) = 'text'
        AND length({column}) <= {_IDENTITY_LIST_MAX_TEXT}
        AND json_valid({column})
        AND json_type({column}) = 'array'
        AND ({column} = '[]' OR (
            (length({column}) - 1) % 74 = 0
            AND {column} GLOB '[[]"sha256:*"[]]'
            AND NOT ({inner} GLOB '*[^0-9a-f:sh",]*')
            AND replace({inner}, '","', '') GLOB '"sha256:*"'
            AND length(replace({inner}, '"sha256:', '')) = (length({column}) - 1) / 74 * 66 - 1
        ))
    ))"""


def _word_list(column: str, max_text: int, nullable: bool) -> str:
    """SQL: a JSON array of words ``[a-z][a-z0-9_]*`` (the reason-code check,
    :data:`_REASON_CODES_CHECK`, for ``column``); optionally NULL."""
    check = _REASON_CODES_CHECK.replace("reason_codes", column).replace(
        str(_REASON_CODES_MAX_TEXT), str(max_text)
    )
    return f"({column} IS NULL OR {check})" if nullable else check


_SHADOW_CHECKS: Final = {
    "shadow_release_id": _optional("shadow_release_id", _hex_identity("shadow_release_id", _SHA)),
    "shadow_projection_id": _optional(
        "shadow_projection_id", _hex_identity("shadow_projection_id", _SHA)
    ),
    "shadow_disposition": _optional(
        "shadow_disposition", _one_of("shadow_disposition", DISPOSITIONS)
    ),
    "shadow_reason_codes": _word_list("shadow_reason_codes", _REASON_CODES_MAX_TEXT, True),
    "capability": _optional("capability", _one_of("capability", CAPABILITIES)),
    "differing_policy_refs": _identity_list("differing_policy_refs"),
    "differing_rule_refs": _identity_list("differing_rule_refs"),
    "differing_layers": _word_list("differing_layers", _LAYERS_MAX_TEXT, True),
}
"""Each shadow column's CHECK (all NULL outside a ``shadow`` row: :data:`_SHADOW_ROW`)."""
_SHADOW_COLUMN_DEFINITIONS: Final = "".join(
    f"    {name} TEXT CHECK {_SHADOW_CHECKS[name]},\n" for name in SHADOW_FIELDS
)

_SHADOW_ROW: Final = (
    "(kind = 'shadow' AND disposition IS NOT NULL AND status IS NULL AND approval_id IS NULL"
    + "".join(f" AND {name} IS NOT NULL" for name in SHADOW_FIELDS)
    + ") OR (kind <> 'shadow'"
    + "".join(f" AND {name} IS NULL" for name in SHADOW_FIELDS)
    + ")"
)
"""A ``shadow`` row fills every shadow column (and names no approval or status);
every other row leaves them all NULL (schema 2)."""


def _entries_table(name: str) -> str:
    """``evidence_entries`` under ``name`` (the migration builds it aside first)."""
    return f"""
CREATE TABLE IF NOT EXISTS {name} (
    seq INTEGER PRIMARY KEY CHECK (seq >= 1),
    prev_hash TEXT NOT NULL CHECK {_hex_identity("prev_hash", _SHA)},
    entry_hash TEXT NOT NULL CHECK {_hex_identity("entry_hash", _SHA)},
    kind TEXT NOT NULL CHECK {_one_of("kind", ENTRY_KINDS)},
    operation_hash TEXT NOT NULL CHECK {_hex_identity("operation_hash", _SHA)},
    decision_id TEXT NOT NULL CHECK {_hex_identity("decision_id", _SHA)},
    approval_id TEXT CHECK {_optional("approval_id", _hex_identity("approval_id", _SHA))},
    release_id TEXT NOT NULL CHECK {_hex_identity("release_id", _SHA)},
    projection_id TEXT NOT NULL CHECK {_hex_identity("projection_id", _SHA)},
    disposition TEXT CHECK {_optional("disposition", _one_of("disposition", DISPOSITIONS))},
    status TEXT CHECK {_optional("status", _one_of("status", STATUSES))},
    reason_codes TEXT NOT NULL CHECK {_REASON_CODES_CHECK},
    tenant_ref TEXT NOT NULL CHECK {_hex_identity("tenant_ref", KEYED_PREFIX)},
    at INTEGER NOT NULL CHECK (at >= 0),
{_SHADOW_COLUMN_DEFINITIONS}    CHECK ({_SHADOW_ROW})
) STRICT
"""


_ENTRIES_TABLE: Final = _entries_table("evidence_entries")
# No UNIQUE besides the primary key: a UNIQUE column would give REPLACE a
# second way to find, and silently delete, an older row.

_EXTEND_ONLY: Final = """
CREATE TRIGGER IF NOT EXISTS evidence_entries_extend_only
BEFORE INSERT ON evidence_entries
WHEN NEW.seq IS NOT (SELECT COALESCE(MAX(seq), 0) + 1 FROM evidence_entries)
  OR NEW.prev_hash IS NOT COALESCE(
       (SELECT entry_hash FROM evidence_entries ORDER BY seq DESC LIMIT 1),
       'sha256:' || hex(zeroblob(32)))
BEGIN
    SELECT RAISE(ABORT, 'evidence ledger is append-only: an entry must extend the chain');
END
"""
# Stops duplicate insert, INSERT OR REPLACE, REPLACE and upsert: each names an
# existing seq, which is never MAX(seq) + 1. 'sha256:' || hex(zeroblob(32)) is
# GENESIS_HASH (64 zeros). RAISE(ABORT) aborts whatever
# conflict clause the statement carries, so REPLACE's implicit delete is never
# reached and recursive_triggers does not matter.


def _frozen_table(table: str) -> tuple[str, str]:
    """BEFORE UPDATE and BEFORE DELETE triggers that abort unconditionally."""

    def refuse(verb: str) -> str:
        return f"""
CREATE TRIGGER IF NOT EXISTS {table}_no_{verb.lower()}
BEFORE {verb} ON {table}
BEGIN
    SELECT RAISE(ABORT, '{table} is append-only: {verb} is refused');
END
"""

    return refuse("UPDATE"), refuse("DELETE")


_CHECKPOINTS_TABLE: Final = f"""
CREATE TABLE IF NOT EXISTS ledger_checkpoints (
    seq INTEGER PRIMARY KEY CHECK (seq >= 1),
    entry_hash TEXT NOT NULL CHECK {_hex_identity("entry_hash", _SHA)},
    at INTEGER NOT NULL CHECK (at >= 0),
    envelope BLOB NOT NULL CHECK (
        typeof(envelope) = 'blob' AND length(envelope) BETWEEN 1 AND {MAX_ENVELOPE_BYTES}
    )
) STRICT
"""

_CHECKPOINTS_FORWARD_ONLY: Final = """
CREATE TRIGGER IF NOT EXISTS ledger_checkpoints_forward_only
BEFORE INSERT ON ledger_checkpoints
WHEN NEW.seq IS NULL
  OR NEW.seq <= (SELECT COALESCE(MAX(seq), 0) FROM ledger_checkpoints)
  OR NEW.entry_hash IS NOT (SELECT entry_hash FROM evidence_entries WHERE seq = NEW.seq)
BEGIN
    SELECT RAISE(ABORT, 'ledger_checkpoints is append-only and must name a stored entry');
END
"""

_META_TABLE: Final = f"""
CREATE TABLE IF NOT EXISTS ledger_meta (
    singleton INTEGER PRIMARY KEY CHECK (singleton = 1),
    ledger_id TEXT NOT NULL CHECK {_hex_identity("ledger_id", _SHA)},
    schema_version INTEGER NOT NULL CHECK (schema_version >= 1)
) STRICT
"""

_META_ONCE: Final = """
CREATE TRIGGER IF NOT EXISTS ledger_meta_once
BEFORE INSERT ON ledger_meta
WHEN EXISTS (SELECT 1 FROM ledger_meta)
BEGIN
    SELECT RAISE(ABORT, 'ledger_meta is written once');
END
"""

DDL: Final[tuple[str, ...]] = (
    _META_TABLE,
    _META_ONCE,
    *_frozen_table("ledger_meta"),
    _ENTRIES_TABLE,
    _EXTEND_ONLY,
    *_frozen_table("evidence_entries"),
    _CHECKPOINTS_TABLE,
    _CHECKPOINTS_FORWARD_ONLY,
    *_frozen_table("ledger_checkpoints"),
)
"""Every statement that creates the ledger schema, in order; idempotent."""

INSERT_ENTRY: Final = """
INSERT INTO evidence_entries (
    seq, prev_hash, entry_hash, kind, operation_hash, decision_id, approval_id,
    release_id, projection_id, disposition, status, reason_codes, tenant_ref, at,
    shadow_release_id, shadow_projection_id, shadow_disposition, shadow_reason_codes,
    capability, differing_policy_refs, differing_rule_refs, differing_layers
) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
"""
"""Columns in :data:`ENTRY_COLUMNS` order (a test keeps the two in step)."""

SELECT_ENTRIES_AFTER: Final = """
SELECT
    seq, prev_hash, entry_hash, kind, operation_hash, decision_id, approval_id,
    release_id, projection_id, disposition, status, reason_codes, tenant_ref, at,
    shadow_release_id, shadow_projection_id, shadow_disposition, shadow_reason_codes,
    capability, differing_policy_refs, differing_rule_refs, differing_layers
FROM evidence_entries WHERE seq > ? ORDER BY seq
"""
"""Columns in :data:`ENTRY_COLUMNS` order (a test keeps the two in step)."""

_V1_SELECT: Final = ", ".join((*V1_COLUMNS, *(f"NULL AS {name}" for name in SHADOW_FIELDS)))


def entry_columns_sql(conn: sqlite3.Connection) -> str:
    """The SELECT list of :data:`ENTRY_COLUMNS` for this file's table: a schema-1 file
    (read by the offline audit, which never migrates what it reads) has no shadow
    columns, so they are read as NULL, as a schema-1 entry's are anyway."""
    names = {row[1] for row in conn.execute("PRAGMA table_info(evidence_entries)")}
    return ", ".join(ENTRY_COLUMNS) if set(SHADOW_FIELDS) <= names else _V1_SELECT


def select_entries_after(conn: sqlite3.Connection) -> str:
    """:data:`SELECT_ENTRIES_AFTER` for this file (:func:`entry_columns_sql`)."""
    return f"SELECT {entry_columns_sql(conn)} FROM evidence_entries WHERE seq > ? ORDER BY seq"  # noqa: S608 - constant columns


# --- schema 1 -> 2 ---------------------------------------------------------------


def migrate_v1(conn: sqlite3.Connection) -> None:
    """Rebuild a schema-1 ledger file as schema 2, inside the caller's transaction.

    Schema 2 widens the ``kind`` CHECK (``shadow``) and adds the shadow columns
    (module docstring). A CHECK baked into a table cannot be changed in place, so
    this follows SQLite's documented procedure for other schema changes
    (https://sqlite.org/lang_altertable.html, "Making Other Kinds Of Table Schema
    Changes"): build the new table aside, copy every row as it is, drop the old
    table (its triggers go with it; the implicit delete fires none), rename the new
    one into place, and create the triggers again (:data:`DDL`, which the caller
    runs next). The trigger on ``ledger_checkpoints`` names ``evidence_entries``, so
    it is dropped first and recreated with the rest; the version mark is raised
    under a dropped-and-recreated ``ledger_meta`` update guard.

    Every row is copied byte for byte and a schema-1 entry's hashed document is
    unchanged by schema 2 (:func:`fields_of`), so each entry hash, the chain and
    every signed checkpoint still verify; the caller re-walks the tail before it
    appends. All of it commits as one transaction, or none of it does.
    """
    columns = ", ".join(V1_COLUMNS)
    conn.execute("DROP TRIGGER IF EXISTS ledger_checkpoints_forward_only")
    conn.execute("DROP TRIGGER IF EXISTS ledger_meta_no_update")
    conn.execute(_entries_table("evidence_entries_v2"))
    conn.execute(
        f"INSERT INTO evidence_entries_v2 ({columns}) "  # noqa: S608 - constant columns
        f"SELECT {columns} FROM evidence_entries ORDER BY seq"
    )
    conn.execute("DROP TABLE evidence_entries")
    conn.execute("ALTER TABLE evidence_entries_v2 RENAME TO evidence_entries")
    conn.execute("UPDATE ledger_meta SET schema_version = 2 WHERE schema_version = 1")
