"""Refusing mode, and how the adapter says no.

RUNTIMES.md, "FAIL-OPEN": a hook that raises or returns ``None`` lets the
tool run, and a ``transform_llm_output`` that raises delivers the ORIGINAL
text. So a problem the adapter cannot fix by itself (configuration, a Hermes
version off the pin, streaming switched on, a hook not registered, a release
that does not verify or whose lease ran out) does not stop it: it runs in
refusing mode, where every tool call is answered with a :func:`block` and
every reply with a withheld notice, and says so loudly (CRITICAL log and
stderr) and in its attestation (``problems``).
"""

from __future__ import annotations

import logging
import sys
from typing import Final

from smf_assurance.adapters.hermes.core import AdapterCore
from smf_assurance.subjects.release import (
    DEFAULT_MAX_SKEW_MS,
    ReleaseCheckError,
    check_lease_in_force,
)

log = logging.getLogger("smf.hermes")

INTERNAL_ERROR: Final = "adapter_internal_error"
RELEASE_NOT_VERIFIED: Final = "release_not_verified"
WITHHELD_INTERNAL: Final = (
    "[SMF Assurance: this reply was withheld (adapter_internal_error). "
    "It was not released by the gate.]"
)


def block(message: str) -> dict[str, str]:
    return {"action": "block", "message": message}


def decision_hint(decision_id: str | None) -> str:
    """Every denial a runtime shows names the decision it rests on, so whoever
    reads it can have the gate's reasons in words (``smf-assurance explain``, from the
    ledger and the release: nothing raw is needed). Empty when the verdict names none
    (a transport denial: the gate never decided)."""
    if decision_id is None:
        return ""
    return f" Decision {decision_id}: `smf-assurance explain {decision_id}` says why."


def refusing_block(label: str, reasons: tuple[str, ...]) -> dict[str, str]:
    why = ",".join(reasons) or "adapter_not_configured"
    return block(
        f"SMF Assurance adapter blocked {label}: the adapter refuses to run ({why}). "
        "It did not run."
    )


def withheld_notice(reasons: tuple[str, ...], outcome: str = "deny") -> str:
    why = ", ".join(reasons)
    if outcome == "held":
        return (
            f"[SMF Assurance: this reply needs approval ({why}). Approval is not supported on "
            "this runtime profile (Hermes, block-only), so the reply was withheld.]"
        )
    return f"[SMF Assurance: this reply was withheld by the gate ({why}).]"


def shout(message: str) -> None:
    """Refusing mode must not pass unnoticed: CRITICAL in the log and on stderr."""
    log.critical(message)
    sys.stderr.write(f"[smf-assurance] {message}\n")
    sys.stderr.flush()


class RefusingMode(AdapterCore):
    """Why the adapter refuses to run; every hook asks before it proposes anything."""

    def refuse(self, problem: str, detail: str = "") -> None:
        """Switch to refusing mode, loudly."""
        if problem not in self.problems:
            self.problems.append(problem)
        shout(
            f"SMF Assurance adapter REFUSES to run ({problem}{': ' + detail if detail else ''}). "
            "Every tool call will be BLOCKED and every reply WITHHELD until this is fixed."
        )

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

    def _release_in_force(self) -> str | None:
        """After attesting: the reason not to propose, or ``None`` with a verified release."""
        refusal = self._release_refusal()
        if refusal is None and self.release is None:
            refusal = RELEASE_NOT_VERIFIED
        return refusal
