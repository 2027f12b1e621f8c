"""Following a name to the values its definitions give it: the reaching definitions of local names
(``kvlint.analysis.flow``) with tuple unpacking and branches on ``x.dtype``, module constants and imports, the
arguments same-module callers pass to a parameter (each caller a path of its own), the return values of
same-module helpers with the caller's arguments bound, and ``self.x`` as the method or the class sets it.
"""

from __future__ import annotations

import weakref
from dataclasses import replace

from astroid import nodes

from kvlint.analysis.axes import roles, split
from kvlint.analysis.context import MAX_HOPS, Context, values
from kvlint.analysis.facts import DTYPES, UNKNOWN_VALUE, Alt, Value, constant
from kvlint.analysis.flow import (
    CALLER,
    MAX_PATHS,
    OUTER,
    Caller,
    Key,
    Param,
    Path,
    condition,
    mutated_name,
    past_guards,
    reaching_definitions,
    reads_choices,
)
from kvlint.analysis.memo import tree_cache
from kvlint.analysis.names import (
    called_function,
    decorator_names,
    enclosing_class,
    is_property,
    is_self,
    self_assignments,
)
from kvlint.analysis.tensor_semantics import as_tensor, changed_in_place, combine
from kvlint.analysis.walk import nodes_of

# Names ------------------------------------------------------------------------------------------------


def lookup(name: str, use: nodes.NodeNG, path: Path, context: Context) -> list[Alt]:
    """The values ``name`` has at ``use``: those its reaching definitions give it, each on its path."""
    scope, _ = use.scope().lookup(name)
    if isinstance(scope, (nodes.Lambda, nodes.ComprehensionScope)):
        bound = context.binding(scope) if isinstance(scope, nodes.ComprehensionScope) else None
        if bound is not None and name in bound:
            expr, outer = bound[name]
            return values(expr, path, outer)
        return [Alt(UNKNOWN_VALUE, path)]
    alts: list[Alt] = []
    reaching = reaching_definitions(name, use, path)
    for definition, reached in reaching:
        if isinstance(definition, Param):
            alts.extend(_narrowed_by_branches(name, use, 0, _parameter(definition, reached, context)))
        elif definition is OUTER:
            alts.extend(_narrowed_by_branches(name, use, 0, _outer(name, use, reached, context)))
        elif isinstance(definition, nodes.NodeNG):
            found = _definition(definition, reached, context)
            alts.extend(_narrowed_by_branches(name, use, definition.lineno or 0, found))
        else:
            alts.append(Alt(UNKNOWN_VALUE, reached))
    return _observed(name, use, {definition for definition, _ in reaching}, alts)


_UNPACKINGS: dict[nodes.NodeNG, dict[str, list[nodes.Assign]]] = tree_cache()


def _observed(name: str, use: nodes.NodeNG, reaching: set[object], alts: list[Alt]) -> list[Alt]:
    """What ``b, n, s, d = x.shape`` (or ``x.size()``) in the frame says about ``x`` where the same definitions
    reach both: its rank and, where the names say it, its axis order (``kvlint.analysis.axes.roles``)."""
    frame = use.frame()
    if frame not in _UNPACKINGS:
        found: dict[str, list[nodes.Assign]] = {}
        for statement in nodes_of(frame, nodes.Assign):
            target, value = statement.targets[0], statement.value
            if isinstance(value, nodes.Call) and not value.args and not value.keywords:
                value = value.func if isinstance(value.func, nodes.Attribute) and value.func.attrname == "size" else None
            elif not (isinstance(value, nodes.Attribute) and value.attrname == "shape"):
                value = None
            if (value is not None and isinstance(value.expr, nodes.Name) and len(statement.targets) == 1
                    and isinstance(target, nodes.Tuple) and not any(isinstance(e, nodes.Starred) for e in target.elts)):
                found.setdefault(value.expr.name, []).append(statement)
        _UNPACKINGS[frame] = found
    for statement in _UNPACKINGS[frame].get(name, []):
        seen = statement.value.func.expr if isinstance(statement.value, nodes.Call) else statement.value.expr
        if statement is use.statement() or {d for d, _ in reaching_definitions(name, seen)} != reaching:
            continue
        targets = statement.targets[0].elts
        axes = roles([t.name if isinstance(t, nodes.AssignName) else None for t in targets])
        alts = [Alt(_with_rank(alt.value, len(targets), axes), alt.path) for alt in alts]
    return alts


