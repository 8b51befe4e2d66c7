"""The distributions a firm installs and the packaging gate.

Proves, with real builds (setuptools, pip, npm) and real targets:

- the Hermes adapter wheel (``smf-assurance-hermes``) holds the adapter and the bus
  contract only (no pipeline, ops, swarm, approver, Node file or test), names the
  plugin's entry point and requires exactly the pins Hermes's venv runs; installed with
  ``--no-deps`` into a COPY of the cached Hermes venv, ``pip check`` is clean there and
  that venv's python finds the entry point and imports the plugin from the installed
  copy, while the gate's packages are absent;
- the gate's wheel and sdist hold no Node file and every package-data file; the wheel,
  installed into a clean venv, runs ``smf-assurance --help`` and its package data is read
  from the installed copy (same bytes as the checkout's, a path inside the venv);
- the packaging gate names a package-data file deleted from a copy of the project, and
  writes nothing;
- the OpenClaw tarball holds no devDependency, TypeScript source or test, and
  ``openclaw plugins install <tgz>`` accepts it in a fresh state dir inside ``unshare -n``
  (loopback only), after which OpenClaw loads it: its two hooks are registered by its own
  code, and its bundled dependency is installed.

Does not prove: an install on another platform or Python, a real index upload, or a
governed turn through the installed copies (tests/cli/test_quickstart.py runs turns).
"""

from __future__ import annotations

import hashlib
import io
import json
import re
import shutil
import subprocess
import tarfile
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from smf_assurance.ops.runtimes.hermes_env import ensure_hermes_env
from smf_assurance.ops.runtimes.openclaw_env import ensure_openclaw_env
from smf_tools import dist
from tests.support.gate_wheel import GateWheel, clean_env, git_copy
from tests.support.openclaw_conformance import netns_available, openclaw_tmp_kept_clean
from tests.support.surface_matrix import ROOT

GATE_ONLY = (
    "smf_assurance/pipeline/",
    "smf_assurance/ops/",
    "smf_assurance/swarm/",
    "smf_assurance/approver/",
)
PACKAGE_DATA = (
    "smf_assurance/governance/corpus/scenarios/rules.json",
    "smf_assurance/governance/corpus/scenarios.compiled/enforcement.json",
    "smf_assurance/governance/scenarios/expected.json",
    "smf_assurance/approver/console/static/app.js",
    "smf_assurance/approver/console/static/index.html",
    "smf_assurance/pipeline/mappers/smf-hermes-adapter.json",
)
"""One file of each package-data family a firm's install needs (corpus, scenarios,
console assets, mappers)."""


def run(
    args: list[str], cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        args, cwd=cwd, capture_output=True, text=True, timeout=900, check=False, env=env
    )


# ---- fast: the checks themselves -----------------------------------------------------


def test_the_hermes_content_imports_only_what_it_ships() -> None:
    files = dist.hermes_files(ROOT)
    assert dist.unresolved_imports(ROOT, files) == []
    assert "smf_assurance/adapters/hermes/plugin.py" in files
    assert not [f for f in files if f.startswith((*GATE_ONLY, "smf_assurance/adapters/openclaw/"))]


def test_an_adapter_import_of_the_gate_is_named(tmp_path: Path) -> None:
    """Attack: the adapter starts importing the pipeline; the staged closure misses it."""
    files = dist.hermes_files(ROOT)
    for name in files:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, tmp_path / name)
    plugin = tmp_path / "smf_assurance/adapters/hermes/plugin.py"
    plugin.write_text(
        plugin.read_text()
        + "\nimport smf_assurance.ops.local.state\nfrom smf_assurance.core import facts\n"
    )
    assert dist.unresolved_imports(tmp_path, files) == [
        "smf_assurance/adapters/hermes/plugin.py: smf_assurance.core",
        "smf_assurance/adapters/hermes/plugin.py: smf_assurance.ops.local.state",
    ]


def test_node_files_are_told_from_ours() -> None:
    for name in (
        "smf_assurance/adapters/openclaw/openclaw.plugin.json",
        "smf_assurance/adapters/openclaw/README.md",
        "x/node_modules/typescript/lib/tsc.js",
        "smf_assurance/package.json",
        "smf_assurance/adapters/x.ts",
    ):
        assert dist.is_node_file(name), name
    for name in (
        "smf_assurance/approver/console/static/app.js",
        "smf_assurance/governance/scenarios/expected.json",
        "smf_assurance/subjects/names.py",
    ):
        assert not dist.is_node_file(name), name


