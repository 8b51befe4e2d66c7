"""The requester's view and the connector's receipt, in headless Chromium.

The same world as tests/browser/test_console_browser.py (a real nats-server, the full stack
with the example connectors, the console, a fresh browser profile per page): the
paralegal on whose behalf the runtime asked signs in with her own key, as the
attorney does.

What these tests prove:

- The requester sees her own requests, and only hers: a request by another person
  of the same tenant is in the console's board and absent from her page, and a
  track request her page signs for its id is answered with nothing.
- She sees each state in words as the gate gives it: waiting with its countdown,
  denied with the approver's closed reason (never the note), consumed with the
  court's filing number; the attorney who allowed it sees the same filing number
  after execution instead of only the order id.
- At 420 CSS pixels wide, and at 200% zoom of a 1280 px window, the requests and
  the receipt fit without horizontal scrolling, and the attorney's decision and
  the receipt are reached with the keyboard.

Screenshots are kept in the test's tmp dir and ``.artifacts/console/``.

- An expired request offers "Ask again", reached with Tab at 420 px; the page says
  what came of it: "Not proposed again" for one no runtime still holds, "Asked again
  ... held for approval again" for one whose runtime proposed it anew; the gate
  accepts it, the runtime proposes the filing anew, and a new request (a new
  approval id and binding) appears while the old stays expired; an allow-once
  for the old binding is refused; the attorney approves the new one at 200% zoom
  and the connector files it once, with its filing number shown to the requester.

What they do not prove: the Hermes and OpenClaw adapters asking again (they keep
no held proposals; docs/CONSOLE.md), other browsers, or screen-reader speech.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import pytest
from selenium import webdriver
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.remote.webelement import WebElement

from smf_assurance.adapters.client import ProposalClient
from smf_assurance.adapters.connectors.court_efiling import filing_number
from smf_assurance.adapters.rerequest import HeldProposals
from smf_assurance.approver.client import ApproverClient
from smf_assurance.ops.local.state import ADAPTER_ID, RUNTIME_ID
from smf_assurance.pipeline.chain.approvals import DEFAULT_REREQUEST_WAIT_MS
from tests.support import console_browser as page
from tests.support.console import ATTORNEY, FILING, PARALEGAL, TENANT_TTL_MS, outbox
from tests.support.console_browser import (
    World,
    answer,
    by_id,
    confirm_allow,
    deny_with,
    open_detail,
    sign_in,
    until,
)

# The browser tests' fixtures, shared rather than copied.
world = page.world
browser = page.browser
chromium = page.chromium
screenshots = page.screenshots

ANOTHER_REQUESTER = "associate-ann"
"""A person of the same tenant who is not on the roster: her requests are held all the same."""

TRACK_FROM_PAGE = """
const [keyText, ids, done] = arguments;
import('/static/app.js').then(async (app) => {
  const me = await app.importKeyFile(keyText);
  const request = {schema: 'smf.approval-track/1', viewer_id: me.principal,
                   approval_ids: ids, requested_at_ms: Date.now()};
  const envelope = await app.signEnvelope(
    me, 'application/vnd.smf.approval-track+json;v=1', request);
  const r = await fetch('/api/track', {method: 'POST',
    headers: {'Content-Type': 'application/json'}, body: JSON.stringify(envelope)});
  done(await r.json());
}).catch((e) => done({error: String(e)}));
"""


def request_item(driver: webdriver.Chrome, approval_id: str) -> WebElement:
    return driver.find_element(By.CSS_SELECTOR, f'#requests-list li[data-id="{approval_id}"]')


def request_state(driver: webdriver.Chrome, approval_id: str, state: str) -> WebElement:
    """The request's item once the page shows it in ``state``."""

    def shown(d: webdriver.Chrome) -> WebElement | Literal[False]:
        li = request_item(d, approval_id)
        return li if li.get_attribute("data-state") == state else False

    return until(driver, shown, f"the request shown {state}")


def tab_to(driver: webdriver.Chrome, start_id: str, target: WebElement, most: int = 20) -> None:
    """Focus ``start_id``, then press Tab until ``target`` has the focus (at most
    ``most`` presses): the control is reachable by keyboard alone, in the page's order."""
    driver.execute_script("arguments[0].focus()", by_id(driver, start_id))
    for _ in range(most):
        if driver.switch_to.active_element == target:
            return
        driver.switch_to.active_element.send_keys(Keys.TAB)
    assert driver.switch_to.active_element == target, f"not reached with Tab from {start_id}"