def _with_rank(value: Value, rank: int, axes: tuple[str | None, ...] | None) -> Value:
    """The tensor a shape unpacking describes: ``rank`` axes, with the unpacking's axis order unless the
    value has one already."""
    if not (value.tensor or value == UNKNOWN_VALUE.with_traits(value.traits)):
        return value
    known, known_rank = split(value.shape)
    if (known_rank is not None and known_rank != rank) or len(known) > rank:
        return value
    shape = known + (None,) * (rank - len(known))
    return replace(as_tensor(value), shape=shape, axes=value.axes or axes)


@reads_choices
def _narrows(key: Key) -> bool:
    """A branch on ``x is None`` or on ``x.dtype == torch.<d>``, which narrows ``x`` on its sides."""
    return key[1].endswith(" is None") or _DTYPE_TEST in key[1]


def _narrowed_by_branches(name: str, use: nodes.NodeNG, defined_at: int, alts: list[Alt]) -> list[Alt]:
    """What a branch on ``x.dtype == torch.<d>`` (or ``!=``) or on ``x is None`` on the path says about ``x``,
    for a definition of ``x`` made before that branch: after ``if x.dtype != torch.int32: x = x.int()``, the
    path that skipped the cast has an int32 ``x``; on the path that took ``if mask is not None:``, ``mask``
    is not None."""
    dtype_prefix, none_test = f"{name}.dtype == ", f"{name} is None"
    frame = use.frame()
    lines, dtype_tested = _tests(frame)
    if none_test not in lines and name not in dtype_tested:
        return alts  # no branch of the frame tests it: no choice of the path narrows it
    checked = []
    for alt in alts:
        value: Value | None = alt.value
        for (key_frame, text), taken in alt.path.choices:
            if key_frame is not frame or value is None or not (text == none_test or text.startswith(dtype_prefix)):
                continue
            if not _tested_after(frame, text, defined_at):
                continue
            if text == none_test:
                proven = value.is_none or value.tensor or value.qualname is not None
                value = value if not proven or value.is_none == taken else None
                continue
            dtype = DTYPES.get(text[len(dtype_prefix):])
            if dtype is None or not value.tensor:
                continue
            if taken is True:
                value = value.retyped(dtype)
            elif value.dtype == dtype:
                value = None
        if value is not None:
            checked.append(Alt(value, alt.path))
    return checked


_TESTS: weakref.WeakKeyDictionary[nodes.NodeNG, tuple[dict[str, list[int]], frozenset[str]]] = (
    weakref.WeakKeyDictionary())
_DTYPE_TEST = ".dtype == "


def _tests(frame: nodes.NodeNG) -> tuple[dict[str, list[int]], frozenset[str]]:
    """The conditions of the frame's ``if`` statements and expressions, with their lines; and every ``x``
    that some condition's text starts ``x.dtype == `` with."""
    if frame not in _TESTS:
        lines: dict[str, list[int]] = {}
        for branch in nodes_of(frame, (nodes.If, nodes.IfExp)):
            lines.setdefault(condition(branch.test)[0][1], []).append(branch.lineno or 0)
        dtype_tested = set()
        for text in lines:
            at = text.find(_DTYPE_TEST)
            while at != -1:
                dtype_tested.add(text[:at])
                at = text.find(_DTYPE_TEST, at + 1)
        _TESTS[frame] = (lines, frozenset(dtype_tested))
    return _TESTS[frame]


def _tested_after(frame: nodes.NodeNG, text: str, line: int) -> bool:
    """Every ``if`` (statement or expression) of the frame on condition ``text`` comes after ``line``."""
    tested = _tests(frame)[0].get(text, [])
    return bool(tested) and all(lineno > line for lineno in tested)


