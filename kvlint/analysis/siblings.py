"""Sibling paths of one function: what another branch does with a parameter that an operator call drops.

A wrapper that serves several backends (``if is_npu: ... elif flash_attn: ... else: sdpa``) shows on its other
branches what its parameters mean: a ``causal`` passed to ``flash_attn_varlen_func``, an ``attention_mask``
added to the eager scores, ``k_lens`` cut into the flash-attn lengths. When the branch that calls the operator
reads none of them, the caller's setting is lost on that path, and the sibling branch is the evidence that it
mattered. A parameter that no path honours proves nothing, and one that the operator's own path reads (a test
that picks the path, a guard that raises, a warning) is handled there.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from astroid import nodes

from kvlint.analysis.flow import Param, reaching_definitions, terminates
from kvlint.analysis.memo import tree_cache
from kvlint.analysis.walk import nodes_named, nodes_of

ATTENTION_CALLEE = re.compile(r"attn|attention|sdpa|scaled_dot_product|flash", re.IGNORECASE)
"""Names of the calls that compute attention: ``flash_attn_varlen_func``, ``scaled_dot_product_attention``, the
operators, a project's ``eager_attention_forward``."""
_MASK_APPLIERS = frozenset({"masked_fill", "masked_fill_", "where"})
_MAX_DEPTH = 6


def mentions(expr: nodes.NodeNG, param: str, attribute: str | None = None, depth: int = 0,
             seen: set[int] | None = None, unknown: bool = True) -> bool:
    """``expr`` reads the parameter (or ``self.<attribute>``), directly or through the local assignments
    that reach it (each assignment visited once); ``unknown`` is the answer when the chain is too deep."""
    if depth > _MAX_DEPTH:
        return unknown
    seen = set() if seen is None else seen
    for node in nodes_of(expr, (nodes.Name, nodes.Attribute)):
        if isinstance(node, nodes.Attribute) and attribute is not None and node.attrname == attribute and (
                isinstance(node.expr, nodes.Name) and node.expr.name == "self"):
            return True
        if not isinstance(node, nodes.Name):
            continue
        if node.name == param:
            return True
        for definition, _ in reaching_definitions(node.name, node):
            if isinstance(definition, Param) or not isinstance(definition, nodes.NodeNG):
                continue
            statement = definition.statement()
            value = getattr(statement, "value", None)
            if id(statement) in seen or value is None or not isinstance(
                    statement, (nodes.Assign, nodes.AnnAssign, nodes.AugAssign)):
                continue
            seen.add(id(statement))
            if mentions(value, param, attribute, depth + 1, seen, unknown):
                return True
    return False


def _branches(node: nodes.NodeNG, function: nodes.FunctionDef) -> dict[int, tuple[nodes.NodeNG, str]]:
    """The ``if`` statements and conditional expressions around ``node`` inside ``function``, each with the
    branch (``body``, ``orelse`` or ``test``) that holds it."""
    found: dict[int, tuple[nodes.NodeNG, str]] = {}
    child, parent = node, node.parent
    while parent is not None and child is not function:
        if isinstance(parent, (nodes.If, nodes.IfExp)):
            branch = "test" if child is parent.test else "body" if (
                child in parent.body if isinstance(parent, nodes.If) else child is parent.body) else "orelse"
            found[id(parent)] = (parent, branch)
        child, parent = parent, parent.parent
    return found


def _inside(node: nodes.NodeNG, owner: nodes.NodeNG) -> bool:
    return any(ancestor is owner for ancestor in node.node_ancestors())


def _left_before(first: nodes.NodeNG, later: nodes.NodeNG, function: nodes.FunctionDef) -> bool:
    """``first`` sits in a branch of an ``if`` that always leaves (returns or raises), and ``later`` comes
    after that ``if`` in a block around it: the two never run in one call."""
    for statement, branch in _branches(first, function).values():
        if not isinstance(statement, nodes.If) or branch == "test":
            continue
        block = statement.body if branch == "body" else statement.orelse
        if terminates(block) and not _inside(later, statement) and _inside(later, statement.parent) and (
                (later.lineno or 0) > (statement.tolineno or 0)):
            return True
    return False


