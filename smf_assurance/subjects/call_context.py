"""The context a tool call was issued in, as the model gateway recorded it (issue 16, item 4).

"Session taint outside the runtime": a runtime adapter keeps its session's
taint in its own process, so ``hermes chat --continue`` of a session that read
injected text proposes its next egress as clear. The model gateway sees every
turn instead. Before it returns a turn that carries tool calls, it gives each
call an id of its own (``smfc`` and 24 lowercase hex digits) and writes one
:class:`CallContext` per id into the JetStream KV bucket
:data:`CALL_CONTEXT_BUCKET`: the facts its detectors raised over the request's
tool results, and what the calls named in the request's history had already
raised (lineage). The gate reads the record of a proposal's ``tool_call_id``
and raises the proposal's facts by it before it decides (``Gate``, link
``raise call context``), so no adapter has to be believed about taint.

Contract:

- Key: ``<runtime_id>.<tool_call_id>`` (:func:`call_context_key`), one value per
  key, written once (the gateway creates it; a second write is refused by
  the server's expected-last-sequence check), history 1.
- Value: a DSSE envelope of payload type :data:`PAYLOAD_CALL_CONTEXT` whose
  payload is the canonical JSON of a :class:`CallContext`, signed by a key the
  registry names with role ``gateway``. Readers believe no other signer.
- Ids and two facts only: no prompt, argument, tool result or reply.
- Bus permissions (``smf_assurance.subjects.bus_access``): only the model gateway writes
  the bucket; gates read it; nobody else may do either.
"""

from __future__ import annotations

import re
from typing import Annotated, Final, Literal, TypeGuard

import msgspec

from smf_assurance.subjects.envelope import Classification, InjectionTaint, Name
from smf_assurance.subjects.patterns import Code, Millis, Token

CALL_CONTEXT_BUCKET: Final = "SMF_CALL_CONTEXT"
CALL_CONTEXT_STREAM: Final = f"KV_{CALL_CONTEXT_BUCKET}"
CALL_CONTEXT_SUBJECT_PREFIX: Final = f"$KV.{CALL_CONTEXT_BUCKET}."
PAYLOAD_CALL_CONTEXT: Final = "application/vnd.smf.call-context+json;v=1"
MAX_CALL_CONTEXT_BYTES: Final = 4096
"""A record's envelope is a few hundred bytes; the bucket refuses larger values."""

CALL_ID_PREFIX: Final = "smfc"
GATEWAY_CALL_ID_PATTERN: Final = r"^smfc[0-9a-f]{24}\Z"
_GATEWAY_CALL_ID: Final = re.compile(GATEWAY_CALL_ID_PATTERN)
GatewayCallId = Annotated[str, msgspec.Meta(pattern=GATEWAY_CALL_ID_PATTERN)]
"""A tool-call id the model gateway issued
(``smf_assurance.gateway.server.new_call_id``)."""


def is_gateway_call_id(value: object) -> TypeGuard[str]:
    """Whether ``value`` has the form of an id the model gateway issues. Only such an id
    has a record; any other id (a provider's, a runtime's own) has none to look up."""
    return isinstance(value, str) and _GATEWAY_CALL_ID.match(value) is not None


def call_context_key(runtime_id: str, tool_call_id: str) -> str:
    """The KV key of one call's record. Runtime ids are subject tokens and gateway ids
    alphanumeric, so the key needs no encoding and names one runtime's call only."""
    return f"{runtime_id}.{tool_call_id}"


class CallContext(msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True):
    """One tool call's context: the least the gate must assume of the data it may carry.

    ``classification`` and ``injection_taint`` start at ``public`` and ``clear`` and
    are only ever raised: by the gate's detectors over the request's tool results,
    and by the records of the calls the request's history names. ``found`` says
    what raised them (detector codes, ``call_context_inherited``,
    ``call_context_lineage_unknown``); empty when nothing did.
    """

    schema: Literal["smf.call-context/1"]
    runtime_id: Token
    tool_call_id: GatewayCallId
    tool_name: Name
    """The function the model called under this id. A proposal carrying the id must be
    for that tool: a runtime cannot lend a clean call's id to another tool's call."""
    classification: Classification
    injection_taint: InjectionTaint
    found: Annotated[tuple[Code, ...], msgspec.Meta(max_length=16)]
    issued_at_ms: Millis
    arguments_invalid: bool = False
    """The call's arguments certainly failed the schema its request offered for the
    tool: a runtime that checks them refuses the call before any hook, so a proposal
    carrying this id is denied (``tool_arguments_invalid``) whatever policy would say.
    ``omit_defaults``: a record without it encodes as before it existed."""
    turn_invalid: bool = False
    """Another call of the turn this call was issued in had arguments that are not JSON,
    and the runtime refuses such a turn whole before any hook (Hermes, on a turn it did
    not stream): this call runs nowhere either, so a proposal carrying its id is denied
    (``tool_call_turn_invalid``). Left out of the encoding when False."""


__all__ = [
    "CALL_CONTEXT_BUCKET",
    "CALL_CONTEXT_STREAM",
    "CALL_CONTEXT_SUBJECT_PREFIX",
    "CALL_ID_PREFIX",
    "GATEWAY_CALL_ID_PATTERN",
    "MAX_CALL_CONTEXT_BYTES",
    "PAYLOAD_CALL_CONTEXT",
    "CallContext",
    "GatewayCallId",
    "call_context_key",
    "is_gateway_call_id",
]
