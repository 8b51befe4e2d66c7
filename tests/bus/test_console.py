"""The approvers' console server, without a browser: sign-in, the list, the relay, HTTP.

docs/CONSOLE.md. A real nats-server, the full stack from
``smf_assurance.ops.local.stack.start_stack`` (gate and example connectors), the console from
``smf_assurance.approver.console.server.start_console`` on a free port (aiohttp), and raw HTTP
over asyncio streams, so that malformed requests can be sent too. Requests that the page
would sign in the browser are signed here with the same keys, in Python.

What these tests prove:

- The page and its two assets are served, with a Content-Security-Policy that
  allows no inline or foreign script, ``nosniff`` and no caching; nothing else
  is served (no path outside the three files).
- A session starts only with a login signed by an approver key on the roster,
  naming that approver, over a fresh challenge used once; a replayed login,
  a runtime's key, another approver's name, a tampered signature, a login
  signed for another purpose and garbage are each refused with their reason.
  Without a session nothing but the page and the challenge answers; a session
  ends at sign-out and as soon as the roster no longer names its key.
- The list holds the announcement's identities and reasons, never the content,
  and only for an approver the roster lets resolve it: the attorney of the
  tenant sees the held filing, the paralegal of the same tenant and the
  attorney of another tenant see nothing.
- The relay hands the gate's answers back unchanged: content to the attorney
  (matching its digest), a refusal to the paralegal; allow-once executes
  exactly once (one filing in the outbox, one order on the stream, state
  ``consumed``), and a replay (through the console and on the bus) and a
  second allow-once are refused ``approval_not_pending``; a deny sends nothing;
  self-approval and an expired approval are refused with their reasons.
- Without a gate the list is empty and says the gate is not answering, and
  the relay answers ``gate_unreachable``.
- HTTP (aiohttp parses): every answer, aiohttp's own refusals of a
  malformed request included, carries the security headers and closes the
  connection; a request that could be read two ways (two lengths, a length and
  chunked) is refused and nothing smuggled after it is answered; a body over
  64 KiB, chunked bodies and HTTP/0.9 are refused unread with their reasons; a
  malformed request's bytes never reach the log; twenty clients trickling their
  heads cannot keep the page from others and are cut off by the read timeout.
- ``/healthz`` answers 200 with a gate behind a live bus, 503 with
  ``bus_disconnected`` while nats-server is down (200 again once it is back),
  ``gate_not_answering`` without a gate and ``board_not_fed`` once the board's
  refresh loop has stopped; it names nothing held.
- ``smf-assurance console`` serves until SIGTERM, prints one readiness line,
  and fails in one line on a bad roster, port or bus.

What they do not prove: anything about the page itself (see
``tests/browser/test_console_browser.py``), TLS (the console serves plain HTTP on
loopback; docs/CONSOLE.md), or more than one console process.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import json
import os
import re
import signal
import socket
import threading
import time
import urllib.request
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import nats
import pytest
import structlog
from nats.aio.client import Client
from nats.aio.msg import Msg

from smf_assurance.approver import console as console_package
from smf_assurance.approver.client import content_matches
from smf_assurance.approver.console.access import (
    LOGIN_PAYLOAD_TYPE,
    ConsoleLogin,
    LoginRefused,
    Roster,
    Sessions,
)
from smf_assurance.approver.console.board import ApprovalBoard
from smf_assurance.approver.console.renderer import PDFJS_VERSION
from smf_assurance.approver.console.server import (
    SESSION_COOKIE,
    ConsoleSettings,
    RunningConsole,
    start_console,
)
from smf_assurance.ops.cli.main import main
from smf_assurance.ops.local.defaults import CONSOLE, OPERATOR
from smf_assurance.ops.local.logs import configure_logging
from smf_assurance.ops.local.natsserver import EmbeddedNatsServer, reserve_port
from smf_assurance.ops.local.stack import Stack, start_stack
from smf_assurance.ops.local.state import DEMO_TENANT, StateDir, provision_demo
from smf_assurance.pipeline.chain.announcements import AnnouncementDesk
from smf_assurance.pipeline.service import Requester
from smf_assurance.subjects import dsse, names
from smf_assurance.subjects.approvals import (
    RULE_NOT_DESCRIBED,
    ApprovalResolution,
    ApprovalView,
    PendingAnnouncement,
    RuleShown,
    ShowRequest,
)
from smf_assurance.subjects.bus_access import connect_options
from smf_assurance.subjects.clock import wall_clock_ms
from smf_assurance.subjects.hosts import is_loopback
from smf_assurance.subjects.keys import SigningKey
from smf_assurance.subjects.registry import KeyRegistry, RegistryFile, encode_registry
from tests.support.bus_helpers import connector_durable, consumer_drained, wait_for
from tests.support.clocks import FrozenClock
from tests.support.clocks import OffsetClock as Clock
from tests.support.console import (
    ATTORNEY,
    FILING,
    FILING_RULES,
    OTHER_TENANT_ATTORNEY,
    PARALEGAL,
    TENANT_TTL_MS,
    a_binding,
    hold_filing,
    outbox,
    provision,
)

# --- shared with tests/browser/test_console_browser.py -------------------------------------


def signed(key: SigningKey, payload_type: str, value: msgspec.Struct) -> bytes:
    return dsse.encode_envelope(dsse.sign_struct(payload_type, value, [key]))


def show_request(key: SigningKey, approver: str, approval_id: str) -> bytes:
    request = ShowRequest(
        schema="smf.approval-show/1",
        approval_id=approval_id,
        resolver_id=approver,
        requested_at_ms=wall_clock_ms(),
    )
    return signed(key, names.PAYLOAD_SHOW_REQUEST, request)


def resolution(
    key: SigningKey, approver: str, approval_id: str, digest: str, decision: str = "allow-once"
) -> bytes:
    value = ApprovalResolution(
        schema="smf.approval-resolution/1",
        approval_id=approval_id,
        decision=decision,  # type: ignore[arg-type]
        binding_digest=digest,
        resolver_id=approver,
        resolved_at_ms=wall_clock_ms(),
    )
    return signed(key, names.PAYLOAD_RESOLUTION, value)


# --- raw HTTP ------------------------------------------------------------------------


@dataclass(frozen=True)
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes

    @property
    def json(self) -> Any:
        return json.loads(self.body)


async def exchange(port: int, raw: bytes) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(raw)
    await writer.drain()
    data = await asyncio.wait_for(reader.read(), 15)
    writer.close()
    await writer.wait_closed()
    return data


def parse(data: bytes) -> Reply:
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(": ")
        headers[name.lower()] = value
    return Reply(int(lines[0].split(" ")[1]), headers, body)


async def http(
    console: RunningConsole,
    method: str,
    path: str,
    body: bytes | None = None,
    *,
    cookie: str | None = None,
    content_type: str = "application/json",
) -> Reply:
    lines = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1"]
    if cookie:
        lines.append(f"Cookie: {cookie}")
    if body is not None:
        lines += [f"Content-Type: {content_type}", f"Content-Length: {len(body)}"]
    raw = ("\r\n".join(lines) + "\r\n\r\n").encode() + (body or b"")
    return parse(await exchange(console.port, raw))


async def sign_in(console: RunningConsole, key: SigningKey, approver: str) -> str:
    """The page's sign-in, done in Python: challenge, signed login, session cookie."""
    challenge = await http(console, "GET", "/api/challenge")
    login = ConsoleLogin(
        schema="smf.console-login/1", approver_id=approver, nonce=challenge.json["nonce"]
    )
    reply = await http(console, "POST", "/api/session", signed(key, LOGIN_PAYLOAD_TYPE, login))
    assert reply.status == 200, reply
    return reply.headers["set-cookie"].split(";")[0]


