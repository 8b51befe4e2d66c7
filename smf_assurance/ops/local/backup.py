"""Backup and restore of a state folder: the stores, the keys, and the server's streams.

docs/OPERATIONS.md, "Backup" and "Restore". A backup is one gzipped tar: ``MANIFEST.json`` first
(the format, the version and commit that wrote it, when, and every other member's
sha256 and size), then ``state/...`` (the state folder's files) and ``jetstream/...``
(one snapshot of each stream the state's nats-server holds, with its configuration).

Online and consistent, file by file:

- Streams are taken through the server (``$JS.API.STREAM.SNAPSHOT.<name>``, the
  chunks acknowledged as they arrive): the server writes a consistent copy of the
  stream and its consumers while it keeps serving. Every stream of the gate's
  account is taken: the gate's (orders, reports, approval announcements, ledger
  checkpoints) and the KV buckets (holds, releases, call contexts, tainted content).
- Each SQLite file (found by its header, not its name) is copied with SQLite's online
  backup API in one step: a copy of one committed state of that file, never a torn
  copy of a page being written, whoever writes it meanwhile.
- The other files (registry, keys, releases, trust root, connectors' folders) are
  written atomically by their owners (write, then rename), so a plain read of each
  is whole.

The order is what makes the copies agree where it matters: streams first, then the
SQLite files, then the rest. Everything each copy holds was written before it began,
and it began after the backup began, so anything consumed before the backup began
(a claim, a consumed approval, a ledger entry, a connector's idempotency record) is
in the backup. And a later copy is at least as new as an earlier one: an order on the
restored stream had its claim written before it was published, so the ledger copy
(taken after) holds that claim; an order a connector acknowledged in the stream copy
had its idempotency record written before the acknowledgement, so the connector's
copy holds it. A restored state therefore never holds an order its ledger does not
know as claimed, nor an acknowledged order its connector does not know as done.

Private keys are included: a restored gate must sign with the same key its ledger's
checkpoints were signed with, and its principals need their bus credentials. So the
archive is a secret: it is written 0600 and nothing here logs a member's content.

The manifest's digests detect damage and an edited member: a restore checks every
member against them before it writes anything. They are not a signature: whoever can
rewrite the archive can rewrite its manifest. What is signed is the ledger's
checkpoints, and a restore verifies the restored ledger against them before it
reports success.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import io
import os
import shutil
import sqlite3
import subprocess
import tarfile
import tempfile
import zlib
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import IO, Final

import msgspec
import structlog
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.errors import Error as NatsError

from smf_assurance.ops.local.bus import NATS_URL_FILE
from smf_assurance.ops.local.restored import write_restore_marker
from smf_assurance.ops.local.state import StateDir
from smf_assurance.pipeline.stores.checkpoint_stream import read_checkpoints
from smf_assurance.pipeline.stores.ledger import verify_ledger
from smf_assurance.pipeline.stores.ledger_audit import LedgerReport
from smf_assurance.pipeline.stores.streams import record_restored_streams
from smf_assurance.subjects import names
from smf_assurance.subjects.clock import wall_clock_ms
from smf_assurance.subjects.registry import load_registry

log = structlog.get_logger(__name__)

FORMAT: Final = "smf-assurance-backup/1"
MANIFEST: Final = "MANIFEST.json"
STATE_PREFIX: Final = "state"
STREAMS_PREFIX: Final = "jetstream"
SQLITE_MAGIC: Final = b"SQLite format 3\x00"
LOCK_FILE: Final = "up.lock"
"""``up``'s lock (``smf_assurance.ops.local.supervisor``): held while a gate runs."""
LEFT_OUT_TOP: Final = frozenset({"nats", LOCK_FILE, NATS_URL_FILE})
"""Top-level entries never copied as files: the server's store (taken through the
server instead), ``up``'s lock and the URL of a running ``up``."""
SIDE_SUFFIXES: Final = ("-wal", "-shm", "-journal")
"""A SQLite file's companions: its online backup copy stands alone without them."""
CHUNK_BYTES: Final = 128 * 1024
CHUNK_TIMEOUT_S: Final = 30.0
"""How long a snapshot or a restore waits for the server's next chunk or answer."""
API_TIMEOUT_S: Final = 10.0
COMMIT_UNKNOWN: Final = "unknown"
JS_API: Final = "$JS.API"


