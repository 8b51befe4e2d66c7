"""The command line's one error boundary.

The command line under a careless user: whatever a command meets,
the user sees one line on stderr, ``smf-assurance: <what happened; what to
do>``, and an exit status (1 for a failure, 2 for a usage error as argparse
gives, 130/143 for SIGINT/SIGTERM, 141 for a reader that went away), never a
traceback (``--debug`` re-raises instead). The rules it keeps:

- A signal ends a command through its ``finally`` blocks: SIGTERM is turned
  into what SIGINT does (inside ``asyncio.run`` the runner cancels the main
  task; outside it ``KeyboardInterrupt``), so temporary folders holding keys
  are removed and child servers are stopped, whichever signal came.
- A broken pipe (``| head``) ends quietly: stdout is pointed at devnull, as
  the Python documentation advises for SIGPIPE, so the interpreter's own
  flush at exit cannot raise again.
- An unexpected failure names the file it concerns and what to do about it,
  never a payload: a message is the exception's first line, and only for the
  kinds below, whose messages carry paths and SQLite's fixed phrases.
"""

from __future__ import annotations

import errno
import functools
import os
import signal
import sqlite3
import sys
from collections.abc import Iterator
from types import FrameType
from typing import Final

EXIT_FAILURE: Final = 1
EXIT_SIGINT: Final = 128 + signal.SIGINT
EXIT_SIGTERM: Final = 128 + signal.SIGTERM
EXIT_SIGPIPE: Final = 128 + signal.SIGPIPE

PROG: Final = "smf-assurance"
NAMESPACE: Final = "smf_assurance"
"""Every package of ours lives under it."""
BUS_CLIENT: Final = "nats"
"""nats-py's package: a failure chained from one of its errors is an outage of the
bus (a store's ``...Unavailable`` wraps it), not a bug of ours."""


def one_line(message: str, prog: str = PROG) -> None:
    """The boundary's only output: one line on stderr, named by the command line that
    prints it (``smf-assurance``, or the team's ``python -m smf_tools``)."""
    text = " ".join(message.split())
    try:
        sys.stderr.write(f"{prog}: {text}\n")
        sys.stderr.flush()
    except (OSError, ValueError, AttributeError):
        pass


def exit_early(signum: int, _frame: FrameType | None, prog: str = PROG) -> None:
    """Before ``main`` runs (the imports), nothing exists to clean up: end at once.

    So SIGINT in the first quarter second of ``up`` (still inside the imports)
    ends with one line, never a KeyboardInterrupt traceback from an import.
    """
    one_line("interrupted before start-up finished; nothing was started", prog)
    os._exit(128 + signum)


def install_early_handlers(prog: str = PROG) -> None:
    """A signal the parent told us to ignore (``nohup``, a background job's
    SIGINT) stays ignored."""
    for sig in (signal.SIGINT, signal.SIGTERM):
        if signal.getsignal(sig) is not signal.SIG_IGN:
            signal.signal(sig, functools.partial(exit_early, prog=prog))


class Signals:
    """Which stop signal arrived, and SIGTERM delivered the way SIGINT is.

    SIGINT keeps Python's own handler: ``asyncio.run`` replaces only that one
    with its runner's, which cancels the main task so its ``finally`` blocks
    run, instead of raising at whatever line the loop was on.
    """

    def __init__(self, prog: str = PROG) -> None:
        self.received: int | None = None
        self.prog = prog

    def install(self) -> None:
        if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
            signal.signal(signal.SIGINT, signal.default_int_handler)
        if signal.getsignal(signal.SIGTERM) is not signal.SIG_IGN:
            signal.signal(signal.SIGTERM, self._on_term)

    def _on_term(self, _signum: int, frame: FrameType | None) -> None:
        """Hand SIGTERM to whatever handles SIGINT now (asyncio's runner
        inside a loop, else Python's, which raises KeyboardInterrupt)."""
        self.received = self.received or signal.SIGTERM
        handler = signal.getsignal(signal.SIGINT)
        if callable(handler):
            handler(signal.SIGINT, frame)
        else:
            raise KeyboardInterrupt

    def stopped(self) -> int:
        """One line and the status of the signal that stopped the command."""
        if self.received == signal.SIGTERM:
            one_line("terminated (SIGTERM); stopped cleanly", self.prog)
            return EXIT_SIGTERM
        one_line("interrupted (SIGINT); stopped cleanly", self.prog)
        return EXIT_SIGINT


