"""``post_tool_call`` and ``subagent_start``: the session taint the gate is told about.

A session that read from an untrusted tool is tainted, and a subagent's
session joins its parent's family, which shares one taint
(``mapping.SessionTaint``); proposals and replies carry it as
``injection_taint`` (ARCHITECTURE.md, scenario 3). An
observer that fails cannot block anything, so it taints the whole process
instead of leaving a session looking clean.
"""

from __future__ import annotations

import logging
from typing import Any

from smf_assurance.adapters.hermes import mapping
from smf_assurance.adapters.hermes.lifecycle import Lifecycle

log = logging.getLogger("smf.hermes")


class SessionObservers(Lifecycle):
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
