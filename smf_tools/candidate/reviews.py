"""Signed reviews bound to one commit: who reviewed which claim, at which SHA, and
whether the tree held still while they did.

Reviews bound to the SHA:

- A review record names the candidate's commit and tree, the claim or gate
  family reviewed, the verdict, the reviewer, and the SHA the reviewer attested
  at the start and at the end of the review. It is a DSSE envelope of its own
  payload type (:data:`PAYLOAD_CANDIDATE_REVIEW`), so no other signed message
  of ours can be presented as one, nor one of these as another.
- A start and an end that name different commits are no verdict: the reviewer
  read something else than what they sign (:class:`NoVerdictError`).
- Who may review is read from the key registry, as ``swarm review`` decides it
  (docs/SWARM.md, "Who"): the reviewer is the principal the key belongs to, and
  a consumer trusts only its roster of reviewer keys. Here the roster is the
  registry's entries that hold the licensed role ``reviewer``; any other signer,
  registered or not, is refused and never counted (:func:`open_review`).

Every refusal is a :class:`ReviewRefused` carrying a reason code, so a status
page can say why a record does not count without parsing prose.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Final, Literal, cast

import msgspec

from smf_assurance.subjects import dsse
from smf_assurance.subjects.keys import Principal as PrincipalName
from smf_assurance.subjects.keys import SigningKey
from smf_assurance.subjects.registry import KeyRegistry, Principal
from smf_tools.candidate.gitrepo import SHA

PAYLOAD_CANDIDATE_REVIEW: Final = "application/vnd.smf.candidate-review+json;v=1"
"""The DSSE payload type of a review record. It is inside the signed bytes (PAE), so
a swarm review, a verdict or any other envelope cannot stand in for a review."""
REVIEW_SCHEMA: Final = "smf.candidate-review/1"
CANDIDATE_SCHEMA: Final = "smf.candidate/1"
REVIEWER_ROLE: Final = "reviewer"
"""The licensed role a registry principal needs to sign a review (a forged or
wrong-role review is refused)."""
MAX_NOTE_CHARS: Final = 4000
MAX_RECORD_BYTES: Final = 64 * 1024

Sha = Annotated[str, msgspec.Meta(pattern=SHA.pattern)]
Verdict = Literal["pass", "fail", "pass-with-notes"]
Scope = Literal["claim", "family"]
RefusalCode = Literal[
    "malformed",
    "wrong_payload_type",
    "unknown_signer",
    "bad_signature",
    "wrong_role",
    "reviewer_mismatch",
    "no_verdict",
    "unknown_commit",
    "tree_mismatch",
    "not_in_candidate",
]


class CandidateError(Exception):
    """The candidate file cannot be read, or is not a candidate."""


class ReviewRefused(Exception):
    """A review record does not count; ``code`` says why."""

    def __init__(self, code: RefusalCode, message: str) -> None:
        super().__init__(message)
        self.code: RefusalCode = code


class NoVerdictError(ReviewRefused):
    """The SHA attested at the start of the review is not the one at its end, or not
    the candidate's: the reviewer read another tree than the one the verdict names."""

    def __init__(self, message: str) -> None:
        super().__init__("no_verdict", message)


class CandidateClaim(msgspec.Struct, frozen=True):
    """A claim as the candidate lists it; only what a review needs is read."""

    id: str
    family: str
    tests: tuple[str, ...] = ()


class Candidate(msgspec.Struct, frozen=True):
    """The fields of a candidate (``candidate build``) a review binds: its commit,
    its tree and its claims. Other fields are the builder's and are not read here."""

    schema: Literal["smf.candidate/1"]
    sha: Sha
    tree: Sha
    claims: tuple[CandidateClaim, ...]

    def claim(self, claim_id: str) -> CandidateClaim | None:
        return next((c for c in self.claims if c.id == claim_id), None)

    def family(self, family: str) -> tuple[CandidateClaim, ...]:
        return tuple(c for c in self.claims if c.family == family)


class ReviewRecord(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """What a reviewer signs: a verdict on one claim or family of one commit."""

    schema: Literal["smf.candidate-review/1"]
    sha: Sha
    tree: Sha
    scope: Scope
    target: Annotated[str, msgspec.Meta(min_length=1, max_length=200)]
    verdict: Verdict
    reviewer: PrincipalName
    start_sha: Sha
    end_sha: Sha
    started_at_ms: Annotated[int, msgspec.Meta(ge=0)]
    signed_at_ms: Annotated[int, msgspec.Meta(ge=0)]
    note: Annotated[str, msgspec.Meta(max_length=MAX_NOTE_CHARS)] = ""


class ReviewStart(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """What ``review start`` recorded: the candidate's SHA was checked out, clean, then."""

    schema: Literal["smf.review-start/1"]
    sha: Sha
    tree: Sha
    started_at_ms: Annotated[int, msgspec.Meta(ge=0)]


def load_candidate(path: Path) -> Candidate:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise CandidateError(f"cannot read candidate {path}: {exc.strerror}") from exc
    try:
        return msgspec.json.decode(data, type=Candidate)
    except msgspec.DecodeError as exc:
        raise CandidateError(f"{path} is not a {CANDIDATE_SCHEMA} file: {exc}") from exc


def is_reviewer(principal: Principal) -> bool:
    """The rule for who may review (module docstring): a registry principal holding the
    licensed role ``reviewer``."""
    return REVIEWER_ROLE in principal.entry.licensed_roles


def check_attested(record: ReviewRecord) -> None:
    """The start and end of the review name the commit the verdict is for."""
    if not record.start_sha == record.end_sha == record.sha:
        raise NoVerdictError(
            f"the review started at {record.start_sha[:12]} and ended at {record.end_sha[:12]}, "
            f"the verdict names {record.sha[:12]}"
        )


def sign_review(record: ReviewRecord, key: SigningKey) -> bytes:
    """The signed record's bytes. Refuses, before signing, a record that would be no verdict."""
    check_attested(record)
    return dsse.encode_envelope(dsse.sign_struct(PAYLOAD_CANDIDATE_REVIEW, record, [key]))


def open_review(data: bytes, registry: KeyRegistry) -> tuple[ReviewRecord, Principal]:
    """The record and its reviewer, once the signature, the signer's role, the name it
    signs under and the start/end attestation all hold; else :class:`ReviewRefused`.

    Verified against every registered key, not only reviewers', so that a
    registered principal without the role is refused as ``wrong_role`` rather than
    as an unknown signer: the operator sees who tried."""
    trusted = {kid: p.verify_key for kid, p in registry.principals.items()}
    try:
        envelope = dsse.decode_envelope(data, MAX_RECORD_BYTES)
        record, verified = dsse.open_struct(
            envelope, trusted, ReviewRecord, PAYLOAD_CANDIDATE_REVIEW
        )
    except dsse.SignatureError as exc:
        code = cast(RefusalCode, dsse.reason_code(exc, "malformed"))
        raise ReviewRefused(code, f"the record does not verify: {exc}") from exc
    signers = [registry.principals[kid] for kid in sorted(verified.key_ids)]
    reviewers = [p for p in signers if is_reviewer(p)]
    if not reviewers:
        names = ", ".join(p.name for p in signers)
        raise ReviewRefused("wrong_role", f"signed by {names}, who holds no {REVIEWER_ROLE} role")
    reviewer = next((p for p in reviewers if p.name == record.reviewer), None)
    if reviewer is None:
        raise ReviewRefused(
            "reviewer_mismatch",
            f"the record names reviewer {record.reviewer!r}, its key is another principal's",
        )
    check_attested(record)
    return record, reviewer
