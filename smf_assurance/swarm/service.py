"""``smf.swarm.analyze``: the Swarm analysis as a request/reply ``nats.micro`` service.

Issue 9, "Service" and "Separation". A request carries a question, matter
facts and an evaluation time; the reply is the report's canonical JSON, or
a NATS service error whose description is our reason code
(``swarm_bad_request``, ``swarm_invalid_facts``), as for the gate's stages.

Separation from enforcement is structural, not a convention:

- This module never imports the gate's decision or dispatch code and never
  publishes: the only bus write is the reply to the requester. A Swarm run
  therefore puts nothing on ``smf.propose``, ``smf.approval.*`` or
  ``smf.execute.*`` (tested with a ``>`` subscriber).
- The service runs in its own queue group (``smf-swarm``), so it can never
  be load-balanced with a gate stage.
- The gate does not import ``swarm`` (tested), so its decisions are the same
  bytes whether Swarm ever ran.

:func:`analyze` is the same path in-process, for the demo's fourth scenario.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, Literal

import msgspec
from nats.aio.client import Client
from nats.micro.service import Service

from smf_assurance.core.projection import AnalysisProjection
from smf_assurance.pipeline.service import (
    ConcurrentHandler,
    Endpoint,
    Handler,
    StageRefusal,
    request,
    start_service,
)
from smf_assurance.subjects.names import SWARM_ANALYZE
from smf_assurance.subjects.patterns import Millis
from smf_assurance.swarm.personas import (
    DEFAULT_TIMEOUT_S,
    Persona,
    build_request,
    offline_personas,
    run_personas,
)
from smf_assurance.swarm.report import (
    Report,
    build_report,
    check_release,
    decode_report,
    report_bytes,
)
from smf_assurance.swarm.selector import (
    AnalysisRelease,
    FactError,
    MatterError,
    analysis_release,
    check_question,
    select_rules,
    validate_facts,
)

"""Request/reply subject of the analysis (belongs in ``smf_assurance.subjects.names`` with the
others)."""
SWARM_SERVICE: Final = "smf-swarm"
SWARM_QUEUE_GROUP: Final = "smf-swarm"
REQUEST_SCHEMA: Final = "smf.swarm-analyze/1"
DEFAULT_LIMIT: Final = 16
DEFAULT_DEADLINE_S: Final = 2 * DEFAULT_TIMEOUT_S


class AnalyzeRequest(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    schema: Literal["smf.swarm-analyze/1"]
    question: str
    facts: dict[str, Any]
    at_ms: Millis


async def analyze(
    question: str,
    facts: Mapping[str, Any],
    at_ms: int,
    projection: AnalysisProjection | AnalysisRelease,
    personas: Sequence[Persona] | None = None,
    *,
    deadline_s: float = DEFAULT_DEADLINE_S,
    on_done: Callable[[int], None] | None = None,
) -> Report:
    """Select, ask the personas, validate their claims, and build the report.

    Raises :class:`FactError` or :class:`MatterError` for bad input, before
    any persona is asked. ``personas`` defaults to the offline set.
    """
    release = (
        projection if isinstance(projection, AnalysisRelease) else analysis_release(projection)
    )
    question = check_question(question)
    checked = validate_facts(facts)
    selection = select_rules(release, checked, at_ms)
    request = build_request(question, checked, release, selection)
    chosen = offline_personas() if personas is None else personas
    results = await run_personas(chosen, request, deadline_s, on_done)
    report = build_report(question, checked, release, selection, results)
    check_release(report, release)
    return report


def analyze_handler(
    release: AnalysisRelease,
    personas: Sequence[Persona] | None = None,
    *,
    deadline_s: float = DEFAULT_DEADLINE_S,
) -> Handler:
    """The endpoint's handler: request bytes -> canonical report bytes, or a refusal."""

    async def handle(data: bytes) -> bytes:
        try:
            request = msgspec.json.decode(data, type=AnalyzeRequest)
        except msgspec.DecodeError as exc:
            raise StageRefusal("swarm_bad_request", str(exc)) from exc
        try:
            report = await analyze(
                request.question,
                request.facts,
                request.at_ms,
                release,
                personas,
                deadline_s=deadline_s,
            )
        except FactError as exc:
            raise StageRefusal("swarm_invalid_facts", str(exc)) from exc
        except MatterError as exc:
            raise StageRefusal("swarm_bad_request", str(exc)) from exc
        return report_bytes(report)

    return handle


async def start_swarm_service(
    nc: Client,
    release: AnalysisRelease,
    personas: Sequence[Persona] | None = None,
    *,
    limit: int = DEFAULT_LIMIT,
    deadline_s: float = DEFAULT_DEADLINE_S,
) -> tuple[Service, list[ConcurrentHandler]]:
    """Start ``smf-swarm`` with the ``analyze`` endpoint in its own queue group."""
    handler = analyze_handler(release, personas, deadline_s=deadline_s)
    return await start_service(
        nc,
        SWARM_SERVICE,
        [Endpoint("analyze", SWARM_ANALYZE, handler)],
        description="Swarm legal analysis from the analysis projection (no enforcement)",
        limit=limit,
        queue_group=SWARM_QUEUE_GROUP,
    )


async def request_analysis(
    nc: Client,
    question: str,
    facts: Mapping[str, Any],
    at_ms: int,
    *,
    timeout: float = DEFAULT_DEADLINE_S + 5,
) -> Report:
    """Ask ``smf.swarm.analyze`` over the bus; a refusal raises ``StageRefusal``."""
    payload = msgspec.json.encode(
        AnalyzeRequest(schema=REQUEST_SCHEMA, question=question, facts=dict(facts), at_ms=at_ms)
    )
    reply = await request(nc, SWARM_ANALYZE, payload, timeout)
    return decode_report(reply)
