"""What torch does to the values kvlint follows: factory calls with their default dtypes and literal
shapes, the torch functions and tensor methods that change dtype, shape or meaning, in-place changes,
indexing, and arithmetic (dtype promotion, constant folding). Meaning is kept as traits: a ``tril``
mask (TRIL), an additive ``-inf`` mask (ADDITIVE), a cache and a grown cache, repeated KV heads.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import replace

from astroid import nodes

from kvlint.analysis.axes import Plan, index_plan, int_constant, order_plan, planned_axes, planned_shape, roles, split
from kvlint.analysis.axes import swap, unsqueeze_plan
from kvlint.analysis.context import MAX_DEPTH, MAX_HOPS, Context, values
from kvlint.analysis.facts import (
    ADDITIVE,
    ADDITIVE_CAST,
    CACHE,
    CAST_METHODS,
    CUMULATIVE,
    EXPANDED,
    FLOAT_DTYPES,
    GROWN_CACHE,
    INTEGER_DTYPES,
    KV_REPEAT,
    META,
    NO_CONSTANT,
    RESHAPED,
    TOP_LEFT,
    TRIL,
    TYPED_TENSORS,
    UNKNOWN_VALUE,
    Alt,
    Dim,
    Value,
    constant,
    dtype_of,
    is_additive_scalar,
    is_number,
    mapped,
    scalar_dtype,
    tensor,
)
from kvlint.analysis.flow import Param, Path, reaching_definitions
from kvlint.analysis.names import qualified_name

SIZE_DEPTH = 6
"""How many steps a size argument is followed (``_dimension``)."""
FINFO = "torch.finfo()"
"""The qualname standing for what ``torch.finfo(...)`` returns: its ``.min`` is a large negative."""
_PRESERVING_METHODS = frozenset({
    "contiguous", "clone", "detach", "pin_memory", "requires_grad_", "narrow", "index_select", "select",
    "to_dense", "share_memory_",
})
_HOST_METHODS = frozenset({"tolist", "numpy"})
"""Methods giving the same numbers on the host, no longer a tensor: a list, or a numpy array."""
_REORDERING_METHODS = frozenset({"movedim", "flip"})
_FACTORIES = frozenset({"torch.ones", "torch.zeros", "torch.empty", "torch.rand", "torch.randn"})
_LIKE_FACTORIES = frozenset({
    "torch.ones_like", "torch.zeros_like", "torch.empty_like", "torch.full_like", "torch.rand_like",
    "torch.randn_like",
})
_CONCATENATIONS = frozenset({"torch.cat", "torch.concat", "torch.concatenate", "torch.stack"})
_INVERTING_FUNCTIONS = frozenset({"torch.logical_not", "torch.bitwise_not"})


def keyword_argument(call: nodes.Call, name: str) -> nodes.NodeNG | None:
    """The expression a call passes as keyword ``name``, or None."""
    for keyword in call.keywords or ():
        if keyword.arg == name:
            return keyword.value
    return None


# Torch functions --------------------------------------------------------------------------------------


def torch_function(qualname: str, call: nodes.Call, path: Path, context: Context) -> list[Alt]:
    """A call of ``torch.<qualname>`` (or a typed tensor constructor such as ``torch.LongTensor``); a
    ``device=`` argument that is ``"meta"`` on every path makes the tensors it builds meta tensors."""
    alts = _torch_function(qualname, call, path, context)
    device = keyword_argument(call, "device")
    if device is None or not any(alt.value.tensor for alt in alts):
        return alts
    meta = all(_is_meta(alt.value) for alt in values(device, path, context))
    return mapped(alts, lambda v: v.with_traits({META}) if meta and v.tensor else v.with_traits(drop={META}))


def _is_meta(device: Value) -> bool:
    return isinstance(device.const, str) and device.const.split(":")[0] == "meta"


def _torch_function(qualname: str, call: nodes.Call, path: Path, context: Context) -> list[Alt]:
    dtype_arg = keyword_argument(call, "dtype")
    first = call.args[0] if call.args else keyword_argument(call, "input")
    if qualname in _FACTORIES:
        shape = _size(call, path, context)
        return [Alt(tensor(d, shape, origin=call), p) for d, p in _dtype_choices(dtype_arg, "float32", path, context)]
    if qualname == "torch.full":
        fill_expr = call.args[1] if len(call.args) > 1 else keyword_argument(call, "fill_value")
        shape = _size(call, path, context, first_only=True)
        alts = []
        for fill in values(fill_expr, path, context):
            traits = frozenset({ADDITIVE}) if is_additive_scalar(fill.value) else frozenset()
            for dtype, reached in _dtype_choices(dtype_arg, scalar_dtype(fill.value.const), fill.path, context):
                alts.append(Alt(tensor(dtype, shape, traits, call), reached))
        return alts
    if qualname in _LIKE_FACTORIES:
        fill_expr = call.args[1] if len(call.args) > 1 else keyword_argument(call, "fill_value")
        alts = []
        for source in values(first, path, context):
            additive = qualname == "torch.full_like" and any(
                is_additive_scalar(f.value) for f in values(fill_expr, source.path, context))
            traits = frozenset({ADDITIVE}) if additive else frozenset()
            for dtype, reached in _dtype_choices(dtype_arg, source.value.dtype, source.path, context):
                alts.append(Alt(tensor(dtype, source.value.shape, traits, call), reached))
        return alts
    if qualname in ("torch.arange", "torch.randint"):
        numbers = [alt.value.const for arg in call.args for alt in values(arg, path, context)]
        default = "float32" if any(isinstance(n, float) for n in numbers) else "int64"
        return [Alt(tensor(d, (None,), origin=call), p) for d, p in _dtype_choices(dtype_arg, default, path, context)]
    if qualname in ("torch.tensor", "torch.as_tensor"):
        default = _data_dtype(first, path, context)
        kept = frozenset({CUMULATIVE}) if any(a.value.has(CUMULATIVE) for a in values(first, path, context)) else (
            frozenset())
        return [Alt(tensor(d, traits=kept, origin=call), p) for d, p in _dtype_choices(dtype_arg, default, path, context)]
    if qualname == "torch.cumsum":
        return [Alt(tensor(None, traits=frozenset({CUMULATIVE}), origin=call), path)]
    if qualname in TYPED_TENSORS:
        return [Alt(tensor(TYPED_TENSORS[qualname], origin=call), path)]
    if qualname == "torch.searchsorted":
        out_int32 = keyword_argument(call, "out_int32")
        if out_int32 is None or (isinstance(out_int32, nodes.Const) and out_int32.value is False):
            return [Alt(tensor("int64", origin=call), path)]
        return [Alt(UNKNOWN_VALUE, path)]
    if qualname in ("torch.tril", "torch.triu"):
        return mapped(values(first, path, context), lambda v: triangular(v, qualname == "torch.tril", call))
    if qualname in _INVERTING_FUNCTIONS:
        dtype = "bool" if qualname == "torch.logical_not" else None
        return mapped(values(first, path, context), lambda v: invert(v, dtype) if v.tensor else tensor(dtype))
    if qualname in _CONCATENATIONS:
        return _concatenation(first, path, context, grows=qualname != "torch.stack")
    if qualname == "torch.repeat_interleave":
        return mapped(values(first, path, context),
                      lambda v: replace(as_tensor(v).with_traits({KV_REPEAT}), origin=call))
    if qualname == "torch.masked_fill":
        fill_expr = call.args[2] if len(call.args) > 2 else keyword_argument(call, "value")
        return _masked_fill(values(first, path, context), fill_expr, context)
    if qualname == "torch.where" and len(call.args) == 3:
        return _where(call, path, context)
    if qualname == "torch.device" and isinstance(first, nodes.Const) and isinstance(first.value, str):
        return [Alt(constant(first.value), path)]
    if qualname in ("torch.finfo", "torch.iinfo"):
        return [Alt(Value(qualname=FINFO if qualname == "torch.finfo" else None), path)]
    return [Alt(UNKNOWN_VALUE, path)]


def _dtype_choices(expr: nodes.NodeNG | None, default: str | None, path: Path,
                   context: Context) -> list[tuple[str | None, Path]]:
    """The dtype a ``dtype=`` argument selects on each path (``default`` when it is not given)."""
    if expr is None:
        return [(default, path)]
    return [(dtype_of(alt.value), alt.path) for alt in values(expr, path, context)]


def _size(call: nodes.Call, path: Path, context: Context, first_only: bool = False) -> tuple[Dim, ...] | None:
    """The shape of a factory call's size arguments: ``(2048, 2048)``, ``2048, 2048`` or ``size=(...)``."""
    args = call.args[:1] if first_only else call.args
    size = keyword_argument(call, "size")
    if size is not None:
        args = [size]
    if len(args) == 1 and isinstance(args[0], (nodes.Tuple, nodes.List)):
        args = args[0].elts
    if not args or any(isinstance(a, nodes.Starred) for a in args):
        return None
    if len(args) == 1 and not isinstance(args[0], nodes.Const):
        single = values(args[0], path, context)
        if not all(isinstance(a.value.const, int) for a in single):
            return None
    return tuple(_dimension(arg, path, context) for arg in args)


