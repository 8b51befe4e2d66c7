"""The layering rules of ARCHITECTURE.md ("Layers of the code"), read from the code.

Every ``import`` and ``from ... import`` in every product module is read with
the ``ast`` module, including imports inside functions, and held against the
rules (every package named without the ``smf_assurance`` namespace):

- ``subjects/`` (the bus contract) imports nothing of ours;
- ``core/`` (the decision core) does no I/O: besides itself and ``subjects`` it
  imports only msgspec and pure standard-library modules;
- nothing outside ``ops/`` imports ``ops``, and nothing in the wheel imports the
  team's ``smf_tools/`` (they are not shipped);
- the adapters and the approver wing depend on ``subjects/`` (and themselves) only;
- Swarm uses ``subjects``, ``core`` and the service plumbing
  (``pipeline.service``), never the gate's chain, desks, stores or assembly;
- the gate's rooms stand in one order, each using only those below it:
  ``pipeline.stores`` (durable state and the evidence it holds) and
  ``pipeline.service`` (the request/reply plumbing) know no other room;
  ``pipeline.desks`` (answering people and runtimes) uses those two; the chain
  (``pipeline.chain``, the steps a proposal passes) may consult the desks;
  ``pipeline.followers`` (what follows bus state) may read the chain's and the
  desks' state; only ``pipeline.assembly`` builds a gate from them all;
- the model gateway (``gateway/``) is a process of its own that reaches the gate
  over the bus only: it never imports the chain, the desks or the followers;
- governance (releases, the corpus compiler, overlays) never imports the chain,
  the desks or the assembly: a release is made without a running gate;
- there is no import circle between product modules.

Also: a gate starts from ``pipeline`` alone, in an interpreter where ``ops``
cannot be imported at all.

The tests are sorted the same way, by what they need to run (``TEST_DIRS``):

- every test module lives in one of the declared directories of ``tests/``;
- ``tests/support/`` (what the tests share) holds no test module;
- no test module imports another: what two share lives in ``tests/support/`` or
  ``conftest.py``, so a test module can be moved, split or deleted alone;
- nothing in the wheel or the team's tools imports the tests.
"""

from __future__ import annotations

import ast
import dataclasses
import json
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import pytest

from smf_assurance.ops.local.natsserver import EmbeddedNatsServer
from smf_assurance.ops.local.state import StateDir, provision_demo
from smf_assurance.pipeline.chain.gate import Gate

ROOT: Final = Path(__file__).resolve().parents[2]
NAMESPACE: Final = "smf_assurance"
OURS: Final = (
    "subjects",
    "core",
    "pipeline",
    "gateway",
    "governance",
    "adapters",
    "approver",
    "swarm",
    "ops",
)
"""Our packages, named here without the ``smf_assurance.`` namespace they all live in."""
PURE_STDLIB: Final = frozenset(
    {
        "__future__",
        "abc",
        "base64",
        "bisect",
        "collections",
        "dataclasses",
        "enum",
        "functools",
        "hashlib",
        "hmac",
        "itertools",
        "json",
        "math",
        "operator",
        "re",
        "string",
        "typing",
        "unicodedata",
    }
)
"""What the pure core may import from the standard library: no file, socket,
process, thread, clock or event-loop module."""


def modules() -> Iterator[tuple[str, Path]]:
    for package in OURS:
        folder = ROOT / NAMESPACE / package
        if not folder.is_dir():
            continue
        for path in sorted(folder.rglob("*.py")):
            if "node_modules" in path.parts:
                continue
            parts = path.relative_to(ROOT / NAMESPACE).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            yield name, path


MODULES: Final = dict(modules())


def imported(name: str, path: Path) -> set[str]:
    """Every module ``path`` imports, anywhere in it, as absolute dotted names:
    ``from a import b`` counts as ``a.b`` when that is a module of ours, else as ``a``;
    ours without the namespace prefix."""
    found: set[str] = set()
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            for alias in node.names:
                child = _local(f"{target}.{alias.name}")
                found.add(child if child in MODULES else _local(target))
    return {_local(n) for n in found}


def _local(module: str) -> str:
    return module.removeprefix(NAMESPACE + ".")


def top(module: str) -> str:
    return module.split(".", 1)[0]


GRAPH: Final = {name: imported(name, path) for name, path in MODULES.items()}


def violations(prefix: str, allowed: tuple[str, ...], *, stdlib_only: bool = False) -> list[str]:
    """Imports of modules under ``prefix`` that are ours but not in ``allowed``
    (and, with ``stdlib_only``, third-party or standard modules not pure)."""
    bad = []
    for name, targets in GRAPH.items():
        if name != prefix and not name.startswith(prefix + "."):
            continue
        for target in targets:
            if top(target) in OURS:
                permitted = any(target == a or target.startswith(a + ".") for a in allowed)
            else:
                permitted = not stdlib_only or top(target) in PURE_STDLIB | {"msgspec"}
            if not permitted:
                bad.append(f"{name} -> {target}")
    return sorted(bad)


