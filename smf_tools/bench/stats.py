"""Latency summaries shared by every benchmark."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Summary:
    """Percentiles of one measured series, in microseconds."""

    label: str
    count: int
    p50_us: float
    p95_us: float
    p99_us: float

    def row(self) -> tuple[str, int, str, str, str]:
        return (
            self.label,
            self.count,
            f"{self.p50_us:.2f}",
            f"{self.p95_us:.2f}",
            f"{self.p99_us:.2f}",
        )


def percentile(sorted_values: Sequence[float], fraction: float) -> float:
    """Nearest-rank percentile of an already sorted series."""
    if not sorted_values:
        raise ValueError("no samples")
    index = min(len(sorted_values) - 1, max(0, round(fraction * len(sorted_values)) - 1))
    return sorted_values[index]


def summarize(label: str, samples_ns: Sequence[int]) -> Summary:
    ordered = sorted(s / 1000 for s in samples_ns)
    return Summary(
        label=label,
        count=len(ordered),
        p50_us=percentile(ordered, 0.50),
        p95_us=percentile(ordered, 0.95),
        p99_us=percentile(ordered, 0.99),
    )
