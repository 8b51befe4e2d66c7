"""axe-core in the console's browser tests: no serious or critical accessibility
violation on the pages an attorney uses (issue 38: "axe-core or equivalent in the
browser tests: 0 serious violations").

axe-core is Deque's WCAG rule engine, from the npm registry at the version pinned
here, installed once per machine under the per-user cache keyed by that version
(``smf_assurance.ops.runtimes.cache``, as the runtimes are), under the install lock,
so two test processes never install into one folder. It is injected into the page
under test by WebDriver, which the page's Content-Security-Policy does not govern;
the console itself never serves it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Final

from selenium import webdriver

from smf_assurance.ops.runtimes.cache import cache_root, install_lock

AXE_VERSION: Final = "4.14.1"
SERIOUS: Final = ("serious", "critical")

_RUN = """
const done = arguments[arguments.length - 1];
axe.run(document, {resultTypes: ['violations']})
  .then((r) => done(r.violations.map((v) => ({
    id: v.id, impact: v.impact, targets: v.nodes.map((n) => n.target.join(' ')),
  }))))
  .catch((e) => done([{id: 'axe-failed', impact: 'critical', targets: [String(e)]}]));
"""


def axe_script(root: Path | None = None) -> str:
    """axe.min.js of :data:`AXE_VERSION`, installed on first use."""
    folder = (root or cache_root()) / f"axe-core-{AXE_VERSION}"
    script = folder / "node_modules" / "axe-core" / "axe.min.js"
    with install_lock(folder):
        if not script.exists():
            npm = shutil.which("npm")
            if npm is None:
                raise RuntimeError("npm is not on PATH (it installs axe-core for the tests)")
            subprocess.run(
                [
                    npm,
                    "install",
                    "--prefix",
                    str(folder),
                    "--no-audit",
                    "--no-fund",
                    "--ignore-scripts",
                    f"axe-core@{AXE_VERSION}",
                ],
                check=True,
                capture_output=True,
                timeout=300,
                env={**os.environ, "npm_config_update_notifier": "false"},
            )
    return script.read_text(encoding="utf-8")


def serious_violations(driver: webdriver.Chrome) -> list[str]:
    """Each serious or critical violation on the page as it is now: its rule and where."""
    if not driver.execute_script("return typeof window.axe !== 'undefined'"):
        driver.execute_script(axe_script())
    found = driver.execute_async_script(_RUN)
    return [
        f"{v['id']} ({v['impact']}): {', '.join(v['targets'])}"
        for v in found
        if v["impact"] in SERIOUS
    ]
