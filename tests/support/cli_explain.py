"""The fixtures, builders and constants of tests/cli/test_cli_explain.py
that other test modules use too: here, so that no test module imports another."""

from __future__ import annotations

import pytest

from smf_assurance.ops.cli.main import main

__all__ = ["run"]


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """``main`` in-process: exit status (argparse's too), stdout, stderr; what the
    test's own setup logged before is dropped."""
    capsys.readouterr()
    try:
        code = main(argv)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    out, err = capsys.readouterr()
    return code, out, err
