"""The attention operators of the emulator: FIA v1/v2 (with their ``.out`` overloads and workspace queries),
IFA, PFA, ``npu_fusion_attention(_v2)`` and the ATB attention operators.

CPU kernels are the float32 reference's functions, run after the documented constraints
(``kvlint.runtime_probe.reference.constraints``) for FIA v1/v2, IFA, PFA and ``npu_fusion_attention(_v2)``:
a call the device refuses raises the device's exception type (``RuntimeError``) naming the argument, the
rule and its page. Fake kernels give the meta kernels' output shapes and dtypes (int8 when an output
quantisation scale is given), from the same layout code.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from kvlint.runtime_probe.emulator import formats
from kvlint.runtime_probe.reference import atb, constraints
from kvlint.runtime_probe.reference import operators as reference
from kvlint.runtime_probe.reference.attention_call import lse_dtype
from kvlint.runtime_probe.reference.dtypes import dtype_of
from kvlint.runtime_probe.reference.layouts import parse_layout, result_shapes

from kvlint.catalogue import operators

Kernels = tuple[Callable[..., Any], Callable[..., Any]]
REFERENCES: dict[str, Callable[..., Any]] = {
    operators.FIA_V1: reference.fused_infer_attention_score,
    operators.FIA_V2: reference.fused_infer_attention_score_v2,
    operators.IFA: reference.incre_flash_attention,
    operators.PFA: reference.prompt_flash_attention,
}
LSE_FLAG = {operators.FIA_V1: "softmax_lse_flag", operators.FIA_V2: "return_softmax_lse"}
WORKSPACE_OF = {
    "_npu_fused_infer_attention_score_get_max_workspace": operators.FIA_V1,
    "_npu_fused_infer_attention_score_v2_get_max_workspace": operators.FIA_V2,
}
"""Workspace query -> its attention operator. On a CPU no workspace is needed: the query returns an empty
uint8 tensor, which the attention call accepts as ``workspace=`` and ignores."""


def kernels(op: operators.Operator) -> Kernels | None:
    """(CPU kernel, fake kernel) of one attention overload, or None for another operator."""
    function = REFERENCES.get(op.name)
    if function is not None:
        fake = _query_shaped_fake(op.name) if op.name in (operators.IFA, operators.PFA) else fake_kernel(op.name)
        function = _refusing(op.name, function)
        if op.overload == "out":
            return _out_kernel(op.name, function), _out_kernel(op.name, fake)
        return function, fake
    if op.name in WORKSPACE_OF:
        return _workspace, _workspace
    if op.name == operators.FA:
        return _refusing(op.name, reference.fusion_attention), _fusion_fake
    if op.name == "npu_fusion_attention_v2":
        return _refusing(op.name, reference.fusion_attention_v2), _fusion_fake
    return ATB.get(op.name)


def _refusing(name: str, function: Callable[..., Any]) -> Callable[..., Any]:
    """The reference function behind the device's documented refusals (``reference.constraints``), which
    read every parameter bound: the positional ones in schema order, the keywords, the schema defaults."""
    params = operators.lookup(name).params

    def kernel(*args: object, **keywords: object) -> Any:
        bound = {p.name: p.default for p in params}
        bound.update(zip((p.name for p in params), args))
        constraints.refuse(name, {**bound, **keywords})
        return function(*args, **keywords)

    return kernel


def _workspace(query: torch.Tensor, *args: object, **keywords: object) -> torch.Tensor:
    return query.new_empty(0, dtype=torch.uint8)


def _out_kernel(name: str, function: Callable[..., Any]) -> Callable[..., Any]:
    """The ``.out`` overload: compute, then write into ``out=[attention_out, softmax_lse]``. The lse buffer
    is written only when the call asks for the lse; an empty buffer is resized, any other one must have the
    result's shape (vllm-ascend passes ``torch.empty(1)`` as a placeholder it never reads)."""
    flag = LSE_FLAG[name]

    def kernel(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, *, out: list[torch.Tensor],
               workspace: torch.Tensor | None = None, **keywords: object) -> tuple[torch.Tensor, ...]:  # fmt: skip
        if len(out) != 2:
            raise ValueError(f"{name}.out: out must be [attention_out, softmax_lse], got {len(out)} tensors")
        attention_out, lse = function(query, key, value, **keywords)
        _write(out[0], attention_out, "attention_out")
        if keywords.get(flag, False):
            _write(out[1], lse, "softmax_lse")
        return tuple(out)

    return kernel


