"""The held filing as a lawyer reads it, in a real browser (headless Chromium).

The exact action as a lawyer reads it: "the held filing with its PDF visible", the
destination in a display form (court name, case
caption and docket) and the matter and client by name from the operator's tenant
directory, the attachment's own digest check in the page, and "420 px layouts and 200%
zoom usable". The stack, console and browser fixtures are those of
``tests/browser/test_console_browser.py``; here the console reads a tenant directory
(``tests/bus/test_tenant_directory.py`` writes it) and scenario 1 carries a real PDF
(``smf_assurance.ops.demo.script.MOTION_PDF``).

What these tests prove:

- The attorney sees the court by name with its id, the case caption and docket, the
  matter and the client by name; the confirm step names the court, caption and docket.
- The filing's pages are drawn in the page itself by pdf.js (the pinned files the
  console serves, ``smf_assurance.approver.console.renderer``) from the bytes whose
  SHA-256 the page computed, which is the PDF's: one canvas per page, white paper with
  text on it (its pixels), under the console's CSP, next to that SHA-256; the page's
  check of it is listed and Allow once is on. The pages are one Tab stop, named by
  the file and its page count, and one Tab goes on past them. Where pdf.js cannot be
  loaded, the page says so and shows the same bytes in the browser's own viewer (a
  frame whose source is a ``blob:`` URL the page made, ``application/pdf``).
- A relay that swaps the PDF's bytes in the view (here the page's own ``fetch``,
  rewritten as a compromised console server would answer) gets an error in the page,
  no frame, the checks marked failed, and Allow once off.
- Bytes swapped in the gate's store after the attorney looked: the page's allow-once,
  confirmed, is refused ``binding_changed`` and the page says so; no order reaches
  ``SMF_EXECUTE``.
- At 420 px wide and at 200% zoom of a 1280x900 window the page has no horizontal
  scroll, the drawn page fits the width, and Allow once and Deny can be reached and
  pressed with the keyboard.
- Held filings of one tool are told apart in the list (what, where, matter and client,
  who asked, until when in the browser's zone), the first to expire on top, and a
  matter filter leaves only that matter's; an opened filing says it in a lawyer's
  words first, its codes and digests under closed "Technical details".
- axe-core (``tests/support/axe.py``) finds no serious or critical violation on the
  list, the detail (technical details closed and open) and the confirm step, at
  1280 px, 420 px and 200% zoom; it does find a button without a name.

Screenshots (the filing with its PDF, the tampered document, 420 px, 200% zoom) are
written to the test's tmp dir and copied to ``.artifacts/console/``.

What they do not prove: that pdf.js draws every PDF a firm files as a court's reader
would (a PDF it cannot read whole falls back to the browser's viewer; images that need
its WebAssembly decoders are not drawn, as the page runs none); what Chromium's PDF
viewer draws inside its frame beyond paper (a separate, cross-origin document); other
browsers than Chromium, or screen-reader output.
"""

from __future__ import annotations

import base64
import contextlib
import json
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Final

import pytest
from selenium import webdriver
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support.ui import Select

from smf_assurance.ops.demo.script import MOTION_PDF
from smf_assurance.subjects.canonical import sha256_identity
from tests.support.attachments import OTHER_PDF, _tamper
from tests.support.axe import serious_violations
from tests.support.console import ATTORNEY, FILING_RULES, PARALEGAL
from tests.support.console_browser import (
    World,
    answer,
    browser,
    by_id,
    chromium,
    facts,
    item,
    open_detail,
    screenshots,
    sign_in,
    technical,
    until,
    world,
)
from tests.support.tenant_directory import (
    CAPTION,
    CLIENT,
    COURT_NAME,
    DOCKET,
    MATTER,
    MATTER_NAME,
    write_directory,
)

__all__ = ["browser", "chromium", "screenshots", "world"]

CONTENT = "Motion to compel discovery, Acme v. Globex (privileged draft). PDF attached."

