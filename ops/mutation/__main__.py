"""``python -m ops.mutation``: see :mod:`ops.mutation.cli`."""

import sys

from ops.mutation.cli import main

sys.exit(main())
