"""Two checkouts never share one mutable Hermes install (the brief: "cache
runtime installs per user, keyed by the pinned version, and never let two checkouts
share one mutable install").

Proves: with the shared, pinned Hermes venv in place, preparing it for two different
checkouts changes no file in it, and a Python process of that venv with each
checkout's ``PYTHONPATH`` finds that checkout's plugin entry point and imports that
checkout's code, not the other's. Before, the second checkout reinstalled itself
(editable) into the shared venv, and the first checkout's Hermes then ran the second
checkout's plugin. Does not prove: anything about a Hermes run (the conformance
modules run Hermes this way).
"""

from __future__ import annotations

import json
import os
import subprocess
import tomllib
from pathlib import Path

from smf_assurance.ops.runtimes.hermes_env import (
    SURFACE_PACKAGES,
    _pins_key,
    default_env_dir,
    ensure_hermes_env,
    plugin_requirements,
)
from tests.support.surface_matrix import ROOT

PROBE = (
    "import importlib.metadata as m, json, smf_assurance.adapters as adapters\n"
    "points = [(e.name, e.value) for e in m.entry_points(group='hermes_agent.plugins')]\n"
    "print(json.dumps({'points': points, 'adapters': adapters.__file__}))\n"
)


def checkout(folder: Path, version: str) -> Path:
    """A stand-in checkout: our pyproject under another version, and an
    ``smf_assurance.adapters`` package that says which checkout it is."""
    folder.mkdir()
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    points = meta["entry-points"]["hermes_agent.plugins"]
    lines = [
        "[project]",
        f'name = "{meta["name"]}"',
        f'version = "{version}"',
        '[project.entry-points."hermes_agent.plugins"]',
        *(f'{key} = "{value}"' for key, value in points.items()),
    ]
    (folder / "pyproject.toml").write_text("\n".join(lines) + "\n")
    (folder / "smf_assurance" / "adapters").mkdir(parents=True)
    (folder / "smf_assurance" / "__init__.py").write_text("")
    (folder / "smf_assurance" / "adapters" / "__init__.py").write_text(f"CHECKOUT = {version!r}\n")
    return folder


def listing(root: Path) -> dict[str, tuple[int, int]]:
    """Every file of the shared venv with its size and modification time."""
    found = {}
    for path in root.rglob("*"):
        if path.is_file() and "__pycache__" not in path.parts:
            info = path.stat()
            found[str(path.relative_to(root))] = (info.st_size, info.st_mtime_ns)
    return found


def test_two_checkouts_share_the_pinned_venv_without_changing_it(tmp_path: Path) -> None:
    ensure_hermes_env(ROOT)  # the shared venv exists (installed once per user)
    first, second = checkout(tmp_path / "a", "1.0.1"), checkout(tmp_path / "b", "1.0.2")
    env_first = ensure_hermes_env(first)
    before = listing(env_first.root)
    env_second = ensure_hermes_env(second)
    assert env_second.root == env_first.root
    assert listing(env_first.root) == before  # nothing in the shared venv changed
    for project, env in ((first, env_first), (second, env_second)):
        assert env.overlay.is_relative_to(project)
        done = subprocess.run(
            [str(env.python), "-c", PROBE],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=tmp_path,
            env={"PATH": os.defpath, "PYTHONPATH": env.pythonpath, "HOME": str(tmp_path)},
            check=False,
        )
        assert done.returncode == 0, done.stderr[-2000:]
        seen = json.loads(done.stdout)
        assert seen["points"] == [["smf-assurance", "smf_assurance.adapters.hermes.plugin"]]
        assert Path(seen["adapters"]).is_relative_to(project)


def test_the_surfaces_venv_is_a_folder_of_its_own() -> None:
    """The packages that drive Hermes's other surfaces (the MCP SDK,
    python-telegram-bot) go into a venv whose name covers them, never into the
    shared one; the conformance modules' venv is named as before."""
    base, surfaces = default_env_dir(), default_env_dir(surfaces=True)
    assert base != surfaces
    assert base.name.endswith(_pins_key(plugin_requirements()))
    assert surfaces.name.endswith(_pins_key([*plugin_requirements(), *SURFACE_PACKAGES]))
    assert all("==" in pin for pin in SURFACE_PACKAGES)  # pinned, as Hermes pins them
