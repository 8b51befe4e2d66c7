"""``release``: build, verify, publish and inspect signed governed releases.

- ``release build``: compile a corpus, bind a registry, sign the manifest with
  one or more keys, write a release folder.
- ``release verify``: every check a gate makes (signature threshold, digests,
  and against a state directory's accepted release: rollback, chain,
  revocation), with the lease judged now or ``--at``.
- ``release publish``: to the ``SMF_RELEASES`` bucket (``--nats``) or a state
  directory's inbox (``--state-dir``); running gates verify before use. With
  ``--shadow`` to the bucket's ``shadow`` key: every gate verifies it
  as the release it would become and runs it beside its active release, deciding
  nothing with it.
- ``release withdraw-shadow``: delete the ``shadow`` key; every gate stops it.
- ``release status``: what a bucket holds, or what a state directory accepted
  (and the shadow each gate runs, or the state keeps).
- ``release trust-root``: write the trust root file gates verify against.
- ``release diff``: the rules, policies and requirements two release folders
  differ in (``smf_assurance.core.release_diff``); with a state directory
  also the recorded decisions that would change (``smf_assurance.ops.cli.release_traffic``).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
from nats.errors import Error as NatsError

from smf_assurance.core.release_trust import (
    LastAccepted,
    ReleaseTrust,
    ReplayedReleaseError,
    TrustedTime,
    VerifiedRelease,
)
from smf_assurance.governance.releases import (
    GateAnswers,
    ReleaseError,
    ask_gates,
    bucket_entries,
    bucket_shadow,
    build_release,
    gate_keys_of,
    latest_in_inbox,
    load_trust_root,
    make_trust_root,
    prior_of,
    publish_shadow_to_bucket,
    publish_to_bucket,
    publish_to_inbox,
    read_public_record,
    read_release_dir,
    unverified_manifest,
    wait_for_adoption,
    withdraw_shadow_from_bucket,
    write_release_dir,
    write_trust_root,
)
from smf_assurance.ops.cli.cli_json import (
    AcceptedJson,
    BucketRow,
    GateReleaseJson,
    GateShadowJson,
    InboxNewestJson,
    PublishedToGate,
    RefusalJson,
    ReleaseBuildJson,
    ReleasePublishJson,
    ReleaseStatusJson,
    ReleaseVerifyJson,
    ReleaseWithdrawShadowJson,
    ShadowCountsJson,
    StoredShadowJson,
    TrustRootJson,
    WithdrawnAtGateJson,
)
from smf_assurance.ops.cli.output import (
    CommandError,
    Progress,
    emit,
    fail,
    parse_time,
    say,
    table,
)
from smf_assurance.ops.local.bus import connect_bus, credential_for
from smf_assurance.ops.local.defaults import PUBLISHER
from smf_assurance.ops.local.state import StateDir
from smf_assurance.pipeline.stores.release_state import (
    StoredRelease,
    StoredShadow,
    read_release_state,
    read_shadow_state,
)
from smf_assurance.subjects.bus_access import CLIENT_API, BusCredential
from smf_assurance.subjects.clock import wall_clock_ms
from smf_assurance.subjects.keys import KeyFileError, SigningKey, VerifyKey, load_private_key
from smf_assurance.subjects.release import (
    RELEASE_REPORT_SCHEMA,
    ReleaseBundle,
    ReleaseCheckError,
    ReleaseManifest,
    ReleaseReport,
    ReleaseReportRequest,
    ReportedRefusal,
    ReportedRelease,
    encode_bundle,
)

# -- helpers --------------------------------------------------------------------


def instant(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).isoformat(timespec="seconds")


def parse_at(text: str) -> int:
    return parse_time(text, "--at")


def _keys(paths: Sequence[Path]) -> list[SigningKey]:
    keys = []
    for path in paths:
        try:
            keys.append(load_private_key(path)[0])
        except KeyFileError as exc:
            fail(f"{path}: {exc}", 2)
    return keys


def _manifest_rows(manifest: ReleaseManifest, digest: str | None) -> list[tuple[str, Any]]:
    return [
        ("release", manifest.release_id),
        ("sequence", manifest.sequence),
        ("manifest hash", digest or "-"),
        ("prior release", manifest.prior_release_hash or "- (first of its chain)"),
        ("issued at", instant(manifest.issued_at_ms)),
        ("lease expires", instant(manifest.lease_expires_at_ms)),
        ("recipe", manifest.recipe_id),
        ("enforcement", manifest.digests.enforcement),
        ("analysis", manifest.digests.analysis),
        ("registry", manifest.digests.registry),
        ("revoked keys", ", ".join(manifest.revocations.key_ids) or "-"),
        ("revoked releases", ", ".join(manifest.revocations.release_ids) or "-"),
    ]


def _manifest_json(manifest: ReleaseManifest, digest: str | None) -> dict[str, Any]:
    value: dict[str, Any] = msgspec.to_builtins(manifest)
    value["manifest_hash"] = digest
    return value


def _read_dir(folder: Path) -> ReleaseBundle:
    try:
        return read_release_dir(folder)
    except ReleaseError as exc:
        fail(str(exc), 2)


async def _load_state(state_dir: Path) -> StoredRelease | None:
    """Read only: a status or a check never needs to write the
    gate's state, which may be read-only or in use by a running gate."""
    path = StateDir(state_dir).release_state
    if not path.exists():
        return None
    return await asyncio.to_thread(read_release_state, path)


