"""The gate's legal-hold list: set by the operator, told by the gate, enforced by the OS.

A real nats-server with authorization from the registry, a real gate, the real
``smf-assurance holds`` and ``smf-assurance runtime run`` commands, real bubblewrap;
no runtime (tests/runtimes/test_hermes_confined.py drives the real Hermes under the same
launcher, which asks the gate's list at every start).

Proves:

- a path added with ``holds add`` is read-only inside a confined runtime started
  afterwards, whose profile names no hold file and whose context holds none: ``rm``,
  ``mv``, ``truncate``, ``: >`` and a Python write fail and the document is
  byte-identical; a document not held is changed by the same commands (control);
- a hold added while the runtime runs ends the run (exit 75, one line) and no
  process of the sandbox is left; the list kept by the gate is the union with the
  profile's hold file (the file's hold is still read-only);
- fail closed: a launcher whose gate does not answer does not start the runtime
  (one line, nothing ran); a gate whose bucket holds what is not a hold list refuses
  to tell it, and the runtime does not start; a gate that stops answering during a
  run ends it (exit 75, one line);
- a runtime cannot write the hold bucket, nor read it but through the gate: the
  server refuses its publish to the bucket and its JetStream call, and the list is
  unchanged (control: the same credential asks ``smf.holds`` and is told the list);
- ``holds`` refuses a relative path, the root and a control character in one line and
  changes nothing; paths are kept normalised, sorted, once; ``--json`` and the table.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import msgspec
import nats
import pytest

from smf_assurance.ops.local.defaults import OPERATOR
from smf_assurance.ops.local.natsserver import EmbeddedNatsServer
from smf_assurance.ops.local.stack import gate_config
from smf_assurance.ops.local.state import StateDir
from smf_assurance.ops.runtimes.provision import HERMES_PRINCIPAL, HERMES_RUNTIME_ID
from smf_assurance.pipeline.assembly import RunningGate, start_gate
from smf_assurance.subjects import names
from smf_assurance.subjects.bus_access import CLIENT_API
from smf_assurance.subjects.holds import (
    HOLDS_BUCKET,
    HOLDS_KEY,
    HOLDS_UNAVAILABLE,
    MAX_HOLDS_BYTES,
    HoldPathError,
    HoldsAnswer,
    HoldsRequest,
    decode_hold_list,
    hold_path,
)
from tests.support.bus_helpers import wait_for
from tests.support.confine import (
    PROJECT,
    onboarded_state,
    one_line,
    processes_with,
    write_profile,
)
from tests.support.holds import holds_cli, server

__all__ = ["onboarded_state", "server"]


pytestmark = pytest.mark.skipif(not os.access("/usr/bin/bwrap", os.X_OK), reason="no bubblewrap")

ATTACKS = (
    "rm -f {p}; mv {p} {p}.moved; truncate -s 0 {p}; : > {p}; echo overwritten > {p}; "
    'python3 -c \'open("{p}", "w").write("py")\''
)


@pytest.fixture
async def gate(
    onboarded_state: StateDir,
    server: EmbeddedNatsServer,
) -> AsyncIterator[RunningGate]:
    running = await start_gate(
        gate_config(onboarded_state, server.url, co_located=True, sweep_seconds=3600)
    )
    yield running
    await asyncio.wait_for(running.close(), 15)


async def run_confined(state: StateDir, *command: str) -> asyncio.subprocess.Process:
    """``runtime run`` as a process, so the gate in this loop answers its launcher."""
    return await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "smf_assurance.ops.cli.main", "runtime", "run"),
        *("--id", HERMES_RUNTIME_ID, "--state-dir", str(state.root), "--", *command),
        cwd=PROJECT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )


async def finished(proc: asyncio.subprocess.Process) -> tuple[int, str]:
    _, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode is not None
    return proc.returncode, err.decode()


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def documents(tmp_path: Path) -> tuple[Path, Path]:
    matter = tmp_path / "ws" / "matter"
    matter.mkdir(parents=True, exist_ok=True)
    held, free = matter / "held.txt", matter / "free.txt"
    held.write_text("the held original\n")
    free.write_text("a free draft\n")
    return held, free


@pytest.mark.claim("confinement.gate-holds")
async def test_a_hold_added_at_the_gate_is_read_only_in_a_runtime_started_afterwards(
    onboarded_state: StateDir,
    server: EmbeddedNatsServer,
    gate: RunningGate,
    tmp_path: Path,
    capfd: pytest.CaptureFixture[str],
) -> None:
    write_profile(onboarded_state, tmp_path, nats_url=server.url, gate_holds=True)
    held, free = documents(tmp_path)
    before = sha(held)
    assert await holds_cli(onboarded_state, server, "add", str(held)) == 0
    assert str(held) in capfd.readouterr().out
    script = f"{ATTACKS.format(p=held)}; {ATTACKS.format(p=free)}; ls {held.parent}"
    code, err = await finished(await run_confined(onboarded_state, "bash", "-c", script))
    assert code == 0, err
    assert "Read-only file system" in err or "Device or resource busy" in err
    assert sha(held) == before
    assert not Path(f"{held}.moved").exists()
    # control: the same commands change the document not held
    assert free.read_text() == "py"


@pytest.mark.claim("confinement.gate-holds")
@pytest.mark.claim("confinement.holds-read-only")
async def test_a_hold_added_while_the_runtime_runs_ends_it_and_the_file_holds_stay(
    onboarded_state: StateDir,
    server: EmbeddedNatsServer,
    gate: RunningGate,
    tmp_path: Path,
) -> None:
    held = documents(tmp_path)[0]
    from_file = tmp_path / "ws" / "matter" / "file-held.txt"
    from_file.write_text("held by the file\n")
    holds_file = tmp_path / "holds.json"
    holds_file.write_text(json.dumps({"paths": [str(from_file)]}))
    write_profile(
        onboarded_state, tmp_path, nats_url=server.url, gate_holds=True, holds_file=str(holds_file)
    )
    token = f"smf-gate-holds-{os.getpid()}-{time.monotonic_ns()}"
    marker = tmp_path / "ws" / "attempt"
    script = f"{{ echo x > {from_file}; }} 2>/dev/null; touch {marker}; sleep 300; echo {token}"
    proc = await run_confined(onboarded_state, "bash", "-c", script)
    try:
        await wait_for(marker.exists, timeout=30)
        assert from_file.read_text() == "held by the file\n"  # the file's hold: read-only
        assert await holds_cli(onboarded_state, server, "add", str(held), "--json") == 0
        code, err = await finished(proc)
        assert code == 75
        assert "legal holds of runtime hermes-demo changed" in one_line(err)
        await wait_for(lambda: processes_with(token) == [], timeout=20)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


@pytest.mark.claim("confinement.gate-holds")
async def test_a_launcher_whose_gate_does_not_answer_does_not_start_the_runtime(
    onboarded_state: StateDir,
    server: EmbeddedNatsServer,
    tmp_path: Path,
) -> None:
    write_profile(onboarded_state, tmp_path, nats_url=server.url, gate_holds=True)
    marker = tmp_path / "ws" / "MARKER"
    code, err = await finished(await run_confined(onboarded_state, "touch", str(marker)))
    assert code == 1
    line = one_line(err)
    assert "the gate's legal holds could not be read, so it does not start" in line
    assert names.HOLDS in line
    assert not marker.exists()


@pytest.mark.claim("confinement.gate-holds")
async def test_a_hold_list_the_gate_cannot_vouch_for_refuses_the_start(
    onboarded_state: StateDir,
    server: EmbeddedNatsServer,
    gate: RunningGate,
    tmp_path: Path,
) -> None:
    write_profile(onboarded_state, tmp_path, nats_url=server.url, gate_holds=True)
    credential = onboarded_state.existing_credential(OPERATOR)
    assert credential is not None
    nc = await nats.connect(server.url, connect_timeout=2, **credential.connect_options())
    try:
        kv = await nc.jetstream().key_value(HOLDS_BUCKET)
        await kv.put(HOLDS_KEY, b'{"schema":"smf.hold-list/1","paths":["relative/doc"]}')
    finally:
        await nc.close()
    marker = tmp_path / "ws" / "MARKER"
    code, err = await finished(await run_confined(onboarded_state, "touch", str(marker)))
    assert code == 1
    assert "the gate refused its hold list: holds_invalid" in one_line(err)
    assert not marker.exists()


@pytest.mark.claim("confinement.gate-holds")
async def test_a_gate_that_stops_answering_during_a_run_ends_it(
    onboarded_state: StateDir,
    server: EmbeddedNatsServer,
    tmp_path: Path,
) -> None:
    write_profile(onboarded_state, tmp_path, nats_url=server.url, gate_holds=True)
    running = await start_gate(
        gate_config(onboarded_state, server.url, co_located=True, sweep_seconds=3600)
    )
    token = f"smf-gate-gone-{os.getpid()}-{time.monotonic_ns()}"
    proc = await run_confined(onboarded_state, "bash", "-c", f"sleep 300; echo {token}")
    closed = False
    try:
        await wait_for(lambda: set(processes_with(token)) - {proc.pid}, timeout=30)
        await asyncio.wait_for(running.close(), 15)
        closed = True
        code, err = await finished(proc)
        assert code == 75
        assert "stopped (fail closed)" in one_line(err)
        await wait_for(lambda: processes_with(token) == [], timeout=20)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        if not closed:
            await asyncio.wait_for(running.close(), 15)


@pytest.mark.claim("confinement.gate-holds")
async def test_a_runtime_cannot_write_or_read_the_hold_bucket_but_asks_the_gate(
    onboarded_state: StateDir,
    server: EmbeddedNatsServer,
    gate: RunningGate,
    tmp_path: Path,
    capfd: pytest.CaptureFixture[str],
) -> None:
    held = documents(tmp_path)[0]
    assert await holds_cli(onboarded_state, server, "add", str(held), "--json") == 0
    listed = json.loads(capfd.readouterr().out)
    errors: list[Exception] = []

    async def on_error(exc: Exception) -> None:
        errors.append(exc)

    def refused(subject: str) -> bool:
        """The server's own refusal (it names the subject, lower-cased)."""
        return any(
            "permissions violation" in str(e) and subject.lower() in str(e).lower() for e in errors
        )

    credential = onboarded_state.existing_credential(HERMES_PRINCIPAL)
    assert credential is not None
    nc = await nats.connect(
        server.url, connect_timeout=2, error_cb=on_error, **credential.connect_options()
    )
    try:
        forged = b'{"schema":"smf.hold-list/1","paths":[]}'
        await nc.publish(f"$KV.{HOLDS_BUCKET}.{HOLDS_KEY}", forged)
        await wait_for(lambda: refused(f"$KV.{HOLDS_BUCKET}.{HOLDS_KEY}"), timeout=5)
        await nc.publish(f"{CLIENT_API}.STREAM.PURGE.KV_{HOLDS_BUCKET}", b"{}")
        await wait_for(lambda: refused(f"STREAM.PURGE.KV_{HOLDS_BUCKET}"), timeout=5)
        # nor read it: neither a stored value asked of JetStream nor a watch of its keys
        last = json.dumps({"last_by_subj": f"$KV.{HOLDS_BUCKET}.{HOLDS_KEY}"}).encode()
        for api in ("STREAM.MSG.GET", "DIRECT.GET"):
            await nc.publish(f"{CLIENT_API}.{api}.KV_{HOLDS_BUCKET}", last)
            await wait_for(lambda api=api: refused(f"{api}.KV_{HOLDS_BUCKET}"), timeout=5)
        await nc.subscribe(f"$KV.{HOLDS_BUCKET}.>")
        await wait_for(lambda: refused(f"$KV.{HOLDS_BUCKET}.>"), timeout=5)
        # control: the same credential asks the gate and is told the list
        reply = await nc.request(names.HOLDS, msgspec.json.encode(HoldsRequest()), 5)
        answer = msgspec.json.decode(reply.data, type=HoldsAnswer)
    finally:
        await nc.close()
    assert answer.ok
    assert answer.paths == (str(held),)
    assert answer.revision == listed["revision"]
    assert await holds_cli(onboarded_state, server, "list", "--json") == 0
    assert json.loads(capfd.readouterr().out) == listed


