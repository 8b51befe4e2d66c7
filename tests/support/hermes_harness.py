"""Everything the real Hermes talks to, in one process, for tests/test_hermes_conformance.py.

Run as ``python tests/support/hermes_harness.py <json config>``, normally under
``unshare -n`` (RUNTIMES.md, "Offline driving": the runtime and everything
it talks to share one network namespace with loopback only). It brings
loopback up when asked, starts an embedded nats-server with authorization
generated from the registry (``smf_assurance.ops.local.stack.start_embedded_server``, as a real
deployment runs it: every client connects with its own nkey, anonymous
connections are refused), a gate (with the Hermes runtime provisioned and
opted into attestation), a second nats-server of the same registry with no
gate on it (the "gate unreachable" case) and the scripted fake model server;
then it reads one JSON command per line on stdin, runs ``hermes chat -q`` for
it and answers one JSON line on stdout. Logs go to stderr. It exits when stdin closes.

The gate's active release is published to the ``SMF_RELEASES`` bucket, where
the adapter reads and verifies it (``SMF_RELEASE_TRUST_ROOT`` names the
state's trust root).

Evidence returned per run: Hermes's exit code and output, the tool results
the model was shown (from the fake server), every verdict and attestation
ack seen on the bus (a wildcard tap), which marker files exist, and how many
connector orders the run added to ``SMF_EXECUTE`` (no connector runs here, so
an order stays in the stream).

Through the model gateway (tests/runtimes/test_hermes_gateway.py): a command
with ``"via_gateway": true`` gets a model gateway of its own for the run
(``start_model_gateway``), with the run's runtime (``SMF_RUNTIME_ID``)
provisioned on it for the command's context (actor, reply destination,
facts); Hermes's ``model.base_url`` and ``model.api_key`` are the gateway's
url and that runtime's token, and the gateway forwards to the fake model.
``"display": "default"`` runs Hermes without ``-Q`` (its default CLI display,
streaming at its default); ``"plugin_enabled": false`` leaves our plugin out
of ``plugins.enabled``. Each run also reports the ledger entries it added.

Hermes's other surfaces (tests/runtimes/test_hermes_surfaces.py), each a
command with its ``op``:

- ``"op": "telegram"``: ``hermes gateway run`` with its Telegram platform
  pointed at a fake Bot API in this process (``tests/support/fake_telegram.py``,
  ``platforms.telegram.extra.base_url``); the command's ``messages`` are
  pushed one at a time, each waited for by the reply the fake platform
  receives in its chat (a message or edit holding one of its ``expect``
  texts, no longer being edited), then the gateway is stopped (SIGTERM) and
  every call it made to the platform is returned (``telegram``).
- ``"op": "cron"``: the command's ``jobs`` are created with ``hermes cron
  create`` (a ``no_agent`` job's script under ``$HERMES_HOME/scripts``) and
  run with ``hermes cron run <id>``, Hermes's documented run-now command,
  which with no gateway running executes the job at once through the
  scheduler's own ``cron.scheduler.run_one_job``.
- ``"mcp_add"`` on a chat run: the operator adds a stdio MCP server with
  ``hermes mcp add NAME --command <Hermes's python> --args ...`` before the
  turn (Hermes's own MCP configuration); the server is a file of the command
  written with the MCP SDK, and logs each call it receives to
  ``mcp-calls.jsonl`` in the run folder; what it sends onwards goes to a
  recording endpoint in this process (``notices``).

``"mapper_extra"`` in the harness's config adds entries to the gate's mapper
table for Hermes (the names an operator gives an MCP server's tools); the
shipped table is otherwise unchanged.

Resuming (session taint kept outside the runtime): a chat command with
``"continue_from": "<an earlier run's name>"`` runs ``hermes chat --continue``
in that run's folder and ``HERMES_HOME`` (its config rewritten for this run's
model endpoint and token): a new Hermes process that resumes the most recent
session. The tap's proposal entries also carry the call's id and the facts the
adapter declared (no arguments or content), so a test can show what the adapter
said beside what the gate decided. ``"folder_of": "<an earlier run's name>"`` runs a
NEW session (no ``--continue``) in that run's folder and ``HERMES_HOME``: Hermes
loads the context files the earlier session left there (``AGENTS.md``).
``"system_needles"``: texts the fake model reports finding in each request's system
messages (``in_system``), never the prompt itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import io
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import nats
from nats.aio.client import Client
from nats.aio.msg import Msg

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from smf_assurance.core.normalize import MapperTable, ToolMapping
from smf_assurance.gateway.assembly import RunningModelGateway, start_model_gateway
from smf_assurance.governance.releases import (
    build_release,
    latest_in_inbox,
    prior_of,
    publish_to_inbox,
)
from smf_assurance.ops.demo.script import actor
from smf_assurance.ops.local.bus_auth import write_user_seed
from smf_assurance.ops.local.defaults import OPERATOR
from smf_assurance.ops.local.logs import configure_logging
from smf_assurance.ops.local.model_gateway import (
    gateway_config,
    provision_gateway_runtime,
    set_upstream,
)
from smf_assurance.ops.local.stack import gate_config, start_embedded_server
from smf_assurance.ops.local.state import RELEASE_SIGNER, StateDir, provision_demo
from smf_assurance.ops.runtimes.provision import (
    HERMES_PRINCIPAL,
    HERMES_RUNTIME_ID,
    provision_launcher,
    provision_runtime,
)
from smf_assurance.pipeline.assembly import start_gate
from smf_assurance.pipeline.assembly.config import shipped_mapper_tables
from smf_assurance.pipeline.stores.ledger_audit import export_jsonl
from smf_assurance.subjects import dsse, names
from smf_assurance.subjects.attestation import AttestationAck, RuntimeAttestation
from smf_assurance.subjects.bus_access import answerable_reply
from smf_assurance.subjects.keys import VerifyKey
from smf_assurance.subjects.messages import (
    ActorContext,
    DataFacts,
    Proposal,
    ProposedDestination,
    Verdict,
)
from tests.support.bus_helpers import gate_reply, wait_for
from tests.support.fake_notices import NoticeSink
from tests.support.fake_openai import FakeOpenAI
from tests.support.fake_telegram import TOKEN as TELEGRAM_TOKEN
from tests.support.fake_telegram import FakeTelegram
from tests.support.release_helpers import publish_as_publisher

SAFE_RUNTIME_ID = "hermes-safe"
SAFE_PRINCIPAL = "hermes-safe-runtime"
OFF_RUNTIME_ID = "hermes-off"
OFF_PRINCIPAL = "hermes-off-runtime"
RUN_TIMEOUT_S = 90.0
GATEWAY_READY_S = 90.0
"""How long ``hermes gateway run`` may take to poll the fake platform (about 6 s idle)."""
REPLY_TIMEOUT_S = 90.0
CRON_TICK_TIMEOUT_S = 180.0
"""A job due a minute after it was created, fired by a ticker that ticks every 60 s."""
CURSOR = "\u2589"
"""The block Hermes's stream consumer puts at the end of a message it is still editing."""


