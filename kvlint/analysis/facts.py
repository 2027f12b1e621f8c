"""The abstract value kvlint follows to an operator argument.

A value is a Python constant, a dotted name (``torch.float16``, a function of the module), a tuple of
values, or a tensor described by what the code proves about it: its dtype, its shape (literal sizes, or the
source text of a size only known at run time; ``kvlint.analysis.axes``), the order of its axes where the code
names them, its device where it is ``meta``, and traits of how it was built. Everything not proved is
None, and a rule that needs it stays silent.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from astroid import nodes

from kvlint.analysis.flow import Path

Dim = int | str | None
"""A literal size, the source text of a size computed at run time, or None when unknown."""

TRIL = "tril"
"""Built by ``torch.tril`` and not inverted since: True/1 on the lower triangle."""
ADDITIVE = "additive"
"""Holds ``-inf`` / ``finfo.min`` (or another large negative) to be added to the scores."""
RESHAPED = "reshaped"
"""Given its rank by ``view`` / ``reshape`` with explicit sizes: the rank is the code's own statement."""
TOP_LEFT = "top-left"
"""A causal mask aligned top-left over a rectangular (Q_S, KV_S) shape: ``torch.triu(ones(q_len, kv_len),
diagonal=1)`` or ``~torch.tril(ones(q_len, kv_len))``; ``origin`` is the triangle."""
ADDITIVE_CAST = "additive-cast"
"""An additive mask converted to an integer dtype (``.to(torch.int8)``): ``-inf`` and ``finfo.min`` have no
integer value (undefined in C++; torch on x86 gives 0, "not masked"). ``origin`` is the cast."""
INTEGER_DTYPES = frozenset({"int8", "uint8", "int16", "int32", "int64"})
CACHE = "cache"
"""Named like a KV cache, or taken from one (``past_key_value[0]``, ``k_cache[:, :n]``)."""
CACHE_NAME = re.compile(r"(^|_)(past|cache|cached|caches|kvcache)(_|$)", re.IGNORECASE)
"""Identifiers that name a KV cache: ``k_cache``, ``past_key_value``, ``layer_past``, ``cached_keys``."""
GROWN_CACHE = "grown-cache"
"""A cache extended with the new keys: ``torch.cat`` of a CACHE part and another."""
KV_REPEAT = "kv-repeat"
"""KV heads copied to the query head count (``repeat_interleave``, ``expand`` then ``reshape``)."""
CUMULATIVE = "cumulative"
"""Running totals of sequence lengths (``torch.cumsum``, a ``cu_seqlens``-style name): what TND layouts take
as lengths, where the other layouts take one length per batch."""
CUMULATIVE_NAME = re.compile(r"^(cu|cum|cumulative)_|_cu_|cumsum|^cu_?seqlens|^(query|seq)_start_loc$", re.IGNORECASE)
"""Identifiers of cumulative lengths: ``cu_seqlens_q``, ``cu_q_lens``, ``cum_seq_lens``, ``query_start_loc``."""
META = "meta"
"""On the meta device (``device="meta"``, ``.to("meta")``): a shape and a dtype, no numbers."""
EXPANDED = "expanded"
"""The result of ``expand``: a view that ``reshape`` turns into a copy (KV_REPEAT)."""

DTYPES: dict[str, str] = {
    "torch.float16": "float16", "torch.half": "float16", "torch.bfloat16": "bfloat16",
    "torch.float32": "float32", "torch.float": "float32", "torch.float64": "float64", "torch.double": "float64",
    "torch.int8": "int8", "torch.uint8": "uint8", "torch.int16": "int16", "torch.short": "int16",
    "torch.int32": "int32", "torch.int": "int32", "torch.int64": "int64", "torch.long": "int64",
    "torch.bool": "bool",
}
"""Dotted torch dtype names -> canonical dtype."""
CAST_METHODS: dict[str, str] = {
    "int": "int32", "long": "int64", "half": "float16", "float": "float32", "double": "float64",
    "bfloat16": "bfloat16", "bool": "bool", "byte": "uint8", "char": "int8", "short": "int16",
}
"""Tensor methods that convert to a fixed dtype."""
TYPED_TENSORS: dict[str, str] = {
    "torch.LongTensor": "int64", "torch.IntTensor": "int32", "torch.BoolTensor": "bool",
    "torch.HalfTensor": "float16", "torch.FloatTensor": "float32", "torch.ByteTensor": "uint8",
    "torch.CharTensor": "int8", "torch.DoubleTensor": "float64", "torch.BFloat16Tensor": "bfloat16",
}
FLOAT_DTYPES = frozenset({"float16", "bfloat16", "float32", "float64"})
LARGE_NEGATIVE = -1.0e4
"""A scalar at or below this, added to scores, acts as a mask (old fp16 masks used -10000)."""


