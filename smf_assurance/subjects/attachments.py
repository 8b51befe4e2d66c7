"""Attachments: the documents an action sends, carried as bytes inside its arguments.

An approver approves the exact action, documents included: the connector declares
which arguments are attachments; the held content includes them, hashed into the
binding like the rest; the approver's page renders PDFs and text with their own
digest check.

Who reads the bytes, and why they cannot be swapped between approval and execution:

- The runtime adapter reads the document when it proposes the action and puts its
  bytes in the argument itself (:func:`attachment_argument`), with their SHA-256.
  Nothing later reads a path or a URL: no file the runtime, the gate or the connector
  could re-read after the approver looked.
- The gate checks every attachment at normalization (:func:`open_attachment`:
  well formed, a media type a reader can show, the bytes the declared type says,
  their digest equal to the one they carry) and refuses the proposal otherwise. The
  bytes are then part of the arguments, so the binding's ``canonical_args_hash``
  covers them and their digest: the approver's signature names a binding digest over
  exactly these bytes. The claim recomputes the hash from what the gate holds, so
  bytes changed in the store after approval break the binding and no order is sent.
- The order carries the same arguments under the gate's signature; the connector
  files the bytes it received and re-checks each digest before it acts
  (``smf_assurance.adapters.connector.sdk.check_order``).
- The approver's page recomputes each attachment's SHA-256 with SubtleCrypto and
  compares it with the digest inside the arguments it has itself checked against the
  binding; a mismatch shows an error and Allow once stays off.

Limits: one attachment is at most :data:`MAX_ATTACHMENT_BYTES`; the bus's 1 MiB
message limit bounds the whole proposal (a larger one never reaches the gate).
"""

from __future__ import annotations

import base64
import binascii
from typing import Annotated, Any, Final, Literal

import msgspec

from smf_assurance.subjects.canonical import Identity, sha256_identity

ATTACHMENT_SCHEMA: Final = "smf.attachment/1"
MAX_ATTACHMENT_BYTES: Final = 256 * 1024
"""Small enough that a proposal with one, base64 twice over (argument, then DSSE
payload), stays under the bus's 1 MiB message limit."""
MediaType = Literal["application/pdf", "text/plain"]
"""What the approver's page can render in place; anything else it could not show, so
it cannot be approved."""
FileName = Annotated[str, msgspec.Meta(pattern=r"^[^/\\\x00-\x1f\x7f]{1,255}\Z")]


class AttachmentError(ValueError):
    """An argument that is, or is declared to be, an attachment and is not a valid one."""

    def __init__(self, reason_code: str, detail: str = "") -> None:
        super().__init__(f"{reason_code}: {detail}" if detail else reason_code)
        self.reason_code = reason_code


class Attachment(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One document, as it travels in an argument."""

    schema: Literal["smf.attachment/1"]
    filename: FileName
    media_type: MediaType
    sha256: Identity
    """``sha256:<hex>`` of the decoded bytes."""
    data_b64: Annotated[str, msgspec.Meta(max_length=4 * (MAX_ATTACHMENT_BYTES // 3 + 1))]
    """The document's bytes, standard base64 with padding."""


def attachment_argument(filename: str, media_type: MediaType, data: bytes) -> dict[str, Any]:
    """The argument value a runtime proposes for a document it read (plain JSON)."""
    return {
        "schema": ATTACHMENT_SCHEMA,
        "filename": filename,
        "media_type": media_type,
        "sha256": sha256_identity(data),
        "data_b64": base64.b64encode(data).decode("ascii"),
    }


def claims_attachment(value: Any) -> bool:
    """Whether an argument value says it is an attachment (then it must be a valid one)."""
    return isinstance(value, dict) and value.get("schema") == ATTACHMENT_SCHEMA


def open_attachment(value: Any) -> tuple[Attachment, bytes]:
    """The attachment and its bytes, checked; :class:`AttachmentError` names why not.

    ``attachment_invalid``: not the shape above (or an unsupported media type);
    ``attachment_too_large``; ``attachment_not_base64``; ``attachment_digest_mismatch``:
    the bytes are not the ones the digest names; ``attachment_media_type_mismatch``: a
    "PDF" that does not start ``%PDF-``, or "text" that is not UTF-8.
    """
    try:
        attachment = msgspec.convert(value, type=Attachment, strict=True)
    except msgspec.ValidationError as exc:
        raise AttachmentError("attachment_invalid", str(exc)) from exc
    try:
        data = base64.b64decode(attachment.data_b64, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise AttachmentError("attachment_not_base64") from exc
    if len(data) > MAX_ATTACHMENT_BYTES:
        raise AttachmentError("attachment_too_large")
    if sha256_identity(data) != attachment.sha256:
        raise AttachmentError("attachment_digest_mismatch")
    if attachment.media_type == "application/pdf" and not data.startswith(b"%PDF-"):
        raise AttachmentError("attachment_media_type_mismatch")
    if attachment.media_type == "text/plain":
        try:
            data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise AttachmentError("attachment_media_type_mismatch") from exc
    return attachment, data


def check_attachments(arguments: dict[str, Any], declared: tuple[str, ...] = ()) -> None:
    """Every declared attachment argument present, and every argument that claims to be
    an attachment, is a valid one; raises :class:`AttachmentError` on the first that is not."""
    for name, value in arguments.items():
        if name in declared or claims_attachment(value):
            open_attachment(value)
