"""``python -m keeper``: the same entry point as the ``keeper`` console script."""

import sys

from keeper.cli import main

sys.exit(main())
