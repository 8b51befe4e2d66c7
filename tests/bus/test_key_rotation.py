"""Keys rotate with nothing refused, and the old evidence still verifies
(``smf_assurance.ops.cli.commands.key_rotation``, ``KeyRegistry.evidence_keys``).

On one nats-server, gates started as ``up`` and the cluster start them (the shared
claims in the KV bucket, each replica its own ledger), with the commands run as an
operator runs them (``keys rotate``/``keys retire`` with the state's release key):

- **The gate key**, with two replicas: gate-a signs with the old key; ``keys
  rotate`` publishes the new one beside it and gate-a adopts that release live;
  gate-b starts with the new key before gate-a stops, so a gate answers at every
  step, and every verdict verifies against the release in force. ``keys retire``
  is refused while this state's gate key file is still the old key, and goes
  through once it is the new one. Then a verdict the old key signed no longer
  verifies against the release, while gate-a's ledger, whose checkpoints only
  the old key signed, still verifies with ``ledger verify`` against the state's
  registry, and gate-b restarts on its own ledger.
- **An approver key**: an attorney's allow-once signed with either key is
  accepted during the overlap; after ``keys retire`` the old key's is refused
  ``unknown_signer`` and the filing stays pending, the new key's is accepted.
- **A runtime key**, with a new bus credential: during the overlap proposals
  signed by either key are decided; after ``keys retire`` one signed by the old
  key is refused ``unknown_signer`` while the new key's is allowed, and the
  generated bus authorization no longer names the old credential.
- **Who follows without a restart:** ``up``'s connectors (an order the new gate
  key signed deletes a document, one the retired key signed deletes nothing) and
  the model gateway (the gate keys of its registry file as it is now).
- **The release signer**, to a spare key the trust root names: a release it
  signed revokes the old key; a later one the old key signed is refused.
- **Refusals** leave the registry's bytes and the release inbox as they were.

Does not prove: the switch of a real Hermes or OpenClaw runtime (their adapters
read the gate keys of the release in force: ``adapters/hermes/release.py``,
``openclaw/src/release.ts``, each tested with its own release); a connector learns
a new gate key only when restarted (docs/OPERATIONS.md, "Key rotation").
"""

from __future__ import annotations

import asyncio
import dataclasses
import sqlite3
from collections.abc import AsyncIterator
from contextlib import closing
from pathlib import Path
from typing import Final

import msgspec
import nats
import pytest
from nats.aio.client import Client

from smf_assurance.adapters.client import ProposalClient
from smf_assurance.approver.client import ApproverClient, ApproverError
from smf_assurance.governance.projections import SCENARIO_CORPUS, package_path
from smf_assurance.governance.releases import (
    build_release,
    latest_in_inbox,
    make_trust_root,
    prior_of,
    publish_to_inbox,
    write_trust_root,
)
from smf_assurance.ops.cli.main import main
from smf_assurance.ops.local.bus_auth import new_user_seed, public_user
from smf_assurance.ops.local.model_gateway import gateway_config, set_upstream
from smf_assurance.ops.local.natsserver import EmbeddedNatsServer
from smf_assurance.ops.local.stack import gate_config, seed_demo_documents, start_stack
from smf_assurance.ops.local.state import ADAPTER_ID, MODEL_GATEWAY, RUNTIME_ID, StateDir
from smf_assurance.pipeline.assembly import ClusterSettings, RunningGate, start_gate
from smf_assurance.subjects import dsse, names
from smf_assurance.subjects.approvals import ResolutionReply
from smf_assurance.subjects.clock import wall_clock_ms
from smf_assurance.subjects.keys import (
    PublicKeyRecord,
    SigningKey,
    generate_signing_key,
    public_record,
    write_private_key,
)
from smf_assurance.subjects.registry import RegistryFile, encode_registry, load_registry
from smf_assurance.subjects.verdicts import open_verdict
from tests.support.approval_desk import ATTORNEY, held_filing, status
from tests.support.approval_gate_child import OwnLedgerState
from tests.support.bus_helpers import make_order, publish_order, wait_for
from tests.support.bus_properties import deletion

SIGNER: Final = "release-signer"