async def listed(console: RunningConsole, cookie: str) -> list[dict[str, Any]]:
    reply = await http(console, "GET", "/api/approvals", cookie=cookie)
    assert reply.status == 200, reply
    approvals: list[dict[str, Any]] = reply.json["approvals"]
    return approvals


async def wait_listed(
    console: RunningConsole, cookie: str, approval_id: str, state: str = "pending"
) -> dict[str, Any]:
    deadline = time.monotonic() + 15
    while True:
        found = {a["approval_id"]: a for a in await listed(console, cookie)}
        if approval_id in found and found[approval_id]["state"] == state:
            return found[approval_id]
        if time.monotonic() > deadline:
            raise AssertionError(f"{approval_id} not listed as {state}: {found.get(approval_id)}")
        await asyncio.sleep(0.05)


# --- fixtures --------------------------------------------------------------------------


@dataclass
class World:
    state: StateDir
    stack: Stack
    console: RunningConsole
    clock: Clock
    nc: Client

    def key(self, principal: str) -> SigningKey:
        return self.state.key(principal)


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    configure_logging(json=True, level="error")
    state = StateDir(tmp_path / "state")
    provision(state)
    stack = await start_stack(state)
    clock = Clock()
    stack.gate.desk.clock = clock
    console = await start_console(
        ConsoleSettings(
            nats_url=stack.url,
            registry=state.registry,
            refresh_seconds=0.1,
            credential=state.existing_credential(CONSOLE),
        )
    )
    nc = await nats.connect(stack.url, **connect_options(state.existing_credential(OPERATOR)))
    try:
        yield World(state, stack, console, clock, nc)
    finally:
        await nc.drain()
        await console.close()
        await stack.stop()


@dataclass
class Bare:
    """A console on a bus with no gate at all."""

    console: RunningConsole
    state: StateDir

    @property
    def port(self) -> int:
        return self.console.port


@contextlib.asynccontextmanager
async def bare_console(
    state: StateDir, url: str, request_timeout: float = 10.0
) -> AsyncIterator[RunningConsole]:
    """A console whose gate requests wait ``request_timeout``: generous where an
    answer must arrive, short only where the timeout itself is under test."""
    console = await start_console(
        ConsoleSettings(
            nats_url=url,
            registry=state.registry,
            refresh_seconds=0.05,
            request_timeout=request_timeout,
        )
    )
    try:
        yield console
    finally:
        await console.close()


@pytest.fixture
async def bare(tmp_path: Path, nats_server: EmbeddedNatsServer) -> AsyncIterator[Bare]:
    state = StateDir(tmp_path / "state")
    provision_demo(state)
    async with bare_console(state, nats_server.url) as console:
        yield Bare(console, state)


# --- the page --------------------------------------------------------------------------


async def test_the_page_and_its_assets_are_served_with_a_strict_policy(world: World) -> None:
    page = await http(world.console, "GET", "/")
    assert page.status == 200
    assert page.headers["content-type"] == "text/html; charset=utf-8"
    assert b'<script type="module" src="/static/app.js"></script>' in page.body
    policy = page.headers["content-security-policy"]
    assert "script-src 'self';" in policy
    assert "default-src 'none'" in policy
    assert "frame-ancestors 'none'" in policy
    assert "unsafe-inline" not in policy
    assert page.headers["x-content-type-options"] == "nosniff"
    assert page.headers["cache-control"] == "no-store"
    script = await http(world.console, "GET", "/static/app.js")
    assert script.headers["content-type"] == "text/javascript; charset=utf-8"
    assert b"export function canonicalJson" in script.body
    style = await http(world.console, "GET", "/static/style.css")
    assert style.headers["content-type"] == "text/css; charset=utf-8"
    for path in ("/static/../server.py", "/static/index.html", "/server.py", "/api"):
        missing = await http(world.console, "GET", path)
        assert (missing.status, missing.json["reason"]) == (404, "not_found"), path
        assert_guarded(missing)
    for method, path in (("POST", "/"), ("GET", "/api/session"), ("PUT", "/api/show")):
        wrong = await http(world.console, method, path, b"{}" if method != "GET" else None)
        assert (wrong.status, wrong.json["reason"]) == (405, "method_not_allowed"), path
        assert_guarded(wrong)
    for reply in (page, script, style):
        assert_guarded(reply)
    assert (await http(world.console, "GET", "/?x=1")).status == 200


# --- sign-in ---------------------------------------------------------------------------


