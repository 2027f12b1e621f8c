"""Exact float32 reference of the torch_npu inference-attention and KV-cache write operators.

Each public function takes the operator's own positional and keyword arguments, with the defaults of the
registered schema (``kvlint.catalogue.operators``), and returns what the operator returns. Computation runs on the
inputs' device in float32 (float64 when the query is float64) with a block-wise online softmax, so no
[S1, S2] score matrix is ever built; it runs without autograd (an inference reference must not keep
every score tile alive for a backward pass). Options that are not implemented raise ``NotImplementedError``
naming the argument; reserved arguments that the operator itself ignores are ignored.
Semantics: docs/semantics.md (#sem-1 to #sem-6, #sem-9; the choices of #sem-10 are noted where they apply).
"""

from __future__ import annotations

import torch
from kvlint.runtime_probe.reference.attention_call import AttentionCall, attention
from kvlint.runtime_probe.reference.call_facts import Facts
from kvlint.runtime_probe.reference.cache_writes import (
    npu_scatter_nd_update,
    npu_scatter_nd_update_,
    scatter_update,
    scatter_update_,
)
from kvlint.runtime_probe.reference.masks import UNBOUNDED

from kvlint.catalogue import operators

__all__ = [
    "fused_infer_attention_score",
    "fused_infer_attention_score_v2",
    "incre_flash_attention",
    "prompt_flash_attention",
    "fusion_attention",
    "fusion_attention_v2",
    "scatter_update",
    "scatter_update_",
    "npu_scatter_nd_update",
    "npu_scatter_nd_update_",
]

_NOT_IMPLEMENTED = {
    operators.FIA_V1: (
        "dequant_scale1", "quant_scale1", "dequant_scale2", "quant_scale2", "quant_offset2",
        "query_padding_size", "kv_padding_size",
    ),
    operators.FIA_V2: (
        "dequant_scale_query", "quant_scale_out", "quant_offset_out", "quant_scale_p", "query_dtype",
        "key_dtype", "value_dtype", "query_rope_dtype", "key_rope_dtype", "dequant_scale_query_dtype",
        "dequant_scale_key_dtype", "dequant_scale_value_dtype", "out_dtype",
    ),
    operators.IFA: (
        "dequant_scale1", "quant_scale1", "dequant_scale2", "quant_scale2", "quant_offset2", "kv_padding_size",
    ),
    operators.PFA: ("deq_scale1", "quant_scale1", "deq_scale2", "quant_scale2", "quant_offset2"),
}  # fmt: skip
"""Arguments (quantised input/output, left padding, dtype reinterpretation) that must stay None.
Reserved arguments that the device ignores (``padding_mask``, ``key_rope_antiquant_scale``,
``dequant_scale_key_rope``, the unused v2 ``*_shared_prefix_dtype``) and ``inner_precise`` (a precision
hint; this reference is exact) are accepted and ignored."""


def bind(op_name: str, keywords: dict[str, object]) -> dict[str, object]:
    """All keyword-only arguments of ``op_name``: the given ones, the rest from the schema defaults."""
    op = operators.lookup(op_name)
    accepted = {p.name for p in op.params if p.kw_only}
    unknown = sorted(set(keywords) - accepted)
    if unknown:
        raise TypeError(f"{op_name}() got an unexpected keyword argument {unknown[0]!r}")
    return {p.name: keywords.get(p.name, p.default) for p in op.params if p.kw_only}


def _reject_not_implemented(op_name: str, args: dict[str, object]) -> None:
    for name in _NOT_IMPLEMENTED[op_name]:
        if args[name] is not None:
            raise NotImplementedError(f"{op_name}: argument {name!r} is not implemented by the kvlint reference")


def _per_token(op_name: str, args: dict[str, object], name: str) -> bool:
    """Antiquant mode 0 is per-tensor/per-channel, 1 per-token; the head-wise and paged modes 2-5 are not
    implemented."""
    if args[name] not in (0, 1):
        raise NotImplementedError(f"{op_name}: {name}={args[name]} is not implemented (only 0 and 1)")
    return args[name] == 1


