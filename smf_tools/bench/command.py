"""``bench``: benchmarks that print figures beside their baselines.

``--evaluator`` times the decision core beside cedarpy; ``--bus`` times
propose -> verdict through the gate beside a bare NATS echo on the same
server (``smf_tools.bench.bus``); ``--output`` the buffer gate beside straight
through. With none of these flags, those three run. ``--cluster``
runs only when asked, as it starts a three-node cluster and gate processes:
approval claims on SQLite beside JetStream KV R3, and allows through one and
two gate replicas beside a bare echo (``smf_tools.bench.cluster``).
``--confinement`` (only when asked) times ``runtime run``'s start beside the bare command
and a model request through the launcher's forwarders beside a straight one
(``smf_tools.bench.confinement``). ``--cli`` (only when asked) times the command
line's start, ``--help`` and each command, beside bare Python
(``smf_tools.bench.startup``). ``--against REF`` (only when asked) runs this
checkout's allow beside an earlier commit's in one run, each on its own code
(``smf_tools.bench.against``), for a budget between two versions. ``--rounds``
sets the samples per series of whichever runs; each has its own default,
because an evaluator sample costs microseconds and a bus sample milliseconds.
"""

from __future__ import annotations

import argparse
import platform
from collections.abc import Sequence
from typing import Any

import msgspec

from smf_assurance.ops.cli.output import emit, fail, positive_int, say, table
from smf_assurance.ops.local.logs import configure_logging
from smf_assurance.ops.local.natsserver import NatsServerError
from smf_tools.bench import (
    against,
    bus,
    cluster,
    confinement,
    evaluator,
    gateway,
    growth,
    output,
    startup,
)
from smf_tools.bench.bus import BenchError
from smf_tools.bench.stats import Summary
from smf_tools.bench.targets import HEADERS, Target
from smf_tools.cli_json import BenchJson

EVALUATOR_ROUNDS = 5000
EVALUATOR_P50_US = 8.0
"""Target: the evaluator's p50 on the four scenario requests, hash given (the gate's call)."""
OVER_CEDAR = 6.0
"""Target: at least this many times faster than cedarpy (our p50 with the hash inside)."""
FLOOR_RATIO = 1.5
"""Target: a co-located allow (deny) p50 over its floor, the durable steps measured alone
in the same run: echo + ledger append + JetStream PubAck + verdict sign/open (no PubAck
for a deny)."""
THROUGHPUT_PER_S = 5000.0
THROUGHPUT_OVER_ECHO = 0.15
"""Target: at 64 in flight, at least 5,000/s or 0.15x echo, whichever is lower."""
GROWTH = 2.0
"""Target: p50 at 10,000 extra policies over p50 at 10, with the policy index."""


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
        "--cluster",
        action="store_true",
        help="on a local 3-node NATS cluster: approval claim on SQLite vs KV R3, and "
        "allows/s through one and two gate replicas vs a bare echo (only when asked)",
    )
    p.add_argument(
        "--gateway",
        action="store_true",
        help="the model gateway: a completion and 4 KB / 64 KB streamed replies direct to a "
        "fake provider vs through the gateway, and the gateway's own added latency "
        "(only when asked)",
    )
    p.add_argument(
        "--confinement",
        action="store_true",
        help="runtime run: a sandboxed start vs the bare command, and a model request "
        "through the launcher's forwarders vs straight (only when asked)",
    )
    p.add_argument(
        "--evaluator-growth",
        action="store_true",
        help="the evaluator with 10, 100, 1,000 and 10,000 other tenants' policies added: "
        "indexed vs a linear scan vs cedarpy (only when asked)",
    )
    p.add_argument(
        "--cli",
        action="store_true",
        help="the command line's start: --help, --version and each command's --help vs "
        "python -c pass and python -c 'import nats' (only when asked)",
    )
    p.add_argument(
        "--against",
        metavar="REF",
        default=None,
        help="this checkout's allow (co-located and with the stages over the bus: p50 and "
        "throughput) beside an earlier commit's, the same driver and server settings for "
        f"both, sittings alternated; each series within {against.BUDGET_PERCENT} %% or not "
        "(only when asked)",
    )
    p.add_argument(
        "--sittings",
        type=positive_int,
        default=against.DEFAULT_SITTINGS,
        help="with --against: how many times each tree runs each mode (default: "
        f"{against.DEFAULT_SITTINGS})",
    )
    p.add_argument(
        "--rounds",
        type=positive_int,
        default=None,
        help=f"samples per series (default: evaluator {EVALUATOR_ROUNDS}, "
        f"growth {growth.DEFAULT_ROUNDS}, bus {bus.DEFAULT_ROUNDS}, "
        f"output {output.DEFAULT_ROUNDS}, cluster {cluster.DEFAULT_ROUNDS}, "
        f"cli {startup.DEFAULT_ROUNDS}, against {against.DEFAULT_ROUNDS})",
    )
    p.add_argument(
        "--in-flight",
        type=positive_int,
        default=bus.DEFAULT_IN_FLIGHT,
        help="outstanding requests in the bus and cluster throughput series",
    )
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=run_bench)