@pytest.mark.claim("confinement.gate-holds")
async def test_holds_refuses_bad_paths_in_one_line_and_keeps_them_normalised(
    onboarded_state: StateDir,
    server: EmbeddedNatsServer,
    gate: RunningGate,
    capfd: pytest.CaptureFixture[str],
) -> None:
    for bad, says in (
        ("relative/doc.txt", "is not an absolute path"),
        ("/", "the root folder cannot be held"),
        ("/srv/doc\n.txt", "holds a control character"),
    ):
        capfd.readouterr()
        assert await holds_cli(onboarded_state, server, "add", "/srv/ok.txt", bad) == 2
        line = one_line(capfd.readouterr().err)
        assert says in line
        assert "nothing changed" in line
    assert await holds_cli(onboarded_state, server, "list", "--json") == 0
    assert json.loads(capfd.readouterr().out) == {"revision": 1, "paths": []}
    assert (
        await holds_cli(onboarded_state, server, "add", "/srv/b//c/./d/../e.txt", "/srv/a.txt") == 0
    )
    assert await holds_cli(onboarded_state, server, "add", "/srv/a.txt/", "--json") == 0
    out = capfd.readouterr().out
    assert json.loads(out.splitlines()[-1])["paths"] == ["/srv/a.txt", "/srv/b/c/e.txt"]
    assert await holds_cli(onboarded_state, server, "remove", "/srv/a.txt") == 0
    table = capfd.readouterr().out
    assert "/srv/b/c/e.txt" in table
    assert "/srv/a.txt" not in table
    assert "1 held" in table


