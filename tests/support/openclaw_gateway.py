"""The fixtures, builders and constants of tests/runtimes/test_openclaw_gateway.py
that other test modules use too: here, so that no test module imports another."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from tests.support.openclaw_conformance import (
    ACTOR,
    E2E_RUNTIME,
    PLUGIN_ID,
    smf_plugin,
)

__all__ = [
    "AFTER_INJECTION",
    "ALLOWED",
    "BARE_ID",
    "CLIENT_CHAT_ID",
    "DESK_ID",
    "GATEWAY_PROVIDER",
    "INSTANCE_ID",
    "NOTICE",
    "PRIVILEGED",
    "PROOF_REFUSALS",
    "SECRET",
    "SERVED",
    "attestations",
    "client_output",
    "output_verdicts",
    "payload_texts",
    "through_gateway",
    "written_files",
]

CLIENT_CHAT_ID = str(E2E_RUNTIME["runtime_id"])


DESK_ID = "openclaw-desk"


BARE_ID = "openclaw-bare"
"""Served by the gateway, but its OpenClaw runs without our plugin: it never attests."""


CLEAN = {"classification": "internal", "injection_taint": "clear", "redaction_status": "none"}


SERVED = [
    {
        "principal": E2E_RUNTIME["principal"],
        "runtime_id": CLIENT_CHAT_ID,
        "actor": ACTOR,
        "destination": {"address": "telegram:client-chat", "locality": "external"},
        "facts": CLEAN,
    },
    {
        "principal": "openclaw-desk-runtime",
        "runtime_id": DESK_ID,
        "actor": ACTOR,
        "destination": {"address": "cli:operator", "locality": "internal"},
        "facts": CLEAN,
    },
    {
        "principal": "openclaw-bare-runtime",
        "runtime_id": BARE_ID,
        "actor": ACTOR,
        "destination": {"address": "cli:operator", "locality": "internal"},
        "facts": CLEAN,
    },
]


SECRET = "settle below 2M"


PRIVILEGED = f"PRIVILEGED & CONFIDENTIAL: our strategy is to {SECRET}."


ALLOWED = "The hearing is on Monday at 10."


AFTER_INJECTION = "Here is the summary you asked for."


NOTICE = "SMF Assurance Gate: this reply"


GATEWAY_PROVIDER = "smf-gateway"
"""The provider id OpenClaw is configured to reach the model gateway under
(``models.providers.smf-gateway``): our plugin registers it and its stream wrappers put
the process's instance proof on every request to it (docs/OPENCLAW.md, "Binding model
requests to the process"). The harness's ``provider`` makes it the only provider."""


def gateway_provider(runtime_id: str) -> dict[str, Any]:
    """The model gateway as ``smf-gateway``, with ``runtime_id``'s gateway token."""
    provider = {"baseUrl": "{{gateway_url}}", "apiKey": "{{gateway_token:" + runtime_id + "}}"}
    return {"models": {"providers": {GATEWAY_PROVIDER: provider}}}


def through_gateway(runtime_id: str) -> dict[str, Any]:
    """Our plugin as ``runtime_id`` (its key and nkey), and the gateway as the only
    provider (with ``"provider": GATEWAY_PROVIDER`` in the harness command)."""
    config = smf_plugin()
    plugin = config["plugins"]["entries"][PLUGIN_ID]["config"]
    plugin["runtimeId"] = runtime_id
    plugin["keyFile"] = "{{runtime_key:" + runtime_id + "}}"
    plugin["credentialFile"] = "{{credential_file:" + runtime_id + "}}"
    return {**config, **gateway_provider(runtime_id)}


HARNESS_FILES = {"evidence.json", "openclaw.stdout"}
"""Written by the harness, not by OpenClaw (the stdout copy is checked on its own)."""


def written_files(run: dict[str, Any]) -> dict[str, bytes]:
    """Every file left in the run's folder (OpenClaw's home, state and workspace, the
    config it was given), by relative path, as raw bytes: SQLite pages, WAL included."""
    root = Path(run["root"])
    return {
        str(path.relative_to(root)): path.read_bytes()
        for path in sorted(root.rglob("*"))
        if path.is_file() and path.name not in HARNESS_FILES
    }


def client_output(run: dict[str, Any]) -> str:
    """What ``openclaw agent --json`` printed for the operator: the whole stdout."""
    return (Path(run["root"]) / "openclaw.stdout").read_text(errors="replace")


def output_verdicts(run: dict[str, Any]) -> list[dict[str, Any]]:
    return [b for b in run["bus"] if b["kind"] == "output"]


def payload_texts(run: dict[str, Any]) -> list[str]:
    """The replies ``openclaw agent --json`` delivered to the operator (``payloads``)."""
    shown = json.loads(client_output(run))
    return [str(p.get("text", "")) for p in shown["payloads"]]


PROOF_REFUSALS = frozenset(
    {
        "instance_proof_missing",
        "instance_proof_invalid",
        "instance_proof_stale",
        "runtime_instance_not_attested",
        "instance_proof_replayed",
        "instance_proof_for_another_request",
        "instance_proof_without_nonce",
    }
)
"""The gate's reasons for refusing a model request of an instance-bound runtime
(``smf_assurance.pipeline.desks.attestation``, ``AttestationDesk.admit_instance``)."""


INSTANCE_ID = re.compile(r"^i-[0-9a-f]{32}\Z")


def attestations(run: dict[str, Any]) -> list[dict[str, Any]]:
    """What the runtime attested on ``smf.attest`` during the run (signed by its key)."""
    return [b for b in run["bus"] if b["kind"] == "attestation"]
