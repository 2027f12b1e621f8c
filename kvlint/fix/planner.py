"""The libcst side of ``kvlint.fix.rewrite`` (imported only when a fix is asked for).

A ``Planner`` finds, for each finding, the libcst node at the finding's position, decides with the engine's
own facts (astroid call sites, names and bindings, the catalogue's rename tables) whether the rewrite is
certain, and records an edit for that node. ``apply`` runs all edits in one transform, so the rest of the file
keeps its bytes. libcst only reads the text and writes the edits: its scope and qualified-name analyses were
two thirds of the cost of the ``[*]`` marks on a generated module, and a second opinion on what the engine
already decides about names.

Each ``plan_*`` method returns None when it recorded an edit, else the reason it did not (a sentence the CLI
prints next to the finding, so that a finding of a fixable rule left as it was says why).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property

import libcst as cst
from astroid import nodes
from astroid.const import Context
from libcst.metadata import MetadataWrapper, PositionProvider

from kvlint.analysis.callsite import CallSite, call_site, keyword_dict
from kvlint.analysis.finding import Finding
from kvlint.analysis.names import NONE, lookup, qualified_names
from kvlint.analysis.source_lines import byte_column, code_point_column, numbered_line, physical_lines
from kvlint.analysis.walk import nodes_named, nodes_of
from kvlint.catalogue.operators import FIA_V1, IFA_PFA_SPELLINGS, V1_TO_V2, V2_TO_V1
from kvlint.checks.engine import build_tree

SHAPE_METHODS = frozenset({"reshape", "view", "unsqueeze", "squeeze", "expand", "contiguous", "flatten", "clone"})
"""Tensor methods that keep the dtype: a fix looks through them to the factory that sets it."""
INT_FACTORIES = frozenset({"arange", "tensor", "as_tensor", "zeros", "ones", "full", "empty", "randint"})
INT64_NAMES = frozenset({"int64", "long"})

Position = tuple[int, int]
Edit = Callable[[cst.CSTNode], cst.CSTNode]
Declined = str | None
"""None: an edit was recorded; otherwise why not."""
_TAKEN = "another fix already rewrites the same expression"
NOT_FOUND = "kvlint could not find the expression at the finding's position in the source"
_ALIAS_PREFIXES = ("torch_npu.npu.", "torch.")


def rename_target(operator: str, keyword: str) -> str | None:
    """The operator's own spelling of ``keyword`` when the rename is one to one, else None."""
    if keyword in IFA_PFA_SPELLINGS:
        return IFA_PFA_SPELLINGS[keyword].get(operator)
    renames = V2_TO_V1 if operator == FIA_V1 else V1_TO_V2
    return renames.get(keyword)


class _Transformer(cst.CSTTransformer):
    def __init__(self, edits: dict[int, Edit]) -> None:
        super().__init__()
        self.edits = edits

    def on_leave(self, original_node, updated_node):
        edit = self.edits.get(id(original_node))
        return edit(updated_node) if edit is not None else updated_node


