"""The ``--json`` output of the team's command line (``python -m smf_tools``), one declared
type each, as :mod:`smf_assurance.ops.cli.cli_json` declares the product's.

The same rules hold (closed, keyword-only Structs; whole ids; closed enums; integers,
ratios ``_x1000``; Unix milliseconds), and the same :func:`smf_assurance.ops.cli.output.emit`
prints them. These commands are not the product's: they build and measure it (benchmarks,
release candidates and their signed reviews), so their types and their page
(``docs/TOOLS-JSON.md``) are here, out of the wheel. ``python -m smf_tools.cli_json`` (``make
cli-json``) writes the page; ``tests/cli/test_cli_json.py`` fails when it is stale.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Final, Literal

import msgspec

from smf_assurance.ops.cli import cli_json as product_cli_json
from smf_assurance.ops.cli.cli_json import CliJson, Count, Page, Path_, _
from smf_assurance.subjects.canonical import Identity
from smf_assurance.subjects.keys import Principal
from smf_assurance.subjects.patterns import Millis
from smf_assurance.subjects.release import KeyId
from smf_tools.bench.targets import Comparison

Nanoseconds = Annotated[int, msgspec.Meta(ge=0)]
X1000 = Annotated[int, msgspec.Meta(ge=0)]
"""A ratio or a limit times 1000, as an integer (canonical JSON has no floats)."""
CommitSha = Annotated[str, msgspec.Meta(pattern=r"^[0-9a-f]{40}\Z")]
"""A git commit or tree named whole: 40 lowercase hex digits."""


# --- bench ----------------------------------------------------------------------------


class Percentiles(CliJson, kw_only=True):
    """Latency percentiles of one series."""

    p50_ns: Annotated[Nanoseconds, _("median, ns")]
    p95_ns: Annotated[Nanoseconds, _("95th percentile, ns")]
    p99_ns: Annotated[Nanoseconds, _("99th percentile, ns")]


class Differences(CliJson, kw_only=True):
    """Percentiles of a per-sample difference of two timings, which can fall below zero
    when the baseline sample of a pair happened to be the slower one."""

    p50_ns: Annotated[int, _("median, ns (may be negative)")]
    p95_ns: Annotated[int, _("95th percentile, ns (may be negative)")]
    p99_ns: Annotated[int, _("99th percentile, ns (may be negative)")]


class Counted(Percentiles, kw_only=True):
    """Latency percentiles and the number of samples."""

    count: Annotated[Count, _("samples")]


class Series(Counted, kw_only=True):
    """A named latency series."""

    label: Annotated[str, _("what was timed")]


class GrowthRow(CliJson, kw_only=True):
    """One step of ``--evaluator-growth``."""

    extra_policies: Annotated[Count, _("other tenants' policies added")]
    indexed: Annotated[Counted, _("the evaluator with its policy index")]
    linear_scan: Annotated[Counted, _("the evaluator scanning every policy")]
    cedarpy: Annotated[Counted, _("cedarpy on the same requests")]


class BusThroughput(CliJson, kw_only=True):
    """One throughput series of ``--bus``."""

    label: Annotated[str, _("the series")]
    requests: Annotated[Count, _("requests sent")]
    in_flight: Annotated[Count, _("requests outstanding at once")]
    requests_per_s: Annotated[Count, _("requests per second")]


class BusRatio(CliJson, kw_only=True):
    """One ``--bus`` series over the bare echo on the same server."""

    label: Annotated[str, _("the series, over the echo floor")]
    p50_x1000: Annotated[X1000 | None, _("p50 over echo's p50, x1000")]
    p99_x1000: Annotated[X1000 | None, _("p99 over echo's p99, x1000")]
    throughput_x1000: Annotated[X1000 | None, _("requests/s over echo's, x1000")]


class BusSyncRatio(CliJson, kw_only=True):
    """One ``--bus`` series on the product's server (every JetStream write synced) over
    the same series on nats-server's default (a forced sync every two minutes)."""

    label: Annotated[str, _("the series, sync always over the two-minute default")]
    p50_x1000: Annotated[X1000 | None, _("p50 over the default's p50, x1000")]
    p99_x1000: Annotated[X1000 | None, _("p99 over the default's p99, x1000")]
    throughput_x1000: Annotated[X1000 | None, _("requests/s over the default's, x1000")]