class Tap:
    """Gate-signed verdicts and acks seen on the bus (replies travel on inbox subjects),
    which tool each proposal on ``smf.propose`` named (its id, runtime, surface, tool-call
    id and declared facts; no arguments or content), and what each attestation on
    ``smf.attest`` claimed (read, not verified: the gate verifies them; this is only the
    runtime's word, e.g. its streaming settings or a call's taint)."""

    def __init__(self, gate_keys: Mapping[str, VerifyKey]) -> None:
        self.gate_keys = gate_keys
        self.seen: list[dict[str, Any]] = []

    async def record(self, msg: Msg) -> None:
        if msg.subject == names.PROPOSE:
            # who proposed which tool, not what: no arguments or content kept; the
            # declared facts are the adapter's word, which the taint tests set beside
            # the gate's decision
            with contextlib.suppress(dsse.SignatureError, msgspec.DecodeError):
                raw = dsse.decode_envelope(msg.data).raw_payload
                proposal = msgspec.json.decode(raw, type=Proposal)
                self.seen.append(
                    {
                        "kind": "proposal",
                        "proposal_id": proposal.proposal_id,
                        "runtime_id": proposal.runtime_id,
                        "surface": proposal.surface,
                        "native_tool": proposal.native_tool,
                        "tool_call_id": proposal.tool_call_id,
                        "facts": msgspec.to_builtins(proposal.facts),
                    }
                )
            return
        if msg.subject == names.ATTEST:
            with contextlib.suppress(dsse.SignatureError, msgspec.DecodeError):
                raw = dsse.decode_envelope(msg.data).raw_payload
                claim = msgspec.json.decode(raw, type=RuntimeAttestation)
                self.seen.append({"kind": "attestation", **msgspec.to_builtins(claim)})
            return
        if not answerable_reply(msg.subject):  # a reply: an inbox, or mapped across accounts
            return
        signed = gate_reply(msg.data, self.gate_keys)
        if signed is not None:
            kind = "verdict" if isinstance(signed, Verdict) else "output"
            self.seen.append({"kind": kind, **msgspec.to_builtins(signed)})
            return
        try:
            ack = msgspec.json.decode(msg.data, type=AttestationAck)
        except (msgspec.DecodeError, msgspec.ValidationError):
            return
        self.seen.append({"kind": "ack", **msgspec.to_builtins(ack)})

    def take(self) -> list[dict[str, Any]]:
        taken, self.seen = self.seen, []
        return taken


