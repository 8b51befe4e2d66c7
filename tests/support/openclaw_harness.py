"""Everything the real OpenClaw talks to, in one process, for tests/test_openclaw_conformance.py.

Run as ``python tests/support/openclaw_harness.py <json config>``, normally under
``unshare -n`` (RUNTIMES.md, "Offline driving": the runtime and everything it
talks to share one network namespace with loopback only). It brings loopback
up when asked, starts the scripted fake model server and, when asked for a
gate, an embedded nats-server with authorization generated from the registry
(``smf_assurance.ops.local.stack.start_embedded_server``, as a real deployment runs it: the
plugin connects with the runtime's own nkey, ``credentialFile``; anonymous
connections are refused), a gate whose approval desk runs on an offset
clock (so a test can make an approval expire or an execution report go
overdue without waiting), and a second nats-server of the same registry with
no gate on it (the "gate unreachable" case). The gate's active release is published to the
``SMF_RELEASES`` bucket, where the plugin verifies it with the state's trust
root (``trustRootFile``) before it attests. Then it reads one JSON command per line on stdin,
runs one OpenClaw turn for it and answers one JSON line on stdout. Logs go to
stderr. It exits when stdin closes.

One turn: a fresh folder per run holds ``OPENCLAW_STATE_DIR``,
``OPENCLAW_HOME``, ``OPENCLAW_CONFIG_PATH`` and the agent workspace, with the
offline settings of RUNTIMES.md (config ``update.checkOnStart: false``,
``telemetry.enabled: false``; env ``OPENCLAW_NO_AUTO_UPDATE=1
OPENCLAW_DISABLE_BONJOUR=1 OPENCLAW_OFFLINE=1``) and the fake model as the
only provider. ``mode`` picks the entry point: ``local`` runs ``openclaw
agent --local --agent main --message ... --json``; ``gateway`` starts
``openclaw gateway run --bind loopback --auth token`` on a free port and runs
the same turn through it (``agent`` without ``--local``); ``agent-exec`` runs
``openclaw agent exec ... --config <path> --json``. A ``kill`` answer kills
the process that holds the call: the Gateway when there is one.

While the turn runs, a synthetic licensed attorney (``attorney-alex`` of the
demo roster) answers the approvals the gate announces on
``smf.approval.pending.<tenant>``, in order, following the command's
``approvals`` list: ``allow-once`` / ``deny`` after reviewing the content,
then optionally a replay of the same signed resolution, a second fresh
resolution, and a re-publication of the outcome verdict the runtime was sent
(a duplicate resume); or ``kill`` (the OpenClaw process group is killed
while the call is held, then the approval is resolved); or ``expire`` (the
approval desk's clock moves past the TTL); or ``none``.

Evidence returned per run: exit code and output (the whole stdout is also kept
as ``openclaw.stdout`` in the run's folder), the tool results the model
was shown (from the fake server), the JSON lines of every log file asked for
(the probe plugin's records), every verdict seen on the bus that the gate
signed (replies on ``smf.propose`` and output closes, approval outcomes;
``smf_assurance.subjects.verdicts``: an unsigned or otherwise signed one is not the gate's and
is not listed), attestation acks, what the attorney did and what the gate
answered, approval states at the end, and which marker files exist (with
their contents).

With ``gate.model_gateway`` (tests/runtimes/test_openclaw_gateway.py) the harness also
runs the model gateway on the same bus, in front of the fake model
(``set_upstream``), serving the runtimes listed there, each provisioned with
its declared destination and its own token (``provision_gateway_runtime``):
``{{gateway_url}}`` and ``{{gateway_token:<runtime_id>}}`` point OpenClaw's
provider at it instead of the fake model, and ``{{runtime_key:<runtime_id>}}``
/ ``{{credential_file:<runtime_id>}}`` give the plugin that runtime's key and
nkey. Every run then also returns the ledger entries the gate wrote during it
(kind, disposition and reason codes only). The tests name the gateway as the
provider ``smf-gateway`` (``"provider": "smf-gateway"`` in the command: OpenClaw's
only provider is then ``models.providers.smf-gateway``, the id our plugin's
provider wrappers prove the process on); the attestations the runtimes
sent on ``smf.attest`` are in the bus evidence too (kind ``attestation``: runtime
id, instance id and problems, as the runtime's key signed them).

A long-lived Gateway (tests/runtimes/test_openclaw_gateway_entry.py): ``op:
gateway-start`` starts ``openclaw gateway run`` in its own folder with an
operator client on it (``tests/support/openclaw_gateway_host.py``), ``op:
gateway-turn`` sends one ``openclaw agent`` turn through it (a session key of
its own; the operator's event frames, ``chat.history`` and the usual
evidence come back), ``op: gateway-stop`` stops both.

``system_needles`` (texts) makes the fake model report which of them each request's
system messages held (``in_system``; a context file in the system prompt), never the
prompt. ``record_headers`` (a list of header names) makes the fake model keep those
request headers, and only those, with each request (none by default).

OpenClaw's other surfaces (tests/runtimes/test_openclaw_surfaces.py): the gate
config may carry ``corpus`` (a corpus folder: a release of it, chained to the
demo's, is the one the gate starts on and the plugin verifies), ``mapper_extra``
(tools added to OpenClaw's mapper table, the names an operator gives an MCP
server's tools) and ``fake_platforms`` (a fake Telegram Bot API,
``tests/support/fake_telegram.py``, and a recording notices endpoint,
``tests/support/fake_notices.py``, in this process: tokens ``{{telegram_api_root}}``,
``{{telegram_token}}``, ``{{notices_url}}``). ``{{node}}`` and ``{{mcp_sdk}}`` name
the pinned node and the MCP SDK the pinned OpenClaw installs beside itself. ``op:
gateway-steps`` runs what an operator and a platform's users do to a hosted
Gateway, step by step (``openclaw`` commands, Telegram messages, a file a process
of the Gateway writes), and returns the run's evidence. The tap also lists
proposals (ids and tool) and execution reports (status) the runtimes signed, and
the ledger rows carry their decision id, entry hash and time.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import html
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec
import nats
from nats.aio.client import Client
from nats.aio.msg import Msg

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from smf_assurance.approver.client import ApproverClient, ApproverError, content_matches
from smf_assurance.ops.local.logs import configure_logging
from smf_assurance.ops.local.natsserver import PortReservation, reserve_port
from smf_assurance.subjects import dsse, names
from smf_assurance.subjects.approvals import PendingAnnouncement
from smf_assurance.subjects.attestation import AttestationAck, RuntimeAttestation
from smf_assurance.subjects.bus_access import answerable_reply
from smf_assurance.subjects.keys import VerifyKey
from smf_assurance.subjects.messages import ExecutionReport, OutputVerdict, Proposal, Verdict
from tests.support.clocks import OffsetClock
from tests.support.fake_notices import NoticeSink
from tests.support.fake_openai import FakeOpenAI
from tests.support.fake_telegram import TOKEN as TELEGRAM_TOKEN
from tests.support.fake_telegram import FakeTelegram
from tests.support.openclaw_gateway_host import HostedGateway, OperatorClient, stop_group

if TYPE_CHECKING:
    from smf_assurance.core.normalize import MapperTable
    from smf_assurance.gateway.assembly import RunningModelGateway
    from smf_assurance.pipeline.assembly import RunningGate

RUN_TIMEOUT_S = 240.0
GATEWAY_START_S = 90.0
PENDING_WAIT_S = 120.0
"""How long the attorney waits for the next announcement while the turn's process runs."""
PENDING_SETTLE_S = 5.0
"""How long it still waits once that process has exited: an announcement the gate made
before is on its way; none can follow a call no process holds any more."""
EXITED_QUIET_S = 0.5
"""Once the turn's process has exited, how long before the bus may say that nothing is
held (:meth:`Harness._nothing_held`): what the process wrote before it exited has this
long to reach the server."""
RELOAD_WAIT_S = 60.0
"""How long a config change an operator made may take to show in the Gateway's log."""
PLATFORM_WAIT_S = 120.0
"""How long a message pushed to the fake Telegram may take to be answered there."""
ATTORNEY = "attorney-alex"
TELEGRAM_TEXT_METHODS = frozenset({"sendMessage", "editMessageText", "sendRichMessage"})
"""The Bot API calls that show a user text: a message, or an edit of one."""


