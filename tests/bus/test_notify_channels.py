"""The notifier's channels on their own: SMTP and signed webhooks.

Real servers on 127.0.0.1, port 0: aiosmtpd's SMTP protocol (with AUTH over
plain SMTP where a login is under test) and an aiohttp application.

What these tests prove:

- A webhook signature verifies only for the exact body, a fresh timestamp
  and the tenant's secret: a changed body, a replay outside the window, a
  non-numeric timestamp or another tenant's secret fail.
- Each SMTP and webhook failure is a ``DeliveryError`` of its own kind
  (unreachable, refused, login refused, non-2xx status, a redirect not
  followed), and its message carries neither the password, the address nor
  the webhook URL.
- With the right login the message is delivered as built, with the address
  it was built for.

What they do not prove: STARTTLS (the local server speaks plain SMTP).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web
from aiosmtpd.smtp import SMTP, AuthResult, Envelope, LoginPassword, Session

from smf_assurance.approver.notify.channels import (
    DeliveryError,
    post_webhook,
    send_email,
    signature,
    verify_signature,
)
from smf_assurance.approver.notify.config import Secret, SmtpSettings, load_config
from smf_assurance.approver.notify.notice import Notice, email_for

PASSWORD = "correct horse battery staple"
SECRET = Secret("tenant-acme-webhook-secret")
NOTICE = Notice(
    "pending", "sha256:" + "ab" * 32, "tenant-acme", 1_800_000_000_000, "https://c.example/"
)


def test_signature_verifies_only_the_exact_fresh_body_under_the_tenant_secret() -> None:
    now = int(time.time())
    body = b'{"text":"An approval for tenant-acme is waiting"}'
    stamp = str(now)
    signed = signature(SECRET, stamp, body)
    assert signed.startswith("v1=")
    assert verify_signature(SECRET, stamp, body, signed, now)
    assert not verify_signature(SECRET, stamp, body + b" ", signed, now)  # changed body
    assert not verify_signature(SECRET, stamp, body, signed, now + 301)  # replayed later
    assert not verify_signature(SECRET, str(now + 1), body, signed, now)  # timestamp moved
    assert not verify_signature(SECRET, "12e3", body, signed, now)
    assert not verify_signature(Secret("tenant-beta-secret"), stamp, body, signed, now)
    assert "tenant-acme-webhook-secret" not in repr(SECRET) + str(SECRET)


# --- SMTP ------------------------------------------------------------------------------


class Inbox:
    def __init__(self, answer: str = "250 OK") -> None:
        self.answer = answer
        self.received: list[Envelope] = []

    async def handle_DATA(self, _server: SMTP, _session: Session, envelope: Envelope) -> str:
        if self.answer.startswith("250"):
            self.received.append(envelope)
        return self.answer


def _login(
    _server: SMTP, _session: Session, _envelope: Envelope, _mechanism: str, data: object
) -> AuthResult:
    ok = isinstance(data, LoginPassword) and (data.login, data.password) == (
        b"smf",
        PASSWORD.encode(),
    )
    return AuthResult(success=ok, handled=False)


@contextlib.asynccontextmanager
async def smtp_server(inbox: Inbox, *, auth: bool = False) -> AsyncIterator[int]:
    def protocol() -> SMTP:
        if auth:
            return SMTP(inbox, authenticator=_login, auth_require_tls=False)
        return SMTP(inbox)

    server = await asyncio.get_running_loop().create_server(protocol, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        server.close()
        await server.wait_closed()


def settings(port: int, password: str | None = None) -> SmtpSettings:
    return SmtpSettings(
        host="127.0.0.1",
        port=port,
        sender="approvals@firm.example",
        starttls=False,
        username="smf" if password else None,
        password=Secret(password) if password else None,
        timeout_seconds=5,
    )


async def refused(coro: object) -> DeliveryError:
    with pytest.raises(DeliveryError) as caught:
        await coro  # type: ignore[misc]
    for leak in (PASSWORD, "alex@firm.example", "127.0.0.1", "/hook"):
        assert leak not in str(caught.value)
    return caught.value


async def test_smtp_failures_are_errors_by_kind_and_a_login_delivers(closed_port: int) -> None:
    message = email_for(NOTICE, "approvals@firm.example", "alex@firm.example")
    error = await refused(send_email(settings(closed_port), message))
    assert error.kind == "smtp_unreachable"

    async with smtp_server(Inbox("451 4.3.0 down")) as port:
        assert (await refused(send_email(settings(port), message))).kind == "smtp_refused"

    inbox = Inbox()
    async with smtp_server(inbox, auth=True) as port:
        wrong = settings(port, "not the password")
        assert (await refused(send_email(wrong, message))).kind == "smtp_auth_refused"
        assert inbox.received == []
        await send_email(settings(port, PASSWORD), message)
    (delivered,) = inbox.received
    assert delivered.rcpt_tos == ["alex@firm.example"]
    assert isinstance(delivered.content, bytes)
    assert NOTICE.approval_id.encode() in delivered.content


# --- webhooks --------------------------------------------------------------------------


async def test_webhook_failures_are_errors_by_kind(closed_port: int) -> None:
    async def answer(request: web.Request) -> web.Response:
        if request.path == "/moved":
            raise web.HTTPFound("http://127.0.0.1:9/elsewhere")
        return web.Response(status=int(request.path.strip("/")))

    app = web.Application()
    app.router.add_post("/{tail:.*}", answer)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    base = f"http://127.0.0.1:{int(runner.addresses[0][1])}"
    try:
        async with aiohttp.ClientSession() as session:

            async def post(url: str) -> None:
                await post_webhook(session, Secret(url), SECRET, b"{}", int(time.time()), 5)

            await post(f"{base}/204")
            assert (await refused(post(f"{base}/500"))).kind == "webhook_status_500"
            assert (await refused(post(f"{base}/moved"))).kind == "webhook_status_302"
            unreachable = await refused(post(f"http://127.0.0.1:{closed_port}/hook"))
            assert unreachable.kind == "webhook_unreachable"
    finally:
        await runner.cleanup()


def test_a_secret_file_is_read_stripped_and_an_empty_one_refused(tmp_path: Path) -> None:
    (tmp_path / "password").write_text(PASSWORD + "\n")
    (tmp_path / "empty").write_text("\n")
    text = (
        'console_url = "https://c.example/"\n'
        "[tenants.acme.smtp]\n"
        'host = "127.0.0.1"\nsender = "a@x.example"\nusername = "smf"\nstarttls = true\n'
        'password_file = "{file}"\n'
        "[tenants.acme.approvers.a]\n"
        'email = "a@x.example"\n'
    )
    config_file = tmp_path / "notify.toml"
    config_file.write_text(text.format(file="password"))
    smtp = load_config(config_file).tenants["acme"].smtp
    assert smtp is not None
    assert smtp.password is not None
    assert smtp.password.reveal() == PASSWORD
    assert PASSWORD not in repr(smtp)
    config_file.write_text(text.format(file="empty"))
    with pytest.raises(ValueError, match="holds no usable secret"):
        load_config(config_file)
    config_file.write_text(text.format(file="missing"))
    with pytest.raises(ValueError, match="password_file: cannot read"):
        load_config(config_file)