def fits_without_scrolling(driver: webdriver.Chrome, *element_ids: str) -> None:
    """No horizontal scrolling, and every named element within the viewport's width."""
    found: dict[str, Any] = driver.execute_script(
        """
        const ids = arguments[0];
        const width = document.documentElement.clientWidth;
        const outside = ids.filter((id) => {
          const box = document.getElementById(id).getBoundingClientRect();
          return box.left < 0 || box.right > width + 0.5;
        });
        const wide = [...document.querySelectorAll('body *')]
          .filter((n) => n.getBoundingClientRect().right > width + 0.5)
          .map((n) => `${n.tagName}#${n.id}.${n.className}`).slice(0, 8);
        return {scroll: document.documentElement.scrollWidth, width, outside, wide};
        """,
        list(element_ids),
    )
    assert found["scroll"] <= found["width"], found
    assert found["outside"] == [], found
    assert found["wide"] == [], found


@pytest.mark.claim("approver-desk.requester-sees-own-only")
def test_the_requester_sees_her_own_requests_only_and_each_outcome_in_words(
    world: World,
    browser: Callable[[], webdriver.Chrome],
    screenshots: Callable[[webdriver.Chrome, str], Path],
) -> None:
    hers = world.hold("Motion to compel discovery, Acme v. Globex.")
    denied = world.hold("Motion to compel, draft 2 (wrong exhibit).")
    other = world.hold("Another person's filing.", actor_id=ANOTHER_REQUESTER)
    board = world.console.console.board
    until_board = [hers, denied, other]

    paralegal = browser()
    sign_in(paralegal, world, PARALEGAL)
    for approval_id in (hers, denied):
        listed = request_state(paralegal, approval_id, "pending")
        assert re.search(r"Waiting for an approver, expires in [45] min", listed.text), listed.text
        assert "A court filing (court_efile)" in listed.text
    assert set(until_board) <= set(board.entries), "the console holds all three"
    assert paralegal.find_elements(By.CSS_SELECTOR, f'li[data-id="{other}"]') == []
    assert other not in paralegal.page_source
    # Her page, signing for the other person's id itself, is answered with nothing.
    asked = paralegal.execute_async_script(
        TRACK_FROM_PAGE, world.key_path(PARALEGAL).read_text(), [other]
    )
    assert asked == {"ok": True, "approvals": []}
    page.audit(paralegal)
    screenshots(paralegal, "20-requester-pending")

    attorney = browser()
    sign_in(attorney, world, ATTORNEY)
    open_detail(attorney, denied)
    by_id(attorney, "deny").send_keys(Keys.ENTER)
    deny_with(attorney, "wrong_document", "Exhibit B is the wrong one.")
    assert answer(attorney, "accepted").startswith("Accepted: your denial is recorded")
    attorney.find_element(By.ID, "back").send_keys(Keys.ENTER)

    open_detail(attorney, hers)
    by_id(attorney, "allow").send_keys(Keys.ENTER)
    confirm_allow(attorney)
    assert answer(attorney, "accepted").startswith("Accepted: allowed once.")
    until(attorney, lambda d: len(outbox(world.state)) == 1, "the court has the filing")
    (filing,) = outbox(world.state)
    number = filing_number(filing.stem)
    assert number in filing.read_text()
    receipt = until(
        attorney,
        lambda d: by_id(d, "receipt-line").is_displayed() and by_id(d, "receipt-line"),
        "the receipt after execution",
    )
    assert receipt.text == f"Receipt from the connector: {number}"
    assert by_id(attorney, "order-line").text == f"Order {filing.stem}"
    page.audit(attorney)
    attorney.execute_script("arguments[0].scrollIntoView({block: 'center'})", receipt)
    screenshots(attorney, "21-approver-sees-the-filing-number")

    done = request_state(paralegal, hers, "consumed")
    assert done.get_attribute("data-receipt") == number
    assert done.find_element(By.CLASS_NAME, "standing").text == (
        f"Done: the connector confirmed it. Receipt: {number}"
    )
    refused = request_state(paralegal, denied, "denied")
    standing = refused.find_element(By.CLASS_NAME, "standing").text
    assert standing == (
        "Denied: denied by the approver; Wrong document or content. Nothing was sent"
    )
    assert "Exhibit B" not in paralegal.page_source, "the note is not shown in the console"
    assert other not in paralegal.page_source
    page.audit(paralegal)
    screenshots(paralegal, "22-requester-sees-outcomes")


