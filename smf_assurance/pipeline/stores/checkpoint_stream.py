"""Reading a gate's signed ledger checkpoints back from ``SMF_LEDGER_CHECKPOINTS``.

ARCHITECTURE.md, "Evidence": signed checkpoints kept outside the ledger file make a
cut tail or a replaced file detectable. The gate publishes each checkpoint on its own
subject (``names.checkpoint_subject``); these read them back for the two who hold the
file against them: ``smf-assurance ledger verify --nats`` (every checkpoint) and the
gate's own start (:mod:`smf_assurance.pipeline.stores.state_check`, the newest first).
Only one gate's subject is read: on a cluster the replicas share the stream, and a
checkpoint of another replica's ledger would read as a replaced file.
"""

from __future__ import annotations

from nats.js.client import JetStreamContext
from nats.js.errors import NotFoundError

from smf_assurance.subjects import names

__all__ = ["newest_checkpoint", "read_checkpoints"]


async def read_checkpoints(js: JetStreamContext, gate_name: str) -> list[bytes]:
    """Every envelope ``gate_name`` published on the checkpoint stream, in stream order.

    Raises ``NotFoundError`` when the stream does not exist, and the client's error
    when the server cannot answer: the caller says what that means for it.
    """
    subject = names.checkpoint_subject(gate_name)
    info = await js.stream_info(names.CHECKPOINT_STREAM)
    envelopes: list[bytes] = []
    seq = info.state.first_seq
    while info.state.messages and seq <= info.state.last_seq:
        try:
            raw = await js.get_msg(names.CHECKPOINT_STREAM, seq, subject=subject, next=True)
        except NotFoundError:
            break
        envelopes.append(raw.data or b"")
        seq = (raw.seq or seq) + 1
    return envelopes


async def newest_checkpoint(js: JetStreamContext, gate_name: str) -> bytes | None:
    """The last envelope on ``gate_name``'s checkpoint subject, or None when it has
    published none (or the stream is gone). Errors of the server are raised."""
    try:
        raw = await js.get_last_msg(names.CHECKPOINT_STREAM, names.checkpoint_subject(gate_name))
    except NotFoundError:
        return None
    return raw.data or b""