def _dimension(expr: nodes.NodeNG, path: Path, context: Context) -> Dim:
    """A literal size, or the source text of a size the code computes at run time. Sizes are followed
    only a few steps, and not into callers or helpers."""
    shallow = replace(context, depth=max(context.depth, MAX_DEPTH - SIZE_DEPTH), hops=MAX_HOPS)
    found = [alt.value for alt in values(expr, path, shallow)]
    consts = {v.const for v in found}
    if len(consts) == 1 and isinstance(next(iter(consts)), int) and not isinstance(next(iter(consts)), bool):
        return next(iter(consts))
    if all(v.const is NO_CONSTANT and v.items is None and v.qualname is None for v in found):
        return _source_text(expr, context)
    return None


def _source_text(expr: nodes.NodeNG, context: Context) -> str:
    """How the code spells a size: a helper's parameter is spelled as its caller's argument."""
    if isinstance(expr, nodes.Name):
        definitions = reaching_definitions(expr.name, expr)
        if len(definitions) == 1 and isinstance(definitions[0][0], Param):
            param = definitions[0][0]
            argument, caller = (context.binding(param.function) or {}).get(param.name, (None, context))
            if argument is not None:
                return _source_text(argument, caller)
    return expr.as_string()


def _where(call: nodes.Call, path: Path, context: Context) -> list[Alt]:
    """``torch.where(cond, 0.0, float("-inf"))``: an additive mask when either branch is -inf."""
    alts = []
    for left in values(call.args[1], path, context):
        for right in values(call.args[2], left.path, context):
            branches = (left.value, right.value)
            if any(is_additive_scalar(v) or v.has(ADDITIVE) for v in branches):
                scalars = all(isinstance(v.const, float) for v in branches)
                alts.append(Alt(tensor("float32" if scalars else None, None, frozenset({ADDITIVE}), call), right.path))
            else:
                alts.append(Alt(UNKNOWN_VALUE, right.path))
    return alts