def machine() -> str:
    return f"{platform.machine()} {platform.python_implementation()} {platform.python_version()}"


def run_bench(args: argparse.Namespace) -> int:
    asked = (
        args.evaluator,
        args.bus,
        args.output,
        args.cluster,
        args.gateway,
        args.confinement,
        args.cli,
        args.against is not None,
    )
    run_all = not (any(asked) or args.evaluator_growth)
    report: dict[str, Any] = {"machine": machine()}
    targets = _run_evaluator(args, run_all, report)
    if args.bus or run_all:
        # The gate logs through structlog; keep stdout for the figures.
        configure_logging(json=False, level="error")
        rounds = args.rounds if args.rounds is not None else bus.DEFAULT_ROUNDS
        result = bus.run(rounds=max(1, rounds), in_flight=max(1, args.in_flight))
        report["bus"] = _bus_json(result)
        targets += _bus_targets(result)
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
    if args.cluster:
        configure_logging(json=False, level="error")
        rounds = args.rounds if args.rounds is not None else cluster.DEFAULT_ROUNDS
        try:
            result_cluster = cluster.run(rounds=max(1, rounds), in_flight=max(1, args.in_flight))
        except (BenchError, NatsServerError) as exc:
            fail(f"bench --cluster: {exc}")
        report["cluster"] = _cluster_json(result_cluster)
        if not args.json:
            _print_cluster(result_cluster)
    if args.gateway:
        _run_gateway(args, report)
    if args.confinement:
        targets += _run_confinement(args, report)
    if args.cli:
        targets += _run_cli(args, report)
    if args.against is not None:
        _run_against(args, report)
    if targets:
        report["targets"] = [t.json() for t in targets]
        if not args.json:
            say("targets (informative: the exit code does not depend on them):")
            table(HEADERS, [t.row() for t in targets])
    if args.json:
        emit(msgspec.convert(report, type=BenchJson))
    return 0


def series_json(summaries: Sequence[Summary]) -> list[dict[str, Any]]:
    """Series as ``--json`` carries them: integer nanoseconds (canonical JSON has no floats)."""
    return [
        {
            "label": s.label,
            "count": s.count,
            "p50_ns": round(s.p50_us * 1000),
            "p95_ns": round(s.p95_us * 1000),
            "p99_ns": round(s.p99_us * 1000),
        }
        for s in summaries
    ]


# --- against an earlier commit ------------------------------------------------------------


def _run_against(args: argparse.Namespace, report: dict[str, Any]) -> None:
    rounds = args.rounds if args.rounds is not None else against.DEFAULT_ROUNDS
    try:
        result = against.run(
            args.against, rounds=rounds, in_flight=args.in_flight, sittings=args.sittings
        )
    except (BenchError, NatsServerError) as exc:
        fail(f"bench --against: {exc}")
    report["against"] = {
        "before": result.before,
        "after": result.after,
        "sittings": result.sittings,
        "rounds": result.rounds,
        "in_flight": result.in_flight,
        "budget_percent": against.BUDGET_PERCENT,
        "rows": [
            {
                "series": row.series,
                "unit": row.unit,
                "before": row.before,
                "after": row.after,
                "after_over_before_x1000": round(row.after_median / row.before_median * 1000),
                "within_budget": row.within_budget,
            }
            for row in result.rows
        ],
    }
    if not args.json:
        print_against(result)


