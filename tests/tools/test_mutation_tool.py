"""The mutation tool itself (smf_tools/mutation/, ``make mutate``).

Proves: each operator makes the one change it names and nothing is mutated
where the tool says it skips (docstrings, messages, logging, ``__repr__``,
import-time self-checks, out-of-scope code); a mutant changes exactly its
span and still compiles; a real mutant run against real tests kills what
the tests catch, lets survive what they do not and leaves lines no test runs
uncovered; the report fails on a module below 90 % and on a survivor nobody
reviewed.
"""

from __future__ import annotations

import ast
import dataclasses
import textwrap
from pathlib import Path

import pytest

from smf_tools.mutation import record
from smf_tools.mutation.cli import main, report
from smf_tools.mutation.operators import OPERATORS, Mutant, mutants_in, mutants_of
from smf_tools.mutation.reviewed import EQUIVALENT
from smf_tools.mutation.runner import (
    Baseline,
    Result,
    Run,
    Status,
    importing_tests,
    reading_lines,
    run,
)
from smf_tools.mutation.targets import (
    DERIVED_MARGIN_S,
    FROZEN_CONTRACT,
    SMOKE,
    TARGETS,
    TIMEOUT_FACTOR,
    TIMEOUT_MARGIN_S,
    Smoke,
    Target,
)

SAMPLE = Target("sample", "pkg.sample", ("tests/test_sample.py",))


def mutants(source: str, target: Target = SAMPLE) -> list[Mutant]:
    return mutants_in(target, textwrap.dedent(source).encode())


def changes(source: str, target: Target = SAMPLE) -> set[tuple[str, str, str]]:
    return {(m.operator, m.original, m.mutated) for m in mutants(source, target)}


def test_comparisons_booleans_and_conditions() -> None:
    found = changes(
        """
        def check(a, b, c):
            if a == b and not c:
                raise ValueError("refused")
            return a in (1, 2)
        """
    )
    assert ("cmp", "a == b", "a != b") in found
    assert ("boolop", "a == b and not c", "a == b or not c") in found
    assert ("drop-operand", "a == b and not c", "not c") in found
    assert ("drop-operand", "a == b and not c", "a == b") in found
    assert ("not", "not c", "c") in found
    assert ("if-true", "a == b and not c", "True") in found
    assert ("if-false", "a == b and not c", "False") in found
    assert ("raise", 'raise ValueError("refused")', "pass") in found
    assert ("return", "return a in (1, 2)", "return None") in found
    assert ("cmp", "a in (1, 2)", "a not in (1, 2)") in found
    assert ("drop-element", "(1, 2)", "(2,)") in found
    assert ("int", "1", "2") in found
    assert not any("refused" in mutated for _, _, mutated in found)  # messages stay


def test_constants_calls_and_arithmetic() -> None:
    found = changes(
        """
        LIMIT = 2**53 - 1
        KINDS = frozenset({"a", "b"})
        TABLE = {"x": 1, "y": 2}

        class Message(Base, frozen=True, forbid_unknown_fields=True):
            count: Annotated[int, Meta(ge=1)] | None

        def later(now, skew, seen, revoked):
            touch(now)
            keep = max(now, skew) + skew
            return (seen | revoked) - revoked
        """
    )
    assert ("int", "2**53 - 1", str(2**53)) in found
    assert ("int", "2**53 - 1", str(2**53 - 2)) in found
    assert ("drop-element", '{"a", "b"}', "{'b'}") in found
    assert ("drop-entry", '{"x": 1, "y": 2}', "{'y': 2}") in found
    assert ("bool", "frozen=True", "frozen=False") in found
    assert ("bool", "forbid_unknown_fields=True", "forbid_unknown_fields=False") in found
    assert ("int", "ge=1", "ge=0") in found
    assert not any(o == "drop-right" and "None" in m for o, _, m in found)  # types are types
    assert ("stmt", "touch(now)", "pass") in found
    assert ("call", "max(now, skew)", "min(now, skew)") in found
    assert ("arith", "max(now, skew) + skew", "max(now, skew) - skew") in found
    assert ("set-op", "seen | revoked", "seen & revoked") in found
    assert ("drop-right", "(seen | revoked) - revoked", "seen | revoked") in found


