"""The README's quick start, run literally.

The README promises "a quick start in the README: from `make demo` to one real
Hermes turn and one real OpenClaw turn governed by the gate on this machine",
and for "a test that executes the quick start's commands literally (parsed out
of the README ...) in fresh temp dirs and completes one governed Hermes turn
and one governed OpenClaw turn, offline". This is that test.

How the README is read: every fenced block whose info string is
``sh quickstart`` is one step, in the README's order; its text is run as it
stands, except for the one line the README tells the reader to choose,
``GATEWAY_PORT=8787`` (a free port), which gets a port reserved now
(:func:`smf_assurance.ops.local.natsserver.reserve_port`). Nothing else is added to or taken from
a block. The steps run in one bash (``set -eu -o pipefail``, so a README
command that fails ends the run and fails this module, naming the step),
started from the checkout's root, as a reader's shell is. ``HOME`` and
``TMPDIR`` are fresh folders of this run (the README's ``mktemp -d`` lands in
it); ``XDG_CACHE_HOME`` is the cache where the pinned runtimes are installed,
so the README's installers reuse them. When the machine allows it the shell
runs inside ``unshare -n`` with loopback only (as the runtime conformance
tests do): the quick start then completes offline, and no port of the
machine is touched. The runtime caches and the OpenClaw plugin's build are
made (or reused) before that, with the same installers the README calls;
missing ones are installed, never skipped.

Every step has a deadline (``STEP_DEADLINE_S``) and reports its progress;
after each step the gate's ledger is read as an auditor's export shows it, so
each turn's evidence is told apart by when it was written.

Proves, for hermes-agent 0.19.0 and openclaw 2026.9.6 and this README:

- each block runs to its end, in order, from a fresh clone's commands
  (``make demo`` first, the state of ``demo --state-dir`` used after);
- ``runtime add`` for each kind is adopted by the running gate;
- the Hermes turn prints the stand-in model's sentence, and the ledger gained,
  during that step, the output gate's ``allow`` decision
  (``internal_output_delivery``) for it; Hermes's configuration names the
  model gateway, never the stand-in: the reply came through the gateway, which
  releases text only after that decision;
- the same for the OpenClaw turn;
- both runtimes ran confined (``runtime run``): their configurations hold no
  gateway token, and ``doctor``'s confinement rows say each launcher attested the
  sandbox and its end; the stand-in provider requires an API key only the model
  gateway's configuration names;
- both runtimes' start-up attestations were accepted (``doctor``'s rows,
  ``doctor`` exiting 0), and ``explain`` names the rule behind the last allow;
- the attorney's desk, with the attorney's part done in Chromium with its virtual
  authenticator (``tests.support.quickstart_desk``, in the run's namespace): the console
  serves; the attorney makes a passkey on its page; the operator enrols it with the
  fingerprint the page showed, and the running gate adopts the release; the stand-in
  runtime's court filing is held; the attorney signs in with the passkey and allows it
  once (two touches: the sign-in and the decision), the page shows the court's receipt,
  and the ledger holds the approval from ``held`` through ``consumed``;
- the stop step leaves no process of the run behind.

Does not prove: a tool call proposed through either adapter (the stand-in
answers text only; tool calls through the gate are the conformance modules'; the
held filing is proposed by a stand-in runtime), a denial in the quick start, a real
provider, a real authenticator, the README's first-run installs (the caches exist
when the blocks run), the
``pip``/``npm`` package distributions the issue also asks for (not built yet),
or any other shell than bash.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import os
import re
import select
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import aiohttp
import pytest

from smf_assurance.ops.local.natsserver import reserve_port
from smf_assurance.ops.local.pdf_renderer import fetch_renderer
from smf_assurance.ops.runtimes.cache import cache_root
from smf_assurance.ops.runtimes.hermes_env import ensure_hermes_env
from smf_assurance.ops.runtimes.openclaw_env import ensure_openclaw_env
from smf_assurance.pipeline.stores.ledger_audit import export_jsonl
from smf_tools import fake_model
from tests.support.hermes_conformance import netns_available
from tests.support.openclaw_conformance import build_plugin, openclaw_tmp_kept_clean

pytestmark = pytest.mark.slow

PROJECT: Final = Path(__file__).resolve().parents[2]
README: Final = PROJECT / "README.md"
BLOCK: Final = re.compile(r"^```sh quickstart\n(.*?)^```\n", re.MULTILINE | re.DOTALL)
PORT_LINE: Final = re.compile(r"^GATEWAY_PORT=8787(?=\s)", re.MULTILINE)
"""A line a reader is told to fill in: a free port for the model gateway."""
CONSOLE_PORT_LINE: Final = re.compile(r"^CONSOLE_PORT=8765(?=\s)", re.MULTILINE)
"""A line a reader is told to fill in: a free port for the console."""
FINGERPRINT_LINE: Final = re.compile(r"^FINGERPRINT=0000-0000-0000-0000(?=\s)", re.MULTILINE)
"""A line the operator fills in: the fingerprint the attorney's page showed (read by
:mod:`tests.support.quickstart_desk` from that page)."""
STEPS: Final = 10
DESK_STEP: Final = 7
"""After this step the attorney makes a passkey in the browser; after the next, the
operator having enrolled it, signs in with it and allows the held filing once."""
PRINCIPAL: Final = "attorney-alex"
STEP_DEADLINE_S: Final = 300.0
"""A step's bound: the OpenClaw turn takes 60-110 s on a busy two-core machine."""
REPLY: Final = "Hello from the local stand-in model."
"""What ``smf_tools.fake_model`` answers by default, the README's stand-in
provider."""
KEPT: Final = ("model.url", "hermes-home/config.yaml", "openclaw/openclaw.json")
"""Files of the run's folder read after each step (the stop step removes the folder)."""
OUTPUT_ALLOWED: Final = ("allow", ["internal_output_delivery"])
DRIVER: Final = (
    "set -eu -o pipefail\n"
    'if [ "${SMF_QS_LOOPBACK:-}" = 1 ]; then ip link set lo up; fi\n'
    "exec 3<&0 </dev/null\n"
    "while IFS= read -r -u 3 step; do\n"
    '  . "$step" >"$step.out" 2>&1\n'
    '  printf "ok %s\\n" "${QS:-}"\n'
    "done\n"
)
"""The reader's shell: each step file named on fd 3 is sourced (variables and background
jobs carry over, as in one terminal), its output kept beside it; stdin is /dev/null, so
no command reads the next step's text. ``set -e``: the first failing command ends it."""

