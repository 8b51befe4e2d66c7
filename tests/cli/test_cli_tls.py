"""``tls init`` and what a command says when TLS is what stops it (issue 39, "a wrong or
unknown credential is named as such"; "TLS everywhere a network is crossed").

Against a real three-node cluster requiring TLS (``LocalNatsCluster(tls=True)``): a
command given the bus's CA does its work (the hold list, read as the operator); given
another CA, it says the bus's certificate does not verify; given none, it says a bus
that requires TLS sends a plain client nothing, and to set ``SMF_NATS_CA``; given a CA
file that cannot be used, it names the variable and the file. Each is one line, exit 1,
before anything else is done. ``doctor`` says the same in its bus check. And the
asyncio note each closed TLS connection logs is not printed as a second line.

Does not prove: messages for a server whose certificate names another host (the
verification's reason is passed on as OpenSSL words it, not checked here).
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from smf_assurance.ops.cli.main import main
from smf_assurance.ops.local.cluster import LocalNatsCluster
from smf_assurance.ops.local.logs import TLS_EOF_NOTE, configure_logging
from smf_assurance.ops.local.state import StateDir, provision_demo
from smf_assurance.ops.local.tls import init_tls
from smf_assurance.subjects.bus_access import TLS_CA_ENV
from tests.support.bus_helpers import registry_entries


@pytest.fixture
def state(tmp_path: Path) -> StateDir:
    made = StateDir(tmp_path / "state")
    provision_demo(made)
    return made


def one_line_of(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    lines = err.splitlines()
    assert len(lines) == 1, err
    return lines[0]


def test_a_command_names_tls_as_what_stops_it(
    tmp_path: Path,
    tls_cluster: LocalNatsCluster,
    state: StateDir,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    asyncio.run(tls_cluster.authorize(registry_entries(state.registry)))
    url = tls_cluster.urls[0]
    argv = ["holds", "list", "--nats", url, "--state-dir", str(state.root)]
    assert tls_cluster.tls is not None

    other = init_tls(tmp_path / "other-ca", ())
    monkeypatch.setenv(TLS_CA_ENV, str(other.ca_cert))
    assert main(argv) == 1
    line = one_line_of(capsys)
    assert line.startswith(f"smf-assurance: cannot connect to NATS at {url}: ")
    assert "the bus's certificate does not verify" in line
    assert f"give the bus's own CA as {TLS_CA_ENV}" in line

    monkeypatch.delenv(TLS_CA_ENV)
    assert main(argv) == 1
    line = one_line_of(capsys)
    assert "a bus that requires TLS says nothing to a plain client" in line
    assert f"set {TLS_CA_ENV} to its CA certificate" in line

    missing = tmp_path / "no-such-ca.pem"
    monkeypatch.setenv(TLS_CA_ENV, str(missing))
    assert main(argv) == 1
    assert one_line_of(capsys) == (
        f"smf-assurance: {TLS_CA_ENV}={missing} is not a readable CA certificate file"
    )

    # with the bus's own CA the command does its work, over TLS, as the operator
    monkeypatch.setenv(TLS_CA_ENV, str(tls_cluster.tls.ca_cert))
    assert main([*argv, "--json"]) == 0
    captured = capsys.readouterr()
    assert captured.out.startswith('{"paths":[]'), captured
    assert captured.err == ""

    monkeypatch.setenv(TLS_CA_ENV, str(other.ca_cert))
    assert main(["doctor", "--nats", url, "--state-dir", str(state.root), "--json"]) == 1
    out = capsys.readouterr().out
    assert "the bus's certificate does not verify" in out


def test_the_asyncio_note_of_a_closed_tls_connection_is_not_printed(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The filter sits on the asyncio logger itself, so no handler (the console's, or
    pytest's here) receives the note; every other asyncio warning still goes through."""
    configure_logging(json=False, level="warning")
    with caplog.at_level(logging.WARNING, logger="asyncio"):
        logging.getLogger("asyncio").warning(TLS_EOF_NOTE)
        logging.getLogger("asyncio").warning("another asyncio warning")
    assert caplog.messages == ["another asyncio warning"]