@dataclass
class Prepared:
    """One run's folder, Hermes home and environment, and the counts before it."""

    root: Path
    home: Path
    env: dict[str, str]
    orders_before: int
    ledger_before: int
    launcher: list[str] = dataclasses.field(default_factory=list)
    """Confined: the ``runtime run`` command line every Hermes command is put behind."""


@dataclass
class Ran:
    """What a Hermes process of the run did (the last one, for a series of commands)."""

    returncode: int | None
    stdout: str
    stderr: str
    seconds: float
    first_seen_ms: dict[str, int | None] = dataclasses.field(default_factory=dict)
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)


def _substitute(value: Any, tokens: Mapping[str, str]) -> Any:
    text = json.dumps(value)
    for name, replacement in tokens.items():
        text = text.replace("{{" + name + "}}", replacement)
    return json.loads(text)


def hermes_home(
    root: Path,
    model_url: str,
    extra: dict[str, Any],
    plugins: list[str],
    *,
    api_key: str = "dummy",
    ours_enabled: bool = True,
    reuse: bool = False,
) -> Path:
    """Hermes's home in ``root``; ``reuse``: the one an earlier run left there (its
    sessions kept), with this run's config written over the old one."""
    home = root / "hermes-home"
    home.mkdir(parents=True, exist_ok=reuse)
    config: dict[str, Any] = {
        "model": {
            "provider": "custom",
            "default": "fake-model",
            "base_url": model_url,
            "api_key": api_key,
            "context_length": 131072,
        },
        "security": {"tirith_enabled": False},
        "plugins": {"enabled": [*(["smf-assurance"] if ours_enabled else []), *plugins]},
    }
    for key, value in extra.items():
        config[key] = {**config.get(key, {}), **value} if isinstance(value, dict) else value
    # JSON is YAML: Hermes reads this file with its YAML loader.
    (home / "config.yaml").write_text(json.dumps(config, indent=2))
    update = {"ts": time.time(), "behind": 0, "rev": None, "ver": "0.19.0"}
    (home / ".update_check").write_text(json.dumps(update))
    return home


def install_plugin(home: Path, name: str, source: str) -> None:
    folder = home / "plugins" / name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "plugin.yaml").write_text(f"name: {name}\nversion: 0.0.1\ndescription: test\n")
    (folder / "__init__.py").write_text(source)


