"""The Hermes Agent plugin: block-only enforcement through the SMF gate (issue 8).

Installed as the ``hermes_agent.plugins`` entry point ``smf-assurance`` of
our distribution; Hermes loads it when ``plugins.enabled`` lists it
(RUNTIMES.md, "Plugins"). Depends on ``subjects/`` and ``adapters.client``/
``adapters.output`` only, plus nats-py and msgspec.

Profile: block-only for Hermes's own tools. Hermes cannot hold a native call
for later approval (RUNTIMES.md: ``{"action": "approve"}`` is keyed by pattern
category and bypassed by YOLO mode), so a gate verdict that needs approval
becomes a block that says approval is not supported on this profile. A block
is not an exact-action approval and this module never presents it as one.
Approval does work for the adapter's own connector-backed tools
(``adapters.hermes.tools``): their handler executes nothing locally, it only
proposes an action the gate hands to a connector after an approval.

Governed release (issue 6): the adapter verifies the newest release of the
``SMF_RELEASES`` bucket itself (``adapters.hermes.release``), at start-up and
before every attestation, and attests the verified release id; a release that
fails verification puts the adapter in refusing mode until one verifies.

Fail-open traps this module is built around (RUNTIMES.md, "FAIL-OPEN"): a
hook that raises, a callback without ``**kwargs`` and a ``register()`` that
raises all let the tool run; a ``transform_llm_output`` that raises delivers
the ORIGINAL text. Therefore:

- every callback takes ``**kwargs`` and catches every ``Exception`` itself,
  returning a block (tools) or a withheld notice (replies) — never ``None``
  on a failure, because ``None`` means "go ahead";
- ``register()`` never raises. A configuration problem, a Hermes version off
  the pin or streaming switched on does not stop registration: the hooks are
  registered in refusing mode (every call blocked, every reply withheld),
  the problem is logged at CRITICAL and printed to stderr, and it is
  reported to the gate in the start-up attestation.

Configuration (environment of the Hermes process):

``SMF_NATS_URL``        the bus (default ``nats://127.0.0.1:4222``)
``SMF_RUNTIME_KEY``     path of this runtime's private key file (required)
``SMF_RUNTIME_ID``      the runtime id the registry names for that key (required)
``SMF_CONTEXT_FILE``    the per-matter context file (required; ``mapping.HermesContext``)
``SMF_RELEASE_TRUST_ROOT`` the release trust root file (required; ``release trust-root``)
``SMF_GATE_TIMEOUT``    seconds to wait for a verdict (default 5, at most 30)
``SMF_ATTEST_INTERVAL`` seconds between attestations (default 60)
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import secrets
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import msgspec
from nats.aio.client import Client
from nats.errors import NoRespondersError

from adapters.client import ProposalClient
from adapters.hermes import mapping, tools
from adapters.hermes.attestation import (
    HERMES_PIN,
    STREAMING_OFF_HELP,
    HermesHost,
    Host,
    hook_presence,
)
from adapters.hermes.bridge import Bridge, BridgeError
from adapters.hermes.release import (
    UNAVAILABLE,
    ReleaseUnavailableError,
    ReleaseVerifier,
    UsableRelease,
    read_newest,
    wall_clock_ms,
)
from adapters.output import OutputStreamer
from subjects import names
from subjects.attestation import AttestationAck, RuntimeAttestation, StreamingSetting
from subjects.dsse import encode_envelope, sign_struct
from subjects.envelope import Surface
from subjects.keys import KeyFileError, SigningKey, VerifyKey, load_private_key
from subjects.messages import OutputVerdict, Verdict
from subjects.release import (
    DEFAULT_MAX_SKEW_MS,
    ReleaseCheckError,
    ReleaseFormatError,
    TrustRoot,
    check_lease_in_force,
    decode_trust_root,
)

log = logging.getLogger("smf.hermes")

ADAPTER_ID: Final = "smf-hermes-adapter"
ADAPTER_VERSION: Final = "0.1.0"
PLUGIN_NAME: Final = "smf-assurance"
PROFILE: Final = "block-only"
REQUIRED_HOOKS: Final = ("pre_tool_call", "transform_llm_output")
OUTPUT_CHUNK_BYTES: Final = 16 * 1024
APPROVAL_TTL_S: Final = 300.0
MAX_APPROVED: Final = 4096
INTERNAL_ERROR: Final = "adapter_internal_error"
RELEASE_NOT_VERIFIED: Final = "release_not_verified"
GATE_RELEASE_MISMATCH: Final = "runtime_release_mismatch"
"""The gate's reason when the attested release is not its active one (re-attest)."""
NO_VERDICT_REASONS: Final = frozenset({"gate_timeout", "gate_transport_error"})
"""A proposal may have reached the gate without its verdict reaching us."""
MAX_TRUST_ROOT_BYTES: Final = 64 * 1024
REFUSED_ACK_RETRY_S: Final = 5.0
WITHHELD_INTERNAL: Final = (
    "[SMF Assurance: this reply was withheld (adapter_internal_error). "
    "It was not released by the gate.]"
)


