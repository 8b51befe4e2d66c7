"""Runtime entries beyond the scripted demo, and which of them must attest.

``provision_runtime`` adds a runtime principal (key + registry entry) to a
state directory and, by default, opts that runtime id into start-up
attestation: the gate then refuses its proposals until it has attested
(``smf_assurance.pipeline.desks.attestation``). The opt-in is a gate setting kept in the
state directory (``runtime-attestation.json``), so the scripted demo
runtime, which cannot attest, keeps working. A state directory that is its
own release authority re-signs its release so the new registry entry is in
force.

It is in two parts: the registry and attestation part is pure
(:func:`with_runtime_entry`, :func:`with_attestation`) and shared with
``smf-assurance runtime add`` (``smf_assurance.ops.local.onboarding``), which signs the next
release with the operator's keys; only :func:`provision_runtime`, the demo's
and the tests' wrapper, re-signs the demo release.

A running gate reads the attestation settings again each time it switches
releases (:class:`LiveRequirements`), so a runtime that a new release adds
must attest from the moment its key is trusted, without a gate restart.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Final

import msgspec
import structlog

from smf_assurance.core.release_trust import VerifiedRelease
from smf_assurance.gateway.assembly import load_gateway_file
from smf_assurance.ops.local.confine.profile import launcher_principal
from smf_assurance.ops.local.model_gateway import gateway_file
from smf_assurance.ops.local.state import (
    RELEASE_SIGNER,
    StateDir,
    refresh_demo_release,
    write_private,
)
from smf_assurance.pipeline.desks.attestation import RuntimeRequirement
from smf_assurance.subjects.registry import (
    KeyRegistry,
    RegistryEntry,
    RegistryFile,
    encode_registry,
    entry_for,
)

log = structlog.get_logger(__name__)

HERMES_RUNTIME_ID: Final = "hermes-demo"
HERMES_PRINCIPAL: Final = "hermes-runtime"
ATTESTATION_FILE: Final = "runtime-attestation.json"


class AttestationSetting(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    runtime_pin: str | None = None
    lease_ms: int = 180_000
    required_hooks: tuple[str, ...] = ()
    require_release: bool = True
    """The runtime must attest the gate's active release, verified by itself;
    absent from a settings file means required (fail closed)."""
    instance_bound: bool = False
    """The model gateway serves it only for a proof of an attested process, even when its
    attestations name none (``RuntimeRequirement.instance_bound``)."""


class AttestationFile(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    schema: str = "smf.runtime-attestation-settings/1"
    runtimes: dict[str, AttestationSetting] = {}


def attestation_settings_path(state: StateDir) -> Path:
    return state.root / ATTESTATION_FILE


def read_attestation_file(state: StateDir) -> AttestationFile:
    """The settings as written (none: an empty file's worth). Raises ``OSError`` or
    ``msgspec.DecodeError`` for a file that cannot be read as one."""
    path = attestation_settings_path(state)
    if not path.exists():
        return AttestationFile()
    return msgspec.json.decode(path.read_bytes(), type=AttestationFile)


def load_attestation_requirements(state: StateDir) -> dict[str, RuntimeRequirement]:
    """The runtimes that must attest, and what they must attest to (none: no file).

    A runtime the model gateway serves (``model-gateway.json``, written by
    ``smf_assurance.ops.local.model_gateway.provision_gateway_runtime``) may stream: the gateway
    holds
    each turn until its verdict (``RuntimeRequirement.output_via_gateway``)."""
    parsed = read_attestation_file(state)
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


# --- the shared, pure part ---------------------------------------------


def with_runtime_entry(registry: RegistryFile, entry: RegistryEntry) -> RegistryFile:
    """``registry`` with ``entry`` in it, replacing an entry of the same key (so adding
    one key twice is a no-op, never two entries for one key)."""
    kept = tuple(e for e in registry.entries if e.key.key_id != entry.key.key_id)
    return msgspec.structs.replace(registry, entries=(*kept, entry))


def without_runtime(
    registry: RegistryFile, runtime_id: str
) -> tuple[RegistryFile, tuple[RegistryEntry, ...]]:
    """``registry`` without the runtime entries of ``runtime_id`` and its launcher's, and
    those entries."""
    gone = tuple(
        e
        for e in registry.entries
        if e.role in ("runtime", "launcher") and e.runtime_id == runtime_id
    )
    kept = tuple(e for e in registry.entries if e not in gone)
    return msgspec.structs.replace(registry, entries=kept), gone


def with_attestation(
    settings: AttestationFile, runtime_id: str, setting: AttestationSetting | None
) -> AttestationFile:
    """``settings`` with ``runtime_id`` required to attest to ``setting``, or (None)
    no longer required."""
    runtimes = dict(settings.runtimes)
    if setting is None:
        runtimes.pop(runtime_id, None)
    else:
        runtimes[runtime_id] = setting
    return AttestationFile(runtimes=runtimes)


def register_runtime(
    state: StateDir,
    principal: str,
    runtime_id: str,
    setting: AttestationSetting | None,
) -> Path:
    """Add ``principal`` as runtime ``runtime_id`` to the state's registry (key and bus
    credential created beside it when missing) and require of it ``setting`` (None:
    nothing to attest); return its key file path. Signs nothing: the registry takes
    effect in the next release, whoever signs it."""
    key = state.key(principal)
    current = msgspec.json.decode(state.registry.read_bytes(), type=RegistryFile)
    entry = entry_for(
        key, principal, "runtime", runtime_id=runtime_id, nats_user=state.bus_user(principal)
    )
    updated = with_runtime_entry(current, entry)
    write_private(state.registry, encode_registry(updated.entries, updated.retired))
    settings = with_attestation(read_attestation_file(state), runtime_id, setting)
    _write_atomic(attestation_settings_path(state), msgspec.json.encode(settings))
    return state.key_path(principal)


def provision_launcher(state: StateDir, runtime_id: str) -> str:
    """Add the launcher of ``runtime_id`` (``runtime run``'s key and bus credential,
    created when missing) to the state's registry; its principal. A state directory
    that is its own release authority re-signs its release, as :func:`provision_runtime`
    does."""
    principal = launcher_principal(runtime_id)
    current = msgspec.json.decode(state.registry.read_bytes(), type=RegistryFile)
    entry = entry_for(
        state.key(principal),
        principal,
        "launcher",
        runtime_id=runtime_id,
        nats_user=state.bus_user(principal),
    )
    updated = with_runtime_entry(current, entry)
    write_private(state.registry, encode_registry(updated.entries, updated.retired))
    if state.key_path(RELEASE_SIGNER).exists():
        refresh_demo_release(state)
    return principal


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

    Its bus credential is created beside the key, as
    ``keys/<principal>.nkey`` (0600), and its public key registered as the
    entry's ``nats_user``: the adapter's ``SMF_BUS_CREDENTIAL`` (Hermes) or
    ``credentialFile`` (OpenClaw).

    Idempotent: an existing key is reused (never overwritten) and an entry for
    the same key is not added twice. Requires a provisioned registry.
    ``require_release`` (default, as the Hermes adapter verifies releases): the
    gate refuses the runtime's attestation unless it names the gate's active
    release, verified by the runtime itself. The demo's wrapper: a state
    directory that is its own release authority re-signs its release
    (``refresh_demo_release``); an operator's ``runtime add`` never does.
    """
    setting = (
        AttestationSetting(runtime_pin, lease_ms, required_hooks, require_release, instance_bound)
        if require_attestation
        else None
    )
    path = register_runtime(state, principal, runtime_id, setting)
    if state.key_path(RELEASE_SIGNER).exists():
        refresh_demo_release(state)
    return path