def fused_infer_attention_score(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, **keywords: object
) -> tuple[torch.Tensor, torch.Tensor]:
    """``npu_fused_infer_attention_score`` (v1): returns (attention_out, softmax_lse)."""
    op = operators.FIA_V1
    a = bind(op, keywords)
    _reject_not_implemented(op, a)
    split = a["key_antiquant_scale"] is not None or a["value_antiquant_scale"] is not None
    if split:  # the KV-separated parameters take precedence over the combined ones (docs/semantics.md#sem-6-2)
        key_dequant = (a["key_antiquant_scale"], a["key_antiquant_offset"], _per_token(op, a, "key_antiquant_mode"))
        value_dequant = (
            a["value_antiquant_scale"], a["value_antiquant_offset"], _per_token(op, a, "value_antiquant_mode")
        )
    else:  # with several query tokens the combined antiquant_mode has no effect: per channel (FIA-C64)
        several_tokens = (Facts(op, {"query": query, **a}).q_seq or 1) > 1
        per_token = not several_tokens and _per_token(op, a, "antiquant_mode")
        key_dequant, value_dequant = _combined_antiquant(a["antiquant_scale"], a["antiquant_offset"], per_token)
    return attention(
        query,
        key,
        value,
        AttentionCall(
            op=op,
            layout=a["input_layout"],
            heads=a["num_heads"],
            kv_heads=a["num_key_value_heads"],
            scale=a["scale"],
            q_lengths=a["actual_seq_lengths"],
            kv_lengths=a["actual_seq_lengths_kv"],
            mask=a["atten_mask"],
            pse=a["pse_shift"],
            sparse_mode=a["sparse_mode"],
            pre_tokens=a["pre_tokens"],
            next_tokens=a["next_tokens"],
            block_table=a["block_table"],
            block_size=a["block_size"],
            query_rope=a["query_rope"],
            key_rope=a["key_rope"],
            key_dequant=key_dequant,
            value_dequant=value_dequant,
            sink=None,
            shared_prefix=(a["key_shared_prefix"], a["value_shared_prefix"], a["actual_shared_prefix_len"]),
            with_lse=bool(a["softmax_lse_flag"]),
            decode_rules=True,
        ),
    )


def fused_infer_attention_score_v2(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, **keywords: object
) -> tuple[torch.Tensor, torch.Tensor]:
    """``npu_fused_infer_attention_score_v2``: returns (attention_out, softmax_lse); adds learnable_sink."""
    op = operators.FIA_V2
    a = bind(op, keywords)
    _reject_not_implemented(op, a)
    if a["query_quant_mode"] != 0:
        raise NotImplementedError(f"{op}: query_quant_mode={a['query_quant_mode']} is not implemented")
    return attention(
        query,
        key,
        value,
        AttentionCall(
            op=op,
            layout=a["input_layout"],
            heads=a["num_query_heads"],
            kv_heads=a["num_key_value_heads"],
            scale=a["softmax_scale"],
            q_lengths=a["actual_seq_qlen"],
            kv_lengths=a["actual_seq_kvlen"],
            mask=a["atten_mask"],
            pse=a["pse_shift"],
            sparse_mode=a["sparse_mode"],
            pre_tokens=a["pre_tokens"],
            next_tokens=a["next_tokens"],
            block_table=a["block_table"],
            block_size=a["block_size"],
            query_rope=a["query_rope"],
            key_rope=a["key_rope"],
            key_dequant=(a["dequant_scale_key"], a["dequant_offset_key"], _per_token(op, a, "key_quant_mode")),
            value_dequant=(
                a["dequant_scale_value"], a["dequant_offset_value"], _per_token(op, a, "value_quant_mode")
            ),
            sink=a["learnable_sink"],
            shared_prefix=(None, None, None),
            with_lse=bool(a["return_softmax_lse"]),
            decode_rules=True,
        ),
    )


