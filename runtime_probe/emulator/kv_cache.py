"""The KV-cache operators of the emulator: ``scatter_update(_)``, ``npu_scatter_nd_update(_)``, ATB
``_npu_reshape_and_cache``, ``npu_scatter_pa_kv_cache(_functional)``, ``npu_kv_rmsnorm_rope_cache`` (v1, v2,
v2_functional) and ``npu_gather_pa_kv_cache(_functional)``.

The in-place forms keep a direct CPU kernel for eager calls; the ones that return their mutated input
(``Tensor(a!)``) decompose under tracing into the out-of-place twin plus ``copy_`` (``FUNCTIONAL_FORM``),
because torch.compile cannot functionalise a custom operator that returns ``Tensor(a!)``. The ones that
return nothing are functionalised by torch itself. Quantised caches raise ``NotImplementedError`` naming
the argument.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from kvlint.runtime_probe.emulator import formats
from kvlint.runtime_probe.reference import cache_writes
from kvlint.runtime_probe.reference import operators as reference

from kvlint.catalogue import operators

Kernels = tuple[Callable[..., Any], Callable[..., Any]]
REFERENCES: dict[str, Callable[..., object]] = {
    "scatter_update": reference.scatter_update,
    "scatter_update_": reference.scatter_update_,
    "npu_scatter_nd_update": reference.npu_scatter_nd_update,
    "npu_scatter_nd_update_": reference.npu_scatter_nd_update_,
}
FUNCTIONAL_FORM = {"scatter_update_": "scatter_update", "npu_scatter_nd_update_": "npu_scatter_nd_update"}
"""In-place operator -> its out-of-place twin."""
KV_RMSNORM_QUANTISATION = ("k_rope_scale", "c_kv_scale", "k_rope_offset", "c_kv_offset", "k_cache_dtype",
                           "ckv_cache_dtype")  # fmt: skip


def decomposed(functional: str, namespace: str) -> Callable[..., torch.Tensor]:
    """The in-place kernel used under tracing: the out-of-place twin, then ``copy_``."""

    def kernel(input: torch.Tensor, *args: object, **keywords: object) -> torch.Tensor:
        return input.copy_(getattr(getattr(torch.ops, namespace), functional)(input, *args, **keywords))

    return kernel


def _reshape_and_cache(key: torch.Tensor, value: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor,
                       slot_indices: torch.Tensor) -> None:  # fmt: skip
    """The NZ configuration only when both caches are NZ (``docs/operators/kv_cache_writes.md#kvc-c31``)."""
    features = key.shape[-2] * key.shape[-1], value.shape[-2] * value.shape[-1]
    cache_writes.reshape_and_cache(key, value, key_cache, value_cache, slot_indices,
                                   nz=formats.both_nz(key_cache, value_cache, *features))  # fmt: skip


def _scatter_pa_kv_cache_functional(key: torch.Tensor, value: torch.Tensor, key_cache: torch.Tensor,
                                    value_cache: torch.Tensor, slot_mapping: torch.Tensor,
                                    **keywords: Any) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    key_cache, value_cache = key_cache.clone(), value_cache.clone()
    cache_writes.scatter_pa_kv_cache(key, value, key_cache, value_cache, slot_mapping, **keywords)
    return key_cache, value_cache


def _kv_rmsnorm(kv: torch.Tensor, gamma: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, index: torch.Tensor,
                k_cache: torch.Tensor, ckv_cache: torch.Tensor, keywords: dict[str, Any],
                op: str) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    """Write the caches; (k_rope, c_kv), which the device returns whatever ``is_output_kv`` says."""
    for name in KV_RMSNORM_QUANTISATION:
        if keywords.get(name) is not None:
            raise NotImplementedError(f"{op}: argument {name!r} (quantised caches) is not implemented")
    if keywords.get("v") is not None:
        raise NotImplementedError(f"{op}: argument 'v' is not implemented by the kvlint emulator")
    return cache_writes.kv_rmsnorm_rope_cache(kv, gamma, cos, sin, index, k_cache, ckv_cache,
                                              epsilon=keywords.get("epsilon", 1e-5),
                                              cache_mode=keywords.get("cache_mode", "Norm"))  # fmt: skip


def _kv_rmsnorm_v1(kv: torch.Tensor, gamma: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, index: torch.Tensor,
                   k_cache: torch.Tensor, ckv_cache: torch.Tensor, **keywords: Any) -> tuple[torch.Tensor, ...]:  # fmt: skip
    """v1: writes the caches although its schema does not say so, and returns them first (kvc-c27)."""
    k_rope, c_kv = _kv_rmsnorm(kv, gamma, cos, sin, index, k_cache, ckv_cache, keywords, "npu_kv_rmsnorm_rope_cache")
    return k_cache, ckv_cache, k_rope, c_kv


def _kv_rmsnorm_v2(kv: torch.Tensor, gamma: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, index: torch.Tensor,
                   k_cache: torch.Tensor, ckv_cache: torch.Tensor, **keywords: Any) -> tuple[torch.Tensor, ...]:  # fmt: skip
    return _kv_rmsnorm(kv, gamma, cos, sin, index, k_cache, ckv_cache, keywords, "npu_kv_rmsnorm_rope_cache_v2")


def _kv_rmsnorm_v2_functional(kv: torch.Tensor, gamma: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                              index: torch.Tensor, k_cache: torch.Tensor, ckv_cache: torch.Tensor,
                              **keywords: Any) -> tuple[torch.Tensor, ...]:  # fmt: skip
    """v2_functional: updated copies of the caches, returned last (kvc-c29)."""
    k_cache, ckv_cache = k_cache.clone(), ckv_cache.clone()
    k_rope, c_kv = _kv_rmsnorm(kv, gamma, cos, sin, index, k_cache, ckv_cache, keywords,
                               "npu_kv_rmsnorm_rope_cache_v2_functional")  # fmt: skip
    return k_rope, c_kv, k_cache, ckv_cache


def _kv_outputs(kv: torch.Tensor, gamma: torch.Tensor, cos: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The meta kernels' (k_rope, c_kv): ``[B, N, S, Dr]`` and ``[B, N, S, Dc]`` in kv's dtype."""
    return kv.new_empty((*kv.shape[:-1], cos.shape[-1])), kv.new_empty((*kv.shape[:-1], gamma.shape[0]))


def _gather_functional(key_cache: torch.Tensor, value_cache: torch.Tensor, block_tables: torch.Tensor,
                       seq_lens: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                       **keywords: Any) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    key, value = key.clone(), value.clone()
    cache_writes.gather_pa_kv_cache(key_cache, value_cache, block_tables, seq_lens, key, value, **keywords)
    return key, value


def _nothing(*args: object, **keywords: object) -> None:
    """Fake kernel of an operator that writes its arguments in place and returns nothing."""


KERNELS: dict[str, Kernels] = {
    "_npu_reshape_and_cache": (_reshape_and_cache, _nothing),
    "npu_scatter_pa_kv_cache": (cache_writes.scatter_pa_kv_cache, _nothing),
    "npu_scatter_pa_kv_cache_functional": (
        _scatter_pa_kv_cache_functional,
        lambda key, value, key_cache, value_cache, *a, **k: (torch.empty_like(key_cache), torch.empty_like(value_cache)),
    ),
    "npu_kv_rmsnorm_rope_cache": (
        _kv_rmsnorm_v1,
        lambda kv, gamma, cos, sin, index, k_cache, ckv_cache, **k: (
            torch.empty_like(k_cache), torch.empty_like(ckv_cache), *_kv_outputs(kv, gamma, cos)),
    ),
    "npu_kv_rmsnorm_rope_cache_v2": (
        _kv_rmsnorm_v2, lambda kv, gamma, cos, sin, *a, **k: _kv_outputs(kv, gamma, cos),
    ),
    "npu_kv_rmsnorm_rope_cache_v2_functional": (
        _kv_rmsnorm_v2_functional,
        lambda kv, gamma, cos, sin, index, k_cache, ckv_cache, **k: (
            *_kv_outputs(kv, gamma, cos), torch.empty_like(k_cache), torch.empty_like(ckv_cache)),
    ),
    "npu_gather_pa_kv_cache": (cache_writes.gather_pa_kv_cache, _nothing),
    "npu_gather_pa_kv_cache_functional": (
        _gather_functional,
        lambda key_cache, value_cache, block_tables, seq_lens, key, value, **k: (torch.empty_like(key),
                                                                                  torch.empty_like(value)),
    ),
}  # fmt: skip


def kernels(op: operators.Operator) -> Kernels | None:
    """(CPU kernel, fake kernel) of one cache overload, or None for another operator."""
    function = REFERENCES.get(op.name)
    if function is not None:
        return function, lambda input, indices, updates, *axis: torch.empty_like(input)
    return KERNELS.get(op.name)
