"""What ``runtime add/remove`` and ``approver add/remove`` share.

Each of them edits the registry (and, for a runtime, its attestation
requirement and model-gateway profile), then signs the NEXT release with the
operator's release keys and publishes it exactly as ``release publish`` does,
waiting for the gates' signed word. The order is what keeps a refusal from
leaving anything half-written (``smf_assurance.ops.local.onboarding``):

1. read and check everything (registry, trust root, release keys, prior
   release, the command's own input) and sign and verify the release in
   memory; with ``--nats``, reach the bus once;
2. write every file of the change (undone if one write fails);
3. publish; if the release could not leave, undo step 2. Once it has left,
   the files stay: they say what the release says, and a gate that refuses it
   or says nothing within ``--wait`` is reported with exit 1.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import binascii
import functools
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import msgspec
import nkeys

from smf_assurance.governance.releases import ReleaseError
from smf_assurance.ops.cli.cli_json import CliJson, PoliciesFrom, ReleasePublishJson
from smf_assurance.ops.cli.commands.release import (
    Published,
    adoption_line,
    adoption_problem,
    publish_bundle,
)
from smf_assurance.ops.cli.output import emit, fail, say, table
from smf_assurance.ops.local.bus import (
    connect_bus,
    credential_for,
    nats_url_path,
)
from smf_assurance.ops.local.defaults import PUBLISHER, default_state_dir
from smf_assurance.ops.local.onboarding import (
    Authority,
    Changes,
    OnboardingError,
    bundle_of,
    next_release,
    registry_bytes,
    release_authority,
)
from smf_assurance.ops.local.state import StateDir
from smf_assurance.subjects.bus_access import BusCredential
from smf_assurance.subjects.clock import wall_clock_ms
from smf_assurance.subjects.keys import KeyFileError, PublicKeyRecord, verify_key_from_record
from smf_assurance.subjects.registry import RegistryFile

DEFAULT_RUNTIME_BUS: Final = "nats://127.0.0.1:4222"
MAX_RECORD_BYTES: Final = 64 * 1024
USER: Final = re.compile(r"U[A-Z2-7]{55}")


def read_public_record(path: Path) -> PublicKeyRecord:
    """A principal's public record (an approver's, a rotation's new key), checked: its
    key id is its key's. A private key file is refused, so no principal's secret passes
    through the operator's seat."""
    try:
        with path.open("rb") as handle:
            data = handle.read(MAX_RECORD_BYTES + 1)
    except OSError as exc:
        raise OnboardingError(f"--public-key: cannot read {path}: {exc.strerror}") from exc
    try:
        document = msgspec.json.decode(data)
    except msgspec.DecodeError:
        document = None
    if isinstance(document, dict) and "secret_seed" in document:
        raise OnboardingError(
            f"--public-key {path} is a PRIVATE key: hand over only its public record "
            "(`smf-assurance keys public --key FILE --json`), and keep this file where it was"
        )
    if len(data) > MAX_RECORD_BYTES:
        raise OnboardingError(f"--public-key {path} is not a public key record (too large)")
    try:
        record = msgspec.json.decode(data, type=PublicKeyRecord)
        verify_key_from_record(record)
    except (msgspec.DecodeError, KeyFileError) as exc:
        raise OnboardingError(f"--public-key {path} is not a public key record: {exc}") from exc
    return record


def checked_bus_user(text: str) -> str:
    """A NATS user public key: ``U``, 55 base32 characters, a checksum that holds."""
    if not USER.fullmatch(text):
        raise OnboardingError(f"--bus-user: {text!r} is not a NATS user public key (U...)")
    try:
        raw = base64.b32decode(text + "=" * (-len(text) % 8))
    except (binascii.Error, ValueError):
        raise OnboardingError(f"--bus-user: {text!r} is not base32") from None
    if raw[0] != nkeys.PREFIX_BYTE_USER or nkeys.crc16_checksum(raw[:-2]) != raw[-2:]:
        raise OnboardingError(f"--bus-user: {text!r} has a wrong checksum or prefix")
    return text