# -- build ------------------------------------------------------------------------


def run_build(args: argparse.Namespace) -> int:
    signers = _keys(args.key)
    registry_path: Path = args.registry or args.corpus / "registry.json"
    try:
        registry = registry_path.read_bytes()
    except OSError as exc:
        hint = "" if args.registry else " (pass --registry FILE)"
        fail(f"cannot read registry {registry_path}: {exc.strerror}{hint}", 2)
    try:
        prior = prior_of(read_release_dir(args.prior)) if args.prior else None
        bundle = build_release(
            args.corpus,
            signers,
            registry,
            now_ms=wall_clock_ms(),
            lease_hours=args.lease_hours,
            prior=prior,
            sequence=args.sequence,
            release_id=args.release_id,
            revoke_key_ids=args.revoke_key,
            revoke_release_ids=args.revoke_release,
        )
        written = write_release_dir(bundle, args.out)
    except ReleaseError as exc:
        fail(f"release build failed: {exc}")
    manifest = unverified_manifest(bundle)
    digest = prior_of(bundle).manifest_hash
    if args.json:
        built = {
            "manifest": _manifest_json(manifest, digest),
            "signers": [key.key_id for key in signers],
            "files": {name: str(path) for name, path in written.items()},
        }
        emit(msgspec.convert(built, type=ReleaseBuildJson))
    else:
        rows = _manifest_rows(manifest, digest)
        rows.append(("signed by", ", ".join(key.key_id for key in signers)))
        rows.append(("written to", str(args.out)))
        table(("field", "value"), rows)
    return 0


# -- verify -----------------------------------------------------------------------


def verify_release_dir(
    folder: Path, trust_root: Path, state_dir: Path | None, at: str | None
) -> tuple[VerifiedRelease, LastAccepted | None, str]:
    """Verify a release folder the way a gate would, or exit with the reason.

    The one verification every command-line consumer uses (``release verify``,
    ``swarm analyze --release``, ``swarm review --release``): verification in every
    consumer, before use. With ``state_dir`` the release is also checked
    against that state's last accepted release (rollback, chain); the state is
    only read, never advanced: only a gate accepts releases.
    """
    try:
        root = load_trust_root(trust_root)
    except ReleaseError as exc:
        fail(str(exc), 2)
    bundle = _read_dir(folder)
    at_ms = parse_at(at) if at else wall_clock_ms()
    stored = asyncio.run(_load_state(state_dir)) if state_dir else None
    last: LastAccepted | None = stored.state if stored is not None else None
    note = "verified"
    trust = ReleaseTrust(root, last)
    data, time = encode_bundle(bundle), TrustedTime(at_ms)  # the one clock reading
    try:
        try:
            release = trust.verify_update(data, time)
        except ReplayedReleaseError:
            release = trust.verify_stored(data, time)
            note = "verified; it is the state's accepted release"
    except ReleaseCheckError as exc:
        fail(f"release refused ({exc.reason_code}): {exc}")
    return release, last, note


