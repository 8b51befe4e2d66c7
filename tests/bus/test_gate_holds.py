"""The gate decides with its own hold list, whatever the adapter says.

A real nats-server with authorization from the registry, a real gate on a signed
release (the shipped scenario corpus: its floor denies a held document's deletion,
its retention policy allows a deletion that is not held), the real ``smf-assurance
holds`` command, the real SQLite ledger; the runtime's side is its proposal client.

Proves:

- a deletion of a path the gate holds, proposed with ``legal_hold: false``, is denied
  by the legal-hold floor and the ledger records it with the gate's note; a path under
  the held one, or spelled with ``//`` and ``.``, is held too, and so is a
  ``write_file`` to a file under it; a sibling sharing the
  prefix (``.../matterbc``) and a relative path are not (control: allowed by the
  retention policy, recorded as allowed);
- a hold added while the gate runs decides the next proposal once the gate's mirror
  has read it (polled with a deadline), where the same deletion was allowed before;
- fail closed: the bucket deleted, or holding what is not a hold list, makes document
  deletions ``holds_unavailable`` (recorded) while a read still proceeds.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import nats
import pytest
from nats.aio.client import Client

from smf_assurance.core.normalize import (
    HELD_BY_GATE,
    GateHolds,
    NormalizationError,
    normalize,
)
from smf_assurance.ops.local.defaults import OPERATOR
from smf_assurance.ops.local.natsserver import EmbeddedNatsServer
from smf_assurance.ops.local.state import StateDir
from smf_assurance.ops.runtimes.provision import HERMES_PRINCIPAL
from smf_assurance.pipeline.assembly import RunningGate
from smf_assurance.pipeline.desks.holds import REFRESH_SECONDS, STALE_SECONDS
from smf_assurance.subjects.clock import wall_clock_ms
from smf_assurance.subjects.holds import HOLDS_BUCKET, HOLDS_KEY, HOLDS_UNAVAILABLE, held_under
from smf_assurance.subjects.messages import Proposal, Verdict
from smf_assurance.subjects.model_gateway import new_instance_id
from tests.support.builders import DELETE, proposal_dict, shipped_table
from tests.support.bus_helpers import wait_for
from tests.support.clocks import FrozenClock
from tests.support.confinement import (
    Runtime,
    buses,
    clock,
    confinement_state,
    gate,
    ledger_reasons,
    server,
)
from tests.support.holds import holds_cli

__all__ = ["buses", "clock", "confinement_state", "gate", "server"]

HELD_REASON = "legal_hold_blocks_deletion"
RETENTION = "retention_schedule_deletion"
MIRROR_BOUND = REFRESH_SECONDS + STALE_SECONDS + 5


async def propose(runtime: Runtime, tool: str, arguments: dict[str, Any]) -> Verdict:
    """Proposed as the adapter proposes now. The tests' clock stands still while they
    wait seconds for the gate's mirror, and a proposal's deadline is counted from it
    while the runtime waits on the wall clock: the clock is brought up to the wall
    clock first (never back), so the runtime never gives up before it has asked."""
    runtime.clock.now = max(runtime.clock.now, wall_clock_ms())
    return await runtime.propose(tool, arguments)


async def delete(runtime: Runtime, document: str) -> Verdict:
    """The adapter's DMS deletion, proposed with ``legal_hold: false``."""
    return await propose(runtime, "smf_dms_delete", {"document_id": document})


async def hold(
    state: StateDir, server: EmbeddedNatsServer, running: RunningGate, path: str
) -> None:
    """``holds add``, then wait (with a deadline) until the gate's mirror has read it."""
    assert await holds_cli(state, server, "add", path) == 0
    mirror = running.holds
    assert mirror is not None
    await wait_for(lambda: path in mirror.view().paths, timeout=MIRROR_BOUND)


def assert_held(state: StateDir, verdict: Verdict) -> None:
    assert verdict.outcome == "deny", verdict
    assert HELD_REASON in verdict.reason_codes, verdict
    assert HELD_BY_GATE in verdict.reason_codes, verdict
    disposition, reasons = ledger_reasons(state, verdict)
    assert disposition == "deny"
    assert HELD_REASON in reasons
    assert HELD_BY_GATE in reasons


def assert_allowed(state: StateDir, verdict: Verdict) -> None:
    assert verdict.outcome == "allow", verdict
    assert verdict.reason_codes == (RETENTION,), verdict
    assert ledger_reasons(state, verdict) == ("allow", (RETENTION,))


@pytest.mark.claim("confinement.gate-decides-holds")
async def test_a_path_the_gate_holds_is_held_whatever_the_adapter_says(
    confinement_state: StateDir,
    server: EmbeddedNatsServer,
    clock: FrozenClock,
    gate: RunningGate,
    buses: dict[str, Client],
    tmp_path: Path,
) -> None:
    runtime = Runtime(confinement_state, buses[HERMES_PRINCIPAL], clock)
    await runtime.attest(new_instance_id())
    matter = str(tmp_path / "dms" / "matter")
    # before the hold the same deletion is allowed (control: the policy allows it)
    assert_allowed(confinement_state, await delete(runtime, f"{matter}/brief.pdf"))
    await hold(confinement_state, server, gate, matter)
    for held in (matter, f"{matter}/brief.pdf", f"{matter}//sub/./memo.txt"):
        assert_held(confinement_state, await delete(runtime, held))
    # a write to a file under the held folder: held too (the floor forbids alteration)
    written = await propose(runtime, "write_file", {"path": f"{matter}/brief.pdf", "content": "x"})
    assert_held(confinement_state, written)
    # whole components only: a sibling sharing the prefix is not held; nor is a
    # relative path, which the list cannot speak for (the adapter's fact stands)
    for free in (f"{matter}bc", f"{matter}bc/brief.pdf", "matter/brief.pdf"):
        assert_allowed(confinement_state, await delete(runtime, free))


