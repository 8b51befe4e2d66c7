"""``bench``: benchmarks that print figures beside their baselines.

``--evaluator`` times the decision core beside cedarpy; ``--bus`` times
propose -> verdict through the gate beside a bare NATS echo on the same
server (``ops.bench.bus``). With neither flag, both run. ``--rounds`` sets
the samples per series of whichever runs; each has its own default, because
an evaluator sample costs microseconds and a bus sample milliseconds.
"""

from __future__ import annotations

import argparse
import platform
from typing import Any

from ops.bench import bus, evaluator, output
from ops.logs import configure_logging
from ops.output import emit_json, say, table

EVALUATOR_ROUNDS = 5000


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("bench", help="run benchmarks and print figures beside their baselines")
    p.add_argument("--evaluator", action="store_true", help="decision core vs cedarpy")
    p.add_argument("--bus", action="store_true", help="propose -> verdict over NATS vs a bare echo")
    p.add_argument(
        "--output",
        action="store_true",
        help="4 KB and 256 KB responses through the buffer gate vs straight through",
    )
    p.add_argument(
        "--rounds",
        type=int,
        default=None,
        help=f"samples per series (default: evaluator {EVALUATOR_ROUNDS}, "
        f"bus {bus.DEFAULT_ROUNDS})",
    )
    p.add_argument(
        "--in-flight",
        type=int,
        default=bus.DEFAULT_IN_FLIGHT,
        help="outstanding requests in the bus throughput series",
    )
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=run_bench)


def machine() -> str:
    return f"{platform.machine()} {platform.python_implementation()} {platform.python_version()}"


def run_bench(args: argparse.Namespace) -> int:
    run_all = not (args.evaluator or args.bus or args.output)
    report: dict[str, Any] = {"machine": machine()}
    if args.evaluator or run_all:
        rounds = args.rounds if args.rounds is not None else EVALUATOR_ROUNDS
        report.update(_evaluator_json(evaluator.run(rounds=max(10, rounds))))
        if not args.json:
            _print_evaluator(report)
    if args.bus or run_all:
        # The gate logs through structlog; keep stdout for the figures.
        configure_logging(json=False, level="error")
        rounds = args.rounds if args.rounds is not None else bus.DEFAULT_ROUNDS
        result = bus.run(rounds=max(1, rounds), in_flight=max(1, args.in_flight))
        report["bus"] = _bus_json(result)
        if not args.json:
            _print_bus(result)
    if args.output or run_all:
        configure_logging(json=False, level="error")
        rounds = args.rounds if args.rounds is not None else output.DEFAULT_ROUNDS
        result_output = output.run(rounds=max(1, rounds))
        report["output"] = [
            {
                "size": plain.label.split(" straight")[0],
                "straight_p50_ns": round(plain.p50_us * 1000),
                "gated_p50_ns": round(gated.p50_us * 1000),
                "gated_p99_ns": round(gated.p99_us * 1000),
                "ratio_p50_x1000": round(ratio * 1000),
            }
            for (plain, gated), ratio in zip(
                result_output.rows, result_output.ratios(), strict=True
            )
        ]
        if not args.json:
            rows = [s.row() for pair in result_output.rows for s in pair]
            table(("series", "samples", "p50 us", "p95 us", "p99 us"), rows)
            for (plain, _), ratio in zip(result_output.rows, result_output.ratios(), strict=True):
                label = plain.label.split(" straight")[0]
                say(f"buffer gate / straight through, {label} p50: {ratio:.1f}x")
    if args.json:
        emit_json(report)
    return 0


# --- evaluator ------------------------------------------------------------------------


def _evaluator_json(result: evaluator.EvaluatorResult) -> dict[str, Any]:
    summaries = (result.ours_with_hash, result.ours_prehashed, result.cedar)
    return {
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


def _print_evaluator(report: dict[str, Any]) -> None:
    say(f"machine: {report['machine']}")
    table(
        ("series", "samples", "p50 us", "p95 us", "p99 us"),
        [
            (
                row["label"],
                row["count"],
                f"{row['p50_ns'] / 1000:.2f}",
                f"{row['p95_ns'] / 1000:.2f}",
                f"{row['p99_ns'] / 1000:.2f}",
            )
            for row in report["evaluator"]
        ],
    )
    ratio = report["cedar_over_smf_p50_x1000"] / 1000
    say(f"cedarpy p50 / smf p50 (hash inside): {ratio:.1f}x")


# --- bus ------------------------------------------------------------------------------


def _x1000(value: float | None) -> int | None:
    """Ratios as integers: the JSON output is canonical, which has no floats."""
    return None if value is None else round(value * 1000)


def _bus_json(result: bus.BusResult) -> dict[str, Any]:
    return {
        "nats_server": result.nats_server,
        "cpus": result.cpus,
        "cpu_model": result.cpu_model,
        "rounds": result.rounds,
        "in_flight": result.in_flight,
        "throughput_requests": result.throughput_requests,
        "latency": [
            {
                "label": s.label,
                "count": s.count,
                "p50_ns": round(s.p50_us * 1000),
                "p95_ns": round(s.p95_us * 1000),
                "p99_ns": round(s.p99_us * 1000),
            }
            for s in result.latency
        ],
        "throughput": [
            {
                "label": t.label,
                "requests": t.requests,
                "in_flight": t.in_flight,
                "requests_per_s": round(t.per_second),
            }
            for t in result.throughput
        ],
        "ratios": [
            {
                "label": r.label,
                "p50_x1000": _x1000(r.p50),
                "p99_x1000": _x1000(r.p99),
                "throughput_x1000": _x1000(r.throughput),
            }
            for r in result.ratios()
        ],
        "targets_x1000": {
            "p50_at_most": _x1000(bus.TARGET_P50),
            "p99_at_most": _x1000(bus.TARGET_P99),
            "throughput_at_least": _x1000(bus.TARGET_THROUGHPUT),
        },
    }


def _ratio_cell(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def _print_bus(result: bus.BusResult) -> None:
    say(
        f"machine: {machine()}, {result.cpus} CPUs ({result.cpu_model}), "
        f"nats-server {result.nats_server}"
    )
    say(f"latency, {result.rounds} sequential requests per series:")
    table(("series", "samples", "p50 us", "p95 us", "p99 us"), [s.row() for s in result.latency])
    say(f"throughput, {result.throughput_requests} requests, {result.in_flight} in flight:")
    table(
        ("series", "requests", "req/s"),
        [(t.label, t.requests, f"{t.per_second:.0f}") for t in result.throughput],
    )
    say(
        f"ratios to the echo floor (targets: p50 <= {bus.TARGET_P50:g}x, "
        f"p99 <= {bus.TARGET_P99:g}x, throughput >= {bus.TARGET_THROUGHPUT:g}x):"
    )
    table(
        ("series", "p50", "p99", "throughput"),
        [
            (r.label, _ratio_cell(r.p50), _ratio_cell(r.p99), _ratio_cell(r.throughput))
            for r in result.ratios()
        ],
    )