WIDE: Final = {"width": 1280, "height": 900, "deviceScaleFactor": 1, "mobile": False}
NARROW: Final = {"width": 420, "height": 900, "deviceScaleFactor": 1, "mobile": False}
ZOOMED: Final = {"width": 640, "height": 450, "deviceScaleFactor": 2, "mobile": False}
"""A 1280x900 window at 200%: a 640x450 CSS viewport drawn at twice the scale."""

SWAP_PDF_IN_SHOW = """
// A compromised relay: the view it hands the page carries other bytes for the PDF.
const [otherB64] = arguments;
const original = window.fetch;
window.fetch = async (url, init) => {
  const reply = await original(url, init);
  if (!String(url).endsWith('/api/show')) return reply;
  const body = await reply.json();
  if (body.ok) {
    const args = JSON.parse(body.view.arguments_json);
    args.document_file.data_b64 = otherB64;
    body.view.arguments_json = JSON.stringify(args);
  }
  return new Response(JSON.stringify(body), {status: reply.status, headers: reply.headers});
};
"""


@pytest.fixture(autouse=True)
def tenant_directory(tmp_path: Path) -> Path:
    """Written before ``world`` starts the console, which reads it once at start; the
    state folder is made first as the gate requires it (0700), not by the write."""
    (tmp_path / "state").mkdir(mode=0o700)
    return write_directory(tmp_path / "state" / "directory")


def held_filing(driver: webdriver.Chrome, world: World, content: str = CONTENT) -> str:
    sign_in(driver, world, ATTORNEY)
    approval_id = world.hold(content)
    open_detail(driver, approval_id)
    return approval_id


def the_pdf(driver: webdriver.Chrome) -> WebElement:
    return driver.find_element(By.CSS_SELECTOR, 'figure.attachment[data-arg="document_file"]')


def pdf_loaded(driver: webdriver.Chrome, frame: WebElement) -> str:
    """The content type of the frame's document, read from inside it."""
    driver.switch_to.frame(frame)
    try:
        kind: str = driver.execute_script("return document.contentType")
    finally:
        driver.switch_to.default_content()
    return kind


WIDER_THAN_THE_PAGE = """
const width = document.documentElement.clientWidth;
return [...document.querySelectorAll('body *')]
  .filter((n) => n.checkVisibility() && n.getBoundingClientRect().right > width + 0.5)
  .map((n) => `${n.tagName}#${n.id}.${n.className}: ${n.getBoundingClientRect().right}`);
"""


PAPER_SHARE = """
// The share of near-white pixels in a PNG: Chromium's PDF viewer draws a white page on
// a dark grey ground, so a page drawn across the frame is most of its pixels.
// createImageBitmap decodes a blob without fetching it, so the page's CSP is not involved.
const [png, done] = arguments;
const bytes = Uint8Array.from(atob(png), (c) => c.charCodeAt(0));
createImageBitmap(new Blob([bytes], {type: 'image/png'})).then((bitmap) => {
  const canvas = new OffscreenCanvas(bitmap.width, bitmap.height);
  const context = canvas.getContext('2d');
  context.drawImage(bitmap, 0, 0);
  const data = context.getImageData(0, 0, bitmap.width, bitmap.height).data;
  let white = 0;
  for (let i = 0; i < data.length; i += 4) {
    if (data[i] > 240 && data[i + 1] > 240 && data[i + 2] > 240) white += 1;
  }
  done(white / (data.length / 4));
}, (error) => done(String(error)));
"""


def pdf_page_drawn(driver: webdriver.Chrome, frame: WebElement) -> None:
    """Wait until the frame shows a page of paper (its pixels, as the screenshot has them)."""

    def drawn(d: webdriver.Chrome) -> bool:
        share = d.execute_async_script(PAPER_SHARE, frame.screenshot_as_base64)
        assert isinstance(share, float | int), share
        return share > 0.3

    until(driver, drawn, "the PDF's page drawn in its frame")