def test_the_gate_check_names_a_missing_file_and_a_node_file(tmp_path: Path) -> None:
    archive = tmp_path / "a.whl"
    expected = [
        "smf_assurance/governance/scenarios/expected.json",
        "smf_assurance/subjects/names.py",
    ]
    with pytest.raises(
        dist.DistError, match=r"a.whl lacks smf_assurance/governance/scenarios/expected.json$"
    ):
        dist.check_gate_archive(archive, expected[1:], expected)
    with pytest.raises(
        dist.DistError, match=r"the Node file smf_assurance/adapters/openclaw/package\.json"
    ):
        dist.check_gate_archive(
            archive, [*expected, "smf_assurance/adapters/openclaw/package.json"], expected
        )
    dist.check_gate_archive(archive, expected, expected)


def hand_wheel(path: Path, names: list[str], points: str, requires: list[str]) -> Path:
    with zipfile.ZipFile(path, "w") as archive:
        for name in names:
            archive.writestr(name, "")
        archive.writestr("x-0.dist-info/entry_points.txt", points)
        archive.writestr(
            "x-0.dist-info/METADATA", "".join(f"Requires-Dist: {r}\n" for r in requires)
        )
    return path


def test_the_hermes_check_refuses_gate_code_other_pins_and_no_entry_point(tmp_path: Path) -> None:
    meta = dist.project_meta(ROOT)
    files = ["smf_assurance/__init__.py"]
    pins = ["msgspec==0.23.0"]
    points = "[hermes_agent.plugins]\nsmf-assurance = smf_assurance.adapters.hermes.plugin\n"
    dist.check_hermes_wheel(hand_wheel(tmp_path / "ok.whl", files, points, pins), files, pins, meta)
    leaky = hand_wheel(tmp_path / "g.whl", [*files, "smf_assurance/ops/cli/main.py"], points, pins)
    with pytest.raises(dist.DistError, match=r"holds smf_assurance/ops/cli/main\.py"):
        dist.check_hermes_wheel(leaky, files, pins, meta)
    loose = hand_wheel(tmp_path / "l.whl", files, points, ["msgspec>=0.18"])
    with pytest.raises(dist.DistError, match="not the pins"):
        dist.check_hermes_wheel(loose, files, pins, meta)
    pointless = hand_wheel(tmp_path / "p.whl", files, "[console_scripts]\n", pins)
    with pytest.raises(
        dist.DistError, match=r"entry point hermes_agent\.plugins smf-assurance missing"
    ):
        dist.check_hermes_wheel(pointless, files, pins, meta)
    short = hand_wheel(tmp_path / "s.whl", [], points, pins)
    with pytest.raises(dist.DistError, match=r"missing \['smf_assurance/__init__.py'\]"):
        dist.check_hermes_wheel(short, files, pins, meta)


def test_a_folder_git_does_not_know_is_refused(tmp_path: Path) -> None:
    with pytest.raises(dist.DistError, match="not a git work tree"):
        dist.known_files(tmp_path)


def test_the_hermes_pins_are_exact() -> None:
    pins = dist.hermes_requirements()
    assert [p.split("==")[0] for p in pins] == ["nats-py", "nkeys", "msgspec", "PyNaCl"]
    assert all("==" in p for p in pins)


def hand_tgz(path: Path, members: dict[str, bytes]) -> Path:
    with tarfile.open(path, "w:gz") as archive:
        for name, data in members.items():
            info = tarfile.TarInfo(f"package/{name}")
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return path


