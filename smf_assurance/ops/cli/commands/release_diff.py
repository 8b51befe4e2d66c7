"""``release diff``: what changes between two releases, statically and in
recorded traffic.

- Static: rules, policies and model providers added, removed or changed, and each
  policy's requirement changes with its layer (``smf_assurance.core.release_diff``),
  of two release folders read as written or authenticated with ``--trust-root``
  (``smf_assurance.governance.release_text``).
- Recorded (``--state-dir``): the ledger's ``shadow`` entries written while the
  second release ran as the shadow beside the first, counted by from -> to
  disposition, capability, rule, policy, layer and tenant pseudonym, with example
  decision ids, and a chart of changed decisions per rule
  (``smf_assurance.ops.cli.release_traffic``).
  The releases are then authenticated with the state's trust root; ``--shadow``
  takes them from the state: its accepted release and the shadow its gate keeps.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import msgspec

from smf_assurance.core.release_diff import FieldChange, ReleaseDiff, diff_releases
from smf_assurance.governance.release_text import ReleaseText, release_text
from smf_assurance.governance.releases import ReleaseError, load_trust_root, read_release_dir
from smf_assurance.ops.cli.cli_json import ReleaseDiffJson, ReleaseTrafficDiffJson
from smf_assurance.ops.cli.commands.explain import verified_ledger
from smf_assurance.ops.cli.output import emit, fail, first_line, parse_time, say, table
from smf_assurance.ops.cli.release_traffic import (
    recorded_json,
    recorded_traffic,
    say_recorded,
    write_chart,
)
from smf_assurance.ops.local.logs import configure_logging
from smf_assurance.ops.local.state import StateDir
from smf_assurance.pipeline.stores.release_state import read_release_state, read_shadow_state
from smf_assurance.subjects.canonical import canonical_bytes
from smf_assurance.subjects.release import (
    ReleaseBundle,
    ReleaseCheckError,
    TrustRoot,
    decode_bundle,
)


def _read_dir(folder: Path) -> ReleaseBundle:
    try:
        return read_release_dir(folder)
    except ReleaseError as exc:
        fail(str(exc), 2)


DIFF_CELL = 60
"""A value longer than this is cut in the table (``--json`` has it whole)."""


def _diff_text(folder: Path, root: TrustRoot | None) -> ReleaseText:
    try:
        return release_text(_read_dir(folder), root)
    except ReleaseError as exc:
        fail(f"{folder}: {exc}")


def _shown(value: Any) -> str:
    if value is None:
        return "-"
    text = value if isinstance(value, str) else canonical_bytes(value).decode("utf-8")
    return text if len(text) <= DIFF_CELL else text[: DIFF_CELL - 3] + "..."


def _diff_rows(diff: ReleaseDiff) -> list[tuple[str, str, str, str, str, str]]:
    rows = []
    for rule in diff.rules:
        changes = rule.fields or (FieldChange("title", None, rule.title),)
        for change in changes:
            rows.append(("rule", rule.rule_id, rule.change, change.field, change.old, change.new))
    for policy in diff.policies:
        changes = policy.fields + policy.requirements
        if not changes:
            changes = (FieldChange("layer", None, policy.layer),)
        for change in changes:
            row = (policy.policy_id, policy.change, change.field, change.old, change.new)
            rows.append(("policy", *row))
    for provider in diff.model_providers:
        for change in provider.fields:
            row = (provider.provider, provider.change, change.field, change.old, change.new)
            rows.append(("model provider", *row))
    return [(a, b, c, d, _shown(old), _shown(new)) for a, b, c, d, old, new in rows]


def _diff_json(
    diff: ReleaseDiff, old: ReleaseText, new: ReleaseText, authenticated: bool
) -> ReleaseDiffJson:
    value: dict[str, Any] = msgspec.to_builtins(diff)
    value["old"]["manifest_hash"] = old.manifest_hash
    value["new"]["manifest_hash"] = new.manifest_hash
    value["authenticated"] = authenticated
    value["unchanged"] = diff.unchanged
    return msgspec.convert(value, ReleaseDiffJson)


def _say_static(diff: ReleaseDiff, how: str) -> None:
    say(
        f"{diff.old.release_id} (seq {diff.old.release_sequence}) -> "
        f"{diff.new.release_id} (seq {diff.new.release_sequence}), {how}"
    )
    if diff.unchanged:
        say("no change: the same rules, policies, requirements and model providers")
        return
    table(("what", "id", "change", "field", "old", "new"), _diff_rows(diff))


def _diff_pair(args: argparse.Namespace) -> tuple[Path | None, Path | None]:
    """OLD NEW, or ``--from``/``--to``, or ``--shadow`` (with ``--state-dir``): one of the
    three, or a usage error."""
    given = (args.old is not None or args.new is not None) + (
        args.from_dir is not None or args.to_dir is not None
    )
    if given + args.shadow != 1:
        fail("release diff: give OLD_DIR NEW_DIR, or --from OLD_DIR --to NEW_DIR, or --shadow", 2)
    if args.shadow:
        if args.state_dir is None:
            fail("release diff --shadow: --state-dir is needed (its gate keeps the shadow)", 2)
        return None, None
    old, new = (args.old, args.new) if args.from_dir is None else (args.from_dir, args.to_dir)
    if old is None or new is None:
        fail("release diff: both releases are needed (OLD_DIR NEW_DIR, or --from and --to)", 2)
    if args.state_dir is None and (args.since or args.until or args.chart):
        fail("release diff: --since, --until and --chart read recorded traffic: add --state-dir", 2)
    return old, new


def _state_releases(state: StateDir, root: TrustRoot) -> tuple[ReleaseText, ReleaseText]:
    """``--shadow``: the state's accepted release and the shadow its gate keeps, both
    authenticated with the state's trust root (the lease is not judged: a diff
    decides nothing)."""
    if not state.release_state.exists():
        fail(f"no release state in {state.root}: its gate never accepted a release")
    stored = read_release_state(state.release_state)
    kept = read_shadow_state(state.release_state)
    if stored is None:
        fail(f"no release accepted in {state.root}")
    if kept is None:
        fail(
            f"the gate of {state.root} keeps no shadow (withdrawn, promoted, or never "
            "loaded): name the two release folders (OLD_DIR NEW_DIR --state-dir)"
        )
    try:
        old = release_text(decode_bundle(stored.bundle), root)
        new = release_text(decode_bundle(kept.bundle), root)
    except (ReleaseError, ReleaseCheckError) as exc:
        fail(f"{state.release_state}: {first_line(exc)}")
    return old, new


def run_diff(args: argparse.Namespace) -> int:
    """``release diff``: the static diff of two releases' projections
    (``smf_assurance.core.release_diff``), read as written or authenticated with
    ``--trust-root`` (``smf_assurance.governance.release_text``); with ``--state-dir`` the releases
    are
    authenticated with the state's trust root and the recorded traffic is added
    (``smf_assurance.ops.cli.release_traffic``)."""
    old_dir, new_dir = _diff_pair(args)
    window = (
        parse_time(args.since, "--since") if args.since else None,
        parse_time(args.until, "--until") if args.until else None,
    )
    root = None
    state = None if args.state_dir is None else StateDir(args.state_dir)
    trust_root = args.trust_root
    if state is not None and trust_root is None:
        trust_root = state.trust_root
        if not trust_root.is_file():
            fail(f"no release trust root in {state.root}: its releases cannot be authenticated")
    if trust_root is not None:
        try:
            root = load_trust_root(trust_root)
        except ReleaseError as exc:
            fail(str(exc), 2)
    if old_dir is None or new_dir is None:
        assert state is not None
        assert root is not None
        old, new = _state_releases(state, root)
    else:
        old, new = _diff_text(old_dir, root), _diff_text(new_dir, root)
    diff = diff_releases(old.enforcement, old.analysis, new.enforcement, new.analysis)
    how = "authenticated with the trust root" if root is not None else "read as written"
    if state is None:
        if args.json:
            emit(_diff_json(diff, old, new, root is not None))
            return 0
        _say_static(diff, how)
        return 0
    return _run_traffic_diff(args, state, diff, (old, new), window, how)


def _run_traffic_diff(
    args: argparse.Namespace,
    state: StateDir,
    diff: ReleaseDiff,
    pair: tuple[ReleaseText, ReleaseText],
    window: tuple[int | None, int | None],
    how: str,
) -> int:
    (old, new), (since, until) = pair, window
    configure_logging(json=not sys.stderr.isatty(), level="warning")  # stdout is the output
    db = state.ledger
    if not db.is_file():
        fail(f"no ledger at {db}")
    checkpoints = verified_ledger(db, state)
    recorded = recorded_traffic(db, checkpoints, old, new, since, until)
    if args.chart is not None:
        try:
            write_chart(recorded, old, new, args.chart)
        except OSError as exc:
            fail(f"cannot write {args.chart}: {exc.strerror}")
    if args.json:
        emit(
            ReleaseTrafficDiffJson(
                schema="smf.release-traffic-diff/1",
                diff=_diff_json(diff, old, new, True),
                recorded=recorded_json(recorded),
                chart=None if args.chart is None else str(args.chart),
            )
        )
        return 0
    _say_static(diff, how)
    say_recorded(recorded, old, new)
    if args.chart is not None:
        say(f"chart of changed decisions per rule written to {args.chart}")
    return 0
