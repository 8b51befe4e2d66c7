"""The command line starts without importing what it does not run, and its error
boundary holds while the parser is built.

How fast it starts is measured (``python -m smf_tools bench --cli``, figures in
docs/PERFORMANCE.md), never timed here: these tests hold the mechanism the figures
rest on, which modules a fresh process has imported after ``--help``, and what a
signal or a failure while the parser is built prints.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import textwrap
import types
from pathlib import Path
from typing import get_args

import pytest

from smf_assurance.governance.projections import SCENARIO_ENVELOPES, package_path
from smf_assurance.ops.cli import main as cli
from smf_assurance.ops.cli.main import COMMANDS, build_parser, main
from smf_assurance.ops.cli.parsers import Handler
from smf_tools import cli as tools_cli

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("nats", "aiohttp", "aiosqlite", "structlog", "nkeys")
"""The bus client and its keys, the web server, the stores and the logging: what the command
modules pull in, and what ``--help`` has no use for."""
COMMAND_MODULES = "smf_assurance.ops.cli.commands."
PARSER_MODULES = "smf_assurance.ops.cli.parsers."
CLI_JSON = "smf_assurance.ops.cli.cli_json"
"""The ``--json`` schema: every command's module imports it, no parser needs it."""
TOP_LEVEL = [name for group in COMMANDS for name, _ in group.commands]
COMMANDS_BY_NAME = {
    name: group.module.rsplit(".", 1)[1] for group in COMMANDS for name, _ in group.commands
}


def imported_after(argv: list[str]) -> list[str]:
    """The modules a fresh interpreter holds after running ``argv`` through ``main``."""
    script = textwrap.dedent(
        f"""
        import json, sys
        from smf_assurance.ops.cli.main import main
        try:
            main({argv!r})
        except SystemExit:
            pass
        sys.stderr.write("\\nMODULES " + json.dumps(sorted(sys.modules)) + "\\n")
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, check=True
    )
    marker = done.stderr.rsplit("MODULES ", 1)[1]
    modules: list[str] = json.loads(marker)
    return modules


def top(modules: list[str]) -> set[str]:
    return {name.split(".")[0] for name in modules}


@pytest.mark.claim("packaging.cli-lazy-commands")
@pytest.mark.parametrize("argv", [["--help"], ["--version"], ["no-such-command"]])
def test_help_and_version_import_no_command_module_and_no_bus_client(argv: list[str]) -> None:
    modules = imported_after(argv)
    assert not top(modules) & set(HEAVY), sorted(top(modules) & set(HEAVY))
    assert [m for m in modules if m.startswith(COMMAND_MODULES)] == []


@pytest.mark.claim("packaging.cli-lazy-commands")
def test_a_command_imports_its_own_group_only() -> None:
    modules = imported_after(["keys", "--help"])
    loaded = {m for m in modules if m.startswith(PARSER_MODULES)}
    # onboard: the release options every group that signs a release shares
    assert loaded == {f"{PARSER_MODULES}keys", f"{PARSER_MODULES}onboard"}


@pytest.mark.claim("packaging.cli-lazy-commands")
@pytest.mark.parametrize("command", TOP_LEVEL)
def test_a_commands_help_imports_no_command_module_and_no_bus_client(command: str) -> None:
    """``COMMAND --help`` builds the command's parsers only: what it does (the bus client,
    the web server, the stores, the ``--json`` schema) is imported when it runs."""
    modules = imported_after([command, "--help"])
    assert f"{PARSER_MODULES}{COMMANDS_BY_NAME[command]}" in modules
    assert not top(modules) & set(HEAVY), sorted(top(modules) & set(HEAVY))
    assert [m for m in modules if m.startswith(COMMAND_MODULES)] == []
    assert CLI_JSON not in modules


@pytest.mark.claim("packaging.cli-lazy-commands")
def test_completion_builds_every_parser_without_the_command_modules() -> None:
    """``completion`` reads the whole parser tree: every group's parsers are built, and
    only ``completion``'s own module runs."""
    modules = imported_after(["completion", "bash"])
    assert {f"{PARSER_MODULES}{group.module.rsplit('.', 1)[1]}" for group in COMMANDS} <= set(
        modules
    )
    assert not top(modules) & set(HEAVY), sorted(top(modules) & set(HEAVY))
    assert [m for m in modules if m.startswith(COMMAND_MODULES)] == [f"{COMMAND_MODULES}completion"]
    assert CLI_JSON not in modules


@pytest.mark.claim("packaging.cli-lazy-commands")
def test_an_offline_eval_imports_no_bus_client() -> None:
    """``eval`` decides offline: only ``--against`` verifies a release (whose module
    imports the bus client), so a plain ``eval`` runs without it."""
    envelope = package_path(SCENARIO_ENVELOPES) / "1-court-filing-approval.json"
    modules = imported_after(["eval", "--at", "2026-11-29T10:00:00Z", str(envelope)])
    assert f"{COMMAND_MODULES}decide" in modules
    assert not top(modules) & {"nats", "aiohttp"}, sorted(top(modules) & {"nats", "aiohttp"})


def handlers(parser: argparse.ArgumentParser) -> list[Handler]:
    found = [parser.get_default("func")] if parser.get_default("func") is not None else []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                found.extend(handlers(child))
    return found