def print_against(result: against.AgainstResult) -> None:
    """The table of ``--against``: each sitting's figure, the medians, the change."""
    say(f"before: {result.before}")
    say(f"after:  {result.after}")
    sittings = f"{result.sittings} sitting{'' if result.sittings == 1 else 's'}"
    say(
        f"{sittings}, alternated; {result.rounds} sequential allows per p50, "
        f"{max(result.rounds, 4 * result.in_flight)} at {result.in_flight} in flight per "
        "throughput; the same driver and nats-server settings for both"
    )
    table(
        ("series", "unit", "before", "after", "medians", "change", "budget"),
        [
            (
                row.series,
                row.unit,
                " / ".join(f"{v:,}" for v in row.before),
                " / ".join(f"{v:,}" for v in row.after),
                f"{row.before_median:,.0f} -> {row.after_median:,.0f}",
                f"{row.change_percent:+.1f} %",
                f"within {against.BUDGET_PERCENT} %"
                if row.within_budget
                else f"over {against.BUDGET_PERCENT} %",
            )
            for row in result.rows
        ],
    )


# --- the command line's start -----------------------------------------------------------


def _run_cli(args: argparse.Namespace, report: dict[str, Any]) -> list[Target]:
    rounds = args.rounds if args.rounds is not None else startup.DEFAULT_ROUNDS
    try:
        result = startup.run(rounds=max(1, rounds))
    except startup.StartupBenchError as exc:
        fail(f"bench --cli: {exc}")
    every = (*result.baselines, *result.top, *result.commands)
    report["cli"] = series_json(every)
    if not args.json:
        rows = [
            (s.label, s.count, f"{s.p50_us / 1000:.0f}", f"{s.p95_us / 1000:.0f}") for s in every
        ]
        table(("series (a fresh process each)", "samples", "p50 ms", "p95 ms"), rows)
    slowest = result.slowest_command()
    return [
        *(
            Target(s.label, "p50 ms", "at_most", startup.HELP_MS, s.p50_us / 1000)
            for s in result.top
        ),
        Target(
            f"slowest command: {slowest.label}",
            "p50 ms",
            "at_most",
            startup.COMMAND_MS,
            slowest.p50_us / 1000,
        ),
    ]


# --- confinement ----------------------------------------------------------------------


def _run_confinement(args: argparse.Namespace, report: dict[str, Any]) -> list[Target]:
    configure_logging(json=False, level="error")
    rounds = args.rounds if args.rounds is not None else confinement.DEFAULT_ROUNDS
    try:
        result = confinement.run(rounds=max(1, rounds))
    except confinement.ConfinementBenchError as exc:
        fail(f"bench --confinement: {exc}")
    series = (
        result.bare_start,
        result.confined_start,
        result.bare_request,
        result.confined_request,
    )
    report["confinement"] = series_json(series)
    if not args.json:
        table(("series", "samples", "p50 us", "p95 us", "p99 us"), [s.row() for s in series])
        say(f"sandbox start overhead, p50: {result.start_overhead_ms:.1f} ms")
        say(f"forwarders' added latency per model request, p50: {result.forward_added_ms:.3f} ms")
    return [
        Target(
            "start, confined",
            "p50 ms over bare",
            "at_most",
            confinement.START_OVERHEAD_MS,
            result.start_overhead_ms,
        ),
        Target(
            "model request, through the forwarders",
            "p50 ms over bare",
            "at_most",
            confinement.FORWARD_ADDED_MS,
            result.forward_added_ms,
        ),
    ]


# --- gateway --------------------------------------------------------------------------


def _run_gateway(args: argparse.Namespace, report: dict[str, Any]) -> None:
    configure_logging(json=False, level="error")
    rounds = args.rounds if args.rounds is not None else gateway.DEFAULT_ROUNDS
    try:
        result_gateway = gateway.run(rounds=max(1, rounds))
    except gateway.GatewayBenchError as exc:
        fail(f"bench --gateway: {exc}")
    report["gateway"] = _gateway_json(result_gateway)
    if not args.json:
        _print_gateway(result_gateway)