INK = """
// Each drawn page's share of near-white pixels and of dark ones (text), read from the
// canvas the page drew (its own pixels: nothing was fetched, so nothing taints it).
return [...arguments[0].querySelectorAll('canvas.pdf-page')].map((canvas) => {
  const data = canvas.getContext('2d').getImageData(0, 0, canvas.width, canvas.height).data;
  let white = 0;
  let dark = 0;
  for (let i = 0; i < data.length; i += 4) {
    if (data[i] > 240 && data[i + 1] > 240 && data[i + 2] > 240) white += 1;
    else if (data[i] < 96 && data[i + 1] < 96 && data[i + 2] < 96) dark += 1;
  }
  return [white / (data.length / 4), dark / (data.length / 4)];
});
"""


def pages_drawn(driver: webdriver.Chrome, figure: WebElement) -> WebElement:
    """Wait until the page drew the PDF's pages itself (pdf.js), then check each is a page
    of paper with text on it, and that no frame (the browser's own viewer) is shown."""
    holder = figure.find_element(By.CSS_SELECTOR, ".pages")
    until(driver, lambda _d: holder.get_attribute("data-state") != "drawing", "the pages drawn")
    assert holder.get_attribute("data-state") == "drawn", holder.get_attribute("data-reason")
    inks = driver.execute_script(INK, holder)
    assert len(inks) == 1  # MOTION_PDF is one page
    for white, dark in inks:
        assert white > 0.5  # paper
        assert dark > 0.001  # and text on it
    assert not figure.find_elements(By.TAG_NAME, "iframe")
    return holder


def no_horizontal_scroll(driver: webdriver.Chrome) -> None:
    """Nothing reaches past the viewport's right edge (naming what does, if anything)."""
    overflow = driver.execute_script(
        "const d = document.documentElement; return [d.scrollWidth, d.clientWidth];"
    )
    assert overflow[0] <= overflow[1], driver.execute_script(WIDER_THAN_THE_PAGE)


def reachable(driver: webdriver.Chrome, element_id: str) -> None:
    """Within the viewport's width once scrolled to, and enabled."""
    button = by_id(driver, element_id)
    driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", button)
    right, width = driver.execute_script(
        "return [arguments[0].getBoundingClientRect().right, window.innerWidth];", button
    )
    assert right <= width, (element_id, right, width)
    assert button.is_enabled()


@pytest.mark.claim("approver-desk.pages-drawn")
def test_the_filing_shows_its_court_case_matter_client_and_pdf(
    world: World,
    browser: Callable[[], webdriver.Chrome],
    screenshots: Callable[[webdriver.Chrome, str], Path],
) -> None:
    driver = browser()
    held_filing(driver, world)

    shown = facts(driver)
    destination = shown["Destination"]
    for words in (COURT_NAME, "sdny", CAPTION, f"Docket No. {DOCKET}"):
        assert words in destination
    assert "not in the directory" not in destination
    assert shown["Matter"].splitlines() == [f"{MATTER_NAME} {MATTER}", f"Client: {CLIENT}"]
    arguments = json.loads(technical(driver)["Arguments"])
    assert arguments["document_file"]["sha256"] == sha256_identity(MOTION_PDF)
    assert "bytes" in arguments["document_file"]["data_b64"]  # a pointer, not the base64

    figure = the_pdf(driver)
    assert figure.get_attribute("data-ok") == "true"
    assert "motion-to-compel.pdf" in figure.find_element(By.TAG_NAME, "figcaption").text
    assert figure.find_element(By.CSS_SELECTOR, ".digest").text == sha256_identity(MOTION_PDF)
    pages = pages_drawn(driver, figure)
    label = pages.get_attribute("aria-label") or ""
    assert label.startswith("motion-to-compel.pdf: 1 page")
    driver.execute_script("arguments[0].scrollIntoView()", pages)
    # the pages are one stop for the keyboard: nothing in them takes focus, and one Tab
    # from them goes on to the next control
    inside = "return arguments[0].querySelectorAll('a, button, input, iframe, [tabindex]').length"
    assert driver.execute_script(inside, pages) == 0
    driver.execute_script("arguments[0].focus()", pages)
    ActionChains(driver).send_keys(Keys.TAB).perform()
    assert not driver.execute_script("return arguments[0].contains(document.activeElement)", pages)
    checks = by_id(driver, "checks").text
    assert "✓ matches: SHA-256 of motion-to-compel.pdf computed here" in checks
    assert by_id(driver, "digest-check").get_attribute("data-ok") == "true"
    assert by_id(driver, "allow").is_enabled()
    screenshots(driver, "lawyer-filing-pdf")

    by_id(driver, "allow").send_keys(Keys.ENTER)
    until(driver, lambda d: by_id(d, "allow-confirm").is_displayed(), "the confirm step")
    confirm = by_id(driver, "allow-confirm-text").text
    assert f"{COURT_NAME} (sdny), {CAPTION}, Docket No. {DOCKET}" in confirm