Say = Callable[[str], None]


class StepFailed(AssertionError):
    """A README step ended the shell or outlived its deadline."""


def quickstart_blocks(text: str) -> list[str]:
    """The README's quick start steps, in order, exactly as written."""
    return BLOCK.findall(text)


def with_port(block: str, port: int, console_port: int = 8765) -> str:
    """``block`` with the reader's port choices made: only the ``GATEWAY_PORT=8787`` and
    ``CONSOLE_PORT=8765`` lines."""
    block = PORT_LINE.sub(f"GATEWAY_PORT={port}", block)
    return CONSOLE_PORT_LINE.sub(f"CONSOLE_PORT={console_port}", block)


def with_fingerprint(block: str, fingerprint: str) -> str:
    """``block`` with the fingerprint the attorney read: only the ``FINGERPRINT=`` line."""
    if not re.fullmatch(r"[0-9a-f]{4}(?:-[0-9a-f]{4}){3}", fingerprint):
        raise StepFailed(f"the attorney's page showed no fingerprint: {fingerprint!r}")
    return FINGERPRINT_LINE.sub(f"FINGERPRINT={fingerprint}", block)


@dataclass
class Step:
    number: int
    script: Path
    seconds: float = 0.0
    ledger: list[dict[str, Any]] = field(default_factory=list)
    """Every ledger entry when the step ended (an auditor's export)."""
    files: dict[str, str] = field(default_factory=dict)
    """The :data:`KEPT` files there were when the step ended."""

    @property
    def output(self) -> str:
        return self.script.with_name(self.script.name + ".out").read_text(errors="replace")


