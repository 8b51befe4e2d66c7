"""Evaluator growth: the four scenario decisions as a release grows by other tenants' policies.

Target: from 10 to 10,000 extra policies the evaluator's p50 grows
at most 2x. The extra policies are customer-layer policies of other tenants
(ten each), over rules that test a capability and a channel, the shape a
firm's overlay has; none applies to the scenario envelopes, so every series
decides the same four outcomes and only the cost of ruling policies out
differs. Three series per size, in one run: our evaluator with its policy
index, the same policies scanned linearly (the index's baseline:
``smf_assurance.core.policy_index`` is bypassed, every policy checked), and
cedarpy with the same policies in Cedar (pre-parsed). The operation hash is
given, as the gate's normalize stage computes it once, so the figures are of
selection and merging only.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import msgspec

from smf_assurance.core.evaluator import evaluate
from smf_assurance.core.policy import RequirementSpec
from smf_assurance.core.projection import (
    EnforcementRule,
    PolicyRecord,
    PolicySet,
    Scope,
    build_policy_set,
    decode_enforcement,
    scanned_policy_set,
)
from smf_assurance.governance.projections import SCENARIO_PROJECTION, package_path
from smf_assurance.governance.scenarios_catalog import load_scenarios
from smf_assurance.ops.cli.output import Progress
from smf_assurance.subjects.canonical import sha256_identity
from smf_assurance.subjects.envelope import OperationEnvelope, operation_hash
from smf_tools.bench.evaluator import CEDAR_POLICIES, cedar_request, time_calls
from smf_tools.bench.stats import Summary, summarize

SIZES = (10, 100, 1_000, 10_000)
DEFAULT_ROUNDS = 300
PER_TENANT = 10
CAPABILITIES = ("document.read", "document.write", "document.delete", "external.transmit")
CHANNELS = ("dms", "email", "electronic_filing", "messaging", "web")
EFFECTS = ("allow", "deny", "conditional")
AT_MS = 1_780_000_000_000


@dataclass(frozen=True, slots=True)
class GrowthRow:
    extra: int
    indexed: Summary
    linear: Summary
    cedar: Summary


@dataclass(frozen=True, slots=True)
class GrowthResult:
    rows: tuple[GrowthRow, ...]

    def growth(self) -> float:
        """p50 at the largest size over p50 at the smallest, with the index."""
        return self.rows[-1].indexed.p50_us / self.rows[0].indexed.p50_us


def _rule(capability: str, channel: str) -> tuple[EnforcementRule, str]:
    rule_id = f"urn:smf:rule:growth:{capability}:{channel}"
    when = {
        "all": [
            {"eq": {"fact": "capability", "value": capability}},
            {"eq": {"fact": "destination.channel", "value": channel}},
        ]
    }
    rule = EnforcementRule(
        rule_id=rule_id,
        source_hash=sha256_identity(rule_id.encode()),
        effective_from=0,
        effective_until=None,
        when=when,
    )
    cedar = f'action == Action::"{capability}", resource) when {{ context.channel == "{channel}"'
    return rule, cedar


def grown(extra: int) -> tuple[PolicySet, str]:
    """The shipped scenario release plus ``extra`` other tenants' policies, and its Cedar text."""
    path = package_path(SCENARIO_PROJECTION) / "enforcement.json"
    projection = decode_enforcement(path.read_bytes())
    rules = [_rule(c, ch) for c in CAPABILITIES for ch in CHANNELS]
    policies = []
    cedar = [CEDAR_POLICIES]
    for n in range(extra):
        rule, condition = rules[n % len(rules)]
        effect = EFFECTS[n % len(EFFECTS)]
        tenant = f"tenant-growth-{n // PER_TENANT:05d}"
        policies.append(
            PolicyRecord(
                policy_id=f"growth.{n:05d}",
                layer="customer",
                rule_id=rule.rule_id,
                effect=effect,  # type: ignore[arg-type]
                reason_code=f"growth_{effect}",
                scope=Scope(tenant_id=tenant),
                requirements=(
                    RequirementSpec(approval_count=1, required_roles=("partner",))
                    if effect == "conditional"
                    else RequirementSpec()
                ),
            )
        )
        verb = "forbid" if effect == "deny" else "permit"
        cedar.append(
            f'@id("growth.{n:05d}")\n{verb}(principal, {condition} '
            f'&& context.tenant == "{tenant}" }};'
        )
    bigger = msgspec.structs.replace(
        projection,
        rules=(*projection.rules, *(r for r, _ in rules)),
        policies=(*projection.policies, *policies),
    )
    return build_policy_set(bigger), "\n".join(cedar)


def run(
    rounds: int = DEFAULT_ROUNDS, sizes: Sequence[int] = SIZES, progress: Progress | None = None
) -> GrowthResult:
    import cedarpy  # noqa: PLC0415 - optional: a bench/dev dependency, not a runtime one

    envelopes = [scenario.envelope for scenario in load_scenarios()]
    hashes = [operation_hash(e) for e in envelopes]
    requests = [cedar_request(e) for e in envelopes]
    entities = cedarpy.Entities.from_json_str("[]")

    def ours(env: OperationEnvelope, op_hash: str, ps: PolicySet) -> Callable[[], object]:
        return lambda: evaluate(env, ps, at_ms=AT_MS, op_hash=op_hash)

    def cedar(request: dict[str, Any], policies: Any) -> Callable[[], object]:
        return lambda: cedarpy.is_authorized(request, policies, entities)

    progress = progress or Progress("evaluator growth", 3 * len(sizes))
    rows = []
    done = 0
    gc.disable()
    try:
        for extra in sizes:
            indexed, cedar_text = grown(extra)
            scanned = scanned_policy_set(indexed)
            cedar_policies = cedarpy.PolicySet.from_str(cedar_text)
            series = [
                [ours(e, h, ps) for e, h in zip(envelopes, hashes, strict=True)]
                for ps in (indexed, scanned)
            ]
            series.append([cedar(r, cedar_policies) for r in requests])
            summaries = []
            for label, calls in zip(
                (f"smf indexed, +{extra}", f"smf linear scan, +{extra}", f"cedarpy, +{extra}"),
                series,
                strict=True,
            ):
                time_calls(calls, max(1, rounds // 10))
                summaries.append(summarize(label, time_calls(calls, rounds)))
                done += 1
                progress.update(done)
            rows.append(GrowthRow(extra, *summaries))
    finally:
        gc.enable()
        progress.close()
    return GrowthResult(tuple(rows))