def _data_dtype(data: nodes.NodeNG | None, path: Path, context: Context) -> str | None:
    """The dtype ``torch.tensor(data)`` infers from literal data: int64 for ints, float32 if any float."""
    if isinstance(data, nodes.Call) and isinstance(data.func, nodes.Name) and data.func.name in ("range", "list"):
        inner = data.args[0] if data.args else None
        if data.func.name == "range" or (isinstance(inner, nodes.Call) and isinstance(inner.func, nodes.Name)
                                         and inner.func.name == "range"):
            return "int64"
        return None
    scalars = list(_literal_scalars(data))
    if not scalars or any(s is NO_CONSTANT for s in scalars):
        return None
    kinds = {scalar_dtype(s) for s in scalars}
    if None in kinds:
        return None
    for dtype in ("float32", "int64", "bool"):
        if dtype in kinds:
            return dtype
    return None


def _literal_scalars(data: nodes.NodeNG | None) -> Iterator[object]:
    if isinstance(data, (nodes.List, nodes.Tuple)):
        for element in data.elts:
            yield from _literal_scalars(element)
    elif isinstance(data, nodes.Const):
        yield data.value
    elif isinstance(data, nodes.UnaryOp) and data.op == "-" and isinstance(data.operand, nodes.Const):
        yield data.operand.value
    else:
        yield NO_CONSTANT