class BusTargets(CliJson, kw_only=True):
    """The ``--bus`` ratio targets."""

    p50_at_most: Annotated[X1000, _("p50 ratio target, x1000")]
    p99_at_most: Annotated[X1000, _("p99 ratio target, x1000")]
    throughput_at_least: Annotated[X1000, _("throughput ratio target, x1000")]


class BusBench(CliJson, kw_only=True):
    """``--bus``: propose -> verdict through the gate beside a bare NATS echo."""

    nats_server: Annotated[str, _("nats-server version")]
    cpus: Annotated[Count, _("CPUs of the machine")]
    cpu_model: Annotated[str, _("CPU model name")]
    rounds: Annotated[Count, _("sequential requests per latency series")]
    in_flight: Annotated[Count, _("outstanding requests in the throughput series")]
    throughput_requests: Annotated[Count, _("requests per throughput series")]
    latency: Annotated[tuple[Series, ...], _("latency series")]
    throughput: Annotated[tuple[BusThroughput, ...], _("throughput series")]
    ratios: Annotated[tuple[BusRatio, ...], _("each series over the echo floor")]
    sync_always_over_default: Annotated[
        tuple[BusSyncRatio, ...], _("what syncing every JetStream write costs, per series")
    ]
    targets_x1000: Annotated[BusTargets, _("the ratio targets")]


class OutputRow(CliJson, kw_only=True):
    """One response size of ``--output``."""

    size: Annotated[str, _("response size (4 KB, 256 KB)")]
    straight_p50_ns: Annotated[Nanoseconds, _("straight through, p50 ns")]
    gated_p50_ns: Annotated[Nanoseconds, _("through the buffer gate, p50 ns")]
    gated_p99_ns: Annotated[Nanoseconds, _("through the buffer gate, p99 ns")]
    ratio_p50_x1000: Annotated[X1000, _("gated p50 over straight p50, x1000")]


class Placement(CliJson, kw_only=True):
    """Where one ``--cluster`` connection is."""

    connection: Annotated[str, _("a connection of the bench")]
    node: Annotated[str, _("the cluster node it is on")]


class Leader(CliJson, kw_only=True):
    """Which node leads one stream in ``--cluster``."""

    stream: Annotated[str, _("a JetStream stream or bucket")]
    node: Annotated[str, _("the node leading it")]


class Served(CliJson, kw_only=True):
    """Requests one gate replica served."""

    gate: Annotated[str, _("a gate replica")]
    requests: Annotated[Count, _("requests it served")]


class ClusterThroughput(CliJson, kw_only=True):
    """One ``--cluster`` throughput series."""

    label: Annotated[str, _("the series")]
    replicas: Annotated[Count, _("gate replicas")]
    requests: Annotated[Count, _("requests sent")]
    in_flight: Annotated[Count, _("requests outstanding at once")]
    elapsed_us: Annotated[Count, _("wall time, us")]
    requests_per_s: Annotated[Count, _("requests per second")]
    over_echo_x1000: Annotated[X1000, _("requests/s over the echo's, x1000")]
    served: Annotated[tuple[Served, ...], _("requests per replica")]


class ClusterBench(CliJson, kw_only=True):
    """``--cluster``: claims on SQLite beside KV R3, allows through one and two replicas."""

    nats_server: Annotated[str, _("nats-server version")]
    nodes: Annotated[Count, _("cluster nodes")]
    cpus: Annotated[Count, _("CPUs of the machine")]
    cpu_model: Annotated[str, _("CPU model name")]
    rounds: Annotated[Count, _("claims per store")]
    in_flight: Annotated[Count, _("outstanding requests in the throughput series")]
    requests: Annotated[Count, _("requests per throughput series")]
    placement: Annotated[tuple[Placement, ...], _("where each connection is")]
    leaders: Annotated[tuple[Leader, ...], _("which node leads each stream")]
    claim: Annotated[tuple[Series, ...], _("approval claim latency per store")]
    claim_kv_over_sqlite_p50_x1000: Annotated[X1000, _("KV claim p50 over SQLite's, x1000")]
    claim_kv_over_sqlite_p99_x1000: Annotated[X1000, _("KV claim p99 over SQLite's, x1000")]
    throughput: Annotated[tuple[ClusterThroughput, ...], _("allows/s, echo first")]
    two_over_one_replica_x1000: Annotated[X1000, _("two replicas' requests/s over one's, x1000")]
    sync_always: Annotated[
        bool, _("every node syncs each JetStream write before acknowledging it (/varz)")
    ]