def test_the_tarball_check_refuses_build_input_dev_files_and_missing_bundles(
    tmp_path: Path,
) -> None:
    """Each way a plugin tarball could carry the build or miss its runtime: named."""
    plugin = ROOT / "smf_assurance/adapters/openclaw"
    manifest = json.loads((plugin / "package.json").read_text())
    runtime = [
        path
        for path, entry in json.loads((plugin / "package-lock.json").read_text())[
            "packages"
        ].items()
        if path.startswith("node_modules/") and not entry.get("dev")
    ]
    good = {
        "package.json": json.dumps(manifest).encode(),
        "dist/index.js": b"",
        "openclaw.plugin.json": b"{}",
        **{f"{path}/package.json": b"{}" for path in runtime},
    }
    dist.check_openclaw_tgz(hand_tgz(tmp_path / "ok.tgz", good), plugin)
    cases = {
        "holds the build input src/index.ts": {**good, "src/index.ts": b""},
        "holds the devDependency file node_modules/typescript/package.json": {
            **good,
            "node_modules/typescript/package.json": b"{}",
        },
        "package.json is private": {
            **good,
            "package.json": json.dumps({**manifest, "private": True}).encode(),
        },
        "not every runtime dependency is bundled": {
            **good,
            "package.json": json.dumps({**manifest, "bundleDependencies": []}).encode(),
        },
        "lacks node_modules/tweetnacl/package.json": {
            k: v for k, v in good.items() if k != "node_modules/tweetnacl/package.json"
        },
        "has no package.json": {k: v for k, v in good.items() if k != "package.json"},
    }
    for n, (reason, members) in enumerate(cases.items()):
        with pytest.raises(dist.DistError, match=re.escape(reason)):
            dist.check_openclaw_tgz(hand_tgz(tmp_path / f"{n}.tgz", members), plugin)


def test_a_build_that_fails_is_one_line_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A project setuptools refuses: the step is named in one line, exit 1, ``dist/`` absent."""
    project = tmp_path / "project"
    (project / "smf_assurance").mkdir(parents=True)
    (project / "smf_assurance" / "__init__.py").write_text("")
    (project / "pyproject.toml").write_text("[project\n")
    subprocess.run(["git", "init", "-q", str(project)], check=True)
    out = tmp_path / "out"
    assert dist.main(["--project", str(project), "--out", str(out), "--only", "gate"]) == 1
    *_, line = capsys.readouterr().err.splitlines()
    assert line.startswith("dist: setuptools build_sdist failed (exit 1): ")
    assert not out.exists()
    with pytest.raises(dist.DistError, match="no version or Hermes entry point"):
        dist.project_meta(project)
    with pytest.raises(dist.DistError, match="matches no file"):
        dist.hermes_files(project)


# ---- slow: real builds into real targets -----------------------------------------------


@pytest.mark.slow
def test_the_hermes_wheel_installs_into_a_copy_of_the_hermes_venv(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    assert dist.main(["--project", str(ROOT), "--out", str(out), "--only", "hermes", "--json"]) == 0
    (record,) = json.loads(capsys.readouterr().out)
    wheel = Path(record["path"])
    assert wheel.parent == out
    assert wheel.name.startswith("smf_assurance_hermes-")
    assert record["sha256"] == hashlib.sha256(wheel.read_bytes()).hexdigest()
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        (points,) = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
        assert (
            "smf-assurance = smf_assurance.adapters.hermes.plugin" in archive.read(points).decode()
        )
    assert not [n for n in names if n.startswith((*GATE_ONLY, "tests/")) or dist.is_node_file(n)]
    assert "smf_assurance/subjects/canonical.py" in names

    shared = ensure_hermes_env(ROOT).root
    copy = tmp_path / "hermes-venv"
    shutil.copytree(shared, copy, symlinks=True)
    python = str(copy / "bin" / "python")
    installed = run(
        [python, "-m", "pip", "install", "-q", "--no-deps", str(wheel)], tmp_path, clean_env()
    )
    assert installed.returncode == 0, installed.stderr
    check = run([python, "-m", "pip", "check"], tmp_path, clean_env())
    assert check.returncode == 0, check.stdout + check.stderr
    assert "No broken requirements found" in check.stdout
    probe = (
        "import importlib.metadata as m, importlib.util as u, json\n"
        "(point,) = [e for e in m.entry_points(group='hermes_agent.plugins')"
        " if e.name == 'smf-assurance']\n"
        "plugin = point.load()\n"
        "print(json.dumps({'value': point.value, 'file': plugin.__file__,"
        " 'register': callable(plugin.register),"
        " 'dist': point.dist.name,"
        " 'gate': [n for n in ('smf_assurance.pipeline', 'smf_assurance.ops')"
        " if u.find_spec(n) is not None]}))\n"
    )
    seen = run([python, "-c", probe], tmp_path, clean_env())
    assert seen.returncode == 0, seen.stderr
    found = json.loads(seen.stdout)
    assert found["value"] == "smf_assurance.adapters.hermes.plugin"
    assert found["dist"] == "smf-assurance-hermes"
    assert found["register"] is True
    assert Path(found["file"]).is_relative_to(copy / "lib")
    assert found["gate"] == []
    assert not list(shared.glob("lib/python*/site-packages/smf_assurance*")), "shared venv changed"


@pytest.mark.slow
@pytest.mark.claim("packaging.package-data-installed")
def test_the_gate_wheel_and_sdist_ship_their_data_and_no_node_file(
    tmp_path: Path, gate_wheel: GateWheel
) -> None:
    wheel, sdist, venv = gate_wheel.wheel, gate_wheel.sdist, gate_wheel.venv
    wheel_files = dist.wheel_names(wheel)
    with tarfile.open(sdist) as archive:
        sdist_files = [m.name for m in archive.getmembers()]
    for names in (wheel_files, sdist_files):
        assert not [n for n in names if "node_modules" in n or "adapters/openclaw" in n]
        assert not [n for n in names if n.endswith((".ts", "package.json"))]
    for name in PACKAGE_DATA:
        assert name in wheel_files, name
        assert any(n.endswith("/" + name) for n in sdist_files), name

    helped = run([str(venv / "bin" / "smf-assurance"), "--help"], tmp_path, clean_env())
    assert helped.returncode == 0, helped.stderr
    assert "usage: smf-assurance" in helped.stdout
    probe = (
        "import importlib.resources as r, json, sys\n"
        "out = {}\n"
        "for name in sys.argv[1:]:\n"
        "    node = r.files('smf_assurance')\n"
        "    for part in name.split('/')[1:]:\n"
        "        node = node / part\n"
        "    out[name] = [str(node), node.read_bytes().hex()]\n"
        "print(json.dumps(out))\n"
    )
    read = run([str(venv / "bin" / "python"), "-c", probe, *PACKAGE_DATA], tmp_path, clean_env())
    assert read.returncode == 0, read.stderr
    for name, (path, data) in json.loads(read.stdout).items():
        assert Path(path).is_relative_to(venv), path
        assert bytes.fromhex(data) == (ROOT / name).read_bytes(), name


TEAM_TOOLS = ("bench", "candidate", "review")
"""The team's commands (``python -m smf_tools``): a firm runs none of them."""


