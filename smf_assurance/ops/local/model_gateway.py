"""The model gateway of a state directory: its settings file and runtime tokens.

``provision_gateway_runtime`` lets one runtime use the gateway: it issues the
runtime's bearer token (``keys/<runtime_id>.gateway-token``, 0600; only its
hash goes into ``model-gateway.json``) and declares where that runtime's
replies go (``destination``, ``surface``) and for whom it works (``actor``):
the output gate decides every reply for that declared destination, whatever
the runtime claims at run time. ``gateway_config`` builds the assembly's
explicit settings from the state directory.
"""

from __future__ import annotations

import os
import secrets
import ssl
from pathlib import Path
from typing import Final, Literal

import msgspec
import structlog

from smf_assurance.gateway.assembly import (
    GatewayFile,
    ModelGatewayConfig,
    load_gateway_file,
)
from smf_assurance.gateway.server import (
    GatewayRuntime,
    GatewaySettings,
    Upstream,
    token_hash,
)
from smf_assurance.ops.local.state import MODEL_GATEWAY, StateDir
from smf_assurance.subjects.envelope import Surface
from smf_assurance.subjects.messages import ActorContext, DataFacts, ProposedDestination
from smf_assurance.subjects.registry import FollowedRegistry, load_registry

log = structlog.get_logger(__name__)

GATEWAY_FILE: Final = "model-gateway.json"
TOKEN_SUFFIX: Final = ".gateway-token"  # noqa: S105 - a file name suffix


class GatewayRegistry(FollowedRegistry):
    """The state's registry as the model gateway reads it: again when the file changes;
    a file that cannot be read or checked names nobody, so every gate answer is
    refused until it is fixed (logged: an invalid file once per change, a missing
    one at each read)."""

    def refused(self, why: Literal["unreadable", "invalid"], detail: str | None) -> None:
        log.warning("model_gateway_registry_refused", path=str(self.path), why=why)


def gateway_file(state: StateDir) -> Path:
    return state.root / GATEWAY_FILE


def token_path(state: StateDir, runtime_id: str) -> Path:
    return state.keys / f"{runtime_id}{TOKEN_SUFFIX}"


def write_private(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data``, readable by its owner only. The temporary file
    is made new (``O_EXCL``): a leftover one would keep its own, wider mode, and the
    token written through it would be readable by others."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
    tmp.replace(path)


def set_upstream(
    state: StateDir, base_url: str, provider: str, api_key_file: str | None = None
) -> None:
    """Name the provider the gateway forwards to (by the name the release approves it
    under), keeping the runtimes declared."""
    path = gateway_file(state)
    runtimes = load_gateway_file(path).runtimes if path.exists() else ()
    upstream = Upstream(provider=provider, base_url=base_url, api_key_file=api_key_file)
    settings = GatewayFile(schema="smf.model-gateway/1", upstream=upstream, runtimes=runtimes)
    write_private(path, msgspec.json.encode(settings))


def new_gateway_token() -> str:
    """A runtime's bearer token for the gateway: only its hash is ever stored."""
    return "smfgw_" + secrets.token_urlsafe(32)


def with_gateway_runtime(
    current: GatewayFile,
    runtime_id: str,
    token: str,
    *,
    adapter_id: str,
    actor: ActorContext,
    destination: ProposedDestination,
    surface: Surface = "direct_reply",
    facts: DataFacts | None = None,
    account_tool_calls: bool = True,
    checks_tool_arguments: bool = False,
    refuses_invalid_json_turns: bool = False,
) -> GatewayFile:
    """``current`` serving ``runtime_id`` with ``token`` (its hash) for the declared
    delivery, replacing any profile it had: the pure half of
    :func:`provision_gateway_runtime`, shared with ``runtime add``."""
    runtime = GatewayRuntime(
        runtime_id=runtime_id,
        token_sha256=token_hash(token),
        adapter_id=adapter_id,
        actor=actor,
        destination=destination,
        surface=surface,
        facts=facts or DataFacts(),
        account_tool_calls=account_tool_calls,
        checks_tool_arguments=checks_tool_arguments,
        refuses_invalid_json_turns=refuses_invalid_json_turns,
    )
    others = tuple(r for r in current.runtimes if r.runtime_id != runtime_id)
    return msgspec.structs.replace(current, runtimes=(*others, runtime))


def without_gateway_runtime(current: GatewayFile, runtime_id: str) -> GatewayFile:
    """``current`` no longer serving ``runtime_id`` (its token is dead once read)."""
    kept = tuple(r for r in current.runtimes if r.runtime_id != runtime_id)
    return msgspec.structs.replace(current, runtimes=kept)


def provision_gateway_runtime(
    state: StateDir,
    runtime_id: str,
    *,
    adapter_id: str,
    actor: ActorContext,
    destination: ProposedDestination,
    surface: Surface = "direct_reply",
    facts: DataFacts | None = None,
    account_tool_calls: bool = True,
    checks_tool_arguments: bool = False,
    refuses_invalid_json_turns: bool = False,
) -> str:
    """Issue ``runtime_id`` a new gateway token and declare its delivery; returns the
    token (also written to :func:`token_path`). A second call replaces the token.
    ``account_tool_calls``: False only for a runtime whose adapter does not put the
    model's tool-call ids into its proposals (OpenClaw, docs/OPENCLAW.md).
    ``checks_tool_arguments``: True only for a runtime that checks a call's arguments
    against the offered schema before any hook and runs none that fails (OpenClaw).
    ``refuses_invalid_json_turns``: True only for a runtime that answers every call of a
    turn it did not stream, in which some call's arguments are not JSON, with its own
    text before any hook and runs none of them (Hermes)."""
    path = gateway_file(state)
    if not path.exists():
        raise FileNotFoundError(f"{path}: name the upstream first (set_upstream)")
    token = new_gateway_token()
    updated = with_gateway_runtime(
        load_gateway_file(path),
        runtime_id,
        token,
        adapter_id=adapter_id,
        actor=actor,
        destination=destination,
        surface=surface,
        facts=facts,
        account_tool_calls=account_tool_calls,
        checks_tool_arguments=checks_tool_arguments,
        refuses_invalid_json_turns=refuses_invalid_json_turns,
    )
    write_private(token_path(state, runtime_id), token.encode())
    write_private(path, msgspec.json.encode(updated))
    return token


def gateway_config(
    state: StateDir,
    nats_url: str,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    settings: GatewaySettings | None = None,
    tls: ssl.SSLContext | None = None,
) -> ModelGatewayConfig:
    """The gateway of ``state``: its own key and bus credential, the registry's gate
    keys (whose answers it believes) and gateway keys (whose call-context records it
    reads), and ``model-gateway.json``. The keys are those of the registry file as it
    is now (:class:`GatewayRegistry`): a gate key ``keys rotate`` added is believed,
    and one ``keys retire`` retired no more, without a restart."""
    load_registry(state.registry)  # a start on a registry that does not check is refused
    registry = GatewayRegistry(state.registry)
    return ModelGatewayConfig(
        servers=tuple(u.strip() for u in nats_url.split(",") if u.strip()),
        credential=state.existing_credential(MODEL_GATEWAY),
        key=state.key(MODEL_GATEWAY),
        gate_keys=lambda: registry.current().trusted("gate"),
        settings_file=load_gateway_file(gateway_file(state)),
        host=host,
        port=port,
        gateway=settings or GatewaySettings(),
        call_context_keys=lambda: registry.current().trusted("gateway"),
        tls=tls,
    )
