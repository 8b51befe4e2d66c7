"""``backup`` and ``restore``: one archive of a state folder, and the state again from it.

What is copied, in which order and why is :mod:`smf_assurance.ops.local.backup`'s;
this module finds the bus, takes the locks, shows progress and reports. ``backup``
reads a running ``up``'s server (the ``nats.url`` it wrote, or ``--nats``); with no
``up`` running it takes ``up``'s lock, so none starts meanwhile, and starts the
state's own server for the streams. ``restore`` is refused while ``up`` runs on the
state, and the archive is checked whole before anything is written.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

import msgspec
from nats.aio.client import Client

from smf_assurance.ops.cli.cli_json import (
    BackupFileJson,
    BackupJson,
    BackupStreamJson,
    RestoreJson,
)
from smf_assurance.ops.cli.output import emit, fail, format_instant, say, table
from smf_assurance.ops.local.backup import (
    BackupError,
    BackupReport,
    Manifest,
    RestoreReport,
    backup,
    check_target,
    not_running,
    read_manifest,
    restore,
)
from smf_assurance.ops.local.bus import connect_bus, credential_for, nats_url_path
from smf_assurance.ops.local.defaults import OPERATOR, default_state_dir
from smf_assurance.ops.local.logs import configure_logging
from smf_assurance.ops.local.state import StateDir, private_files
from smf_assurance.subjects.bus_access import BusCredential
from smf_assurance.subjects.clock import monotonic_s

SLOW_S = 1.0
"""Progress shows once a command has run this long (``output``'s rule: anything
slower than a second)."""


class Steps:
    """Progress on stderr: each copy's name once the command has run a second."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.started = monotonic_s()

    def __call__(self, what: str) -> None:
        if monotonic_s() - self.started >= SLOW_S:
            sys.stderr.write(f"{self.label}: {what}\n")
            sys.stderr.flush()


def _quiet_logs() -> None:
    configure_logging(json=not sys.stderr.isatty(), level="warning")


@contextlib.contextmanager
def _refusals() -> Iterator[None]:
    try:
        yield
    except BackupError as exc:
        fail(str(exc))


# --- backup ---------------------------------------------------------------------------


def run_backup(args: argparse.Namespace) -> int:
    _quiet_logs()
    private_files()
    state = StateDir(args.state_dir or default_state_dir())
    if not state.registry.is_file():
        fail(f"{state.root} is not a state folder (no {state.registry.name})")
    out: Path = args.out
    if out.exists() or out.is_symlink():
        fail(f"refusing to overwrite {out}")
    if not out.parent.is_dir():
        fail(f"cannot create {out}: no folder {out.parent}")
    credential = credential_for(args.credential, state.root, OPERATOR)
    url = args.nats or _running_url(state)
    with _refusals():
        if url is not None:
            report = asyncio.run(_online(state, url, credential, out))
        else:
            report = _offline(state, credential, out)
    if args.json:
        emit(_backup_json(report, state))
    else:
        _print_backup(report, state)
    return 0


def _running_url(state: StateDir) -> str | None:
    path = nats_url_path(state.root)
    try:
        return path.read_text(encoding="utf-8").strip() or None
    except FileNotFoundError:
        return None
    except OSError as exc:
        fail(f"cannot read {path}: {exc.strerror}")


async def _online(
    state: StateDir, url: str, credential: BusCredential | None, out: Path
) -> BackupReport:
    nc = await connect_bus(url, "smf-backup", credential)
    try:
        return await backup(state, nc, out, online=True, step=Steps("backup"))
    finally:
        await nc.close()


def _offline(state: StateDir, credential: BusCredential | None, out: Path) -> BackupReport:
    """No ``up`` runs: hold its lock and start the state's own server for the streams."""
    from smf_assurance.ops.local.stack import start_embedded_server  # noqa: PLC0415
    from smf_assurance.ops.local.supervisor import exclusive  # noqa: PLC0415

    with exclusive(state):
        server = start_embedded_server(state)
        try:

            async def take() -> BackupReport:
                nc = await connect_bus(server.url, "smf-backup", credential)
                try:
                    return await backup(state, nc, out, online=False, step=Steps("backup"))
                finally:
                    await nc.close()

            return asyncio.run(take())
        finally:
            server.close()