async def test_sign_in_needs_a_roster_approver_key_over_a_fresh_challenge(world: World) -> None:
    console = world.console
    for path, method in (
        ("/api/approvals", "GET"),
        ("/api/show", "POST"),
        ("/api/resolve", "POST"),
    ):
        reply = await http(console, method, path, b"{}" if method == "POST" else None)
        assert (reply.status, reply.json["reason"]) == (401, "sign_in_required"), path
    forged = await http(console, "GET", "/api/approvals", cookie=f"{SESSION_COOKIE}=guess")
    assert forged.status == 401

    async def login_with(key: SigningKey, approver: str, **changes: Any) -> tuple[bytes, Reply]:
        nonce = (await http(console, "GET", "/api/challenge")).json["nonce"]
        login = ConsoleLogin(schema="smf.console-login/1", approver_id=approver, nonce=nonce)
        body = signed(key, changes.pop("payload_type", LOGIN_PAYLOAD_TYPE), login)
        return body, await http(console, "POST", "/api/session", body)

    body, accepted = await login_with(world.key(ATTORNEY), ATTORNEY)
    assert accepted.status == 200
    assert accepted.json["approver_id"] == ATTORNEY
    assert accepted.json["tenants"] == [DEMO_TENANT]
    assert accepted.json["licensed_roles"] == ["licensed_attorney"]
    cookie_header = accepted.headers["set-cookie"]
    assert "HttpOnly" in cookie_header
    assert "SameSite=Strict" in cookie_header
    cookie = cookie_header.split(";")[0]
    assert (await http(console, "GET", "/api/approvals", cookie=cookie)).status == 200

    replayed = await http(console, "POST", "/api/session", body)
    assert (replayed.status, replayed.json["reason"]) == (403, "login_challenge_unknown_or_used")
    refusals = {
        "runtime key": (await login_with(world.key("runtime"), "runtime"))[1],
        "another's name": (await login_with(world.key(ATTORNEY), PARALEGAL))[1],
        "other purpose": (
            await login_with(world.key(ATTORNEY), ATTORNEY, payload_type=names.PAYLOAD_RESOLUTION)
        )[1],
    }
    assert {k: (r.status, r.json["reason"]) for k, r in refusals.items()} == {
        "runtime key": (403, "unknown_signer"),
        "another's name": (403, "approver_identity_mismatch"),
        "other purpose": (403, "wrong_payload_type"),
    }
    nonce = (await http(console, "GET", "/api/challenge")).json["nonce"]
    login = ConsoleLogin(schema="smf.console-login/1", approver_id=ATTORNEY, nonce=nonce)
    envelope = json.loads(signed(world.key(ATTORNEY), LOGIN_PAYLOAD_TYPE, login))
    signature = bytearray(base64.b64decode(envelope["signatures"][0]["sig"]))
    signature[0] ^= 1
    envelope["signatures"][0]["sig"] = base64.b64encode(signature).decode()
    tampered = await http(console, "POST", "/api/session", json.dumps(envelope).encode())
    assert (tampered.status, tampered.json["reason"]) == (403, "bad_signature")
    unknown_nonce = ConsoleLogin(schema="smf.console-login/1", approver_id=ATTORNEY, nonce="A" * 43)
    stale = await http(
        console,
        "POST",
        "/api/session",
        signed(world.key(ATTORNEY), LOGIN_PAYLOAD_TYPE, unknown_nonce),
    )
    assert stale.json["reason"] == "login_challenge_unknown_or_used"
    garbage = await http(console, "POST", "/api/session", b"not json")
    assert (garbage.status, garbage.json["reason"]) == (403, "malformed_login")

    # Signing out ends the session; so does leaving the roster.
    out = await http(console, "POST", "/api/logout", b"{}", cookie=cookie)
    assert "Max-Age=0" in out.headers["set-cookie"]
    assert (await http(console, "GET", "/api/approvals", cookie=cookie)).status == 401
    cookie = await sign_in(console, world.key(ATTORNEY), ATTORNEY)
    current = msgspec.json.decode(world.state.registry.read_bytes(), type=RegistryFile)
    kept = tuple(e for e in current.entries if e.key.principal != ATTORNEY)
    world.state.registry.write_bytes(encode_registry(kept))
    gone = await http(console, "GET", "/api/approvals", cookie=cookie)
    assert (gone.status, gone.json["reason"]) == (401, "approver_not_on_roster")


def test_challenges_and_sessions_expire_and_are_bounded(tmp_path: Path) -> None:
    clock = FrozenClock()  # wall time would move between the challenge and the assertion
    sessions = Sessions(clock, challenge_ms=1_000, session_ms=5_000)
    state = StateDir(tmp_path / "state")
    provision_demo(state)
    roster = Roster(state.registry)

    def login(nonce: str) -> bytes:
        value = ConsoleLogin(schema="smf.console-login/1", approver_id=ATTORNEY, nonce=nonce)
        return signed(state.key(ATTORNEY), LOGIN_PAYLOAD_TYPE, value)

    nonce, expires = sessions.challenge()
    assert expires == clock() + 1_000
    clock.advance(1_001)
    with pytest.raises(LoginRefused, match="login_challenge_unknown_or_used"):
        sessions.login(login(nonce), roster)
    token, session, principal = sessions.login(login(sessions.challenge()[0]), roster)
    assert principal.name == ATTORNEY
    assert sessions.lookup(token) == session
    assert sessions.lookup(None) is None
    clock.advance(5_000)
    assert sessions.lookup(token) is None
    first = sessions.challenge()[0]
    for _ in range(300):
        sessions.challenge()
    with pytest.raises(LoginRefused):
        sessions.login(login(first), roster)  # dropped: only the newest 256 are kept
    for _ in range(300):
        sessions.login(login(sessions.challenge()[0]), roster)
    assert len(sessions._sessions) == 256

    # A roster that cannot be read, or does not parse, lists nobody.
    state.registry.write_text("{}")
    assert roster.current().principals == {}
    state.registry.unlink()
    assert roster.current().principals == {}


# --- the list and the relay --------------------------------------------------------------


@pytest.mark.claim("approver-desk.console-entitled-only")
async def test_only_an_entitled_approver_sees_the_held_filing_and_never_its_content(
    world: World,
) -> None:
    content = "Motion to compel, list test (privileged draft)."
    approval_id = await hold_filing(world.nc, world.state, content)
    attorney = await sign_in(world.console, world.key(ATTORNEY), ATTORNEY)
    item = await wait_listed(world.console, attorney, approval_id)
    assert item["native_tool"] == FILING.native_tool
    assert not {"actor_id", "matter_id", "binding_digest"} & set(item)  # minimized
    assert item["required_roles"] == ["licensed_attorney"]
    assert "attorney_approval_required_for_transmission" in item["reason_codes"]
    assert item["rule_ids"]
    assert item["expires_at_ms"] - item["created_at_ms"] == TENANT_TTL_MS
    whole = await http(world.console, "GET", "/api/approvals", cookie=attorney)
    assert content.encode() not in whole.body
    assert whole.json["gate_answering"] is True
    for approver in (PARALEGAL, OTHER_TENANT_ATTORNEY):
        cookie = await sign_in(world.console, world.key(approver), approver)
        assert await listed(world.console, cookie) == [], approver

    # The gate, not the console, decides who sees the content: the relay hands both answers back.
    shown = await http(
        world.console,
        "POST",
        "/api/show",
        show_request(world.key(ATTORNEY), ATTORNEY, approval_id),
        cookie=attorney,
    )
    view = msgspec.convert(shown.json["view"], ApprovalView)
    assert view.content == content
    assert content_matches(view)
    paralegal = await sign_in(world.console, world.key(PARALEGAL), PARALEGAL)
    refused = await http(
        world.console,
        "POST",
        "/api/show",
        show_request(world.key(PARALEGAL), PARALEGAL, approval_id),
        cookie=paralegal,
    )
    assert refused.json == {"ok": False, "reason": "resolver_lacks_required_role"}


async def shown_view(world: World, cookie: str, approval_id: str) -> ApprovalView:
    """The gate's view as the attorney's console relays it."""
    shown = await http(
        world.console,
        "POST",
        "/api/show",
        show_request(world.key(ATTORNEY), ATTORNEY, approval_id),
        cookie=cookie,
    )
    return msgspec.convert(shown.json["view"], ApprovalView)


async def test_the_view_names_each_rule_in_the_deciding_releases_words(world: World) -> None:
    """Each rule that requires the approval, with its title, statement and
    citation from the verified release that decided it; each reason code explained."""
    approval_id = await hold_filing(world.nc, world.state, "Motion to compel, rules test.")
    attorney = await sign_in(world.console, world.key(ATTORNEY), ATTORNEY)
    await wait_listed(world.console, attorney, approval_id)
    view = await shown_view(world, attorney, approval_id)

    release = world.stack.gate.releases.active if world.stack.gate.releases else None
    assert release is not None
    described = {rule.rule_id: rule for rule in release.analysis.rules}
    assert {rule.rule_id: rule.title for rule in view.rules} == FILING_RULES
    for rule in view.rules:
        source = described[rule.rule_id]
        assert (rule.title, rule.statement, rule.citation) == (
            source.title,
            source.statement,
            source.citation,
        )
    assert all(rule.statement and rule.citation for rule in view.rules)
    reasons = {reason.code: reason.words for reason in view.reasons}
    assert "attorney_approval_required_for_transmission" in reasons
    assert all(words for words in reasons.values()), reasons
    assert "licensed attorney" in (reasons["attorney_approval_required_for_transmission"] or "")