class Planner:
    def __init__(self, source: str, path: str, wrappers: dict[str, str], findings: Sequence[Finding],
                 module: nodes.Module | None = None, rewritten: Outline | None = None) -> None:
        """``findings``: the findings to plan for (the call sites resolved are those of the top-level
        statements that hold them). ``module``: the astroid tree of ``source``, when already built.
        ``rewritten``: the text libcst reads and the edits apply to, when not ``source`` itself (``outline``:
        the statements that hold the findings, with the finding positions given in its lines); the engine's
        facts always come from ``source``."""
        self.source = source
        self.source_lines = physical_lines(source)
        self.outline = rewritten
        self.lines = [(f.line, f.end_line) for f in findings]
        self.rewritten = source if rewritten is None else rewritten.text
        self.path = path
        self.wrappers = wrappers
        self.wrapper = MetadataWrapper(cst.parse_module(self.rewritten), unsafe_skip_copy=True)  # the parser's own
        self.tree = self.wrapper.module
        self.positions = self.wrapper.resolve(PositionProvider)
        self.by_start: dict[Position, list[cst.CSTNode]] = defaultdict(list)
        for node, where in self.positions.items():
            self.by_start[(where.start.line, where.start.column)].append(node)
        self._astroid: nodes.Module | None = module
        self._names: dict[Position, nodes.Name] | None = None
        self._site_list: list[tuple[CallSite, bool]] | None = None
        self._by_anchor: dict[Position, list[tuple[CallSite, str, nodes.NodeNG]]] | None = None
        self._by_callee: dict[Position, list[tuple[CallSite, bool]]] | None = None
        self._module_imports: list[str] | None = None
        self.edits: dict[int, Edit] = {}
        self.add_torch_npu_import = False

    # --- shared helpers ------------------------------------------------------------------------------

    def _end(self, node: cst.CSTNode) -> Position:
        where = self.positions[node]
        return where.end.line, where.end.column

    def _nodes_at(self, start: Position, kind: type, end: Position | None = None) -> list:
        found = [n for n in self.by_start.get(start, ()) if isinstance(n, kind)]
        return [n for n in found if end is None or self._end(n) == end]

    def _module(self) -> nodes.Module:
        if self._astroid is None:
            self._astroid = build_tree(self.source, self.path)
        return self._astroid

    def _astroid_name(self, name: cst.Name) -> nodes.Name | None:
        """The engine's node for the name libcst read as ``name`` (same place in ``source``, same name)."""
        if self._names is None:
            self._names = {(n.lineno, n.col_offset): n for n in nodes_of(self._module(), nodes.Name)}
        where = self.positions[name].start
        line = where.line if self.outline is None else self.outline.source_line(where.line)
        text = numbered_line(self.source_lines, line) if line is not None else None
        if text is None:
            return None
        column = byte_column(text, where.column)
        found = self._names.get((line, column))
        return found if found is not None and found.name == name.value else None

    def _libcst_at(self, node: nodes.NodeNG, kind: type) -> list:
        """The libcst nodes of ``kind`` that start where the engine's ``node`` does."""
        line = node.lineno if self.outline is None else self.outline.lines.get(node.lineno)
        if line is None:
            return []
        column = code_point_column(numbered_line(self.source_lines, node.lineno), node.col_offset)
        return self._nodes_at((line, column), kind)

    def _sites(self) -> list[tuple[CallSite, bool]]:
        """The operator call sites of the top-level statements that hold a finding, in the module's order,
        resolved once (a file of n findings must not resolve its n call sites n times, nor a module of n
        functions every call for the one finding). A finding's call, and the ``**kwargs`` dict a key of it
        comes from, are in the finding's own top-level statement."""
        if self._site_list is None:
            self._site_list = []
            for statement in self._module().body:
                if not _holds(statement, self.lines):
                    continue
                for call in statement.nodes_of_class(nodes.Call):
                    found = call_site(call, self.wrappers)
                    if found is not None:
                        self._site_list.append(found)
        return self._site_list

    def _keywords_at(self, where: Position) -> list[tuple[CallSite, str, nodes.NodeNG]]:
        """The keywords of the non-alias call sites whose anchor is at ``where``, in the module's order."""
        if self._by_anchor is None:
            self._by_anchor = defaultdict(list)
            for site, alias in self._sites():
                if not alias:
                    for keyword, argument in site.keywords.items():
                        anchor = argument.anchor
                        self._by_anchor[(anchor.lineno, anchor.col_offset)].append((site, keyword, anchor))
        return self._by_anchor.get(where, [])

    def _sites_called_at(self, where: Position) -> list[tuple[CallSite, bool]]:
        """The call sites whose callee starts at ``where``."""
        if self._by_callee is None:
            self._by_callee = defaultdict(list)
            for site, alias in self._sites():
                self._by_callee[(site.call.func.lineno, site.call.func.col_offset)].append((site, alias))
        return self._by_callee.get(where, [])

    def _edit(self, node: cst.CSTNode, edit: Edit) -> Declined:
        if id(node) in self.edits:
            return _TAKEN
        self.edits[id(node)] = edit
        return None

    # --- KVL102: keyword renames -----------------------------------------------------------------------

    def plan_rename(self, finding: Finding, start: Position, end: Position) -> Declined:
        for site, keyword, anchor in self._keywords_at((finding.line, finding.column)):
            return self._rename(site, keyword, anchor, start)
        return NOT_FOUND

    def _rename(self, site: CallSite, keyword: str, anchor: nodes.NodeNG, start: Position) -> Declined:
        target = rename_target(site.role, keyword)
        if target is None or target not in site.operator.param_names:
            return f"'{keyword}' has no one-to-one counterpart in {site.name}"
        if target in site.keywords:
            return f"'{target}' is passed as well; decide which of the two values is meant"
        if isinstance(anchor, nodes.Keyword) and anchor.parent is site.call:
            return self._rename_arg(start, keyword, target)
        if not self._dict_owned_by(site.call, anchor):
            return (f"'{keyword}' comes from a **kwargs dict that is not used by this call alone; renaming its key "
                    "could break another use")
        if isinstance(anchor, nodes.Keyword):
            return self._rename_arg(start, keyword, target)
        if isinstance(anchor, nodes.Const):
            return self._rename_string(start, keyword, target)
        return f"the key '{keyword}' of the **kwargs dict is not written as a string literal"

    def _rename_arg(self, start: Position, keyword: str, target: str) -> Declined:
        for arg in self._nodes_at(start, cst.Arg):
            if arg.keyword is not None and arg.keyword.value == keyword:
                return self._edit(arg, lambda node: node.with_changes(keyword=cst.Name(target)))
        return NOT_FOUND

    def _rename_string(self, start: Position, keyword: str, target: str) -> Declined:
        for string in self._nodes_at(start, cst.SimpleString):
            quote = string.value[-1]
            if string.value in (f'"{keyword}"', f"'{keyword}'"):
                return self._edit(string, lambda node: node.with_changes(value=f"{quote}{target}{quote}"))
        return f"the key '{keyword}' is not a plain string literal"

    def _dict_owned_by(self, call: nodes.Call, anchor: nodes.NodeNG) -> bool:
        """True when the ``**`` dict that holds ``anchor`` is written inline in ``call``, or is a local
        name that only this call unpacks and nothing reads by key."""
        for starred in call.kwargs or ():
            value = starred.value
            keywords = keyword_dict(value, call)
            if keywords is None or not any(a.anchor is anchor for a in keywords.values()):
                continue
            if isinstance(value, (nodes.Dict, nodes.Call)):
                return True
            return isinstance(value, nodes.Name) and self._only_unpacked_here(value, call)
        return False

    @staticmethod
    def _only_unpacked_here(name: nodes.Name, call: nodes.Call) -> bool:
        unpacked = 0
        for use in nodes_named(call.frame(), nodes.Name, name.name):
            parent = use.parent
            if isinstance(parent, nodes.Keyword) and parent.arg is None:
                unpacked += 1
            elif isinstance(parent, nodes.Subscript) and parent.value is use and parent.ctx == Context.Store:
                continue
            elif (isinstance(parent, nodes.Attribute) and parent.attrname == "update"
                  and isinstance(parent.parent, nodes.Call) and parent.parent.func is parent):
                continue
            else:
                return False
        return unpacked == 1

    # --- KVL112: torch.<op> -> torch_npu.<op> ----------------------------------------------------------

    def plan_alias(self, finding: Finding, start: Position, end: Position) -> Declined:
        for site, alias in self._sites_called_at((finding.line, finding.column)):
            func = site.call.func
            if not alias:
                continue
            if not isinstance(func, nodes.Attribute):
                return (f"the callee '{func.as_string()}' is a name bound elsewhere; point that binding at "
                        "torch_npu instead")
            rest = next((site.qualname[len(p):] for p in _ALIAS_PREFIXES if site.qualname.startswith(p)), None)
            if rest is None:
                return NOT_FOUND
            module_name = self._torch_npu_name(site.call)
            if module_name is None:
                return "the name 'torch_npu' means something else in this module"
            targets = self._nodes_at(start, cst.Attribute, end)
            if not targets:
                return NOT_FOUND
            if module_name == "torch_npu" and not self._bindings(site.call, "torch_npu"):
                self.add_torch_npu_import = True
            replacement = cst.parse_expression(f"{module_name}.{rest}")
            return self._edit(targets[0], lambda node: replacement.with_changes(lpar=node.lpar, rpar=node.rpar))
        return NOT_FOUND

    @staticmethod
    def _bindings(call: nodes.Call, name: str) -> list[nodes.NodeNG]:
        """What ``name`` is bound to where ``call`` is (looked up from the callee's leftmost name)."""
        expr = call.func
        while isinstance(expr, nodes.Attribute):
            expr = expr.expr
        return list(expr.lookup(name)[1]) if isinstance(expr, nodes.Name) else []

    def _torch_npu_name(self, call: nodes.Call) -> str | None:
        """The name bound to the torch_npu module where ``call`` is (an import to add: "torch_npu"), or None
        when ``torch_npu`` means something else there."""
        module = self._module()
        if self._module_imports is None:
            self._module_imports = []
            for node in module.nodes_of_class(nodes.Import):
                if node.scope() is module:
                    self._module_imports += [alias or name for name, alias in node.names if name == "torch_npu"]
        for candidate in self._module_imports:
            bindings = self._bindings(call, candidate)
            if bindings and all(
                isinstance(b, nodes.Import) and any(n == "torch_npu" and (a or n) == candidate for n, a in b.names)
                for b in bindings
            ):
                return candidate
        if "torch_npu" in module.locals or self._bindings(call, "torch_npu"):
            return None
        return "torch_npu"

    # --- KVL301: block_table int32 ---------------------------------------------------------------------

    def plan_block_table(self, finding: Finding, start: Position, end: Position) -> Declined:
        candidates = self.by_start.get(start, [])
        exact = [n for n in candidates if self._end(n) == end]
        declined: Declined = NOT_FOUND
        for node in exact or candidates:
            expression, declined = self._expression(node)
            if expression is not None:
                declined = self._fix_dtype(expression)
            if declined is None:
                return None
        return declined

    def _expression(self, node: cst.CSTNode) -> tuple[cst.BaseExpression | None, Declined]:
        """The expression whose dtype to fix: the node itself, or the value of a local name used only here."""
        if isinstance(node, cst.Arg):
            node = node.value
        if isinstance(node, cst.Name):
            return self._single_use_value(node)
        if isinstance(node, cst.Attribute):
            shown = self.tree.code_for_node(node)
            return None, (f"the table is '{shown}', built elsewhere (for example in __init__); add "
                          "dtype=torch.int32 where it is built")
        if isinstance(node, cst.BaseExpression):
            return node, None
        return None, NOT_FOUND

    def _single_use_value(self, name: cst.Name) -> tuple[cst.BaseExpression | None, Declined]:
        """The value of the only assignment of ``name`` in its function, when ``name`` is read only here
        (reads from the function's comprehensions, lambdas and nested functions count)."""
        read = self._astroid_name(name)
        if read is None:
            return None, NOT_FOUND
        scope, _ = lookup(read)
        if not isinstance(scope, (nodes.FunctionDef, nodes.Lambda)):
            return None, f"'{name.value}' is not a local name of a function; add dtype=torch.int32 where it is built"
        bindings = scope.locals.get(name.value, [])
        reads = [n for n in nodes_named(scope, (nodes.Name, nodes.DelName), name.value) if lookup(n)[0] is scope]
        if len(bindings) != 1 or reads != [read]:
            return None, (f"'{name.value}' is assigned more than once or read elsewhere, so changing its dtype "
                          "could change other uses")
        binding = bindings[0]
        statement = binding.parent
        if not (isinstance(binding, nodes.AssignName) and isinstance(statement, nodes.Assign)
                and len(statement.targets) == 1 and statement.targets[0] is binding):
            return None, f"'{name.value}' is not set by a plain assignment (a parameter, a loop or a with target)"
        assignments = self._libcst_at(statement, cst.Assign)
        if not assignments:
            return None, NOT_FOUND
        return assignments[0].value, None

    def _fix_dtype(self, expression: cst.BaseExpression) -> Declined:
        while (isinstance(expression, cst.Call) and isinstance(expression.func, cst.Attribute)
               and expression.func.attr.value in SHAPE_METHODS):
            expression = expression.func.value
        not_a_factory = (f"'{self.tree.code_for_node(expression)}' is not a torch factory call or .long() kvlint "
                         "can rewrite")
        if not isinstance(expression, cst.Call) or not isinstance(expression.func, cst.Attribute):
            return not_a_factory
        func = expression.func
        if func.attr.value == "long" and not expression.args:
            return self._edit(func.attr, lambda node: node.with_changes(value="int"))
        if func.attr.value not in INT_FACTORIES or not isinstance(func.value, cst.Name):
            return not_a_factory
        if self._qualified_names(func) != {f"torch.{func.attr.value}"}:
            return not_a_factory
        torch_name = func.value.value
        dtype = next((a for a in expression.args if a.keyword is not None and a.keyword.value == "dtype"), None)
        if dtype is not None:
            names = self._qualified_names(dtype.value)
            if not names or not names <= {f"torch.{n}" for n in INT64_NAMES}:
                return f"its dtype '{self.tree.code_for_node(dtype.value)}' is not literally torch.int64"
            new_value = cst.parse_expression(f"{torch_name}.int32")
            return self._edit(dtype.value, lambda node: new_value)
        if any(a.star for a in expression.args) or not expression.args:
            return "the factory call has no arguments or unpacks *args / **kwargs"
        return self._edit(expression, lambda node: _append_dtype(node, torch_name))

    def _qualified_names(self, node: cst.CSTNode) -> set[str]:
        """The dotted names the engine proves ``node`` (a name or an attribute of one) stands for; empty
        when it proves none, or when one alternative is None."""
        attributes: list[str] = []
        while isinstance(node, cst.Attribute):
            attributes.append(node.attr.value)
            node = node.value
        read = self._astroid_name(node) if isinstance(node, cst.Name) else None
        names = qualified_names(read) if read is not None else None
        if not names or NONE in names:
            return set()
        suffix = "".join(f".{attribute}" for attribute in reversed(attributes))
        return {f"{name}{suffix}" for name in names}

    # --- applying ------------------------------------------------------------------------------------

    def apply(self) -> str:
        tree = self.tree.visit(_Transformer(self.edits))
        if self.add_torch_npu_import:
            tree = _add_import(tree, "torch_npu")
        return tree.code