def test_a_swapped_pdf_is_refused_in_the_page_and_by_the_gate(
    world: World,
    browser: Callable[[], webdriver.Chrome],
    screenshots: Callable[[webdriver.Chrome, str], Path],
) -> None:
    driver = browser()
    sign_in(driver, world, ATTORNEY)
    swapped = world.hold(CONTENT + " (swapped in the relay)")
    driver.execute_script(SWAP_PDF_IN_SHOW, base64.b64encode(OTHER_PDF).decode())
    open_detail(driver, swapped)

    figure = the_pdf(driver)
    assert figure.get_attribute("data-ok") == "false"
    assert "does not match the digest" in figure.find_element(By.CSS_SELECTOR, ".error").text
    assert not figure.find_elements(By.TAG_NAME, "iframe")
    assert not figure.find_elements(By.TAG_NAME, "canvas")
    assert by_id(driver, "digest-check").get_attribute("data-ok") == "false"
    assert "✗ DOES NOT MATCH: SHA-256 of motion-to-compel.pdf" in by_id(driver, "checks").text
    assert not by_id(driver, "allow").is_enabled()
    driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", figure)
    screenshots(driver, "lawyer-pdf-swapped")

    # The page is honest, the gate's store is not: bytes swapped after the attorney looked.
    driver.refresh()
    sign_in(driver, world, ATTORNEY)
    approval_id = world.hold(CONTENT + " (swapped in the store)")
    open_detail(driver, approval_id)
    assert the_pdf(driver).get_attribute("data-ok") == "true"
    _tamper(world.state, approval_id, OTHER_PDF)
    by_id(driver, "allow").send_keys(Keys.ENTER)
    until(driver, lambda d: by_id(d, "allow-confirm").is_displayed(), "the confirm step")
    by_id(driver, "allow-yes").send_keys(Keys.ENTER)
    assert "binding_changed" in answer(driver, "refused")
    assert world.stream_count() == 0
    with contextlib.closing(sqlite3.connect(world.state.approvals)) as conn:
        (state,) = conn.execute(
            "SELECT state FROM approvals WHERE approval_id = ?", (approval_id,)
        ).fetchone()
    assert state == "invalidated"


@pytest.mark.claim("approver-desk.pages-drawn")
def test_without_the_renderer_the_browsers_own_viewer_shows_the_checked_bytes(
    world: World,
    browser: Callable[[], webdriver.Chrome],
    screenshots: Callable[[webdriver.Chrome, str], Path],
) -> None:
    """A console that serves no pdf.js (here the browser is kept from loading it): the
    page says the pages could not be drawn and shows the same checked bytes in the
    browser's own viewer, a frame whose source is a ``blob:`` URL the page made."""
    driver = browser()
    driver.execute_cdp_cmd("Network.enable", {})
    driver.execute_cdp_cmd("Network.setBlockedURLs", {"urls": ["*/vendor/*"]})
    held_filing(driver, world)
    figure = the_pdf(driver)
    holder = figure.find_element(By.CSS_SELECTOR, ".pages")
    until(driver, lambda _d: holder.get_attribute("data-state") == "viewer", "the viewer")
    assert "could not be drawn here" in holder.text
    assert not figure.find_elements(By.TAG_NAME, "canvas")
    frame = figure.find_element(By.CSS_SELECTOR, "iframe.pdf")
    assert (frame.get_attribute("src") or "").startswith("blob:")
    assert pdf_loaded(driver, frame) == "application/pdf"
    driver.execute_script("arguments[0].scrollIntoView()", frame)
    pdf_page_drawn(driver, frame)
    assert by_id(driver, "allow").is_enabled()  # the bytes were checked all the same
    screenshots(driver, "lawyer-filing-pdf-viewer")


