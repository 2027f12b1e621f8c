"""The per-file time and memory limits: a meter the engine reads at cheap checkpoints.

The engine calls ``Meter.check`` before each operator call's checks and before each module check (the meter
starts before the file's tree is built, which counts). Time is the process's CPU time (``time.process_time``:
waiting for a shared CPU does not count); memory is the growth of the process's resident set
(``/proc/self/statm``, else the peak from ``resource``; not measured where neither exists), read at the first
checkpoint and then at most every ``MEMORY_INTERVAL`` CPU seconds, so that a checkpoint costs one clock read. A
file past a limit raises ``LimitExceeded``, whose message names the limit; the engine turns it into the skip of
that file, and the front-ends go on with the next one.
"""

from __future__ import annotations

import math
import os
import sys
import time

from kvlint.analysis.settings import FileLimits, format_seconds, format_size

MEMORY_INTERVAL = 0.05
"""CPU seconds between two reads of the resident memory."""


class LimitExceeded(Exception):
    """The analysis of a file went past one of its limits; the message names the limit."""


def resident_bytes() -> int | None:
    """The process's resident memory (Linux), else its peak (other Unix systems), else None."""
    try:
        with open("/proc/self/statm", "rb") as handle:
            return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        pass
    try:
        import resource
    except ImportError:  # Windows: no memory limit
        return None
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024


class Meter:
    """The limits of one file's analysis, started when the file's analysis starts."""

    def __init__(self, limits: FileLimits) -> None:
        self.limits = limits
        now = time.process_time()
        self._deadline = now + limits.seconds if limits.seconds else math.inf
        start = resident_bytes() if limits.memory else None
        self._ceiling = None if start is None else start + limits.memory
        self._next_memory_check = now

    def check(self) -> None:
        """Raise ``LimitExceeded`` when the file's analysis has gone past a limit."""
        now = time.process_time()
        if now > self._deadline:
            raise LimitExceeded(f"its analysis took more than the per-file time limit of "
                                f"{format_seconds(self.limits.seconds)} of CPU (file-time-limit; 0 turns it off)")
        if self._ceiling is not None and now >= self._next_memory_check:
            self._next_memory_check = now + MEMORY_INTERVAL
            resident = resident_bytes()
            if resident is not None and resident > self._ceiling:
                raise LimitExceeded(f"its analysis grew the process's resident memory by more than the per-file "
                                    f"memory limit of {format_size(self.limits.memory)} (file-memory-limit; 0 turns "
                                    "it off)")