class Shell:
    """One bash running the steps in order (``DRIVER``), in its own process group."""

    def __init__(self, workdir: Path, env: dict[str, str], *, isolated: bool) -> None:
        prefix = ["unshare", "-n"] if isolated else []
        self.workdir = workdir
        self.qs: Path | None = None
        self.overdue = False
        """A step outlived its deadline: the shell is still inside it, so it is not waited for."""
        self.errors = (workdir / "shell.err").open("w")
        self.proc = subprocess.Popen(
            [*prefix, "bash", "--noprofile", "--norc", "-c", DRIVER],
            cwd=PROJECT,
            env={**env, "SMF_QS_LOOPBACK": "1" if isolated else ""},
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.errors,
            start_new_session=True,
        )

    def run(self, step: Step, deadline_s: float) -> None:
        """Run one step to its end, or raise naming it (with the tail of its output)."""
        assert self.proc.stdin is not None
        assert self.proc.stdout is not None
        started = time.monotonic()
        try:
            self.proc.stdin.write(f"{step.script}\n".encode())
            self.proc.stdin.flush()
        except BrokenPipeError as exc:
            raise StepFailed(f"step {step.number}: the shell had already ended") from exc
        ready, _, _ = select.select([self.proc.stdout], [], [], deadline_s)
        line = self.proc.stdout.readline() if ready else b""
        step.seconds = round(time.monotonic() - started, 1)
        if not line.startswith(b"ok "):
            self.overdue = not ready
            why = "failed" if ready else f"did not end within {deadline_s:.0f} s"
            raise StepFailed(f"README quick start step {step.number} {why}:\n{self.tail(step)}")
        given = line[3:].decode().strip()
        self.qs = Path(given) if given else None

    def tail(self, step: Step) -> str:
        out = step.script.with_name(step.script.name + ".out")
        err = self.workdir / "shell.err"
        text = out.read_text(errors="replace") if out.exists() else ""
        return (text + err.read_text(errors="replace"))[-4000:]

    def stop(self) -> None:
        """Close the shell, then end whatever the steps left in its process group. A shell
        whose step outlived its deadline would only end once that step does: its group is
        ended at once."""
        assert self.proc.stdin is not None
        with contextlib.suppress(BrokenPipeError):
            self.proc.stdin.close()
        end_group(self.proc, self.errors, wait=not self.overdue)


def end_group(proc: subprocess.Popen[Any], errors: io.TextIOBase, *, wait: bool) -> None:
    """After its input is closed: let ``proc`` end (when ``wait``), then end whatever is
    left in its process group, and close its error file."""
    if wait:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(30)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(5)
    errors.close()


def ledger_entries(qs: Path) -> list[dict[str, Any]]:
    """The gate's ledger as ``ledger export`` writes it (empty before there is a state)."""
    db = qs / "state" / "ledger.db"
    if not db.exists():
        return []
    out = io.StringIO()
    export_jsonl(db, out)
    return [json.loads(line) for line in out.getvalue().splitlines()]


def progress(request: pytest.FixtureRequest) -> Say:
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")

    def say(line: str) -> None:
        if reporter is not None:
            reporter.write_line(f"[quickstart] {line}")

    return say


def prepare_runtimes(say: Say) -> None:
    """The installers the README calls, run first and outside any namespace: a cache
    that is missing is installed here (PyPI, npm), never a reason to skip. The console's
    pinned pdf.js too, which ``console`` fetches into the same cache."""
    started = time.monotonic()
    ensure_hermes_env(PROJECT, progress=say)
    ensure_openclaw_env(progress=say)
    build_plugin()
    fetch_renderer()
    say(f"runtimes and plugin ready in {time.monotonic() - started:.1f}s")


