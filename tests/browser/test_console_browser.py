"""The approvers' console in a real browser: headless Chromium driven by Selenium.

Debian's ``chromium`` and ``chromium-driver`` (no browser
download; ``make browser`` installs them, and these tests fail, never skip,
when they are missing). Each test gets a real nats-server, the full stack with
the example connectors (``smf_assurance.ops.local.stack.start_stack``), the console, and a fresh
browser profile. The stack runs on its own event loop in a background thread,
because Selenium blocks the thread that drives it. The approver signs in by
choosing their key file in the page, as a person would; the page signs with
WebCrypto Ed25519.

What these tests prove:

- A held filing appears in an open page without a reload, with its countdown;
  the approver opens it with the keyboard and sees the capability, the
  destination, the matter, the requesting actor, the rules and reasons, the
  time left, the content, and the page's own check that the content (and the
  arguments, the destination and the binding) match the binding digest.
- Allow once, pressed with the keyboard and confirmed, is accepted and followed to
  ``consumed``; the connector filed exactly once (one file in the outbox, one
  order on the stream). Replaying the page's signed resolution (through the
  console and straight on the bus) is refused ``approval_not_pending``; a
  second allow-once from a stale tab is refused and the page says "already
  resolved".
- A paralegal of the same tenant sees nothing of it, and the gate refuses her
  a look even when her page asks directly; self-approval and an expired
  approval are refused with their reasons, and the expired one greys out; a
  deny with a reason from the form is accepted and sends nothing.
- The page's canonical JSON agrees byte for byte with the shared golden
  vectors, its signatures verify in Python (``smf_assurance.subjects.dsse.open_struct``), and
  it refuses a key file whose parts do not belong together.
- Every control has a name, focus moves to what was opened and back, and the
  text/background pairs on screen have a contrast of at least 4.5:1.
- Deliberate decisions: Allow once opens a confirm step naming the
  tool and the destination, reachable and cancellable with the keyboard (Tab,
  Enter, Escape); cancelling signs nothing, leaves the approval pending and
  puts no order on the stream. Deny opens a form that cannot be sent without a
  closed reason and refuses a note with a direction override; a deny with a
  reason and a note reaches the runtime's outcome subject as the gate-signed
  code and note, while the ledger holds the code and no store holds the note.

Screenshots of the list, the detail view, the outcome, the paralegal's empty
list, the expired approval, the confirm step and the deny form are written to
the test's tmp dir and copied to ``.artifacts/console/``.

What they do not prove: other browsers (Firefox and Safari implement
Ed25519 in WebCrypto too, but are not run here), screen-reader output (only
the names and live regions it would read), or the page over HTTPS.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote
from zoneinfo import ZoneInfo

import msgspec
import pytest
from selenium import webdriver
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys

from smf_assurance.approver.notify.notice import notice_for
from smf_assurance.ops.local.state import DEMO_TENANT
from smf_assurance.subjects import dsse, names
from smf_assurance.subjects.approvals import (
    RULE_NOT_DESCRIBED,
    ApprovalBinding,
    PendingAnnouncement,
    ShowRequest,
    binding_digest,
    open_outcome,
)
from smf_assurance.subjects.canonical import canonical_bytes
from smf_assurance.subjects.keys import generate_signing_key, load_private_key, write_private_key
from smf_assurance.subjects.registry import load_registry
from tests.support.approval_desk import ledger_rows
from tests.support.console import (
    ATTORNEY,
    FILING,
    FILING_RULES,
    PARALEGAL,
    TENANT_TTL_MS,
    a_binding,
    outbox,
)
from tests.support.console_browser import (
    ROOT,
    WAIT_SECONDS,
    World,
    answer,
    audit,
    browser,
    by_id,
    chromium,
    confirm_allow,
    deny_with,
    facts,
    item,
    open_detail,
    screenshots,
    sign_in,
    technical,
    until,
    world,
)

__all__ = ["browser", "chromium", "screenshots", "world"]

VECTORS = ROOT / "tests" / "vectors" / "canonical.json"


# --- driving the page ----------------------------------------------------------------------


def list_requests(driver: webdriver.Chrome) -> int:
    """How many ``/api/approvals`` answers the page has received (the browser's own
    resource timing: an entry is added when the response has arrived)."""
    count: int = driver.execute_script(
        "return performance.getEntriesByType('resource')"
        ".filter((e) => new URL(e.name).pathname === '/api/approvals').length;"
    )
    return count


def freeze_updates(driver: webdriver.Chrome, frozen: bool) -> None:
    """Block (or unblock) this tab's list updates: a stale view, as on a slow network."""
    driver.execute_cdp_cmd("Network.enable", {})
    urls = ["*/api/approvals*"] if frozen else []
    driver.execute_cdp_cmd("Network.setBlockedURLs", {"urls": urls})


def record_resolutions(driver: webdriver.Chrome) -> None:
    """Keep a copy of every resolution the page sends (what an eavesdropper would see)."""
    driver.execute_script(
        """
        window.__sent = [];
        const fetchOriginal = window.fetch;
        window.fetch = (url, init) => {
          if (String(url).endsWith('/api/resolve')) window.__sent.push(init.body);
          return fetchOriginal(url, init);
        };
        """
    )


