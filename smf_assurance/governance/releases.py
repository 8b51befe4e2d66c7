"""Governed releases on the operator's side: build, sign, write, read, publish.

A release is
built from a corpus (compiled by :mod:`smf_assurance.governance.compiler`, both projections) and a
key registry, described by a :class:`~smf_assurance.subjects.release.ReleaseManifest` and
signed as a DSSE envelope by one or more release-signing keys. Consumers
verify it with :class:`~smf_assurance.core.release_trust.ReleaseTrust`; nothing in
this module is trusted by a consumer.

On disk a release is a folder (:data:`RELEASE_FILES`): the signed manifest
envelope and the exact bytes of the enforcement projection, the analysis
projection and the registry. On the bus it is one
:class:`~smf_assurance.subjects.release.ReleaseBundle` value in the ``SMF_RELEASES``
key-value bucket under ``release.<sequence>``; in a state directory it is one
bundle file in the ``releases/`` inbox. A trust root file
(:class:`~smf_assurance.subjects.release.TrustRoot`) lists the release-signing public keys
and the threshold; it is distributed out of band.

Reading a manifest without verifying it (:func:`unverified_manifest`) is
only for naming things on the publisher's side (a bucket key, a prior hash,
a status line), never for a decision.
"""

from __future__ import annotations

import asyncio
import base64
import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import msgspec
from nats.aio.client import Client
from nats.js.client import JetStreamContext
from nats.js.errors import KeyDeletedError, KeyNotFoundError, KeyWrongLastSequenceError

from smf_assurance.core.projection import (
    AnalysisProjection,
    EnforcementProjection,
    ProjectionError,
    decode_analysis,
    decode_enforcement,
    projection_bytes,
)
from smf_assurance.governance.compiler import CompileError, compile_corpus
from smf_assurance.governance.lease import DEFAULT_LEASE_HOURS, MAX_LEASE_HOURS
from smf_assurance.pipeline.followers.releases import ensure_release_bucket
from smf_assurance.subjects import dsse, names
from smf_assurance.subjects.bus_access import RELEASE_STREAM
from smf_assurance.subjects.canonical import canonical_bytes, sha256_identity
from smf_assurance.subjects.keys import (
    KeyFileError,
    PublicKeyRecord,
    SigningKey,
    VerifyKey,
    load_private_key,
    public_record,
)
from smf_assurance.subjects.registry import (
    KeyRegistry,
    RegistryError,
    RegistryFile,
    decode_registry,
)
from smf_assurance.subjects.release import (
    BUNDLE_SCHEMA,
    MANIFEST_SCHEMA,
    PAYLOAD_RELEASE_MANIFEST,
    RELEASE_BUCKET,
    RELEASE_KEY_PREFIX,
    SHADOW_KEY,
    TRUST_ROOT_SCHEMA,
    MalformedReleaseError,
    ReleaseBundle,
    ReleaseDigests,
    ReleaseManifest,
    ReleaseReport,
    ReleaseReportRequest,
    Revocations,
    TrustRoot,
    decode_bundle,
    decode_trust_root,
    encode_bundle,
    encode_trust_root,
    manifest_hash,
    open_release_report,
    release_key,
)

MANIFEST_FILE: Final = "manifest.dsse.json"
ENFORCEMENT_FILE: Final = "enforcement.json"
ANALYSIS_FILE: Final = "analysis.json"
REGISTRY_FILE: Final = "registry.json"
RELEASE_FILES: Final = (MANIFEST_FILE, ENFORCEMENT_FILE, ANALYSIS_FILE, REGISTRY_FILE)

HOUR_MS: Final = 3_600_000
MAX_FILE_BYTES: Final = 900 * 1024


class ReleaseError(ValueError):
    """A release cannot be built, read, written or published; nothing was changed."""


@dataclass(frozen=True, slots=True)
class PriorRelease:
    """What the next release must chain to (read from the prior release's own files)."""

    manifest_hash: str
    sequence: int
    release_id: str
    revocations: Revocations


# -- registry and trust root ----------------------------------------------------


