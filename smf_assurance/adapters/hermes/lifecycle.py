"""The adapter's lifecycle: the bridge, the governed release, attestation.

Governed release (ARCHITECTURE.md, "Governed releases"): the adapter
verifies the newest release of the ``SMF_RELEASES`` bucket itself
(``smf_assurance.adapters.hermes.release``), at start-up and before every attestation, and
attests the verified release id; a release that fails verification puts the
adapter in refusing mode (``smf_assurance.adapters.hermes.refusing``) until one verifies.

Attestation (docs/HERMES.md, "attestation"): a signed ``RuntimeAttestation``
on ``smf.attest`` before the first proposal and every
``SMF_ATTEST_INTERVAL``, naming the hooks actually present in Hermes's plugin
manager, the streaming settings, the verified release and every problem; the
gate serves no proposal of a runtime whose attestation it has not accepted.
"""

from __future__ import annotations

import asyncio
import logging
import re
import secrets
import sys
from typing import Final

import msgspec
from nats.aio.client import Client
from nats.errors import NoRespondersError

from smf_assurance.adapters.client import tool_call_id_of
from smf_assurance.adapters.hermes.attestation import (
    HERMES_PIN,
    hook_presence,
    observed_cli_streaming,
)
from smf_assurance.adapters.hermes.bridge import Bridge, BridgeError
from smf_assurance.adapters.hermes.config import ADAPTER_ID, ADAPTER_VERSION, PROFILE
from smf_assurance.adapters.hermes.refusing import RefusingMode, shout
from smf_assurance.adapters.hermes.release import UNAVAILABLE, ReleaseUnavailableError, read_newest
from smf_assurance.subjects import names
from smf_assurance.subjects.attestation import AttestationAck, RuntimeAttestation, StreamingSetting
from smf_assurance.subjects.clock import wall_clock_ms
from smf_assurance.subjects.dsse import encode_envelope, sign_struct
from smf_assurance.subjects.messages import Verdict
from smf_assurance.subjects.patterns import CODE_PATTERN
from smf_assurance.subjects.release import ReleaseCheckError

log = logging.getLogger("smf.hermes")

GATE_RELEASE_MISMATCH: Final = "runtime_release_mismatch"
"""The gate's reason when the attested release is not its active one (re-attest)."""
REFUSED_ACK_RETRY_S: Final = 5.0
REFUSED_UNNAMED: Final = "adapter_refused"
"""The reason a refusal is reported under when its own cannot be a reason code."""
UNNAMED_TOOL: Final = "unnamed_tool"
_CODE: Final = re.compile(CODE_PATTERN)


class Lifecycle(RefusingMode):
    """Start, keep the release verified, attest, and attest again when needed."""

    def start(self) -> None:
        """Open the bridge and send the first attestation (never raises)."""
        if self.config is None:
            return
        try:
            self.bridge = Bridge(
                self.config.nats_url,
                credential=self.config.bus_credential,
                inbox_principal=self.config.bus_principal,
            ).start()
            self.bridge.submit(self._attest_forever)
        except Exception as exc:  # noqa: BLE001 - any failure here means refusing mode
            self.refuse("bridge_start_failed", repr(exc))

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
        shout(
            f"SMF Assurance adapter REFUSES to run ({reason}: the governed release did not "
            f"verify{': ' + detail[:300] if detail else ''}). Every tool call will be BLOCKED "
            "and every reply WITHHELD until a release verifies."
        )

    # -- attestation ----------------------------------------------------------------

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
            streaming=self._current_streaming(),
            verified_release_id=(
                self.release.release_id
                if self.release is not None and self._release_refusal() is None
                else None
            ),
            problems=self.refusals(),
            issued_at_ms=wall_clock_ms(),
            instance_id=self.instance_id,
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
        streaming_moved = self._cli_streaming_moved()
        if (
            self._attested.is_set()
            and not mismatch
            and self.release_problem is None
            and not streaming_moved
        ):
            return
        self.bridge.call(self._attest_once, self.config.gate_timeout)

    def _current_streaming(self) -> tuple[StreamingSetting, ...]:
        """What Hermes streams now (the running CLI's own state once it exists)."""
        try:
            self.streaming = self.host.streaming()
        except Exception:  # noqa: BLE001 - fail closed on anything (RUNTIMES.md, FAIL-OPEN)
            self.refuse("streaming_settings_unreadable")
        return self.streaming

    def _cli_streaming_moved(self) -> bool:
        """The running CLI streams otherwise than last attested (it did not exist yet,
        or ``-Q`` switched the agent's stream off): attest again before proposing."""
        observed = observed_cli_streaming(sys.modules.get("cli"))
        attested = next((s.enabled for s in self.streaming if s.surface == "cli"), None)
        return observed is not None and observed != attested

    def _note_verdict(self, verdict: Verdict) -> None:
        """A gate that moved to another release refuses our attested one: re-attest first."""
        if verdict.outcome == "deny" and GATE_RELEASE_MISMATCH in verdict.reason_codes:
            self._attested.clear()

    def _report_refused(self, tool: object, tool_call_id: object, reason: str) -> None:
        """Tell the gate about a call this adapter refused itself (never raises).

        Tool-call accounting (docs/HERMES.md): the model gateway stops a runtime whose
        request carries a tool result no decided proposal covers. A call refused here
        (``credential_access``, arguments it cannot map, a tool that is not ours, refusing
        mode) still has an error result; reported as ``Proposal.refused_locally``, it
        is recorded at the gate as a denial with this reason and its id noted as decided,
        so its result is accounted and ``ungated_tool_result`` keeps meaning a call that
        ran past the gate. The refusal stands whatever the gate answers (the caller has
        blocked already): a report that fails is logged, and its result is then reported
        ungated by the gateway (fail closed). The refused arguments are not sent."""
        call_id = tool_call_id_of(tool_call_id)
        config, bridge = self.config, self.bridge
        if call_id is None or config is None or bridge is None:
            return
        name = tool if isinstance(tool, str) and 1 <= len(tool) <= 256 else UNNAMED_TOOL
        code = reason if _CODE.fullmatch(reason) else REFUSED_UNNAMED

        async def report(nc: Client) -> Verdict:
            client = self._proposal_client(nc, config)
            proposal = client.build(
                native_tool=name,
                arguments={},
                actor=config.context.actor,
                facts=config.context.facts,
                tool_call_id=call_id,
                refused_locally=code,
            )
            return await client.propose(proposal)

        try:
            self._ensure_attested()
            verdict = bridge.call(report, config.gate_timeout + 1.0)
        except Exception as exc:  # noqa: BLE001 - the call is refused whatever happens here
            log.warning("smf refusal not reported to the gate: %s", type(exc).__name__)
            return
        if verdict.outcome != "deny":  # the gate answers a report with a denial only
            log.error("smf refusal report answered %s; the call stays refused", verdict.outcome)
