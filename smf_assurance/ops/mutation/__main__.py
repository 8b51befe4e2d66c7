"""``python -m smf_assurance.ops.mutation``: see :mod:`smf_assurance.ops.mutation.cli`."""

import sys

from smf_assurance.ops.mutation.cli import main

sys.exit(main())
