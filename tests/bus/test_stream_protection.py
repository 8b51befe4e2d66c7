"""The streams protect themselves, and a gate refuses to start on streams that lie.

``smf_assurance.pipeline.stores.streams``: orders, reports, announcements and
checkpoints refuse message deletion and purge (JetStream's ``deny_delete`` and
``deny_purge``, whoever asks); a gate records when it made each stream and refuses
to start when one is gone or was made again (``stream_missing``, ``stream_replaced``),
and ``doctor`` says so. Junk on the checkpoint stream is reported and skipped by
``ledger verify --nats``, so it cannot make every later verification fail, while an
auditor's checkpoint file is still judged whole.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import nats
import pytest
from nats.aio.client import Client
from nats.js.errors import APIError
from structlog.testing import capture_logs

from smf_assurance.adapters.client import ProposalClient
from smf_assurance.ops.cli.main import main
from smf_assurance.ops.demo.script import SCENARIOS
from smf_assurance.ops.doctor.gates import streams as stream_checks
from smf_assurance.ops.local.defaults import OPERATOR
from smf_assurance.ops.local.natsserver import EmbeddedNatsServer
from smf_assurance.ops.local.stack import gate_config, start_embedded_server
from smf_assurance.ops.local.state import ADAPTER_ID, RUNTIME_ID, StateDir
from smf_assurance.pipeline.assembly import start_gate
from smf_assurance.pipeline.stores.ledger_schema import CHECKPOINT_PAYLOAD_TYPE, checkpoint_payload
from smf_assurance.pipeline.stores.streams import (
    STREAM_MISSING,
    STREAM_REPLACED,
    GateStreamError,
    execute_stream_config,
    gate_stream_configs,
)
from smf_assurance.subjects import names
from smf_assurance.subjects.dsse import encode_envelope, sign
from smf_assurance.subjects.keys import generate_signing_key

ANSWER_S = 10.0


@pytest.fixture
def server(state: StateDir) -> Iterator[EmbeddedNatsServer]:
    server = start_embedded_server(state)
    yield server
    server.close()


@pytest.fixture
async def operator(state: StateDir, server: EmbeddedNatsServer) -> AsyncIterator[Client]:
    credential = state.existing_credential(OPERATOR)
    assert credential is not None
    nc = await nats.connect(server.url, **credential.connect_options())
    yield nc
    await nc.close()


async def started_and_stopped(state: StateDir, url: str) -> None:
    gate = await start_gate(gate_config(state, url, co_located=True))
    await gate.close()


async def decided_and_anchored(state: StateDir, url: str) -> None:
    """One decision in the ledger, its tail signed onto the checkpoint stream."""
    gate = await start_gate(gate_config(state, url, co_located=True))
    credential = state.existing_credential("runtime")
    assert credential is not None
    nc = await nats.connect(url, **credential.connect_options())
    try:
        runtime = ProposalClient(
            nc, state.key("runtime"), RUNTIME_ID, "1.0", ADAPTER_ID, gate_keys=state.gate_keys()
        )
        action = next(a for a in SCENARIOS if a.expected_outcome == "deny")
        proposal = runtime.build(
            native_tool=action.native_tool,
            arguments=action.arguments,
            actor=action.actor,
            facts=action.facts,
            content=action.content,
            destination=action.destination,
        )
        assert (await runtime.propose(proposal)).outcome == "deny"
        assert await gate.ledger.checkpoint(time.time_ns() // 1_000_000) is not None
    finally:
        await nc.close()
        await gate.close()


@pytest.mark.claim("bus-access.streams-protect-themselves")
async def test_not_even_the_operator_deletes_or_purges_an_order_or_a_report(
    state: StateDir, server: EmbeddedNatsServer, operator: Client
) -> None:
    await started_and_stopped(state, server.url)
    js = operator.jetstream(timeout=ANSWER_S)
    streams = []
    for config in gate_stream_configs():  # orders, reports, checkpoints, announcements
        assert config.name is not None
        assert config.subjects
        streams.append(config.name)
        info = await js.stream_info(config.name)
        assert (info.config.deny_delete, info.config.deny_purge) == (True, True), config.name
        before = info.state.messages
        # one message of the operator's in each, whatever it holds already
        subject = config.subjects[0].replace(">", "test")
        ack = await js.publish(subject, b"a message the operator would remove")
        with pytest.raises(APIError):
            await js.purge_stream(config.name)
        with pytest.raises(APIError):
            await js.delete_msg(config.name, ack.seq)
        assert (await js.stream_info(config.name)).state.messages == before + 1, config.name
    assert set(streams) >= {
        names.EXECUTE_STREAM,
        names.RESULT_STREAM,
        names.CHECKPOINT_STREAM,
        names.APPROVAL_STREAM,
    }
    # control: the same operator purges a stream that does not protect itself
    await js.add_stream(name="SMF_SCRATCH", subjects=["scratch.>"])
    await js.publish("scratch.a", b"x")
    await js.purge_stream("SMF_SCRATCH")
    assert (await js.stream_info("SMF_SCRATCH")).state.messages == 0


@pytest.mark.claim("bus-access.streams-protect-themselves")
async def test_a_stream_made_before_it_protected_itself_is_protected_at_start(
    state: StateDir, server: EmbeddedNatsServer, operator: Client
) -> None:
    js = operator.jetstream(timeout=ANSWER_S)
    old = execute_stream_config()
    old.deny_delete, old.deny_purge = False, False
    await js.add_stream(old)
    await js.publish(names.execute_subject("dms"), b"kept")
    await started_and_stopped(state, server.url)
    info = await js.stream_info(names.EXECUTE_STREAM)
    assert (info.config.deny_delete, info.config.deny_purge) == (True, True)
    assert info.state.messages == 1  # updated in place, nothing lost


@pytest.mark.claim("bus-access.streams-protect-themselves")
async def test_a_gate_refuses_to_start_on_a_stream_deleted_or_made_again(
    state: StateDir,
    server: EmbeddedNatsServer,
    operator: Client,
    capsys: pytest.CaptureFixture[str],
) -> None:
    await started_and_stopped(state, server.url)
    await started_and_stopped(state, server.url)  # control: the same streams, it starts
    js = operator.jetstream(timeout=ANSWER_S)
    await js.delete_stream(names.EXECUTE_STREAM)
    with pytest.raises(GateStreamError, match=f"{STREAM_MISSING}: stream SMF_EXECUTE") as gone:
        await start_gate(gate_config(state, server.url, co_located=True))
    assert gone.value.reason_code == STREAM_MISSING
    assert [c for c in await stream_checks(operator) if c.status != "ok"] == [
        c for c in await stream_checks(operator) if c.subject == names.EXECUTE_STREAM
    ]
    await js.add_stream(execute_stream_config())  # made again by someone: not the same
    with pytest.raises(GateStreamError) as replaced:
        await start_gate(gate_config(state, server.url, co_located=True))
    assert replaced.value.reason_code == STREAM_REPLACED
    # the command line says it in one line, naming the stream
    up = ["up", "--state-dir", str(state.root), "--nats", server.url, "--no-connectors"]
    done = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "smf_assurance.ops.cli.main", *up],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode != 0
    assert done.stderr.count("\n") == 1, done.stderr
    assert "stream_replaced: stream SMF_EXECUTE" in done.stderr
    # the operator who meant it removes the record, and the gate starts on the new stream
    state.root.joinpath("ledger.streams.json").unlink()
    await started_and_stopped(state, server.url)


async def test_a_gate_moved_to_a_new_bus_starts_there_and_says_so(
    state: StateDir, server: EmbeddedNatsServer, tmp_path: Path
) -> None:
    """None of the recorded streams on the bus: a new bus (the gate moved, or its whole
    store was replaced), not a lost stream; the gate starts, makes its streams, says
    so in its log and records the new ones (a later loss there is refused again)."""
    await started_and_stopped(state, server.url)
    with EmbeddedNatsServer(tmp_path / "new-bus") as other:
        with capture_logs() as logs:
            await started_and_stopped(state, other.url)
        assert [e for e in logs if e["event"] == "gate_streams_on_a_new_bus"]
        nc = await nats.connect(other.url)
        try:
            await nc.jetstream(timeout=ANSWER_S).delete_stream(names.RESULT_STREAM)
            with pytest.raises(GateStreamError, match=STREAM_MISSING):
                await start_gate(gate_config(state, other.url, co_located=True))
        finally:
            await nc.close()


async def test_doctor_names_a_stream_gone_or_open_to_purging(
    state: StateDir, server: EmbeddedNatsServer, operator: Client
) -> None:
    await started_and_stopped(state, server.url)
    assert {c.status for c in await stream_checks(operator)} == {"ok"}
    js = operator.jetstream(timeout=ANSWER_S)
    # JetStream refuses to take deny_purge back once set: only a stream made again without it
    info = await js.stream_info(names.RESULT_STREAM)
    info.config.deny_purge = False
    with pytest.raises(APIError, match="can not cancel deny purge"):
        await js.update_stream(info.config)
    await js.delete_stream(names.RESULT_STREAM)
    await js.add_stream(name=names.RESULT_STREAM, subjects=[f"{names.RESULT_PREFIX}.>"])
    await js.delete_stream(names.APPROVAL_STREAM)
    checks = {c.subject: c for c in await stream_checks(operator)}
    assert checks[names.RESULT_STREAM].status == "fail"
    assert "allows deleting messages and purging" in checks[names.RESULT_STREAM].detail
    assert checks[names.APPROVAL_STREAM].status == "fail"
    assert "is gone" in checks[names.APPROVAL_STREAM].detail
    assert checks[names.EXECUTE_STREAM].status == "ok"


@pytest.mark.claim("bus-access.streams-protect-themselves")
async def test_junk_on_the_checkpoint_stream_is_reported_and_skipped(
    state: StateDir,
    server: EmbeddedNatsServer,
    operator: Client,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    await decided_and_anchored(state, server.url)
    subject = names.checkpoint_subject(names.DEFAULT_GATE_NAME)
    js = operator.jetstream(timeout=ANSWER_S)
    stranger = generate_signing_key()  # a checkpoint of a key no registry trusts
    payload = checkpoint_payload("ledger-x", 1, "sha256:" + "0" * 64, 1)
    forged = encode_envelope(sign(CHECKPOINT_PAYLOAD_TYPE, payload, [stranger]))
    for junk in (b"junk", b"{}", forged):
        await js.publish(subject, junk)
    capsys.readouterr()  # the gate's own logs, before the command runs
    db = str(state.root / "ledger.db")
    verify = ["ledger", "verify", "--db", db, "--state-dir", str(state.root), "--json"]
    code = await asyncio.to_thread(main, [*verify, "--nats", server.url])
    report = json.loads(capsys.readouterr().out)
    assert (code, report["ok"], report["result"]) == (0, True, "verified")
    assert report["skipped_checkpoints"] == 3
    assert report["checkpoints"] >= 1  # the gate's own still bind the file
    # an auditor's file with the same junk is judged whole: it fails
    junk_file = tmp_path / "checkpoints.jsonl"
    junk_file.write_bytes(b"junk\n")
    code = await asyncio.to_thread(main, [*verify, "--checkpoints", str(junk_file)])
    report = json.loads(capsys.readouterr().out)
    assert (code, report["ok"], report["skipped_checkpoints"]) == (1, False, 0)
