"""``runtime``: onboard a Hermes or OpenClaw runtime, or revoke one.

- ``runtime add --kind hermes|openclaw --id RUNTIME_ID --tenant T --release-key FILE``:
  makes the runtime's Ed25519 key, its bus credential (nkey seed) and its
  model-gateway token (each a new 0600 file under ``keys/``; no secret is
  printed), and its launcher's key and bus credential (``ID-launcher``: ``runtime
  run`` attests with them that the runtime runs confined; docs/CONFINEMENT.md), adds
  both to the registry, requires its start-up attestation (as its
  adapter attests: the pinned version, the hooks, the gate's release verified
  by itself; Hermes's model requests must also prove the attested process),
  declares its model-gateway profile (for whom it works, where its replies go),
  signs the NEXT release with the operator's release keys and publishes it as
  ``release publish`` does. It writes the runtime's context file and the
  configuration snippet its adapter needs (``smf_assurance.ops.runtimes.snippets``) and names them.
- ``runtime remove --id RUNTIME_ID --release-key FILE``: revokes it in the next
  release the same way: its registry entries, attestation requirement and
  gateway profile go; its files stay where they are and are named.

The gate that adopts the release trusts the new key from that moment, and
requires its attestation from the same moment
(``smf_assurance.ops.runtimes.provision.LiveRequirements``):
until the adapter attests, its proposals are refused
``runtime_attestation_missing``. The model gateway reads its profiles when it
starts: a running one serves a new runtime after a restart (and refuses a
removed one at once: the gate no longer admits it).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import Final, get_args

import msgspec

from smf_assurance.adapters.hermes.attestation import HERMES_PIN
from smf_assurance.adapters.hermes.config import ADAPTER_ID as HERMES_ADAPTER
from smf_assurance.adapters.hermes.config import REQUIRED_HOOKS as HERMES_HOOKS
from smf_assurance.gateway.assembly import (
    GatewayFile,
    GatewayFileError,
    load_gateway_file,
)
from smf_assurance.ops.cli.cli_json import (
    AttestationRequirementJson,
    RuntimeAddJson,
    RuntimeFilesJson,
    RuntimeRemoveJson,
)
from smf_assurance.ops.cli.commands.onboard import (
    authority_of,
    finish,
    refusals_in_one_line,
    runtime_bus,
    sign_and_publish,
    state_of,
)
from smf_assurance.ops.local.bus_auth import new_user_seed, public_user
from smf_assurance.ops.local.confine.profile import launcher_principal
from smf_assurance.ops.local.model_gateway import (
    gateway_file,
    new_gateway_token,
    token_path,
    with_gateway_runtime,
    without_gateway_runtime,
)
from smf_assurance.ops.local.onboarding import Changes, OnboardingError, read_registry, state_lock
from smf_assurance.ops.local.state import StateDir
from smf_assurance.ops.runtimes.provision import (
    OPENCLAW_HOOKS,
    OPENCLAW_PIN,
    AttestationFile,
    AttestationSetting,
    attestation_settings_path,
    read_attestation_file,
    with_attestation,
    with_runtime_entry,
    without_runtime,
)
from smf_assurance.ops.runtimes.snippets import Endpoints, Kind, RuntimeFiles, context, snippet
from smf_assurance.subjects.envelope import Surface
from smf_assurance.subjects.keys import generate_signing_key, private_key_document
from smf_assurance.subjects.messages import ActorContext, DataFacts, ProposedDestination
from smf_assurance.subjects.names import SubjectError, token
from smf_assurance.subjects.registry import RegistryFile, entry_for

OPENCLAW_ADAPTER: Final = "smf-openclaw-adapter"
"""``smf_assurance/adapters/openclaw/src/gate.ts`` ADAPTER_ID."""
RUNTIMES_DIR: Final = "runtimes"
"""Beside ``keys/``: each runtime's context file and configuration snippet."""


@dataclass(frozen=True, slots=True)
class KindProfile:
    """What each runtime's adapter attests and how the model gateway serves it."""

    adapter_id: str
    setting: AttestationSetting
    account_tool_calls: bool
    checks_tool_arguments: bool
    refuses_invalid_json_turns: bool
    snippet_suffix: str


