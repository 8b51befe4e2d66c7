"""``python -m smf_tools COMMAND``: see :mod:`smf_tools.cli`."""

from smf_assurance.ops.cli import boundary
from smf_tools import PROG

boundary.install_early_handlers(PROG)

# The early handlers are in place before the heavy imports below.
from smf_tools.cli import main  # noqa: E402

raise SystemExit(main())
