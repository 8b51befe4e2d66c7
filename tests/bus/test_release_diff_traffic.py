"""The shadow on the command line: publish, status, diff over recorded traffic,
explain, withdraw. Real nats-server, real gate, real SQLite ledger.

Proves:
- ``release publish --shadow`` waits for the gate's signed word (``adopted``: it
  runs it) and reports a refusal with its reason code (exit 1); ``--state-dir``
  is refused (a shadow is distributed through the bucket);
- ``release diff --shadow --state-dir`` (and ``--from/--to``, and OLD NEW with a
  state) counts exactly what the ledger's shadow entries say, by from -> to
  disposition, capability, rule, policy, layer and tenant pseudonym, with example
  decision ids; ``--since``/``--until`` bound the window; the static part lists the
  changed rule and each changed requirement; ``--chart`` writes an SVG with one
  bar per rule; a pair that never ran as active and shadow counts nothing;
- ``release status`` shows the shadow each gate runs, with its counts, and the one
  a state keeps; ``explain`` of a changed decision shows what the shadow would
  have decided; ``release withdraw-shadow`` stops it at the gate, after which
  ``--shadow`` is refused in one line and the folders still give the diff;
- every denial the gate answers names a decision id that ``explain`` finds: a
  policy's denial is explained, one refused before any policy ran is said to be so.

Does not prove: several gates' ledgers together (each gate's ledger is read
alone, one state directory at a time).
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from nats.aio.client import Client

from smf_assurance.adapters.output import OutputStreamer
from smf_assurance.core.shadow import policy_ref, rule_ref
from smf_assurance.governance.releases import write_release_dir
from smf_assurance.ops.demo.script import SCENARIOS
from smf_assurance.ops.local.logs import configure_logging
from smf_assurance.ops.local.natsserver import EmbeddedNatsServer
from smf_assurance.ops.local.state import ADAPTER_ID, RUNTIME_ID, StateDir
from smf_assurance.pipeline.stores.evidence import TENANT_DOMAIN
from smf_assurance.subjects.keys import generate_signing_key
from smf_assurance.subjects.messages import Verdict
from tests.support.bus_helpers import wait_for
from tests.support.release_distribution import acli, current_inbox, next_release
from tests.support.shadow_release import (
    ASSOCIATE,
    CLEAN,
    INTERNAL,
    OUTPUT,
    OUTPUT_RULE,
    RETENTION,
    RETENTION_RULE,
    GateFactory,
    gates,
    retention_deletion,
    runtime,
    scenario,
    shadow_entries,
    shadow_id,
    tight_shadow,
)

__all__ = ["gates"]  # the gate factory fixture, shared with test_shadow_release


async def run_mix(nc: Client, state: StateDir) -> tuple[list[Verdict], list[Verdict]]:
    """The known mix: the five scenarios, three more retention deletions, one internal
    output, one proposal refused at normalization. Returns (changing, all)."""
    client = runtime(nc, state)
    every = [await client.propose(scenario(client, a)) for a in SCENARIOS]
    deletions = [await client.propose(retention_deletion(client, f"doc-cli-{n}")) for n in range(3)]
    streamer = OutputStreamer(
        nc, state.key("runtime"), RUNTIME_ID, "1.0", ADAPTER_ID, gate_keys=state.gate_keys()
    )
    output = await streamer.stream(
        [b"Draft memo for the partner."], actor=ASSOCIATE, facts=CLEAN, destination=INTERNAL
    )
    refused = await client.propose(
        client.build(native_tool="dms_delete", arguments={}, actor=ASSOCIATE, facts=CLEAN)
    )
    retention = next(
        v for v, a in zip(every, SCENARIOS, strict=True) if a.expected_outcome == "allow"
    )
    changing = [retention, *deletions, output.verdict]
    return changing, [*every, *deletions, output.verdict, refused]


def counted(rows: list[dict[str, Any]]) -> dict[str, int]:
    return {row["value"]: row["count"] for row in rows}


async def test_the_shadow_on_the_command_line(
    state: StateDir,
    gates: GateFactory,
    nats_server: EmbeddedNatsServer,
    nc: Client,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    configure_logging(json=True, level="critical")
    gate = await gates(state)
    capsys.readouterr()
    url, where = nats_server.url, str(state.root)
    base, tight = tmp_path / "base", tmp_path / "tight"
    write_release_dir(current_inbox(state), base)
    write_release_dir(tight_shadow(state, tmp_path), tight)

    code, _, err = await acli(
        ["release", "publish", str(tight), "--shadow", "--state-dir", where], capsys
    )
    assert code == 2
    assert "use --nats" in err
    code, out, err = await acli(
        ["release", "publish", str(tight), "--shadow", "--nats", url, "--json"], capsys
    )
    assert (code, err) == (0, ""), err
    published = json.loads(out)
    assert published["shadow"] is True
    assert [(g["outcome"], g["active_release_id"]) for g in published["gates"]] == [
        ("adopted", "smf-scenarios-2026.11")
    ]
    assert shadow_id(gate) == published["release_id"]

    changing, everything = await run_mix(nc, state)
    assert gate.shadow is not None
    await gate.shadow.settled()
    entries = shadow_entries(state)
    assert [e.entry.decision_id for e in entries] == [v.decision_id for v in changing]

    chart = tmp_path / "changed.svg"
    code, out, err = await acli(
        ["release", "diff", "--shadow", "--state-dir", where, "--chart", str(chart), "--json"],
        capsys,
    )
    assert (code, err) == (0, ""), err
    report = json.loads(out)
    recorded = report["recorded"]
    assert recorded["total"] == len(entries) == 5
    moves = Counter((e.entry.disposition, e.entry.shadow_disposition) for e in entries)
    assert {(m["from"], m["to"]): m["count"] for m in recorded["moves"]} == dict(moves)
    assert {(m["from"], m["to"]): m["count"] for m in recorded["moves"]} == {
        ("allow", "hold"): 4,
        ("allow", "deny"): 1,
    }
    deletions = [str(v.decision_id) for v in changing[:4]]
    assert recorded["moves"][0]["examples"] == deletions[:3]
    assert counted(recorded["by_policy"]) == {RETENTION: 4, OUTPUT: 1}
    assert counted(recorded["by_rule"]) == {RETENTION_RULE: 4, OUTPUT_RULE: 1}
    assert counted(recorded["by_layer"]) == {"customer": 5}
    assert counted(recorded["by_capability"]) == {"document.delete": 4, "output.deliver": 1}
    tenant = state.pseudonym_key().identifier(TENANT_DOMAIN, "tenant-acme")
    assert counted(recorded["by_tenant"]) == {tenant: 5}
    assert recorded["unresolved"] == []
    # the counts are the entries' own: each dimension recounted from the ledger
    refs = Counter(r for e in entries for r in e.entry.differing_policy_refs or ())
    assert refs == Counter({policy_ref(RETENTION): 4, policy_ref(OUTPUT): 1})
    rules = Counter(r for e in entries for r in e.entry.differing_rule_refs or ())
    assert rules == Counter({rule_ref(RETENTION_RULE): 4, rule_ref(OUTPUT_RULE): 1})
    assert Counter(e.entry.capability for e in entries) == Counter(
        counted(recorded["by_capability"])
    )

    static = report["diff"]
    assert static["authenticated"] is True
    assert [r["rule_id"] for r in static["rules"]] == [RETENTION_RULE]
    assert [f["field"] for f in static["rules"][0]["fields"]] == ["title"]
    changed = {p["policy_id"]: p for p in static["policies"]}
    assert set(changed) == {RETENTION, OUTPUT}
    assert {f["field"] for f in changed[RETENTION]["fields"]} == {"effect", "reason_code"}
    assert {f["field"] for f in changed[RETENTION]["requirements"]} == {
        "approval_count",
        "required_roles",
    }
    assert {f["field"] for f in changed[OUTPUT]["fields"]} == {"effect", "reason_code"}

    svg = ET.parse(chart).getroot()
    bars = {
        g.get("data-label"): int(g.get("data-value") or 0)
        for g in svg.iter("{http://www.w3.org/2000/svg}g")
    }
    assert bars == {RETENTION_RULE: 4, OUTPUT_RULE: 1}

    for pair in (
        ["--from", str(base), "--to", str(tight)],
        [str(base), str(tight)],
    ):
        code, out, err = await acli(
            ["release", "diff", *pair, "--state-dir", where, "--json"], capsys
        )
        assert (code, err) == (0, ""), err
        assert json.loads(out)["recorded"] == recorded
    code, out, _ = await acli(
        ["release", "diff", str(tight), str(base), "--state-dir", where, "--json"], capsys
    )
    assert json.loads(out)["recorded"]["total"] == 0  # never ran as that pair
    code, out, _ = await acli(
        ["release", "diff", "--shadow", "--state-dir", where, "--since", "2999-01-01T00:00:00Z"],
        capsys,
    )
    assert code == 0
    assert "0 decision(s)" in out
    code, out, _ = await acli(
        [
            "release",
            "diff",
            "--shadow",
            "--state-dir",
            where,
            "--until",
            "2000-01-01T00:00:00Z",
            "--json",
        ],
        capsys,
    )
    assert json.loads(out)["recorded"]["total"] == 0
    code, out, _ = await acli(["release", "diff", "--shadow", "--state-dir", where], capsys)
    assert code == 0
    assert "5 decision(s) made under smf-scenarios-2026.11 would change" in out
    assert RETENTION_RULE in out
    assert "hmac-sha256:" + tenant.split(":")[1][:12] in out
    assert tenant not in out  # the table cuts it; --json has it whole

    code, out, err = await acli(["release", "status", "--nats", url, "--json"], capsys)
    (gate_status,) = json.loads(out)["gates"]
    assert gate_status["shadow"]["release_id"] == published["release_id"]
    assert gate_status["shadow"]["counts"]["recorded"] == 5
    assert "shadow" in [row["key"] for row in json.loads(out)["bucket"]]
    code, out, _ = await acli(["release", "status", "--state-dir", where, "--json"], capsys)
    assert json.loads(out)["shadow"]["release_id"] == published["release_id"]

    code, out, _ = await acli(["explain", deletions[1], "--state-dir", where, "--json"], capsys)
    assert code == 0
    steps = json.loads(out)["ledger"]["history"]
    assert [(s["kind"], s["shadow_disposition"]) for s in steps] == [
        ("decision", None),
        ("shadow", "hold"),
    ]
    code, out, _ = await acli(["explain", deletions[1], "--state-dir", where], capsys)
    assert "would be hold" in out

    # every denial names a decision id explain finds
    denials = [v for v in everything if v.outcome == "deny"]
    assert len(denials) == 4
    for verdict in denials:
        assert verdict.decision_id is not None, verdict
        code, out, err = await acli(["explain", verdict.decision_id, "--state-dir", where], capsys)
        if verdict.reason_codes == ("missing_required_argument",):
            assert code == 1
            assert "was refused before any policy ran (missing_required_argument)" in err
        else:
            assert (code, err) == (0, ""), err
            assert verdict.reason_codes[0] in out

    code, out, err = await acli(["release", "withdraw-shadow", "--nats", url, "--json"], capsys)
    assert (code, err) == (0, ""), err
    withdrawn = json.loads(out)
    assert withdrawn["withdrawn"] is True
    assert withdrawn["gates"] == [{"gate": "smf-gate", "shadow_release_id": None}]
    assert shadow_id(gate) is None
    code, _, err = await acli(["release", "diff", "--shadow", "--state-dir", where], capsys)
    assert code == 1
    assert "keeps no shadow" in err
    assert len(err.strip().splitlines()) == 1
    code, out, _ = await acli(
        ["release", "diff", str(base), str(tight), "--state-dir", where, "--json"], capsys
    )
    assert json.loads(out)["recorded"]["total"] == 5  # the entries stay
    code, out, _ = await acli(["release", "withdraw-shadow", "--nats", url], capsys)
    assert code == 0
    assert "holds no shadow" in out

    foreign = tmp_path / "foreign"
    write_release_dir(
        next_release(
            state, tmp_path, current_inbox(state), "foreign", signers=[generate_signing_key()]
        ),
        foreign,
    )
    code, out, err = await acli(
        ["release", "publish", str(foreign), "--shadow", "--nats", url, "--json"], capsys
    )
    assert code == 1
    (refusal,) = json.loads(out)["gates"]
    assert (refusal["outcome"], refusal["reason_code"], refusal["retryable"]) == (
        "refused",
        "release_bad_signature",
        False,
    )
    assert "as the shadow" in err
    await wait_for(lambda: shadow_id(gate) is None, timeout=1)


async def test_the_diff_usage_errors_are_one_line(
    state: StateDir, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = tmp_path / "base"
    write_release_dir(current_inbox(state), base)
    for argv, says in (
        (["release", "diff"], "give OLD_DIR NEW_DIR"),
        (["release", "diff", str(base)], "both releases"),
        (["release", "diff", "--shadow"], "--state-dir is needed"),
        (
            ["release", "diff", str(base), str(base), "--shadow", "--state-dir", str(state.root)],
            "give OLD_DIR NEW_DIR",
        ),
        (
            ["release", "diff", str(base), str(base), "--since", "2026-01-01T00:00:00Z"],
            "add --state-dir",
        ),
        (
            ["release", "diff", "--shadow", "--state-dir", str(state.root), "--since", "yesterday"],
            "--since",
        ),
    ):
        code, out, err = await acli(argv, capsys)
        assert code == 2, argv
        assert out == ""
        assert says in err, (argv, err)