def post_from_page(driver: webdriver.Chrome, path: str, body: str) -> dict[str, Any]:
    result: dict[str, Any] = driver.execute_async_script(
        """
        const [path, body, done] = arguments;
        fetch(path, {method: 'POST', headers: {'Content-Type': 'application/json'}, body})
          .then((r) => r.json()).then(done, (e) => done({error: String(e)}));
        """,
        path,
        body,
    )
    return result


def get_from_page(driver: webdriver.Chrome, path: str) -> dict[str, Any]:
    """GET ``path`` from the page, with its session cookie, as the page itself would."""
    result: dict[str, Any] = driver.execute_async_script(
        """
        const [path, done] = arguments;
        fetch(path, {cache: 'no-store'})
          .then((r) => r.json()).then(done, (e) => done({error: String(e)}));
        """,
        path,
    )
    return result


# --- the tests -------------------------------------------------------------------------------


def test_a_held_filing_appears_live_is_checked_and_approved_exactly_once(
    world: World,
    browser: Callable[[], webdriver.Chrome],
    screenshots: Callable[[webdriver.Chrome, str], Path],
) -> None:
    driver = browser()
    sign_in(driver, world, ATTORNEY)
    until(driver, lambda d: by_id(d, "empty").is_displayed(), "an empty list")
    driver.execute_script("window.__sameDocument = 'yes'")
    live_tab = driver.current_window_handle
    driver.switch_to.new_window("tab")
    stale_tab = driver.current_window_handle
    sign_in(driver, world, ATTORNEY)
    driver.switch_to.window(live_tab)

    content = "Motion to compel discovery, Acme v. Globex (privileged draft).\nExhibit A attached."
    approval_id = world.hold(content)
    listed = until(driver, lambda d: item(d, approval_id), "the held filing appears")
    assert driver.execute_script("return window.__sameDocument") == "yes"  # no reload
    assert listed.get_attribute("data-state") == "pending"
    # The announcement names no content or person; the gate shows them to this attorney,
    # and the list is worded from that (tests/browser/test_lawyer_view.py, in full).
    until(driver, lambda d: f"Asked by {PARALEGAL}" in item(d, approval_id).text, "its words")
    listed = item(driver, approval_id)
    assert content.splitlines()[0] in listed.text
    assert "court_efile (external.transmit)" not in listed.text
    assert "sdny (not in the directory)" in listed.text  # no directory in this world
    assert re.search(r"\bexpires in [45] min \d{1,2} s\b", listed.text), listed.text
    assert not by_id(driver, "empty").is_displayed()
    screenshots(driver, "01-list")

    # A second tab of the same attorney opens it too, then stops hearing about changes.
    driver.switch_to.window(stale_tab)
    open_detail(driver, approval_id)
    freeze_updates(driver, True)
    driver.switch_to.window(live_tab)

    open_detail(driver, approval_id)
    assert driver.switch_to.active_element == by_id(driver, "detail-title")
    assert by_id(driver, "detail-title").text == "A court filing, held for your approval"
    assert by_id(driver, "content").text == content
    check = by_id(driver, "digest-check")
    assert (check.get_attribute("data-ok"), check.text) == (
        "true",
        "✓ What is shown here is exactly what Allow once approves (checked in this browser)",
    )
    shown = facts(driver)
    assert shown["Destination"].endswith("electronic_filing, external")
    # No tenant directory here: the raw id, marked (tests/browser/test_lawyer_view.py has one).
    assert shown["Matter"] == f"{FILING.actor.matter_id} (not in the directory)"
    assert shown["Requested by"] == PARALEGAL
    assert shown["Why it is held"] not in ("", "(shown once opened)")
    assert "Capability" not in shown  # codes are technical details
    shown = technical(driver)
    checks = [li.text for li in by_id(driver, "checks").find_elements(By.TAG_NAME, "li")]
    assert len(checks) == 5  # content, arguments, destination, digest, the PDF
    assert all(line.startswith("✓ matches:") for line in checks), checks
    assert shown["Capability"] == "external.transmit"
    assert shown["Tool"] == FILING.native_tool
    assert shown["Required role"] == "licensed_attorney"
    assert "attorney_approval_required_for_transmission" in shown["Reasons"]
    # The PDF's bytes are shown as the document, not as base64 in the arguments.
    arguments = json.loads(shown["Arguments"])
    pointer = arguments["document_file"]["data_b64"]
    assert pointer.startswith("(the document's bytes: shown under")
    elided = {**FILING.arguments["document_file"], "data_b64": pointer}
    assert arguments == {**FILING.arguments, "document_file": elided}
    assert re.fullmatch(r"expires in [45] min \d{1,2} s", by_id(driver, "detail-countdown").text)
    assert not by_id(driver, "self-warning").is_displayed()
    audit(driver)
    screenshots(driver, "02-detail")

    record_resolutions(driver)
    allow = by_id(driver, "allow")
    assert allow.is_enabled()
    allow.send_keys(Keys.ENTER)
    confirm_allow(driver)
    assert answer(driver, "accepted").startswith("Accepted: allowed once.")
    assert driver.switch_to.active_element == by_id(driver, "answer")
    until(
        driver,
        lambda d: d.find_element(By.CSS_SELECTOR, '#outcome li[data-state="consumed"]'),
        "the outcome: consumed",
    )
    assert not by_id(driver, "allow").is_enabled()
    assert not by_id(driver, "deny").is_enabled()
    assert item(driver, approval_id).get_attribute("data-state") == "consumed"
    audit(driver)
    screenshots(driver, "03-outcome")
    filed = [json.loads(p.read_text()) for p in outbox(world.state)]
    assert [f["content_sha256"] for f in filed] == [hashlib.sha256(content.encode()).hexdigest()]
    assert world.stream_count() == 1

    # The signed resolution the page sent, replayed through the console and on the bus.
    sent: list[str] = driver.execute_script("return window.__sent")
    assert len(sent) == 1
    signed = json.loads(sent[0])
    assert signed["payloadType"] == names.PAYLOAD_RESOLUTION
    replayed = post_from_page(driver, "/api/resolve", sent[0])["reply"]
    on_bus = world.resolve_on_bus(sent[0].encode())
    for refused in (replayed, on_bus):
        assert (refused["accepted"], refused["reason_codes"]) == (False, ["approval_not_pending"])

    # The stale tab still offers Allow once; the gate refuses it, and the page says why.
    driver.switch_to.window(stale_tab)
    stale_allow = by_id(driver, "allow")
    assert stale_allow.is_enabled()
    stale_allow.click()
    confirm_allow(driver)
    refusal = answer(driver, "refused")
    assert refusal.startswith("Refused: already resolved."), refusal
    assert "(approval_not_pending)" in refusal
    freeze_updates(driver, False)
    assert len(outbox(world.state)) == 1
    assert world.stream_count() == 1

    # Escape goes back to the list, to the approval that was open.
    driver.switch_to.window(live_tab)
    driver.switch_to.active_element.send_keys(Keys.ESCAPE)
    until(driver, lambda d: not by_id(d, "detail").is_displayed(), "back to the list")
    focused = driver.switch_to.active_element
    assert focused == item(driver, approval_id).find_element(By.TAG_NAME, "button")


