"""``ledger``: verify the evidence ledger, export it for auditors, fetch its checkpoints.

``verify`` checks the hash chain and every signed checkpoint
(:func:`smf_assurance.pipeline.stores.ledger.verify_ledger`) and names the first bad entry.
The file alone can only prove it agrees with itself: an attacker with the
file can cut its tail or replace it whole and stay consistent. What catches
that are checkpoints kept outside the file, on the ``SMF_LEDGER_CHECKPOINTS``
stream (created with DenyDelete and DenyPurge), read with ``--nats`` or from
a file ``ledger checkpoints`` wrote. The report says how many external
checkpoints it had, so "ok" is never read as more than it proves.

Checkpoints are trusted only when signed by a gate key named in a registry
(``--state-dir``, or ``--key`` pointing at a registry; a key the registry has
retired counts, since it signed before its rotation:
``KeyRegistry.evidence_keys``) or in a public key record (``--key``); a private
key file is refused, because a verifier never needs one.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

import msgspec
from nats.errors import Error as NatsError
from nats.js.errors import NotFoundError

from smf_assurance.ops.cli.cli_json import LedgerVerifyJson
from smf_assurance.ops.cli.output import CommandError, emit, fail, first_line, say, table
from smf_assurance.ops.local.bus import (
    bus_url,
    connect_bus,
    credential_for,
)
from smf_assurance.ops.local.defaults import OPERATOR, default_state_dir
from smf_assurance.ops.local.logs import configure_logging
from smf_assurance.ops.local.state import StateDir
from smf_assurance.pipeline.stores.checkpoint_stream import read_checkpoints
from smf_assurance.pipeline.stores.ledger import (
    EvidenceStoreUnavailable,
    LedgerIntegrityError,
    LedgerReport,
    export_jsonl,
    verify_ledger,
)
from smf_assurance.subjects import names
from smf_assurance.subjects.bus_access import BusCredential
from smf_assurance.subjects.keys import (
    PRIVATE_KEY_KIND,
    PUBLIC_KEY_KIND,
    KeyFileError,
    PublicKeyRecord,
    VerifyKey,
    verify_key_from_record,
)
from smf_assurance.subjects.registry import REGISTRY_SCHEMA, RegistryError, load_registry


def _gate_name(name: str) -> str:
    try:
        return names.token(name)
    except names.SubjectError:
        fail(f"--gate: {name!r} is not a gate name", 2)


def _quiet_logs() -> None:
    """verify_ledger logs at info; keep stdout for the report."""
    configure_logging(json=not sys.stderr.isatty(), level="warning")


@contextlib.contextmanager
def _output(path: Path | None) -> Iterator[TextIO]:
    """stdout, or a new file that is removed again if writing it fails.

    Never over an existing file: an earlier export may be the auditor's copy.
    """
    if path is None:
        yield sys.stdout
        return
    try:
        handle = path.open("x", encoding="utf-8")
    except FileExistsError:
        fail(f"refusing to overwrite {path}")
    except OSError as exc:
        fail(f"cannot create {path}: {exc.strerror}")
    try:
        with handle:
            yield handle
    except BaseException:
        path.unlink(missing_ok=True)
        raise


def _require_file(path: Path, what: str) -> None:
    if not path.is_file():
        fail(f"{what} {path}: no such file", 2)


# --- trusted keys ----------------------------------------------------------------


def trusted_gate_keys(key: Path | None, state_dir: Path | None) -> dict[str, VerifyKey]:
    """The gate keys a checkpoint may be signed with."""
    if key is None:
        registry = StateDir(state_dir or default_state_dir()).registry
        if not registry.is_file():
            fail(f"no trusted gate key: pass --key FILE or --state-dir DIR (no {registry})")
        return _registry_gate_keys(registry)
    try:
        document = msgspec.json.decode(key.read_bytes())
    except OSError as exc:
        fail(f"cannot read {key}: {exc.strerror}", 2)
    except msgspec.DecodeError:
        fail(f"--key {key}: not JSON")
    kind = document.get("kind") if isinstance(document, dict) else None
    schema = document.get("schema") if isinstance(document, dict) else None
    if kind == PUBLIC_KEY_KIND:
        try:
            record = msgspec.convert(document, PublicKeyRecord)
            verify_key = verify_key_from_record(record)
        except (msgspec.ValidationError, KeyFileError) as exc:
            fail(f"--key {key}: {first_line(exc)}")
        return {verify_key.key_id: verify_key}
    if schema == REGISTRY_SCHEMA:
        return _registry_gate_keys(key)
    if kind == PRIVATE_KEY_KIND:
        reason = "is a private key; pass its public record (`smf-assurance keys public --json`)"
    else:
        reason = "is neither a public key record nor a registry"
    raise CommandError(f"--key {key} {reason}")


def _registry_gate_keys(path: Path) -> dict[str, VerifyKey]:
    try:
        keys = load_registry(path).evidence_keys("gate")
    except RegistryError as exc:
        fail(first_line(exc))
    if not keys:
        fail(f"registry {path} names no gate key")
    return keys


# --- checkpoints -------------------------------------------------------------------


async def fetch_checkpoints(
    url: str,
    credential: BusCredential | None,
    gate_name: str = names.DEFAULT_GATE_NAME,
) -> list[bytes]:
    """Every envelope one gate published on the checkpoint stream, in stream order.

    Only that gate's subject: on a cluster the replicas share the stream, and a
    checkpoint of another replica's ledger would read as a replaced file.
    """
    nc = await connect_bus(url, "smf-ledger-verify", credential)
    try:
        return await read_checkpoints(nc.jetstream(), gate_name)
    except NotFoundError:
        fail(f"no {names.CHECKPOINT_STREAM} stream at {url}: is the gate running there?")
    except (NatsError, TimeoutError) as exc:
        fail(f"cannot read the {names.CHECKPOINT_STREAM} stream: {first_line(exc)}")
    finally:
        await nc.close()


def read_checkpoint_file(path: Path) -> list[bytes]:
    try:
        lines = path.read_bytes().splitlines()
    except OSError as exc:
        fail(f"cannot read {path}: {exc.strerror}", 2)
    return [line.strip() for line in lines if line.strip()]


# --- verify ---------------------------------------------------------------------------


def run_verify(args: argparse.Namespace) -> int:
    _quiet_logs()
    _require_file(args.db, "--db")
    trusted = trusted_gate_keys(args.key, args.state_dir)
    read_from: dict[str, str | None] = {
        "checkpoints_from": None,
        "checkpoints_at": None,
        "checkpoints_gate": None,
    }
    if args.nats:
        gate = _gate_name(args.gate)
        credential = credential_for(args.credential, args.state_dir, OPERATOR)
        external = asyncio.run(fetch_checkpoints(args.nats, credential, gate))
        source = f"{names.CHECKPOINT_STREAM} ({gate}) at {args.nats}"
        read_from.update(checkpoints_from="nats", checkpoints_at=args.nats, checkpoints_gate=gate)
    elif args.checkpoints:
        external = read_checkpoint_file(args.checkpoints)
        source = str(args.checkpoints)
        read_from.update(checkpoints_from="file", checkpoints_at=source)
    else:
        external, source = [], None
    # junk on the shared stream is reported and skipped; an auditor's file is judged whole
    report = verify_ledger(args.db, external, trusted, skip_invalid_external=bool(args.nats))
    result = verdict(report, len(external), source)
    if args.json:
        checked = {
            **msgspec.to_builtins(report),
            "result": result,
            "external_checkpoints": len(external),
            **read_from,
        }
        emit(msgspec.convert(checked, type=LedgerVerifyJson))
    else:
        _print_report(report, result, len(external), source)
    if not report.ok:
        at_seq = f" at seq {report.seq}" if report.seq is not None else ""
        fail(f"ledger verify failed: {report.reason}{at_seq}")
    if result == UNANCHORED:
        fail(
            f"no external checkpoints checked from {source}: the file agrees with itself, "
            "but a cut tail or a replaced file would not show; check that the gate publishes "
            "checkpoints there (--gate NAME), or pass a checkpoint file (--checkpoints)"
        )
    return 0


VERIFIED = "verified"
SELF_CONSISTENT = "self-consistent"
UNANCHORED = "unanchored"
FAILED = "failed"


def verdict(report: LedgerReport, external: int, source: str | None) -> str:
    """One word for what the check proved, never "ok" for a ``--nats`` check that
    compared no external checkpoint.

    ``verified``: the chain holds and agrees with external checkpoints.
    ``self-consistent``: no external source was asked for; the file agrees
    with itself (exit 0, with the note saying what that does not prove).
    ``unanchored``: an external source was asked for and gave nothing to check;
    an auditor asked for more than was proved, so it exits 1.
    ``failed``: the chain or a checkpoint is bad.
    """
    if not report.ok:
        return FAILED
    if external:
        return VERIFIED
    return SELF_CONSISTENT if source is None else UNANCHORED


def _print_report(report: LedgerReport, result: str, external: int, source: str | None) -> None:
    rows: list[tuple[str, Any]] = [
        ("result", result),
        ("reason", report.reason or "-"),
        ("first bad seq", report.seq if report.seq is not None else "-"),
        ("ledger id", report.ledger_id or "-"),
        ("entries verified", report.entries),
        ("last seq", report.last_seq),
        ("last entry hash", report.last_entry_hash),
        ("checkpoints verified", report.checkpoints),
        ("highest checkpoint seq", report.checkpoint_seq),
        ("external checkpoints", f"{external} from {source}" if source else "none"),
        ("skipped (not a gate's)", report.skipped_checkpoints),
    ]
    table(("check", "value"), rows)
    if report.skipped_checkpoints:
        say(
            f"warning: {report.skipped_checkpoints} message(s) on the checkpoint stream are "
            "not a trusted gate's checkpoint and were skipped; someone wrote them there"
        )
    if not external:
        say(
            "note: without external checkpoints (--nats or --checkpoints) this proves only "
            "that the file agrees with itself; a cut tail or a replaced file is not detected"
        )


# --- export and checkpoints ---------------------------------------------------------


def run_export(args: argparse.Namespace) -> int:
    _quiet_logs()
    _require_file(args.db, "--db")
    try:
        with _output(args.out) as out:
            count = export_jsonl(args.db, out)
    except LedgerIntegrityError as exc:
        fail(f"export stopped: {exc.reason} at seq {exc.seq}")
    except EvidenceStoreUnavailable as exc:
        cause = exc.__cause__ or exc
        fail(f"cannot read ledger {args.db}: {first_line(cause)}")
    if args.out is not None:
        say(f"{count} entries written to {args.out}")
    return 0


def run_checkpoints(args: argparse.Namespace) -> int:
    _quiet_logs()
    url = bus_url(args.nats, args.state_dir)
    credential = credential_for(args.credential, args.state_dir, OPERATOR)
    envelopes = asyncio.run(fetch_checkpoints(url, credential, _gate_name(args.gate)))
    with _output(args.out) as out:
        for envelope in envelopes:
            out.write(envelope.decode("utf-8", "replace") + "\n")
    if args.out is not None:
        say(f"{len(envelopes)} checkpoints written to {args.out}")
    return 0