@dataclasses.dataclass
class Gates:
    state: StateDir
    url: str
    started: list[RunningGate] = dataclasses.field(default_factory=list)

    async def start(self, name: str, key: SigningKey | None = None) -> RunningGate:
        own = OwnLedgerState(self.state.root, own_ledger=ledger_of(self.state, name))
        config = gate_config(own, self.url, cluster=ClusterSettings(replicas=1))
        config = dataclasses.replace(config, name=name, gate_key=key or config.gate_key)
        gate = await start_gate(config)
        self.started.append(gate)
        return gate

    async def stop(self, gate: RunningGate) -> None:
        self.started.remove(gate)
        await gate.close()


@pytest.fixture
async def gates(state: StateDir, nats_server: EmbeddedNatsServer) -> AsyncIterator[Gates]:
    running = Gates(state, nats_server.url)
    yield running
    for gate in running.started:
        await gate.close()


def ledger_of(state: StateDir, name: str) -> Path:
    return state.root / f"{name}-ledger.db"


def release_args(state: StateDir) -> list[str]:
    return [
        "--state-dir",
        str(state.root),
        "--release-key",
        str(state.key_path(SIGNER)),
        "--no-wait",
        "--json",
    ]


def new_key(tmp_path: Path, principal: str) -> tuple[SigningKey, Path]:
    """A new key made where the principal is, and its public record handed over."""
    key = generate_signing_key()
    write_private_key(tmp_path / f"{principal}-next.key", key, principal)
    public = tmp_path / f"{principal}-next.pub.json"
    public.write_bytes(msgspec.json.encode(public_record(key, principal)))
    return key, public


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """Exit code, stdout (``--json``: the value) and stderr (a refusal's one line)."""
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


async def adopt(*running: RunningGate) -> None:
    """The gates take the inbox's newest release now, not at their next tick."""
    for gate in running:
        assert gate.releases is not None
        await gate.releases.scan_inbox()


def signer_of(envelope: bytes) -> str:
    return dsse.decode_envelope(envelope).envelope.signatures[0].keyid


def verdict_under(state: StateDir, data: bytes, document_proposal: str) -> str:
    """The verdict's outcome, verified against the gate keys of the state's registry."""
    verdict = open_verdict(data, state.gate_keys(), proposal_id=document_proposal)
    return verdict.outcome if verdict.outcome != "deny" else f"deny {verdict.reason_codes}"


def runtime_client(nc: Client, key: SigningKey) -> ProposalClient:
    return ProposalClient(nc, key, RUNTIME_ID, "1.0", ADAPTER_ID, gate_keys={})


def checkpoint_signers(ledger: Path) -> set[str]:
    with closing(sqlite3.connect(ledger)) as conn:
        rows = conn.execute("SELECT envelope FROM ledger_checkpoints").fetchall()
    return {signer_of(row[0]) for row in rows}


