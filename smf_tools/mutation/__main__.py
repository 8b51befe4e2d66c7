"""``python -m smf_tools.mutation``: see :mod:`smf_tools.mutation.cli`."""

import sys

from smf_tools.mutation.cli import main

sys.exit(main())
