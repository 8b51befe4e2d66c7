"""The calls the gate allowed, remembered until Hermes executes them.

``pre_tool_call`` remembers (tool call id, digest of tool and arguments) on an
``allow``; the ``tool_execution`` middleware runs a tool only when the
arguments it receives give a remembered digest for that call, so arguments
changed after the gate decided are not run (docs/HERMES.md, "tool_execution
middleware"; a middleware registered after ours is not checked, hole 6).
Bounded in size and time: an entry lives ``APPROVAL_TTL_S``, and beyond
``MAX_APPROVED`` live entries nothing more is remembered, so such a call is
refused at execution (fails closed).
"""

from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import dataclass, field
from typing import Final

from smf_assurance.subjects.clock import monotonic_s

APPROVAL_TTL_S: Final = 300.0
MAX_APPROVED: Final = 4096


def call_digest(tool: str, args: object) -> str:
    raw = json.dumps([tool, args], sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(raw.encode()).hexdigest()


@dataclass
class AllowedCalls:
    """Shared by Hermes's threads: every read and write holds the lock."""

    _approved: dict[tuple[str, str], float] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def remember(self, tool_call_id: str, digest: str) -> None:
        now = monotonic_s()
        with self._lock:
            if len(self._approved) >= MAX_APPROVED:
                for key in [k for k, t in self._approved.items() if t < now]:
                    del self._approved[key]
            if len(self._approved) < MAX_APPROVED:
                self._approved[(tool_call_id, digest)] = now + APPROVAL_TTL_S

    def was_allowed(self, tool_call_id: str, digest: str) -> bool:
        with self._lock:
            expiry = self._approved.get((tool_call_id, digest))
        return expiry is not None and expiry >= monotonic_s()


PENDING_TTL_S: Final = 300.0
MAX_PENDING: Final = 4096


@dataclass
class PendingCallIds:
    """The tool-call ids ``pre_tool_call`` saw for our connector tools, until their
    handler proposes (Hermes passes a handler no tool-call id, ``model_tools.py``
    0.19.0): keyed by session and tool, first in first out, bounded in size and
    time. Two parallel calls of one tool may swap ids; both are still carried by a
    proposal, which is all the model gateway's accounting asks."""

    _ids: dict[tuple[str, str], list[tuple[str, float]]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def put(self, session_id: str, tool: str, tool_call_id: str) -> None:
        now = monotonic_s()
        with self._lock:
            if sum(len(v) for v in self._ids.values()) >= MAX_PENDING:
                self._drop_expired(now)
            if sum(len(v) for v in self._ids.values()) < MAX_PENDING:
                self._ids.setdefault((session_id, tool), []).append(
                    (tool_call_id, now + PENDING_TTL_S)
                )

    def take(self, session_id: str, tool: str) -> str | None:
        now = monotonic_s()
        with self._lock:
            queue = self._ids.get((session_id, tool), [])
            while queue:
                call_id, expiry = queue.pop(0)
                if expiry >= now:
                    return call_id
            self._ids.pop((session_id, tool), None)
        return None

    def _drop_expired(self, now: float) -> None:
        for key in list(self._ids):
            self._ids[key] = [(i, t) for i, t in self._ids[key] if t >= now]
            if not self._ids[key]:
                del self._ids[key]
