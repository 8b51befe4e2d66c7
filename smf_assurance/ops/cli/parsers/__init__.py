"""The command line's parsers, apart from what the commands do.

Building a command's parser (for ``--help``, a usage error, ``completion``) imports
only these modules, which name every handler by its module and function:
``Handler`` imports the command's module when the command runs. What a command
does pulls in the bus client, the web server and the stores; what it accepts
needs none of them, so every ``--help`` answers without them
(``tests/cli/test_cli_startup.py``).
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from smf_assurance.ops.local.defaults import NKEY_SUFFIX

COMMANDS_PACKAGE: Final = "smf_assurance.ops.cli.commands"
DEFAULT_ADOPTION_WAIT_SECONDS: Final = 15.0
"""How long a command that publishes a release waits for the gates' word by default
(``release publish``, and every group that signs one: ``parsers/onboard.py``); longer
than a gate's inbox rescan (``release_tick_seconds``, 5 s by default)."""


@dataclass(frozen=True, slots=True)
class Handler:
    """The function ``function`` of ``smf_assurance.ops.cli.commands.<group>``, imported
    only when the command runs: a parser holds this rather than the function, so building
    it does not import the command's module. Two parsers built apart name the same
    handler equally (a command built alone parses as in the whole line)."""

    group: str
    function: str

    def load(self) -> Callable[[argparse.Namespace], int]:
        module = importlib.import_module(f"{COMMANDS_PACKAGE}.{self.group}")
        found: Callable[[argparse.Namespace], int] = getattr(module, self.function)
        return found

    def __call__(self, args: argparse.Namespace) -> int:
        return self.load()(args)


def add_bus_location(parser: argparse.ArgumentParser) -> None:
    """``--nats URL`` or ``--state-dir DIR`` (one of them; neither: the default state
    directory), read by ``smf_assurance.ops.local.bus.bus_url``: a command beside a
    running ``up`` finds its bus from the ``nats.url`` that ``up`` wrote."""
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--nats", metavar="URL", help="NATS server of the gate")
    where.add_argument(
        "--state-dir", type=Path, help="find the bus from the nats.url a running `up` wrote here"
    )


def add_credential_argument(parser: argparse.ArgumentParser, default_principal: str) -> None:
    """``--credential FILE``: who the command is on the bus."""
    parser.add_argument(
        "--credential",
        type=Path,
        metavar="FILE",
        help=f"the bus credential to connect with, a <principal>{NKEY_SUFFIX} seed file "
        f"(default: the state directory's {default_principal}{NKEY_SUFFIX}, when it has one)",
    )


def add_https_arguments(parser: argparse.ArgumentParser) -> None:
    """``--tls-cert FILE --tls-key FILE``: serve HTTPS (``ops.local.tls.serving_tls``);
    without them, plain HTTP on a loopback address only."""
    parser.add_argument(
        "--tls-cert",
        type=Path,
        metavar="FILE",
        help="serve HTTPS with this certificate (PEM; smf-assurance tls issue makes one); "
        "required to listen beyond loopback",
    )
    parser.add_argument(
        "--tls-key", type=Path, metavar="FILE", help="the certificate's private key (PEM)"
    )
