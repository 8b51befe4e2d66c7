"""``smf-assurance model-gateway`` and ``up --model-gateway``, as an operator meets them.

Proves: the settings commands write what ``serve`` reads (the token only to a
0600 file, never on stdout); bad input is one line and a non-zero exit; ``up
--model-gateway`` serves the gateway beside the gate as a process, and that
gateway refuses an unattested runtime with the gate's reason (the figure a
user sees first), and stops with ``up``. ``bench --gateway`` prints its
four series with the gateway's own added latency.

Does not prove: the gateway's behaviour in depth (tests/bus/test_model_gateway.py).
"""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import msgspec
import pytest

from smf_assurance.ops.cli.main import main
from smf_assurance.ops.local.state import StateDir, provision_demo
from smf_tools.cli import main as tools_main
from smf_tools.cli_json import GatewayRow
from tests.support.cli_model_gateway import ACTOR
from tests.support.cli_ops import ROOT, assert_one_line_failure, read_line, run

UPSTREAM = ("model-gateway", "upstream", "http://127.0.0.1:9/v1", "--provider", "local-model")


@pytest.fixture
def demo(tmp_path: Path) -> StateDir:
    state = StateDir(tmp_path / "state")
    provision_demo(state)
    return state


def add_runtime(
    state: StateDir, tmp_path: Path, capsys: pytest.CaptureFixture[str], *extra: str
) -> Path:
    actor = tmp_path / "actor.json"
    actor.write_text(json.dumps(ACTOR))
    code, out, _ = run(
        [
            "model-gateway",
            "add-runtime",
            "scripted-demo",
            "--adapter",
            "smf-scripted-adapter",
            "--actor",
            str(actor),
            "--destination",
            "cli:operator",
            "--locality",
            "internal",
            "--state-dir",
            str(state.root),
            "--json",
            *extra,
        ],
        capsys,
    )
    assert code == 0
    return Path(json.loads(out)["token_file"])