class GatewayRow(CliJson, kw_only=True):
    """One ``--gateway`` series."""

    series: Annotated[str, _("what was requested")]
    samples: Annotated[Count, _("samples")]
    direct: Annotated[Percentiles, _("straight to the fake provider")]
    through_gateway: Annotated[Percentiles, _("through the model gateway")]
    output_decision: Annotated[Percentiles, _("the output gate's decision inside it")]
    gateway_own_added: Annotated[
        Differences, _("the gateway's own added latency: through - direct - decision, per pair")
    ]


class TargetJson(CliJson, kw_only=True):
    """A series' target, its measured value and whether it was met."""

    series: Annotated[str, _("the series the target is for")]
    measure: Annotated[str, _("what is compared, with its unit")]
    comparison: Annotated[Comparison, _("how the measured value must compare to the limit")]
    limit_x1000: Annotated[X1000, _("the target, x1000")]
    measured_x1000: Annotated[X1000, _("the measured value, x1000")]
    met: Annotated[bool, _("whether the target was met (informative; not the exit code)")]


class AgainstRow(CliJson, kw_only=True):
    """One series of ``--against``: each sitting's figure on both sides."""

    series: Annotated[str, _("what was measured, and in which mode")]
    unit: Annotated[Literal["p50 us", "req/s"], _("of every figure of the row")]
    before: Annotated[tuple[Count, ...], _("the earlier commit's figure, per sitting")]
    after: Annotated[tuple[Count, ...], _("this checkout's figure, per sitting")]
    after_over_before_x1000: Annotated[X1000, _("median after over median before, x1000")]
    within_budget: Annotated[bool, _("no worse than the budget: p50 not higher, req/s not lower")]


class AgainstBench(CliJson, kw_only=True):
    """``--against``: this checkout's allow beside an earlier commit's, in one run."""

    before: Annotated[CommitSha, _("the earlier commit")]
    after: Annotated[
        str, _("this checkout's commit; '+changes' when its tracked files differ from it")
    ]
    sittings: Annotated[Count, _("times each tree ran each mode, alternated")]
    rounds: Annotated[Count, _("sequential allows per p50")]
    in_flight: Annotated[Count, _("outstanding requests in the throughput series")]
    budget_percent: Annotated[Count, _("how much worse a series may be, in percent")]
    rows: Annotated[tuple[AgainstRow, ...], _("each series")]


class BenchJson(CliJson, kw_only=True, omit_defaults=True):
    """``bench --json``: each section is present only when its series ran."""

    machine: Annotated[str, _("architecture and Python")]
    evaluator: Annotated[tuple[Series, ...] | None, _("decision core and cedarpy latency")] = None
    cedar_over_smf_p50_x1000: Annotated[
        X1000 | None, _("cedarpy p50 over ours (hash inside), x1000")
    ] = None
    evaluator_growth: Annotated[
        tuple[GrowthRow, ...] | None, _("latency as other tenants' policies are added")
    ] = None
    bus: Annotated[BusBench | None, _("propose -> verdict over NATS beside an echo")] = None
    output: Annotated[tuple[OutputRow, ...] | None, _("the buffer gate beside straight")] = None
    cluster: Annotated[ClusterBench | None, _("claims and allows on a 3-node cluster")] = None
    gateway: Annotated[tuple[GatewayRow, ...] | None, _("the model gateway's series")] = None
    confinement: Annotated[
        tuple[Series, ...] | None,
        _("runtime run beside the bare runtime: starts, and model requests through the forwarders"),
    ] = None
    cli: Annotated[
        tuple[Series, ...] | None,
        _("the command line's start beside bare Python: --help, --version, each command"),
    ] = None
    against: Annotated[
        AgainstBench | None, _("this checkout's allow beside an earlier commit's")
    ] = None
    targets: Annotated[tuple[TargetJson, ...] | None, _("each target beside its figure")] = None


