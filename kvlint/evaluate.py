"""Following a value to an operator argument: ``values(expr)`` gives every value ``expr`` may have, each with
the path on which it has it.

Followed: the reaching definitions of local names (``kvlint.flow``), conditional expressions, tuple
unpacking, ``self.x`` assigned in the class or registered with ``register_buffer``, ``@property`` methods,
module constants, the arguments same-module callers pass to a parameter, the return values of same-module
helpers (with the caller's arguments bound), factory calls (``torch.ones``/``zeros``/``full``/``arange``/
``tensor``..., with their default dtypes and literal shapes) and the tensor methods that change dtype, shape
or meaning (``.to``, ``.int()``, ``.bool()``, ``~``, ``logical_not``, ``reshape``, ``unsqueeze``, ``[None]``,
``tril``, ``masked_fill``...). Nothing is imported and astroid inference is not used. What the code does not
prove is UNKNOWN_VALUE; past ``MAX_ALTERNATIVES`` or ``MAX_DEPTH`` everything is.
"""

from __future__ import annotations

import math
import re
import weakref
from collections.abc import Iterator
from dataclasses import dataclass, replace

from astroid import nodes

from kvlint.facts import (
    ADDITIVE, CACHE, CAST_METHODS, DTYPES, EXPANDED, FLOAT_DTYPES, GROWN_CACHE, KV_REPEAT, NO_CONSTANT, TRIL,
    TYPED_TENSORS, UNKNOWN_VALUE, Alt, Dim, Value, constant, dtype_of, is_additive_scalar, is_number, scalar_dtype,
    tensor,
)
from kvlint.flow import EMPTY, OUTER, Param, Path, condition, mutated_name, reaching_definitions
from kvlint.names import enclosing_class, is_self, qualified_name

MAX_ALTERNATIVES = 16
MAX_DEPTH = 24
MAX_HOPS = 3
SIZE_DEPTH = 6
CACHE_NAME = re.compile(r"(^|_)(past|cache|cached|caches|kvcache)(_|$)", re.IGNORECASE)
"""Identifiers that name a KV cache: ``k_cache``, ``past_key_value``, ``layer_past``, ``cached_keys``."""

_FLOAT_CONSTANTS = {"math.inf": math.inf, "torch.inf": math.inf, "numpy.inf": math.inf, "math.nan": math.nan}
_FINFO = "torch.finfo()"
_FLOAT32_MIN = -3.4028234663852886e38
_PRESERVING_METHODS = frozenset({
    "contiguous", "clone", "detach", "cpu", "cuda", "npu", "pin_memory", "requires_grad_", "narrow",
    "index_select", "select", "to_dense", "share_memory_",
})
_REORDERING_METHODS = frozenset({"transpose", "permute", "t", "swapaxes", "movedim", "flip"})
_FACTORIES = frozenset({"torch.ones", "torch.zeros", "torch.empty", "torch.rand", "torch.randn"})
_LIKE_FACTORIES = frozenset({
    "torch.ones_like", "torch.zeros_like", "torch.empty_like", "torch.full_like", "torch.rand_like",
    "torch.randn_like",
})
_CONCATENATIONS = frozenset({"torch.cat", "torch.concat", "torch.concatenate", "torch.stack"})
_INVERTING_FUNCTIONS = frozenset({"torch.logical_not", "torch.bitwise_not"})


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
    inner = context.entering(expr)
    handler = _HANDLERS.get(type(expr))
    found = handler(expr, path, inner) if handler else [Alt(UNKNOWN_VALUE, path)]
    unique = list(dict.fromkeys(found))
    if len(unique) > MAX_ALTERNATIVES:
        return [Alt(UNKNOWN_VALUE, path)]
    return unique


def _map(alts: list[Alt], change) -> list[Alt]:
    return [Alt(change(alt.value), alt.path) for alt in alts]


def _single_int(expr: nodes.NodeNG, path: Path, context: Context) -> int | None:
    found = {alt.value.const for alt in values(expr, path, context)}
    if len(found) == 1:
        value = found.pop()
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


# Names ------------------------------------------------------------------------------------------------


def _name(node: nodes.Name, path: Path, context: Context) -> list[Alt]:
    named = _lookup(node.name, node, path, context)
    if CACHE_NAME.search(node.name):
        return _map(named, lambda v: v.with_traits({CACHE}))
    return named


def _lookup(name: str, use: nodes.NodeNG, path: Path, context: Context) -> list[Alt]:
    scope, _ = use.scope().lookup(name)
    if isinstance(scope, (nodes.Lambda, nodes.ComprehensionScope)):
        return [Alt(UNKNOWN_VALUE, path)]
    alts: list[Alt] = []
    for definition, reached in reaching_definitions(name, use, path):
        if isinstance(definition, Param):
            alts.extend(_dtype_checked(name, use, 0, _parameter(definition, reached, context)))
        elif definition is OUTER:
            alts.extend(_dtype_checked(name, use, 0, _outer(name, use, reached, context)))
        elif isinstance(definition, nodes.NodeNG):
            found = _definition(definition, reached, context)
            alts.extend(_dtype_checked(name, use, definition.lineno or 0, found))
        else:
            alts.append(Alt(UNKNOWN_VALUE, reached))
    return alts


