"""``console``: serve the approvers' web console until SIGINT or SIGTERM.

docs/CONSOLE.md. What the command promises:

- It finds the bus like the ``approvals`` commands (``--nats``, else the URL a
  running ``up`` wrote into the state directory) and checks once that it
  answers, so a wrong URL is one line, not a silent hang.
- It reads the approver roster (``--registry``, else the state directory's
  ``registry.json``) and refuses to start on one it cannot read.
- It reads the tenant directory (``--directory``, else the state directory's
  ``directory/``) and refuses to start on a malformed file, in one line
  naming it.
- It serves pdf.js, to draw a filing's pages in the page, only as the pinned files
  (``--pdf-renderer``: fetched once from the npm registry by default; a named folder
  that does not hold them stops the start in one line; when fetching fails the
  page uses the browser's own PDF viewer and the log says why).
- It prints one readiness line (the page's URL) once it serves, and flushes it.
- It holds no key and asks for none: approvers load their own key file into
  the page, which signs in the browser.
- It listens on loopback unless told otherwise, and says so when told
  otherwise: the page signs with WebCrypto, which browsers allow only in a
  secure context (HTTPS, or loopback), and the session cookie must not cross
  a network in clear.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

import structlog

from smf_assurance.approver.console.renderer import RendererError, load_renderer
from smf_assurance.approver.console.server import ConsoleSettings, RunningConsole, start_console
from smf_assurance.approver.directory import DirectoryError, load_directory
from smf_assurance.ops.cli.cli_json import ConsoleJson
from smf_assurance.ops.cli.output import emit, fail, first_line, say
from smf_assurance.ops.local.bus import (
    bus_url,
    connect_bus,
    credential_for,
)
from smf_assurance.ops.local.defaults import CONSOLE, default_state_dir
from smf_assurance.ops.local.logs import configure_logging
from smf_assurance.ops.local.pdf_renderer import fetch_renderer
from smf_assurance.ops.local.signals import stop_on_signals
from smf_assurance.ops.local.state import StateDir
from smf_assurance.ops.local.tls import TlsInitError, serving_tls
from smf_assurance.subjects.registry import RegistryError, load_registry

log = structlog.get_logger(__name__)


def _announce(running: RunningConsole, settings: ConsoleSettings, as_json: bool) -> None:
    if as_json:
        emit(
            ConsoleJson(
                ready=True,
                url=running.url,
                nats_url=settings.nats_url,
                registry=str(settings.registry),
            )
        )
    else:
        say(f"console: {running.url} (bus {settings.nats_url}, roster {settings.registry})")
    sys.stdout.flush()


async def _serve(settings: ConsoleSettings, as_json: bool) -> None:
    with stop_on_signals() as stop:
        probe = await connect_bus(settings.nats_url, "smf-console-probe", settings.credential)
        await probe.close()
        try:
            running = await start_console(settings)
        except OSError as exc:
            reason = exc.strerror or first_line(exc)
            fail(f"cannot listen on {settings.host}:{settings.port}: {reason}")
        try:
            _announce(running, settings, as_json)
            await stop.wait()
        finally:
            await running.close()


def _pdf_renderer(choice: str) -> Path | None:
    """The renderer's folder: fetched (and, when it cannot be, none: the page falls back
    to the browser's own viewer, and the log says why), named (checked now: a folder
    without the pinned files stops the start), or none."""
    if choice == "off":
        return None
    if choice == "fetch":
        try:
            return fetch_renderer()
        except RendererError as exc:
            log.warning("pdf_renderer_unavailable", reason=first_line(exc))
            return None
    folder = Path(choice)
    try:
        load_renderer(folder)
    except RendererError as exc:
        fail(f"--pdf-renderer: {first_line(exc)}", 2)
    return folder


def run_console(args: argparse.Namespace) -> int:
    configure_logging(json=not sys.stderr.isatty(), level=args.log_level)
    if not 0 <= args.port <= 65535:
        fail(f"--port: {args.port} is not a TCP port", 2)
    state = StateDir(args.state_dir or default_state_dir())
    registry = args.registry or state.registry
    directory = args.directory or state.directory
    try:
        load_registry(registry)
    except RegistryError as exc:
        fail(f"cannot read the approver roster: {first_line(exc)}")
    try:
        load_directory(directory)
    except DirectoryError as exc:
        fail(f"cannot read the tenant directory: {first_line(exc)}")
    try:
        tls = serving_tls(args.tls_cert, args.tls_key, args.host)
    except TlsInitError as exc:
        fail(str(exc))
    settings = ConsoleSettings(
        pdf_renderer=_pdf_renderer(args.pdf_renderer),
        nats_url=bus_url(args.nats, args.state_dir),
        credential=credential_for(args.credential, args.state_dir, CONSOLE),
        registry=registry,
        directory=directory,
        host=args.host,
        port=args.port,
        tls=tls,
    )
    asyncio.run(_serve(settings, args.json))
    return 0
