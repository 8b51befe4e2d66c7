"""``pre_tool_call``: Hermes asks before every tool runs; the gate answers.

Profile: block-only for Hermes's own tools. Hermes cannot hold a native call
for later approval (RUNTIMES.md: ``{"action": "approve"}`` is keyed by pattern
category and bypassed by YOLO mode), so a gate verdict that needs approval
becomes a block that says approval is not supported on this profile. A block
is not an exact-action approval and this module never presents it as one.
``None`` (go ahead) is returned only on an ``allow`` verdict, and for our own
connector tools while the registry runs our handler (which asks the gate
itself, ``.connector_tools``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, Final

from nats.aio.client import Client

from smf_assurance.adapters.client import tool_call_id_of
from smf_assurance.adapters.hermes import mapping
from smf_assurance.adapters.hermes.allowed import call_digest
from smf_assurance.adapters.hermes.bridge import BridgeError
from smf_assurance.adapters.hermes.lifecycle import Lifecycle
from smf_assurance.adapters.hermes.refusing import (
    INTERNAL_ERROR,
    block,
    decision_hint,
    refusing_block,
)
from smf_assurance.subjects.messages import Verdict

log = logging.getLogger("smf.hermes")

ADAPTER_REFUSES: Final = "adapter_refuses_to_run"
NOT_OURS: Final = "connector_tool_not_ours"


class ToolCallHook(Lifecycle):
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
            self._report_refused(tool, kwargs.get("tool_call_id"), exc.reason_code)
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
        tool_name = kwargs.get("tool_name")
        if self.problems or self.config is None or self.bridge is None:
            reasons = tuple(self.problems)
            self._report_refused(tool_name, kwargs.get("tool_call_id"), ADAPTER_REFUSES)
            return refusing_block(label, reasons)
        config = self.config
        tool = tool_name
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
            parse_patch=self.host.patch_targets,
            protected=config.protected,
        )
        self._ensure_attested()
        refusal = self._release_in_force()
        if refusal is not None:
            return refusing_block(label, (refusal,))

        async def ask(nc: Client) -> Verdict:
            client = self._proposal_client(nc, config)
            proposal = client.build(
                native_tool=call.native_tool,
                arguments=call.arguments,
                actor=config.context.actor,
                facts=call.facts,
                destination=call.destination,
                surface=call.surface,
                tool_call_id=tool_call_id_of(kwargs.get("tool_call_id")),
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
            self._report_refused(tool, kwargs.get("tool_call_id"), NOT_OURS)
            return block(
                f"SMF Assurance adapter blocked {label}: connector_tool_not_ours. It did not run."
            )
        arguments = mapping.final_arguments(tool, kwargs.get("args"), self.host.coerce)
        self.allowed.remember(str(kwargs.get("tool_call_id") or ""), call_digest(tool, arguments))
        call_id = tool_call_id_of(kwargs.get("tool_call_id"))
        if call_id is not None:  # the handler proposes, and Hermes gives it no call id
            self.pending_ids.put(str(kwargs.get("session_id") or ""), tool, call_id)
        return None

    def _directive(
        self, label: str, verdict: Verdict, tool_call_id: str, call: mapping.ProposedCall
    ) -> dict[str, str] | None:
        reasons = ", ".join(verdict.reason_codes) or "no reason given"
        if verdict.outcome == "allow":
            self.allowed.remember(tool_call_id, call_digest(call.native_tool, call.arguments))
            return None
        if verdict.outcome == "held":
            return block(
                f"SMF Assurance gate requires approval for {label} ({reasons}). Approval is not "
                "supported on this runtime profile (Hermes, block-only): the call was blocked, "
                "did not run, and will not run even if the approval is granted."
            )
        if verdict.outcome == "deny":
            return block(
                f"SMF Assurance gate denied {label}: {reasons}. It did not run."
                + decision_hint(verdict.decision_id)
            )
        return block(f"SMF Assurance adapter blocked {label}: unknown_verdict. It did not run.")
