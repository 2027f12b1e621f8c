"""Caches of facts about the tree being analysed, emptied when the engine is done with it.

A cache whose values hold nodes of a tree keeps the whole tree alive, even when it is keyed weakly (the value
reaches its key through the nodes' parents). Kept in weak dictionaries, the trees of every file linted so far
stayed in memory, and each full collection of the garbage collector walked all of them again: most of the
CLI's time on operator-dense code went there (benchmarks/RESULTS.md). ``kvlint.checks.engine.analyze``
calls ``forget`` after each module, so such a cache lives as long as one module's analysis.
"""

from __future__ import annotations

from typing import Any

_CACHES: list[dict[Any, Any]] = []


def tree_cache() -> dict[Any, Any]:
    """A new cache keyed by nodes of the tree under analysis, emptied by ``forget``."""
    cache: dict[Any, Any] = {}
    _CACHES.append(cache)
    return cache


def forget() -> None:
    """Empty every tree cache: the engine has finished with the module."""
    for cache in _CACHES:
        cache.clear()