def exclusive(one: nodes.NodeNG, other: nodes.NodeNG, function: nodes.FunctionDef) -> bool:
    """No run of ``function`` reaches both nodes: they sit in different branches of one ``if`` (or
    conditional expression), or one's branch returns before the other."""
    mine, theirs = _branches(one, function), _branches(other, function)
    for key, (_, branch) in mine.items():
        if key in theirs and "test" not in (branch, theirs[key][1]) and theirs[key][1] != branch:
            return True
    return _left_before(one, other, function) or _left_before(other, one, function)


@dataclass(frozen=True)
class Honoured:
    """Where a sibling branch uses the parameter, for messages: ``the flash_attn_varlen_func call at line 120``."""
    node: nodes.NodeNG
    text: str


def _callee(call: nodes.Call) -> str | None:
    func = call.func
    return func.attrname if isinstance(func, nodes.Attribute) else func.name if isinstance(func, nodes.Name) else None


def honoured_elsewhere(function: nodes.FunctionDef, call: nodes.Call, param: str, mask: bool = False,
                       attribute: bool = False) -> Honoured | None:
    """The parameter (``self.<param>`` when ``attribute``) is read only on paths that do not reach ``call``,
    and one of them honours it: an attention call takes it (or a value built from it) as an argument, an
    eager branch tested on it builds a mask, or, for a mask, the eager scores are combined with it
    (``scores + mask``, ``masked_fill``, ``where``). None when any read of it shares a path with ``call`` (a
    test that picks the path, a guard, a warning) or when no path honours it."""
    if attribute:
        reads = [n for n in nodes_of(function, nodes.Attribute) if n.attrname == param and isinstance(
            n.expr, nodes.Name) and n.expr.name == "self"]
        name_param, attribute_name = "", param
    else:
        reads, name_param, attribute_name = nodes_named(function, nodes.Name, param), param, None
    if not reads or any(read.frame() is not function or not exclusive(read, call, function) for read in reads):
        return None

    def uses(expr: nodes.NodeNG) -> bool:
        return mentions(expr, name_param, attribute_name, unknown=False)

    for other in nodes_of(function, (nodes.Call, nodes.BinOp)):
        if other is call or other.frame() is not function or not exclusive(other, call, function):
            continue
        if isinstance(other, nodes.Call):
            name = _callee(other)
            if name is None or not (ATTENTION_CALLEE.search(name) or mask and name in _MASK_APPLIERS):
                continue
            if any(uses(argument) for argument in list(other.args) + [k.value for k in other.keywords or ()]):
                return Honoured(other, f"the {name} call at line {other.lineno} takes it")
        elif mask and other.op == "+" and any(uses(side) for side in (other.left, other.right) if isinstance(
                side, (nodes.Name, nodes.Subscript, nodes.Attribute))):
            return Honoured(other, f"line {other.lineno} adds it to the attention scores")
    return None if mask else _masks_under_test(function, call, uses)


_MASK_BUILDERS = frozenset({"triu", "tril", "triu_", "tril_"}) | _MASK_APPLIERS


def _masks_under_test(function: nodes.FunctionDef, call: nodes.Call,
                      uses: Callable[[nodes.NodeNG], bool]) -> Honoured | None:
    """An eager branch that builds or applies a mask when the parameter is set: ``if causal:`` over a
    ``torch.triu`` / ``masked_fill``, on a path that does not reach ``call``."""
    for statement in nodes_of(function, nodes.If):
        if statement.frame() is not function or not exclusive(statement, call, function) or not uses(
                statement.test):
            continue
        for built in (n for block in statement.body for n in nodes_of(block, nodes.Call)):
            if _callee(built) in _MASK_BUILDERS:
                return Honoured(statement, f"the branch at line {statement.lineno} masks with it")
    return None


