"""The gate's own detectors for outbound text: they can only raise a fact, never lower it.

Issue 5: a completed response is normalized with classification and taint
facts from the adapter AND from the gate's detectors. A detector that finds
privilege markers or prompt-injection phrasing raises the classification or
the taint; it never lowers what the adapter said, so adding a detector can
only make a decision stricter (the same monotonicity as layered policy).
These are marker detectors, not classifiers: they catch the labelled and the
blatant, and prove nothing about text that carries no marker.

What is shown is read the way a person reads it (issue 36, "Detect across
turns"): a runtime prints a model's turns, tool names and arguments one
after another, on lines of their own, so a marker written in pieces (across
two turns, two calls, a name and its arguments) is one word on the screen.
:func:`detect` therefore also reads the text with its line breaks removed,
and, given a ``window`` of what was shown before it, reads across that
boundary too; a marker lying wholly inside the window was decided when it
was shown and does not count again. Spaces are kept: a marker spelled with a
space inside a word (``PRIVI LEGED``) is not one these detectors know.
"""

from __future__ import annotations

import re
from typing import Final

import msgspec

from smf_assurance.subjects.envelope import Classification, InjectionTaint
from smf_assurance.subjects.messages import DataFacts

_PRIVILEGE: Final = re.compile(
    r"(?<![^\W_])(?=[pa])(privileged\s*(?:&|and)\s*confidential|attorney[-\s]client\s+privilege[d]?"
    r"|attorney\s+work\s+product|privileged)(?![^\W_])",
    re.IGNORECASE,
)
"""Bounded by anything but a letter or digit: an underscore separates words as a space
does (``PRIVILEGED_memo``, a tool's name, reads as the marker). The lookahead on the
first letter only makes the scan cheaper (the boundary test is done where a marker
can start)."""
_INJECTION: Final = re.compile(
    r"(ignore\s+(?:all\s+)?(?:previous|prior|above)\s+instructions"
    r"|disregard\s+(?:the\s+)?(?:system|previous)\s+prompt"
    r"|you\s+are\s+now\s+(?:in\s+)?developer\s+mode)",
    re.IGNORECASE,
)

_CLASS_RANK: Final = {"public": 0, "internal": 1, "confidential": 2, "unknown": 3, "privileged": 4}
_TAINT_RANK: Final = {"clear": 0, "suspected": 1, "unknown": 2, "tainted": 3}


def raise_facts(
    facts: DataFacts, classification: Classification, injection_taint: InjectionTaint
) -> DataFacts:
    """``facts`` with its classification and taint raised to at least the given ones,
    never lowered (the ranks above; an unknown classification ranks above
    confidential, an unknown taint above suspected: what is not known is assumed
    worse). The one way a fact is raised, so the detectors, the output buffer and
    the gate's call-context link (issue 16) all raise alike."""
    if _CLASS_RANK[classification] > _CLASS_RANK[facts.classification]:
        facts = msgspec.structs.replace(facts, classification=classification)
    if _TAINT_RANK[injection_taint] > _TAINT_RANK[facts.injection_taint]:
        facts = msgspec.structs.replace(facts, injection_taint=injection_taint)
    return facts


_LINE_BREAKS: Final = str.maketrans("", "", "\r\n")


def _reaches(pattern: re.Pattern[str], text: str, boundary: int) -> bool:
    """Whether a match of ``pattern`` in ``text`` ends past ``boundary``: a marker that
    is, at least in its last character, in the part after the window."""
    if boundary == 0:
        return pattern.search(text) is not None
    return any(m.end() > boundary for m in pattern.finditer(text))


def _found(pattern: re.Pattern[str], text: str, window: str) -> bool:
    """A marker in ``text`` as shown after ``window`` (on a line of its own): as
    written, and with the line breaks of both removed (the pieces a runtime prints
    on lines of their own)."""
    if not window:
        if pattern.search(text) is not None:
            return True
        joined = text.translate(_LINE_BREAKS)
        # no line break: the joined reading is the one just done
        return len(joined) != len(text) and pattern.search(joined) is not None
    if _reaches(pattern, window + "\n" + text, len(window) + 1):
        return True
    joined_window = window.translate(_LINE_BREAKS)
    return _reaches(pattern, joined_window + text.translate(_LINE_BREAKS), len(joined_window))


def injection_found(text: str) -> bool:
    """Whether ``text`` carries prompt-injection phrasing, as written (what a model is
    shown is read whole, not as a display: no window, line breaks kept)."""
    return _INJECTION.search(text) is not None


def detect(text: str, facts: DataFacts, window: str = "") -> tuple[DataFacts, tuple[str, ...]]:
    """Raise facts from markers in ``text`` (read after ``window``, what was shown
    before it); return the facts and what was found."""
    found: list[str] = []
    classification: Classification = "public"
    taint: InjectionTaint = "clear"
    if _CLASS_RANK[facts.classification] < _CLASS_RANK["privileged"] and _found(
        _PRIVILEGE, text, window
    ):
        classification = "privileged"
        found.append("detected_privilege_marker")
    if _TAINT_RANK[facts.injection_taint] < _TAINT_RANK["suspected"] and _found(
        _INJECTION, text, window
    ):
        taint = "suspected"
        found.append("detected_injection_marker")
    if not found:
        return facts, ()
    return raise_facts(facts, classification, taint), tuple(found)
