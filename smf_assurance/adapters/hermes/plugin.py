"""The Hermes Agent plugin: block-only enforcement through the SMF gate.

Installed as the ``hermes_agent.plugins`` entry point ``smf-assurance`` of
our distribution; Hermes loads it when ``plugins.enabled`` lists it
(RUNTIMES.md, "Plugins"), imports this module and calls :func:`register`.
Depends on ``subjects/`` and ``smf_assurance.adapters.client``/``smf_assurance.adapters.output``
only,
plus nats-py and msgspec.

This module assembles :class:`HermesAdapter` from its parts and registers
it; each concern lives in its own module:

- ``config``: the environment the adapter reads (``AdapterConfig``);
- ``refusing``: refusing mode, and the texts of a block or a withheld reply;
- ``lifecycle``: the bridge, the governed release, attestation;
- ``hooks``: one module per hook family (``pre_tool_call``, the connector
  tools' handlers, the ``tool_execution`` middleware, the ``llm_request``
  middleware that proves this process to the model gateway, the session
  observers, ``transform_llm_output``).

Fail-open traps this module is built around (RUNTIMES.md, "FAIL-OPEN"): a
``register()`` that raises lets the tools run, so ``register()`` never
raises. A configuration problem or a Hermes version off the pin does not
stop registration: the hooks are registered in refusing mode (every call
blocked, every reply withheld), the problem is logged at CRITICAL and printed
to stderr, and it is reported to the gate in the start-up attestation.
Streaming is attested as Hermes does it (read from the running CLI,
``attestation.observed_cli_streaming``), and the gate judges it: it refuses a
streaming runtime unless the model gateway serves that runtime (the gateway
holds each turn whole until its verdict, docs/HERMES.md).
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable, Mapping
from typing import Any

from smf_assurance.adapters.hermes import tools
from smf_assurance.adapters.hermes.attestation import (
    HERMES_PIN,
    STREAMING_OFF_HELP,
    HermesHost,
    Host,
)
from smf_assurance.adapters.hermes.config import REQUIRED_HOOKS, AdapterConfig, ConfigError
from smf_assurance.adapters.hermes.hooks.connector_tools import ConnectorToolHandlers
from smf_assurance.adapters.hermes.hooks.execution import ExecutionMiddleware
from smf_assurance.adapters.hermes.hooks.model_request import ModelRequestMiddleware
from smf_assurance.adapters.hermes.hooks.observers import SessionObservers
from smf_assurance.adapters.hermes.hooks.reply import ReplyHook
from smf_assurance.adapters.hermes.hooks.tool_call import ToolCallHook
from smf_assurance.adapters.hermes.refusing import WITHHELD_INTERNAL, block
from smf_assurance.subjects.attestation import StreamingSetting
from smf_assurance.subjects.clock import wall_clock_ms

__all__ = [
    "REQUIRED_HOOKS",
    "WITHHELD_INTERNAL",
    "AdapterConfig",
    "ConfigError",
    "HermesAdapter",
    "block",
    "build_adapter",
    "register",
    "register_connector_tools",
]

log = logging.getLogger("smf.hermes")


class HermesAdapter(
    ToolCallHook,
    ConnectorToolHandlers,
    ExecutionMiddleware,
    ModelRequestMiddleware,
    SessionObservers,
    ReplyHook,
):
    """The plugin's state and hooks: one per Hermes process, created by :func:`register`."""

    def __post_init__(self) -> None:
        self.handlers = {tool.name: self._handler_for(tool) for tool in tools.CONNECTOR_TOOLS}
        super().__post_init__()

    def callbacks(self) -> dict[str, Callable[..., Any]]:
        return {
            "pre_tool_call": self.pre_tool_call,
            "transform_llm_output": self.transform_llm_output,
            "post_tool_call": self.post_tool_call,
            "subagent_start": self.subagent_start,
        }


# -- the entry point -------------------------------------------------------------

_ADAPTER: HermesAdapter | None = None


