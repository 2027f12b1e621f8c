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

This module holds the entry point; the evaluation context and its limits are in ``kvlint.analysis.context``. How each kind of expression
evaluates is in ``kvlint.analysis.expressions``; following names to their definitions, ``self`` attributes,
callers and helpers in ``kvlint.analysis.follow``; what torch functions and tensor methods do in
``kvlint.analysis.tensor_semantics``.
"""

from __future__ import annotations

from astroid import nodes

from kvlint.analysis import context as _context
from kvlint.analysis.context import Context
from kvlint.analysis.expressions import HANDLERS
from kvlint.analysis.facts import NO_CONSTANT, Alt
from kvlint.analysis.flow import EMPTY, Path

ROOT = Context(HANDLERS)
"""The context of an evaluation started at an operator argument."""


def values(expr: nodes.NodeNG | None, path: Path = EMPTY, context: Context = ROOT) -> list[Alt]:
    """Every value ``expr`` may have, each with the path on which it has it."""
    return _context.values(expr, path, context)


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
