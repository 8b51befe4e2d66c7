"""How long a release's lease runs: by default, and at most.

Apart from ``smf_assurance.governance.releases``, which publishes to the bus: the
command line's parsers show the default in their help without importing the bus client.
"""

from __future__ import annotations

from typing import Final

DEFAULT_LEASE_HOURS: Final = 7 * 24
MAX_LEASE_HOURS: Final = 366 * 24
