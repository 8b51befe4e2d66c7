"""The configuration a new runtime needs, exactly as its adapter reads it (issue 21).

``runtime add`` writes two files for a runtime beside its keys: its per-matter
context (what the adapter cannot know: who it works for, the facts of its
data) and its configuration snippet. Both are made from the adapters' own
definitions, so what is written is what the adapter reads:

- **Hermes** (docs/HERMES.md, "Installation" and "Configuration"): a shell
  file that sets the adapter's environment (``SMF_NATS_URL``,
  ``SMF_RUNTIME_KEY``, ``SMF_RUNTIME_ID``, ``SMF_BUS_CREDENTIAL``,
  ``SMF_CONTEXT_FILE``, ``SMF_RELEASE_TRUST_ROOT``; the names are
  ``smf_assurance.adapters.hermes.config``'s) when sourced, and carries, between two marker
  lines, the ``model:`` and ``plugins:`` blocks of ``$HERMES_HOME/config.yaml``
  that point Hermes at the model gateway with its token and enable the plugin.
  The context is ``smf_assurance.adapters.hermes.mapping.HermesContext``.
- **OpenClaw** (``smf_assurance/adapters/openclaw/README.md``): ``openclaw.json`` blocks (JSON is
  JSON5): the plugin's ``plugins.entries.smf-assurance`` entry with its
  ``config`` (the keys ``src/config.ts`` accepts) and a custom provider
  ``models.providers.smf-gateway`` pointing at the model gateway with its
  token. The context is ``smf.openclaw-context/1``.

The snippet holds the runtime's gateway token, so it is written 0600 (by
``smf_assurance.ops.local.onboarding.Changes``) and never printed. Paths are absolute paths on this
machine: a runtime on another host needs the same files at the same places,
or the paths edited.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal

import msgspec

from smf_assurance.adapters.hermes.config import PLUGIN_NAME
from smf_assurance.adapters.hermes.mapping import HermesContext, ReplyContext
from smf_assurance.subjects.messages import ActorContext, DataFacts, ProposedDestination

Kind = Literal["hermes", "openclaw"]
OPENCLAW_PLUGIN_ID: Final = "smf-assurance"
OPENCLAW_CONTEXT_SCHEMA: Final = "smf.openclaw-context/1"
OPENCLAW_PROVIDER: Final = "smf-gateway"
"""The name of the custom provider block that points OpenClaw at the model gateway."""
OPENCLAW_FACTS: Final = (
    "classification",
    "injection_taint",
    "redaction_status",
    "redaction_evidence",
    "citation_verification",
)
"""The facts an OpenClaw context may carry (``src/config.ts`` FACT_FIELDS); legal hold
is per document there, never a context-wide fact."""
YAML_BEGIN: Final = "SMF_HERMES_CONFIG_YAML"
"""The marker around the config.yaml blocks inside the Hermes snippet (a quoted
here-document to ``:``, so sourcing the file skips them)."""


@dataclass(frozen=True, slots=True)
class RuntimeFiles:
    """Where a runtime's files are on this machine."""

    key: Path
    bus_credential: Path
    gateway_token: Path
    context: Path
    snippet: Path
    trust_root: Path


@dataclass(frozen=True, slots=True)
class Endpoints:
    """Where the runtime reaches the bus and the model gateway, and which model."""

    nats_url: str
    gateway_url: str
    model: str | None


def hermes_context(
    actor: ActorContext, facts: DataFacts, destination: ProposedDestination
) -> bytes:
    """The Hermes adapter's context file (``SMF_CONTEXT_FILE``): the actor, the facts of
    its data, and where its replies go (the destination the model gateway's output
    gate decides them for)."""
    context = HermesContext(
        schema="smf.hermes-context/1",
        actor=actor,
        facts=facts,
        reply=ReplyContext(destination=destination),
    )
    return msgspec.json.format(msgspec.json.encode(context), indent=2) + b"\n"


def openclaw_context(actor: ActorContext, facts: DataFacts) -> bytes:
    """The OpenClaw plugin's context file (``contextFile``, ``smf.openclaw-context/1``)."""
    given = msgspec.to_builtins(facts)
    document = {
        "schema": OPENCLAW_CONTEXT_SCHEMA,
        "actor": msgspec.to_builtins(actor),
        "facts": {k: given[k] for k in OPENCLAW_FACTS if given.get(k) is not None},
    }
    return json.dumps(document, indent=2).encode() + b"\n"