def _definition(binding: nodes.NodeNG, path: Path, context: Context) -> list[Alt]:
    """The value a binding gives its name."""
    if isinstance(binding, (nodes.AssignName, nodes.AssignAttr)):
        statement = binding.statement()
        if not isinstance(statement, (nodes.Assign, nodes.AnnAssign)) or statement.value is None:
            return [Alt(UNKNOWN_VALUE, path)]
        indices = _target_indices(binding, statement)
        if indices is None:
            return [Alt(UNKNOWN_VALUE, path)]
        return _unpacked(statement.value, indices, path, context)
    if isinstance(binding, nodes.AugAssign):
        target = binding.target
        if not isinstance(target, nodes.AssignName):
            return [Alt(UNKNOWN_VALUE, path)]
        before = lookup(target.name, binding, path, context)
        return combine(before, binding.op[:-1], binding.value, path, context)
    if mutated_name(binding) is not None:
        before = lookup(mutated_name(binding), binding, path, context)
        return [alt for previous in before for alt in changed_in_place(previous, binding, context)]
    if isinstance(binding, (nodes.Import, nodes.ImportFrom)):
        return [Alt(_imported(binding), path)]
    if isinstance(binding, nodes.FunctionDef):
        return [Alt(Value(function=binding), path)]
    return [Alt(UNKNOWN_VALUE, path)]


def _imported(statement: nodes.Import | nodes.ImportFrom) -> Value:
    for imported, alias in statement.names:
        if isinstance(statement, nodes.Import):
            return Value(qualname=imported if alias else imported.split(".")[0])
        if statement.level or imported == "*":
            return UNKNOWN_VALUE
        return Value(qualname=f"{statement.modname}.{imported}")
    return UNKNOWN_VALUE


def _target_indices(binding: nodes.AssignName, statement: nodes.NodeNG) -> tuple[int, ...] | None:
    """Where a name sits in an unpacking target: ``a, (b, c) = ...`` gives c the indices (1, 1); None
    for a starred target."""
    indices: list[int] = []
    node = binding
    while node.parent is not statement:
        parent = node.parent
        if not isinstance(parent, (nodes.Tuple, nodes.List)):
            return None
        indices.append(next(i for i, elt in enumerate(parent.elts) if elt is node))
        node = parent
    return tuple(reversed(indices))


def _unpacked(expr: nodes.NodeNG, indices: tuple[int, ...], path: Path, context: Context) -> list[Alt]:
    if not indices:
        return values(expr, path, context)
    if isinstance(expr, nodes.ListComp):
        return _comprehension_item(expr, indices, path, context)
    if isinstance(expr, (nodes.Tuple, nodes.List)):
        if any(isinstance(e, nodes.Starred) for e in expr.elts) or indices[0] >= len(expr.elts):
            return [Alt(UNKNOWN_VALUE, path)]
        return _unpacked(expr.elts[indices[0]], indices[1:], path, context)
    alts = values(expr, path, context)
    for index in indices:
        alts = [picked for alt in alts for picked in tuple_item(alt, index)]
    return alts


def _comprehension_item(expr: nodes.ListComp, indices: tuple[int, ...], path: Path, context: Context) -> list[Alt]:
    """Item ``i`` of ``[f(x) for x in (a, b, c)]``: ``f`` applied to the i-th element of the literal tuple
    (``q, k, v = [rearrange(t, ...) for t in (q, k, v)]``); anything else is unknown."""
    if len(expr.generators) != 1:
        return [Alt(UNKNOWN_VALUE, path)]
    generator = expr.generators[0]
    items = generator.iter
    if (generator.ifs or not isinstance(generator.target, nodes.AssignName)
            or not isinstance(items, (nodes.Tuple, nodes.List)) or indices[0] >= len(items.elts)
            or any(isinstance(e, nodes.Starred) for e in items.elts)):
        return [Alt(UNKNOWN_VALUE, path)]
    bound = {generator.target.name: (items.elts[indices[0]], context)}
    inner = replace(context, bindings=context.bindings + ((expr, bound),))
    alts = values(expr.elt, path, inner)
    for index in indices[1:]:
        alts = [picked for alt in alts for picked in tuple_item(alt, index)]
    return alts


