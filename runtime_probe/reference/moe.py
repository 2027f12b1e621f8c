"""Mixture-of-experts routing and the expert FFN: gating top-k, init routing (token permutation), the
grouped matmul, SwiGLU and finalize routing (token un-permutation and weighted sum); and the batched
``npu_transpose_batchmatmul`` that MLA attention uses around it (``docs/semantics.md#sem-13``).

Conventions shared by the family, for ``N`` tokens each routed to ``K`` experts:

- the *row index* of the pair (token i, choice k) is ``k * N + i`` ("column order") in the v1 operators
  (``npu_moe_gating_top_k_softmax`` returns it as ``row_idx``) and ``i * K + k`` ("row order") in
  ``npu_moe_init_routing_v2``;
- routing sorts the pairs by expert, stably; ``expanded_row_idx`` maps each pair to its row in the sorted
  (expanded) tensor, or, with ``row_idx_type=1``, each sorted row to its pair;
- finalize routing reads the pair's row through ``expanded_src_to_dst_row`` in column order
  (``drop_pad_mode`` 0/1) or row order (2/3).

Quantised routing and matmuls are not implemented: those arguments raise ``NotImplementedError``.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from kvlint.runtime_probe.reference.dtypes import computed


def _not_implemented(op: str, name: str, value: object) -> NotImplementedError:
    return NotImplementedError(f"{op}: {name}={value!r} is not implemented by the kvlint reference")


def _reject(op: str, **arguments: object) -> None:
    """Quantisation (and other unimplemented) arguments must be left at their defaults (None)."""
    for name, value in arguments.items():
        if value is not None:
            raise _not_implemented(op, name, "given")


@torch.no_grad()
def swiglu(input: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """``npu_swiglu``: ``silu(a) * b`` of the two halves of ``dim``."""
    if input.shape[dim] % 2:
        raise ValueError(f"npu_swiglu: size {input.shape[dim]} of dim {dim} is not even")
    a, b = computed(input).chunk(2, dim=dim)
    return (torch.nn.functional.silu(a) * b).to(input.dtype)


@torch.no_grad()
def gating_top_k_softmax(x: torch.Tensor, finished: torch.Tensor | None = None,
                         k: int = 1) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:  # fmt: skip
    """``npu_moe_gating_top_k_softmax`` -> (top-k softmax weights, expert ids int32, row_idx int32)."""
    op = "npu_moe_gating_top_k_softmax"
    if x.dim() not in (2, 3) or not 0 < k <= x.shape[-1]:
        raise ValueError(f"{op}: x must be 2-D or 3-D with k in (0, {x.shape[-1]}], got {tuple(x.shape)}, k={k}")
    if finished is not None and bool(finished.any()):
        raise _not_implemented(op, "finished", "with finished rows")
    weights, experts = x.float().softmax(-1).topk(k, dim=-1)
    rows = x.shape[:-1].numel()
    row_idx = torch.arange(rows * k, dtype=torch.int32, device=x.device).view(k, rows).t()
    return weights.to(x.dtype), experts.to(torch.int32), row_idx.reshape(*x.shape[:-1], k)


@torch.no_grad()
def gating_top_k(x: torch.Tensor, k: int, *, bias: torch.Tensor | None = None, input_ids: torch.Tensor | None = None,
                 tid2eid: torch.Tensor | None = None, k_group: int = 1, group_count: int = 1,
                 group_select_mode: int = 0, renorm: int = 0, norm_type: int = 0, out_flag: bool = False,
                 routed_scaling_factor: float = 1.0,
                 eps: float = 1e-20) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:  # fmt: skip
    """``npu_moe_gating_top_k`` (DeepSeek-style grouped routing) -> (weights, expert ids int32, norm float32).

    Scores are softmax (``norm_type`` 0) or sigmoid (1) of x; ``bias`` is added only to choose; the experts
    are split into ``group_count`` groups scored by their maximum (``group_select_mode`` 0) or the sum of
    their top two (1), and the top ``k`` experts are chosen among the best ``k_group`` groups. Weights are
    the unbiased scores, renormalised to sum 1 for sigmoid, times ``routed_scaling_factor``.
    """
    op = "npu_moe_gating_top_k"
    _reject(op, input_ids=input_ids, tid2eid=tid2eid)
    if renorm != 0:
        raise _not_implemented(op, "renorm", renorm)
    if norm_type not in (0, 1) or group_select_mode not in (0, 1):
        raise ValueError(f"{op}: norm_type {norm_type} and group_select_mode {group_select_mode} must be 0 or 1")
    if x.dim() != 2 or group_count < 1 or x.shape[-1] % group_count or not 1 <= k_group <= group_count:
        raise ValueError(f"{op}: x {tuple(x.shape)} must be 2-D with its experts divisible into group_count="
                         f"{group_count} groups, and 1 <= k_group={k_group} <= group_count")  # fmt: skip
    scores = x.float().softmax(-1) if norm_type == 0 else x.float().sigmoid()
    choice = scores if bias is None else scores + bias.float()
    if group_count > 1:
        groups = choice.view(x.shape[0], group_count, -1)
        group_score = groups.amax(-1) if group_select_mode == 0 else groups.topk(2, dim=-1).values.sum(-1)
        kept = group_score.topk(k_group, dim=-1, sorted=False).indices
        dropped = torch.ones_like(group_score, dtype=torch.bool).scatter_(1, kept, False)
        choice = groups.masked_fill(dropped.unsqueeze(-1), -torch.inf).view(x.shape[0], -1)
    experts = choice.topk(k, dim=-1).indices
    weights = scores.gather(1, experts)
    if norm_type == 1:
        weights = weights / (weights.sum(-1, keepdim=True) + eps)
    return (weights * routed_scaling_factor).to(x.dtype), experts.to(torch.int32), scores


def _sort_by_expert(expert_idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(sorted expert ids, flat pair index of each sorted row), stable."""
    flat = expert_idx.reshape(-1).long()
    order = torch.sort(flat, stable=True).indices
    return flat[order], order


