"""Onboarding on the operator's side (issue 21): a change of who may sign, as the next release.

``runtime add``/``remove`` and ``approver add``/``remove`` all do the same
thing around their own registry edit, and this module is that thing:

- **Who signs** (:func:`release_authority`): the operator's release keys
  (``--release-key``), each named by the trust root the gates verify against
  and not revoked, together reaching its threshold; never the demo's
  ``refresh_demo_release``. The prior release is the state's accepted one or
  the newest in its inbox, whichever is later, or ``--prior DIR``.
- **What is signed** (:func:`next_release`): the prior's policies carried
  forward unchanged (``smf_assurance.governance.releases.carry_release``), or ``--corpus``
  compiled, with the new registry, sequence + 1, chained to the prior. Before
  anything is written the release is verified the way a gate of this state
  would verify it (``ReleaseTrust``: signatures, threshold, digests, rollback,
  chain, lease, revocations, content), the prior first when the gate has not
  accepted it yet: what a gate would refuse is refused here, with its reason.
- **All or nothing** (:class:`Changes`): every file of the change is planned
  first (new secrets must not exist, replaced files are read), written in one
  go and undone if a write fails or the release cannot be published. Once the
  release has left (inbox file written, bucket value created), what was
  written stays: it is what the release says.
- **One at a time** (:func:`state_lock`): two onboardings on one state
  directory would sign two releases of the same sequence.

Nothing here prints; the commands (``smf_assurance.ops.cli.commands.onboard``) speak.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import msgspec
import structlog

from smf_assurance.core.release_trust import (
    LastAccepted,
    ReleaseTrust,
    TrustedTime,
    VerifiedRelease,
)
from smf_assurance.governance.releases import (
    ReleaseError,
    build_release,
    carry_release,
    latest_in_inbox,
    load_trust_root,
    prior_of,
    read_release_dir,
    unverified_manifest,
)
from smf_assurance.ops.local.state import StateDir
from smf_assurance.pipeline.stores.release_state import read_release_state
from smf_assurance.subjects.keys import KeyFileError, SigningKey, load_private_key
from smf_assurance.subjects.registry import KeyRegistry, RegistryError, RegistryFile
from smf_assurance.subjects.release import (
    ReleaseBundle,
    ReleaseCheckError,
    TrustRoot,
    encode_bundle,
)

log = structlog.get_logger(__name__)

MAX_REGISTRY_BYTES: Final = 900 * 1024
"""A registry travels inside one release value
(``smf_assurance.governance.releases.MAX_FILE_BYTES``)."""


class OnboardingError(ValueError):
    """A refusal before anything was written: one line, what to do."""


# --- one at a time ----------------------------------------------------------------------


@contextlib.contextmanager
def state_lock(state: StateDir) -> Iterator[None]:
    """Hold an exclusive ``flock`` on the state directory itself for one onboarding.

    The directory, not a file in it: a lock file would be a change a refused
    command leaves behind, and ``up``'s own ``up.lock`` is held for as long as
    the gate runs (an onboarding runs beside a running gate). The kernel drops
    the lock when the process dies."""
    try:
        fd = os.open(state.root, os.O_RDONLY | os.O_DIRECTORY)
    except OSError as exc:
        raise OnboardingError(f"cannot open the state dir {state.root}: {exc.strerror}") from exc
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise OnboardingError(
                f"another onboarding is changing {state.root}; wait for it to finish"
            ) from None
        yield
    finally:
        os.close(fd)


# --- the registry --------------------------------------------------------------------------


def read_registry(state: StateDir) -> RegistryFile:
    """The state's registry, checked as a release would check it; refused, naming the
    file, when it cannot be read, does not decode, or is inconsistent."""
    path = state.registry
    try:
        with path.open("rb") as handle:
            data = handle.read(MAX_REGISTRY_BYTES + 1)
    except OSError as exc:
        raise OnboardingError(f"cannot read the registry {path}: {exc.strerror}") from exc
    if len(data) > MAX_REGISTRY_BYTES:
        raise OnboardingError(f"the registry {path} is larger than {MAX_REGISTRY_BYTES} bytes")
    try:
        parsed = msgspec.json.decode(data, type=RegistryFile)
        KeyRegistry.from_file(parsed)
    except (msgspec.DecodeError, RegistryError) as exc:
        raise OnboardingError(
            f"the registry {path} is damaged ({exc}); restore it from a backup"
        ) from exc
    return parsed


def registry_bytes(registry: RegistryFile) -> bytes:
    """What ``registry.json`` holds: the form ``provision_demo`` writes."""
    return msgspec.json.encode(registry)


# --- who signs the next release -------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Prior:
    """The release the next one chains to, and where it was found."""

    bundle: ReleaseBundle
    source: str
    accepted: bool
    """It is the state's accepted release (the gate has verified it)."""


