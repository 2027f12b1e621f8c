"""Whether CPython's compiler could refuse a module that ``ast.parse`` accepted (KVL000).

``ast.parse`` accepts some programs the compiler refuses: ``return`` outside a function, a keyword given
twice, ``nonlocal`` without a binding, ``break`` outside a loop. Compiling every file to find those few cost
as much as a seventh of the kvlint command's time on the public operator files. The compiler refuses a
parsed program only for a short list of constructs (its symbol table, its code generator and
``__future__`` checks), and each of those leaves a trace in the tree: a ``global``, an ``await``, a starred
target, a repeated keyword. ``compiler_may_refuse`` looks for those traces, from the positions the walk
already keeps, and the engine compiles only the modules where one is found.

The test is one-sided: a trace does not mean a refusal (most ``global`` statements are fine), but a module
with none of them compiles. Where a construct is rare in real code, its presence alone sends the module to
the compiler (``match``, ``except*``, ``global``, type parameters); where it is common (``return``, a call's
``*args``, ``from __future__ import annotations``, ``await`` in an ``async def``), the check is the
compiler's own rule. ``tests/test_compiler_refusals.py`` holds one refused program per rule, and checks on
generated programs that no module the compiler refuses is let through.
"""

from __future__ import annotations

import __future__

from astroid import nodes
from astroid.const import Context

from kvlint.analysis.walk import nodes_of

_FRAMES = (nodes.FunctionDef, nodes.Lambda, nodes.ClassDef, nodes.Module)
_FUNCTIONS = (nodes.FunctionDef, nodes.Lambda)
_COMPREHENSIONS = (nodes.ListComp, nodes.SetComp, nodes.DictComp, nodes.GeneratorExp)
_ALWAYS = tuple(getattr(nodes, name) for name in (
    "Global", "Nonlocal", "Match", "TryStar", "TypeAlias", "TypeVar", "ParamSpec", "TypeVarTuple")
    if hasattr(nodes, name))
"""Rare constructs the compiler has several rules about: their presence alone sends the module to it."""
_FEATURES = frozenset(__future__.all_feature_names)
_MAX_BLOCKS = 16
"""The compiler allows 20 nested blocks (``CO_MAXBLOCKS``) in one function; the weights below overcount."""
_STARRED_TARGETS = 256
"""The compiler refuses a starred assignment with 256 or more targets before the star."""


def compiler_may_refuse(module: nodes.Module, source: str) -> bool:
    """False when ``module`` (built from ``source``, which ``ast.parse`` accepted) holds nothing CPython's
    compiler refuses; True when it holds something it might."""
    return bool(
        "__debug__" in source  # assigning, deleting or naming a parameter __debug__
        or source.count("metaclass") > 1  # astroid keeps one of a class's repeated metaclass keywords
        or nodes_of(module, _ALWAYS)
        or any(_returns_outside_function(node) for node in nodes_of(module, nodes.Return))
        or any(_outside_loop(node) for node in nodes_of(module, (nodes.Break, nodes.Continue)))
        or any(_suspicious_yield(node) for node in nodes_of(module, (nodes.Yield, nodes.YieldFrom)))
        or any(_suspicious_await(node) for node in nodes_of(module, nodes.Await))
        or any(not isinstance(node.frame(), nodes.AsyncFunctionDef)
               for node in nodes_of(module, (nodes.AsyncFor, nodes.AsyncWith)))
        or any(node.is_async for node in nodes_of(module, nodes.Comprehension))
        or any(_suspicious_named_expression(node) for node in nodes_of(module, nodes.NamedExpr))
        or any(_bad_starred(node) for node in nodes_of(module, nodes.Starred))
        or any(_repeats_a_keyword(node) for node in nodes_of(module, (nodes.Call, nodes.ClassDef)))
        or any(_repeats_a_parameter(node) for node in nodes_of(module, nodes.Arguments))
        or any(_bad_import(node, module) for node in nodes_of(module, nodes.ImportFrom))
        or any(_bare_except_not_last(node) for node in nodes_of(module, nodes.Try))
        or _nested_too_deep(module)
    )


def _returns_outside_function(node: nodes.Return) -> bool:
    return not isinstance(node.frame(), nodes.FunctionDef)


def _outside_loop(node: nodes.Break | nodes.Continue) -> bool:
    """Not in the body of a loop of its own function (a loop's ``else`` is outside the loop)."""
    child, parent = node, node.parent
    while parent is not None and not isinstance(parent, _FRAMES):
        if isinstance(parent, (nodes.For, nodes.While)) and any(statement is child for statement in parent.body):
            return False
        child, parent = parent, parent.parent
    return True