KINDS: Final[dict[str, KindProfile]] = {
    "hermes": KindProfile(
        adapter_id=HERMES_ADAPTER,
        # docs/HERMES.md: the pin, both hooks, the release it verified; the adapter proves
        # its process on every model request (instance_bound, finding 10)
        setting=AttestationSetting(
            runtime_pin=HERMES_PIN,
            required_hooks=HERMES_HOOKS,
            require_release=True,
            instance_bound=True,
        ),
        account_tool_calls=True,
        # Hermes coerces a call's arguments and runs it, whatever its schema says
        checks_tool_arguments=False,
        # ...but answers every call of a turn whose arguments are not JSON itself, before
        # any hook, when it did not stream the turn (docs/HERMES.md)
        refuses_invalid_json_turns=True,
        snippet_suffix="hermes.sh",
    ),
    "openclaw": KindProfile(
        adapter_id=OPENCLAW_ADAPTER,
        # smf_assurance/adapters/openclaw/README.md: the pin, both hooks, the release it verified;
        # the
        # plugin proves its process on every model request through its smf-gateway
        # provider (docs/OPENCLAW.md, "Binding model requests to the process")
        setting=AttestationSetting(
            runtime_pin=OPENCLAW_PIN,
            required_hooks=OPENCLAW_HOOKS,
            require_release=True,
            instance_bound=True,
        ),
        # the plugin puts the call's id into its proposals (docs/OPENCLAW.md finding 8)
        account_tool_calls=True,
        # OpenClaw runs no call whose arguments fail the tool's schema (docs/OPENCLAW.md)
        checks_tool_arguments=True,
        # it ends such a turn as a failed stream; what its session repair then sends back
        # for the calls was not established (docs/OPENCLAW.md), so their results stop it
        refuses_invalid_json_turns=False,
        snippet_suffix="openclaw.json",
    ),
}


# --- add -------------------------------------------------------------------------------------


def _checked_id(runtime_id: str) -> str:
    try:
        return token(runtime_id)
    except SubjectError:
        raise OnboardingError(
            f"--id: {runtime_id!r} is not a runtime id (letters, digits, - and _; at most 64)"
        ) from None


def _actor(args: argparse.Namespace) -> ActorContext:
    try:
        token(args.tenant)  # it names the tenant's pending subject, smf.approval.pending.<t>
    except SubjectError:
        raise OnboardingError(f"--tenant: {args.tenant!r} is not a tenant id") from None
    fields = {
        "domain": args.domain,
        "tenant_id": args.tenant,
        "organization_id": args.organization or args.tenant,
        "matter_id": args.matter,
        "actor_id": args.actor_id or args.runtime_id,
        "actor_roles": tuple(args.actor_role),
        "governing_laws": tuple(args.governing_law),
    }
    try:
        return msgspec.convert(fields, type=ActorContext)
    except msgspec.ValidationError as exc:
        raise OnboardingError(f"who it works for: {exc}") from exc


def _facts(path: Path | None) -> DataFacts:
    if path is None:
        return DataFacts()
    try:
        return msgspec.json.decode(path.read_bytes(), type=DataFacts)
    except OSError as exc:
        raise OnboardingError(f"--facts: cannot read {path}: {exc.strerror}") from exc
    except msgspec.DecodeError as exc:
        raise OnboardingError(f"--facts {path}: {exc}") from exc


def _gateway(state: StateDir) -> GatewayFile:
    path = gateway_file(state)
    if not path.exists():
        raise OnboardingError(
            f"no model gateway in {state.root} (no {path.name}): name its provider first, "
            "`smf-assurance model-gateway upstream URL --provider NAME`"
        )
    try:
        return load_gateway_file(path)
    except GatewayFileError as exc:
        raise OnboardingError(str(exc)) from exc


def _settings(state: StateDir) -> AttestationFile:
    try:
        return read_attestation_file(state)
    except (OSError, msgspec.DecodeError) as exc:
        path = attestation_settings_path(state)
        raise OnboardingError(f"the attestation settings {path} cannot be read: {exc}") from exc