class Desk:
    """The attorney's browser (:mod:`tests.support.quickstart_desk`), in the shell's
    network namespace when it has its own: one JSON line out, one back."""

    def __init__(self, shell: Shell, isolated: bool) -> None:
        enter = ["nsenter", f"--net=/proc/{shell.proc.pid}/ns/net"] if isolated else []
        self.errors = (shell.workdir / "desk.err").open("w")
        self.proc = subprocess.Popen(
            [*enter, sys.executable, "-m", "tests.support.quickstart_desk"],
            cwd=PROJECT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.errors,
            text=True,
            start_new_session=True,
        )

    def ask(self, deadline_s: float, **command: str) -> dict[str, Any]:
        assert self.proc.stdin is not None
        assert self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(command) + "\n")
        self.proc.stdin.flush()
        ready, _, _ = select.select([self.proc.stdout], [], [], deadline_s)
        line = self.proc.stdout.readline() if ready else ""
        answer: dict[str, Any] = json.loads(line) if line else {"error": "no answer"}
        if "error" in answer:
            raise StepFailed(f"the attorney's browser, {command['op']}: {answer['error']}")
        return answer

    def stop(self) -> None:
        with contextlib.suppress(BrokenPipeError, OSError):
            assert self.proc.stdin is not None
            self.proc.stdin.write('{"op": "quit"}\n')
            self.proc.stdin.close()
        end_group(self.proc, self.errors, wait=True)


def attorney_at_desk(
    step: Step, steps: list[Step], shell: Shell, desk: Desk, console_port: int
) -> dict[str, Any]:
    """What the README asks of the attorney after ``step``: after the desk step, make a
    passkey (its registration where the README says, its fingerprint into the next
    step's ``FINGERPRINT=`` line, as the operator hears it); after the operator's step,
    sign in with it and allow the held filing once. What the browser answered."""
    assert shell.qs is not None
    url = f"http://localhost:{console_port}/"
    if step.number == DESK_STEP:
        made = desk.ask(
            STEP_DEADLINE_S,
            op="make",
            url=url,
            principal=PRINCIPAL,
            out=str(shell.qs / "alex-passkey.json"),
        )
        enrol = steps[DESK_STEP]
        enrol.script.write_text(with_fingerprint(enrol.script.read_text(), made["fingerprint"]))
        return made
    held = (shell.qs / "held.txt").read_text().split()
    approval_id = held[4] if len(held) > 4 else ""
    return desk.ask(
        STEP_DEADLINE_S, op="approve", url=url, principal=PRINCIPAL, approval_id=approval_id
    )


@dataclass
class QuickStart:
    steps: list[Step]
    port: int
    qs: Path
    leftovers: list[str]
    desk: dict[int, dict[str, Any]] = field(default_factory=dict)
    """What the attorney's browser answered after each desk step."""
    console_port: int = 0
    """Command lines of processes still naming the run's folder after the stop step."""

    def step(self, number: int) -> Step:
        return self.steps[number]

    def new_entries(self, number: int) -> list[dict[str, Any]]:
        """Ledger entries written while step ``number`` ran."""
        before = len(self.step(number - 1).ledger)
        return self.step(number).ledger[before:]