@pytest.mark.slow
@pytest.mark.claim("packaging.no-team-tools")
def test_the_gate_wheel_holds_none_of_the_teams_tools(
    tmp_path: Path, gate_wheel: GateWheel
) -> None:
    """No ``smf_tools/`` package, no benchmark, candidate, mutation, dist or stand-in model
    module in the wheel; installed, ``smf-assurance --help`` lists none of the team's
    commands, one of them is a usage error, and ``smf_tools`` cannot be imported."""
    names = dist.wheel_names(gate_wheel.wheel)
    assert any(n.startswith("smf_assurance/ops/cli/") for n in names), names
    parts = {part for name in names for part in Path(name).with_suffix("").parts}
    assert not [n for n in names if n.split("/")[0] == "smf_tools"], names
    shipped = {"bench", "candidate", "mutation", "dist", "fake_model"} & parts
    assert not shipped, sorted(n for n in names if shipped & set(Path(n).with_suffix("").parts))

    venv = gate_wheel.venv
    helped = run([str(venv / "bin" / "smf-assurance"), "--help"], tmp_path, clean_env())
    assert helped.returncode == 0, helped.stderr
    listed = {  # a command's name is indented four spaces; its wrapped summary more
        line.split()[0]
        for line in helped.stdout.splitlines()
        if line.startswith("    ") and not line.startswith("     ")
    }
    assert {"demo", "up", "doctor", "completion"} <= listed, helped.stdout
    assert not set(TEAM_TOOLS) & listed, helped.stdout
    for command in TEAM_TOOLS:
        refused = run([str(venv / "bin" / "smf-assurance"), command], tmp_path, clean_env())
        assert refused.returncode == 2, refused.stderr
        assert f"invalid choice: '{command}'" in refused.stderr, refused.stderr
    imported = run([str(venv / "bin" / "python"), "-c", "import smf_tools"], tmp_path, clean_env())
    assert imported.returncode == 1
    assert "No module named 'smf_tools'" in imported.stderr, imported.stderr