@torch.no_grad()
def init_routing(x: torch.Tensor, row_idx: torch.Tensor, expert_idx: torch.Tensor,
                 active_num: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:  # fmt: skip
    """``npu_moe_init_routing`` -> (expanded_x, expanded_row_idx int32, expanded_expert_idx int32): the
    (token, choice) pairs sorted by expert, stably, in the order of ``row_idx`` (column order)."""
    if x.dim() != 2 or expert_idx.shape != row_idx.shape or expert_idx.shape[0] != x.shape[0]:
        raise ValueError(f"npu_moe_init_routing: x {tuple(x.shape)}, row_idx {tuple(row_idx.shape)} and "
                         f"expert_idx {tuple(expert_idx.shape)} must be (N, H), (N, K), (N, K)")  # fmt: skip
    rows, k = expert_idx.shape
    sorted_experts, order = _sort_by_expert(expert_idx)
    source_rows = row_idx.reshape(-1).long()[order]
    expanded_row_idx = torch.empty_like(source_rows)
    expanded_row_idx[source_rows] = torch.arange(source_rows.numel(), device=x.device)
    active = min(active_num, rows) * k
    expanded_x = x[source_rows[:active] % rows]
    return expanded_x, expanded_row_idx.to(torch.int32), sorted_experts.to(torch.int32)


@torch.no_grad()
def init_routing_v2(x: torch.Tensor, expert_idx: torch.Tensor, *, scale: torch.Tensor | None = None,
                    offset: torch.Tensor | None = None, active_num: int = -1, expert_capacity: int = -1,
                    expert_num: int = -1, drop_pad_mode: int = 0, expert_tokens_num_type: int = 0,
                    expert_tokens_num_flag: bool = False, quant_mode: int = -1,
                    active_expert_range: Sequence[int] = (), row_idx_type: int = 0,
                    x_dtype: int | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:  # fmt: skip
    """``npu_moe_init_routing_v2`` (dropless, unquantised) -> (expanded_x, expanded_row_idx int32,
    per-expert token counts or their cumsum int64, expanded_scale float32).

    Pairs are in row order (``i * K + k``). Only the experts in ``active_expert_range`` (default: all) are
    routed; rows of ``expanded_x`` beyond the routed pairs, and the counts when not requested, are zero;
    ``expanded_scale`` is the token's ``scale`` (one per token) or zero.
    """
    op = "npu_moe_init_routing_v2"
    if quant_mode != -1:
        raise _not_implemented(op, "quant_mode", quant_mode)
    if drop_pad_mode != 0:
        raise _not_implemented(op, "drop_pad_mode", drop_pad_mode)
    _reject(op, offset=offset, x_dtype=x_dtype)
    if x.dim() != 2 or expert_idx.dim() != 2 or x.shape[0] != expert_idx.shape[0]:
        raise ValueError(f"{op}: x {tuple(x.shape)} and expert_idx {tuple(expert_idx.shape)} must be (N, H), (N, K)")
    if expert_tokens_num_type not in (0, 1, 2) or row_idx_type not in (0, 1):
        raise ValueError(f"{op}: expert_tokens_num_type={expert_tokens_num_type} must be 0-2, "
                         f"row_idx_type={row_idx_type} 0 or 1")  # fmt: skip
    rows, k = expert_idx.shape
    start, end = (active_expert_range[0], active_expert_range[1]) if active_expert_range else (0, expert_num)
    if end < 0:
        end = int(expert_idx.max()) + 1 if expert_idx.numel() else 0
    flat = expert_idx.reshape(-1).long()
    routed = (flat >= start) & (flat < end)
    keys = torch.where(routed, flat, torch.iinfo(torch.int64).max)
    order = torch.sort(keys, stable=True).indices
    count = int(routed.sum())
    total = rows * k if active_num <= 0 else min(active_num, rows * k)
    used = min(count, total)
    if row_idx_type == 1:
        expanded_row_idx = order.clone()
    else:
        expanded_row_idx = torch.full((rows * k,), -1, dtype=torch.long, device=x.device)
        expanded_row_idx[order[:count]] = torch.arange(count, device=x.device)
    expanded_x = x.new_zeros((total, x.shape[1]))
    expanded_x[:used] = x[order[:used] // k]
    counts = torch.bincount(flat[routed] - start, minlength=max(end - start, 0))
    if not expert_tokens_num_flag:
        tokens = torch.zeros(0, dtype=torch.int64, device=x.device)
    elif expert_tokens_num_type == 1:
        tokens = counts
    elif expert_tokens_num_type == 0:
        tokens = counts.cumsum(0)
    else:
        present = counts.nonzero().flatten()
        tokens = torch.zeros((max(expert_num, present.numel()), 2), dtype=torch.int64, device=x.device)
        tokens[: present.numel(), 0] = present + start
        tokens[: present.numel(), 1] = counts[present]
    expanded_scale = torch.zeros(total, dtype=torch.float32, device=x.device)
    if scale is not None:
        expanded_scale[:used] = scale.reshape(-1).float()[order[:used] // k]
    return expanded_x, expanded_row_idx.to(torch.int32), tokens.to(torch.int64), expanded_scale


@torch.no_grad()
def compute_expert_tokens(sorted_expert_for_source_row: torch.Tensor, num_expert: int) -> torch.Tensor:
    """``npu_moe_compute_expert_tokens``: for each expert e, the end (exclusive) of its rows in the sorted ids,
    i.e. the cumulative token counts."""
    ids = sorted_expert_for_source_row.reshape(-1)
    boundaries = torch.arange(num_expert, dtype=ids.dtype, device=ids.device)
    return torch.searchsorted(ids.contiguous(), boundaries, right=True).to(ids.dtype)


@torch.no_grad()
def finalize_routing(expanded_permuted_rows: torch.Tensor, skip1: torch.Tensor | None, skip2: torch.Tensor | None,
                     bias: torch.Tensor | None, scales: torch.Tensor | None, expanded_src_to_dst_row: torch.Tensor,
                     export_for_source_row: torch.Tensor | None, drop_pad_mode: int | None = 0,
                     k: int | None = 1) -> torch.Tensor:  # fmt: skip
    """``npu_moe_finalize_routing``: ``out[i] = skip1[i] + skip2[i] + sum_k scales[i, k] * (rows[dst(i, k)] +
    bias[expert(i, k)])``; a destination of -1 (a dropped pair) contributes zeros."""
    op = "npu_moe_finalize_routing"
    mode = 0 if drop_pad_mode is None else drop_pad_mode
    if mode not in (0, 1, 2, 3):
        raise ValueError(f"{op}: drop_pad_mode={mode} must be 0-3")
    if skip1 is None and skip2 is not None:
        raise ValueError(f"{op}: skip2 needs skip1")
    if bias is not None and export_for_source_row is None:
        raise ValueError(f"{op}: bias needs export_for_source_row (the expert of each pair)")
    choices = scales.shape[1] if scales is not None else (k or 1)
    pairs = expanded_src_to_dst_row.numel()
    rows = pairs // choices
    hidden = expanded_permuted_rows.shape[-1]
    table = expanded_permuted_rows.reshape(-1, hidden).float()
    dst = expanded_src_to_dst_row.reshape(-1).long()
    dst = dst.view(choices, rows).t() if mode in (0, 1) else dst.view(rows, choices)
    gathered = torch.where((dst >= 0).unsqueeze(-1), table[dst.clamp(min=0)], 0.0)
    if bias is not None:
        gathered = gathered + bias.float()[export_for_source_row.long()]
    weights = scales.float().unsqueeze(-1) if scales is not None else 1.0
    out = (gathered * weights).sum(1)
    for skip in (skip1, skip2):
        if skip is not None:
            out = out + skip.float()
    return out.to(expanded_permuted_rows.dtype)


_ACTIVATIONS = {0: lambda y: y, 1: torch.relu, 2: lambda y: torch.nn.functional.gelu(y, approximate="tanh"),
                5: torch.nn.functional.silu}  # fmt: skip
"""``act_type`` of the grouped matmul: 0 none, 1 ReLU, 2 GELU (tanh), 5 SiLU (4 FAST_GELU is not implemented)."""


def _group_sizes(group_list: torch.Tensor | Sequence[int] | None, group_list_type: int | None, groups: int,
                 rows: int, op: str) -> list[int]:  # fmt: skip
    """Rows per group from ``group_list``: cumulative (type 0, and every ``int[]``), counts (1) or
    ``[[group, count], ...]`` (2)."""
    if group_list is None:
        raise ValueError(f"{op}: group_list is required to split x into {groups} groups")
    kind = 0 if group_list_type is None or not isinstance(group_list, torch.Tensor) else group_list_type
    values = group_list.tolist() if isinstance(group_list, torch.Tensor) else list(group_list)
    if kind == 2:
        sizes = [0] * groups
        for group, count in values:
            sizes[int(group)] += int(count)
    elif kind == 1:
        sizes = [int(v) for v in values]
    else:
        ends = [int(v) for v in values]
        sizes = [end - start for start, end in zip([0, *ends[:-1]], ends)]
    if len(sizes) != groups or any(s < 0 for s in sizes) or sum(sizes) > rows:
        raise ValueError(f"{op}: group_list {values} (group_list_type {kind}) does not split {rows} rows "
                         f"into {groups} groups")  # fmt: skip
    return sizes


@torch.no_grad()
def grouped_matmul(x: Sequence[torch.Tensor], weight: Sequence[torch.Tensor], *,
                   bias: Sequence[torch.Tensor] | None = None, group_list: torch.Tensor | Sequence[int] | None = None,
                   split_item: int | None = 0, group_type: int | None = None, group_list_type: int | None = 0,
                   act_type: int | None = 0, output_dtype: torch.dtype | None = None,
                   **quantisation: object) -> list[torch.Tensor]:  # fmt: skip
    """``npu_grouped_matmul`` (unquantised): ``y_g = act(x_g @ weight_g + bias_g)``.

    Without grouping (``group_type`` None/-1) each x pairs with its weight. With M grouping
    (``group_type`` 0) the rows of the single x are split by ``group_list``; the weight is one 3-D
    ``[G, K, N]`` tensor or G 2-D ones; the output is one tensor (``split_item`` 2/3; rows beyond the groups
    are zero) or one per group (0/1).
    """
    op = "npu_grouped_matmul"
    for name, value in quantisation.items():
        if value is not None and not (name == "tuning_config"):
            raise _not_implemented(op, name, "given")
    if group_type == 2:
        raise _not_implemented(op, "group_type", 2)
    activation = _ACTIVATIONS.get(act_type or 0)
    if activation is None:
        raise _not_implemented(op, "act_type", act_type)
    weights = list(weight[0].unbind(0)) if len(weight) == 1 and weight[0].dim() == 3 else list(weight)
    biases = None if bias is None else (list(bias[0].unbind(0)) if len(bias) == 1 and len(weights) > 1 else list(bias))
    dtype = output_dtype or x[0].dtype
    if x[0].dtype.is_floating_point is False or any(w.dtype != x[0].dtype for w in weights):
        raise _not_implemented(op, "weight", f"{weights[0].dtype} with x {x[0].dtype} (quantised matmul)")

    def product(rows: torch.Tensor, g: int) -> torch.Tensor:
        y = rows.float() @ weights[g].float()
        if biases is not None:
            y = y + biases[g].float()
        return activation(y)

    if group_type in (None, -1) and len(x) == len(weights):
        outputs = [product(x_g, g) for g, x_g in enumerate(x)]
    else:
        if len(x) != 1:
            raise ValueError(f"{op}: grouping the rows of x needs one x, got {len(x)}")
        sizes = _group_sizes(group_list, group_list_type, len(weights), x[0].shape[0], op)
        pieces = x[0].split([*sizes, x[0].shape[0] - sum(sizes)])
        outputs = [product(pieces[g], g) for g in range(len(weights))]
        if split_item in (2, 3):
            rest = pieces[-1].new_zeros((pieces[-1].shape[0], outputs[0].shape[-1]), dtype=torch.float32)
            outputs = [torch.cat([*outputs, rest])]
    if split_item in (2, 3) and len(outputs) > 1:
        outputs = [torch.cat(outputs)]
    return [y.to(dtype) for y in outputs]


@torch.no_grad()
def transpose_batchmatmul(input: torch.Tensor, weight: torch.Tensor, *, bias: torch.Tensor | None = None,
                          scale: torch.Tensor | None = None, perm_x1: Sequence[int] | None = None,
                          perm_x2: Sequence[int] | None = None, perm_y: Sequence[int] | None = None,
                          batch_split_factor: int | None = 1) -> torch.Tensor:  # fmt: skip
    """``npu_transpose_batchmatmul``: ``(input.permute(perm_x1) @ weight.permute(perm_x2)).permute(perm_y)``,
    batch axis first after the input permutations; the default output is ``(M, B, N)``."""
    op = "npu_transpose_batchmatmul"
    _reject(op, bias=bias, scale=scale)
    if (batch_split_factor or 1) != 1:
        raise _not_implemented(op, "batch_split_factor", batch_split_factor)
    perm_x1, perm_x2, perm_y = list(perm_x1 or (0, 1, 2)), list(perm_x2 or (0, 1, 2)), list(perm_y or (1, 0, 2))
    if input.dim() != 3 or weight.dim() != 3:
        raise ValueError(f"{op}: input {tuple(input.shape)} and weight {tuple(weight.shape)} must be 3-D")
    a, w = input.float().permute(*perm_x1), weight.float().permute(*perm_x2)
    if a.shape[0] != w.shape[0] or a.shape[2] != w.shape[1]:
        raise ValueError(f"{op}: permuted input {tuple(a.shape)} and weight {tuple(w.shape)} do not multiply")
    return (a @ w).permute(*perm_y).contiguous().to(input.dtype)
