"""Syntactic name resolution: the dotted name an expression stands for, from the code's own imports.

``tnpu.npu_fused_infer_attention_score`` after ``import torch_npu as tnpu`` is
``torch_npu.npu_fused_infer_attention_score``; so is ``fa`` after ``fa = torch_npu.npu_fused...`` and
``self.fa_op`` when ``__init__`` sets it. Nothing is imported and astroid inference is not used, so the
result does not depend on torch or torch_npu being installed. A name that is bound to different things,
or to something that is not an import or an alias (a parameter, a class, a function), resolves to None.
"""

from __future__ import annotations

import weakref

from astroid import nodes

_MAX_DEPTH = 12


def qualified_name(expr: nodes.NodeNG, _depth: int = 0) -> str | None:
    """The dotted name ``expr`` is an alias of, or None when the code does not prove one."""
    if _depth > _MAX_DEPTH:
        return None
    if isinstance(expr, nodes.Name):
        return _name_target(expr, expr.name, _depth)
    if isinstance(expr, nodes.Attribute):
        self_value = self_attribute_value(expr)
        if self_value is not None:
            return _single(qualified_name(value, _depth + 1) for value in self_value)
        base = qualified_name(expr.expr, _depth + 1)
        return None if base is None else f"{base}.{expr.attrname}"
    return None


def _single(names) -> str | None:
    found = set(names)
    if len(found) != 1:
        return None
    return found.pop()


def _name_target(node: nodes.NodeNG, name: str, depth: int) -> str | None:
    _, assignments = node.lookup(name)
    if not assignments:
        return None
    return _single(_binding_target(binding, name, depth) for binding in assignments)


def _binding_target(binding: nodes.NodeNG, name: str, depth: int) -> str | None:
    if isinstance(binding, nodes.Import):
        for module, alias in binding.names:
            if alias == name:
                return module
            if alias is None and module.split(".")[0] == name:
                return name
        return None
    if isinstance(binding, nodes.ImportFrom):
        if binding.level:
            return None
        for imported, alias in binding.names:
            if imported == "*" or (alias or imported) == name:
                return f"{binding.modname}.{name if imported == '*' else imported}"
        return None
    if isinstance(binding, nodes.AssignName):
        statement = binding.parent
        if isinstance(statement, nodes.Assign) and any(t is binding for t in statement.targets):
            return qualified_name(statement.value, depth + 1)
        if isinstance(statement, nodes.AnnAssign) and statement.value is not None:
            return qualified_name(statement.value, depth + 1)
    return None


def enclosing_class(node: nodes.NodeNG) -> nodes.ClassDef | None:
    """The class whose method contains ``node`` (directly, not in a nested function)."""
    function = node.frame()
    if not isinstance(function, nodes.FunctionDef):
        return None
    parent = function.parent.frame() if function.parent is not None else None
    return parent if isinstance(parent, nodes.ClassDef) else None


def is_self(expr: nodes.NodeNG) -> bool:
    """True for the first parameter of a method (``self``) used inside that method."""
    if not isinstance(expr, nodes.Name):
        return False
    function = expr.frame()
    if not isinstance(function, nodes.FunctionDef) or enclosing_class(expr) is None:
        return False
    if function.decorators and any(
        isinstance(d, nodes.Name) and d.name == "staticmethod" for d in function.decorators.nodes
    ):
        return False
    args = function.args.posonlyargs + function.args.args
    return bool(args) and args[0].name == expr.name


def self_attribute_value(expr: nodes.Attribute) -> list[nodes.NodeNG] | None:
    """The values assigned to ``self.<attr>`` anywhere in the class, for ``self.<attr>`` expressions.

    None when ``expr`` is not a ``self`` attribute or the class gives it no plain assignment (for
    example when it is a method of the class, as with a wrapper that happens to share an operator's name).
    """
    if not is_self(expr.expr):
        return None
    cls = enclosing_class(expr)
    if cls is None or expr.attrname in cls.locals:
        return None
    assigned = self_assignments(cls).get(expr.attrname)
    if not assigned or any(value is None for value in assigned):
        return None
    return assigned


_SELF_ASSIGNMENTS: weakref.WeakKeyDictionary[nodes.ClassDef, dict[str, list[nodes.NodeNG | None]]] = (
    weakref.WeakKeyDictionary()
)


def self_assignments(cls: nodes.ClassDef) -> dict[str, list[nodes.NodeNG | None]]:
    """Attribute name -> the expressions the class's methods assign to ``self.<name>`` (None where the
    assignment is not a plain one, e.g. tuple unpacking or ``+=``) and ``register_buffer`` registers;
    computed once per class."""
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
                buffer = call.args[1] if len(call.args) > 1 else next(
                    (k.value for k in call.keywords or () if k.arg == "tensor"), None)
                found.setdefault(call.args[0].value, []).append(buffer)
    _SELF_ASSIGNMENTS[cls] = found
    return found