@pytest.mark.claim("approver-desk.pages-drawn")
@pytest.mark.claim("approver-desk.no-serious-a11y-violation")
@pytest.mark.parametrize(("layout", "metrics"), [("420px", NARROW), ("zoom-200", ZOOMED)])
def test_the_filing_and_its_pdf_are_usable_narrow_and_zoomed(
    world: World,
    browser: Callable[[], webdriver.Chrome],
    screenshots: Callable[[webdriver.Chrome, str], Path],
    layout: str,
    metrics: dict[str, int | bool],
) -> None:
    driver = browser()
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", metrics)
    held_filing(driver, world, f"{CONTENT} ({layout})")

    pages = pages_drawn(driver, the_pdf(driver))
    no_horizontal_scroll(driver)
    drawn = pages.find_element(By.CSS_SELECTOR, "canvas.pdf-page")
    left, right, width = driver.execute_script(
        "const r = arguments[0].getBoundingClientRect(); return [r.left, r.right, innerWidth];",
        drawn,
    )
    assert 0 <= left < right <= width
    driver.execute_script("arguments[0].scrollIntoView()", drawn)
    screenshots(driver, f"lawyer-filing-{layout}")
    assert serious_violations(driver) == []
    reachable(driver, "deny")
    reachable(driver, "allow")
    by_id(driver, "allow").send_keys(Keys.ENTER)
    until(driver, lambda d: by_id(d, "allow-confirm").is_displayed(), "the confirm step")
    reachable(driver, "allow-yes")
    no_horizontal_scroll(driver)
    screenshots(driver, f"lawyer-confirm-{layout}")
    assert serious_violations(driver) == []


OTHER_MATTER = "matter-2026-0077"
"""A matter the directory does not hold: shown by its id, and said to be missing."""


@pytest.mark.claim("approver-desk.no-serious-a11y-violation")
@pytest.mark.claim("approver-desk.filings-told-apart")
@pytest.mark.parametrize(("layout", "metrics"), [("1280px", WIDE), ("420px", NARROW)])
def test_held_filings_are_told_apart_sorted_by_expiry_and_filtered_by_matter(
    world: World,
    browser: Callable[[], webdriver.Chrome],
    screenshots: Callable[[webdriver.Chrome, str], Path],
    layout: str,
    metrics: dict[str, int | bool],
) -> None:
    """Issue 38: three held filings of one tool read as three filings (what, where, which
    matter and client, who asked, until when in the browser's zone), the one that
    expires first on top, and a matter filter that leaves only that matter's."""
    driver = browser()
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", metrics)
    driver.execute_cdp_cmd("Emulation.setTimezoneOverride", {"timezoneId": "America/New_York"})
    sign_in(driver, world, ATTORNEY)
    filings = {
        "Motion to compel discovery, Acme v. Globex.": MATTER,
        "Opposition to the motion to dismiss.": OTHER_MATTER,
        "Notice of appearance, Acme v. Globex.": MATTER,
    }
    held: list[str] = []
    for content, matter in filings.items():
        held.append(world.hold(f"{content}\nPDF attached.", matter_id=matter))
        world.clock.advance(20_000)  # each one expires 20 s after the one before

    def worded(d: webdriver.Chrome) -> bool:
        return all(f"Asked by {PARALEGAL}" in item(d, i).text for i in held)

    until(driver, worded, "every filing worded from the gate's view")
    listed = driver.find_elements(By.CSS_SELECTOR, "#approvals > li")
    assert [li.get_attribute("data-id") for li in listed] == held  # the first to expire on top
    court = f"To {COURT_NAME} (sdny)"
    for li, (content, matter) in zip(listed, filings.items(), strict=True):
        text = li.text
        assert f"{content} (motion-to-compel.pdf)" in text
        assert court in text
        assert "court_efile" not in text
        if matter == MATTER:
            assert f"{CAPTION}, Docket No. {DOCKET}" in text
            assert f"{MATTER_NAME} · Client: {CLIENT}" in text
        else:
            assert f"Matter {OTHER_MATTER} (not in the directory)" in text
        assert "UTC-05:00 (America/New_York)" in text  # the browser's zone, not UTC
        assert li.get_attribute("data-matter") == matter
    screenshots(driver, f"lawyer-list-{layout}")
    assert serious_violations(driver) == []
    if layout == "420px":
        no_horizontal_scroll(driver)

    choose = Select(by_id(driver, "matter-filter"))
    assert [o.text for o in choose.options] == [
        "All matters",
        f"{MATTER_NAME} ({CLIENT})",
        OTHER_MATTER,
    ]

    def shown(d: webdriver.Chrome) -> list[str | None]:
        return [
            li.get_attribute("data-id")
            for li in d.find_elements(By.CSS_SELECTOR, "#approvals > li")
            if li.is_displayed()
        ]

    choose.select_by_value(MATTER)
    assert until(driver, lambda d: shown(d) == [held[0], held[2]], "only that matter's")
    choose.select_by_value(OTHER_MATTER)
    assert until(driver, lambda d: shown(d) == [held[1]], "only the other matter's")
    choose.select_by_value("")
    assert until(driver, lambda d: shown(d) == held, "every filing again")