def run_verify(args: argparse.Namespace) -> int:
    release, last, note = verify_release_dir(args.folder, args.trust_root, args.state_dir, args.at)
    if args.json:
        verified = {
            "ok": True,
            "already_accepted": note != "verified",
            "manifest": _manifest_json(release.manifest, release.manifest_hash),
            "signers": sorted(release.signer_key_ids),
            "checked_against": None if last is None else last.manifest_hash,
        }
        emit(msgspec.convert(verified, type=ReleaseVerifyJson))
    else:
        rows = _manifest_rows(release.manifest, release.manifest_hash)
        rows.append(("signed by", ", ".join(sorted(release.signer_key_ids))))
        rows.append(("checked against", last.manifest_hash if last else "- (no accepted state)"))
        rows.append(("result", note))
        table(("field", "value"), rows)
    return 0


# -- publish ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Published:
    """Where a release went and what the gates said of it."""

    manifest: ReleaseManifest
    manifest_hash: str
    to: str
    reports: dict[str, ReleaseReport]
    unverified: int = 0
    waited: bool = True
    shadow: bool = False
    """Published as the shadow: ``adopted`` then means the gate runs it."""

    def adopted_by(self) -> list[str]:
        return sorted(g for g, r in self.reports.items() if r.asked in ("adopted", "superseded"))

    def refused_by(self) -> list[tuple[str, ReportedRefusal]]:
        return sorted(
            (
                (g, r.asked_refusal)
                for g, r in self.reports.items()
                if r.asked == "refused" and r.asked_refusal is not None
            ),
            key=lambda pair: pair[0],
        )

    def json(self) -> ReleasePublishJson:
        return ReleasePublishJson(
            release_id=self.manifest.release_id,
            sequence=self.manifest.sequence,
            manifest_hash=self.manifest_hash,
            to=self.to,
            waited=self.waited,
            gates=tuple(
                PublishedToGate(
                    gate=gate,
                    outcome=report.asked or "unseen",
                    reason_code=None if (r := report.asked_refusal) is None else r.reason_code,
                    detail=None if r is None else r.detail,
                    retryable=None if r is None else r.retryable,
                    active_release_id=None if report.active is None else report.active.release_id,
                )
                for gate, report in sorted(self.reports.items())
            ),
            unverified_answers=self.unverified,
            shadow=self.shadow,
        )


def _waiting(wait_seconds: float) -> tuple[Progress, Callable[[float], None]]:
    progress = Progress("waiting for the gates (s)", max(1, round(wait_seconds)))
    return progress, lambda elapsed: progress.update(min(progress.total, int(elapsed)))


async def _publish_nats(
    url: str,
    credential: BusCredential | None,
    bundle: ReleaseBundle,
    wait_seconds: float | None,
    on_published: Callable[[], None] | None = None,
    *,
    shadow: bool = False,
) -> Published:
    """Put the bundle into the bucket (as the shadow with ``shadow``), then (unless
    ``wait_seconds`` is None) ask the gates until each that answers adopted or refused
    exactly this revision."""
    prior = prior_of(bundle)
    gate_keys = gate_keys_of(bundle)
    nc = await connect_bus(url, "smf-release", credential)
    try:
        put = publish_shadow_to_bucket if shadow else publish_to_bucket
        key, revision = await put(nc.jetstream(prefix=CLIENT_API), bundle)
        if on_published is not None:
            on_published()
        to = f"{url} SMF_RELEASES {key} (revision {revision})"
        manifest = unverified_manifest(bundle)
        if wait_seconds is None:
            return Published(manifest, prior.manifest_hash, to, {}, waited=False, shadow=shadow)
        request = ReleaseReportRequest(
            manifest_hash=prior.manifest_hash, origin=f"kv:{key}@{revision}"
        )
        progress, tick = _waiting(wait_seconds)
        try:
            answers = await wait_for_adoption(nc, request, gate_keys, wait_seconds, tick)
        finally:
            progress.close()
        return Published(
            manifest,
            prior.manifest_hash,
            to,
            answers.reports,
            answers.unverified,
            shadow=shadow,
        )
    except (NatsError, TimeoutError) as exc:
        fail(f"cannot publish to {url}: {str(exc).strip() or type(exc).__name__}")
    finally:
        await nc.drain()