def _holds(statement: nodes.NodeNG, lines: Sequence[tuple[int, int]]) -> bool:
    """Some of the line ranges meet the statement's lines (its decorators included)."""
    decorators = getattr(statement, "decorators", None)
    first = decorators.fromlineno if decorators else statement.fromlineno
    return any(line <= statement.tolineno and end >= first for line, end in lines)


@dataclass
class Outline:
    """The text libcst reads for the ``[*]`` marks, and where each line of the source that it keeps went."""

    text: str
    lines: dict[int, int]
    """Source line -> its line in ``text``, for the lines kept word for word."""

    def position(self, where: Position) -> Position | None:
        """``where`` (line, column) in the source, in ``text``; None when the line is not kept."""
        line = self.lines.get(where[0])
        return None if line is None else (line, where[1])

    def source_line(self, line: int) -> int | None:
        """The source line that ``text``'s ``line`` keeps, or None (a line standing for a left-out body)."""
        return self._source_lines.get(line)

    @cached_property
    def _source_lines(self) -> dict[int, int]:
        return {text: source for source, text in self.lines.items()}


def outline(source: str, module: nodes.Module, findings: Sequence[Finding]) -> Outline:
    """The top-level statements of ``source`` that libcst needs for the decisions about ``findings``: every
    statement word for word, except the functions and classes that hold none of the findings, each replaced
    by one line that binds its name (``name = None``: the same module binding, so the same qualified names).
    A function or class declaring ``global`` or ``nonlocal`` names is kept (it binds names outside itself).
    Comments and blank lines between the statements are left out: libcst's cost is in the lines it reads, and
    a 50,000-line generated module spent most of its ``[*]`` time on bodies and blank lines it never used."""
    lines = physical_lines(source, keepends=True)
    wanted = [(f.line, f.end_line) for f in findings]
    kept: list[str] = []
    where: dict[int, int] = {}
    last = 0
    for statement in module.body:
        decorators = getattr(statement, "decorators", None)
        first = max(decorators.fromlineno if decorators else statement.fromlineno, last + 1)
        end = statement.tolineno
        if end < first:
            continue  # on the line of the statement before it (``import a; import b``): kept with that line
        if (isinstance(statement, (nodes.FunctionDef, nodes.ClassDef)) and not _holds(statement, wanted)
                and not nodes_of(statement, (nodes.Global, nodes.Nonlocal))):
            kept.append(f"{statement.name} = None\n")
        else:
            for line in range(first, end + 1):
                where[line] = len(kept) + 1
                kept.append(lines[line - 1])
        last = end
    text = "".join(line if line.endswith(("\n", "\r")) else line + "\n" for line in kept)
    try:
        compile(text, module.file or "<outline>", "exec", dont_inherit=True)
    except (SyntaxError, ValueError):  # pragma: no cover - whole statements left out leave valid code; never guess
        return Outline(source, {line: line for line in range(1, len(lines) + 2)})
    return Outline(text, where)


