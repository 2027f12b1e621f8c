"""The nodes of some classes below a node, read from one walk of the module's tree.

astroid's ``nodes_of_class`` walks the subtree again at every call, through one generator per node; the
rules ask for the calls, attributes, assignments or returns of the same module and frames many times over.
The tree is walked once per analysis instead (the nodes in pre-order, where each node's subtree ends), and
every question is a slice of that list. The answers are ``nodes_of_class``'s, in its order.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from astroid import nodes

from kvlint.analysis.memo import tree_cache

_Classes = type[nodes.NodeNG] | tuple[type[nodes.NodeNG], ...]


@dataclass
class _Preorder:
    nodes: list[nodes.NodeNG]
    ends: list[int]
    """``ends[i]``: one past the last node of ``nodes[i]``'s subtree."""
    at: dict[int, int]
    """``id(node)`` -> its position (the list holds the nodes, so their ids stay theirs)."""
    found: dict[tuple[int, _Classes, _Classes | None], list[nodes.NodeNG]] = field(default_factory=dict)
    """Answers given: (position, classes, skip) -> the nodes. The rules ask the same frame the same question
    once per call site in it, and a frame of n calls must not cost n walks of it."""
    named: dict[tuple[int, _Classes], dict[str, list[nodes.NodeNG]]] = field(default_factory=dict)


_PREORDER: dict[nodes.Module, _Preorder] = tree_cache()


def _preorder(module: nodes.Module) -> _Preorder:
    if module not in _PREORDER:
        order: list[nodes.NodeNG] = [module]
        ends = [0]
        stack = [(0, module.get_children())]
        while stack:
            position, children = stack[-1]
            child = next(children, None)
            if child is None:
                ends[position] = len(order)
                stack.pop()
                continue
            stack.append((len(order), child.get_children()))
            order.append(child)
            ends.append(0)
        _PREORDER[module] = _Preorder(order, ends, {id(node): i for i, node in enumerate(order)})
    return _PREORDER[module]


def nodes_of(node: nodes.NodeNG, classes: _Classes, skip: _Classes | None = None) -> list[nodes.NodeNG]:
    """``list(node.nodes_of_class(classes, skip))``: the nodes of ``classes`` at or below ``node``, not
    entering (nor counting) nodes of ``skip`` below it. The list is shared: do not change it."""
    module = node.root()
    if not isinstance(module, nodes.Module):
        return list(node.nodes_of_class(classes, skip))
    index = _preorder(module)
    start = index.at.get(id(node))
    if start is None or index.nodes[start] is not node:
        return list(node.nodes_of_class(classes, skip))
    key = (start, classes, skip)
    if key not in index.found:
        index.found[key] = _collect(index, start, classes, skip)
    return index.found[key]


def nodes_named(node: nodes.NodeNG, classes: _Classes, name: str) -> list[nodes.NodeNG]:
    """The nodes of ``nodes_of(node, classes)`` whose ``name`` is ``name`` (``Name``, ``AssignName``...), in
    that order, from one index per node and classes."""
    module = node.root()
    start = _preorder(module).at.get(id(node)) if isinstance(module, nodes.Module) else None
    if start is None or _preorder(module).nodes[start] is not node:
        return [n for n in nodes_of(node, classes) if n.name == name]
    named = _preorder(module).named
    if (start, classes) not in named:
        by_name: dict[str, list[nodes.NodeNG]] = {}
        for found in nodes_of(node, classes):
            by_name.setdefault(found.name, []).append(found)
        named[(start, classes)] = by_name
    return named[(start, classes)].get(name, [])


def _collect(index: _Preorder, start: int, classes: _Classes, skip: _Classes | None) -> list[nodes.NodeNG]:
    if skip is None:
        return [n for n in index.nodes[start:index.ends[start]] if isinstance(n, classes)]
    node = index.nodes[start]
    found = [node] if isinstance(node, classes) else []
    position, end = start + 1, index.ends[start]
    while position < end:
        current = index.nodes[position]
        if isinstance(current, skip):
            position = index.ends[position]
            continue
        if isinstance(current, classes):
            found.append(current)
        position += 1
    return found