def test_subjects_import_nothing_of_ours() -> None:
    assert violations("subjects", ("subjects",)) == []


def test_the_core_does_no_io() -> None:
    assert (
        violations(
            "core",
            ("core", "subjects"),
            stdlib_only=True,
        )
        == []
    )


def test_nothing_outside_ops_imports_ops() -> None:
    bad = [
        f"{name} -> {target}"
        for name, targets in GRAPH.items()
        if top(name) != "ops"
        for target in targets
        if top(target) == "ops"
    ]
    assert bad == []


@pytest.mark.parametrize("edge", ["adapters", "approver"])
def test_the_edges_depend_on_the_contract_only(edge: str) -> None:
    assert violations(edge, (edge, "subjects")) == []


def test_swarm_uses_the_core_and_the_service_plumbing_only() -> None:
    allowed = ("swarm", "subjects", "core", "pipeline.service")
    assert violations("swarm", allowed) == []


def test_nothing_in_the_wheel_imports_the_teams_tools() -> None:
    bad = [
        f"{name} -> {target}"
        for name, targets in GRAPH.items()
        for target in targets
        if top(target) == "smf_tools"
    ]
    assert bad == []


BELOW: Final = ("core", "subjects")
"""What every room of the gate may use."""


@pytest.mark.parametrize(
    ("room", "allowed"),
    [
        ("pipeline.stores", (*BELOW, "pipeline.stores")),
        ("pipeline.service", ("subjects", "pipeline.service")),
        ("pipeline.desks", (*BELOW, "pipeline.stores", "pipeline.service", "pipeline.desks")),
        (
            "pipeline.chain",
            (*BELOW, "pipeline.stores", "pipeline.service", "pipeline.desks", "pipeline.chain"),
        ),
        (
            "pipeline.followers",
            (
                *BELOW,
                "pipeline.stores",
                "pipeline.service",
                "pipeline.desks",
                "pipeline.chain",
                "pipeline.followers",
            ),
        ),
    ],
)
def test_the_gates_rooms_use_only_the_rooms_below_them(room: str, allowed: tuple[str, ...]) -> None:
    assert violations(room, allowed) == []


@pytest.mark.parametrize(
    ("room", "never"),
    [
        ("gateway", ("pipeline.chain", "pipeline.desks", "pipeline.followers")),
        ("governance", ("pipeline.chain", "pipeline.desks", "pipeline.assembly", "gateway")),
    ],
)
def test_the_gateway_and_governance_stay_out_of_the_gate(room: str, never: tuple[str, ...]) -> None:
    bad = [
        f"{name} -> {target}"
        for name, targets in GRAPH.items()
        if name == room or name.startswith(room + ".")
        for target in targets
        if any(target == n or target.startswith(n + ".") for n in never)
    ]
    assert bad == []


def test_every_module_of_the_gate_sits_in_a_room() -> None:
    """The pipeline holds its rooms and the service plumbing, nothing loose."""
    rooms = ("assembly", "chain", "desks", "followers", "stores", "service", "mappers")
    loose = [
        n
        for n in MODULES
        if top(n) == "pipeline" and n != "pipeline" and n.split(".")[1] not in rooms
    ]
    assert loose == []


STORE_BACKENDS: Final = frozenset(
    {
        "ClaimStore",
        "KvClaimStore",
        "SqliteOrderBook",
        "KvOrderBook",
        "SqliteApprovalStore",
        "KvApprovalStore",
        "SqliteToolCallStore",
        "KvToolCallStore",
    }
)
"""The stores of one deployment or the other: asking which one an object is asks
which deployment runs."""


def deployment_questions(tree: ast.AST) -> list[str]:
    """Where a module asks which deployment it runs on: a read of ``.cluster`` (the
    config's choice) or an ``isinstance`` against one deployment's store, each named
    by the function it sits in."""
    found: list[str] = []

    def visit(node: ast.AST, where: str) -> None:
        for child in ast.iter_child_nodes(node):
            inside = where
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                inside = child.name
            if isinstance(child, ast.Attribute) and child.attr == "cluster":
                found.append(f"{inside}: .cluster")
            if (
                isinstance(child, ast.Call)
                and isinstance(child.func, ast.Name)
                and child.func.id == "isinstance"
                and any(
                    isinstance(n, ast.Name) and n.id in STORE_BACKENDS
                    for n in ast.walk(child.args[1])
                )
            ):
                found.append(f"{inside}: isinstance")
            visit(child, inside)

    visit(tree, "<module>")
    return found


