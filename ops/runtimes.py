"""Runtime entries beyond the scripted demo, and which of them must attest (issue 8).

``provision_runtime`` adds a runtime principal (key + registry entry) to a
state directory and, by default, opts that runtime id into start-up
attestation: the gate then refuses its proposals until it has attested
(``pipeline.stages.attestation``). The opt-in is a gate setting kept in the
state directory (``runtime-attestation.json``), so the scripted demo
runtime, which cannot attest, keeps working. A state directory that is its
own release authority re-signs its release so the new registry entry is in
force (issue 6).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Final

import msgspec

from ops.model_gateway import gateway_file
from ops.state import RELEASE_SIGNER, StateDir, refresh_demo_release
from pipeline.assembly.model_gateway import load_gateway_file
from pipeline.stages.attestation import RuntimeRequirement
from subjects.registry import RegistryFile, encode_registry, entry_for

HERMES_RUNTIME_ID: Final = "hermes-demo"
HERMES_PRINCIPAL: Final = "hermes-runtime"
ATTESTATION_FILE: Final = "runtime-attestation.json"


class AttestationSetting(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    runtime_pin: str | None = None
    lease_ms: int = 180_000
    required_hooks: tuple[str, ...] = ()
    require_release: bool = True
    """The runtime must attest the gate's active release, verified by itself (issue 6);
    absent from a settings file means required (fail closed)."""
    instance_bound: bool = False
    """The model gateway serves it only for a proof of an attested process, even when its
    attestations name none (``RuntimeRequirement.instance_bound``)."""


class AttestationFile(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    schema: str = "smf.runtime-attestation-settings/1"
    runtimes: dict[str, AttestationSetting] = {}


def attestation_settings_path(state: StateDir) -> Path:
    return state.root / ATTESTATION_FILE


def load_attestation_requirements(state: StateDir) -> dict[str, RuntimeRequirement]:
    """The runtimes that must attest, and what they must attest to (none: no file).

    A runtime the model gateway serves (``model-gateway.json``, written by
    ``ops.model_gateway.provision_gateway_runtime``) may stream: the gateway holds
    each turn until its verdict (``RuntimeRequirement.output_via_gateway``)."""
    path = attestation_settings_path(state)
    if not path.exists():
        return {}
    parsed = msgspec.json.decode(path.read_bytes(), type=AttestationFile)
    served = _gateway_served(state)
    return {
        runtime_id: RuntimeRequirement(
            s.runtime_pin,
            s.lease_ms,
            s.required_hooks,
            s.require_release,
            output_via_gateway=runtime_id in served,
            instance_bound=s.instance_bound,
        )
        for runtime_id, s in parsed.runtimes.items()
    }


def _gateway_served(state: StateDir) -> frozenset[str]:
    path = gateway_file(state)
    if not path.exists():
        return frozenset()
    return frozenset(r.runtime_id for r in load_gateway_file(path).runtimes)


def _write_atomic(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".")
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
    Path(tmp).replace(path)


def provision_runtime(
    state: StateDir,
    principal: str = HERMES_PRINCIPAL,
    runtime_id: str = HERMES_RUNTIME_ID,
    *,
    require_attestation: bool = True,
    runtime_pin: str | None = None,
    required_hooks: tuple[str, ...] = (),
    lease_ms: int = 180_000,
    require_release: bool = True,
    instance_bound: bool = False,
) -> Path:
    """Add ``principal`` as runtime ``runtime_id``; return its key file path.

    Its bus credential (issue 15) is created beside the key, as
    ``keys/<principal>.nkey`` (0600), and its public key registered as the
    entry's ``nats_user``: the adapter's ``SMF_BUS_CREDENTIAL`` (Hermes) or
    ``credentialFile`` (OpenClaw).

    Idempotent: an existing key is reused (never overwritten) and an entry for
    the same key is not added twice. Requires a provisioned registry.
    ``require_release`` (default, as the Hermes adapter verifies releases): the
    gate refuses the runtime's attestation unless it names the gate's active
    release, verified by the runtime itself.
    """
    key = state.key(principal)
    current = msgspec.json.decode(state.registry.read_bytes(), type=RegistryFile)
    entries = tuple(e for e in current.entries if e.key.key_id != key.key_id)
    entries += (
        entry_for(
            key, principal, "runtime", runtime_id=runtime_id, nats_user=state.bus_user(principal)
        ),
    )
    state.registry.write_bytes(encode_registry(entries))

    path = attestation_settings_path(state)
    settings = (
        msgspec.json.decode(path.read_bytes(), type=AttestationFile)
        if path.exists()
        else AttestationFile()
    )
    runtimes = dict(settings.runtimes)
    if require_attestation:
        runtimes[runtime_id] = AttestationSetting(
            runtime_pin, lease_ms, required_hooks, require_release, instance_bound
        )
    else:
        runtimes.pop(runtime_id, None)
    _write_atomic(path, msgspec.json.encode(AttestationFile(runtimes=runtimes)))
    if state.key_path(RELEASE_SIGNER).exists():
        refresh_demo_release(state)
    return state.key_path(principal)


# --- OpenClaw (issue 10) ---------------------------------------------------------

OPENCLAW_RUNTIME_ID: Final = "openclaw-demo"
OPENCLAW_PRINCIPAL: Final = "openclaw-runtime"
"""The demo's OpenClaw runtime: its key is ``keys/openclaw-runtime.key`` in the state
directory, the plugin's ``keyFile`` (adapters/openclaw/README.md)."""
OPENCLAW_PIN: Final = "2026.9.6"
"""The OpenClaw version the plugin is built and tested for (``adapters/openclaw/src/index.ts``)."""
OPENCLAW_HOOKS: Final = ("before_tool_call", "after_tool_call")
"""The hooks the plugin must attest as present."""


def provision_openclaw_runtime(
    state: StateDir,
    principal: str = OPENCLAW_PRINCIPAL,
    runtime_id: str = OPENCLAW_RUNTIME_ID,
    *,
    require_attestation: bool = True,
) -> Path:
    """Add the OpenClaw plugin's runtime principal beside Hermes's; return its key path.

    Opted into start-up attestation (profile ``exact-hold``,
    ``subjects.attestation``): the gate refuses this runtime's proposals until
    the plugin has attested OpenClaw ``OPENCLAW_PIN`` with both of its hooks
    present and the gate's active release, verified by the plugin itself
    (``adapters/openclaw/src/attest.ts``). An OpenClaw surface that never loads
    the plugin (``openclaw agent exec``) never attests, so it is refused here.
    ``require_attestation=False`` only for tests that propose under the runtime
    key without the plugin.
    """
    return provision_runtime(
        state,
        principal,
        runtime_id,
        require_attestation=require_attestation,
        runtime_pin=OPENCLAW_PIN,
        required_hooks=OPENCLAW_HOOKS,
        require_release=True,
    )