def _concatenation(sequence: nodes.NodeNG | None, path: Path, context: Context, grows: bool) -> list[Alt]:
    """``torch.cat`` / ``stack``: the common dtype of the parts; ``cat`` of a cache and more grows it."""
    if not isinstance(sequence, (nodes.List, nodes.Tuple)) or not sequence.elts:
        return [Alt(UNKNOWN_VALUE, path)]
    parts = [values(e, path, context) for e in sequence.elts]
    cached = any(alt.value.has(CACHE) for part in parts for alt in part)
    dtypes = {alt.value.dtype if alt.value.tensor else None for part in parts for alt in part}
    dtype = dtypes.pop() if len(dtypes) == 1 else None
    traits = frozenset({CACHE, GROWN_CACHE}) if cached and grows and len(parts) > 1 else frozenset()
    if grows and any(alt.value.has(CUMULATIVE) for part in parts for alt in part):
        traits |= {CUMULATIVE}
    return [Alt(tensor(dtype, traits=traits, origin=sequence.parent), path)]


def _masked_fill(receivers: list[Alt], fill_expr: nodes.NodeNG | None, context: Context) -> list[Alt]:
    alts = []
    for receiver in receivers:
        for fill in values(fill_expr, receiver.path, context):
            filled = as_tensor(receiver.value).with_traits(drop={TRIL})
            if is_additive_scalar(fill.value):
                filled = filled.with_traits({ADDITIVE})
            alts.append(Alt(filled, fill.path))
    return alts


def einops_repeat(call: nodes.Call, path: Path, context: Context) -> list[Alt]:
    """``einops.repeat(x, "b s h d -> b s (h g) d", g=groups)``: a pattern whose output groups an axis with one
    the input lacks copies the axis (KV_REPEAT); anything else is not followed."""
    pattern = call.args[1] if len(call.args) > 1 else keyword_argument(call, "pattern")
    if not call.args or not (isinstance(pattern, nodes.Const) and isinstance(pattern.value, str)):
        return [Alt(UNKNOWN_VALUE, path)]
    left, arrow, right = pattern.value.partition("->")
    inputs = set(left.replace("(", " ").replace(")", " ").split())
    if not arrow or not any(set(group.split()) - inputs for group in re.findall(r"\(([^)]*)\)", right)):
        return [Alt(UNKNOWN_VALUE, path)]
    return mapped(values(call.args[0], path, context),
                  lambda v: replace(as_tensor(v).reshaped(None).with_traits({KV_REPEAT}), origin=call))


def einops_rearrange(call: nodes.Call, path: Path, context: Context) -> list[Alt]:
    """``einops.rearrange(x, pattern)`` moves axes: the tensor keeps its dtype and what it was built from (a KV
    repeat, a cache); its shape is not followed."""
    if not call.args:
        return [Alt(UNKNOWN_VALUE, path)]
    return mapped(values(call.args[0], path, context),
                  lambda v: replace(tensor(v.dtype, traits=v.traits & {KV_REPEAT, CACHE, GROWN_CACHE}),
                                    origin=v.origin))


# Tensor methods ---------------------------------------------------------------------------------------