def test_the_deployment_is_chosen_once() -> None:
    """One machine or a cluster is chosen in one place, ``deployment_for``; the chain
    and the rest of the assembly follow the object it returns and never ask again
    (``smf_assurance.pipeline.assembly.deployment``)."""
    asked = {
        f"{name}: {question}"
        for name, path in MODULES.items()
        if top(name) == "pipeline"
        for question in deployment_questions(ast.parse(path.read_text(), str(path)))
    }
    assert asked == {"pipeline.assembly.deployment: deployment_for: .cluster"}


def test_the_deployment_questions_are_found() -> None:
    source = textwrap.dedent(
        """
        def start(config, claims):
            if config.cluster is None:
                return 1
            return isinstance(claims, (ClaimStore, int))
        """
    )
    assert deployment_questions(ast.parse(source)) == ["start: .cluster", "start: isinstance"]


def test_the_gate_takes_no_optional_callable() -> None:
    """What differs between deployments reaches the chain as one object, not as
    callables a link must check for ``None`` before it calls them."""
    optional = [
        f.name
        for f in dataclasses.fields(Gate)
        if "Callable" in str(f.type) and "None" in str(f.type)
    ]
    assert optional == []


def import_circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every cycle a depth-first walk meets, as the modules on it (first repeated last).

    A package's ``__init__`` re-exporting its own modules is not counted: that
    is one concern's public face, not two concerns tied together.
    """
    edges = {n: {t for t in deps if t in graph and t != n} for n, deps in graph.items()}
    state: dict[str, int] = {}
    found: list[list[str]] = []

    def visit(node: str, trail: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(edges[node]):
            if state.get(nxt) == 1:
                found.append([*trail[trail.index(nxt) :], nxt])
            elif nxt not in state:
                visit(nxt, [*trail, nxt])
        state[node] = 2

    for name in sorted(edges):
        if name not in state:
            visit(name, [name])
    return [c for c in found if not (len(c) == 3 and _reexport(c))]


def _reexport(circle: list[str]) -> bool:
    a, b = circle[0], circle[1]
    return b.startswith(a + ".") or a.startswith(b + ".")


def test_there_is_no_import_circle() -> None:
    assert import_circles(GRAPH) == []


def test_the_circle_finder_finds_circles() -> None:
    graph = {"ops.a": {"ops.b"}, "ops.b": {"ops.c"}, "ops.c": {"ops.a"}, "ops": {"ops.a"}}
    assert import_circles(graph) == [["ops.a", "ops.b", "ops.c", "ops.a"]]
    assert import_circles({"p": {"p.m"}, "p.m": {"p"}}) == []


def test_the_rules_read_real_imports(tmp_path: Path) -> None:
    """A control: the reader sees imports inside functions and relative imports,
    and an import of the team's tools."""
    graph = GRAPH
    assert "pipeline.assembly.gate" in graph["pipeline.assembly"]
    assert "subjects.canonical" in graph["subjects.dsse"]
    assert any(t.startswith("pipeline.") for t in graph["ops.local.stack"])
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from smf_tools.mutation import runner\n")
    assert any(top(t) == "smf_tools" for t in imported("ops.m", module))


# --- a gate from pipeline alone ---------------------------------------------------

CHILD: Final = textwrap.dedent(
    """
    import asyncio, json, sys
    sys.modules["smf_assurance.ops"] = None  # any import of ops now raises ImportError
    from smf_assurance.pipeline.assembly import GateConfig, StorePaths, start_gate
    from smf_assurance.core.projection import build_policy_set, decode_enforcement
    from smf_assurance.subjects.keyed import PseudonymKey
    from smf_assurance.subjects.keys import load_private_key
    from smf_assurance.subjects.registry import load_registry
    from pathlib import Path

    async def main(paths):
        root = Path(paths["state"])
        key, _ = load_private_key(root / "keys" / "gate.key")
        enforcement = Path(paths["projection"]) / "enforcement.json"
        config = GateConfig(
            servers=(paths["url"],),
            gate_key=key,
            tenant_key=PseudonymKey((root / "keys" / "tenant-pseudonym.key").read_bytes()),
            registry=load_registry(root / "registry.json"),
            stores=StorePaths(root / "l.db", root / "c.db", root / "a.db"),
            policy=build_policy_set(decode_enforcement(enforcement.read_bytes())),
            co_located=True,
        )
        running = await start_gate(config)
        stats = [s.stats() for s in running.services]
        await running.close()
        print(json.dumps({"services": sorted(s.name for s in stats),
                          "ops_loaded": any(m.startswith("smf_assurance.ops")
                                            for m, v in sys.modules.items() if v is not None)}))

    asyncio.run(main(json.loads(sys.argv[1])))
    """
)