def _write(target: torch.Tensor, result: torch.Tensor, name: str) -> None:
    if target.numel() == 0 and target.shape != result.shape:
        target.resize_(result.shape)
    if target.shape != result.shape:
        raise ValueError(f"out {name} has shape {tuple(target.shape)}; the result has {tuple(result.shape)}")
    target.copy_(result)


def _output_dtype(name: str, query: torch.Tensor, args: dict[str, Any]) -> torch.dtype:
    """The attention output's dtype as the meta kernels give it."""
    if name == operators.FIA_V2:
        if args["quant_scale_out"] is not None:
            return dtype_of(args["out_dtype"], "out_dtype") or torch.int8
        quantised = query.dtype in (torch.int8, torch.float8_e4m3fn)
        explicit = dtype_of(args["out_dtype"], "out_dtype")
    else:
        if args.get("quant_scale2") is not None:
            return torch.int8
        quantised, explicit = query.dtype == torch.int8, None
    if quantised:
        return explicit or (args["query_rope"].dtype if args.get("query_rope") is not None else torch.float16)
    return query.dtype


def fake_kernel(name: str) -> Callable[..., Any]:
    """Shapes and dtypes of the attention outputs, from the same layout code as the reference."""

    def fake(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, **keywords: object) -> object:
        args = reference.bind(name, keywords)
        heads = args[operators.NUM_HEADS_PARAM[name]]
        kv_heads = args["num_key_value_heads"] or heads
        with_lse = bool(args.get(LSE_FLAG.get(name), False))
        paged = args.get("block_table") is not None
        out_shape, lse_shape = result_shapes(
            query, value, parse_layout(args["input_layout"]), heads, kv_heads, paged, with_lse
        )
        out = query.new_empty(out_shape, dtype=_output_dtype(name, query, args))
        if name not in LSE_FLAG:
            return out
        return out, query.new_empty(lse_shape, dtype=lse_dtype(query.dtype, with_lse))

    return fake


def _query_shaped_fake(name: str) -> Callable[..., Any]:
    """IFA's and PFA's meta kernels check nothing: the output has the query's shape (PFA: TND takes value's
    head dim, BNSD_BSND swaps N and S) whatever the layout says, and the query's dtype, fp16 for an int8
    query, int8 with ``quant_scale2``. A compiled graph is traced as on the device; the eager call still
    refuses what the device refuses."""

    def fake(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, **keywords: object) -> torch.Tensor:
        shape = list(query.shape)
        layout = keywords.get("input_layout", "BSH")
        if name == operators.PFA and layout == "TND":
            shape = [query.shape[0], query.shape[1], value.shape[2]]
        elif name == operators.PFA and layout == "BNSD_BSND":
            shape = [query.shape[0], query.shape[2], query.shape[1], query.shape[3]]
        if keywords.get("quant_scale2") is not None:
            dtype = torch.int8
        else:
            dtype = torch.float16 if query.dtype == torch.int8 else query.dtype
        return query.new_empty(shape, dtype=dtype)

    return fake