def test_a_paralegal_sees_nothing_of_the_filing_and_is_refused_a_look(
    world: World,
    browser: Callable[[], webdriver.Chrome],
    screenshots: Callable[[webdriver.Chrome, str], Path],
) -> None:
    approval_id = world.hold("Motion to compel, for attorneys' eyes.")
    board = world.console.console.board
    deadline = time.monotonic() + WAIT_SECONDS
    while approval_id not in board.entries and time.monotonic() < deadline:
        time.sleep(0.05)
    assert board.entries[approval_id].state == "pending"  # the console holds it for attorneys
    driver = browser()
    sign_in(driver, world, PARALEGAL)
    until(driver, lambda d: by_id(d, "empty").is_displayed(), "an empty list")
    # Two more answers to the page's list request while the filing is pending: the
    # page renders each answer before it asks again, so the list below is the one
    # at least one refresh drew after the first.
    seen = list_requests(driver)
    until(driver, lambda d: list_requests(d) >= seen + 2, "two more refreshes of the list")
    assert driver.find_elements(By.CSS_SELECTOR, "#approvals li") == []
    assert by_id(driver, "empty").text == "Nothing is waiting for you."
    assert by_id(driver, "who-roles").text == "(paralegal; tenant-acme)"
    screenshots(driver, "04-paralegal-sees-nothing")

    # Asking the gate directly, signed with her own key in her page, is refused too.
    refused = driver.execute_async_script(
        """
        const [keyText, approvalId, done] = arguments;
        import('/static/app.js').then(async (app) => {
          const me = await app.importKeyFile(keyText);
          const request = {schema: 'smf.approval-show/1', approval_id: approvalId,
                           resolver_id: me.principal, requested_at_ms: Date.now()};
          const envelope = await app.signEnvelope(
            me, 'application/vnd.smf.approval-show+json;v=1', request);
          const r = await fetch('/api/show', {method: 'POST',
            headers: {'Content-Type': 'application/json'}, body: JSON.stringify(envelope)});
          done(await r.json());
        }).catch((e) => done({error: String(e)}));
        """,
        world.key_path(PARALEGAL).read_text(),
        approval_id,
    )
    assert refused == {"ok": False, "reason": "resolver_lacks_required_role"}
    audit(driver)

    # Signing out drops the key and the session; a file that is not a key signs nobody in.
    by_id(driver, "sign-out").send_keys(Keys.ENTER)
    until(driver, lambda d: by_id(d, "signin").is_displayed(), "the sign-in form again")
    assert by_id(driver, "signin-status").text.startswith("Signed out.")
    assert driver.switch_to.active_element == by_id(driver, "key-file")
    status = post_from_page(driver, "/api/logout", "{}")
    assert status == {"ok": True}
    approvals = driver.execute_async_script(
        "const done = arguments[0]; fetch('/api/approvals').then((r) => done(r.status));"
    )
    assert approvals == 401
    by_id(driver, "key-file").send_keys(str(world.state.registry))
    until(
        driver,
        lambda d: by_id(d, "signin-status").text.startswith("Not signed in:"),
        "the refusal of a file that is not a key",
    )
    assert "not an smf.ed25519.private/1 key file" in by_id(driver, "signin-status").text
    assert not by_id(driver, "workspace").is_displayed()