def _refuse_duplicates(
    registry: RegistryFile,
    gateway: GatewayFile,
    settings: AttestationFile,
    runtime_id: str,
) -> None:
    """One id, one runtime: an id already in use anywhere is refused, never replaced."""
    for entry in registry.entries:
        if entry.role == "runtime" and entry.runtime_id == runtime_id:
            raise OnboardingError(f"runtime {runtime_id} is already in the registry")
        if entry.key.principal in (runtime_id, launcher_principal(runtime_id)):
            raise OnboardingError(f"principal {entry.key.principal} is already in the registry")
    if any(r.runtime_id == runtime_id for r in gateway.runtimes):
        raise OnboardingError(f"runtime {runtime_id} already has a model-gateway profile")
    if runtime_id in settings.runtimes:
        raise OnboardingError(f"runtime {runtime_id} already has an attestation requirement")


def _files(state: StateDir, kind: KindProfile, runtime_id: str, given: Path | None) -> RuntimeFiles:
    folder = state.root / RUNTIMES_DIR
    return RuntimeFiles(
        key=state.key_path(runtime_id).absolute(),
        bus_credential=state.bus_credential_path(runtime_id).absolute(),
        gateway_token=token_path(state, runtime_id).absolute(),
        context=(folder / f"{runtime_id}.context.json").absolute(),
        snippet=(given or folder / f"{runtime_id}.{kind.snippet_suffix}").absolute(),
        trust_root=state.trust_root.absolute(),
    )


@refusals_in_one_line
def run_add(args: argparse.Namespace) -> int:
    state = state_of(args)
    runtime_id = _checked_id(args.runtime_id)
    kind_name: Kind = args.kind
    kind = KINDS[kind_name]
    actor = _actor(args)
    facts = _facts(args.facts)
    destination = ProposedDestination(address=args.destination, locality=args.locality)
    surface: Surface = args.surface
    assert surface in get_args(Surface)
    with state_lock(state):
        registry = read_registry(state)
        gateway = _gateway(state)
        settings = _settings(state)
        _refuse_duplicates(registry, gateway, settings, runtime_id)
        authority = authority_of(state, args)

        key = generate_signing_key()
        seed = new_user_seed()
        nats_user = public_user(seed)
        secret = new_gateway_token()
        entry = entry_for(key, runtime_id, "runtime", runtime_id=runtime_id, nats_user=nats_user)
        launcher = launcher_principal(runtime_id)
        launcher_key = generate_signing_key()
        launcher_seed = new_user_seed()
        launcher_entry = entry_for(
            launcher_key,
            launcher,
            "launcher",
            runtime_id=runtime_id,
            nats_user=public_user(launcher_seed),
        )
        files = _files(state, kind, runtime_id, args.snippet)
        endpoints = Endpoints(
            nats_url=args.bus_url or runtime_bus(args, state),
            gateway_url=args.gateway_url,
            model=args.model,
        )
        changes = Changes()
        changes.create(files.key, private_key_document(key, runtime_id) + b"\n")
        changes.create(files.bus_credential, seed + b"\n")
        changes.create(files.gateway_token, secret.encode())
        # the launcher's (`runtime run`): never in the runtime's sandbox, it attests confinement
        changes.create(
            state.key_path(launcher), private_key_document(launcher_key, launcher) + b"\n"
        )
        changes.create(state.bus_credential_path(launcher), launcher_seed + b"\n")
        changes.create(files.context, context(kind_name, actor, facts, destination))
        changes.create(files.snippet, snippet(kind_name, runtime_id, files, endpoints, secret))
        changes.replace(
            attestation_settings_path(state),
            msgspec.json.encode(with_attestation(settings, runtime_id, kind.setting)),
        )
        served = with_gateway_runtime(
            gateway,
            runtime_id,
            secret,
            adapter_id=kind.adapter_id,
            actor=actor,
            destination=destination,
            surface=surface,
            facts=facts,
            account_tool_calls=kind.account_tool_calls,
            checks_tool_arguments=kind.checks_tool_arguments,
            refuses_invalid_json_turns=kind.refuses_invalid_json_turns,
        )
        changes.replace(gateway_file(state), msgspec.json.encode(served))
        outcome = sign_and_publish(
            state,
            args,
            authority,
            with_runtime_entry(with_runtime_entry(registry, entry), launcher_entry),
            changes,
        )
    setting = kind.setting
    value = RuntimeAddJson(
        runtime_id=runtime_id,
        kind=kind_name,
        principal=runtime_id,
        tenant_id=args.tenant,
        key_id=key.key_id,
        nats_user=nats_user,
        adapter_id=kind.adapter_id,
        attestation=AttestationRequirementJson(
            runtime_pin=setting.runtime_pin,
            required_hooks=setting.required_hooks,
            lease_ms=setting.lease_ms,
            require_release=setting.require_release,
            instance_bound=setting.instance_bound,
        ),
        files=RuntimeFilesJson(
            key=str(files.key),
            bus_credential=str(files.bus_credential),
            gateway_token=str(files.gateway_token),
            context=str(files.context),
            snippet=str(files.snippet),
        ),
        policies_from=outcome.policies_from,
        release=outcome.json(),
    )
    rows = [
        ("runtime", f"{runtime_id} ({kind_name}, adapter {kind.adapter_id})"),
        ("tenant", args.tenant),
        ("key id", key.key_id),
        ("bus user", nats_user),
        (
            "must attest",
            f"{kind_name} {setting.runtime_pin}, hooks {', '.join(setting.required_hooks)}, "
            "the gate's release"
            + (", its process on every model request" if setting.instance_bound else ""),
        ),
        ("key file", files.key),
        ("bus credential", files.bus_credential),
        ("gateway token", f"{files.gateway_token} (never printed)"),
        ("launcher", f"{launcher} (`runtime run` attests confinement with its key)"),
        ("context", files.context),
        ("snippet", f"{files.snippet} (0600: it holds the gateway token)"),
        ("policies", _policies(outcome.policies_from)),
    ]

    def notes() -> list[str]:
        return [
            f"give the runtime its snippet: {files.snippet}",
            "a running model gateway serves it after a restart (it reads "
            f"{gateway_file(state).name} when it starts)",
        ]

    return finish(args, outcome, value, rows, notes)