@dataclass(frozen=True, slots=True)
class Authority:
    """What the next release is made with."""

    signers: tuple[SigningKey, ...]
    root: TrustRoot
    accepted: LastAccepted | None
    prior: Prior
    corpus: Path | None
    lease_hours: int


def load_signers(paths: Sequence[Path], root: TrustRoot, root_path: Path) -> tuple[SigningKey, ...]:
    """The operator's release keys, each one the trust root names, together at least its
    threshold: a release signed otherwise is refused by every gate
    (``release_bad_signature``, ``release_below_threshold``), so it is refused here."""
    trusted = {record.key_id for record in root.keys}
    signers: dict[str, SigningKey] = {}
    for path in paths:
        try:
            key, _ = load_private_key(path)
        except KeyFileError as exc:
            raise OnboardingError(f"--release-key {path}: {exc}") from exc
        if key.key_id not in trusted:
            raise OnboardingError(
                f"--release-key {path}: key {key.key_id} is not in the trust root {root_path}; "
                "the gates would refuse what it signs (release_bad_signature)"
            )
        signers[key.key_id] = key
    if len(signers) < root.threshold:
        raise OnboardingError(
            f"{len(signers)} distinct release key(s) given, the trust root {root_path} needs "
            f"{root.threshold}: pass more --release-key"
        )
    return tuple(signers.values())


def find_prior(state: StateDir, prior_dir: Path | None) -> tuple[Prior, LastAccepted | None]:
    """The prior release and the state's accepted release state.

    ``release-state.db`` is read read-only; a damaged one raises the store's own
    error, which names the file (``smf_assurance.ops.cli.boundary``)."""
    stored = read_release_state(state.release_state) if state.release_state.exists() else None
    accepted = stored.state if stored is not None else None
    if prior_dir is not None:
        try:
            bundle = read_release_dir(prior_dir)
        except ReleaseError as exc:
            raise OnboardingError(f"--prior {prior_dir}: {exc}") from exc
        is_accepted = accepted is not None and (
            prior_of(bundle).manifest_hash == accepted.manifest_hash
        )
        return Prior(bundle, f"--prior {prior_dir}", is_accepted), accepted
    try:
        inboxed = latest_in_inbox(state.release_inbox)
    except ReleaseError as exc:
        raise OnboardingError(f"the release inbox of {state.root}: {exc}") from exc
    candidates: list[Prior] = []
    if stored is not None:
        from_store = msgspec.json.decode(stored.bundle, type=ReleaseBundle)
        candidates.append(Prior(from_store, f"the accepted release of {state.root}", True))
    if inboxed is not None:
        same = accepted is not None and prior_of(inboxed).manifest_hash == accepted.manifest_hash
        candidates.append(Prior(inboxed, f"the newest release in {state.release_inbox}", same))
    if not candidates:
        raise OnboardingError(
            f"no prior release in {state.root} (none accepted, none in its inbox): "
            "pass --prior DIR, the release folder the gates run on"
        )
    # the later one; on a tie the accepted one (the gate verified it)
    return max(candidates, key=lambda p: (unverified_manifest(p.bundle).sequence, p.accepted)), (
        accepted
    )


def release_authority(
    state: StateDir,
    *,
    key_paths: Sequence[Path],
    trust_root: Path | None,
    corpus: Path | None,
    prior_dir: Path | None,
    lease_hours: int,
) -> Authority:
    """Everything the next release needs, checked before anything is written."""
    root_path = trust_root or state.trust_root
    try:
        root = load_trust_root(root_path)
    except ReleaseError as exc:
        raise OnboardingError(f"the trust root: {exc} (pass --trust-root FILE)") from exc
    signers = load_signers(key_paths, root, root_path)
    prior, accepted = find_prior(state, prior_dir)
    revoked = sorted(
        {k.key_id for k in signers} & (accepted.revoked_key_ids if accepted else set())
    )
    if revoked:
        raise OnboardingError(
            f"release key {revoked[0]} is revoked by the accepted release; the gates would "
            "refuse what it signs (release_revoked)"
        )
    if corpus is not None and not corpus.is_dir():
        raise OnboardingError(f"--corpus {corpus} is not a folder")
    return Authority(signers, root, accepted, prior, corpus, lease_hours)