def tensor_method(receiver: Alt, method: str, call: nodes.Call, context: Context) -> list[Alt]:
    """A tensor method applied to one alternative of its receiver. A cast of an additive mask to an integer
    dtype is marked ADDITIVE_CAST, with the cast as its origin."""
    alts = _tensor_method(receiver, method, call, context)
    if not receiver.value.has(ADDITIVE) or method not in (*CAST_METHODS, "to", "type"):
        return alts
    return [Alt(replace(alt.value.with_traits({ADDITIVE_CAST}), origin=call), alt.path)
            if alt.value.tensor and alt.value.dtype in INTEGER_DTYPES else alt for alt in alts]


def _tensor_method(receiver: Alt, method: str, call: nodes.Call, context: Context) -> list[Alt]:
    value, path = as_tensor(receiver.value), receiver.path
    args = call.args
    if method in CAST_METHODS and not args:
        return [Alt(value.retyped(CAST_METHODS[method]), path)]
    if method == "to":
        return _converted(value, call, path, context)
    if method == "type":
        if not args and not call.keywords:
            return [Alt(UNKNOWN_VALUE, path)]
        target = args[0] if args else keyword_argument(call, "dtype")
        return [Alt(value.retyped(dtype_of(alt.value) or TYPED_TENSORS.get(alt.value.qualname or "")), alt.path)
                for alt in values(target, path, context)]
    if method == "view" and len(args) == 1:
        as_dtype = [dtype_of(alt.value) for alt in values(args[0], path, context)]
        if any(as_dtype):
            return [Alt(value.retyped(d), path) for d in set(as_dtype)]
    if method in ("view", "reshape", "flatten", "view_as", "reshape_as"):
        traits = {KV_REPEAT} if value.has(EXPANDED) else set()
        shape, axes = _reshaped(call, path, context) if method in ("view", "reshape") else (None, None)
        traits |= {RESHAPED} if shape is not None and split(shape)[1] is not None else set()
        return [Alt(value.reshaped(shape, axes).with_traits(traits, {EXPANDED, RESHAPED}), path)]
    if method == "unsqueeze":
        dim = _single_int(args[0], path, context) if len(args) == 1 else None
        rank = split(value.shape)[1]
        return [Alt(_planned(value, None if dim is None else unsqueeze_plan(rank, dim)), path)]
    if method in ("transpose", "swapaxes", "swapdims", "permute", "t"):
        return [Alt(_planned(value, _reordering(value, method, call, path, context)).with_traits(drop={TRIL}), path)]
    if method in ("expand", "expand_as"):
        return [Alt(replace(value.reshaped(None).with_traits({EXPANDED}), origin=call), path)]
    if method == "repeat_interleave":
        return [Alt(replace(value.reshaped(None).with_traits({KV_REPEAT}), origin=call), path)]
    if method == "cumsum":
        return [Alt(replace(value.with_traits({CUMULATIVE}), origin=call), path)]
    if method in ("cpu", "cuda", "npu"):
        return [Alt(value.with_traits(drop={META}), path)]
    if method in _PRESERVING_METHODS:
        return [Alt(value, path)]
    if method in _HOST_METHODS:
        return [Alt(replace(value, tensor=False), path)]
    if method in _REORDERING_METHODS:
        return [Alt(value.reshaped(None).with_traits(drop={TRIL}), path)]
    if method in ("logical_not", "bitwise_not"):
        return [Alt(invert(value, "bool" if method == "logical_not" else None), path)]
    if method in ("tril", "triu"):
        return [Alt(triangular(value, method == "tril", call), path)]
    if method == "eq" and len(args) == 1 and isinstance(args[0], nodes.Const) and args[0].value == 0:
        return [Alt(invert(value, "bool"), path)]
    if method in ("masked_fill", "masked_fill_"):
        fill_expr = args[1] if len(args) > 1 else keyword_argument(call, "value")
        return _masked_fill([Alt(value, path)], fill_expr, context)
    if method in ("new_ones", "new_zeros", "new_empty", "new_full"):
        return [Alt(tensor(d, origin=call), p)
                for d, p in _dtype_choices(keyword_argument(call, "dtype"), value.dtype, path, context)]
    return [Alt(UNKNOWN_VALUE, path)]


