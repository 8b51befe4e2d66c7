"""``doctor``: is a running deployment wired right, seen from the operator's seat?

Each check asks the running pieces over the bus with the operator's own
credential, and only what the operator role may ask (docs/BUS-PERMISSIONS.md):

- **bus**: a connection as that principal, and JetStream answering;
- **release**: every gate's signed ``smf.release.report`` (in force, and the
  lease not ending within the warning threshold); then, with a trust root, the
  release each gate runs on, found in the state directory or the bucket and
  verified here (signature threshold, digests, lease, content);
- **service**: each of the gate's ``nats.micro`` services answering
  ``$SRV.PING.<name>`` (asked by name: to a bare ``$SRV.PING``, which reaches
  every service of the gate's one connection at once, a bus with authorization
  refuses the gate's replies as publish violations; docs/EVIDENCE.md);
- **runtime**: every gate's signed ``smf.gate.status``: each runtime of the
  registry, whether it must attest, its last attestation and its age, and why
  the gate would refuse it now;
- **connector**: each registry connector's durable consumer on ``SMF_EXECUTE``,
  bound when a pull request of the connector is waiting on it;
- **ledger**: each gate's newest checkpoint on ``SMF_LEDGER_CHECKPOINTS``,
  verified with the gate keys, against the gate's ledger tail from its status;
- **console**: the approvers' console's ``GET /healthz``, when one is named: ``ok``
  only on its 200, a failure naming its reason code on its 503;
- **files**: the state folder's modes (``smf_assurance.ops.doctor.files``): a file
  or folder anyone but its owner may read or enter is a failure naming it;
- **directory**: the tenant directory the console reads, checked here as the
  console checks it when it starts (which refuses a malformed file): a failure
  naming the file and key, and a warning for each tenant of the roster it names
  nothing for (its approvers read raw ids); asked of the files, not the bus.

Every check says ``ok``, ``warn``, ``fail`` or ``skip``; a check that could not
look (the bus is down, nothing was named) is ``skip`` with the reason, never
``ok``. An answer counts only when a gate key of the registry signed it.
Nothing here writes, and nothing here prints: ``smf_assurance.ops.cli.commands.doctor`` does.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Final

import aiohttp
import msgspec
import nats
from nats.aio.client import Client
from nats.errors import Error as NatsError
from nats.errors import NoServersError

from smf_assurance.approver.console.server import Health, HealthReason
from smf_assurance.approver.directory import DirectoryError, load_directory
from smf_assurance.core.release_trust import ReleaseTrust, TrustedTime
from smf_assurance.governance.releases import ReleaseError, ask_gates, prior_of, read_bundle_file
from smf_assurance.ops.cli.output import CommandError, first_line
from smf_assurance.ops.doctor import gates as doctor_gates
from smf_assurance.ops.doctor.checks import (
    CONNECT_TIMEOUT_S,
    HOUR_MS,
    Check,
    Settings,
    gather,
    say_age,
)
from smf_assurance.ops.doctor.files import file_checks
from smf_assurance.ops.doctor.kinds import DEFAULT_CHECKPOINT_AGE_S, DEFAULT_LEASE_WARN_HOURS, Kind
from smf_assurance.ops.local.bus import BusRefusals, tls_trouble
from smf_assurance.ops.local.cluster import nats_servers
from smf_assurance.pipeline.stores.release_state import read_release_state
from smf_assurance.pipeline.stores.sqlite_worker import StoreUnavailable
from smf_assurance.subjects import names
from smf_assurance.subjects.bus_access import (
    CredentialFileError,
    bus_error_reason,
    bus_tls,
    connect_options,
    read_credential,
)
from smf_assurance.subjects.release import (
    RELEASE_BUCKET,
    ReleaseCheckError,
    ReleaseReport,
    ReleaseReportRequest,
    encode_bundle,
    release_key,
)

__all__ = [
    "DEFAULT_CHECKPOINT_AGE_S",
    "DEFAULT_LEASE_WARN_HOURS",
    "GATE_SERVICES",
    "HOUR_MS",
    "RELEASE_SERVICE",
    "STEPS",
    "Check",
    "Settings",
    "failed",
    "run",
]

GATE_SERVICES: Final = (
    "smf-gate",
    "smf-stages",
    "smf-approvals",
    "smf-attest",
    "smf-gateway-admit",
    "smf-gateway-calls",
    "smf-gate-status",
)
"""The ``nats.micro`` services every gate runs (``smf_assurance.pipeline.assembly.gate``)."""
RELEASE_SERVICE: Final = "smf-release-report"
"""Served only by a gate that runs on verified releases."""
STEPS: Final = 7
"""How many groups of checks :func:`run` reports progress for."""


async def run(settings: Settings, progress: Callable[[int], None] = lambda _: None) -> list[Check]:
    """Every check, in order; ``progress`` is told how many groups are done."""
    checks: list[Check] = []
    nc, bus = await _connect(settings)
    checks.append(bus)
    progress(1)
    if nc is None:
        skipped: tuple[Kind, ...] = ("release", "service", "runtime", "connector", "ledger")
        for kind in skipped:
            checks.append(Check(kind, None, "skip", "not checked: the bus is unreachable"))
        checks.append(await _console(settings))
        checks += directory_checks(settings)
        checks += file_checks(settings)
        progress(STEPS)
        return checks
    try:
        gate_keys = settings.registry.trusted("gate")
        reports = await ask_gates(nc, ReleaseReportRequest(), gate_keys, settings.window)
        checks += _releases(settings, reports.reports, reports.unverified)
        progress(2)
        checks += await _verified(settings, nc, reports.reports)
        progress(3)
        checks += await _services(settings, nc)
        progress(4)
        statuses = await doctor_gates.statuses(nc, gate_keys, settings.window)
        checks += doctor_gates.runtimes(settings, statuses)
        progress(5)
        checks += await doctor_gates.streams(nc)
        checks += await doctor_gates.connectors(settings, nc)
        progress(6)
        checks += await doctor_gates.ledgers(settings, nc, gate_keys, statuses)
    finally:
        with contextlib.suppress(NatsError, OSError, TimeoutError):
            await nc.close()
    checks.append(await _console(settings))
    checks += directory_checks(settings)
    checks += file_checks(settings)
    progress(STEPS)
    return checks


# --- bus --------------------------------------------------------------------------------


async def _connect(settings: Settings) -> tuple[Client | None, Check]:
    who = settings.credential.principal if settings.credential else "anonymous"
    fix = (
        "start the server or check --nats; connect as the operator (--credential "
        "STATE/keys/operator.nkey)"
    )

    refusals = BusRefusals(settings.credential)
    if settings.credential is not None:
        try:
            read_credential(settings.credential.principal, settings.credential.seed_file)
        except CredentialFileError as exc:
            detail = f"bus credential of principal {who}: {exc.detail}"
            return None, Check("bus", settings.url, "fail", detail, fix)
    try:
        options = connect_options(settings.credential)
    except CredentialFileError as exc:
        return None, Check("bus", settings.url, "fail", exc.detail, "give the bus's CA file")
    try:
        nc = await nats.connect(
            nats_servers(settings.url),
            name="smf-doctor",
            allow_reconnect=False,
            max_reconnect_attempts=1,
            reconnect_time_wait=0.1,
            connect_timeout=CONNECT_TIMEOUT_S,
            error_cb=refusals.on_error,
            **options,
        )
        refusals.client = nc
    except (OSError, NatsError, ValueError) as exc:
        detail = f"cannot connect to NATS at {settings.url} as {who}: {_why(exc)}"
        return None, Check("bus", settings.url, "fail", detail, fix)
    try:
        info = await nc.jetstream(timeout=CONNECT_TIMEOUT_S).account_info()
    except CommandError as exc:
        await nc.close()
        return None, Check("bus", settings.url, "fail", f"connected as {who}, but {exc}", fix)
    except (NatsError, TimeoutError) as exc:
        await nc.close()
        detail = f"connected as {who}, but JetStream does not answer it ({bus_error_reason(exc)})"
        advice = (
            f"connect as the operator (--credential STATE/keys/operator.nkey): {who} may "
            "not use JetStream; if the operator gets this too, enable JetStream on the server"
        )
        return None, Check("bus", settings.url, "fail", detail, advice)
    detail = f"connected as {who}; JetStream answers ({info.streams} streams)"
    return nc, Check("bus", settings.url, "ok", detail)


def _why(exc: BaseException) -> str:
    """A refused connection in our words (nats-py's messages are not ours to print)."""
    trouble = tls_trouble(exc)
    if trouble is not None:
        return trouble
    text = str(exc).lower()
    if "authorization violation" in text:
        return (
            "the bus refused this credential (Authorization Violation): it does not know the nkey"
        )
    if isinstance(exc, (NoServersError, ConnectionRefusedError)):
        return "nothing answers there"
    return type(exc).__name__


# --- release ------------------------------------------------------------------------------


def _releases(
    settings: Settings, reports: Mapping[str, ReleaseReport], unverified: int
) -> list[Check]:
    if not reports:
        extra = f"; {unverified} answer(s) no gate key signed" if unverified else ""
        return [
            Check(
                "release",
                None,
                "fail",
                f"no gate answered {names.RELEASE_REPORT} within {settings.window:g} s{extra}",
                "start the gate (`smf-assurance up`), or check the registry's gate keys",
            )
        ]
    now = settings.clock()
    threshold = settings.lease_warn_ms
    checks = []
    for gate, report in sorted(reports.items()):
        active = report.active
        if active is None:
            checks.append(
                Check(
                    "release",
                    gate,
                    "fail",
                    "no verified release: the gate denies everything (no_verified_release)",
                    "publish a release its trust root verifies (`release publish`)",
                )
            )
            continue
        left = active.lease_expires_at_ms - now
        named = f"{active.release_id} (sequence {active.sequence})"
        if not report.in_force:
            checks.append(
                Check(
                    "release",
                    gate,
                    "fail",
                    f"{named} is not in force: its lease ended {say_age(-left)} ago "
                    "(release_expired); the gate denies everything",
                    "publish a new release (renewing a lease is publishing a new release; "
                    "`runtime add` and `approver add` also do)",
                    remaining_ms=left,
                )
            )
        elif left < threshold:
            checks.append(
                Check(
                    "release",
                    gate,
                    "warn",
                    f"{named} in force; its lease ends in {say_age(left)}, under the "
                    f"{threshold // HOUR_MS} h threshold",
                    "publish a new release before the lease ends",
                    remaining_ms=left,
                )
            )
        else:
            checks.append(
                Check(
                    "release",
                    gate,
                    "ok",
                    f"{named} in force; its lease ends in {say_age(left)}",
                    remaining_ms=left,
                )
            )
    return checks


async def _bundle_bytes(
    settings: Settings, nc: Client, report: ReleaseReport
) -> tuple[bytes | None, str]:
    """The active release's bytes, from the state directory (its accepted release, its
    inbox) or the bucket; found by manifest hash, so nothing else is taken for it."""
    active = report.active
    assert active is not None
    state = settings.state
    if state is not None:
        stored = None
        with contextlib.suppress(StoreUnavailable):
            if state.release_state.exists():
                stored = read_release_state(state.release_state)
        if stored is not None and stored.state.manifest_hash == active.manifest_hash:
            return stored.bundle, "the state's accepted release"
        for path in sorted(state.release_inbox.glob(f"{release_key(active.sequence)}-*.json")):
            with contextlib.suppress(ReleaseError):
                bundle = read_bundle_file(path)
                if prior_of(bundle).manifest_hash == active.manifest_hash:
                    return encode_bundle(bundle), f"inbox {path.name}"
    try:
        kv = await nc.jetstream(timeout=CONNECT_TIMEOUT_S).key_value(RELEASE_BUCKET)
        entry = await kv.get(release_key(active.sequence))
    except (NatsError, TimeoutError):
        return None, ""
    return entry.value, f"bucket {RELEASE_BUCKET} {release_key(active.sequence)}"


async def _verified(
    settings: Settings, nc: Client, reports: Mapping[str, ReleaseReport]
) -> list[Check]:
    """Each active release, verified here against the trust root: what the gate says it
    runs on is checked, not believed."""
    if settings.trust_root is None:
        return [
            Check(
                "release",
                "verified",
                "skip",
                "not verified here: no trust root (the state has none; pass --trust-root)",
                "pass --trust-root FILE",
            )
        ]
    checks: list[Check] = []
    done: set[str] = set()
    for report in reports.values():
        active = report.active
        if active is None or active.manifest_hash in done:
            continue
        done.add(active.manifest_hash)
        subject = f"{active.release_id} verified"
        data, where = await _bundle_bytes(settings, nc, report)
        if data is None:
            checks.append(
                Check(
                    "release",
                    subject,
                    "skip",
                    "not verified here: its bundle is neither in the state directory nor in "
                    f"the {RELEASE_BUCKET} bucket",
                    "pass the gate's --state-dir, or publish it to the bucket",
                )
            )
            continue
        try:
            release = ReleaseTrust(settings.trust_root).verify_update(
                data, TrustedTime(settings.clock())
            )
        except ReleaseCheckError as exc:
            checks.append(
                Check(
                    "release",
                    subject,
                    "fail",
                    f"{where} does not verify ({exc.reason_code}): {exc}",
                    "publish a release the trust root verifies",
                )
            )
            continue
        if release.manifest_hash != active.manifest_hash:
            checks.append(
                Check(
                    "release",
                    subject,
                    "fail",
                    f"{where} is another release than the gate reports",
                    "check the bucket and the state directory",
                )
            )
            continue
        checks.append(
            Check(
                "release",
                subject,
                "ok",
                f"{where}: signed by {len(release.signer_key_ids)} trust-root key(s), digests "
                "and content match",
            )
        )
    return checks


# --- services -------------------------------------------------------------------------------


async def _services(settings: Settings, nc: Client) -> list[Check]:
    expected = list(GATE_SERVICES)
    if settings.trust_root is not None:
        expected.append(RELEASE_SERVICE)
    window = settings.window / 2
    answers = await asyncio.gather(
        *(gather(nc, f"$SRV.PING.{name}", b"", window) for name in expected)
    )
    checks = []
    for name, replies in zip(expected, answers, strict=True):
        ids = set()
        for data in replies:
            with contextlib.suppress(ValueError, TypeError):
                value = json.loads(data)
                if value.get("name") == name and value.get("id"):
                    ids.add(value["id"])
        if ids:
            checks.append(Check("service", name, "ok", f"{len(ids)} instance(s) answer $SRV.PING"))
        else:
            checks.append(
                Check(
                    "service",
                    name,
                    "fail",
                    f"no instance answered $SRV.PING.{name} within {window:g} s",
                    "start the gate (`smf-assurance up`) and check its log",
                )
            )
    return checks


# --- console ----------------------------------------------------------------------------------


HEALTH_BODY_LIMIT: Final = 4096
"""More than any ``/healthz`` answer of the console; a longer one is not a console's."""

HEALTH_FIXES: Final[Mapping[HealthReason, str]] = {
    "bus_disconnected": "the console lost the bus: check NATS and the console's credential",
    "board_not_fed": "the console's list is stale: check its log and the approvals stream",
    "gate_not_answering": "no gate answers the console: start the gate (`smf-assurance up`)",
}


def _health(body: bytes) -> Health | None:
    try:
        return msgspec.json.decode(body, type=Health)
    except msgspec.DecodeError:  # ValidationError is one
        return None


async def _console(settings: Settings) -> Check:
    """The console's ``GET /healthz``: a page that answers is not enough,
    the console must say it can show what is held now.

    Fail closed: ``ok`` only on a 200 whose body is the console's health saying
    ``ok``; a 503 fails naming its reason code; any other answer (a redirect, a
    404 from something that is not the console, a body that is not its health)
    fails too."""
    url = settings.console
    if url is None:
        return Check("console", None, "skip", "no console named (--console URL)")
    try:
        # an HTTPS console's certificate is the deployment CA's, the bus's (SMF_NATS_CA)
        trust = bus_tls().get("tls", True)
        timeout = aiohttp.ClientTimeout(total=CONNECT_TIMEOUT_S)
        async with (
            aiohttp.ClientSession(timeout=timeout) as session,
            session.get(f"{url.rstrip('/')}/healthz", allow_redirects=False, ssl=trust) as response,
        ):
            status = response.status
            body = await response.content.read(HEALTH_BODY_LIMIT + 1)
    except aiohttp.ClientConnectorCertificateError:
        return Check(
            "console",
            url,
            "fail",
            "its certificate does not verify against the CA trusted (SMF_NATS_CA, "
            "else the system's)",
            "give the CA that issued the console's certificate as SMF_NATS_CA",
        )
    except (aiohttp.ClientError, TimeoutError, ValueError, CredentialFileError) as exc:
        return Check(
            "console",
            url,
            "fail",
            f"does not answer: {type(exc).__name__}",
            "start it (`smf-assurance console`) or check the URL",
        )
    health = _health(body) if len(body) <= HEALTH_BODY_LIMIT else None
    if status == 200 and health is not None and health.ok:
        return Check("console", url, "ok", "/healthz answers 200: it shows what is held now")
    if status == 503 and health is not None and health.reason is not None:
        detail = f"/healthz answers 503: {health.reason}"
        return Check("console", url, "fail", detail, HEALTH_FIXES[health.reason])
    return Check(
        "console",
        url,
        "fail",
        f"/healthz answers HTTP {status} without the console's health",
        "check the URL: it must be the smf-assurance console's",
    )


# --- tenant directory -------------------------------------------------------------------


def directory_checks(settings: Settings) -> list[Check]:
    """The tenant directory as the console will read it (display names from a tenant
    directory the operator maintains).

    ``fail`` when the console would refuse to start on it (the loader's one line
    names the file and key); ``skip`` when none is kept, since approvers then read
    raw ids by design; ``ok`` naming the tenants it holds, and a ``warn`` for each
    tenant of the roster it holds no file for."""
    folder = settings.directory
    if folder is None or not folder.exists():
        where = "no tenant directory" if folder is None else f"no tenant directory at {folder}"
        return [Check("directory", None, "skip", f"{where}: approvers read raw ids")]
    try:
        directory = load_directory(folder)
    except DirectoryError as exc:
        fix = "correct the file: the console refuses to start on it"
        return [Check("directory", str(folder), "fail", first_line(exc), fix)]
    held = sorted(directory.tenants)
    checks = [
        Check(
            "directory",
            str(folder),
            "ok",
            f"{len(held)} tenant file(s): {', '.join(held)}" if held else "no tenant file",
        )
    ]
    roster = sorted({t for p in settings.registry.principals.values() for t in p.entry.tenants})
    for tenant in roster:
        if tenant not in directory.tenants:
            checks.append(
                Check(
                    "directory",
                    tenant,
                    "warn",
                    f"no {tenant}.toml: its approvers read raw court, matter and recipient ids",
                    f"add {folder / (tenant + '.toml')} (docs/CONSOLE.md, the tenant directory)",
                )
            )
    return checks


def failed(checks: Sequence[Check]) -> list[Check]:
    return [c for c in checks if c.status == "fail"]