def _dtype_checked(name: str, use: nodes.NodeNG, defined_at: int, alts: list[Alt]) -> list[Alt]:
    """What a branch on ``x.dtype == torch.<d>`` (or ``!=``) on the path says about ``x``, for a definition
    of ``x`` made before that branch: after ``if x.dtype != torch.int32: x = x.int()``, the path that
    skipped the cast has an int32 ``x``."""
    prefix = f"{name}.dtype == "
    frame = use.frame()
    checked = []
    for alt in alts:
        value: Value | None = alt.value
        for (key_frame, text), taken in alt.path.choices:
            dtype = DTYPES.get(text[len(prefix):]) if key_frame is frame and text.startswith(prefix) else None
            if dtype is None or value is None or not value.tensor or not _tested_after(frame, text, defined_at):
                continue
            if taken is True:
                value = value.retyped(dtype)
            elif value.dtype == dtype:
                value = None
        if value is not None:
            checked.append(Alt(value, alt.path))
    return checked


def _tested_after(frame: nodes.NodeNG, text: str, line: int) -> bool:
    """Every ``if`` of the frame on condition ``text`` comes after ``line``."""
    tests = [branch for branch in frame.nodes_of_class(nodes.If) if condition(branch.test)[0][1] == text]
    return bool(tests) and all(branch.lineno > line for branch in tests)


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
        before = _lookup(target.name, binding, path, context)
        return _combine(before, binding.op[:-1], binding.value, path, context)
    if mutated_name(binding) is not None:
        before = _lookup(mutated_name(binding), binding, path, context)
        return [alt for previous in before for alt in _changed_in_place(previous, binding, context)]
    if isinstance(binding, (nodes.Import, nodes.ImportFrom)):
        return [Alt(_imported(binding), path)]
    if isinstance(binding, nodes.FunctionDef):
        return [Alt(Value(function=binding), path)]
    return [Alt(UNKNOWN_VALUE, path)]


def _changed_in_place(previous: Alt, statement: nodes.NodeNG, context: Context) -> list[Alt]:
    """A tensor after an in-place change: its dtype and shape stay, what it means may not. Inverting or
    triangle methods are followed; filling with -inf makes it additive; anything else forgets the traits."""
    value = _as_tensor(previous.value).with_traits(drop={TRIL, ADDITIVE})
    if isinstance(statement, nodes.Expr):
        method = statement.value.func.attrname
        if method in ("logical_not_", "bitwise_not_"):
            return [Alt(_inverted(previous.value), previous.path)]
        if method in ("tril_", "triu_"):
            return [Alt(_triangle(previous.value, method == "tril_", statement.value), previous.path)]
        if method in ("masked_fill_", "fill_"):
            args = statement.value.args
            fill = args[-1] if args else None
            return [Alt(value.with_traits({ADDITIVE}) if is_additive_scalar(f.value) else value, f.path)
                    for f in values(fill, previous.path, context)]
        return [Alt(value, previous.path)]
    if isinstance(statement, nodes.Assign):
        return [Alt(value.with_traits({ADDITIVE}) if is_additive_scalar(f.value) else value, f.path)
                for f in values(statement.value, previous.path, context)]
    return [Alt(value, previous.path)]


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
    if isinstance(expr, (nodes.Tuple, nodes.List)):
        if any(isinstance(e, nodes.Starred) for e in expr.elts) or indices[0] >= len(expr.elts):
            return [Alt(UNKNOWN_VALUE, path)]
        return _unpacked(expr.elts[indices[0]], indices[1:], path, context)
    alts = values(expr, path, context)
    for index in indices:
        alts = [picked for alt in alts for picked in _item(alt, index)]
    return alts


def _item(alt: Alt, index: int) -> list[Alt]:
    """The alternatives of one element of a tuple value, followed on the tuple's path."""
    items = alt.value.items
    if items is None or not -len(items) <= index < len(items):
        return [Alt(UNKNOWN_VALUE, alt.path)]
    element, context = items[index]
    return values(element, alt.path, context)


def _parameter(param: Param, path: Path, context: Context) -> list[Alt]:
    """A parameter: the argument bound by the helper call being followed, else what same-module callers
    pass (or the default when they omit it), each caller a path of its own, so that the parameters of one
    function come from the same call. No caller in the module: unknown."""
    bound = context.binding(param.function)
    if bound is not None:
        expr, caller_context = bound.get(param.name, (None, ROOT))
        return values(expr, path, caller_context)
    if context.hops >= MAX_HOPS:
        return [Alt(UNKNOWN_VALUE, path)]
    alts: list[Alt] = []
    outer = replace(context, bindings=(), hops=context.hops + 1)
    for call in callers(param.function):
        through = path.choose((param.function, "<caller>"), call)
        if through is None:
            continue
        arguments = bind_arguments(param.function, call)
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
        _GLOBALS[module] = frozenset(n for g in module.nodes_of_class(nodes.Global) for n in g.names)
    return _GLOBALS[module]