def test_self_approval_is_refused_and_a_denial_sends_nothing(
    world: World, browser: Callable[[], webdriver.Chrome]
) -> None:
    approval_id = world.hold("The attorney's own filing.", actor_id=ATTORNEY)
    driver = browser()
    sign_in(driver, world, ATTORNEY)
    open_detail(driver, approval_id)
    assert by_id(driver, "self-warning").is_displayed()
    by_id(driver, "allow").click()
    confirm_allow(driver)
    refusal = answer(driver, "refused")
    assert refusal.startswith("Refused: self-approval."), refusal
    assert "(self_approval)" in refusal
    assert not by_id(driver, "allow").is_enabled()

    # Deny needs no matching checks and sends nothing.
    denied = world.hold("A filing the attorney denies.")
    open_detail(driver, denied)
    assert by_id(driver, "content").text == "A filing the attorney denies."
    by_id(driver, "deny").send_keys(Keys.ENTER)
    deny_with(driver, "needs_changes")
    assert answer(driver, "accepted") == (
        "Accepted: your denial is recorded (approver_denied, approver_denied_needs_changes); "
        "nothing will be sent."
    )
    until(
        driver,
        lambda d: d.find_element(By.CSS_SELECTOR, '#outcome li[data-state="denied"]'),
        "the outcome: denied",
    )
    until(driver, lambda d: item(d, denied).get_attribute("data-state") == "denied", "denied")
    assert world.stream_count() == 0
    assert outbox(world.state) == []


def test_an_expired_approval_cannot_be_approved_and_greys_out(
    world: World,
    browser: Callable[[], webdriver.Chrome],
    screenshots: Callable[[webdriver.Chrome, str], Path],
) -> None:
    approval_id = world.hold("A filing nobody decided in time.")
    driver = browser()
    sign_in(driver, world, ATTORNEY)
    open_detail(driver, approval_id)
    freeze_updates(driver, True)
    world.clock.advance(TENANT_TTL_MS + 1_000)  # the gate's clock: its TTL has passed
    assert by_id(driver, "allow").is_enabled()  # this stale page does not know yet
    by_id(driver, "allow").click()
    confirm_allow(driver)
    refusal = answer(driver, "refused")
    assert refusal.startswith("Refused: expired."), refusal
    freeze_updates(driver, False)
    greyed = until(
        driver,
        lambda d: (
            item(d, approval_id).get_attribute("data-state") == "expired" and item(d, approval_id)
        ),
        "the approval greys out",
    )
    assert "closed" in (greyed.get_attribute("class") or "")
    assert "EXPIRED" in greyed.text  # the state is spelled out, not only greyed
    open_detail_closed = greyed.find_element(By.TAG_NAME, "button")
    open_detail_closed.send_keys(Keys.ENTER)
    note = until(
        driver,
        lambda d: by_id(d, "closed-note").is_displayed() and by_id(d, "closed-note"),
        "the closed note",
    )
    assert note.text.startswith("Closed (expired): the gate has purged its content")
    assert not by_id(driver, "reviewable").is_displayed()
    assert not by_id(driver, "allow").is_enabled()
    audit(driver)
    screenshots(driver, "05-expired")
    assert world.stream_count() == 0


RECORD_CHANGES = """
// Every text the countdown and its live region are given, in order.
const record = (id, into) => {
  window[into] = [];
  const node = document.getElementById(id);
  new MutationObserver(() => window[into].push(node.textContent))
    .observe(node, {childList: true, characterData: true, subtree: true});
};
record('detail-countdown', '__shown');
record('expiry-live', '__spoken');
"""
LEFT = re.compile(r"expires in (?:(\d+) min )?(\d+) s")


def seconds_left(text: str) -> int:
    found = LEFT.fullmatch(text)
    assert found is not None, text
    return int(found[1] or 0) * 60 + int(found[2])


def test_the_expiry_names_its_zone_counts_down_and_closes_allow_when_it_passes(
    world: World,
    browser: Callable[[], webdriver.Chrome],
    screenshots: Callable[[webdriver.Chrome, str], Path],
) -> None:
    """The absolute expiry with its time zone, a countdown that decreases each
    second, a polite live region that speaks at minute boundaries and at expiry only, and
    an approval that expires while open shows "expired" with Allow once disabled."""
    approval_id = world.hold("A filing whose time runs out while the attorney reads it.")
    driver = browser()
    zone = "Australia/Adelaide"  # a half-hour offset, with summer time in December
    driver.execute_cdp_cmd("Emulation.setTimezoneOverride", {"timezoneId": zone})
    sign_in(driver, world, ATTORNEY)
    open_detail(driver, approval_id)

    listed = get_from_page(driver, "/api/approvals")["approvals"]
    expires_at_ms = next(a["expires_at_ms"] for a in listed if a["approval_id"] == approval_id)
    local = datetime.fromtimestamp(expires_at_ms / 1000, ZoneInfo(zone))
    offset = f"{local:%z}"  # +1030 or +0930, as the date falls
    assert facts(driver)["Expires"] == (
        f"{local:%Y-%m-%d %H:%M:%S} UTC{offset[:3]}:{offset[3:]} ({zone})"
    )
    countdown, live = by_id(driver, "detail-countdown"), by_id(driver, "expiry-live")
    assert countdown.get_attribute("aria-hidden") == "true"  # read out by the region only
    assert (live.get_attribute("aria-live"), live.get_attribute("role")) == ("polite", "status")
    assert re.fullmatch(r"Expires in [45] minutes\.", live.get_attribute("textContent") or "")

    # The gate's and the console's clock move on: the open page learns it from the list.
    world.clock.advance(TENANT_TTL_MS - 15_000)
    until(
        driver,
        lambda d: seconds_left(by_id(d, "detail-countdown").text) <= 15,
        "15 s or less left",
    )
    driver.execute_script(RECORD_CHANGES)
    assert live.get_attribute("textContent") == "Expires in less than a minute."
    first = seconds_left(countdown.text)
    assert 0 < first <= 15
    assert by_id(driver, "allow").is_enabled()
    audit(driver)

    until(
        driver,
        lambda d: by_id(d, "detail-countdown").text == "expired",
        "the countdown reaches expired",
        seconds=first + WAIT_SECONDS,
    )
    texts: list[str] = driver.execute_script("return window.__shown")
    shown = [t for i, t in enumerate(texts) if i == 0 or t != texts[i - 1]]
    assert shown[-1] == "expired", shown
    ticks = [seconds_left(t) for t in shown[:-1]]
    assert len(ticks) >= 3, shown  # it moved every second while open
    assert ticks == sorted(set(ticks), reverse=True), shown  # strictly decreasing
    # Spoken once, at expiry: not at each of the seconds the visible text changed.
    spoken = driver.execute_script("return window.__spoken")
    assert spoken == ["Expired: no decision can be sent."], spoken
    assert by_id(driver, "detail-state").get_attribute("textContent") == "expired"
    assert not by_id(driver, "allow").is_enabled()
    assert not by_id(driver, "deny").is_enabled()
    assert (
        by_id(driver, "decision-note").text == "No decision can be sent: this approval is expired."
    )
    assert "expired" in item(driver, approval_id).text.lower()
    screenshots(driver, "08-expired-while-open")
    assert world.stream_count() == 0