def incre_flash_attention(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, **keywords: object
) -> torch.Tensor:
    """``npu_incre_flash_attention`` (decode): its ``actual_seq_lengths`` are the KV lengths."""
    op = operators.IFA
    a = bind(op, keywords)
    _reject_not_implemented(op, a)
    key_dequant, value_dequant = _combined_antiquant(a["antiquant_scale"], a["antiquant_offset"], False)
    out, _ = attention(
        query,
        key,
        value,
        AttentionCall(
            op=op,
            layout=a["input_layout"],
            heads=a["num_heads"],
            kv_heads=a["num_key_value_heads"],
            scale=a["scale_value"],
            q_lengths=None,
            kv_lengths=a["actual_seq_lengths"],
            mask=a["atten_mask"],
            pse=a["pse_shift"],
            sparse_mode=0,
            pre_tokens=UNBOUNDED,
            next_tokens=UNBOUNDED,
            block_table=a["block_table"],
            block_size=a["block_size"],
            query_rope=None,
            key_rope=None,
            key_dequant=key_dequant,
            value_dequant=value_dequant,
            sink=None,
            shared_prefix=(None, None, None),
            with_lse=False,
            decode_rules=False,
        ),
    )
    return out


def prompt_flash_attention(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, **keywords: object
) -> torch.Tensor:
    """``npu_prompt_flash_attention`` (prefill). Note its default ``next_tokens=0``."""
    op = operators.PFA
    a = bind(op, keywords)
    _reject_not_implemented(op, a)
    out, _ = attention(
        query,
        key,
        value,
        AttentionCall(
            op=op,
            layout=a["input_layout"],
            heads=a["num_heads"],
            kv_heads=a["num_key_value_heads"],
            scale=a["scale_value"],
            q_lengths=a["actual_seq_lengths"],
            kv_lengths=a["actual_seq_lengths_kv"],
            mask=a["atten_mask"],
            pse=a["pse_shift"],
            sparse_mode=a["sparse_mode"],
            pre_tokens=a["pre_tokens"],
            next_tokens=a["next_tokens"],
            block_table=None,
            block_size=0,
            query_rope=None,
            key_rope=None,
            key_dequant=(None, None, False),
            value_dequant=(None, None, False),
            sink=None,
            shared_prefix=(None, None, None),
            with_lse=False,
            decode_rules=False,
        ),
    )
    return out


def _combined_antiquant(
    scale: torch.Tensor | None, offset: torch.Tensor | None, per_token: bool
) -> tuple[tuple[torch.Tensor | None, torch.Tensor | None, bool], ...]:
    """Split the combined ``antiquant_scale/offset`` (leading dim 2: key, value)."""
    if scale is None:
        return (None, offset, per_token), (None, offset, per_token)
    if scale.shape[0] != 2 or (offset is not None and offset.shape[0] != 2):
        raise ValueError(f"antiquant_scale/offset need a leading dim of 2 (key, value), got {tuple(scale.shape)}")
    return (
        (scale[0], None if offset is None else offset[0], per_token),
        (scale[1], None if offset is None else offset[1], per_token),
    )


FA_SOFTMAX_COPIES = 8
"""softmax_max / softmax_sum repeat each row's statistic 8 times (the device's last axis)."""


def _fusion_arguments(op: str, head_num: int, input_layout: str, args: tuple[object, ...],
                      keywords: dict[str, object]) -> dict[str, object]:  # fmt: skip
    """All of FA's arguments after ``input_layout`` (positional ones allowed), with the schema defaults."""
    params = [p for p in operators.lookup(op).params[5:]]
    if len(args) > len(params):
        raise TypeError(f"{op}() takes {len(params) + 5} positional arguments but {len(args) + 5} were given")
    bound = {p.name: p.default for p in params}
    bound.update(zip((p.name for p in params), args))
    unknown = sorted(set(keywords) - set(bound))
    if unknown:
        raise TypeError(f"{op}() got an unexpected keyword argument {unknown[0]!r}")
    bound.update(keywords)
    return bound


def fusion_attention(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, head_num: int, input_layout: str,
    *args: object, **keywords: object,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, int, int, int]:  # fmt: skip
    """``npu_fusion_attention``: see :func:`_fusion`."""
    return _fusion(operators.FA, query, key, value, head_num, input_layout, args, keywords)


def fusion_attention_v2(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, head_num: int, input_layout: str,
    **keywords: object,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, int, int, int]:  # fmt: skip
    """``npu_fusion_attention_v2``: see :func:`_fusion` (its band arguments are spelled ``pre_tokens``)."""
    return _fusion("npu_fusion_attention_v2", query, key, value, head_num, input_layout, (), keywords)