# Same-module functions ----------------------------------------------------------------------------------


def called_function(call: nodes.Call) -> nodes.FunctionDef | None:
    """The same-module function a call reaches: a module function by name, or ``self.method(...)``."""
    func = call.func
    if isinstance(func, nodes.Name):
        _, bindings = func.lookup(func.name)
        if len(bindings) == 1 and isinstance(bindings[0], nodes.FunctionDef):
            return bindings[0]
        return None
    if isinstance(func, nodes.Attribute) and is_self(func.expr):
        cls = enclosing_class(call)
        found = cls.locals.get(func.attrname, []) if cls is not None else []
        if len(found) == 1 and isinstance(found[0], nodes.FunctionDef) and not _is_property(found[0]):
            return found[0]
    return None


_CALLERS: weakref.WeakKeyDictionary[nodes.Module, dict[nodes.FunctionDef, list[nodes.Call]]] = (
    weakref.WeakKeyDictionary()
)


def callers(function: nodes.FunctionDef) -> list[nodes.Call]:
    """The calls in the module that reach ``function``."""
    module = function.root()
    if module not in _CALLERS:
        index: dict[nodes.FunctionDef, list[nodes.Call]] = {}
        for call in module.nodes_of_class(nodes.Call):
            target = called_function(call)
            if target is not None:
                index.setdefault(target, []).append(call)
        _CALLERS[module] = index
    return _CALLERS[module].get(function, [])


def _decorator_names(function: nodes.FunctionDef) -> set[str]:
    if not function.decorators:
        return set()
    return {d.as_string().rpartition(".")[2] for d in function.decorators.nodes}


def _is_property(function: nodes.FunctionDef) -> bool:
    return bool({"property", "cached_property"} & _decorator_names(function))


def bind_arguments(function: nodes.FunctionDef, call: nodes.Call) -> dict[str, nodes.NodeNG | None] | None:
    """The expression each parameter receives at ``call`` (the default when omitted, None when the call does
    not show it); None when the call passes ``*args`` or ``**kwargs``."""
    if any(isinstance(a, nodes.Starred) for a in call.args) or any(k.arg is None for k in call.keywords or ()):
        return None
    if function.args.args is None:
        return None
    params = function.args.posonlyargs + function.args.args
    if isinstance(call.func, nodes.Attribute) and "staticmethod" not in _decorator_names(function):
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


def _returns(function: nodes.FunctionDef, call: nodes.Call | None, path: Path, context: Context) -> list[Alt]:
    """What a helper returns, with the call's arguments bound to its parameters."""
    if context.binding(function) is not None or function.is_generator() or context.hops >= MAX_HOPS:
        return [Alt(UNKNOWN_VALUE, path)]
    arguments = {} if call is None else bind_arguments(function, call)
    if arguments is None:
        return [Alt(UNKNOWN_VALUE, path)]
    bound = {name: (expr, context) for name, expr in arguments.items()}
    inner = replace(context, bindings=context.bindings + ((function, bound),), hops=context.hops + 1)
    alts: list[Alt] = []
    returns = [r for r in function.nodes_of_class(nodes.Return, skip_klass=(nodes.FunctionDef, nodes.Lambda))
               if r.frame() is function]
    if not any(r.value is not None for r in returns):
        return [Alt(UNKNOWN_VALUE, path)]
    for statement in returns:
        reached = _branch_path(statement, function, path)
        if reached is None:
            continue
        if statement.value is None:
            alts.append(Alt(constant(None), reached))
        else:
            alts.extend(values(statement.value, reached, inner))
    return alts


def _branch_path(statement: nodes.NodeNG, frame: nodes.NodeNG, path: Path) -> Path | None:
    """``path`` extended by the branches that lead to ``statement`` inside ``frame``."""
    node = statement
    while node.parent is not None and node.parent is not frame:
        parent = node.parent
        if isinstance(parent, nodes.If) and node is not parent.test:
            key, polarity = condition(parent.test)
            extended = path.choose(key, any(s is node for s in parent.body) == polarity)
            if extended is None:
                return None
            path = extended
        node = parent
    return path


# Attributes, subscripts, operators --------------------------------------------------------------------


def _attribute(node: nodes.Attribute, path: Path, context: Context) -> list[Alt]:
    cached = {CACHE} if CACHE_NAME.search(node.attrname) else set()
    if is_self(node.expr):
        return _map(_self_attribute(node, path, context), lambda v: v.with_traits(cached))
    qualname = qualified_name(node)
    if qualname is not None:
        if qualname in _FLOAT_CONSTANTS:
            return [Alt(constant(_FLOAT_CONSTANTS[qualname]), path)]
        return [Alt(Value(qualname=qualname), path)]
    receiver = values(node.expr, path, context)
    if node.attrname == "dtype":
        return _map(receiver, lambda v: Value(qualname=f"torch.{v.dtype}") if v.tensor and v.dtype else UNKNOWN_VALUE)
    if node.attrname == "min":
        return _map(receiver, lambda v: constant(_FLOAT32_MIN) if v.qualname == _FINFO else UNKNOWN_VALUE)
    if node.attrname in ("T", "mT"):
        return _map(receiver, lambda v: replace(v, shape=None).with_traits(drop={TRIL}) if v.tensor else UNKNOWN_VALUE)
    return [Alt(UNKNOWN_VALUE.with_traits(cached), path)]


