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
MAX_STEPS = 1000
"""Expressions one evaluation (from an operator argument) may visit, every nested ``values`` counted: past
it, what is left to follow is UNKNOWN, as past MAX_DEPTH. Branches on k independent conditions that each
rebind a name give up to 2**k paths to follow at every use; this bounds the cost of one argument (on the
1,390 public operator files of benchmarks/realcode_manifest.json, no evaluation visits more than 586)."""

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
    steps: list[int] | None = None
    """The expressions this evaluation has visited, one counter shared by every context derived from it
    (None before the evaluation starts)."""

    def entering(self, node: nodes.NodeNG) -> Context:
        """The context of a sub-expression (built directly: ``dataclasses.replace`` re-reads the fields at every
        one of the evaluation's steps)."""
        return Context(handlers=self.handlers, depth=self.depth + 1, hops=self.hops, active=self.active | {id(node)},
                       bindings=self.bindings, steps=self.steps)

    def binding(self, function: nodes.FunctionDef) -> dict[str, tuple[nodes.NodeNG | None, Context]] | None:
        for bound, arguments in self.bindings:
            if bound is function:
                return arguments
        return None


def values(expr: nodes.NodeNG | None, path: Path, context: Context) -> list[Alt]:
    """Every value ``expr`` may have in ``context``, each with the path on which it has it."""
    if context.steps is None:
        context = replace(context, steps=[0])
    context.steps[0] += 1
    if expr is None or context.depth > MAX_DEPTH or context.steps[0] > MAX_STEPS or id(expr) in context.active:
        return [Alt(UNKNOWN_VALUE, path)]
    handler = context.handlers.get(type(expr))
    found = handler(expr, path, context.entering(expr)) if handler else [Alt(UNKNOWN_VALUE, path)]
    unique = list(dict.fromkeys(found))
    if len(unique) > MAX_ALTERNATIVES:
        return [Alt(UNKNOWN_VALUE, path)]
    return unique
