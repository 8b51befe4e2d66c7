"""``doctor``: check a running deployment from the operator's seat.

Connects as the operator (the state's ``keys/operator.nkey``, or
``--credential``) and asks what the operator role may ask: the gates' signed
release reports and status, ``$SRV.PING`` of the gate's services, the
connectors' consumers, the checkpoint stream, and the console's ``/healthz``
(``smf_assurance.ops.doctor.run`` says what each check looks at). Prints a table (check, status,
what was found, what to fix) or ``--json``; exits 1 when any check failed,
with one line on stderr naming the first failure. A check that could not look
says ``skip`` and why, never ``ok``.
"""

from __future__ import annotations

import argparse
import asyncio
import sys

from smf_assurance.governance.releases import ReleaseError, load_trust_root
from smf_assurance.ops.cli.cli_json import DoctorCheckJson, DoctorJson
from smf_assurance.ops.cli.output import Progress, emit, fail, say, table
from smf_assurance.ops.doctor.run import (
    HOUR_MS,
    STEPS,
    Check,
    Settings,
    failed,
    run,
)
from smf_assurance.ops.local.bus import bus_url, credential_for
from smf_assurance.ops.local.defaults import OPERATOR, default_state_dir
from smf_assurance.ops.local.logs import configure_logging
from smf_assurance.ops.local.state import StateDir
from smf_assurance.subjects.clock import wall_clock_ms
from smf_assurance.subjects.registry import RegistryError, load_registry


def _name(check: Check) -> str:
    return check.kind if check.subject is None else f"{check.kind} {check.subject}"


def _json(check: Check) -> DoctorCheckJson:
    return DoctorCheckJson(
        kind=check.kind,
        subject=check.subject,
        status=check.status,
        detail=check.detail,
        fix=check.fix,
        age_ms=check.age_ms,
        remaining_ms=check.remaining_ms,
    )


def _settings(args: argparse.Namespace) -> Settings:
    state = StateDir(args.state_dir or default_state_dir())
    try:
        registry = load_registry(state.registry)
    except RegistryError as exc:
        fail(f"{exc}: doctor needs the deployment's registry (pass --state-dir)")
    root_path = args.trust_root or (state.trust_root if state.trust_root.exists() else None)
    try:
        root = load_trust_root(root_path) if root_path is not None else None
    except ReleaseError as exc:
        fail(f"--trust-root: {exc}")
    return Settings(
        url=bus_url(args.nats, state.root),
        credential=credential_for(args.credential, state.root, OPERATOR),
        registry=registry,
        trust_root=root,
        state=state,
        console=args.console,
        directory=args.directory or state.directory,
        clock=wall_clock_ms,
        lease_warn_ms=args.lease_warn_hours * HOUR_MS,
        checkpoint_age_ms=args.checkpoint_age * 1000,
    )


def run_doctor(args: argparse.Namespace) -> int:
    # Logs on stderr, quiet: stdout is the table or one JSON object.
    configure_logging(json=not sys.stderr.isatty(), level="error")
    settings = _settings(args)
    progress = Progress("doctor: checks", STEPS)
    try:
        checks = asyncio.run(run(settings, progress.update))
    finally:
        progress.close()
    bad = failed(checks)
    warned = [c for c in checks if c.status == "warn"]
    if args.json:
        emit(
            DoctorJson(
                ok=not bad,
                nats_url=settings.url,
                checks=tuple(_json(c) for c in checks),
                failed=len(bad),
                warned=len(warned),
                lease_warn_hours=args.lease_warn_hours,
                checkpoint_age_s=args.checkpoint_age,
            )
        )
    else:
        table(
            ("check", "status", "found", "fix"),
            [(_name(c), c.status, c.detail, c.fix) for c in checks],
        )
        skipped = sum(1 for c in checks if c.status == "skip")
        say(
            f"{len(checks)} checks on {settings.url}: {len(bad)} failed, {len(warned)} warned, "
            f"{skipped} not checked"
        )
    if bad:
        first = bad[0]
        more = f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""
        fail(f"doctor: {_name(first)}: {first.detail}{more}")
    return 0
