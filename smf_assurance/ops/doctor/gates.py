"""``doctor``'s checks of what the gates and connectors hold (issue 21).

- **runtime**: every gate's signed ``smf.gate.status``: each runtime of the
  registry, whether it must attest, its last attestation and its age, and why
  the gate would refuse it now;
- **confinement**: each runtime as its gate holds it: confined (its launcher's fresh
  attestation names the runtime's attested process) with the profile digest, or
  plainly "not confined" and why;
- **connector**: each registry connector's durable consumer on ``SMF_EXECUTE``,
  bound when a pull request of the connector is waiting on it;
- **ledger**: each gate's newest checkpoint on ``SMF_LEDGER_CHECKPOINTS``,
  verified with the gate keys, against the gate's ledger tail from its status.

An answer counts only when a gate key of the registry signed it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Final

import msgspec
from nats.aio.client import Client
from nats.errors import Error as NatsError
from nats.js.errors import NotFoundError

from smf_assurance.ops.doctor.checks import (
    BOUND_INTERVAL_S,
    BOUND_SAMPLES,
    CONNECT_TIMEOUT_S,
    Check,
    Settings,
    gather,
    say_age,
)
from smf_assurance.pipeline.stores.ledger_schema import (
    CHECKPOINT_PAYLOAD_TYPE,
    parse_checkpoint_payload,
)
from smf_assurance.pipeline.stores.streams import gate_stream_configs
from smf_assurance.subjects import dsse, names
from smf_assurance.subjects.bus_access import connector_durable
from smf_assurance.subjects.gate_status import (
    GateStatus,
    GateStatusRequest,
    RuntimeStanding,
    open_gate_status,
)
from smf_assurance.subjects.keys import VerifyKey

# --- runtimes ------------------------------------------------------------------------------


async def statuses(
    nc: Client, gate_keys: Mapping[str, VerifyKey], window: float
) -> dict[str, GateStatus]:
    found: dict[str, GateStatus] = {}
    request = msgspec.json.encode(GateStatusRequest())
    for data in await gather(nc, names.GATE_STATUS, request, window):
        try:
            status = open_gate_status(data, gate_keys)
        except (dsse.SignatureError, msgspec.DecodeError):
            continue  # not a gate's word
        found[status.gate] = status
    return found


_WHY: Final = {
    "runtime_attestation_missing": (
        "never attested since the gate started",
        "start the runtime with its snippet (`runtime add` wrote it) and check its adapter's "
        "log: it refuses to run when its configuration is wrong",
    ),
    "runtime_attestation_stale": (
        "its last attestation is older than its lease",
        "the runtime stopped attesting: is it running, and does it reach the bus?",
    ),
    "runtime_attestation_rejected": (
        "its last attestation was refused",
        "fix what the reason codes name (version, hooks, streaming, release) and restart it",
    ),
    "runtime_release_mismatch": (
        "it attested another release than the gate's",
        "it re-attests on its own; if not, check that it reads the release bucket",
    ),
}


def runtime_check(status: GateStatus, standing: RuntimeStanding, subject: str, now: int) -> Check:
    age = None if standing.attested_at_ms is None else max(0, now - standing.attested_at_ms)
    seen = (
        "no attestation"
        if age is None
        else f"last attestation {say_age(age)} ago, "
        + ("accepted" if standing.accepted else f"refused ({', '.join(standing.reason_codes)})")
    )
    if not standing.must_attest:
        return Check(
            "runtime",
            subject,
            "skip",
            f"not required to attest at gate {status.gate} ({seen}): its proposals are "
            "admitted without, as the scripted demo runtime's",
            None,
            age,
        )
    if standing.standing is None:
        lease = say_age(standing.lease_ms)
        return Check("runtime", subject, "ok", f"{seen} (lease {lease})", None, age)
    said, fix = _WHY.get(
        standing.standing,
        (f"stopped ({standing.standing})", "see `model-gateway clear` once the cause is found"),
    )
    detail = f"{said} ({standing.standing}); {seen}"
    return Check("runtime", subject, "fail", detail, fix, age)


_NOT_CONFINED: Final = {
    "confinement_not_attested": "no launcher attested it since the gate started",
    "confinement_stale": "its launcher's last attestation is older than its lease",
    "confinement_ended": "its launcher said the sandbox ended",
    "confined_process_not_attested": (
        "its attested process is not one its launcher started (another process attested)"
    ),
}


def confinement_check(standing: RuntimeStanding, subject: str) -> Check:
    """Confined with its profile digest, or "not confined" and why (a warning: a release
    that requires confinement denies its opaque operations, ``runtime_not_confined``)."""
    if standing.confined_profile is not None:
        return Check(
            "confinement",
            subject,
            "ok",
            f"confined: profile {standing.confined_profile}",
        )
    reason = standing.confinement or "confinement_not_attested"
    said = _NOT_CONFINED.get(reason, reason)
    return Check(
        "confinement",
        subject,
        "warn",
        f"not confined: {said} ({reason})",
        f"run it with `smf-assurance runtime run --id {standing.runtime_id} -- COMMAND`",
    )


def runtimes(settings: Settings, statuses: Mapping[str, GateStatus]) -> list[Check]:
    if not statuses:
        return [
            Check(
                "runtime",
                None,
                "fail",
                f"no gate answered {names.GATE_STATUS} within {settings.window:g} s",
                "start the gate (`smf-assurance up`), or check the registry's gate keys",
            )
        ]
    roster = sorted(
        {
            p.entry.runtime_id
            for p in settings.registry.principals.values()
            if p.entry.role == "runtime" and p.entry.runtime_id is not None
        }
    )
    checks: list[Check] = []
    now = settings.clock()
    several = len(statuses) > 1
    for gate, status in sorted(statuses.items()):
        known = {s.runtime_id: s for s in status.runtimes}
        for runtime_id in sorted(set(roster) | set(known)):
            subject = f"{runtime_id}@{gate}" if several else runtime_id
            standing = known.get(runtime_id)
            if standing is None:
                checks.append(
                    Check(
                        "runtime",
                        subject,
                        "fail",
                        f"in the registry here, not in gate {gate}'s: the gate runs on a "
                        "release without it",
                        "publish the release that names it (`runtime add` does)",
                    )
                )
                continue
            checks.append(runtime_check(status, standing, subject, now))
            checks.append(confinement_check(standing, subject))
        if status.runtimes_truncated:
            checks.append(
                Check(
                    "runtime",
                    gate,
                    "warn",
                    "the gate reported only part of its runtimes",
                    "check the rest at the gate's log",
                )
            )
    return checks


# --- streams ---------------------------------------------------------------------------------


async def streams(nc: Client) -> list[Check]:
    """Each stream of the gate exists and refuses message deletion and purge
    (``pipeline.stages.streams``: a gate refuses to start on one gone or made again)."""
    js = nc.jetstream(timeout=CONNECT_TIMEOUT_S)
    checks = []
    for config in gate_stream_configs():
        name = config.name or ""
        try:
            info = await js.stream_info(name)
        except NotFoundError:
            checks.append(
                Check(
                    "stream",
                    name,
                    "fail",
                    f"{name} is gone: what it kept is lost, and a gate that made it "
                    "refuses to start",
                    "find who deleted it; restore it from a backup, or remove the gate's "
                    "stream record (ledger.streams.json) to start on a new one",
                )
            )
            continue
        except (NatsError, TimeoutError) as exc:
            checks.append(
                Check("stream", name, "fail", f"cannot read {name}: {type(exc).__name__}")
            )
            continue
        open_to = [
            what
            for what, refused in (
                ("deleting messages", info.config.deny_delete),
                ("purging", info.config.deny_purge),
            )
            if not refused
        ]
        if open_to:
            checks.append(
                Check(
                    "stream",
                    name,
                    "fail",
                    f"{name} allows {' and '.join(open_to)}",
                    "restart the gate: it sets deny_delete and deny_purge on its streams",
                )
            )
        else:
            checks.append(
                Check(
                    "stream",
                    name,
                    "ok",
                    f"{info.state.messages} message(s); deleting and purging refused",
                )
            )
    return checks


# --- connectors ------------------------------------------------------------------------------


async def connectors(settings: Settings, nc: Client) -> list[Check]:
    ids = sorted(
        p.entry.connector_id
        for p in settings.registry.principals.values()
        if p.entry.role == "connector" and p.entry.connector_id is not None
    )
    if not ids:
        return [Check("connector", None, "skip", "the registry names no connector")]
    js = nc.jetstream(timeout=CONNECT_TIMEOUT_S)
    waiting = {c: 0 for c in ids}
    pending: dict[str, int] = {}
    missing: dict[str, str] = {}
    for n in range(BOUND_SAMPLES):
        for connector in ids:
            if connector in missing:
                continue
            try:
                info = await js.consumer_info(names.EXECUTE_STREAM, connector_durable(connector))
            except NotFoundError:
                missing[connector] = "no consumer"
                continue
            except (NatsError, TimeoutError) as exc:
                missing[connector] = type(exc).__name__
                continue
            waiting[connector] = max(waiting[connector], info.num_waiting or 0)
            pending[connector] = (info.num_pending or 0) + (info.num_ack_pending or 0)
        if all(waiting[c] or c in missing for c in ids):
            break
        if n + 1 < BOUND_SAMPLES:
            await asyncio.sleep(BOUND_INTERVAL_S)
    checks = []
    for connector in ids:
        durable = connector_durable(connector)
        if connector in missing:
            checks.append(
                Check(
                    "connector",
                    connector,
                    "fail",
                    f"no durable {durable} on {names.EXECUTE_STREAM} ({missing[connector]}): "
                    "the gate makes it when it starts on a release naming the connector",
                    "start the gate (`smf-assurance up`) on a release that names the connector",
                )
            )
        elif waiting[connector]:
            checks.append(
                Check(
                    "connector",
                    connector,
                    "ok",
                    f"bound: {durable} has a pull waiting; {pending[connector]} order(s) "
                    "not yet done",
                )
            )
        else:
            checks.append(
                Check(
                    "connector",
                    connector,
                    "fail",
                    f"not bound: no pull waiting on {durable} for "
                    f"{BOUND_SAMPLES * BOUND_INTERVAL_S:g} s; {pending[connector]} order(s) "
                    "waiting for it",
                    "start the connector (`smf-assurance up`, or `up --connectors-only`)",
                )
            )
    return checks


# --- ledger ----------------------------------------------------------------------------------


def _checkpoint(data: bytes, gate_keys: Mapping[str, VerifyKey]) -> tuple[str, int, int] | None:
    """(ledger id, seq, at) of a checkpoint a gate key signed, or None."""
    try:
        envelope = dsse.decode_envelope(data)
        verified = dsse.verify(envelope, gate_keys, expected_payload_type=CHECKPOINT_PAYLOAD_TYPE)
        claim = parse_checkpoint_payload(verified.payload)
    except (dsse.SignatureError, ValueError):
        return None
    return claim.ledger_id, claim.seq, claim.at


async def ledgers(
    settings: Settings,
    nc: Client,
    gate_keys: Mapping[str, VerifyKey],
    statuses: Mapping[str, GateStatus],
) -> list[Check]:
    if not statuses:
        return [
            Check(
                "ledger",
                None,
                "skip",
                f"not checked: no gate answered {names.GATE_STATUS} with its ledger's tail",
                "start the gate",
            )
        ]
    js = nc.jetstream(timeout=CONNECT_TIMEOUT_S)
    checks = []
    for gate, status in sorted(statuses.items()):
        try:
            raw = await js.get_last_msg(names.CHECKPOINT_STREAM, names.checkpoint_subject(gate))
        except NotFoundError:
            raw = None
        except (NatsError, TimeoutError) as exc:
            checks.append(
                Check(
                    "ledger",
                    gate,
                    "fail",
                    f"cannot read {names.CHECKPOINT_STREAM}: {type(exc).__name__}",
                    "check the bus",
                )
            )
            continue
        found = None if raw is None else _checkpoint(raw.data or b"", gate_keys)
        checks.append(ledger_check(settings, gate, status, raw is not None, found))
    return checks


_FIX_SINK: Final = "check the gate's log (ledger.checkpoint_publish_failed) and the stream"


def ledger_check(
    settings: Settings,
    gate: str,
    status: GateStatus,
    published: bool,
    found: tuple[str, int, int] | None,
) -> Check:
    """The gate's ledger against its newest checkpoint on the bus (``found``: ledger id,
    seq, at, verified with the gate keys; None when there is none or it does not
    verify, ``published`` telling which)."""
    ledger = status.ledger
    now = settings.clock()
    if ledger.pending_checkpoints:
        detail = (
            f"{ledger.pending_checkpoints} checkpoint(s) signed but not on the bus: "
            "truncation of the newest entries is not detectable"
        )
        return Check("ledger", gate, "fail", detail, _FIX_SINK)
    if ledger.tail_seq == 0:
        return Check("ledger", gate, "ok", "the ledger is empty: nothing to anchor")
    if published and found is None:
        detail = "the newest checkpoint on the bus is not signed by a gate key of the registry"
        return Check("ledger", gate, "fail", detail, "find who publishes on the checkpoint subject")
    on_bus = 0
    age = None
    if found is not None:
        ledger_id, on_bus, at = found
        age = max(0, now - at)
        if ledger_id != ledger.ledger_id or on_bus > ledger.tail_seq:
            detail = (
                f"the newest checkpoint (seq {on_bus}) is not of this ledger as it stands "
                f"(tail {ledger.tail_seq}): a replaced or truncated ledger file"
            )
            fix = "run `smf-assurance ledger verify --nats` on the gate's ledger"
            return Check("ledger", gate, "fail", detail, fix, age)
    if on_bus < ledger.checkpoint_seq:
        detail = (
            f"the gate signed a checkpoint up to seq {ledger.checkpoint_seq}, the stream "
            f"holds {'none' if on_bus == 0 else f'seq {on_bus} at most'}: it did not keep it"
        )
        return Check("ledger", gate, "fail", detail, _FIX_SINK, age)
    after = ledger.tail_seq - on_bus
    if after == 0:
        detail = f"anchored: the checkpoint of {say_age(age or 0)} ago covers every entry"
        return Check("ledger", gate, "ok", f"{detail} (seq {on_bus})", None, age)
    waiting = None if ledger.window_start_ms is None else max(0, now - ledger.window_start_ms)
    limit = settings.checkpoint_age_ms
    said = f"{after} entries after the newest checkpoint (seq {on_bus})"
    if waiting is None or waiting <= limit:
        detail = f"{said}, waiting {say_age(waiting or 0)}, within {limit // 1000} s"
        return Check("ledger", gate, "ok", detail, None, waiting)
    detail = (
        f"{said}, waiting {say_age(waiting)}, more than {limit // 1000} s: until the next "
        "checkpoint their truncation is not detectable"
    )
    fix = "the gate signs one at its next entry past its window, and at a clean stop"
    return Check("ledger", gate, "warn", detail, fix, waiting)
