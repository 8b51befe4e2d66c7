"""``python -m tools COMMAND``: see :mod:`tools.cli`."""

from smf_assurance.ops.cli import boundary
from tools import PROG

boundary.install_early_handlers(PROG)

# The early handlers are in place before the heavy imports below.
from tools.cli import main  # noqa: E402

raise SystemExit(main())