def processes_naming(text: str) -> list[str]:
    """Command lines of live processes that name ``text`` (the run's folder)."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        with contextlib.suppress(OSError):
            line = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
            if text in line:
                found.append(line)
    return found


@pytest.fixture(scope="module")
def quickstart(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[QuickStart]:
    say = progress(request)
    prepare_runtimes(say)
    blocks = quickstart_blocks(README.read_text(encoding="utf-8"))
    assert len(blocks) == STEPS, f"README has {len(blocks)} quick start blocks, not {STEPS}"
    workdir = tmp_path_factory.mktemp("quickstart")
    home, tmp = workdir / "home", workdir / "tmp"
    home.mkdir()
    tmp.mkdir()
    reservation, console = reserve_port(), reserve_port()
    steps = []
    for number, block in enumerate(blocks, 1):
        script = workdir / f"step{number}.sh"
        script.write_text(with_port(block, reservation.port, console.port))
        steps.append(Step(number, script))
    env = {
        "HOME": str(home),
        "TMPDIR": str(tmp),
        "XDG_CACHE_HOME": str(cache_root().parent),
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "LANG": "C.UTF-8",
        "NO_COLOR": "1",
    }
    with openclaw_tmp_kept_clean():
        isolated = netns_available()
        say("network: " + ("unshare -n, loopback only" if isolated else "no namespace; 127.0.0.1"))
        shell = Shell(workdir, env, isolated=isolated)
        desk: Desk | None = None
        answers: dict[int, dict[str, Any]] = {}
        try:
            done = [Step(0, workdir / "step0.sh")]
            for step in steps:
                shell.run(step, STEP_DEADLINE_S)
                if step.number in (DESK_STEP, DESK_STEP + 1):
                    desk = desk or Desk(shell, isolated)
                    answers[step.number] = attorney_at_desk(step, steps, shell, desk, console.port)
                if shell.qs is not None and shell.qs.exists():
                    step.ledger = ledger_entries(shell.qs)
                    step.files = {
                        name: (shell.qs / name).read_text()
                        for name in KEPT
                        if (shell.qs / name).exists()
                    }
                say(f"step {step.number} done in {step.seconds}s")
                done.append(step)
            assert shell.qs is not None
            leftovers = processes_naming(str(shell.qs))
            yield QuickStart(done, reservation.port, shell.qs, leftovers, answers, console.port)
        finally:
            if desk is not None:
                desk.stop()
            shell.stop()
            reservation.close()
            console.close()


def assert_only_allowed_output(entries: list[dict[str, Any]]) -> None:
    """The turn's model replies were decided, each one allowed as internal output, and the
    gate decided nothing else during it (no refusal of a model request, no denial).
    Hermes may ask its model more than once in one turn (each answer is decided)."""
    decided = [(e["disposition"], e["reason_codes"]) for e in entries if e["kind"] == "decision"]
    assert decided, "the gate decided nothing during the turn"
    assert set(map(str, decided)) == {str(OUTPUT_ALLOWED)}, decided


# -- the README itself (no runtime needed) --------------------------------------------


def test_the_quick_start_is_read_as_written_with_only_the_readers_choices_filled_in() -> None:
    blocks = quickstart_blocks(README.read_text(encoding="utf-8"))
    assert len(blocks) == STEPS
    assert blocks[0].splitlines()[0] == "make demo"  # from a fresh clone's first command
    whole = "\n".join(blocks)
    assert len(PORT_LINE.findall(whole)) == 1
    assert len(CONSOLE_PORT_LINE.findall(whole)) == 1
    assert len(FINGERPRINT_LINE.findall(whole)) == 1
    assert FINGERPRINT_LINE.search(blocks[DESK_STEP])  # the step after the desk's
    filled = [with_port(block, 4321, 4322) for block in blocks]
    filled[DESK_STEP] = with_fingerprint(filled[DESK_STEP], "ab12-cd34-ef56-0718")
    changed = [(a, b) for a, b in zip(blocks, filled, strict=True) if a != b]
    assert len(changed) == 3
    assert changed[0][1] == changed[0][0].replace("GATEWAY_PORT=8787", "GATEWAY_PORT=4321", 1)
    assert changed[1][1] == changed[1][0].replace("CONSOLE_PORT=8765", "CONSOLE_PORT=4322", 1)
    assert changed[2][1] == changed[2][0].replace(
        "FINGERPRINT=0000-0000-0000-0000", "FINGERPRINT=ab12-cd34-ef56-0718", 1
    )
    with pytest.raises(StepFailed, match="no fingerprint"):
        with_fingerprint(blocks[DESK_STEP], "")
    # every other address is one a process chose: no other port is written down
    assert re.findall(r"127\.0\.0\.1:\d", whole) == []


def test_a_failing_readme_command_fails_the_run_at_its_step(tmp_path: Path) -> None:
    scripts = []
    for number, text in enumerate(("QS=/x\n", "false\necho after\n", "echo never\n"), 1):
        script = tmp_path / f"step{number}.sh"
        script.write_text(text)
        scripts.append(Step(number, script))
    shell = Shell(tmp_path, {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}, isolated=False)
    try:
        shell.run(scripts[0], 30)
        assert shell.qs == Path("/x")
        with pytest.raises(StepFailed, match="step 2 failed"):
            shell.run(scripts[1], 30)
        assert "after" not in scripts[1].output  # set -e: nothing after the failure ran
        with pytest.raises(StepFailed, match="step 3"):
            shell.run(scripts[2], 30)
        assert not scripts[2].script.with_name("step3.sh.out").exists()
    finally:
        shell.stop()


def test_a_step_that_outlives_its_deadline_fails_the_run(tmp_path: Path) -> None:
    script = tmp_path / "step1.sh"
    script.write_text("sleep 30\n")
    shell = Shell(tmp_path, {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}, isolated=False)
    try:
        with pytest.raises(StepFailed, match="did not end within 1 s"):
            shell.run(Step(1, script), 1)
    finally:
        shell.stop()
    assert shell.proc.returncode is not None


# -- the stand-in model the README starts ------------------------------------------------


async def test_the_stand_in_names_its_url_only_while_it_answers(tmp_path: Path) -> None:
    url_file = tmp_path / "model.url"
    stop = asyncio.Event()
    served = asyncio.create_task(fake_model.serve("Stand-in reply.", url_file, stop))
    async with asyncio.timeout(10):
        while not url_file.exists():
            await asyncio.sleep(0.02)
    url = url_file.read_text().strip()
    assert re.fullmatch(r"http://127\.0\.0\.1:\d+/v1", url)
    assert url_file.stat().st_mode & 0o777 == 0o600
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    async with aiohttp.ClientSession() as session:
        async with session.post(f"{url}/chat/completions", json=body) as answer:
            completion = await answer.json()
        async with session.post(f"{url}/chat/completions", json=body | {"stream": True}) as s:
            streamed = await s.read()
    assert completion["choices"][0]["message"]["content"] == "Stand-in reply."
    assert b"Stand-in reply." in streamed
    stop.set()
    async with asyncio.timeout(10):
        await served
    assert not url_file.exists()  # a stopped stand-in is never named


def test_the_stand_in_command_serves_until_interrupted_and_then_names_nothing(
    tmp_path: Path,
) -> None:
    """``python -m smf_tools.fake_model`` as the README runs it, in this process: a
    thread waits for the URL file, asks once, then interrupts the command as the
    README's ``kill`` does (SIGINT here: were it not handled, pytest would stop)."""
    url_file = tmp_path / "model.url"
    answers: list[str] = []

    def ask_then_interrupt() -> None:
        deadline = time.monotonic() + 10
        while not url_file.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        with contextlib.suppress(OSError):
            request = urllib.request.Request(
                url_file.read_text().strip() + "/chat/completions",
                data=json.dumps({"messages": []}).encode(),
                headers={"Content-Type": "application/json"},
            )
            with urllib.request.urlopen(request, timeout=10) as answer:
                answers.append(json.load(answer)["choices"][0]["message"]["content"])
        os.kill(os.getpid(), signal.SIGINT)

    asker = threading.Thread(target=ask_then_interrupt)
    asker.start()
    assert fake_model.main(["--url-file", str(url_file)]) == 0
    asker.join(10)
    assert answers == [fake_model.DEFAULT_REPLY]
    assert not url_file.exists()


