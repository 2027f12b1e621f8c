"""``python -m kvlint``: the same as the ``kvlint`` command."""

import sys

from kvlint.frontends.cli import main

sys.exit(main())
