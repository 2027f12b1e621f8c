"""The nodes of some classes below a node, read from one walk of the module's tree.

astroid's ``nodes_of_class`` walks the subtree again at every call, through one generator per node; the
rules ask for the calls, attributes, assignments or returns of the same module and frames many times over.
The tree is walked once per analysis instead (the nodes in pre-order, where each node's subtree ends, and
the positions of each node class), and every question is answered from those lists: the positions of the
classes asked for that fall inside the subtree, rather than a scan of the subtree (the module's calls, asked
once per analysis, are most of its nodes' worth of ``isinstance``). The answers are ``nodes_of_class``'s, in
its order.
"""

from __future__ import annotations

from bisect import bisect_left
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
    positions: dict[type[nodes.NodeNG], list[int]]
    """Each node class present -> the positions of its nodes, ascending."""
    found: dict[tuple[int, _Classes, _Classes | None], list[nodes.NodeNG]] = field(default_factory=dict)
    """Answers given: (position, classes, skip) -> the nodes. The rules ask the same frame the same question
    once per call site in it, and a frame of n calls must not cost n walks of it."""
    named: dict[tuple[int, _Classes], dict[str, list[nodes.NodeNG]]] = field(default_factory=dict)
    kinds: dict[_Classes, list[list[int]]] = field(default_factory=dict)
    """Classes asked for -> the position lists of the node classes present that match them."""


_PREORDER: dict[nodes.Module, _Preorder] = tree_cache()
_LEAVES = frozenset(kind for kind in vars(nodes).values()
                    if isinstance(kind, type) and issubclass(kind, nodes.NodeNG) and not kind._astroid_fields)
"""The node classes without child fields (``Name``, ``Const``, ``AssignName``, ``Pass``...)."""


def _preorder(module: nodes.Module) -> _Preorder:
    if module not in _PREORDER:
        order: list[nodes.NodeNG] = []
        ends: list[int] = []

        def visit(node: nodes.NodeNG) -> None:
            """One frame per level of the tree, fewer than astroid's own build of it took.
            Leaves (half the nodes) are appended by their parent, without a generator of children."""
            position = len(order)
            order.append(node)
            ends.append(0)
            for child in node.get_children():
                if type(child) in _LEAVES:
                    order.append(child)
                    ends.append(len(order))
                else:
                    visit(child)
            ends[position] = len(order)

        visit(module)
        positions: dict[type[nodes.NodeNG], list[int]] = {}
        for position, node in enumerate(order):
            positions.setdefault(type(node), []).append(position)
        _PREORDER[module] = _Preorder(order, ends, dict(zip(map(id, order), range(len(order)))), positions)
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


def nodes_outside(node: nodes.NodeNG, classes: _Classes, skip: _Classes) -> list[nodes.NodeNG]:
    """``nodes_of(node, classes, skip)``, answered from the positions of those classes without scanning the
    subtree, and not remembered: for questions asked once per node (the names each statement binds), where a
    scan of every compound statement, then of each statement inside it, cost a walk per level of nesting."""
    module = node.root()
    index = _preorder(module) if isinstance(module, nodes.Module) else None
    start = index.at.get(id(node)) if index is not None else None
    if start is None or index.nodes[start] is not node:
        return list(node.nodes_of_class(classes, skip))
    end = index.ends[start]
    found = _positions_inside(index, classes, start, end)
    ranges: list[tuple[int, int]] = []  # the subtrees of the skipped nodes below ``node``, outermost only
    for position in _positions_inside(index, skip, start + 1, end):
        if not ranges or position >= ranges[-1][1]:
            ranges.append((position, index.ends[position]))
    kept, at = [], 0
    for position in found:
        while at < len(ranges) and ranges[at][1] <= position:
            at += 1
        if at == len(ranges) or position < ranges[at][0]:
            kept.append(index.nodes[position])
    return kept


def _positions_inside(index: _Preorder, classes: _Classes, start: int, end: int) -> list[int]:
    """The positions in ``[start, end)`` of the nodes of ``classes``, ascending."""
    inside = [positions[bisect_left(positions, start):bisect_left(positions, end)]
              for positions in _positions_of(index, classes)]
    inside = [part for part in inside if part]
    if len(inside) <= 1:
        return inside[0] if inside else []
    return sorted(p for part in inside for p in part)


def _positions_of(index: _Preorder, classes: _Classes) -> list[list[int]]:
    """The position lists of the node classes present that are ``classes`` or subclasses of them."""
    if classes not in index.kinds:
        index.kinds[classes] = [positions for kind, positions in index.positions.items() if issubclass(kind, classes)]
    return index.kinds[classes]


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
        return [index.nodes[p] for p in _positions_inside(index, classes, start, index.ends[start])]
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