def test_the_countdown_wording_and_when_it_is_spoken(
    world: World, browser: Callable[[], webdriver.Chrome]
) -> None:
    """The page's own formatting: minutes and seconds spelled out, one
    announcement per whole minute, and the zone offset in force at the expiry instant
    (summer time in New York is UTC-04:00, winter UTC-05:00)."""
    driver = browser()
    driver.execute_cdp_cmd("Emulation.setTimezoneOverride", {"timezoneId": "America/New_York"})
    driver.get(world.url)
    found = driver.execute_async_script(
        """
        const done = arguments[0];
        import('/static/app.js').then((app) => {
          const minute = [];
          for (let ms = 120000; ms < 180000; ms += 1000) minute.push(app.announceLeft(ms));
          done({
            left: [252000, 60000, 59999, 1000, 0, -5].map(app.formatLeft),
            spoken: [125000, 119999, 59999, 0].map(app.announceLeft),
            sameMinute: [...new Set(minute)],
            summer: app.formatExpiry(Date.UTC(2026, 6, 1, 12, 0, 5)),
            winter: app.formatExpiry(Date.UTC(2026, 11, 2, 12, 0, 5)),
          });
        }).catch((e) => done({error: String(e)}));
        """
    )
    assert found == {
        "left": [
            "expires in 4 min 12 s",
            "expires in 1 min 0 s",
            "expires in 59 s",
            "expires in 1 s",
            "expired",
            "expired",
        ],
        "spoken": [
            "Expires in 2 minutes.",
            "Expires in 1 minute.",
            "Expires in less than a minute.",
            "Expired: no decision can be sent.",
        ],
        "sameMinute": ["Expires in 2 minutes."],
        "summer": "2026-07-01 08:00:05 UTC-04:00 (America/New_York)",
        "winter": "2026-12-02 07:00:05 UTC-05:00 (America/New_York)",
    }


def notification_link(world: World, approval_id: str) -> str:
    """The link the notifier sends for the gate's own announcement of ``approval_id``."""
    raw = world.loop.run(
        world.nc.jetstream().get_last_msg(
            names.APPROVAL_STREAM, names.approval_pending_subject(DEMO_TENANT)
        )
    )
    assert raw.data is not None
    announcement = msgspec.json.decode(raw.data, type=PendingAnnouncement)
    assert announcement.approval_id == approval_id
    return notice_for(announcement, "pending", world.url).link


def test_the_notification_link_opens_its_approval_after_sign_in(
    world: World, browser: Callable[[], webdriver.Chrome]
) -> None:
    """The notifier's ``/?approval=<id>`` opens that approval's detail once the
    approver has signed in (not before: nothing is shown to a page without a key)."""
    world.hold("An earlier filing, listed first.")
    content = "The filing the notification is about."
    approval_id = world.hold(content)
    link = notification_link(world, approval_id)
    driver = browser()
    driver.get(link)
    assert not by_id(driver, "workspace").is_displayed()
    assert not by_id(driver, "detail").is_displayed()
    sign_in(driver, world, ATTORNEY, link)
    until(driver, lambda d: by_id(d, "digest-check").get_attribute("data-ok"), "checks made")
    assert by_id(driver, "content").text == content
    assert driver.switch_to.active_element == by_id(driver, "detail-title")
    assert (
        item(driver, approval_id).find_element(By.TAG_NAME, "button").get_attribute("aria-current")
        == "true"
    )
    assert not by_id(driver, "link-note").is_displayed()


RECORD_SHOWS = """
// Every approval id this page asks the gate to show, read from the signed request's payload.
window.__shown = [];
const original = window.fetch;
window.fetch = async (url, init) => {
  if (String(url).endsWith('/api/show')) {
    window.__shown.push(JSON.parse(atob(JSON.parse(init.body).payload)).approval_id);
  }
  return original(url, init);
};
"""