def substitute(value: Any, tokens: dict[str, str]) -> Any:
    """Replace ``{{name}}`` tokens in every string of a JSON value."""
    text = json.dumps(value)
    for name, replacement in tokens.items():
        text = text.replace("{{" + name + "}}", replacement.replace("\\", "\\\\"))
    return json.loads(text)


def deep_merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def base_config(root: Path, model_url: str, provider: str = "fake") -> dict[str, Any]:
    """Offline OpenClaw config with one provider, ``provider``, as the only one
    (RUNTIMES.md): the fake model, unless the command's config points it elsewhere
    (the model gateway, as ``smf-gateway``)."""
    return {
        "update": {"checkOnStart": False},
        "telemetry": {"enabled": False},
        "agents": {
            "defaults": {
                "model": {"primary": f"{provider}/fake-model"},
                "workspace": str(root / "workspace"),
            }
        },
        "models": {
            "mode": "replace",
            "providers": {
                provider: {
                    "baseUrl": model_url,
                    "apiKey": "dummy",
                    "api": "openai-completions",
                    "models": [
                        {
                            "id": "fake-model",
                            "name": "Fake",
                            "reasoning": False,
                            "input": ["text"],
                            "contextWindow": 131072,
                            "maxTokens": 8192,
                        }
                    ],
                }
            },
        },
    }


def _mapper_tables(extra: dict[str, Any]) -> dict[str, MapperTable]:
    """The shipped mapper tables, with ``extra`` tools added to OpenClaw's (none replaced):
    the names an operator gives an MCP server's tools."""
    from smf_assurance.core.normalize import ToolMapping  # noqa: PLC0415
    from smf_assurance.pipeline.assembly.config import shipped_mapper_tables  # noqa: PLC0415

    tables = shipped_mapper_tables()
    openclaw = tables["smf-openclaw-adapter"]
    added = {name: msgspec.convert(entry, ToolMapping) for name, entry in extra.items()}
    assert not set(added) & set(openclaw.tools), "mapper_extra may only add tools"
    tables["smf-openclaw-adapter"] = msgspec.structs.replace(
        openclaw, tools={**openclaw.tools, **added}
    )
    return tables


class Tap:
    """The gate's signed verdicts and output verdicts, attestation acks, and the runtimes'
    attestations, proposals (ids and tool) and execution reports (status), seen on the
    bus, plus outcome messages as sent.

    Verdicts are opened as a runtime opens them (``smf_assurance.subjects.verdicts``): a DSSE
    envelope signed by the gate key for the payload type of where it was seen,
    so the evidence lists only what the gate said, never a message another
    client sent in its name. Attestations are listed only when a runtime key of
    the harness signed them for the runtime they name (ids and problems only)."""

    def __init__(
        self, gate_keys: Mapping[str, VerifyKey], runtime_keys: Mapping[str, VerifyKey]
    ) -> None:
        """``runtime_keys``: each runtime id's verify key."""
        self.gate_keys = gate_keys
        self.runtime_keys = runtime_keys
        self.seen: list[dict[str, Any]] = []
        self.outcomes: list[tuple[str, bytes]] = []

    def _signed(self, data: bytes, via: str) -> tuple[str, msgspec.Struct] | None:
        kinds: tuple[tuple[str, type[msgspec.Struct], str], ...] = (
            (("verdict", Verdict, names.PAYLOAD_APPROVAL_OUTCOME),)
            if via == "outcome"
            else (
                ("verdict", Verdict, names.PAYLOAD_VERDICT),
                ("output", OutputVerdict, names.PAYLOAD_OUTPUT_VERDICT),
            )
        )
        try:
            envelope = dsse.decode_envelope(data)
        except dsse.SignatureError:
            return None
        for kind, type_, payload_type in kinds:
            try:
                value, _ = dsse.open_struct(envelope, self.gate_keys, type_, payload_type)
            except dsse.SignatureError:
                continue
            return kind, value
        return None

    def _attestation(self, data: bytes) -> dict[str, Any] | None:
        trusted = {key.key_id: key for key in self.runtime_keys.values()}
        try:
            attestation, verified = dsse.open_struct(
                dsse.decode_envelope(data), trusted, RuntimeAttestation, names.PAYLOAD_ATTESTATION
            )
        except (dsse.SignatureError, msgspec.ValidationError):
            return None
        own = self.runtime_keys.get(attestation.runtime_id)
        if own is None or own.key_id not in verified.key_ids:
            return None  # signed by another runtime's key: not this runtime's word
        return {
            "kind": "attestation",
            "via": names.ATTEST,
            "runtime_id": attestation.runtime_id,
            "instance_id": attestation.instance_id,
            "problems": list(attestation.problems),
        }

    def _runtime_signed(
        self, data: bytes, type_: type[msgspec.Struct], payload_type: str
    ) -> msgspec.Struct | None:
        """A message one of the harness's runtime keys signed, or ``None``."""
        trusted = {key.key_id: key for key in self.runtime_keys.values()}
        try:
            value, _ = dsse.open_struct(dsse.decode_envelope(data), trusted, type_, payload_type)
        except (dsse.SignatureError, msgspec.ValidationError, msgspec.DecodeError):
            return None
        return value

    async def record(self, msg: Msg) -> None:
        if msg.subject == names.PROPOSE:
            # which tool a runtime proposed, not what: no arguments or content kept
            proposal = self._runtime_signed(msg.data, Proposal, names.PAYLOAD_PROPOSAL)
            if isinstance(proposal, Proposal):
                self.seen.append(
                    {
                        "kind": "proposal",
                        "via": names.PROPOSE,
                        "proposal_id": proposal.proposal_id,
                        "runtime_id": proposal.runtime_id,
                        "native_tool": proposal.native_tool,
                        "tool_call_id": proposal.tool_call_id,
                        "refused_locally": proposal.refused_locally,
                    }
                )
            return
        if msg.subject.startswith(names.RESULT_PREFIX + "."):
            report = self._runtime_signed(msg.data, ExecutionReport, names.PAYLOAD_REPORT)
            if isinstance(report, ExecutionReport):
                self.seen.append(
                    {
                        "kind": "report",
                        "via": msg.subject,
                        "status": report.status,
                        "reason_code": report.reason_code,
                    }
                )
            return
        if msg.subject == names.ATTEST:
            sent = self._attestation(msg.data)
            if sent is not None:
                self.seen.append(sent)
            return
        if msg.subject.startswith(names.APPROVAL_OUTCOME_PREFIX + "."):
            self.outcomes.append((msg.subject, msg.data))
            via = "outcome"
        elif answerable_reply(msg.subject):  # a reply: an inbox, or mapped across accounts
            via = "reply"
        else:
            return
        found = self._signed(msg.data, via)
        if found is None and via == "reply":
            try:
                found = "ack", msgspec.json.decode(msg.data, type=AttestationAck)
            except (msgspec.DecodeError, msgspec.ValidationError):
                return
        if found is not None:
            kind, value = found
            self.seen.append({"kind": kind, "via": via, **msgspec.to_builtins(value)})

    def take(self) -> list[dict[str, Any]]:
        taken, self.seen = self.seen, []
        return taken