def test_a_class_decorators_frozen_flag_is_flipped_and_nothing_else_of_it() -> None:
    """``@dataclass(frozen=True)`` unfrozen is a verified value that can be changed
    after its check; the mutant must exist so a test has to notice it (issue 40)."""
    found = mutants(
        """
        @dataclass(frozen=True, slots=True)
        class Verified:
            sequence: int

        @dataclasses.dataclass(slots=True, frozen=False)
        class Draft:
            sequence: int

        @final
        class Plain:
            pass
        """
    )
    flags = {(m.scope, m.operator, m.original, m.mutated) for m in found}
    assert flags == {
        ("Verified", "bool", "frozen=True", "frozen=False"),
        ("Draft", "bool", "frozen=False", "frozen=True"),
    }
    verified = next(m for m in found if m.scope == "Verified")
    source = textwrap.dedent(
        """
        @dataclass(frozen=True, slots=True)
        class Verified:
            sequence: int
        """
    ).encode()
    assert b"@dataclass(frozen=False, slots=True)" in verified.apply(source)


def test_a_decorator_out_of_scope_is_not_mutated() -> None:
    scoped = Target("sample", "pkg.sample", ("tests/test_sample.py",), scope=("Kept",))
    found = changes(
        """
        @dataclass(frozen=True)
        class Kept:
            pass

        @dataclass(frozen=True)
        class Other:
            pass
        """,
        scoped,
    )
    assert found == {("bool", "frozen=True", "frozen=False")}
    assert len(mutants("@dataclass(frozen=True)\nclass Kept:\n    pass\n", scoped)) == 1


def test_sql_where_clauses_are_dropped_one_at_a_time() -> None:
    found = changes(
        '''
        CLAIM = """UPDATE t SET state = :target
        WHERE id = :id AND state = :source AND digest = :digest
        RETURNING *"""
        '''
    )
    dropped = {m for o, _, m in found if o == "sql-clause"}
    assert dropped == {
        "drop `id = :id`",
        "drop `state = :source`",
        "drop `digest = :digest`",
    }


def test_what_is_skipped_is_not_mutated() -> None:
    source = '''
    """Module docstring with == and True."""
    import logging

    log = logging.getLogger(__name__)

    if set(A) != set(B):
        raise RuntimeError("inconsistent tables")

    def documented(value):
        """A docstring: if x == 1 then True."""
        log.info("seen", count=value + 1, flag=True)
        _log_refusal(value == 2)
        message = f"{value + 1} items"
        raise ValueError(f"bad {value == 3}", 1 + 1)

    class Shown:
        def __repr__(self):
            return "x" if self.a == 1 else "y"

    class Node:
        def test3(self, facts):
            raise NotImplementedError
    '''
    assert changes(source) == {("raise", 'raise ValueError(f"bad {value == 3}", 1 + 1)', "pass")}


def test_the_scope_limits_mutants_to_the_named_code() -> None:
    scoped = Target("sample", "pkg.sample", ("tests/test_sample.py",), scope=("Desk.check", "K"))
    source = """
    K = True
    J = True

    class Desk(Base, frozen=True):
        def check(self, a):
            return a == 1

        def other(self, a):
            return a == 2

    def free(a):
        return a == 3
    """
    assert {(m.scope, m.original) for m in mutants(source, scoped) if m.operator != "return"} == {
        ("K", "True"),
        ("Desk.check", "a == 1"),
        ("Desk.check", "1"),
    }


def test_a_mutant_changes_only_its_span_and_compiles() -> None:
    source = textwrap.dedent(
        """
        def check(a, b):
            # caf\u00e9: multi-byte text before the change must not shift it
            return a <= b
        """
    ).encode()
    (mutant,) = [m for m in mutants_in(SAMPLE, source) if m.operator == "cmp"]
    changed = mutant.apply(source)
    assert changed == source.replace(b"a <= b", b"(a < b)")
    ast.parse(changed)
    assert mutant.line == 4
    assert mutant.label() == "pkg/sample.py:4  cmp  a <= b  ->  a < b"


def test_every_operator_is_documented() -> None:
    assert set(OPERATORS) >= {m.operator for m in mutants("def f(a):\n    return a == 1\n")}


# --- a real run --------------------------------------------------------------------------

KEYED = Target(
    "keyed",
    "smf_assurance.subjects.keyed",
    ("tests/unit/test_keyed.py::test_empty_domain_message",),
)
"""The real keyed-identifier module against one real test: an empty domain is refused."""


