"""Hermes's other surfaces, driven end to end against the REAL runtime.

hermes-agent 0.19.0 in its own cached venv (with the MCP SDK and
python-telegram-bot at the versions Hermes pins in its own extras,
``smf_assurance.ops.runtimes.hermes_env.SURFACE_PACKAGES``), inside ``unshare -n`` with loopback
only
when run as root, with the real gate and a real nats-server with
authorization on (tests/support/hermes_harness.py, one harness for the module). Every
model turn goes through the SMF model gateway (Hermes's ``model.base_url`` is
the gateway, as in tests/runtimes/test_hermes_gateway.py); fakes stand only for what is
outside our system, each a real local server: the model provider, a Telegram
Bot API, an MCP server's downstream endpoint.

The module's gate runs on a firm's release (the shipped scenario corpus plus
two customer policies, without its confinement requirement): writes are allowed
outside legal hold, and the ``terminal`` tool's commands are allowed (its other
process tools are not),
so each surface shows an allowed call doing its work and a denied one leaving
no effect. Its mapper table adds the two tools an operator maps for the MCP
server the test adds (``mcp__matter__list_notes``, ``mcp__matter__write_note``).

Surfaces, one test each (docs/HERMES.md, surface matrix):

1. Gateway delivery through Hermes's Telegram platform against a fake Bot API
   (``platforms.telegram.extra.base_url``), in its default settings (a
   config without streaming keys: no streaming) and with the shipped
   per-platform default ``display.platforms.telegram.streaming: true`` (drafts
   in a private chat, a message edited as it streams in a group): what the
   fake platform receives for a held reply, and for an allowed one.
2. Cron, run by Hermes's own scheduler: an agent job (its tool calls are
   proposed and decided) and a ``no_agent`` script job (runs with nothing on
   the bus: a negative finding), both run with ``hermes cron run``; and both
   kinds delivering to Telegram, fired by a running gateway's ticker (the
   agent's reply decided at the model gateway, the script's output ungated).
3. Background work: a process started by one ``terminal`` call and polled and
   killed by later ``process`` calls, each decided on its own; a subagent
   started with ``delegate_task(background=true)`` whose calls are decided
   while the parent waits.
4. A real MCP server (stdio, written with the MCP SDK) added with ``hermes mcp
   add``: a mapped read is allowed and reaches it; a mapped write is refused
   (the adapter knows the legal hold of Hermes's own file tools only); an
   unmapped tool is ``unknown_tool``; a refused call reaches neither the
   server nor its downstream.

Does not prove: other platforms, other Hermes versions, cron's standalone
delivery (no gateway running: it goes to the public Bot API, not drivable
offline), or that the background process and the MCP server are confined by
the OS (they run as the same user as Hermes).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from smf_assurance.subjects.canonical import sha256_identity
from tests.support.hermes_conformance import (
    ACTOR,
    HermesRuns,
    call,
    harness,
    tool_results,
    verdicts,
)
from tests.support.hermes_patch_release import permissive_corpus

pytestmark = pytest.mark.slow

PRIVILEGED = "PRIVILEGED & CONFIDENTIAL: our settlement floor is 2M, keep this between us."
ALLOWED = "The hearing is on Monday at 10 in courtroom 4B, please bring the exhibits."
HELD_NOTICE = "SMF Assurance Gate"
TERMINAL_RULE = "urn:smf:rule:test:matter-workspace-commands"
TERMINAL_ALLOWED = "matter_workspace_command"
CLIENT = 5550001
"""The Telegram user id the fake platform's messages come from (allowed by Hermes)."""
PRIVATE_CHAT = {"id": CLIENT, "type": "private", "first_name": "Client"}
GROUP_CHAT = {"id": -1009001, "type": "group", "title": "Acme matter team"}
TELEGRAM_STREAMING = {"display": {"platforms": {"telegram": {"streaming": True}}}}
"""``hermes_cli/config.py`` DEFAULT_CONFIG's per-platform value for Telegram, written out
(the gateway reads the raw file, so the shipped default applies only once it is there)."""

