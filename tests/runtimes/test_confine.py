"""The launcher of ``smf-assurance runtime run``: its refusals, its sandbox, its forwarders.

Real bubblewrap, a real nats-server with authorization from the registry, real
sockets; no runtime (tests/runtimes/test_hermes_confined.py drives the real Hermes).

Proves:

- bad input ends in one line and nothing runs, not even unconfined: a profile
  naming a missing folder, no profile, bubblewrap absent, bubblewrap refusing to
  build the sandbox, a secret of any principal in view (a copy of a key, a seed,
  a token, a PEM key, an environment value, the state folder itself, or a folder
  holding it); the same command with a clean view runs (control);
- the sandbox dies with its launcher (SIGKILL of the launcher: no process of it is
  left), and a change of the hold list stops the runtime (exit 75, one line);
- the NATS forwarder makes every connection the runtime's: a client without a
  credential is admitted as the runtime (which may not publish an order), and a
  client that sends another principal's nkey and signature (the operator's) is
  still the runtime; the server refuses the same client without the forwarder
  (control); a server that asks for TLS is refused;
- the model gateway forwarder replaces whatever ``Authorization`` the runtime sends
  with its token, on every request of a keep-alive connection and on chunked
  bodies, and refuses an ``Upgrade``;
- the signer signs proposals, attestations, instance proofs and output closes of
  its runtime only: an approval resolution, another runtime's proposal, bytes that
  are not DSSE are refused; a signer that is gone is ``signer_unavailable``;
- a relay whose socket is gone closes the runtime's connection at once.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import nats
import pytest
from aiohttp import web
from nats.errors import Error as NatsError

from smf_assurance.adapters.hermes.config import AdapterConfig, ConfigError
from smf_assurance.ops.cli.main import main
from smf_assurance.ops.local.confine import relay
from smf_assurance.ops.local.confine.launcher import LaunchError, prepare
from smf_assurance.ops.local.confine.profile import (
    profile_path,
)
from smf_assurance.ops.local.confine.sidecar import GatewayForwarder, NatsForwarder, SignerServer
from smf_assurance.ops.local.confine.view import SecretInView, check_view, hold_mounts, venv_bases
from smf_assurance.ops.local.defaults import OPERATOR
from smf_assurance.ops.local.model_gateway import (
    token_path,
)
from smf_assurance.ops.local.stack import start_embedded_server
from smf_assurance.ops.local.state import StateDir
from smf_assurance.ops.runtimes.provision import (
    HERMES_PRINCIPAL,
    HERMES_RUNTIME_ID,
)
from smf_assurance.subjects import dsse, names
from smf_assurance.subjects.keys import generate_signing_key
from smf_assurance.subjects.signer import (
    SIGNER_REFUSED,
    SIGNER_UNAVAILABLE,
    RemoteSigner,
    SignerError,
    parse_pae,
)
from tests.support.bus_helpers import wait_for
from tests.support.confine import (
    PROJECT,
    onboarded_state,
    one_line,
    processes_with,
    write_profile,
)

__all__ = ["onboarded_state"]  # the launcher tests' state, requested by name

pytestmark = pytest.mark.skipif(not os.access("/usr/bin/bwrap", os.X_OK), reason="no bubblewrap")


def run_cli(state: StateDir, *args: str) -> int:
    return main(
        ["runtime", "run", "--id", HERMES_RUNTIME_ID, "--state-dir", str(state.root), *args]
    )


# --- refusals, and the control ----------------------------------------------------------


@pytest.mark.claim("confinement.refuses-bad-input")
def test_a_clean_view_runs_the_command_confined(
    onboarded_state: StateDir, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    profile = write_profile(onboarded_state, tmp_path)
    marker = Path(profile.workspace, "MARKER")
    code = run_cli(
        onboarded_state, "--", "bash", "-c", f"touch {marker}; ls {onboarded_state.root}; exit 7"
    )
    assert code == 7
    assert marker.exists()
    assert "No such file or directory" in capfd.readouterr().err


@pytest.mark.claim("confinement.refuses-bad-input")
@pytest.mark.parametrize(
    ("case", "expected"),
    [
        ("missing-workspace", "does not exist"),
        ("no-profile", "no confinement profile"),
        ("bwrap-absent", "bubblewrap is not installed at /nonexistent/bwrap"),
        ("bwrap-refuses", "bubblewrap refused to build the sandbox, nothing ran"),
        ("no-token", "cannot read its gateway token"),
        ("bus-ca-unusable", "SMF_NATS_CA="),
    ],
)
def test_bad_input_is_one_line_and_nothing_runs(
    onboarded_state: StateDir,
    tmp_path: Path,
    capfd: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    case: str,
    expected: str,
) -> None:
    profile = write_profile(onboarded_state, tmp_path)
    marker = tmp_path / "MARKER"
    extra: list[str] = []
    if case == "missing-workspace":
        Path(profile.workspace).rmdir()
    elif case == "no-profile":
        profile_path(onboarded_state, HERMES_RUNTIME_ID).unlink()
    elif case == "bwrap-absent":
        extra = ["--bwrap", "/nonexistent/bwrap"]
    elif case == "bwrap-refuses":
        refusing = tmp_path / "bwrap"
        refusing.write_text('#!/bin/sh\nexec /usr/bin/bwrap --ro-bind /nonexistent-src /x "$@"\n')
        refusing.chmod(0o755)
        extra = ["--bwrap", str(refusing)]
    elif case == "bus-ca-unusable":  # the launcher's forwarder would speak TLS with it
        monkeypatch.setenv("SMF_NATS_CA", str(tmp_path / "no-such-ca.pem"))
    else:
        token_path(onboarded_state, HERMES_RUNTIME_ID).unlink()
    capfd.readouterr()
    code = run_cli(onboarded_state, *extra, "--", "touch", str(marker))
    assert code == 1
    assert expected in one_line(capfd.readouterr().err)
    assert not marker.exists()


@pytest.mark.claim("confinement.no-secret-in-view")
@pytest.mark.parametrize(
    "case", ["key-copy", "seed", "token", "pem", "env", "state-inside", "state-holder"]
)
def test_a_secret_in_view_refuses_the_start(
    onboarded_state: StateDir, tmp_path: Path, capfd: pytest.CaptureFixture[str], case: str
) -> None:
    profile = write_profile(onboarded_state, tmp_path)
    workspace, home = Path(profile.workspace), Path(profile.home)
    fields: dict[str, Any] = {}
    if case == "key-copy":
        (workspace / "notes").mkdir()
        (workspace / "notes" / "k.txt").write_bytes(
            onboarded_state.key_path("attorney-alex").read_bytes()
        )
    elif case == "seed":
        seed = onboarded_state.bus_credential_path(OPERATOR).read_text()
        (home / "memories").mkdir()
        (home / "memories" / "m.md").write_text(f"remember {seed}")
    elif case == "token":
        token = token_path(onboarded_state, HERMES_RUNTIME_ID).read_text()
        (home / "config.yaml").write_text(f"model: {{api_key: {token}}}\n")
    elif case == "pem":
        (workspace / "id").write_text("-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEF\n")
    elif case == "env":
        fields["env"] = {"NOTE": token_path(onboarded_state, HERMES_RUNTIME_ID).read_text()}
    elif case == "state-inside":
        fields["read_only"] = (str(onboarded_state.keys),)
    else:
        fields["read_only"] = (str(onboarded_state.root.parent),)
    if fields:
        write_profile(onboarded_state, tmp_path, **fields)
    marker = tmp_path / "MARKER"
    capfd.readouterr()
    assert run_cli(onboarded_state, "--", "touch", str(marker)) == 1
    line = one_line(capfd.readouterr().err)
    assert "secret" in line or "state folder" in line or "key file" in line, line
    assert not marker.exists()


def test_the_plan_shows_the_view_and_starts_nothing(
    onboarded_state: StateDir, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    profile = write_profile(onboarded_state, tmp_path)
    assert run_cli(onboarded_state, "--plan") == 0
    out = capfd.readouterr().out
    assert f"rw       {profile.workspace}" in out
    assert "profile digest: sha256:" in out
    assert not list(Path(profile.home).parent.glob("smf-confine-*"))


@pytest.mark.claim("confinement.holds-read-only")
def test_a_hold_inside_the_workspace_is_read_only_with_its_folders_anchored(
    tmp_path: Path,
) -> None:
    deep = tmp_path / "ws" / "matters" / "a"
    deep.mkdir(parents=True)
    (deep / "doc.txt").write_text("held")
    mounts, held = hold_mounts(
        [str(deep / "doc.txt"), str(tmp_path / "gone.txt"), "/usr/bin"], [str(tmp_path / "ws")]
    )
    assert held == [str(deep / "doc.txt")]
    assert [(m.kind, m.dest) for m in mounts] == [
        ("rw", str(tmp_path / "ws" / "matters")),
        ("rw", str(deep)),
        ("ro", str(deep / "doc.txt")),
    ]


def test_the_adapter_takes_one_source_of_identity(
    tmp_path: Path, onboarded_state: StateDir
) -> None:
    env = {
        "SMF_SIGNER_SOCKET": str(tmp_path / "none.sock"),
        "SMF_RUNTIME_KEY": str(onboarded_state.key_path(HERMES_PRINCIPAL)),
        "SMF_RUNTIME_ID": HERMES_RUNTIME_ID,
        "SMF_CONTEXT_FILE": "x",
    }
    with pytest.raises(ConfigError) as both:
        AdapterConfig.from_env(env)
    assert both.value.reason_code == "smf_key_source_ambiguous"
    del env["SMF_RUNTIME_KEY"]
    with pytest.raises(ConfigError) as gone:
        AdapterConfig.from_env(env)
    assert gone.value.reason_code == "smf_signer_unavailable"


def test_check_view_refuses_a_view_too_large_to_search(
    onboarded_state: StateDir, tmp_path: Path
) -> None:
    profile = write_profile(onboarded_state, tmp_path)
    Path(profile.workspace, "big").write_bytes(b"x" * 4096)
    plan, _ = prepare(onboarded_state, HERMES_RUNTIME_ID, ["true"])
    try:
        with pytest.raises(SecretInView, match="larger than"):
            check_view(plan.view, onboarded_state, plan.env, max_bytes=1024)
    finally:
        import shutil  # noqa: PLC0415

        shutil.rmtree(plan.run_dir)
    with pytest.raises(LaunchError, match="no runtime command"):
        prepare(onboarded_state, HERMES_RUNTIME_ID, [])


# --- the sandbox's life ----------------------------------------------------------------------


def launcher(state: StateDir, *command: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            *(sys.executable, "-m", "smf_assurance.ops.cli.main", "runtime", "run"),
            *("--id", HERMES_RUNTIME_ID, "--state-dir", str(state.root), "--", *command),
        ],
        cwd=PROJECT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


@pytest.mark.claim("confinement.refuses-bad-input")
async def test_the_sandbox_dies_with_its_launcher(
    onboarded_state: StateDir, tmp_path: Path
) -> None:
    write_profile(onboarded_state, tmp_path)
    token = f"smf-sandbox-{os.getpid()}-{time.monotonic_ns()}"
    proc = launcher(onboarded_state, "bash", "-c", f"sleep 300; echo {token}")
    try:
        await wait_for(lambda: any(p != proc.pid for p in processes_with(token)), timeout=20)
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        await wait_for(lambda: processes_with(token) == [], timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


@pytest.mark.claim("confinement.holds-read-only")
async def test_a_change_of_the_hold_list_stops_the_runtime(
    onboarded_state: StateDir, tmp_path: Path
) -> None:
    holds = tmp_path / "holds.json"
    holds.write_text(json.dumps({"paths": []}))
    write_profile(onboarded_state, tmp_path, holds_file=str(holds))
    token = f"smf-holds-{os.getpid()}-{time.monotonic_ns()}"
    proc = launcher(onboarded_state, "bash", "-c", f"sleep 300; echo {token}")
    try:
        await wait_for(lambda: any(p != proc.pid for p in processes_with(token)), timeout=20)
        holds.write_text(json.dumps({"paths": [str(tmp_path / "ws" / "doc.txt")]}))
        assert proc.wait(20) == 75
        assert proc.stderr is not None
        assert "legal holds of runtime hermes-demo changed" in one_line(proc.stderr.read().decode())
        await wait_for(lambda: processes_with(token) == [], timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


# --- the forwarders ----------------------------------------------------------------------------


@pytest.fixture
async def bus(onboarded_state: StateDir) -> AsyncIterator[str]:
    server = start_embedded_server(onboarded_state)
    try:
        yield server.url
    finally:
        server.close()


async def loopback_to(path: str) -> tuple[asyncio.Server, int]:
    """The in-sandbox relay's listener, here on the test's loopback."""
    server = await asyncio.start_server(relay._handler(path), "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


async def errors_of(url: str, inbox: str, **options: Any) -> tuple[list[str], Any]:
    seen: list[str] = []

    async def on_error(exc: Exception) -> None:
        seen.append(str(exc))

    nc = await nats.connect(
        url,
        inbox_prefix=inbox,
        error_cb=on_error,
        allow_reconnect=False,
        connect_timeout=10,
        **options,
    )
    return seen, nc


@pytest.mark.claim("confinement.forwarders-hold-the-secrets")
async def test_through_the_nats_forwarder_every_client_is_the_runtime(
    onboarded_state: StateDir, tmp_path: Path, bus: str
) -> None:
    port = int(bus.rsplit(":", 1)[1])
    seed = onboarded_state.bus_credential_path(HERMES_PRINCIPAL).read_bytes()
    forwarder = NatsForwarder("127.0.0.1", port, seed)
    path = str(tmp_path / "nats.sock")
    unix = await forwarder.serve(path)
    tcp, inside = await loopback_to(path)
    try:
        # no credential: admitted (the server answers its PING), as the runtime, which
        # may not publish an order
        seen, nc = await errors_of(f"nats://127.0.0.1:{inside}", "_INBOX.hermes-runtime")
        await nc.flush(timeout=5)
        await nc.publish("smf.execute.dms", b"{}")
        await nc.flush()
        await wait_for(lambda: any("permissions violation" in e.lower() for e in seen), timeout=15)
        await nc.close()
        # the operator's nkey and signature sent through the forwarder change nothing
        operator_seed = str(onboarded_state.bus_credential_path(OPERATOR))
        seen, nc = await errors_of(
            f"nats://127.0.0.1:{inside}", "_INBOX.hermes-runtime", nkeys_seed=operator_seed
        )
        await nc.publish("smf.execute.dms", b"{}")
        await nc.flush()
        await wait_for(lambda: any("permissions violation" in e.lower() for e in seen), timeout=15)
        await nc.close()
        # control: the same client without the forwarder is refused by the server
        with pytest.raises((NatsError, OSError)):
            await nats.connect(
                bus, allow_reconnect=False, connect_timeout=2, max_reconnect_attempts=0
            )
    finally:
        tcp.close()
        unix.close()
    assert forwarder.counters.connections >= 2


async def test_the_nats_forwarder_refuses_a_server_asking_for_tls(tmp_path: Path) -> None:
    async def tls_server(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b'INFO {"tls_required": true, "nonce": "abc"}\r\n')
        await writer.drain()
        await reader.read()
        writer.close()

    server = await asyncio.start_server(tls_server, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    from smf_assurance.ops.local.bus_auth import new_user_seed  # noqa: PLC0415

    forwarder = NatsForwarder("127.0.0.1", port, new_user_seed())
    path = str(tmp_path / "n.sock")
    unix = await forwarder.serve(path)
    try:
        reader, writer = await asyncio.open_unix_connection(path)
        assert await reader.read() == b""  # closed without a byte of the server's
        writer.close()
        await wait_for(lambda: forwarder.counters.refused.get("nats_tls_required") == 1)
        with pytest.raises(Exception, match="nats_first_line_not_connect"):
            forwarder.connect_line(b"PUB x 0\r\n", "nonce")
    finally:
        unix.close()
        server.close()


@pytest.fixture
async def upstream() -> AsyncIterator[tuple[str, list[dict[str, Any]]]]:
    seen: list[dict[str, Any]] = []

    async def record(request: web.Request) -> web.Response:
        seen.append(
            {"authorization": request.headers.get("Authorization"), "body": await request.text()}
        )
        return web.json_response({"n": len(seen)})

    app = web.Application()
    app.router.add_post("/v1/chat/completions", record)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield f"127.0.0.1:{port}", seen
    finally:
        await runner.cleanup()


def http_exchange(port: int, raw: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(raw)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


@pytest.mark.claim("confinement.forwarders-hold-the-secrets")
async def test_the_gateway_forwarder_puts_the_token_on_every_request(
    tmp_path: Path, upstream: tuple[str, list[dict[str, Any]]]
) -> None:
    address, seen = upstream
    host, port = address.split(":")
    forwarder = GatewayForwarder(host, int(port), "smfgw_the-runtimes-token")
    path = str(tmp_path / "g.sock")
    unix = await forwarder.serve(path)
    tcp, inside = await loopback_to(path)
    head = "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    raw = (
        (
            head + 'Authorization: Bearer stolen-elsewhere\r\nContent-Length: 7\r\n\r\n{"a":1}'
        ).encode()
        + (head + 'Transfer-Encoding: chunked\r\n\r\n3\r\n{"b\r\n4\r\n":2}\r\n0\r\n\r\n').encode()
        + (head + 'Content-Length: 7\r\nConnection: close\r\n\r\n{"c":3}').encode()
    )
    try:
        answer = await asyncio.to_thread(http_exchange, inside, raw)
        assert answer.count(b"HTTP/1.1 200") == 3
        assert [s["authorization"] for s in seen] == ["Bearer smfgw_the-runtimes-token"] * 3
        assert [s["body"] for s in seen] == ['{"a":1}', '{"b":2}', '{"c":3}']
        upgrade = (head + "Upgrade: websocket\r\nContent-Length: 0\r\n\r\n").encode()
        assert await asyncio.to_thread(http_exchange, inside, upgrade) == b""
        assert len(seen) == 3
        assert forwarder.counters.refused == {"http_upgrade_refused": 1}
    finally:
        tcp.close()
        unix.close()


@pytest.mark.parametrize(
    ("head", "reason"),
    [
        (
            b"GET / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
            "http_length_refused",
        ),
        (b"GET / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n", "http_encoding_refused"),
        (
            b"GET / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n",
            "http_framing_ambiguous",
        ),
        (b"CONNECT x:1 HTTP/1.1\r\n\r\n", "http_request_line_refused"),
        (b"GET / HTTP/1.1\r\nBad Header: x\r\n\r\n", "http_header_malformed"),
        (b"GET / HTTP/1.1\r\n", "http_head_malformed"),
    ],
)
def test_the_gateway_forwarder_refuses_what_it_cannot_frame(head: bytes, reason: str) -> None:
    with pytest.raises(Exception, match=reason):
        GatewayForwarder("127.0.0.1", 1, "t").rewrite_head(head)


# --- the signer -------------------------------------------------------------------------------


def pae_of(payload_type: str, value: dict[str, Any]) -> bytes:
    return dsse.pae(payload_type, json.dumps(value).encode())


SIGNED_FOR_A_RUNTIME: dict[str, str] = {
    names.PAYLOAD_PROPOSAL: "runtime_id",
    names.PAYLOAD_ATTESTATION: "runtime_id",
    names.PAYLOAD_INSTANCE_PROOF: "runtime_id",
    names.PAYLOAD_OUTPUT_CLOSE: "runtime_id",
    names.PAYLOAD_REPORT: "connector_id",
}
"""What the claim says the signer signs, and the field that must name the runtime:
written here from the sentence, not read from the signer."""


@pytest.mark.claim("confinement.forwarders-hold-the-secrets")
async def test_the_signer_signs_the_runtimes_own_kinds_and_no_other_payload_type(
    tmp_path: Path,
) -> None:
    """Every payload type the product names is offered, naming this runtime in every
    field a payload names it by: the five kinds of the runtime are signed, every
    other type (a resolution, an order, a verdict, a confinement attestation, ...) is
    refused; each of the five naming another runtime is refused too."""
    key = generate_signing_key()
    server = SignerServer(key, HERMES_PRINCIPAL, HERMES_RUNTIME_ID)
    path = str(tmp_path / "s.sock")
    unix = await server.serve(path)
    types = sorted(v for k, v in vars(names).items() if k.startswith("PAYLOAD_"))
    assert set(SIGNED_FOR_A_RUNTIME) < set(types)
    ours = {"runtime_id": HERMES_RUNTIME_ID, "connector_id": HERMES_RUNTIME_ID}
    try:
        remote = await asyncio.to_thread(RemoteSigner.connect, path)
        for payload_type in types:
            message = pae_of(payload_type, ours)
            if payload_type in SIGNED_FOR_A_RUNTIME:
                signature = await asyncio.to_thread(remote.sign, message)
                assert key.verify_key.verify(message, signature), payload_type
                continue
            with pytest.raises(SignerError) as refused:
                await asyncio.to_thread(remote.sign, message)
            assert refused.value.reason_code == SIGNER_REFUSED, payload_type
        for payload_type, field in SIGNED_FOR_A_RUNTIME.items():
            theirs = {**ours, field: "someone-else"}
            with pytest.raises(SignerError) as exc:
                await asyncio.to_thread(remote.sign, pae_of(payload_type, theirs))
            assert exc.value.reason_code == SIGNER_REFUSED, payload_type
        remote.close()
    finally:
        unix.close()
        await unix.wait_closed()


@pytest.mark.claim("confinement.forwarders-hold-the-secrets")
async def test_the_signer_signs_only_what_its_runtime_signs(tmp_path: Path) -> None:
    key = generate_signing_key()
    server = SignerServer(key, HERMES_PRINCIPAL, HERMES_RUNTIME_ID)
    path = str(tmp_path / "s.sock")
    unix = await server.serve(path)
    try:
        remote = await asyncio.to_thread(RemoteSigner.connect, path)
        assert (remote.principal, remote.key_id) == (HERMES_PRINCIPAL, key.key_id)
        proposal = {"runtime_id": HERMES_RUNTIME_ID, "tool": "x"}
        envelope = await asyncio.to_thread(
            dsse.sign, names.PAYLOAD_PROPOSAL, json.dumps(proposal).encode(), [remote]
        )
        verified = dsse.verify(
            dsse.decode_envelope(dsse.encode_envelope(envelope)), {key.key_id: key.verify_key}
        )
        assert verified.payload == json.dumps(proposal).encode()
        assert verified.key_ids == {key.key_id}
        refused = {
            "resolution": pae_of(names.PAYLOAD_RESOLUTION, {"runtime_id": HERMES_RUNTIME_ID}),
            "other": pae_of(names.PAYLOAD_PROPOSAL, {"runtime_id": "someone-else"}),
            "raw": b"not a pre-authentication encoding",
        }
        for message in refused.values():
            with pytest.raises(SignerError) as exc:
                await asyncio.to_thread(remote.sign, message)
            assert exc.value.reason_code == SIGNER_REFUSED
        assert server.counters.refused == {
            "signer_payload_type_refused": 1,
            "signer_other_runtime": 1,
            "signer_not_dsse": 1,
        }
        assert server.answer(b"[") == {"error": "signer_request_not_json"}
        assert server.answer(b'{"op": "steal"}') == {"error": "signer_unknown_request"}
        remote.close()
    finally:
        unix.close()
        await unix.wait_closed()
    with pytest.raises(SignerError) as gone:
        await asyncio.to_thread(remote.sign, pae_of(names.PAYLOAD_PROPOSAL, proposal))
    assert gone.value.reason_code == SIGNER_UNAVAILABLE


@pytest.mark.parametrize(
    "message",
    [
        b"DSSEv1 3 abc",
        b"DSSEv1 x abc 1 d",
        b"DSSEv1 3 abc 1 de",
        b"DSSEv1 03 abc 1 d",
        b"DSSEv1 3 abcX1 d",
    ],
)
def test_parse_pae_refuses_anything_but_one_encoding(message: bytes) -> None:
    with pytest.raises(ValueError, match="DSSE"):
        parse_pae(message)
    assert parse_pae(dsse.pae("t", b"body")) == ("t", b"body")


async def test_a_relay_whose_socket_is_gone_closes_the_connection(tmp_path: Path) -> None:
    server, port = await loopback_to(str(tmp_path / "gone.sock"))
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        assert await asyncio.wait_for(reader.read(), 5) == b""
        writer.close()
    finally:
        server.close()
    with pytest.raises(SystemExit, match="usage"):
        relay.parse(["--forward", "1=/x"])


# --- what the profile and the hold list may say ---------------------------------------------


@pytest.mark.claim("confinement.refuses-bad-input")
@pytest.mark.parametrize(
    ("fields", "says"),
    [
        ({"workspace": "relative/ws"}, "is not an absolute path"),
        ({"runtime_dirs": ("/nonexistent/venv",)}, "does not exist"),
        ({"read_only": ("relative",)}, "is not an absolute path"),
        ({"cwd": "/etc/passwd"}, "is not a folder"),
        ({"holds_file": "holds.json"}, "is not an absolute path"),
        ({"env": {"SMF_RUNTIME_KEY": "/x"}}, "may not set the environment variable"),
        ({"nats_url": "nats://no-port"}, "names no host and port"),
        ({"gateway_url": "http://[bad"}, "names no host and port"),
    ],
)
def test_a_profile_that_cannot_be_confined_is_refused(
    onboarded_state: StateDir,
    tmp_path: Path,
    capfd: pytest.CaptureFixture[str],
    fields: dict[str, Any],
    says: str,
) -> None:
    write_profile(onboarded_state, tmp_path, **fields)
    capfd.readouterr()
    assert run_cli(onboarded_state, "--", "true") == 1
    assert says in one_line(capfd.readouterr().err)


@pytest.mark.parametrize(
    ("content", "says"),
    [
        (b"{", "is not valid"),
        (b'{"schema": "smf.confinement-profile/1"}', "is not valid"),
        (b"x" * (300 * 1024), "too large"),
    ],
)
def test_a_damaged_profile_is_refused(
    onboarded_state: StateDir,
    tmp_path: Path,
    capfd: pytest.CaptureFixture[str],
    content: bytes,
    says: str,
) -> None:
    write_profile(onboarded_state, tmp_path)
    profile_path(onboarded_state, HERMES_RUNTIME_ID).write_bytes(content)
    capfd.readouterr()
    assert run_cli(onboarded_state, "--", "true") == 1
    assert says in one_line(capfd.readouterr().err)


def test_a_profile_of_another_runtime_is_refused(
    onboarded_state: StateDir, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    write_profile(onboarded_state, tmp_path, runtime_id="someone-else")
    capfd.readouterr()
    assert run_cli(onboarded_state, "--", "true") == 1
    assert "names runtime someone-else" in one_line(capfd.readouterr().err)


@pytest.mark.claim("confinement.holds-read-only")
@pytest.mark.parametrize(
    ("content", "says"),
    [
        (None, "cannot read the hold list"),
        ("{", "is not JSON"),
        ('{"paths": "one"}', "is not a list of paths"),
        ('{"paths": ["relative/doc.txt"]}', "names a relative path"),
    ],
)
def test_a_hold_list_that_cannot_be_read_refuses_the_start(
    onboarded_state: StateDir,
    tmp_path: Path,
    capfd: pytest.CaptureFixture[str],
    content: str | None,
    says: str,
) -> None:
    holds = tmp_path / "holds.json"
    if content is not None:
        holds.write_text(content)
    write_profile(onboarded_state, tmp_path, holds_file=str(holds))
    marker = tmp_path / "MARKER"
    capfd.readouterr()
    assert run_cli(onboarded_state, "--", "touch", str(marker)) == 1
    assert says in one_line(capfd.readouterr().err)
    assert not marker.exists()


def test_a_venv_brings_its_base_installation(tmp_path: Path) -> None:
    base = tmp_path / "python" / "bin"
    base.mkdir(parents=True)
    venv = tmp_path / "venv"
    venv.mkdir()
    (venv / "pyvenv.cfg").write_text(f"home = {base}\ninclude-system-site-packages = false\n")
    assert venv_bases([str(venv), str(tmp_path / "plain")]) == [str(tmp_path / "python")]
    assert venv_bases([str(venv), str(tmp_path / "python")]) == []


async def test_the_relay_listens_then_runs_the_command_and_returns_its_status(
    tmp_path: Path,
) -> None:
    port = socket.socket()
    port.bind(("127.0.0.1", 0))
    number = port.getsockname()[1]
    port.close()
    ready_r, ready_w = os.pipe()
    probe = f"import socket; socket.create_connection(('127.0.0.1', {number}), 2).close()"
    code = await relay.main(
        [
            *("--ready-fd", str(ready_w), "--forward", f"{number}={tmp_path}/none.sock"),
            *("--", sys.executable, "-c", f"{probe}; raise SystemExit(3)"),
        ]
    )
    assert code == 3
    assert os.read(ready_r, 16) == b"ready\n"
    os.close(ready_r)
    assert await relay.main(["--", str(tmp_path / "no-such-program")]) == 127
