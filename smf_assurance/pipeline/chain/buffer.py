"""The output buffer: no streamed byte reaches a user before the verdict.

Streaming is how guardrails leak in practice: tokens are delivered
before the output check runs. Here the runtime adapter publishes chunks to
``smf.output.<stream_id>`` (header ``Smf-Sequence``: 0, 1, 2, ...) and ends
the stream with a signed close (a request, header ``Smf-Final``) that
commits to the chunk count, total size and content hash. The buffer holds
every byte; on close it checks the assembled text against the signed
commitment, runs the gate's detectors, and sends the completed response
through the gate as an ``output.deliver`` egress operation. Only an allowed
output is released: as one order to ``smf.execute.deliver.<channel>`` and in
the reply. Denied output is withheld and the reply says why; output that
needs approval is held like any other action.

A close may carry a window (``OutputClose.window``): what was shown
before this output in the same conversation, as the model gateway sends it.
The detectors read the output after the last ``detection_window_chars`` of it
(the release's setting), so a marker split across turns or tool calls raises
this output; the window is never released and never part of the proposal.

Every limit fails the stream closed with a reason code: bytes and chunks per
stream, idle and total timeouts, a gap, duplicate or out-of-order sequence,
a chunk after close, an unknown stream, and a buffer restart (buffers live
in memory only, so a restart drops every stream in flight; its close is then
answered ``unknown_stream`` and nothing half-checked is ever released).
Memory is bounded globally too: open streams and total buffered bytes.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Final

import structlog
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from smf_assurance.core.detectors import detect
from smf_assurance.core.projection import DEFAULT_DETECTION_WINDOW_CHARS
from smf_assurance.pipeline.chain.gate import Gate
from smf_assurance.pipeline.service import StageRefusal
from smf_assurance.subjects import names
from smf_assurance.subjects.bus_access import answerable_reply
from smf_assurance.subjects.messages import OutputClose, OutputVerdict, Proposal, Verdict
from smf_assurance.subjects.verdicts import sign_output_verdict

log = structlog.get_logger(__name__)

OUTPUT_TOOL: Final = "output.deliver"
"""The native tool name every adapter's mapper table maps released output under."""


@dataclass(frozen=True, slots=True)
class BufferLimits:
    max_stream_bytes: int = 1024 * 1024
    max_stream_chunks: int = 4096
    idle_timeout_ms: int = 10_000
    total_timeout_ms: int = 60_000
    max_open_streams: int = 1024
    max_total_bytes: int = 64 * 1024 * 1024
    max_concurrent_closes: int = 64
    tombstone_ms: int = 60_000
    max_tombstones: int = 4096
    """How long a failed or finished stream is remembered, to answer its close."""


@dataclass(slots=True)
class _Stream:
    opened_ms: int
    last_ms: int
    chunks: list[bytes] = field(default_factory=list)
    size: int = 0
    failure: str | None = None
    closed: bool = False