async def test_a_rule_the_deciding_release_does_not_describe_is_shown_by_id_alone(
    world: World,
) -> None:
    """Never invented text. A release whose analysis projection lacks a rule,
    and a release other than the one that decided, both leave the rule undescribed."""
    approval_id = await hold_filing(world.nc, world.state, "Motion to compel, gap test.")
    attorney = await sign_in(world.console, world.key(ATTORNEY), ATTORNEY)
    await wait_listed(world.console, attorney, approval_id)
    release = world.stack.gate.releases.active if world.stack.gate.releases else None
    assert release is not None
    full = release.analysis
    missing = "urn:smf:rule:scenario:attorney-approval-transmission"
    without = msgspec.structs.replace(
        full, rules=tuple(rule for rule in full.rules if rule.rule_id != missing)
    )
    world.stack.gate.desk.analysis = lambda: without
    view = await shown_view(world, attorney, approval_id)
    shown = {rule.rule_id: rule for rule in view.rules}
    assert shown[missing] == RuleShown(rule_id=missing)
    assert set(shown) == set(FILING_RULES)
    assert all(shown[r].title == FILING_RULES[r] for r in FILING_RULES if r != missing)

    # A gate now on another release shows none of that release's text for this decision.
    other = msgspec.structs.replace(full, release_sequence=full.release_sequence + 1)
    world.stack.gate.desk.analysis = lambda: other
    view = await shown_view(world, attorney, approval_id)
    assert [rule.title for rule in view.rules] == [None] * len(FILING_RULES)
    world.stack.gate.desk.analysis = lambda: None
    view = await shown_view(world, attorney, approval_id)
    assert {rule.rule_id for rule in view.rules} == set(FILING_RULES)
    assert all(rule == RuleShown(rule_id=rule.rule_id) for rule in view.rules)


def test_the_page_says_the_contracts_words_for_an_undescribed_rule() -> None:
    """The words for a rule the release does not describe are the contract's
    (``smf_assurance.subjects.approvals.RULE_NOT_DESCRIBED``): the page says exactly them."""
    script = (Path(console_package.__file__).parent / "static" / "app.js").read_text()
    assert f"const RULE_NOT_DESCRIBED = '{RULE_NOT_DESCRIBED}';" in script


def test_a_view_from_before_rules_and_reasons_still_decodes() -> None:
    """The rules and reasons fields are additive: an old gate's view decodes, with none of
    them, and a view without them encodes exactly as before (omit_defaults)."""
    binding = a_binding("tenant-acme", 1_000_000)
    old = {
        "schema": "smf.approval-view/1",
        "binding": json.loads(msgspec.json.encode(binding)),
        "binding_digest": "sha256:" + "c" * 64,
        "state": "pending",
        "native_tool": "court_efile",
        "destination_address": "sdny",
        "content": "text",
        "arguments_json": "{}",
    }
    view = msgspec.json.decode(json.dumps(old).encode(), type=ApprovalView)
    assert (view.rules, view.reasons) == ((), ())
    assert json.loads(msgspec.json.encode(view)) == old


async def shown_digest(world: World, cookie: str, approval_id: str) -> str:
    """The binding digest as an attorney learns it: from the gate's view, after entitlement."""
    return (await shown_view(world, cookie, approval_id)).binding_digest


@pytest.mark.claim("approver-desk.console-entitled-only")
async def test_allow_once_executes_exactly_once_and_replays_are_refused(world: World) -> None:
    content = "Motion to compel, exactly once."
    approval_id = await hold_filing(world.nc, world.state, content)
    cookie = await sign_in(world.console, world.key(ATTORNEY), ATTORNEY)
    await wait_listed(world.console, cookie, approval_id)
    digest = await shown_digest(world, cookie, approval_id)
    allow = resolution(world.key(ATTORNEY), ATTORNEY, approval_id, digest)
    answer = await http(world.console, "POST", "/api/resolve", allow, cookie=cookie)
    reply = answer.json["reply"]
    assert (answer.json["ok"], reply["accepted"], reply["state"]) == (True, True, "executing")
    await wait_listed(world.console, cookie, approval_id, "consumed")
    filed = [json.loads(p.read_text())["content_sha256"] for p in outbox(world.state)]
    assert filed == [hashlib.sha256(content.encode()).hexdigest()]
    js = world.nc.jetstream()
    assert (await js.stream_info(names.EXECUTE_STREAM)).state.messages == 1

    replay = await http(world.console, "POST", "/api/resolve", allow, cookie=cookie)
    on_bus = msgspec.json.decode(
        (await world.nc.request(names.APPROVAL_RESOLVE, allow, timeout=5)).data
    )
    again = resolution(world.key(ATTORNEY), ATTORNEY, approval_id, digest)
    second = await http(world.console, "POST", "/api/resolve", again, cookie=cookie)
    for refused in (replay.json["reply"], on_bus, second.json["reply"]):
        assert refused["accepted"] is False
        assert refused["reason_codes"] == ["approval_not_pending"]
        assert refused["state"] == "consumed"
    # The refusals are the gate's answers, so any order it sent is in the stream
    # already; the connector has nothing left to deliver, so nothing more is filed.
    assert (await js.stream_info(names.EXECUTE_STREAM)).state.messages == 1
    await wait_for(lambda: consumer_drained(js, connector_durable("court-efiling")), timeout=10)
    assert len(outbox(world.state)) == 1
    closed = await http(
        world.console,
        "POST",
        "/api/show",
        show_request(world.key(ATTORNEY), ATTORNEY, approval_id),
        cookie=cookie,
    )
    assert closed.json == {"ok": False, "reason": "approval_closed"}