def _in_signature(node: nodes.NodeNG) -> bool:
    """In a parameter's default or annotation, a decorator, a return annotation, a class's bases or keywords,
    or a variable annotation: places the compiler evaluates in another scope, or under other rules."""
    child, parent = node, node.parent
    while parent is not None:
        if isinstance(parent, (nodes.Arguments, nodes.Decorators)):
            return True
        if isinstance(parent, nodes.AnnAssign) and child is parent.annotation:
            return True
        if isinstance(parent, nodes.FunctionDef):
            return child is parent.returns
        if isinstance(parent, nodes.ClassDef):
            return not any(statement is child for statement in parent.body)
        if isinstance(parent, (nodes.Lambda, nodes.Module)):
            return False
        child, parent = parent, parent.parent
    return False


def _suspicious_yield(node: nodes.Yield | nodes.YieldFrom) -> bool:
    """Outside a function, in a comprehension, in a signature, or in an ``async def`` (no ``yield from``
    there, and an async generator's ``return`` takes no value)."""
    frame = node.frame()
    return (not isinstance(frame, _FUNCTIONS) or isinstance(frame, nodes.AsyncFunctionDef)
            or node.scope() is not frame or _in_signature(node))


def _suspicious_await(node: nodes.Await) -> bool:
    frame = node.frame()
    return not isinstance(frame, nodes.AsyncFunctionDef) or node.scope() is not frame or _in_signature(node)


def _suspicious_named_expression(node: nodes.NamedExpr) -> bool:
    """In a comprehension (its own rules on rebinding and on class bodies) or a signature."""
    parent = node.parent
    while parent is not None and not isinstance(parent, _FRAMES):
        if isinstance(parent, _COMPREHENSIONS):
            return True
        parent = parent.parent
    return _in_signature(node)


def _bad_starred(node: nodes.Starred) -> bool:
    """Anything but ``f(*args)``, ``[*a, b]`` / ``(*a, b)`` / ``{*a}`` as values, and one starred target among
    fewer than 256 in a tuple or list."""
    parent = node.parent
    if isinstance(parent, nodes.Call):
        return not any(argument is node for argument in parent.args)
    if isinstance(parent, nodes.Set):
        return False
    if not isinstance(parent, (nodes.Tuple, nodes.List)):
        return True
    if parent.ctx == Context.Load:
        return False
    if parent.ctx != Context.Store:
        return True
    return len(parent.elts) >= _STARRED_TARGETS or sum(isinstance(e, nodes.Starred) for e in parent.elts) > 1


def _repeats_a_keyword(node: nodes.Call | nodes.ClassDef) -> bool:
    if len(node.keywords or ()) < 2:
        return False  # most calls: asked of every call of the module
    names = [keyword.arg for keyword in node.keywords if keyword.arg is not None]
    return len(names) != len(set(names))


def _repeats_a_parameter(node: nodes.Arguments) -> bool:
    names = [a.name for a in (*(node.posonlyargs or ()), *(node.args or ()), *(node.kwonlyargs or ()))]
    names += [name for name in (node.vararg, node.kwarg) if name]
    return len(names) != len(set(names))


def _bad_import(node: nodes.ImportFrom, module: nodes.Module) -> bool:
    """``from x import *`` outside the module's top level, or a ``__future__`` import that is not at the start
    of the file or names no feature."""
    if node.modname != "__future__":
        return not isinstance(node.parent, nodes.Module) and any(name == "*" for name, _ in node.names)
    if node.parent is not module or any(name not in _FEATURES for name, _ in node.names):
        return True
    before = module.body[:next(i for i, statement in enumerate(module.body) if statement is node)]
    # astroid keeps the docstring out of the body: anything before is another statement
    return not all(isinstance(statement, nodes.ImportFrom) and statement.modname == "__future__"
                   for statement in before)


def _bare_except_not_last(node: nodes.Try) -> bool:
    return any(handler.type is None for handler in node.handlers[:-1])


def _block_weight(node: nodes.NodeNG) -> int:
    """At least the blocks the compiler opens around the statements inside ``node``."""
    if isinstance(node, nodes.With):
        return len(node.items) + 1
    if isinstance(node, (nodes.For, nodes.While, nodes.Try, nodes.ExceptHandler)):
        return 2
    return 0


def _nested_too_deep(module: nodes.Module) -> bool:
    """Blocks (loops, ``try``, handlers, ``with`` items) nested near the compiler's limit in one function."""
    for block in nodes_of(module, (nodes.For, nodes.While, nodes.Try, nodes.ExceptHandler, nodes.With)):
        depth, node = 0, block
        while node is not None and not isinstance(node, _FRAMES):
            depth += _block_weight(node)
            node = node.parent
        if depth >= _MAX_BLOCKS:
            return True
    return False
