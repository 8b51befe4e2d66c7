"""``bench --confinement``: what ``runtime run`` costs, beside the bare runtime, same run.

Two series pairs (docs/CONFINEMENT.md, which gives their targets):

- **start**: the same command (the runtime's interpreter starting and exiting,
  ``python3 -c pass``) run bare, and run by the launcher: its profile read, its
  secrets read, the view built and searched for secrets, the forwarders listening,
  bubblewrap building the sandbox, the relay listening, then the command. Rounds
  alternate bare and confined. Target: the confined p50 at most 300 ms over the bare
  p50.
- **model request**: one keep-alive HTTP client (``http.client`` of the standard
  library) sends small chat completions to a fake provider on 127.0.0.1: bare,
  straight to it; confined, from inside the sandbox to the loopback port the runtime
  is configured with, through the relay, the launcher's socket and its model-gateway
  forwarder (which adds the runtime's token) to the same provider. Target: the
  confined p50 at most 0.3 ms over the bare p50.

A state of its own in a temporary folder (the demo's principals and one Hermes
runtime, no launcher key: attesting is not on the start's path), removed after.
Figures only: nothing here is asserted in a test.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import structlog

from smf_assurance.ops.demo.script import actor
from smf_assurance.ops.local.confine.launcher import LaunchError, prepare, run_plan, system_python
from smf_assurance.ops.local.confine.profile import (
    PROFILE_SCHEMA,
    ConfinementProfile,
    encode_profile,
    profile_path,
)
from smf_assurance.ops.local.model_gateway import provision_gateway_runtime, set_upstream
from smf_assurance.ops.local.natsserver import reserve_port
from smf_assurance.ops.local.state import StateDir, provision_demo
from smf_assurance.ops.runtimes.provision import (
    HERMES_PRINCIPAL,
    HERMES_RUNTIME_ID,
    provision_runtime,
)
from smf_assurance.subjects.messages import ProposedDestination
from smf_tools.bench.stats import Summary, summarize
from smf_tools.fake_model import FakeModel, Reply

log = structlog.get_logger(__name__)

DEFAULT_ROUNDS: Final = 20
"""Starts per series (a confined start costs tens of milliseconds)."""
REQUESTS: Final = 2000
"""Model requests per series."""
WARMUP: Final = 50
START_OVERHEAD_MS: Final = 300.0
FORWARD_ADDED_MS: Final = 0.3
CLIENT: Final = r"""
import http.client, json, sys, time
port, count, warmup = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
body = json.dumps({"model": "fake-model", "messages": [{"role": "user", "content": "hi"}]})
head = {"Content-Type": "application/json", "Authorization": "Bearer none"}
conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
took = []
for n in range(warmup + count):
    start = time.perf_counter_ns()
    conn.request("POST", "/v1/chat/completions", body, head)
    answer = conn.getresponse()
    answer.read()
    if answer.status != 200:
        sys.exit(f"status {answer.status}")
    if n >= warmup:
        took.append(time.perf_counter_ns() - start)
