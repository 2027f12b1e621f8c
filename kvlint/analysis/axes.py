"""Shapes and axis orders of tensors: what indexing, ``unsqueeze``, ``transpose`` and ``permute`` do to them,
and the role of an axis the code names.

A *shape* is a tuple of sizes (``kvlint.analysis.facts.Dim``). When the rank is not known it ends in
``MORE``: the sizes before it are the tensor's first axes and more may follow, so ``q[:, :, 0:1]`` of a tensor
of unknown rank has the shape ``(None, None, 1, MORE)``. An *axis order* gives each axis of a tensor of known
rank its role where the code names it, one of ``ROLES`` or None: ``B, N, S, D = q.shape`` and
``x.view(bsz, q_len, self.num_heads, self.head_dim)`` both prove one; ``transpose`` and ``permute`` reorder it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from astroid import nodes

MORE = ...
"""The last element of a shape whose rank is not known."""
ROLES = ("B", "S", "N", "D")
"""Batch, sequence (query or key/value length), heads, head dimension."""

_QUERY_HEAD_COUNTS = (r"nh|heads|n_heads|nheads|num_heads|num_head|head_num|heads_num|n_head|num_q_heads|"
                      r"num_query_heads|q_heads|num_attention_heads|num_local_heads|local_heads|num_heads_per_rank|"
                      r"q_head_num")
"""Spellings of a query head count: an axis role (N) here, and KVL105's evidence that the code has one."""
_KV_HEAD_COUNTS = r"num_kv_heads|n_kv_heads|kv_heads|num_key_value_heads|kv_head_num"
_QUERY_HEADS = re.compile(rf"^({_QUERY_HEAD_COUNTS})$")

_ROLE_NAMES = {
    "B": re.compile(r"^(bs|bsz|bsize|batch|batches|batch_size|batchsize|n_batch|num_batch|num_batches|nbatch)$"),
    "S": re.compile(r"^(seq|seqlen|seq_len|seq_length|sq|skv|s_q|s_kv|q_len|qlen|q_seq_len|q_seqlen|query_len|"
                    r"query_length|kv_len|kv_seq_len|kv_seqlen|key_len|tgt_len|src_len|seq_q|seq_kv|"
                    r"num_tokens|n_tokens|tokens)$"),
    "N": re.compile(rf"^({_QUERY_HEAD_COUNTS}|{_KV_HEAD_COUNTS})$"),
    "D": re.compile(r"^(hd|head_dim|head_dims|head_size|headdim|dim_head|d_head|d_k|dk|dv|d_v|qk_head_dim|"
                    r"v_head_dim|kv_head_dim|head_dim_qk|head_dim_v)$"),
}
_LETTERS = {"b": "B", "s": "S", "l": "S", "d": "D"}
"""Single letters whose role does not depend on the others (``n`` and ``h`` do: see ``roles``)."""


def role(text: str | None) -> str | None:
    """The role a size's spelling names (``self.num_heads`` -> N), from its last identifier; None when the
    spelling is an expression or names no role."""
    if text is None:
        return None
    last = text.rpartition(".")[2].lower()
    if not last.isidentifier():
        return None
    for name, pattern in _ROLE_NAMES.items():
        if pattern.match(last):
            return name
    return _LETTERS.get(last)


def names_query_heads(text: str) -> bool:
    """Whether a spelling's last identifier names a count of query heads (``num_heads``,
    ``config.num_attention_heads``, ``attn.heads``); a key/value head count (``num_kv_heads``) does not."""
    return bool(_QUERY_HEADS.match(text.rpartition(".")[2].lower()))


def roles(texts: Sequence[str | None]) -> tuple[str | None, ...] | None:
    """The axis order a sequence of size spellings proves, or None when it proves no role.

    ``n`` and ``h`` are heads beside a named sequence axis (``B, N, S, D``; ``b, h, s, d``); beside each other
    (``B, H, N, D``, vision code) ``h`` is the heads and ``n`` the tokens; otherwise they prove nothing
    (``B, N, C`` is tokens and channels in vision code).
    """
    found = [role(text) for text in texts]
    letters = [(text or "").rpartition(".")[2].lower() for text in texts]
    for index, letter in enumerate(letters):
        if letter == "n" and found[index] is None:
            found[index] = "N" if "S" in found else ("S" if "h" in letters else None)
        elif letter == "h" and found[index] is None:
            found[index] = "N" if "S" in found or "n" in letters else None
    if not any(found) or len({r for r in found if r}) != len([r for r in found if r]):
        return None
    return tuple(found)


Plan = tuple[tuple[int | None, nodes.Slice | None], ...]
"""For each axis of a result: the axis of the source it is (None: a new axis of size 1) and the slice taken."""


def split(shape: tuple[object, ...] | None) -> tuple[tuple[object, ...], int | None]:
    """The known sizes of a shape and its rank (None when not known)."""
    if shape is None:
        return (), None
    if shape and shape[-1] is MORE:
        return shape[:-1], None
    return shape, len(shape)


