"""A node-by-node description of an astroid tree, to compare the engine's build with astroid's own.

Each node gives its class, its position, its non-node fields, its parent (by pre-order index) and its children
in field order; each scope gives its locals, and each class and function its instance attributes, as lists of
pre-order indices. ``position`` (the span of a ``def`` or ``class`` keyword) is left out: the engine does not
compute it (``kvlint.checks.building``).
"""

from __future__ import annotations

import ast
import copy
import os

from astroid import nodes
from astroid.rebuilder import TreeRebuilder

from kvlint.checks import building


class _AstroidRebuilt(building._OwnTextBuilder):
    """The engine's builder with astroid's own rebuilder (on a copy of the parsed tree, which it changes), and
    every attribute assignment looked up (no class names known)."""

    def _data_build(self, data: str, modname: str, path: str | None,
                    **options: bool | None) -> tuple[nodes.Module, TreeRebuilder]:
        if "is_stub" in options and options["is_stub"] is None:
            options["is_stub"] = False
        rebuilder = TreeRebuilder(self._manager, data=data, **options)
        package = os.path.basename(path or "") == "__init__.py"
        module = rebuilder.visit_module(copy.deepcopy(self.parsed), modname, os.path.abspath(path or "<?>"), package)
        return module, rebuilder


def astroid_own(source: str, path: str, parsed: ast.Module) -> nodes.Module:
    """The tree astroid's own rebuilder gives, built and finished as the engine finishes its own."""
    return _AstroidRebuilt(parsed).string_build(source, path=path)


def _fields(node: nodes.NodeNG) -> tuple[object, ...]:
    shown = []
    for name in (*node._other_fields, "lineno", "col_offset", "end_lineno", "end_col_offset"):
        if name == "position":
            continue
        value = getattr(node, name, None)
        shown.append((name, value if not isinstance(value, nodes.NodeNG) else type(value).__name__))
    return tuple(shown)


def _synthetic(node: nodes.NodeNG) -> tuple[object, ...]:
    """A binding astroid adds outside the tree (a class's ``__module__``)."""
    return type(node).__name__, node.lineno, getattr(node, "value", None)


def describe(module: nodes.Module) -> list[tuple[object, ...]]:
    order: list[nodes.NodeNG] = []
    stack = [module]
    while stack:
        node = stack.pop()
        order.append(node)
        stack.extend(reversed(list(node.get_children())))
    index = {id(node): position for position, node in enumerate(order)}

    def positions(bindings: dict[str, list[nodes.NodeNG]]) -> tuple[object, ...]:
        return tuple(sorted((name, tuple(index.get(id(b), _synthetic(b)) for b in found))
                            for name, found in bindings.items()))

    described = []
    for node in order:
        row: list[object] = [type(node).__name__, _fields(node), index.get(id(node.parent)),
                             tuple(index[id(child)] for child in node.get_children())]
        for field in node._astroid_fields:
            value = getattr(node, field)
            row.append((field, [index.get(id(v)) for v in value] if isinstance(value, list) else index.get(id(value))))
        if isinstance(node, nodes.LocalsDictNodeNG):
            row.append(("locals", positions(node.locals)))
        if isinstance(node, (nodes.ClassDef, nodes.FunctionDef)):
            row.append(("instance_attrs", positions(node.instance_attrs)))
        described.append(tuple(row))
    return described
