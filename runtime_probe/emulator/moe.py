"""MoE operators of the emulator: gating (``npu_moe_gating_top_k(_softmax)``), routing
(``npu_moe_init_routing(_v2)``, ``npu_moe_compute_expert_tokens``, ``npu_moe_finalize_routing``), the expert
FFN (``npu_grouped_matmul``, ``npu_swiglu``), ``npu_transpose_batchmatmul`` (MLA's batched projections) and
``npu_prefetch`` (a no-op: there is no cache to warm).

Fake kernels give the meta kernels' shapes and dtypes (expert ids and row indices int32, token counts
int64, the routing scale float32).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from kvlint.runtime_probe.reference import moe
from kvlint.runtime_probe.reference.dtypes import dtype_of

from kvlint.catalogue import operators

Kernels = tuple[Callable[..., Any], Callable[..., Any]]
GMM_QUANTISATION = ("scale", "offset", "antiquant_scale", "antiquant_offset", "per_token_scale",
                    "activation_input", "activation_quant_scale", "activation_quant_offset", "x_dtype",
                    "weight_dtype", "scale_dtype", "per_token_scale_dtype")  # fmt: skip


def _grouped_matmul(x: list[torch.Tensor], weight: list[torch.Tensor], **keywords: Any) -> list[torch.Tensor]:
    quantisation = {name: keywords.pop(name, None) for name in GMM_QUANTISATION}
    keywords.pop("tuning_config", None)
    keywords["output_dtype"] = dtype_of(keywords.get("output_dtype"), "npu_grouped_matmul: output_dtype")
    return moe.grouped_matmul(x, weight, **keywords, **quantisation)


def _grouped_matmul_fake(x: list[torch.Tensor], weight: list[torch.Tensor], *, bias: Any = None,
                         group_list: Any = None, split_item: int | None = 0, group_type: int | None = None,
                         output_dtype: Any = None, **keywords: Any) -> list[torch.Tensor]:  # fmt: skip
    dtype = dtype_of(output_dtype, "output_dtype") or x[0].dtype
    single = len(weight) == 1 and weight[0].dim() == 3
    groups = weight[0].shape[0] if single else len(weight)
    n = weight[0].shape[-1]
    if group_type in (None, -1) and len(x) == groups:
        outputs = [x_i.new_empty((*x_i.shape[:-1], w.shape[-1]), dtype=dtype) for x_i, w in zip(x, weight)]
        if split_item in (2, 3):
            return [x[0].new_empty((sum(t.shape[0] for t in outputs), n), dtype=dtype)]
        return outputs
    if split_item in (2, 3):
        return [x[0].new_empty((x[0].shape[0], n), dtype=dtype)]
    ctx = torch.library.get_ctx()
    return [x[0].new_empty((ctx.new_dynamic_size(), n), dtype=dtype) for _ in range(groups)]


def _gating_softmax_fake(x: torch.Tensor, finished: Any = None, k: int = 1) -> tuple[torch.Tensor, ...]:
    shape = (*x.shape[:-1], k)
    return x.new_empty(shape), x.new_empty(shape, dtype=torch.int32), x.new_empty(shape, dtype=torch.int32)


def _gating_fake(x: torch.Tensor, k: int, **keywords: Any) -> tuple[torch.Tensor, ...]:
    return (x.new_empty((x.shape[0], k)), x.new_empty((x.shape[0], k), dtype=torch.int32),
            x.new_empty(x.shape, dtype=torch.float32))  # fmt: skip


def _init_routing_fake(x: torch.Tensor, row_idx: torch.Tensor, expert_idx: torch.Tensor,
                       active_num: int) -> tuple[torch.Tensor, ...]:  # fmt: skip
    rows, k = row_idx.shape
    pairs = rows * k
    return (x.new_empty((min(rows, active_num) * k, x.shape[1])), row_idx.new_empty(pairs, dtype=torch.int32),
            row_idx.new_empty(pairs, dtype=torch.int32))  # fmt: skip


def _init_routing_v2_fake(x: torch.Tensor, expert_idx: torch.Tensor, *, active_num: int = -1, expert_num: int = -1,
                          expert_tokens_num_type: int = 0, expert_tokens_num_flag: bool = False,
                          active_expert_range: list[int] | None = None, **keywords: Any) -> tuple[torch.Tensor, ...]:  # fmt: skip
    pairs = expert_idx.shape[0] * expert_idx.shape[1]
    rows = pairs if active_num <= 0 else min(active_num, pairs)
    span = active_expert_range[1] - active_expert_range[0] if active_expert_range else expert_num
    if not expert_tokens_num_flag:
        tokens: tuple[int, ...] = (0,)
    elif expert_tokens_num_type == 2:
        tokens = (expert_num, 2)
    else:
        tokens = (span,)
    return (x.new_empty((rows, x.shape[1])), x.new_empty(pairs, dtype=torch.int32),
            x.new_empty(tokens, dtype=torch.int64), x.new_empty(rows, dtype=torch.float32))  # fmt: skip


def _finalize_fake(expanded_permuted_rows: torch.Tensor, skip1: Any, skip2: Any, bias: Any, scales: Any,
                   expanded_src_to_dst_row: torch.Tensor, *args: Any, **keywords: Any) -> torch.Tensor:  # fmt: skip
    k = scales.shape[1] if scales is not None else 1
    rows = expanded_src_to_dst_row.shape[0] // k
    return expanded_permuted_rows.new_empty((rows, expanded_permuted_rows.shape[-1]))


def _swiglu_fake(input: torch.Tensor, dim: int = -1) -> torch.Tensor:
    shape = list(input.shape)
    shape[dim] //= 2
    return input.new_empty(shape)


def _transpose_batchmatmul_fake(input: torch.Tensor, weight: torch.Tensor, *, perm_x1: Any = None,
                                perm_x2: Any = None, **keywords: Any) -> torch.Tensor:  # fmt: skip
    perm_x1, perm_x2 = list(perm_x1 or (0, 1, 2)), list(perm_x2 or (0, 1, 2))
    rows, batch, n = input.shape[perm_x1.index(1)], input.shape[perm_x1.index(0)], weight.shape[perm_x2.index(2)]
    return input.new_empty((rows, batch, n))


def _prefetch(input: torch.Tensor, dependency: torch.Tensor | None, max_size: int, offset: int = 0) -> None:
    """Prefetching weights into the device's L2 cache: nothing to do on a CPU."""


KERNELS: dict[str, Kernels] = {
    "npu_swiglu": (moe.swiglu, _swiglu_fake),
    "npu_moe_gating_top_k_softmax": (moe.gating_top_k_softmax, _gating_softmax_fake),
    "npu_moe_gating_top_k": (moe.gating_top_k, _gating_fake),
    "npu_moe_init_routing": (moe.init_routing, _init_routing_fake),
    "npu_moe_init_routing_v2": (moe.init_routing_v2, _init_routing_v2_fake),
    "npu_moe_compute_expert_tokens": (
        moe.compute_expert_tokens, lambda ids, num_expert: ids.new_empty(num_expert),
    ),
    "npu_moe_finalize_routing": (moe.finalize_routing, _finalize_fake),
    "npu_grouped_matmul": (_grouped_matmul, _grouped_matmul_fake),
    "npu_prefetch": (_prefetch, _prefetch),
    "npu_transpose_batchmatmul": (moe.transpose_batchmatmul, _transpose_batchmatmul_fake),
}  # fmt: skip


def kernels(op: operators.Operator) -> Kernels | None:
    return KERNELS.get(op.name)
