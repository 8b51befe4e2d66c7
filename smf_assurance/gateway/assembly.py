"""``start_model_gateway``: the model gateway from explicit settings.

Like ``start_gate``, it reads no state directory: the caller names the bus,
the gateway's credential and key, the gate keys it trusts, the runtimes it
serves and the provider. The first bus join is bounded; a refused credential
ends the start with the server's reason instead of a start that hangs.
"""

from __future__ import annotations

import ssl
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import msgspec
import structlog
from aiohttp import web
from nats.aio.client import Client

from smf_assurance.gateway.server import (
    GatewayRuntime,
    GatewaySettings,
    ModelGateway,
    Upstream,
    serve_gateway,
)
from smf_assurance.pipeline.service import join_bus
from smf_assurance.subjects.bus_access import BusCredential
from smf_assurance.subjects.keys import SigningKey, VerifyKey

log = structlog.get_logger(__name__)


class GatewayFile(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """``model-gateway.json``: the provider and the runtimes the gateway serves."""

    schema: Literal["smf.model-gateway/1"]
    upstream: Upstream
    runtimes: tuple[GatewayRuntime, ...] = ()


class GatewayFileError(ValueError):
    """The gateway's settings file is missing or invalid."""


def load_gateway_file(path: Path) -> GatewayFile:
    try:
        return msgspec.json.decode(path.read_bytes(), type=GatewayFile)
    except OSError as exc:
        raise GatewayFileError(f"cannot read {path}: {exc.strerror}") from exc
    except msgspec.DecodeError as exc:
        raise GatewayFileError(f"{path}: {exc}") from exc


@dataclass(frozen=True)
class ModelGatewayConfig:
    servers: tuple[str, ...]
    credential: BusCredential | None
    key: SigningKey
    gate_keys: Callable[[], Mapping[str, VerifyKey]]
    settings_file: GatewayFile
    host: str = "127.0.0.1"
    port: int = 0
    gateway: GatewaySettings = field(default_factory=GatewaySettings)
    join_seconds: float = 10.0
    call_context_keys: Callable[[], Mapping[str, VerifyKey]] | None = None
    """The keys call-context records may be signed by (the registry's ``gateway``
    role); ``None``: the gateway's own key only."""
    tls: ssl.SSLContext | None = None
    """HTTPS with this server context; ``None``: plain HTTP, which the command line
    allows on loopback only."""


@dataclass
class RunningModelGateway:
    nc: Client
    runner: web.AppRunner
    port: int
    gateway: ModelGateway
    tls: bool = False

    @property
    def url(self) -> str:
        """The ``base_url`` a runtime on this machine is pointed at."""
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}/v1"

    async def close(self) -> None:
        await self.runner.cleanup()
        if not self.nc.is_closed:
            await self.nc.drain()


async def start_model_gateway(config: ModelGatewayConfig) -> RunningModelGateway:
    nc = await join_bus(config.servers, "smf-model-gateway", config.credential, config.join_seconds)
    gateway = ModelGateway(
        nc=nc,
        key=config.key,
        gate_keys=config.gate_keys,
        runtimes=config.settings_file.runtimes,
        upstream=config.settings_file.upstream,
        settings=config.gateway,
        call_context_keys=config.call_context_keys,
    )
    try:
        runner, port = await serve_gateway(gateway, config.host, config.port, config.tls)
    except BaseException:
        await nc.close()
        raise
    log.info("model_gateway_started", port=port, runtimes=len(gateway.runtimes))
    return RunningModelGateway(
        nc=nc, runner=runner, port=port, gateway=gateway, tls=config.tls is not None
    )