def canonical_registry(data: bytes) -> bytes:
    """Check a registry file (every key id is its key's) and return its canonical bytes."""
    try:
        parsed = msgspec.json.decode(data, type=RegistryFile)
        KeyRegistry.from_file(parsed)
    except (msgspec.DecodeError, RegistryError) as exc:
        raise ReleaseError(f"registry: {exc}") from exc
    return canonical_bytes(msgspec.to_builtins(parsed))


def make_trust_root(records: Sequence[PublicKeyRecord], threshold: int) -> TrustRoot:
    """A trust root over ``records`` needing ``threshold`` distinct signers (checked)."""
    root = TrustRoot(schema=TRUST_ROOT_SCHEMA, threshold=threshold, keys=tuple(records))
    try:
        return decode_trust_root(encode_trust_root(root))
    except MalformedReleaseError as exc:
        raise ReleaseError(str(exc)) from exc


def read_public_record(path: Path) -> PublicKeyRecord:
    """A public key record from a private key file or a public record file."""
    data = _read(path)
    try:
        return msgspec.json.decode(data, type=PublicKeyRecord)
    except msgspec.DecodeError:
        pass
    try:
        key, principal = load_private_key(path)
    except KeyFileError as exc:
        raise ReleaseError(f"{path}: neither a public record nor a private key file") from exc
    return public_record(key, principal)


def write_trust_root(path: Path, root: TrustRoot) -> None:
    """Write a trust root file, 0600; never over an existing one (it anchors every gate)."""
    _write_new(path, encode_trust_root(root) + b"\n", private=True)


def load_trust_root(path: Path) -> TrustRoot:
    try:
        return decode_trust_root(_read(path))
    except MalformedReleaseError as exc:
        raise ReleaseError(f"{path}: {exc}") from exc


# -- building ---------------------------------------------------------------------


def unverified_manifest(bundle: ReleaseBundle) -> ReleaseManifest:
    """The manifest as written, NOT verified: for naming and display on the publisher's side."""
    try:
        payload = base64.b64decode(bundle.envelope.payload, validate=True)
        return msgspec.json.decode(payload, type=ReleaseManifest)
    except (ValueError, msgspec.DecodeError) as exc:
        raise ReleaseError(f"release manifest does not decode: {exc}") from exc


def prior_of(bundle: ReleaseBundle) -> PriorRelease:
    manifest = unverified_manifest(bundle)
    payload = base64.b64decode(bundle.envelope.payload, validate=True)
    return PriorRelease(
        manifest_hash=manifest_hash(payload),
        sequence=manifest.sequence,
        release_id=manifest.release_id,
        revocations=manifest.revocations,
    )


def _union(*groups: Iterable[str]) -> tuple[str, ...]:
    return tuple(sorted({item for group in groups for item in group}))


def build_release(
    corpus: Path,
    signers: Sequence[SigningKey],
    registry: bytes,
    *,
    now_ms: int,
    lease_hours: int = DEFAULT_LEASE_HOURS,
    prior: PriorRelease | None = None,
    sequence: int | None = None,
    release_id: str | None = None,
    revoke_key_ids: Sequence[str] = (),
    revoke_release_ids: Sequence[str] = (),
) -> ReleaseBundle:
    """Compile ``corpus``, bind ``registry``, and sign the manifest with ``signers``.

    The sequence is the corpus's own unless given, or one above the prior's
    when chaining; the release id is the corpus's unless given, suffixed with
    ``-r<sequence>`` when the prior release already used it (release ids are
    unique, so a revocation names exactly one release). Revocations of the
    prior release are carried forward.
    """
    if not 1 <= lease_hours <= MAX_LEASE_HOURS:
        raise ReleaseError(f"lease must be 1 to {MAX_LEASE_HOURS} hours")
    try:
        compiled = compile_corpus(corpus)
    except CompileError as exc:
        raise ReleaseError(f"compile failed: {exc}") from exc
    base_id = compiled.enforcement.release_id
    if sequence is None:
        sequence = prior.sequence + 1 if prior else compiled.enforcement.release_sequence
    if release_id is None:
        release_id = base_id if prior is None or prior.release_id != base_id else None
        release_id = release_id or f"{base_id}-r{sequence}"
    return sign_release(
        compiled.enforcement,
        compiled.analysis,
        compiled.recipe_id,
        signers,
        registry,
        now_ms=now_ms,
        lease_hours=lease_hours,
        prior=prior,
        sequence=sequence,
        release_id=release_id,
        revoke_key_ids=revoke_key_ids,
        revoke_release_ids=revoke_release_ids,
    )


