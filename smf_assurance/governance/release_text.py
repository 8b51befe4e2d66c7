"""What a release said: its two projections, authenticated without judging its lease.

Issue 25: ``explain`` reads the release that decided a past decision and
``release diff`` two release folders. Neither decides anything now, so the
lease (TUF 5.4.4, a freeze attack is about using a release) is not judged:
a decision made last month is explained under last month's release, expired
or not. What is checked, with a trust root: a threshold of its signatures
(steps 1-4 of docs/RELEASES.md), every artifact against its digest (step 5,
mix-and-match) and that both projections name the signed release (step 10),
so the words shown are the ones the release's signers signed. Without a
trust root the folder is read as written, and the caller says so.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from smf_assurance.core.projection import (
    AnalysisProjection,
    EnforcementProjection,
    ProjectionError,
    decode_analysis,
    decode_enforcement,
)
from smf_assurance.governance.releases import (
    ReleaseError,
    prior_of,
    read_bundle_file,
    unverified_manifest,
)
from smf_assurance.subjects.release import (
    RELEASE_KEY_PREFIX,
    ReleaseBundle,
    ReleaseCheckError,
    ReleaseManifest,
    TrustRoot,
    authenticate_release,
    check_release_digests,
    encode_bundle,
    trust_root_keys,
)


@dataclass(frozen=True, slots=True)
class ReleaseText:
    manifest: ReleaseManifest
    manifest_hash: str
    enforcement: EnforcementProjection
    analysis: AnalysisProjection
    authenticated: bool
    """Signed by a threshold of the trust root and intact; False when read as written."""


def release_text(bundle: ReleaseBundle, root: TrustRoot | None) -> ReleaseText:
    """The projections of ``bundle``; with ``root``, only if it authenticates
    (module docstring). Raises :class:`ReleaseError` with the reason."""
    try:
        if root is not None:
            authenticated = authenticate_release(
                encode_bundle(bundle), trust_root_keys(root), root.threshold
            )
            check_release_digests(authenticated.bundle, authenticated.manifest)
            manifest, digest = authenticated.manifest, authenticated.manifest_hash
        else:
            manifest, digest = unverified_manifest(bundle), prior_of(bundle).manifest_hash
        enforcement = decode_enforcement(bundle.enforcement)
        analysis = decode_analysis(bundle.analysis)
    except ReleaseCheckError as exc:
        raise ReleaseError(f"release refused ({exc.reason_code}): {exc}") from exc
    except ProjectionError as exc:
        raise ReleaseError(str(exc)) from exc
    for name, projection in (("enforcement", enforcement), ("analysis", analysis)):
        if (projection.release_id, projection.release_sequence) != (
            manifest.release_id,
            manifest.sequence,
        ):
            raise ReleaseError(
                f"the {name} projection names release {projection.release_id} "
                f"#{projection.release_sequence}, not {manifest.release_id} #{manifest.sequence}"
            )
    return ReleaseText(manifest, digest, enforcement, analysis, root is not None)


def inbox_bundles(inbox: Path) -> Iterator[tuple[Path, ReleaseBundle | ReleaseError]]:
    """Every bundle file of a state's inbox
    (``smf_assurance.governance.releases.publish_to_inbox``), in
    sequence order, each read or the reason it could not be."""
    if not inbox.is_dir():
        return
    for path in sorted(inbox.glob(f"{RELEASE_KEY_PREFIX}*.json")):
        try:
            yield path, read_bundle_file(path)
        except ReleaseError as exc:
            yield path, exc