def refusals_in_one_line(
    run: Callable[[argparse.Namespace], int],
) -> Callable[[argparse.Namespace], int]:
    """A command whose :class:`OnboardingError` is its one-line refusal (exit 1)."""

    @functools.wraps(run)
    def wrapped(args: argparse.Namespace) -> int:
        try:
            return run(args)
        except OnboardingError as exc:
            fail(str(exc))

    return wrapped


def state_of(args: argparse.Namespace) -> StateDir:
    """The state directory, which must hold a registry (``up`` or ``demo`` made it)."""
    state = StateDir(args.state_dir or default_state_dir())
    if not state.registry.exists():
        fail(f"no gate state in {state.root} (no registry.json): pass --state-dir DIR")
    return state


def authority_of(state: StateDir, args: argparse.Namespace) -> Authority:
    return release_authority(
        state,
        key_paths=args.release_key,
        trust_root=args.trust_root,
        corpus=args.corpus,
        prior_dir=args.prior,
        lease_hours=args.lease_hours,
    )


def runtime_bus(args: argparse.Namespace, state: StateDir) -> str:
    """The bus a runtime connects to: ``--nats``, else the URL a running ``up`` wrote,
    else the default of the adapters."""
    if args.nats:
        return str(args.nats)
    try:
        written = nats_url_path(state.root).read_text(encoding="utf-8").strip()
    except OSError:
        written = ""
    return written or DEFAULT_RUNTIME_BUS


@dataclass(frozen=True, slots=True)
class Outcome:
    """The release a change was published in, and what the gates said."""

    published: Published
    policies_from: PoliciesFrom

    def json(self) -> ReleasePublishJson:
        return self.published.json()


async def _probe(url: str, credential: BusCredential | None) -> None:
    nc = await connect_bus(url, "smf-onboard-probe", credential)
    await nc.close()


def sign_and_publish(
    state: StateDir,
    args: argparse.Namespace,
    authority: Authority,
    registry: RegistryFile,
    changes: Changes,
) -> Outcome:
    """Sign the next release with ``registry``, write ``changes`` and the registry,
    publish; undo the writes if the release could not leave (module docstring)."""
    release = next_release(authority, registry_bytes(registry), wall_clock_ms())
    changes.replace(state.registry, registry_bytes(registry))
    credential = credential_for(args.credential, state.root, PUBLISHER) if args.nats else None
    if args.nats:
        asyncio.run(_probe(args.nats, credential))  # a dead bus: refused before any write
    changes.apply()
    left = False

    def on_published() -> None:
        nonlocal left
        left = True

    try:
        done = publish_bundle(
            bundle_of(release),
            nats=args.nats,
            state_dir=None if args.nats else state.root,
            credential=credential,
            wait_seconds=None if args.no_wait else args.wait,
            on_published=on_published,
        )
    except ReleaseError as exc:
        if left:  # pragma: no cover - publish_bundle raises it only before the release left
            fail(f"published, then: {exc}")
        changes.undo()
        fail(f"not published, nothing changed: {exc}")
    except BaseException:
        if not left:
            changes.undo()
        raise
    return Outcome(done, "prior" if authority.corpus is None else "corpus")


def finish(
    args: argparse.Namespace,
    outcome: Outcome,
    value: CliJson,
    rows: list[tuple[str, Any]],
    notes: Callable[[], list[str]] | None = None,
) -> int:
    """Print the change (``value`` with ``--json``, else ``rows`` and the publication),
    then fail with the gates' word unless every gate that answered adopted it."""
    done = outcome.published
    if args.json:
        emit(value)
    problem = adoption_problem(done, args.wait)
    if not args.json:
        table(("field", "value"), rows)
        for line in notes() if notes is not None else []:
            say(line)
        if problem is None:
            say(adoption_line(done))
    if problem is not None:
        fail(problem)
    return 0