def _policies(source: str) -> str:
    return "carried from the prior release" if source == "prior" else "compiled from --corpus"


# --- remove -----------------------------------------------------------------------------------


@refusals_in_one_line
def run_remove(args: argparse.Namespace) -> int:
    state = state_of(args)
    runtime_id = _checked_id(args.runtime_id)
    with state_lock(state):
        registry = read_registry(state)
        kept, gone = without_runtime(registry, runtime_id)
        if not gone:
            raise OnboardingError(f"no runtime {runtime_id} in the registry of {state.root}")
        settings = _settings(state)
        authority = authority_of(state, args)
        changes = Changes()
        required = runtime_id in settings.runtimes
        if required:
            changes.replace(
                attestation_settings_path(state),
                msgspec.json.encode(with_attestation(settings, runtime_id, None)),
            )
        profiled = False
        if gateway_file(state).exists():
            gateway = _gateway(state)
            profiled = any(r.runtime_id == runtime_id for r in gateway.runtimes)
            if profiled:
                changes.replace(
                    gateway_file(state),
                    msgspec.json.encode(without_gateway_runtime(gateway, runtime_id)),
                )
        outcome = sign_and_publish(state, args, authority, kept, changes)
    principals = tuple(e.key.principal for e in gone)
    left = _left_files(state, runtime_id, principals)
    value = RuntimeRemoveJson(
        runtime_id=runtime_id,
        principals=principals,
        key_ids=tuple(e.key.key_id for e in gone),
        attestation_requirement_removed=required,
        gateway_profile_removed=profiled,
        left_files=tuple(str(p) for p in left),
        policies_from=outcome.policies_from,
        release=outcome.json(),
    )
    rows = [
        ("runtime", runtime_id),
        ("principals removed", ", ".join(principals)),
        ("key ids revoked", ", ".join(e.key.key_id for e in gone)),
        ("attestation requirement", "removed" if required else "- (there was none)"),
        ("gateway profile", "removed" if profiled else "- (there was none)"),
        ("files left in place", ", ".join(str(p) for p in left) or "-"),
        ("policies", _policies(outcome.policies_from)),
    ]
    return finish(args, outcome, value, rows)


def _left_files(state: StateDir, runtime_id: str, principals: tuple[str, ...]) -> list[Path]:
    """The runtime's files that stay: its keys are no longer trusted by any gate that
    adopted the release, and the operator decides when to destroy them."""
    candidates = [
        *(state.key_path(p) for p in principals),
        *(state.bus_credential_path(p) for p in principals),
        token_path(state, runtime_id),
        *sorted((state.root / RUNTIMES_DIR).glob(f"{runtime_id}.*")),
    ]
    return [path.absolute() for path in dict.fromkeys(candidates) if path.exists()]
