"""Writing a command's output to a pipe that may close early (``kvlint --list-rules | head -1``,
``python -m kvlint.runtime_probe --merge ... | head``).

When the reader goes away, the next write raises ``BrokenPipeError``; a command-line tool should then stop
quietly, as ``cat`` or ``git log`` do, instead of printing a traceback. This module stands alone (it imports
nothing of kvlint), so every layer may use it: the static front-ends and the runtime probe.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

EXIT_BROKEN_PIPE = 141
"""128 + SIGPIPE: the status a shell reports for a command whose output pipe was closed."""


def quiet_on_broken_pipe(main: Callable[[], int]) -> int:
    """Run ``main`` (a command's body, returning its exit status) and flush its output; if the reader of
    standard output has gone, return ``EXIT_BROKEN_PIPE`` without a traceback.

    Standard output is then pointed at the null device, because the interpreter flushes it once more at exit
    and would report the broken pipe again (the recipe of the Python documentation, "Note on SIGPIPE").
    """
    try:
        status = main()
        sys.stdout.flush()
        return status
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_BROKEN_PIPE
