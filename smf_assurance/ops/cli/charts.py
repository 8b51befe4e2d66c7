"""A horizontal bar chart as SVG text, written by our own small code (issue 25).

``release diff --chart FILE.svg`` draws the decisions a shadow release would
change, per rule. SVG rather than PNG: it is text, so the chart is
reproducible byte for byte from the same counts, diffable, readable by a test
with ``xml.etree``, and opens in every browser; it needs no plotting or
imaging dependency (the labels are the rules' ids, escaped, in the viewer's
own font). What it cannot do is measure text: the label column's width is
estimated from character counts, so a very long id is cut with an ellipsis
and shown whole in its ``<title>`` tooltip.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final
from xml.sax.saxutils import escape

BAR_HEIGHT: Final = 22
GAP: Final = 8
LABEL_CHARS: Final = 56
"""Label characters shown before the ellipsis."""
CHAR_WIDTH: Final = 7
"""An estimate for a 12 px sans-serif font; nothing here measures text."""
BAR_WIDTH: Final = 420
MARGIN: Final = 16
TITLE_HEIGHT: Final = 40


@dataclass(frozen=True, slots=True)
class Bar:
    label: str
    value: int
    note: str = ""
    """Shown as the bar's tooltip beside the label (e.g. example decision ids)."""


def _cut(label: str) -> str:
    return label if len(label) <= LABEL_CHARS else label[: LABEL_CHARS - 1] + "\u2026"


def bar_chart_svg(title: str, bars: Sequence[Bar], *, unit: str = "decisions") -> str:
    """``bars`` in the order given, each as long as its value over the largest; an
    empty chart says so instead of drawing nothing."""
    label_width = min(LABEL_CHARS, max((len(b.label) for b in bars), default=10)) * CHAR_WIDTH
    top = MARGIN + TITLE_HEIGHT
    rows = max(1, len(bars))
    width = MARGIN * 2 + label_width + GAP + BAR_WIDTH + 80
    height = top + rows * (BAR_HEIGHT + GAP) + MARGIN
    most = max((b.value for b in bars), default=0)
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="12">',
        f"<title>{escape(title)}</title>",
        f'<rect width="{width}" height="{height}" fill="#ffffff"/>',
        f'<text x="{MARGIN}" y="{MARGIN + 16}" font-size="15" font-weight="bold">'
        f"{escape(title)}</text>",
    ]
    if not bars:
        parts.append(
            f'<text x="{MARGIN}" y="{top + BAR_HEIGHT - 6}">no {escape(unit)} would change</text>'
        )
    x0 = MARGIN + label_width + GAP
    for n, bar in enumerate(bars):
        y = top + n * (BAR_HEIGHT + GAP)
        length = 0 if most == 0 else max(1, round(BAR_WIDTH * bar.value / most))
        tip = escape(f"{bar.label}: {bar.value} {unit}" + (f" ({bar.note})" if bar.note else ""))
        parts += [
            f'<g class="bar" data-label="{escape(bar.label, {chr(34): "&quot;"})}" '
            f'data-value="{bar.value}">',
            f"<title>{tip}</title>",
            f'<text x="{x0 - GAP}" y="{y + BAR_HEIGHT - 7}" text-anchor="end">'
            f"{escape(_cut(bar.label))}</text>",
            f'<rect x="{x0}" y="{y}" width="{length}" height="{BAR_HEIGHT}" fill="#4e79a7"/>',
            f'<text x="{x0 + length + 6}" y="{y + BAR_HEIGHT - 7}">{bar.value}</text>',
            "</g>",
        ]
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


__all__ = ["Bar", "bar_chart_svg"]
