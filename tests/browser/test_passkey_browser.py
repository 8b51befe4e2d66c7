"""An attorney with a passkey and no key file, in headless Chromium with its virtual authenticator.

The same world as tests/browser/test_console_browser.py (a real nats-server, the full stack
with the example connectors, the console). The console is opened at ``localhost``, the
relying party a passkey is made for (WebAuthn allows no address as a relying party).
The attorney's device is Chrome's own virtual authenticator (CTAP2, internal, resident
keys, user verification), driven through Selenium.

What these tests prove:

- The whole ceremony, as a firm runs it: the attorney makes a passkey on the console's
  page, which shows the registration and its fingerprint; the operator enrols it with
  ``smf-assurance approver passkey-add`` (the same fingerprint, a new signed release the
  running gate adopts); the attorney signs in with it, opens a held filing and allows it
  once; the connector receives exactly one order for it. The authenticator signed twice,
  the sign-in and the decision: showing filings and the requests list took no touch.
  The allow-once Chrome's authenticator signed, sent again, is refused
  ``approval_not_pending``; moved onto another held filing, ``bad_passkey_assertion``;
  neither sends anything.
- The sign-in page, with its passkey controls, fits 420 px and has every control named
  and no serious axe-core violation; so has the page showing a passkey made to enrol.
- Refused in the browser, with the console's words, and nothing decided: a passkey the
  operator never enrolled; another person's enrolled passkey used to sign in as the
  attorney; an authenticator that cannot verify its user.

What they do not prove: real platform authenticators or security keys, other browsers; the
gate's refusal of a changed binding, a replayed assertion and an assertion without user
verification is proven on the bus (``tests/bus/test_passkey_approvals.py``), since a
browser does not send those.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

import pytest
from selenium import webdriver
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.common.virtual_authenticator import VirtualAuthenticatorOptions

from smf_assurance.ops.cli.main import main
from smf_assurance.subjects.passkeys import credential_fingerprint
from tests.support import console_browser as page
from tests.support.console import ATTORNEY, PARALEGAL
from tests.support.console_browser import (
    World,
    answer,
    audit,
    by_id,
    confirm_allow,
    open_detail,
    until,
)

world = page.world
browser = page.browser
chromium = page.chromium
screenshots = page.screenshots

pytestmark = pytest.mark.claim("approver-desk.passkey-signed-resolution")


NARROW: Final = {"width": 420, "height": 900, "deviceScaleFactor": 1, "mobile": False}

KEEP_RESOLUTIONS = """
// What the page sends to /api/resolve, kept: the bytes the attorney's passkey signed.
window.__resolutions = [];
const original = window.fetch;
window.fetch = async (url, init) => {
  if (String(url).endsWith('/api/resolve')) window.__resolutions.push(init.body);
  return original(url, init);
};
"""

SEND_AGAIN = """
// The kept allow-once sent again as it was, and moved onto another approval.
const [other, done] = arguments;
import('/static/app.js').then(async (app) => {
  const post = async (body) => (await fetch('/api/resolve', {method: 'POST',
    headers: {'Content-Type': 'application/json'}, body})).json();
  const kept = window.__resolutions[0];
  const replayed = await post(kept);
  const moved = JSON.parse(kept);
  const payload = JSON.parse(atob(moved.payload));
  payload.approval_id = other;
  moved.payload = app.b64encode(new TextEncoder().encode(app.canonicalJson(payload)));
  done({replayed, moved: await post(JSON.stringify(moved))});
}).catch((e) => done({error: String(e)}));
"""


def localhost(world: World) -> str:
    return f"http://localhost:{world.console.port}/"


def with_authenticator(driver: webdriver.Chrome, *, verifies_user: bool = True) -> str:
    """Chrome's virtual authenticator, as a phone's or laptop's platform authenticator."""
    options = VirtualAuthenticatorOptions(
        protocol=VirtualAuthenticatorOptions.Protocol.CTAP2,
        transport=VirtualAuthenticatorOptions.Transport.INTERNAL,
        has_resident_key=True,
        has_user_verification=verifies_user,
        is_user_consenting=True,
        is_user_verified=verifies_user,
    )
    driver.add_virtual_authenticator(options)
    return str(driver.virtual_authenticator_id)


def make_passkey(driver: webdriver.Chrome, world: World, principal: str) -> tuple[str, str]:
    """On the console's page: the registration for the operator and its fingerprint."""
    driver.get(localhost(world))
    by_id(driver, "passkey-id").send_keys(principal)
    by_id(driver, "passkey-enrol").send_keys(Keys.ENTER)
    until(driver, lambda d: by_id(d, "enrolment-done").is_displayed(), "the passkey is made")
    registration = str(by_id(driver, "enrolment").get_attribute("value"))
    return registration, by_id(driver, "enrolment-fingerprint").text


def enrol(
    world: World,
    tmp_path: Path,
    principal: str,
    made: tuple[str, str],
    capsys: pytest.CaptureFixture[str],
) -> dict[str, Any]:
    """The operator's ``approver passkey-add`` of the registration and the fingerprint the
    page showed (the attorney reads it aloud), with the release keys, waiting for the gate."""
    registration, fingerprint = made
    path = tmp_path / f"{principal}.registration.json"
    path.write_text(registration)
    capsys.readouterr()
    code = main(
        [
            *("approver", "passkey-add", "--id", principal, "--registration", str(path)),
            *("--fingerprint", fingerprint, "--origin", localhost(world).rstrip("/")),
            *("--state-dir", str(world.state.root)),
            *("--release-key", str(world.state.key_path("release-signer"))),
            "--json",
        ]
    )
    out, err = capsys.readouterr()
    assert code == 0, err
    enrolled: dict[str, Any] = json.loads(out)
    return enrolled