async def test_deny_self_approval_and_expiry_each_answer_their_reason(world: World) -> None:
    cookie = await sign_in(world.console, world.key(ATTORNEY), ATTORNEY)
    key = world.key(ATTORNEY)

    async def decide(approval_id: str, decision: str = "allow-once") -> dict[str, Any]:
        await wait_listed(world.console, cookie, approval_id)
        digest = await shown_digest(world, cookie, approval_id)
        body = resolution(key, ATTORNEY, approval_id, digest, decision)
        answer = await http(world.console, "POST", "/api/resolve", body, cookie=cookie)
        reply: dict[str, Any] = answer.json["reply"]
        return reply

    denied = await hold_filing(world.nc, world.state, "Denied filing.")
    reply = await decide(denied, "deny")
    assert (reply["accepted"], reply["state"]) == (True, "denied")
    await wait_listed(world.console, cookie, denied, "denied")

    own = await hold_filing(world.nc, world.state, "The attorney's own filing.", actor_id=ATTORNEY)
    reply = await decide(own)
    assert (reply["accepted"], reply["reason_codes"]) == (False, ["self_approval"])

    late = await hold_filing(world.nc, world.state, "A filing nobody decided in time.")
    await wait_listed(world.console, cookie, late)
    digest = await shown_digest(world, cookie, late)
    world.clock.advance(TENANT_TTL_MS + 1_000)
    body = resolution(key, ATTORNEY, late, digest)
    reply = (await http(world.console, "POST", "/api/resolve", body, cookie=cookie)).json["reply"]
    assert reply["accepted"] is False
    assert reply["state"] == "expired"
    assert reply["reason_codes"][0] in {"approval_expired", "approval_not_pending"}
    await wait_listed(world.console, cookie, late, "expired")
    assert outbox(world.state) == []


async def test_without_a_gate_the_list_is_empty_and_the_relay_says_so(
    bare: Bare,
) -> None:
    state = bare.state
    assert bare.console.url.startswith("http://127.0.0.1:")
    cookie = await sign_in(bare.console, state.key(ATTORNEY), ATTORNEY)
    reply = await http(bare.console, "GET", "/api/approvals", cookie=cookie)
    assert reply.json["approvals"] == []
    assert reply.json["gate_answering"] is False
    body = show_request(state.key(ATTORNEY), ATTORNEY, "sha256:" + "0" * 64)
    for path in ("/api/show", "/api/resolve"):
        refused = await http(bare.console, "POST", path, body, cookie=cookie)
        assert (refused.status, refused.json["reason"]) == (502, "gate_unreachable"), path


async def test_the_relay_passes_gate_refusals_on_and_refuses_what_it_cannot_read(
    bare: Bare, nc: Client, nats_url: str
) -> None:
    """A stand-in gate answers by what it is sent: a service error, garbage, or nothing."""
    state = bare.state

    async def gate(msg: Msg) -> None:
        if msg.data == b'"error"':
            error = {"Nats-Service-Error": "malformed_request", "Nats-Service-Error-Code": "400"}
            await nc.publish(msg.reply, b"", headers=error)
        elif msg.data == b'"garbage"':
            await msg.respond(b"not json")
        # anything else: no answer at all

    for subject in (names.APPROVAL_SHOW, names.APPROVAL_RESOLVE):
        await nc.subscribe(subject, cb=gate)
    await nc.flush()
    cookie = await sign_in(bare.console, state.key(ATTORNEY), ATTORNEY)
    answers = {
        (path, body): await http(bare.console, "POST", path, body, cookie=cookie)
        for path in ("/api/show", "/api/resolve")
        for body in (b'"error"', b'"garbage"')
    }
    # Silence is the one case that must run out of time: a console that waits 0.3 s.
    async with bare_console(state, nats_url, request_timeout=0.3) as hasty:
        cookie = await sign_in(hasty, state.key(ATTORNEY), ATTORNEY)
        for path in ("/api/show", "/api/resolve"):
            answers[path, b'"silence"'] = await http(
                hasty, "POST", path, b'"silence"', cookie=cookie
            )
    assert {(k[0], k[1].decode()): (r.status, r.json) for k, r in answers.items()} == {
        ("/api/show", '"error"'): (200, {"ok": False, "reason": "malformed_request"}),
        ("/api/show", '"garbage"'): (502, {"ok": False, "reason": "unreadable_gate_answer"}),
        ("/api/show", '"silence"'): (504, {"ok": False, "reason": "gate_timeout"}),
        ("/api/resolve", '"error"'): (200, {"ok": False, "reason": "malformed_request"}),
        ("/api/resolve", '"garbage"'): (502, {"ok": False, "reason": "unreadable_gate_answer"}),
        ("/api/resolve", '"silence"'): (504, {"ok": False, "reason": "gate_timeout"}),
    }


# --- /healthz ------------------------------------------------------------------


async def health_becomes(console: RunningConsole, status: int, reason: str | None) -> Reply:
    """The first ``/healthz`` answer with this status and reason (15 s at most)."""
    seen: list[Reply] = []

    async def answered() -> bool:
        seen.append(await http(console, "GET", "/healthz"))
        return (seen[-1].status, seen[-1].json["reason"]) == (status, reason)

    try:
        await wait_for(answered, timeout=15.0)
    except AssertionError as exc:
        raise AssertionError(f"/healthz never {status} {reason}: last {seen[-1]}") from exc
    return seen[-1]


async def test_healthz_is_ok_with_a_gate_and_names_nothing_held(world: World) -> None:
    content = "Motion to compel, health check."
    approval_id = await hold_filing(world.nc, world.state, content)
    cookie = await sign_in(world.console, world.key(ATTORNEY), ATTORNEY)
    await wait_listed(world.console, cookie, approval_id)
    reply = await health_becomes(world.console, 200, None)
    body = reply.json
    age = body.pop("board_age_ms")
    assert body == {"ok": True, "reason": None, "bus_connected": True, "gate_answering": True}
    assert 0 <= age < 5_000
    assert_guarded(reply)
    for held in (approval_id, DEMO_TENANT, ATTORNEY, PARALEGAL, content, FILING.native_tool):
        assert held.encode() not in reply.body, held


async def test_healthz_says_when_the_bus_is_gone_and_when_it_is_back(
    tmp_path: Path, nats_server: EmbeddedNatsServer, nc: Client
) -> None:
    """A stand-in gate answers the status probe; then the bus itself stops and starts."""

    async def status(msg: Msg) -> None:
        await msg.respond(msgspec.json.encode({"approval_id": "", "state": "unknown"}))

    await nc.subscribe(names.APPROVAL_STATUS, cb=status)
    await nc.flush()
    state = StateDir(tmp_path / "state")
    provision_demo(state)
    async with bare_console(state, nats_server.url, request_timeout=1.0) as console:
        await health_becomes(console, 200, None)
        await asyncio.to_thread(nats_server.stop)
        gone = await health_becomes(console, 503, "bus_disconnected")
        assert gone.json["bus_connected"] is False
        assert_guarded(gone)
        await asyncio.to_thread(nats_server.start)
        await health_becomes(console, 200, None)


async def test_healthz_says_when_no_gate_answers_or_the_board_is_not_fed(
    tmp_path: Path, nats_server: EmbeddedNatsServer
) -> None:
    state = StateDir(tmp_path / "state")
    provision_demo(state)
    async with bare_console(state, nats_server.url, request_timeout=0.3) as console:
        no_gate = await health_becomes(console, 503, "gate_not_answering")
        assert (no_gate.json["bus_connected"], no_gate.json["gate_answering"]) == (True, False)
        console.tasks[0].cancel()  # the board's refresh loop ends: nothing feeds it any more
        stale = await health_becomes(console, 503, "board_not_fed")
        assert stale.json["board_age_ms"] >= 3 * 50 + 2 * 300  # whole ms, rounded down


