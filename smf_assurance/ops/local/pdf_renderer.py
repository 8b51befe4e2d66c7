"""Fetching the console's PDF renderer (pdf.js) once per machine, from the npm registry.

The console serves pdf.js's two files only when each is the pinned one
(``smf_assurance.approver.console.renderer``); this module gets them there. The
package's tarball is downloaded from the npm registry (``npm_config_registry`` when the
firm points npm at its own mirror), its SHA-512 checked against the registry's
integrity for :data:`~smf_assurance.approver.console.renderer.PDFJS_VERSION` pinned
here, and only the two files are taken out of it, into the per-user cache keyed by
the version (``cache_root() / pdfjs-dist-<version>``) under the install lock, as the
runtimes are. Needs no Node: a fresh machine with Python and the registries has it.
"""

from __future__ import annotations

import base64
import hashlib
import io
import os
import tarfile
import urllib.request
from pathlib import Path
from typing import Final
from urllib.parse import urlsplit

from smf_assurance.approver.console.renderer import (
    PDFJS_VERSION,
    RENDERER_FILES,
    RendererError,
    load_renderer,
)
from smf_assurance.ops.runtimes.cache import cache_root, install_lock
from smf_assurance.subjects.hosts import is_loopback

PDFJS_TARBALL_SHA512: Final = (
    "vg8Pw1x+AFKy4AMDvhuWl5cOYV8d698UoEANoFFhc79hqXDnZQqnOXoxw3HG907WHOg1JYOvLhP756boddFxpA=="
)
"""The npm registry's ``dist.integrity`` of ``pdfjs-dist`` at the pinned version."""
DEFAULT_REGISTRY: Final = "https://registry.npmjs.org"
MAX_TARBALL_BYTES: Final = 64 * 1024 * 1024
FETCH_TIMEOUT_S: Final = 120.0


def renderer_folder(root: Path | None = None) -> Path:
    return (root or cache_root()) / f"pdfjs-dist-{PDFJS_VERSION}"


def tarball_url(registry: str | None = None) -> str:
    # npm reads its settings from lower-case npm_config_* variables
    mirror = os.environ.get("npm_config_registry")  # noqa: SIM112
    base = (registry or mirror or DEFAULT_REGISTRY).rstrip("/")
    return f"{base}/pdfjs-dist/-/pdfjs-dist-{PDFJS_VERSION}.tgz"


def fetch_renderer(root: Path | None = None, registry: str | None = None) -> Path:
    """The folder holding pdf.js's pinned files, fetched on first use; raises
    :class:`RendererError` (one line, no URL credentials) when it cannot be had."""
    folder = renderer_folder(root)
    try:
        load_renderer(folder)
    except RendererError:
        pass
    else:
        return folder  # already there: a read-only cache (an image's) needs no lock
    with install_lock(folder):
        try:
            load_renderer(folder)
        except RendererError:
            _install(folder, _download(tarball_url(registry)))
        load_renderer(folder)
    return folder


def _download(url: str) -> bytes:
    parts = urlsplit(url)
    loopback = parts.scheme == "http" and is_loopback(parts.hostname or "")
    if parts.scheme != "https" and not loopback:
        raise RendererError("the npm registry must be reached over HTTPS")
    try:
        with urllib.request.urlopen(url, timeout=FETCH_TIMEOUT_S) as answer:  # noqa: S310 - scheme checked above
            data: bytes = answer.read(MAX_TARBALL_BYTES + 1)
    except OSError as exc:
        raise RendererError(
            f"cannot fetch pdf.js {PDFJS_VERSION} from the npm registry: {type(exc).__name__}"
        ) from exc
    if len(data) > MAX_TARBALL_BYTES:
        raise RendererError(f"pdf.js {PDFJS_VERSION}'s tarball is larger than expected")
    digest = base64.b64encode(hashlib.sha512(data).digest()).decode()
    if digest != PDFJS_TARBALL_SHA512:
        raise RendererError(
            f"pdf.js {PDFJS_VERSION}'s tarball from the registry is not the pinned one"
        )
    return data


def _install(folder: Path, tarball: bytes) -> None:
    """Only the pinned files, from ``package/build/``, each written whole then renamed."""
    folder.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(tarball), mode="r:gz") as archive:
        for name in RENDERER_FILES:
            member = archive.extractfile(f"package/build/{name}")
            if member is None:
                raise RendererError(f"pdf.js {PDFJS_VERSION}'s tarball has no {name}")
            partial = folder / f".{name}.partial"
            partial.write_bytes(member.read())
            partial.replace(folder / name)


__all__ = ["fetch_renderer", "renderer_folder", "tarball_url"]