# --- review, candidate status -----------------------------------------------------------

ReviewVerdict = Literal["pass", "fail", "pass-with-notes"]


class ReviewStartJson(CliJson, kw_only=True):
    """``review start --json``: the candidate's commit was checked out, clean, then."""

    sha: Annotated[CommitSha, _("the candidate's commit, attested at the start")]
    tree: Annotated[CommitSha, _("its tree")]
    started_at_ms: Annotated[Millis, _("when the review started")]
    start_file: Annotated[Path_, _("where the start was recorded (inside the git directory)")]


class ReviewSignJson(CliJson, kw_only=True):
    """``review sign --json``: the signed review record that was written."""

    sha: Annotated[CommitSha, _("the commit the verdict is for (start and end attested it)")]
    scope: Annotated[Literal["claim", "family"], _("what was reviewed: one claim or a family")]
    target: Annotated[str, _("the claim id or the family")]
    verdict: Annotated[ReviewVerdict, _("pass, fail or pass-with-notes")]
    reviewer: Annotated[Principal, _("the reviewer: the key's registry principal")]
    key_id: Annotated[KeyId, _("the key that signed the record")]
    started_at_ms: Annotated[Millis, _("when the review started")]
    signed_at_ms: Annotated[Millis, _("when it was signed")]
    file: Annotated[Path_, _("the record written (a DSSE envelope)")]


class ReviewRowJson(CliJson, kw_only=True):
    """One row of ``candidate status``: a review, or the absence of one."""

    family: Annotated[str | None, _("the gate family; null for a refused record")]
    claim: Annotated[str | None, _("the claim; null for a family review or a refused record")]
    state: Annotated[
        Literal["current", "stale", "missing", "refused"],
        _(
            "current: holds for this SHA; stale: what it rests on changed; missing: no current "
            "review; refused: the record does not count"
        ),
    ]
    verdict: Annotated[ReviewVerdict | None, _("the signed verdict; null when missing or refused")]
    reviewer: Annotated[Principal | None, _("who signed it; null when missing or refused")]
    reviewed_sha: Annotated[CommitSha | None, _("the commit it was signed for")]
    file: Annotated[str | None, _("the record's file name in the reviews folder")]
    why: Annotated[str, _("why this state: the changed files, or the refusal's reason code")]


class CandidateStatusJson(CliJson, kw_only=True):
    """``candidate status --json``."""

    sha: Annotated[CommitSha, _("the candidate's commit")]
    tree: Annotated[CommitSha, _("its tree")]
    complete: Annotated[bool, _("every claim has a current review that did not fail")]
    rows: Annotated[tuple[ReviewRowJson, ...], _("per family, then per claim; refused last")]


# --- candidate build ----------------------------------------------------------------------


class CandidateClaimJson(CliJson, kw_only=True):
    """One claim's row, as the matrix has it at this commit."""

    id: Annotated[str, _("the claim's id (family.name) in docs/claims.toml")]
    family: Annotated[str, _("its gate family")]
    state: Annotated[
        Literal["green", "open"],
        _("green: every test carrying its marker passed at this commit; else open"),
    ]
    tests: Annotated[Count, _("how many tests carry its marker at this commit")]
    open_because: Annotated[tuple[str, ...], _("why it is open (empty when green)")]


class CandidateSuiteJson(CliJson, kw_only=True):
    """What the candidate's tests were held to: the whole suite its commit collects."""

    collected: Annotated[Count, _("tests the commit's clone collects (pytest --collect-only)")]
    ran: Annotated[Count, _("test cases in the JUnit report (every collected one at least)")]
    passed: Annotated[Count, _("cases that passed")]
    failed: Annotated[Count, _("cases that failed (a candidate is built only at 0)")]
    errors: Annotated[Count, _("cases that errored (a candidate is built only at 0)")]
    skipped: Annotated[Count, _("cases that were skipped: their claims stay open")]


