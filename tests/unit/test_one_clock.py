"""One clock: every product module reads time from ``smf_assurance.subjects.clock``.

The wall clock in milliseconds (``wall_clock_ms``) and the monotonic clock
(``monotonic_s``) are defined once, in the lowest layer, so a deadline, an expiry
or a staleness is judged the same way everywhere and a test injects its clock in
one place. Read with ``ast`` from the code: a call that reads the system clock
anywhere else in the product is a second clock. Elapsed-time measurement
(``perf_counter``) and the event loop's own time are not clocks a decision reads.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path
from typing import Final

PACKAGE: Final = Path(__file__).resolve().parents[2] / "smf_assurance"
CLOCK_MODULE: Final = PACKAGE / "subjects" / "clock.py"
SYSTEM_CLOCKS: Final = frozenset({"time", "time_ns", "monotonic", "monotonic_ns"})
"""Functions of the ``time`` module that read a clock a decision could judge by."""


def clock_reads(path: Path) -> Iterator[str]:
    """Reads of the system clock in one module: ``time.<clock>``, ``from time import
    <clock>`` and ``datetime.now``."""
    where = path.relative_to(PACKAGE)
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module == "time":
            for alias in node.names:
                if alias.name in SYSTEM_CLOCKS:
                    yield f"{where}:{node.lineno} from time import {alias.name}"
        if not isinstance(node, ast.Attribute):
            continue
        owner = node.value
        if isinstance(owner, ast.Name) and owner.id == "time" and node.attr in SYSTEM_CLOCKS:
            yield f"{where}:{node.lineno} time.{node.attr}"
        owner_name = owner.attr if isinstance(owner, ast.Attribute) else getattr(owner, "id", "")
        if node.attr == "now" and owner_name == "datetime":
            yield f"{where}:{node.lineno} datetime.now"


# Recorded wall times in files a person reads (when a runtime was installed), not a
# clock anything is decided by: seconds as floats, the format those files keep.
INSTALL_RECORDS: Final = frozenset({"ops/runtimes/hermes_env.py", "ops/runtimes/openclaw_env.py"})


def test_no_product_module_reads_the_system_clock_but_the_clock_module() -> None:
    found = [
        read
        for path in sorted(PACKAGE.rglob("*.py"))
        if path != CLOCK_MODULE and str(path.relative_to(PACKAGE)) not in INSTALL_RECORDS
        for read in clock_reads(path)
    ]
    assert found == []
