"""The notifier's configuration: a TOML file the operator maintains, one section per tenant.

Notifier plug-ins are configured per tenant; a
notification links to the approval in the console (``console_url``); the
reminder comes ``reminder_lead_seconds`` before expiry. Secrets (the SMTP
password, each tenant's webhook signing secret) are never written in the file:
it names a file (``*_file``) or an environment variable (``*_env``) holding
them, and they are kept in :class:`Secret`, whose ``repr`` hides the value, so
no log line or error message can carry one. A file that breaks any rule below
is refused as a whole with one line naming the key (:class:`NotifyConfigError`);
the notifier never starts half-configured.

Example::

    console_url = "https://console.firm.example/"
    reminder_lead_seconds = 60
    time_zone = "America/New_York"      # IANA; the expiry in notices (default UTC)
    record = "notify.sqlite"            # relative to this file

    [tenants.tenant-acme]
    time_zone = "Europe/London"         # this tenant's approvers read London time
    content = true                      # notices name matter, destination, document,
                                        # where the gate's operator allows it too

    [tenants.tenant-acme.smtp]
    host = "smtp.firm.example"
    port = 587
    sender = "approvals@firm.example"
    starttls = true
    username = "smf"                    # a login needs starttls = true
    password_file = "/run/secrets/smtp-password"

    [tenants.tenant-acme.webhook]
    secret_env = "SMF_ACME_WEBHOOK_SECRET"

    [tenants.tenant-acme.approvers.attorney-alex]
    email = "alex@firm.example"
    webhook_url = "https://hooks.slack.com/services/..."
    webhook_format = "slack"            # or "teams"; https unless on loopback
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, tzinfo
from pathlib import Path
from typing import Annotated, Final, Literal
from urllib.parse import urlsplit
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import msgspec

from smf_assurance.approver.toml_file import read_toml
from smf_assurance.subjects import names
from smf_assurance.subjects.hosts import is_loopback
from smf_assurance.subjects.registry import KeyRegistry

MAX_SECRET_BYTES: Final = 4096
DEFAULT_LEAD_SECONDS: Final = 60
WebhookFormat = Literal["slack", "teams"]
Text = Annotated[str, msgspec.Meta(min_length=1, max_length=512)]


class NotifyConfigError(ValueError):
    """The notifier's configuration cannot be used; the message names the key, never a secret."""


