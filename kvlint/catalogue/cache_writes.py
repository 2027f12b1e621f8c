"""The KV-cache write operators as facts: which argument is the cache, where the rows land, what is written.

One row per operator. The probe reads this table to follow cache writes across layers (KVL505), to find
the slots a step wrote (KVL508, KVL509) and to tell a decoder from an encoder (KVL507); a new write
operator plugs in with one row. ``tests/test_probe_cache_positions.py`` fails when an operator of the
catalogue writes a ``*cache*`` argument (``Tensor(a!)``) and has no row here.

How the ``positions`` argument addresses the cache (constraint ids of ``docs/operators/kv_cache_writes.md``):

- ``STARTS``: ``positions[b]`` is the first position of batch row ``b`` along the ``axis`` argument;
  ``source.size(axis)`` consecutive positions are written (KVC-C5).
- ``COORDINATES``: each row of ``positions`` (last dimension ``a``) indexes the leading ``a`` axes of the
  cache (KVC-C9).
- ``SLOTS``: ``positions[t]`` is token ``t``'s slot, ``block * block_size + offset``, in a cache whose axis 0
  is the block and whose ``token_axis`` (of size block_size) the offset (KVC-C12, KVC-C21, and ATB's
  ``_npu_reshape_and_cache``: KVC-C32); negative slots are padding.
- ``ROW_OFFSETS``: ``positions[b, s]`` is the position of token ``s`` of batch row ``b`` along ``token_axis``
  (KVC-C21, ``cache_mode='Norm'``).

Nothing here imports torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field

STARTS = "starts"
COORDINATES = "coordinates"
SLOTS = "slots"
ROW_OFFSETS = "row offsets"


@dataclass(frozen=True)
class Addressing:
    """How one layout of a write operator places its rows."""

    kind: str
    token_axis: int | None = None
    """The cache axis the offset runs along (``SLOTS``, ``ROW_OFFSETS``); ``STARTS`` takes the ``axis`` argument."""


@dataclass(frozen=True)
class CacheWrite:
    cache: str
    """The cache argument that the attention call reads as its key (the latent cache for MLA)."""
    positions: str
    source: str
    """The new keys written (the tensor an attention call may read directly in prefill)."""
    layouts: dict[object, Addressing] = field(default_factory=dict)
    """Value of ``mode`` -> addressing; the key None when the operator has no mode argument."""
    mode: str | None = None
    result: int | None = None
    """The operator returns the written cache instead of writing ``cache``: its index in the result (0 for a
    single tensor); None when ``cache`` is written in place."""
    computed: bool = False
    """The rows written are computed from the arguments (RMSNorm and RoPE of ``kv``), not copied from them:
    two tokens' equal arguments do not show equal rows (KVL508)."""


_STARTS = {None: Addressing(STARTS)}
_COORDINATES = {None: Addressing(COORDINATES)}
_PAGED = {"Norm": Addressing(SLOTS, 1), None: Addressing(SLOTS, 1), "PA_NZ": Addressing(SLOTS, 2)}
"""npu_scatter_pa_kv_cache: ND caches ``[blocks, block_size, N, D]``, NZ ``[blocks, N*D/16, block_size, 16]``."""
_RMSNORM = {"Norm": Addressing(ROW_OFFSETS, 2), "PA": Addressing(SLOTS, 1), "PA_BNSD": Addressing(SLOTS, 1),
            "PA_NZ": Addressing(SLOTS, 2)}
"""npu_kv_rmsnorm_rope_cache: ``[B, 1, cache_len, D]``, ``[blocks, block_size, 1, D]`` or NZ
``[blocks, D/16, block_size, 1, 16]`` (the PA_BLK modes, one index per block, are not modelled)."""

CACHE_WRITES: dict[str, CacheWrite] = {
    "scatter_update": CacheWrite("input", "indices", "updates", _STARTS, result=0),
    "scatter_update_": CacheWrite("input", "indices", "updates", _STARTS),
    "npu_scatter_nd_update": CacheWrite("input", "indices", "updates", _COORDINATES, result=0),
    "npu_scatter_nd_update_": CacheWrite("input", "indices", "updates", _COORDINATES),
    "npu_scatter_pa_kv_cache": CacheWrite("key_cache", "slot_mapping", "key", _PAGED, mode="cache_mode"),
    "npu_scatter_pa_kv_cache_functional": CacheWrite("key_cache", "slot_mapping", "key", _PAGED, mode="cache_mode",
                                                     result=0),
    "_npu_reshape_and_cache": CacheWrite("key_cache", "slot_indices", "key", {None: Addressing(SLOTS, 1)}),
    "npu_kv_rmsnorm_rope_cache": CacheWrite("ckv_cache", "index", "kv", _RMSNORM, mode="cache_mode", computed=True),
    "npu_kv_rmsnorm_rope_cache_v2": CacheWrite("ckv_cache", "index", "kv", _RMSNORM, mode="cache_mode", computed=True),
    "npu_kv_rmsnorm_rope_cache_v2_functional": CacheWrite("ckv_cache", "index", "kv", _RMSNORM, mode="cache_mode",
                                                          result=3, computed=True),
}
"""Cache write operator -> its facts. ``npu_kv_rmsnorm_rope_cache`` v1 declares no mutation but writes its
caches in place (KVC-C27)."""

NOT_MODELLED: dict[str, str] = {
    "npu_scatter_pa_cache": "no documentation page (KVC-C18): the cache layout its slots address is not documented",
    "npu_mla_prolog_v3": "the keys are computed inside the operator; kvlint does not model its writes (KVC-C34)",
}
"""Operators that write a cache argument and have no row, with the reason: the probe follows none of their
writes (no KVL505/KVL508/KVL509/KVL510 from them, and no decoder evidence), rather than guess where their rows
land."""
