"""One tree's allow, timed: the driver ``bench --against`` runs under each commit's code.

Run as a script with ``PYTHONPATH`` naming a tree (``python against_driver.py CONFIG MODE
ROUNDS IN_FLIGHT OUT_JSON``), so every ``smf_assurance`` import below is that tree's
code: the gate, its stages, its stores and the runtime's client. It imports nothing of
``smf_tools`` (a script's own folder is first on its path, the checkout's root is not)
and, where the package was laid out otherwise before, finds each name in either place.

What it holds fixed for both trees is what is not the gate's code: the nats-server
binary and its config (``CONFIG``, written once by the comparer: the product's server
settings of the running checkout), the machine, the proposals (the demo's DMS
deletions of distinct documents, allowed by the retention policy, each signed before it
is timed) and how they are timed. It measures, on a fresh server, state and gate:

- ``p50_ns``: the median of ``ROUNDS`` sequential propose -> verdict round trips, after
  untimed warm-up requests;
- ``per_s``: requests per second with ``IN_FLIGHT`` outstanding, over
  ``max(ROUNDS, 4 * IN_FLIGHT)`` requests.

Every verdict is checked: a request that is not allowed ends the run with an error, never a
figure. ``OUT_JSON`` gets the figures and the path of the ``smf_assurance`` it ran, so the
comparer can tell it ran the tree it named.
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

import nats
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

import smf_assurance
from smf_assurance.adapters.client import ProposalClient
from smf_assurance.pipeline.assembly import start_gate
from smf_assurance.subjects.messages import DataFacts

try:
    from smf_assurance.ops.demo.script import actor
    from smf_assurance.ops.local.logs import configure_logging
    from smf_assurance.ops.local.natsserver import EmbeddedNatsServer
    from smf_assurance.ops.local.stack import gate_config
    from smf_assurance.ops.local.state import ADAPTER_ID, RUNTIME_ID, StateDir, provision_demo
except ImportError:  # the layout before ops/ was sorted into local/, cli/, demo/
    from smf_assurance.ops.demo_script import actor  # type: ignore[import-not-found,no-redef]
    from smf_assurance.ops.logs import configure_logging  # type: ignore[import-not-found,no-redef]
    from smf_assurance.ops.natsserver import EmbeddedNatsServer  # type: ignore[import-not-found,no-redef]
    from smf_assurance.ops.stack import gate_config  # type: ignore[import-not-found,no-redef]
    from smf_assurance.ops.state import (  # type: ignore[import-not-found,no-redef]
        ADAPTER_ID,
        RUNTIME_ID,
        StateDir,
        provision_demo,
    )

WARM_UP: Final = 50
MODES: Final = {"co-located": True, "bus stages": False}
"""The gate's stages called in-process, or over the bus, as ``up`` can run them."""
ACTOR: Final = actor("associate-ann", "associate")
"""The demo firm's associate on the demo matter, whom the retention policy lets delete."""
FACTS: Final = DataFacts(classification="internal", injection_taint="clear", legal_hold=False)
"""An internal document under no legal hold: its deletion is allowed."""


EXECUTE_STREAM: Final = "SMF_EXECUTE"
CONNECTORS: Final = ("court-efiling", "dms")
"""The demo registry's connectors. Each has its durable consumer on the order stream in
a deployment: created by the connector when it binds (earlier layouts) or by the gate at
start (later ones), with the same settings (:func:`_connector_durable`). No connector
runs here, so the driver makes sure both exist on either tree: the stream's work per
stored order is then a deployment's, not one tree's with consumers and the other's
without."""


def _connector_durable(connector_id: str) -> ConsumerConfig:
    """A connector's durable as both layouts make it: its own orders, acked explicitly."""
    durable = f"smf-connector-{connector_id}"
    return ConsumerConfig(
        name=durable,
        durable_name=durable,
        ack_policy=AckPolicy.EXPLICIT,
        ack_wait=30.0,
        deliver_policy=DeliverPolicy.ALL,
        filter_subject=f"smf.execute.{connector_id}",
    )


class DriverError(RuntimeError):
    """A request got another verdict than allow: its figures would mislead."""


def _signed(runtime: ProposalClient, count: int, first: int) -> list[tuple[str, bytes]]:
    out = []
    for n in range(first, first + count):
        proposal = runtime.build(
            native_tool="dms_delete",
            arguments={"document_id": f"doc-against-{n}"},
            actor=ACTOR,
            facts=FACTS,
        )
        out.append((proposal.proposal_id, runtime.sign(proposal)))
    return out


async def _allow(runtime: ProposalClient, proposal_id: str, data: bytes) -> None:
    verdict = await runtime.send(proposal_id, data)
    if verdict.outcome != "allow":
        raise DriverError(f"{verdict.outcome} {list(verdict.reason_codes)}")


async def measure(
    root: Path, config: Path, co_located: bool, rounds: int, in_flight: int
) -> dict[str, Any]:
    """The two figures of one tree in one mode, on a server of its own under ``root``."""
    state = StateDir(root / "state")
    provision_demo(state)
    server = EmbeddedNatsServer(root / "nats", config_file=config)
    server.start()
    try:
        client = await nats.connect(server.url, name="smf-bench-against")
        try:
            runtime = ProposalClient(
                client,
                state.key("runtime"),
                RUNTIME_ID,
                "1.0",
                ADAPTER_ID,
                timeout=30.0,
                gate_keys=state.gate_keys(),
            )
            requests = max(rounds, 4 * in_flight)
            warm = _signed(runtime, WARM_UP, 0)
            timed = _signed(runtime, rounds, WARM_UP)
            loaded = _signed(runtime, requests, WARM_UP + rounds)
            gate = await start_gate(gate_config(state, server.url, co_located=co_located))
            try:
                js = client.jetstream()
                for connector_id in CONNECTORS:
                    await js.add_consumer(EXECUTE_STREAM, _connector_durable(connector_id))
                found = sorted(c.name for c in await js.consumers_info(EXECUTE_STREAM))
                if found != [f"smf-connector-{c}" for c in CONNECTORS]:
                    raise DriverError(f"the order stream's consumers are {found}")
                for proposal_id, data in warm:
                    await _allow(runtime, proposal_id, data)
                samples = []
                for proposal_id, data in timed:
                    start = time.perf_counter_ns()
                    await _allow(runtime, proposal_id, data)
                    samples.append(time.perf_counter_ns() - start)
                pending = iter(loaded)

                async def worker() -> None:
                    for proposal_id, data in pending:
                        await _allow(runtime, proposal_id, data)

                start_s = time.perf_counter()
                await asyncio.gather(*(worker() for _ in range(in_flight)))
                elapsed = time.perf_counter() - start_s
            finally:
                await gate.close()
        finally:
            await client.drain()
    finally:
        server.close()
    samples.sort()
    return {"p50_ns": samples[len(samples) // 2], "per_s": round(requests / elapsed)}


def main(argv: Sequence[str]) -> int:
    config, mode, rounds, in_flight, out = argv
    configure_logging(json=False, level="error")
    with tempfile.TemporaryDirectory(prefix="smf-bench-against-") as tmp:
        figures = asyncio.run(
            measure(Path(tmp), Path(config), MODES[mode], int(rounds), int(in_flight))
        )
    figures["code"] = str(Path(smf_assurance.__file__).resolve().parent)
    Path(out).write_text(json.dumps(figures), encoding="utf-8")
    return 0


if __name__ == "__main__":  # pragma: no cover - run as a script by the comparer
    sys.exit(main(sys.argv[1:]))