def _fusion(
    op: str, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, head_num: int, input_layout: str,
    args: tuple[object, ...], keywords: dict[str, object],
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, int, int, int]:  # fmt: skip
    """``npu_fusion_attention`` (and ``_v2``) in inference: returns ``(attention_out, softmax_max,
    softmax_sum, softmax_out, seed, offset, numels)``.

    Without ``atten_mask`` the attention is full whatever ``sparse_mode`` and the band say
    (``docs/operators/fusion_attention.md#fa-c8``); with it, modes 0-4 are FIA's. The layout is upper-cased;
    SBH is read as BSH. ``softmax_max`` holds each row's log-sum-exp and ``softmax_sum`` ones, an exact pair
    for recombining partial results (``docs/semantics.md#sem-d14``). Dropout (``keep_prob`` < 1), the prefix
    modes 5-8 and ``pse`` with TND are not implemented.
    """
    a = _fusion_arguments(op, head_num, input_layout, args, keywords)
    layout = input_layout.upper()
    if layout not in operators.FA_LAYOUTS:
        raise ValueError(f"{op}: input_layout={input_layout!r} is not one of {sorted(operators.FA_LAYOUTS)}")
    if float(a["keep_prob"]) != 1.0:
        raise NotImplementedError(f"{op}: keep_prob={a['keep_prob']} (dropout) is not implemented")
    for name in ("prefix", "dropout_mask", "query_rope", "key_rope", "q_start_idx", "kv_start_idx"):
        if a.get(name) is not None:
            raise NotImplementedError(f"{op}: argument {name!r} is not implemented by the kvlint reference")
    mask = a["atten_mask"]
    sparse_mode = int(a["sparse_mode"]) if mask is not None else 0
    if sparse_mode > 4:
        raise NotImplementedError(f"{op}: sparse_mode={sparse_mode} (prefix and varlen outer-split modes) is not implemented")
    pre, nxt = (a["pre_tockens"], a["next_tockens"]) if "pre_tockens" in a else (a["pre_tokens"], a["next_tokens"])
    if mask is None:
        pre = nxt = UNBOUNDED
    views = [query, key, value]
    if layout == "SBH":
        views = [t.transpose(0, 1) for t in views]
        layout = "BSH"
    out, lse = attention(
        views[0],
        views[1],
        views[2],
        AttentionCall(
            op=operators.FIA_V1,
            layout=layout,
            heads=head_num,
            kv_heads=_fusion_kv_heads(views[0], views[1], layout, head_num),
            scale=float(a["scale"]),
            q_lengths=a["actual_seq_qlen"],
            kv_lengths=a["actual_seq_kvlen"],
            mask=mask,
            pse=a["pse"],
            sparse_mode=sparse_mode,
            pre_tokens=int(pre),
            next_tokens=int(nxt),
            block_table=None,
            block_size=0,
            query_rope=None,
            key_rope=None,
            key_dequant=(None, None, False),
            value_dequant=(None, None, False),
            sink=a["sink"],
            shared_prefix=(None, None, None),
            with_lse=True,
            decode_rules=False,
            mask_per_head=True,
        ),
    )
    if input_layout.upper() == "SBH":
        out = out.transpose(0, 1).contiguous()
    softmax_max = lse.float().expand(*lse.shape[:-1], FA_SOFTMAX_COPIES).contiguous()  # (B, N, S, 8) / (T, N, 8)
    softmax_sum = torch.ones_like(softmax_max)
    return out, softmax_max, softmax_sum, query.new_empty(0), 0, 0, 0


def _fusion_kv_heads(query: torch.Tensor, key: torch.Tensor, layout: str, heads: int) -> int:
    """FA has no KV-head argument: the KV heads follow from the key's shape (H or N, and the query's D)."""
    if layout == "BSH":
        return key.shape[-1] // (query.shape[-1] // heads)
    if layout == "BSND":
        return key.shape[2]
    if layout == "BNSD":
        return key.shape[1]
    return key.shape[1]  # TND