@pytest.mark.claim("approver-desk.no-serious-a11y-violation")
@pytest.mark.claim("approver-desk.plain-words-first")
def test_the_default_view_is_the_lawyers_and_the_technical_details_are_closed(
    world: World,
    browser: Callable[[], webdriver.Chrome],
    screenshots: Callable[[webdriver.Chrome, str], Path],
) -> None:
    """Issue 38: opened, a held filing says what it sends, where, for which matter and
    client, who asked, why it is held (the rules in words), what Allow once does and
    until when; its codes, arguments, digests and the checks' details are under
    "Technical details", closed, and there once opened."""
    driver = browser()
    held_filing(driver, world)
    shown = facts(driver)
    assert list(shown) == [
        "What it sends",
        "Destination",
        "Matter",
        "Requested by",
        "Why it is held",
        "What Allow once does",
        "Expires",
    ]
    assert shown["What it sends"] == f"{CONTENT} (motion-to-compel.pdf)"
    assert shown["Requested by"] == PARALEGAL
    for title in FILING_RULES.values():
        assert title in shown["Why it is held"]
    where = f"{COURT_NAME} (sdny), {CAPTION}, Docket No. {DOCKET}"
    assert shown["What Allow once does"].startswith(
        f"Sends what is shown here to {where} (electronic_filing), once, exactly as shown."
    )
    lawyers = by_id(driver, "facts").text
    for technical_word in ("sha256:", "external.transmit", "court_efile", "_required_"):
        assert technical_word not in lawyers
    assert by_id(driver, "digest-check").text.startswith("✓ What is shown here is exactly")
    assert not by_id(driver, "technical-facts").is_displayed()
    assert not by_id(driver, "checks").is_displayed()
    screenshots(driver, "lawyer-detail-plain")
    assert serious_violations(driver) == []

    details = technical(driver)
    assert details["Capability"] == "external.transmit"
    assert details["Tool"] == "court_efile"
    assert details["Binding digest"].startswith("sha256:")
    assert "attorney_approval_required_for_transmission" in details["Reasons"]
    assert all(
        li.text.startswith("✓ matches:")
        for li in by_id(driver, "checks").find_elements(By.TAG_NAME, "li")
    )
    screenshots(driver, "lawyer-detail-technical")
    assert serious_violations(driver) == []


@pytest.mark.claim("approver-desk.no-serious-a11y-violation")
def test_the_accessibility_check_finds_a_serious_violation(
    browser: Callable[[], webdriver.Chrome],
) -> None:
    """The check above is no empty pass: a button without a name is one."""
    driver = browser()
    driver.get("data:text/html,<html lang=en><title>t</title><main><button></button></main></html>")
    assert any(v.startswith("button-name (critical)") for v in serious_violations(driver))
