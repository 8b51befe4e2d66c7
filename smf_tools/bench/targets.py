"""Targets beside figures: each series' goal, what was measured and whether it was met.

``bench`` prints, for every series with a target, the target, the
measured value and pass/fail, and exits 0 regardless: a benchmark informs, CI
does not time (the project's rule: performance is measured in benchmarks,
never asserted in timed tests). Values are carried as integers (x1000) so
the JSON output stays canonical.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

Comparison = Literal["at_most", "at_least"]


@dataclass(frozen=True, slots=True)
class Target:
    series: str
    measure: str
    """What is compared, with its unit: ``"p50 us"``, ``"cedarpy p50 / ours"``."""
    comparison: Comparison
    limit: float
    measured: float

    @property
    def met(self) -> bool:
        if self.comparison == "at_most":
            return self.measured <= self.limit
        return self.measured >= self.limit

    def row(self) -> tuple[str, str, str, str, str]:
        sign = "<=" if self.comparison == "at_most" else ">="
        return (
            self.series,
            self.measure,
            f"{sign} {self.limit:g}",
            f"{self.measured:.2f}",
            "pass" if self.met else "FAIL",
        )

    def json(self) -> dict[str, Any]:
        return {
            "series": self.series,
            "measure": self.measure,
            "comparison": self.comparison,
            "limit_x1000": round(self.limit * 1000),
            "measured_x1000": round(self.measured * 1000),
            "met": self.met,
        }


HEADERS = ("series", "measure", "target", "measured", "result")
