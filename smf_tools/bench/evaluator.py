"""Evaluator benchmark: our decision core beside Cedar (cedarpy) on the same four requests.

Target: evaluator p50 at most 10 us and at least 5x faster than
cedarpy with pre-parsed policy and entity handles. Both sides get their
inputs prepared outside the timed loop (our decoded envelope, Cedar's request
dict); each sample times one decision. Cedar's policies below mirror the
scenario policies (permit for allow and conditional, forbid for deny); Cedar
has no "conditional", so the comparison is of deciding, not of identical
output. Ours is timed twice: computing the operation hash inside the call
(as ``smf-assurance eval`` does) and with the hash the normalize stage
already computed (as the gate does).
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from smf_assurance.core.evaluator import evaluate
from smf_assurance.governance.projections import load_policy_set
from smf_assurance.governance.scenarios_catalog import load_scenarios
from smf_assurance.ops.cli.output import Progress
from smf_assurance.subjects.envelope import OperationEnvelope, operation_hash
from smf_tools.bench.stats import Summary, summarize

CEDAR_POLICIES = """
@id("ba.transmission-attorney-approval")
permit(principal, action == Action::"external.transmit", resource)
when { ["electronic_filing", "email", "messaging"].contains(context.channel)
       && context.locality != "internal" };
@id("floor.legal-hold")
forbid(principal, action in [Action::"document.delete", Action::"document.write"], resource)
when { context.legal_hold };
@id("floor.injection-taint-egress")
forbid(principal, action, resource)
when { context.egress && context.locality != "internal" && context.taint != "clear" };
@id("floor.confidential-public-service")
forbid(principal, action, resource)
when { context.egress && context.channel == "web"
       && ["confidential", "privileged", "unknown"].contains(context.classification) };
@id("floor.confidential-external-egress")
permit(principal, action, resource)
when { context.egress && context.locality != "internal"
       && ["confidential", "privileged", "unknown"].contains(context.classification)
       && context.redaction != "complete" };
@id("customer.acme.retention-deletion")
permit(principal, action == Action::"document.delete", resource)
when { context.tenant == "tenant-acme" && context.channel == "dms"
       && context.locality == "internal" && !context.legal_hold };
@id("customer.acme.internal-read")
permit(principal, action == Action::"document.read", resource)
when { context.tenant == "tenant-acme" && !context.egress };
"""


def cedar_request(envelope: OperationEnvelope) -> dict[str, Any]:
    """The Cedar request that carries the same facts our policies read."""
    return {
        "principal": f'User::"{envelope.professional.actor_id}"',
        "action": f'Action::"{envelope.capability}"',
        "resource": f'Target::"{envelope.destination.target_identity_hash}"',
        "context": {
            "egress": envelope.effects.egress,
            "channel": envelope.destination.channel,
            "locality": envelope.destination.locality,
            "classification": envelope.data.classification,
            "redaction": envelope.data.redaction_status,
            "taint": envelope.data.injection_taint,
            "legal_hold": envelope.workflow.legal_hold,
            "tenant": envelope.professional.tenant_id,
        },
    }


@dataclass(frozen=True, slots=True)
class EvaluatorResult:
    ours_with_hash: Summary
    ours_prehashed: Summary
    cedar: Summary

    @property
    def ratio(self) -> float:
        """How many times faster our p50 (with hash) is than Cedar's p50."""
        return self.cedar.p50_us / self.ours_with_hash.p50_us


def time_calls(
    calls: Sequence[Callable[[], object]], rounds: int, progress: Progress | None = None
) -> list[int]:
    """Nanoseconds of each call, ``rounds`` times over ``calls``."""
    samples: list[int] = []
    clock = time.perf_counter_ns
    for n in range(rounds):
        for call in calls:
            start = clock()
            call()
            samples.append(clock() - start)
        if progress is not None and n % 500 == 0:
            progress.update(n)
    return samples


def run(rounds: int = 5000, progress: Progress | None = None) -> EvaluatorResult:
    import cedarpy  # noqa: PLC0415 - optional: a bench/dev dependency, not a runtime one

    policy_set = load_policy_set()
    envelopes = [scenario.envelope for scenario in load_scenarios()]
    hashes = [operation_hash(e) for e in envelopes]
    at_ms = 1_780_000_000_000
    cedar_policies = cedarpy.PolicySet.from_str(CEDAR_POLICIES)
    entities = cedarpy.Entities.from_json_str("[]")
    requests = [cedar_request(e) for e in envelopes]

    def ours(env: OperationEnvelope) -> Callable[[], object]:
        return lambda: evaluate(env, policy_set, at_ms=at_ms)

    def ours_pre(env: OperationEnvelope, h: str) -> Callable[[], object]:
        return lambda: evaluate(env, policy_set, at_ms=at_ms, op_hash=h)

    def cedar(req: dict[str, Any]) -> Callable[[], object]:
        return lambda: cedarpy.is_authorized(req, cedar_policies, entities)

    series = {
        "smf evaluator (hash inside)": [ours(e) for e in envelopes],
        "smf evaluator (hash given)": [
            ours_pre(e, h) for e, h in zip(envelopes, hashes, strict=True)
        ],
        "cedarpy is_authorized": [cedar(r) for r in requests],
    }
    progress = progress or Progress("evaluator bench", rounds * len(series))
    summaries = []
    gc.disable()
    try:
        for label, calls in series.items():
            time_calls(calls, rounds // 10)
            summaries.append(summarize(label, time_calls(calls, rounds, progress)))
    finally:
        gc.enable()
        progress.close()
    return EvaluatorResult(*summaries)