def test_a_real_run_kills_what_the_tests_catch_and_reports_the_rest() -> None:
    outcome = run(
        [KEYED],
        jobs=1,
        match=[
            "keyed.py:27  raise",  # the empty-domain refusal removed: the test fails
            "keyed.py:18  int  32  ->  31",  # a shorter minimum key: the test cannot tell
            "keyed.py:36  int  8  ->  9",  # framing: the test never reaches it
        ],
    )
    assert outcome.broken == {}
    status = {r.mutant.line: r.status for r in outcome.results}
    assert status == {27: "killed", 18: "survived", 36: "uncovered"}
    assert report([KEYED], outcome, 1.0) is False


def test_an_unmutated_failure_means_the_module_is_not_scored() -> None:
    broken = Target(
        "keyed", "smf_assurance.subjects.keyed", ("tests/unit/test_keyed.py::no_such_test",)
    )
    outcome = run([broken], jobs=1, match=["keyed.py:27  raise"])
    assert "keyed" in outcome.broken
    assert outcome.results == []
    assert report([broken], outcome, 1.0) is False


def test_an_unmutated_failure_of_the_pool_means_no_derived_module_is_scored() -> None:
    keyed = Target("keyed", "smf_assurance.subjects.keyed")
    outcome = run(
        [keyed], jobs=1, match=["keyed.py:27  raise"], pool=["tests/unit/test_keyed.py::nope"]
    )
    assert "keyed" in outcome.broken
    assert outcome.results == []


# --- which tests a mutant runs (issue 40: derived from coverage, not hand lists) ----------------

_FAST, _SLOW, _OTHER = "tests/unit/test_a.py::test_fast", "tests/bus/test_b.py::test_slow", "t::o"
_FROZEN_TEST = f"{FROZEN_CONTRACT}::test_every_value_type_is_frozen"
_DURATIONS = {_FAST: 0.5, _SLOW: 20.0, _OTHER: 12.0, _FROZEN_TEST: 0.1}


def _at(line: int, original: str = "a == 1") -> Mutant:
    mutant = next(m for m in mutants("def f(a):\n    return a == 1\n") if m.operator == "cmp")
    return dataclasses.replace(mutant, line=line, end_line=line, original=original)


def test_a_mutant_runs_the_tests_of_its_line_fastest_first_within_the_budget() -> None:
    by_line = {
        3: frozenset({_SLOW, _FAST, _OTHER}),
        4: frozenset({""}),
        5: frozenset({_SLOW}),
        9: frozenset({_FROZEN_TEST}),
    }
    derived = Baseline(60.0, _DURATIONS, by_line, budget_s=15.0)
    assert derived.tests_for(_at(3)) == [_FAST, _OTHER]  # 0.5 + 12; the 20 s one is past 15
    assert derived.tests_for(_at(5)) == [_SLOW]  # the first always runs, whatever it costs
    # Run only at import: every test that runs the module, fastest first, budgeted.
    assert derived.covers(_at(4))
    assert derived.tests_for(_at(4)) == [_FROZEN_TEST, _FAST, _OTHER]
    # Seen run by nothing: the same, and not covered (a survivor is "uncovered").
    assert not derived.covers(_at(7))
    assert derived.tests_for(_at(7)) == [_FROZEN_TEST, _FAST, _OTHER]
    # A frozen= flag runs the frozen contract first, whatever its line's coverage.
    assert derived.tests_for(_at(5, "frozen=True")) == [_FROZEN_TEST, _SLOW]
    assert derived.timeout_for([_FAST, _OTHER]) == 12.5 * TIMEOUT_FACTOR + DERIVED_MARGIN_S


def test_a_line_run_only_at_import_runs_the_tests_of_the_files_importing_its_module() -> None:
    """A Struct field's bounds are checked by a test that decodes it, which runs no line
    of the module: the files that import the module are where such tests are, beside
    those that run it (a decision's Struct, checked where a stage decodes it)."""
    importer = "tests/unit/test_keyed.py::test_empty_domain_message"
    found = importing_tests("smf_assurance.subjects.keyed", [importer, _FAST])
    assert found == {importer}  # test_keyed.py imports it; the made-up file reads as none
    by_line = {3: frozenset({_SLOW}), 4: frozenset({""})}
    derived = Baseline(60.0, {**_DURATIONS, importer: 0.2}, by_line, 25.0, found)
    assert derived.tests_for(_at(4)) == [importer, _SLOW]  # and those that run the module
    assert derived.tests_for(_at(3)) == [_SLOW]


