"""The fixtures, builders and constants of tests/browser/test_console_browser.py
that other test modules use too: here, so that no test module imports another."""

from __future__ import annotations

import asyncio
import json
import shutil
import threading
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypeVar

import nats
import pytest
from nats.aio.client import Client
from selenium import webdriver
from selenium.common.exceptions import NoSuchElementException, WebDriverException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support.ui import WebDriverWait

from smf_assurance.approver.console.server import ConsoleSettings, RunningConsole, start_console
from smf_assurance.ops.local.defaults import CONSOLE, OPERATOR
from smf_assurance.ops.local.logs import configure_logging
from smf_assurance.ops.local.pdf_renderer import fetch_renderer
from smf_assurance.ops.local.stack import Stack, start_stack
from smf_assurance.ops.local.state import StateDir
from smf_assurance.subjects import names
from smf_assurance.subjects.bus_access import connect_options
from tests.support.axe import serious_violations
from tests.support.clocks import OffsetClock as Clock
from tests.support.console import (
    PARALEGAL,
    hold_filing,
    provision,
)

__all__ = [
    "World",
    "answer",
    "audit",
    "browser",
    "by_id",
    "chromium",
    "confirm_allow",
    "deny_with",
    "facts",
    "open_detail",
    "screenshots",
    "sign_in",
    "until",
    "world",
]

ROOT = Path(__file__).resolve().parents[2]


ARTIFACTS = ROOT / ".artifacts" / "console"


CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1280,1500",
)


WAIT_SECONDS = 15.0


T = TypeVar("T")


class BackgroundLoop:
    """An event loop in a thread: the stack and the console run there while the test
    thread blocks in Selenium."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 30) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


@dataclass
class World:
    loop: BackgroundLoop
    state: StateDir
    stack: Stack
    console: RunningConsole
    clock: Clock
    nc: Client

    @property
    def url(self) -> str:
        return self.console.url

    def key_path(self, principal: str) -> Path:
        return self.state.key_path(principal)

    def hold(self, content: str, actor_id: str = PARALEGAL, **actor: str) -> str:
        return self.loop.run(hold_filing(self.nc, self.state, content, actor_id, **actor))

    def stream_count(self) -> int:
        info = self.loop.run(self.nc.jetstream().stream_info(names.EXECUTE_STREAM))
        return info.state.messages

    def resolve_on_bus(self, body: bytes) -> dict[str, Any]:
        reply = self.loop.run(self.nc.request(names.APPROVAL_RESOLVE, body, timeout=5))
        answer: dict[str, Any] = json.loads(reply.data)
        return answer


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    configure_logging(json=True, level="error")
    loop = BackgroundLoop()
    state = StateDir(tmp_path / "state")
    provision(state)

    async def start() -> World:
        stack = await start_stack(state)
        clock = Clock()
        stack.gate.desk.clock = clock
        console = await start_console(
            ConsoleSettings(
                nats_url=stack.url,
                registry=state.registry,
                # None here; tests/browser/test_lawyer_view.py writes one.
                directory=state.directory,
                refresh_seconds=0.25,
                credential=state.existing_credential(CONSOLE),
                clock=clock,  # the gate's clock: the page's countdown agrees with the gate
                pdf_renderer=fetch_renderer(),  # pinned pdf.js, from the per-user cache
            )
        )
        operator = connect_options(state.existing_credential(OPERATOR))
        return World(loop, state, stack, console, clock, await nats.connect(stack.url, **operator))

    running = loop.run(start())
    try:
        yield running
    finally:

        async def stop() -> None:
            await running.nc.drain()
            await running.console.close()
            await running.stack.stop()

        loop.run(stop())
        loop.close()


@pytest.fixture(scope="session")
def chromium() -> tuple[str, str]:
    """Debian's chromium and its matching chromedriver; their absence is a failure."""
    browser, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if browser is None or driver is None:
        pytest.fail(
            "the console's browser tests need Debian's chromium and chromium-driver "
            f"(chromium: {browser}, chromedriver: {driver}). Run `make browser`, or as "
            "root: apt-get install -y chromium chromium-driver",
            pytrace=False,
        )
    return browser, driver


