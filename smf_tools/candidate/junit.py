"""A JUnit XML report bound to the one commit it ran against, and its results per test.

The matrix takes a JUnit XML produced for exactly that SHA and
tree. A JUnit file says nothing of where it ran, so the suite names it: when
pytest writes a JUnit report from a clean working tree, ``tests/conftest.py``
adds two testsuite properties, :data:`SHA_PROPERTY` and :data:`TREE_PROPERTY`
(:func:`identity_properties`); from a dirty tree it adds none. A report is
read only when every testsuite in it names exactly the candidate's SHA and
tree: one naming another commit, or none, is refused (:class:`JUnitError`).
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Mapping
from pathlib import Path
from typing import Final, Literal

from smf_tools.candidate.source import Commit, clean_commit

SHA_PROPERTY: Final = "smf.candidate.sha"
TREE_PROPERTY: Final = "smf.candidate.tree"

MAX_JUNIT_BYTES: Final = 64 * 1024 * 1024
"""The whole suite's report is a few MB; a larger file is not one of ours."""

Outcome = Literal["passed", "failed", "error", "skipped", "missing"]
"""A test's result at the candidate; ``missing``: the report has no case for it."""

_WORST: Final[tuple[Outcome, ...]] = ("error", "failed", "skipped", "passed")


class JUnitError(Exception):
    """The report is unreadable or not bound to the candidate's commit."""


def identity_properties(root: Path) -> tuple[tuple[str, str], ...]:
    """The properties a test run records in its JUnit report: the SHA and tree of
    ``root``'s HEAD when its working tree is clean, nothing otherwise."""
    commit = clean_commit(root)
    if commit is None:
        return ()
    return ((SHA_PROPERTY, commit.sha), (TREE_PROPERTY, commit.tree))


def read_results(path: Path, commit: Commit) -> dict[tuple[str, str], list[Outcome]]:
    """``(classname, name)`` of every test case -> its outcomes (a case may be reported
    more than once, e.g. a failing teardown), after checking every testsuite names
    ``commit``'s SHA and tree."""
    try:
        with path.open("rb") as handle:
            data = handle.read(MAX_JUNIT_BYTES + 1)
    except OSError as exc:
        raise JUnitError(f"cannot read JUnit report {path}: {exc.strerror}") from exc
    if len(data) > MAX_JUNIT_BYTES:
        raise JUnitError(f"JUnit report {path} is larger than {MAX_JUNIT_BYTES} bytes")
    try:
        root = ET.fromstring(data)  # noqa: S314 - expat >= 2.4 bounds entity expansion
    except ET.ParseError as exc:
        raise JUnitError(f"JUnit report {path} is not XML: {exc}") from exc
    suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
    if root.tag not in ("testsuite", "testsuites") or not suites:
        raise JUnitError(f"JUnit report {path} has no testsuite")
    results: dict[tuple[str, str], list[Outcome]] = {}
    for suite in suites:
        _check_identity(path, suite, commit)
        for case in suite.iter("testcase"):
            key = (case.get("classname", ""), case.get("name", ""))
            results.setdefault(key, []).append(_outcome(case))
    return results


def outcome_of(node_id: str, results: Mapping[tuple[str, str], list[Outcome]]) -> Outcome:
    """The result of one test (``tests/test_x.py::Class::test_y``): the worst over its
    cases, parametrized ones included (``test_y[a]``); ``missing`` when none ran."""
    classname, function = case_of(node_id)
    found = [
        outcome
        for (case_class, name), outcomes in results.items()
        if case_class == classname and (name == function or name.startswith(function + "["))
        for outcome in outcomes
    ]
    if not found:
        return "missing"
    return next(worst for worst in _WORST if worst in found)


def case_of(node_id: str) -> tuple[str, str]:
    """The ``(classname, name)`` pytest's JUnit report gives the test ``node_id``
    (``tests/test_x.py::Class::test_y[a]`` -> ``("tests.test_x.Class", "test_y[a]")``)."""
    address, bracket, params = node_id.partition("[")  # a parameter may hold "::"
    path, _, rest = address.partition("::")
    *classes, name = rest.split("::")
    dotted = path.removesuffix(".py").replace("/", ".")
    return ".".join([dotted, *classes]), name + bracket + params


def _check_identity(path: Path, suite: ET.Element, commit: Commit) -> None:
    """Stops a report of another commit, or of a dirty tree, closing this one's rows."""
    named: dict[str, list[str]] = {}
    for prop in suite.findall("properties/property"):
        named.setdefault(prop.get("name", ""), []).append(prop.get("value", ""))
    for name, want in ((SHA_PROPERTY, commit.sha), (TREE_PROPERTY, commit.tree)):
        values = named.get(name, [])
        if not values:
            raise JUnitError(
                f"JUnit report {path} names no {name}: it was not run from a clean "
                "tree of this project"
            )
        if values != [want]:
            raise JUnitError(f"JUnit report {path} is for {name} {', '.join(values)}, not {want}")


def _outcome(case: ET.Element) -> Outcome:
    tags = {child.tag for child in case}
    if "error" in tags:
        return "error"
    if "failure" in tags:
        return "failed"
    if "skipped" in tags:
        return "skipped"
    return "passed"
