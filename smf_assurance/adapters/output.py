"""The runtime side of streamed output: publish chunks, close with a signed commitment.

An adapter never delivers streamed text to a user itself. It
publishes every chunk to ``smf.output.<stream_id>`` with a sequence header
and closes the stream with a signed ``OutputClose`` (count, size and hash of
what it sent). It delivers only the ``released`` text of the gate's reply;
anything else, including no reply or a reply no gate key signed
(``smf_assurance.subjects.verdicts``), is withheld. Depends on ``subjects/`` only.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from nats.aio.client import Client
from nats.errors import Error as NatsError

from smf_assurance.adapters.client import denial
from smf_assurance.subjects import names
from smf_assurance.subjects.clock import wall_clock_ms
from smf_assurance.subjects.dsse import (
    MalformedPayloadError,
    SignatureError,
    encode_envelope,
    sign_struct,
)
from smf_assurance.subjects.envelope import Surface
from smf_assurance.subjects.keys import VerifyKey
from smf_assurance.subjects.messages import (
    ActorContext,
    DataFacts,
    OutputClose,
    OutputVerdict,
    ProposedDestination,
)
from smf_assurance.subjects.signer import Signer
from smf_assurance.subjects.verdicts import (
    NOT_SIGNED_BY_GATE,
    VerdictMismatchError,
    open_output_verdict,
)


def new_stream_id() -> str:
    return "s-" + secrets.token_hex(12)


@dataclass(frozen=True, slots=True)
class OutputStreamer:
    nc: Client
    key: Signer
    runtime_id: str
    runtime_version: str
    adapter_id: str
    timeout: float = 10.0
    gate_keys: Mapping[str, VerifyKey] = field(kw_only=True)
    """The registry's ``gate`` keys: only an output verdict one of them signed is read."""

    async def send_chunks(self, stream_id: str, chunks: Iterable[bytes]) -> tuple[int, int, str]:
        """Publish chunks in order; return (count, total bytes, content hash)."""
        subject = names.output_subject(stream_id)
        digest = hashlib.sha256()
        count = size = 0
        for chunk in chunks:
            await self.nc.publish(subject, chunk, headers={names.HEADER_SEQUENCE: str(count)})
            digest.update(chunk)
            count += 1
            size += len(chunk)
        return count, size, "sha256:" + digest.hexdigest()

    def close_message(
        self,
        stream_id: str,
        committed: tuple[int, int, str],
        *,
        actor: ActorContext,
        facts: DataFacts,
        destination: ProposedDestination,
        surface: Surface = "direct_reply",
        proposal_id: str | None = None,
        window: str = "",
        instance_id: str | None = None,
    ) -> bytes:
        """The signed close; ``window``: what was shown before this output, read with it
        by the detectors and never released (``OutputClose.window``); ``instance_id``:
        the proven process it was produced for (``OutputClose.instance_id``)."""
        count, size, content_hash = committed
        close = OutputClose(
            schema="smf.output-close/1",
            stream_id=stream_id,
            proposal_id=proposal_id or "o-" + secrets.token_hex(16),
            runtime_id=self.runtime_id,
            runtime_version=self.runtime_version,
            adapter_id=self.adapter_id,
            surface=surface,
            chunk_count=count,
            total_bytes=size,
            content_hash=content_hash,
            destination=destination,
            actor=actor,
            facts=facts,
            issued_at_ms=wall_clock_ms(),
            window=window,
            instance_id=instance_id,
        )
        return encode_envelope(sign_struct(names.PAYLOAD_OUTPUT_CLOSE, close, [self.key]))

    async def close(self, stream_id: str, signed_close: bytes) -> OutputVerdict:
        """Send the close and wait for the verdict; every failure withholds."""
        try:
            reply = await self.nc.request(
                names.output_subject(stream_id),
                signed_close,
                timeout=self.timeout,
                headers={names.HEADER_FINAL: "1"},
            )
        except (NatsError, TimeoutError):
            return _withheld(stream_id, "gate_unreachable")
        headers = reply.headers or {}
        if names.HEADER_SERVICE_ERROR in headers:
            return _withheld(stream_id, headers[names.HEADER_SERVICE_ERROR] or "gate_error")
        try:
            return open_output_verdict(reply.data, self.gate_keys, stream_id=stream_id)
        except MalformedPayloadError:
            return _withheld(stream_id, "unreadable_verdict")
        except SignatureError:
            return _withheld(stream_id, NOT_SIGNED_BY_GATE)
        except VerdictMismatchError:
            return _withheld(stream_id, "verdict_for_another_stream")

    async def stream(
        self,
        chunks: Iterable[bytes],
        *,
        actor: ActorContext,
        facts: DataFacts,
        destination: ProposedDestination,
        surface: Surface = "direct_reply",
    ) -> OutputVerdict:
        stream_id = new_stream_id()
        committed = await self.send_chunks(stream_id, chunks)
        signed = self.close_message(
            stream_id, committed, actor=actor, facts=facts, destination=destination, surface=surface
        )
        return await self.close(stream_id, signed)


def _withheld(stream_id: str, reason: str) -> OutputVerdict:
    return OutputVerdict(
        schema="smf.output-verdict/1", stream_id=stream_id, verdict=denial("", reason)
    )
