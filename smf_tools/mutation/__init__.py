"""Mutation testing of the trust core: ``make mutate``.

A check that can be deleted with every test still green is a check no test
proves. This tool makes one small change at a time (a *mutant*) to a module
of the trust core, runs the tests that run the changed line against it, and reports
every mutant the tests did not notice. ``docs/MUTATION.md`` says how to run
it, what it covers and which survivors are equivalent.

The package: :mod:`~smf_tools.mutation.targets` (what is mutated, and by which
tests), :mod:`~smf_tools.mutation.operators` (the mutants),
:mod:`~smf_tools.mutation.runner` (running them),
:mod:`~smf_tools.mutation.reviewed`
(survivors reviewed as equivalent, with why) and :mod:`~smf_tools.mutation.cli`.

How a mutant runs:

- The mutated source is never written over the tree. A generated
  ``sitecustomize`` (``smf_tools.mutation.runner``) on ``PYTHONPATH`` installs an
  import hook that compiles the mutated text in place of that one module,
  under its real file name, in the test run and in every Python process the
  run starts (a gate child, a connector child). Mutants run side by side,
  one per core, without touching each other.
- First ``tests/unit`` and ``tests/bus`` run once unmutated, with per-test
  coverage and per-test durations (a target of the smoke runs its one named
  test instead). If they fail, nothing is scored. Each mutant then runs the
  test functions that execute one of its lines, fastest first, under ``-x``,
  within a budget of their unmutated time (``targets.BUDGET_S``); a mutant
  of a line that runs only at import (a constant, a Struct's fields) runs
  the tests that run its module and those of the files that import it, and
  so does a mutant of a line no test was seen to run (coverage loses its
  tracer after a ``RecursionError``); if it survives it is reported
  ``uncovered``.
- Runs happen in forked children of a worker process (``smf_tools.mutation.runner``) that
  has imported pytest, Hypothesis and the other libraries once and nothing
  of the project, so each child imports the project afresh, with the mutant.
- The run's own pytest plugin loads a Hypothesis profile
  without an example database (a mutant's failing examples must not be
  replayed against the next mutant or the real code), derandomized (the same
  examples for every mutant, so a score is reproducible) and without a
  deadline (a slow machine must not kill a mutant).
- Exit status 0 means the tests passed: the mutant *survived*. A failure,
  including an import error the mutant caused, *kills* it. A run past its
  timeout (three times the unmutated time of what it ran, plus a margin) is counted
  as killed and reported as such: a mutant that loops forever is noticed too.

What is not mutated (and why): docstrings and other bare strings (no
behaviour), f-strings and the arguments of a ``raise`` (messages), logging
calls (``log.*``, ``_log_*``), ``__repr__``, ``raise NotImplementedError``
stubs, ``if TYPE_CHECKING`` blocks, decorators (but for a class decorator's
``frozen=``, flipped by ``bool``), and module-level import-time self-checks
(a top-level ``if`` or ``for`` whose body only raises): a mutant of those
changes only what a developer sees when the code itself is inconsistent.
"""