# --- what a running gate requires ---------------------------------------


STRICT: Final = RuntimeRequirement(require_release=True)
"""What a runtime added after the gate started must attest to when the state directory
names no requirement for it: an attestation of the gate's active release."""


class LiveRequirements(Mapping[str, RuntimeRequirement]):
    """The attestation requirements of a running gate, read again at every release switch.

    The gate reads ``GateConfig.attestation`` on every proposal; ``runtime add``
    writes the new runtime's requirement into the state directory BEFORE it
    publishes the release that trusts its key, and :meth:`follow` (the gate's
    ``on_release``, called in the same step as the registry switch, before any
    proposal is decided under it) reads the file again. So a runtime is never
    trusted without its requirement, and nothing needs a restart.

    Fails closed: a runtime id the new registry names that the gate did not know
    at start and the file does not name (a gate whose state directory is not the
    operator's, on a cluster) must attest (:data:`STRICT`); a file that cannot be
    read keeps the requirements held so far, and every other runtime of the new
    registry not known exempt at start is held to :data:`STRICT` (the error is
    logged). Exempt at start means: in the registry the gate started with and not
    named in the file (the scripted demo runtime, which cannot attest).
    """

    def __init__(self, state: StateDir, registry: KeyRegistry) -> None:
        self._state = state
        self._current = load_attestation_requirements(state)
        self._exempt = _runtime_ids(registry) - set(self._current)

    def __getitem__(self, runtime_id: str) -> RuntimeRequirement:
        return self._current[runtime_id]

    def __iter__(self) -> Iterator[str]:
        return iter(self._current)

    def __len__(self) -> int:
        return len(self._current)

    def follow(self, release: VerifiedRelease) -> None:
        """Read the requirements again for ``release``'s registry."""
        try:
            current = load_attestation_requirements(self._state)
        except Exception as exc:  # noqa: BLE001 - whatever it was, fail closed below
            log.error("attestation_settings_unreadable", error=type(exc).__name__)
            current = dict(self._current)
        for runtime_id in _runtime_ids(release.registry) - set(current) - self._exempt:
            log.warning("attestation_requirement_defaulted", runtime_id=runtime_id)
            current[runtime_id] = STRICT
        self._current = current


def _runtime_ids(registry: KeyRegistry) -> set[str]:
    return {
        p.entry.runtime_id
        for p in registry.principals.values()
        if p.entry.role == "runtime" and p.entry.runtime_id is not None
    }


# --- OpenClaw ---------------------------------------------------------

OPENCLAW_RUNTIME_ID: Final = "openclaw-demo"
OPENCLAW_PRINCIPAL: Final = "openclaw-runtime"
"""The demo's OpenClaw runtime: its key is ``keys/openclaw-runtime.key`` in the state
directory, the plugin's ``keyFile`` (smf_assurance/adapters/openclaw/README.md)."""
OPENCLAW_PIN: Final = "2026.9.6"
"""The OpenClaw version the plugin is built and tested for
(``smf_assurance/adapters/openclaw/src/index.ts``)."""
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
    ``smf_assurance.subjects.attestation``): the gate refuses this runtime's proposals until
    the plugin has attested OpenClaw ``OPENCLAW_PIN`` with both of its hooks
    present and the gate's active release, verified by the plugin itself
    (``smf_assurance/adapters/openclaw/src/attest.ts``). An OpenClaw surface that never loads
    the plugin (``openclaw agent exec``) never attests, so it is refused here, and
    the model gateway serves it only for a proof of an attested process
    (``instance_bound``: the plugin's ``smf-gateway`` provider adds one).
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
        instance_bound=True,
    )