@pytest.mark.claim("confinement.gate-holds")
@pytest.mark.parametrize(
    ("given", "kept"),
    [
        ("/srv/a.txt", "/srv/a.txt"),
        ("/srv//b/./c/../d.txt", "/srv/b/d.txt"),
        ("//srv/e/", "/srv/e"),
    ],
)
def test_a_hold_path_is_kept_normalised(given: str, kept: str) -> None:
    assert hold_path(given) == kept


@pytest.mark.claim("confinement.gate-holds")
@pytest.mark.parametrize(
    ("stored", "why"),
    [
        (b'{"schema":"smf.hold-list/1","paths":["/b","/a"]}', "sorted and unique"),
        (b'{"schema":"smf.hold-list/1","paths":["/a","/a"]}', "sorted and unique"),
        (b'{"schema":"smf.hold-list/1","paths":["/a/../b"]}', "not normalised"),
        (b'{"schema":"smf.hold-list/1","paths":["/a"],"more":1}', "unknown field"),
        (b"[" * (MAX_HOLDS_BYTES + 1), "too large"),
    ],
)
def test_a_stored_list_no_launcher_should_mount_is_refused(stored: bytes, why: str) -> None:
    with pytest.raises((HoldPathError, msgspec.DecodeError), match=why):
        decode_hold_list(stored)