def tuple_item(alt: Alt, index: int) -> list[Alt]:
    """The alternatives of one element of a tuple value, followed on the tuple's path."""
    items = alt.value.items
    if items is None or not -len(items) <= index < len(items):
        return [Alt(UNKNOWN_VALUE, alt.path)]
    element, context = items[index]
    return values(element, alt.path, context)


def _parameter(param: Param, path: Path, context: Context) -> list[Alt]:
    """A parameter: the argument bound by the helper call being followed, else what same-module callers
    pass (or the default when they omit it), each caller a path of its own, so that the parameters of one
    function come from the same call, and the callee's branches on its parameters follow the caller's
    arguments (``kvlint.analysis.flow.Caller``). No caller in the module: unknown."""
    bound = context.binding(param.function)
    if bound is not None:
        expr, caller_context = bound.get(param.name, (None, context))
        return values(expr, path, caller_context)
    if context.hops >= MAX_HOPS:
        return [Alt(UNKNOWN_VALUE, path)]
    alts: list[Alt] = []
    outer = replace(context, bindings=(), hops=context.hops + 1)
    for call in callers(param.function):
        arguments = bind_arguments(param.function, call)
        through = path.choose((param.function, CALLER), Caller(call, arguments or {}))
        if through is None:
            continue
        expr = arguments.get(param.name) if arguments is not None else None
        alts.extend(values(expr, through, outer))
    return alts or [Alt(UNKNOWN_VALUE, path)]


def _outer(name: str, use: nodes.NodeNG, path: Path, context: Context) -> list[Alt]:
    """A name the frame does not bind: a module constant, import or function, else unknown."""
    frame = use.frame()
    if isinstance(frame, nodes.Module):
        return [Alt(UNKNOWN_VALUE, path)]
    scope = frame.parent.scope() if frame.parent is not None else None
    while isinstance(scope, nodes.ClassDef):
        scope = scope.parent.scope()
    if not isinstance(scope, nodes.Module) or name in _global_names(scope):
        return [Alt(UNKNOWN_VALUE, path)]
    bindings = scope.locals.get(name, [])
    if not bindings:
        return [Alt(UNKNOWN_VALUE, path)]
    alts: list[Alt] = []
    for binding in bindings:
        if isinstance(binding, nodes.AssignName) and binding.statement().parent is not scope:
            alts.append(Alt(UNKNOWN_VALUE, path))
        else:
            alts.extend(_definition(binding, path, context))
    return alts


_GLOBALS: weakref.WeakKeyDictionary[nodes.Module, frozenset[str]] = weakref.WeakKeyDictionary()


def _global_names(module: nodes.Module) -> frozenset[str]:
    """Names some function rebinds with ``global``: their module value is not a constant."""
    if module not in _GLOBALS:
        _GLOBALS[module] = frozenset(n for g in nodes_of(module, nodes.Global) for n in g.names)
    return _GLOBALS[module]


# Self attributes --------------------------------------------------------------------------------------


def self_attribute(node: nodes.Attribute, path: Path, context: Context) -> list[Alt]:
    """``self.x``: the assignment to it that reaches the use in the same method, else what the class
    assigns anywhere."""
    alts: list[Alt] = []
    for definition, reached in reaching_definitions(f"{node.expr.name}.{node.attrname}", node, path):
        if isinstance(definition, Param) or definition is OUTER:
            alts.extend(_class_attribute(node, reached, context))
        elif isinstance(definition, nodes.NodeNG):
            alts.extend(_definition(definition, reached, context))
        else:
            alts.append(Alt(UNKNOWN_VALUE, reached))
    return alts