def build_adapter(
    host: Host, env: Mapping[str, str], *, clock: Callable[[], int] = wall_clock_ms
) -> HermesAdapter:
    """The adapter for this process, in refusing mode if anything is wrong. Never raises."""
    problems: list[str] = []
    details: list[str] = []
    config: AdapterConfig | None = None
    try:
        config = AdapterConfig.from_env(env)
    except ConfigError as exc:
        problems.append(exc.reason_code)
        details.append(exc.detail)
    except Exception as exc:  # noqa: BLE001 - fail closed on anything (RUNTIMES.md, FAIL-OPEN)
        problems.append("smf_config_failed")
        details.append(repr(exc))
    streaming: tuple[StreamingSetting, ...] = ()
    try:
        version = host.version()
        if version != HERMES_PIN:
            problems.append("runtime_version_not_pinned")
            details.append(f"Hermes {version} is not the pinned {HERMES_PIN}")
    except Exception as exc:  # noqa: BLE001 - fail closed on anything (RUNTIMES.md, FAIL-OPEN)
        problems.append("runtime_version_unreadable")
        details.append(repr(exc))
    try:
        streaming = host.streaming()
        on = [s.surface for s in streaming if s.enabled]
        if on:
            log.warning(
                "smf: streaming is enabled for %s; the gate refuses this runtime unless the "
                "model gateway serves it: %s",
                ", ".join(on),
                STREAMING_OFF_HELP,
            )
    except Exception as exc:  # noqa: BLE001 - fail closed on anything (RUNTIMES.md, FAIL-OPEN)
        problems.append("streaming_settings_unreadable")
        details.append(repr(exc))
    adapter = HermesAdapter(config=config, host=host, streaming=streaming, clock=clock)
    for problem, detail in zip(problems, details, strict=True):
        adapter.refuse(problem, detail)
    return adapter


def register(ctx: Any) -> None:
    """Hermes calls this once per plugin load. It never raises (a raising register()
    is skipped with one warning line and the tools run unguarded: RUNTIMES.md)."""
    global _ADAPTER  # noqa: PLW0603 - one adapter per Hermes process, replaced on reload
    try:
        if _ADAPTER is not None and _ADAPTER.bridge is not None:
            _ADAPTER.bridge.stop(0.5)
        adapter = build_adapter(HermesHost(ctx), os.environ)
        _ADAPTER = adapter
        for name, callback in adapter.callbacks().items():
            ctx.register_hook(name, callback)
        ctx.register_middleware("tool_execution", adapter.tool_execution)
        ctx.register_middleware("llm_request", adapter.llm_request)
        register_connector_tools(ctx, adapter)
        adapter.start()
    except Exception as exc:  # noqa: BLE001 - fail closed on anything (RUNTIMES.md, FAIL-OPEN)
        # Registration itself failed part-way: nothing else can be done from here.
        message = f"SMF Assurance adapter failed to register its hooks: {exc!r}"
        try:
            log.critical(message)
            sys.stderr.write(f"[smf-assurance] {message}\n")
        except Exception:  # noqa: BLE001, S110 - last resort: stay silent rather than raise
            pass


def register_connector_tools(ctx: Any, adapter: HermesAdapter) -> None:
    """Register our connector-backed tools in Hermes's tool registry (never raises).

    ``PluginContext.register_tool`` (``hermes_cli/plugins.py`` 0.19.0) puts the
    handler into ``tools.registry.registry``; a name another toolset already
    holds is rejected there with an error log and no exception, so whether a
    name runs OUR handler is checked by identity on every call
    (``HermesAdapter._is_ours``), not assumed from this registration.
    """
    for tool in tools.CONNECTOR_TOOLS:
        try:
            ctx.register_tool(
                name=tool.name,
                toolset=tools.TOOLSET,
                schema=tool.schema(),
                handler=adapter.handlers[tool.name],
                description=tool.description,
            )
        except Exception as exc:  # noqa: BLE001 - the tool is then unavailable or not ours
            log.warning("smf connector tool %s not registered: %r", tool.name, exc)
