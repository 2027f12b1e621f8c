"""Operator call sites: which operator a call reaches and which arguments it passes.

A call is operator O when every alternative its callee may stand for (``kvlint.analysis.names``) that is
not None resolves to O: ``torch_npu.<op>``, ``torch.ops.npu.<op>`` or ``torch.ops.atb.<op>`` (also an overload,
``.default`` / ``.out``), torchair's ``torchair.ops.<op>``, where the namespace has that operator
(``kvlint.catalogue.operators.NAMESPACES``), or one of the user's configured wrappers. An optional import
(``X = None`` and ``X = torch_npu.<op>``) and a namespace switch (``self.ops = torch.ops.npu`` or ``tng.ops``)
are therefore calls of the operator. Keywords passed as ``**d`` count when ``d`` is statically known in the
same function: a dict literal or ``dict(...)`` call, plus keys added by ``d["k"] = v`` / ``d.update(k=v)``
before the call.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from astroid import nodes
from astroid.const import Context

from kvlint.analysis.evaluate import values
from kvlint.analysis.facts import UNKNOWN_VALUE, Alt, constant
from kvlint.analysis.flow import EMPTY, Path
from kvlint.analysis.names import NONE, is_self, qualified_names
from kvlint.analysis.memo import tree_cache
from kvlint.analysis.walk import nodes_named, nodes_of
from kvlint.catalogue.operators import ARGUMENTS_OF, NAMESPACES, OPERATORS, Operator, lookup

ALIAS_NAMESPACES = ("torch", "torch_npu.npu")
"""Prefixes under which an operator name exists but must not be called (KVL112)."""
_LAST_NAMES = frozenset(OPERATORS) | {op.overload for op in OPERATORS.values()} | {"default", "out"}
"""What the last attribute of an operator callee can be: an operator's name or an overload's."""


@dataclass(frozen=True)
class Argument:
    """One argument as passed: its value, and the node a finding about it points at."""

    value: nodes.NodeNG
    anchor: nodes.NodeNG


@dataclass
class CallSite:
    call: nodes.Call
    operator: Operator
    qualname: str
    positional: list[nodes.NodeNG] = field(default_factory=list)
    keywords: dict[str, Argument] = field(default_factory=dict)
    open_ended: bool = False
    """True when ``*args`` / ``**kwargs`` pass arguments the code does not show: absence proves nothing."""
    _followed: dict[tuple[str, Path], list[Alt]] = field(default_factory=dict, repr=False, compare=False)

    @property
    def name(self) -> str:
        return self.operator.name

    @property
    def role(self) -> str:
        """The operator whose argument rules apply: the name, or the operator whose arguments it takes
        (``ARGUMENTS_OF``: FIA's workspace helpers are judged as FIA)."""
        return ARGUMENTS_OF.get(self.operator.name, self.operator.name)

    def argument(self, name: str) -> nodes.NodeNG | None:
        """The expression bound to parameter ``name``, by keyword or by position."""
        if name in self.keywords:
            return self.keywords[name].value
        for param, value in zip(self.operator.positional, self.positional):
            if param.name == name:
                return value
        return None

    def absent(self, name: str) -> bool:
        """True when the call provably does not pass ``name``."""
        return not self.open_ended and self.argument(name) is None

    def anchor(self, name: str) -> nodes.NodeNG:
        """The node a finding about parameter ``name`` points at (the call when it is not passed)."""
        if name in self.keywords:
            return self.keywords[name].anchor
        return self.argument(name) or self.call

    def values(self, name: str, path: Path = EMPTY) -> list[Alt]:
        """The values that reach parameter ``name`` on each path: the argument's, or the schema default when
        the call provably omits it."""
        if (name, path) not in self._followed:
            self._followed[name, path] = self._follow(name, path)
        return self._followed[name, path]

    def _follow(self, name: str, path: Path) -> list[Alt]:
        expr = self.argument(name)
        if expr is not None:
            return values(expr, path)
        param = self.operator.param(name)
        if self.open_ended or param is None or param.required:
            return [Alt(UNKNOWN_VALUE, path)]
        return [Alt(constant(param.default), path)]


def operator_for(qualname: str, wrappers: dict[str, str] | None = None) -> tuple[Operator, bool] | None:
    """The operator a dotted callee name reaches, and whether it is a forbidden alias (KVL112)."""
    if wrappers and qualname in wrappers:
        op = OPERATORS.get(wrappers[qualname])
        return (op, False) if op is not None else None
    prefix, _, last = qualname.rpartition(".")
    op = OPERATORS.get(last)
    if op is None:
        outer, _, name = prefix.rpartition(".")
        op, prefix = lookup(name, last), outer
    if op is None:
        return None
    if op.name in NAMESPACES.get(prefix, ()):
        return op, False
    if prefix in ALIAS_NAMESPACES and (prefix != "torch" or op.namespace == "npu"):
        return op, True  # torch.<op> exists (and raises) for the npu namespace only
    return None


def keyword_dict(expr: nodes.NodeNG, call: nodes.Call) -> dict[str, Argument] | None:
    """The keywords a ``**expr`` argument passes, or None when the code does not prove them."""
    if isinstance(expr, nodes.Dict):
        return _dict_literal(expr)
    if isinstance(expr, nodes.Call):
        return _dict_call(expr)
    if not isinstance(expr, nodes.Name):
        return None
    scope, bindings = expr.lookup(expr.name)
    definitions = scope.locals.get(expr.name, ())
    if len(bindings) != 1 or len(definitions) != 1 or scope is not call.frame():
        return None
    statement = bindings[0].parent
    if not (isinstance(statement, nodes.Assign) and len(statement.targets) == 1):
        return None
    keywords = keyword_dict(statement.value, call) if isinstance(
        statement.value, (nodes.Dict, nodes.Call)
    ) else None
    if keywords is None:
        return None
    for use in nodes_named(scope, nodes.Name, expr.name):
        if use is expr or not (statement.lineno < use.lineno <= call.lineno):
            continue
        added = _keys_added(use)
        if added is None:
            return None
        keywords.update(added)
    return keywords


def _dict_literal(expr: nodes.Dict) -> dict[str, Argument] | None:
    keywords: dict[str, Argument] = {}
    for key, value in expr.items:
        if not (isinstance(key, nodes.Const) and isinstance(key.value, str)):
            return None
        keywords[key.value] = Argument(value, key)
    return keywords


def _dict_call(expr: nodes.Call) -> dict[str, Argument] | None:
    if not (isinstance(expr.func, nodes.Name) and expr.func.name == "dict" and not expr.args):
        return None
    if any(k.arg is None for k in expr.keywords or ()):
        return None
    return {k.arg: Argument(k.value, k) for k in expr.keywords or ()}


def _keys_added(use: nodes.Name) -> dict[str, Argument] | None:
    """Keys a later use of the dict adds: ``d["k"] = v`` or ``d.update(k=v)``.

    Reads (``d["k"]``, another ``f(**d)``) add nothing; any other use (passed to a function,
    ``d[var] = v``, ``d.pop(...)``) may change the dict in ways the code does not show: None.
    """
    parent = use.parent
    if isinstance(parent, nodes.Subscript) and parent.value is use:
        if parent.ctx == Context.Load:
            return {}
        statement = parent.parent
        key = parent.slice
        if isinstance(statement, nodes.Assign) and isinstance(key, nodes.Const) and isinstance(key.value, str):
            return {key.value: Argument(statement.value, key)}
        return None
    if isinstance(parent, nodes.Attribute) and parent.attrname == "update":
        update = parent.parent
        if isinstance(update, nodes.Call) and not update.args and all(k.arg for k in update.keywords or ()):
            return {k.arg: Argument(k.value, k) for k in update.keywords or ()}
        return None
    if isinstance(parent, nodes.Keyword) and parent.arg is None:
        return {}
    return None


_CALLABLE_NAMES: dict[tuple[nodes.Module, frozenset[str]], frozenset[str] | None] = tree_cache()


def _may_name_an_operator(name: nodes.Name, wrappers: dict[str, str] | None) -> bool:
    """Whether a bare callee may stand for an operator: the module assigns it somewhere, or imports it as a
    dotted name ending in an operator's (or overload's, or a wrapper's) name, or star-imports anything. A bare
    name stands for a dotted name only through an import or an assignment (``kvlint.analysis.names``):
    ``len``, ``defaultdict``, ``nn.Parameter`` imported by name and the module's own functions and classes,
    most of a file's bare callees, never reach an operator."""
    key = (name.root(), frozenset(w.rpartition(".")[2] for w in wrappers or ()))
    if key not in _CALLABLE_NAMES:
        _CALLABLE_NAMES[key] = _callable_names(key[0], _LAST_NAMES | key[1])
    names = _CALLABLE_NAMES[key]
    return names is None or name.name in names


def _callable_names(module: nodes.NodeNG, last_names: frozenset[str]) -> frozenset[str] | None:
    """The names the module assigns, and those it imports from a dotted name whose last part is in
    ``last_names``; None after ``from x import *``."""
    found: set[str] = set()
    for node in nodes_of(module, (nodes.Import, nodes.ImportFrom, nodes.AssignName)):
        if isinstance(node, nodes.AssignName):
            found.add(node.name)
            continue
        for imported, alias in node.names:
            if imported == "*":
                return None
            if isinstance(node, nodes.Import) and alias is None:
                imported = imported.split(".")[0]  # ``import a.b`` binds ``a``, which stands for ``a``
            if imported.rpartition(".")[2] in last_names:
                found.add(alias or imported)
    return frozenset(found)


def call_site(call: nodes.Call, wrappers: dict[str, str] | None = None) -> tuple[CallSite, bool] | None:
    """The operator call site of ``call`` and whether its callee is a forbidden alias; None otherwise."""
    func = call.func
    if isinstance(func, nodes.Attribute) and func.attrname not in _LAST_NAMES and not is_self(func.expr) and not (
            wrappers and any(w.rpartition(".")[2] == func.attrname for w in wrappers)):
        return None  # ``x.attr`` names ``...attr`` unless ``x`` is ``self``, whose attributes alias anything
    if isinstance(func, nodes.Name) and not _may_name_an_operator(func, wrappers):
        return None
    names = qualified_names(func)
    alternatives = sorted(names - {NONE}) if names is not None else []
    found = [operator_for(name, wrappers) for name in alternatives]
    if not found or None in found or len({op for op, _ in found}) != 1:
        return None
    op = found[0][0]
    alias = all(forbidden for _, forbidden in found)
    site = CallSite(call=call, operator=op, qualname=alternatives[0])
    for arg in call.args or ():
        if isinstance(arg, nodes.Starred):
            site.open_ended = True
        else:
            site.positional.append(arg)
    for keyword in call.keywords or ():
        if keyword.arg is not None:
            site.keywords[keyword.arg] = Argument(keyword.value, keyword)
            continue
        passed = keyword_dict(keyword.value, call)
        if passed is None:
            site.open_ended = True
        else:
            site.keywords.update(passed)
    return site, alias
