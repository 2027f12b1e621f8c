"""Syntactic name resolution: the dotted names an expression may stand for, from the code's own imports.

``tnpu.npu_fused_infer_attention_score`` after ``import torch_npu as tnpu`` is
``torch_npu.npu_fused_infer_attention_score``; so is ``fa`` after ``fa = torch_npu.npu_fused...`` and
``self.fa_op`` when the class sets it. A name bound several times stands for each of its bindings: the
assignments that reach the use (``kvlint.analysis.flow``), every module-level binding of a global (an
optional import sets it in ``try`` and ``except``), every value the class gives ``self.x``. Also followed:
``a if c else b``, ``getattr(ns, "name"[, default])`` and the returns of a same-module function or method
(``self._ops_for(prefill).npu_...``). ``None`` is an alternative of its own (``NONE``): calling it (or an
attribute of it) never reaches a successful call, so callers drop it.

Nothing is imported and astroid inference is not used, so the result does not depend on torch or torch_npu
being installed. Where one alternative is not a dotted name the code proves (a parameter, a call of
something else, a method of the project's own class), the expression resolves to nothing.
"""

from __future__ import annotations

import weakref

from astroid import nodes

from kvlint.analysis.flow import OUTER, UNKNOWN, Param, reaching_definitions
from kvlint.analysis.memo import tree_cache
from kvlint.analysis.walk import nodes_of

NONE = "None"
"""The alternative of an expression that is the constant None."""

_MAX_DEPTH = 12
_Names = frozenset[str] | None
_RESOLVED: weakref.WeakKeyDictionary[nodes.NodeNG, _Names] = weakref.WeakKeyDictionary()


def qualified_names(expr: nodes.NodeNG) -> frozenset[str] | None:
    """Every dotted name ``expr`` may stand for (``NONE`` for None), or None when the code does not prove
    each alternative."""
    if expr not in _RESOLVED:
        _RESOLVED[expr] = _names(expr, 0, frozenset())
    return _RESOLVED[expr]


def qualified_name(expr: nodes.NodeNG) -> str | None:
    """The one dotted name ``expr`` stands for on every alternative that is not None, or None."""
    found = qualified_names(expr)
    real = found - {NONE} if found is not None else frozenset()
    return next(iter(real)) if len(real) == 1 else None


def _names(expr: nodes.NodeNG | None, depth: int, active: frozenset[int]) -> _Names:
    if expr is None or depth > _MAX_DEPTH or id(expr) in active:
        return None
    active = active | {id(expr)}
    if isinstance(expr, nodes.Const) and expr.value is None:
        return frozenset({NONE})
    if isinstance(expr, nodes.Name):
        return _name_names(expr, depth, active)
    if isinstance(expr, nodes.Attribute):
        if is_self(expr.expr):
            return _union(self_attribute_value(expr), depth, active)
        base = _names(expr.expr, depth + 1, active)
        return None if base is None else frozenset(_member(b, expr.attrname) for b in base)
    if isinstance(expr, nodes.IfExp):
        return _union([expr.body, expr.orelse], depth, active)
    if isinstance(expr, nodes.Call):
        return _call_names(expr, depth, active)
    return None


def _member(base: str, attribute: str) -> str:
    return NONE if base == NONE else f"{base}.{attribute}"


def _union(exprs: list[nodes.NodeNG] | None, depth: int, active: frozenset[int]) -> _Names:
    if exprs is None:
        return None
    found: set[str] = set()
    for expr in exprs:
        names = _names(expr, depth + 1, active)
        if names is None:
            return None
        found |= names
    return frozenset(found)


_OUTER_LOOKUPS: dict[tuple[nodes.LocalsDictNodeNG, str], tuple[nodes.NodeNG, list[nodes.NodeNG]]] = tree_cache()
_DECLARED: dict[nodes.FunctionDef, frozenset[str]] = tree_cache()


