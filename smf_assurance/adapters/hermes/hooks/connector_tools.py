"""Our connector-backed tools: the handler proposes, the gate holds or dispatches.

Approval works for these tools (unlike Hermes's own, ``.tool_call``): their
handler executes nothing locally, it only proposes an action that the gate
hands to a connector, after an approval when the policy needs one
(``smf_assurance.adapters.hermes.tools``; ARCHITECTURE.md, "Exact-action approval"). A
proposal whose verdict did not reach us may have reached the gate, so the
model is told it may have been sent, never that nothing happened.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any, Final

from nats.aio.client import Client

from smf_assurance.adapters.client import UNSETTLED_REASONS
from smf_assurance.adapters.hermes import mapping, tools
from smf_assurance.adapters.hermes.bridge import BridgeError
from smf_assurance.adapters.hermes.lifecycle import Lifecycle
from smf_assurance.adapters.hermes.refusing import INTERNAL_ERROR
from smf_assurance.subjects.envelope import Surface
from smf_assurance.subjects.messages import Verdict

log = logging.getLogger("smf.hermes")

NO_VERDICT_REASONS: Final = UNSETTLED_REASONS
"""A proposal may have reached the gate without its verdict reaching us, or the gate
cannot say yet whether its order exists (``smf_assurance.adapters.client``)."""


class ConnectorToolHandlers(Lifecycle):
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
            # refused here, before any proposal: report it, with the call id our hook
            # left for this handler (tool-call accounting)
            session = str(kwargs.get("session_id") or "")
            self._report_refused(
                tool.name, self.pending_ids.take(session, tool.name), exc.reason_code
            )
            return tools.blocked(tool, (exc.reason_code,))
        except Exception:  # noqa: BLE001 - fail closed on anything (RUNTIMES.md, FAIL-OPEN)
            try:
                log.exception("smf connector tool failed")
            finally:
                return tools.blocked(tool, (INTERNAL_ERROR,))  # noqa: B012 - whatever logging does

    def _connector_call(
        self, tool: tools.ConnectorTool, args: Any, kwargs: Mapping[str, Any]
    ) -> str:
        session = str(kwargs.get("session_id") or "")
        if self.problems or self.config is None or self.bridge is None:
            reasons = tuple(self.problems) or ("adapter_not_configured",)
            self._report_refused(tool.name, self.pending_ids.take(session, tool.name), reasons[0])
            return tools.blocked(tool, reasons)
        config = self.config
        call = tools.connector_call(tool, args, config.context)
        facts = mapping.session_facts(
            config.context, self.taint.is_tainted(session), call.legal_hold
        )
        surface: Surface = "delegation" if self.taint.is_child(session) else "tool_call"
        self._ensure_attested()
        refusal = self._release_in_force()
        if refusal is not None:
            self._report_refused(tool.name, self.pending_ids.take(session, tool.name), refusal)
            return tools.blocked(tool, (refusal,))
        call_id = self.pending_ids.take(session, tool.name)

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
                tool_call_id=call_id,
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