_REVISION_SUFFIX: Final = re.compile(r"-r[0-9]+\Z")


def carry_release(
    prior_bundle: ReleaseBundle,
    signers: Sequence[SigningKey],
    registry: bytes,
    *,
    now_ms: int,
    lease_hours: int = DEFAULT_LEASE_HOURS,
) -> ReleaseBundle:
    """The next release after ``prior_bundle``: the same policies and rules, with
    ``registry`` (``runtime add``/``approver add``: a change of who may
    sign must not carry a change of policy along unseen, so no corpus is compiled).

    The prior's projections are taken as written (the gates verified them under
    the prior's signature; the new signature covers them again, and every gate
    verifies them again before use), renamed to the new release id
    (``<base>-r<sequence>``, unique as sequences are) and sequence; recipe and
    revocations carry forward."""
    if not 1 <= lease_hours <= MAX_LEASE_HOURS:
        raise ReleaseError(f"lease must be 1 to {MAX_LEASE_HOURS} hours")
    prior = prior_of(prior_bundle)
    try:
        enforcement = decode_enforcement(prior_bundle.enforcement)
        analysis = decode_analysis(prior_bundle.analysis)
    except ProjectionError as exc:
        raise ReleaseError(f"the prior release {prior.release_id}: {exc}") from exc
    sequence = prior.sequence + 1
    base_id = _REVISION_SUFFIX.sub("", prior.release_id)
    return sign_release(
        enforcement,
        analysis,
        unverified_manifest(prior_bundle).recipe_id,
        signers,
        registry,
        now_ms=now_ms,
        lease_hours=lease_hours,
        prior=prior,
        sequence=sequence,
        release_id=f"{base_id}-r{sequence}",
    )


def sign_release(
    enforcement: EnforcementProjection,
    analysis: AnalysisProjection,
    recipe_id: str,
    signers: Sequence[SigningKey],
    registry: bytes,
    *,
    now_ms: int,
    lease_hours: int,
    prior: PriorRelease | None,
    sequence: int,
    release_id: str,
    revoke_key_ids: Sequence[str] = (),
    revoke_release_ids: Sequence[str] = (),
) -> ReleaseBundle:
    """Name both projections ``release_id``/``sequence``, bind ``registry``, chain to
    ``prior`` (its revocations carried forward) and sign the manifest."""
    if not 1 <= lease_hours <= MAX_LEASE_HOURS:
        raise ReleaseError(f"lease must be 1 to {MAX_LEASE_HOURS} hours")
    registry_bytes = canonical_registry(registry)
    if prior is not None and sequence <= prior.sequence:
        raise ReleaseError(f"sequence {sequence} is not above the prior {prior.sequence}")
    if prior is not None and release_id == prior.release_id:
        raise ReleaseError(f"release id {release_id} is the prior release's; ids are unique")
    enforcement = msgspec.structs.replace(
        enforcement, release_id=release_id, release_sequence=sequence
    )
    analysis = msgspec.structs.replace(analysis, release_id=release_id, release_sequence=sequence)
    enforcement_bytes = projection_bytes(enforcement)
    analysis_bytes = projection_bytes(analysis)
    carried = prior.revocations if prior is not None else Revocations()
    manifest = ReleaseManifest(
        schema=MANIFEST_SCHEMA,
        release_id=release_id,
        sequence=sequence,
        prior_release_hash=None if prior is None else prior.manifest_hash,
        issued_at_ms=now_ms,
        lease_expires_at_ms=now_ms + lease_hours * HOUR_MS,
        recipe_id=recipe_id,
        digests=ReleaseDigests(
            enforcement=sha256_identity(enforcement_bytes),
            analysis=sha256_identity(analysis_bytes),
            registry=sha256_identity(registry_bytes),
        ),
        revocations=Revocations(
            key_ids=_union(carried.key_ids, revoke_key_ids),
            release_ids=_union(carried.release_ids, revoke_release_ids),
        ),
    )
    try:
        # Constructing a Struct does not check its constraints; a round trip does.
        manifest = msgspec.json.decode(msgspec.json.encode(manifest), type=ReleaseManifest)
        envelope = dsse.sign_struct(PAYLOAD_RELEASE_MANIFEST, manifest, signers)
    except (msgspec.ValidationError, ValueError) as exc:
        raise ReleaseError(f"manifest: {exc}") from exc
    return ReleaseBundle(
        schema=BUNDLE_SCHEMA,
        envelope=envelope,
        enforcement=enforcement_bytes,
        analysis=analysis_bytes,
        registry=registry_bytes,
    )