class Harness:
    def __init__(self, config: dict[str, Any]) -> None:
        self.config = config
        self.root = Path(config["workdir"])
        self.venv = Path(config["venv"])
        self.pythonpath = str(config["pythonpath"])
        self.runs = 0
        self.gateway: RunningModelGateway | None = None
        self.roots: dict[str, Path] = {}
        """Each run's folder by its name, for a later ``continue_from``."""

    async def start(self) -> None:
        configure_logging(json=True, level="warning")
        self.state = StateDir(self.root / "state")
        provision_demo(self.state)
        provision_runtime(self.state, runtime_pin="0.19.0")
        # the key `runtime run` attests the confined runs with (`runtime add` makes one)
        provision_launcher(self.state, HERMES_RUNTIME_ID)
        provision_runtime(self.state, SAFE_PRINCIPAL, SAFE_RUNTIME_ID, runtime_pin="0.19.0")
        provision_runtime(self.state, OFF_PRINCIPAL, OFF_RUNTIME_ID, runtime_pin="0.19.0")
        self.server = start_embedded_server(self.state)
        self.idle = start_embedded_server(self.state, self.root / "nats-idle")
        if self.config.get("corpus"):
            self._release_of(Path(self.config["corpus"]))
        self.credentials = self._credentials()
        self.model = FakeOpenAI().start()
        set_upstream(self.state, self.model.url, "local-model")
        # Served by the model gateway before the gate starts, so the gate lets this
        # runtime stream (``RuntimeRequirement.output_via_gateway``); each
        # gateway run provisions it again with that run's context and a new token.
        provision_gateway_runtime(
            self.state,
            HERMES_RUNTIME_ID,
            adapter_id="smf-hermes-adapter",
            actor=actor("associate-ann", "associate"),
            destination=ProposedDestination(address="operator-terminal", locality="internal"),
        )
        self.telegram = await FakeTelegram().start()
        self.notices = await NoticeSink().start()
        config = gate_config(state=self.state, nats_url=self.server.url, co_located=True)
        extra = self.config.get("mapper_extra") or {}
        if extra:
            config = dataclasses.replace(config, mapper_tables=self._mapper_tables(extra))
        self.gate = await start_gate(config)
        release = latest_in_inbox(self.state.release_inbox)
        assert release is not None
        # where the adapter verifies it; only the publisher may write the bucket
        await publish_as_publisher(self.server.url, self.state, release)
        # The tap reads every subject: only the operator may (smf_assurance.subjects.bus_access).
        self.nc = await self.connect(OPERATOR)
        self.tap = Tap(self.state.gate_keys())
        self.tap_sub = await self.nc.subscribe(">", cb=self.tap.record)

    @staticmethod
    def _mapper_tables(extra: dict[str, Any]) -> dict[str, MapperTable]:
        """The shipped tables, with ``extra`` tools added to Hermes's (none replaced)."""
        tables = shipped_mapper_tables()
        hermes = tables["smf-hermes-adapter"]
        added = {name: msgspec.convert(entry, ToolMapping) for name, entry in extra.items()}
        assert not set(added) & set(hermes.tools), "mapper_extra may only add tools"
        tables["smf-hermes-adapter"] = msgspec.structs.replace(
            hermes, tools={**hermes.tools, **added}
        )
        return tables

    def _release_of(self, corpus: Path) -> None:
        """A signed release of ``corpus``, chained to the demo's, newest in the inbox:
        the gate starts on it (a firm's release instead of the demo's)."""
        latest = latest_in_inbox(self.state.release_inbox)
        assert latest is not None
        bundle = build_release(
            corpus,
            [self.state.key(RELEASE_SIGNER)],
            self.state.registry.read_bytes(),
            now_ms=time.time_ns() // 1_000_000,
            prior=prior_of(latest),
        )
        publish_to_inbox(bundle, self.state.release_inbox)

    async def connect(self, principal: str) -> Client:
        credential = self.state.existing_credential(principal)
        assert credential is not None, principal
        return await nats.connect(self.server.url, **credential.connect_options())

    def _credentials(self) -> dict[str, str]:
        """Seed files for the runs: each runtime's own, one the registry does not know,
        and a copy of the runtime's own that the group and others may read."""
        folder = self.root / "credentials"
        folder.mkdir(mode=0o700)
        unknown = folder / "unknown.nkey"
        write_user_seed(unknown)
        own = self.state.bus_credential_path(HERMES_PRINCIPAL)
        too_open = folder / "too-open.nkey"
        too_open.write_bytes(own.read_bytes())
        too_open.chmod(0o644)
        return {
            "credential": str(own),
            "safe_credential": str(self.state.bus_credential_path(SAFE_PRINCIPAL)),
            "off_credential": str(self.state.bus_credential_path(OFF_PRINCIPAL)),
            "unknown_credential": str(unknown),
            "too_open_credential": str(too_open),
        }

    async def stop(self) -> None:
        await self.telegram.stop()
        await self.notices.stop()
        self.model.stop()
        await self.nc.drain()
        await self.gate.close()
        self.server.close()
        self.idle.close()

    def info(self) -> dict[str, Any]:
        return {
            "nats_url": self.server.url,
            "idle_url": self.idle.url,
            "notices_url": self.notices.url,
            "hermes_python": str(self.venv / "bin" / "python"),
            "project_venv": str(Path(sys.executable).parent.parent),
            "state_dir": str(self.state.root),
            "runtime_key": str(self.state.key_path(HERMES_PRINCIPAL)),
            "safe_key": str(self.state.key_path(SAFE_PRINCIPAL)),
            "off_key": str(self.state.key_path(OFF_PRINCIPAL)),
            **self.credentials,
        }

    async def execute_orders(self) -> int:
        """Messages in SMF_EXECUTE: every order the gate ever dispatched (no connector
        consumes them here)."""
        info = await self.gate.js.stream_info(names.EXECUTE_STREAM)
        return int(info.state.messages)

    def ledger(self) -> list[dict[str, Any]]:
        """Every entry of the gate's ledger, as an auditor's export shows it."""
        out = io.StringIO()
        export_jsonl(self.state.ledger, out)
        return [json.loads(line) for line in out.getvalue().splitlines()]

    async def start_gateway(self, runtime_id: str, context: dict[str, Any]) -> tuple[str, str]:
        """A model gateway for one run serving ``runtime_id`` as ``context`` declares
        it (actor, reply destination, facts); returns its url and the runtime's token."""
        token = provision_gateway_runtime(
            self.state,
            runtime_id,
            adapter_id="smf-hermes-adapter",
            actor=msgspec.convert(context["actor"], ActorContext),
            destination=msgspec.convert(context["reply"]["destination"], ProposedDestination),
            facts=msgspec.convert(context["facts"], DataFacts),
            refuses_invalid_json_turns=True,  # as ``runtime add --kind hermes`` declares
        )
        self.gateway = await start_model_gateway(gateway_config(self.state, self.server.url))
        return self.gateway.url, token

    async def run(self, command: dict[str, Any]) -> dict[str, Any]:
        try:
            return await self._run(command)
        finally:
            if self.gateway is not None:
                await self.gateway.close()
                self.gateway = None

    async def _run(self, command: dict[str, Any]) -> dict[str, Any]:
        run = await self._prepare(command)
        op = command.get("op", "chat")
        if op == "telegram":
            ran = await self._telegram(run, command)
        elif op == "cron":
            ran = await self._cron(run, command)
        elif op == "exec":
            argv = _substitute(command["argv"], self._tokens(run))
            ran = await self._hermes(run, [str(a) for a in argv], program=True)
        else:
            ran = await self._chat(run, command)
        return await self._collect(run, command, ran)

    async def _prepare(self, command: dict[str, Any]) -> Prepared:
        self.runs += 1
        resumed = command.get("continue_from") or command.get("folder_of")
        if resumed:
            root = self.roots[resumed]  # the same folder, HOME and HERMES_HOME
        else:
            root = self.root / f"run-{self.runs:02d}-{command['name']}"
            root.mkdir(parents=True)
            self.roots[command["name"]] = root
        context = command["context"]
        runtime_id = command.get("env", {}).get("SMF_RUNTIME_ID") or HERMES_RUNTIME_ID
        model_url, api_key = self.model.url, "dummy"
        if command.get("via_gateway"):
            model_url, api_key = await self.start_gateway(runtime_id, context)
        confined = command.get("confined")
        if confined is not None:
            # the token stays with the launcher, which puts it on each request
            api_key = "confined-no-token"
        extra_config = dict(command.get("config", {}))
        if command.get("op") == "telegram":
            self.telegram.reset()
            telegram = {"enabled": True, "token": TELEGRAM_TOKEN}
            telegram["extra"] = {"base_url": self.telegram.base_url}
            extra_config["platforms"] = {"telegram": telegram}
        # "direct_provider": Hermes is configured with the provider's own URL (a bypass
        # of the model gateway); a confined run still has the gateway as its forwarder
        config_url = self.model.url if command.get("direct_provider") else model_url
        home = hermes_home(
            root,
            config_url,
            extra_config,
            list(command.get("plugins", {})),
            api_key=api_key,
            ours_enabled=command.get("plugin_enabled", True),
            reuse=bool(resumed),
        )
        for name, source in command.get("plugins", {}).items():
            install_plugin(home, name, source.replace("{{root}}", str(root)))
        for rel, content in command.get("files", {}).items():
            path = root / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(content)
        context_text = json.dumps(context).replace("{{root}}", str(root))
        (root / "context.json").write_text(context_text)
        scripts = json.loads(json.dumps(command["scripts"]).replace("{{root}}", str(root)))
        self.model.scripts.set(scripts)
        self.model.scripts.take_requests()
        self.model.scripts.system_needles = frozenset(command.get("system_needles", ()))
        self.tap.take()
        self.notices.take()
        orders_before = await self.execute_orders()
        ledger_before = len(self.ledger())
        env = {
            "PATH": f"{self.venv / 'bin'}:/usr/bin:/bin",
            "PYTHONPATH": self.pythonpath,
            "HOME": str(root),
            "HERMES_HOME": str(home),
            "TERMINAL_CWD": str(root),
            "SMF_NATS_URL": self.server.url,
            "SMF_RUNTIME_KEY": str(self.state.key_path(HERMES_PRINCIPAL)),
            "SMF_RUNTIME_ID": HERMES_RUNTIME_ID,
            "SMF_BUS_CREDENTIAL": self.credentials["credential"],
            "SMF_CONTEXT_FILE": str(root / "context.json"),
            "SMF_RELEASE_TRUST_ROOT": str(self.state.trust_root),
            "SMF_GATE_TIMEOUT": "5",
            "NO_COLOR": "1",
        }
        tokens = {"idle_url": self.idle.url, **self.info()}
        launcher: list[str] = []
        if confined is not None:
            launcher = self._confine(root, home, model_url, context_text, confined)
            for name in ("SMF_RUNTIME_KEY", "SMF_BUS_CREDENTIAL", "SMF_CONTEXT_FILE"):
                env.pop(name)
        for key, raw in command.get("env", {}).items():
            value = raw
            for name, replacement in tokens.items():
                value = value.replace("{{" + name + "}}", replacement)
            if value:
                env[key] = value
            else:
                env.pop(key, None)  # an empty value: the setting is absent
        return Prepared(root, home, env, orders_before, ledger_before, launcher)

    def _confine(
        self, root: Path, home: Path, model_url: str, context: str, confined: dict[str, Any]
    ) -> list[str]:
        """The run's confinement profile (its folder the workspace, Hermes's home, the
        venv and this checkout's plugin read-only) and context, where ``runtime run``
        reads them; the ``runtime run`` command line. ``confined`` may add profile
        fields (a list adds to the profile's: ``runtime_dirs``, ``read_only``; anything else
        replaces) and a ``bwrap`` to use."""
        state = self.state
        (state.root / "runtimes").mkdir(exist_ok=True)
        (state.root / "runtimes" / f"{HERMES_RUNTIME_ID}.context.json").write_text(context)
        overlay, checkout = self.pythonpath.split(":")
        profile = {
            "schema": "smf.confinement-profile/1",
            "runtime_id": HERMES_RUNTIME_ID,
            "principal": HERMES_PRINCIPAL,
            "kind": "hermes",
            "home": str(home),
            "workspace": str(root),
            "nats_url": self.server.url,
            "gateway_url": model_url,
            "runtime_dirs": [str(self.venv), overlay, str(Path(checkout) / "smf_assurance")],
            "env": {
                "PYTHONPATH": self.pythonpath,
                "TERMINAL_CWD": str(root),
                "HOME": str(root),
                "SMF_GATE_TIMEOUT": "5",
                "NO_COLOR": "1",
            },
        }
        for key, value in _substitute(confined.get("profile", {}), {"root": str(root)}).items():
            # lists are added to (a further software folder), anything else replaced
            profile[key] = [*profile.get(key, []), *value] if isinstance(value, list) else value
        path = state.root / "runtimes" / f"{HERMES_RUNTIME_ID}.confine.json"
        path.write_text(json.dumps(profile))
        launcher = [str(Path(sys.executable).parent / "smf-assurance"), "runtime", "run"]
        launcher += ["--id", HERMES_RUNTIME_ID, "--state-dir", str(state.root)]
        if confined.get("bwrap"):
            launcher += ["--bwrap", str(confined["bwrap"])]
        return [*launcher, "--"]

    def _tokens(self, run: Prepared) -> dict[str, str]:
        return {"root": str(run.root), "home": str(run.home), **self.info()}

    async def _hermes(
        self,
        run: Prepared,
        args: list[str],
        *,
        stdin: bytes = b"",
        watch: list[str] | None = None,
        program: bool = False,
    ) -> Ran:
        """One Hermes command to its end (at most ``RUN_TIMEOUT_S``); ``program``: ``args``
        is a whole command line of its own (behind the launcher when confined)."""
        started = time.monotonic()
        proc = await asyncio.create_subprocess_exec(
            *run.launcher,
            *(args if program else [str(self.venv / "bin" / "hermes"), *args]),
            cwd=run.root,
            env=run.env,
            # /dev/null unless there is input: Hermes's CLI treats a pipe on stdin as
            # input of its own (the default display's runs then did not take the turn)
            stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        if stdin:
            assert proc.stdin is not None
            proc.stdin.write(stdin)
            proc.stdin.close()
        needles = watch or []
        first_seen: dict[str, int | None] = dict.fromkeys(needles)
        stdout, stderr = bytearray(), bytearray()

        async def pump(stream: asyncio.StreamReader | None, sink: bytearray) -> None:
            # the wall-clock ms at which each watched text first stood on stdout
            assert stream is not None
            while chunk := await stream.read(65536):
                sink.extend(chunk)
                now = time.time_ns() // 1_000_000
                for needle in needles:
                    if sink is stdout and first_seen[needle] is None and needle.encode() in sink:
                        first_seen[needle] = now

        try:
            await asyncio.wait_for(
                asyncio.gather(pump(proc.stdout, stdout), pump(proc.stderr, stderr), proc.wait()),
                RUN_TIMEOUT_S,
            )
        except TimeoutError:
            proc.kill()
            await proc.wait()
        return Ran(
            returncode=proc.returncode,
            stdout=bytes(stdout).decode(errors="replace"),
            stderr=bytes(stderr).decode(errors="replace"),
            seconds=round(time.monotonic() - started, 2),
            first_seen_ms=first_seen,
        )

    async def _chat(self, run: Prepared, command: dict[str, Any]) -> Ran:
        extra: dict[str, Any] = {}
        mcp = command.get("mcp_add")
        if mcp is not None:
            # The operator adds the server as Hermes documents it; Hermes connects,
            # lists its tools and asks "Enable all N tools? [Y/n/select]" (Enter: all).
            mcp = _substitute(mcp, self._tokens(run))
            added = await self._hermes(
                run,
                ["mcp", "add", mcp["name"], "--command", mcp["command"], "--args", *mcp["args"]],
                stdin=b"\n",
            )
            extra["mcp_add"] = {"returncode": added.returncode, "stdout": added.stdout[-4000:]}
        args = ["chat", "-q", command["prompt"]]
        if command.get("continue_from"):
            args.append("--continue")  # the most recent session of this HERMES_HOME
        if command.get("display", "quiet") == "quiet":
            args.append("-Q")
        args += ["--toolsets", command.get("toolsets", "terminal")]
        ran = await self._hermes(run, args, watch=[str(w) for w in command.get("watch", [])])
        ran.extra.update(extra)
        return ran

    async def _telegram(self, run: Prepared, command: dict[str, Any]) -> Ran:
        """``hermes gateway run`` against the fake Bot API: each message pushed, its reply
        waited for (a text holding ``expect`` that is no longer being edited), then the
        gateway stopped, so every call it made is in."""
        fake = self.telegram
        env = {**run.env, **command.get("platform_env", {})}
        started = time.monotonic()
        for message in command["messages"]:
            if "cron" in message:
                await self._cron_job_for(run, message["cron"], message["chat"])
        proc = await asyncio.create_subprocess_exec(
            str(self.venv / "bin" / "hermes"),
            "gateway",
            "run",
            cwd=run.root,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=(run.root / "gateway.out").open("wb"),
            stderr=(run.root / "gateway.err").open("wb"),
        )
        replies: list[dict[str, Any]] = []
        try:
            await wait_for(
                lambda: fake.state.polls > 0 or proc.returncode is not None,
                timeout=GATEWAY_READY_S,
                interval=0.1,
            )
            for message in command["messages"]:
                # a cron job's delivery comes by itself, maybe before an earlier one's
                since = 0 if "cron" in message else len(fake.state.sent)
                if "cron" not in message:
                    fake.push_text(message["chat"], int(message["user"]), message["text"])
                wanted = message["expect"]
                expect = [wanted] if isinstance(wanted, str) else [str(w) for w in wanted]
                chat = str(message["chat"]["id"])

                def replied(
                    since: int = since, expect: list[str] = expect, chat: str = chat
                ) -> bool:
                    return proc.returncode is not None or any(
                        s.method in {"sendMessage", "sendRichMessage", "editMessageText"}
                        and str(s.params.get("chat_id")) == chat
                        and any(e in s.text for e in expect)
                        and CURSOR not in s.text
                        for s in fake.state.sent[since:]
                    )

                began = time.monotonic()
                timeout = CRON_TICK_TIMEOUT_S if "cron" in message else REPLY_TIMEOUT_S
                await wait_for(replied, timeout=timeout, interval=0.05)
                replies.append({"seconds": round(time.monotonic() - began, 2)})
        finally:
            if proc.returncode is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    await asyncio.wait_for(proc.wait(), 30)
                except TimeoutError:
                    proc.kill()
                    await proc.wait()
        sent = [{"method": s.method, "params": s.params, "at_ms": s.at_ms} for s in fake.state.sent]
        return Ran(
            returncode=proc.returncode,
            stdout=(run.root / "gateway.out").read_text(errors="replace")[-64000:],
            stderr=(run.root / "gateway.err").read_text(errors="replace")[-64000:],
            seconds=round(time.monotonic() - started, 2),
            extra={"telegram": sent, "replies": replies},
        )

    async def _cron_job_for(self, run: Prepared, job: dict[str, Any], chat: dict[str, Any]) -> None:
        """Create ``job`` delivering to ``chat``, before the gateway starts. Its schedule
        makes it due later (``1m``); the gateway's in-process scheduler, which ticks when
        it starts and then every 60 s, runs it at the first tick after that and delivers
        through the live Telegram adapter. (``hermes cron run`` would run it at once in
        the CLI's own process, with the standalone delivery.)"""
        job = _substitute(job, self._tokens(run))
        args = ["cron", "create", job.get("schedule", "every 1h")]
        if job.get("prompt"):
            args.append(job["prompt"])
        args += ["--name", job["name"], "--deliver", f"telegram:{chat['id']}"]
        if job.get("script"):
            scripts = run.home / "scripts"
            scripts.mkdir(exist_ok=True)
            (scripts / job["script"]["name"]).write_text(job["script"]["text"])
            args += ["--script", job["script"]["name"]]
        if job.get("no_agent"):
            args.append("--no-agent")
        created = await self._hermes(run, args)
        assert created.returncode == 0, created.stdout[-2000:]

    async def _cron(self, run: Prepared, command: dict[str, Any]) -> Ran:
        """Each job created with ``hermes cron create``, then run with ``hermes cron run``."""
        jobs = _substitute(command["jobs"], self._tokens(run))
        scripts = run.home / "scripts"
        scripts.mkdir(exist_ok=True)
        steps: list[dict[str, Any]] = []
        started = time.monotonic()
        last: Ran | None = None
        for job in jobs:
            args = ["cron", "create", job.get("schedule", "every 1h")]
            if job.get("prompt"):
                args.append(job["prompt"])
            args += ["--name", job["name"], "--deliver", "local"]
            if job.get("script"):
                (scripts / job["script"]["name"]).write_text(job["script"]["text"])
                args += ["--script", job["script"]["name"]]
            if job.get("no_agent"):
                args.append("--no-agent")
            created = await self._hermes(run, args)
            listed = json.loads((run.home / "cron" / "jobs.json").read_text())["jobs"]
            [job_id] = [j["id"] for j in listed if j["name"] == job["name"]]
            last = await self._hermes(run, ["cron", "run", job_id])
            outputs = sorted((run.home / "cron" / "output" / job_id).glob("*.md"))
            steps.append(
                {
                    "name": job["name"],
                    "created": created.returncode,
                    "run_stdout": last.stdout[-4000:],
                    "run_returncode": last.returncode,
                    "output": outputs[-1].read_text() if outputs else None,
                }
            )
        assert last is not None
        return Ran(
            returncode=last.returncode,
            stdout=last.stdout,
            stderr=last.stderr,
            seconds=round(time.monotonic() - started, 2),
            extra={"cron": steps},
        )

    async def _collect(self, run: Prepared, command: dict[str, Any], ran: Ran) -> dict[str, Any]:
        # Every verdict and ack of this run answered a request Hermes waited on (its
        # hooks block on the reply), so the server had routed our copy before Hermes
        # could read its own; the flush's PONG comes after it, and once the tap's
        # queue is empty its callback has recorded it.
        await self.nc.flush()
        await wait_for(lambda: self.tap_sub.pending_msgs == 0, timeout=10)
        root = run.root
        markers = {rel: (root / rel).exists() for rel in command.get("markers", [])}
        seeds = [Path(f).read_bytes().strip() for f in self.credentials.values()]
        out, err = ran.stdout.encode(), ran.stderr.encode()
        calls = root / "mcp-calls.jsonl"
        return {
            "seed_in_output": any(seed in out or seed in err for seed in seeds),
            "name": command["name"],
            "root": str(root),
            "returncode": ran.returncode,
            "seconds": ran.seconds,
            "stdout": ran.stdout[-64000:],
            "stderr": ran.stderr[-64000:],
            "first_seen_ms": ran.first_seen_ms,
            "requests": [msgspec.to_builtins(r) for r in self.model.scripts.take_requests()],
            "bus": self.tap.take(),
            "markers": markers,
            "execute_orders": await self.execute_orders() - run.orders_before,
            # written before any verdict or refusal is answered: complete once Hermes exited
            "ledger": self.ledger()[run.ledger_before :],
            "mcp_calls": [json.loads(line) for line in calls.read_text().splitlines()]
            if calls.exists()
            else [],
            "notices": self.notices.take(),
            **ran.extra,
        }

    async def clear(self, runtime_id: str) -> dict[str, Any]:
        """``smf-assurance model-gateway clear`` as the operator runs it, inside the
        harness's network namespace (the test's own process cannot reach this bus)."""
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "smf_assurance.ops.cli.main",
            "model-gateway",
            "clear",
            runtime_id,
            "--state-dir",
            str(self.state.root),
            "--nats",
            self.server.url,
            "--json",
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        out, err = await proc.communicate()
        lines = out.decode().strip().splitlines()
        return {
            "returncode": proc.returncode,
            "last_line": lines[-1] if lines else "",
            "stderr": err.decode(),
        }


async def main(config: dict[str, Any]) -> None:
    if config.get("bring_up_loopback"):
        subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    harness = Harness(config)
    await harness.start()
    loop = asyncio.get_running_loop()
    sys.stdout.write(json.dumps({"ready": True, **harness.info()}) + "\n")
    sys.stdout.flush()
    try:
        while True:
            line = await loop.run_in_executor(None, sys.stdin.readline)
            if not line:
                break
            command = json.loads(line)
            try:
                if command.get("op") == "clear":
                    reply: dict[str, Any] = await harness.clear(command["runtime_id"])
                else:
                    reply = await harness.run(command)
            except Exception as exc:
                reply = {"error": repr(exc)}
            sys.stdout.write(json.dumps(reply) + "\n")
            sys.stdout.flush()
    finally:
        await harness.stop()
        os._exit(0)


if __name__ == "__main__":
    asyncio.run(main(json.loads(sys.argv[1])))