print(json.dumps(took))
"""


class ConfinementBenchError(Exception):
    """The benchmark could not run (no bubblewrap, a refused start): one line."""


@dataclass(frozen=True, slots=True)
class ConfinementResult:
    bare_start: Summary
    confined_start: Summary
    bare_request: Summary
    confined_request: Summary

    @property
    def start_overhead_ms(self) -> float:
        return (self.confined_start.p50_us - self.bare_start.p50_us) / 1000

    @property
    def forward_added_ms(self) -> float:
        return (self.confined_request.p50_us - self.bare_request.p50_us) / 1000


def _state(folder: Path, gateway_port: int, nats_port: int) -> StateDir:
    state = StateDir(folder / "state")
    provision_demo(state)
    provision_runtime(state)
    set_upstream(state, f"http://127.0.0.1:{gateway_port}/v1", "local-model")
    provision_gateway_runtime(
        state,
        HERMES_RUNTIME_ID,
        adapter_id="smf-hermes-adapter",
        actor=actor("associate-ann", "associate"),
        destination=ProposedDestination(address="cli:operator", locality="internal"),
    )
    runtimes = state.root / "runtimes"
    runtimes.mkdir(exist_ok=True)
    context = {"schema": "smf.hermes-context/1", "legal_hold_paths": []}
    (runtimes / f"{HERMES_RUNTIME_ID}.context.json").write_text(json.dumps(context))
    home, workspace = folder / "home", folder / "workspace"
    home.mkdir()
    workspace.mkdir()
    (workspace / "client.py").write_text(CLIENT)
    profile = ConfinementProfile(
        schema=PROFILE_SCHEMA,
        runtime_id=HERMES_RUNTIME_ID,
        kind="hermes",
        home=str(home),
        workspace=str(workspace),
        nats_url=f"nats://127.0.0.1:{nats_port}",
        gateway_url=f"http://127.0.0.1:{gateway_port}/v1",
        principal=HERMES_PRINCIPAL,
        gate_holds=False,  # no gate runs here: the bench measures the sandbox
    )
    profile_path(state, HERMES_RUNTIME_ID).write_bytes(encode_profile(profile))
    return state


async def _bare(argv: list[str]) -> tuple[int, bytes]:
    proc = await asyncio.create_subprocess_exec(*argv, stdout=asyncio.subprocess.PIPE)
    out, _ = await proc.communicate()
    return proc.returncode or 0, out


async def _confined(state: StateDir, argv: list[str], out_file: Path | None = None) -> int:
    """One confined run; the command's stdout goes to ``out_file`` (in the workspace)."""
    command = argv if out_file is None else ["sh", "-c", '"$@" > ' + str(out_file), "-", *argv]
    try:
        plan, held = prepare(state, HERMES_RUNTIME_ID, command)
    except LaunchError as exc:
        raise ConfinementBenchError(str(exc)) from exc
    quiet = os.open(os.devnull, os.O_WRONLY)
    try:
        outcome = await run_plan(state, plan, held, stderr=quiet)
    finally:
        os.close(quiet)
    if outcome.reason is not None:
        raise ConfinementBenchError(f"the confined run ended: {outcome.reason}")
    return outcome.exit_code


async def _starts(state: StateDir, rounds: int) -> tuple[list[int], list[int]]:
    python = system_python()
    argv = [python, "-c", "pass"]
    bare: list[int] = []
    confined: list[int] = []
    for _ in range(rounds):
        start = time.perf_counter_ns()
        code, _ = await _bare(argv)
        bare.append(time.perf_counter_ns() - start)
        start = time.perf_counter_ns()
        confined_code = await _confined(state, argv)
        confined.append(time.perf_counter_ns() - start)
        if code or confined_code:
            raise ConfinementBenchError(f"the command failed (bare {code}, {confined_code})")
    return bare, confined


async def _requests(state: StateDir, folder: Path, port: int) -> tuple[list[int], list[int]]:
    argv = [system_python(), str(folder / "workspace" / "client.py"), str(port)]
    argv += [str(REQUESTS), str(WARMUP)]
    code, out = await _bare(argv)
    if code:
        raise ConfinementBenchError(f"the bare client failed ({code})")
    bare: list[int] = json.loads(out)
    result = folder / "workspace" / "confined.json"
    if await _confined(state, argv, result):
        raise ConfinementBenchError("the confined client failed")
    confined: list[int] = json.loads(result.read_text())
    return bare, confined


async def _run(rounds: int) -> ConfinementResult:
    folder = Path(tempfile.mkdtemp(prefix="smf-bench-confine-"))
    model = await FakeModel(default=Reply(content="OK.")).start()
    nats_port = reserve_port()
    try:
        state = _state(folder, model.port, nats_port.port)
        starts = await _starts(state, rounds)
        requests = await _requests(state, folder, model.port)
    finally:
        nats_port.close()
        await model.stop()
        shutil.rmtree(folder, ignore_errors=True)
    return ConfinementResult(
        summarize("start, bare", starts[0]),
        summarize("start, confined", starts[1]),
        summarize("model request, bare", requests[0]),
        summarize("model request, through the forwarders", requests[1]),
    )


def run(rounds: int = DEFAULT_ROUNDS) -> ConfinementResult:
    if not os.access("/usr/bin/bwrap", os.X_OK):
        raise ConfinementBenchError("bubblewrap is not installed at /usr/bin/bwrap (`make bwrap`)")
    if sys.platform != "linux":
        raise ConfinementBenchError("confinement runs on Linux only")
    return asyncio.run(_run(rounds))