@pytest.mark.parametrize(
    "wanted",
    [
        "sha256:" + "0" * 64,  # well formed, held by no gate
        '<img src=x onerror="window.__injected=1">',
        '"]; window.__injected = 1; //',
    ],
)
def test_a_link_to_an_approval_not_in_the_list_opens_nothing_and_injects_nothing(
    world: World, browser: Callable[[], webdriver.Chrome], wanted: str
) -> None:
    """An id the approver's list does not hold gets a plain message; it is never written
    into the page, as markup or as text, and no detail is opened or asked of the gate
    (the page asks the gate to show only what its list holds, to word the list)."""
    approval_id = world.hold("A filing the link does not name.")
    driver = browser()
    driver.get(f"{world.url}?approval={quote(wanted, safe='')}")
    driver.execute_script(RECORD_SHOWS)
    by_id(driver, "key-file").send_keys(str(world.key_path(ATTORNEY)))  # no reload
    note = until(
        driver, lambda d: by_id(d, "link-note").is_displayed() and by_id(d, "link-note"), "note"
    )
    assert note.text.startswith("The approval in your link is not in your list")
    until(driver, lambda d: item(d, approval_id), "the list is shown")
    assert not by_id(driver, "detail").is_displayed()
    assert driver.execute_script("return window.__injected") is None
    assert driver.find_elements(By.CSS_SELECTOR, "main img") == []
    assert wanted not in driver.execute_script("return document.body.innerHTML")
    until(driver, lambda d: d.execute_script("return window.__shown.length"), "the list worded")
    assert driver.execute_script("return window.__shown") == [approval_id]


def test_the_page_signs_the_bytes_python_verifies(
    world: World, browser: Callable[[], webdriver.Chrome], tmp_path: Path
) -> None:
    """The page's canonical JSON, identities and DSSE signatures, against Python's."""
    driver = browser()
    driver.get(world.url)
    vectors = json.loads(VECTORS.read_text())["encode"]
    # JSON.parse reads 1.0 and 1e2 as the integer they equal; the page never parses
    # float syntax into a value it signs (it signs only what it builds itself, and the
    # arguments it re-hashes come from the gate's msgspec encoding, integers only).
    skipped = {"float_with_zero_fraction_rejected", "exponent_rejected"}
    results = driver.execute_async_script(
        """
        const [vectors, done] = arguments;
        import('/static/app.js').then((app) => done(vectors.map((v) => {
          let value;
          try { value = JSON.parse(v.input); } catch (e) { return {name: v.name, error: true}; }
          try { return {name: v.name, canonical: app.canonicalJson(value)}; }
          catch (e) { return {name: v.name, error: true}; }
        })));
        """,
        [v for v in vectors if v["name"] not in skipped],
    )
    expected = [
        {"name": v["name"], "error": True}
        if v.get("error")
        else {"name": v["name"], "canonical": v["canonical"]}
        for v in vectors
        if v["name"] not in skipped
    ]
    assert results == expected

    # A binding with non-ASCII names: the page's digest is the gate's.
    binding = ApprovalBinding(
        **{
            **msgspec.to_builtins(a_binding(DEMO_TENANT, 1_700_000_060_000)),
            "matter_id": "Müller v. Ståhl — café",
            "actor_id": "ama\u0301lia",
        }
    )
    digest = driver.execute_async_script(
        """
        const [binding, done] = arguments;
        import('/static/app.js').then(async (app) => done(await app.identityOf(binding)));
        """,
        msgspec.to_builtins(binding),
    )
    assert digest == binding_digest(binding)

    # A key file read by the page signs a show request that Python verifies.
    key_file = tmp_path / "someone.key"
    key = generate_signing_key()
    write_private_key(key_file, key, "someone")
    request = {
        "schema": "smf.approval-show/1",
        "approval_id": binding.approval_id,
        "resolver_id": "someone",
        "requested_at_ms": 1_700_000_000_000,
    }
    envelope = driver.execute_async_script(
        """
        const [keyText, request, done] = arguments;
        import('/static/app.js').then(async (app) => {
          const me = await app.importKeyFile(keyText);
          done(await app.signEnvelope(me, 'application/vnd.smf.approval-show+json;v=1', request));
        }).catch((e) => done({error: String(e)}));
        """,
        key_file.read_text(),
        request,
    )
    loaded, _ = load_private_key(key_file)
    value, verified = dsse.open_struct(
        dsse.decode_envelope(json.dumps(envelope).encode()),
        {loaded.key_id: loaded.verify_key},
        ShowRequest,
        names.PAYLOAD_SHOW_REQUEST,
    )
    assert msgspec.to_builtins(value) == request
    assert verified.payload == canonical_bytes(request)

    # Key files whose parts do not belong together are refused, as smf_assurance/subjects/keys.py
    # does.
    document = json.loads(key_file.read_text())
    other_file = tmp_path / "other.key"
    write_private_key(other_file, generate_signing_key(), "other")
    other = json.loads(other_file.read_text())
    mixed_id = {**document, "key_id": other["key_id"]}
    mixed_seed = {**document, "secret_seed": other["secret_seed"]}
    errors = driver.execute_async_script(
        """
        const [files, done] = arguments;
        import('/static/app.js').then(async (app) => {
          const out = [];
          for (const text of files) {
            try { await app.importKeyFile(text); out.push('accepted'); }
            catch (e) { out.push(e.message); }
          }
          done(out);
        });
        """,
        [json.dumps(mixed_id), json.dumps(mixed_seed), "not json", json.dumps({"kind": "x"})],
    )
    assert errors == [
        "the key file's key_id does not match its public key",
        "the key file's secret does not belong to its public key",
        "this file is not an approver key file (it is not JSON)",
        "this file is not an smf.ed25519.private/1 key file",
    ]