@pytest.fixture
def browser(
    chromium: tuple[str, str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Callable[[], webdriver.Chrome]]:
    """Start headless Chromium with a fresh profile; every one started is quit afterwards."""
    started: list[webdriver.Chrome] = []

    def start() -> webdriver.Chrome:
        options = webdriver.ChromeOptions()
        options.binary_location = chromium[0]
        for flag in CHROMIUM_FLAGS:
            options.add_argument(flag)
        options.add_argument(f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}")
        try:
            driver = webdriver.Chrome(service=Service(executable_path=chromium[1]), options=options)
        except WebDriverException as exc:
            pytest.fail(f"headless Chromium did not start: {exc.msg}", pytrace=False)
        started.append(driver)
        return driver

    yield start
    for driver in started:
        driver.quit()


@pytest.fixture
def screenshots(tmp_path: Path) -> Callable[[webdriver.Chrome, str], Path]:
    """Save a screenshot in the test's tmp dir and copy it to ``.artifacts/console/``."""
    folder = tmp_path / "screenshots"
    folder.mkdir()
    ARTIFACTS.mkdir(parents=True, exist_ok=True)

    def save(driver: webdriver.Chrome, name: str) -> Path:
        path = folder / f"{name}.png"
        assert driver.save_screenshot(str(path)), name
        shutil.copyfile(path, ARTIFACTS / path.name)
        return path

    return save


def until(
    driver: webdriver.Chrome,
    condition: Callable[[webdriver.Chrome], T | Literal[False]],
    what: str,
    seconds: float = WAIT_SECONDS,
) -> T:
    def attempt(d: webdriver.Chrome) -> T | Literal[False]:
        try:
            return condition(d)
        except NoSuchElementException:
            return False

    result: T = WebDriverWait(driver, seconds, poll_frequency=0.05).until(attempt, what)
    return result


def by_id(driver: webdriver.Chrome, element_id: str) -> WebElement:
    return driver.find_element(By.ID, element_id)


def item(driver: webdriver.Chrome, approval_id: str) -> WebElement:
    return driver.find_element(By.CSS_SELECTOR, f'li[data-id="{approval_id}"]')


def sign_in(driver: webdriver.Chrome, world: World, principal: str, url: str = "") -> None:
    """Open the page (``url``, or the console's root) and choose the key file, as the
    approver does."""
    driver.get(url or world.url)
    by_id(driver, "key-file").send_keys(str(world.key_path(principal)))
    until(driver, lambda d: by_id(d, "workspace").is_displayed(), f"{principal} signed in")
    assert by_id(driver, "who-name").text == principal


def open_detail(driver: webdriver.Chrome, approval_id: str) -> None:
    """Open an approval with the keyboard and wait for the page's own checks."""
    until(driver, lambda d: item(d, approval_id), "the approval is listed")
    item(driver, approval_id).find_element(By.TAG_NAME, "button").send_keys(Keys.ENTER)
    until(driver, lambda d: by_id(d, "digest-check").get_attribute("data-ok"), "checks made")


def answer(driver: webdriver.Chrome, kind: str) -> str:
    until(driver, lambda d: by_id(d, "answer").get_attribute("data-kind") == kind, kind)
    text: str = by_id(driver, "answer").text
    return text


def confirm_allow(driver: webdriver.Chrome) -> None:
    """Allow once opens a confirm step; "Yes, allow once" signs."""
    until(driver, lambda d: by_id(d, "allow-confirm").is_displayed(), "the confirm step")
    by_id(driver, "allow-yes").send_keys(Keys.ENTER)


def deny_with(driver: webdriver.Chrome, reason: str, note: str = "") -> None:
    """Deny opens the reason form; choose ``reason``, type ``note``, send."""
    until(driver, lambda d: by_id(d, "deny-form").is_displayed(), "the deny form")
    radio = driver.find_element(By.CSS_SELECTOR, f'input[name="deny-reason"][value="{reason}"]')
    radio.send_keys(Keys.SPACE)
    if note:
        by_id(driver, "deny-note").send_keys(note)
    by_id(driver, "deny-send").send_keys(Keys.ENTER)


def facts(driver: webdriver.Chrome, dl: str = "facts") -> dict[str, str]:
    """The lawyer's facts of the open approval, as shown (term -> text)."""
    terms = by_id(driver, dl).find_elements(By.TAG_NAME, "dt")
    values = by_id(driver, dl).find_elements(By.TAG_NAME, "dd")
    return {t.text: v.text for t, v in zip(terms, values, strict=True)}


def technical(driver: webdriver.Chrome) -> dict[str, str]:
    """The technical details of the open approval, opened as a reader does (they are
    closed by default)."""
    details = by_id(driver, "technical")
    if details.get_attribute("open") is None:
        details.find_element(By.TAG_NAME, "summary").send_keys(Keys.ENTER)
        until(driver, lambda d: by_id(d, "technical-facts").is_displayed(), "technical details")
    return facts(driver, "technical-facts")


AUDIT = """
// Names and contrast of what is on screen (WCAG 2.2: 4.1.2 name, 1.4.3 contrast 4.5:1).
function rgb(text) { return text.match(/[\\d.]+/g).map(Number); }
function luminance([r, g, b]) {
  const f = (c) => { c /= 255; return c <= 0.03928 ? c / 12.92 : ((c + 0.055) / 1.055) ** 2.4; };
  return 0.2126 * f(r) + 0.7152 * f(g) + 0.0722 * f(b);
}
function background(node) {
  for (; node; node = node.parentElement) {
    const c = getComputedStyle(node).backgroundColor;
    if (rgb(c)[3] !== 0) return rgb(c).slice(0, 3);
  }
  return [255, 255, 255];
}
const low = [];
for (const node of document.querySelectorAll('body *')) {
  if (!node.checkVisibility() || node.closest('[hidden]')) continue;
  const own = [...node.childNodes].some((n) => n.nodeType === 3 && n.textContent.trim());
  if (!own || node.matches('button:disabled, button:disabled *')) continue;
  const [a, b] = [luminance(rgb(getComputedStyle(node).color)), luminance(background(node))];
  const ratio = (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05);
  if (ratio < 4.5) low.push(`${node.tagName}#${node.id}.${node.className}: ${ratio.toFixed(2)}`);
}
const unnamed = [...document.querySelectorAll('button, input, pre[tabindex]')]
  .filter((n) => n.checkVisibility())
  .filter((n) => !(n.textContent.trim() || n.labels?.length || n.getAttribute('aria-labelledby')))
  .map((n) => n.outerHTML.slice(0, 80));
return {low, unnamed};
"""


def audit(driver: webdriver.Chrome) -> None:
    """Names and contrast as above, and no serious or critical axe-core violation."""
    found = driver.execute_script(AUDIT)
    assert found == {"low": [], "unnamed": []}
    assert serious_violations(driver) == []