def _class_attribute(node: nodes.Attribute, path: Path, context: Context) -> list[Alt]:
    """``self.x`` as the class sets it: its assignments in any method, ``register_buffer``, a class
    constant or a property's returns. Every assignment that can leave its method counts, in the order the
    class performs them (``__init__``, then the methods that set it); one a later statement of the same
    method overwrites on every path does not (``self.mask = ~self.mask``). A None the class assigns is a
    placeholder: the value comes from another assignment, or from outside the class (unknown)."""
    cls = enclosing_class(node)
    if cls is None:
        return [Alt(UNKNOWN_VALUE, path)]
    defined = [d for d in cls.locals.get(node.attrname, []) if not _annotation_only(d)]
    assigned = self_assignments(cls).get(node.attrname)
    if defined:
        if len(defined) == 1 and isinstance(defined[0], nodes.FunctionDef) and is_property(defined[0]):
            return returned(defined[0], None, path, context)
        if len(defined) == 1 and isinstance(defined[0], nodes.AssignName) and not assigned:
            return _definition(defined[0], path, context)
        return [Alt(UNKNOWN_VALUE, path)]
    if not assigned:
        return [Alt(UNKNOWN_VALUE, path)]
    live = [expr for expr in _in_class_order(cls, assigned) if not _overwritten(expr, node.attrname)]
    alts = [alt for expr in live for alt in values(expr, path, replace(context, bindings=()))]
    not_none = [alt for alt in alts if not alt.value.is_none]
    return not_none or [Alt(UNKNOWN_VALUE, path)]


def _in_class_order(cls: nodes.ClassDef, assigned: list[nodes.NodeNG | None]) -> list[nodes.NodeNG | None]:
    """The assignments in the order the class performs them: ``__init__`` first, then the other methods."""
    return sorted(assigned, key=lambda expr: expr is None or expr.frame().name != "__init__")


def _overwritten(expr: nodes.NodeNG | None, attribute: str) -> bool:
    """A later statement of the same method assigns ``self.<attribute>`` on every path after this assignment
    (``self.mask = torch.tril(...)`` then ``self.mask = ~self.mask``): its value never leaves the method."""
    if expr is None:
        return False
    method = expr.frame()
    node = expr.statement()
    while node is not None and node is not method:
        parent = node.parent
        block = next((getattr(parent, f) for f in ("body", "orelse", "handlers", "finalbody")
                      if isinstance(getattr(parent, f, None), list) and any(s is node for s in getattr(parent, f))),
                     None)
        if block is None:
            return False
        for statement in block[next(i for i, s in enumerate(block) if s is node) + 1:]:
            if _assigns_attribute(statement, attribute):
                return True
            if any(r.frame() is method for r in nodes_of(statement, nodes.Return)):
                return False  # the method may return with this value first
        if isinstance(parent, (nodes.For, nodes.While, nodes.ExceptHandler, nodes.Try)):
            return False  # a loop may not run again, a handler or try body may be left early
        node = parent
    return False


def _assigns_attribute(statement: nodes.NodeNG, attribute: str) -> bool:
    """A plain ``self.<attribute> = ...`` statement (``register_buffer`` of the name too)."""
    if isinstance(statement, (nodes.Assign, nodes.AnnAssign)) and statement.value is not None:
        targets = statement.targets if isinstance(statement, nodes.Assign) else [statement.target]
        return any(isinstance(t, nodes.AssignAttr) and t.attrname == attribute and is_self(t.expr) for t in targets)
    if isinstance(statement, nodes.Expr) and isinstance(statement.value, nodes.Call):
        call = statement.value
        return (isinstance(call.func, nodes.Attribute) and call.func.attrname == "register_buffer"
                and is_self(call.func.expr) and bool(call.args) and isinstance(call.args[0], nodes.Const)
                and call.args[0].value == attribute)
    return False


def _annotation_only(binding: nodes.NodeNG) -> bool:
    """``x: Tensor`` in a class body declares an attribute without giving it a value."""
    return isinstance(binding, nodes.AssignName) and isinstance(binding.parent, nodes.AnnAssign) and (
        binding.parent.value is None)


# Same-module functions --------------------------------------------------------------------------------