def test_a_constant_runs_the_tests_of_the_lines_reading_it_first() -> None:
    """Issue 40: ``MAX_CALLS_BYTES = 64 * 1024`` runs only at import; its killer (the
    64 KiB case) runs the line that compares with it, but came after 42 s of faster
    tests of the module. The lines reading a module-level name put their tests first,
    then the module's others, within the same budget."""
    source = (
        b"LIMIT: int = 4\n"  # 1
        b"A, B = 1, (\n"  # 2
        b"    2)\n"  # 3
        b"OTHER = LIMIT + 1\n"  # 4: read at import
        b"def f(n):\n"  # 5
        b"    return n > LIMIT\n"  # 6
        b"def g():\n"  # 7
        b"    return B, A\n"  # 8
    )
    readers = reading_lines(source)
    assert readers == {1: {4, 6}, 2: {8}, 3: {8}}  # OTHER is read by nobody
    by_line = {
        1: frozenset({""}),
        4: frozenset({""}),
        6: frozenset({_SLOW}),
        7: frozenset({_FAST, _OTHER}),
    }
    derived = Baseline(60.0, _DURATIONS, by_line, budget_s=25.0, readers=readers)
    assert derived.tests_for(_at(1)) == [_SLOW, _FAST]  # its reader first, then the fastest
    assert derived.tests_for(_at(4)) == [_FAST, _OTHER]  # no reader: as before
    assert derived.tests_for(_at(6)) == [_SLOW]  # a line run after import: its own tests


def test_a_target_that_names_its_tests_runs_all_that_run_the_line() -> None:
    named = Baseline(60.0, _DURATIONS, {3: frozenset({_SLOW, _FAST, _OTHER})})
    assert named.tests_for(_at(3)) == [_FAST, _OTHER, _SLOW]
    assert named.tests_for(_at(4)) == [_FROZEN_TEST, _FAST, _OTHER, _SLOW]  # all of them
    assert named.timeout_for([_FAST]) == 60.0 * TIMEOUT_FACTOR + TIMEOUT_MARGIN_S


def test_no_module_of_make_mutate_names_its_tests() -> None:
    """Issue 40: each module's tests are derived from coverage; only the smoke's
    targets name one test each, the one that must kill their mutant."""
    assert all(target.derived for target in TARGETS)
    assert all(len(smoke.target.tests) == 1 for smoke in SMOKE)


# --- the report ------------------------------------------------------------------------------


def _result(status: Status, line: int) -> Result:
    mutant = next(m for m in mutants("def f(a):\n    return a == 1\n") if m.operator == "cmp")
    return Result(dataclasses.replace(mutant, line=line, start=line), status, 0.1, 1)