class BackupError(Exception):
    """A backup or restore refused or failed: one line, what is wrong and where."""


class ManifestFile(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    path: str
    sha256: str
    size: int
    kind: str
    """``sqlite``, ``file``, ``stream`` (a snapshot) or ``stream-config``."""


class ManifestStream(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    name: str
    messages: int
    first_seq: int
    last_seq: int
    consumers: int


class Manifest(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    format: str
    version: str
    commit: str
    started_at_ms: int
    finished_at_ms: int
    online: bool
    keys_included: bool
    order: str
    streams: tuple[ManifestStream, ...]
    files: tuple[ManifestFile, ...]


ORDER: Final = "streams (server snapshots), then SQLite files (online backup API), then files"

Connect = Callable[[StateDir, str], Awaitable[Client]]
"""How a restore connects to the server it started on the staged state (the staged
state's operator credential): the command line's connection, which fails in one line."""
Step = Callable[[str], None]
"""Told the name of each copy as it starts: the command line's progress."""


def _quiet(_: str) -> None:
    return None


# --- what wrote it -----------------------------------------------------------------


def package_version() -> str:
    from importlib.metadata import (  # noqa: PLC0415 - read only when a backup is made
        PackageNotFoundError,
        version,
    )

    try:
        return version("smf-assurance")
    except PackageNotFoundError:
        return "unknown (not installed)"


def source_commit() -> str:
    """The commit of the code running, when it runs from a git checkout; else
    ``unknown`` (an installed wheel carries no commit)."""
    here = Path(__file__).resolve().parent
    try:
        done = subprocess.run(
            ["git", "-C", str(here), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return COMMIT_UNKNOWN
    commit = done.stdout.strip()
    return commit if done.returncode == 0 and len(commit) == 40 else COMMIT_UNKNOWN


# --- the copies ----------------------------------------------------------------------


def _sha256_file(path: Path) -> tuple[str, int]:
    digest = hashlib.sha256()
    size = 0
    with path.open("rb") as handle:
        while block := handle.read(CHUNK_BYTES):
            digest.update(block)
            size += len(block)
    return digest.hexdigest(), size


def is_sqlite(path: Path) -> bool:
    try:
        with path.open("rb") as handle:
            return handle.read(len(SQLITE_MAGIC)) == SQLITE_MAGIC
    except OSError:
        return False


def state_files(root: Path) -> tuple[list[Path], list[Path]]:
    """The state folder's SQLite files and its other files, relative to ``root``,
    sorted; without the server's store, ``up``'s lock and URL, the SQLite
    companions and anything that is not a regular file (a link is not followed)."""
    databases: list[Path] = []
    files: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(root):
        here = Path(dirpath)
        if here == root:
            dirnames[:] = [d for d in dirnames if d not in LEFT_OUT_TOP]
        dirnames.sort()
        for name in sorted(filenames):
            path = here / name
            relative = path.relative_to(root)
            if here == root and name in LEFT_OUT_TOP:
                continue
            if name.endswith(SIDE_SUFFIXES) or not path.is_file() or path.is_symlink():
                continue
            (databases if is_sqlite(path) else files).append(relative)
    return databases, files


def copy_sqlite(source: Path, target: Path) -> None:
    """One committed state of ``source``, through SQLite's online backup API in one
    step (the copy holds one read transaction; writers go on meanwhile)."""
    try:
        src = sqlite3.connect(f"file:{source}?mode=ro", uri=True, timeout=30)
        try:
            dst = sqlite3.connect(target)
            try:
                src.backup(dst, pages=-1)
            finally:
                dst.close()
        finally:
            src.close()
    except sqlite3.Error as exc:
        raise BackupError(f"cannot copy {source}: {exc}") from exc


async def snapshot_stream(nc: Client, name: str, out: IO[bytes]) -> dict[str, object]:
    """Write the server's snapshot of stream ``name`` (with its consumers) to ``out``;
    return the stream's configuration and state as the server gave them.

    The server sends chunks to an inbox, each with a reply subject it waits on when
    too many are unacknowledged; an empty message ends the snapshot (status 204), or
    says why it stopped."""
    inbox = nc.new_inbox()
    chunks: asyncio.Queue[Msg] = asyncio.Queue()

    async def arrived(msg: Msg) -> None:
        await chunks.put(msg)

    sub = await nc.subscribe(inbox, cb=arrived)
    try:
        request = {"deliver_subject": inbox, "no_consumers": False, "chunk_size": CHUNK_BYTES}
        answer = await nc.request(
            f"{JS_API}.STREAM.SNAPSHOT.{name}",
            msgspec.json.encode(request),
            timeout=API_TIMEOUT_S,
        )
        meta = _api_answer(answer.data, f"snapshot of stream {name}")
        while True:
            try:
                msg = await asyncio.wait_for(chunks.get(), CHUNK_TIMEOUT_S)
            except TimeoutError:
                raise BackupError(
                    f"the snapshot of stream {name} stalled: no chunk in {CHUNK_TIMEOUT_S:g} s"
                ) from None
            if not msg.data:
                status = (msg.headers or {}).get("Status", "")
                if status not in ("", "204"):
                    described = (msg.headers or {}).get("Description", "")
                    raise BackupError(f"the server stopped the snapshot of {name}: {described}")
                break
            out.write(msg.data)
            if msg.reply:
                await nc.publish(msg.reply, b"")
    finally:
        await sub.unsubscribe()
    return {"config": meta.get("config"), "state": meta.get("state")}


async def restore_stream(nc: Client, meta: dict[str, object], data: Path) -> None:
    """Make the stream of ``meta`` from its snapshot ``data`` on the server ``nc``
    is connected to (``$JS.API.STREAM.RESTORE.<name>``): each chunk is a request the
    server acknowledges, an empty one ends it, and the answer is the stream made."""
    config = meta.get("config")
    if not isinstance(config, dict) or not isinstance(config.get("name"), str):
        raise BackupError("a stream's configuration in the archive names no stream")
    name = config["name"]
    answer = await nc.request(
        f"{JS_API}.STREAM.RESTORE.{name}", msgspec.json.encode(meta), timeout=API_TIMEOUT_S
    )
    deliver = _api_answer(answer.data, f"restore of stream {name}").get("deliver_subject")
    if not isinstance(deliver, str):
        raise BackupError(f"the server gave no subject to restore stream {name} to")
    with data.open("rb") as handle:
        while block := handle.read(CHUNK_BYTES):
            await nc.request(deliver, block, timeout=CHUNK_TIMEOUT_S)
    done = await nc.request(deliver, b"", timeout=CHUNK_TIMEOUT_S)
    _api_answer(done.data, f"restore of stream {name}")


def _api_answer(data: bytes, what: str) -> dict[str, object]:
    try:
        answer = msgspec.json.decode(data)
    except msgspec.DecodeError:
        raise BackupError(f"the server's answer to the {what} is not JSON") from None
    if not isinstance(answer, dict):
        raise BackupError(f"the server's answer to the {what} is not an object")
    error = answer.get("error")
    if isinstance(error, dict):
        raise BackupError(f"the server refused the {what}: {error.get('description', error)}")
    return answer


async def stream_names(nc: Client) -> list[str]:
    """Every stream of the connection's account, sorted."""
    infos = await nc.jetstream(timeout=API_TIMEOUT_S).streams_info()
    return sorted(info.config.name for info in infos if info.config.name)


# --- backup --------------------------------------------------------------------------


@dataclass
class BackupReport:
    archive: Path
    manifest: Manifest
    archive_sha256: str
    archive_bytes: int


@dataclass
class _Staged:
    folder: Path
    files: list[ManifestFile] = field(default_factory=list)
    streams: list[ManifestStream] = field(default_factory=list)

    def add(self, path: str, kind: str) -> None:
        digest, size = _sha256_file(self.folder / path)
        self.files.append(ManifestFile(path=path, sha256=digest, size=size, kind=kind))


async def backup(
    state: StateDir,
    nc: Client,
    out: Path,
    *,
    online: bool,
    step: Step = _quiet,
) -> BackupReport:
    """Write the backup of ``state`` to ``out`` (a new file, 0600), its streams read
    through ``nc`` (a connection in the gate's account to the state's server)."""
    if out.exists() or out.is_symlink():
        raise BackupError(f"refusing to overwrite {out}")
    started = wall_clock_ms()
    log.info("backup.started", state_dir=str(state.root), online=online)
    with tempfile.TemporaryDirectory(prefix=".smf-backup-", dir=out.parent) as tmp:
        staged = _Staged(Path(tmp))
        (staged.folder / STREAMS_PREFIX).mkdir()
        for name in await stream_names(nc):
            step(f"stream {name}")
            snapshot = f"{STREAMS_PREFIX}/{name}.snapshot"
            try:
                with (staged.folder / snapshot).open("wb") as handle:
                    meta = await snapshot_stream(nc, name, handle)
            except (NatsError, TimeoutError) as exc:
                raise BackupError(f"cannot snapshot stream {name}: {type(exc).__name__}") from exc
            config = f"{STREAMS_PREFIX}/{name}.json"
            (staged.folder / config).write_bytes(msgspec.json.encode(meta))
            staged.add(config, "stream-config")
            staged.add(snapshot, "stream")
            staged.streams.append(_stream_entry(name, meta))
        databases, files = state_files(state.root)
        for relative in databases:
            step(str(relative))
            target = staged.folder / STATE_PREFIX / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            copy_sqlite(state.root / relative, target)
            staged.add(f"{STATE_PREFIX}/{relative.as_posix()}", "sqlite")
        for relative in files:
            target = staged.folder / STATE_PREFIX / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            try:
                shutil.copyfile(state.root / relative, target)
            except OSError as exc:
                raise BackupError(f"cannot copy {state.root / relative}: {exc.strerror}") from exc
            staged.add(f"{STATE_PREFIX}/{relative.as_posix()}", "file")
        manifest = Manifest(
            format=FORMAT,
            version=package_version(),
            commit=source_commit(),
            started_at_ms=started,
            finished_at_ms=wall_clock_ms(),
            online=online,
            keys_included=True,
            order=ORDER,
            streams=tuple(staged.streams),
            files=tuple(staged.files),
        )
        step("archive")
        _write_archive(staged.folder, manifest, out)
    digest, size = _sha256_file(out)
    log.info("backup.written", archive=str(out), files=len(manifest.files), bytes=size)
    return BackupReport(out, manifest, digest, size)


def _stream_entry(name: str, meta: dict[str, object]) -> ManifestStream:
    state = meta.get("state")
    got = state if isinstance(state, dict) else {}

    def number(key: str) -> int:
        value = got.get(key, 0)
        return value if isinstance(value, int) else 0

    return ManifestStream(
        name=name,
        messages=number("messages"),
        first_seq=number("first_seq"),
        last_seq=number("last_seq"),
        consumers=number("consumer_count"),
    )


def _member(name: str, size: int, mtime: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size = size
    info.mode = 0o600
    info.mtime = mtime
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


def _write_archive(folder: Path, manifest: Manifest, out: Path) -> None:
    """The archive, written beside ``out`` 0600 and renamed into place whole."""
    partial = out.with_name(f".{out.name}.partial-{os.getpid()}")
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    mtime = manifest.finished_at_ms // 1000
    try:
        with os.fdopen(fd, "wb") as raw, tarfile.open(fileobj=raw, mode="w:gz") as tar:
            document = msgspec.json.format(msgspec.json.encode(manifest), indent=2)
            tar.addfile(_member(MANIFEST, len(document), mtime), io.BytesIO(document))
            for entry in manifest.files:
                with (folder / entry.path).open("rb") as handle:
                    tar.addfile(_member(entry.path, entry.size, mtime), handle)
        if out.exists():
            raise BackupError(f"refusing to overwrite {out}")
        partial.replace(out)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise


# --- restore -------------------------------------------------------------------------


@dataclass
class RestoreReport:
    state_dir: Path
    manifest: Manifest
    ledger: LedgerReport | None
    """None when the backup holds no ledger (a state no gate ever ran on)."""
    external_checkpoints: int
    replaced: Path | None


def _safe_member(name: str) -> PurePosixPath:
    path = PurePosixPath(name)
    if path.is_absolute() or ".." in path.parts or not path.parts:
        raise BackupError(f"the archive names a path outside the state folder: {name!r}")
    return path


def read_manifest(archive: Path) -> Manifest:
    """The archive's manifest, once every member matched it: the one member named,
    the sha256 and size of each, none missing, none more. Nothing is written."""
    try:
        with tarfile.open(archive, "r:*") as tar:
            first = tar.next()
            if first is None or first.name != MANIFEST or not first.isfile():
                raise BackupError(f"{archive} is not a backup: it does not begin with {MANIFEST}")
            raw = tar.extractfile(first)
            assert raw is not None  # a regular file
            try:
                manifest = msgspec.json.decode(raw.read(), type=Manifest)
            except msgspec.DecodeError as exc:
                raise BackupError(f"{archive}: its {MANIFEST} is unreadable: {exc}") from None
            if manifest.format != FORMAT:
                raise BackupError(f"{archive} is a {manifest.format!r} backup, not {FORMAT}")
            expected = {entry.path: entry for entry in manifest.files}
            if len(expected) != len(manifest.files):
                raise BackupError(f"{archive}: its manifest names a member twice")
            seen: set[str] = set()
            for member in tar:
                if member.offset == first.offset:
                    continue
                _safe_member(member.name)
                entry = expected.get(member.name)
                if entry is None or member.name in seen or not member.isfile():
                    raise BackupError(f"{archive}: member {member.name} is not in its manifest")
                seen.add(member.name)
                handle = tar.extractfile(member)
                assert handle is not None
                digest, size = _digest_stream(handle)
                if (digest, size) != (entry.sha256, entry.size):
                    raise BackupError(
                        f"{archive}: member {member.name} does not match its manifest digest"
                    )
            missing = sorted(set(expected) - seen)
            if missing:
                raise BackupError(f"{archive}: member {missing[0]} of its manifest is missing")
    except (tarfile.TarError, EOFError, OSError, ValueError, zlib.error) as exc:
        if isinstance(exc, BackupError):
            raise
        raise BackupError(f"{archive} is not a readable backup archive: {exc}") from None
    for entry in manifest.files:
        _safe_member(entry.path)
    return manifest


def _digest_stream(handle: IO[bytes]) -> tuple[str, int]:
    digest = hashlib.sha256()
    size = 0
    while block := handle.read(CHUNK_BYTES):
        digest.update(block)
        size += len(block)
    return digest.hexdigest(), size


@contextlib.contextmanager
def not_running(state: StateDir) -> Iterator[None]:
    """Hold ``up``'s lock on ``state`` (when it has one) for the restore: refused
    while a gate runs there, and no gate starts there until the restore is done."""
    lock = state.root / LOCK_FILE
    try:
        fd = os.open(lock, os.O_RDWR)
    except FileNotFoundError:
        yield
        return
    except OSError as exc:
        raise BackupError(f"cannot open {lock}: {exc.strerror}") from exc
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise BackupError(
                f"a gate is running on {state.root} (`smf-assurance up` holds {lock}); "
                "stop it before restoring"
            ) from None
        yield
    finally:
        os.close(fd)


def check_target(state: StateDir, force: bool) -> None:
    """Refuse a target that is not a folder, or one that holds anything, unless
    ``force``."""
    root = state.root
    if root.exists() and not root.is_dir():
        raise BackupError(f"{root} is not a folder")
    if root.is_dir() and any(root.iterdir()) and not force:
        raise BackupError(
            f"{root} is not empty; pass --force to set it aside and restore in its place"
        )


async def restore(
    archive: Path,
    state: StateDir,
    manifest: Manifest,
    connect: Connect,
    *,
    step: Step = _quiet,
) -> RestoreReport:
    """Restore ``archive`` (its ``manifest`` already checked) into ``state``.

    Everything is written into a new folder beside ``state``, the streams restored
    through a server started on it, and the ledger verified there, against the
    restored checkpoint stream; only then is ``state`` (set aside, when it has
    anything) replaced by it. Any failure leaves ``state`` as it was."""
    root = state.root
    root.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    staging = Path(tempfile.mkdtemp(prefix=f".{root.name}.restoring-", dir=root.parent))
    try:
        staged = StateDir(staging)
        streams: list[tuple[dict[str, object], Path]] = []
        _extract(archive, manifest, staging, streams, step)
        ledger, external = await _restore_streams(staged, streams, connect, step)
        for _, snapshot in streams:
            snapshot.unlink()
        (staging / STREAMS_PREFIX).rmdir()
        if ledger is not None and not ledger.ok:
            at = f" at seq {ledger.seq}" if ledger.seq is not None else ""
            raise BackupError(f"the restored ledger does not verify: {ledger.reason}{at}")
        write_restore_marker(staging, wall_clock_ms(), manifest.started_at_ms)
        replaced = _swap(root, staging)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    log.info("restore.done", state_dir=str(root), entries=ledger.entries if ledger else 0)
    return RestoreReport(root, manifest, ledger, external, replaced)


def _extract(
    archive: Path,
    manifest: Manifest,
    staging: Path,
    streams: list[tuple[dict[str, object], Path]],
    step: Step,
) -> None:
    """Write every member into ``staging`` (the state's files in place, the stream
    snapshots under ``jetstream/``), each checked again against the manifest as it
    is written: the archive may have changed since it was checked."""
    expected = {entry.path: entry for entry in manifest.files}
    configs: dict[str, dict[str, object]] = {}
    (staging / STREAMS_PREFIX).mkdir(mode=0o700)
    try:
        with tarfile.open(archive, "r:*") as tar:
            for member in tar:
                if member.offset == 0:
                    continue  # the manifest, checked before
                entry = expected[member.name]
                relative = _safe_member(member.name)
                if relative.parts[0] == STATE_PREFIX:
                    target = staging.joinpath(*relative.parts[1:])
                else:
                    target = staging / STREAMS_PREFIX / relative.name
                step(member.name)
                target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
                source = tar.extractfile(member)
                assert source is not None
                digest = hashlib.sha256()
                fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(fd, "wb") as out:
                    while block := source.read(CHUNK_BYTES):
                        digest.update(block)
                        out.write(block)
                if digest.hexdigest() != entry.sha256:
                    raise BackupError(f"{archive}: member {member.name} changed while restoring")
                if entry.kind == "stream-config":
                    configs[target.stem] = msgspec.json.decode(target.read_bytes())
    except (tarfile.TarError, EOFError, OSError, KeyError, zlib.error) as exc:
        raise BackupError(f"cannot restore from {archive}: {exc}") from None
    for stream in manifest.streams:
        snapshot = staging / STREAMS_PREFIX / f"{stream.name}.snapshot"
        streams.append((configs[stream.name], snapshot))
        (staging / STREAMS_PREFIX / f"{stream.name}.json").unlink()


async def _restore_streams(
    staged: StateDir,
    streams: list[tuple[dict[str, object], Path]],
    connect: Connect,
    step: Step,
) -> tuple[LedgerReport | None, int]:
    """Start the staged state's own server, restore each stream through it, and
    verify the staged ledger against the restored checkpoints; the server stops."""
    from smf_assurance.ops.local.stack import start_embedded_server  # noqa: PLC0415

    step("nats-server")
    server = start_embedded_server(staged)
    try:
        nc = await connect(staged, server.url)
        try:
            for meta, snapshot in streams:
                config = meta.get("config")
                name = config.get("name") if isinstance(config, dict) else "?"
                step(f"stream {name}")
                try:
                    await restore_stream(nc, meta, snapshot)
                except (NatsError, TimeoutError) as exc:
                    raise BackupError(
                        f"cannot restore stream {name}: {type(exc).__name__}"
                    ) from exc
            # the gate's record of when its streams were made (``StoreConfig.streams``)
            await record_restored_streams(
                nc.jetstream(), staged.ledger.with_name(staged.ledger.stem + ".streams.json")
            )
            step("ledger verify")
            trusted = load_registry(staged.registry).evidence_keys("gate")
            try:
                external = await read_checkpoints(nc.jetstream(), names.DEFAULT_GATE_NAME)
            except (NatsError, TimeoutError):
                external = []
        finally:
            await nc.close()
    finally:
        server.close()
    (staged.nats / "nats-server.log").unlink(missing_ok=True)
    if not staged.ledger.exists():
        return None, len(external)
    report = verify_ledger(staged.ledger, external, trusted, skip_invalid_external=True)
    return report, len(external)


def _swap(root: Path, staging: Path) -> Path | None:
    """Put ``staging`` in ``root``'s place; a ``root`` with anything in it is set
    aside beside it, never deleted. Returns where it was set aside."""
    aside = None
    if root.is_dir() and any(root.iterdir()):
        stamp = wall_clock_ms()
        aside = root.with_name(f"{root.name}.before-restore-{stamp}")
        root.rename(aside)
    elif root.is_dir():
        root.rmdir()
    staging.chmod(0o700)
    staging.rename(root)
    return aside