@pytest.mark.claim("protected-evidence.key-rotation")
async def test_the_gate_key_rotates_with_a_gate_answering_throughout(
    gates: Gates, state: StateDir, nc: Client, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    old = state.key("gate")
    runtime = runtime_client(nc, state.key("runtime"))
    gate_a = await gates.start("gate-a")
    first = deletion(runtime, "doc-before")
    first_reply = (await nc.request(names.PROPOSE, runtime.sign(first), timeout=10)).data
    assert signer_of(first_reply) == old.key_id
    assert verdict_under(state, first_reply, first.proposal_id) == "allow"

    new, public = new_key(tmp_path, "gate")
    code, out, err = run(
        ["keys", "rotate", "--id", "gate", "--public-key", str(public), *release_args(state)],
        capsys,
    )
    assert code == 0, err
    await adopt(gate_a)
    assert set(gate_a.gate.registry.trusted("gate")) == {old.key_id, new.key_id}
    assert set(state.gate_keys()) == {old.key_id, new.key_id}

    gate_b = await gates.start("gate-b", key=new)  # the new replica first: no gap
    signers = set()
    for n in range(8):  # either replica answers, each calling stages either may serve
        overlap = deletion(runtime, f"doc-overlap-{n}")
        reply = (await nc.request(names.PROPOSE, runtime.sign(overlap), timeout=10)).data
        assert verdict_under(state, reply, overlap.proposal_id) == "allow"
        signers.add(signer_of(reply))
    assert signers <= {old.key_id, new.key_id}
    asked = ["keys", "retire", "--id", "gate", "--key-id", old.key_id, "--nats", gates.url]
    before = state.registry.read_bytes()
    code, _, err = await asyncio.to_thread(run, [*asked, *release_args(state)], capsys)
    assert (code, err.strip()) == (
        1,
        f"smf-assurance: gate gate-a still signs with {old.key_id}: restart it with its new "
        "key first",
    )
    assert state.registry.read_bytes() == before
    assert await gate_a.ledger.checkpoint(wall_clock_ms()) is not None  # as `up` does when it stops
    await gates.stop(gate_a)
    assert checkpoint_signers(ledger_of(state, "gate-a")) == {old.key_id}

    retire = ["keys", "retire", "--id", "gate", "--key-id", old.key_id, *release_args(state)]
    before = state.registry.read_bytes()
    code, out, err = run(retire, capsys)
    assert code == 1
    assert "still signs with" in err
    assert state.registry.read_bytes() == before
    # The switch as docs/OPERATIONS.md says: the new key where the gate reads its own.
    state.key_path("gate").unlink()
    write_private_key(state.key_path("gate"), new, "gate")
    code, out, err = run(retire, capsys)
    assert code == 0, err
    await adopt(gate_b)
    registry = load_registry(state.registry)
    assert set(registry.trusted("gate")) == {new.key_id}
    assert set(registry.retired) == {old.key_id}

    after = deletion(runtime, "doc-after")
    reply = (await nc.request(names.PROPOSE, runtime.sign(after), timeout=10)).data
    assert signer_of(reply) == new.key_id
    assert verdict_under(state, reply, after.proposal_id) == "allow"
    with pytest.raises(dsse.SignatureError):  # the old key's word counts no more
        verdict_under(state, first_reply, first.proposal_id)

    code, out, err = run(
        [
            "ledger",
            "verify",
            "--db",
            str(ledger_of(state, "gate-a")),
            "--state-dir",
            str(state.root),
            "--json",
        ],
        capsys,
    )
    assert code == 0, err
    report = msgspec.json.decode(next(x for x in out.splitlines() if x.startswith("{")))
    assert (report["ok"], report["reason"]) == (True, None)
    assert report["checkpoints"] >= 1
    # gate-a comes back with the new key (as `up` does after the switch): its start
    # checks its ledger against checkpoints only the retired key signed.
    restarted = await gates.start("gate-a")
    assert restarted.ledger.checkpoint_seq >= 1
    again = deletion(runtime, "doc-restarted")
    await gates.stop(gate_b)
    reply = (await nc.request(names.PROPOSE, runtime.sign(again), timeout=10)).data
    assert signer_of(reply) == new.key_id
    assert verdict_under(state, reply, again.proposal_id) == "allow"


@pytest.mark.claim("protected-evidence.key-rotation")
async def test_a_runtime_key_rotates_with_its_bus_credential(
    gates: Gates, state: StateDir, nc: Client, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    gate = await gates.start("gate-a")
    old = state.key("runtime")
    old_user = state.bus_user("runtime")
    new, public = new_key(tmp_path, "runtime")
    new_user = public_user(new_user_seed())

    async def outcome(key: SigningKey, document: str) -> tuple[str, tuple[str, ...]]:
        """As the runtime's client sees it: a refusal is a denial naming its reason."""
        runtime = ProposalClient(
            nc, key, RUNTIME_ID, "1.0", ADAPTER_ID, gate_keys=state.gate_keys()
        )
        verdict = await runtime.propose(deletion(runtime, document))
        return verdict.outcome, verdict.reason_codes

    rotate = ["keys", "rotate", "--id", "runtime", "--public-key", str(public)]
    code, _, err = run([*rotate, "--bus-user", new_user, *release_args(state)], capsys)
    assert code == 0, err
    await adopt(gate)
    assert (await outcome(old, "doc-old"))[0] == "allow"  # the overlap: both keys count
    assert (await outcome(new, "doc-new"))[0] == "allow"
    users = {e.nats_user for e in load_file(state).entries if e.key.principal == "runtime"}
    assert users == {old_user, new_user}

    retire = ["keys", "retire", "--id", "runtime", "--key-id", old.key_id]
    code, _, err = run([*retire, *release_args(state)], capsys)
    assert code == 0, err
    await adopt(gate)
    assert await outcome(old, "doc-old-again") == ("deny", ("unknown_signer",))
    assert (await outcome(new, "doc-new-again"))[0] == "allow"
    include = tmp_path / "authorization.conf"
    code, _, err = run(
        ["bus", "authorization", "--state-dir", str(state.root), "--out", str(include)], capsys
    )
    assert code == 0, err
    text = include.read_text()
    assert new_user in text
    assert old_user not in text


@pytest.mark.claim("protected-evidence.key-rotation")
async def test_an_approver_key_rotates_with_held_filings_resolved_throughout(
    gates: Gates, state: StateDir, nc: Client, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An attorney's allow-once signed with either key is accepted during the overlap;
    after ``keys retire`` one signed with the old key is refused and the filing stays
    pending, while the new key's is accepted."""
    gate = await gates.start("gate-a")
    old = state.key(ATTORNEY)
    new, public = new_key(tmp_path, ATTORNEY)
    code, _, err = run(["keys", *rotate_args(public, ATTORNEY), *release_args(state)], capsys)
    assert code == 0, err
    await adopt(gate)

    async def allow_once(key: SigningKey) -> tuple[str, ResolutionReply | str]:
        held = await held_filing(nc, state)
        assert held.approval_id is not None
        client = ApproverClient(nc, key, ATTORNEY)
        try:
            _, reply = await client.review_and_resolve(held.approval_id, "allow-once")
        except ApproverError as exc:
            return held.approval_id, str(exc)
        return held.approval_id, reply

    for key in (old, new):  # the overlap: both keys are the attorney's
        _, reply = await allow_once(key)
        assert isinstance(reply, ResolutionReply)
        assert (reply.accepted, reply.state) == (True, "executing"), reply  # its order issued

    retire = ["keys", "retire", "--id", ATTORNEY, "--key-id", old.key_id]
    code, _, err = run([*retire, *release_args(state)], capsys)
    assert code == 0, err
    await adopt(gate)
    approval_id, refused = await allow_once(old)
    assert refused == "unknown_signer"  # the gate refused the signature, not the content
    assert await status(nc, approval_id) == "pending"
    _, reply = await allow_once(new)
    assert isinstance(reply, ResolutionReply)
    assert (reply.accepted, reply.state) == (True, "executing"), reply


@pytest.mark.claim("protected-evidence.key-rotation")
async def test_the_release_signer_rotates_to_the_spare_key_the_trust_root_names(
    gates: Gates, state: StateDir, nc: Client
) -> None:
    """The trust root names a spare release key beside the one in use (threshold 1);
    a release the spare signed revokes the old key and the running gate adopts it;
    from then on a release the old key signed is refused ``release_revoked``, and the
    gate decides throughout."""
    old = state.key(SIGNER)
    spare = generate_signing_key()
    state.trust_root.unlink()
    write_trust_root(
        state.trust_root,
        make_trust_root([public_record(old, SIGNER), public_record(spare, "release-spare")], 1),
    )
    gate = await gates.start("gate-a")
    assert gate.releases is not None
    first = gate.releases.active
    assert first is not None
    assert old.key_id in first.signer_key_ids

    def next_by(signer: SigningKey, revoke: tuple[str, ...] = ()) -> None:
        prior = latest_in_inbox(state.release_inbox)
        assert prior is not None
        bundle = build_release(
            package_path(SCENARIO_CORPUS),
            [signer],
            state.registry.read_bytes(),
            now_ms=wall_clock_ms(),
            prior=prior_of(prior),
            revoke_key_ids=revoke,
        )
        publish_to_inbox(bundle, state.release_inbox)

    next_by(spare, revoke=(old.key_id,))
    await adopt(gate)
    switched = gate.releases.active
    assert switched is not None
    assert switched.sequence == first.sequence + 1
    assert old.key_id in switched.revoked_key_ids

    next_by(old)
    await adopt(gate)
    assert gate.releases.active == switched
    assert "release_revoked" in {r.reason_code for r in gate.releases.refusals}
    runtime = ProposalClient(
        nc, state.key("runtime"), RUNTIME_ID, "1.0", ADAPTER_ID, gate_keys=state.gate_keys()
    )
    verdict = await runtime.propose(deletion(runtime, "doc-after-the-revocation"))
    assert (verdict.outcome, verdict.release_id) == ("allow", switched.release_id)


@pytest.mark.claim("protected-evidence.key-rotation")
def test_the_model_gateway_believes_the_gate_keys_of_the_registry_as_it_is_now(
    state: StateDir, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The model gateway verifies the gates' answers with the keys of its registry
    file as it is now: a gate key ``keys rotate`` added counts, a retired one no
    more, without a restart; a registry that no longer checks trusts nobody."""
    set_upstream(state, "http://127.0.0.1:9/v1", "local-model")
    config = gateway_config(state, "nats://127.0.0.1:4222")
    old = state.key("gate")
    gateway = state.key(MODEL_GATEWAY).key_id
    assert config.call_context_keys is not None
    assert set(config.gate_keys()) == {old.key_id}
    assert set(config.call_context_keys()) == {gateway}
    new, public = new_key(tmp_path, "gate")
    code, _, err = run(["keys", *rotate_args(public, "gate"), *release_args(state)], capsys)
    assert code == 0, err
    assert set(config.gate_keys()) == {old.key_id, new.key_id}
    state.key_path("gate").unlink()
    write_private_key(state.key_path("gate"), new, "gate")
    retire = ["keys", "retire", "--id", "gate", "--key-id", old.key_id]
    code, _, err = run([*retire, *release_args(state)], capsys)
    assert code == 0, err
    assert set(config.gate_keys()) == {new.key_id}
    state.registry.write_bytes(b"{}")
    assert (config.gate_keys(), config.call_context_keys()) == ({}, {})
    state.registry.unlink()
    assert config.gate_keys() == {}


@pytest.mark.claim("protected-evidence.key-rotation")
async def test_ups_connectors_take_a_rotated_gate_key_without_a_restart(
    state: StateDir, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``up``'s connectors follow the release in force: an order the new gate key
    signed (as a replica already switched signs it) deletes the document, and once
    the old key is retired an order it signed deletes nothing."""
    store = seed_demo_documents(state)
    stack = await start_stack(state)
    credential = state.existing_credential("gate")
    assert credential is not None
    gate_nc = await nats.connect(stack.url, **credential.connect_options())
    try:
        old = state.key("gate")
        new, public = new_key(tmp_path, "gate")
        code, _, err = run(["keys", *rotate_args(public, "gate"), *release_args(state)], capsys)
        assert code == 0, err
        await adopt(stack.gate)
        js = gate_nc.jetstream()
        by_new = make_order("dms", native_tool="dms_delete", arguments={"document_id": "doc-1207"})
        await publish_order(js, by_new, new)
        await wait_for(lambda: not (store / "doc-1207").exists(), timeout=10)

        state.key_path("gate").unlink()  # the switch, so that `keys retire` goes through
        write_private_key(state.key_path("gate"), new, "gate")
        retire = ["keys", "retire", "--id", "gate", "--key-id", old.key_id]
        code, _, err = run([*retire, *release_args(state)], capsys)
        assert code == 0, err
        await adopt(stack.gate)
        by_old = make_order("dms", native_tool="dms_delete", arguments={"document_id": "doc-4711"})
        await publish_order(js, by_old, old)
        record = state.connector_dir("dms") / "dms.sqlite3"
        await wait_for(lambda: connector_record(record, by_old.order_id) is not None, timeout=10)
        assert connector_record(record, by_old.order_id) == ("failed", "unknown_signer")
        assert (store / "doc-4711").exists()
    finally:
        await gate_nc.close()
        await stack.stop()


def connector_record(db: Path, order_id: str) -> tuple[str, str] | None:
    """(state, reason code) of one order in a connector's idempotency record."""
    with closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
        row = conn.execute(
            "SELECT state, reason_code FROM orders WHERE order_id = ?", (order_id,)
        ).fetchone()
    return None if row is None else (row[0], row[1])


def load_file(state: StateDir) -> RegistryFile:
    return msgspec.json.decode(state.registry.read_bytes(), type=RegistryFile)


def rotate_args(public: Path, principal: str = "runtime") -> list[str]:
    return ["rotate", "--id", principal, "--public-key", str(public)]


def write_record(path: Path, key: SigningKey, principal: str) -> Path:
    path.write_bytes(msgspec.json.encode(public_record(key, principal)))
    return path


Setup = dict[str, Path | SigningKey]


def refusals(state: StateDir, tmp_path: Path) -> dict[str, tuple[list[str], str]]:
    """Each refused command (after ``prepare`` below made its state) and its line."""
    old = state.key("runtime")
    fresh = generate_signing_key()
    public = write_record(tmp_path / "fresh.pub.json", fresh, "runtime")
    gate_id = next(e.key.key_id for e in load_file(state).entries if e.key.principal == "gate")
    return {
        "an unknown principal": (
            ["rotate", "--id", "nobody", "--public-key", str(public)],
            "is runtime's, not nobody's",
        ),
        "no such principal": (
            [
                "rotate",
                "--id",
                "nobody",
                "--public-key",
                str(write_record(tmp_path / "n.pub.json", fresh, "nobody")),
            ],
            "no principal nobody",
        ),
        "a private key file": (
            rotate_args(tmp_path / "private.key"),
            "is a PRIVATE key",
        ),
        "a key already registered": (
            rotate_args(write_record(tmp_path / "same.pub.json", old, "runtime")),
            "already registered",
        ),
        "a bad bus user": ([*rotate_args(public), "--bus-user", "Unope"], "--bus-user"),
        "a taken bus user": (
            [*rotate_args(public), "--bus-user", state.bus_user("gate")],
            "already gate's",
        ),
        "a third key": (rotate_args(public), "has two keys already"),
        "the only key": (["retire", "--id", "runtime", "--key-id", old.key_id], "only key"),
        "an unknown key": (["retire", "--id", "runtime", "--key-id", "ed25519:00"], "no key"),
        "another principal's key": (
            ["retire", "--id", "gate", "--key-id", old.key_id],
            "is runtime's, not gate's",
        ),
        "a retired key": (["retire", "--id", "runtime", "--key-id", old.key_id], "retired already"),
        "the only bus credential": (
            ["retire", "--id", "runtime", "--key-id", old.key_id],
            "only bus credential",
        ),
        "a gate key file that does not read": (  # unchecked is refused, not let through
            ["retire", "--id", "gate", "--key-id", gate_id],
            "cannot tell whether this state's gate still signs",
        ),
    }


def prepare(case: str, state: StateDir, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The state a case needs, made by the commands themselves where they can."""
    write_private_key(tmp_path / "private.key", generate_signing_key(), "runtime")
    old = state.key("runtime")
    second = write_record(tmp_path / "second.pub.json", generate_signing_key(), "runtime")
    if case in ("a third key", "a retired key"):
        code, _, err = run(["keys", *rotate_args(second), *release_args(state)], capsys)
        assert code == 0, err
    if case == "a retired key":
        retire = ["keys", "retire", "--id", "runtime", "--key-id", old.key_id]
        code, _, err = run([*retire, *release_args(state)], capsys)
        assert code == 0, err
    if case == "a gate key file that does not read":  # the gate has two keys, its file is junk
        gate_next = write_record(tmp_path / "gate.pub.json", generate_signing_key(), "gate")
        code, _, err = run(["keys", *rotate_args(gate_next, "gate"), *release_args(state)], capsys)
        assert code == 0, err
        state.key_path("gate").write_bytes(b"not a key")
    if case == "the only bus credential":  # hand-made: the old key holds it, the new none
        file = load_file(state)
        mine = next(e for e in file.entries if e.key.principal == "runtime")
        added = msgspec.structs.replace(
            mine, key=msgspec.json.decode(second.read_bytes(), type=PublicKeyRecord), nats_user=None
        )
        state.registry.write_bytes(encode_registry((*file.entries, added)))


@pytest.mark.parametrize(
    "case",
    [
        "an unknown principal",
        "no such principal",
        "a private key file",
        "a key already registered",
        "a bad bus user",
        "a taken bus user",
        "a third key",
        "the only key",
        "an unknown key",
        "another principal's key",
        "a retired key",
        "the only bus credential",
        "a gate key file that does not read",
    ],
)
def test_a_refused_rotation_is_one_line_and_changes_nothing(
    case: str, state: StateDir, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    prepare(case, state, tmp_path, capsys)
    argv, expected = refusals(state, tmp_path)[case]
    before = state.registry.read_bytes()
    inbox = sorted(state.release_inbox.iterdir())
    code, _, err = run(["keys", *argv, *release_args(state)], capsys)
    assert code == 1, err
    assert expected in err
    assert len(err.strip().splitlines()) == 1
    assert state.registry.read_bytes() == before
    assert sorted(state.release_inbox.iterdir()) == inbox