def test_requests_and_the_receipt_fit_at_420_px_and_200_percent_zoom_by_keyboard(
    world: World,
    browser: Callable[[], webdriver.Chrome],
    screenshots: Callable[[webdriver.Chrome, str], Path],
) -> None:
    approval_id = world.hold(
        "Motion to compel discovery, Acme v. Globex, with a long caption that wraps "
        "across several lines on a narrow screen."
    )
    layouts = {
        "420px": {"width": 420, "height": 900, "deviceScaleFactor": 1, "mobile": False},
        # 200% zoom of a 1280 px window: 640 CSS pixels, each drawn twice as large.
        "zoom200": {"width": 640, "height": 450, "deviceScaleFactor": 2, "mobile": False},
    }
    paralegal = browser()
    attorney = browser()
    for name, metrics in layouts.items():
        for driver in (paralegal, attorney):
            driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", metrics)
        if name == "420px":
            sign_in(paralegal, world, PARALEGAL)
            sign_in(attorney, world, ATTORNEY)
        request_state(paralegal, approval_id, "pending" if name == "420px" else "consumed")
        fits_without_scrolling(paralegal, "requests", "requests-list", "board")
        screenshots(paralegal, f"23-requester-{name}")
        if name == "420px":
            open_detail(attorney, approval_id)
            # Keyboard only: Tab from the content reaches Allow once; Enter, then confirm.
            tab_to(attorney, "content", by_id(attorney, "allow"))
            attorney.switch_to.active_element.send_keys(Keys.ENTER)
            confirm_allow(attorney)
            until(
                attorney,
                lambda d: by_id(d, "receipt-line").is_displayed(),
                "the receipt after execution",
            )
        attorney.execute_script("document.getElementById('receipt-line').scrollIntoView()")
        fits_without_scrolling(attorney, "receipt-line", "outcome-box", "detail")
        screenshots(attorney, f"24-receipt-{name}")
    done = request_state(paralegal, approval_id, "consumed")
    assert (
        done.get_attribute(
            "data-receipt",
        )
        == by_id(attorney, "receipt-line").text.rsplit(" ", 1)[-1]
    )


def held_runtime(world: World) -> HeldProposals:
    """The runtime side that keeps what it proposed, listening for re-requests."""
    client = ProposalClient(
        world.nc,
        world.state.key("runtime"),
        RUNTIME_ID,
        "1.0",
        ADAPTER_ID,
        gate_keys=world.state.gate_keys(),
    )
    held = HeldProposals(client)
    world.loop.run(held.serve())
    return held


def propose_filing(world: World, held: HeldProposals, content: str) -> str:
    proposal = held.client.build(
        native_tool=FILING.native_tool,
        arguments=FILING.arguments,
        actor=FILING.actor,
        facts=FILING.facts,
        content=content,
        destination=FILING.destination,
    )
    verdict = world.loop.run(held.propose(proposal))
    assert verdict.outcome == "held", verdict
    assert verdict.approval_id is not None
    return verdict.approval_id


