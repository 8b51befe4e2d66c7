"""``python -m tools.mutation``: see :mod:`tools.mutation.cli`."""

import sys

from tools.mutation.cli import main

sys.exit(main())
