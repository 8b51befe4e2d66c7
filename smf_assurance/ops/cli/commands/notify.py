"""``notify``: tell entitled approvers that an approval waits, until SIGINT or SIGTERM.

README "Notifications". What the command promises:

- It reads the operator's notifier file (``--config``, TOML) and every secret
  it names before anything else, and refuses to start on one it cannot use,
  in one line naming the key (exit 1), never the secret.
- It reads the approver roster (``--registry``, else the state directory's
  ``registry.json``) and refuses to start on one it cannot read.
- It finds the bus like ``console`` (``--nats``, else the URL a running ``up``
  wrote) and checks once that it answers; it connects as the ``console``
  principal by default (reads every tenant's announcements, asks states).
- It prints one readiness line once its loop runs, and flushes it.
"""

from __future__ import annotations

import argparse
import asyncio
import sqlite3
import sys
from pathlib import Path

from smf_assurance.approver.directory import Directory, DirectoryError, load_directory
from smf_assurance.approver.notify.config import (
    NotifyConfig,
    NotifyConfigError,
    load_config,
    unknown_to_roster,
)
from smf_assurance.approver.notify.service import NotifierSettings, RunningNotifier, start_notifier
from smf_assurance.ops.cli.cli_json import NotifyJson
from smf_assurance.ops.cli.output import emit, fail, first_line, say
from smf_assurance.ops.local.bus import (
    bus_url,
    connect_bus,
    credential_for,
)
from smf_assurance.ops.local.defaults import CONSOLE, default_state_dir
from smf_assurance.ops.local.logs import configure_logging
from smf_assurance.ops.local.signals import stop_on_signals
from smf_assurance.ops.local.state import StateDir
from smf_assurance.subjects.registry import RegistryError, load_registry


def _announce(settings: NotifierSettings, config_path: Path, as_json: bool) -> None:
    contacts = sum(len(t.contacts) for t in settings.config.tenants.values())
    if as_json:
        emit(
            NotifyJson(
                ready=True,
                nats_url=settings.nats_url,
                registry=str(settings.registry),
                config=str(config_path),
                record=str(settings.config.record),
                tenants=len(settings.config.tenants),
                contacts=contacts,
            )
        )
    else:
        say(
            f"notify: {len(settings.config.tenants)} tenant(s), {contacts} contact(s) "
            f"(bus {settings.nats_url}, roster {settings.registry}, "
            f"record {settings.config.record})"
        )
    sys.stdout.flush()


async def _serve(settings: NotifierSettings, config_path: Path, as_json: bool) -> None:
    with stop_on_signals() as stop:
        probe = await connect_bus(settings.nats_url, "smf-notify-probe", settings.credential)
        await probe.close()
        try:
            running: RunningNotifier = await start_notifier(settings)
        except (OSError, sqlite3.Error) as exc:
            fail(f"cannot open the record {settings.config.record}: {first_line(exc)}")
        try:
            _announce(settings, config_path, as_json)
            await stop.wait()
        finally:
            await running.close()


def read_config(path: Path) -> NotifyConfig:
    """The notifier's file, or a one-line refusal (also for ``up --notify``)."""
    try:
        return load_config(path)
    except NotifyConfigError as exc:
        fail(f"bad notifier config: {first_line(exc)}")


def check_roster(config: NotifyConfig, registry: Path) -> None:
    """Refuse to start, naming it, a tenant or approver the roster does not know
    (``unknown_to_roster``); the roster itself must be readable."""
    try:
        roster = load_registry(registry)
    except RegistryError as exc:
        fail(f"cannot read the approver roster: {first_line(exc)}")
    unknown = unknown_to_roster(config, roster)
    if unknown is not None:
        fail(f"bad notifier config: {unknown}")


def read_directory(folder: Path) -> Directory:
    """The tenant directory a notice names things by (where content is allowed); a
    malformed one stops the start in one line, as it stops the console's."""
    try:
        return load_directory(folder)
    except DirectoryError as exc:
        fail(f"bad tenant directory: {first_line(exc)}")


async def start_beside(state: StateDir, nats_url: str, config: NotifyConfig) -> RunningNotifier:
    """``up --notify``: the notifier on the gate's bus, as the state's console principal,
    reading the state's roster (``up`` checked ``config`` against it,
    :func:`check_roster`); a one-line failure if it cannot start."""
    settings = NotifierSettings(
        nats_url=nats_url,
        registry=state.registry,
        config=config,
        credential=state.existing_credential(CONSOLE),
        directory=read_directory(state.directory),
    )
    try:
        return await start_notifier(settings)
    except (OSError, sqlite3.Error) as exc:
        fail(f"cannot start the notifier: {first_line(exc)}")


def run_notify(args: argparse.Namespace) -> int:
    configure_logging(json=not sys.stderr.isatty(), level=args.log_level)
    config = read_config(args.config)
    state = StateDir(args.state_dir or default_state_dir())
    registry = args.registry or state.registry
    check_roster(config, registry)
    settings = NotifierSettings(
        nats_url=bus_url(args.nats, args.state_dir),
        credential=credential_for(args.credential, args.state_dir, CONSOLE),
        registry=registry,
        config=config,
        directory=read_directory(state.directory),
    )
    asyncio.run(_serve(settings, args.config, args.json))
    return 0
