"""The team's tools: they build, test and measure the product; not in the wheel."""

from typing import Final

PROG: Final = "python -m smf_tools"
"""The team's command line, as it is typed from the checkout's root (:mod:`smf_tools.cli`)."""