async def _adopted_from_state(
    state_dir: Path, wanted: str, wait_seconds: float
) -> StoredRelease | None:
    """The state's accepted release once it is ``wanted`` (a manifest hash), or the
    last one read when ``wait_seconds`` ran out. Read-only, like ``status``."""
    loop = asyncio.get_running_loop()
    started = loop.time()
    progress, tick = _waiting(wait_seconds)
    try:
        while True:
            stored = await _load_state(state_dir)
            elapsed = loop.time() - started
            tick(elapsed)
            if stored is not None and stored.state.manifest_hash == wanted:
                return stored
            if elapsed >= wait_seconds:
                return stored
            await asyncio.sleep(0.2)
    finally:
        progress.close()


def gate_would_refuse(folder: Path, state_dir: Path) -> None:
    """``publish --state-dir`` never says "published" for a release the gate of
    that state would refuse (``release_chain_broken``, which the gate tells only
    its log). The inbox is that gate's, so its trust root and accepted release are here to
    check against first, with the checks the gate makes (``verify_release_dir``);
    a refusal is reported and nothing is written. Adoption is then waited for
    in the state's accepted release (:func:`_adopted_from_state`)."""
    state = StateDir(state_dir)
    if not state.trust_root.exists():
        return
    try:
        verify_release_dir(folder, state.trust_root, state_dir, None)
    except CommandError as exc:
        fail(f"not published: the gate of {state_dir} would refuse it: {exc}")


def _publish_to_state(
    bundle: ReleaseBundle,
    state_dir: Path,
    wait_seconds: float | None,
    on_published: Callable[[], None] | None = None,
) -> Published:
    prior = prior_of(bundle)
    path = publish_to_inbox(bundle, StateDir(state_dir).release_inbox)
    if on_published is not None:
        on_published()
    manifest = unverified_manifest(bundle)
    if wait_seconds is None:
        return Published(manifest, prior.manifest_hash, str(path), {}, waited=False)
    stored = asyncio.run(_adopted_from_state(state_dir, prior.manifest_hash, wait_seconds))
    reports: dict[str, ReleaseReport] = {}
    if stored is not None and stored.state.manifest_hash == prior.manifest_hash:
        reports[f"the gate of {state_dir}"] = _state_adoption(stored)
    return Published(manifest, prior.manifest_hash, str(path), reports)


def _state_adoption(stored: StoredRelease) -> ReleaseReport:
    """A state directory's accepted release, in the words of a gate's report: the
    gate writes it only after every check passed
    (``smf_assurance.pipeline.stores.release_state``)."""
    s = stored.state
    return ReleaseReport(
        schema=RELEASE_REPORT_SCHEMA,
        gate="state",
        at_ms=s.accepted_at_ms,
        active=ReportedRelease(
            release_id=s.release_id,
            sequence=s.sequence,
            manifest_hash=s.manifest_hash,
            lease_expires_at_ms=s.lease_expires_at_ms,
        ),
        in_force=True,
        refusals=(),
        asked="adopted",
    )


def published_line(done: Published) -> str:
    what = " as the shadow" if done.shadow else ""
    return (
        f"published {done.manifest.release_id} (sequence {done.manifest.sequence}){what} "
        f"to {done.to}"
    )