class Harness:
    def __init__(self, config: dict[str, Any]) -> None:
        self.config = config
        self.root = Path(config["workdir"])
        self.node_bin = config["node_bin"]
        self.openclaw = config["openclaw"]
        self.runs = 0
        self.gate: RunningGate | None = None
        self.model_gateway: RunningModelGateway | None = None
        self.gateway_tokens: dict[str, str] = {}
        self.clock = OffsetClock()
        """The approval desk's clock only: moving it expires approvals and makes
        execution reports overdue without making new proposals look stale."""
        self.pending: asyncio.Queue[PendingAnnouncement] = asyncio.Queue()
        self.reservations: list[PortReservation] = []
        self.hosted: dict[str, HostedGateway] = {}
        """Long-lived Gateways (``op: gateway-start``), by name."""
        self.telegram: FakeTelegram | None = None
        self.notices: NoticeSink | None = None
        """The fake platforms (``gate.fake_platforms``): a Telegram Bot API and the MCP
        server's downstream endpoint."""

    async def start(self) -> None:
        configure_logging(json=True, level="warning")
        self.model = FakeOpenAI().start()
        gate = self.config.get("gate")
        if not gate:
            return
        # Imported here: the probe runs (no gate) must not depend on the gate's code.
        from smf_assurance.governance.releases import latest_in_inbox  # noqa: PLC0415
        from smf_assurance.ops.local.bus_auth import write_user_seed  # noqa: PLC0415
        from smf_assurance.ops.local.defaults import OPERATOR  # noqa: PLC0415
        from smf_assurance.ops.local.stack import gate_config, start_embedded_server  # noqa: PLC0415
        from smf_assurance.ops.local.state import StateDir, provision_demo  # noqa: PLC0415
        from smf_assurance.ops.runtimes.provision import (  # noqa: PLC0415
            provision_launcher,
            provision_runtime,
        )
        from smf_assurance.pipeline.assembly import start_gate  # noqa: PLC0415
        from tests.support.release_helpers import publish_as_publisher  # noqa: PLC0415

        if gate.get("fake_platforms"):
            self.telegram = await FakeTelegram().start()
            self.notices = await NoticeSink().start()
        self.state = StateDir(self.root / "state")
        provision_demo(self.state)
        runtime = gate["runtime"]
        provision_runtime(
            self.state,
            runtime["principal"],
            runtime["runtime_id"],
            require_attestation=bool(runtime.get("require_attestation", False)),
            runtime_pin=runtime.get("pin"),
            required_hooks=tuple(runtime.get("hooks", ())),
        )
        # the key `runtime run` attests the confined runs with (`runtime add` makes one)
        provision_launcher(self.state, runtime["runtime_id"])
        self.runtime = runtime
        served = gate.get("model_gateway", {}).get("runtimes", [])
        for other in served:
            # Another runtime the gateway serves, attested the same way as the first.
            if other["runtime_id"] != runtime["runtime_id"]:
                provision_runtime(
                    self.state,
                    other["principal"],
                    other["runtime_id"],
                    require_attestation=bool(runtime.get("require_attestation", False)),
                    runtime_pin=runtime.get("pin"),
                    required_hooks=tuple(runtime.get("hooks", ())),
                )
        self.served = {other["runtime_id"]: other["principal"] for other in served}
        self.served.setdefault(runtime["runtime_id"], runtime["principal"])
        self.server = start_embedded_server(self.state)
        self.idle = start_embedded_server(self.state, self.root / "nats-idle")
        # Seed files for the runs: one the registry does not know, and a copy of the
        # runtime's own that the group and others may read.
        folder = self.root / "credentials"
        folder.mkdir(mode=0o700)
        write_user_seed(folder / "unknown.nkey")
        own = self.state.bus_credential_path(runtime["principal"])
        (folder / "too-open.nkey").write_bytes(own.read_bytes())
        (folder / "too-open.nkey").chmod(0o644)
        self.credentials = {
            "credential_file": str(own),
            "unknown_credential": str(folder / "unknown.nkey"),
            "too_open_credential": str(folder / "too-open.nkey"),
        }
        if gate.get("corpus"):
            self._release_of(Path(gate["corpus"]))
        config = gate_config(state=self.state, nats_url=self.server.url, co_located=True)
        if gate.get("mapper_extra"):
            config = dataclasses.replace(config, mapper_tables=_mapper_tables(gate["mapper_extra"]))
        self.gate = await start_gate(config)
        # The gate's active release, in the bucket where the plugin verifies it itself.
        release = latest_in_inbox(self.state.release_inbox)
        assert release is not None
        await publish_as_publisher(self.server.url, self.state, release)
        # Only the desk moves in time: the gate's freshness check on proposals keeps
        # the wall clock, so calls proposed while an approval is made to expire
        # are judged as they would be (not ``stale_proposal``).
        self.gate.desk.clock = self.clock
        if served:
            await self._start_model_gateway(served)
        # The tap reads every subject: only the operator may (smf_assurance.subjects.bus_access).
        self.nc = await self._connect(OPERATOR)
        gate_key = self.state.key("gate")
        runtime_keys = {
            runtime_id: self.state.key(principal).verify_key
            for runtime_id, principal in self.served.items()
        }
        self.tap = Tap({gate_key.key_id: gate_key.verify_key}, runtime_keys)
        self.watching = [
            await self.nc.subscribe(">", cb=self.tap.record),
            await self.nc.subscribe(f"{names.APPROVAL_PENDING_PREFIX}.>", cb=self._on_pending),
        ]
        # The attorney asks and resolves on its own connection, as an approver would.
        self.attorney_nc = await self._connect(ATTORNEY)
        self.attorney = ApproverClient(self.attorney_nc, self.state.key(ATTORNEY), ATTORNEY)

    def _release_of(self, corpus: Path) -> None:
        """A signed release of ``corpus``, chained to the demo's and newest in the inbox:
        the gate starts on it (a firm's release instead of the demo's), and it is the one
        published to ``SMF_RELEASES`` for the plugin to verify."""
        from smf_assurance.governance.releases import (  # noqa: PLC0415
            build_release,
            latest_in_inbox,
            prior_of,
            publish_to_inbox,
        )
        from smf_assurance.ops.local.state import RELEASE_SIGNER  # noqa: PLC0415

        current = latest_in_inbox(self.state.release_inbox)
        assert current is not None
        bundle = build_release(
            corpus,
            [self.state.key(RELEASE_SIGNER)],
            self.state.registry.read_bytes(),
            now_ms=time.time_ns() // 1_000_000,
            prior=prior_of(current),
        )
        publish_to_inbox(bundle, self.state.release_inbox)

    async def _start_model_gateway(self, served: list[dict[str, Any]]) -> None:
        """The model gateway on the gate's bus, in front of the fake model."""
        from smf_assurance.gateway.assembly import start_model_gateway  # noqa: PLC0415
        from smf_assurance.ops.local.model_gateway import (  # noqa: PLC0415
            gateway_config,
            provision_gateway_runtime,
            set_upstream,
        )
        from smf_assurance.subjects.messages import ActorContext, DataFacts, ProposedDestination  # noqa: PLC0415

        set_upstream(self.state, self.model.url, "local-model")
        for entry in served:
            self.gateway_tokens[entry["runtime_id"]] = provision_gateway_runtime(
                self.state,
                entry["runtime_id"],
                adapter_id="smf-openclaw-adapter",
                actor=msgspec.convert(entry["actor"], ActorContext),
                destination=msgspec.convert(entry["destination"], ProposedDestination),
                facts=msgspec.convert(entry["facts"], DataFacts),
                checks_tool_arguments=True,  # as ``runtime add --kind openclaw`` declares
            )
        self.model_gateway = await start_model_gateway(gateway_config(self.state, self.server.url))

    def ledger(self) -> list[dict[str, Any]]:
        """The gate's ledger entries so far: kind, disposition, reason codes, the decision
        id, the entry's hash (what a verdict's ``evidence`` names) and its time only."""
        import io  # noqa: PLC0415

        from smf_assurance.pipeline.stores.ledger_audit import export_jsonl  # noqa: PLC0415

        out = io.StringIO()
        export_jsonl(self.state.ledger, out)
        rows = [json.loads(line) for line in out.getvalue().splitlines()]
        kept = ("kind", "disposition", "reason_codes", "decision_id", "entry_hash", "at")
        return [{k: r.get(k) for k in kept} for r in rows]

    async def _connect(self, principal: str) -> Client:
        credential = self.state.existing_credential(principal)
        assert credential is not None, principal
        return await nats.connect(self.server.url, **credential.connect_options())

    async def execute_orders(self) -> int:
        """Messages in SMF_EXECUTE: every order the gate ever dispatched (no connector
        consumes them here)."""
        assert self.gate is not None
        info = await self.gate.js.stream_info(names.EXECUTE_STREAM)
        return int(info.state.messages)

    async def _on_pending(self, msg: Msg) -> None:
        try:
            announcement = msgspec.json.decode(msg.data, type=PendingAnnouncement)
        except (msgspec.DecodeError, msgspec.ValidationError):
            return
        await self.pending.put(announcement)

    async def stop(self) -> None:
        for hosted in self.hosted.values():
            await hosted.stop()
        for reservation in self.reservations:
            reservation.close()
        if self.model_gateway is not None:
            await self.model_gateway.close()
        if self.telegram is not None:
            await self.telegram.stop()
        if self.notices is not None:
            await self.notices.stop()
        self.model.stop()
        if self.gate is not None:
            await self.attorney_nc.drain()
            await self.nc.drain()
            await self.gate.close()
            self.server.close()
            self.idle.close()

    def tokens(self, root: Path) -> dict[str, str]:
        package = Path(self.config["openclaw_package"])
        tokens = {
            "root": str(root),
            "model_url": self.model.url,
            # the pinned node, and the MCP SDK the pinned OpenClaw depends on (exact
            # version in its package.json), for a test's own MCP server
            "node": str(Path(self.node_bin) / "node"),
            "mcp_sdk": str(package.parent / "@modelcontextprotocol" / "sdk"),
        }
        if self.telegram is not None and self.notices is not None:
            # OpenClaw's ``channels.telegram.apiRoot`` is the Bot API root, without /bot<TOKEN>
            tokens["telegram_api_root"] = self.telegram.base_url.removesuffix("/bot")
            tokens["telegram_token"] = TELEGRAM_TOKEN
            tokens["notices_url"] = self.notices.url
        if self.gate is not None:
            tokens |= {
                "nats_url": self.server.url,
                "idle_url": self.idle.url,
                "runtime_key": str(self.state.key_path(self.runtime["principal"])),
                "runtime_id": self.runtime["runtime_id"],
                "trust_root_file": str(self.state.trust_root),
                **self.credentials,
            }
        if self.model_gateway is not None:
            tokens["gateway_url"] = self.model_gateway.url
            for runtime_id, principal in self.served.items():
                tokens[f"gateway_token:{runtime_id}"] = self.gateway_tokens.get(runtime_id, "")
                tokens[f"runtime_key:{runtime_id}"] = str(self.state.key_path(principal))
                tokens[f"credential_file:{runtime_id}"] = str(
                    self.state.bus_credential_path(principal)
                )
        return tokens

    # -- the synthetic attorney -------------------------------------------------

    async def status(self, approval_id: str) -> str:
        reply = await self.nc.request(names.APPROVAL_STATUS, approval_id.encode(), timeout=5)
        return str(json.loads(reply.data)["state"])

    async def _resolve(self, approval_id: str, decision: str) -> tuple[bytes | None, Any]:
        try:
            view = await self.attorney.show(approval_id)
            if not content_matches(view):
                return None, {"refused": "content_digest_mismatch"}
            signed = self.attorney.sign_resolution(
                approval_id,
                decision,  # type: ignore[arg-type]
                view.binding_digest,
            )
            reply = await self.attorney.send(signed)
        except ApproverError as exc:
            return None, {"refused": exc.reason_code}
        return signed, msgspec.to_builtins(reply)

    async def _send(self, signed: bytes) -> Any:
        try:
            return msgspec.to_builtins(await self.attorney.send(signed))
        except ApproverError as exc:
            return {"refused": exc.reason_code}

    async def _await_outcome(self, approval_id: str, seconds: float = 10.0) -> bytes | None:
        subject = names.approval_outcome_subject(approval_id)
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            for sent_to, data in self.tap.outcomes:
                if sent_to == subject:
                    return data
            await asyncio.sleep(0.1)
        return None

    async def _settle(self, approval_id: str, wanted: set[str], seconds: float = 10.0) -> str:
        deadline = time.monotonic() + seconds
        state = await self.status(approval_id)
        while state not in wanted and time.monotonic() < deadline:
            await asyncio.sleep(0.25)
            state = await self.status(approval_id)
        return state

    async def _nothing_held(self) -> bool:
        """Whether the bus shows that no announcement can follow: every proposal seen has
        the gate's verdict and none of them is ``held`` (the gate announces a pending
        approval only for a call it holds). The flush is a round trip on the connection
        that sees both, so what the server had for it before is in, and its callbacks
        have taken every message delivered."""
        await self.nc.flush()
        while any(sub.pending_msgs for sub in self.watching):
            await asyncio.sleep(0.01)
        if not self.pending.empty():
            return False
        seen = self.tap.seen
        proposed = {r["proposal_id"] for r in seen if r["kind"] == "proposal"}
        decided = {
            r["proposal_id"]: r["outcome"]
            for r in seen
            if r["kind"] == "verdict" and r["via"] == "reply"
        }
        return proposed <= decided.keys() and "held" not in decided.values()

    async def _next_pending(
        self, wait_s: float, turn: asyncio.subprocess.Process
    ) -> PendingAnnouncement | None:
        """The next announcement within ``wait_s``, or within :data:`PENDING_SETTLE_S` of
        the turn's process exiting, whichever ends first (polled: the turn may end
        while this waits). After the process exited, ``None`` as soon as the bus shows
        that nothing is held (:meth:`_nothing_held`), instead of waiting out the settle."""
        deadline = time.monotonic() + wait_s
        exited: float | None = None
        while True:
            with contextlib.suppress(asyncio.QueueEmpty):
                return self.pending.get_nowait()
            if turn.returncode is not None and exited is None:
                exited = time.monotonic()
                deadline = min(deadline, exited + PENDING_SETTLE_S)
            if (
                exited is not None
                and time.monotonic() >= exited + EXITED_QUIET_S
                and await self._nothing_held()
            ):
                return None
            if time.monotonic() >= deadline:
                return None
            await asyncio.sleep(0.1)

    async def attorney_for(
        self,
        actions: list[dict[str, Any]],
        proc: asyncio.subprocess.Process,
        turn: asyncio.subprocess.Process,
    ) -> list[dict[str, Any]]:
        """Answer the n-th pending approval with ``actions[n]``; see the module docstring.
        ``proc`` holds the call (the one a ``kill`` kills); ``turn`` runs the turn: once it
        has exited, no further announcement is waited for beyond a short settle."""
        done: list[dict[str, Any]] = []
        for action in actions:
            pending = await self._next_pending(float(action.get("wait", PENDING_WAIT_S)), turn)
            if pending is None:
                done.append({"action": action, "error": "no pending approval announced"})
                break
            approval_id = pending.approval_id
            record: dict[str, Any] = {
                "action": action,
                "approval_id": approval_id,
                "native_tool": pending.native_tool,
                "capability": pending.capability,
                "reason_codes": list(pending.reason_codes),
                "state_when_seen": await self.status(approval_id),
            }
            kind = action.get("do", "allow-once")
            await asyncio.sleep(float(action.get("delay", 0.5)))
            if kind == "kill":
                # The OpenClaw process (the only runtime holding the call) dies now.
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                await proc.wait()
                record["killed_at_state"] = await self.status(approval_id)
                kind = action.get("then", "allow-once")
            if kind in ("allow-once", "deny"):
                signed, record["reply"] = await self._resolve(approval_id, kind)
                outcome = await self._await_outcome(approval_id)
                record["outcome_sent"] = outcome is not None
                if signed is not None and action.get("replay"):
                    record["replay_reply"] = await self._send(signed)
                if action.get("second"):
                    _, record["second_reply"] = await self._resolve(approval_id, "allow-once")
                if outcome is not None and action.get("duplicate_outcome"):
                    # A duplicate resume: the same allow arrives again for the runtime.
                    subject = names.approval_outcome_subject(approval_id)
                    for _ in range(2):
                        await self.nc.publish(subject, outcome)
                    await self.nc.flush()
            elif kind == "expire":
                # Past the binding's TTL: the gate's sweep expires it and tells the runtime.
                ttl_ms = pending.expires_at_ms - self.clock()
                self.clock.advance(ttl_ms + 1_000)
                record["state_after_expiry"] = await self._settle(approval_id, {"expired"})
                self.clock.offset_ms = 0
            if action.get("overdue"):
                # No execution report can arrive from a dead runtime: move past the deadline.
                assert self.gate is not None
                self.clock.advance(self.gate.desk.execution_deadline_ms + 1_000)
                record["state_after_deadline"] = await self._settle(
                    approval_id, {"execution_unknown", "consumed", "failed"}
                )
                self.clock.offset_ms = 0
            done.append(record)
        return done

    # -- one OpenClaw turn ---------------------------------------------------------

    async def _start_gateway(
        self, root: Path, env: dict[str, str], port: int, token: str
    ) -> tuple[asyncio.subprocess.Process, dict[str, str]]:
        """``openclaw gateway run`` on loopback with token auth; the CLI turn then goes
        through it (``openclaw agent`` without ``--local``)."""
        env = env | {"OPENCLAW_GATEWAY_TOKEN": token, "OPENCLAW_GATEWAY_PORT": str(port)}
        args = [self.openclaw, "gateway", "run", "--port", str(port), "--bind", "loopback"]
        args += ["--auth", "token", "--token", token]
        with (root / "gateway.log").open("wb") as log:
            gateway = await asyncio.create_subprocess_exec(
                *args,
                cwd=root,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        if not await _wait_port(port, GATEWAY_START_S):
            await _stop(gateway)
            raise RuntimeError(f"the OpenClaw Gateway did not listen on {port}")
        return gateway, env

    def _confine(
        self, root: Path, config: dict[str, Any], command: dict[str, Any], confined: dict[str, Any]
    ) -> tuple[list[str], dict[str, Any]]:
        """A confined run (``smf-assurance runtime run``): the plugin config without key or
        seed (the launcher's signer and NATS forwarder stand for them), the trust root and
        context from the launcher's copies, the model gateway's token replaced (the
        launcher adds it), the config in the state folder (read-only in the sandbox); the
        runtime's confinement profile: the run folder the workspace, the state folder its
        home, Node, OpenClaw and the plugin read-only. Returns the launcher's command line
        and the config."""
        runtime_id = self.runtime["runtime_id"]
        entry = config["plugins"]["entries"]["smf-assurance"]
        plugin = dict(entry["config"])
        runtime_id = plugin.get("runtimeId", runtime_id)
        principal = self.served.get(runtime_id, self.runtime["principal"])
        context = {"schema": "smf.openclaw-context/1"}
        if "contextFile" in plugin:
            context = json.loads(Path(plugin["contextFile"]).read_text())
        for name in ("keyFile", "credentialFile", "trustRootFile", "contextFile"):
            plugin.pop(name, None)
        config = deep_merge(config, {})
        config["plugins"]["entries"]["smf-assurance"]["config"] = plugin
        for provider in config.get("models", {}).get("providers", {}).values():
            provider["apiKey"] = "confined-no-token"
        runtimes = self.state.root / "runtimes"
        runtimes.mkdir(exist_ok=True)
        (runtimes / f"{runtime_id}.context.json").write_text(json.dumps(context))
        package = Path(self.config["openclaw_package"])
        plugin_dir = Path(config["plugins"]["load"]["paths"][0])
        gateway_url = self.model_gateway.url if self.model_gateway is not None else self.model.url
        profile = {
            "schema": "smf.confinement-profile/1",
            "runtime_id": runtime_id,
            "principal": principal,
            "kind": "openclaw",
            "home": str(root / "state"),
            "workspace": str(root),
            "nats_url": self.server.url,
            "gateway_url": gateway_url,
            "runtime_dirs": [
                str(Path(self.node_bin).parents[2]),
                str(package.parents[1]),
                str(plugin_dir),
            ],
            "env": {
                k: v
                for k, v in self._env(root, command.get("env", {})).items()
                if k not in {"OPENCLAW_STATE_DIR", "OPENCLAW_CONFIG_PATH"}
            },
        }
        for key, value in confined.get("profile", {}).items():
            profile[key] = [*profile.get(key, []), *value] if isinstance(value, list) else value
        (runtimes / f"{runtime_id}.confine.json").write_text(json.dumps(profile))
        launcher = [str(Path(sys.executable).parent / "smf-assurance"), "runtime", "run"]
        launcher += ["--id", runtime_id, "--state-dir", str(self.state.root), "--"]
        return launcher, config

    def _env(self, root: Path, extra: dict[str, str]) -> dict[str, str]:
        env = {
            "PATH": f"{self.node_bin}:{Path(self.openclaw).parent}:/usr/bin:/bin",
            "HOME": str(root / "home"),
            "OPENCLAW_STATE_DIR": str(root / "state"),
            "OPENCLAW_HOME": str(root / "home"),
            "OPENCLAW_CONFIG_PATH": str(root / "openclaw.json"),
            "OPENCLAW_NO_AUTO_UPDATE": "1",
            "OPENCLAW_DISABLE_BONJOUR": "1",
            "OPENCLAW_OFFLINE": "1",
            "NO_COLOR": "1",
        }
        return env | extra

    async def run(self, command: dict[str, Any]) -> dict[str, Any]:
        self.runs += 1
        root = self.root / f"run-{self.runs:02d}-{command['name']}"
        for sub in ("workspace", "home", "state"):
            (root / sub).mkdir(parents=True)
        tokens = self.tokens(root)
        command = substitute(command, tokens)
        for rel, content in command.get("files", {}).items():
            path = root / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(content if isinstance(content, str) else json.dumps(content))
        mode = command.get("mode", "local")
        config = deep_merge(
            base_config(root, self.model.url, command.get("provider", "fake")),
            command.get("config", {}),
        )
        # The Gateway binds this port itself; the reservation keeps every other
        # process off it for the harness's lifetime
        # (smf_assurance.ops.local.natsserver.PortReservation).
        reservation = reserve_port()
        self.reservations.append(reservation)
        port, token = reservation.port, f"test-token-{time.monotonic_ns()}"
        if mode == "gateway":
            config = deep_merge(
                config,
                {
                    "gateway": {
                        "mode": "local",
                        "port": port,
                        "bind": "loopback",
                        "auth": {"mode": "token", "token": token},
                    }
                },
            )
        launcher: list[str] = []
        confined = command.get("confined")
        if confined is not None:
            launcher, config = self._confine(root, config, command, confined)
            (root / "state" / "openclaw.json").write_text(json.dumps(config, indent=2))
        else:
            (root / "openclaw.json").write_text(json.dumps(config, indent=2))
        self.model.scripts.set(command["scripts"])
        self.model.scripts.take_requests()
        # only the headers a command names are kept (none by default: no credential lands
        # in the evidence unless a test put it there on purpose)
        self.model.scripts.record_headers = frozenset(
            name.lower() for name in command.get("record_headers", ())
        )
        self.model.scripts.system_needles = frozenset(command.get("system_needles", ()))
        orders_before = 0
        ledger_before = 0
        if self.gate is not None:
            orders_before = await self.execute_orders()
            ledger_before = len(self.ledger()) if self.model_gateway is not None else 0
            self.tap.take()
            self.tap.outcomes.clear()
            while not self.pending.empty():
                self.pending.get_nowait()
        env = self._env(root, command.get("env", {}))
        gateway: asyncio.subprocess.Process | None = None
        if mode == "gateway":
            gateway, env = await self._start_gateway(root, env, port, token)
        if mode == "agent-exec":
            args = [self.openclaw, "agent", "exec", command["prompt"]]
            args += ["--config", str(root / "openclaw.json"), "--cwd", str(root / "workspace")]
            args += ["--json"]
        elif mode == "gateway":
            args = [self.openclaw, "agent", "--agent", "main", "--message", command["prompt"]]
            args += ["--json"]
        else:
            args = [self.openclaw, "agent", "--local", "--agent", "main"]
            args += ["--message", command["prompt"], "--json"]
        if command.get("argv"):
            args = list(command["argv"])  # a command of its own, in place of OpenClaw's
        if confined is not None:
            env["OPENCLAW_CONFIG_PATH"] = str(root / "state" / "openclaw.json")
        started = time.monotonic()
        proc = await asyncio.create_subprocess_exec(
            *launcher,
            *args,
            cwd=root,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        # The process that holds a call: the Gateway when there is one, else the agent.
        holder = gateway or proc
        attorney = (
            asyncio.create_task(self.attorney_for(command["approvals"], holder, proc))
            if command.get("approvals") and self.gate is not None
            else None
        )
        try:
            out, err = await asyncio.wait_for(proc.communicate(), RUN_TIMEOUT_S)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            out, err = await proc.communicate()
        seconds = round(time.monotonic() - started, 2)
        # Whole, beside the run: the evidence keeps only the tail of a long ``--json``.
        (root / "openclaw.stdout").write_bytes(out)
        approvals: list[dict[str, Any]] = []
        if attorney is not None:
            approvals = await asyncio.wait_for(attorney, PENDING_WAIT_S)
        # Anything the runtime may still do (a late run, a subagent) has this long to show.
        await asyncio.sleep(float(command.get("settle", 0.5)))
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        gateway_log = ""
        if gateway is not None:
            await _stop(gateway)
            gateway_log = (root / "gateway.log").read_text(errors="replace")[-8000:]
        states: dict[str, str] = {}
        orders = 0
        if self.gate is not None:
            await self.nc.flush()
            orders = await self.execute_orders() - orders_before
            for record in approvals:
                if "approval_id" in record:
                    states[record["approval_id"]] = await self.status(record["approval_id"])
        evidence = {
            "name": command["name"],
            "root": str(root),
            "returncode": proc.returncode,
            "seconds": seconds,
            "stdout": out.decode(errors="replace")[-6000:],
            "stderr": err.decode(errors="replace")[-8000:],
            "gateway_returncode": gateway.returncode if gateway is not None else None,
            "gateway_log": gateway_log,
            "requests": [msgspec.to_builtins(r) for r in self.model.scripts.take_requests()],
            "logs": {rel: _jsonl(root / rel) for rel in command.get("logs", [])},
            "bus": self.tap.take() if self.gate is not None else [],
            "approvals": approvals,
            "approval_states": states,
            "execute_orders": orders,
            "ledger": self.ledger()[ledger_before:] if self.model_gateway is not None else [],
            "seed_in_output": self._seed_in(out + err + gateway_log.encode()),
            "markers": {
                rel: (root / rel).read_text(errors="replace") if (root / rel).exists() else None
                for rel in command.get("markers", [])
            },
        }
        # Kept beside the run for whoever reads a failure (or writes docs/OPENCLAW.md).
        (root / "evidence.json").write_text(json.dumps(evidence, indent=2))
        return evidence

    # -- a long-lived Gateway, several turns through it ------------------------------

    async def host_gateway(self, command: dict[str, Any]) -> dict[str, Any]:
        """``op: gateway-start``: one ``openclaw gateway run`` in its own folder
        (``gateway-<name>/``: state, home, workspace, config, its file log
        ``openclaw.log``), and the operator client connected to it. With
        ``await_attestation`` it returns once the gate answered an attestation
        (the plugin in the Gateway process attested), so no turn races it."""
        name = command["name"]
        root = self.root / f"gateway-{name}"
        for sub in ("workspace", "home", "state"):
            (root / sub).mkdir(parents=True)
        command = substitute(command, self.tokens(root))
        for rel, content in command.get("files", {}).items():
            path = root / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(content if isinstance(content, str) else json.dumps(content))
        reservation = reserve_port()
        self.reservations.append(reservation)
        port, token = reservation.port, f"test-token-{time.monotonic_ns()}"
        config = deep_merge(
            base_config(root, self.model.url, command.get("provider", "fake")),
            command.get("config", {}),
        )
        config = deep_merge(
            config,
            {
                "gateway": {
                    "mode": "local",
                    "port": port,
                    "bind": "loopback",
                    "auth": {"mode": "token", "token": token},
                },
                # OpenClaw's own file log, in the folder the tests search byte for byte
                "logging": {"file": str(root / "openclaw.log")},
            },
        )
        (root / "openclaw.json").write_text(json.dumps(config, indent=2))
        ledger_before = len(self.ledger()) if self.model_gateway is not None else 0
        if self.gate is not None:
            self.tap.take()
        started = time.monotonic()
        proc, env = await self._start_gateway(
            root, self._env(root, command.get("env", {})), port, token
        )
        listening_s = round(time.monotonic() - started, 2)
        try:
            operator = await OperatorClient.start(
                node=Path(self.node_bin) / "node",
                package=Path(self.config["openclaw_package"]),
                url=f"ws://127.0.0.1:{port}",
                token=token,
                events=root / "operator-events.jsonl",
                env=env,
                cwd=root,
                stderr=root / "operator.stderr",
            )
        except Exception:
            await stop_group(proc, grace_s=20)
            raise
        hosted = self.hosted[name] = HostedGateway(
            name, root, port, env, proc, operator, round(time.monotonic() - started, 2)
        )
        acks: list[dict[str, Any]] = []
        if command.get("await_attestation") and self.gate is not None:
            deadline = time.monotonic() + GATEWAY_START_S
            while not acks and time.monotonic() < deadline:
                await asyncio.sleep(0.1)
                acks = [b for b in self.tap.seen if b["kind"] == "ack"]
        return {
            "name": name,
            "root": str(root),
            "listening_s": listening_s,
            "seconds": hosted.started_s,
            "attested_after_s": round(time.monotonic() - started, 2),
            "hello": operator.hello,
            "plugins": hosted.loaded_plugins(),
            "bus": self.tap.take() if self.gate is not None else [],
            "ledger": self.ledger()[ledger_before:] if self.model_gateway is not None else [],
        }

    async def turn_through(self, command: dict[str, Any]) -> dict[str, Any]:
        """``op: gateway-turn``: ``openclaw agent --agent main --session-key
        agent:main:<name> --message ... --json`` through the hosted Gateway
        ``command["gateway"]`` (the CLI with the Gateway's config and env). The
        operator client subscribes to that session's messages first; after the CLI
        exits the turn waits for the client's terminal ``chat`` event of the session
        (an observable end, not a sleep), then reads the session back with
        ``chat.history`` as an operator reopening it would. ``{{root}}`` is the
        Gateway's folder; ``files`` are written there."""
        hosted = self.hosted[command["gateway"]]
        self.runs += 1
        run_root = self.root / f"run-{self.runs:02d}-{command['name']}"
        run_root.mkdir(parents=True)
        command = substitute(command, self.tokens(hosted.root))
        for rel, content in command.get("files", {}).items():
            path = hosted.root / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(content if isinstance(content, str) else json.dumps(content))
        self.model.scripts.set(command["scripts"])
        self.model.scripts.take_requests()
        self.model.scripts.record_headers = frozenset(
            name.lower() for name in command.get("record_headers", ())
        )
        self.model.scripts.system_needles = frozenset(command.get("system_needles", ()))
        ledger_before = len(self.ledger()) if self.model_gateway is not None else 0
        if self.gate is not None:
            self.tap.take()
        session_key = f"agent:main:{command['name']}"
        operator = hosted.operator
        await operator.request("sessions.messages.subscribe", {"key": session_key})
        since = operator.count()
        args = [self.openclaw, "agent", "--agent", "main", "--session-key", session_key]
        if command.get("model"):
            args += ["--model", command["model"]]
        args += ["--message", command["prompt"], "--json"]
        started = time.monotonic()
        proc = await asyncio.create_subprocess_exec(
            *args,
            cwd=hosted.root,
            env=hosted.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        try:
            out, err = await asyncio.wait_for(proc.communicate(), RUN_TIMEOUT_S)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            out, err = await proc.communicate()
        cli_seconds = round(time.monotonic() - started, 2)
        ended = await operator.wait_for_run_end(session_key, since, float(command.get("end_s", 30)))
        history = await operator.request("chat.history", {"sessionKey": session_key})
        (run_root / "openclaw.stdout").write_bytes(out)
        (run_root / "chat-history.json").write_text(json.dumps(history, indent=2))
        evidence = {
            "name": command["name"],
            "root": str(run_root),
            "gateway_root": str(hosted.root),
            "session_key": session_key,
            "returncode": proc.returncode,
            "seconds": round(time.monotonic() - started, 2),
            "cli_seconds": cli_seconds,
            "stdout": out.decode(errors="replace")[-6000:],
            "stderr": err.decode(errors="replace")[-8000:],
            "run_ended_for_operator": ended,
            "logs": {rel: _jsonl(hosted.root / rel) for rel in command.get("logs", [])},
            "events": operator.lines()[since:],
            "requests": [msgspec.to_builtins(r) for r in self.model.scripts.take_requests()],
            "bus": self.tap.take() if self.gate is not None else [],
            "ledger": self.ledger()[ledger_before:] if self.model_gateway is not None else [],
        }
        (run_root / "evidence.json").write_text(json.dumps(evidence, indent=2))
        return evidence

    async def unhost_gateway(self, name: str) -> dict[str, Any]:
        """``op: gateway-stop``: the operator client, then the Gateway (SIGTERM to the
        group, SIGKILL after 20 s); where to read everything they left."""
        hosted = self.hosted.pop(name)
        returncode = await hosted.stop()
        return {
            "name": name,
            "root": str(hosted.root),
            "returncode": returncode,
            "events_file": str(hosted.operator.events),
            "gateway_log": hosted.log()[-8000:],
        }

    # -- operator commands and platform messages against a hosted Gateway -----------

    async def steps_through(self, command: dict[str, Any]) -> dict[str, Any]:
        """``op: gateway-steps``: what an operator and a platform's users do to a hosted
        Gateway, in order, as one run: each step is either

        - ``{"cli": [args...]}``: ``openclaw <args>`` with the Gateway's config and env
          (``automations add|run``, ``mcp add``, ``config set``, ``agent``, ...); with
          ``"save": name`` the ``id`` of its JSON output is kept for later steps as
          ``{{saved:name}}``; with ``"logged": regex`` the step ends when a line of the
          Gateway's log written after it began matches (the running Gateway took an
          operator's change: ``config hot reload applied (mcp.servers)``, not a sleep);
        - ``{"telegram": {"chat", "user", "text", "expect", "session_key"}}``: the fake
          Telegram queues a message from ``user`` in ``chat``, and the step ends when the
          fake platform received text holding one of ``expect`` in that chat AND the
          operator client saw the session ``session_key`` end a run (``sessions.changed``
          phase ``end``) after the message was queued. Without ``text`` nothing is queued
          (a delivery the Gateway makes on its own, a scheduled job's); without
          ``session_key`` the step ends at the delivery. Text is looked for in what the
          fake received since the step began, or, with ``"since_run": true``, since the
          run began (a job due early may deliver while an earlier step still runs);
        - ``{"file": rel}``: the step ends when that file exists under the Gateway's
          folder (what a process the Gateway started on its own did).

        Then, after ``settle`` seconds for anything late, the evidence of the whole run:
        each step's result, the bus (proposals, verdicts, output verdicts, reports), the
        ledger entries added, the model requests, every call the fake Telegram received
        since the run began, the test MCP server's call log (``mcp_calls``, a file under
        the Gateway's folder), what reached the notices endpoint, and ``markers``."""
        hosted = self.hosted[command["gateway"]]
        self.runs += 1
        run_root = self.root / f"run-{self.runs:02d}-{command['name']}"
        run_root.mkdir(parents=True)
        command = substitute(command, self.tokens(hosted.root))
        for rel, content in command.get("files", {}).items():
            path = hosted.root / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(content if isinstance(content, str) else json.dumps(content))
        self.model.scripts.set(command.get("scripts", {}))
        self.model.scripts.take_requests()
        ledger_before = len(self.ledger()) if self.gate is not None else 0
        if self.gate is not None:
            self.tap.take()
        sent_before = len(self.telegram.state.sent) if self.telegram is not None else 0
        if self.notices is not None:
            self.notices.take()
        saved: dict[str, str] = {}
        done: list[dict[str, Any]] = []
        started = time.monotonic()
        for planned in command["steps"]:
            step = substitute(planned, {f"saved:{k}": v for k, v in saved.items()})
            if "cli" in step:
                done.append(await self._cli_step(hosted, step, saved))
            elif "file" in step:
                done.append(await _file_step(hosted.root / step["file"]))
            else:
                done.append(await self._telegram_step(hosted, step["telegram"], sent_before))
        await asyncio.sleep(float(command.get("settle", 1.0)))
        mcp_calls = hosted.root / command.get("mcp_calls", "mcp-calls.jsonl")
        evidence = {
            "name": command["name"],
            "root": str(run_root),
            "gateway_root": str(hosted.root),
            "seconds": round(time.monotonic() - started, 2),
            "steps": done,
            "requests": [msgspec.to_builtins(r) for r in self.model.scripts.take_requests()],
            "bus": self.tap.take() if self.gate is not None else [],
            "ledger": self.ledger()[ledger_before:] if self.gate is not None else [],
            "telegram": [
                dataclasses.asdict(sent)
                for sent in (self.telegram.state.sent[sent_before:] if self.telegram else [])
            ],
            "mcp_calls": _jsonl(mcp_calls),
            "notices": self.notices.take() if self.notices is not None else [],
            "markers": {
                rel: (hosted.root / rel).read_text(errors="replace")
                if (hosted.root / rel).exists()
                else None
                for rel in command.get("markers", [])
            },
        }
        (run_root / "evidence.json").write_text(json.dumps(evidence, indent=2))
        return evidence

    async def _cli_step(
        self, hosted: HostedGateway, step: dict[str, Any], saved: dict[str, str]
    ) -> dict[str, Any]:
        log = hosted.root / "gateway.log"
        offset = log.stat().st_size
        started = time.monotonic()
        proc = await asyncio.create_subprocess_exec(
            self.openclaw,
            *step["cli"],
            cwd=hosted.root,
            env=hosted.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        try:
            out, err = await asyncio.wait_for(proc.communicate(), RUN_TIMEOUT_S)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            out, err = await proc.communicate()
        stdout = out.decode(errors="replace")
        done: dict[str, Any] = {
            "cli": step["cli"][:2],
            "returncode": proc.returncode,
            "seconds": round(time.monotonic() - started, 2),
            "stdout": stdout[-8000:],
            "stderr": err.decode(errors="replace")[-4000:],
        }
        if step.get("save"):
            found = _json_object(stdout)
            if found is not None and isinstance(found.get("id"), str):
                saved[step["save"]] = done["saved"] = found["id"]
        if step.get("logged"):
            pattern = re.compile(step["logged"])
            done["logged"] = await _logged(log, offset, pattern, RELOAD_WAIT_S)
        return done

    async def _telegram_step(
        self, hosted: HostedGateway, message: dict[str, Any], run_began: int
    ) -> dict[str, Any]:
        assert self.telegram is not None, "the harness runs no fake Telegram (fake_platforms)"
        fake = self.telegram
        chat = message["chat"]
        since, events_since = len(fake.state.sent), hosted.operator.count()
        if message.get("since_run"):
            since = run_began
        started = time.monotonic()
        if "text" in message:
            fake.push_text(chat, int(message["user"]), message["text"])
        needles = [message["expect"]] if isinstance(message["expect"], str) else message["expect"]

        def answered() -> bool:
            return any(
                sent.method in TELEGRAM_TEXT_METHODS
                and str(sent.params.get("chat_id")) == str(chat["id"])
                and any(needle in html.unescape(sent.text) for needle in needles)
                for sent in fake.state.sent[since:]
            )

        deadline = started + PLATFORM_WAIT_S
        while not answered() and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        seen = answered()
        ended = None
        if "session_key" in message:
            ended = await hosted.operator.wait_for_session_phase(
                message["session_key"], "end", events_since, max(1.0, deadline - time.monotonic())
            )
        return {
            "telegram": chat["id"],
            "answered": seen,
            "run_ended": ended,
            "seconds": round(time.monotonic() - started, 2),
        }

    def _seed_in(self, output: bytes) -> bool:
        """Whether any seed text of the harness's credentials appears in ``output``."""
        if self.gate is None:
            return False
        return any(Path(f).read_bytes().strip() in output for f in self.credentials.values())


async def _stop(proc: asyncio.subprocess.Process) -> None:
    """SIGTERM the process group, SIGKILL it if it is still there after 20 s."""
    await stop_group(proc, grace_s=20)


async def _wait_port(port: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            await asyncio.sleep(0.25)
            continue
        writer.close()
        return True
    return False


def _json_object(text: str) -> dict[str, Any] | None:
    """The first JSON object in a CLI's output (it may print a line before it)."""
    start = text.find("{")
    if start < 0:
        return None
    try:
        value, _ = json.JSONDecoder().raw_decode(text[start:])
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


async def _file_step(path: Path) -> dict[str, Any]:
    started = time.monotonic()
    while not path.exists() and time.monotonic() - started < PLATFORM_WAIT_S:
        await asyncio.sleep(0.1)
    return {
        "file": path.name,
        "exists": path.exists(),
        "seconds": round(time.monotonic() - started, 2),
    }


async def _logged(log: Path, offset: int, pattern: re.Pattern[str], seconds: float) -> bool:
    """Whether a line matching ``pattern`` appeared in ``log`` after byte ``offset``
    within ``seconds``."""
    deadline = time.monotonic() + seconds
    while True:
        with log.open("rb") as handle:
            handle.seek(offset)
            if pattern.search(handle.read().decode(errors="replace")):
                return True
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(0.1)


def _jsonl(path: Path) -> list[Any]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


async def main(config: dict[str, Any]) -> None:
    if config.get("bring_up_loopback"):
        subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    harness = Harness(config)
    await harness.start()
    loop = asyncio.get_running_loop()
    sys.stdout.write(json.dumps({"ready": True, "gate": harness.gate is not None}) + "\n")
    sys.stdout.flush()
    try:
        while True:
            line = await loop.run_in_executor(None, sys.stdin.readline)
            if not line:
                break
            try:
                command = json.loads(line)
                op = command.get("op", "run")
                if op == "gateway-start":
                    reply = await harness.host_gateway(command)
                elif op == "gateway-turn":
                    reply = await harness.turn_through(command)
                elif op == "gateway-stop":
                    reply = await harness.unhost_gateway(command["gateway"])
                elif op == "gateway-steps":
                    reply = await harness.steps_through(command)
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