class CandidateBuildJson(CliJson, kw_only=True):
    """``candidate build --json``: the matrix written and signed for one commit."""

    schema: Annotated[Literal["smf.candidate/1"], _("the matrix's schema")]
    sha: Annotated[CommitSha, _("the commit every row names")]
    tree: Annotated[CommitSha, _("that commit's tree hash")]
    signed_by: Annotated[KeyId, _("the release key that signed candidate.dsse.json")]
    dist: Annotated[
        Literal["built", "no-target", "skipped"],
        _("make dist ran / the commit has no dist target / --no-dist"),
    ]
    artifacts: Annotated[dict[str, Identity], _("each built file's name and sha256")]
    runtimes: Annotated[dict[str, str], _("runtime -> version pinned at this commit")]
    suite: Annotated[CandidateSuiteJson, _("the report's totals beside the collected count")]
    green: Annotated[Count, _("claims whose every test passed")]
    open: Annotated[Count, _("claims with a missing, skipped, failing or no test")]
    claims: Annotated[tuple[CandidateClaimJson, ...], _("every declared claim, in file order")]
    files: Annotated[dict[str, Path_], _("json, markdown, dsse, junit: the files written")]


# --- repeat -------------------------------------------------------------------------------


class RepeatFailureJson(CliJson, kw_only=True):
    """One run that failed, and where its output was kept."""

    run: Annotated[Count, _("the run's number, from 1")]
    status: Annotated[int, _("pytest's exit status")]
    log: Annotated[Path_, _("the run's output (stdout, then stderr)")]


class RepeatJson(CliJson, kw_only=True):
    """``repeat --json``: how many fresh runs of the tests passed, under how much load.
    Printed before the command exits 1 when any run failed."""

    runs: Annotated[Count, _("fresh pytest processes run")]
    passed: Annotated[Count, _("runs that exited 0")]
    failed: Annotated[Count, _("runs that did not")]
    burners: Annotated[Count, _("processes spinning on the CPUs meanwhile")]
    p50_ns: Annotated[Nanoseconds, _("median run, start to exit, ns")]
    max_ns: Annotated[Nanoseconds, _("slowest run, ns")]
    failures: Annotated[tuple[RepeatFailureJson, ...], _("each failed run, in order")]


# --- the table of commands -----------------------------------------------------------------

COMMANDS: Final[dict[tuple[str, ...], tuple[type[CliJson], ...]]] = {
    ("bench",): (BenchJson,),
    ("candidate", "build"): (CandidateBuildJson,),
    ("review", "start"): (ReviewStartJson,),
    ("review", "sign"): (ReviewSignJson,),
    ("candidate", "status"): (CandidateStatusJson,),
    ("repeat",): (RepeatJson,),
}
"""Each command of ``python -m smf_tools`` with ``--json`` and its types: what it prints, then
any refusal it prints."""

DOC: Final = Path(__file__).resolve().parents[1] / "docs" / "TOOLS-JSON.md"

_HEAD = """\
# The `--json` output of the team's tools

Generated from `smf_tools/cli_json.py` by `python -m smf_tools.cli_json` (or `make cli-json`);
`tests/cli/test_cli_json.py` fails when this page is stale. Do not edit it by hand.

The team's command line, `python -m smf_tools COMMAND` from the checkout's root (not in the
wheel: benchmarks, release candidates and their reviews), prints its `--json` as
`smf-assurance` does (`docs/CLI-JSON.md`): one line of canonical JSON, one closed object,
whole ids, closed enums, integers (ratios `_x1000`, latencies in ns), Unix milliseconds.

A command that fails prints nothing on stdout and one line on stderr, unless
its entry below names what it prints then.
"""

PAGE: Final = Page(COMMANDS, {}, _HEAD, DOC)
"""The team's page: the commands of ``python -m smf_tools``."""


def render() -> str:
    """The whole of ``docs/TOOLS-JSON.md``, from the types."""
    return product_cli_json.render(PAGE)


def main(argv: list[str]) -> int:
    """Write ``docs/TOOLS-JSON.md``; with ``--check``, exit 1 if it differs."""
    return product_cli_json.main(argv, PAGE)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