def adoption_problem(done: Published, wait_seconds: float) -> str | None:
    """Why a publication is not a success, in one line, or None: every gate that
    answered adopted it (or the gates were not asked, ``--no-wait``).

    A command that asks something of the gate waits for the gate's answer and
    reports it: publish -> adopted, or refused with the reason."""
    if not done.waited:
        return None
    head = published_line(done)
    ignored = (
        f"; {done.unverified} answer(s) not signed by a gate key of its registry ignored"
        if done.unverified
        else ""
    )
    refused = done.refused_by()
    if refused:
        gate, refusal = refused[0]
        again = (
            "; it is tried again when the gate's release state moves" if refusal.retryable else ""
        )
        more = f" (and {len(refused) - 1} other gate(s))" if len(refused) > 1 else ""
        return (
            f"{head}, but gate {gate}{more} refused it ({refusal.reason_code}): "
            f"{refusal.detail}{again}"
        )
    adopted = done.adopted_by()
    if not adopted:
        waiting = sorted(f"{g}: {r.asked}" for g, r in done.reports.items())
        heard = f" (heard: {', '.join(waiting)})" if waiting else ""
        return (
            f"{head}, but no gate reported adopting it within {wait_seconds:g} s{heard}{ignored}: "
            "is a gate running there? (--no-wait publishes without asking)"
        )
    if len(adopted) < len(done.reports):
        late = sorted(set(done.reports) - set(adopted))
        return f"{head}; adopted by {', '.join(adopted)} but not yet by {', '.join(late)}{ignored}"
    return None


def adoption_line(done: Published) -> str:
    """What a successful publication says: who adopted it, or that nobody was asked."""
    head = published_line(done)
    if not done.waited:
        return f"{head}; adoption not checked (--no-wait)"
    ignored = (
        f"; {done.unverified} answer(s) not signed by a gate key of its registry ignored"
        if done.unverified
        else ""
    )
    verb = "running beside the active release at" if done.shadow else "adopted by"
    return f"{head}; {verb} {', '.join(done.adopted_by())}{ignored}"


def _say_published(args: argparse.Namespace, done: Published) -> int:
    """Report the gates' answers; exit 1 unless every gate that answered adopted it."""
    if args.json:
        emit(done.json())
    problem = adoption_problem(done, args.wait)
    if problem is not None:
        fail(problem)
    if not args.json:
        say(adoption_line(done))
    return 0


def publish_bundle(
    bundle: ReleaseBundle,
    *,
    nats: str | None,
    state_dir: Path | None,
    credential: BusCredential | None,
    wait_seconds: float | None,
    on_published: Callable[[], None] | None = None,
) -> Published:
    """Publish exactly as ``release publish`` does: to the ``SMF_RELEASES`` bucket on
    ``nats``, else into ``state_dir``'s inbox; then (unless ``wait_seconds`` is None)
    wait for the gates' signed word. ``on_published`` is called the moment the
    release has left (the bucket value created, the inbox file written): what fails
    after it fails with the release out. Raises :class:`ReleaseError` when the
    release could not be published."""
    if nats is not None:
        return asyncio.run(_publish_nats(nats, credential, bundle, wait_seconds, on_published))
    assert state_dir is not None
    return _publish_to_state(bundle, state_dir, wait_seconds, on_published)


def run_publish(args: argparse.Namespace) -> int:
    if args.shadow and args.state_dir is not None:
        fail(
            "--shadow publishes to the SMF_RELEASES bucket, which every gate watches: "
            "use --nats URL (a state directory's inbox holds releases to adopt)",
            2,
        )
    bundle = _read_dir(args.folder)
    if args.state_dir is not None:
        gate_would_refuse(args.folder, args.state_dir)
    if args.trust_root:
        try:
            ReleaseTrust(load_trust_root(args.trust_root)).verify_update(
                encode_bundle(bundle), TrustedTime(wall_clock_ms())
            )
        except ReleaseError as exc:
            fail(f"not published: release refused (trust_root): {exc}")
        except ReleaseCheckError as exc:
            fail(f"not published: release refused ({exc.reason_code}): {exc}")
    wait = None if args.no_wait else args.wait
    credential = credential_for(args.credential, None, PUBLISHER) if args.nats else None
    if args.shadow:
        done = asyncio.run(_publish_nats(args.nats, credential, bundle, wait, shadow=True))
        return _say_published(args, done)
    try:
        done = publish_bundle(
            bundle,
            nats=args.nats,
            state_dir=args.state_dir,
            credential=credential,
            wait_seconds=wait,
        )
    except ReleaseError as exc:
        fail(f"not published: {exc}")
    return _say_published(args, done)