class OutputBuffer:
    """Holds streams in memory; every mutation happens on the event loop thread."""

    def __init__(
        self,
        nc: Client,
        gate: Gate,
        clock: Callable[[], int],
        limits: BufferLimits | None = None,
        *,
        answers_close: Callable[[str], Awaitable[bool]],
        window_chars: Callable[[], int] | None = None,
    ) -> None:
        self.nc = nc
        self.gate = gate
        self.clock = clock
        self.limits = limits or BufferLimits()
        self.answers_close = answers_close
        """Whether this gate answers a close (``smf_assurance.pipeline.chain.deployment``):
        on one machine the one buffer always does; on a cluster every replica buffers
        every stream, and only the replica that wins a one-shot claim on the close
        decides and answers."""
        self.window_chars = window_chars or (lambda: DEFAULT_DETECTION_WINDOW_CHARS)
        """The release's detection window: how much of a close's window is read."""
        self.streams: dict[str, _Stream] = {}
        self.buffered_bytes = 0
        self._slots = asyncio.Semaphore(self.limits.max_concurrent_closes)
        self._tasks: set[asyncio.Task[None]] = set()
        self._sub: Subscription | None = None
        self.refused_replies = 0
        """Closes dropped unanswered for their reply subject."""

    # -- bus wiring ---------------------------------------------------------

    async def start(self) -> None:
        self._sub = await self.nc.subscribe(f"{names.OUTPUT_PREFIX}.>", cb=self._on_message)

    async def stop(self) -> None:
        if self._sub is not None:
            await self._sub.unsubscribe()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _on_message(self, msg: Msg) -> None:
        """Chunks are applied synchronously, in arrival order (NATS keeps one
        publisher's order on a subject); a close snapshots its stream at once
        and is decided in its own task, so a slow decision never stalls chunks."""
        stream_id = msg.subject[len(names.OUTPUT_PREFIX) + 1 :]
        headers = msg.headers or {}
        if headers.get(names.HEADER_FINAL) and msg.reply:
            chunks = self._take(stream_id)
            if not answerable_reply(msg.reply):
                # A close whose reply names a stream, a KV key or an API call: the
                # gate never writes there (bus_access), and the stream is dropped.
                self.refused_replies += 1
                log.warning("output_close_reply_refused", stream_id=stream_id)
                return
            await self._slots.acquire()
            task = asyncio.create_task(self._answer(msg, stream_id, chunks))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
            return
        self.on_chunk(stream_id, headers.get(names.HEADER_SEQUENCE), msg.data)

    async def _answer(self, msg: Msg, stream_id: str, chunks: list[bytes] | str) -> None:
        try:
            if not await self._won_close(stream_id):
                return
            reply = await self.on_close(stream_id, msg.data, chunks)
            # Signed like the propose reply: an adapter releases output only on an
            # allow it verified (smf_assurance.subjects.verdicts).
            await msg.respond(sign_output_verdict(reply, self.gate.signer))
        except StageRefusal as refusal:
            await self.nc.publish(
                msg.reply,
                b"",
                headers={
                    names.HEADER_SERVICE_ERROR_CODE: "400",
                    names.HEADER_SERVICE_ERROR: refusal.reason_code,
                },
            )
        except Exception:
            log.exception("output_close_failed", stream_id=stream_id)
        finally:
            self._slots.release()

    async def _won_close(self, stream_id: str) -> bool:
        """Whether this replica answers the close. A replica that loses (or cannot
        reach the claim store) stays silent: two answers could be a withheld output
        and a released one, and the adapter keeps the first. If no replica can
        claim, nobody answers and the adapter's deadline withholds the output."""
        try:
            won = await self.answers_close(stream_id)
        except Exception:
            log.exception("output_close_claim_failed", stream_id=stream_id)
            return False
        if not won:
            log.info("output_close_answered_elsewhere", stream_id=stream_id)
        return won

    # -- the state machine (no I/O) -----------------------------------------

    def _fail(self, stream_id: str, stream: _Stream, reason: str) -> None:
        if stream.failure is None:
            stream.failure = reason
            self.buffered_bytes -= stream.size
            stream.chunks.clear()
            stream.size = 0
            log.warning("output_stream_failed", stream_id=stream_id, reason=reason)

    def on_chunk(self, stream_id: str, sequence: str | None, data: bytes) -> None:
        now = self.clock()
        limits = self.limits
        stream = self.streams.get(stream_id)
        if stream is None:
            if len(self.streams) >= limits.max_open_streams + limits.max_tombstones:
                # Not even remembered: a flood of stream ids must not grow memory.
                log.warning("output_stream_refused", reason="buffer_capacity_exceeded")
                return
            stream = _Stream(opened_ms=now, last_ms=now)
            open_streams = sum(
                1 for s in self.streams.values() if not s.closed and s.failure is None
            )
            self.streams[stream_id] = stream
            if open_streams >= limits.max_open_streams:
                self._fail(stream_id, stream, "buffer_capacity_exceeded")
                return
        if stream.closed:
            self._fail(stream_id, stream, "chunk_after_close")
            return
        if stream.failure is not None:
            return
        stream.last_ms = now
        if sequence is None or not sequence.isdigit() or int(sequence) != len(stream.chunks):
            self._fail(stream_id, stream, "output_sequence_broken")
            return
        if len(stream.chunks) + 1 > limits.max_stream_chunks:
            self._fail(stream_id, stream, "output_too_many_chunks")
            return
        if stream.size + len(data) > limits.max_stream_bytes:
            self._fail(stream_id, stream, "output_too_large")
            return
        if self.buffered_bytes + len(data) > limits.max_total_bytes:
            self._fail(stream_id, stream, "buffer_capacity_exceeded")
            return
        stream.chunks.append(data)
        stream.size += len(data)
        self.buffered_bytes += len(data)

    def _take(self, stream_id: str) -> list[bytes] | str:
        """Close a stream: its chunks, or the reason it cannot be released."""
        stream = self.streams.get(stream_id)
        if stream is None:
            return "unknown_stream"
        if stream.closed:
            return "duplicate_close"
        stream.closed = True
        stream.last_ms = self.clock()
        if stream.failure is not None:
            return stream.failure
        chunks = stream.chunks
        stream.chunks = []
        self.buffered_bytes -= stream.size
        stream.size = 0
        return chunks

    def sweep(self) -> None:
        """Fail idle and overlong streams; forget old tombstones."""
        now = self.clock()
        limits = self.limits
        for stream_id, stream in list(self.streams.items()):
            if stream.closed or stream.failure is not None:
                if now - stream.last_ms > limits.tombstone_ms:
                    del self.streams[stream_id]
                continue
            if now - stream.last_ms > limits.idle_timeout_ms:
                self._fail(stream_id, stream, "output_idle_timeout")
            elif now - stream.opened_ms > limits.total_timeout_ms:
                self._fail(stream_id, stream, "output_total_timeout")

    # -- the decision -----------------------------------------------------------

    async def on_close(
        self, stream_id: str, data: bytes, chunks: list[bytes] | str
    ) -> OutputVerdict:
        close = self.gate.verify_runtime_message(
            data, OutputClose, names.PAYLOAD_OUTPUT_CLOSE, gateway_may_sign=True
        )

        def withheld(*reasons: str) -> OutputVerdict:
            verdict = Verdict(
                schema="smf.verdict/1",
                proposal_id=close.proposal_id,
                outcome="deny",
                reason_codes=reasons,
            )
            return OutputVerdict(
                schema="smf.output-verdict/1", stream_id=stream_id, verdict=verdict
            )

        if close.stream_id != stream_id:
            return withheld("stream_id_mismatch")
        if isinstance(chunks, str):
            return withheld(chunks)
        raw = b"".join(chunks)
        if (
            len(chunks) != close.chunk_count
            or len(raw) != close.total_bytes
            or "sha256:" + hashlib.sha256(raw).hexdigest() != close.content_hash
        ):
            return withheld("output_integrity_mismatch")
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            return withheld("output_not_utf8")
        limit = self.window_chars()
        window = close.window[-limit:] if limit > 0 else ""
        facts, found = detect(text, close.facts, window)
        proposal = Proposal(
            schema="smf.proposal/1",
            proposal_id=close.proposal_id,
            runtime_id=close.runtime_id,
            runtime_version=close.runtime_version,
            adapter_id=close.adapter_id,
            surface=close.surface,
            native_tool=OUTPUT_TOOL,
            arguments={"stream_id": stream_id},
            content=text,
            destination=close.destination,
            actor=close.actor,
            facts=facts,
            issued_at_ms=close.issued_at_ms,
        )
        verdict = await self.gate.decide(proposal, found, close.instance_id)
        released = text if verdict.outcome == "allow" else None
        log.info("output_decided", stream_id=stream_id, outcome=verdict.outcome)
        return OutputVerdict(
            schema="smf.output-verdict/1", stream_id=stream_id, verdict=verdict, released=released
        )