# -- files -------------------------------------------------------------------------


def _read(path: Path) -> bytes:
    try:
        with path.open("rb") as handle:
            data = handle.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise ReleaseError(f"cannot read {path}: {exc.strerror}") from exc
    if len(data) > MAX_FILE_BYTES:
        raise ReleaseError(f"{path} is larger than {MAX_FILE_BYTES} bytes")
    return data


def _write_new(path: Path, data: bytes, *, private: bool = False) -> None:
    """Create ``path`` with ``data`` atomically; refuse if anything is there.
    ``private``: 0600 in a 0700 folder, for a file of a state directory (whatever the
    umask); otherwise as the umask says (a release folder is made to be shared)."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700 if private else 0o777)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    mode = 0o600 if private else 0o666
    try:
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.link(temporary, path)
    except FileExistsError as exc:
        raise ReleaseError(f"refusing to overwrite {path}") from exc
    except OSError as exc:
        raise ReleaseError(f"cannot write {path}: {exc.strerror}") from exc
    finally:
        temporary.unlink(missing_ok=True)


def write_release_dir(bundle: ReleaseBundle, out: Path) -> dict[str, Path]:
    """Write a release folder; ``out`` must be new or empty."""
    out.mkdir(parents=True, exist_ok=True)
    if any(out.iterdir()):
        raise ReleaseError(f"output directory {out} is not empty")
    contents = {
        MANIFEST_FILE: dsse.encode_envelope(bundle.envelope),
        ENFORCEMENT_FILE: bundle.enforcement,
        ANALYSIS_FILE: bundle.analysis,
        REGISTRY_FILE: bundle.registry,
    }
    written = {}
    for name, data in contents.items():
        _write_new(out / name, data)
        written[name] = out / name
    return written


def read_release_dir(folder: Path) -> ReleaseBundle:
    """The bundle of a release folder, as written (not verified)."""
    try:
        envelope = dsse.decode_envelope(_read(folder / MANIFEST_FILE))
    except dsse.SignatureError as exc:
        raise ReleaseError(f"{folder / MANIFEST_FILE}: {exc}") from exc
    return ReleaseBundle(
        schema=BUNDLE_SCHEMA,
        envelope=envelope.envelope,
        enforcement=_read(folder / ENFORCEMENT_FILE),
        analysis=_read(folder / ANALYSIS_FILE),
        registry=_read(folder / REGISTRY_FILE),
    )


def read_bundle_file(path: Path) -> ReleaseBundle:
    try:
        return decode_bundle(_read(path))
    except MalformedReleaseError as exc:
        raise ReleaseError(f"{path}: {exc}") from exc


# -- publishing -------------------------------------------------------------------


def inbox_name(sequence: int, data: bytes) -> str:
    """Inbox files sort in sequence order; the hash keeps two contents apart."""
    return f"{release_key(sequence)}-{sha256_identity(data)[7:23]}.json"


def publish_to_inbox(bundle: ReleaseBundle, inbox: Path) -> Path:
    """Drop the bundle into a state directory's inbox; the gate verifies it there."""
    data = encode_bundle(bundle)
    path = inbox / inbox_name(unverified_manifest(bundle).sequence, data)
    if path.exists() and _read(path) == data:
        return path
    _write_new(path, data, private=True)
    return path


def latest_in_inbox(inbox: Path) -> ReleaseBundle | None:
    """The inbox bundle with the highest sequence (as written, not verified)."""
    if not inbox.is_dir():
        return None
    names = sorted(inbox.glob(f"{RELEASE_KEY_PREFIX}*.json"))
    return read_bundle_file(names[-1]) if names else None


class ReleasePublishError(ReleaseError):
    """The bucket already holds different content for this sequence."""


