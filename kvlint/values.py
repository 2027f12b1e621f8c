"""Constant values the code proves: literals, module constants and locals assigned once.

A value is "literal" when exactly one constant can reach the expression. Anything else is UNKNOWN and the
rules that need a literal stay silent.
"""

from __future__ import annotations

from astroid import nodes

from kvlint.names import self_attribute_value


class _Unknown:
    def __repr__(self) -> str:
        return "UNKNOWN"


UNKNOWN = _Unknown()
_MAX_DEPTH = 12


def literal(expr: nodes.NodeNG | None, _depth: int = 0) -> object:
    """The constant ``expr`` always evaluates to, or UNKNOWN."""
    if expr is None or _depth > _MAX_DEPTH:
        return UNKNOWN
    if isinstance(expr, nodes.Const):
        return expr.value
    if isinstance(expr, nodes.UnaryOp) and expr.op in "-+":
        operand = literal(expr.operand, _depth + 1)
        if isinstance(operand, (int, float)) and not isinstance(operand, bool):
            return -operand if expr.op == "-" else operand
        return UNKNOWN
    if isinstance(expr, (nodes.Tuple, nodes.List)):
        items = tuple(literal(item, _depth + 1) for item in expr.elts)
        return UNKNOWN if any(item is UNKNOWN for item in items) else items
    if isinstance(expr, nodes.Name):
        value = single_assigned_value(expr)
        return UNKNOWN if value is None else literal(value, _depth + 1)
    if isinstance(expr, nodes.Attribute):
        assigned = self_attribute_value(expr)
        if assigned is not None and len(assigned) == 1:
            return literal(assigned[0], _depth + 1)
    return UNKNOWN


def single_assigned_value(name: nodes.Name) -> nodes.NodeNG | None:
    """The right-hand side of the one plain assignment that binds ``name`` in its scope, if there is one."""
    scope, bindings = name.lookup(name.name)
    if len(bindings) != 1 or len(scope.locals.get(name.name, ())) != 1:
        return None
    binding = bindings[0]
    statement = binding.parent
    if isinstance(statement, nodes.Assign) and any(t is binding for t in statement.targets):
        return statement.value
    if isinstance(statement, nodes.AnnAssign) and statement.value is not None:
        return statement.value
    return None
