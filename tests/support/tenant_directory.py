"""The fixtures, builders and constants of tests/bus/test_tenant_directory.py
that other test modules use too: here, so that no test module imports another."""

from __future__ import annotations

from pathlib import Path
from typing import Final

__all__ = ["CAPTION", "CLIENT", "COURT_NAME", "DOCKET", "MATTER", "MATTER_NAME", "write_directory"]

TENANT: Final = "tenant-acme"


MATTER: Final = "matter-2026-0042"


COURT_NAME: Final = "U.S. District Court, Southern District of New York"


CAPTION: Final = "Acme Corp. v. Globex Inc."


DOCKET: Final = "1:26-cv-01234 (JMF)"


CLIENT: Final = "Acme Corporation"


MATTER_NAME: Final = "Acme v. Globex (discovery)"


DIRECTORY_TOML: Final = f"""
schema = "smf.tenant-directory/1"
tenant_id = "{TENANT}"

[courts.sdny]
name = "{COURT_NAME}"

[courts.edny]
name = "U.S. District Court, Eastern District of New York"

[matters.{MATTER}]
name = "{MATTER_NAME}"
client = "{CLIENT}"

[matters.{MATTER}.cases.sdny]
caption = "{CAPTION}"
docket = "{DOCKET}"

[recipients."counsel@globex.example"]
name = "Dana Whitfield, counsel for Globex"
"""


def write_directory(folder: Path, text: str = DIRECTORY_TOML, tenant: str = TENANT) -> Path:
    """The operator's directory for the demo tenant (the scripted court filing's ids)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{tenant}.toml").write_text(text, encoding="utf-8")
    return folder
