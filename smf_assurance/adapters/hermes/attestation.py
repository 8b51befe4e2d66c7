"""What the adapter attests about its Hermes host, read from Hermes itself.

Every probe reads the running Hermes, not a copy of its defaults:

- version: ``hermes_cli.__version__``; it must equal the pin
  (``HERMES_PIN``), because a conformance run covers the pinned version
  only (ARCHITECTURE.md, "Claims we must not make").
- hooks: the adapter's own callbacks must be present, by identity, in the
  plugin manager's hook table (bound methods compare by function and
  instance), and ours must be the FIRST
  ``transform_llm_output`` callback: Hermes uses the first non-empty string
  any callback returns (``agent/turn_finalizer.py``, read in 0.19.0), so a
  plugin ahead of ours could deliver a text we never saw.
- streaming: RUNTIMES.md, "transform_llm_output ... Hermes always streams from
  the provider"; streamed text is delivered before the final-reply seam.
  CLI: what the running CLI does (``observed_cli_streaming``), else
  ``display.streaming`` with the CLI's own default, true (the default CLI
  streams, whatever ``hermes_cli/config.py`` says, so assuming false would
  attest a streaming runtime as not streaming). Gateway, per platform, exactly
  as ``gateway/run.py`` decides it in 0.19.0: the per-platform override
  ``display.platforms.<p>.streaming`` when set (it wins over the master
  switch, contrary to the comment in ``hermes_cli/config.py``), else
  ``streaming.enabled and streaming.transport != "off"``, read from the raw
  ``config.yaml`` the gateway reads.

A probe that cannot read what it needs reports a problem; the adapter then
refuses to run (blocks everything), never guesses.
"""

from __future__ import annotations

import contextlib
import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any, Final, Protocol

from smf_assurance.subjects.attestation import StreamingSetting

HERMES_PIN: Final = "0.19.0"
STREAMING_OFF_HELP: Final = (
    "turn streaming off in $HERMES_HOME/config.yaml: `display.streaming: false` (CLI), "
    "`streaming.enabled: false` (gateway master switch), and remove or set to false every "
    "`display.platforms.<platform>.streaming` override; then restart Hermes"
)


class Host(Protocol):
    """What the adapter reads from its Hermes process (a fake in unit tests)."""

    def version(self) -> str: ...

    def hooks(self) -> Mapping[str, list[Callable[..., Any]]] | None: ...

    def streaming(self) -> tuple[StreamingSetting, ...]: ...

    def coerce(self, tool: str, args: dict[str, Any]) -> dict[str, Any]: ...

    def patch_targets(self, text: str) -> list[str]: ...

    def tool_handler(self, name: str) -> Callable[..., Any] | None: ...


def _truthy(value: object) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in {"1", "true", "yes", "on"}
    return bool(value)


def streaming_settings(
    raw: Mapping[str, Any],
    platforms: list[str],
    per_platform: Callable[[Mapping[str, Any], str], object],
    gateway_master: bool | None = None,
) -> tuple[StreamingSetting, ...]:
    """Every place streaming could be on, decided the way Hermes 0.19.0 decides it.

    ``gateway_master``: the gateway's master switch as Hermes's own loader reads it
    (``HermesHost.streaming``); without it, read from ``raw`` here."""
    display = raw.get("display") or {}
    stream_cfg = raw.get("streaming") or {}
    if not isinstance(display, Mapping) or not isinstance(stream_cfg, Mapping):
        raise ValueError("display/streaming sections are not mappings")
    master = (
        gateway_master
        if gateway_master is not None
        else _truthy(stream_cfg.get("enabled", False))
        and (str(stream_cfg.get("transport", "auto")).strip().lower() != "off")
    )
    settings = [
        # The CLI's own default is on (cli.py 510, ``load_cli_config``), although
        # ``hermes_cli/config.py`` says off: the CLI is what prints.
        StreamingSetting(surface="cli", enabled=_truthy(display.get("streaming", True))),
        StreamingSetting(surface="gateway", enabled=master),
    ]
    overrides = display.get("platforms") or {}
    names = sorted(set(platforms) | set(overrides if isinstance(overrides, Mapping) else ()))
    for name in names:
        value = per_platform(raw, name)
        enabled = master if value is None else _truthy(value)
        settings.append(StreamingSetting(surface=f"gateway:{name}"[:64], enabled=enabled))
    return tuple(settings)


def hook_presence(
    table: Mapping[str, list[Callable[..., Any]]] | None,
    ours: Mapping[str, Callable[..., Any]],
) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    """(present, missing, problems) for our callbacks in the manager's hook table."""
    if table is None:
        return (), tuple(sorted(ours)), ("plugin_manager_unreadable",)
    present = sorted(n for n, cb in ours.items() if any(c == cb for c in table.get(n, [])))
    missing = sorted(n for n in ours if n not in present)
    problems: list[str] = []
    transform = ours.get("transform_llm_output")
    first = table.get("transform_llm_output", [])
    if transform is not None and first and first[0] != transform:
        problems.append("transform_llm_output_not_first")
    return tuple(present), tuple(missing), tuple(problems)