def _yaml_scalar(value: str) -> str:
    """A YAML double-quoted scalar: JSON's string syntax is a subset of it."""
    return json.dumps(value)


def hermes_snippet(runtime_id: str, files: RuntimeFiles, endpoints: Endpoints, token: str) -> bytes:
    """The Hermes runtime's environment (sourceable) and its config.yaml blocks."""
    env = {
        "SMF_NATS_URL": endpoints.nats_url,
        "SMF_RUNTIME_ID": runtime_id,
        "SMF_RUNTIME_KEY": str(files.key),
        "SMF_BUS_CREDENTIAL": str(files.bus_credential),
        "SMF_CONTEXT_FILE": str(files.context),
        "SMF_RELEASE_TRUST_ROOT": str(files.trust_root),
    }
    model = [
        "model:",
        '  provider: "custom"',
        f"  base_url: {_yaml_scalar(endpoints.gateway_url)}",
        f"  api_key: {_yaml_scalar(token)}",
    ]
    if endpoints.model is not None:
        model.append(f"  default: {_yaml_scalar(endpoints.model)}")
    lines = [
        f"# Hermes runtime {runtime_id}: written by `smf-assurance runtime add`.",
        "# It holds the runtime's model-gateway token: keep it 0600, never in a repository.",
        "#",
        "# 1. The Hermes process's environment (docs/HERMES.md, 'Configuration'):",
        "#    `. THIS_FILE` in the shell that starts Hermes.",
        *(f"export {name}={shlex.quote(value)}" for name, value in env.items()),
        "",
        "# 2. $HERMES_HOME/config.yaml: put the two blocks between the markers in it",
        "#    (they replace a model: or plugins: block already there). Sourcing this",
        "#    file skips them. Streaming may stay on: the model gateway holds each turn.",
        f": <<'{YAML_BEGIN}'",
        *model,
        "plugins:",
        "  enabled:",
        f"    - {_yaml_scalar(PLUGIN_NAME)}",
        YAML_BEGIN,
        "",
    ]
    return "\n".join(lines).encode()


def openclaw_snippet(
    runtime_id: str, files: RuntimeFiles, endpoints: Endpoints, token: str
) -> bytes:
    """The ``openclaw.json`` blocks of the OpenClaw runtime: the plugin's entry and the
    model gateway as a custom provider (``agents.defaults.model.primary`` too when a
    model is named)."""
    provider: dict[str, Any] = {
        "baseUrl": endpoints.gateway_url,
        "apiKey": token,
        "api": "openai-completions",
        "models": []
        if endpoints.model is None
        else [{"id": endpoints.model, "name": endpoints.model}],
    }
    document: dict[str, Any] = {
        "plugins": {
            "entries": {
                OPENCLAW_PLUGIN_ID: {
                    "enabled": True,
                    "config": {
                        "natsUrl": endpoints.nats_url,
                        "runtimeId": runtime_id,
                        "keyFile": str(files.key),
                        "credentialFile": str(files.bus_credential),
                        "trustRootFile": str(files.trust_root),
                        "contextFile": str(files.context),
                    },
                }
            }
        },
        "models": {"providers": {OPENCLAW_PROVIDER: provider}},
    }
    if endpoints.model is not None:
        primary = f"{OPENCLAW_PROVIDER}/{endpoints.model}"
        document["agents"] = {"defaults": {"model": {"primary": primary}}}
    return json.dumps(document, indent=2).encode() + b"\n"


def snippet(
    kind: Kind, runtime_id: str, files: RuntimeFiles, endpoints: Endpoints, token: str
) -> bytes:
    make = hermes_snippet if kind == "hermes" else openclaw_snippet
    return make(runtime_id, files, endpoints, token)


def context(
    kind: Kind, actor: ActorContext, facts: DataFacts, destination: ProposedDestination
) -> bytes:
    if kind == "hermes":
        return hermes_context(actor, facts, destination)
    return openclaw_context(actor, facts)
