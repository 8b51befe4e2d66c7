"""Output-buffer benchmark: what holding a response until its verdict costs.

The added latency of the buffer gate for a 4 KB and a
256 KB response, as a ratio to the same bytes sent straight through. Both
series run in one process against one embedded nats-server:

- straight through: the same chunks published to a plain subscriber that
  reassembles them and answers the final request (no gate);
- through the buffer: the chunks to ``smf.output.<id>`` and a signed close;
  the gate verifies, checks the commitment, detects, decides (with its
  fsync'd evidence append) and replies with the released text.

Chunks are 512 bytes, as a streaming model emits them. Every gated reply
must be an allow with the exact text released, or the run fails.
"""

from __future__ import annotations

import asyncio
import secrets
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import nats
from nats.aio.client import Client
from nats.aio.msg import Msg

from smf_assurance.adapters.output import OutputStreamer
from smf_assurance.ops.cli.output import Progress
from smf_assurance.ops.demo.script import actor
from smf_assurance.ops.local.natsserver import EmbeddedNatsServer
from smf_assurance.ops.local.stack import gate_config
from smf_assurance.ops.local.state import ADAPTER_ID, RUNTIME_ID, StateDir, provision_demo
from smf_assurance.pipeline.assembly import start_gate
from smf_assurance.subjects.messages import DataFacts, ProposedDestination
from smf_tools.bench.stats import Summary, summarize

SIZES: Final = (4 * 1024, 256 * 1024)
CHUNK: Final = 512
DEFAULT_ROUNDS: Final = 40
_FACTS: Final = DataFacts(
    classification="internal", injection_taint="clear", redaction_status="none"
)
_INTERNAL: Final = ProposedDestination(address="partner@firm.example", locality="internal")


@dataclass(frozen=True, slots=True)
class OutputResult:
    rows: tuple[tuple[Summary, Summary], ...]
    """(straight through, through the buffer) per size."""

    def ratios(self) -> list[float]:
        return [gated.p50_us / plain.p50_us for plain, gated in self.rows]


def _chunks(size: int) -> list[bytes]:
    text = secrets.token_hex(size // 2).encode()[:size]
    return [text[i : i + CHUNK] for i in range(0, len(text), CHUNK)]


async def _plain(nc: Client, subject: str, chunks: list[bytes]) -> None:
    for n, chunk in enumerate(chunks):
        await nc.publish(subject, chunk, headers={"Smf-Sequence": str(n)})
    reply = await nc.request(subject, b"", timeout=10, headers={"Smf-Final": "1"})
    if reply.data != b"".join(chunks):
        raise RuntimeError("straight-through baseline lost bytes")


async def _measure(root: Path, rounds: int, progress: Progress) -> OutputResult:
    server = EmbeddedNatsServer(root / "nats").start()
    state = StateDir(root / "state")
    provision_demo(state)
    gate = await start_gate(gate_config(state, server.url, co_located=True))
    nc = await nats.connect(server.url)
    buffers: dict[str, list[bytes]] = {}

    async def straight(msg: Msg) -> None:
        parts = buffers.setdefault(msg.subject, [])
        if msg.headers and msg.headers.get("Smf-Final"):
            await msg.respond(b"".join(buffers.pop(msg.subject)))
        else:
            parts.append(msg.data)

    try:
        await nc.subscribe("bench.plain.>", cb=straight)
        streamer = OutputStreamer(
            nc, state.key("runtime"), RUNTIME_ID, "1.0", ADAPTER_ID, gate_keys=state.gate_keys()
        )
        who = actor("associate-ann", "associate")
        rows = []
        done = 0
        for size in SIZES:
            chunks = _chunks(size)
            expected = b"".join(chunks).decode()
            plain_ns: list[int] = []
            gated_ns: list[int] = []
            for n in range(rounds + 3):
                start = time.perf_counter_ns()
                await _plain(nc, f"bench.plain.{size}.{n}", chunks)
                plain_elapsed = time.perf_counter_ns() - start
                start = time.perf_counter_ns()
                verdict = await streamer.stream(
                    chunks, actor=who, facts=_FACTS, destination=_INTERNAL
                )
                gated_elapsed = time.perf_counter_ns() - start
                if verdict.released != expected:
                    raise RuntimeError(f"buffer did not release the {size}-byte response")
                if n >= 3:  # the first rounds warm up
                    plain_ns.append(plain_elapsed)
                    gated_ns.append(gated_elapsed)
                done += 1
                progress.update(done)
            label = f"{size // 1024} KB"
            rows.append(
                (
                    summarize(f"{label} straight through", plain_ns),
                    summarize(f"{label} through the buffer gate", gated_ns),
                )
            )
        return OutputResult(tuple(rows))
    finally:
        await nc.drain()
        await gate.close()
        server.close()


def run(rounds: int = DEFAULT_ROUNDS) -> OutputResult:
    progress = Progress("output bench", (rounds + 3) * len(SIZES))
    try:
        with tempfile.TemporaryDirectory(prefix="smf-bench-output-") as tmp:
            return asyncio.run(_measure(Path(tmp), rounds, progress))
    finally:
        progress.close()