def observed_cli_streaming(cli: object) -> bool | None:
    """Whether Hermes's CLI streams right now, read from the running CLI.

    The raw config said "off" while the default CLI streamed: what counts is what the
    CLI does. Its agent streams exactly when it has a ``stream_delta_callback``
    (``hermes_cli/cli_agent_setup_mixin.py`` 399; ``-Q`` clears it, cli.py 15976);
    before the agent exists, the CLI's merged config (``CLI_CONFIG``, defaults
    applied) says what it will do. ``None``: no CLI in this process, or nothing
    readable. The ``cli`` module is only read when Hermes has imported it: importing
    it writes the environment (RUNTIMES.md)."""
    if cli is None:
        return None
    agent = getattr(cli, "_active_agent_ref", None)
    if agent is not None and hasattr(agent, "stream_delta_callback"):
        return agent.stream_delta_callback is not None
    config = getattr(cli, "CLI_CONFIG", None)
    display = config.get("display") if isinstance(config, Mapping) else None
    if isinstance(display, Mapping) and "streaming" in display:
        return _truthy(display["streaming"])
    return None


def with_observed_cli(
    settings: tuple[StreamingSetting, ...], cli: object
) -> tuple[StreamingSetting, ...]:
    """``settings`` with the CLI's surface replaced by what the running CLI does."""
    observed = observed_cli_streaming(cli)
    if observed is None:
        return settings
    return tuple(
        StreamingSetting(surface="cli", enabled=observed) if s.surface == "cli" else s
        for s in settings
    )


class HermesHost:
    """The real host: imports Hermes modules lazily (they exist only inside Hermes)."""

    def __init__(self, ctx: object) -> None:
        self._ctx = ctx

    def version(self) -> str:
        return str(importlib.import_module("hermes_cli").__version__)

    def _manager(self) -> Any:
        manager = getattr(self._ctx, "_manager", None)
        if manager is None:
            manager = importlib.import_module("hermes_cli.plugins").get_plugin_manager()
        return manager

    def hooks(self) -> Mapping[str, list[Callable[..., Any]]] | None:
        table = getattr(self._manager(), "_hooks", None)
        return table if isinstance(table, Mapping) else None

    def streaming(self) -> tuple[StreamingSetting, ...]:
        raw = importlib.import_module("hermes_cli.config").read_raw_config()
        display_config = importlib.import_module("gateway.display_config")
        platforms = list(getattr(display_config, "_PLATFORM_DEFAULTS", {}))
        # The per-platform defaults already name the built-ins; the enum adds the rest.
        with contextlib.suppress(Exception):
            enum = importlib.import_module("gateway.config").Platform
            platforms += [str(p.value) for p in enum]

        def per_platform(cfg: Mapping[str, Any], name: str) -> object:
            return display_config.resolve_display_setting(dict(cfg), name, "streaming")

        # The master switch as the gateway itself loads it: the raw file
        # missed ``streaming: {mode: auto}`` (an alias that turns it on), the
        # ``gateway.streaming`` fallback and the managed overlay (RUNTIMES.md;
        # ``gateway/config.py`` 733-782, 1187-1320). Read-only: file reads and logs.
        loaded = importlib.import_module("gateway.config").load_gateway_config().streaming
        master = bool(loaded.enabled) and str(loaded.transport).strip().lower() != "off"
        configured = streaming_settings(
            raw if isinstance(raw, Mapping) else {}, platforms, per_platform, master
        )
        return with_observed_cli(configured, sys.modules.get("cli"))

    def coerce(self, tool: str, args: dict[str, Any]) -> dict[str, Any]:
        coerced = importlib.import_module("model_tools").coerce_tool_args(tool, args)
        return coerced if isinstance(coerced, dict) else args

    def patch_targets(self, text: str) -> list[str]:
        """Every path Hermes's own V4A parser finds in ``text``, move destinations too
        (``tools/patch_parser.py`` 0.19.0: ``parse_v4a_patch`` returns ``(ops, error)``;
        it reads no file; the ``patch`` tool applies exactly these operations)."""
        operations, _ = importlib.import_module("tools.patch_parser").parse_v4a_patch(text)
        paths: list[str] = []
        for operation in operations:
            paths.append(str(operation.file_path))
            if operation.new_path:
                paths.append(str(operation.new_path))
        return paths

    def tool_handler(self, name: str) -> Callable[..., Any] | None:
        """The handler Hermes's tool registry runs for ``name`` (``tools/registry.py``
        0.19.0: ``registry.get_entry(name).handler``, called by ``registry.dispatch``)."""
        entry = importlib.import_module("tools.registry").registry.get_entry(name)
        handler = getattr(entry, "handler", None)
        return handler if callable(handler) else None
