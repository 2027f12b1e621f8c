"""The heap of a process a front-end owns (a flake8 run, the ``kvlint`` command and its ``-j`` workers).

astroid's bootstrap, done at the first file the text gate lets through, builds its ``builtins`` module: about
95,000 long-lived objects. Left in the garbage collector's generations, every full collection walks them
again: most of the flake8 plugin's overhead (flake8 1.09-1.11x without this, 1.03x with it), and a quarter
of the CLI's time on operator-dense code (benchmarks/RESULTS.md). Done by the front-ends in their own
processes, not by the engine, so that a program using kvlint as a library keeps its heap as it is.
"""

from __future__ import annotations

import gc

from astroid import MANAGER

_frozen = False


def freeze_astroid_bootstrap() -> None:
    """Once per process, after astroid has built its ``builtins`` module, take the objects alive now out of
    the garbage collector's generations (``gc.collect()`` first, so that no garbage is frozen)."""
    global _frozen
    if not _frozen and "builtins" in MANAGER.astroid_cache:
        gc.collect()
        gc.freeze()
        _frozen = True