def test_the_gate_needs_90_percent_and_every_survivor_reviewed(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    nine = [_result("killed", n) for n in range(9)]
    survivor = _result("survived", 99)
    assert report([SAMPLE], Run(results=[*nine, survivor]), 60.0) is False
    out = capsys.readouterr().out
    assert "90.0%" in out
    assert "NOT REVIEWED" in out
    monkeypatch.setitem(EQUIVALENT, survivor.mutant.key, "equivalent: the fixture says so")
    assert report([SAMPLE], Run(results=[*nine, survivor]), 60.0) is True
    assert "reviewed, equivalent: the fixture says so" in capsys.readouterr().out
    eight = [_result("killed", n) for n in range(8)] + [_result("timeout", 8)]
    below = Run(results=[*eight[:7], survivor, _result("uncovered", 98), eight[8]])
    assert report([SAMPLE], below, 60.0) is False


def test_list_prints_every_mutant_of_a_module(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--list", "--module", "keyed"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("# keyed (smf_assurance/subjects/keyed.py):")
    assert "smf_assurance/subjects/keyed.py:27  raise" in out


def test_make_mutate_passes_when_every_survivor_is_reviewed(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``make mutate`` end to end on one module, its tests derived from coverage of a
    narrowed pool, here narrowed to one mutant they kill: exit status 0 and the
    module's score line."""
    narrowed = ["--pool", "tests/unit/test_keyed.py", "--match", "keyed.py:27  raise"]
    assert main(["--module", "keyed", "--jobs", "1", *narrowed]) == 0
    out = capsys.readouterr().out
    assert "keyed" in out
    assert "100.0%" in out
    assert "survivors: 0" in out


# -- the figures as measured, and docs/MUTATION.md's table made from them ----------------------


def test_the_latest_run_table_is_what_the_saved_runs_say() -> None:
    """docs/MUTATION.md's "Latest run" is generated from docs/mutation-runs.json
    (``make mutate MUTATE_ARGS=--write-doc``), never typed in by hand."""
    page = record.PAGE.read_text()
    assert record.render(page, record.section(record.load())) == page


def test_the_saved_figures_are_of_the_modules_as_they_are_now() -> None:
    """A module whose source, tests or scope changed since its figures were measured
    fails here until it is measured again: the page never shows a score of other code."""
    by_name = {t.name: t for t in TARGETS}
    stale = [
        f"{name} (measured at {row.commit}): make mutate MUTATE_ARGS='--module {name} --save'"
        for name, row in record.load().items()
        if name not in by_name or record.fingerprint(by_name[name]) != row.fingerprint
    ]
    assert not stale, (
        "changed since their figures (measure again, or drop the row from "
        "docs/mutation-runs.json and run make mutate MUTATE_ARGS=--write-doc):\n" + "\n".join(stale)
    )


def test_saving_keeps_each_modules_latest_row_and_names_the_rest(tmp_path: Path) -> None:
    module = tmp_path / "pkg" / "sample.py"
    module.parent.mkdir()
    module.write_text("X = 1\n")
    other = Target("other", "pkg.other", ("tests/test_other.py",))
    key = ("sample", "X", "int", "1", "2")
    statuses = [("killed", "pkg/sample.py:1  int  1  ->  0", key), ("timeout", "t", key)]
    runs = tmp_path / "runs.json"
    first_run = [record.row_of(SAMPLE, [*statuses, ("survived", "s", key)], 1.0, tmp_path)]
    record.save(first_run, runs, [SAMPLE, other])
    first = record.load(runs)["sample"]
    assert (first.killed, first.run, first.timeouts, first.unreviewed) == (2, 3, 1, 1)
    assert first.commit == "unknown"  # not a git work tree
    assert first.fingerprint == record.fingerprint(SAMPLE, tmp_path)
    record.save([record.row_of(SAMPLE, statuses, 2.0, tmp_path)], runs, [SAMPLE, other])
    rows = record.load(runs)
    assert rows["sample"].survivors == ()
    table = record.section(rows, [SAMPLE, other])
    assert "| `sample` | `pkg/sample.py` | 2 | 2 | 100.0 % | 1 | 0 | `unknown` |" in table
    assert "Not measured since they last changed: `other`." in table
    module.write_text("X = 2\n")
    assert record.fingerprint(SAMPLE, tmp_path) != rows["sample"].fingerprint


def test_a_reviewed_survivor_needs_no_new_run(monkeypatch: pytest.MonkeyPatch) -> None:
    key = ("sample", "X", "int", "1", "2")
    row = dataclasses.replace(
        record.Row("sample", "pkg/sample.py", 1, 2, 0, (("s", key),), "c", "now", 1.0, "f")
    )
    assert row.unreviewed == 1
    assert "s  NOT REVIEWED" in record.section({"sample": row}, [SAMPLE])
    monkeypatch.setitem(EQUIVALENT, key, "equivalent: the fixture says so")
    assert row.unreviewed == 0
    assert "s  NOT REVIEWED" not in record.section({"sample": row}, [SAMPLE])


@pytest.mark.parametrize("page", ["no markers", f"{record.END} {record.BEGIN}"])
def test_a_page_without_one_pair_of_markers_is_refused(page: str) -> None:
    with pytest.raises(record.MutationPageError):
        record.render(page, "generated")


def test_a_selection_of_mutants_is_never_saved_as_a_score() -> None:
    with pytest.raises(SystemExit):
        main(["--module", "keyed", "--save", "--match", "keyed.py:27"])
    with pytest.raises(SystemExit):
        main(["--module", "keyed", "--save", "--pool", "tests/unit/test_keyed.py"])


@pytest.mark.parametrize("smoke", SMOKE, ids=lambda s: s.target.name)
def test_the_mutation_smoke_kills_each_security_critical_site(smoke: Smoke) -> None:
    """The fast mutation smoke of ``make test``: one mutant at each site where a
    survivor would let an action through, run for real against the test that must
    kill it (``make mutate`` scores everything, but not on every run)."""
    assert len([m for m in mutants_of(smoke.target) if smoke.match in m.label()]) == 1
    outcome = run([smoke.target], 1, [smoke.match])
    assert not outcome.broken, outcome.broken
    assert [r.status for r in outcome.results] in (["killed"], ["timeout"]), smoke.why
