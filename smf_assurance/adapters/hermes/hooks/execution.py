"""The ``tool_execution`` middleware: the executed arguments are the allowed ones.

Hermes wraps execution in ``tool_execution`` middleware after the
``pre_tool_call`` hook (``agent/tool_executor.py``, 0.19.0); the arguments
the gate allowed for a call are remembered in ``smf_assurance.adapters.hermes.allowed``.
"""

from __future__ import annotations

import json
from typing import Any

from smf_assurance.adapters.hermes import mapping
from smf_assurance.adapters.hermes.allowed import call_digest
from smf_assurance.adapters.hermes.lifecycle import Lifecycle


class ExecutionMiddleware(Lifecycle):
    def tool_execution(self, **kwargs: Any) -> Any:
        """Run the tool only with arguments the gate allowed for this call.

        A middleware that raises BEFORE calling next is skipped and the tool
        runs (RUNTIMES.md, FAIL-OPEN), so everything up to the decision is
        caught and a refusal is returned as the tool result instead.
        """
        next_call = kwargs.get("next_call")
        tool = kwargs.get("tool_name")
        try:
            call = mapping.final_arguments(str(tool), kwargs.get("args"), self.host.coerce)
            allowed = callable(next_call) and self.allowed.was_allowed(
                str(kwargs.get("tool_call_id") or ""), call_digest(str(tool), call)
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
