"""``make dist``: the three distributions a firm installs, built, checked and digested.

Distributions that fit where they install: the gate (``smf-assurance``,
wheel and sdist), a Hermes adapter distribution (``smf-assurance-hermes``) that goes
into Hermes's own environment with only what it needs, and the OpenClaw plugin as an
npm tarball that ``openclaw plugins install <tgz>`` accepts. Each is checked before it
is written, and ``dist/`` receives nothing unless every check passed (fail closed:
an archive that failed a check is never left where someone could install it).

- **Namespace.** Every distribution ships packages under ``smf_assurance`` only
  (``smf_assurance/__init__.py``): Hermes ships generic top-level modules
  (``agent``, ``tools``, ``plugins``, ...), so nothing of ours sits beside them. The
  gate's wheel holds the adapter too; the two are alternatives for different
  environments, never installed together (docs/HERMES.md, "Installation").
- **The Hermes adapter's files** are declared once, :data:`HERMES_CONTENT`. setuptools
  takes no package folder outside its project root, so they are staged into a temporary
  project with a generated ``pyproject.toml`` and built there (PEP 517,
  ``setuptools.build_meta``). Before building, every ``smf_assurance`` import of the
  staged code must resolve inside the stage (:func:`unresolved_imports`): an adapter
  module that starts importing the pipeline fails the build, naming the import.
  Its dependencies are pinned exactly at the versions ``smf_assurance.ops.runtimes.hermes_env``
  installs beside the pinned Hermes (the versions the conformance suites ran with).
- **The packaging gate** (a missing package-data file is caught): the gate's
  wheel and sdist must hold every file git knows under ``smf_assurance/`` (tracked,
  or untracked and not ignored) except the OpenClaw plugin's Node tree, and no Node
  file at all. A file the packaging configuration leaves out, or one deleted from the
  working tree, is named.
- **The OpenClaw tarball** is ``npm pack`` of the compiled plugin: the ``files`` list of
  its ``package.json`` (compiled JavaScript and ``openclaw.plugin.json``), its runtime
  dependencies bundled (``bundleDependencies``) because ``openclaw plugins install``
  of an archive runs ``npm install --omit=dev --ignore-scripts`` in the staged plugin
  (OpenClaw 2026.9.6, ``dist/install-package-dir-*.mjs``), which needs the registry
  unless they are already there: with them bundled it completes offline.

``python -m smf_tools.dist [--out DIR] [--only KIND]``: progress on stderr, a
table of what was written with sha256 digests on stdout (``--json`` for a script), a
non-zero exit with one line on failure.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import shutil
import subprocess
import sys
import tarfile
import tempfile
import tomllib
import zipfile
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Final, Literal

from smf_assurance.ops.cli.output import table
from smf_assurance.ops.runtimes.hermes_env import plugin_requirements

Kind = Literal["gate-wheel", "gate-sdist", "hermes-wheel", "openclaw-tgz"]
Progress = Callable[[str], None]

NAMESPACE: Final = "smf_assurance"
HERMES_DISTRIBUTION: Final = "smf-assurance-hermes"
HERMES_CONTENT: Final = (
    "smf_assurance/__init__.py",
    "smf_assurance/subjects/*.py",
    "smf_assurance/subjects/py.typed",
    "smf_assurance/adapters/__init__.py",
    "smf_assurance/adapters/py.typed",
    "smf_assurance/adapters/client.py",
    "smf_assurance/adapters/output.py",
    "smf_assurance/adapters/hermes/*.py",
    "smf_assurance/adapters/hermes/hooks/*.py",
)
"""The Hermes adapter distribution, the one place it is declared: the bus
contract, the two edge modules the plugin imports (``client``, ``output``) and the
plugin itself; no pipeline, ops, swarm, approver, connector SDK or Node file."""
HERMES_FORBIDDEN: Final = (
    "smf_assurance/pipeline/",
    "smf_assurance/ops/",
    "smf_assurance/swarm/",
    "smf_assurance/approver/",
    "smf_assurance/adapters/openclaw/",
    "smf_assurance/adapters/connector/",
    "smf_assurance/adapters/connectors/",
    "tests/",
)
OPENCLAW_TREE: Final = "smf_assurance/adapters/openclaw/"
"""The OpenClaw plugin: an npm package of its own, never content of a Python archive."""
CONSOLE_ASSETS: Final = "smf_assurance/approver/console/static/"
"""The approval console's browser files: JavaScript of ours that the gate serves."""
NODE_NAMES: Final = frozenset({"package.json", "package-lock.json", "openclaw.plugin.json"})
GATE_SOURCES: Final = ("pyproject.toml", "README.md", "smf_assurance")
BUILD_TIMEOUT_S: Final = 900.0


