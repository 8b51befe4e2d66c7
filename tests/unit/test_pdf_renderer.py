"""The console's PDF renderer is served only as the pinned files (issue 38, "The document,
seen"): ``smf_assurance.approver.console.renderer`` checks each file's SHA-256,
``smf_assurance.ops.local.pdf_renderer`` fetches the package's tarball once and takes
only those files out of it, after checking the tarball's SHA-512.

Proves, against a registry served on 127.0.0.1: a tarball that is not the pinned one
writes nothing; a pinned one yields exactly the two files, and a second call reads the
cache without asking the registry; a registry that cannot be reached, or one named
over plain HTTP beyond loopback, is a one-line :class:`RendererError`; a folder whose
file differs by one byte, or lacks one, is refused naming the file. The pinned digests
themselves are those of pdf.js 6.5.438 (checked by the browser tests, which fetch the
real package: tests/browser/test_lawyer_view.py).

Does not prove: anything about the npm registry's own integrity beyond the pinned hash.
"""

from __future__ import annotations

import base64
import hashlib
import http.server
import io
import tarfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from smf_assurance.approver.console import renderer
from smf_assurance.approver.console.renderer import RendererError, load_renderer
from smf_assurance.ops.local import pdf_renderer
from smf_assurance.ops.local.pdf_renderer import fetch_renderer, renderer_folder, tarball_url

LIBRARY, WORKER = b"export const pdfjs = 1;\n", b"self.onmessage = () => {};\n"


def _tarball(files: dict[str, bytes]) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as archive:
        for name, data in files.items():
            info = tarfile.TarInfo(f"package/build/{name}")
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return out.getvalue()


def _sha512(data: bytes) -> str:
    return base64.b64encode(hashlib.sha512(data).digest()).decode()


@pytest.fixture
def pinned(monkeypatch: pytest.MonkeyPatch) -> bytes:
    """Pin two small made-up files and their tarball in place of pdf.js's."""
    monkeypatch.setattr(
        renderer,
        "RENDERER_FILES",
        {
            "pdf.min.mjs": hashlib.sha256(LIBRARY).hexdigest(),
            "pdf.worker.min.mjs": hashlib.sha256(WORKER).hexdigest(),
        },
    )
    monkeypatch.setattr(pdf_renderer, "RENDERER_FILES", renderer.RENDERER_FILES)
    tarball = _tarball(
        {"pdf.min.mjs": LIBRARY, "pdf.worker.min.mjs": WORKER, "pdf.mjs": b"not taken"}
    )
    monkeypatch.setattr(pdf_renderer, "PDFJS_TARBALL_SHA512", _sha512(tarball))
    return tarball


class _Registry:
    def __init__(self) -> None:
        self.body = b""
        self.asked: list[str] = []


@pytest.fixture
def registry() -> Iterator[tuple[str, _Registry]]:
    served = _Registry()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            served.asked.append(self.path)
            self.send_response(200)
            self.send_header("Content-Length", str(len(served.body)))
            self.end_headers()
            self.wfile.write(served.body)

        def log_message(self, *_args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", served
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.claim("approver-desk.pages-drawn")
def test_a_pinned_tarball_yields_the_two_files_once(
    tmp_path: Path, pinned: bytes, registry: tuple[str, _Registry]
) -> None:
    url, served = registry
    served.body = pinned
    folder = fetch_renderer(tmp_path, url)
    assert folder == renderer_folder(tmp_path)
    assert sorted(p.name for p in folder.iterdir()) == ["pdf.min.mjs", "pdf.worker.min.mjs"]
    assert load_renderer(folder) == {
        "/vendor/pdf.min.mjs": LIBRARY,
        "/vendor/pdf.worker.min.mjs": WORKER,
    }
    assert served.asked == [f"/pdfjs-dist/-/pdfjs-dist-{renderer.PDFJS_VERSION}.tgz"]
    assert fetch_renderer(tmp_path, url) == folder
    assert len(served.asked) == 1  # the cache, not the registry


@pytest.mark.claim("approver-desk.pages-drawn")
def test_a_tarball_that_is_not_the_pinned_one_writes_nothing(
    tmp_path: Path, pinned: bytes, registry: tuple[str, _Registry]
) -> None:
    url, served = registry
    served.body = _tarball({"pdf.min.mjs": b"evil", "pdf.worker.min.mjs": WORKER})
    with pytest.raises(RendererError, match="is not the pinned one"):
        fetch_renderer(tmp_path, url)
    assert not any(renderer_folder(tmp_path).glob("*.mjs"))


def test_a_registry_out_of_reach_or_in_clear_is_one_line(
    tmp_path: Path, pinned: bytes, closed_port: int
) -> None:
    with pytest.raises(
        RendererError, match=r"^cannot fetch pdf\.js [0-9.]+ from the npm registry: "
    ):
        fetch_renderer(tmp_path, f"http://127.0.0.1:{closed_port}")
    for clear in (
        "http://registry.example",
        "http://localhost.registry.example",
        "ftp://127.0.0.1",
    ):
        with pytest.raises(RendererError, match="over HTTPS"):
            fetch_renderer(tmp_path, clear)


@pytest.mark.claim("approver-desk.pages-drawn")
def test_a_changed_or_missing_file_is_refused_naming_it(tmp_path: Path, pinned: bytes) -> None:
    (tmp_path / "pdf.min.mjs").write_bytes(LIBRARY)
    with pytest.raises(RendererError, match=r"no readable pdf\.worker\.min\.mjs in "):
        load_renderer(tmp_path)
    (tmp_path / "pdf.worker.min.mjs").write_bytes(WORKER + b" ")
    with pytest.raises(
        RendererError, match=r"pdf\.worker\.min\.mjs is not pdf\.js [0-9.]+'s pdf\.worker\.min\.mjs"
    ):
        load_renderer(tmp_path)


def test_the_registry_is_the_firms_mirror_when_npm_is_pointed_at_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("npm_config_registry", "https://npm.firm.example/")
    assert tarball_url().startswith("https://npm.firm.example/pdfjs-dist/-/pdfjs-dist-")
    monkeypatch.delenv("npm_config_registry")
    assert tarball_url().startswith("https://registry.npmjs.org/pdfjs-dist/")
