"""What the code proves about the query length Q_S of an operator call, path by path.

Q_S decides what some arguments mean: with Q_S = 1 and no rope inputs FIA and PFA ignore ``sparse_mode``
and take a ``(B, KV_S)`` mask (docs/operators/fused_infer_attention.md#fia-c26, #fia-c21); paged attention
with Q_S > 1 takes other block sizes than decode (#fia-c36, #fia-c37). The proofs, on each path:

- the query's shape on the sequence axis of the call's layout: ``q[:, :, 0:1]`` or ``q.view(B, N, 1, D)``
  with BNSD, ``q[:, -1:]`` or ``token.unsqueeze(1)`` with BSND / BSH (``kvlint.analysis.axes``);
- a branch on a query length the path took: ``max_query_len > 1``, ``q_len == 1``, ``num_tokens_per_req > 1``
  (its else-branch proves Q_S = 1, its then-branch Q_S > 1), also through a local flag bound once to such a
  comparison (``is_decode = q_len == 1``). A flag by its name alone (``is_prefill``) proves nothing: a
  prefill chunk may hold one token.
"""

from __future__ import annotations

import ast
import functools
import math
import re

from astroid import nodes

from kvlint.analysis.axes import split
from kvlint.analysis.callsite import CallSite
from kvlint.analysis.facts import Value
from kvlint.analysis.flow import Key, Path, condition, reads_choices
from kvlint.analysis.follow import branch_path
from kvlint.analysis.memo import tree_cache

ONE = "one"
"""Q_S = 1."""
SEVERAL = "several"
"""Q_S > 1."""
QUERY_LENGTH_NAME = re.compile(
    r"^(max_)?(q|query|decode_query)_?(len|length|seq_len|seqlen|seq_length)$|^(max_)?seqlen_q$"
    r"|^(num_)?tokens_per_req$", re.IGNORECASE)
"""Identifiers of a query length: ``q_len``, ``qlen``, ``max_query_len``, ``max_seqlen_q``, ``num_tokens_per_req``."""


def query_lengths(site: CallSite, path: Path) -> list[tuple[str | None, Path]]:
    """For each alternative of the query on ``path`` (within the branches that lead to the call): ONE,
    SEVERAL or None (not proven), and the path it holds on. Empty when ``path`` cannot reach the call."""
    reaching = branch_path(site.call, site.call.frame(), path)
    if reaching is None:
        return []
    found = []
    for query in site.values("query", reaching):
        by_condition = _from_conditions(query.path)
        if by_condition is not None:
            found.append((by_condition, query.path))
            continue
        for layout in site.values("input_layout", query.path):
            found.append((_from_shape(query.value, layout.value.const), layout.path))
    return found


def _from_shape(query: Value, layout: object) -> str | None:
    """Q_S from the query's size on the layout's sequence axis (BSND: 1, BNSD: 2, BSH: 1, SBH: 0; none in
    TND / NTD, where each sequence has its own length)."""
    if not isinstance(layout, str) or not query.tensor:
        return None
    query_part = layout.upper().split("_")[0]
    if "S" not in query_part:
        return None
    axis = query_part.index("S")
    known, rank = split(query.shape)
    if axis >= len(known) or (rank is not None and rank != len(query_part)):
        return None
    size = known[axis]
    if isinstance(size, int) and not isinstance(size, bool) and size >= 1:
        return ONE if size == 1 else SEVERAL
    return None


def _from_conditions(path: Path) -> str | None:
    """Q_S from the query-length branches the path took; None when they say nothing (or disagree)."""
    proven = {_from_choice(key, taken) for key, taken in path.choices if isinstance(taken, bool)} - {None}
    return proven.pop() if len(proven) == 1 else None


_CHOICES: dict[tuple[Key, bool], str | None] = tree_cache()
"""What each branch choice says about Q_S: past k guards that return, every path carries k choices."""


@reads_choices
def _proves_length(key: Key) -> bool:
    """A branch on a query length, which proves Q_S on one of its sides."""
    return _from_choice(key, True) is not None or _from_choice(key, False) is not None


def _from_choice(key: Key, taken: bool) -> str | None:
    if (key, taken) not in _CHOICES:
        _CHOICES[key, taken] = _choice_length(key, taken)
    return _CHOICES[key, taken]


def _choice_length(key: Key, taken: bool) -> str | None:
    frame, text = key
    found = _length_test(text)
    if found is not None:
        return _bounded(*found, taken)
    if text.isidentifier():
        flag = _flag_test(frame, text)
        if flag is not None:
            (name_test, polarity) = flag
            found = _length_test(name_test)
            return None if found is None else _bounded(*found, taken == polarity)
    return None


def _flag_test(frame: nodes.NodeNG, name: str) -> tuple[str, bool] | None:
    """The comparison a local flag is bound to, once in the frame: ``is_decode = q_len == 1``."""
    bindings = frame.locals.get(name, []) if isinstance(frame, (nodes.FunctionDef, nodes.Module)) else []
    if len(bindings) != 1 or not isinstance(bindings[0], nodes.AssignName):
        return None
    statement = bindings[0].parent
    if not isinstance(statement, nodes.Assign) or not isinstance(statement.value, nodes.Compare):
        return None
    (_, text), polarity = condition(statement.value)
    return text, polarity


_OPS = {ast.Gt: ">", ast.GtE: ">=", ast.Lt: "<", ast.LtE: "<=", ast.Eq: "=="}
_MIRRORED = {">": "<", ">=": "<=", "<": ">", "<=": ">=", "==": "=="}


@functools.lru_cache(maxsize=4096)
def _length_test(text: str) -> tuple[str, int] | None:
    """``(op, bound)`` when ``text`` compares a query length with an integer (``max_query_len > 1``,
    ``1 < q_len``), else None."""
    try:
        test = ast.parse(text, mode="eval").body
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and type(test.ops[0]) in _OPS):
        return None
    op, left, right = _OPS[type(test.ops[0])], test.left, test.comparators[0]
    if isinstance(left, ast.Constant):
        op, left, right = _MIRRORED[op], right, left
    if not (isinstance(right, ast.Constant) and type(right.value) is int and _names_query_length(left)):
        return None
    return op, right.value


def _names_query_length(expr: ast.expr) -> bool:
    name = expr.attr if isinstance(expr, ast.Attribute) else getattr(expr, "id", None)
    return isinstance(name, str) and bool(QUERY_LENGTH_NAME.match(name))


def _bounded(op: str, bound: int, holds: bool) -> str | None:
    """ONE or SEVERAL when ``length <op> bound`` being ``holds`` pins a length (at least 1) to 1 or above 1."""
    low, high = 1, math.inf
    if op == "==":
        if holds:
            low = high = bound
        elif bound == 1:
            low = 2
    else:
        if not holds:
            op, bound = {">": ("<=", bound), ">=": ("<", bound), "<": (">=", bound), "<=": (">", bound)}[op]
        if op == ">":
            low = max(low, bound + 1)
        elif op == ">=":
            low = max(low, bound)
        elif op == "<":
            high = bound - 1
        else:
            high = bound
    if low == high == 1:
        return ONE
    if low >= 2 and low <= high:
        return SEVERAL
    return None