def _converted(value: Value, call: nodes.Call, path: Path, context: Context) -> list[Alt]:
    """``.to(...)``: a dtype argument converts; a device keeps the dtype; anything else is unknown."""
    candidates = list(call.args) + [k.value for k in call.keywords or () if k.arg in ("dtype", "device", "other")]
    alts = [Alt(value, path)]
    for arg in candidates:
        extended = []
        for current in alts:
            for alt in values(arg, current.path, context):
                dtype = dtype_of(alt.value)
                if dtype is not None:
                    extended.append(Alt(current.value.retyped(dtype), alt.path))
                elif _is_device(arg, alt.value):
                    moved = current.value.with_traits({META}) if _is_meta(alt.value) else current.value.with_traits(
                        drop={META})
                    extended.append(Alt(moved, alt.path))
                else:
                    extended.append(Alt(current.value.retyped(None), alt.path))
        alts = extended
    return alts


def _is_device(expr: nodes.NodeNG, value: Value) -> bool:
    if isinstance(value.const, (str, int)) and not isinstance(value.const, bool):
        return True
    if isinstance(expr, nodes.Attribute) and expr.attrname == "device":
        return True
    if isinstance(expr, nodes.Call) and qualified_name(expr.func) == "torch.device":
        return True
    return isinstance(expr, nodes.Name) and expr.name in ("device", "dev")


def _reshaped(call: nodes.Call, path: Path,
              context: Context) -> tuple[tuple[Dim, ...] | None, tuple[str | None, ...] | None]:
    """The shape ``view`` / ``reshape`` give, and the axis order their size arguments name."""
    args = call.args
    if len(args) == 1 and isinstance(args[0], (nodes.Tuple, nodes.List)):
        args = args[0].elts
    elif len(args) == 1 and not _one_size(args[0], path, context):
        return None, None
    if not args or any(isinstance(a, nodes.Starred) for a in args):
        return None, None
    dims = tuple(_dimension(a, path, context) for a in args)
    named = roles([None if int_constant(a) is not None else _source_text(a, context) for a in args])
    return tuple(None if d == -1 else d for d in dims), named


def _one_size(expr: nodes.NodeNG, path: Path, context: Context) -> bool:
    """Whether the single argument of ``view`` / ``reshape`` is one size (a 1-D result): an integer, a product
    or quotient (``b * s``), one axis's size (``x.size(0)``, ``x.shape[0]``, ``x.numel()``). A name or a sum
    may hold the whole shape (``new_shape = x.size()[:-1] + (heads, dim)``): the rank is then unknown."""
    if isinstance(expr, nodes.BinOp) and expr.op in ("*", "//"):
        return True
    if isinstance(expr, nodes.Call) and isinstance(expr.func, nodes.Attribute):
        return (expr.func.attrname == "size" and len(expr.args) == 1) or (
            expr.func.attrname == "numel" and not expr.args)
    if isinstance(expr, nodes.Subscript) and isinstance(expr.value, nodes.Attribute):
        return expr.value.attrname == "shape" and not isinstance(expr.slice, nodes.Slice)
    return isinstance(_dimension(expr, path, context), int)


def _planned(value: Value, planned: tuple[Plan, bool] | None) -> Value:
    """The tensor with its axes rearranged by a plan (``kvlint.analysis.axes``); unknown ones when None."""
    if planned is None:
        return value.reshaped(None)
    return value.reshaped(planned_shape(value.shape, planned), planned_axes(value.axes, planned))


