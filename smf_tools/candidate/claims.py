"""The claims the product makes, declared once, and the tests that say they prove them.

Claims in the tests: each claim is declared once in
``docs/claims.toml`` (id, gate family, sentence, what it does not prove, and
the implementation files it covers); a test proves a claim only by saying so
in code, ``@pytest.mark.claim("family.name")``. Both are read here, without
importing or running anything, so a claim whose only test was deleted is seen
as having none.
"""

from __future__ import annotations

import ast
import re
import tomllib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Final

import msgspec

CLAIMS_FILE: Final = Path("docs") / "claims.toml"
"""Where the claims are declared, relative to the project's root."""

FAMILIES: Final = (
    "canonical-identities",
    "monotonic-policy",
    "projection-integrity",
    "exact-action-approval",
    "runtime-block-hermes",
    "runtime-hold-openclaw",
    "output-gating",
    "release-state",
    "protected-evidence",
    "swarm-traceability",
    "bus-access",
    "model-gateway",
    "packaging",
    "performance-budgets",
    "approver-desk",
    "notifications",
    "onboarding",
    "bypass-matrix",
    "confinement",
    "verdict-agrees",
)
"""The gate families: the trust core's, and the product's surfaces (the
approver's desk, its notifications, onboarding, the bypass matrix: every bypass
case the docs name, run as one suite by ``make bypass``, the confinement of
runtimes by ``runtime run``, and what a runtime is told agreeing with what its
connectors do: one order deadline, no order behind a requester that stopped
waiting, recorded verdicts)."""

_ID: Final = re.compile(r"^[a-z0-9-]+\.[a-z0-9-]+(?:\.[a-z0-9-]+)*$")


class ClaimsError(Exception):
    """The claims file, or a test's claim marker, is not what it must be."""


class Claim(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One sentence the product says of itself, and where it is built."""

    id: str
    family: str
    sentence: str
    not_proven: str
    covers: tuple[str, ...] = ()
    """Implementation paths (globs, relative to the root) the claim rests on:
    a review goes stale when one of them changes."""


class _File(msgspec.Struct, forbid_unknown_fields=True):
    claim: tuple[Claim, ...]


def load_claims(path: Path) -> tuple[Claim, ...]:
    """Every declared claim in the file at ``path`` (see :func:`decode_claims`)."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ClaimsError(f"cannot read {path}: {exc.strerror}") from exc
    return decode_claims(text, str(path))


def decode_claims(text: str, path: str) -> tuple[Claim, ...]:
    """Every claim declared in ``text`` (read from ``path``, a file or a commit's copy);
    refuses an unknown family, a malformed or repeated id, an id outside its family,
    an empty sentence or an empty ``not_proven``."""
    try:
        claims = msgspec.convert(tomllib.loads(text), _File).claim
    except (tomllib.TOMLDecodeError, msgspec.ValidationError) as exc:
        raise ClaimsError(f"{path}: {exc}") from exc
    seen: set[str] = set()
    for claim in claims:
        if not _ID.match(claim.id):
            raise ClaimsError(f"{path}: claim id {claim.id!r} is not family.name")
        if claim.family not in FAMILIES:
            raise ClaimsError(f"{path}: {claim.id}: unknown family {claim.family!r}")
        if claim.id.split(".", 1)[0] != claim.family:
            raise ClaimsError(f"{path}: {claim.id}: the id must start with its family")
        if claim.id in seen:
            raise ClaimsError(f"{path}: claim {claim.id} is declared twice")
        if not claim.sentence.strip() or not claim.not_proven.strip():
            raise ClaimsError(f"{path}: {claim.id}: sentence and not_proven must say something")
        seen.add(claim.id)
    return claims


def claimed_tests(root: Path, tests: str = "tests") -> dict[str, tuple[str, ...]]:
    """Claim id -> the test node ids (``tests/test_x.py::test_y``, or
    ``tests/test_x.py::Class::test_y``) that carry its marker, read from the source.

    A module's ``pytestmark`` marks every test function of that module."""
    found: dict[str, list[str]] = {}
    for path in sorted((root / tests).rglob("test_*.py")):
        relative = path.relative_to(root).as_posix()
        tree = ast.parse(path.read_text(encoding="utf-8"), relative)
        module_claims = _module_claims(tree)
        for node_id, claims in _marked(tree.body, relative):
            for claim in (*module_claims, *claims):
                found.setdefault(claim, []).append(node_id)
    return {claim: tuple(dict.fromkeys(ids)) for claim, ids in sorted(found.items())}


def covered(path: str, globs: Iterable[str]) -> bool:
    """Whether ``path`` (relative, ``/``-separated) matches one of a claim's ``covers``
    globs: ``*`` and ``?`` stay inside one path segment, ``**`` spans segments."""
    return any(_glob(pattern).fullmatch(path) for pattern in globs)


def _glob(pattern: str) -> re.Pattern[str]:
    parts: list[str] = []
    index = 0
    while index < len(pattern):
        if pattern.startswith("**/", index):
            parts.append("(?:.*/)?")
            index += 3
        elif pattern.startswith("**", index):
            parts.append(".*")
            index += 2
        elif pattern[index] == "*":
            parts.append("[^/]*")
            index += 1
        elif pattern[index] == "?":
            parts.append("[^/]")
            index += 1
        else:
            parts.append(re.escape(pattern[index]))
            index += 1
    return re.compile("".join(parts))


def test_node_ids(root: Path, relative: str) -> tuple[str, ...]:
    """Every test node id the file ``relative`` (under ``root``) defines, read from its
    source; none when it does not exist."""
    path = root / relative
    if not path.is_file():
        return ()
    tree = ast.parse(path.read_text(encoding="utf-8"), relative)
    return tuple(node_id for node_id, _ in _marked(tree.body, relative))


def undeclared(claims: Iterable[Claim], marked: Mapping[str, object]) -> list[str]:
    """Marker ids that name no declared claim: a typo must not prove nothing silently."""
    declared = {c.id for c in claims}
    return sorted(set(marked) - declared)


def _claim_ids(node: ast.expr) -> list[str]:
    """The ids of a ``pytest.mark.claim("a", "b")`` call (or a list of marks)."""
    if isinstance(node, ast.List | ast.Tuple):
        return [i for element in node.elts for i in _claim_ids(element)]
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "claim"
    ):
        ids = [a.value for a in node.args if isinstance(a, ast.Constant)]
        if len(ids) != len(node.args) or not all(isinstance(i, str) for i in ids):
            raise ClaimsError(f"line {node.lineno}: a claim marker names ids as string literals")
        return [str(i) for i in ids]
    return []


def _module_claims(tree: ast.Module) -> list[str]:
    ids: list[str] = []
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "pytestmark" for t in node.targets
        ):
            ids.extend(_claim_ids(node.value))
    return ids


def _marked(body: list[ast.stmt], prefix: str) -> Iterable[tuple[str, list[str]]]:
    for node in body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith(
            "test"
        ):
            yield (
                f"{prefix}::{node.name}",
                [i for decorator in node.decorator_list for i in _claim_ids(decorator)],
            )
        elif isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
            own = [i for decorator in node.decorator_list for i in _claim_ids(decorator)]
            for node_id, claims in _marked(node.body, f"{prefix}::{node.name}"):
                yield node_id, [*own, *claims]
