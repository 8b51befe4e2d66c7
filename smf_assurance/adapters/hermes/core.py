"""What every part of the Hermes adapter shares: its state and its proposal client.

One :class:`AdapterCore` per Hermes process (``smf_assurance.adapters.hermes.plugin``
assembles it with refusing mode, the lifecycle and the hook families into
``HermesAdapter``). The parts are mixins over this class so that Hermes still
gets plain bound methods as callbacks, whose identity the attestation checks
in Hermes's plugin manager (``attestation.hook_presence``).
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from nats.aio.client import Client

from smf_assurance.adapters.client import ProposalClient
from smf_assurance.adapters.hermes import mapping
from smf_assurance.adapters.hermes.allowed import AllowedCalls, PendingCallIds
from smf_assurance.adapters.hermes.attestation import Host
from smf_assurance.adapters.hermes.bridge import Bridge
from smf_assurance.adapters.hermes.config import ADAPTER_ID, AdapterConfig
from smf_assurance.adapters.hermes.release import ReleaseVerifier, UsableRelease
from smf_assurance.subjects.attestation import AttestationAck, StreamingSetting
from smf_assurance.subjects.clock import wall_clock_ms
from smf_assurance.subjects.keys import VerifyKey
from smf_assurance.subjects.model_gateway import new_instance_id
from smf_assurance.subjects.release import ReleaseCheckError


@dataclass
class AdapterCore(ABC):
    """The plugin's state: one per Hermes process, created by ``plugin.build_adapter``."""

    config: AdapterConfig | None
    host: Host
    problems: list[str] = field(default_factory=list)
    bridge: Bridge | None = None
    taint: mapping.SessionTaint = field(default_factory=mapping.SessionTaint)
    last_ack: AttestationAck | None = None
    streaming: tuple[StreamingSetting, ...] = ()
    clock: Callable[[], int] = wall_clock_ms
    """Unix ms; the clock the release lease is checked against."""
    release: UsableRelease | None = None
    """The release this adapter verified last; ``None`` until one verified."""
    release_problem: str | None = None
    """Why the last release check failed (refusing mode while set)."""
    verifier: ReleaseVerifier | None = None
    handlers: dict[str, Callable[..., str]] = field(default_factory=dict)
    """Our connector tools' handlers, by tool name (compared by identity)."""
    allowed: AllowedCalls = field(default_factory=AllowedCalls)
    """The calls the gate allowed, for the executed-arguments check."""
    pending_ids: PendingCallIds = field(default_factory=PendingCallIds)
    """Tool-call ids of our connector tools, from ``pre_tool_call`` to their handler."""
    instance_id: str = field(default_factory=new_instance_id)
    """This process, attested and proven on every model request
    (``hooks.model_request``)."""
    _attested: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        root = self.config.trust_root if self.config is not None else None
        if root is not None and self.verifier is None:
            try:
                self.verifier = ReleaseVerifier(root, self.clock)
            except ReleaseCheckError as exc:
                self.release_problem = exc.reason_code

    @abstractmethod
    def callbacks(self) -> dict[str, Callable[..., Any]]:
        """Our hooks by Hermes hook name, as registered (and attested by identity)."""

    def _is_ours(self, tool: str) -> bool:
        handler = self.handlers.get(tool)
        return handler is not None and self.host.tool_handler(tool) is handler

    def _proposal_client(self, nc: Client, config: AdapterConfig) -> ProposalClient:
        """Our proposal client on the bridge's connection (native calls and our tools)."""
        return ProposalClient(
            nc,
            config.key,
            config.runtime_id,
            self._runtime_version(),
            ADAPTER_ID,
            timeout=config.gate_timeout,
            gate_keys=self._gate_keys(),
        )

    def _gate_keys(self) -> Mapping[str, VerifyKey]:
        """The gate keys of the verified release; none (every verdict refused) without
        one. Verdicts are read only when signed by one of them
        (``smf_assurance.subjects.verdicts``)."""
        release = self.release
        return {} if release is None else release.gate_keys

    def _runtime_version(self) -> str:
        try:
            return self.host.version()[:256] or "unknown"
        except Exception:  # noqa: BLE001 - fail closed on anything (RUNTIMES.md, FAIL-OPEN)
            return "unknown"
