"""One live operator call as the checks see it: arguments bound to the schema, and the shapes they imply.

Binding uses the catalogue (the same parsed schemas as the static rules), so a check reads
``call.get("sparse_mode")`` whether the user passed it or left the default. Host reads of device values
(length lists given as tensors, block ids) happen at most once per call and only when a check asks.
Facts: docs/operators/fused_infer_attention.md#fia-c1 (layouts), #fia-c34 (paged caches),
docs/operators/dispatcher.md#dsp-c14 (length types).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import torch
from kvlint.runtime_probe.reference.constraints import Violation, violations

from kvlint.catalogue.operators import (
    INFERENCE_ATTENTION,
    KV_LENGTHS_PARAM,
    LAYOUTS,
    LENGTH_LAYOUTS,
    NO_DEFAULT,
    NUM_HEADS_PARAM,
    QUERY_LENGTHS_PARAM,
    Operator,
)

QUERY_FORMS = {"BSH": 3, "BSND": 4, "BNSD": 4, "TND": 3, "NTD": 3, "NSD": 3}
"""The form of query/key/value for each input layout prefix, and its rank. The letters are the axes."""


def bind(op: Operator, args: tuple[object, ...], kwargs: dict[str, object]) -> dict[str, object] | None:
    """Every parameter of ``op`` with its value, defaults filled in; None when the call does not fit the
    schema (the operator itself will raise, and static rule KVL101/KVL103 covers it)."""
    positional = op.positional
    if len(args) > len(positional):
        return None
    bound = {param.name: value for param, value in zip(positional, args)}
    for name, value in kwargs.items():
        if name in bound or name not in _defaults(op):
            return None
        bound[name] = value
    for name, default in _defaults(op).items():
        if name not in bound:
            if default is NO_DEFAULT:
                return None
            bound[name] = default
    return bound


_DEFAULTS: dict[tuple[str, str], dict[str, object]] = {}


def _defaults(op: Operator) -> dict[str, object]:
    """Parameter name -> default (``NO_DEFAULT`` when required), in schema order; built once per overload."""
    key = (op.name, op.overload)
    if key not in _DEFAULTS:
        _DEFAULTS[key] = {param.name: param.default for param in op.params}
    return _DEFAULTS[key]


def is_concrete(value: object) -> bool:
    """True unless ``value`` is (or holds) a meta tensor or a tensor subclass such as FakeTensor."""
    if isinstance(value, torch.Tensor):
        return type(value) in (torch.Tensor, torch.nn.Parameter) and value.device.type != "meta"
    if isinstance(value, (list, tuple)):
        return all(is_concrete(item) for item in value if isinstance(item, (torch.Tensor, list, tuple)))
    return True


def axes(shape: torch.Size, form: str) -> dict[str, int] | None:
    """``{"B": .., "S": .., "H": ..}`` for a BSH shape, etc.; None when the rank does not fit the form."""
    return dict(zip(form, shape)) if len(shape) == len(form) else None


@dataclass
class Geometry:
    """Sizes of an attention call read from its tensors and head-count arguments (None: unknown)."""

    form: str
    varlen: bool
    paged: bool
    batch: int | None
    q_seq: int
    """S of the query, or T for the varlen forms."""
    q_heads_axis: int | None
    head_dim: int | None
    kv_seq: int | None
    """S (or T) of key when not paged."""
    kv_heads_axis: int | None
    kv_head_dim: int | None
    kv_hidden: int | None
    """H of a BSH key or of a [num_blocks, block_size, H] cache."""


@dataclass
class LiveCall:
    op: Operator
    args: dict[str, object]
    concrete: bool
    _lengths: dict[str, list[int] | None] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.op.name

    def get(self, name: str) -> object:
        return self.args.get(name)

    @property
    def is_attention(self) -> bool:
        return self.name in INFERENCE_ATTENTION

    @property
    def layout(self) -> str:
        return str(self.get("input_layout"))

    @property
    def num_heads(self) -> int:
        return int(self.get(NUM_HEADS_PARAM[self.name]))  # type: ignore[call-overload]

    @property
    def num_kv_heads(self) -> int:
        return int(self.get("num_key_value_heads")) or self.num_heads  # type: ignore[call-overload]

    @property
    def query_lengths_param(self) -> str | None:
        return QUERY_LENGTHS_PARAM.get(self.name)

    @property
    def kv_lengths_param(self) -> str:
        return KV_LENGTHS_PARAM[self.name]

    def lengths(self, param: str | None) -> list[int] | None:
        """A length argument as host ints (one device read, cached); None if absent or not readable."""
        if param is None:
            return None
        if param not in self._lengths:
            self._lengths[param] = self._read_lengths(self.get(param))
        return self._lengths[param]

    def _read_lengths(self, value: object) -> list[int] | None:
        if value is None or not is_concrete(value):
            return None
        if isinstance(value, torch.Tensor):
            return [int(v) for v in value.reshape(-1).tolist()]
        return [int(v) for v in value]  # type: ignore[union-attr]

    @cached_property
    def constraint_violations(self) -> dict[str, Violation]:
        """The first violated documented constraint per probe code (``reference.constraints``), found once
        per call. Metadata only (shapes, dtypes, scalar arguments): a pure function of the call's signature."""
        found: dict[str, Violation] = {}
        for violation in violations(self.name, self.args):
            found.setdefault(violation.constraint.code, violation)
        return found

    @cached_property
    def host_block_table(self) -> torch.Tensor:
        """The block table on the host: one device read per call, shared by KVL504 and the cache figures."""
        return self.get("block_table").to("cpu", copy=True)  # type: ignore[union-attr]

    @cached_property
    def geometry(self) -> Geometry | None:
        """Sizes of an attention call; None when the layout or the query rank is not understood."""
        if not self.is_attention or self.layout not in LAYOUTS[self.name]:
            return None
        form = self.layout.partition("_")[0]
        query, key = self.get("query"), self.get("key")
        if not isinstance(query, torch.Tensor) or not isinstance(key, torch.Tensor):
            return None
        q = axes(query.shape, form)
        if q is None:
            return None
        varlen = self.layout in LENGTH_LAYOUTS or form == "NTD"
        paged = self.get("block_table") is not None
        q_lengths = self.lengths(self.query_lengths_param)
        batch = (len(q_lengths) if q_lengths else None) if varlen else q.get("B", 1)
        head_dim = q.get("D")
        if form == "BSH" and self.num_heads > 0 and q["H"] % self.num_heads == 0:
            head_dim = q["H"] // self.num_heads
        kv = self._cache_axes(key) if paged else axes(key.shape, form)
        kv = kv or {}
        return Geometry(
            form=form, varlen=varlen, paged=paged, batch=batch,
            q_seq=q.get("T", q.get("S", 1)), q_heads_axis=q.get("N"), head_dim=head_dim,
            kv_seq=None if paged else kv.get("T", kv.get("S")),
            kv_heads_axis=kv.get("N"), kv_head_dim=kv.get("D"), kv_hidden=kv.get("H"),
        )  # fmt: skip

    def _cache_axes(self, cache: torch.Tensor) -> dict[str, int] | None:
        """Axes of a paged cache: [blocks, bs, H], [blocks, bs, N, D], [blocks, N, bs, D] or NZ 5-D."""
        shape = cache.shape
        if len(shape) == 3:
            return {"H": shape[2]}
        if len(shape) == 4:
            block_size = self.get("block_size")
            return {"N": shape[2], "D": shape[3]} if shape[1] == block_size else {"N": shape[1], "D": shape[3]}
        if len(shape) == 5:
            return {"N": shape[1], "D": shape[2] * shape[4]}
        return None

    def per_batch_kv_lengths(self, batch: int | None) -> list[int] | None:
        """KV lengths per batch entry (a length-1 list broadcasts); None when unknown or cumulative."""
        lengths = self.lengths(self.kv_lengths_param)
        if lengths is None or batch is None:
            return None
        if len(lengths) == 1:
            return lengths * batch
        return lengths[:batch] if len(lengths) >= batch else None