def lookup(node: nodes.Name) -> tuple[nodes.NodeNG, list[nodes.NodeNG]]:
    """``node.lookup(node.name)``, asked once per function for the names its body reads and does not bind.

    astroid filters an enclosing scope's bindings by where the function is, not by where in its body the use
    is (the use's frame is not theirs, so there is no line filtering), and compares every binding with the
    use: a module of n unrolled layers binds ``torch`` n times, and each of its uses cost n comparisons. The
    answer is the same from anywhere in the body unless the name is declared ``global`` or ``nonlocal`` in the
    function or a function nested in it (their bindings then lie inside it), or the use is in the
    function's signature or decorators (looked up in the enclosing scope), or in a comprehension or lambda.
    """
    frame = node.frame()
    name = node.name
    if not (isinstance(frame, nodes.FunctionDef) and node.scope() is frame and name not in frame.locals
            and name != "__class__" and node.statement() is not frame):
        return node.lookup(name)
    if frame not in _DECLARED:
        _DECLARED[frame] = frozenset(
            declared for statement in nodes_of(frame, (nodes.Global, nodes.Nonlocal)) for declared in statement.names)
    if name in _DECLARED[frame]:
        return node.lookup(name)
    key = (frame.root() if _only_in_classes(frame) else frame, name)
    if key not in _OUTER_LOOKUPS:
        _OUTER_LOOKUPS[key] = node.lookup(name)
    return _OUTER_LOOKUPS[key]


def _only_in_classes(function: nodes.FunctionDef) -> bool:
    """The function is defined at the top of the module, or in classes that are: no ``if``, ``try`` or loop
    around it. Its outer names then come from the module scope (a class's names are not a method's), and
    astroid's filtering of the module's bindings depends on nothing of where the use is, so one lookup per
    module serves all such functions: a module of n unrolled layers must not compare its n ``import torch``
    with the uses of each of its n functions."""
    parent = function.parent
    while isinstance(parent, nodes.ClassDef):
        parent = parent.parent
    return isinstance(parent, nodes.Module)


def _name_names(node: nodes.Name, depth: int, active: frozenset[int]) -> _Names:
    """A name: the bindings that reach the use in its own frame (all of the frame's where the flow cannot
    say), every binding of the enclosing scope it comes from otherwise."""
    scope, bindings = lookup(node)
    if not bindings:
        return None
    defined = scope.locals.get(node.name, bindings)
    if scope is not node.frame() or len(defined) == 1:
        return _scope_bindings_names(scope, node.name, defined, depth, active)
    reaching: list[nodes.NodeNG] = []
    for definition, _ in reaching_definitions(node.name, node):
        if definition is UNKNOWN:
            return _bindings_names(scope.locals.get(node.name, bindings), node.name, depth, active)
        if isinstance(definition, Param):
            return None
        if definition is not OUTER:  # OUTER: unbound on that path, a NameError rather than a call
            reaching.append(definition)
    return _bindings_names(reaching, node.name, depth, active)


_SCOPE_BINDINGS: dict[tuple[nodes.LocalsDictNodeNG, str], tuple[_Names, list[nodes.NodeNG]]] = tree_cache()


def _scope_bindings_names(scope: nodes.LocalsDictNodeNG, name: str, defined: list[nodes.NodeNG], depth: int,
                          active: frozenset[int]) -> _Names:
    """What every binding of ``name`` in ``scope`` stands for, the bindings that need no further resolution
    (imports, ``name = None``, a ``def``) taken together once per scope and name.

    A module that concatenates n layers imports ``torch_npu`` n times (and sets it to None n times in their
    ``except ImportError``): without the shared part, each of its n uses would go through all n bindings.
    The answer is the same: a binding of the shared part gives the same names at every depth under the
    limit, so only the assignments of other values are resolved per use."""
    if depth >= _MAX_DEPTH:
        return _bindings_names(defined, name, depth, active)
    key = (scope, name)
    if key not in _SCOPE_BINDINGS:
        shared = [binding for binding in defined if not _resolved_further(binding)]
        others = [binding for binding in defined if _resolved_further(binding)]
        _SCOPE_BINDINGS[key] = (_bindings_names(shared, name, depth, active), others)
    shared_names, others = _SCOPE_BINDINGS[key]
    if shared_names is None or not others:
        return shared_names
    found = _bindings_names(others, name, depth, active)
    return None if found is None else shared_names | found