def _reordering(value: Value, method: str, call: nodes.Call, path: Path,
                context: Context) -> tuple[Plan, bool] | None:
    """The plan of ``transpose(i, j)`` / ``swapaxes`` / ``permute(...)`` / ``t()`` with literal axes."""
    rank = split(value.shape)[1]
    if rank is None and value.axes is not None:
        rank = len(value.axes)
    args = list(call.args[0].elts) if len(call.args) == 1 and isinstance(call.args[0], (nodes.Tuple, nodes.List)) \
        else list(call.args)
    dims = [_single_int(arg, path, context) for arg in args]
    if any(d is None for d in dims) or call.keywords:
        return None
    if method == "permute":
        return order_plan(rank if rank is not None else len(dims), dims)
    if method == "t":
        dims = [0, 1] if rank in (None, 2) else []
    if len(dims) != 2:
        return None
    order = swap(rank, dims[0], dims[1])
    return None if order is None else order_plan(rank, order)


def _single_int(expr: nodes.NodeNG, path: Path, context: Context) -> int | None:
    found = {alt.value.const for alt in values(expr, path, context)}
    if len(found) == 1:
        value = found.pop()
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


def changed_in_place(previous: Alt, statement: nodes.NodeNG, context: Context) -> list[Alt]:
    """A tensor after an in-place change: its dtype and shape stay, what it means may not. Inverting or
    triangle methods are followed; filling with -inf makes it additive; anything else forgets the traits."""
    value = as_tensor(previous.value).with_traits(drop={TRIL, ADDITIVE})
    if isinstance(statement, nodes.Expr):
        method = statement.value.func.attrname
        if method in ("logical_not_", "bitwise_not_"):
            return [Alt(invert(previous.value), previous.path)]
        if method in ("tril_", "triu_"):
            return [Alt(triangular(previous.value, method == "tril_", statement.value), previous.path)]
        if method in ("masked_fill_", "fill_"):
            args = statement.value.args
            fill = args[-1] if args else None
            return [Alt(value.with_traits({ADDITIVE}) if is_additive_scalar(f.value) else value, f.path)
                    for f in values(fill, previous.path, context)]
        return [Alt(value, previous.path)]
    if isinstance(statement, nodes.Assign):
        return [Alt(value.with_traits({ADDITIVE}) if is_additive_scalar(f.value) else value, f.path)
                for f in values(statement.value, previous.path, context)]
    return [Alt(value, previous.path)]


# Mask traits, indexing, arithmetic --------------------------------------------------------------------


def as_tensor(value: Value) -> Value:
    """The value as a tensor: itself, else a tensor the code does not describe (a cache, or cumulative
    lengths, stay so)."""
    return value if value.tensor else tensor(None, traits=value.traits & {CACHE, CUMULATIVE})


def triangular(value: Value, lower: bool, call: nodes.Call) -> Value:
    """``tril`` (``lower``) or ``triu`` of a tensor. Over a rectangular (Q_S, KV_S) shape with the diagonal
    of a square causal mask (``triu`` 1, ``tril`` 0) the triangle is aligned top-left (TOP_LEFT)."""
    base = as_tensor(value)
    triangle = base.with_traits({TRIL}) if lower else base.with_traits(drop={TRIL})
    triangle = triangle.with_traits(drop={TOP_LEFT})
    if _diagonal(call) == (0 if lower else 1) and _rectangular(base.shape):
        triangle = triangle.with_traits({TOP_LEFT})
    return replace(triangle, origin=call)


def _diagonal(call: nodes.Call) -> object:
    """The literal ``diagonal`` of a ``tril``/``triu`` call (0 when omitted), else None."""
    method = isinstance(call.func, nodes.Attribute) and qualified_name(call.func) not in ("torch.tril", "torch.triu")
    positional = call.args[0 if method else 1:]
    expr = positional[0] if positional else keyword_argument(call, "diagonal")
    if expr is None:
        return 0
    return expr.value if isinstance(expr, nodes.Const) and type(expr.value) is int else None


