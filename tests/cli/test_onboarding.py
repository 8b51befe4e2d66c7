"""Onboarding runtimes and approvers from the command line, against a running gate.

A real ``up`` (its embedded nats-server, authorization generated from the
registry and following every release the gate adopts; the gate; the example
connectors) runs on a demo state whose release key plays the operator's. The
commands run through ``smf_assurance.ops.cli.main.main`` as an operator runs them, and what they
promise is checked from the outside:

- ``runtime add`` then a proposal signed by the new key, on the new bus
  credential, after the runtime attested as its adapter does, is decided by the
  running gate (a signed verdict; its decision in the ledger); before it attests
  it is refused ``runtime_attestation_missing``. The snippet is 0600 and holds
  what the adapter needs: Hermes's environment loads with the adapter's own
  ``AdapterConfig.from_env``, OpenClaw's plugin block with the compiled
  plugin's own ``readConfig`` (Node).
- ``runtime remove`` then its proposals are refused ``unknown_signer`` and its
  bus credential is refused by the server.
- ``approver add`` (keys made on the approver's side, public halves handed over)
  then its signed show and resolution are accepted; ``approver remove`` then its
  connection is refused and its signature is not the roster's.
- Bad input is one line, non-zero, and leaves every byte of the state as it was.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shlex
import shutil
import signal
import sqlite3
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Final, cast

import msgspec
import nats
import pytest
from nats.aio.client import Client
from nats.errors import Error as NatsError

from smf_assurance.adapters.client import ProposalClient
from smf_assurance.adapters.hermes.config import AdapterConfig
from smf_assurance.core.release_trust import VerifiedRelease
from smf_assurance.gateway.assembly import load_gateway_file
from smf_assurance.gateway.server import token_hash
from smf_assurance.governance.releases import latest_in_inbox, write_release_dir
from smf_assurance.ops.cli.main import main
from smf_assurance.ops.local.bus_auth import new_user_seed, public_user
from smf_assurance.ops.local.confine.attest import Attester
from smf_assurance.ops.local.confine.profile import launcher_principal
from smf_assurance.ops.local.model_gateway import gateway_file, set_upstream
from smf_assurance.ops.local.natsserver import reserve_port
from smf_assurance.ops.local.onboarding import Changes, OnboardingError
from smf_assurance.ops.local.state import RUNTIME_ID, StateDir, provision_demo
from smf_assurance.ops.runtimes.provision import (
    LiveRequirements,
    attestation_settings_path,
    provision_runtime,
)
from smf_assurance.pipeline.desks.attestation import RuntimeRequirement
from smf_assurance.subjects import dsse, names
from smf_assurance.subjects.attestation import AttestationAck, RuntimeAttestation
from smf_assurance.subjects.bus_access import BusCredential, connect_options, read_credential
from smf_assurance.subjects.keys import (
    generate_signing_key,
    load_private_key,
    public_record,
    write_private_key,
)
from smf_assurance.subjects.messages import ActorContext, DataFacts, Verdict
from smf_assurance.subjects.registry import KeyRegistry, RegistryFile, entry_for
from smf_assurance.subjects.release import decode_trust_root
from tests.support.bus_helpers import registry_entries
from tests.support.cli_json import hold_filing
from tests.support.cli_ops import read_line
from tests.support.openclaw_conformance import build_plugin

PROG: Final = (sys.executable, "-m", "smf_assurance.ops.cli.main")
TIMEOUT: Final = 60.0
PLUGIN: Final = Path(__file__).resolve().parents[2] / "smf_assurance" / "adapters" / "openclaw"
TENANT: Final = "tenant-acme"
PINS: Final = {"hermes": "0.19.0", "openclaw": "2026.9.6"}
HOOKS: Final = {
    "hermes": ("pre_tool_call", "transform_llm_output"),
    "openclaw": ("before_tool_call", "after_tool_call"),
}
ADAPTERS: Final = {"hermes": "smf-hermes-adapter", "openclaw": "smf-openclaw-adapter"}


@dataclass(frozen=True)
class Deployment:
    work: Path
    state: StateDir
    url: str

    def release_args(self) -> list[str]:
        return [
            "--state-dir",
            str(self.state.root),
            "--release-key",
            str(self.state.key_path("release-signer")),
        ]


def stop(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(TIMEOUT)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(TIMEOUT)


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    """``up`` on a demo state with a model upstream named (``runtime add`` needs it)."""
    work = tmp_path_factory.mktemp("onboarding")
    state = StateDir(work / "state")
    provision_demo(state)
    set_upstream(state, "http://127.0.0.1:9/v1", "local-model")
    proc = subprocess.Popen(
        [*PROG, "up", "--state-dir", str(state.root), "--json", "--log-level", "error"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        url = json.loads(read_line(proc, TIMEOUT))["nats_url"]
        yield Deployment(work, state, url)
    finally:
        stop(proc)


def cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    capsys.readouterr()
    try:
        code = main(argv)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    out, err = capsys.readouterr()
    return code, out, err


def assert_one_line(code: int, err: str, *needles: str) -> None:
    assert code != 0
    assert err.startswith("smf-assurance: "), err
    assert err.count("\n") == 1, err
    for needle in needles:
        assert needle in err, err


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


# --- what the runtime does ---------------------------------------------------------------------


def actor() -> ActorContext:
    return ActorContext(
        domain="legal",
        tenant_id=TENANT,
        organization_id=TENANT,
        matter_id="general",
        actor_id="associate-ann",
        actor_roles=("associate",),
        governing_laws=(),
    )


async def active_release(url: str, state: StateDir) -> str:
    """The release the gate decides with, from its signed status."""
    from smf_assurance.subjects.gate_status import GateStatusRequest, open_gate_status  # noqa: PLC0415

    nc = await nats.connect(url, **connect_options(state.existing_credential("operator")))
    try:
        reply = await nc.request(names.GATE_STATUS, msgspec.json.encode(GateStatusRequest()), 5)
    finally:
        await nc.close()
    status = open_gate_status(reply.data, state.gate_keys())
    assert status.release_id is not None
    return status.release_id


async def connect_as(url: str, credential: BusCredential, wait: float = 15.0) -> Client:
    """Connect with ``credential`` once the server's authorization lets it in (the server
    reloads it when the gate adopts the release naming it)."""
    deadline = time.monotonic() + wait
    while True:
        try:
            return await nats.connect(
                url, allow_reconnect=False, connect_timeout=2, **credential.connect_options()
            )
        except (NatsError, OSError):
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.2)


async def attest(
    nc: Client, key_file: Path, runtime_id: str, kind: str, release: str
) -> AttestationAck:
    """The attestation the runtime's adapter sends: its pin, its hooks, the release it
    verified itself."""
    key, _ = load_private_key(key_file)
    att = RuntimeAttestation(
        schema="smf.runtime-attestation/1",
        attestation_id="a-onboarding-" + os.urandom(8).hex(),
        runtime_id=runtime_id,
        runtime_version=PINS[kind],
        runtime_pin=PINS[kind],
        adapter_id=ADAPTERS[kind],
        adapter_version="0.1.0",
        profile="block-only" if kind == "hermes" else "exact-hold",
        hooks_present=HOOKS[kind],
        hooks_missing=(),
        streaming=(),
        verified_release_id=release,
        problems=(),
        issued_at_ms=time.time_ns() // 1_000_000,
    )
    signed = dsse.encode_envelope(dsse.sign_struct(names.PAYLOAD_ATTESTATION, att, [key]))
    reply = await nc.request(names.ATTEST, signed, timeout=5)
    return msgspec.json.decode(reply.data, type=AttestationAck)


def held_document(client: ProposalClient) -> Any:
    """A change to a document under legal hold, in each adapter's words (Hermes's
    connector-backed deletion, OpenClaw's ``write``): denied by the floor, recorded."""
    facts = DataFacts(classification="internal", legal_hold=True, injection_taint="clear")
    if client.adapter_id == ADAPTERS["hermes"]:
        tool, arguments = "smf_dms_delete", {"document_id": "doc-4711"}
    else:
        tool, arguments = "write", {"path": "/srv/matters/held.txt", "content": "x"}
    return client.build(native_tool=tool, arguments=arguments, actor=actor(), facts=facts)