class Secret:
    """A secret value that never shows itself in a ``repr``, ``str`` or log line."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "Secret('***')"

    __str__ = __repr__


# --- the file's shape --------------------------------------------------------------


class _SecretSource(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    secret_file: str | None = None
    secret_env: str | None = None


class _Smtp(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    host: Text
    sender: Text
    port: Annotated[int, msgspec.Meta(ge=1, le=65535)] = 25
    starttls: bool = False
    username: Text | None = None
    password_file: str | None = None
    password_env: str | None = None
    timeout_seconds: Annotated[float, msgspec.Meta(gt=0, le=60)] = 10.0


class _Approver(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    email: Text | None = None
    webhook_url: Text | None = None
    webhook_format: WebhookFormat = "slack"


class _Tenant(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    approvers: dict[str, _Approver]
    smtp: _Smtp | None = None
    webhook: _SecretSource | None = None
    time_zone: Text | None = None
    content: bool = False


class _File(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    console_url: Text
    tenants: dict[str, _Tenant]
    reminder_lead_seconds: Annotated[int, msgspec.Meta(ge=1, le=600)] = DEFAULT_LEAD_SECONDS
    record: str = "notify.sqlite"
    max_attempts: Annotated[int, msgspec.Meta(ge=1, le=20)] = 5
    retry_seconds: Annotated[float, msgspec.Meta(gt=0, le=300)] = 2.0
    webhook_timeout_seconds: Annotated[float, msgspec.Meta(gt=0, le=60)] = 10.0
    time_zone: Text = "UTC"


# --- what the notifier uses ----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SmtpSettings:
    host: str
    port: int
    sender: str
    starttls: bool
    username: str | None
    password: Secret | None
    timeout_seconds: float


@dataclass(frozen=True, slots=True)
class Contact:
    """Where one approver of one tenant is told: an address, a webhook, or both."""

    email: str | None
    webhook_url: Secret | None
    """Slack and Teams incoming-webhook URLs are bearer credentials: kept like a secret."""
    webhook_format: WebhookFormat


@dataclass(frozen=True, slots=True)
class TenantChannels:
    smtp: SmtpSettings | None
    webhook_secret: Secret | None
    contacts: Mapping[str, Contact]
    zone: tzinfo = field(default=UTC)
    """Where this tenant's approvers read the time: a notice's expiry is written in it
    (the tenant's ``time_zone``, else the file's, else UTC)."""
    content: bool = False
    """The firm lets this tenant's notices name the matter, destination and document
    (``content = true``); the gate's operator must opt the tenant in too
    (``smf_assurance.pipeline.chain.summaries``). False: content-free."""


@dataclass(frozen=True, slots=True)
class NotifyConfig:
    console_url: str
    reminder_lead_ms: int
    record: Path
    max_attempts: int
    retry_seconds: float
    webhook_timeout_seconds: float
    tenants: Mapping[str, TenantChannels]


def load_config(path: Path, environ: Mapping[str, str] | None = None) -> NotifyConfig:
    """Read and check the whole file, and every secret it names, before anything is sent."""
    env = os.environ if environ is None else environ
    parsed = read_toml(path, _File, NotifyConfigError)
    _check_url(parsed.console_url, "console_url")
    zone = _zone(parsed.time_zone, "time_zone")
    tenants = {
        tenant: _tenant(tenant, section, path.parent, env, zone)
        for tenant, section in parsed.tenants.items()
    }
    record = Path(parsed.record)
    return NotifyConfig(
        console_url=parsed.console_url,
        reminder_lead_ms=parsed.reminder_lead_seconds * 1000,
        record=record if record.is_absolute() else path.parent / record,
        max_attempts=parsed.max_attempts,
        retry_seconds=parsed.retry_seconds,
        webhook_timeout_seconds=parsed.webhook_timeout_seconds,
        tenants=tenants,
    )


def _zone(name: str, where: str) -> tzinfo:
    """An IANA time zone by name ("UTC" needs no database); one the machine's zone
    database does not hold is refused naming the key."""
    if name == "UTC":
        return UTC
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise NotifyConfigError(
            f"{where}: {name!r} is not a time zone this machine knows (an IANA name, "
            "e.g. America/New_York; the system's tzdata holds them)"
        ) from exc


def _tenant(
    tenant: str, section: _Tenant, base: Path, env: Mapping[str, str], zone: tzinfo
) -> TenantChannels:
    where = f"tenants.{tenant}"
    try:
        names.token(tenant)
    except names.SubjectError as exc:
        raise NotifyConfigError(f"{where}: not a tenant id") from exc
    smtp = _smtp(section.smtp, f"{where}.smtp", base, env) if section.smtp else None
    webhook_secret = (
        _secret(
            section.webhook.secret_file, section.webhook.secret_env, f"{where}.webhook", base, env
        )
        if section.webhook
        else None
    )
    contacts: dict[str, Contact] = {}
    for approver, entry in section.approvers.items():
        at = f"{where}.approvers.{approver}"
        if entry.email is None and entry.webhook_url is None:
            raise NotifyConfigError(f"{at}: names neither email nor webhook_url")
        if entry.email is not None and smtp is None:
            raise NotifyConfigError(f"{at}: an email needs [{where}.smtp]")
        if entry.email is not None and ("@" not in entry.email or "\n" in entry.email):
            raise NotifyConfigError(f"{at}.email: not an address")
        if entry.webhook_url is not None:
            _check_url(entry.webhook_url, f"{at}.webhook_url", https_unless_loopback=True)
            if webhook_secret is None:
                raise NotifyConfigError(f"{at}: a webhook needs [{where}.webhook] and its secret")
        contacts[approver] = Contact(
            email=entry.email,
            webhook_url=Secret(entry.webhook_url) if entry.webhook_url else None,
            webhook_format=entry.webhook_format,
        )
    if section.time_zone is not None:
        zone = _zone(section.time_zone, f"{where}.time_zone")
    return TenantChannels(
        smtp=smtp,
        webhook_secret=webhook_secret,
        contacts=contacts,
        zone=zone,
        content=section.content,
    )


def _smtp(section: _Smtp, where: str, base: Path, env: Mapping[str, str]) -> SmtpSettings:
    password = None
    if section.password_file is not None or section.password_env is not None:
        password = _secret(
            section.password_file, section.password_env, where, base, env, "password"
        )
    if (password is None) != (section.username is None):
        raise NotifyConfigError(f"{where}: username and a password come together")
    if password is not None and not section.starttls:
        raise NotifyConfigError(f"{where}: a login needs starttls = true (no password in clear)")
    return SmtpSettings(
        host=section.host,
        port=section.port,
        sender=section.sender,
        starttls=section.starttls,
        username=section.username,
        password=password,
        timeout_seconds=section.timeout_seconds,
    )


def _secret(
    file: str | None,
    variable: str | None,
    where: str,
    base: Path,
    env: Mapping[str, str],
    stem: str = "secret",
) -> Secret:
    """One secret, from exactly one of a file or an environment variable; never empty."""
    if (file is None) == (variable is None):
        raise NotifyConfigError(f"{where}: give exactly one of {stem}_file and {stem}_env")
    if variable is not None:
        value = env.get(variable, "")
        if not value:
            raise NotifyConfigError(f"{where}.{stem}_env: ${variable} is not set")
        return Secret(value)
    assert file is not None
    source = Path(file) if Path(file).is_absolute() else base / file
    try:
        data = source.read_bytes()[: MAX_SECRET_BYTES + 1]
    except OSError as exc:
        raise NotifyConfigError(
            f"{where}.{stem}_file: cannot read {source}: {exc.strerror}"
        ) from exc
    text = data.decode("utf-8", "replace").strip()
    if not text or len(data) > MAX_SECRET_BYTES:
        raise NotifyConfigError(f"{where}.{stem}_file: {source} holds no usable secret")
    return Secret(text)


def _check_url(url: str, where: str, *, https_unless_loopback: bool = False) -> None:
    """An http(s) URL; a webhook's must be https unless it stays on this machine
    (its body is signed, but the URL itself may be the receiver's credential)."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise NotifyConfigError(f"{where}: not an http(s) URL")
    if https_unless_loopback and parts.scheme == "http" and not is_loopback(parts.hostname):
        raise NotifyConfigError(f"{where}: https required off this machine")


def unknown_to_roster(config: NotifyConfig, roster: KeyRegistry) -> str | None:
    """The first tenant or approver id of ``config`` the roster does not know, as
    one line naming it; ``None`` when every one is known.

    A misspelt id would otherwise notify nobody and say nothing: no approval of a
    tenant no approver on the roster serves is ever announced to anyone, and a
    contact under an id that is no approver of the roster is never looked up.
    The notifier refuses to start instead (fail closed on unknown input). Who of
    the known is told of an approval stays the roster's word at that moment
    (``entitled``), as before: a contact of an approver not entitled to a tenant
    is kept and never used."""
    approvers = {p.name: p.entry for p in roster.principals.values() if p.entry.role == "approver"}
    served = {tenant for entry in approvers.values() for tenant in entry.tenants}
    for tenant, channels in sorted(config.tenants.items()):
        if tenant not in served:
            return f"tenants.{tenant}: no approver on the roster is entitled to tenant {tenant!r}"
        for approver in sorted(channels.contacts):
            if approver not in approvers:
                return (
                    f"tenants.{tenant}.approvers.{approver}: {approver!r} is no approver "
                    "on the roster"
                )
    return None