# -- withdraw-shadow ----------------------------------------------------


@dataclass(frozen=True, slots=True)
class Withdrawn:
    withdrawn: bool
    release_id: str | None
    reports: dict[str, ReleaseReport]
    unverified: int
    waited: bool

    def still_running(self) -> list[str]:
        return sorted(
            g for g, r in self.reports.items() if not isinstance(r.shadow, msgspec.UnsetType)
        )

    def json(self) -> ReleaseWithdrawShadowJson:
        return ReleaseWithdrawShadowJson(
            withdrawn=self.withdrawn,
            release_id=self.release_id,
            waited=self.waited,
            gates=tuple(
                WithdrawnAtGateJson(
                    gate=gate,
                    shadow_release_id=None
                    if isinstance(r.shadow, msgspec.UnsetType)
                    else r.shadow.release_id,
                )
                for gate, r in sorted(self.reports.items())
            ),
            unverified_answers=self.unverified,
        )


async def _withdraw_nats(
    url: str, credential: BusCredential | None, wait_seconds: float | None
) -> Withdrawn:
    """Delete the shadow key, then ask every gate until none runs a shadow. A report
    counts only when a gate key of a release in the bucket (or of the shadow) signed it."""
    nc = await connect_bus(url, "smf-release", credential)
    try:
        js = nc.jetstream(prefix=CLIENT_API)
        held = await bucket_shadow(js)
        keys: dict[str, VerifyKey] = {} if held is None else dict(held.gate_keys)
        for entry in await bucket_entries(js):
            keys.update(entry.gate_keys)
        withdrawn = await withdraw_shadow_from_bucket(js)
        release_id = None if held is None or held.manifest is None else held.manifest.release_id
        if wait_seconds is None or not withdrawn:  # nothing written: nothing to wait for
            return Withdrawn(withdrawn, release_id, {}, 0, waited=False)
        loop = asyncio.get_running_loop()
        started = loop.time()
        progress, tick = _waiting(wait_seconds)
        try:
            while True:
                answers = await ask_gates(nc, ReleaseReportRequest(), keys)
                elapsed = loop.time() - started
                tick(elapsed)
                done = Withdrawn(withdrawn, release_id, answers.reports, answers.unverified, True)
                if (answers.reports and not done.still_running()) or elapsed >= wait_seconds:
                    return done
                await asyncio.sleep(0.1)
        finally:
            progress.close()
    except (NatsError, TimeoutError) as exc:
        fail(f"cannot withdraw at {url}: {str(exc).strip() or type(exc).__name__}")
    finally:
        await nc.drain()


def run_withdraw_shadow(args: argparse.Namespace) -> int:
    """``release withdraw-shadow``: every gate stops its shadow (docs/RELEASES.md)."""
    credential = credential_for(args.credential, None, PUBLISHER)
    wait = None if args.no_wait else args.wait
    done = asyncio.run(_withdraw_nats(args.nats, credential, wait))
    if args.json:
        emit(done.json())
    head = (
        f"withdrew the shadow {done.release_id or ''}".rstrip()
        if done.withdrawn
        else "the bucket holds no shadow"
    )
    running = done.still_running()
    if done.waited and running:
        fail(f"{head}, but gate {', '.join(running)} still runs one after {args.wait:g} s")
    if done.waited and not done.reports:
        fail(
            f"{head}, but no gate reported within {args.wait:g} s: is a gate running there? "
            "(--no-wait withdraws without asking)"
        )
    if not args.json:
        if not done.withdrawn:
            tail = ": nothing to withdraw"
        elif not done.waited:
            tail = "; the gates were not asked (--no-wait)"
        else:
            tail = f"; no shadow runs at {', '.join(sorted(done.reports))}"
        say(head + tail)
    return 0


# -- status -----------------------------------------------------------------------


STATUS_WINDOW_SECONDS = 1.0
"""How long ``status --nats`` listens for the gates' reports."""