class DistError(Exception):
    """A distribution could not be built, or failed its check; one line for the operator."""


@dataclass(frozen=True, slots=True)
class Artifact:
    kind: Kind
    path: Path

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.path.read_bytes()).hexdigest()

    @property
    def size(self) -> int:
        return self.path.stat().st_size


def _stderr(line: str) -> None:
    sys.stderr.write(f"[dist] {line}\n")
    sys.stderr.flush()


def _run(args: Sequence[str], cwd: Path, what: str, env: dict[str, str] | None = None) -> str:
    """Run a build step; its output is shown only when it fails (the tail, one step)."""
    try:
        result = subprocess.run(
            list(args),
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=BUILD_TIMEOUT_S,
            check=False,
            env=env,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise DistError(f"{what}: {exc}") from exc
    if result.returncode != 0:
        tail = " | ".join((result.stdout + result.stderr).strip().splitlines()[-3:])
        raise DistError(f"{what} failed (exit {result.returncode}): {tail}")
    return result.stdout


def is_node_file(name: str) -> bool:
    """A file of the Node world: nothing of it belongs in a Python archive (the
    TypeScript compiler alone is megabytes no Python install needs)."""
    path = PurePosixPath(name)
    if name.startswith(CONSOLE_ASSETS):
        return False
    return (
        "node_modules" in path.parts
        or name.startswith(OPENCLAW_TREE)
        or path.name in NODE_NAMES
        or path.suffix in {".ts", ".js", ".mjs", ".cjs"}
    )


# ---- project metadata -------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ProjectMeta:
    version: str
    hermes_entry_points: dict[str, str]


def project_meta(project: Path) -> ProjectMeta:
    """The version and the Hermes entry point, read from the root ``pyproject.toml``,
    so the two distributions name the same plugin at the same version."""
    try:
        meta = tomllib.loads((project / "pyproject.toml").read_text(encoding="utf-8"))["project"]
        points = meta["entry-points"]["hermes_agent.plugins"]
        version = meta["version"]
    except (OSError, tomllib.TOMLDecodeError, KeyError, TypeError) as exc:
        raise DistError(
            f"{project}/pyproject.toml: no version or Hermes entry point ({exc})"
        ) from exc
    if not isinstance(version, str) or not isinstance(points, dict) or not points:
        raise DistError(f"{project}/pyproject.toml: no version or Hermes entry point")
    return ProjectMeta(version, {str(k): str(v) for k, v in points.items()})


def hermes_requirements() -> list[str]:
    """The adapter's dependencies, pinned exactly as ``hermes_env`` installs them beside
    the pinned Hermes; a dependency this environment lacks cannot be pinned, and an
    unpinned one would let pip pick a version no suite ran with: refused."""
    pins = plugin_requirements()
    loose = [pin for pin in pins if "==" not in pin]
    if loose:
        raise DistError(f"cannot pin {', '.join(loose)}: not installed in this environment")
    return pins


# ---- the Hermes adapter wheel -------------------------------------------------------


def hermes_files(project: Path) -> list[str]:
    """:data:`HERMES_CONTENT` expanded in ``project``; a pattern that matches nothing is
    a packaging error, not an empty package."""
    found: set[str] = set()
    for pattern in HERMES_CONTENT:
        matches = {p.relative_to(project).as_posix() for p in project.glob(pattern) if p.is_file()}
        if not matches:
            raise DistError(f"the Hermes adapter's {pattern} matches no file in {project}")
        found |= matches
    return sorted(found)


def _module_exists(root: Path, dotted: str) -> bool:
    path = root.joinpath(*dotted.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def unresolved_imports(root: Path, files: Iterable[str]) -> list[str]:
    """``file: module`` for every ``smf_assurance`` import in ``files`` (under ``root``)
    that names no module or package present under ``root``. ``from X import name``
    resolves when ``X.name`` is a module or ``X`` is."""
    missing: list[str] = []
    for name in files:
        if not name.endswith(".py"):
            continue
        tree = ast.parse((root / name).read_text(encoding="utf-8"), filename=name)
        for node in ast.walk(tree):
            wanted: list[tuple[str, ...]] = []
            if isinstance(node, ast.Import):
                wanted = [(alias.name,) for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                wanted = [(f"{node.module}.{alias.name}", node.module) for alias in node.names]
            for options in wanted:
                if options[0].split(".")[0] != NAMESPACE:
                    continue
                if not any(_module_exists(root, option) for option in options):
                    missing.append(f"{name}: {options[-1]}")
    return sorted(set(missing))


def _toml_list(values: Iterable[str]) -> str:
    return "[" + ", ".join(json.dumps(v) for v in values) + "]"


def hermes_pyproject(
    version: str, requirements: Sequence[str], meta: ProjectMeta, files: Sequence[str]
) -> str:
    """The staged project's ``pyproject.toml``: explicit packages (the folders of
    ``files`` holding an ``__init__.py``), no automatic discovery, ``py.typed`` only."""
    packages = sorted(
        {
            str(PurePosixPath(f).parent).replace("/", ".")
            for f in files
            if f.endswith("/__init__.py")
        }
    )
    points = "".join(
        f"{json.dumps(k)} = {json.dumps(v)}\n" for k, v in sorted(meta.hermes_entry_points.items())
    )
    return (
        '[build-system]\nrequires = ["setuptools>=65"]\nbuild-backend = "setuptools.build_meta"\n\n'
        f"[project]\nname = {json.dumps(HERMES_DISTRIBUTION)}\nversion = {json.dumps(version)}\n"
        'description = "SMF Assurance Gate adapter for Hermes Agent: the plugin and the bus'
        " contract only, for Hermes's own environment.\"\n"
        'requires-python = ">=3.11"\nlicense = { text = "Proprietary" }\n'
        f"dependencies = {_toml_list(requirements)}\n\n"
        f'[project.entry-points."hermes_agent.plugins"]\n{points}\n'
        f"[tool.setuptools]\npackages = {_toml_list(packages)}\ninclude-package-data = false\n\n"
        '[tool.setuptools.package-data]\n"*" = ["py.typed"]\n'
    )


def _copy(project: Path, files: Iterable[str], stage: Path) -> None:
    for name in files:
        target = stage / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(project / name, target)


def _build(stage: Path, kind: Literal["wheel", "sdist"], out: Path) -> Path:
    """Build ``stage`` into ``out``: the sdist with setuptools' PEP 517 backend of this
    environment, the wheel with ``pip wheel`` (it provides the ``wheel`` package that
    setuptools' ``bdist_wheel`` needs, from pip's configured index, as
    ``test_cli``'s installed-wheel test does)."""
    before = set(out.iterdir())
    if kind == "sdist":
        code = "import sys, setuptools.build_meta as b; b.build_sdist(sys.argv[1])"
        _run([sys.executable, "-c", code, str(out)], stage, "setuptools build_sdist")
    else:
        args = [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), "."]
        _run(args, stage, "pip wheel")
    made = sorted(set(out.iterdir()) - before)
    if len(made) != 1:
        raise DistError(f"building the {kind} wrote {len(made)} files, not one")
    return made[0]


def _wheel_metadata(wheel: zipfile.ZipFile, suffix: str) -> str:
    names = [n for n in wheel.namelist() if n.endswith(f".dist-info/{suffix}")]
    if len(names) != 1:
        raise DistError(f"{Path(str(wheel.filename)).name}: no single dist-info/{suffix}")
    return wheel.read(names[0]).decode("utf-8")


def check_hermes_wheel(
    wheel: Path, files: Sequence[str], requirements: Sequence[str], meta: ProjectMeta
) -> None:
    """The Hermes adapter wheel holds exactly :data:`HERMES_CONTENT` (nothing of the gate,
    no Node file, no tests), names the plugin's entry point and requires exactly the pins."""
    with zipfile.ZipFile(wheel) as archive:
        names = [n for n in archive.namelist() if ".dist-info/" not in n]
        forbidden = [n for n in names if n.startswith(HERMES_FORBIDDEN) or is_node_file(n)]
        if forbidden:
            raise DistError(
                f"{wheel.name} holds {forbidden[0]}, which the Hermes adapter must not ship"
            )
        missing = sorted(set(files) - set(names))
        extra = sorted(set(names) - set(files))
        if missing or extra:
            raise DistError(f"{wheel.name}: missing {missing[:3]}, unexpected {extra[:3]}")
        points = _wheel_metadata(archive, "entry_points.txt")
        metadata = _wheel_metadata(archive, "METADATA")
    for key, value in meta.hermes_entry_points.items():
        if f"{key} = {value}" not in points or "[hermes_agent.plugins]" not in points:
            raise DistError(f"{wheel.name}: entry point hermes_agent.plugins {key} missing")
    declared = sorted(
        line.split(":", 1)[1].strip()
        for line in metadata.splitlines()
        if line.startswith("Requires-Dist:")
    )
    if declared != sorted(requirements):
        raise DistError(f"{wheel.name}: requires {declared}, not the pins {sorted(requirements)}")


def build_hermes_wheel(project: Path, out: Path, progress: Progress = _stderr) -> Path:
    """Stage :data:`HERMES_CONTENT`, check its imports resolve inside it, build and check
    the ``smf-assurance-hermes`` wheel into ``out``."""
    meta = project_meta(project)
    requirements = hermes_requirements()
    files = hermes_files(project)
    with tempfile.TemporaryDirectory(prefix="smf-dist-hermes-") as tmp:
        stage = Path(tmp) / "project"
        _copy(project, files, stage)
        missing = unresolved_imports(stage, files)
        if missing:
            raise DistError(f"the Hermes adapter imports what it does not ship: {missing[0]}")
        (stage / "pyproject.toml").write_text(
            hermes_pyproject(meta.version, requirements, meta, files), encoding="utf-8"
        )
        progress(
            f"building {HERMES_DISTRIBUTION} {meta.version}: {len(files)} files, "
            f"requires {', '.join(requirements)}"
        )
        wheel = _build(stage, "wheel", out)
    check_hermes_wheel(wheel, files, requirements, meta)
    return wheel


# ---- the gate's wheel and sdist ------------------------------------------------------


def known_files(project: Path) -> list[str]:
    """What git knows under :data:`GATE_SOURCES`: tracked (even when deleted from the
    working tree, so a deletion is caught) and untracked files that are not ignored (so a
    new module ships before it is committed). Not a git work tree: refused, since the
    packaging gate would have nothing to compare with."""
    try:
        listing = subprocess.run(
            [
                "git",
                "ls-files",
                "-z",
                "--cached",
                "--others",
                "--exclude-standard",
                "--",
                *GATE_SOURCES,
            ],
            cwd=project,
            capture_output=True,
            timeout=60,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise DistError(f"git ls-files in {project}: {exc}") from exc
    if listing.returncode != 0:
        raise DistError(
            f"{project} is not a git work tree; the packaging gate compares with git's file list"
        )
    return sorted({n for n in listing.stdout.decode("utf-8").split("\0") if n})


def gate_content(known: Iterable[str]) -> list[str]:
    """Every file the gate's archives must hold: all of ``smf_assurance/`` but the
    OpenClaw plugin's Node tree and byte-code."""
    return sorted(
        n
        for n in known
        if n.startswith(f"{NAMESPACE}/")
        and not n.startswith(OPENCLAW_TREE)
        and "__pycache__" not in PurePosixPath(n).parts
    )


def check_gate_archive(archive: Path, names: Iterable[str], expected: Iterable[str]) -> None:
    """The packaging gate: every expected file is in ``archive``, named when
    one is not; and no Node file is."""
    present = set(names)
    node = sorted(n for n in present if is_node_file(n))
    if node:
        raise DistError(f"{archive.name} holds the Node file {node[0]}")
    missing = sorted(set(expected) - present)
    if missing:
        more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
        raise DistError(f"{archive.name} lacks {missing[0]}{more}")


def wheel_names(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as archive:
        return [n for n in archive.namelist() if not n.endswith("/")]


def sdist_names(sdist: Path) -> list[str]:
    """Member files of an sdist, without its ``name-version/`` top folder."""
    with tarfile.open(sdist) as archive:
        return [
            m.name.split("/", 1)[1] for m in archive.getmembers() if m.isfile() and "/" in m.name
        ]


def build_gate(project: Path, out: Path, progress: Progress = _stderr) -> tuple[Path, Path]:
    """The gate's sdist and wheel, built from a stage holding what git knows (never the
    checkout's build leftovers or the plugin's ``node_modules``), each through the
    packaging gate."""
    known = known_files(project)
    expected = gate_content(known)
    present = [n for n in known if (project / n).is_file()]
    with tempfile.TemporaryDirectory(prefix="smf-dist-gate-") as tmp:
        stage = Path(tmp) / "project"
        _copy(project, present, stage)
        progress(f"building smf-assurance sdist and wheel ({len(expected)} files)")
        sdist = _build(stage, "sdist", out)
        wheel = _build(stage, "wheel", out)
    check_gate_archive(sdist, sdist_names(sdist), expected)
    check_gate_archive(wheel, wheel_names(wheel), expected)
    return wheel, sdist


# ---- the OpenClaw plugin tarball -----------------------------------------------------


def _runtime_packages(lock: dict[str, object]) -> list[str]:
    """``node_modules/...`` paths of the lock that are not dev-only: what must be bundled."""
    packages = lock.get("packages")
    if not isinstance(packages, dict):
        raise DistError("package-lock.json has no packages")
    return sorted(
        path
        for path, entry in packages.items()
        if path.startswith("node_modules/") and not (isinstance(entry, dict) and entry.get("dev"))
    )


def check_openclaw_tgz(tgz: Path, plugin: Path) -> None:
    """The tarball holds the compiled plugin, its manifest and every runtime dependency of
    the lock, and nothing of the build: no TypeScript source, no tests, no
    devDependency; its ``package.json`` is publishable and bundles its dependencies."""
    lock = json.loads((plugin / "package-lock.json").read_text(encoding="utf-8"))
    with tarfile.open(tgz) as archive:
        names = {m.name.removeprefix("package/") for m in archive.getmembers() if m.isfile()}
        try:
            member = archive.extractfile("package/package.json")
        except KeyError:
            member = None
        if member is None:
            raise DistError(f"{tgz.name} has no package.json")
        manifest = json.loads(member.read())
    own = [n for n in names if not n.startswith("node_modules/")]
    source = sorted(
        n for n in own if n.endswith(".ts") or n.startswith(("src/", "test/", "dist-test/"))
    )
    if source:
        raise DistError(f"{tgz.name} holds the build input {source[0]}")
    dev = sorted(
        n
        for n in names
        for d in manifest.get("devDependencies", {})
        if n.startswith(f"node_modules/{d}/")
    )
    if dev:
        raise DistError(f"{tgz.name} holds the devDependency file {dev[0]}")
    if manifest.get("private"):
        raise DistError(f"{tgz.name}: package.json is private")
    if sorted(manifest.get("bundleDependencies", [])) != sorted(manifest.get("dependencies", {})):
        raise DistError(f"{tgz.name}: not every runtime dependency is bundled")
    required = ["dist/index.js", "openclaw.plugin.json"] + [
        f"{path}/package.json" for path in _runtime_packages(lock)
    ]
    absent = [n for n in required if n not in names]
    if absent:
        raise DistError(f"{tgz.name} lacks {absent[0]}")


def build_openclaw_tgz(project: Path, out: Path, progress: Progress = _stderr) -> Path:
    """Build the plugin (its ``scripts/build.sh``: pinned Node, ``npm ci``, ``tsc``), then
    ``npm pack`` it into ``out`` and check the tarball."""
    plugin = project / OPENCLAW_TREE
    progress("building the OpenClaw plugin (scripts/build.sh) and packing it")
    _run([str(plugin / "scripts" / "build.sh")], plugin, "scripts/build.sh")
    node_bin = _run([str(plugin / "scripts" / "node.sh")], plugin, "scripts/node.sh").strip()
    env = {
        "PATH": f"{node_bin}:/usr/bin:/bin",
        "HOME": str(Path.home()),
        "npm_config_update_notifier": "false",
        "npm_config_fund": "false",
        "npm_config_audit": "false",
    }
    packed = _run(
        ["npm", "pack", "--json", "--pack-destination", str(out)], plugin, "npm pack", env=env
    )
    try:
        (record,) = json.loads(packed)
        tgz = out / str(record["filename"])
    except (ValueError, KeyError, TypeError) as exc:
        raise DistError(f"npm pack printed no single package record ({exc})") from exc
    check_openclaw_tgz(tgz, plugin)
    return tgz


# ---- all of it -----------------------------------------------------------------------

KINDS: Final = ("gate", "hermes", "openclaw")


def build(
    project: Path, out: Path, only: Sequence[str] = KINDS, progress: Progress = _stderr
) -> list[Artifact]:
    """Build and check the chosen distributions in a temporary folder, then move them
    into ``out``; when any build or check fails, ``out`` is left as it was."""
    with tempfile.TemporaryDirectory(prefix="smf-dist-") as tmp:
        work = Path(tmp)
        made: list[Artifact] = []
        if "gate" in only:
            wheel, sdist = build_gate(project, work, progress)
            made += [Artifact("gate-wheel", wheel), Artifact("gate-sdist", sdist)]
        if "hermes" in only:
            made.append(Artifact("hermes-wheel", build_hermes_wheel(project, work, progress)))
        if "openclaw" in only:
            made.append(Artifact("openclaw-tgz", build_openclaw_tgz(project, work, progress)))
        out.mkdir(parents=True, exist_ok=True)
        placed = []
        for artifact in made:
            target = out / artifact.path.name
            shutil.move(artifact.path, target)
            placed.append(Artifact(artifact.kind, target))
    return placed


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m smf_tools.dist",
        description="Build the gate's wheel and sdist, the Hermes adapter wheel and the "
        "OpenClaw plugin tarball, check each, and list them with sha256 digests.",
    )
    parser.add_argument(
        "--project", type=Path, default=Path.cwd(), help="the checkout (default: .)"
    )
    parser.add_argument("--out", type=Path, help="where to write them (default: PROJECT/dist)")
    parser.add_argument(
        "--only", choices=KINDS, action="append", help="build only this one (repeatable)"
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args(argv)
    project = args.project.resolve()
    try:
        artifacts = build(project, args.out or project / "dist", args.only or KINDS)
    except (DistError, OSError) as exc:
        sys.stderr.write(f"dist: {' '.join(str(exc).split())}\n")
        return 1
    rows = [(a.kind, str(a.path), a.size, a.sha256) for a in artifacts]
    if args.json:
        keys = ("kind", "path", "bytes", "sha256")
        sys.stdout.write(json.dumps([dict(zip(keys, row, strict=True)) for row in rows]) + "\n")
    else:
        table(("kind", "file", "bytes", "sha256"), rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