async def publish_to_bucket(js: JetStreamContext, bundle: ReleaseBundle) -> tuple[str, int]:
    """Publish the bundle as ONE value under ``release.<sequence>``; returns (key, revision).

    ``create`` never overwrites: a second, different release for a published
    sequence is refused here (gates would refuse it as a rollback anyway).
    Publishing the same bytes again is a no-op.
    """
    data = encode_bundle(bundle)
    key = release_key(unverified_manifest(bundle).sequence)
    kv = await ensure_release_bucket(js)
    try:
        return key, await kv.create(key, data)
    except KeyWrongLastSequenceError:
        existing = await kv.get(key)
        if existing.value == data and existing.revision is not None:
            return key, existing.revision
        raise ReleasePublishError(f"{key} is already published with different content") from None


async def publish_shadow_to_bucket(js: JetStreamContext, bundle: ReleaseBundle) -> tuple[str, int]:
    """Publish the bundle as the shadow release under ``shadow``; returns
    (key, revision). Unlike a release's ``create``, this replaces a shadow already
    there: there is one shadow at a time, and publishing another one is trying the
    next candidate. Every gate verifies it as the release it would become."""
    kv = await ensure_release_bucket(js)
    return SHADOW_KEY, await kv.put(SHADOW_KEY, encode_bundle(bundle))


async def withdraw_shadow_from_bucket(js: JetStreamContext) -> bool:
    """Withdraw the shadow: a delete marker on ``shadow``, which every gate
    honours, also one that was down when it was written. Returns False when the
    bucket held no shadow (nothing was written)."""
    if await bucket_shadow(js) is None:
        return False
    kv = await ensure_release_bucket(js)
    await kv.delete(SHADOW_KEY)
    return True


async def bucket_shadow(js: JetStreamContext) -> BucketEntry | None:
    """The shadow the bucket holds (as published, not verified), or None."""
    kv = await ensure_release_bucket(js)
    try:
        entry = await kv.get(SHADOW_KEY)
    except (KeyNotFoundError, KeyDeletedError):  # never published, or withdrawn
        return None
    if entry.value is None:
        return None
    return _bucket_entry(SHADOW_KEY, entry.revision or 0, entry.value)


@dataclass(frozen=True, slots=True)
class BucketEntry:
    key: str
    revision: int
    manifest: ReleaseManifest | None
    size: int
    gate_keys: dict[str, VerifyKey]
    """The gate keys its registry names (:func:`gate_keys_of`), if it decodes."""


async def bucket_entries(js: JetStreamContext) -> list[BucketEntry]:
    """What the release bucket holds (manifests as written, not verified), in key order.

    Read with the calls a publisher may make (docs/BUS-PERMISSIONS.md): the
    stream's subjects from its info, then each value by a direct get. A watch
    would need a consumer, which only gates and operators may create, so on a
    bus with authorization ``release status`` timed out (found by
    tests/cli/test_cli_json.py running it as the publisher)."""
    kv = await ensure_release_bucket(js)
    prefix = f"$KV.{RELEASE_BUCKET}."
    info = await js.stream_info(RELEASE_STREAM, subjects_filter=f"{prefix}{RELEASE_KEY_PREFIX}>")
    entries: list[BucketEntry] = []
    for subject in sorted(info.state.subjects or {}):
        key = subject.removeprefix(prefix)
        try:
            entry = await kv.get(key)
        except KeyNotFoundError:  # deleted or purged since the info was read
            continue
        if entry.value is None:
            continue
        entries.append(_bucket_entry(key, entry.revision or 0, entry.value))
    return entries


def _bucket_entry(key: str, revision: int, value: bytes) -> BucketEntry:
    manifest: ReleaseManifest | None = None
    gate_keys: dict[str, VerifyKey] = {}
    try:
        bundle = decode_bundle(value)
        manifest = unverified_manifest(bundle)
        gate_keys = gate_keys_of(bundle)
    except (ReleaseError, MalformedReleaseError):
        pass
    return BucketEntry(key, revision, manifest, len(value), gate_keys)


# -- what the gates did with it ------------------------------------------

REPORT_WINDOW_SECONDS: Final = 0.5
"""How long one round of :func:`ask_gates` listens for answers: every gate on the
bus answers ``smf.release.report`` (a queue group per gate), so a round gathers
replies until this window closes rather than taking the first."""