async def metrics(console: RunningConsole) -> dict[str, int]:
    """``/metrics`` as sample name (with labels) -> value; its format checked on the way."""
    reply = await http(console, "GET", "/metrics")
    assert reply.status == 200
    assert reply.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
    assert_guarded(reply)
    samples = {}
    for line in reply.body.decode().splitlines():
        if not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            samples[name] = int(value)
    return samples


def answered(route: str, status: int) -> str:
    return f'smf_console_http_responses_total{{route="{route}",status="{status}"}}'


async def test_metrics_count_answers_by_route_and_status_and_pending_approvals(
    world: World,
) -> None:
    """Counts only: a client's own path or bytes never become a label, and the
    pending gauge follows the board (one held, then none once it is denied)."""
    before = await metrics(world.console)
    assert before["smf_console_approvals_pending"] == 0
    content = "Motion to compel, counted."
    approval_id = await hold_filing(world.nc, world.state, content)
    cookie = await sign_in(world.console, world.key(ATTORNEY), ATTORNEY)
    await wait_listed(world.console, cookie, approval_id)
    for _ in range(3):
        await http(world.console, "GET", "/api/approvals")  # no cookie: 401
    await http(world.console, "GET", "/smf-invented-path")
    await exchange(world.console.port, b"GET / HTTP/1.1\r\nHost: x\r\nsmf-bad-header\r\n\r\n")
    too_large = b"POST /api/show HTTP/1.1\r\nHost: x\r\nContent-Length: 70000\r\n\r\n"
    await exchange(world.console.port, too_large)
    during = await metrics(world.console)
    assert during["smf_console_approvals_pending"] == 1

    def grew(route: str, status: int) -> int:
        return during.get(answered(route, status), 0) - before.get(answered(route, status), 0)

    assert grew("/api/approvals", 401) == 3
    assert grew("other", 404) == 1
    assert grew("other", 400) == 1
    assert grew("/api/show", 413) == 1
    assert grew("/api/session", 200) == 1
    assert grew("/metrics", 200) == 1  # the first scrape, counted once answered
    reply = await http(world.console, "GET", "/metrics")
    for private in (approval_id, DEMO_TENANT, ATTORNEY, content, "smf-invented", "smf-bad"):
        assert private.encode() not in reply.body, private

    digest = await shown_digest(world, cookie, approval_id)
    body = resolution(world.key(ATTORNEY), ATTORNEY, approval_id, digest, "deny")
    await http(world.console, "POST", "/api/resolve", body, cookie=cookie)
    await wait_listed(world.console, cookie, approval_id, "denied")
    assert (await metrics(world.console))["smf_console_approvals_pending"] == 0


def announcement(tenant: str, expires_at_ms: int) -> PendingAnnouncement:
    """A well-formed announcement, as the gate would publish one (no binding)."""
    binding = a_binding(tenant, expires_at_ms)
    return PendingAnnouncement(
        schema="smf.approval-pending/2",
        approval_id=binding.approval_id,
        tenant_id=binding.tenant_id,
        required_roles=binding.required_roles,
        required_approvals=binding.required_approvals,
        created_at_ms=binding.created_at_ms,
        expires_at_ms=binding.expires_at_ms,
        capability="transmission",
        channel="court",
        locality="external",
        native_tool="court_efile",
        rule_ids=("rule-1",),
        reason_codes=("attorney_approval_required_for_transmission",),
    )


async def test_the_board_rereads_a_recreated_stream_follows_states_and_forgets_old_ones(
    nats_server: EmbeddedNatsServer, nc: Client
) -> None:
    clock = Clock()
    js = nc.jetstream()
    board = ApprovalBoard(nc, clock, timeout=5.0)  # its stand-in gate must answer
    await board.refresh()  # no gate: nothing listed, and it says no gate answers
    assert (board.entries, board.gate_answering) == ({}, False)
    # the gate's own announcement desk, reading the stream as a gate does
    desk = AnnouncementDesk(js, lambda: KeyRegistry({}))

    async def listing(msg: Msg) -> None:
        await msg.respond(await desk.handle(msg.data, Requester(crossed=False, account=None)))

    await nc.subscribe(names.APPROVAL_ANNOUNCEMENTS, cb=listing)
    await nc.flush()
    await board.refresh()  # no stream yet: nothing
    assert board.entries == {}
    subject = names.approval_pending_subject(DEMO_TENANT)
    first, second = (announcement(DEMO_TENANT, clock() + 60_000) for _ in range(2))
    await js.add_stream(name=names.APPROVAL_STREAM, subjects=[f"{names.APPROVAL_PENDING_PREFIX}.>"])
    await js.publish(subject, msgspec.json.encode(first))
    await board.refresh()
    assert list(board.entries) == [first.approval_id]
    await js.delete_stream(names.APPROVAL_STREAM)
    await js.add_stream(name=names.APPROVAL_STREAM, subjects=[f"{names.APPROVAL_PENDING_PREFIX}.>"])
    await js.publish(subject, msgspec.json.encode(second))
    await board.refresh()
    assert list(board.entries) == [first.approval_id, second.approval_id]

    async def status(msg: Msg) -> None:
        approval_id = msg.data.decode()
        state = "consumed" if approval_id == first.approval_id else "unknown"
        await msg.respond(msgspec.json.encode({"approval_id": approval_id, "state": state}))

    await nc.subscribe(names.APPROVAL_STATUS, cb=status)
    await nc.flush()
    await board.refresh()
    assert board.gate_answering is True
    assert {k: t.state for k, t in board.entries.items()} == {
        first.approval_id: "consumed",
        second.approval_id: "unknown",
    }
    clock.advance(2 * 3_600_000)
    await board.refresh()
    assert board.entries == {}

    # A refresh that fails in any way does not stop the loop; it says the gate is not answering.
    real_refresh = board.refresh

    async def broken_once() -> None:
        board.refresh = real_refresh  # type: ignore[method-assign]
        raise RuntimeError("a bug")

    board.refresh = broken_once  # type: ignore[method-assign]
    task = asyncio.create_task(board.run(0.01))
    # The broken refresh ran (it put the real one back) and the loop went on to answer again.
    await wait_for(lambda: board.refresh == real_refresh and board.gate_answering, timeout=5.0)
    await nc.close()
    # A probe in flight may wait out its own timeout before it fails.
    await wait_for(lambda: board.gate_answering is False, timeout=15.0)
    assert not task.done()
    task.cancel()


async def test_announcements_the_gate_would_not_publish_are_never_listed(world: World) -> None:
    js = world.nc.jetstream()
    subject = names.approval_pending_subject(DEMO_TENANT)
    await js.publish(subject, b'{"schema": "smf.approval-pending/1"}')
    await js.publish(subject, b"\xff not json")
    approval_id = await hold_filing(world.nc, world.state, "After the noise.")
    cookie = await sign_in(world.console, world.key(ATTORNEY), ATTORNEY)
    await wait_listed(world.console, cookie, approval_id)
    assert [a["approval_id"] for a in await listed(world.console, cookie)] == [approval_id]


