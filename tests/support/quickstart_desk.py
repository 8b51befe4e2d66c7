"""The attorney's hands in the README's quick start: Chromium with its virtual authenticator.

Run as ``python -m tests.support.quickstart_desk`` by ``tests/cli/test_quickstart.py``,
inside the quick start's network namespace (``nsenter --net``), so that the browser reaches
the console on that namespace's loopback as the reader's browser does on theirs. One
browser and one authenticator for the whole run, as one attorney at one desk: the passkey
the first command makes is the one the second signs with.

One JSON command per line on stdin, one JSON answer per line on stdout:

- ``{"op": "make", "url", "principal", "out"}``: open the console, make a passkey to
  enrol, save the registration the page shows at ``out``; answers ``{"fingerprint"}``,
  as the page shows it (what the attorney reads to the operator).
- ``{"op": "approve", "url", "principal", "approval_id"}``: sign in with the passkey,
  open the approval, allow it once, and wait until the page shows the connector's
  receipt; answers ``{"answer", "receipt", "signs"}`` (how many times the authenticator
  signed since it was made).
- ``{"op": "quit"}``.

A failure answers ``{"error"}`` with the page's status lines, and the command ends.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from selenium import webdriver
from selenium.common.exceptions import WebDriverException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.common.virtual_authenticator import VirtualAuthenticatorOptions
from selenium.webdriver.support.ui import WebDriverWait

from tests.support.console_browser import CHROMIUM_FLAGS

WAIT_SECONDS = 60.0
"""Generous: the console, the gate and the connector share two cores with a browser."""


class Desk:
    def __init__(self, profile: Path) -> None:
        options = webdriver.ChromeOptions()
        options.binary_location = shutil.which("chromium") or "chromium"
        for flag in CHROMIUM_FLAGS:
            options.add_argument(flag)
        options.add_argument(f"--user-data-dir={profile}")
        service = Service(executable_path=shutil.which("chromedriver") or "chromedriver")
        self.driver = webdriver.Chrome(service=service, options=options)
        self.driver.add_virtual_authenticator(
            VirtualAuthenticatorOptions(
                protocol=VirtualAuthenticatorOptions.Protocol.CTAP2,
                transport=VirtualAuthenticatorOptions.Transport.INTERNAL,
                has_resident_key=True,
                has_user_verification=True,
                is_user_consenting=True,
                is_user_verified=True,
            )
        )
        self.made_signs = 0

    def by_id(self, element_id: str) -> Any:
        return self.driver.find_element(By.ID, element_id)

    def wait(self, condition: Any, what: str) -> Any:
        return WebDriverWait(self.driver, WAIT_SECONDS, poll_frequency=0.1).until(condition, what)

    def signs(self) -> int:
        return sum(c.sign_count for c in self.driver.get_credentials())

    def make(self, url: str, principal: str, out: str) -> dict[str, Any]:
        self.driver.get(url)
        self.by_id("passkey-id").send_keys(principal)
        self.by_id("passkey-enrol").send_keys(Keys.ENTER)
        self.wait(lambda d: self.by_id("enrolment-done").is_displayed(), "the passkey made")
        Path(out).write_text(str(self.by_id("enrolment").get_attribute("value")))
        self.made_signs = self.signs()
        return {"fingerprint": self.by_id("enrolment-fingerprint").text}

    def approve(self, url: str, principal: str, approval_id: str) -> dict[str, Any]:
        self.driver.get(url)
        self.by_id("passkey-id").send_keys(principal)
        self.by_id("passkey-signin").send_keys(Keys.ENTER)
        self.wait(lambda d: self.by_id("workspace").is_displayed(), "signed in")
        item = f'li[data-id="{approval_id}"] button'
        self.wait(lambda d: d.find_elements(By.CSS_SELECTOR, item), "the filing listed")
        self.driver.find_element(By.CSS_SELECTOR, item).send_keys(Keys.ENTER)
        self.wait(lambda d: self.by_id("digest-check").get_attribute("data-ok"), "checked")
        self.by_id("allow").send_keys(Keys.ENTER)
        self.wait(lambda d: self.by_id("allow-confirm").is_displayed(), "the confirm step")
        self.by_id("allow-yes").send_keys(Keys.ENTER)
        self.wait(lambda d: self.by_id("answer").get_attribute("data-kind"), "an answer")
        answer = self.by_id("answer").text
        self.wait(lambda d: self.by_id("receipt-line").is_displayed(), "the court's receipt")
        return {
            "answer": answer,
            "receipt": self.by_id("receipt-line").text,
            "signs": self.signs() - self.made_signs,
        }

    def status_lines(self) -> str:
        try:
            return " | ".join(
                self.by_id(name).text for name in ("signin-status", "enrol-status", "answer")
            )
        except WebDriverException:
            return ""


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="smf-qs-desk-") as profile:
        desk = Desk(Path(profile))
        try:
            for line in sys.stdin:
                command = json.loads(line)
                op = command.pop("op")
                if op == "quit":
                    break
                try:
                    answer = getattr(desk, op)(**command)
                except WebDriverException as exc:
                    answer = {"error": f"{exc.msg}; the page says: {desk.status_lines()}"}
                sys.stdout.write(json.dumps(answer) + "\n")
                sys.stdout.flush()
        finally:
            desk.driver.quit()
    return 0


if __name__ == "__main__":
    sys.exit(main())