def client_for(
    nc: Client, key_file: Path, runtime_id: str, kind: str, state: StateDir
) -> ProposalClient:
    key, _ = load_private_key(key_file)
    return ProposalClient(
        nc, key, runtime_id, PINS[kind], ADAPTERS[kind], gate_keys=state.gate_keys()
    )


def ledger_has(state: StateDir, decision_id: str) -> bool:
    uri = f"file:{state.ledger}?mode=ro"
    with closing(sqlite3.connect(uri, uri=True)) as conn:
        row = conn.execute(
            "SELECT 1 FROM evidence_entries WHERE decision_id = ?", (decision_id,)
        ).fetchone()
    return row is not None


# --- the snippets, read as each adapter reads them ------------------------------------------------


def hermes_environment(snippet: Path) -> dict[str, str]:
    """What a shell has after ``. SNIPPET``."""
    done = subprocess.run(
        ["env", "-i", "bash", "-c", f". {shlex.quote(str(snippet))} && env -0"],
        capture_output=True,
        check=True,
        timeout=TIMEOUT,
    )
    pairs = (item.split("=", 1) for item in done.stdout.decode().split("\0") if "=" in item)
    return {k: v for k, v in pairs if k.startswith("SMF_")}


def hermes_yaml(snippet: Path) -> dict[str, dict[str, Any]]:
    """The config.yaml blocks between the markers: two levels, JSON-quoted scalars."""
    text = snippet.read_text()
    block = text.split(": <<'SMF_HERMES_CONFIG_YAML'\n", 1)[1].split("\nSMF_HERMES_CONFIG_YAML", 1)[
        0
    ]
    found: dict[str, dict[str, Any]] = {}
    section: dict[str, Any] = {}
    key = ""
    for line in block.splitlines():
        if not line.startswith(" "):
            section = found.setdefault(line.rstrip(":"), {})
        elif line.startswith("    - "):
            section.setdefault(key, []).append(json.loads(line[6:]))
        else:
            key, _, value = line.strip().partition(":")
            if value.strip():
                section[key] = json.loads(value.strip())
    return found