@pytest.mark.claim("confinement.gate-decides-holds")
@pytest.mark.parametrize("broken", ["deleted", "not a hold list"])
async def test_a_hold_list_the_gate_cannot_read_refuses_document_deletions_not_reads(
    confinement_state: StateDir,
    server: EmbeddedNatsServer,
    clock: FrozenClock,
    gate: RunningGate,
    buses: dict[str, Client],
    tmp_path: Path,
    broken: str,
) -> None:
    runtime = Runtime(confinement_state, buses[HERMES_PRINCIPAL], clock)
    await runtime.attest(new_instance_id())
    document = str(tmp_path / "dms" / "free.pdf")
    operator = confinement_state.existing_credential(OPERATOR)
    assert operator is not None
    admin = await nats.connect(server.url, connect_timeout=2, **operator.connect_options())
    try:
        js = admin.jetstream()
        if broken == "deleted":
            await js.delete_key_value(HOLDS_BUCKET)
        else:
            kv = await js.key_value(HOLDS_BUCKET)
            await kv.put(HOLDS_KEY, b'{"schema":"smf.hold-list/1","paths":["relative"]}')
    finally:
        await admin.close()
    mirror = gate.holds
    assert mirror is not None
    await wait_for(lambda: not mirror.view().fresh, timeout=MIRROR_BOUND)
    verdict = await delete(runtime, document)
    assert verdict.outcome == "deny", verdict
    assert verdict.reason_codes == (HOLDS_UNAVAILABLE,), verdict
    assert ledger_reasons(confinement_state, verdict) == ("deny", (HOLDS_UNAVAILABLE,))
    # a document write is refused the same way
    written = await propose(runtime, "write_file", {"path": document, "content": "x"})
    assert (written.outcome, written.reason_codes) == ("deny", (HOLDS_UNAVAILABLE,)), written
    assert ledger_reasons(confinement_state, written) == ("deny", (HOLDS_UNAVAILABLE,))
    # not a document write or delete: decided as before
    read = await propose(runtime, "read_file", {"path": document})
    assert read.outcome == "allow", read
    assert ledger_reasons(confinement_state, read)[0] == "allow"


@pytest.mark.claim("confinement.gate-decides-holds")
@pytest.mark.parametrize(
    ("address", "held"),
    [
        ("/a/b", True),
        ("/a/b/c", True),
        ("/a//b/./c/", True),
        ("/a/x/../b/c", True),
        ("/a/bc", False),
        ("/a", False),
        ("/", None),
        ("a/b", None),
        ("doc-4711", None),
        ("/a/b\n", None),
    ],
)
def test_a_hold_matches_whole_components_of_the_normalised_path(
    address: str, held: bool | None
) -> None:
    assert held_under(address, frozenset({"/a/b"})) is held


def proposal(tool: str, document: str, legal_hold: bool | None = False) -> Proposal:
    """A scripted adapter's proposal on ``document`` with the adapter's hold fact."""
    fact = DELETE if legal_hold is None else legal_hold
    data = proposal_dict(
        {"facts.legal_hold": fact}, native_tool=tool, arguments={"document_id": document}
    )
    return msgspec.convert(data, Proposal)


@pytest.mark.claim("confinement.gate-decides-holds")
def test_normalization_sets_the_hold_and_the_operation_hash_covers_it() -> None:
    tables = {"smf-scripted-adapter": shipped_table()}
    listed = GateHolds(frozenset({"/srv/m"}), fresh=True)
    by_adapter = normalize(proposal("dms_delete", "/srv/m/a", True), tables, listed)
    by_gate = normalize(proposal("dms_delete", "/srv/m/a"), tables, listed)
    unknown = normalize(proposal("dms_delete", "/srv/m/a", None), tables, listed)
    for normalized in (by_gate, unknown):
        assert normalized.envelope.workflow.legal_hold is True
        assert HELD_BY_GATE in normalized.notes
    # the envelope the adapter's own "held" gives: the operation hash covers the fact
    assert by_gate.operation_hash == by_adapter.operation_hash
    assert HELD_BY_GATE not in by_adapter.notes
    free = normalize(proposal("dms_delete", "/srv/mx/a"), tables, listed)
    assert free.envelope.workflow.legal_hold is False
    assert free.operation_hash != by_gate.operation_hash
    # without a hold list the adapter's fact is the only one (a gate always passes one)
    assert (
        normalize(proposal("dms_delete", "/srv/m/a"), tables).envelope.workflow.legal_hold is False
    )
    stale = GateHolds(frozenset({"/srv/m"}), fresh=False)
    with pytest.raises(NormalizationError) as refused:
        normalize(proposal("dms_delete", "/srv/mx/a"), tables, stale)
    assert refused.value.reason_code == HOLDS_UNAVAILABLE
    read = normalize(proposal("dms_read", "/srv/m/a"), tables, stale)
    assert read.envelope.capability == "document.read"
    assert read.envelope.workflow.legal_hold is False