# --- deliberate decisions ------------------------------------------------------


def gate_state(world: World, approval_id: str) -> str:
    record = world.loop.run(world.stack.gate.approvals.get(approval_id))
    assert record is not None
    return record.state


def test_allow_once_asks_first_and_cancelling_resolves_nothing(
    world: World,
    browser: Callable[[], webdriver.Chrome],
    screenshots: Callable[[webdriver.Chrome, str], Path],
) -> None:
    """Keyboard only: Enter on Allow once opens a confirm step naming the tool and the
    destination; Cancel and Escape close it with nothing signed, nothing on the stream."""
    approval_id = world.hold("Motion to compel discovery, Acme v. Globex.")
    driver = browser()
    sign_in(driver, world, ATTORNEY)
    open_detail(driver, approval_id)
    record_resolutions(driver)
    address = FILING.destination.address

    by_id(driver, "allow").send_keys(Keys.ENTER)
    step = until(driver, lambda d: by_id(d, "allow-confirm").is_displayed(), "the confirm step")
    assert step
    assert driver.switch_to.active_element == by_id(driver, "allow-confirm-title")
    text = by_id(driver, "allow-confirm-text").text
    assert text.startswith(f"Allow once: {FILING.native_tool}, sending the content shown above to ")
    assert f"{address} (electronic_filing, external)" in text
    audit(driver)
    screenshots(driver, "06-confirm-allow")
    # Tab from the step's title reaches "Yes, allow once", then Cancel.
    driver.switch_to.active_element.send_keys(Keys.TAB)
    assert driver.switch_to.active_element == by_id(driver, "allow-yes")
    driver.switch_to.active_element.send_keys(Keys.TAB)
    assert driver.switch_to.active_element == by_id(driver, "allow-cancel")
    driver.switch_to.active_element.send_keys(Keys.ENTER)
    until(driver, lambda d: not by_id(d, "allow-confirm").is_displayed(), "the step closed")
    assert driver.switch_to.active_element == by_id(driver, "allow")

    # Escape leaves the step, not the approval.
    by_id(driver, "allow").send_keys(Keys.ENTER)
    until(driver, lambda d: by_id(d, "allow-confirm").is_displayed(), "the confirm step again")
    driver.switch_to.active_element.send_keys(Keys.ESCAPE)
    until(driver, lambda d: not by_id(d, "allow-confirm").is_displayed(), "closed by Escape")
    assert by_id(driver, "detail").is_displayed()

    # Two more list refreshes: anything sent would have changed the state by now.
    seen = list_requests(driver)
    until(driver, lambda d: list_requests(d) >= seen + 2, "two more refreshes of the list")
    assert driver.execute_script("return window.__sent") == []
    assert gate_state(world, approval_id) == "pending"
    assert world.stream_count() == 0
    assert by_id(driver, "answer").text == ""

    # Confirmed, it goes through, once.
    by_id(driver, "allow").send_keys(Keys.ENTER)
    confirm_allow(driver)
    assert answer(driver, "accepted").startswith("Accepted: allowed once.")
    assert len(driver.execute_script("return window.__sent")) == 1
    until(driver, lambda _: world.stream_count() == 1, "one order on the stream")