async def _bucket_and_gates(
    url: str, credential: BusCredential | None
) -> tuple[list[dict[str, Any]], GateAnswers]:
    """What the bucket holds, and what every gate on the bus says it did with it
    (the gates' refusals included, never hidden). A report counts only when a
    gate key named by a registry in the bucket signed it."""
    nc = await connect_bus(url, "smf-release", credential)
    try:
        entries = await bucket_entries(nc.jetstream(prefix=CLIENT_API))
        shadow = await bucket_shadow(nc.jetstream(prefix=CLIENT_API))
        if shadow is not None:
            entries.append(shadow)
        keys: dict[str, VerifyKey] = {}
        for entry in entries:
            keys.update(entry.gate_keys)
        answers = await ask_gates(nc, ReleaseReportRequest(), keys, STATUS_WINDOW_SECONDS)
    except (NatsError, TimeoutError) as exc:
        fail(f"cannot read the release bucket at {url}: {str(exc).strip() or type(exc).__name__}")
    finally:
        await nc.drain()
    rows = [
        {
            "key": e.key,
            "revision": e.revision,
            "bytes": e.size,
            "release_id": e.manifest.release_id if e.manifest else None,
            "sequence": e.manifest.sequence if e.manifest else None,
            "lease_expires_at_ms": e.manifest.lease_expires_at_ms if e.manifest else None,
        }
        for e in entries
    ]
    return rows, answers


def _gate_shadow_json(report: ReleaseReport) -> GateShadowJson | None:
    shadow = report.shadow
    if isinstance(shadow, msgspec.UnsetType):
        return None
    counts = report.shadow_counts
    return GateShadowJson(
        release_id=shadow.release_id,
        sequence=shadow.sequence,
        manifest_hash=shadow.manifest_hash,
        lease_expires_at_ms=shadow.lease_expires_at_ms,
        counts=None
        if isinstance(counts, msgspec.UnsetType)
        else msgspec.convert(msgspec.to_builtins(counts), ShadowCountsJson),
    )


def _gate_json(report: ReleaseReport) -> GateReleaseJson:
    active = report.active
    return GateReleaseJson(
        gate=report.gate,
        active_release_id=None if active is None else active.release_id,
        sequence=None if active is None else active.sequence,
        manifest_hash=None if active is None else active.manifest_hash,
        lease_expires_at_ms=None if active is None else active.lease_expires_at_ms,
        in_force=report.in_force,
        refusals=tuple(
            msgspec.convert(msgspec.to_builtins(r), RefusalJson) for r in report.refusals
        ),
        shadow=_gate_shadow_json(report),
    )


def _say_bucket_status(rows: list[dict[str, Any]], answers: GateAnswers) -> None:
    table(
        ("key", "rev", "release", "seq", "lease expires", "bytes"),
        [
            (
                r["key"],
                r["revision"],
                r["release_id"],
                r["sequence"],
                None if r["lease_expires_at_ms"] is None else instant(r["lease_expires_at_ms"]),
                r["bytes"],
            )
            for r in rows
        ],
    )
    say("(as published, not verified: gates verify each release before use)")
    if not answers.reports:
        say(f"no gate answered within {STATUS_WINDOW_SECONDS:g} s")
    for gate, report in sorted(answers.reports.items()):
        active = report.active
        using = "no release" if active is None else f"{active.release_id} (seq {active.sequence})"
        force = "in force" if report.in_force else "NOT in force: it denies everything"
        say(f"gate {gate}: {using}, {force}; {len(report.refusals)} recent refusal(s)")
        if not isinstance(report.shadow, msgspec.UnsetType):
            c = report.shadow_counts
            counted = (
                ""
                if isinstance(c, msgspec.UnsetType)
                else f": {c.evaluated} evaluated, {c.disagreed} would differ, {c.recorded} "
                f"recorded, {c.dropped} dropped, {c.unrecorded} unrecorded, {c.skipped} "
                f"skipped, {c.failed} failed"
            )
            say(
                f"  shadow {report.shadow.release_id} (seq {report.shadow.sequence}) runs "
                f"beside it{counted}"
            )
        for refusal in report.refusals[-5:]:
            say(f"  refused {refusal.origin} ({refusal.reason_code}) at {instant(refusal.at_ms)}")
    if answers.unverified:
        say(f"{answers.unverified} answer(s) not signed by a gate key of the bucket's registries")


