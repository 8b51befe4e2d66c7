"""``model-gateway``: the model endpoint the runtimes are pointed at.

- ``model-gateway upstream URL``: the provider the gateway forwards to.
- ``model-gateway add-runtime RUNTIME_ID``: issue that runtime a gateway token
  (written to a 0600 file, never printed) and declare where its replies go
  and for whom it works; the output gate decides each reply for that.
- ``model-gateway list``: the runtimes the gateway serves.
- ``model-gateway clear RUNTIME_ID``: lift the stop the gate put on a runtime
  that ran a tool no proposal decided (``ungated_tool_result``); as the
  operator, on ``smf.gateway.clear``. The runtime must attest again. The gate
  lifts it only once the clear is in its ledger; when it is not, the stop
  stands, the reasons are printed and the exit status is 1.
- ``model-gateway serve``: run it until SIGINT or SIGTERM against the gate's
  bus (``up --model-gateway`` runs it beside the gate instead).
"""

from __future__ import annotations

import argparse
import asyncio
import re
import ssl
import sys
from pathlib import Path
from typing import Final, TypeVar

import msgspec
from nats.errors import Error as NatsError

from smf_assurance.gateway.assembly import (
    GatewayFileError,
    RunningModelGateway,
    load_gateway_file,
    start_model_gateway,
)
from smf_assurance.ops.cli.cli_json import (
    GatewayRuntime,
    ModelGatewayAddRuntimeJson,
    ModelGatewayClearJson,
    ModelGatewayListJson,
    ModelGatewayServeJson,
    ModelGatewayUpstreamJson,
)
from smf_assurance.ops.cli.output import emit, fail, first_line, say, table
from smf_assurance.ops.local.bus import bus_url, connect_bus
from smf_assurance.ops.local.defaults import OPERATOR, default_state_dir
from smf_assurance.ops.local.logs import configure_logging
from smf_assurance.ops.local.model_gateway import (
    gateway_config,
    gateway_file,
    provision_gateway_runtime,
    set_upstream,
    token_path,
)
from smf_assurance.ops.local.signals import stop_on_signals
from smf_assurance.ops.local.state import MODEL_GATEWAY, StateDir
from smf_assurance.ops.local.tls import TlsInitError, serving_tls
from smf_assurance.pipeline.service import BusUnavailableError
from smf_assurance.subjects import names
from smf_assurance.subjects.messages import ActorContext, DataFacts, ProposedDestination
from smf_assurance.subjects.model_gateway import GatewayClear, GatewayCleared
from smf_assurance.subjects.names import SubjectError, token

T = TypeVar("T")
PROVIDER_NAME: Final = re.compile(r"[a-z0-9][a-z0-9_.-]{0,63}")
"""``smf_assurance.subjects.model_gateway.ProviderName``, checked before it is written to the
settings."""


