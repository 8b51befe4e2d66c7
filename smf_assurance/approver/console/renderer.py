"""The PDF renderer the console serves to its page: Mozilla's pdf.js, pinned by digest.

A held filing's pages are drawn in the page itself, in any browser, from the bytes
whose SHA-256 the page checked, rather than handed to the browser's own PDF viewer
(Chromium's draws nothing headless, and takes a dozen Tab presses to cross). pdf.js
(``pdfjs-dist`` on npm, Apache-2.0) is not in this repository: the operator side
fetches it at :data:`PDFJS_VERSION` into a folder
(``smf_assurance.ops.local.pdf_renderer``), and the console serves exactly the two
files below from that folder, at ``/vendor/``, only when each one's SHA-256 is the one
pinned here. A folder holding anything else stops the console's start
(:class:`RendererError`, one line naming the file): a swapped renderer would run as
the console's own script, beside the approver's key.

Without a folder the console serves no renderer, and the page shows a PDF in the
browser's own viewer, as before.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Final

PDFJS_VERSION: Final = "6.5.438"
RENDERER_FILES: Final = {
    "pdf.min.mjs": "3a88402882cfa3e7e72c2c9b5149f52f0f88baf1c5b62aa11a41abdbc2072440",
    "pdf.worker.min.mjs": "1e64c8240e54735ec5913b37acd5134747799cb8c6bb3777c70adbc01232d2aa",
}
"""The files the page loads (pdf.js's library and its worker, from the package's
``build/``), each with its SHA-256 at :data:`PDFJS_VERSION`."""
RENDERER_PATH: Final = "/vendor/"
RENDERER_CONTENT_TYPE: Final = "text/javascript; charset=utf-8"


class RendererError(Exception):
    """The renderer's folder does not hold the pinned files; one line, no content."""


def load_renderer(folder: Path) -> dict[str, bytes]:
    """The files of :data:`RENDERER_FILES` read from ``folder``, by the path the console
    serves each at; :class:`RendererError` when one is missing, unreadable or not the
    pinned bytes."""
    served: dict[str, bytes] = {}
    for name, digest in RENDERER_FILES.items():
        path = folder / name
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise RendererError(f"the PDF renderer has no readable {name} in {folder}") from exc
        if hashlib.sha256(data).hexdigest() != digest:
            raise RendererError(
                f"{path} is not pdf.js {PDFJS_VERSION}'s {name} (its SHA-256 differs)"
            )
        served[RENDERER_PATH + name] = data
    return served


__all__ = [
    "PDFJS_VERSION",
    "RENDERER_CONTENT_TYPE",
    "RENDERER_FILES",
    "RENDERER_PATH",
    "RendererError",
    "load_renderer",
]
