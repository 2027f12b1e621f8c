"""MLA preprocessing in the emulator: ``npu_mla_prolog_v3`` and its ``_functional`` form (unquantised).

The quantisation arguments (``dequant_scale_*``, ``quant_scale_*``, ``smooth_scales_cq``, the ``*_quant_mode``
and ``*_dtype`` arguments) and the scale corrections raise ``NotImplementedError`` naming the argument. Fake
kernels give the meta kernels' outputs (bfloat16 queries, empty float32 scales).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from kvlint.runtime_probe.reference import mla

from kvlint.catalogue import operators

Kernels = tuple[Callable[..., Any], Callable[..., Any]]
ACCEPTED = ("cache_index", "rmsnorm_epsilon_cq", "rmsnorm_epsilon_ckv", "cache_mode", "query_norm_flag")
DEFAULTS = {"actual_seq_len": None, "k_nope_clip_alpha": None, "weight_quant_mode": 0, "kv_cache_quant_mode": 0,
            "query_quant_mode": 0, "ckvkr_repo_mode": 0, "quant_scale_repo_mode": 0, "tile_size": 128,
            "qc_qr_scale": 1.0, "kc_scale": 1.0}  # fmt: skip
"""Arguments whose non-default values are not implemented (every other keyword must stay None)."""


def _checked(op: str, keywords: dict[str, Any]) -> dict[str, Any]:
    for name, value in keywords.items():
        if name not in ACCEPTED and value != DEFAULTS.get(name):
            raise NotImplementedError(f"{op}: argument {name!r}={value!r} is not implemented by the kvlint emulator")
    return {name: keywords[name] for name in ACCEPTED if name in keywords}


def _prolog(*args: Any, **keywords: Any) -> tuple[torch.Tensor, ...]:
    return mla.mla_prolog_v3(*args, **_checked("npu_mla_prolog_v3", keywords))


def _prolog_functional(*args: Any, **keywords: Any) -> tuple[torch.Tensor, ...]:
    """The five outputs, then updated copies of the two caches (the inputs stay as they are)."""
    *inputs, kv_cache, kr_cache = args
    kv_cache, kr_cache = kv_cache.clone(), kr_cache.clone()
    outputs = mla.mla_prolog_v3(*inputs, kv_cache, kr_cache, **_checked("npu_mla_prolog_v3_functional", keywords))
    return (*outputs, kv_cache, kr_cache)


def _outputs(token_x: torch.Tensor, weight_dq: torch.Tensor, weight_uq_qr: torch.Tensor, weight_uk: torch.Tensor,
             rope_sin: torch.Tensor, query_norm_flag: bool) -> tuple[torch.Tensor, ...]:  # fmt: skip
    lead, heads = token_x.shape[:-1], weight_uk.shape[0]
    norm = token_x.new_empty((*lead, weight_dq.shape[1]) if query_norm_flag else (0,), dtype=weight_uq_qr.dtype)
    return (token_x.new_empty((*lead, heads, weight_uk.shape[2]), dtype=torch.bfloat16),
            token_x.new_empty((*lead, heads, rope_sin.shape[-1]), dtype=torch.bfloat16),
            token_x.new_empty(0, dtype=torch.float32), norm, token_x.new_empty(0, dtype=torch.float32))  # fmt: skip


def _fake(token_x: torch.Tensor, weight_dq: torch.Tensor, weight_uq_qr: torch.Tensor, weight_uk: torch.Tensor,
          weight_dkv_kr: torch.Tensor, gamma_cq: torch.Tensor, gamma_ckv: torch.Tensor, rope_sin: torch.Tensor,
          rope_cos: torch.Tensor, kv_cache: torch.Tensor, kr_cache: torch.Tensor, **keywords: Any) -> tuple[torch.Tensor, ...]:  # fmt: skip
    return _outputs(token_x, weight_dq, weight_uq_qr, weight_uk, rope_sin, bool(keywords.get("query_norm_flag")))


def _fake_functional(*args: Any, **keywords: Any) -> tuple[torch.Tensor, ...]:
    kv_cache, kr_cache = args[9], args[10]
    return (*_fake(*args, **keywords), torch.empty_like(kv_cache), torch.empty_like(kr_cache))


KERNELS: dict[str, Kernels] = {
    "npu_mla_prolog_v3": (_prolog, _fake),
    "npu_mla_prolog_v3_functional": (_prolog_functional, _fake_functional),
}


def kernels(op: operators.Operator) -> Kernels | None:
    return KERNELS.get(op.name)