def test_the_stand_in_refuses_a_url_file_in_no_folder(tmp_path: Path) -> None:
    with pytest.raises(SystemExit) as exited:
        fake_model.main(["--url-file", str(tmp_path / "absent" / "model.url")])
    assert exited.value.code == 1


# -- the quick start, run ----------------------------------------------------------------


def test_the_demo_step_runs_every_scenario_as_expected(quickstart: QuickStart) -> None:
    out = quickstart.step(1).output
    rows = [line for line in out.splitlines() if re.match(r"^\d ", line)]
    assert len(rows) == 12  # the scenario table twice: make demo, then demo --state-dir
    assert all(row.rstrip().endswith("yes") for row in rows)


def test_both_runtimes_are_onboarded_and_adopted_by_the_running_gate(
    quickstart: QuickStart,
) -> None:
    out = quickstart.step(3).output
    assert out.count("adopted by smf-gate") == 2
    assert re.search(r"^runtime\s+hermes-ann \(hermes, adapter smf-hermes-adapter\)$", out, re.M)
    assert re.search(
        r"^runtime\s+openclaw-ann \(openclaw, adapter smf-openclaw-adapter\)$", out, re.M
    )
    assert f"model gateway: http://127.0.0.1:{quickstart.port}/v1" in out
    assert "smfgw_" not in out  # the gateway tokens are written to files, never printed


