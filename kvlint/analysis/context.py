"""Where an evaluation stands (``Context``), its limits, and the one step of the value follower that every
expression handler recurses through (``values``).

The handlers live in ``kvlint.analysis.expressions``, ``follow`` and ``tensor_semantics`` and call
``values`` back for sub-expressions; the table of handlers travels in the context, set once by the entry
point (``kvlint.analysis.evaluate.ROOT``), so this module imports none of them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

from astroid import nodes

from kvlint.analysis.facts import UNKNOWN_VALUE, Alt
from kvlint.analysis.flow import Path

MAX_ALTERNATIVES = 16
MAX_DEPTH = 24
MAX_HOPS = 3

Handler = Callable[[nodes.NodeNG, Path, "Context"], list[Alt]]
"""How one kind of expression evaluates: its alternatives on the path, given the context."""


@dataclass(frozen=True, eq=False)
class Context:
    """Where an evaluation stands: its depth, the nodes being evaluated, and the arguments bound to the
    parameters of the helpers it entered."""

    handlers: Mapping[type[nodes.NodeNG], Handler]
    """One handler per astroid node type (``kvlint.analysis.expressions.HANDLERS``)."""
    depth: int = 0
    hops: int = 0
    """How many callers and helpers the evaluation has entered (at most MAX_HOPS)."""
    active: frozenset[int] = frozenset()
    bindings: tuple[tuple[nodes.FunctionDef, dict[str, tuple[nodes.NodeNG | None, Context]]], ...] = ()

    def entering(self, node: nodes.NodeNG) -> Context:
        return replace(self, depth=self.depth + 1, active=self.active | {id(node)})

    def binding(self, function: nodes.FunctionDef) -> dict[str, tuple[nodes.NodeNG | None, Context]] | None:
        for bound, arguments in self.bindings:
            if bound is function:
                return arguments
        return None


def values(expr: nodes.NodeNG | None, path: Path, context: Context) -> list[Alt]:
    """Every value ``expr`` may have in ``context``, each with the path on which it has it."""
    if expr is None or context.depth > MAX_DEPTH or id(expr) in context.active:
        return [Alt(UNKNOWN_VALUE, path)]
    handler = context.handlers.get(type(expr))
    found = handler(expr, path, context.entering(expr)) if handler else [Alt(UNKNOWN_VALUE, path)]
    unique = list(dict.fromkeys(found))
    if len(unique) > MAX_ALTERNATIVES:
        return [Alt(UNKNOWN_VALUE, path)]
    return unique