@pytest.mark.claim("confinement.gate-holds")
async def test_the_desk_refuses_a_malformed_request_and_a_bucket_it_cannot_read(
    onboarded_state: StateDir,
    server: EmbeddedNatsServer,
    gate: RunningGate,
) -> None:
    credential = onboarded_state.existing_credential(HERMES_PRINCIPAL)
    assert credential is not None
    nc = await nats.connect(server.url, connect_timeout=2, **credential.connect_options())
    try:
        reply = await nc.request(names.HOLDS, b'{"schema":"smf.holds-request/9"}', 5)
        answer = msgspec.json.decode(reply.data, type=HoldsAnswer)
        assert (answer.ok, answer.reason, answer.paths) == (False, "malformed_request", ())
    finally:
        await nc.close()
    operator = onboarded_state.existing_credential(OPERATOR)
    assert operator is not None
    admin = await nats.connect(server.url, connect_timeout=2, **operator.connect_options())
    try:
        # the bucket gone (only an operator can): the gate says so, never "nothing held"
        await admin.jetstream().delete_key_value(HOLDS_BUCKET)
    finally:
        await admin.close()
    nc = await nats.connect(server.url, connect_timeout=2, **credential.connect_options())
    try:
        reply = await nc.request(names.HOLDS, msgspec.json.encode(HoldsRequest()), 5)
    finally:
        await nc.close()
    refused = msgspec.json.decode(reply.data, type=HoldsAnswer)
    assert (refused.ok, refused.reason, refused.paths) == (False, HOLDS_UNAVAILABLE, ())