def _resolved_further(binding: nodes.NodeNG) -> bool:
    """The binding's names come from resolving another expression (an assigned value other than None)."""
    value = _assigned_value(binding)
    return value is not None and not (isinstance(value, nodes.Const) and value.value is None)


def _assigned_value(binding: nodes.NodeNG) -> nodes.NodeNG | None:
    """The value a name binding assigns (``name = value``, ``name: T = value``, ``(name := value)``)."""
    if not isinstance(binding, nodes.AssignName):
        return None
    statement = binding.parent
    if isinstance(statement, nodes.Assign) and any(target is binding for target in statement.targets):
        return statement.value
    if isinstance(statement, (nodes.AnnAssign, nodes.NamedExpr)):
        return statement.value
    return None


def _bindings_names(bindings: list[nodes.NodeNG], name: str, depth: int, active: frozenset[int]) -> _Names:
    found: set[str] = set()
    for binding in bindings:
        names = _binding_names(binding, name, depth, active)
        if names is None:
            return None
        found |= names
    return frozenset(found)


def _binding_names(binding: nodes.NodeNG, name: str, depth: int, active: frozenset[int]) -> _Names:
    if isinstance(binding, nodes.Import):
        for module, alias in binding.names:
            if alias == name:
                return frozenset({module})
            if alias is None and module.split(".")[0] == name:
                return frozenset({name})
        return None
    if isinstance(binding, nodes.ImportFrom):
        if binding.level:
            return None
        for imported, alias in binding.names:
            if imported == "*" or (alias or imported) == name:
                return frozenset({f"{binding.modname}.{name if imported == '*' else imported}"})
        return None
    value = _assigned_value(binding)
    return None if value is None else _names(value, depth + 1, active)


def _call_names(call: nodes.Call, depth: int, active: frozenset[int]) -> _Names:
    """``getattr(ns, "name"[, default])``, or what a same-module function or method returns."""
    func = call.func
    if isinstance(func, nodes.Name) and func.name == "getattr" and func.lookup("getattr")[0].name == "builtins":
        return _getattr_names(call, depth, active)
    function = called_function(call)
    if function is None or function.is_generator():
        return None
    returns = [r for r in nodes_of(function, nodes.Return, skip=(nodes.FunctionDef, nodes.Lambda))
               if r.frame() is function]
    found: set[str] = {NONE}
    for statement in returns:
        if statement.value is not None:
            names = _names(statement.value, depth + 1, active)
            if names is None:
                return None
            found |= names
    return frozenset(found)


def _getattr_names(call: nodes.Call, depth: int, active: frozenset[int]) -> _Names:
    args = call.args or []
    if call.keywords or len(args) not in (2, 3):
        return None
    attribute = args[1]
    if not (isinstance(attribute, nodes.Const) and isinstance(attribute.value, str)):
        return None
    base = _names(args[0], depth + 1, active)
    if base is None:
        return None
    found = {_member(b, attribute.value) for b in base}
    if len(args) == 3:
        default = _names(args[2], depth + 1, active)
        if default is None:
            return None
        found |= default
    return frozenset(found)


# Classes and methods ------------------------------------------------------------------------------------


def enclosing_class(node: nodes.NodeNG) -> nodes.ClassDef | None:
    """The class whose method contains ``node`` (directly, not in a nested function)."""
    function = node.frame()
    return _defining_class(function) if isinstance(function, nodes.FunctionDef) else None