MCP_TOOLS = {
    "mcp__matter__list_notes": {
        "capability": "document.read",
        "effects": {"egress": False, "persistence": "none", "reversibility": "full"},
        "channel": "filesystem",
        "locality": "internal",
        "target_arg": "folder",
        "required_args": ["folder"],
    },
    "mcp__matter__write_note": {
        "capability": "document.write",
        "effects": {"egress": False, "persistence": "local", "reversibility": "limited"},
        "channel": "filesystem",
        "locality": "internal",
        "target_arg": "path",
        "content_arg": "text",
        "required_args": ["path", "text"],
        "required_facts": ["legal_hold"],
    },
}
"""How the operator maps the test MCP server's tools (``mcp__<server>__<tool>`` in 0.19.0); its
``send_notice`` stays unmapped."""


def firm_corpus(directory: Path) -> Path:
    """The patch module's firm release (writes allowed outside legal hold) plus one rule
    and customer policy allowing ``terminal`` commands (not ``process``, not code).

    Without the shipped corpus's confinement requirement (``confinement.json``): these
    surfaces run unconfined (a cron job cannot even be installed in a confined Hermes,
    whose scheduler folder is read-only), and what each test shows is that every call of
    the surface is proposed and decided. The requirement itself, with the real Hermes,
    is tests/runtimes/test_hermes_confined.py's."""
    permissive_corpus(directory)
    (directory / "confinement.json").unlink()
    rules = json.loads((directory / "rules.json").read_text())
    template = rules[-1]
    statement = "A command in the matter workspace's terminal may be run."
    rules.append(
        {
            **template,
            "rule_id": TERMINAL_RULE,
            "title": "Commands in the matter workspace",
            "locator": f"tests/runtimes/test_hermes_surfaces.py#{TERMINAL_RULE}",
            "statement": statement,
            "source_hash": sha256_identity(statement.encode()),
            "when": {
                "all": [
                    {"eq": {"fact": "capability", "value": "process.execute"}},
                    {"eq": {"fact": "runtime.native_tool", "value": "terminal"}},
                ]
            },
        }
    )
    (directory / "rules.json").write_text(json.dumps(rules))
    policies = json.loads((directory / "policies.json").read_text())
    policies.append(
        {
            "policy_id": "customer.acme.workspace-commands",
            "layer": "customer",
            "scope": {"tenant_id": "tenant-acme"},
            "rule_id": TERMINAL_RULE,
            "effect": "allow",
            "reason_code": TERMINAL_ALLOWED,
        }
    )
    (directory / "policies.json").write_text(json.dumps(policies))
    return directory


