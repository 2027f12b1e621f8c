"""How each kind of expression evaluates (``HANDLERS``, one handler per astroid node type, used by
``kvlint.analysis.evaluate.values``): constants, names, attributes, subscripts, calls, operators, comparisons,
conditional expressions, tuples and ``:=``. Names and ``self`` attributes are followed by ``kvlint.analysis.follow``;
torch calls, tensor methods and arithmetic on tensors are ``kvlint.analysis.tensor_semantics``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace

from astroid import nodes

from kvlint.analysis.context import Context, values
from kvlint.analysis.facts import (
    CACHE,
    CACHE_NAME,
    CUMULATIVE,
    CUMULATIVE_NAME,
    NO_CONSTANT,
    TRIL,
    UNKNOWN_VALUE,
    Alt,
    Value,
    constant,
    is_number,
    is_torch_function,
    mapped,
)
from kvlint.analysis.flow import Path, condition
from kvlint.analysis.follow import lookup, returned, self_attribute, tuple_item
from kvlint.analysis.names import called_function, is_self, qualified_name
from kvlint.analysis.tensor_semantics import (
    FINFO,
    combine,
    einops_rearrange,
    einops_repeat,
    indexed,
    invert,
    tensor_method,
    torch_function,
)

_FLOAT_CONSTANTS = {"math.inf": math.inf, "torch.inf": math.inf, "numpy.inf": math.inf, "math.nan": math.nan}
_FLOAT32_MIN = -3.4028234663852886e38


def _const(node: nodes.Const, path: Path, context: Context) -> list[Alt]:
    return [Alt(constant(node.value), path)]


def _named_traits(name: str) -> set[str]:
    """What an identifier says about its value: a cache (``k_cache``), cumulative lengths (``cu_seqlens``)."""
    return {trait for trait, pattern in ((CACHE, CACHE_NAME), (CUMULATIVE, CUMULATIVE_NAME)) if pattern.search(name)}


def _name(node: nodes.Name, path: Path, context: Context) -> list[Alt]:
    named = lookup(node.name, node, path, context)
    traits = _named_traits(node.name)
    return mapped(named, lambda v: v.with_traits(traits)) if traits else named


def _attribute(node: nodes.Attribute, path: Path, context: Context) -> list[Alt]:
    cached = _named_traits(node.attrname)
    if is_self(node.expr):
        return mapped(self_attribute(node, path, context), lambda v: v.with_traits(cached))
    qualname = qualified_name(node)
    if qualname is not None:
        if qualname in _FLOAT_CONSTANTS:
            return [Alt(constant(_FLOAT_CONSTANTS[qualname]), path)]
        return [Alt(Value(qualname=qualname), path)]
    receiver = values(node.expr, path, context)
    if node.attrname == "dtype":
        return mapped(receiver, lambda v: Value(qualname=f"torch.{v.dtype}") if v.tensor and v.dtype else UNKNOWN_VALUE)
    if node.attrname == "min":
        return mapped(receiver, lambda v: constant(_FLOAT32_MIN) if v.qualname == FINFO else UNKNOWN_VALUE)
    if node.attrname in ("T", "mT"):
        return mapped(receiver,
                      lambda v: v.reshaped(None).with_traits(drop={TRIL}) if v.tensor else UNKNOWN_VALUE)
    return [Alt(UNKNOWN_VALUE.with_traits(cached), path)]


def _subscript(node: nodes.Subscript, path: Path, context: Context) -> list[Alt]:
    receiver = values(node.value, path, context)
    index = node.slice
    if isinstance(index, nodes.Const) and isinstance(index.value, int) and not isinstance(index.value, bool):
        picked = [p for alt in receiver if alt.value.items is not None for p in tuple_item(alt, index.value)]
        if picked and all(alt.value.items is not None for alt in receiver):
            return picked
    return mapped(receiver, lambda v: indexed(v, index))


def _unary(node: nodes.UnaryOp, path: Path, context: Context) -> list[Alt]:
    def apply(value: Value) -> Value:
        if node.op == "-" and is_number(value.const):
            return constant(-value.const)
        if node.op == "~" and value.tensor:
            return invert(value)
        if node.op == "-" and value.tensor:
            return replace(value, traits=frozenset())
        return UNKNOWN_VALUE

    return mapped(values(node.operand, path, context), apply)


def _binop(node: nodes.BinOp, path: Path, context: Context) -> list[Alt]:
    return combine(values(node.left, path, context), node.op, node.right, path, context)


def _compare(node: nodes.Compare, path: Path, context: Context) -> list[Alt]:
    if len(node.ops) != 1:
        return [Alt(UNKNOWN_VALUE, path)]
    op, right = node.ops[0]
    if op in ("is", "is not", "in", "not in"):
        return [Alt(UNKNOWN_VALUE, path)]
    right_value = right.value if isinstance(right, nodes.Const) else NO_CONSTANT

    def apply(value: Value) -> Value:
        if not value.tensor:
            return UNKNOWN_VALUE
        if op == "==" and right_value == 0:
            return invert(value, "bool")
        if (op == "!=" and right_value == 0) or (op == ">" and right_value == 0) or (op == "==" and right_value == 1):
            return value.retyped("bool")
        return invert(value, "bool").with_traits(drop={TRIL})

    return mapped(values(node.left, path, context), apply)


def _if_expression(node: nodes.IfExp, path: Path, context: Context) -> list[Alt]:
    key, polarity = condition(node.test)
    alts: list[Alt] = []
    for taken, branch in ((True, node.body), (False, node.orelse)):
        extended = path.choose(key, taken == polarity)
        if extended is not None:
            alts.extend(values(branch, extended, context))
    return alts


def _sequence(node: nodes.Tuple | nodes.List, path: Path, context: Context) -> list[Alt]:
    if any(isinstance(e, nodes.Starred) for e in node.elts):
        return [Alt(UNKNOWN_VALUE, path)]
    return [Alt(Value(items=tuple((e, context) for e in node.elts)), path)]


def _named_expression(node: nodes.NamedExpr, path: Path, context: Context) -> list[Alt]:
    return values(node.value, path, context)


def _call(call: nodes.Call, path: Path, context: Context) -> list[Alt]:
    qualname = qualified_name(call.func)
    if qualname in ("numpy.cumsum", "itertools.accumulate"):
        return [Alt(UNKNOWN_VALUE.with_traits({CUMULATIVE}), path)]
    if is_torch_function(qualname):
        return torch_function(qualname, call, path, context)
    if qualname == "einops.repeat":
        return einops_repeat(call, path, context)
    if qualname == "einops.rearrange":
        return einops_rearrange(call, path, context)
    if isinstance(call.func, nodes.Name) and call.func.name == "float" and len(call.args) == 1:
        text = call.args[0].value if isinstance(call.args[0], nodes.Const) else None
        if isinstance(text, str) and text.strip().lower() in ("inf", "-inf", "+inf", "infinity", "-infinity"):
            return [Alt(constant(float(text)), path)]
        return [Alt(UNKNOWN_VALUE, path)]
    function = called_function(call)
    if function is not None:
        return returned(function, call, path, context)
    if isinstance(call.func, nodes.Attribute):
        return [alt for receiver in values(call.func.expr, path, context)
                for alt in tensor_method(receiver, call.func.attrname, call, context)]
    return [Alt(UNKNOWN_VALUE, path)]


HANDLERS: dict[type[nodes.NodeNG], Callable[..., list[Alt]]] = {
    nodes.Const: _const,
    nodes.Name: _name,
    nodes.Attribute: _attribute,
    nodes.Subscript: _subscript,
    nodes.Call: _call,
    nodes.UnaryOp: _unary,
    nodes.BinOp: _binop,
    nodes.Compare: _compare,
    nodes.IfExp: _if_expression,
    nodes.Tuple: _sequence,
    nodes.List: _sequence,
    nodes.NamedExpr: _named_expression,
}
"""The handler of each kind of expression: ``handler(node, path, context)`` gives its alternatives."""