def test_the_hermes_turn_prints_the_reply_the_gate_allowed_through_the_gateway(
    quickstart: QuickStart,
) -> None:
    out = quickstart.step(4).output
    assert REPLY in out
    assert_only_allowed_output(quickstart.new_entries(4))
    files = quickstart.step(4).files
    config = files["hermes-home/config.yaml"]
    assert f'base_url: "http://127.0.0.1:{quickstart.port}/v1"' in config
    assert files["model.url"].strip() not in config
    assert "smfgw_" not in config  # confined: the launcher holds the gateway token
    assert "smf-assurance" in config.split("plugins:", 1)[1]


def test_the_openclaw_turn_prints_the_reply_the_gate_allowed_through_the_gateway(
    quickstart: QuickStart,
) -> None:
    out = quickstart.step(5).output
    assert REPLY in out
    assert "smf attestation accepted by the gate" in out
    assert_only_allowed_output(quickstart.new_entries(5))
    files = quickstart.step(5).files
    assert files["model.url"].strip() not in files["openclaw/openclaw.json"]
    config = json.loads(files["openclaw/openclaw.json"])
    providers = config["models"]["providers"]
    assert config["models"]["mode"] == "replace"
    assert list(providers) == ["smf-gateway"]
    assert providers["smf-gateway"]["baseUrl"] == f"http://127.0.0.1:{quickstart.port}/v1"
    assert config["plugins"]["entries"]["smf-assurance"]["enabled"] is True


def test_the_evidence_step_explains_the_allow_and_doctor_sees_both_attested(
    quickstart: QuickStart,
) -> None:
    out = quickstart.step(6).output
    assert re.search(r"^disposition\s+allow$", out, re.MULTILINE)
    assert "urn:smf:rule:scenario:output-internal-delivery" in out
    for runtime in ("hermes-ann", "openclaw-ann"):
        assert re.search(rf"^runtime {runtime}\s+ok\s+last attestation .* accepted", out, re.M)
        # each turn ran under `runtime run`, whose launcher attested it and said it ended
        ended = (
            rf"^confinement {runtime}\s+warn\s+not confined: its launcher said the sandbox ended"
        )
        assert re.search(ended, out, re.M), out
    assert re.search(r"\b0 failed\b", out)


@pytest.mark.claim("approver-desk.passkey-signed-resolution")
def test_the_attorney_allows_the_held_filing_once_in_the_console_with_a_passkey(
    quickstart: QuickStart,
) -> None:
    console_line = f"console: http://127.0.0.1:{quickstart.console_port}/"
    assert console_line in quickstart.step(DESK_STEP).output
    made = quickstart.desk[DESK_STEP]
    enrolled = quickstart.step(DESK_STEP + 1).output
    assert "adopted by smf-gate" in enrolled
    held = r"^held for an attorney: sha256:[0-9a-f]{64} \(expires \d\d:\d\d:\d\d UTC\)$"
    assert re.search(held, enrolled, re.M), enrolled
    assert re.search(rf"^fingerprint\s+{made['fingerprint']}$", enrolled, re.M), enrolled
    decided = quickstart.desk[DESK_STEP + 1]
    assert decided["answer"].startswith("Accepted: allowed once."), decided
    assert decided["receipt"].startswith("Receipt from the connector:"), decided
    assert decided["signs"] == 2  # the sign-in and the allow-once; the reads took none
    statuses = [line.split()[0] for line in quickstart.step(DESK_STEP + 2).output.splitlines()]
    assert statuses == ["held", "approved", "executing", "consumed"], statuses


def test_the_stop_step_leaves_nothing_of_the_run_behind(quickstart: QuickStart) -> None:
    assert quickstart.leftovers == []
    assert not quickstart.qs.exists()
