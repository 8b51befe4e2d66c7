"""``demo``: run the four governed scenarios and check every outcome."""

from __future__ import annotations

import argparse
import datetime as dt
from typing import Any

from ops.output import emit_json, fail, table
from ops.projections import load_policy_set
from ops.scenarios_catalog import load_scenarios
from pipeline.core.evaluator import evaluate


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("demo", help="run the four governed scenarios end to end")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=run_demo)


def run_demo(args: argparse.Namespace) -> int:
    policy_set = load_policy_set()
    at_ms = int(dt.datetime.now(dt.UTC).timestamp() * 1000)
    rows: list[dict[str, Any]] = []
    ok = True
    for scenario in load_scenarios():
        decision = evaluate(scenario.envelope, policy_set, at_ms=at_ms)
        passed = (
            decision.disposition == scenario.expected.disposition
            and scenario.expected.reason in decision.reason_codes
        )
        ok = ok and passed
        rows.append(
            {
                "scenario": scenario.name,
                "disposition": decision.disposition,
                "reason_codes": list(decision.reason_codes),
                "decision_id": decision.decision_id,
                "as_expected": passed,
            }
        )
    if args.json:
        emit_json({"scenarios": rows, "ok": ok})
    else:
        table(
            ("scenario", "verdict", "first reason", "decision id", "expected"),
            [
                (
                    r["scenario"],
                    r["disposition"],
                    r["reason_codes"][0],
                    str(r["decision_id"])[:23],
                    "yes" if r["as_expected"] else "NO",
                )
                for r in rows
            ],
        )
    if not ok:
        fail("a scenario did not reach its expected outcome")
    return 0