class ConfigError(Exception):
    def __init__(self, reason_code: str, detail: str = "") -> None:
        super().__init__(f"{reason_code}: {detail}" if detail else reason_code)
        self.reason_code = reason_code
        self.detail = detail


@dataclass(frozen=True, slots=True)
class AdapterConfig:
    nats_url: str
    key: SigningKey
    runtime_id: str
    context: mapping.HermesContext
    gate_timeout: float = 5.0
    attest_interval: float = 60.0
    trust_root: TrustRoot | None = None
    """The release trust root; ``None`` only when built by hand (then: refusing)."""

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> AdapterConfig:
        """Read the configuration; raises ConfigError naming what is missing or wrong."""
        key_path = env.get("SMF_RUNTIME_KEY", "")
        runtime_id = env.get("SMF_RUNTIME_ID", "")
        context_path = env.get("SMF_CONTEXT_FILE", "")
        if not key_path:
            raise ConfigError("smf_runtime_key_missing", "set SMF_RUNTIME_KEY to the key file")
        if not runtime_id:
            raise ConfigError("smf_runtime_id_missing", "set SMF_RUNTIME_ID")
        if not context_path:
            raise ConfigError("smf_context_missing", "set SMF_CONTEXT_FILE")
        try:
            key, _ = load_private_key(key_path)
        except KeyFileError as exc:
            raise ConfigError("smf_runtime_key_unreadable", str(exc)) from exc
        try:
            context = mapping.load_context(Path(context_path))
        except mapping.MappingError as exc:
            raise ConfigError(
                exc.reason_code, str(exc).removeprefix(exc.reason_code + ": ")
            ) from exc
        return cls(
            nats_url=env.get("SMF_NATS_URL", "nats://127.0.0.1:4222"),
            key=key,
            runtime_id=runtime_id,
            context=context,
            gate_timeout=_seconds(env.get("SMF_GATE_TIMEOUT"), 5.0, 0.2, 30.0),
            attest_interval=_seconds(env.get("SMF_ATTEST_INTERVAL"), 60.0, 1.0, 600.0),
            trust_root=_trust_root(env.get("SMF_RELEASE_TRUST_ROOT", "")),
        )


def _trust_root(path: str) -> TrustRoot:
    """The operator's release trust root (distributed out of band, docs/RELEASES.md)."""
    if not path:
        raise ConfigError(
            "smf_release_trust_root_missing", "set SMF_RELEASE_TRUST_ROOT to the trust root file"
        )
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_TRUST_ROOT_BYTES + 1)
    except OSError as exc:
        raise ConfigError("smf_release_trust_root_unreadable", exc.strerror or "") from exc
    if len(data) > MAX_TRUST_ROOT_BYTES:
        raise ConfigError("smf_release_trust_root_invalid", "file too large")
    try:
        return decode_trust_root(data)
    except ReleaseFormatError as exc:
        raise ConfigError("smf_release_trust_root_invalid", str(exc)) from exc


def _seconds(raw: str | None, default: float, low: float, high: float) -> float:
    try:
        value = float(raw) if raw else default
    except ValueError:
        value = default
    return min(max(value, low), high)


def block(message: str) -> dict[str, str]:
    return {"action": "block", "message": message}