def test_a_gate_starts_from_pipeline_alone(tmp_path: Path, nats_server: EmbeddedNatsServer) -> None:
    from smf_assurance.governance.projections import SCENARIO_PROJECTION, package_path  # noqa: PLC0415

    state = StateDir(tmp_path / "state")
    provision_demo(state)
    paths = {
        "state": str(state.root),
        "url": nats_server.url,
        "projection": str(package_path(SCENARIO_PROJECTION)),
    }
    done = subprocess.run(
        [sys.executable, "-c", CHILD, json.dumps(paths)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report == {
        "services": [
            "smf-approvals",
            "smf-attest",
            "smf-gate",
            "smf-gate-status",
            "smf-gateway-admit",
            "smf-gateway-calls",
            "smf-holds",
            "smf-stages",
        ],
        "ops_loaded": False,
    }


def test_the_checkouts_root_holds_only_our_named_packages() -> None:
    """A Hermes process of a checkout has the checkout's root on its ``PYTHONPATH``
    (``smf_assurance.ops.runtimes.hermes_env``), ahead of Hermes's own packages; a
    top-level package with a common name (Hermes ships ``tools``, ``agent``, ...) would
    shadow Hermes's and take its tools away. Ours carry the ``smf_`` prefix, besides the
    test suite's own package (Hermes ships no ``tests``)."""
    packages = {p.name for p in ROOT.iterdir() if (p / "__init__.py").is_file()}
    assert packages == {"smf_assurance", "smf_tools", "tests"}
    assert not [p.name for p in ROOT.glob("*.py")]


# --- the tests' own layout --------------------------------------------------------

TESTS: Final = ROOT / "tests"
TEST_DIRS: Final = {
    "unit": "no server, no subprocess runtime",
    "bus": "real servers on 127.0.0.1: nats-server or a cluster, stores, the gate, desks",
    "cli": "the operator's command line, often against a running stack",
    "runtimes": "the Hermes and OpenClaw adapters, the real runtimes, confinement",
    "browser": "pages in headless Chromium",
    "tools": "the team's tools (smf_tools)",
}
"""Where a test module may live, and what a test there may need; ``support`` is where
what they share lives, next to ``conftest.py``."""


def python_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*.py") if "__pycache__" not in p.parts)


def is_test_module(module: str) -> bool:
    return module.startswith("tests.") and module.rpartition(".")[2].startswith("test_")


def imports_of_tests(path: Path) -> list[str]:
    """The test modules ``path`` imports, whichever way it is spelled: ``import
    tests.x.test_y``, ``from tests.x.test_y import z`` or ``from tests.x import test_y``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names if is_test_module(a.name)]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            if is_test_module(node.module):
                found.append(node.module)
            found += [
                f"{node.module}.{a.name}"
                for a in node.names
                if is_test_module(f"{node.module}.{a.name}")
            ]
    return found


def test_every_test_module_lives_in_a_declared_directory() -> None:
    misplaced = [
        str(p.relative_to(TESTS))
        for p in python_files(TESTS)
        if p.name.startswith("test_")
        and p.relative_to(TESTS).parts[0] not in TEST_DIRS
        and p.relative_to(TESTS).parts[0] not in ("data", "vectors")
    ]
    assert misplaced == []
    packages = [d for d in (*TEST_DIRS, "support") if not (TESTS / d / "__init__.py").is_file()]
    assert packages == [], "each directory is a package, so module names stay unique"


def test_support_holds_no_test_module() -> None:
    assert [p.name for p in python_files(TESTS / "support") if p.name.startswith("test_")] == []


def test_no_test_module_imports_another() -> None:
    bad = [
        f"{p.relative_to(ROOT)} -> {target}"
        for p in python_files(TESTS)
        for target in imports_of_tests(p)
    ]
    assert bad == []


def test_nothing_shipped_or_of_the_tools_imports_the_tests() -> None:
    bad = [
        f"{p.relative_to(ROOT)} -> {target}"
        for package in (NAMESPACE, "smf_tools")
        for p in python_files(ROOT / package)
        if "node_modules" not in p.parts
        for target in imported(p.stem, p)
        if top(target) == "tests"
    ]
    assert bad == []


def test_the_test_import_reader_sees_every_spelling(tmp_path: Path) -> None:
    """A control: each way of importing a test module is found, and support is not."""
    module = tmp_path / "m.py"
    module.write_text(
        "import tests.bus.test_a\n"
        "from tests.unit.test_b import x\n"
        "from tests.cli import test_c as c\n"
        "def f():\n    from tests.support.bus_helpers import wait_for\n"
    )
    assert imports_of_tests(module) == ["tests.bus.test_a", "tests.unit.test_b", "tests.cli.test_c"]
