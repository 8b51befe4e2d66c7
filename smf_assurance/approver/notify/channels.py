"""The two ways a notice leaves: SMTP, and a signed HTTPS webhook (Slack or Teams format).

What this module keeps true:

- A failure is a :class:`DeliveryError` whose ``kind`` names what failed
  (``smtp_unreachable``, ``smtp_refused``, ``webhook_timeout``,
  ``webhook_status_500``, ...) and nothing else: no address, no URL (a chat
  webhook URL is itself a credential), no password, no server reply text. The
  caller logs the kind and retries within a bound; nothing here approves,
  denies or holds anything.
- Every webhook is signed with its tenant's secret: HMAC-SHA256 over
  ``<timestamp>.<body>`` in :data:`SIGNATURE_HEADER` (``v1=<hex>``), the Unix
  time in :data:`TIMESTAMP_HEADER`. A receiver checks it with
  :func:`verify_signature` (or its own twenty lines, docs README "Notifications"):
  the timestamp inside the MAC stops a captured request from being replayed
  later than ``tolerance_seconds``, the body inside it stops a changed one.
- SMTP uses the standard library's client in a worker thread, with a timeout,
  so a hung mail server holds one thread for at most that long and never the
  loop.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import smtplib
import ssl
from email.message import EmailMessage
from typing import Final

import aiohttp

from smf_assurance.approver.notify.config import Secret, SmtpSettings

SIGNATURE_HEADER: Final = "X-Smf-Signature"
TIMESTAMP_HEADER: Final = "X-Smf-Timestamp"
SIGNATURE_VERSION: Final = "v1"
DEFAULT_TOLERANCE_SECONDS: Final = 300


class DeliveryError(Exception):
    """A notice was not delivered; ``kind`` is safe to log, the message is the kind only."""

    def __init__(self, kind: str) -> None:
        super().__init__(kind)
        self.kind = kind


# --- e-mail ----------------------------------------------------------------------------


def _send_blocking(settings: SmtpSettings, message: EmailMessage) -> None:
    try:
        with smtplib.SMTP(settings.host, settings.port, timeout=settings.timeout_seconds) as smtp:
            if settings.starttls:
                smtp.starttls(context=ssl.create_default_context())
            if settings.username is not None and settings.password is not None:
                smtp.login(settings.username, settings.password.reveal())
            smtp.send_message(message)
    except smtplib.SMTPAuthenticationError as exc:
        raise DeliveryError("smtp_auth_refused") from exc
    except smtplib.SMTPException as exc:
        raise DeliveryError("smtp_refused") from exc
    except (TimeoutError, ssl.SSLError) as exc:
        raise DeliveryError(f"smtp_{type(exc).__name__}") from exc
    except OSError as exc:
        raise DeliveryError("smtp_unreachable") from exc


async def send_email(settings: SmtpSettings, message: EmailMessage) -> None:
    await asyncio.to_thread(_send_blocking, settings, message)


# --- webhooks --------------------------------------------------------------------------


def signature(secret: Secret, timestamp: str, body: bytes) -> str:
    """``v1=`` and the hex HMAC-SHA256 of ``<timestamp>.<body>`` under the tenant's secret."""
    mac = hmac.new(secret.reveal().encode(), timestamp.encode() + b"." + body, hashlib.sha256)
    return f"{SIGNATURE_VERSION}={mac.hexdigest()}"


def verify_signature(
    secret: Secret,
    timestamp: str,
    body: bytes,
    presented: str,
    now_seconds: int,
    tolerance_seconds: int = DEFAULT_TOLERANCE_SECONDS,
) -> bool:
    """What a receiver checks: a fresh timestamp, and a MAC over it and these exact bytes.

    Compared in constant time; a timestamp that is not a whole number, or is
    older or newer than ``tolerance_seconds``, fails (a replay outside the
    window)."""
    if not timestamp.isdigit() or abs(now_seconds - int(timestamp)) > tolerance_seconds:
        return False
    return hmac.compare_digest(signature(secret, timestamp, body), presented)


async def post_webhook(
    session: aiohttp.ClientSession,
    url: Secret,
    secret: Secret,
    body: bytes,
    now_seconds: int,
    timeout_seconds: float,
) -> None:
    """POST a signed notice; anything but a 2xx answer in time is a :class:`DeliveryError`."""
    timestamp = str(now_seconds)
    headers = {
        "Content-Type": "application/json",
        TIMESTAMP_HEADER: timestamp,
        SIGNATURE_HEADER: signature(secret, timestamp, body),
    }
    try:
        async with session.post(
            url.reveal(),
            data=body,
            headers=headers,
            timeout=aiohttp.ClientTimeout(total=timeout_seconds),
            allow_redirects=False,
        ) as response:
            if not 200 <= response.status < 300:
                raise DeliveryError(f"webhook_status_{response.status}")
    except TimeoutError as exc:
        raise DeliveryError("webhook_timeout") from exc
    except aiohttp.ClientError as exc:
        raise DeliveryError("webhook_unreachable") from exc