def test_every_handler_a_parser_names_is_a_function_of_its_command_module() -> None:
    """A parser names its handler by module and function (``parsers.Handler``): each
    is looked up here, so a renamed handler fails this test, not a user's command."""
    named = handlers(build_parser())
    assert len(named) > len(TOP_LEVEL)
    for run in named:
        assert isinstance(run, Handler), run
        assert callable(run.load()), run


def test_runtime_offers_the_kinds_it_knows() -> None:
    """``runtime add --kind`` takes its choices from the ``Kind`` type, so its parser need
    not import the kinds' profiles (the gateway's attestation settings)."""
    from smf_assurance.ops.cli.commands.runtime import KINDS  # noqa: PLC0415 - the one value under test
    from smf_assurance.ops.runtimes.snippets import Kind  # noqa: PLC0415 - beside it

    assert sorted(KINDS) == sorted(get_args(Kind))


def summaries(parser: argparse.ArgumentParser) -> list[tuple[str, str | None]]:
    group = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return [(c.dest, c.help) for c in group._choices_actions]


@pytest.mark.claim("packaging.cli-lazy-commands")
def test_the_lazy_top_level_says_what_every_module_says() -> None:
    """The names and help lines ``COMMANDS`` keeps for the top level are the ones
    each module gives when it is built: ``--help`` reads the same either way."""
    full = build_parser()
    lazy = build_parser(argv=["--help"])
    assert summaries(lazy) == summaries(full)
    assert lazy.format_help() == full.format_help()
    declared = [pair for group in COMMANDS for pair in group.commands]
    assert declared == summaries(full)


def test_a_command_built_alone_parses_as_in_the_whole_line() -> None:
    argv = ["release", "verify", "some-folder", "--trust-root", "root.json", "--json"]
    alone = cli.parse(build_parser(argv=argv), argv)
    whole = cli.parse(build_parser(), argv)
    assert {k: v for k, v in vars(alone).items() if k != "parser"} == {
        k: v for k, v in vars(whole).items() if k != "parser"
    }


def test_completion_still_completes_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["completion", "bash"]) == 0
    script = capsys.readouterr().out
    for words in ("trust-root", "add-runtime", "checkpoints", "rerequest"):
        assert words in script


def test_version_prints_on_stdout(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stopped:
        main(["--version"])
    assert stopped.value.code == 0
    out, err = capsys.readouterr()
    assert out == f"smf-assurance {cli.package_version()}\n"
    assert err == ""


def group_raising(exc: BaseException) -> types.ModuleType:
    """A command group whose parsers cannot be built: ``add_parsers`` raises ``exc``."""
    module = types.ModuleType("broken_group")

    def add_parsers(_sub: object) -> None:
        raise exc

    module.add_parsers = add_parsers  # type: ignore[attr-defined]
    return module


@pytest.mark.claim("packaging.cli-boundary-covers-parser")
def test_an_interrupt_while_the_parser_is_built_is_one_line_and_130(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["anything"], commands=[group_raising(KeyboardInterrupt())]) == 130
    out, err = capsys.readouterr()
    assert out == ""
    assert err == "smf-assurance: interrupted (SIGINT); stopped cleanly\n"


@pytest.mark.claim("packaging.cli-boundary-covers-parser")
def test_a_failure_while_the_parser_is_built_is_one_line_and_1(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["anything"], commands=[group_raising(RuntimeError("secret payload"))]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert err.count("\n") == 1
    assert "RuntimeError" in err
    assert "secret payload" not in err


@pytest.mark.claim("packaging.cli-boundary-covers-parser")
def test_a_real_sigint_while_the_parser_is_built_prints_no_traceback() -> None:
    """A fresh process sends itself SIGINT from inside ``add_parsers`` (a known
    point, no timing): Python's handler raises there, the boundary answers."""
    script = textwrap.dedent(
        """
        import os, signal, sys, types
        from smf_assurance.ops.cli.main import main

        # as started from a terminal: a background job inherits SIGINT ignored, and the
        # boundary keeps an ignored signal ignored (install_early_handlers, Signals)
        signal.signal(signal.SIGINT, signal.default_int_handler)

        group = types.ModuleType("signalled")

        def add_parsers(sub):
            sub.add_parser("stuck", help="never finishes being built")
            os.kill(os.getpid(), signal.SIGINT)
            for _ in range(10_000_000):
                pass

        group.add_parsers = add_parsers
        sys.exit(main(["stuck"], commands=[group]))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert done.returncode == 130
    assert done.stdout == ""
    assert done.stderr == "smf-assurance: interrupted (SIGINT); stopped cleanly\n"


def test_bench_cli_times_every_command_beside_bare_python(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``bench --cli`` (figures in docs/PERFORMANCE.md): the baselines, ``--help``,
    ``--version`` and every top-level command each have their series and targets;
    what it measured is not judged here."""
    assert tools_cli.main(["bench", "--cli", "--rounds", "1", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    labels = [s["label"] for s in report["cli"]]
    commands = [name for group in COMMANDS for name, _ in group.commands]
    assert labels == [
        "python -c pass",
        'python -c "import nats"',
        "smf-assurance --help",
        "smf-assurance --version",
        *(f"{name} --help" for name in commands),
        "eval (a scenario)",
    ]
    assert all(s["count"] == 1 and s["p50_ns"] > 0 for s in report["cli"])
    measured = [t["series"] for t in report["targets"]]
    assert measured[:2] == ["smf-assurance --help", "smf-assurance --version"]
    assert measured[2].startswith("slowest command: ")
