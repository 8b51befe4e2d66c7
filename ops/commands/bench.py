"""``bench``: benchmarks that print figures beside their baselines."""

from __future__ import annotations

import argparse
import platform

from ops.bench import evaluator
from ops.output import emit_json, say, table


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("bench", help="run benchmarks and print figures beside their baselines")
    p.add_argument("--evaluator", action="store_true", help="decision core vs cedarpy")
    p.add_argument("--rounds", type=int, default=5000, help="iterations per series")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=run_bench)


def machine() -> str:
    return f"{platform.machine()} {platform.python_implementation()} {platform.python_version()}"


def run_bench(args: argparse.Namespace) -> int:
    result = evaluator.run(rounds=max(10, args.rounds))
    summaries = (result.ours_with_hash, result.ours_prehashed, result.cedar)
    if args.json:
        emit_json(
            {
                "machine": machine(),
                "evaluator": [
                    {
                        "label": s.label,
                        "count": s.count,
                        "p50_ns": round(s.p50_us * 1000),
                        "p95_ns": round(s.p95_us * 1000),
                        "p99_ns": round(s.p99_us * 1000),
                    }
                    for s in summaries
                ],
                "cedar_over_smf_p50_x1000": round(result.ratio * 1000),
            }
        )
    else:
        say(f"machine: {machine()}")
        table(("series", "samples", "p50 us", "p95 us", "p99 us"), [s.row() for s in summaries])
        say(f"cedarpy p50 / smf p50 (hash inside): {result.ratio:.1f}x")
    return 0
