"""structlog setup for the command line and the services.

Services write JSON lines so that a log collector parses them without
guessing; a person at a terminal gets the readable console renderer. Both go
to stderr so that a command's own output on stdout stays machine-readable.
Modules only call ``structlog.get_logger(__name__)``; this is the one place
that decides how events are rendered.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

import structlog
from structlog.typing import Processor


def _stderr_logger(*_args: Any) -> structlog.PrintLogger:
    """Look ``sys.stderr`` up per logger, so redirection after setup still applies."""
    return structlog.PrintLogger(sys.stderr)


def configure_logging(json: bool, level: str = "info") -> None:
    """Render events as JSON lines (``json=True``) or for a console, from ``level`` up.

    Raises ``ValueError`` for a level name the ``logging`` module does not know.
    """
    levels = logging.getLevelNamesMapping()
    if level.upper() not in levels:
        raise ValueError(f"unknown log level: {level!r}")
    processors: list[Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    if json:
        processors += [structlog.processors.dict_tracebacks, structlog.processors.JSONRenderer()]
    else:
        processors.append(structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty()))
    structlog.configure(
        processors=processors,
        wrapper_class=structlog.make_filtering_bound_logger(levels[level.upper()]),
        logger_factory=_stderr_logger,
        cache_logger_on_first_use=False,
    )