@pytest.fixture(scope="module")
def hermes(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[HermesRuns]:
    corpus = firm_corpus(tmp_path_factory.mktemp("corpus") / "firm")
    with harness(request, tmp_path_factory, corpus, MCP_TOOLS, surfaces=True) as runs:
        yield runs


def context(reply: dict[str, Any], classification: str = "internal") -> dict[str, Any]:
    return {
        "schema": "smf.hermes-context/1",
        "actor": ACTOR,
        "facts": {
            "classification": classification,
            "injection_taint": "clear",
            "redaction_status": "none",
        },
        "legal_hold_paths": ["{{root}}/held"],
        "reply": reply,
    }


CLIENT_TELEGRAM = {"address": "telegram:client", "locality": "external"}
FIRM_TELEGRAM = {"address": "telegram:firm-partners", "locality": "internal"}


def gated(hermes: HermesRuns, name: str, scripts: dict[str, Any], **command: Any) -> Any:
    """A run whose model turns go through the SMF model gateway, default display."""
    command.setdefault("context", context({"destination": FIRM_TELEGRAM}))
    return hermes.run(name, scripts, via_gateway=True, display="default", **command)


def decisions(run: dict[str, Any]) -> list[tuple[str, list[str]]]:
    return [(e["disposition"], e["reason_codes"]) for e in run["ledger"] if e["kind"] == "decision"]


def outcomes(run: dict[str, Any]) -> list[tuple[str, list[str]]]:
    return [(v["outcome"], v["reason_codes"]) for v in verdicts(run)]


def decided(run: dict[str, Any]) -> list[tuple[str, str, str | None]]:
    """Each proposal on the bus (the tool it named), joined with the gate's signed verdict
    for it and the ledger's decision entry for that verdict: (tool, outcome, disposition).
    A proposal without a verdict, or a verdict naming a decision the ledger does not
    hold, fails here; a refusal before any decision (no decision id) is found by the
    refusal entry its verdict names (every denial is evidence, ``Gate._recorded``)."""
    answers = {v["proposal_id"]: v for v in verdicts(run)}
    evidence = {e["decision_id"]: e for e in run["ledger"] if e["kind"] == "decision"}
    entries = {e["entry_hash"]: e for e in run["ledger"]}
    rows = []
    for proposal in verdicts(run, "proposal"):
        verdict = answers[proposal["proposal_id"]]
        if verdict["decision_id"] is not None:
            entry = evidence[verdict["decision_id"]]
        else:
            (entry_hash,) = verdict["evidence"]
            entry = entries[entry_hash]
        rows.append((proposal["native_tool"], verdict["outcome"], entry["disposition"]))
    return rows


def texts(run: dict[str, Any]) -> list[str]:
    """Every text Hermes sent to the fake Telegram: messages, drafts, edits."""
    return [
        json.dumps(s["params"].get("text", ""))
        for s in run["telegram"]
        if s["method"] != "sendChatAction"
    ]


# -- 1. gateway delivery: Telegram ---------------------------------------------------------


def telegram_messages(scenario: str, expect: str | list[str]) -> list[dict[str, Any]]:
    """One message in the client's private chat, one in the matter team's group (which
    mentions the bot, as Hermes requires in groups by default); ``expect``: the reply's
    text the harness waits for (any of them)."""
    return [
        {
            "chat": PRIVATE_CHAT,
            "user": CLIENT,
            "text": f"SCENARIO:{scenario} what should I tell the client?",
            "expect": expect,
        },
        {
            "chat": GROUP_CHAT,
            "user": CLIENT,
            "text": f"@smf_test_bot SCENARIO:{scenario} and to the team?",
            "expect": expect,
        },
    ]


def delivered(run: dict[str, Any], chat: dict[str, Any], needle: str) -> list[dict[str, Any]]:
    """Messages and edits to ``chat`` that hold ``needle`` and are no longer being edited."""
    return [
        s
        for s in run["telegram"]
        if s["method"] in {"sendMessage", "editMessageText"}
        and str(s["params"].get("chat_id")) == str(chat["id"])
        and needle in str(s["params"].get("text", ""))
        and CURSOR not in str(s["params"].get("text", ""))
    ]


def unescaped(text: str) -> str:
    """A text Hermes sent in MarkdownV2 as it reads: escapes and the streaming cursor gone."""
    return re.sub(r"\\(.)", r"\1", text).replace(CURSOR, "").rstrip()


def streamed(run: dict[str, Any]) -> list[str]:
    """The calls that show a reply being streamed: drafts, and edits of a message."""
    return [s["method"] for s in run["telegram"] if s["method"] in STREAM_METHODS]


CURSOR = "\u2589"
STREAM_METHODS = frozenset({"sendMessageDraft", "editMessageText"})


@pytest.mark.parametrize("streaming", ["default", "streaming"])
def test_telegram_delivery_never_carries_held_text_and_delivers_an_allowed_reply(
    hermes: HermesRuns, streaming: str
) -> None:
    """Hermes's Telegram platform (``hermes gateway run``) against a fake Bot API, the
    model behind the SMF model gateway. A privileged reply bound for the client: the
    fake platform receives the gateway's held notice in both chats and nothing of the
    reply's text in any call (message, draft or edit). An allowed reply to the firm's
    chat arrives in both chats, and not before the gate's allow in the ledger. With
    streaming on (the shipped per-platform value for Telegram) the reply is edited after
    it was sent, and a draft, when Hermes shows one, is in the private chat, a prefix of
    the allowed reply, not before the allow; in the default settings (no streaming key
    in the file Hermes's gateway reads) the reply is not streamed.

    Whether the private chat gets a draft first is Hermes's timing, not ours: the
    gateway writes the decided turn whole, and Hermes's stream consumer (polling its
    queue every 50 ms) shows a draft only when it drains the text before the run's end
    marker, about 50 ms later; under load both arrive in one drain and the reply is
    sent without a draft (seen in CI). So a draft is checked when present, not
    required."""
    config = TELEGRAM_STREAMING if streaming == "streaming" else {}
    name = f"tg-held-{streaming}"
    held = gated(
        hermes,
        name,
        {name: {"calls": [], "final": PRIVILEGED}},
        op="telegram",
        config=config,
        context=context({"destination": CLIENT_TELEGRAM}),
        messages=telegram_messages(name, HELD_NOTICE),
        platform_env={"TELEGRAM_ALLOWED_USERS": str(CLIENT)},
    )
    every_call = json.dumps(held["telegram"])
    assert "PRIVILEGED" not in every_call
    assert "settlement floor" not in every_call
    assert delivered(held, PRIVATE_CHAT, HELD_NOTICE), held["telegram"]
    assert delivered(held, GROUP_CHAT, HELD_NOTICE), held["telegram"]
    assert [r["scenario"] for r in held["requests"]].count(name) == 2  # the model replied
    holds = [d for d in decisions(held) if d[0] == "hold"]
    assert len(holds) == 2, decisions(held)  # one per message, by the gateway's output gate
    assert all("detected_privilege_marker" in reasons for _, reasons in holds)
    # The only refusals: Hermes's auxiliary session-title request, which does not pass
    # the ``llm_request`` middleware and so carries no instance proof (finding 10).
    refused = [reasons for disposition, reasons in decisions(held) if disposition == "deny"]
    assert all(r == ["instance_proof_missing", "model_request_refused"] for r in refused)

    name = f"tg-allowed-{streaming}"
    allowed = gated(
        hermes,
        name,
        {name: {"calls": [], "final": ALLOWED}},
        op="telegram",
        config=config,
        context=context({"destination": FIRM_TELEGRAM}),
        messages=telegram_messages(name, "courtroom 4B"),
        platform_env={"TELEGRAM_ALLOWED_USERS": str(CLIENT)},
    )
    assert delivered(allowed, PRIVATE_CHAT, "courtroom 4B"), allowed["telegram"]
    assert delivered(allowed, GROUP_CHAT, "courtroom 4B"), allowed["telegram"]
    allows = [
        e for e in allowed["ledger"] if e["kind"] == "decision" and e["disposition"] == "allow"
    ]
    assert allows, decisions(allowed)
    first_shown = min(
        s["at_ms"] for s in allowed["telegram"] if "courtroom 4B" in json.dumps(s["params"])
    )
    assert first_shown >= allows[0]["at"]
    if streaming == "streaming":
        assert "editMessageText" in streamed(allowed), allowed["telegram"]
        drafts = [s for s in allowed["telegram"] if s["method"] == "sendMessageDraft"]
        assert all(str(d["params"]["chat_id"]) == str(PRIVATE_CHAT["id"]) for d in drafts)
        assert all(ALLOWED.startswith(unescaped(d["params"]["text"])) for d in drafts), drafts
        assert all(d["at_ms"] >= allows[0]["at"] for d in drafts)
    else:
        assert streamed(allowed) == [], allowed["telegram"]


# -- 2. cron, run by Hermes's own scheduler --------------------------------------------------


def test_a_cron_agent_jobs_tool_calls_are_decided_by_the_gate(hermes: HermesRuns) -> None:
    """An agent job created with ``hermes cron create`` and run with ``hermes cron run``
    (no gateway running: the job runs at once through ``cron.scheduler.run_one_job``).
    Its turns go through the model gateway and its tool calls through our hook: the
    allowed command ran, the write under legal hold was denied and left the file as it
    was, and both decisions are on the bus and in the ledger."""
    name = "cron-agent"
    script = {
        "calls": [
            call("terminal", command="touch {{root}}/CRON_AGENT"),
            call("write_file", path="{{root}}/held/brief.txt", content="rewritten"),
        ],
        "final": "checks done",
    }
    run = gated(
        hermes,
        name,
        {name: script},
        op="cron",
        jobs=[{"name": "matter-checks", "prompt": f"SCENARIO:{name} run the matter checks"}],
        files={"held/brief.txt": "original"},
        markers=["CRON_AGENT"],
    )
    [step] = run["cron"]
    assert "Ran now: succeeded." in step["run_stdout"], step
    assert run["markers"] == {"CRON_AGENT": True}
    assert Path(run["root"], "held", "brief.txt").read_text() == "original"
    assert outcomes(run) == [
        ("allow", [TERMINAL_ALLOWED]),
        ("deny", ["legal_hold_blocks_deletion"]),
    ]
    assert decided(run) == [("terminal", "allow", "allow"), ("write_file", "deny", "deny")]
    allowed, denied = tool_results(run, name)
    assert "SMF Assurance gate denied" not in allowed
    assert "SMF Assurance gate denied write_file" in denied
    ledger = [
        d for d in decisions(run) if d[1] != ["instance_proof_missing", "model_request_refused"]
    ]
    assert ("allow", [TERMINAL_ALLOWED]) in ledger
    assert ("deny", ["legal_hold_blocks_deletion"]) in ledger


def test_a_cron_no_agent_script_job_runs_with_nothing_on_the_bus(hermes: HermesRuns) -> None:
    """NEGATIVE FINDING (docs/HERMES.md, finding 3): a ``no_agent`` job's script is the
    job; Hermes runs it with no agent, no hook and no model turn, so nothing reaches the
    gate or the model gateway: the script's effect happened, no proposal, no verdict,
    no ledger entry. (The model cannot create such a job under this profile:
    ``cronjob`` maps to ``schedule.create``; an operator can.)"""
    name = "cron-script"
    run = gated(
        hermes,
        name,
        {name: {"calls": [], "final": "unused"}},
        op="cron",
        jobs=[
            {
                "name": "nightly-sweep",
                "no_agent": True,
                "script": {"name": "sweep.sh", "text": "touch {{root}}/CRON_SCRIPT\necho swept\n"},
            }
        ],
        markers=["CRON_SCRIPT"],
    )
    [step] = run["cron"]
    assert "Ran now: succeeded." in step["run_stdout"], step
    assert run["markers"] == {"CRON_SCRIPT": True}, "no_agent scripts are gated: update docs"
    assert "swept" in (step["output"] or "")
    assert verdicts(run) == []
    assert verdicts(run, "proposal") == []
    assert run["requests"] == []  # no model turn
    assert decisions(run) == []


def test_cron_delivery_through_the_running_gateway_decides_the_reply_not_the_script(
    hermes: HermesRuns,
) -> None:
    """Two jobs delivering to Telegram, fired by the running gateway's own scheduler:
    created due in a minute (``1m``), then ``hermes gateway run``, whose in-process
    ticker (at start, then every 60 s) runs them and delivers through the live Telegram
    adapter; the test waits for each delivery.

    The agent job's privileged reply to the client was decided at the model gateway:
    the client's chat got the held notice, no byte of the reply, and the hold is in the
    ledger. NEGATIVE FINDING (docs/HERMES.md, finding 3): the ``no_agent`` job's script
    output went to the team's group verbatim, with no proposal, no output verdict and
    no ledger entry. (``hermes cron run`` runs a job at once in the CLI's own process
    even while a gateway runs, and that standalone delivery goes to the public Bot API
    whatever ``extra.base_url`` says, ``tools/send_message_tool.py`` ``_send_telegram``:
    not drivable offline.)"""
    name = "cron-telegram"
    status = "MATTER-STATUS: settlement floor 2M"
    run = gated(
        hermes,
        name,
        {name: {"calls": [], "final": PRIVILEGED}},
        op="telegram",
        context=context({"destination": CLIENT_TELEGRAM}),
        messages=[
            {
                "cron": {
                    "name": "report-to-client",
                    "schedule": "1m",
                    "prompt": f"SCENARIO:{name} report the matter status to the client",
                },
                "chat": PRIVATE_CHAT,
                "expect": HELD_NOTICE,
            },
            {
                "cron": {
                    "name": "status-to-team",
                    "schedule": "1m",
                    "no_agent": True,
                    "script": {"name": "status.sh", "text": f"echo '{status}'\n"},
                },
                "chat": GROUP_CHAT,
                "expect": "settlement floor 2M",  # the platform gets it MarkdownV2-escaped
            },
        ],
        platform_env={"TELEGRAM_ALLOWED_USERS": str(CLIENT)},
    )
    to_client = [s for s in run["telegram"] if s["params"].get("chat_id") == CLIENT]
    assert "PRIVILEGED" not in json.dumps(to_client)
    assert "settlement floor" not in json.dumps(to_client)
    assert delivered(run, PRIVATE_CHAT, HELD_NOTICE), run["telegram"]
    assert [r["scenario"] for r in run["requests"]] == [name]  # the job's one model turn
    assert [d[0] for d in decisions(run) if d[0] != "deny"][:1] == ["hold"], decisions(run)
    assert delivered(run, GROUP_CHAT, "settlement floor 2M"), "gated now: update docs"
    assert verdicts(run, "proposal") == []  # neither job proposed anything


# -- 3. background work ------------------------------------------------------------------------


SESSION = "{{result:(proc_[0-9a-f]+)}}"


def test_a_background_process_is_started_by_one_call_and_later_calls_are_decided(
    hermes: HermesRuns,
) -> None:
    """``terminal(background=true)`` starts a process (allowed: the firm allows terminal
    commands); the later ``process`` calls that would read its output and kill it are
    proposed and decided on their own (denied: nothing allows ``process``), so the model
    is not shown its output and the process is not killed: it runs to its end."""
    name = "bg-process"
    command = "echo BG-OUT-7731; sleep 1; touch {{root}}/BG_FINISHED"
    script = {
        "calls": [
            call("terminal", command=command, background=True),
            call("process", action="poll", session_id=SESSION),
            call("process", action="kill", session_id=SESSION),
        ],
        "final": "done",
        "final_after_file": "{{root}}/BG_FINISHED",
    }
    run = gated(hermes, name, {name: script}, markers=["BG_FINISHED"])
    started, polled, killed = tool_results(run, name)
    assert "proc_" in started, started
    assert "SMF Assurance gate denied process" in polled
    assert "SMF Assurance gate denied process" in killed
    assert all("BG-OUT-7731" not in r for r in (polled, killed))
    assert run["markers"] == {"BG_FINISHED": True}  # the denied kill did not stop it
    assert decided(run) == [
        ("terminal", "allow", "allow"),
        ("process", "deny", "deny"),
        ("process", "deny", "deny"),
    ]
    [start, poll, kill] = outcomes(run)
    assert start == ("allow", [TERMINAL_ALLOWED])
    assert poll[0] == kill[0] == "deny"


def test_a_background_subagents_calls_are_decided_while_the_parent_waits(
    hermes: HermesRuns,
) -> None:
    """``delegate_task(background=true)``: the parent gets a handle at once and the child
    runs on Hermes's daemon executor, in the same process and through the same hooks:
    its allowed command ran, its write under legal hold was denied."""
    parent, child = "bg-parent", "bg-child"
    scripts = {
        parent: {
            "calls": [
                call(
                    "delegate_task",
                    goal=f"SCENARIO:{child} tidy the matter folder",
                    toolsets=["terminal", "file"],
                    background=True,
                )
            ],
            "final": "parent done",
            "final_after": child,
        },
        child: {
            "calls": [
                call("terminal", command="touch {{root}}/CHILD_MARKER"),
                call("write_file", path="{{root}}/held/brief.txt", content="rewritten"),
            ],
            "final": "child done",
        },
    }
    run = gated(
        hermes,
        parent,
        scripts,
        toolsets="terminal,file,delegation",
        files={"held/brief.txt": "original"},
        markers=["CHILD_MARKER"],
    )
    [handle] = tool_results(run, parent)
    assert "background" in handle.lower(), handle
    assert run["markers"] == {"CHILD_MARKER": True}
    assert Path(run["root"], "held", "brief.txt").read_text() == "original"
    ran, denied = tool_results(run, child)
    assert "SMF Assurance gate denied" not in ran
    assert "SMF Assurance gate denied write_file" in denied
    assert outcomes(run) == [
        ("allow", ["no_applicable_policy_non_consequential"]),
        ("allow", [TERMINAL_ALLOWED]),
        ("deny", ["legal_hold_blocks_deletion"]),
    ]
    assert decided(run) == [
        ("delegate_task", "allow", "allow"),
        ("terminal", "allow", "allow"),
        ("write_file", "deny", "deny"),
    ]


# -- 4. a real MCP server ----------------------------------------------------------------------


MCP_SERVER = '''"""The matter notes MCP server (stdio), for tests/test_hermes_surfaces.py."""
import json
import sys
import urllib.request
from pathlib import Path

from mcp.server.fastmcp import FastMCP

CALLS, NOTICES = Path(sys.argv[1]), sys.argv[2]
server = FastMCP("matter")


def _logged(tool, arguments):
    with CALLS.open("a") as log:
        log.write(json.dumps({"tool": tool, "arguments": arguments}) + "\\n")


@server.tool()
def list_notes(folder: str) -> str:
    """List the note files in a matter folder."""
    _logged("list_notes", {"folder": folder})
    return json.dumps(sorted(p.name for p in Path(folder).glob("*.txt")))


@server.tool()
def write_note(path: str, text: str) -> str:
    """Write a note file in the matter workspace."""
    _logged("write_note", {"path": path})
    Path(path).write_text(text)
    return "written"


@server.tool()
def send_notice(recipient: str, text: str) -> str:
    """Send a notice to a recipient through the firm's notice service."""
    _logged("send_notice", {"recipient": recipient})
    body = json.dumps({"recipient": recipient, "text": text}).encode()
    request = urllib.request.Request(NOTICES, data=body, method="POST")
    request.add_header("Content-Type", "application/json")
    urllib.request.urlopen(request, timeout=10).read()
    return "sent"


server.run()
'''


def test_a_real_mcp_servers_calls_are_proposed_and_decided(hermes: HermesRuns) -> None:
    """A stdio MCP server written with the MCP SDK, added by the operator with ``hermes
    mcp add`` (Hermes's own MCP configuration, before the turn). Every call of its tools
    is proposed: the mapped read is allowed and reaches the server; the mapped write is
    refused (``missing_required_fact``: the adapter computes legal hold for Hermes's own
    file tools only) and the unmapped ``send_notice`` is ``unknown_tool``; neither
    reaches the server (its call log) nor its downstream endpoint, and no file is
    written."""
    name = "mcp-real"
    script = {
        "calls": [
            call("mcp__matter__list_notes", folder="{{root}}/notes"),
            call("mcp__matter__write_note", path="{{root}}/notes/strategy.txt", text="Offer 2M."),
            call("mcp__matter__send_notice", recipient="opposing-counsel", text="Offer 2M."),
        ],
        "final": "done",
    }
    run = gated(
        hermes,
        name,
        {name: script},
        toolsets="mcp-matter",
        files={"mcp/matter_server.py": MCP_SERVER, "notes/agenda.txt": "agenda"},
        mcp_add={
            "name": "matter",
            "command": "{{hermes_python}}",
            "args": [
                "{{root}}/mcp/matter_server.py",
                "{{root}}/mcp-calls.jsonl",
                "{{notices_url}}",
            ],
        },
    )
    assert run["mcp_add"]["returncode"] == 0, run["mcp_add"]
    listed, written, sent = tool_results(run, name)
    assert "agenda.txt" in listed
    assert "missing_required_fact" in written, written
    assert "unknown_tool" in sent, sent
    assert run["mcp_calls"] == [
        {"tool": "list_notes", "arguments": {"folder": f"{run['root']}/notes"}}
    ]
    assert run["notices"] == []
    assert not Path(run["root"], "notes", "strategy.txt").exists()
    assert decided(run) == [
        ("mcp__matter__list_notes", "allow", "allow"),
        # refused at normalization, before any decision: signed, and its refusal recorded
        ("mcp__matter__write_note", "deny", "deny"),
        ("mcp__matter__send_notice", "deny", "deny"),
    ]
    [read, write, notice] = outcomes(run)
    assert read == ("allow", ["internal_read"])
    assert write[0] == notice[0] == "deny"
    assert "missing_required_fact" in write[1], write
    assert "unknown_tool" in notice[1], notice


def test_without_the_model_gateway_telegram_streams_a_held_reply_before_any_hook(
    hermes: HermesRuns,
) -> None:
    """NEGATIVE FINDING (the hole the model gateway closes on this surface): the same
    held reply with streaming on, Hermes reaching the model directly. The stream
    consumer sends the text to Telegram (a draft, then a message in each chat) before
    ``transform_llm_output``, our only seam on the reply, decides; the hook's
    withheld notice arrives afterwards as an edit of a message already delivered."""
    name = "tg-direct"
    run = hermes.run(
        name,
        {name: {"calls": [], "final": PRIVILEGED}},
        op="telegram",
        config=TELEGRAM_STREAMING,
        context=context({"destination": CLIENT_TELEGRAM}),
        messages=telegram_messages(name, ["settlement floor", HELD_NOTICE, "SMF Assurance"]),
        platform_env={"TELEGRAM_ALLOWED_USERS": str(CLIENT)},
    )
    for chat in (PRIVATE_CHAT, GROUP_CHAT):
        # a message the client has, with the reply's text, not only a draft
        assert delivered(run, chat, "settlement floor"), "closed in-process: update docs"
        edits = [
            s
            for s in run["telegram"]
            if s["method"] == "editMessageText" and s["params"].get("chat_id") == chat["id"]
        ]
        # the hook's withheld notice came afterwards, as an edit of that message
        assert "SMF Assurance" in str(edits[-1]["params"]["text"])
    held = [o for o in verdicts(run, "output") if o["verdict"]["outcome"] != "allow"]
    assert held  # the adapter's hook did hold it, after the platform had it