def _streams_json(manifest: Manifest) -> tuple[BackupStreamJson, ...]:
    return tuple(
        msgspec.convert(msgspec.to_builtins(s), BackupStreamJson) for s in manifest.streams
    )


def _backup_json(report: BackupReport, state: StateDir) -> BackupJson:
    m = report.manifest
    return BackupJson(
        archive=str(report.archive),
        archive_sha256=report.archive_sha256,
        archive_bytes=report.archive_bytes,
        state_dir=str(state.root),
        online=m.online,
        keys_included=m.keys_included,
        version=m.version,
        commit=m.commit,
        started_at_ms=m.started_at_ms,
        finished_at_ms=m.finished_at_ms,
        streams=_streams_json(m),
        files=tuple(msgspec.convert(msgspec.to_builtins(f), BackupFileJson) for f in m.files),
    )


def _print_backup(report: BackupReport, state: StateDir) -> None:
    m = report.manifest
    kinds: dict[str, int] = {}
    for entry in m.files:
        kinds[entry.kind] = kinds.get(entry.kind, 0) + 1
    table(
        ("field", "value"),
        [
            ("archive", report.archive),
            ("archive sha256", report.archive_sha256),
            ("archive bytes", report.archive_bytes),
            ("state dir", state.root),
            ("online", m.online),
            ("started", format_instant(m.started_at_ms)),
            ("finished", format_instant(m.finished_at_ms)),
            ("version", m.version),
            ("commit", m.commit),
            ("sqlite files", kinds.get("sqlite", 0)),
            ("other files", kinds.get("file", 0)),
            ("private keys", "included: keep the archive as secret as the state folder"),
        ],
    )
    say("")
    table(
        ("stream", "messages", "first seq", "last seq", "consumers"),
        [(s.name, s.messages, s.first_seq, s.last_seq, s.consumers) for s in m.streams],
    )


# --- restore --------------------------------------------------------------------------


def run_restore(args: argparse.Namespace) -> int:
    _quiet_logs()
    private_files()
    archive: Path = args.archive
    if not archive.is_file():
        fail(f"--from {archive}: no such file", 2)
    state = StateDir(args.state_dir or default_state_dir())
    with _refusals():
        check_target(state, args.force)
        with not_running(state):
            check_target(state, args.force)
            manifest = read_manifest(archive)
            report = asyncio.run(restore(archive, state, manifest, _connect, step=Steps("restore")))
    if args.json:
        emit(_restore_json(report, archive))
    else:
        _print_restore(report, archive)
    return 0


async def _connect(staged: StateDir, url: str) -> Client:
    return await connect_bus(url, "smf-restore", staged.existing_credential(OPERATOR))


def _result(report: RestoreReport) -> Literal["verified", "self-consistent", "no-ledger"]:
    if report.ledger is None:
        return "no-ledger"
    return "verified" if report.external_checkpoints else "self-consistent"


def _restore_json(report: RestoreReport, archive: Path) -> RestoreJson:
    m, ledger = report.manifest, report.ledger
    return RestoreJson(
        archive=str(archive),
        state_dir=str(report.state_dir),
        replaced=None if report.replaced is None else str(report.replaced),
        version=m.version,
        commit=m.commit,
        started_at_ms=m.started_at_ms,
        files=len(m.files),
        streams=_streams_json(m),
        ledger_result=_result(report),
        ledger_entries=0 if ledger is None else ledger.entries,
        ledger_last_seq=0 if ledger is None else ledger.last_seq,
        checkpoints=0 if ledger is None else ledger.checkpoints,
        external_checkpoints=report.external_checkpoints,
    )


def _print_restore(report: RestoreReport, archive: Path) -> None:
    m, ledger = report.manifest, report.ledger
    table(
        ("field", "value"),
        [
            ("archive", archive),
            ("state dir", report.state_dir),
            ("set aside", report.replaced or "-"),
            ("backup started", format_instant(m.started_at_ms)),
            ("written by", f"{m.version} ({m.commit})"),
            ("members checked", len(m.files)),
            ("streams restored", ", ".join(s.name for s in m.streams) or "-"),
            ("ledger", _result(report)),
            ("ledger entries", "-" if ledger is None else ledger.entries),
            ("checkpoints verified", "-" if ledger is None else ledger.checkpoints),
            ("external checkpoints", report.external_checkpoints),
        ],
    )