def _defining_class(function: nodes.FunctionDef) -> nodes.ClassDef | None:
    """The class whose body defines ``function`` (a method), or None."""
    parent = function.parent.frame() if function.parent is not None else None
    return parent if isinstance(parent, nodes.ClassDef) else None


_SELF_NAMES: dict[nodes.FunctionDef, str | None] = tree_cache()


def is_self(expr: nodes.NodeNG) -> bool:
    """True for the first parameter of a method (``self``) used inside that method."""
    if not isinstance(expr, nodes.Name):
        return False
    function = expr.frame()
    if not isinstance(function, nodes.FunctionDef):
        return False
    if function not in _SELF_NAMES:
        _SELF_NAMES[function] = _self_name(function)
    return _SELF_NAMES[function] == expr.name


def _self_name(function: nodes.FunctionDef) -> str | None:
    """The name of the method's first parameter; None for a function that is not a method, or a static one."""
    if _defining_class(function) is None:
        return None
    if function.decorators and any(
        isinstance(d, nodes.Name) and d.name == "staticmethod" for d in function.decorators.nodes
    ):
        return None
    args = function.args.posonlyargs + function.args.args
    return args[0].name if args else None


def decorator_names(function: nodes.FunctionDef) -> set[str]:
    if not function.decorators:
        return set()
    return {d.as_string().rpartition(".")[2] for d in function.decorators.nodes}


def is_property(function: nodes.FunctionDef) -> bool:
    return bool({"property", "cached_property"} & decorator_names(function))


def called_function(call: nodes.Call) -> nodes.FunctionDef | None:
    """The same-module function a call reaches: a module function by name, or ``self.method(...)``."""
    func = call.func
    if isinstance(func, nodes.Name):
        if not _may_name_a_function(func):
            return None
        _, bindings = lookup(func)
        if len(bindings) == 1 and isinstance(bindings[0], nodes.FunctionDef) and bindings[0].root() is func.root():
            return bindings[0]
        return None
    if isinstance(func, nodes.Attribute) and is_self(func.expr):
        cls = enclosing_class(call)
        found = cls.locals.get(func.attrname, []) if cls is not None else []
        if len(found) == 1 and isinstance(found[0], nodes.FunctionDef) and not is_property(found[0]):
            return found[0]
    return None


_BINDS_A_FUNCTION: dict[tuple[nodes.LocalsDictNodeNG, str], bool] = tree_cache()


def _may_name_a_function(name: nodes.Name) -> bool:
    """Whether a scope of the module the name could be looked up in (its own, an enclosing one) binds it
    with a ``def``: if none does, the lookup cannot find one, and is not made. A name used in a class body
    is looked up in the module up to the class's line, and a module of n unrolled layers has n bindings of
    ``field`` to compare with each such use."""
    scope: nodes.LocalsDictNodeNG | None = name.scope()
    while scope is not None:
        key = (scope, name.name)
        if key not in _BINDS_A_FUNCTION:
            _BINDS_A_FUNCTION[key] = any(
                isinstance(binding, nodes.FunctionDef) for binding in scope.locals.get(name.name, ()))
        if _BINDS_A_FUNCTION[key]:
            return True
        scope = scope.parent.scope() if scope.parent is not None else None
    return False


_CLASS_VALUES: dict[tuple[nodes.ClassDef, str], list[nodes.NodeNG] | None] = tree_cache()


def self_attribute_value(expr: nodes.Attribute) -> list[nodes.NodeNG] | None:
    """The values the class gives ``self.<attr>``, for ``self.<attr>`` expressions: what its methods (and
    those of its same-module base classes) assign, a class-level assignment, or a property's returns.

    None when ``expr`` is not a ``self`` attribute, or when the attribute is a method of the class (a
    wrapper that happens to share an operator's name) or is set in a way the code does not show. The list
    is shared by every ``self.<attr>`` of the class: do not change it.
    """
    if not is_self(expr.expr):
        return None
    cls = enclosing_class(expr)
    if cls is None:
        return None
    if (cls, expr.attrname) not in _CLASS_VALUES:
        _CLASS_VALUES[(cls, expr.attrname)] = _class_values(cls, expr.attrname, frozenset())
    return _CLASS_VALUES[(cls, expr.attrname)]


