"""HTTPS for the console and the model gateway (issue 39, "TLS everywhere a network is
crossed"), with certificates ``tls issue`` signs from the CA ``tls init`` made.

Everything is real: the console and the model gateway serve through aiohttp on a real
socket, against a real gate and nats-server, and the fake provider stands outside.

Proves:
- The console served with ``--tls-cert``/``--tls-key`` answers over HTTPS a client that
  trusts the CA: its page, a sign-in whose session cookie is ``Secure`` (a browser never
  sends it over plain HTTP); a plain-HTTP request gets no page, and a client that trusts
  another CA fails the certificate check.
- The model gateway served the same way answers a runtime's completion over HTTPS, and
  the same two clients get nothing; its URL says ``https``.
- ``doctor``'s console check trusts the deployment's CA (``SMF_NATS_CA``): it reaches
  the console's health with it, and says the certificate does not verify without it.
- The command line refuses to serve plain HTTP beyond loopback (console ``--host
  0.0.0.0``, model gateway ``--listen 0.0.0.0:PORT``), and a certificate without its
  key, each in one line, before anything connects.

Does not prove: a browser importing the CA (the browser tests run on loopback, plain);
the Hermes and OpenClaw runtimes trusting the CA for the gateway's HTTPS (their
providers' HTTP clients take the system's store, or NODE_EXTRA_CA_CERTS and
SSL_CERT_FILE, not tested here).
"""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import msgspec
import pytest

from smf_assurance.approver.console.access import LOGIN_PAYLOAD_TYPE, ConsoleLogin
from smf_assurance.approver.console.server import SESSION_COOKIE, ConsoleSettings, start_console
from smf_assurance.ops.cli.main import main
from smf_assurance.ops.doctor.checks import Settings
from smf_assurance.ops.doctor.run import _console as doctor_console
from smf_assurance.ops.local.model_gateway import set_upstream
from smf_assurance.ops.local.natsserver import EmbeddedNatsServer
from smf_assurance.ops.local.state import StateDir, provision_demo
from smf_assurance.ops.local.tls import IssuedCert, init_tls, issue_cert, server_context
from smf_assurance.subjects import dsse
from smf_assurance.subjects.bus_access import TLS_CA_ENV
from smf_assurance.subjects.clock import wall_clock_ms
from smf_assurance.subjects.registry import load_registry
from tests.support.model_gateway import PRINCIPAL, RUNTIME_ID, attest, chat, gateway_world

ATTORNEY = "attorney-alex"


@pytest.fixture
def ca_dir(tmp_path: Path) -> Path:
    return init_tls(tmp_path / "ca", ()).directory


def issued(ca_dir: Path, name: str) -> IssuedCert:
    return issue_cert(ca_dir, name, (), ca_dir.parent / f"{name}-tls")


def trusting(ca: Path) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(ca))


async def refused_by_both(url: str, other_ca: Path) -> None:
    """A plain-HTTP request to the HTTPS port and a client trusting another CA get no
    answer from the server."""
    plain = url.replace("https://", "http://", 1)
    async with aiohttp.ClientSession() as session:
        with pytest.raises(aiohttp.ClientError):
            async with session.get(plain, timeout=aiohttp.ClientTimeout(total=10)) as reply:
                await reply.read()
        with pytest.raises(aiohttp.ClientConnectorCertificateError):
            async with session.get(url, ssl=trusting(other_ca)) as reply:
                await reply.read()


@pytest.fixture
async def https_console(
    tmp_path: Path, ca_dir: Path, nats_server: EmbeddedNatsServer
) -> AsyncIterator[tuple[str, StateDir]]:
    state = StateDir(tmp_path / "state")
    provision_demo(state)
    cert = issued(ca_dir, "console")
    console = await start_console(
        ConsoleSettings(
            nats_url=nats_server.url,
            registry=state.registry,
            tls=server_context(cert.cert, cert.key),
        )
    )
    try:
        yield console.url, state
    finally:
        await console.close()


