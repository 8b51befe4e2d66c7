"""The fixtures, builders and constants of tests/unit/test_canonical.py
that other test modules use too: here, so that no test module imports another."""

from __future__ import annotations

import unicodedata
from typing import Any

from hypothesis import strategies as st

from smf_assurance.subjects.canonical import (
    SAFE_INTEGER_MAX,
)

__all__ = ["JSON_VALUES", "TEXT"]


def _nfc(text: str) -> str:
    return unicodedata.normalize("NFC", text)


_SPECIAL = 'e\u0301\u00e9\u212b\u00c5\ufb33\u1100\u1161\ue000\U0001f600\u2028\u2029\x7f\x00\x1f"\\/'


TEXT = st.one_of(
    st.text(alphabet=st.characters(codec="utf-8"), max_size=12),
    st.text(alphabet=st.sampled_from(_SPECIAL + "abcAB01 "), max_size=8),
)


SAFE_INT = st.integers(min_value=-SAFE_INTEGER_MAX, max_value=SAFE_INTEGER_MAX)


SCALARS = st.one_of(st.none(), st.booleans(), SAFE_INT, st.integers(-5, 5), TEXT)


def _unique_after_nfc(d: dict[str, Any]) -> bool:
    return len({_nfc(k) for k in d}) == len(d)


JSON_VALUES = st.recursive(
    SCALARS,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(TEXT, children, max_size=4).filter(_unique_after_nfc),
    ),
    max_leaves=20,
)