SETTLED: Final = frozenset({"adopted", "superseded", "refused"})
"""A gate's answers that will not change by asking again soon."""


@dataclass(frozen=True, slots=True)
class GateAnswers:
    """One round of ``smf.release.report``: the reports a trusted gate key signed,
    by gate name, and how many answers were not (never counted)."""

    reports: dict[str, ReleaseReport]
    unverified: int


def gate_keys_of(bundle: ReleaseBundle) -> dict[str, VerifyKey]:
    """The gate keys a release's own registry names: whose reports about it count.

    The registry is read as published, unverified, which is enough here: a
    report is news to the publisher, never a decision, and the gates verify the
    release itself before they adopt it."""
    try:
        return decode_registry(bundle.registry, "the release's registry").trusted("gate")
    except RegistryError as exc:
        raise ReleaseError(f"its registry does not decode: {exc}") from None


async def ask_gates(
    nc: Client,
    request: ReleaseReportRequest,
    gate_keys: Mapping[str, VerifyKey],
    window: float = REPORT_WINDOW_SECONDS,
) -> GateAnswers:
    """Ask every gate on the bus for its release report; gather for ``window`` seconds."""
    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox)
    reports: dict[str, ReleaseReport] = {}
    unverified = 0
    loop = asyncio.get_running_loop()
    try:
        await nc.publish(names.RELEASE_REPORT, msgspec.json.encode(request), reply=inbox)
        deadline = loop.time() + window
        while (left := deadline - loop.time()) > 0:
            try:
                msg = await sub.next_msg(timeout=left)
            except TimeoutError:
                break
            try:
                report = open_release_report(msg.data, gate_keys)
            except (dsse.SignatureError, msgspec.DecodeError):
                unverified += 1
                continue
            reports[report.gate] = report
    finally:
        await sub.unsubscribe()
    return GateAnswers(reports, unverified)


async def wait_for_adoption(
    nc: Client,
    request: ReleaseReportRequest,
    gate_keys: Mapping[str, VerifyKey],
    wait_seconds: float,
    on_tick: Callable[[float], None] | None = None,
) -> GateAnswers:
    """Ask until every gate that answers has adopted or refused the candidate, or
    ``wait_seconds`` passed; returns the last round. A gate that has not yet seen
    the bucket's new value answers ``unseen``/``pending`` and is asked again."""
    loop = asyncio.get_running_loop()
    started = loop.time()
    while True:
        answers = await ask_gates(nc, request, gate_keys)
        elapsed = loop.time() - started
        if on_tick is not None:
            on_tick(elapsed)
        settled = [r for r in answers.reports.values() if r.asked in SETTLED]
        if answers.reports and len(settled) == len(answers.reports):
            return answers
        if elapsed >= wait_seconds:
            return answers
        await asyncio.sleep(0.1)


# -- the demo's signed release ------------------------------------------------------

DEMO_LEASE_HOURS: Final = 30 * 24
DEMO_RENEW_MARGIN_MS: Final = 24 * HOUR_MS


def provision_release(
    *,
    corpus: Path,
    signer: SigningKey,
    signer_principal: str,
    trust_root: Path,
    inbox: Path,
    registry: bytes,
    now_ms: int,
) -> Path | None:
    """Make sure a state directory runs on a signed release (``provision_demo``).

    Writes a trust root naming ``signer`` if there is none, and drops a signed
    release of ``corpus`` + ``registry`` into the inbox unless the newest one
    there already carries this registry and has more than a day of lease left.
    A renewal chains to the newest inbox release. Returns the new file, if any.
    """
    if not trust_root.exists():
        write_trust_root(trust_root, make_trust_root([public_record(signer, signer_principal)], 1))
    registry_bytes = canonical_registry(registry)
    latest = latest_in_inbox(inbox)
    prior = None
    if latest is not None:
        manifest = unverified_manifest(latest)
        fresh = manifest.lease_expires_at_ms - now_ms > DEMO_RENEW_MARGIN_MS
        if fresh and latest.registry == registry_bytes:
            return None
        prior = prior_of(latest)
    bundle = build_release(
        corpus,
        [signer],
        registry_bytes,
        now_ms=now_ms,
        lease_hours=DEMO_LEASE_HOURS,
        prior=prior,
    )
    return publish_to_inbox(bundle, inbox)