@pytest.mark.claim("bus-access.tls-across-the-network")
async def test_the_console_over_https_serves_only_clients_that_trust_its_ca(
    https_console: tuple[str, StateDir], ca_dir: Path, tmp_path: Path
) -> None:
    url, state = https_console
    assert url.startswith("https://127.0.0.1:")
    ca = trusting(ca_dir / "ca.pem")
    async with aiohttp.ClientSession() as session:
        async with session.get(url, ssl=ca) as page:
            assert page.status == 200
            assert b"/static/app.js" in await page.read()
        async with session.get(url + "api/challenge", ssl=ca) as challenge:
            nonce = (await challenge.json())["nonce"]
        login = ConsoleLogin(schema="smf.console-login/1", approver_id=ATTORNEY, nonce=nonce)
        body = dsse.encode_envelope(
            dsse.sign_struct(LOGIN_PAYLOAD_TYPE, login, [state.key(ATTORNEY)])
        )
        async with session.post(
            url + "api/session",
            data=body,
            ssl=ca,
            headers={"Content-Type": "application/json"},
        ) as signed_in:
            assert signed_in.status == 200, await signed_in.text()
            cookie = signed_in.headers["Set-Cookie"]
    assert cookie.startswith(f"{SESSION_COOKIE}=")
    assert "; Secure" in cookie
    await refused_by_both(url, init_tls(tmp_path / "other-ca", ()).ca_cert)


@pytest.mark.claim("bus-access.tls-across-the-network")
async def test_the_model_gateway_over_https_serves_only_clients_that_trust_its_ca(
    tmp_path: Path, ca_dir: Path
) -> None:
    cert = issued(ca_dir, "model-gateway")
    tls = server_context(cert.cert, cert.key)
    async with gateway_world(tmp_path, tls=tls) as world:
        url = world.gateway.url
        assert url.startswith("https://127.0.0.1:")
        assert (await attest(world, PRINCIPAL, RUNTIME_ID)).accepted
        status, body = await chat(
            world, RUNTIME_ID, stream=False, trust=trusting(ca_dir / "ca.pem")
        )
        assert status == 200, body
        assert msgspec.json.decode(body)["choices"][0]["message"]["role"] == "assistant"
        assert len(world.model.requests) == 1
        await refused_by_both(url + "/models", init_tls(tmp_path / "other-ca", ()).ca_cert)
        assert len(world.model.requests) == 1


BEYOND = "plain HTTP is served on loopback only: give --tls-cert and --tls-key to serve on"


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["console", "--host", "0.0.0.0"], f"{BEYOND} 0.0.0.0"),
        (["model-gateway", "serve", "--listen", "10.1.2.3:0"], f"{BEYOND} 10.1.2.3"),
        (["console", "--tls-cert", "/x/console.pem"], "give both --tls-cert and --tls-key"),
    ],
    ids=["console-beyond-loopback", "gateway-beyond-loopback", "certificate-without-key"],
)
def test_plain_http_beyond_loopback_is_refused_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], said: str
) -> None:
    state = StateDir(tmp_path / "state")
    provision_demo(state)
    set_upstream(state, "http://127.0.0.1:9/v1", "local-model", None)
    assert main([*argv, "--state-dir", str(state.root)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"smf-assurance: {said}"), err
    assert len(err.splitlines()) == 1, err


async def test_doctor_checks_an_https_console_against_the_deployments_ca(
    https_console: tuple[str, StateDir],
    ca_dir: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``doctor --console https://...`` trusts the CA it is given for the bus
    (``SMF_NATS_CA``): with it, the check reaches the console's health (here a 503, no
    gate runs); with another CA or none, it says the certificate does not verify."""
    url, state = https_console
    settings = Settings(
        url="nats://127.0.0.1:1",
        credential=None,
        registry=load_registry(state.registry),
        trust_root=None,
        state=state,
        console=url,
        clock=wall_clock_ms,
    )
    monkeypatch.setenv(TLS_CA_ENV, str(ca_dir / "ca.pem"))
    reached = await doctor_console(settings)
    assert (reached.status, reached.detail.split(":")[0]) == ("fail", "/healthz answers 503")
    unverified = "its certificate does not verify against the CA trusted"
    monkeypatch.setenv(TLS_CA_ENV, str(init_tls(tmp_path / "other-ca", ()).ca_cert))
    other = await doctor_console(settings)
    assert (other.status, other.detail.startswith(unverified)) == ("fail", True), other
    monkeypatch.delenv(TLS_CA_ENV)
    system = await doctor_console(settings)
    assert (system.status, system.detail.startswith(unverified)) == ("fail", True), system