def parse_listen(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (port 0: any free port); a bad value is one line, not a traceback."""
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        fail(f"--listen: {text!r} is not HOST:PORT", 2)
    return host, int(port)


def _state(args: argparse.Namespace) -> StateDir:
    state = StateDir(args.state_dir or default_state_dir())
    if not state.registry.exists():
        fail(f"no gate state in {state.root}: run `smf-assurance up` (or demo) first")
    return state


def _decode(path: Path, type_: type[T], what: str) -> T:
    try:
        return msgspec.json.decode(path.read_bytes(), type=type_)
    except OSError as exc:
        fail(f"--{what}: cannot read {path}: {exc.strerror}")
    except msgspec.DecodeError as exc:
        fail(f"--{what}: {path}: {exc}")


def run_upstream(args: argparse.Namespace) -> int:
    state = _state(args)
    if not args.base_url.startswith(("http://", "https://")):
        fail(f"{args.base_url!r} is not an http(s) URL")
    if not PROVIDER_NAME.fullmatch(args.provider):
        fail(f"--provider: {args.provider!r} is not a provider name (a-z, 0-9, . _ -)")
    set_upstream(state, args.base_url, args.provider, args.api_key_file)
    if args.json:
        emit(ModelGatewayUpstreamJson(upstream=args.base_url, file=str(gateway_file(state))))
    else:
        say(f"upstream: {args.base_url} ({gateway_file(state)})")
    return 0


def run_add_runtime(args: argparse.Namespace) -> int:
    state = _state(args)
    try:
        token(args.runtime_id)
    except SubjectError:
        fail(f"{args.runtime_id!r} is not a runtime id")
    actor = _decode(args.actor, ActorContext, "actor")
    facts = _decode(args.facts, DataFacts, "facts") if args.facts else None
    destination = ProposedDestination(address=args.destination, locality=args.locality)
    try:
        provision_gateway_runtime(
            state,
            args.runtime_id,
            adapter_id=args.adapter,
            actor=actor,
            destination=destination,
            surface=args.surface,
            facts=facts,
            account_tool_calls=not args.no_tool_call_accounting,
            checks_tool_arguments=args.checks_tool_arguments,
            refuses_invalid_json_turns=args.refuses_invalid_json_turns,
        )
    except (FileNotFoundError, GatewayFileError) as exc:
        fail(first_line(exc))
    path = token_path(state, args.runtime_id)
    if args.json:
        emit(ModelGatewayAddRuntimeJson(runtime_id=args.runtime_id, token_file=str(path)))
    else:
        say(f"{args.runtime_id}: token in {path} (give it to the runtime as its model API key)")
    return 0


async def _clear(url: str, state: StateDir, runtime_id: str) -> GatewayCleared:
    nc = await connect_bus(url, "smf-model-gateway-clear", state.existing_credential(OPERATOR))
    try:
        ask = GatewayClear(schema="smf.gateway-clear/1", runtime_id=runtime_id)
        reply = await nc.request(names.GATEWAY_CLEAR, msgspec.json.encode(ask), timeout=5)
    except (NatsError, TimeoutError) as exc:
        fail(f"the gate did not answer on {names.GATEWAY_CLEAR}: {first_line(exc) or 'timeout'}")
    finally:
        await nc.close()
    headers = reply.headers or {}
    if names.HEADER_SERVICE_ERROR in headers:
        fail(f"the gate refused the clear: {headers[names.HEADER_SERVICE_ERROR]}")
    try:
        return msgspec.json.decode(reply.data, type=GatewayCleared)
    except msgspec.DecodeError as exc:
        fail(f"unreadable answer from the gate: {first_line(exc)}")


def run_clear(args: argparse.Namespace) -> int:
    configure_logging(json=not sys.stderr.isatty(), level="warning")
    state = _state(args)
    try:
        token(args.runtime_id)
    except SubjectError:
        fail(f"{args.runtime_id!r} is not a runtime id")
    cleared = asyncio.run(_clear(bus_url(args.nats, state.root), state, args.runtime_id))
    if args.json:
        emit(
            ModelGatewayClearJson(
                runtime_id=cleared.runtime_id,
                was_stopped=cleared.was_stopped,
                stopped=cleared.stopped,
                reason_codes=cleared.reason_codes,
                evidence=cleared.evidence,
            )
        )
    elif not cleared.reason_codes and cleared.was_stopped:
        say(
            f"{cleared.runtime_id}: stop lifted, recorded in the ledger; it is served again"
            " once it attests"
        )
    elif not cleared.reason_codes:
        say(f"{cleared.runtime_id}: was not stopped")
    if cleared.reason_codes:
        reasons = ", ".join(cleared.reason_codes)
        state_now = "still stopped" if cleared.stopped else "not stopped here"
        fail(f"{cleared.runtime_id}: the clear did not take effect ({reasons}); {state_now}")
    return 0


def _load(state: StateDir) -> list[list[str]]:
    try:
        settings = load_gateway_file(gateway_file(state))
    except GatewayFileError as exc:
        fail(f"{first_line(exc)} (set one with `model-gateway upstream URL`)")
    return [
        [r.runtime_id, r.adapter_id, r.destination.address, r.destination.locality, r.surface]
        for r in settings.runtimes
    ]


def run_list(args: argparse.Namespace) -> int:
    rows = _load(_state(args))
    headers = ["runtime", "adapter", "destination", "locality", "surface"]
    if args.json:
        runtimes = tuple(
            msgspec.convert(dict(zip(headers, row, strict=True)), type=GatewayRuntime)
            for row in rows
        )
        emit(ModelGatewayListJson(runtimes=runtimes))
    else:
        table(headers, rows)
    return 0


async def start_beside(
    state: StateDir, nats_url: str, listen: str, tls: ssl.SSLContext | None = None
) -> RunningModelGateway:
    """The gateway of ``state`` on ``listen`` (HTTPS with ``tls``); a one-line failure
    if it cannot start."""
    host, port = parse_listen(listen)
    try:
        config = gateway_config(state, nats_url, host=host, port=port, tls=tls)
    except GatewayFileError as exc:
        fail(f"cannot start the model gateway: {first_line(exc)}")
    try:
        return await start_model_gateway(config)
    except (BusUnavailableError, OSError, NatsError) as exc:
        fail(f"cannot start the model gateway: {first_line(exc)}")


def announce(gateway: RunningModelGateway, json_out: bool) -> None:
    if json_out:
        emit(ModelGatewayServeJson(ready=True, model_gateway_url=gateway.url))
    else:
        say(f"model gateway: {gateway.url}")
    sys.stdout.flush()


async def _serve(state: StateDir, args: argparse.Namespace, tls: ssl.SSLContext | None) -> None:
    with stop_on_signals() as stop:
        await _serve_until(state, args, stop, tls)


async def _serve_until(
    state: StateDir, args: argparse.Namespace, stop: asyncio.Event, tls: ssl.SSLContext | None
) -> None:
    url = bus_url(args.nats, state.root)
    # The gateway's join waits for a bus that may come; asked once
    # first, a wrong URL is one line at once.
    probe = await connect_bus(
        url, "smf-model-gateway-probe", state.existing_credential(MODEL_GATEWAY)
    )
    await probe.close()
    gateway = await start_beside(state, url, args.listen, tls)
    try:
        announce(gateway, args.json)
        await stop.wait()
    finally:
        await gateway.close()


def run_serve(args: argparse.Namespace) -> int:
    # Logs on stderr: stdout is the readiness line, one JSON object with --json.
    configure_logging(json=not sys.stderr.isatty())
    state = _state(args)
    _load(state)
    host, _ = parse_listen(args.listen)  # a bad --listen is a usage error before any connect
    try:
        tls = serving_tls(args.tls_cert, args.tls_key, host)
    except TlsInitError as exc:
        fail(str(exc))
    asyncio.run(_serve(state, args, tls))
    return 0