def _append_dtype(call: cst.Call, torch_name: str) -> cst.Call:
    last = call.args[-1]
    new = cst.Arg(
        keyword=cst.Name("dtype"),
        value=cst.parse_expression(f"{torch_name}.int32"),
        equal=cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace("")),
        comma=last.comma,
    )
    last = last.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
    return call.with_changes(args=[*call.args[:-1], last, new])


def _is_import_of(statement: cst.CSTNode, module: str) -> bool:
    if not isinstance(statement, cst.SimpleStatementLine):
        return False
    for small in statement.body:
        if isinstance(small, cst.Import) and any(
            cst.helpers.get_full_name_for_node(alias.name) == module for alias in small.names
        ):
            return True
    return False


def _is_import(statement: cst.CSTNode) -> bool:
    return isinstance(statement, cst.SimpleStatementLine) and any(
        isinstance(small, (cst.Import, cst.ImportFrom)) for small in statement.body
    )


def _add_import(tree: cst.Module, module: str) -> cst.Module:
    """``import module`` after ``import torch``, else after the last top-level import, else first."""
    body = list(tree.body)
    index = next((i + 1 for i, s in enumerate(body) if _is_import_of(s, "torch")), None)
    if index is None:
        index = max((i + 1 for i, s in enumerate(body) if _is_import(s)), default=0)
    statement = cst.parse_statement(f"import {module}\n")
    body.insert(index, statement)
    return tree.with_changes(body=body)