def _digest(tool: str, args: object) -> str:
    raw = json.dumps([tool, args], sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(raw.encode()).hexdigest()


@dataclass
class HermesAdapter:
    """The plugin's state: one per Hermes process, created by :func:`register`."""

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
    _attested: threading.Event = field(default_factory=threading.Event)
    _approved: dict[tuple[str, str], float] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self.handlers = {tool.name: self._handler_for(tool) for tool in tools.CONNECTOR_TOOLS}
        root = self.config.trust_root if self.config is not None else None
        if root is not None and self.verifier is None:
            try:
                self.verifier = ReleaseVerifier(root, self.clock)
            except ReleaseCheckError as exc:
                self.release_problem = exc.reason_code

    # -- lifecycle ----------------------------------------------------------------

    def callbacks(self) -> dict[str, Callable[..., Any]]:
        return {
            "pre_tool_call": self.pre_tool_call,
            "transform_llm_output": self.transform_llm_output,
            "post_tool_call": self.post_tool_call,
            "subagent_start": self.subagent_start,
        }

    def start(self) -> None:
        """Open the bridge and send the first attestation (never raises)."""
        if self.config is None:
            return
        try:
            self.bridge = Bridge(self.config.nats_url).start()
            self.bridge.submit(self._attest_forever)
        except Exception as exc:  # noqa: BLE001 - any failure here means refusing mode
            self.refuse("bridge_start_failed", repr(exc))

    def refuse(self, problem: str, detail: str = "") -> None:
        """Switch to refusing mode, loudly."""
        if problem not in self.problems:
            self.problems.append(problem)
        message = (
            f"SMF Assurance adapter REFUSES to run ({problem}{': ' + detail if detail else ''}). "
            "Every tool call will be BLOCKED and every reply WITHHELD until this is fixed."
        )
        log.critical(message)
        sys.stderr.write(f"[smf-assurance] {message}\n")
        sys.stderr.flush()

    def refusals(self) -> tuple[str, ...]:
        """Why the adapter refuses to run right now; empty means it runs."""
        reasons = list(self.problems)
        release = self._release_refusal()
        if release is not None:
            reasons.append(release)
        return tuple(dict.fromkeys(reasons))

    def _release_refusal(self) -> str | None:
        """The release problem, or ``release_expired`` once the verified lease ran out
        under our clock; ``None`` also before the first check (callers check after
        attesting, which checks the release)."""
        if self.release_problem is not None:
            return self.release_problem
        release = self.release
        if release is None:
            return None
        try:
            # check for a freeze attack between two reads: the lease, now
            check_lease_in_force(release.lease_expires_at_ms, self.clock() + DEFAULT_MAX_SKEW_MS)
        except ReleaseCheckError as exc:
            return exc.reason_code
        return None

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
        one. Verdicts are read only when signed by one of them (``subjects.verdicts``)."""
        release = self.release
        return {} if release is None else release.gate_keys

    def _release_in_force(self) -> str | None:
        """After attesting: the reason not to propose, or ``None`` with a verified release."""
        refusal = self._release_refusal()
        if refusal is None and self.release is None:
            refusal = RELEASE_NOT_VERIFIED
        return refusal

    # -- the governed release -----------------------------------------------------

    async def _check_release(self, nc: Client) -> None:
        """Read the newest release of the bucket and verify it (never raises but cancel).

        On success the verified release replaces the previous one; on any failure
        the adapter holds no verified release and refuses until a check succeeds.
        """
        if self.verifier is None:
            reason = self.release_problem or "smf_release_trust_root_missing"
            self._release_failed(reason, "no usable release trust root")
            return
        try:
            usable = self.verifier.verify(await read_newest(nc))
        except ReleaseCheckError as exc:
            self._release_failed(exc.reason_code, str(exc))
        except ReleaseUnavailableError as exc:
            self._release_failed(UNAVAILABLE, str(exc))
        except Exception as exc:  # noqa: BLE001 - fail closed on anything (RUNTIMES.md, FAIL-OPEN)
            self._release_failed(UNAVAILABLE, type(exc).__name__)
        else:
            if self.release_problem is not None or self.release != usable:
                log.warning(
                    "smf release verified by the adapter: %s #%d",
                    usable.release_id,
                    usable.sequence,
                )
            self.release = usable
            self.release_problem = None

    def _release_failed(self, reason: str, detail: str) -> None:
        self.release = None
        if self.release_problem == reason:
            return  # said already; stay refusing without repeating it every tick
        self.release_problem = reason
        message = (
            f"SMF Assurance adapter REFUSES to run ({reason}: the governed release did not "
            f"verify{': ' + detail[:300] if detail else ''}). Every tool call will be BLOCKED "
            "and every reply WITHHELD until a release verifies."
        )
        log.critical(message)
        sys.stderr.write(f"[smf-assurance] {message}\n")
        sys.stderr.flush()

    def attestation(self) -> RuntimeAttestation:
        present, missing, hook_problems = hook_presence(self.host.hooks(), self.callbacks())
        for problem in hook_problems:
            if problem not in self.problems:
                self.refuse(problem)
        try:
            version = self.host.version()
        except Exception:  # noqa: BLE001 - fail closed on anything (RUNTIMES.md, FAIL-OPEN)
            version = "unknown"
        assert self.config is not None
        return RuntimeAttestation(
            schema="smf.runtime-attestation/1",
            attestation_id="a-" + secrets.token_hex(16),
            runtime_id=self.config.runtime_id,
            runtime_version=version[:256] or "unknown",
            runtime_pin=HERMES_PIN,
            adapter_id=ADAPTER_ID,
            adapter_version=ADAPTER_VERSION,
            profile=PROFILE,
            hooks_present=present,
            hooks_missing=missing,
            streaming=self.streaming,
            verified_release_id=(
                self.release.release_id
                if self.release is not None and self._release_refusal() is None
                else None
            ),
            problems=self.refusals(),
            issued_at_ms=time.time_ns() // 1_000_000,
        )

    async def _attest_once(self, nc: Client) -> AttestationAck:
        """Check the release, then attest (the attestation names what was verified)."""
        assert self.config is not None
        await self._check_release(nc)
        signed = encode_envelope(
            sign_struct(names.PAYLOAD_ATTESTATION, self.attestation(), [self.config.key])
        )
        try:
            reply = await nc.request(names.ATTEST, signed, timeout=self.config.gate_timeout)
        except NoRespondersError as exc:
            raise BridgeError("gate_unreachable", "nobody serves smf.attest") from exc
        except TimeoutError as exc:
            raise BridgeError("gate_timeout", "no attestation ack") from exc
        ack = msgspec.json.decode(reply.data, type=AttestationAck)
        previous = self.last_ack
        self.last_ack = ack
        self._attested.set()
        level = logging.INFO if ack.accepted else logging.ERROR
        if previous is not None and (previous.accepted, previous.reason_codes) == (
            ack.accepted,
            ack.reason_codes,
        ):
            level = logging.DEBUG  # nothing new: do not repeat it every tick
        log.log(
            level,
            "smf attestation %s by the gate: reasons=%s release=%s evidence_store=%s",
            "accepted" if ack.accepted else "REFUSED",
            ",".join(ack.reason_codes) or "-",
            ack.release_id,
            ack.evidence_store,
        )
        return ack

    async def _attest_forever(self) -> None:
        assert self.config is not None
        assert self.bridge is not None
        while not self.bridge.stopped:
            try:
                await self._attest_once(await self.bridge.connection())
            except Exception as exc:  # noqa: BLE001 - retried on the next tick; proposals fail closed
                log.warning("smf attestation not delivered: %s", type(exc).__name__)
            interval = self.config.attest_interval
            if not self._attested.is_set():
                interval = 1.0
            elif self.last_ack is None or not self.last_ack.accepted:
                interval = min(interval, REFUSED_ACK_RETRY_S)  # e.g. a release switch raced us
            await asyncio.sleep(interval)

    def _ensure_attested(self) -> None:
        """Attest in line before the first proposal (so the gate is not asked first), and
        again while no release verifies or the gate says ours is not its active one."""
        if self.bridge is None or self.config is None:
            return
        ack = self.last_ack
        mismatch = ack is not None and GATE_RELEASE_MISMATCH in ack.reason_codes
        # while no release verifies, every call checks the bucket again first
        if self._attested.is_set() and not mismatch and self.release_problem is None:
            return
        self.bridge.call(self._attest_once, self.config.gate_timeout)

    def _note_verdict(self, verdict: Verdict) -> None:
        """A gate that moved to another release refuses our attested one: re-attest first."""
        if verdict.outcome == "deny" and GATE_RELEASE_MISMATCH in verdict.reason_codes:
            self._attested.clear()

    # -- pre_tool_call ------------------------------------------------------------

    def pre_tool_call(self, **kwargs: Any) -> dict[str, str] | None:
        """Ask the gate; None only on an ``allow`` verdict. Never raises."""
        tool = kwargs.get("tool_name")
        label = tool if isinstance(tool, str) else "this tool"
        try:
            return self._pre_tool_call(label, kwargs)
        except BridgeError as exc:
            return block(
                f"SMF Assurance adapter blocked {label}: {exc.reason_code}. It did not run."
            )
        except mapping.MappingError as exc:
            return block(
                f"SMF Assurance adapter blocked {label}: {exc.reason_code}. It did not run."
            )
        except Exception:  # noqa: BLE001 - fail closed on anything (RUNTIMES.md, FAIL-OPEN)
            try:
                log.exception("smf pre_tool_call failed")
            finally:
                return block(  # noqa: B012 - the block must be returned whatever logging does
                    f"SMF Assurance adapter blocked {label}: {INTERNAL_ERROR}. It did not run."
                )

    def _pre_tool_call(self, label: str, kwargs: Mapping[str, Any]) -> dict[str, str] | None:
        if self.problems or self.config is None or self.bridge is None:
            return _refusing_block(label, tuple(self.problems))
        config = self.config
        tool = kwargs.get("tool_name")
        if isinstance(tool, str) and tool in self.handlers:
            return self._pre_connector_tool(label, tool, kwargs)
        session = str(kwargs.get("session_id") or "")
        call = mapping.propose_call(
            kwargs.get("tool_name"),
            kwargs.get("args"),
            session_id=session,
            context=config.context,
            taint=self.taint,
            coerce=self.host.coerce,
        )
        self._ensure_attested()
        refusal = self._release_in_force()
        if refusal is not None:
            return _refusing_block(label, (refusal,))

        async def ask(nc: Client) -> Verdict:
            client = self._proposal_client(nc, config)
            proposal = client.build(
                native_tool=call.native_tool,
                arguments=call.arguments,
                actor=config.context.actor,
                facts=call.facts,
                destination=call.destination,
                surface=call.surface,
            )
            return await client.propose(proposal)

        verdict = self.bridge.call(ask, config.gate_timeout + 1.0)
        self._note_verdict(verdict)
        return self._directive(label, verdict, str(kwargs.get("tool_call_id") or ""), call)

    def _pre_connector_tool(
        self, label: str, tool: str, kwargs: Mapping[str, Any]
    ) -> dict[str, str] | None:
        """Our connector tools ask the gate in their handler, which executes nothing
        locally; so the hook lets them through, but only while the registry runs OUR
        handler under that name (a plugin that took the name first, or overrode it,
        would otherwise run ungated)."""
        if not self._is_ours(tool):
            return block(
                f"SMF Assurance adapter blocked {label}: connector_tool_not_ours. It did not run."
            )
        arguments = mapping.final_arguments(tool, kwargs.get("args"), self.host.coerce)
        self._remember(str(kwargs.get("tool_call_id") or ""), _digest(tool, arguments))
        return None

    def _is_ours(self, tool: str) -> bool:
        handler = self.handlers.get(tool)
        return handler is not None and self.host.tool_handler(tool) is handler

    # -- connector-backed tools: the handler proposes, the gate holds or dispatches ------

    def _handler_for(self, tool: tools.ConnectorTool) -> Callable[..., str]:
        def handler(args: Any = None, **kwargs: Any) -> str:
            return self.connector_call(tool, args, **kwargs)

        handler.__name__ = handler.__qualname__ = f"{tool.name}_handler"
        return handler

    def connector_call(self, tool: tools.ConnectorTool, args: Any, **kwargs: Any) -> str:
        """The tool result for the model (JSON text). Never raises; executes nothing here."""
        try:
            return self._connector_call(tool, args, kwargs)
        except BridgeError as exc:  # before the proposal was sent: nothing reached the gate
            return tools.blocked(tool, (exc.reason_code,))
        except mapping.MappingError as exc:
            return tools.blocked(tool, (exc.reason_code,))
        except Exception:  # noqa: BLE001 - fail closed on anything (RUNTIMES.md, FAIL-OPEN)
            try:
                log.exception("smf connector tool failed")
            finally:
                return tools.blocked(tool, (INTERNAL_ERROR,))  # noqa: B012 - whatever logging does

    def _connector_call(
        self, tool: tools.ConnectorTool, args: Any, kwargs: Mapping[str, Any]
    ) -> str:
        if self.problems or self.config is None or self.bridge is None:
            return tools.blocked(tool, tuple(self.problems) or ("adapter_not_configured",))
        config = self.config
        session = str(kwargs.get("session_id") or "")
        call = tools.connector_call(tool, args, config.context)
        facts = mapping.session_facts(
            config.context, self.taint.is_tainted(session), call.legal_hold
        )
        surface: Surface = "delegation" if self.taint.is_child(session) else "tool_call"
        self._ensure_attested()
        refusal = self._release_in_force()
        if refusal is not None:
            return tools.blocked(tool, (refusal,))

        async def ask(nc: Client) -> Verdict:
            client = self._proposal_client(nc, config)
            # a new proposal id on every call: a repeated call is a new request
            proposal = client.build(
                native_tool=tool.name,
                arguments=call.arguments,
                actor=config.context.actor,
                facts=facts,
                content=call.content,
                destination=call.destination,
                surface=surface,
            )
            return await client.propose(proposal)

        try:
            verdict = self.bridge.call(ask, config.gate_timeout + 1.0)
        except BridgeError as exc:
            if exc.reason_code in NO_VERDICT_REASONS:
                return tools.no_verdict(tool, (exc.reason_code,))  # it may have been sent
            raise
        self._note_verdict(verdict)
        if verdict.outcome == "deny" and NO_VERDICT_REASONS & set(verdict.reason_codes):
            return tools.no_verdict(tool, verdict.reason_codes)
        return tools.verdict_text(tool, verdict)

    def _directive(
        self, label: str, verdict: Verdict, tool_call_id: str, call: mapping.ProposedCall
    ) -> dict[str, str] | None:
        reasons = ", ".join(verdict.reason_codes) or "no reason given"
        if verdict.outcome == "allow":
            self._remember(tool_call_id, _digest(call.native_tool, call.arguments))
            return None
        if verdict.outcome == "held":
            return block(
                f"SMF Assurance gate requires approval for {label} ({reasons}). Approval is not "
                "supported on this runtime profile (Hermes, block-only): the call was blocked, "
                "did not run, and will not run even if the approval is granted."
            )
        if verdict.outcome == "deny":
            return block(f"SMF Assurance gate denied {label}: {reasons}. It did not run.")
        return block(f"SMF Assurance adapter blocked {label}: unknown_verdict. It did not run.")

    def _runtime_version(self) -> str:
        try:
            return self.host.version()[:256] or "unknown"
        except Exception:  # noqa: BLE001 - fail closed on anything (RUNTIMES.md, FAIL-OPEN)
            return "unknown"

    # -- tool_execution middleware: the executed arguments are the allowed ones --

    def _remember(self, tool_call_id: str, digest: str) -> None:
        now = time.monotonic()
        with self._lock:
            if len(self._approved) >= MAX_APPROVED:
                for key in [k for k, t in self._approved.items() if t < now]:
                    del self._approved[key]
            if len(self._approved) < MAX_APPROVED:
                self._approved[(tool_call_id, digest)] = now + APPROVAL_TTL_S

    def _was_allowed(self, tool_call_id: str, digest: str) -> bool:
        with self._lock:
            expiry = self._approved.get((tool_call_id, digest))
        return expiry is not None and expiry >= time.monotonic()

    def tool_execution(self, **kwargs: Any) -> Any:
        """Run the tool only with arguments the gate allowed for this call.

        Hermes wraps execution in ``tool_execution`` middleware after the
        ``pre_tool_call`` hook (``agent/tool_executor.py``, 0.19.0). A
        middleware that raises BEFORE calling next is skipped and the tool
        runs (RUNTIMES.md, FAIL-OPEN), so everything up to the decision is
        caught and a refusal is returned as the tool result instead.
        """
        next_call = kwargs.get("next_call")
        tool = kwargs.get("tool_name")
        try:
            call = mapping.final_arguments(str(tool), kwargs.get("args"), self.host.coerce)
            allowed = callable(next_call) and self._was_allowed(
                str(kwargs.get("tool_call_id") or ""), _digest(str(tool), call)
            )
            if allowed and str(tool) in self.handlers:
                allowed = self._is_ours(str(tool))  # the registry still runs OUR handler
        except Exception:  # noqa: BLE001 - fail closed on anything (RUNTIMES.md, FAIL-OPEN)
            allowed = False
        if not allowed or not callable(next_call):
            return json.dumps(
                {
                    "error": f"SMF Assurance adapter blocked {tool}: "
                    "executed_arguments_not_allowed. It did not run."
                }
            )
        return next_call()

    # -- observers: taint and session families -------------------------------------

    def post_tool_call(self, **kwargs: Any) -> None:
        try:
            if self.config is None or kwargs.get("status") == "blocked":
                return
            tool = kwargs.get("tool_name")
            if isinstance(tool, str) and mapping.is_untrusted(
                tool, self.config.context.untrusted_tools
            ):
                self.taint.mark(str(kwargs.get("session_id") or ""))
        except Exception:
            log.exception("smf post_tool_call failed; tainting the process")
            self.taint.poison()

    def subagent_start(self, **kwargs: Any) -> None:
        try:
            parent = kwargs.get("parent_session_id")
            child = kwargs.get("child_session_id")
            if isinstance(parent, str) and isinstance(child, str):
                self.taint.link(parent, child)
        except Exception:
            # An unlinked child could look clean while its parent is tainted.
            log.exception("smf subagent_start failed; tainting the process")
            self.taint.poison()

    # -- transform_llm_output ---------------------------------------------------------

    def transform_llm_output(self, **kwargs: Any) -> str:
        """The gate's released text on ``allow``; a withheld notice otherwise. Never raises.

        Never returns None: None would let Hermes deliver the original text.
        """
        try:
            return self._transform(kwargs)
        except Exception:  # noqa: BLE001 - fail closed on anything (RUNTIMES.md, FAIL-OPEN)
            try:
                log.exception("smf transform_llm_output failed")
            finally:
                return WITHHELD_INTERNAL  # noqa: B012 - withheld whatever logging does

    def _transform(self, kwargs: Mapping[str, Any]) -> str:
        text = kwargs.get("response_text")
        if not isinstance(text, str):
            return _withheld_notice(("reply_not_text",))
        if self.problems or self.config is None or self.bridge is None:
            return _withheld_notice(tuple(self.problems) or ("adapter_not_configured",))
        config = self.config
        session = str(kwargs.get("session_id") or "")
        platform = str(kwargs.get("platform") or "")
        destination = mapping.reply_destination(config.context, platform)
        facts = mapping.session_facts(config.context, self.taint.is_tainted(session))
        surface: Surface = (
            "gateway_delivery" if platform not in ("", "cli", "local") else "direct_reply"
        )
        raw = text.encode("utf-8")
        chunks = [raw[i : i + OUTPUT_CHUNK_BYTES] for i in range(0, len(raw), OUTPUT_CHUNK_BYTES)]
        self._ensure_attested()
        refusal = self._release_in_force()
        if refusal is not None:
            return _withheld_notice((refusal,))

        async def gate_it(nc: Client) -> OutputVerdict:
            streamer = OutputStreamer(
                nc,
                config.key,
                config.runtime_id,
                self._runtime_version(),
                ADAPTER_ID,
                timeout=config.gate_timeout,
                gate_keys=self._gate_keys(),
            )
            return await streamer.stream(
                chunks,
                actor=config.context.actor,
                facts=facts,
                destination=destination,
                surface=surface,
            )

        try:
            result = self.bridge.call(gate_it, config.gate_timeout + 1.0)
        except BridgeError as exc:
            return _withheld_notice((exc.reason_code,))
        verdict = result.verdict
        if verdict.outcome == "allow" and result.released == text:
            return result.released
        if verdict.outcome == "allow":
            return _withheld_notice(("released_text_mismatch",))
        return _withheld_notice(verdict.reason_codes or ("no_reason_given",), verdict.outcome)


def _refusing_block(label: str, reasons: tuple[str, ...]) -> dict[str, str]:
    why = ",".join(reasons) or "adapter_not_configured"
    return block(
        f"SMF Assurance adapter blocked {label}: the adapter refuses to run ({why}). "
        "It did not run."
    )


def _withheld_notice(reasons: tuple[str, ...], outcome: str = "deny") -> str:
    why = ", ".join(reasons)
    if outcome == "held":
        return (
            f"[SMF Assurance: this reply needs approval ({why}). Approval is not supported on "
            "this runtime profile (Hermes, block-only), so the reply was withheld.]"
        )
    return f"[SMF Assurance: this reply was withheld by the gate ({why}).]"


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
            problems.append("runtime_streaming_enabled")
            details.append(f"streaming is enabled for {', '.join(on)}: {STREAMING_OFF_HELP}")
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
