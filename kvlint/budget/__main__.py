"""``python -m kvlint.budget``: the same as the ``kvlint-budget`` command."""

import sys

from kvlint.budget.cli import main

sys.exit(main())
