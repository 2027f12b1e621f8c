"""Following a value to an operator argument: ``values(expr)`` gives every value ``expr`` may have, each with
the path on which it has it.

Followed: the reaching definitions of local names (``kvlint.analysis.flow``), conditional expressions, tuple
unpacking, ``self.x`` assigned in the class or registered with ``register_buffer``, ``@property`` methods,
module constants, the arguments same-module callers pass to a parameter, the return values of same-module
helpers (with the caller's arguments bound), factory calls (``torch.ones``/``zeros``/``full``/``arange``/
``tensor``..., with their default dtypes and literal shapes) and the tensor methods that change dtype, shape
or meaning (``.to``, ``.int()``, ``.bool()``, ``~``, ``logical_not``, ``reshape``, ``unsqueeze``, ``[None]``,
``tril``, ``masked_fill``...). Nothing is imported and astroid inference is not used. What the code does not
prove is UNKNOWN_VALUE; past ``MAX_ALTERNATIVES`` or ``MAX_DEPTH`` everything is.

This module holds the entry point, the evaluation context and its limits. How each kind of expression
evaluates is in ``kvlint.analysis.expressions``; following names to their definitions, ``self`` attributes,
callers and helpers in ``kvlint.analysis.follow``; what torch functions and tensor methods do in
``kvlint.analysis.tensor_semantics``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, replace

from astroid import nodes

from kvlint.analysis.facts import NO_CONSTANT, UNKNOWN_VALUE, Alt, Value
from kvlint.analysis.flow import EMPTY, Path

MAX_ALTERNATIVES = 16
MAX_DEPTH = 24
MAX_HOPS = 3
CACHE_NAME = re.compile(r"(^|_)(past|cache|cached|caches|kvcache)(_|$)", re.IGNORECASE)
"""Identifiers that name a KV cache: ``k_cache``, ``past_key_value``, ``layer_past``, ``cached_keys``."""


@dataclass(frozen=True, eq=False)
class Context:
    """Where an evaluation stands: its depth, the nodes being evaluated, and the arguments bound to the
    parameters of the helpers it entered."""

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


ROOT = Context()


def values(expr: nodes.NodeNG | None, path: Path = EMPTY, context: Context = ROOT) -> list[Alt]:
    """Every value ``expr`` may have, each with the path on which it has it."""
    if expr is None or context.depth > MAX_DEPTH or id(expr) in context.active:
        return [Alt(UNKNOWN_VALUE, path)]
    # The handlers (kvlint.analysis.expressions, kvlint.analysis.follow, kvlint.analysis.tensor_semantics) call values() back for
    # sub-expressions and import it from this module: importing them here, at call time, keeps the imports
    # acyclic.
    from kvlint.analysis.expressions import HANDLERS

    inner = context.entering(expr)
    handler = HANDLERS.get(type(expr))
    found = handler(expr, path, inner) if handler else [Alt(UNKNOWN_VALUE, path)]
    unique = list(dict.fromkeys(found))
    if len(unique) > MAX_ALTERNATIVES:
        return [Alt(UNKNOWN_VALUE, path)]
    return unique


def literal(expr: nodes.NodeNG | None) -> object:
    """The one constant ``expr`` has on every path, or NO_CONSTANT.

    This is what the KVL1xx rules call a literal value: a literal, a module constant, or a name whose reaching
    assignments (and same-module callers) all give the same constant. Different constants on different
    paths, or anything the code does not prove, give NO_CONSTANT and those rules stay silent.
    """
    constants = [alt.value.const for alt in values(expr)]
    if not constants or any(const is NO_CONSTANT for const in constants):
        return NO_CONSTANT
    first = constants[0]
    if all(type(const) is type(first) and const == first for const in constants):
        return first
    return NO_CONSTANT


def mapped(alts: list[Alt], change: Callable[[Value], Value]) -> list[Alt]:
    """Each alternative's value changed, on the same path."""
    return [Alt(change(alt.value), alt.path) for alt in alts]