def enumerate_names(items: list[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``: for messages that name several parameters."""
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def flag_side(call: nodes.NodeNG, function: nodes.FunctionDef, flag: re.Pattern[str]) -> bool | None:
    """The value a flag (a name or attribute matching ``flag``, or its ``not``) has where ``call`` runs, from
    the ``if`` tests around it and the tests of the earlier ``if`` branches that return or raise; None when
    no such test decides it."""
    def tested(test: nodes.NodeNG) -> bool | None:
        if isinstance(test, nodes.UnaryOp) and test.op == "not":
            inner = tested(test.operand)
            return None if inner is None else not inner
        name = test.attrname if isinstance(test, nodes.Attribute) else getattr(test, "name", None)
        return True if isinstance(name, str) and flag.match(name) else None

    for statement, branch in _branches(call, function).values():
        value = tested(statement.test) if branch != "test" else None
        if value is not None:
            return value if branch == "body" else not value
    for statement in nodes_of(function, nodes.If):
        value = tested(statement.test)
        if value is not None and _left_before(statement.body[0], call, function) and not _inside(call, statement):
            return not value
    return None


_FLAG_ATTRIBUTES: dict[tuple[nodes.FunctionDef, re.Pattern[str]], list[str]] = tree_cache()


def flag_attributes(function: nodes.FunctionDef, names: re.Pattern[str]) -> list[str]:
    """The ``self`` attributes matching ``names`` that ``function`` reads and does not set, and that no other
    method of its class reads (``__init__`` aside): what they mean is decided in this function alone. Worked
    out once per function and pattern: every operator call of the function asks."""
    key = (function, names)
    if key not in _FLAG_ATTRIBUTES:
        _FLAG_ATTRIBUTES[key] = _flag_attributes(function, names)
    return _FLAG_ATTRIBUTES[key]


def _flag_attributes(function: nodes.FunctionDef, names: re.Pattern[str]) -> list[str]:
    cls = function.parent.frame() if function.parent is not None else None
    if not isinstance(cls, nodes.ClassDef):
        return []
    read = {n.attrname for n in nodes_of(function, nodes.Attribute) if names.match(n.attrname) and isinstance(
        n.expr, nodes.Name) and n.expr.name == "self"}
    read -= {n.attrname for n in nodes_of(function, nodes.AssignAttr)}
    for node in nodes_of(cls, nodes.Attribute):
        if node.attrname in read and node.frame() is not function and node.frame().name != "__init__":
            read.discard(node.attrname)
    return sorted(read)


_SHARED_PARAMETERS = 3


def honoured_by_sibling_function(function: nodes.FunctionDef, param: str) -> Honoured | None:
    """Another backend of the same signature beside ``function`` (a function of the module, or a method of the
    class, sharing at least three parameters with it, ``param`` among them, and not a dispatcher that calls
    ``function``) passes the parameter to an attention call: ``sdpa_attention_forward(..., is_causal)`` next
    to ``npu_attention_forward(..., is_causal)``."""
    def parameters(f: nodes.FunctionDef) -> set[str]:
        return {a.name for a in f.args.posonlyargs + f.args.args + f.args.kwonlyargs} - {"self", "cls"}

    mine = parameters(function)
    others = [other for other in (function.parent.get_children() if function.parent is not None else ())
              if isinstance(other, nodes.FunctionDef) and other is not function and param in parameters(other)
              and len(mine & parameters(other)) >= _SHARED_PARAMETERS
              and not any(_callee(call) == function.name for call in nodes_of(other, nodes.Call))]
    for other in sorted(others, key=lambda f: -len(mine & parameters(f))):
        for call in nodes_of(other, nodes.Call):
            name = _callee(call)
            if name is None or not ATTENTION_CALLEE.search(name) or call.frame() is not other:
                continue
            if any(mentions(argument, param, unknown=False)
                   for argument in list(call.args) + [k.value for k in call.keywords or ()]):
                return Honoured(call, f"its sibling {other.name}() passes it to {name} at line {call.lineno}")
    return None
