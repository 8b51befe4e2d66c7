"""The gate's answers to runtimes, signed: a Verdict on ``smf.propose`` and an
OutputVerdict on the close of an output stream.

ARCHITECTURE.md, "Trust and identity on the bus": a receiver verifies what it
acts on against the keys the registry names for the role. A runtime acts on
an ``allow`` by running the call itself, and an adapter releases output on an
``allow``; with plain JSON replies any client that can answer the subject (a
NATS permission mistake, a compromised service) could answer first and
release what the policy denies. So the gate answers with a DSSE envelope
signed by its key, of a payload type that names the reply
(:data:`~smf_assurance.subjects.names.PAYLOAD_VERDICT`,
:data:`~smf_assurance.subjects.names.PAYLOAD_OUTPUT_VERDICT`;
DSSE binds the type into the signature, so an execute order, a checkpoint or
an approval outcome of the same key cannot be passed off as a verdict), and
the runtime's client opens it here before reading a field.

What the signature does not give: freshness. A genuine verdict names its
proposal (or stream), which the receiver checks against the one it sent;
proposal and stream ids are fresh random values per request, so a recorded
verdict answers no other request.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from smf_assurance.subjects import dsse, names
from smf_assurance.subjects.keys import SigningKey, VerifyKey
from smf_assurance.subjects.messages import OutputVerdict, Verdict

__all__ = [
    "NOT_SIGNED_BY_GATE",
    "VerdictMismatchError",
    "open_output_verdict",
    "open_verdict",
    "sign_output_verdict",
    "sign_verdict",
]

NOT_SIGNED_BY_GATE: Final = "verdict_not_signed_by_gate"
"""The reason code a runtime's client denies with when a reply does not verify."""


class VerdictMismatchError(ValueError):
    """A verified verdict about another proposal or stream than the one asked about."""


def sign_verdict(verdict: Verdict, gate_key: SigningKey) -> bytes:
    return dsse.encode_envelope(dsse.sign_struct(names.PAYLOAD_VERDICT, verdict, [gate_key]))


def sign_output_verdict(verdict: OutputVerdict, gate_key: SigningKey) -> bytes:
    return dsse.encode_envelope(dsse.sign_struct(names.PAYLOAD_OUTPUT_VERDICT, verdict, [gate_key]))


def open_verdict(data: bytes, gate_keys: Mapping[str, VerifyKey], *, proposal_id: str) -> Verdict:
    """The Verdict in ``data`` if a gate key signed it for ``proposal_id``.

    Raises a ``dsse.SignatureError`` (unsigned, unknown signer, forged, another
    payload type; ``gate_keys`` empty refuses everything), a
    ``dsse.MalformedPayloadError`` for a payload that is not one canonical
    Verdict, or :class:`VerdictMismatchError`.
    """
    verdict, _ = dsse.open_struct(
        dsse.decode_envelope(data), gate_keys, Verdict, names.PAYLOAD_VERDICT
    )
    if verdict.proposal_id != proposal_id:
        raise VerdictMismatchError("the verdict names another proposal")
    return verdict


def open_output_verdict(
    data: bytes, gate_keys: Mapping[str, VerifyKey], *, stream_id: str
) -> OutputVerdict:
    """The OutputVerdict in ``data`` if a gate key signed it for ``stream_id``;
    raises as :func:`open_verdict` does."""
    verdict, _ = dsse.open_struct(
        dsse.decode_envelope(data), gate_keys, OutputVerdict, names.PAYLOAD_OUTPUT_VERDICT
    )
    if verdict.stream_id != stream_id:
        raise VerdictMismatchError("the verdict names another output stream")
    return verdict