def _gateway_json(result: gateway.GatewayResult) -> list[dict[str, Any]]:
    def figures(s: Any) -> dict[str, int]:
        return {
            "p50_ns": round(s.p50_us * 1000),
            "p95_ns": round(s.p95_us * 1000),
            "p99_ns": round(s.p99_us * 1000),
        }

    return [
        {
            "series": row.direct.label.removesuffix(", direct"),
            "samples": row.direct.count,
            "direct": figures(row.direct),
            "through_gateway": figures(row.gateway),
            "output_decision": figures(row.decision),
            "gateway_own_added": figures(row.own),
        }
        for row in result.rows
    ]


def _print_gateway(result: gateway.GatewayResult) -> None:
    rows = [s.row() for r in result.rows for s in (r.direct, r.gateway, r.decision, r.own)]
    table(("series", "samples", "p50 us", "p95 us", "p99 us"), rows)


# --- evaluator ------------------------------------------------------------------------


def _evaluator_json(result: evaluator.EvaluatorResult) -> dict[str, Any]:
    summaries = (result.ours_with_hash, result.ours_prehashed, result.cedar)
    return {
        "evaluator": series_json(summaries),
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


def _run_evaluator(args: argparse.Namespace, run_all: bool, report: dict[str, Any]) -> list[Target]:
    """The evaluator series and the growth series, each when asked; their targets."""
    targets: list[Target] = []
    if args.evaluator or run_all:
        rounds = args.rounds if args.rounds is not None else EVALUATOR_ROUNDS
        result_evaluator = evaluator.run(rounds=max(10, rounds))
        report.update(_evaluator_json(result_evaluator))
        targets += _evaluator_targets(result_evaluator)
        if not args.json:
            _print_evaluator(report)
    if args.evaluator_growth:
        rounds = args.rounds if args.rounds is not None else growth.DEFAULT_ROUNDS
        result_growth = growth.run(rounds=max(1, rounds))
        report["evaluator_growth"] = _growth_json(result_growth)
        targets.append(
            Target(
                "smf indexed",
                "p50 at +10,000 / p50 at +10",
                "at_most",
                GROWTH,
                result_growth.growth(),
            )
        )
        if not args.json:
            _print_growth(result_growth)
    return targets


def _evaluator_targets(result: evaluator.EvaluatorResult) -> list[Target]:
    return [
        Target(
            result.ours_prehashed.label,
            "p50 us",
            "at_most",
            EVALUATOR_P50_US,
            result.ours_prehashed.p50_us,
        ),
        Target(
            result.ours_with_hash.label,
            "cedarpy p50 / ours",
            "at_least",
            OVER_CEDAR,
            result.ratio,
        ),
    ]


def _bus_targets(result: bus.BusResult) -> list[Target]:
    p50 = {s.label: s.p50_us for s in result.latency}
    rates = {t.label: t.per_second for t in result.throughput}
    steps = ("echo", "ledger append", "verdict sign + open")
    if not all(label in p50 for label in (*steps, "jetstream publish + ack")):
        return []
    deny_floor = sum(p50[label] for label in steps)
    allow_floor = deny_floor + p50["jetstream publish + ack"]
    targets = []
    for outcome, floor in (("allow", allow_floor), ("deny", deny_floor)):
        label = f"propose {outcome} (co-located)"
        if label in p50:
            targets.append(
                Target(label, "p50 / floor p50", "at_most", FLOOR_RATIO, p50[label] / floor)
            )
        if label in rates and "echo" in rates:
            wanted = min(THROUGHPUT_PER_S, THROUGHPUT_OVER_ECHO * rates["echo"])
            targets.append(Target(label, "requests/s", "at_least", wanted, rates[label]))
    without, beside = bus.SHADOW_SERIES
    if without in p50 and beside in p50:  # the shadow never holds a verdict up
        measured = p50[beside] / p50[without]
        targets.append(
            Target(beside, "p50 / paired p50 without", "at_most", bus.SHADOW_TARGET, measured)
        )
    return targets


# --- evaluator growth -----------------------------------------------------------------


def _growth_json(result: growth.GrowthResult) -> list[dict[str, Any]]:
    def figures(s: Any) -> dict[str, int]:
        return {
            "count": s.count,
            "p50_ns": round(s.p50_us * 1000),
            "p95_ns": round(s.p95_us * 1000),
            "p99_ns": round(s.p99_us * 1000),
        }

    return [
        {
            "extra_policies": row.extra,
            "indexed": figures(row.indexed),
            "linear_scan": figures(row.linear),
            "cedarpy": figures(row.cedar),
        }
        for row in result.rows
    ]


def _print_growth(result: growth.GrowthResult) -> None:
    say("evaluator growth: the four scenario requests, hash given, other tenants' policies added")
    rows = [s.row() for r in result.rows for s in (r.indexed, r.linear, r.cedar)]
    table(("series", "samples", "p50 us", "p95 us", "p99 us"), rows)


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
        "sync_always_over_default": [
            {
                "label": r.label,
                "p50_x1000": _x1000(r.p50),
                "p99_x1000": _x1000(r.p99),
                "throughput_x1000": _x1000(r.throughput),
            }
            for r in result.sync_ratios()
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
    say(
        "JetStream sync_interval always (every write synced before its PubAck, the "
        "product's setting) over nats-server's default (two minutes), paired on one run:"
    )
    table(
        ("series", "p50", "p99", "throughput"),
        [
            (r.label, _ratio_cell(r.p50), _ratio_cell(r.p99), _ratio_cell(r.throughput))
            for r in result.sync_ratios()
        ],
    )


# --- cluster --------------------------------------------------------------------------


def _cluster_json(result: cluster.ClusterResult) -> dict[str, Any]:
    """Integers only; each ratio is recomputable from the integers printed beside it."""
    echo = result.rates[0]
    return {
        "nats_server": result.nats_server,
        "nodes": result.nodes,
        "cpus": result.cpus,
        "cpu_model": result.cpu_model,
        "rounds": result.rounds,
        "in_flight": result.in_flight,
        "requests": result.requests,
        "placement": [{"connection": c, "node": n} for c, n in result.placement],
        "leaders": [{"stream": s, "node": n} for s, n in result.leaders],
        "claim": [
            {
                "label": s.label,
                "count": s.count,
                "p50_ns": cluster.ns(s.p50_us),
                "p95_ns": cluster.ns(s.p95_us),
                "p99_ns": cluster.ns(s.p99_us),
            }
            for s in result.claims
        ],
        "claim_kv_over_sqlite_p50_x1000": result.claim_ratio_x1000("p50"),
        "claim_kv_over_sqlite_p99_x1000": result.claim_ratio_x1000("p99"),
        "throughput": [
            {
                "label": r.label,
                "replicas": r.replicas,
                "requests": r.requests,
                "in_flight": r.in_flight,
                "elapsed_us": r.elapsed_us,
                "requests_per_s": r.per_second,
                "over_echo_x1000": r.over_x1000(echo),
                "served": [{"gate": g, "requests": n} for g, n in r.served],
            }
            for r in result.rates
        ],
        "two_over_one_replica_x1000": result.two_over_one_x1000(),
        "sync_always": result.sync_always,
    }


def _print_cluster(result: cluster.ClusterResult) -> None:
    where = ", ".join(f"{c} on {n}" for c, n in result.placement)
    say(
        f"machine: {machine()}, {result.cpus} CPUs ({result.cpu_model}), "
        f"nats-server {result.nats_server}, {result.nodes} nodes on 127.0.0.1; {where}; "
        f"JetStream sync_interval {'always' if result.sync_always else 'not always (default)'}"
    )
    say(f"approval claim, {result.rounds} per store (create + approve untimed, claim timed):")
    table(("series", "samples", "p50 us", "p95 us", "p99 us"), [s.row() for s in result.claims])
    leaders = ", ".join(f"{s} led by {n}" for s, n in result.leaders)
    say(
        f"claim kv / claim sqlite: p50 {result.claim_ratio_x1000('p50') / 1000:.2f}x, "
        f"p99 {result.claim_ratio_x1000('p99') / 1000:.2f}x ({leaders})"
    )
    echo = result.rates[0]
    say(
        f"propose -> verdict throughput, {result.requests} requests, "
        f"{result.in_flight} in flight, every verdict an allow:"
    )
    table(
        ("series", "requests", "req/s", "vs echo", "served per replica"),
        [
            (
                r.label,
                r.requests,
                r.per_second,
                f"{r.over_x1000(echo) / 1000:.3f}x",
                ", ".join(f"{g} {n}" for g, n in r.served) or "-",
            )
            for r in result.rates
        ],
    )
    say(f"two replicas / one replica: {result.two_over_one_x1000() / 1000:.2f}x")