def _rectangular(shape: tuple[Dim, ...] | None) -> bool:
    """The last two sizes are known and differ (``(q_len, kv_len)``, ``(8, 40)``)."""
    known, _ = split(shape)
    if len(known) < 2 or known[-1] is None or known[-2] is None:
        return False
    return known[-1] != known[-2]


def invert(value: Value, dtype: str | None = None) -> Value:
    """The mask with True and False swapped: a tril mask becomes a correct one."""
    inverted = value.with_traits(drop={TRIL})
    return inverted.retyped(dtype) if dtype else inverted


def indexed(value: Value, index: nodes.NodeNG) -> Value:
    """A tensor indexed by ``index``: ``None``, integers and slices rearrange a shape (``q[:, :, 0:1]`` has one
    query position, even when the rank of ``q`` is not known); a cache stays one. Indexing something the code
    does not describe with several slices (``q[:, -1:]``) makes a tensor."""
    parts = index.elts if isinstance(index, nodes.Tuple) else [index]
    several_slices = len(parts) > 1 and any(isinstance(p, nodes.Slice) for p in parts)
    if not value.tensor and not (value == UNKNOWN_VALUE.with_traits(value.traits) and several_slices):
        return UNKNOWN_VALUE.with_traits(value.traits & {CACHE, CUMULATIVE})
    value = as_tensor(value)
    rank = split(value.shape)[1]
    if rank is None and value.axes is not None:
        rank = len(value.axes)
    return replace(_planned(value, index_plan(rank, index)), const=NO_CONSTANT)


def combine(lefts: list[Alt], op: str, right_expr: nodes.NodeNG, path: Path, context: Context) -> list[Alt]:
    """``left <op> right`` for each alternative of the left operand, the right one followed on its path."""
    alts: list[Alt] = []
    for left in lefts:
        for right in values(right_expr, left.path, context):
            alts.append(Alt(_arithmetic(left.value, op, right.value), right.path))
    return alts


def _arithmetic(left: Value, op: str, right: Value) -> Value:
    if is_number(left.const) and is_number(right.const):
        try:
            return constant(_fold(left.const, op, right.const))
        except (ArithmeticError, ValueError, TypeError):
            return UNKNOWN_VALUE
    if op == "-" and left.const == 1 and right.tensor:
        return invert(right)
    additive = is_additive_scalar(left) or is_additive_scalar(right) or left.has(ADDITIVE) or right.has(ADDITIVE)
    tensors = [v for v in (left, right) if v.tensor]
    if not tensors:
        return tensor(None, traits=frozenset({ADDITIVE})) if additive and op == "*" else UNKNOWN_VALUE
    scalars = [v.const for v in (left, right) if not v.tensor]
    dtype = _promoted([t.dtype for t in tensors], scalars)
    traits = frozenset({ADDITIVE}) if additive and op in "*+-" else frozenset()
    return tensor(dtype, tensors[0].shape if len(tensors) == 1 else None, traits, tensors[0].origin)


def _fold(left: object, op: str, right: object) -> object:
    operations = {
        "+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b, "/": lambda a, b: a / b,
        "//": lambda a, b: a // b, "%": lambda a, b: a % b, "**": lambda a, b: a ** b,
    }
    if op not in operations:
        raise ValueError(op)
    if op == "**" and abs(right) > 64:
        raise ValueError("too large")
    return operations[op](left, right)


def _promoted(dtypes: list[str | None], scalars: list[object]) -> str | None:
    """The dtype of arithmetic between tensors and Python scalars (torch's promotion, simplified)."""
    if any(d is None for d in dtypes) or any(s is NO_CONSTANT for s in scalars):
        return None
    if len(set(dtypes)) != 1:
        return None
    dtype = dtypes[0]
    if dtype in FLOAT_DTYPES:
        return dtype
    if any(isinstance(s, float) for s in scalars):
        return "float32"
    if dtype == "bool" and any(isinstance(s, int) and not isinstance(s, bool) for s in scalars):
        return "int64"
    return dtype