def sign_in_with_passkey(driver: webdriver.Chrome, principal: str) -> None:
    by_id(driver, "passkey-id").clear()
    by_id(driver, "passkey-id").send_keys(principal)
    by_id(driver, "passkey-signin").send_keys(Keys.ENTER)


def signs(driver: webdriver.Chrome) -> int:
    """How many times the virtual authenticator's credentials have signed."""
    return sum(c.sign_count for c in driver.get_credentials())


@pytest.mark.claim("approver-desk.passkey-enrolment")
def test_an_attorney_enrols_a_passkey_signs_in_and_allows_a_filing_once(
    world: World,
    browser: Callable[[], webdriver.Chrome],
    screenshots: Callable[[webdriver.Chrome, str], Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    driver = browser()
    with_authenticator(driver)
    made = make_passkey(driver, world, ATTORNEY)
    screenshots(driver, "passkey-enrolment")
    registration, fingerprint = made
    assert fingerprint == credential_fingerprint(json.loads(registration)["rawId"])

    audit(driver)
    enrolled = enrol(world, tmp_path, ATTORNEY, made, capsys)

    assert enrolled["fingerprint"] == fingerprint
    assert [g["outcome"] for g in enrolled["release"]["gates"]] == ["adopted"]
    approval_id = world.hold("Motion for the passkey hearing.")
    other_id = world.hold("Another motion, for another hearing.")
    before, touched = world.stream_count(), signs(driver)
    sign_in_with_passkey(driver, ATTORNEY)
    until(driver, lambda d: by_id(d, "workspace").is_displayed(), "signed in with the passkey")
    assert by_id(driver, "who-name").text == ATTORNEY
    driver.execute_script(KEEP_RESOLUTIONS)
    open_detail(driver, approval_id)
    by_id(driver, "allow").send_keys(Keys.ENTER)
    confirm_allow(driver)

    assert "allowed once" in answer(driver, "accepted")
    assert world.stream_count() == before + 1
    assert signs(driver) == touched + 2  # the sign-in and the decision; the reads took none
    screenshots(driver, "passkey-allowed")
    sent = driver.execute_async_script(SEND_AGAIN, other_id)
    assert sent["replayed"]["reply"]["accepted"] is False
    assert sent["replayed"]["reply"]["reason_codes"] == ["approval_not_pending"]
    assert sent["moved"]["reply"]["reason_codes"] == ["bad_passkey_assertion"]
    assert world.stream_count() == before + 1  # neither sent anything


def test_the_sign_in_with_a_passkey_fits_420_px_and_names_every_control(
    world: World,
    browser: Callable[[], webdriver.Chrome],
    screenshots: Callable[[webdriver.Chrome, str], Path],
) -> None:
    driver = browser()
    with_authenticator(driver)
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", NARROW)
    driver.get(localhost(world))
    audit(driver)
    width = driver.execute_script("return document.documentElement.scrollWidth")
    assert width <= 420
    screenshots(driver, "passkey-signin-420px")


def test_an_unenrolled_passkey_does_not_sign_in(
    world: World, browser: Callable[[], webdriver.Chrome]
) -> None:
    driver = browser()
    with_authenticator(driver)
    make_passkey(driver, world, ATTORNEY)  # made, never enrolled

    sign_in_with_passkey(driver, ATTORNEY)

    until(driver, lambda d: "Not signed in" in by_id(d, "signin-status").text, "refused")
    assert "unknown_passkey" in by_id(driver, "signin-status").text
    assert not by_id(driver, "workspace").is_displayed()


def test_another_persons_passkey_does_not_sign_in_as_the_attorney(
    world: World,
    browser: Callable[[], webdriver.Chrome],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    driver = browser()
    with_authenticator(driver)
    enrol(world, tmp_path, PARALEGAL, make_passkey(driver, world, PARALEGAL), capsys)

    sign_in_with_passkey(driver, ATTORNEY)

    until(driver, lambda d: "Not signed in" in by_id(d, "signin-status").text, "refused")
    assert "session_grant_mismatch" in by_id(driver, "signin-status").text
    assert not by_id(driver, "workspace").is_displayed()
    sign_in_with_passkey(driver, PARALEGAL)  # her own passkey signs her in
    until(driver, lambda d: by_id(d, "workspace").is_displayed(), "signed in as herself")
    assert by_id(driver, "who-name").text == PARALEGAL


def test_an_authenticator_that_cannot_verify_its_user_makes_no_passkey(
    world: World, browser: Callable[[], webdriver.Chrome]
) -> None:
    driver = browser()
    with_authenticator(driver, verifies_user=False)
    driver.get(localhost(world))
    by_id(driver, "passkey-id").send_keys(ATTORNEY)

    by_id(driver, "passkey-enrol").send_keys(Keys.ENTER)

    until(driver, lambda d: "No passkey made" in by_id(d, "enrol-status").text, "refused")
    assert not by_id(driver, "enrolment-done").is_displayed()
    assert driver.get_credentials() == []
