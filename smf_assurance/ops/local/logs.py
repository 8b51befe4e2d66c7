"""structlog setup for the command line and the services.

Services write JSON lines so that a log collector parses them without
guessing; a person at a terminal gets the readable console renderer. Both go
to stderr so that a command's own output on stdout stays machine-readable.
Modules only call ``structlog.get_logger(__name__)``; this is the one place
that decides how events are rendered.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Any, Final, TextIO

import structlog
from structlog.typing import EventDict, Processor, WrappedLogger


def _stderr_logger(*_args: Any) -> structlog.PrintLogger:
    """Look ``sys.stderr`` up per logger, so redirection after setup still applies."""
    return structlog.PrintLogger(sys.stderr)


def exception_type_only(_logger: WrappedLogger, _method: str, event: EventDict) -> EventDict:
    """Replace an attached exception by its type's name.

    A traceback renderer prints frame locals (structlog's
    ``dict_tracebacks`` and rich's console tracebacks do by default), and an
    exception's message can quote the input that caused it; either can carry
    key bytes and payload into logs. What is logged of a failure is its type.
    """
    exc_info = event.pop("exc_info", None)
    exception = event.pop("exception", None)
    if exc_info is True:
        exc_info = sys.exc_info()
    if isinstance(exc_info, BaseException):
        event.setdefault("error", type(exc_info).__name__)
    elif isinstance(exc_info, tuple) and exc_info and exc_info[0] is not None:
        event.setdefault("error", exc_info[0].__name__)
    elif exception is not None:
        event.setdefault("error", "exception")
    return event


def colour_wanted(stream: TextIO) -> bool:
    """Colour only on a terminal, and never when ``NO_COLOR`` is set to anything
    but the empty string (https://no-color.org)."""
    return stream.isatty() and not os.environ.get("NO_COLOR")


TLS_EOF_NOTE: Final = "returning true from eof_received() has no effect when using ssl"


def _not_tls_eof_note(record: logging.LogRecord) -> bool:
    """asyncio warns this each time a TLS connection of the bus client ends with the
    server's EOF (nats-py's protocol keeps the transport half open, which TLS cannot):
    nothing is wrong, and on a command line it would print a second, misleading line."""
    return record.getMessage() != TLS_EOF_NOTE


def configure_logging(json: bool, level: str = "info") -> None:
    """Render events as JSON lines (``json=True``) or for a console, from ``level`` up.

    No traceback, frame or exception message is ever rendered
    (``exception_type_only``). Raises ``ValueError`` for a level name the
    ``logging`` module does not know.
    """
    levels = logging.getLevelNamesMapping()
    if level.upper() not in levels:
        raise ValueError(f"unknown log level: {level!r}")
    processors: list[Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        exception_type_only,
    ]
    if json:
        processors.append(structlog.processors.JSONRenderer())
    else:
        processors.append(structlog.dev.ConsoleRenderer(colors=colour_wanted(sys.stderr)))
    logging.getLogger("asyncio").addFilter(_not_tls_eof_note)
    structlog.configure(
        processors=processors,
        wrapper_class=structlog.make_filtering_bound_logger(levels[level.upper()]),
        logger_factory=_stderr_logger,
        cache_logger_on_first_use=False,
    )
