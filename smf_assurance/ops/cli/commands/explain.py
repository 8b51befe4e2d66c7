"""``explain DECISION_ID``: a recorded decision in words, from the evidence.

Reads the decision from a state directory's ledger (read-only, as ``ledger
verify`` reads it) and the release that decided it from the same state (its
accepted release and its inbox), and prints which policies applied and from
which layer, the rule each rests on with its title, statement and citation,
which requirement came from which layer, and for a safety-floor denial why
the operation was consequential (``smf_assurance.core.explanation``).

Refusals, each one line, exit 1:

- a ledger whose chain or checkpoints do not verify, or whose checkpoints are
  not signed by a gate key of this state's registry (a ledger of another
  state: its decisions are not this state's to explain);
- a decision id the ledger does not hold;
- a release that is not in the state, or does not authenticate against the
  state's trust root: the ledger names the release (``release_ref`` of its
  id) and its enforcement projection id, and nothing is explained under
  another release. The lease is not judged: a past decision is explained
  under the release it was made under (``smf_assurance.governance.release_text``).

What the ledger does not keep (the applied policies, the merged requirements,
the operation's effects) is matched from the reason codes or said to be
unknown; docs/EVIDENCE.md names the gap.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Final

import msgspec

from smf_assurance.core.decision import Disposition
from smf_assurance.core.explanation import DecisionRecord, ExplanationError, explain
from smf_assurance.core.projection import projection_id
from smf_assurance.governance.release_text import ReleaseText, inbox_bundles, release_text
from smf_assurance.governance.releases import ReleaseError, load_trust_root
from smf_assurance.ops.cli.cli_json import ExplainJson, ExplainLedgerJson, ExplainReleaseJson
from smf_assurance.ops.cli.commands.ledger import trusted_gate_keys
from smf_assurance.ops.cli.explaining import print_explanation
from smf_assurance.ops.cli.output import emit, fail, first_line, say, table
from smf_assurance.ops.local.defaults import default_state_dir
from smf_assurance.ops.local.logs import configure_logging
from smf_assurance.ops.local.state import StateDir
from smf_assurance.pipeline.stores.evidence import NO_PROJECTION, TENANT_DOMAIN, release_ref
from smf_assurance.pipeline.stores.ledger import (
    CHECKPOINT_BAD_SIGNATURE,
    decision_entries,
    verify_ledger,
)
from smf_assurance.pipeline.stores.ledger_schema import StoredEntry
from smf_assurance.pipeline.stores.release_state import read_release_state
from smf_assurance.subjects.keyed import KeyedIdentifierError, PseudonymKey
from smf_assurance.subjects.release import ReleaseBundle, ReleaseCheckError, decode_bundle

DECISION_ID: Final = re.compile(r"sha256:[0-9a-f]{64}")
CORE_DISPOSITION: Final[dict[str, Disposition]] = {
    "allow": "allow",
    "hold": "conditional",
    "deny": "deny",
}
"""The ledger says ``hold`` where the decision core says ``conditional``
(``smf_assurance.pipeline.stores.evidence.LEDGER_DISPOSITION``, read backwards)."""


def _decision_entry(db: Path, decision_id: str) -> tuple[StoredEntry, list[StoredEntry]]:
    entries = decision_entries(db, decision_id)
    decisions = [e for e in entries if e.entry.kind == "decision"]
    if not decisions:
        fail(f"no decision {decision_id} in ledger {db}")
    return decisions[0], entries


def verified_ledger(db: Path, state: StateDir) -> int:  # noqa: RET503 - fail() ends it
    """The chain holds and every checkpoint in the file is this state's gate's; returns
    how many checkpoints tie the file to this state (0: nothing does yet, and the
    output says so: a checkpoint is signed every ``checkpoint_every`` entries or
    ``checkpoint_seconds``, and at ``up``'s shutdown)."""
    report = verify_ledger(db, [], trusted_gate_keys(None, state.root))
    if report.ok:
        return report.checkpoints
    if report.reason == CHECKPOINT_BAD_SIGNATURE:
        fail(
            f"ledger {db} is not this state's: its checkpoints are not signed by a gate key "
            f"of {state.registry}"
        )
    where = f" at seq {report.seq}" if report.seq is not None else ""
    fail(f"ledger {db} does not verify ({report.reason}{where}); see `ledger verify`")


def _deciding_release(entry: StoredEntry, state: StateDir) -> tuple[ReleaseText, str]:  # noqa: RET503 - fail() ends it
    """The release the entry names, from the state's accepted release or inbox."""
    if not state.trust_root.is_file():
        fail(f"no release trust root in {state.root}: its releases cannot be authenticated")
    try:
        root = load_trust_root(state.trust_root)
    except ReleaseError as exc:
        fail(first_line(exc))
    candidates: list[tuple[str, ReleaseBundle | ReleaseError]] = []
    if state.release_state.exists():
        stored = read_release_state(state.release_state)
        if stored is not None:
            try:
                candidates.append(("accepted release", decode_bundle(stored.bundle)))
            except ReleaseCheckError as exc:
                candidates.append(("accepted release", ReleaseError(str(exc))))
    candidates.extend((str(path), bundle) for path, bundle in inbox_bundles(state.release_inbox))
    wanted = entry.entry
    for source, bundle in candidates:
        if isinstance(bundle, ReleaseError):
            continue
        try:
            text = release_text(bundle, root)
        except ReleaseError:
            continue
        if (
            projection_id(text.enforcement) == wanted.projection_id
            and release_ref(text.manifest.release_id) == wanted.release_id
        ):
            return text, source
    fail(
        f"the release that decided {wanted.decision_id} (projection {wanted.projection_id}) "
        f"is not in {state.root} (checked its accepted release and its inbox, "
        f"{len(candidates)} releases); it is not explained under another release"
    )


def _tenant_test(state: StateDir, tenant_ref: str) -> Callable[[str], bool] | None:
    """Whether a policy's scope tenant is the decision's: the ledger keeps the tenant's
    pseudonym only, so the state's pseudonym key is needed (read, never created)."""
    path = state.tenant_key
    if not path.is_file():
        return None
    try:
        key = PseudonymKey(path.read_bytes())
    except (OSError, KeyedIdentifierError):
        return None
    return lambda tenant_id: key.identifier(TENANT_DOMAIN, tenant_id) == tenant_ref


def run_explain(args: argparse.Namespace) -> int:
    configure_logging(json=not sys.stderr.isatty(), level="warning")
    decision_id: str = args.decision_id
    if DECISION_ID.fullmatch(decision_id) is None:
        fail(f"{decision_id!r} is not a decision id (sha256: and 64 hex digits)", 2)
    state = StateDir(args.state_dir or default_state_dir())
    db: Path = args.db or state.ledger
    if not db.is_file():
        fail(f"no ledger at {db}")
    anchors = verified_ledger(db, state)
    stored, history = _decision_entry(db, decision_id)
    entry = stored.entry
    if entry.projection_id == NO_PROJECTION:
        fail(
            f"decision {decision_id} was refused before any policy ran "
            f"({', '.join(entry.reason_codes)}): no rule of a release decided it"
        )
    text, source = _deciding_release(stored, state)
    record = DecisionRecord(
        decision_id=decision_id,
        projection_id=entry.projection_id,
        disposition=CORE_DISPOSITION[entry.disposition or "deny"],
        reason_codes=entry.reason_codes,
    )
    try:
        explanation = explain(
            record,
            text.enforcement,
            text.analysis,
            in_tenant=_tenant_test(state, entry.tenant_ref),
        )
    except ExplanationError as exc:
        fail(first_line(exc))
    ledger = {
        "db": str(db),
        "seq": stored.seq,
        "entry_hash": stored.entry_hash,
        "at": entry.at,
        "checkpoints": anchors,
        "history": [
            {
                "seq": e.seq,
                "kind": e.entry.kind,
                "status": e.entry.status,
                "reason_codes": list(e.entry.reason_codes),
                "at": e.entry.at,
                "shadow_disposition": e.entry.shadow_disposition,
                "shadow_reason_codes": e.entry.shadow_reason_codes,
            }
            for e in history
        ],
    }
    release = {
        "release_id": text.manifest.release_id,
        "sequence": text.manifest.sequence,
        "manifest_hash": text.manifest_hash,
        "source": source,
    }
    if args.json:
        emit(
            ExplainJson(
                explanation=explanation,
                ledger=msgspec.convert(ledger, ExplainLedgerJson),
                release=msgspec.convert(release, ExplainReleaseJson),
            )
        )
        return 0
    print_explanation(explanation)
    say("")
    say(f"from ledger {db} seq {stored.seq}; release {text.manifest_hash} ({source})")
    if not anchors:
        say(
            "note: no checkpoint in the ledger yet, so nothing ties the file to this "
            "state's gate key; its chain holds"
        )
    later = [e for e in history if e.entry.kind != "decision"]
    if later:
        table(
            ("seq", "then", "status", "reason codes"),
            [_step(e) for e in later],
        )
    return 0


def _step(stored: StoredEntry) -> tuple[object, ...]:
    """A later entry of the decision as a row; a ``shadow`` entry says what
    the shadow release would have decided, and why, in its status and codes."""
    e = stored.entry
    if e.kind == "shadow":
        return (
            stored.seq,
            "shadow",
            f"would be {e.shadow_disposition}",
            e.shadow_reason_codes or (),
        )
    return (stored.seq, e.kind, e.status, e.reason_codes)