def is_torch_function(qualname: str | None) -> bool:
    """A callee in torch's namespace (``torch.ones``, ``torch.FloatTensor``, ``torch.nn.functional.pad``):
    the value follower models what it returns, and a tensor it builds is proved to be one."""
    return qualname is not None and qualname.startswith("torch.")


class _NoConstant:
    def __repr__(self) -> str:
        return "NO_CONSTANT"


NO_CONSTANT = _NoConstant()


@dataclass(frozen=True)
class Value:
    const: object = NO_CONSTANT
    qualname: str | None = None
    function: nodes.FunctionDef | None = None
    items: tuple[tuple[nodes.NodeNG, object], ...] | None = None
    """For a tuple or list: each element's expression and the evaluation context to follow it in."""
    tensor: bool = False
    dtype: str | None = None
    shape: tuple[Dim, ...] | None = None
    """Literal sizes, run-time spellings or None per axis; ends in ``kvlint.analysis.axes.MORE`` when the rank
    is not known."""
    axes: tuple[str | None, ...] | None = None
    """The role of each axis (``kvlint.analysis.axes.ROLES``) where the code proves an axis order."""
    traits: frozenset[str] = frozenset()
    origin: nodes.NodeNG | None = None
    """The expression that built the tensor (for KV_REPEAT: the repeat), for messages."""

    @property
    def is_none(self) -> bool:
        return self.const is None

    @property
    def known(self) -> bool:
        return self != UNKNOWN_VALUE

    def has(self, trait: str) -> bool:
        return trait in self.traits

    def with_traits(self, add: frozenset[str] | set[str] = frozenset(),
                    drop: frozenset[str] | set[str] = frozenset()) -> Value:
        return replace(self, traits=(self.traits - frozenset(drop)) | frozenset(add))

    def retyped(self, dtype: str | None) -> Value:
        """The same tensor converted to ``dtype`` (None: to a dtype the code does not show). Converted to
        anything but a float dtype, an additive mask is one no longer (``-inf`` becomes True)."""
        traits = self.traits if dtype in FLOAT_DTYPES else self.traits - {ADDITIVE}
        return replace(self, tensor=True, dtype=dtype, const=NO_CONSTANT, traits=traits)

    def reshaped(self, shape: tuple[Dim, ...] | None, axes: tuple[str | None, ...] | None = None) -> Value:
        return replace(self, shape=shape, axes=axes)


UNKNOWN_VALUE = Value()


def constant(value: object) -> Value:
    return Value(const=value)


def tensor(dtype: str | None, shape: tuple[Dim, ...] | None = None, traits: frozenset[str] = frozenset(),
           origin: nodes.NodeNG | None = None) -> Value:
    return Value(tensor=True, dtype=dtype, shape=shape, traits=traits, origin=origin)


def dtype_of(value: Value) -> str | None:
    """The dtype a value names (``torch.float16``), or None."""
    return DTYPES.get(value.qualname or "")


def is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def is_additive_scalar(value: Value) -> bool:
    """``-inf``, ``torch.finfo(...).min`` or another large negative constant."""
    return is_number(value.const) and value.const <= LARGE_NEGATIVE


def scalar_dtype(value: object) -> str | None:
    """The dtype torch gives a tensor built from a Python scalar (bool, int64, float32)."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int64"
    if isinstance(value, float):
        return "float32"
    return None


@dataclass(frozen=True)
class Alt:
    """One alternative value of an expression and the path on which it holds."""

    value: Value
    path: Path = field(default_factory=Path)


def mapped(alts: list[Alt], change: Callable[[Value], Value]) -> list[Alt]:
    """Each alternative's value changed, on the same path."""
    return [Alt(change(alt.value), alt.path) for alt in alts]
