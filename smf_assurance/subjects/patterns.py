"""Constrained string and integer types shared by every wire message.

One definition each, so the same thing is never validated two ways.
Patterns end in ``\\Z``, not ``$``: in Python's ``re`` a ``$`` also matches
before a trailing newline, which would let ``"abc\\n"`` pass as ``"abc"``.
"""

from __future__ import annotations

from typing import Annotated, Final

import msgspec

SUBJECT_TOKEN_PATTERN: Final = r"^[A-Za-z0-9_-]{1,64}\Z"  # noqa: S105 - a pattern, not a secret
CODE_PATTERN: Final = r"^[a-z][a-z0-9_]{0,63}\Z"

Token = Annotated[str, msgspec.Meta(pattern=SUBJECT_TOKEN_PATTERN)]
"""One NATS subject token (no dots, wildcards or spaces): connector and runtime ids."""
ConnectorId = Annotated[
    str, msgspec.Meta(pattern=r"^[A-Za-z0-9_-]{1,64}(\.[A-Za-z0-9_-]{1,64})?\Z")
]
"""A connector's id: one token, or ``deliver.<channel>`` for output delivery."""
Code = Annotated[str, msgspec.Meta(pattern=CODE_PATTERN)]
"""A reason code."""
MessageId = Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z0-9._:-]{8,128}\Z")]
OrderId = Annotated[str, msgspec.Meta(pattern=r"^[0-9a-f]{64}\Z")]
Millis = Annotated[int, msgspec.Meta(ge=0, le=2**53 - 1)]
"""Unix milliseconds within the I-JSON safe integer range."""
ToolCallId = Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z0-9_-]{1,128}\Z")]
"""A model's tool-call id as the runtime received it (tool-call accounting)."""
InstanceId = Annotated[str, msgspec.Meta(pattern=r"^i-[0-9a-f]{32}\Z")]
"""One runtime process: a random id its adapter draws at start and attests (model
gateway admission is bound to the process that attested,
``smf_assurance.subjects.model_gateway.InstanceProof``)."""
MAX_NOTE_CHARS: Final = 500
NOTE_PATTERN: Final = r"^[^\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]*\Z"
ApproverNote = Annotated[
    str, msgspec.Meta(min_length=1, max_length=MAX_NOTE_CHARS, pattern=NOTE_PATTERN)
]
"""An approver's free-text note to the requester, given with a deny:
bounded, plain text (newlines and tabs only; no other control characters, no bidi
overrides or isolates that could make it read as something else). It travels signed to
the gate and back to the runtime and never enters the ledger or any log."""
