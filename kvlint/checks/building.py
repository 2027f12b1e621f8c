"""How the engine builds a file's astroid tree: from the file alone, from the ``ast`` tree already parsed.

Building the tree is the largest single cost of the ``kvlint`` command and of the flake8 plugin on the files
that call the operators (more than the parse itself: benchmarks/RESULTS.md). astroid's rebuilder is kept, with
these differences, none of which changes a node the rules read (``tests/test_tree_building.py`` compares the
two trees node for node):

- the ``ast`` tree handed in is left as it was (astroid takes each docstring out of its node's body);
- the most common nodes (names, attributes, constants, calls, keywords, assignments, expression statements)
  are built without the steps astroid's generic path takes for every node: the context lookup through a
  method, and a dispatch for each child that is known to be a name;
- no ``position`` (the span of a ``def`` or ``class`` keyword and its name, which astroid finds by tokenizing
  the header of every function and class again): no rule reads it;
- an attribute assignment is recorded on a class (as astroid records it, by inferring the object) only when
  the object is a class of the file itself (``Config.flag = 1``): inferring an imported name builds that
  module from disk, then its imports, seconds per file in a tree like torch's.
"""

from __future__ import annotations

import ast
import builtins
import copy
import os
from typing import TypeVar

from astroid import MANAGER, nodes
from astroid.builder import AstroidBuilder
from astroid.rebuilder import TreeRebuilder

