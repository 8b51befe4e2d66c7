"""``release diff`` over recorded traffic (issue 25): what a shadow release would change.

The recorded half of ``release diff`` reads the ledger's ``shadow`` entries: each
one is a decision a gate made under the OLD release while NEW ran beside it as
its shadow, on which NEW would have decided otherwise, judged at decision time on
that very envelope (``smf_assurance.pipeline.followers.shadow``). Re-evaluating recorded traffic
under two releases is impossible here by design: the ledger keeps identities,
never the envelope, arguments or content a decision was made on
(ARCHITECTURE.md, "Evidence"), so there is nothing to decide again. So the
recorded diff of a pair of releases is exactly the shadow entries written while
NEW shadowed OLD (matched by both release identities and both projection ids);
for a pair that never ran so it is empty and says so, and ``eval --jsonl
--against`` decides saved or synthetic envelopes instead.

Counts are by from -> to disposition, capability, rule, policy, layer and tenant
pseudonym (``smf_assurance.core.shadow.tally``), with example decision ids that
``explain`` takes. Policies and rules are kept in the ledger as identities; they
are named here from the two releases' projections, and an identity neither
names (impossible for entries of this pair, unless the ledger was written
around the store) is shown as it is and counted as unresolved.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Final, cast

from smf_assurance.core.projection import projection_id
from smf_assurance.core.shadow import ShadowRecord, Tallied, Traffic, names_by_ref, tally
from smf_assurance.governance.release_text import ReleaseText
from smf_assurance.ops.cli.charts import Bar, bar_chart_svg
from smf_assurance.ops.cli.cli_json import MoveJson, RecordedTrafficJson, TalliedJson
from smf_assurance.ops.cli.output import say, table
from smf_assurance.pipeline.stores.evidence import release_ref
from smf_assurance.pipeline.stores.ledger import shadow_entries
from smf_assurance.pipeline.stores.ledger_schema import Disposition as LedgerDisposition

END_OF_TIME: Final = 2**53 - 1


@dataclass(frozen=True, slots=True)
class Recorded:
    """The recorded traffic of one pair of releases in one window."""

    db: Path
    since_ms: int | None
    until_ms: int | None
    checkpoints: int
    """Signed checkpoints the ledger was held against (0: nothing ties it to the state)."""
    traffic: Traffic
    unresolved: tuple[str, ...]
    """Policy or rule identities neither release names (module docstring)."""


def recorded_traffic(
    db: Path,
    checkpoints: int,
    old: ReleaseText,
    new: ReleaseText,
    since_ms: int | None,
    until_ms: int | None,
) -> Recorded:
    """The ``shadow`` entries of ``db`` in the window written while ``new`` ran beside
    ``old``, tallied. The ledger was verified by the caller (chain and checkpoints)."""
    wanted = (
        release_ref(old.manifest.release_id),
        projection_id(old.enforcement),
        release_ref(new.manifest.release_id),
        projection_id(new.enforcement),
    )
    names = names_by_ref([old.enforcement, new.enforcement])
    unresolved: set[str] = set()

    def named(refs: tuple[str, ...] | None) -> tuple[str, ...]:
        out = []
        for ref in refs or ():
            name = names.get(ref)
            if name is None:
                unresolved.add(ref)
            out.append(name or ref)
        return tuple(out)

    records = []
    for stored in shadow_entries(db, since_ms or 0, END_OF_TIME if until_ms is None else until_ms):
        e = stored.entry
        if (e.release_id, e.projection_id, e.shadow_release_id, e.shadow_projection_id) != wanted:
            continue
        records.append(
            ShadowRecord(
                decision_id=e.decision_id,
                at_ms=e.at,
                tenant_ref=e.tenant_ref,
                capability=e.capability or "unknown",
                from_disposition=e.disposition or "deny",
                to_disposition=e.shadow_disposition or "deny",
                policies=named(e.differing_policy_refs),
                rules=named(e.differing_rule_refs),
                layers=tuple(e.differing_layers or ()),
            )
        )
    return Recorded(db, since_ms, until_ms, checkpoints, tally(records), tuple(sorted(unresolved)))


# --- for people -----------------------------------------------------------------------


def _short(value: str) -> str:
    """A pseudonym or identity cut for a table (``--json`` has it whole)."""
    head, _, digits = value.partition(":")
    return f"{head}:{digits[:12]}" if digits else value


def _rows(rows: tuple[Tallied, ...], short: bool = False) -> list[tuple[str, int, str]]:
    return [
        (
            _short(r.value) if short else r.value,
            r.count,
            _short(r.examples[0]) if r.examples else "",
        )
        for r in rows
    ]


def say_recorded(recorded: Recorded, old: ReleaseText, new: ReleaseText) -> None:
    """The recorded half of ``release diff``, as tables."""
    t = recorded.traffic
    say("")
    window = "all recorded traffic"
    if recorded.since_ms is not None or recorded.until_ms is not None:
        window = f"recorded from {recorded.since_ms or 0} to {recorded.until_ms or 'now'} (Unix ms)"
    say(
        f"recorded traffic ({window}, ledger {recorded.db}): {t.total} decision(s) made under "
        f"{old.manifest.release_id} would change under {new.manifest.release_id}"
    )
    if not recorded.checkpoints:
        say("note: no checkpoint in the ledger yet, so nothing ties it to this state's gate key")
    if t.total == 0:
        say(
            "(the ledger's shadow entries of this pair; none means none was recorded while "
            "the second ran as the shadow beside the first)"
        )
        return
    table(
        ("from", "to", "decisions", "e.g. decision"),
        [(m.from_disposition, m.to_disposition, m.count, _short(m.examples[0])) for m in t.moves],
    )
    for title, rows, short in (
        ("capability", t.by_capability, False),
        ("rule", t.by_rule, False),
        ("policy", t.by_policy, False),
        ("layer", t.by_layer, False),
        ("tenant pseudonym", t.by_tenant, True),
    ):
        say("")
        table((title, "decisions", "e.g. decision"), _rows(rows, short))
    if recorded.unresolved:
        say(f"{len(recorded.unresolved)} policy or rule identities neither release names")


def write_chart(recorded: Recorded, old: ReleaseText, new: ReleaseText, path: Path) -> None:
    """Changed decisions per rule, as SVG (``smf_assurance.ops.cli.charts``): where a person would
    rather look than read the table."""
    title = (
        f"Decisions that would change per rule: {old.manifest.release_id} -> "
        f"{new.manifest.release_id} ({recorded.traffic.total} in all)"
    )
    bars = [
        Bar(r.value, r.count, "e.g. " + ", ".join(r.examples)) for r in recorded.traffic.by_rule
    ]
    path.write_text(bar_chart_svg(title, bars), encoding="utf-8")


def recorded_json(recorded: Recorded) -> RecordedTrafficJson:
    """The recorded half of ``release diff --json`` (``smf_assurance.ops.cli.cli_json``)."""
    t = recorded.traffic

    def rows(tallied: tuple[Tallied, ...]) -> tuple[TalliedJson, ...]:
        return tuple(
            TalliedJson(value=r.value, count=r.count, examples=r.examples) for r in tallied
        )

    return RecordedTrafficJson(
        ledger=str(recorded.db),
        checkpoints=recorded.checkpoints,
        since_ms=recorded.since_ms,
        until_ms=recorded.until_ms,
        total=t.total,
        moves=tuple(
            MoveJson(
                from_=cast("LedgerDisposition", m.from_disposition),
                to=cast("LedgerDisposition", m.to_disposition),
                count=m.count,
                examples=m.examples,
            )
            for m in t.moves
        ),
        by_capability=rows(t.by_capability),
        by_rule=rows(t.by_rule),
        by_policy=rows(t.by_policy),
        by_layer=rows(t.by_layer),
        by_tenant=rows(t.by_tenant),
        unresolved=recorded.unresolved,
    )


__all__ = ["Recorded", "recorded_json", "recorded_traffic", "say_recorded", "write_chart"]