def _self_attribute(node: nodes.Attribute, path: Path, context: Context) -> list[Alt]:
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
    constant or a property's returns. A None the class assigns is a placeholder: the value comes from
    another assignment, or from outside the class (unknown)."""
    cls = enclosing_class(node)
    if cls is None:
        return [Alt(UNKNOWN_VALUE, path)]
    defined = [d for d in cls.locals.get(node.attrname, []) if not _annotation_only(d)]
    assigned = _self_assignments(cls).get(node.attrname)
    if defined:
        if len(defined) == 1 and isinstance(defined[0], nodes.FunctionDef) and _is_property(defined[0]):
            return _returns(defined[0], None, path, context)
        if len(defined) == 1 and isinstance(defined[0], nodes.AssignName) and not assigned:
            return _definition(defined[0], path, context)
        return [Alt(UNKNOWN_VALUE, path)]
    if not assigned:
        return [Alt(UNKNOWN_VALUE, path)]
    alts = [alt for expr in assigned for alt in values(expr, path, replace(context, bindings=()))]
    not_none = [alt for alt in alts if not alt.value.is_none]
    return not_none or [Alt(UNKNOWN_VALUE, path)]


def _annotation_only(binding: nodes.NodeNG) -> bool:
    """``x: Tensor`` in a class body declares an attribute without giving it a value."""
    return isinstance(binding, nodes.AssignName) and isinstance(binding.parent, nodes.AnnAssign) and (
        binding.parent.value is None)


_SELF_ASSIGNMENTS: weakref.WeakKeyDictionary[nodes.ClassDef, dict[str, list[nodes.NodeNG | None]]] = (
    weakref.WeakKeyDictionary()
)


def _self_assignments(cls: nodes.ClassDef) -> dict[str, list[nodes.NodeNG | None]]:
    """Attribute name -> the expressions the class's methods assign to ``self.<name>`` (None where the
    assignment is not a plain one) and ``register_buffer`` registers."""
    if cls in _SELF_ASSIGNMENTS:
        return _SELF_ASSIGNMENTS[cls]
    found: dict[str, list[nodes.NodeNG | None]] = {}
    for method in cls.mymethods():
        for target in method.nodes_of_class(nodes.AssignAttr):
            if not is_self(target.expr):
                continue
            statement = target.parent
            plain = isinstance(statement, (nodes.Assign, nodes.AnnAssign)) and statement.value is not None and (
                not isinstance(statement, nodes.Assign) or any(t is target for t in statement.targets)
            )
            found.setdefault(target.attrname, []).append(statement.value if plain else None)
        for call in method.nodes_of_class(nodes.Call):
            func = call.func
            if (isinstance(func, nodes.Attribute) and func.attrname == "register_buffer" and is_self(func.expr)
                    and call.args and isinstance(call.args[0], nodes.Const) and isinstance(call.args[0].value, str)):
                buffer = call.args[1] if len(call.args) > 1 else _keyword(call, "tensor")
                found.setdefault(call.args[0].value, []).append(buffer)
    _SELF_ASSIGNMENTS[cls] = found
    return found


def _subscript(node: nodes.Subscript, path: Path, context: Context) -> list[Alt]:
    receiver = values(node.value, path, context)
    index = node.slice
    if isinstance(index, nodes.Const) and isinstance(index.value, int) and not isinstance(index.value, bool):
        picked = [p for alt in receiver if alt.value.items is not None for p in _item(alt, index.value)]
        if picked and all(alt.value.items is not None for alt in receiver):
            return picked
    return _map(receiver, lambda v: _indexed(v, index))


def _indexed(value: Value, index: nodes.NodeNG) -> Value:
    if not value.tensor:
        return UNKNOWN_VALUE.with_traits(value.traits & {CACHE})
    parts = index.elts if isinstance(index, nodes.Tuple) else [index]
    shape: tuple[Dim, ...] | None = None
    if value.shape is not None and all(_is_none(p) or _is_full_slice(p) for p in parts):
        dims, rest = [], list(value.shape)
        for part in parts:
            if _is_none(part):
                dims.append(1)
            elif rest:
                dims.append(rest.pop(0))
        shape = tuple(dims + rest)
    return replace(value, shape=shape, const=NO_CONSTANT)


def _is_none(node: nodes.NodeNG) -> bool:
    return isinstance(node, nodes.Const) and node.value is None


def _is_full_slice(node: nodes.NodeNG) -> bool:
    return isinstance(node, nodes.Slice) and node.lower is None and node.upper is None and node.step is None


def _unary(node: nodes.UnaryOp, path: Path, context: Context) -> list[Alt]:
    def apply(value: Value) -> Value:
        if node.op == "-" and is_number(value.const):
            return constant(-value.const)
        if node.op == "~" and value.tensor:
            return _inverted(value)
        if node.op == "-" and value.tensor:
            return replace(value, traits=frozenset())
        return UNKNOWN_VALUE

    return _map(values(node.operand, path, context), apply)


def _inverted(value: Value, dtype: str | None = None) -> Value:
    """The mask with True and False swapped: a tril mask becomes a correct one."""
    inverted = value.with_traits(drop={TRIL})
    return inverted.retyped(dtype) if dtype else inverted


def _binop(node: nodes.BinOp, path: Path, context: Context) -> list[Alt]:
    return _combine(values(node.left, path, context), node.op, node.right, path, context)


def _combine(lefts: list[Alt], op: str, right_expr: nodes.NodeNG, path: Path, context: Context) -> list[Alt]:
    alts: list[Alt] = []
    for left in lefts:
        for right in values(right_expr, left.path, context):
            alts.append(Alt(_arithmetic(left.value, op, right.value), right.path))
    return alts


def _arithmetic(left: Value, op: str, right: Value) -> Value:
    if is_number(left.const) and is_number(right.const):
        try:
            return constant(_fold(left.const, op, right.const))
        except (ArithmeticError, ValueError, TypeError):
            return UNKNOWN_VALUE
    if op == "-" and left.const == 1 and right.tensor:
        return _inverted(right)
    additive = is_additive_scalar(left) or is_additive_scalar(right) or left.has(ADDITIVE) or right.has(ADDITIVE)
    tensors = [v for v in (left, right) if v.tensor]
    if not tensors:
        return tensor(None, traits=frozenset({ADDITIVE})) if additive and op == "*" else UNKNOWN_VALUE
    scalars = [v.const for v in (left, right) if not v.tensor]
    dtype = _promoted([t.dtype for t in tensors], scalars)
    traits = frozenset({ADDITIVE}) if additive and op in "*+-" else frozenset()
    return tensor(dtype, tensors[0].shape if len(tensors) == 1 else None, traits, tensors[0].origin)


def _fold(left: object, op: str, right: object) -> object:
    operations = {
        "+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b, "/": lambda a, b: a / b,
        "//": lambda a, b: a // b, "%": lambda a, b: a % b, "**": lambda a, b: a ** b,
    }
    if op not in operations:
        raise ValueError(op)
    if op == "**" and abs(right) > 64:
        raise ValueError("too large")
    return operations[op](left, right)


def _promoted(dtypes: list[str | None], scalars: list[object]) -> str | None:
    """The dtype of arithmetic between tensors and Python scalars (torch's promotion, simplified)."""
    if any(d is None for d in dtypes) or any(s is NO_CONSTANT for s in scalars):
        return None
    if len(set(dtypes)) != 1:
        return None
    dtype = dtypes[0]
    if dtype in FLOAT_DTYPES:
        return dtype
    if any(isinstance(s, float) for s in scalars):
        return "float32"
    if dtype == "bool" and any(isinstance(s, int) and not isinstance(s, bool) for s in scalars):
        return "int64"
    return dtype


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
            return _inverted(value, "bool")
        if (op == "!=" and right_value == 0) or (op == ">" and right_value == 0) or (op == "==" and right_value == 1):
            return value.retyped("bool")
        return _inverted(value, "bool").with_traits(drop={TRIL})

    return _map(values(node.left, path, context), apply)


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


def _const(node: nodes.Const, path: Path, context: Context) -> list[Alt]:
    return [Alt(constant(node.value), path)]


def _named_expression(node: nodes.NamedExpr, path: Path, context: Context) -> list[Alt]:
    return values(node.value, path, context)


# Calls ------------------------------------------------------------------------------------------------


def _keyword(call: nodes.Call, name: str) -> nodes.NodeNG | None:
    for keyword in call.keywords or ():
        if keyword.arg == name:
            return keyword.value
    return None


def _call(call: nodes.Call, path: Path, context: Context) -> list[Alt]:
    qualname = qualified_name(call.func)
    if qualname is not None and (qualname.startswith("torch.") or qualname in TYPED_TENSORS):
        return _torch_function(qualname, call, path, context)
    if isinstance(call.func, nodes.Name) and call.func.name == "float" and len(call.args) == 1:
        text = call.args[0].value if isinstance(call.args[0], nodes.Const) else None
        if isinstance(text, str) and text.strip().lower() in ("inf", "-inf", "+inf", "infinity", "-infinity"):
            return [Alt(constant(float(text)), path)]
        return [Alt(UNKNOWN_VALUE, path)]
    function = called_function(call)
    if function is not None:
        return _returns(function, call, path, context)
    if isinstance(call.func, nodes.Attribute):
        return [alt for receiver in values(call.func.expr, path, context)
                for alt in _method(receiver, call.func.attrname, call, context)]
    return [Alt(UNKNOWN_VALUE, path)]


def _dtype_choices(expr: nodes.NodeNG | None, default: str | None, path: Path,
                   context: Context) -> list[tuple[str | None, Path]]:
    """The dtype a ``dtype=`` argument selects on each path (``default`` when it is not given)."""
    if expr is None:
        return [(default, path)]
    return [(dtype_of(alt.value), alt.path) for alt in values(expr, path, context)]


def _size(call: nodes.Call, path: Path, context: Context, first_only: bool = False) -> tuple[Dim, ...] | None:
    """The shape of a factory call's size arguments: ``(2048, 2048)``, ``2048, 2048`` or ``size=(...)``."""
    args = call.args[:1] if first_only else call.args
    size = _keyword(call, "size")
    if size is not None:
        args = [size]
    if len(args) == 1 and isinstance(args[0], (nodes.Tuple, nodes.List)):
        args = args[0].elts
    if not args or any(isinstance(a, nodes.Starred) for a in args):
        return None
    if len(args) == 1 and not isinstance(args[0], nodes.Const):
        single = values(args[0], path, context)
        if not all(isinstance(a.value.const, int) for a in single):
            return None
    return tuple(_dimension(arg, path, context) for arg in args)


def _dimension(expr: nodes.NodeNG, path: Path, context: Context) -> Dim:
    """A literal size, or the source text of a size the code computes at run time. Sizes are followed
    only a few steps, and not into callers or helpers."""
    shallow = replace(context, depth=max(context.depth, MAX_DEPTH - SIZE_DEPTH), hops=MAX_HOPS)
    found = [alt.value for alt in values(expr, path, shallow)]
    consts = {v.const for v in found}
    if len(consts) == 1 and isinstance(next(iter(consts)), int) and not isinstance(next(iter(consts)), bool):
        return next(iter(consts))
    if all(v.const is NO_CONSTANT and v.items is None and v.qualname is None for v in found):
        return _source_text(expr, context)
    return None


def _source_text(expr: nodes.NodeNG, context: Context) -> str:
    """How the code spells a size: a helper's parameter is spelled as its caller's argument."""
    if isinstance(expr, nodes.Name):
        definitions = reaching_definitions(expr.name, expr)
        if len(definitions) == 1 and isinstance(definitions[0][0], Param):
            param = definitions[0][0]
            argument, caller = (context.binding(param.function) or {}).get(param.name, (None, context))
            if argument is not None:
                return _source_text(argument, caller)
    return expr.as_string()


def _torch_function(qualname: str, call: nodes.Call, path: Path, context: Context) -> list[Alt]:
    dtype_arg = _keyword(call, "dtype")
    first = call.args[0] if call.args else _keyword(call, "input")
    if qualname in _FACTORIES:
        shape = _size(call, path, context)
        return [Alt(tensor(d, shape, origin=call), p) for d, p in _dtype_choices(dtype_arg, "float32", path, context)]
    if qualname == "torch.full":
        fill_expr = call.args[1] if len(call.args) > 1 else _keyword(call, "fill_value")
        shape = _size(call, path, context, first_only=True)
        alts = []
        for fill in values(fill_expr, path, context):
            traits = frozenset({ADDITIVE}) if is_additive_scalar(fill.value) else frozenset()
            for dtype, reached in _dtype_choices(dtype_arg, scalar_dtype(fill.value.const), fill.path, context):
                alts.append(Alt(tensor(dtype, shape, traits, call), reached))
        return alts
    if qualname in _LIKE_FACTORIES:
        fill_expr = call.args[1] if len(call.args) > 1 else _keyword(call, "fill_value")
        alts = []
        for source in values(first, path, context):
            additive = qualname == "torch.full_like" and any(
                is_additive_scalar(f.value) for f in values(fill_expr, source.path, context))
            traits = frozenset({ADDITIVE}) if additive else frozenset()
            for dtype, reached in _dtype_choices(dtype_arg, source.value.dtype, source.path, context):
                alts.append(Alt(tensor(dtype, source.value.shape, traits, call), reached))
        return alts
    if qualname in ("torch.arange", "torch.randint"):
        numbers = [alt.value.const for arg in call.args for alt in values(arg, path, context)]
        default = "float32" if any(isinstance(n, float) for n in numbers) else "int64"
        return [Alt(tensor(d, (None,), origin=call), p) for d, p in _dtype_choices(dtype_arg, default, path, context)]
    if qualname in ("torch.tensor", "torch.as_tensor"):
        default = _data_dtype(first, path, context)
        return [Alt(tensor(d, origin=call), p) for d, p in _dtype_choices(dtype_arg, default, path, context)]
    if qualname in TYPED_TENSORS:
        return [Alt(tensor(TYPED_TENSORS[qualname], origin=call), path)]
    if qualname == "torch.searchsorted":
        out_int32 = _keyword(call, "out_int32")
        if out_int32 is None or (isinstance(out_int32, nodes.Const) and out_int32.value is False):
            return [Alt(tensor("int64", origin=call), path)]
        return [Alt(UNKNOWN_VALUE, path)]
    if qualname in ("torch.tril", "torch.triu"):
        return _map(values(first, path, context), lambda v: _triangle(v, qualname == "torch.tril", call))
    if qualname in _INVERTING_FUNCTIONS:
        dtype = "bool" if qualname == "torch.logical_not" else None
        return _map(values(first, path, context), lambda v: _inverted(v, dtype) if v.tensor else tensor(dtype))
    if qualname in _CONCATENATIONS:
        return _concatenation(first, path, context, grows=qualname != "torch.stack")
    if qualname == "torch.repeat_interleave":
        return _map(values(first, path, context), lambda v: _as_tensor(v).with_traits({KV_REPEAT}))
    if qualname == "torch.masked_fill":
        fill_expr = call.args[2] if len(call.args) > 2 else _keyword(call, "value")
        return _masked_fill(values(first, path, context), fill_expr, context)
    if qualname == "torch.where" and len(call.args) == 3:
        return _where(call, path, context)
    if qualname in ("torch.finfo", "torch.iinfo"):
        return [Alt(Value(qualname=_FINFO if qualname == "torch.finfo" else None), path)]
    return [Alt(UNKNOWN_VALUE, path)]


def _where(call: nodes.Call, path: Path, context: Context) -> list[Alt]:
    """``torch.where(cond, 0.0, float("-inf"))``: an additive mask when either branch is -inf."""
    alts = []
    for left in values(call.args[1], path, context):
        for right in values(call.args[2], left.path, context):
            branches = (left.value, right.value)
            if any(is_additive_scalar(v) or v.has(ADDITIVE) for v in branches):
                scalars = all(isinstance(v.const, float) for v in branches)
                alts.append(Alt(tensor("float32" if scalars else None, None, frozenset({ADDITIVE}), call), right.path))
            else:
                alts.append(Alt(UNKNOWN_VALUE, right.path))
    return alts


def _as_tensor(value: Value) -> Value:
    return value if value.tensor else tensor(None, traits=value.traits & {CACHE})


def _triangle(value: Value, lower: bool, call: nodes.Call) -> Value:
    base = _as_tensor(value)
    triangle = base.with_traits({TRIL}) if lower else base.with_traits(drop={TRIL})
    return replace(triangle, origin=call)


def _data_dtype(data: nodes.NodeNG | None, path: Path, context: Context) -> str | None:
    """The dtype ``torch.tensor(data)`` infers from literal data: int64 for ints, float32 if any float."""
    if isinstance(data, nodes.Call) and isinstance(data.func, nodes.Name) and data.func.name in ("range", "list"):
        inner = data.args[0] if data.args else None
        if data.func.name == "range" or (isinstance(inner, nodes.Call) and isinstance(inner.func, nodes.Name)
                                         and inner.func.name == "range"):
            return "int64"
        return None
    scalars = list(_literal_scalars(data))
    if not scalars or any(s is NO_CONSTANT for s in scalars):
        return None
    kinds = {scalar_dtype(s) for s in scalars}
    if None in kinds:
        return None
    for dtype in ("float32", "int64", "bool"):
        if dtype in kinds:
            return dtype
    return None


def _literal_scalars(data: nodes.NodeNG | None) -> Iterator[object]:
    if isinstance(data, (nodes.List, nodes.Tuple)):
        for element in data.elts:
            yield from _literal_scalars(element)
    elif isinstance(data, nodes.Const):
        yield data.value
    elif isinstance(data, nodes.UnaryOp) and data.op == "-" and isinstance(data.operand, nodes.Const):
        yield data.operand.value
    else:
        yield NO_CONSTANT


def _concatenation(sequence: nodes.NodeNG | None, path: Path, context: Context, grows: bool) -> list[Alt]:
    """``torch.cat`` / ``stack``: the common dtype of the parts; ``cat`` of a cache and more grows it."""
    if not isinstance(sequence, (nodes.List, nodes.Tuple)) or not sequence.elts:
        return [Alt(UNKNOWN_VALUE, path)]
    parts = [values(e, path, context) for e in sequence.elts]
    cached = any(alt.value.has(CACHE) for part in parts for alt in part)
    dtypes = {alt.value.dtype if alt.value.tensor else None for part in parts for alt in part}
    dtype = dtypes.pop() if len(dtypes) == 1 else None
    traits = frozenset({CACHE, GROWN_CACHE}) if cached and grows and len(parts) > 1 else frozenset()
    return [Alt(tensor(dtype, traits=traits, origin=sequence.parent), path)]


def _masked_fill(receivers: list[Alt], fill_expr: nodes.NodeNG | None, context: Context) -> list[Alt]:
    alts = []
    for receiver in receivers:
        for fill in values(fill_expr, receiver.path, context):
            filled = _as_tensor(receiver.value).with_traits(drop={TRIL})
            if is_additive_scalar(fill.value):
                filled = filled.with_traits({ADDITIVE})
            alts.append(Alt(filled, fill.path))
    return alts


def _method(receiver: Alt, method: str, call: nodes.Call, context: Context) -> list[Alt]:
    """A tensor method applied to one alternative of its receiver."""
    value, path = _as_tensor(receiver.value), receiver.path
    args = call.args
    if method in CAST_METHODS and not args:
        return [Alt(value.retyped(CAST_METHODS[method]), path)]
    if method == "to":
        return _converted(value, call, path, context)
    if method == "type":
        if not args and not call.keywords:
            return [Alt(UNKNOWN_VALUE, path)]
        target = args[0] if args else _keyword(call, "dtype")
        return [Alt(value.retyped(dtype_of(alt.value) or TYPED_TENSORS.get(alt.value.qualname or "")), alt.path)
                for alt in values(target, path, context)]
    if method == "view" and len(args) == 1:
        as_dtype = [dtype_of(alt.value) for alt in values(args[0], path, context)]
        if any(as_dtype):
            return [Alt(value.retyped(d), path) for d in set(as_dtype)]
    if method in ("view", "reshape", "flatten", "view_as", "reshape_as"):
        traits = {KV_REPEAT} if value.has(EXPANDED) else set()
        shape = _reshaped(call, path, context) if method in ("view", "reshape") else None
        return [Alt(value.reshaped(shape).with_traits(traits, {EXPANDED}), path)]
    if method == "unsqueeze":
        return [Alt(value.reshaped(_unsqueezed(value.shape, call, path, context)), path)]
    if method in ("expand", "expand_as"):
        return [Alt(value.reshaped(None).with_traits({EXPANDED}), path)]
    if method == "repeat_interleave":
        return [Alt(value.reshaped(None).with_traits({KV_REPEAT}), path)]
    if method in _PRESERVING_METHODS:
        return [Alt(value, path)]
    if method in _REORDERING_METHODS:
        return [Alt(value.reshaped(None).with_traits(drop={TRIL}), path)]
    if method in ("logical_not", "bitwise_not"):
        return [Alt(_inverted(value, "bool" if method == "logical_not" else None), path)]
    if method in ("tril", "triu"):
        return [Alt(_triangle(value, method == "tril", call), path)]
    if method == "eq" and len(args) == 1 and isinstance(args[0], nodes.Const) and args[0].value == 0:
        return [Alt(_inverted(value, "bool"), path)]
    if method in ("masked_fill", "masked_fill_"):
        fill_expr = args[1] if len(args) > 1 else _keyword(call, "value")
        return _masked_fill([Alt(value, path)], fill_expr, context)
    if method in ("new_ones", "new_zeros", "new_empty", "new_full"):
        return [Alt(tensor(d, origin=call), p)
                for d, p in _dtype_choices(_keyword(call, "dtype"), value.dtype, path, context)]
    return [Alt(UNKNOWN_VALUE, path)]


def _converted(value: Value, call: nodes.Call, path: Path, context: Context) -> list[Alt]:
    """``.to(...)``: a dtype argument converts; a device keeps the dtype; anything else is unknown."""
    candidates = list(call.args) + [k.value for k in call.keywords or () if k.arg in ("dtype", "device", "other")]
    alts = [Alt(value, path)]
    for arg in candidates:
        extended = []
        for current in alts:
            for alt in values(arg, current.path, context):
                dtype = dtype_of(alt.value)
                if dtype is not None:
                    extended.append(Alt(current.value.retyped(dtype), alt.path))
                elif _is_device(arg, alt.value):
                    extended.append(Alt(current.value, alt.path))
                else:
                    extended.append(Alt(current.value.retyped(None), alt.path))
        alts = extended
    return alts


def _is_device(expr: nodes.NodeNG, value: Value) -> bool:
    if isinstance(value.const, (str, int)) and not isinstance(value.const, bool):
        return True
    if isinstance(expr, nodes.Attribute) and expr.attrname == "device":
        return True
    if isinstance(expr, nodes.Call) and qualified_name(expr.func) == "torch.device":
        return True
    return isinstance(expr, nodes.Name) and expr.name in ("device", "dev")


def _reshaped(call: nodes.Call, path: Path, context: Context) -> tuple[Dim, ...] | None:
    args = call.args
    if len(args) == 1 and isinstance(args[0], (nodes.Tuple, nodes.List)):
        args = args[0].elts
    if not args or any(isinstance(a, nodes.Starred) for a in args):
        return None
    dims = tuple(_dimension(a, path, context) for a in args)
    return tuple(None if d == -1 else d for d in dims)


def _unsqueezed(shape: tuple[Dim, ...] | None, call: nodes.Call, path: Path,
                context: Context) -> tuple[Dim, ...] | None:
    if shape is None or len(call.args) != 1:
        return None
    dim = _single_int(call.args[0], path, context)
    if dim is None or not -len(shape) - 1 <= dim <= len(shape):
        return None
    position = dim if dim >= 0 else len(shape) + 1 + dim
    return shape[:position] + (1,) + shape[position:]


_HANDLERS = {
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