def quiet_broken_pipe() -> int:
    """The reader of stdout went away: say nothing more, exit as SIGPIPE would."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass
    return EXIT_SIGPIPE


def ensure_stdout() -> None:
    """A closed stdout (``>&-``) leaves ``sys.stdout`` None: what a command
    prints then goes nowhere, as with a reader that went away; its exit status
    still tells the outcome."""
    if sys.stdout is None:
        sys.stdout = open(os.devnull, "w", encoding="utf-8")  # noqa: SIM115 - lives as long as the process


def exception_chain(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and each exception it was raised from or during, once each."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _os_error(exc: OSError) -> str:
    where = f" {exc.filename}" if exc.filename else ""
    reason = exc.strerror or type(exc).__name__
    if exc.errno == errno.EROFS:
        return (
            f"cannot write{where}: {reason}; use a state dir on a writable disk (--state-dir DIR)"
        )
    if isinstance(exc, PermissionError):
        return (
            f"cannot use{where}: {reason}; use a state dir you may write "
            "(--state-dir DIR) or fix the file's permissions"
        )
    return f"cannot use{where}: {reason}; check the path and that the disk has room"


def _sqlite_error(outer: BaseException, exc: sqlite3.Error) -> str:
    said = _first_line(outer)
    text = str(exc).lower()
    if "not a database" in text or "malformed" in text:
        return (
            f"{said}; the file is damaged: restore it from a backup, or move it "
            "aside to start a new one (what it held is then gone)"
        )
    if "readonly" in text or "read-only" in text or "unable to open" in text:
        return f"{said}; the folder must be writable: use a state dir you may write"
    if "locked" in text or "busy" in text:
        return f"{said}; another process holds the file: stop it or wait"
    return f"{said}; check the file, or restore it from a backup"


def describe(exc: BaseException) -> str:
    """What an exception that escaped a command tells the user, as one line.

    The SQLite cause is looked for along the chain (stores wrap it in their own
    ``...Unavailable`` whose message names the file); an OS error names its
    file; a failure of the bus client along the chain says the bus did not answer
    (a replica that starts while JetStream settles waits a bounded time, then ends
    here); anything else is its type and a pointer to ``--debug``, with its
    first line only when it is one of ours (our messages never carry secrets
    or payloads, a library's may echo its input).
    """
    from smf_assurance.pipeline.stores.state_check import (  # noqa: PLC0415 - imported only on a failure: it opens SQLite, --help need not
        StateRefused,
    )

    for link in exception_chain(exc):
        if isinstance(link, StateRefused):  # names its file, reason and what to do
            return f"the gate will not start: {link}"
    for link in exception_chain(exc):
        if isinstance(link, sqlite3.Error):
            return _sqlite_error(exc, link)
    for link in exception_chain(exc):
        if isinstance(link, OSError) and link.errno is not None:
            return _os_error(link)
    said = type(exc).__name__
    if type(exc).__module__.split(".")[0] == NAMESPACE:
        said = f"{said}: {_first_line(exc)}"
    for link in exception_chain(exc):
        if type(link).__module__.split(".")[0] == BUS_CLIENT:
            return (
                f"{said}; the bus did not answer in time ({type(link).__name__}): check that "
                "nats-server is running with JetStream (a cluster may still be electing "
                "its leaders), then start again"
            )
    return f"{said}; run again with --debug to see where, and report it if it is a bug"