def index_plan(rank: int | None, index: nodes.NodeNG) -> tuple[Plan, bool] | None:
    """What ``tensor[index]`` keeps of a tensor of ``rank`` axes (None: unknown), and whether more axes may
    follow; None when the index is not made of ``None``, ``...``, integers and slices."""
    parts = list(index.elts) if isinstance(index, nodes.Tuple) else [index]
    ellipses = [i for i, part in enumerate(parts) if isinstance(part, nodes.Const) and part.value is Ellipsis]
    if len(ellipses) > 1:
        return None
    more = rank is None
    if ellipses:
        at = ellipses[0]
        if rank is None:
            parts = parts[:at]
        else:
            used = sum(1 for part in parts if not _is_none(part)) - 1
            if used > rank:
                return None
            parts = parts[:at] + [None] * (rank - used) + parts[at + 1:]
    plan: list[tuple[int | None, nodes.Slice | None]] = []
    source = 0
    for part in parts:
        if part is not None and _is_none(part):
            plan.append((None, None))
        elif part is not None and int_constant(part) is not None:
            source += 1
        elif part is None or isinstance(part, nodes.Slice):
            plan.append((source, part))
            source += 1
        else:
            return None
    if rank is not None:
        if source > rank:
            return None
        plan.extend((axis, None) for axis in range(source, rank))
    return tuple(plan), more


def unsqueeze_plan(rank: int | None, dim: int) -> tuple[Plan, bool] | None:
    """``unsqueeze(dim)``: a new axis of size 1 at ``dim``."""
    if rank is None:
        return (tuple((axis, None) for axis in range(dim)) + ((None, None),), True) if dim >= 0 else None
    if not -rank - 1 <= dim <= rank:
        return None
    at = dim if dim >= 0 else rank + 1 + dim
    axes = [(axis, None) for axis in range(rank)]
    return tuple(axes[:at] + [(None, None)] + axes[at:]), False


def order_plan(rank: int | None, order: Sequence[int]) -> tuple[Plan, bool] | None:
    """The axes in a new order (``permute``); ``order`` may name only the first axes when the rank is not
    known (``transpose(1, 2)``)."""
    if rank is not None and len(order) != rank:
        return None
    count = len(order)
    normalized = [axis + count if axis < 0 else axis for axis in order]
    if sorted(normalized) != list(range(count)) or (rank is None and any(axis < 0 for axis in order)):
        return None
    return tuple((axis, None) for axis in normalized), rank is None


def swap(rank: int | None, first: int, second: int) -> list[int] | None:
    """The order of ``transpose(first, second)`` over the axes it must know."""
    if rank is not None:
        first, second = (first + rank if first < 0 else first), (second + rank if second < 0 else second)
        if not (0 <= first < rank and 0 <= second < rank):
            return None
        count = rank
    elif first < 0 or second < 0:
        return None
    else:
        count = max(first, second) + 1
    order = list(range(count))
    order[first], order[second] = order[second], order[first]
    return order


def planned_shape(shape: tuple[object, ...] | None, planned: tuple[Plan, bool]) -> tuple[object, ...]:
    """The shape after a plan: kept sizes, new axes of size 1, and the length of a slice where it is known."""
    known, _ = split(shape)
    plan, more = planned
    dims: list[object] = []
    for source, taken in plan:
        if source is None:
            dims.append(1)
            continue
        size = known[source] if source < len(known) else None
        dims.append(size if taken is None else slice_length(taken, size))
    return tuple(dims) + ((MORE,) if more else ())


def planned_axes(axes: tuple[str | None, ...] | None, planned: tuple[Plan, bool]) -> tuple[str | None, ...] | None:
    """The axis order after a plan (a new axis has no role); None when the result's rank is not known."""
    plan, more = planned
    if axes is None or more:
        return None
    return tuple(None if source is None else axes[source] for source, _ in plan)


def slice_length(taken: nodes.Slice, size: object) -> object:
    """How many elements ``taken`` keeps of an axis of ``size`` (taken to be long enough when unknown):
    ``0:1``, ``:1`` and ``-1:`` keep one, ``:`` keeps the size."""
    if taken.lower is None and taken.upper is None and taken.step is None:
        return size
    if taken.step is not None and int_constant(taken.step) != 1:
        return None
    lower = 0 if taken.lower is None else int_constant(taken.lower)
    upper = None if taken.upper is None else int_constant(taken.upper)
    if lower is None or (taken.upper is not None and upper is None):
        return None
    if upper is None:
        if lower < 0:
            return -lower if not isinstance(size, int) else min(-lower, size)
        return size - lower if isinstance(size, int) and size >= lower else None
    if (lower < 0) != (upper < 0) and not isinstance(size, int):
        return None
    if isinstance(size, int):
        lower, upper = (lower + size if lower < 0 else lower), (upper + size if upper < 0 else upper)
        return max(min(upper, size) - max(lower, 0), 0)
    return max(upper - lower, 0)


def int_constant(node: nodes.NodeNG) -> int | None:
    """The integer a literal spells (``2``, ``-1``), or None."""
    if isinstance(node, nodes.UnaryOp) and node.op == "-":
        inner = int_constant(node.operand)
        return None if inner is None else -inner
    if isinstance(node, nodes.Const) and isinstance(node.value, int) and not isinstance(node.value, bool):
        return node.value
    return None


def _is_none(node: nodes.NodeNG) -> bool:
    return isinstance(node, nodes.Const) and node.value is None