async def test_a_failing_request_answers_500_and_the_console_keeps_serving(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bug inside one route: that request is refused, the next one is served."""

    def broken() -> tuple[str, int]:
        raise RuntimeError("boom")

    monkeypatch.setattr(world.console.console.sessions, "challenge", broken)
    reply = await http(world.console, "GET", "/api/challenge")
    assert (reply.status, reply.json["reason"]) == (500, "internal_error")
    assert reply.headers["content-security-policy"].startswith("default-src 'none'")
    monkeypatch.undo()
    assert len((await http(world.console, "GET", "/api/challenge")).json["nonce"]) == 43


# --- HTTP (aiohttp parses; the console keeps its limits) ----------------------

CHALLENGE = b"GET /api/challenge HTTP/1.1\r\nHost: x\r\n\r\n"
"""Pipelined after a refused request: a second answer (a nonce) would mean the
connection was read on past the refusal."""


def answers(data: bytes) -> int:
    """How many responses ``data`` holds (status lines; a body never starts a line so)."""
    return len(re.findall(rb"(?:\A|\r\n)HTTP/\d\.\d \d{3} ", data))


def assert_guarded(reply: Reply) -> None:
    """The security headers and ``Connection: close`` that every answer carries."""
    assert reply.headers["content-security-policy"].startswith("default-src 'none';")
    assert "frame-ancestors 'none'" in reply.headers["content-security-policy"]
    assert reply.headers["x-content-type-options"] == "nosniff"
    assert reply.headers["x-frame-options"] == "DENY"
    assert reply.headers["cache-control"] == "no-store"
    assert reply.headers["connection"] == "close"


@pytest.mark.parametrize(
    ("raw", "status", "reason"),
    [
        (
            b"POST /api/session HTTP/1.1\r\nHost: x\r\nContent-Length: 70000\r\n\r\n",
            413,
            "body_too_large",
        ),
        (
            b"POST /api/session HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
            501,
            "transfer_encoding_not_supported",
        ),
        (
            b"POST /api/session HTTP/1.1\r\nHost: x\r\nContent-Type: text/plain\r\n"
            b"Content-Length: 2\r\n\r\n{}",
            415,
            "json_required",
        ),
    ],
)
async def test_requests_the_console_does_not_take_are_refused_with_their_reason(
    bare: Bare, raw: bytes, status: int, reason: str
) -> None:
    data = await exchange(bare.port, raw + CHALLENGE)
    reply = parse(data)
    assert (reply.status, reply.json) == (status, {"ok": False, "reason": reason})
    assert_guarded(reply)
    assert answers(data) == 1
    assert b"nonce" not in data


async def test_only_http_1_is_served(bare: Bare) -> None:
    """An HTTP/0.9 request (no headers) is refused; followed by anything, aiohttp
    refuses it itself (``test_aiohttp_refuses_a_request_read_two_ways``)."""
    reply = parse(await exchange(bare.port, b"GET /\r\n\r\n"))
    assert (reply.status, reply.json["reason"]) == (505, "http_version_not_supported")
    assert_guarded(reply)


@pytest.mark.parametrize(
    "raw",
    [
        pytest.param(b"GET / SPDY/3\r\n\r\n", id="not-http"),
        pytest.param(b"GET /\r\n\r\n", id="http-0.9-then-more"),
        pytest.param(b"GET / HTTP/1.1\r\n\r\n", id="no-host"),
        pytest.param(b"GET / HTTP/1.1\r\nHost: x\r\nno colon\r\n\r\n", id="no-colon"),
        pytest.param(b"GET / HTTP/1.1\r\nHost: x\r\n folded: x\r\n\r\n", id="folded"),
        pytest.param(
            b"GET / HTTP/1.1\r\nHost: x\r\nX: " + b"a" * 9000 + b"\r\n\r\n", id="long-line"
        ),
        pytest.param(
            b"GET / HTTP/1.1\r\nHost: x\r\n" + b"X: y\r\n" * 70 + b"\r\n", id="many-headers"
        ),
        pytest.param(
            b"POST /api/logout HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: 2\r\nContent-Length: 45\r\n\r\n{}" + CHALLENGE[:43],
            id="two-lengths",
        ),
        pytest.param(
            b"POST /api/logout HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: 45\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + CHALLENGE,
            id="length-and-chunked",
        ),
        pytest.param(
            b"POST /api/logout HTTP/1.1\r\nHost: x\r\nContent-Length: -2\r\n\r\n{}",
            id="negative-length",
        ),
    ],
)
async def test_aiohttp_refuses_a_request_read_two_ways(bare: Bare, raw: bytes) -> None:
    """aiohttp's parser refuses these (400) before any route runs; the answer still
    carries the console's security headers, and nothing after it on the connection
    is read: a request smuggled in a body that could be read two ways gets no answer."""
    with structlog.testing.capture_logs() as logs:
        data = await exchange(bare.port, raw + CHALLENGE)
    reply = parse(data)
    assert reply.status == 400
    assert reply.headers["content-type"].startswith("text/plain")
    assert_guarded(reply)
    assert answers(data) == 1
    assert b"nonce" not in data
    refused = [e for e in logs if e["event"] == "console_http_refused"]
    assert [set(e) for e in refused] == [{"event", "error", "log_level"}]


async def test_a_refused_requests_bytes_never_reach_the_log(
    bare: Bare, capfd: pytest.CaptureFixture[str]
) -> None:
    """aiohttp's error for a malformed header quotes the line (its answer shows it),
    and its own logger would print that to stderr with a traceback: a session
    cookie in a malformed request would be logged. Only the error type is; nor is
    anything of a body whose client left before sending it all."""
    secret = "smf_console=TOKEN-NEVER-LOGGED"
    configure_logging(json=True, level="debug")
    raw = f"GET / HTTP/1.1\r\nHost: x\r\nCookie: {secret}\x01\r\n\r\n".encode()
    reply = parse(await exchange(bare.port, raw))
    assert reply.status == 400
    assert secret.encode() in reply.body  # the exception carried it
    left = f"POST /api/session HTTP/1.1\r\nHost: x\r\nContent-Length: 99\r\n\r\n{secret}"
    reader, writer = await asyncio.open_connection("127.0.0.1", bare.port)
    writer.write(left.encode())
    writer.write_eof()
    assert await asyncio.wait_for(reader.read(), 5) == b""
    writer.close()
    await writer.wait_closed()
    err = capfd.readouterr().err
    assert secret not in err
    assert "Traceback" not in err
    refused = [json.loads(line) for line in err.splitlines() if "console_http_refused" in line]
    assert [(e["error"], e["level"]) for e in refused] == [("BadHttpMessage", "info")]


async def test_silent_and_truncated_clients_get_no_answer(bare: Bare) -> None:
    port = bare.port
    for raw in (b"", b"POST /api/session HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n{}"):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(raw)
        writer.write_eof()
        assert await asyncio.wait_for(reader.read(), 5) == b""
        writer.close()
        await writer.wait_closed()


async def test_slow_clients_are_cut_off_and_cannot_hold_the_console(
    tmp_path: Path, nats_server: EmbeddedNatsServer
) -> None:
    """Twenty clients trickling a request head one byte at a time (a head that would
    take over a minute) and one trickling a body: while they send, the page is served
    to others, and each slow one is cut off by the read timeout, not by its own end.
    A body that stops arriving is answered 408 (a trickler may see a reset instead:
    the console closes without reading what it still sends)."""
    state = StateDir(tmp_path / "state")
    provision_demo(state)
    settings = ConsoleSettings(
        nats_url=nats_server.url, registry=state.registry, refresh_seconds=0.05, read_timeout=1.0
    )
    console = await start_console(settings)
    head = b"GET / HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"z" * 4000 + b"\r\n\r\n"

    async def trickle(raw: bytes, at_once: bytes = b"") -> tuple[bytes, int]:
        """Send ``at_once``, then ``raw`` a byte every 20 ms until the server closes;
        what it answered and how many bytes of ``raw`` were sent."""
        reader, writer = await asyncio.open_connection("127.0.0.1", console.port)
        answer = asyncio.create_task(reader.read())  # until the server closes
        writer.write(at_once)
        sent = 0
        with contextlib.suppress(ConnectionError):
            for sent in range(len(raw)):
                if answer.done():
                    break
                writer.write(raw[sent : sent + 1])
                await writer.drain()
                await asyncio.sleep(0.02)  # the attacker's pace, not a wait for an event
        try:
            data = await asyncio.wait_for(answer, 10)
        except ConnectionResetError:
            data = b""
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()
        return data, sent

    try:
        heads = [asyncio.create_task(trickle(head)) for _ in range(20)]
        body = asyncio.create_task(
            trickle(
                b"{" * 4000,
                at_once=b"POST /api/session HTTP/1.1\r\nHost: x\r\n"
                b"Content-Type: application/json\r\nContent-Length: 4000\r\n\r\n",
            )
        )
        page = await http(console, "GET", "/")
        assert page.status == 200
        assert not any(t.done() for t in (*heads, body))  # served while they were all sending
        for data, sent in await asyncio.gather(*heads):
            assert data == b""  # dropped without an answer...
            assert sent < len(head) // 2  # ...long before its head was sent
        data, sent = await body
        assert sent < 4000 // 2
        assert data == b"" or parse(data).json["reason"] == "read_timeout"
        stalled = b"POST /api/session HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n{}"
        timed_out = parse(await exchange(console.port, stalled))
        assert (timed_out.status, timed_out.json["reason"]) == (408, "read_timeout")
        assert_guarded(timed_out)
        assert (await http(console, "GET", "/")).status == 200
    finally:
        await console.close()


# --- the command ---------------------------------------------------------------------------


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def demo_state(tmp_path: Path) -> StateDir:
    state = StateDir(tmp_path / "state")
    provision_demo(state)
    return state


def test_console_serves_until_sigterm_and_prints_one_readiness_line(
    demo_state: StateDir, nats_server: EmbeddedNatsServer, capsys: pytest.CaptureFixture[str]
) -> None:
    # The console binds the reserved port itself (asyncio sets SO_REUSEADDR);
    # nothing else on the machine can be handed it meanwhile.
    reservation = reserve_port()
    port = reservation.port
    fetched: dict[str, Any] = {}
    finished = threading.Event()

    def drive() -> None:
        """Fetch the page once it serves, then stop the console as a supervisor would.
        Never signals a process whose console is not running: that would stop pytest."""
        deadline = time.monotonic() + 20
        while not finished.is_set() and time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=2) as page:
                    fetched["status"] = page.status
                break
            except OSError:
                time.sleep(0.05)
        if not finished.is_set():
            os.kill(os.getpid(), signal.SIGTERM)

    thread = threading.Thread(target=drive)
    thread.start()
    try:
        code, out, _ = run(
            [
                "console",
                "--nats",
                nats_server.url,
                "--registry",
                str(demo_state.registry),
                "--port",
                str(port),
                "--json",
                "--log-level",
                "error",
            ],
            capsys,
        )
    finally:
        finished.set()
        thread.join(30)
        reservation.close()
    assert (code, fetched) == (0, {"status": 200})
    ready = json.loads(out)
    assert ready == {
        "ready": True,
        "url": f"http://127.0.0.1:{port}/",
        "nats_url": nats_server.url,
        "registry": str(demo_state.registry),
    }


@pytest.mark.claim("approver-desk.pages-drawn")
def test_console_refuses_a_pdf_renderer_that_is_not_the_pinned_one(
    demo_state: StateDir,
    nats_server: EmbeddedNatsServer,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    """A folder named by ``--pdf-renderer`` must hold pdf.js's pinned files: one whose
    file differs stops the start in one line naming it, before anything serves."""
    (tmp_path / "pdf.min.mjs").write_bytes(b"export {};\n")
    argv = ["console", "--nats", nats_server.url, "--registry", str(demo_state.registry)]
    code, out, err = run([*argv, "--pdf-renderer", str(tmp_path)], capsys)
    assert (code, out) == (2, "")
    assert err == (
        f"smf-assurance: --pdf-renderer: {tmp_path / 'pdf.min.mjs'} is not pdf.js "
        f"{PDFJS_VERSION}'s pdf.min.mjs (its SHA-256 differs)\n"
    )


def test_console_fails_in_one_line(
    demo_state: StateDir,
    nats_server: EmbeddedNatsServer,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    closed_port: int,
) -> None:
    code, _, err = run(
        ["console", "--nats", nats_server.url, "--registry", str(tmp_path / "none.json")], capsys
    )
    assert code == 1
    assert err.startswith("smf-assurance: cannot read the approver roster: cannot read registry")
    with pytest.raises(SystemExit) as usage:
        main(["console", "--nats", nats_server.url, "--port", "70000"])
    assert usage.value.code == 2
    err = capsys.readouterr().err
    assert err.endswith("error: argument --port: 70000 is not a port number (0 to 65535)\n")
    unused = closed_port
    code, _, err = run(
        [
            "console",
            "--nats",
            f"nats://127.0.0.1:{unused}",
            "--registry",
            str(demo_state.registry),
        ],
        capsys,
    )
    assert code == 1
    assert err.startswith(f"smf-assurance: cannot connect to NATS at nats://127.0.0.1:{unused}")
    # The state dir names the roster and, through `up`'s nats.url, the bus.
    (demo_state.root / "nats.url").write_text(nats_server.url + "\n")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code, _, err = run(
            ["console", "--state-dir", str(demo_state.root), "--port", str(port)], capsys
        )
    assert code == 1
    assert err.startswith(f"smf-assurance: cannot listen on 127.0.0.1:{port}:")


def test_console_help_and_the_loopback_rule(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["console", "--help"])
    assert exit_info.value.code == 0
    assert "usage: smf-assurance console" in capsys.readouterr().out
    assert all(map(is_loopback, ("127.0.0.1", "::1", "localhost", "127.5.5.5")))
    assert not any(map(is_loopback, ("0.0.0.0", "192.168.1.10", "console.example")))