def _class_values(cls: nodes.ClassDef, attribute: str, seen: frozenset[int]) -> list[nodes.NodeNG] | None:
    values: list[nodes.NodeNG] = []
    for defined in cls.locals.get(attribute, []):
        statement = defined.parent
        if isinstance(defined, nodes.FunctionDef) and is_property(defined):
            returns = nodes_of(defined, nodes.Return, skip=(nodes.FunctionDef, nodes.Lambda))
            values += [r.value for r in returns if r.frame() is defined and r.value is not None]
        elif isinstance(statement, nodes.AnnAssign) and statement.value is None:
            continue  # ``x: T`` declares the attribute without giving it a value
        elif isinstance(statement, (nodes.Assign, nodes.AnnAssign)) and isinstance(defined, nodes.AssignName):
            values.append(statement.value)
        else:
            return None
    assigned = self_assignments(cls).get(attribute, [])
    if any(value is None for value in assigned):
        return None
    values += assigned
    for base in _module_bases(cls):
        if id(base) not in seen:
            inherited = _class_values(base, attribute, seen | {id(cls)})
            if inherited is None:
                return None
            values += inherited
    return values or None


_MODULE_BASES: dict[nodes.ClassDef, list[nodes.ClassDef]] = tree_cache()


def _module_bases(cls: nodes.ClassDef) -> list[nodes.ClassDef]:
    """The base classes defined in the same module (by name)."""
    if cls not in _MODULE_BASES:
        found = []
        for base in cls.bases:
            if isinstance(base, nodes.Name):
                _, bindings = base.lookup(base.name)
                if len(bindings) == 1 and isinstance(bindings[0], nodes.ClassDef):
                    found.append(bindings[0])
        _MODULE_BASES[cls] = found
    return _MODULE_BASES[cls]


_SELF_ASSIGNMENTS: dict[nodes.ClassDef, dict[str, list[nodes.NodeNG | None]]] = tree_cache()


def self_assignments(cls: nodes.ClassDef) -> dict[str, list[nodes.NodeNG | None]]:
    """Attribute name -> the expressions the class's methods assign to ``self.<name>`` (None where the
    assignment is not a plain one, e.g. tuple unpacking or ``+=``) and ``register_buffer`` registers;
    computed once per class."""
    if cls in _SELF_ASSIGNMENTS:
        return _SELF_ASSIGNMENTS[cls]
    found: dict[str, list[nodes.NodeNG | None]] = {}
    for method in cls.mymethods():
        for target in nodes_of(method, nodes.AssignAttr):
            if not is_self(target.expr):
                continue
            statement = target.parent
            plain = isinstance(statement, (nodes.Assign, nodes.AnnAssign)) and statement.value is not None and (
                not isinstance(statement, nodes.Assign) or any(t is target for t in statement.targets)
            )
            found.setdefault(target.attrname, []).append(statement.value if plain else None)
        for call in nodes_of(method, nodes.Call):
            func = call.func
            if (isinstance(func, nodes.Attribute) and func.attrname == "register_buffer" and is_self(func.expr)
                    and call.args and isinstance(call.args[0], nodes.Const) and isinstance(call.args[0].value, str)):
                buffer = call.args[1] if len(call.args) > 1 else next(
                    (k.value for k in call.keywords or () if k.arg == "tensor"), None)
                found.setdefault(call.args[0].value, []).append(buffer)
    _SELF_ASSIGNMENTS[cls] = found
    return found