_CALLERS: dict[nodes.Module, dict[nodes.FunctionDef, list[nodes.Call]]] = tree_cache()


def callers(function: nodes.FunctionDef) -> list[nodes.Call]:
    """The calls in the module that reach ``function``."""
    module = function.root()
    if module not in _CALLERS:
        index: dict[nodes.FunctionDef, list[nodes.Call]] = {}
        for call in nodes_of(module, nodes.Call):
            target = called_function(call)
            if target is not None:
                index.setdefault(target, []).append(call)
        _CALLERS[module] = index
    return _CALLERS[module].get(function, [])


def bind_arguments(function: nodes.FunctionDef, call: nodes.Call) -> dict[str, nodes.NodeNG | None] | None:
    """The expression each parameter receives at ``call`` (the default when omitted, None when the call does
    not show it); None when the call passes ``*args`` or ``**kwargs``."""
    if any(isinstance(a, nodes.Starred) for a in call.args) or any(k.arg is None for k in call.keywords or ()):
        return None
    if function.args.args is None:
        return None
    params = function.args.posonlyargs + function.args.args
    if isinstance(call.func, nodes.Attribute) and "staticmethod" not in decorator_names(function):
        params = params[1:]
    if len(call.args) > len(params):
        return None
    bound: dict[str, nodes.NodeNG | None] = {p.name: a for p, a in zip(params, call.args)}
    bound.update({k.arg: k.value for k in call.keywords or ()})
    positional_defaults = function.args.defaults
    for param, default in zip(params[len(params) - len(positional_defaults):], positional_defaults):
        bound.setdefault(param.name, default)
    for param, default in zip(function.args.kwonlyargs, function.args.kw_defaults):
        if default is not None:
            bound.setdefault(param.name, default)
    return bound


def returned(function: nodes.FunctionDef, call: nodes.Call | None, path: Path, context: Context) -> list[Alt]:
    """What a helper returns, with the call's arguments bound to its parameters."""
    if context.binding(function) is not None or function.is_generator() or context.hops >= MAX_HOPS:
        return [Alt(UNKNOWN_VALUE, path)]
    arguments = {} if call is None else bind_arguments(function, call)
    if arguments is None:
        return [Alt(UNKNOWN_VALUE, path)]
    bound = {name: (expr, context) for name, expr in arguments.items()}
    inner = replace(context, bindings=context.bindings + ((function, bound),), hops=context.hops + 1)
    alts: list[Alt] = []
    returns = [r for r in nodes_of(function, nodes.Return, skip=(nodes.FunctionDef, nodes.Lambda))
               if r.frame() is function]
    if not any(r.value is not None for r in returns) or len(returns) > MAX_PATHS:
        return [Alt(UNKNOWN_VALUE, path)]  # more returns than paths: a dispatch table, not a value to follow
    for statement in returns:
        reached = branch_path(statement, function, path)
        if reached is None:
            continue
        if statement.value is None:
            alts.append(Alt(constant(None), reached))
        else:
            alts.extend(values(statement.value, reached, inner))
    return alts


def branch_path(node: nodes.NodeNG, frame: nodes.NodeNG, path: Path) -> Path | None:
    """``path`` extended by what reaching ``node`` inside ``frame`` takes: the branches (``if`` statements and
    conditional expressions) around it, and the guards it gets past, before it or before a statement around
    it (``flow.past_guards``: after ``if causal: return mask, 2``, ``return None, 0`` is reached only when
    ``causal`` is false); None when ``path`` took the other way."""
    while node.parent is not None:
        if node.is_statement:
            path = past_guards(node, path)
            if path is None:
                return None
        parent = node.parent
        if parent is frame:
            break
        if isinstance(parent, (nodes.If, nodes.IfExp)) and node is not parent.test:
            key, polarity = condition(parent.test)
            in_body = any(s is node for s in parent.body) if isinstance(parent, nodes.If) else node is parent.body
            extended = path.choose(key, in_body == polarity)
            if extended is None:
                return None
            path = extended
        node = parent
    return path