def _fusion_fake(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, head_num: int, input_layout: str,
                 *args: object, **keywords: object) -> tuple[Any, ...]:  # fmt: skip
    """``npu_fusion_attention``'s meta shapes: the output in the query's layout with value's head dim,
    softmax_max / softmax_sum ``(B, N, S1, 8)`` (TND: ``(T, N, 8)``), an empty softmax_out."""
    layout = input_layout.upper()
    if layout in ("BSH", "SBH"):
        batch_axis, seq_axis = (0, 1) if layout == "BSH" else (1, 0)
        head_dim = query.shape[2] // head_num
        kv_heads = key.shape[2] // head_dim
        shape = list(query.shape[:2]) + [head_num * (value.shape[2] // kv_heads)]
        stats = (query.shape[batch_axis], head_num, query.shape[seq_axis], reference.FA_SOFTMAX_COPIES)
    elif layout == "TND":
        shape = [query.shape[0], head_num, value.shape[2]]
        stats = (query.shape[0], head_num, reference.FA_SOFTMAX_COPIES)
    else:
        shape = [*query.shape[:3], value.shape[3]]
        seq = query.shape[2] if layout == "BNSD" else query.shape[1]
        stats = (query.shape[0], head_num, seq, reference.FA_SOFTMAX_COPIES)
    return (query.new_empty(shape), query.new_empty(stats, dtype=torch.float32),
            query.new_empty(stats, dtype=torch.float32), query.new_empty(0), 0, 0, 0)  # fmt: skip


# -- ATB --------------------------------------------------------------------------------------------------
def _nz(query: torch.Tensor, out: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor, num_heads: int,
        num_kv_heads: int) -> bool:  # fmt: skip
    """Whether the ATB paged operators read these caches as NZ (their recorded formats, or their shapes)."""
    head = query.shape[-1] if query.dim() == 3 else query.shape[-1] // num_heads
    value_head = out.shape[-1] if out.dim() == 3 else out.shape[-1] // num_heads
    return formats.both_nz(key_cache, value_cache, num_kv_heads * head, num_kv_heads * value_head)


def _paged_attention(query: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor, num_kv_heads: int,
                     num_heads: int, scale_value: float, block_table: torch.Tensor, context_lens: torch.Tensor,
                     out: torch.Tensor, *, workspace: torch.Tensor | None = None) -> None:  # fmt: skip
    atb.paged_attention(query, key_cache, value_cache, num_kv_heads, num_heads, scale_value, block_table,
                        context_lens, out, nz=_nz(query, out, key_cache, value_cache, num_heads, num_kv_heads))  # fmt: skip


def _paged_attention_workspace(query: torch.Tensor, *args: object) -> torch.Tensor:
    return query.new_empty(0, dtype=torch.uint8)


def _splitfuse(query: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor, block_table: torch.Tensor,
               context_lens: torch.Tensor, mask: torch.Tensor, seq_len: torch.Tensor, num_kv_heads: int,
               num_heads: int, scale_value: float, out: torch.Tensor) -> None:  # fmt: skip
    atb.paged_attention_splitfuse(query, key_cache, value_cache, block_table, context_lens, mask, seq_len,
                                  num_kv_heads, num_heads, scale_value, out,
                                  nz=_nz(query, out, key_cache, value_cache, num_heads, num_kv_heads))  # fmt: skip


def _splitfuse_v2(query: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor,
                  block_table: torch.Tensor, context_lens: torch.Tensor, mask: torch.Tensor, seq_len: torch.Tensor,
                  num_kv_heads: int, num_heads: int, scale_value: float, *, mask_type: int | None = 5,
                  out: torch.Tensor) -> None:  # fmt: skip
    if mask_type != 5:
        raise ValueError(f"_npu_paged_attention_splitfuse_v2: mask_type={mask_type}; only 5 (the compressed "
                         "causal mask) is supported (docs/operators/atb_attention.md#atb-c4)")  # fmt: skip
    atb.paged_attention_splitfuse(query, key_cache, value_cache, block_table, context_lens, None, seq_len,
                                  num_kv_heads, num_heads, scale_value, out,
                                  nz=_nz(query, out, key_cache, value_cache, num_heads, num_kv_heads))  # fmt: skip


def _flash_attention_v3(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask: torch.Tensor,
                        seq_len: torch.Tensor, scale_value: float, num_heads: int, num_kv_heads: int, *,
                        mask_type: int | None = 3, out: torch.Tensor) -> None:  # fmt: skip
    if mask_type != 3:
        raise ValueError(f"_npu_flash_attention_v3: mask_type={mask_type}; only 3 (the compressed causal mask) "
                         "is supported (docs/operators/atb_attention.md#atb-c6)")  # fmt: skip
    atb.flash_attention_compressed(query, key, value, mask, seq_len, scale_value, num_heads, num_kv_heads, out)


def _flash_attention_unpad_v2(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, seq_len: torch.Tensor,
                              scale_value: float, num_heads: int, num_kv_heads: int, *,
                              kernel_type: int | None = 0, out: torch.Tensor) -> None:  # fmt: skip
    if kernel_type not in (0, 2):
        raise ValueError(f"_npu_flash_attention_unpad_v2: kernel_type={kernel_type} must be 0 or 2 "
                         "(docs/operators/atb_attention.md#atb-c5)")  # fmt: skip
    atb.flash_attention_unpad(query, key, value, seq_len, scale_value, num_heads, num_kv_heads, out)


def _writes_out(*args: object, **keywords: object) -> None:
    """Fake kernel of an ATB operator that writes its preallocated ``out`` and returns nothing."""


ATB: dict[str, Kernels] = {
    "_npu_paged_attention": (_paged_attention, _writes_out),
    "_npu_paged_attention_get_workspace": (_paged_attention_workspace, _paged_attention_workspace),
    "_npu_paged_attention_splitfuse": (_splitfuse, _writes_out),
    "_npu_paged_attention_splitfuse_v2": (_splitfuse_v2, _writes_out),
    "_npu_flash_attention": (atb.flash_attention, _writes_out),
    "_npu_flash_attention_v3": (_flash_attention_v3, _writes_out),
    "_npu_flash_attention_unpad": (atb.flash_attention_unpad, _writes_out),
    "_npu_flash_attention_unpad_v2": (_flash_attention_unpad_v2, _writes_out),
}