def run_status(args: argparse.Namespace) -> int:
    if args.nats:
        credential = credential_for(args.credential, None, PUBLISHER)
        rows, answers = asyncio.run(_bucket_and_gates(args.nats, credential))
        if args.json:
            emit(
                ReleaseStatusJson(
                    source="bus",
                    bucket=tuple(msgspec.convert(row, BucketRow) for row in rows),
                    gates=tuple(_gate_json(r) for _, r in sorted(answers.reports.items())),
                    unverified_answers=answers.unverified,
                    accepted=None,
                    inbox_newest=None,
                )
            )
        else:
            _say_bucket_status(rows, answers)
        return 0
    state = StateDir(args.state_dir)
    stored = asyncio.run(_load_state(args.state_dir))
    kept = read_shadow_state(state.release_state) if state.release_state.exists() else None
    try:
        latest = latest_in_inbox(state.release_inbox)
    except ReleaseError as exc:
        fail(str(exc))
    inbox = unverified_manifest(latest) if latest is not None else None
    now = wall_clock_ms()
    if stored is None:
        accepted: dict[str, Any] | None = None
    else:
        s = stored.state
        accepted = {
            "release_id": s.release_id,
            "sequence": s.sequence,
            "manifest_hash": s.manifest_hash,
            "accepted_at_ms": s.accepted_at_ms,
            "lease_expires_at_ms": s.lease_expires_at_ms,
            "lease_in_force": now < s.lease_expires_at_ms,
            "revoked_key_ids": sorted(s.revoked_key_ids),
            "revoked_release_ids": sorted(s.revoked_release_ids),
        }
    newest = None if inbox is None else {"release_id": inbox.release_id, "sequence": inbox.sequence}
    if args.json:
        emit(
            ReleaseStatusJson(
                source="state",
                bucket=None,
                gates=None,
                unverified_answers=None,
                accepted=None if accepted is None else msgspec.convert(accepted, AcceptedJson),
                inbox_newest=None if newest is None else msgspec.convert(newest, InboxNewestJson),
                shadow=None if kept is None else _stored_shadow_json(kept),
            )
        )
        return 0
    if accepted is None:
        say("no release accepted yet in this state directory")
    else:
        shown = {k: instant(v) if k.endswith("_at_ms") else v for k, v in accepted.items()}
        table(
            ("field", "value"),
            [(k.removesuffix("_at_ms").replace("_", " "), v) for k, v in shown.items()],
        )
    if newest is not None:
        say(f"newest in inbox: {newest['release_id']} (sequence {newest['sequence']})")
    if kept is not None:
        say(
            f"shadow kept: {kept.release_id} (sequence {kept.sequence}), loaded "
            f"{instant(kept.loaded_at_ms)} from {kept.origin} (verified again at every start)"
        )
    return 0


def _stored_shadow_json(kept: StoredShadow) -> StoredShadowJson:
    return StoredShadowJson(
        release_id=kept.release_id,
        sequence=kept.sequence,
        manifest_hash=kept.manifest_hash,
        beside_manifest_hash=kept.beside_manifest_hash,
        origin=kept.origin,
        loaded_at_ms=kept.loaded_at_ms,
    )


# -- trust root -------------------------------------------------------------------


def run_trust_root(args: argparse.Namespace) -> int:
    try:
        records = [read_public_record(path) for path in args.key]
        root = make_trust_root(records, args.threshold)
        write_trust_root(args.out, root)
    except ReleaseError as exc:
        fail(f"trust root not written: {exc}")
    if args.json:
        emit(msgspec.convert(msgspec.to_builtins(root), type=TrustRootJson))
    else:
        table(
            ("key id", "principal"),
            [(record.key_id, record.principal) for record in root.keys],
        )
        say(f"threshold {root.threshold} of {len(root.keys)}; written to {args.out}")
    return 0