def openclaw_fields() -> list[str]:
    """The config keys the plugin accepts, read from its source (``src/config.ts``)."""
    source = (PLUGIN / "src" / "config.ts").read_text()
    match = re.search(r"const CONFIG_FIELDS = \[([^\]]*)\]", source)
    assert match is not None
    fields: list[str] = json.loads(f"[{match.group(1)}]")
    return fields


def openclaw_read_config(snippet: Path) -> dict[str, Any]:
    """The compiled plugin's own ``readConfig`` on the snippet's plugin block."""
    build_plugin()
    node = subprocess.run(
        [str(PLUGIN / "scripts" / "node.sh")], check=True, capture_output=True, text=True
    ).stdout.strip()
    script = (
        f'import {{ readConfig }} from "{PLUGIN / "dist" / "config.js"}";\n'
        'import { readFileSync } from "node:fs";\n'
        "const doc = JSON.parse(readFileSync(process.argv[1], 'utf8'));\n"
        'const block = doc.plugins.entries["smf-assurance"].config;\n'
        'const r = readConfig(block, { HOME: "/nonexistent" });\n'
        "const c = r.config;\n"
        "console.log(JSON.stringify({ problems: r.problems, runtimeId: c?.runtimeId,\n"
        "  principal: c?.credential?.principal, tenant: c?.context?.actor?.tenant_id }));\n"
    )
    done = subprocess.run(
        [f"{node}/node", "--input-type=module", "-e", script, str(snippet)],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def check_snippet(kind: str, added: dict[str, Any], state: StateDir) -> None:
    files = {name: Path(path) for name, path in added["files"].items()}
    for name, path in files.items():
        assert mode(path) == 0o600, (name, oct(mode(path)))
    token = files["gateway_token"].read_text()
    runtime_id = added["runtime_id"]
    gateway = json.loads((state.root / "model-gateway.json").read_text())
    (profile,) = (r for r in gateway["runtimes"] if r["runtime_id"] == runtime_id)
    assert profile["token_sha256"] == token_hash(token)
    assert profile["adapter_id"] == ADAPTERS[kind]
    assert profile["actor"]["tenant_id"] == TENANT
    if kind == "hermes":
        env = hermes_environment(files["snippet"])
        assert set(env) == {
            "SMF_NATS_URL",
            "SMF_RUNTIME_ID",
            "SMF_RUNTIME_KEY",
            "SMF_BUS_CREDENTIAL",
            "SMF_CONTEXT_FILE",
            "SMF_RELEASE_TRUST_ROOT",
        }
        config = AdapterConfig.from_env(env)  # raises ConfigError naming what is wrong
        assert config.runtime_id == runtime_id
        assert config.key.key_id == added["key_id"]
        assert config.bus_credential is not None
        assert config.bus_credential.principal == runtime_id
        assert config.trust_root is not None
        assert config.context.actor.tenant_id == TENANT
        blocks = hermes_yaml(files["snippet"])
        assert blocks["model"] == {
            "provider": "custom",
            "base_url": "http://127.0.0.1:8787/v1",
            "api_key": token,
        }
        assert blocks["plugins"] == {"enabled": ["smf-assurance"]}
        return
    document = json.loads(files["snippet"].read_text())
    config = document["plugins"]["entries"]["smf-assurance"]["config"]
    assert set(config) <= set(openclaw_fields())
    _, principal = load_private_key(config["keyFile"])
    assert principal == runtime_id
    read_credential(principal, config["credentialFile"])
    decode_trust_root(Path(config["trustRootFile"]).read_bytes())
    provider = document["models"]["providers"]["smf-gateway"]
    assert (provider["baseUrl"], provider["apiKey"]) == ("http://127.0.0.1:8787/v1", token)
    read = openclaw_read_config(files["snippet"])
    assert read == {
        "problems": [],
        "runtimeId": runtime_id,
        "principal": runtime_id,
        "tenant": TENANT,
    }


# --- runtime add / remove ---------------------------------------------------------------


@pytest.mark.claim("onboarding.added-then-removed")
@pytest.mark.parametrize("kind", ["hermes", "openclaw"])
def test_a_runtime_added_is_decided_by_the_running_gate_and_refused_once_removed(
    kind: str, deployment: Deployment, capsys: pytest.CaptureFixture[str]
) -> None:
    state = deployment.state
    runtime_id = f"{kind}-ann"
    code, out, err = cli(
        [
            "runtime",
            "add",
            "--kind",
            kind,
            "--id",
            runtime_id,
            "--tenant",
            TENANT,
            "--actor-id",
            "associate-ann",
            "--actor-role",
            "associate",
            *deployment.release_args(),
            "--json",
        ],
        capsys,
    )
    assert code == 0, err
    added = json.loads(out)
    assert added["release"]["waited"] is True
    (gate,) = added["release"]["gates"]
    assert gate["outcome"] == "adopted"
    key_file = Path(added["files"]["key"])
    token = Path(added["files"]["gateway_token"]).read_text()
    seed = Path(added["files"]["bus_credential"]).read_text().strip()
    assert token not in out + err
    assert seed not in out + err
    check_snippet(kind, added, state)
    requirement = json.loads(attestation_settings_path(state).read_text())["runtimes"][runtime_id]
    assert requirement["instance_bound"] is True  # both adapters prove their process
    assert requirement["require_release"] is True
    (served,) = [
        r for r in load_gateway_file(gateway_file(state)).runtimes if r.runtime_id == runtime_id
    ]
    # OpenClaw runs no call whose arguments fail the tool's schema; Hermes does not check
    assert served.checks_tool_arguments is (kind == "openclaw")
    # Hermes answers every call of a turn whose arguments are not JSON itself; OpenClaw
    # ends such a turn as a failed stream
    assert served.refuses_invalid_json_turns is (kind == "hermes")

    credential = BusCredential(runtime_id, Path(added["files"]["bus_credential"]))

    launcher = launcher_principal(runtime_id)
    launcher_credential = read_credential(launcher, state.bus_credential_path(launcher))

    async def decided() -> tuple[Verdict, Verdict, AttestationAck, int]:
        release = await active_release(deployment.url, state)
        assert release == added["release"]["release_id"]
        nc = await connect_as(deployment.url, credential)
        try:
            client = client_for(nc, key_file, runtime_id, kind, state)
            before = await client.propose(held_document(client))  # not attested yet
            ack = await attest(nc, key_file, runtime_id, kind, release)
            after = await client.propose(held_document(client))
        finally:
            await nc.close()
        # the launcher `runtime add` provisioned: its own key and credential, accepted
        attester = Attester(
            load_private_key(state.key_path(launcher))[0],
            launcher_credential,
            deployment.url,
            runtime_id,
            "sha256:" + "cd" * 32,
        )
        await attester.attest("running")
        await attester.end()
        return before, after, ack, attester.accepted

    before, after, ack, confinement_accepted = asyncio.run(decided())
    assert before.reason_codes == ("runtime_attestation_missing",), before
    assert ack.accepted, ack
    assert confinement_accepted == 2  # running, then ended
    assert (after.outcome, after.reason_codes[0]) == ("deny", "legal_hold_blocks_deletion"), after
    assert after.decision_id is not None
    assert ledger_has(state, after.decision_id)

    code, out, err = cli(
        ["runtime", "remove", "--id", runtime_id, *deployment.release_args(), "--json"], capsys
    )
    assert code == 0, err
    removed = json.loads(out)
    assert removed["principals"] == [runtime_id, launcher]
    assert removed["key_ids"][0] == added["key_id"]
    assert removed["attestation_requirement_removed"]
    assert removed["gateway_profile_removed"]
    assert str(key_file) in removed["left_files"]
    assert key_file.exists()

    async def refused() -> tuple[Verdict, str]:
        # the operator may publish anything: the removed runtime's signed proposal reaches
        # the gate, which no longer knows the key
        operator = await nats.connect(
            deployment.url, **connect_options(state.existing_credential("operator"))
        )
        try:
            client = client_for(operator, key_file, runtime_id, kind, state)
            verdict = await client.propose(held_document(client))
        finally:
            await operator.close()
        try:
            nc = await nats.connect(
                deployment.url,
                connect_timeout=5,
                allow_reconnect=False,
                **credential.connect_options(),
            )
        except NatsError as exc:
            return verdict, str(exc)
        await nc.close()
        return verdict, "connected"

    verdict, connection = asyncio.run(refused())
    assert (verdict.outcome, verdict.reason_codes) == ("deny", ("unknown_signer",)), verdict
    assert "authorization violation" in connection.lower()


# --- approver add / remove --------------------------------------------------------------


@pytest.mark.claim("onboarding.added-then-removed")
def test_an_approver_added_may_approve_for_its_tenant_until_removed(
    deployment: Deployment, capsys: pytest.CaptureFixture[str]
) -> None:
    state, work, url = deployment.state, deployment.work, deployment.url
    # on the approver's machine: its keys, and the public halves to hand over
    key = work / "attorney-ann.key"
    seed = work / "attorney-ann.nkey"
    code, out, _ = cli(["keys", "new", "--id", "attorney-ann", "--out", str(key), "--json"], capsys)
    assert code == 0
    (work / "attorney-ann.pub.json").write_text(out)
    code, out, _ = cli(["keys", "nkey", "--out", str(seed), "--json"], capsys)
    assert code == 0
    nkey = json.loads(out)
    assert nkey["principal"] == "attorney-ann"
    assert mode(seed) == 0o600
    assert seed.read_text().strip() not in out
    # the operator's seat refuses the private key itself
    add = [
        "approver",
        "add",
        "--id",
        "attorney-ann",
        "--role",
        "licensed_attorney",
        "--tenant",
        TENANT,
        "--bus-user",
        nkey["nats_user"],
        *deployment.release_args(),
    ]
    code, _, err = cli([*add, "--public-key", str(key)], capsys)
    assert_one_line(code, err, "PRIVATE key")
    code, out, err = cli(
        [*add, "--public-key", str(work / "attorney-ann.pub.json"), "--json"], capsys
    )
    assert code == 0, err
    added = json.loads(out)
    assert (added["licensed_roles"], added["tenants"]) == (["licensed_attorney"], [TENANT])
    assert added["release"]["gates"][0]["outcome"] == "adopted"

    approver = ["--key", str(key), "--credential", str(seed), "--nats", url]
    approval = asyncio.run(hold_filing(url, state))
    for _attempt in range(50):  # the server lets the new user in once it reloaded
        code, out, err = cli(["approvals", "show", approval, *approver, "--json"], capsys)
        if code == 0 or "Authorization" not in err:
            break
        time.sleep(0.2)
    assert code == 0, err
    assert json.loads(out)["content_matches"] is True
    code, out, err = cli(
        ["approvals", "resolve", approval, "allow-once", "--yes", *approver, "--json"], capsys
    )
    assert code == 0, err
    assert json.loads(out)["accepted"] is True

    code, out, err = cli(
        ["approver", "remove", "--id", "attorney-ann", *deployment.release_args(), "--json"], capsys
    )
    assert code == 0, err
    assert json.loads(out)["key_ids"] == [added["key_id"]]
    held = asyncio.run(hold_filing(url, state))
    code, out, err = cli(
        ["approvals", "resolve", held, "allow-once", "--yes", *approver, "--json"], capsys
    )
    assert code == 1
    assert "Authorization Violation" in err, err  # the server no longer knows its credential
    # its signature is not the roster's either, on a credential the bus still admits
    console = ["--credential", str(state.bus_credential_path("console")), "--nats", url]
    code, out, err = cli(
        [
            "approvals",
            "resolve",
            held,
            "allow-once",
            "--yes",
            "--key",
            str(key),
            *console,
            "--json",
        ],
        capsys,
    )
    assert code == 1
    assert json.loads(out)["accepted"] is False, out


# --- refusals leave nothing behind ------------------------------------------------------


def snapshot(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` and its bytes (the embedded server's store aside)."""
    return {
        str(path.relative_to(root)): path.read_bytes()
        for path in sorted(root.rglob("*"))
        if path.is_file() and "nats" not in path.relative_to(root).parts[:1]
    }


@pytest.fixture
def quiet_state(tmp_path: Path) -> StateDir:
    """A demo state with no gate running: refusals must come before the bus."""
    state = StateDir(tmp_path / "state")
    provision_demo(state)
    set_upstream(state, "http://127.0.0.1:9/v1", "local-model")
    return state


def add_args(
    state: StateDir, *extra: str, kind: str = "hermes", runtime_id: str = "rt-new"
) -> list[str]:
    return [
        "runtime",
        "add",
        "--kind",
        kind,
        "--id",
        runtime_id,
        "--tenant",
        TENANT,
        "--state-dir",
        str(state.root),
        "--no-wait",
        *extra,
    ]


def test_bad_input_is_one_line_and_changes_nothing(
    quiet_state: StateDir, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = quiet_state
    signer = ["--release-key", str(state.key_path("release-signer"))]
    outsider = tmp_path / "outsider.key"
    write_private_key(outsider, generate_signing_key(), "outsider")
    before = snapshot(state.root)
    refusals: list[tuple[list[str], int, str]] = [
        (add_args(state, *signer, kind="nonsense"), 2, "invalid choice"),
        (add_args(state, *signer, runtime_id=RUNTIME_ID), 1, "already in the registry"),
        (add_args(state, *signer, runtime_id="runtime"), 1, "principal runtime is already"),
        (add_args(state, *signer, runtime_id="not a token"), 1, "is not a runtime id"),
        (add_args(state), 2, "--release-key"),
        (add_args(state, "--release-key", str(tmp_path / "absent.key")), 1, "absent.key"),
        (add_args(state, "--release-key", str(outsider)), 1, "is not in the trust root"),
        (add_args(state, *signer, "--tenant", "two words"), 1, "is not a tenant id"),
        (add_args(state, *signer, "--facts", str(tmp_path / "absent.json")), 1, "--facts"),
        (
            add_args(state, *signer, "--prior", str(tmp_path)),
            1,
            "--prior",
        ),
        (
            ["runtime", "remove", "--id", "nobody", "--state-dir", str(state.root), *signer],
            1,
            "no runtime nobody",
        ),
        (
            ["approver", "remove", "--id", "nobody", "--state-dir", str(state.root), *signer],
            1,
            "no approver nobody",
        ),
    ]
    for argv, status, needle in refusals:
        code, _out, err = cli(argv, capsys)
        assert code == status, (argv, err)
        assert needle in err, (argv, err)
        assert "Traceback" not in err
        if status == 1:
            assert_one_line(code, err)
        assert snapshot(state.root) == before, argv
    # a damaged registry, named; still nothing written
    state.registry.write_bytes(b'{"schema": "smf.registry/1", "entries": [')
    before = snapshot(state.root)
    code, _, err = cli(add_args(state, *signer), capsys)
    assert_one_line(code, err, str(state.registry), "damaged")
    assert snapshot(state.root) == before


def test_no_model_gateway_named_is_refused_before_anything_is_written(
    quiet_state: StateDir, capsys: pytest.CaptureFixture[str]
) -> None:
    (quiet_state.root / "model-gateway.json").unlink()
    before = snapshot(quiet_state.root)
    code, _, err = cli(
        add_args(quiet_state, "--release-key", str(quiet_state.key_path("release-signer"))), capsys
    )
    assert_one_line(code, err, "model-gateway upstream")
    assert snapshot(quiet_state.root) == before


def test_a_dead_bus_is_refused_before_anything_is_written(
    quiet_state: StateDir, capsys: pytest.CaptureFixture[str]
) -> None:
    state = quiet_state
    before = snapshot(state.root)
    dead = reserve_port()
    try:
        url = f"nats://127.0.0.1:{dead.port}"
        argv = add_args(
            state, "--release-key", str(state.key_path("release-signer")), "--nats", url
        )
        code, out, err = cli(argv, capsys)
    finally:
        dead.close()
    assert_one_line(code, err, url)
    assert out == ""
    assert snapshot(state.root) == before


@pytest.mark.claim("onboarding.failed-change-undone")
def test_a_publication_that_fails_undoes_every_file(
    quiet_state: StateDir, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The inbox cannot be written (a file stands where its folder should be): the
    release never left, so the registry, settings, keys and snippet written before it
    are undone."""
    state = quiet_state
    prior = latest_in_inbox(state.release_inbox)
    assert prior is not None
    write_release_dir(prior, tmp_path / "prior")
    shutil.rmtree(state.release_inbox)
    state.release_inbox.write_text("not a folder")
    before = snapshot(state.root)
    argv = add_args(
        state,
        "--release-key",
        str(state.key_path("release-signer")),
        "--prior",
        str(tmp_path / "prior"),
    )
    code, _, err = cli(argv, capsys)
    assert_one_line(code, err, str(state.release_inbox))
    assert snapshot(state.root) == before


@pytest.mark.claim("onboarding.failed-change-undone")
def test_changes_undo_what_they_wrote_when_one_write_fails(tmp_path: Path) -> None:
    """``Changes.apply``: a write that fails puts back every file written before it."""
    kept = tmp_path / "kept.json"
    kept.write_bytes(b"before")
    blocker = tmp_path / "blocker"
    blocker.write_text("a file where a folder is needed")
    changes = Changes()
    changes.create(tmp_path / "new.key", b"secret")
    changes.replace(kept, b"after")
    changes.create(blocker / "under-a-file", b"x")
    with pytest.raises(FileExistsError):
        changes.apply()
    assert not (tmp_path / "new.key").exists()
    assert kept.read_bytes() == b"before"
    with pytest.raises(OnboardingError):
        changes.create(kept, b"exists")


# --- what a running gate requires ---------------------------------------------------------------


def registry_with(state: StateDir, *runtime_ids: str) -> KeyRegistry:
    """The state's registry plus runtimes ``runtime_ids`` (new keys)."""
    entries = list(registry_entries(state.registry))
    for runtime_id in runtime_ids:
        entries.append(
            entry_for(generate_signing_key(), runtime_id, "runtime", runtime_id=runtime_id)
        )
    return KeyRegistry.from_file(RegistryFile(schema="smf.registry/1", entries=tuple(entries)))


def switched_to(registry: KeyRegistry) -> VerifiedRelease:
    """A release switch as ``LiveRequirements.follow`` sees it: only its registry is read."""
    return cast(VerifiedRelease, SimpleNamespace(registry=registry))


def test_a_gate_requires_what_the_state_names_at_each_release_switch(quiet_state: StateDir) -> None:
    """``LiveRequirements``: read again at every switch; a runtime new since start that the
    file does not name must attest the gate's release (fails closed); the scripted runtime,
    exempt at start, stays exempt; an unreadable file keeps what was held."""
    state = quiet_state
    live = LiveRequirements(state, registry_with(state))
    assert dict(live) == {}
    provision_runtime(state, "rt-named", "rt-named", runtime_pin="9.9")  # the operator's file
    live.follow(switched_to(registry_with(state, "rt-unnamed")))
    assert live["rt-named"].runtime_pin == "9.9"
    assert live["rt-unnamed"] == RuntimeRequirement(require_release=True)
    assert RUNTIME_ID not in live
    attestation_settings_path(state).write_bytes(b"{not json")
    live.follow(switched_to(registry_with(state, "rt-later")))
    assert live["rt-named"].runtime_pin == "9.9"
    assert live["rt-later"] == RuntimeRequirement(require_release=True)
    assert RUNTIME_ID not in live


def test_approver_refusals_are_one_line_and_change_nothing(
    quiet_state: StateDir, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = quiet_state
    mine = generate_signing_key()
    record = tmp_path / "attorney-bea.pub.json"
    record.write_bytes(msgspec.json.encode(public_record(mine, "attorney-bea")))
    alex, _ = load_private_key(state.key_path("attorney-alex"))
    borrowed = tmp_path / "attorney-cy.pub.json"  # attorney-alex's key under another name
    borrowed.write_bytes(msgspec.json.encode(public_record(alex, "attorney-cy")))
    user = public_user(new_user_seed())
    taken = public_user(state.bus_credential_path("attorney-alex").read_bytes())
    flipped = user[:-1] + ("A" if user[-1] != "A" else "B")

    def add(principal: str, key: Path, bus_user: str, *extra: str) -> list[str]:
        return [
            *("approver", "add", "--id", principal, "--role", "licensed_attorney"),
            *("--tenant", TENANT, "--public-key", str(key), "--bus-user", bus_user),
            *("--release-key", str(state.key_path("release-signer"))),
            *("--state-dir", str(state.root), "--no-wait", *extra),
        ]

    before = snapshot(state.root)
    refusals = [
        (add("attorney-bee", record, user), "attorney-bea's, not attorney-bee's"),
        (add("attorney-bea", record, "not-a-user"), "is not a NATS user public key"),
        (add("attorney-bea", record, flipped), "wrong checksum"),
        (add("attorney-bea", record, user, "--role", "Licensed Attorney"), "is not a role"),
        (add("attorney-bea", record, user, "--tenant", "a.b"), "is not a tenant id"),
        (add("attorney-bea", record, taken), "is already attorney-alex's"),
        (add("attorney-cy", borrowed, user), "is already registered (attorney-alex)"),
        (add("attorney-bea", tmp_path / "absent.json", user), "cannot read"),
        (add("attorney-bea", state.registry, user), "is not a public key record"),
        (
            [
                *("approver", "remove", "--id", "runtime", "--state-dir", str(state.root)),
                *("--release-key", str(state.key_path("release-signer"))),
            ],
            "no approver runtime",
        ),
    ]
    for argv, needle in refusals:
        code, out, err = cli(argv, capsys)
        assert_one_line(code, err, needle)
        assert out == ""
        assert snapshot(state.root) == before, argv


def test_keys_nkey_refuses_a_name_it_cannot_connect_with_or_a_file_already_there(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for name, status, needle in [
        ("ann.key", 2, "must be named <principal>.nkey"),
        ("two words.nkey", 2, "is not a principal"),
    ]:
        code, _, err = cli(["keys", "nkey", "--out", str(tmp_path / name)], capsys)
        assert (code, needle in err) == (status, True), err
        assert not (tmp_path / name).exists()
    seed = tmp_path / "ann.nkey"
    code, out, _ = cli(["keys", "nkey", "--out", str(seed)], capsys)
    assert code == 0
    assert public_user(seed.read_bytes()) in out
    assert seed.read_text().strip() not in out
    before = seed.read_bytes()
    code, _, err = cli(["keys", "nkey", "--out", str(seed)], capsys)
    assert_one_line(code, err, "never overwritten")
    assert seed.read_bytes() == before