def next_release(authority: Authority, registry: bytes, now_ms: int) -> VerifiedRelease:
    """Sign the next release with ``registry`` and verify it as this state's gate would.

    The prior's policies are carried forward unless a corpus was given. The
    prior is verified first when the gate has not accepted it (an inbox release
    it may yet refuse): chaining to a release the gate refuses would be refused
    in turn (``release_chain_broken``)."""
    prior = authority.prior
    try:
        if authority.corpus is None:
            bundle = carry_release(
                prior.bundle,
                authority.signers,
                registry,
                now_ms=now_ms,
                lease_hours=authority.lease_hours,
            )
        else:
            bundle = build_release(
                authority.corpus,
                authority.signers,
                registry,
                now_ms=now_ms,
                lease_hours=authority.lease_hours,
                prior=prior_of(prior.bundle),
            )
    except ReleaseError as exc:
        raise OnboardingError(f"the next release cannot be built: {exc}") from exc
    time = TrustedTime(now_ms)
    last = authority.accepted
    if not prior.accepted:
        try:
            verified = ReleaseTrust(authority.root, last).verify_update(
                encode_bundle(prior.bundle), time
            )
        except ReleaseCheckError as exc:
            raise OnboardingError(
                f"the prior release ({prior.source}) would be refused by the gate "
                f"({exc.reason_code}): {exc}; pass --prior DIR"
            ) from exc
        high_water = 0 if last is None else last.clock_high_water_ms
        last = verified.accepted_state(time, high_water)
    try:
        return ReleaseTrust(authority.root, last).verify_update(encode_bundle(bundle), time)
    except ReleaseCheckError as exc:
        raise OnboardingError(
            f"the gate would refuse the new release ({exc.reason_code}): {exc}"
        ) from exc


def bundle_of(release: VerifiedRelease) -> ReleaseBundle:
    return msgspec.json.decode(release.bundle_bytes, type=ReleaseBundle)


# --- all or nothing -----------------------------------------------------------------------


def _create_private(path: Path, data: bytes) -> None:
    """A new 0600 file; refused (``FileExistsError``) when anything is there, a
    symlink included (``O_EXCL``)."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
    except BaseException:
        path.unlink(missing_ok=True)
        raise


def _replace(path: Path, data: bytes, mode: int) -> None:
    """Replace ``path`` atomically (a temporary file beside it, then rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        Path(tmp).replace(path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


@dataclass
class Changes:
    """The files one onboarding writes: planned, then all written, or none.

    :meth:`create` plans a new file (a secret or a snippet, 0600) that must not
    exist; :meth:`replace` plans a new content for a file, remembering what it
    held (or that it did not exist). :meth:`apply` writes them in order and,
    if one fails, undoes those already written before it raises; :meth:`undo`
    restores every file written (a failed publication)."""

    _plan: list[tuple[Path, bytes, bool, int]] = field(default_factory=list)
    _before: dict[Path, tuple[bytes, int] | None] = field(default_factory=dict)
    _done: list[Path] = field(default_factory=list)

    def create(self, path: Path, data: bytes) -> None:
        if path.exists() or path.is_symlink():
            raise OnboardingError(f"{path} exists; move it aside or choose another id")
        if path in self._before:
            raise OnboardingError(f"{path} is written twice")
        self._before[path] = None
        self._plan.append((path, data, True, 0o600))

    def replace(self, path: Path, data: bytes) -> None:
        """The file keeps its mode (a new one is 0600)."""
        if path in self._before:
            raise OnboardingError(f"{path} is written twice")
        try:
            self._before[path] = (
                (path.read_bytes(), path.stat().st_mode & 0o777) if path.exists() else None
            )
        except OSError as exc:
            raise OnboardingError(f"cannot read {path}: {exc.strerror}") from exc
        before = self._before[path]
        self._plan.append((path, data, False, 0o600 if before is None else before[1]))

    @property
    def paths(self) -> tuple[Path, ...]:
        return tuple(path for path, _, _, _ in self._plan)

    def apply(self) -> None:
        try:
            for path, data, new, mode in self._plan:
                if new:
                    _create_private(path, data)
                else:
                    _replace(path, data, mode)
                self._done.append(path)
        except BaseException:
            self.undo()
            raise

    def undo(self) -> None:
        """Put back every file written so far; a file that cannot be put back is logged
        (never raised over the failure being handled)."""
        for path in reversed(self._done):
            before = self._before[path]
            try:
                if before is None:
                    path.unlink(missing_ok=True)
                else:
                    _replace(path, *before)
            except OSError as exc:
                log.error("onboarding_undo_failed", path=str(path), error=type(exc).__name__)
        self._done.clear()