_Documented = TypeVar("_Documented", ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
_BUILTIN_NAMES = frozenset(vars(builtins))


class _Rebuilder(TreeRebuilder):
    """astroid's rebuilder with the engine's differences (the module docstring). Every method overridden here
    builds what astroid's own builds (the same classes, fields, positions and locals), for astroid 3.0 to
    4.x."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)
        self.class_names: set[str] = set()
        """The names of the classes the file defines, at any depth."""

    def _get_doc(self, node: _Documented) -> tuple[_Documented, ast.Constant | None]:
        """astroid's own (a private method, the same in astroid 3.0 to 4.x), on a copy of the node."""
        return super()._get_doc(copy.copy(node))

    def _get_position_info(self, node: ast.AST, parent: nodes.NodeNG) -> None:
        """No rule reads a node's ``position``: astroid tokenizes every function's and class's header for it."""
        return None

    def visit_classdef(self, node: ast.ClassDef, parent: nodes.NodeNG, *args: object) -> nodes.ClassDef:
        self.class_names.add(node.name)
        return super().visit_classdef(node, parent, *args)

    def _child(self, node: ast.AST, parent: nodes.NodeNG) -> nodes.NodeNG:
        """``visit``, straight to the name builder for a name (a third of all nodes)."""
        if node.__class__ is ast.Name:
            return self.visit_name(node, parent)
        return self.visit(node, parent)

    def visit_name(self, node: ast.Name, parent: nodes.NodeNG) -> nodes.Name | nodes.AssignName | nodes.DelName:
        kind = node.ctx.__class__
        if kind is ast.Load:
            return nodes.Name(name=node.id, lineno=node.lineno, col_offset=node.col_offset, parent=parent,
                              end_lineno=node.end_lineno, end_col_offset=node.end_col_offset)
        if kind is ast.Store:
            assigned = nodes.AssignName(name=node.id, lineno=node.lineno, col_offset=node.col_offset, parent=parent,
                                        end_lineno=node.end_lineno, end_col_offset=node.end_col_offset)
            self._save_assignment(assigned)
            return assigned
        return super().visit_name(node, parent)

    def visit_attribute(self, node: ast.Attribute,
                        parent: nodes.NodeNG) -> nodes.Attribute | nodes.AssignAttr | nodes.DelAttr:
        if node.ctx.__class__ is not ast.Load:
            return super().visit_attribute(node, parent)
        built = nodes.Attribute(attrname=node.attr, lineno=node.lineno, col_offset=node.col_offset, parent=parent,
                                end_lineno=node.end_lineno, end_col_offset=node.end_col_offset)
        built.postinit(self._child(node.value, built))
        return built

    def visit_constant(self, node: ast.Constant, parent: nodes.NodeNG) -> nodes.Const:
        return nodes.Const(value=node.value, kind=node.kind, lineno=node.lineno, col_offset=node.col_offset,
                           parent=parent, end_lineno=node.end_lineno, end_col_offset=node.end_col_offset)

    def visit_call(self, node: ast.Call, parent: nodes.NodeNG) -> nodes.Call:
        built = nodes.Call(lineno=node.lineno, col_offset=node.col_offset, parent=parent,
                           end_lineno=node.end_lineno, end_col_offset=node.end_col_offset)
        child = self._child
        built.postinit(func=child(node.func, built), args=[child(argument, built) for argument in node.args],
                       keywords=[self.visit_keyword(keyword, built) for keyword in node.keywords])
        return built

    def visit_keyword(self, node: ast.keyword, parent: nodes.NodeNG) -> nodes.Keyword:
        built = nodes.Keyword(arg=node.arg, lineno=node.lineno, col_offset=node.col_offset, parent=parent,
                              end_lineno=node.end_lineno, end_col_offset=node.end_col_offset)
        built.postinit(self._child(node.value, built))
        return built

    def visit_assign(self, node: ast.Assign, parent: nodes.NodeNG) -> nodes.Assign:
        if node.type_comment is not None:
            return super().visit_assign(node, parent)
        built = nodes.Assign(lineno=node.lineno, col_offset=node.col_offset, parent=parent,
                             end_lineno=node.end_lineno, end_col_offset=node.end_col_offset)
        child = self._child
        built.postinit(targets=[child(target, built) for target in node.targets], value=child(node.value, built),
                       type_annotation=None)
        return built

    def visit_expr(self, node: ast.Expr, parent: nodes.NodeNG) -> nodes.Expr:
        built = nodes.Expr(lineno=node.lineno, col_offset=node.col_offset, parent=parent,
                           end_lineno=node.end_lineno, end_col_offset=node.end_col_offset)
        built.postinit(self.visit(node.value, built))
        return built


class _OwnTextBuilder(AstroidBuilder):
    """Builds a file's tree from the file alone, from its ``ast`` tree when it is already parsed."""

    def __init__(self, parsed: ast.Module | None) -> None:
        super().__init__(MANAGER, apply_transforms=False)
        self.parsed = parsed
        self.class_names: set[str] | None = None
        """The file's class names, when the engine's rebuilder built the tree."""

    def _data_build(self, data: str, modname: str, path: str | None,
                    **options: bool | None) -> tuple[nodes.Module, TreeRebuilder]:
        """astroid's own steps after its ``ast.parse``, from the tree already parsed. ``options``: what this
        astroid's ``string_build`` passes on: from astroid 4.4, ``is_stub`` (None: a ``.pyi`` path), which its
        rebuilder takes too; older versions pass nothing and their rebuilder takes no such argument."""
        if self.parsed is None:
            return super()._data_build(data, modname, path, **options)
        package = path is not None and os.path.splitext(os.path.basename(path))[0] == "__init__"
        if "is_stub" in options and options["is_stub"] is None:
            options["is_stub"] = path is not None and path.endswith(".pyi")
        builder = _Rebuilder(self._manager, data=data, **options)
        module = builder.visit_module(self.parsed, modname, os.path.abspath(path) if path else "<?>", package)
        self.class_names = builder.class_names
        return module, builder

    def delayed_assattr(self, node: nodes.AssignAttr) -> None:
        """Only on a class of the file: where ``node``'s object is a name that every binding makes a class."""
        if not isinstance(node.expr, nodes.Name):
            return
        name = node.expr.name
        if self.class_names is not None and name not in self.class_names and name not in _BUILTIN_NAMES:
            return  # no binding of the name is a class: the lookup below would find none
        _, bindings = node.expr.lookup(name)
        if bindings and all(isinstance(binding, nodes.ClassDef) for binding in bindings):
            super().delayed_assattr(node)


def build_tree(source: str, path: str, parsed: ast.Module | None = None) -> nodes.Module:
    """The file's astroid tree as the engine builds it, from the file alone (raises astroid's
    ``AstroidSyntaxError`` on a file that does not parse).
    ``parsed``: ``ast.parse(source)``, when the caller has it (astroid then does not parse the text again)."""
    return _OwnTextBuilder(parsed).string_build(source, path=path)