@pytest.mark.slow
@pytest.mark.claim("packaging.package-data-installed")
def test_the_packaging_gate_names_a_deleted_package_data_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    project = git_copy(tmp_path / "project")
    victim = "smf_assurance/governance/scenarios/3-tainted-egress.json"
    (project / victim).unlink()
    out = tmp_path / "out"
    code = dist.main(["--project", str(project), "--out", str(out), "--only", "gate"])
    captured = capsys.readouterr()
    assert code == 1
    assert captured.out == ""
    *progress, line = captured.err.splitlines()
    assert all(p.startswith("[dist] ") for p in progress), progress
    assert line.startswith("dist: smf_assurance-0.1.0.tar.gz lacks ")
    assert line.endswith(victim)
    assert not out.exists(), "a failed gate wrote something"


@pytest.fixture
def openclaw_tmp() -> Iterator[None]:
    with openclaw_tmp_kept_clean():
        yield


@pytest.mark.slow
@pytest.mark.usefixtures("openclaw_tmp")
def test_the_openclaw_tarball_installs_offline_and_loads(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    if not netns_available():
        pytest.skip("needs root and `unshare -n` to install offline")
    out = tmp_path / "out"
    assert dist.main(["--project", str(ROOT), "--out", str(out), "--only", "openclaw"]) == 0
    header, _rule, row = capsys.readouterr().out.splitlines()
    assert header.split() == ["kind", "file", "bytes", "sha256"]
    kind, path, size, digest = row.split()
    tgz = Path(path)
    assert kind == "openclaw-tgz"
    assert tgz.parent == out
    assert int(size) == tgz.stat().st_size
    assert digest == hashlib.sha256(tgz.read_bytes()).hexdigest()
    with tarfile.open(tgz) as archive:
        names = [m.name.removeprefix("package/") for m in archive.getmembers() if m.isfile()]
        manifest = json.loads(archive.extractfile("package/package.json").read())  # type: ignore[union-attr]
    assert "dist/index.js" in names
    assert "openclaw.plugin.json" in names
    assert "node_modules/@nats-io/transport-node/package.json" in names
    ours = [n for n in names if not n.startswith("node_modules/")]
    assert not [
        n for n in ours if n.endswith(".ts") or n.startswith(("src/", "test/", "dist-test/"))
    ]
    for dev in ("typescript", "@types/node", "canonicalize"):
        assert not [n for n in names if n.startswith(f"node_modules/{dev}/")], dev
    assert "private" not in manifest

    env = ensure_openclaw_env()
    root = tmp_path / "oc"
    for folder in ("state", "home"):
        (root / folder).mkdir(parents=True)
    config = root / "openclaw.json"
    config.write_text(
        json.dumps({"update": {"checkOnStart": False}, "telemetry": {"enabled": False}})
    )
    script = (
        "ip link set lo up\n"
        "ip -o link show | wc -l > links\n"
        'openclaw plugins install "$1" --force --accept-capabilities > install.log 2>&1'
        " || { cat install.log >&2; exit 3; }\n"
        "openclaw plugins inspect smf-assurance --runtime --json > inspect.json\n"
    )
    oc_env = {
        "PATH": env.path_env(),
        "HOME": str(root / "home"),
        "OPENCLAW_STATE_DIR": str(root / "state"),
        "OPENCLAW_HOME": str(root / "home"),
        "OPENCLAW_CONFIG_PATH": str(config),
        "OPENCLAW_NO_AUTO_UPDATE": "1",
        "OPENCLAW_DISABLE_BONJOUR": "1",
        "OPENCLAW_OFFLINE": "1",
    }
    done = run(["unshare", "-n", "sh", "-c", script, "sh", str(tgz)], root, oc_env)
    assert done.returncode == 0, done.stderr[-4000:]
    assert (root / "links").read_text().strip() == "1", "the namespace had more than loopback"
    inspected = json.loads((root / "inspect.json").read_text())
    plugin = inspected["plugin"]
    installed = root / "state" / "extensions" / "smf-assurance"
    assert plugin["status"] == "loaded"
    assert plugin["source"] == str(installed / "dist" / "index.js")
    assert inspected["install"]["source"] == "archive"
    hooks = sorted(hook["name"] for hook in inspected["typedHooks"])
    assert hooks == ["after_tool_call", "before_tool_call"]
    assert (installed / "node_modules" / "@nats-io" / "transport-node" / "package.json").is_file()
    assert not (installed / "node_modules" / "typescript").exists()
    assert json.loads(config.read_text())["plugins"]["entries"]["smf-assurance"]["enabled"] is True
