"""The team's tools: they build, test and measure the product; not in the wheel."""

from typing import Final

PROG: Final = "python -m tools"
"""The team's command line, as it is typed from the checkout's root (:mod:`tools.cli`)."""
