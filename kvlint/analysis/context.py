"""Where an evaluation stands (``Context``), its limits, and the one step of the value follower that every
expression handler recurses through (``values``).

The handlers live in ``kvlint.analysis.expressions``, ``follow`` and ``tensor_semantics`` and call
``values`` back for sub-expressions; the table of handlers travels in the context, set once by the entry
point (``kvlint.analysis.evaluate.ROOT``), so this module imports none of them.

``values`` remembers what it found for an expression on a path, with the same bound arguments and hops
(``_REMEMBERED``): the rules evaluate the query, key, value, mask and lengths of every call site, and those
follow the same names back through the same statements, helpers and callers (in a model file, each size of a
``view`` of the query once per argument and site: 82 evaluations of ``hidden_states.size()`` on 9 paths).
Only what the limits below did not cut short is remembered, and it is used again only where a fresh
evaluation could not be cut either: the steps it took fit in what is left of the evaluation's budget, its
deepest expression stays within MAX_DEPTH from where it starts now, and none of the expressions it visited is
being evaluated around it (a cycle). A result holding a tuple's elements is not remembered: each element
carries the context of the evaluation it came from. So a remembered answer is the answer a fresh evaluation
would give.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import NamedTuple

from astroid import nodes

from kvlint.analysis.facts import UNKNOWN_VALUE, Alt
from kvlint.analysis.flow import Path
from kvlint.analysis.memo import tree_cache

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


REMEMBERED_VISITS = 256
"""The most expressions an evaluation may visit and be remembered: keeping the list of what it visited is what
a remembered answer costs, and on generated code (thousands of unrolled layers) evaluations of a thousand
steps each made that cost grow faster than the file. On the public operator files, none visits 128."""


@dataclass
class _Visit:
    """One ``values`` call under way: what its evaluation has reached so far."""

    visited: set[int] | None
    """The ids of the expressions evaluated, itself included; None past REMEMBERED_VISITS (not remembered)."""
    deepest: int
    """The greatest depth an expression was evaluated at (an upper bound, for those remembered)."""
    cut: bool = False
    """A limit cut the evaluation short somewhere: its answer is not remembered."""


@dataclass
class Trace:
    """One evaluation, from an operator argument down: the steps it has taken (MAX_STEPS), and the ``values``
    calls under way, innermost last."""

    steps: int = 0
    open: list[_Visit] = field(default_factory=list)


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
    trace: Trace | None = None
    """The evaluation this context belongs to, shared by every context derived from it (None before it
    starts)."""

    def entering(self, node: nodes.NodeNG) -> Context:
        """The context of a sub-expression (built directly: ``dataclasses.replace`` re-reads the fields at every
        one of the evaluation's steps)."""
        return Context(handlers=self.handlers, depth=self.depth + 1, hops=self.hops, active=self.active | {id(node)},
                       bindings=self.bindings, trace=self.trace)

    def binding(self, function: nodes.FunctionDef) -> dict[str, tuple[nodes.NodeNG | None, Context]] | None:
        for bound, arguments in self.bindings:
            if bound is function:
                return arguments
        return None


class _Remembered(NamedTuple):
    """What ``values`` found for an expression, and what a fresh evaluation of it would meet again (a named
    tuple: one is made for most steps of an evaluation)."""

    alts: tuple[Alt, ...]
    bindings: tuple[object, ...]
    """The bound arguments it was evaluated with (the key holds their id)."""
    steps: int
    """The steps it took, its own included."""
    depth: int
    """The depth it started at."""
    deepest: int
    visited: frozenset[int]

    def holds_in(self, context: Context, steps_before: int) -> bool:
        """Whether a fresh evaluation in ``context``, after ``steps_before`` steps of its evaluation, would give
        the same answer: no limit can cut it short where none did."""
        deeper = max(0, context.depth - self.depth)
        return (self.bindings is context.bindings and steps_before + self.steps <= MAX_STEPS
                and self.deepest + deeper <= MAX_DEPTH and context.active.isdisjoint(self.visited))


_REMEMBERED: dict[tuple[nodes.NodeNG, Path, int, int], _Remembered] = tree_cache()


def values(expr: nodes.NodeNG | None, path: Path, context: Context) -> list[Alt]:
    """Every value ``expr`` may have in ``context``, each with the path on which it has it."""
    if context.trace is None:
        context = replace(context, trace=Trace())
    trace = context.trace
    trace.steps += 1
    if expr is None:
        return [Alt(UNKNOWN_VALUE, path)]
    if context.depth > MAX_DEPTH or trace.steps > MAX_STEPS or id(expr) in context.active:
        if trace.open:
            trace.open[-1].cut = True
        return [Alt(UNKNOWN_VALUE, path)]
    key = (expr, path, id(context.bindings), context.hops)
    remembered = _REMEMBERED.get(key)
    if remembered is not None and remembered.holds_in(context, trace.steps - 1):
        trace.steps += remembered.steps - 1
        _reached(trace, remembered.visited, remembered.deepest + max(0, context.depth - remembered.depth), False)
        return list(remembered.alts)
    visit = _Visit({id(expr)}, context.depth)
    trace.open.append(visit)
    start = trace.steps
    try:
        handler = context.handlers.get(type(expr))
        found = handler(expr, path, context.entering(expr)) if handler else [Alt(UNKNOWN_VALUE, path)]
    finally:
        trace.open.pop()
    unique = found if len(found) < 2 else list(dict.fromkeys(found))  # most expressions have one alternative
    if len(unique) > MAX_ALTERNATIVES:
        unique = [Alt(UNKNOWN_VALUE, path)]
    if not visit.cut and visit.visited is not None and all(alt.value.items is None for alt in unique):
        _REMEMBERED[key] = _Remembered(tuple(unique), context.bindings, trace.steps - start + 1, context.depth,
                                       visit.deepest, frozenset(visit.visited))
    _reached(trace, visit.visited, visit.deepest, visit.cut)
    return unique


def _reached(trace: Trace, visited: set[int] | frozenset[int] | None, deepest: int, cut: bool) -> None:
    """What an inner ``values`` call reached, added to the call around it."""
    if not trace.open:
        return
    around = trace.open[-1]
    if visited is None or around.visited is None or len(around.visited) + len(visited) > REMEMBERED_VISITS:
        around.visited = None
    else:
        around.visited |= visited
    around.deepest = max(around.deepest, deepest)
    around.cut = around.cut or cut
