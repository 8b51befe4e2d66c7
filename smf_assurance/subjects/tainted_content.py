"""What a tainted session wrote, by digest, as the model gateway recorded it.

Files carry taint: a session that read injected text can write a context file
(``AGENTS.md``) that the next session loads into its system prompt, with no
marker left for a detector. Before the model gateway returns a tool call
issued in a tainted context, it writes one :class:`TaintedContent` per part of
what the call's arguments could put in a file (the digests of their lines and
quoted segments, ``smf_assurance.core.written_content``) into the
JetStream KV bucket :data:`TAINTED_CONTENT_BUCKET`. Every gateway reads the
bucket back (by sequence, ``STREAM.MSG.GET`` with ``next_by_subj``) and taints a
request that carries one of those lines.

Contract:

- Key: ``<runtime_id>.<tool_call_id>.<part>`` (:func:`tainted_content_key`): the
  gateway id of the call (``smfc`` + 24 lowercase hex) and a part number from 0,
  written once (expected last subject sequence 0), history 1.
- Value: a DSSE envelope of payload type :data:`PAYLOAD_TAINTED_CONTENT` whose
  payload is the canonical JSON of a :class:`TaintedContent`, signed by a key the
  registry names with role ``gateway``. Readers believe no other signer and no
  record stored under another key.
- Digests and a taint only: no argument, no line of text, no path.
- Bus permissions (``smf_assurance.subjects.bus_access``): only the model gateway
  writes and reads it; gates create it when absent (its replicas, a maximum age,
  a maximum size) and may not write it; nobody else has access.
"""

from __future__ import annotations

from typing import Annotated, Final, Literal

import msgspec

from smf_assurance.subjects.call_context import GatewayCallId
from smf_assurance.subjects.patterns import Millis, Token

TAINTED_CONTENT_BUCKET: Final = "SMF_TAINTED_CONTENT"
TAINTED_CONTENT_STREAM: Final = f"KV_{TAINTED_CONTENT_BUCKET}"
TAINTED_CONTENT_SUBJECT_PREFIX: Final = f"$KV.{TAINTED_CONTENT_BUCKET}."
PAYLOAD_TAINTED_CONTENT: Final = "application/vnd.smf.tainted-content+json;v=1"
MAX_DIGESTS_PER_RECORD: Final = 512
MAX_PARTS_PER_CALL: Final = 128
"""At most this many records per tool call (65,536 lines); a call that would write
more is refused by the gateway, never recorded in part."""
MAX_TAINTED_CONTENT_BYTES: Final = 32 * 1024
"""A record of 512 digests is about 19 KB; the bucket refuses larger values."""

ContentDigest = Annotated[str, msgspec.Meta(pattern=r"^[0-9a-f]{32}\Z")]
"""The first 16 bytes of SHA-256 over ``smf.content-line/1``, NUL and a normalized line,
in lowercase hex (``smf_assurance.core.written_content.line_digest``)."""


def tainted_content_key(runtime_id: str, tool_call_id: str, part: int) -> str:
    """The KV key of one record. Runtime ids are subject tokens and gateway ids
    alphanumeric, so the key needs no encoding."""
    return f"{runtime_id}.{tool_call_id}.{part}"


class TaintedContent(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Lines one tool call of a tainted session could have written (one part of them).

    ``injection_taint`` is the context's taint when the call was issued: a request
    that carries one of ``digests`` is raised to it."""

    schema: Literal["smf.tainted-content/1"]
    runtime_id: Token
    tool_call_id: GatewayCallId
    part: Annotated[int, msgspec.Meta(ge=0, lt=MAX_PARTS_PER_CALL)]
    injection_taint: Literal["suspected", "unknown", "tainted"]
    digests: Annotated[
        tuple[ContentDigest, ...], msgspec.Meta(min_length=1, max_length=MAX_DIGESTS_PER_RECORD)
    ]
    issued_at_ms: Millis


__all__ = [
    "MAX_DIGESTS_PER_RECORD",
    "MAX_PARTS_PER_CALL",
    "MAX_TAINTED_CONTENT_BYTES",
    "PAYLOAD_TAINTED_CONTENT",
    "TAINTED_CONTENT_BUCKET",
    "TAINTED_CONTENT_STREAM",
    "TAINTED_CONTENT_SUBJECT_PREFIX",
    "ContentDigest",
    "TaintedContent",
    "tainted_content_key",
]