def test_settings_are_written_and_listed_and_the_token_never_printed(
    demo: StateDir, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = str(demo.root)
    code, out, _ = run([*UPSTREAM, "--state-dir", root], capsys)
    assert code == 0
    assert "http://127.0.0.1:9/v1" in out
    # a leftover temporary file readable by others must not lend the token its mode
    leftover = demo.keys / "scripted-demo.gateway-token.tmp"
    leftover.write_text("")
    leftover.chmod(0o644)
    token_file = add_runtime(demo, tmp_path, capsys)
    assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
    token = token_file.read_text()
    assert token.startswith("smfgw_")
    assert token not in (demo.root / "model-gateway.json").read_text()
    code, out, _ = run(["model-gateway", "list", "--state-dir", root], capsys)
    assert code == 0
    assert token not in out
    assert "scripted-demo" in out
    assert "cli:operator" in out
    code, out, _ = run(["model-gateway", "list", "--state-dir", root, "--json"], capsys)
    assert json.loads(out) == {
        "runtimes": [
            {
                "runtime": "scripted-demo",
                "adapter": "smf-scripted-adapter",
                "destination": "cli:operator",
                "locality": "internal",
                "surface": "direct_reply",
            }
        ]
    }
    argv = ["model-gateway", "serve", "--listen", "nowhere", "--nats", "nats://127.0.0.1:9"]
    code, _, err = run([*argv, "--state-dir", root], capsys)
    assert_one_line_failure(code, err, "is not HOST:PORT")


def test_bad_input_is_one_line(
    demo: StateDir, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = str(demo.root)
    code, _, err = run(["model-gateway", "list", "--state-dir", root], capsys)
    assert_one_line_failure(code, err, "model-gateway upstream URL")
    code, _, err = run(
        ["model-gateway", "upstream", "ftp://x", "--provider", "p", "--state-dir", root], capsys
    )
    assert_one_line_failure(code, err, "is not an http(s) URL")
    code, _, err = run(
        ["model-gateway", "upstream", "http://x/v1", "--provider", "Bad Name", "--state-dir", root],
        capsys,
    )
    assert_one_line_failure(code, err, "is not a provider name")
    actor = tmp_path / "actor.json"
    actor.write_text("{not json")
    argv = ["model-gateway", "add-runtime", "r1", "--adapter", "a", "--actor", str(actor)]
    argv += ["--destination", "cli:x", "--locality", "internal", "--state-dir", root]
    code, _, err = run(argv, capsys)
    assert_one_line_failure(code, err, "--actor")
    actor.write_text(json.dumps(ACTOR))
    code, _, err = run(argv, capsys)
    assert_one_line_failure(code, err, "name the upstream first")
    code, _, err = run([*argv[:2], "bad.id", *argv[3:]], capsys)
    assert_one_line_failure(code, err, "is not a runtime id")
    code, _, err = run(["model-gateway", "list", "--state-dir", str(tmp_path / "none")], capsys)
    assert_one_line_failure(code, err, "no gate state")
    code, _, err = run(
        [
            "model-gateway",
            "serve",
            "--listen",
            "nowhere",
            "--nats",
            "nats://127.0.0.1:9",
            "--state-dir",
            root,
        ],
        capsys,
    )
    assert_one_line_failure(code, err, "model-gateway upstream URL")


def test_up_serves_the_gateway_beside_the_gate(
    demo: StateDir, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = str(demo.root)
    assert main([*UPSTREAM, "--state-dir", root]) == 0
    token = add_runtime(demo, tmp_path, capsys).read_text()
    log = (tmp_path / "up.log").open("w")
    proc = subprocess.Popen(
        [
            *(
                sys.executable,
                "-m",
                "smf_assurance.ops.cli.main",
                "up",
                "--state-dir",
                root,
                "--json",
            ),
            *("--no-connectors", "--model-gateway", "127.0.0.1:0"),
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=log,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        ready = json.loads(read_line(proc, 60))
        assert ready["ready"] is True
        url = ready["model_gateway_url"]
        request = urllib.request.Request(
            url + "/chat/completions",
            data=json.dumps({"messages": [{"role": "user", "content": "hi"}]}).encode(),
            headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        )
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=10)  # 127.0.0.1 only
        assert refused.value.code == 403
        assert json.loads(refused.value.read())["error"]["code"] == "runtime_attestation_missing"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        assert proc.stdout is not None
        proc.stdout.close()
        log.close()


def test_up_without_gateway_settings_fails_in_one_line(
    demo: StateDir, capsys: pytest.CaptureFixture[str]
) -> None:
    proc = subprocess.run(
        [
            *(
                sys.executable,
                "-m",
                "smf_assurance.ops.cli.main",
                "up",
                "--state-dir",
                str(demo.root),
            ),
            *("--no-connectors", "--model-gateway", "127.0.0.1:0"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode != 0
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("smf-assurance: cannot start the model gateway:")
    assert "Traceback" not in proc.stderr


def test_the_gateways_own_added_latency_may_be_negative() -> None:
    """It is a difference of two timed requests per pair: under load the direct one can be
    the slower, so the figure's declared type is signed (an unsigned one fails the bench)."""
    figures = {"p50_ns": 1, "p95_ns": 2, "p99_ns": 3}
    row = {
        "series": "4 KB streamed",
        "samples": 2,
        "direct": figures,
        "through_gateway": figures,
        "output_decision": figures,
        "gateway_own_added": {"p50_ns": -250_000, "p95_ns": -1, "p99_ns": 40_000},
    }
    decoded = msgspec.convert(row, GatewayRow)
    assert decoded.gateway_own_added.p50_ns == -250_000
    with pytest.raises(msgspec.ValidationError):
        msgspec.convert({**row, "direct": {**figures, "p50_ns": -1}}, GatewayRow)


def test_bench_gateway_prints_the_four_series(capsys: pytest.CaptureFixture[str]) -> None:
    assert tools_main(["bench", "--gateway", "--rounds", "2", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)["gateway"]
    assert [row["series"] for row in report] == [
        "completion, not streamed",
        "4 KB streamed",
        "64 KB streamed",
        "4 KB streamed, proof per request",
    ]
    for row in report:
        assert row["samples"] == 2
        assert row["through_gateway"]["p50_ns"] > row["output_decision"]["p50_ns"] > 0


@pytest.mark.parametrize("checks", [False, True])
def test_a_runtime_that_checks_tool_arguments_is_declared_so_only_when_asked(
    demo: StateDir, tmp_path: Path, capsys: pytest.CaptureFixture[str], checks: bool
) -> None:
    """Off unless the operator says the runtime checks arguments before any hook: only
    then is a call whose arguments fail the schema a refusal instead of a stop."""
    assert run([*UPSTREAM, "--state-dir", str(demo.root)], capsys)[0] == 0
    add_runtime(demo, tmp_path, capsys, *(["--checks-tool-arguments"] if checks else []))
    (served,) = json.loads((demo.root / "model-gateway.json").read_text())["runtimes"]
    assert served["checks_tool_arguments"] is checks
    assert served["refuses_invalid_json_turns"] is False


@pytest.mark.parametrize("refuses", [False, True])
def test_a_runtime_that_refuses_invalid_json_turns_is_declared_so_only_when_asked(
    demo: StateDir, tmp_path: Path, capsys: pytest.CaptureFixture[str], refuses: bool
) -> None:
    """Off unless the operator says the runtime answers every call of a turn whose
    arguments are not JSON itself: only then are those answers refusals, not a stop."""
    assert run([*UPSTREAM, "--state-dir", str(demo.root)], capsys)[0] == 0
    add_runtime(demo, tmp_path, capsys, *(["--refuses-invalid-json-turns"] if refuses else []))
    (served,) = json.loads((demo.root / "model-gateway.json").read_text())["runtimes"]
    assert served["refuses_invalid_json_turns"] is refuses
    assert served["checks_tool_arguments"] is False