def test_a_deny_needs_a_reason_and_its_note_reaches_the_runtime_not_the_ledger(
    world: World,
    browser: Callable[[], webdriver.Chrome],
    screenshots: Callable[[webdriver.Chrome, str], Path],
) -> None:
    """The form cannot be sent without a closed reason; a note that is not plain text
    is refused in the page; the denial's code and note reach the runtime's outcome
    subject (opened as a runtime opens it), and the ledger holds the code only."""
    approval_id = world.hold("Letter to the client, Acme v. Globex.")
    record = world.loop.run(world.stack.gate.approvals.get(approval_id))
    assert record is not None
    outcome = world.loop.run(world.nc.subscribe(names.approval_outcome_subject(approval_id)))
    world.loop.run(world.nc.flush())
    driver = browser()
    sign_in(driver, world, ATTORNEY)
    open_detail(driver, approval_id)
    record_resolutions(driver)

    by_id(driver, "deny").send_keys(Keys.ENTER)
    until(driver, lambda d: by_id(d, "deny-form").is_displayed(), "the deny form")
    assert driver.switch_to.active_element == by_id(driver, "deny-form-title")
    denying = by_id(driver, "deny-form-text").text
    assert denying.startswith(f"Deny: {FILING.native_tool}, sending the content shown above to ")
    assert denying.endswith(
        f"{FILING.destination.address} (electronic_filing, external). Nothing will be sent."
    )
    assert not by_id(driver, "deny-send").is_enabled()  # no reason chosen yet
    # Submitting anyway (the form's own submit path, as a script could) signs nothing.
    driver.execute_script("document.getElementById('deny-form').requestSubmit()")
    error = by_id(driver, "deny-error")
    assert error.text == "Choose a reason: a denial cannot be sent without one."
    assert driver.execute_script("return window.__sent") == []
    audit(driver)

    note = "Wrong court: refile in the Eastern District.\n<b>Not bold</b> — Ståhl."
    radio = driver.find_element(By.CSS_SELECTOR, 'input[name="deny-reason"][value="other"]')
    radio.send_keys(Keys.SPACE)
    assert by_id(driver, "deny-send").is_enabled()
    # A direction override in the note is refused by the page before signing.
    driver.execute_script(
        "document.getElementById('deny-note').value = arguments[0];", "abc\u202edef"
    )
    by_id(driver, "deny-send").send_keys(Keys.ENTER)
    assert error.text.startswith("The note may hold plain text")
    assert driver.execute_script("return window.__sent") == []
    driver.execute_script("document.getElementById('deny-note').value = '';")
    screenshots(driver, "07-deny-form")

    # Arrow keys move the choice within the list, as a radio group does.
    radio.send_keys(Keys.ARROW_UP)
    chosen = driver.find_element(By.CSS_SELECTOR, 'input[name="deny-reason"]:checked')
    assert chosen.get_attribute("value") == "not_authorized"
    deny_with(driver, "wrong_recipient", note)
    codes = ["approver_denied", "approver_denied_wrong_recipient"]
    assert answer(driver, "accepted") == (
        f"Accepted: your denial is recorded ({', '.join(codes)}); nothing will be sent."
    )
    (sent,) = driver.execute_script("return window.__sent")
    signed = json.loads(base64.b64decode(json.loads(sent)["payload"]))
    assert (signed["deny_reason"], signed["note"]) == ("wrong_recipient", note)

    message = world.loop.run(outcome.next_msg(timeout=WAIT_SECONDS))
    final = open_outcome(
        message.data,
        load_registry(world.state.registry).trusted("gate"),
        approval_id=approval_id,
        decision_id=record.binding.decision_id,
        operation_hash=record.binding.operation_hash,
    )
    assert (final.outcome, list(final.reason_codes), final.approver_note) == ("deny", codes, note)
    assert ledger_rows(world.state.ledger, approval_id)[-1] == ("denied", tuple(codes))
    for stored in world.state.root.glob("*.db*"):
        assert b"Eastern District" not in stored.read_bytes(), stored
    assert gate_state(world, approval_id) == "denied"
    assert world.stream_count() == 0
    assert outbox(world.state) == []


def rule_texts(driver: webdriver.Chrome, css: str) -> list[str]:
    return [e.text for e in by_id(driver, "facts").find_elements(By.CSS_SELECTOR, css)]


def test_each_rule_is_shown_in_the_releases_words_and_only_as_text(
    world: World,
    browser: Callable[[], webdriver.Chrome],
    screenshots: Callable[[webdriver.Chrome, str], Path],
) -> None:
    """The detail view shows each rule that requires the approval with its
    title, statement and citation from the deciding release, and each reason code in
    words; a release's text is set as text, never interpreted as markup."""
    approval_id = world.hold("Motion to compel discovery, Acme v. Globex (rules in words).")
    driver = browser()
    sign_in(driver, world, ATTORNEY)
    open_detail(driver, approval_id)
    until(driver, lambda d: rule_texts(d, ".rule-title"), "the rules in words")
    assert sorted(rule_texts(driver, ".rule-title")) == sorted(FILING_RULES.values())
    release = world.stack.gate.releases.active if world.stack.gate.releases else None
    assert release is not None
    held_by = [r for r in release.analysis.rules if r.rule_id in FILING_RULES]
    assert set(rule_texts(driver, ".rule-citation")) == {f"Citation: {r.citation}" for r in held_by}
    assert set(rule_texts(driver, ".rule-statement")) == {r.statement for r in held_by}
    for css in (".rule-title", ".rule-citation"):
        assert all(e.is_displayed() for e in driver.find_elements(By.CSS_SELECTOR, css))
    reasons = technical(driver)["Reasons"]
    assert "A licensed attorney must approve a transmission" in reasons
    assert "attorney_approval_required_for_transmission" in reasons
    screenshots(driver, "08-rules-in-words")

    # A release whose text carries markup: the page shows the characters, builds no element.
    hostile = '<img id="injected" src="x"><b>bold</b>'
    analysis = release.analysis
    world.stack.gate.desk.analysis = lambda: msgspec.structs.replace(
        analysis,
        rules=tuple(
            msgspec.structs.replace(rule, title=hostile) if rule.rule_id in FILING_RULES else rule
            for rule in analysis.rules
        ),
    )
    second = world.hold("Motion to compel discovery, Acme v. Globex (markup in a title).")
    open_detail(driver, second)
    until(driver, lambda d: hostile in rule_texts(d, ".rule-title"), "the title as text")
    assert driver.find_elements(By.ID, "injected") == []
    assert by_id(driver, "facts").find_elements(By.TAG_NAME, "b") == []

    # A gate that cannot read the deciding release's text shows each rule by id alone.
    world.stack.gate.desk.analysis = lambda: None
    third = world.hold("Motion to compel discovery, Acme v. Globex (no release text).")
    open_detail(driver, third)
    expected = sorted(f"{rule_id} — {RULE_NOT_DESCRIBED}" for rule_id in FILING_RULES)
    until(driver, lambda d: sorted(rule_texts(d, ".rule")) == expected, "the ids alone")
    assert rule_texts(driver, ".rule-title") == []