@pytest.mark.claim(
    "approver-desk.rerequest-new-binding", "approver-desk.rerequest-says-what-happened"
)
def test_an_expired_request_is_asked_again_by_keyboard_and_approved_as_a_new_binding(
    world: World,
    browser: Callable[[], webdriver.Chrome],
    screenshots: Callable[[webdriver.Chrome, str], Path],
) -> None:
    held = held_runtime(world)
    old_id = propose_filing(world, held, "Motion to compel, filed too late to be decided.")
    old = world.loop.run(world.stack.gate.approvals.get(old_id))
    assert old is not None
    # A second filing whose runtime keeps nothing to propose again (as the Hermes and
    # OpenClaw adapters keep none): asking it again must not read as asked.
    forgetful = HeldProposals(held.client)
    lost_id = propose_filing(world, forgetful, "Reply brief, proposed by a runtime since gone.")
    world.stack.gate.desk.rerequest_wait_ms = 1_000  # for the one nothing proposes again
    paralegal = browser()
    paralegal.execute_cdp_cmd(
        "Emulation.setDeviceMetricsOverride",
        {"width": 420, "height": 900, "deviceScaleFactor": 1, "mobile": False},
    )
    sign_in(paralegal, world, PARALEGAL)
    request_state(paralegal, old_id, "pending")
    world.clock.advance(TENANT_TTL_MS + 1_000)  # the gate's clock: its TTL has passed
    world.loop.run(world.stack.gate.desk.sweep())
    world.clock.offset_ms = 0  # expired is terminal; the runtime proposes in wall time
    expired = request_state(paralegal, old_id, "expired")
    assert expired.find_element(By.CLASS_NAME, "standing").text == "Expired: nothing was sent"
    again = until(
        paralegal,
        lambda d: (
            expired.find_element(By.CLASS_NAME, "again").is_displayed()
            and expired.find_element(By.CLASS_NAME, "again")
        ),
        "Ask again offered",
    )
    fits_without_scrolling(paralegal, "requests", "requests-list")
    screenshots(paralegal, "25-requester-expired-420px")

    lost = request_state(paralegal, lost_id, "expired")
    lost.find_element(By.CLASS_NAME, "again").click()
    until(
        paralegal,
        lambda d: by_id(d, "requests-status").text.startswith(
            "Not proposed again: no agent proposed this action anew within 1 s."
        ),
        "the page says nothing was proposed anew",
    )
    assert request_item(paralegal, lost_id).get_attribute("data-state") == "expired"
    # The gate answers as soon as it sees the new proposal: the default wait, so a busy
    # machine's slower re-proposal is still seen.
    world.stack.gate.desk.rerequest_wait_ms = DEFAULT_REREQUEST_WAIT_MS

    # Keyboard only: Tab from "Sign out" reaches Ask again; Enter asks.
    again = request_state(paralegal, old_id, "expired").find_element(By.CLASS_NAME, "again")
    tab_to(paralegal, "sign-out", again)
    again.send_keys(Keys.ENTER)
    until(
        paralegal,
        lambda d: by_id(d, "requests-status").text.startswith(
            "Asked again: the agent proposed it anew, and it is held for approval again"
        ),
        "the page says the runtime proposed it anew",
    )

    def new_request(d: webdriver.Chrome) -> str | Literal[False]:
        ids = [
            li.get_attribute("data-id")
            for li in d.find_elements(By.CSS_SELECTOR, "#requests-list li")
            if li.get_attribute("data-state") == "pending"
        ]
        fresh = [i for i in ids if i and i != old_id]
        return fresh[0] if fresh else False

    new_id = until(paralegal, new_request, "the new request appears")
    assert request_item(paralegal, old_id).get_attribute("data-state") == "expired"
    fits_without_scrolling(paralegal, "requests", "requests-list")
    screenshots(paralegal, "26-requester-asked-again-420px")

    # The old binding is dead: an allow-once signed for its digest is refused.
    attorney_client = ApproverClient(world.nc, world.state.key(ATTORNEY), ATTORNEY)
    stale = world.loop.run(attorney_client.resolve(old_id, "allow-once", old.digest))
    assert (stale.accepted, stale.reason_codes) == (False, ("approval_not_pending",))

    # The new one is a new binding the attorney approves; it is filed once.
    attorney = browser()
    attorney.execute_cdp_cmd(
        "Emulation.setDeviceMetricsOverride",
        {"width": 640, "height": 450, "deviceScaleFactor": 2, "mobile": False},
    )
    sign_in(attorney, world, ATTORNEY)
    open_detail(attorney, new_id)
    by_id(attorney, "allow").send_keys(Keys.ENTER)
    confirm_allow(attorney)
    assert answer(attorney, "accepted").startswith("Accepted: allowed once.")
    done = request_state(paralegal, new_id, "consumed")
    (filing,) = outbox(world.state)
    assert done.get_attribute("data-receipt") == filing_number(filing.stem)
    assert request_item(paralegal, old_id).get_attribute("data-state") == "expired"
    new = world.loop.run(world.stack.gate.approvals.get(new_id))
    assert new is not None
    assert (new.binding.decision_id, new.digest) != (old.binding.decision_id, old.digest)
    page.audit(paralegal)
    screenshots(paralegal, "27-requester-new-binding-filed")
