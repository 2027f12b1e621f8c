"""User code for the probe's tests: each ``bad_*`` function makes one operator call whose line ends with
``# <code>``, the finding the probe must report at that line; ``clean_calls`` makes only correct calls.
The marked calls stay on one line, so that the line is unambiguous on every Python version.

Shapes: batch 2, 4 query heads over 2 KV heads, head dim 16, 3 new tokens over 8 keys (BNSD).
"""

from __future__ import annotations

import torch

B, NQ, NKV, SQ, SKV, D = 2, 4, 2, 3, 8, 16
SCALE = D**-0.5
TEMPLATE = torch.triu(torch.ones(2048, 2048, dtype=torch.bool), diagonal=1)


def qkv(sq: int = SQ, skv: int = SKV) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    return (
        torch.randn(B, NQ, sq, D, generator=generator),
        torch.randn(B, NKV, skv, D, generator=generator),
        torch.randn(B, NKV, skv, D, generator=generator),
    )


def causal(**overrides):
    """Keywords of a correct causal FIA call over ``qkv()``, with ``overrides`` applied."""
    keywords = dict(num_heads=NQ, num_key_value_heads=NKV, input_layout="BNSD", scale=SCALE, sparse_mode=3,
                    atten_mask=TEMPLATE)
    keywords.update(overrides)
    return keywords


def paged_decode_cache(kv_lengths: list[int], blocks_per_row: int, block_size: int = 16):
    """A decode query in BSH and a [blocks, block_size, Nkv*D] cache holding ``kv_lengths`` tokens."""
    generator = torch.Generator().manual_seed(1)
    blocks = B * blocks_per_row
    query = torch.randn(B, 1, NQ * D, generator=generator)
    cache = torch.randn(blocks, block_size, NKV * D, generator=generator)
    table = torch.arange(blocks, dtype=torch.int32).reshape(B, blocks_per_row)
    return query, cache, table


def bad_mask_dtype(torch_npu):
    q, k, v = qkv()
    mask = torch.zeros(SQ, SKV)
    return torch_npu.npu_fused_infer_attention_score(q, k, v, num_heads=NQ, num_key_value_heads=NKV, input_layout="BNSD", scale=SCALE, atten_mask=mask)  # noqa: E501  # KVL201


def bad_mask_shape(torch_npu):
    q, k, v = qkv()
    return torch_npu.npu_fused_infer_attention_score(q, k, v, **causal(atten_mask=torch.ones(SQ, SKV, dtype=torch.bool).triu(6)))  # noqa: E501  # KVL202


def bad_mask_missing(torch_npu):
    q, k, v = qkv()
    return torch_npu.npu_fused_infer_attention_score(q, k, v, **causal(atten_mask=None))  # noqa: E501  # KVL203


def bad_block_table_dtype(torch_npu):
    query, cache, table = paged_decode_cache([20, 5], blocks_per_row=2)
    return torch_npu.npu_fused_infer_attention_score(query, cache, cache, block_table=table.long(), block_size=16, actual_seq_lengths_kv=[20, 5], num_heads=NQ, num_key_value_heads=NKV, scale=SCALE)  # noqa: E501  # KVL301


def bad_rope_pair(torch_npu):
    q, k, v = qkv()
    return torch_npu.npu_fused_infer_attention_score(q, k, v, **causal(query_rope=torch.randn(B, NQ, SQ, 64)))  # noqa: E501  # KVL108


def bad_gqa_heads(torch_npu):
    q, k, v = qkv()
    q = torch.randn(B, 130, SQ, D)
    return torch_npu.npu_fused_infer_attention_score(q, k, v, **causal(num_heads=130, num_key_value_heads=2))  # noqa: E501  # KVL109


def bad_layout(torch_npu):
    query, key, value = (t.transpose(1, 2).flatten(-2)[:, :1] for t in qkv())
    return torch_npu.npu_incre_flash_attention(query, key, value, num_heads=NQ, num_key_value_heads=NKV, scale_value=SCALE, input_layout="TND")  # noqa: E501  # KVL106


def bad_seq_lengths(torch_npu):
    q, k, v = qkv()
    return torch_npu.npu_fused_infer_attention_score(q, k, v, **causal(actual_seq_lengths_kv=[SKV + 1, SKV]))  # noqa: E501  # KVL503


def bad_block_table(torch_npu):
    query, cache, table = paged_decode_cache([20, 5], blocks_per_row=1)
    return torch_npu.npu_fused_infer_attention_score(query, cache, cache, block_table=table, block_size=16, actual_seq_lengths_kv=[20, 5], num_heads=NQ, num_key_value_heads=NKV, scale=SCALE)  # noqa: E501  # KVL504


def bad_head_shapes(torch_npu):
    q, k, v = qkv()
    return torch_npu.npu_fused_infer_attention_score(q, k, v, **causal(query_rope=torch.randn(B, NQ, SQ, 32), key_rope=torch.randn(B, NKV, SKV, 32)))  # noqa: E501  # KVL506


def bad_non_causal_prefill(torch_npu):
    """A decoder's prefill: the prompt's keys go into the KV cache, then attention over it has no mask."""
    q, k, v = qkv(skv=SQ)
    k_cache, v_cache = torch.zeros(B, NKV, SKV, D), torch.zeros(B, NKV, SKV, D)
    torch_npu.scatter_update_(k_cache, torch.tensor([0, 0]), k, -2)
    torch_npu.scatter_update_(v_cache, torch.tensor([0, 0]), v, -2)
    return torch_npu.npu_fused_infer_attention_score(q, k_cache, v_cache, **causal(sparse_mode=0, atten_mask=None, actual_seq_lengths_kv=[SQ, SQ]))  # noqa: E501  # KVL507


def bad_duplicate_slots(torch_npu):
    key_cache, value_cache = torch.zeros(4, 16, NKV, D), torch.zeros(4, 16, NKV, D)
    key, value = torch.randn(3, NKV, D), torch.randn(3, NKV, D)
    slots = torch.tensor([5, 6, 5], dtype=torch.int32)
    return torch_npu.npu_scatter_pa_kv_cache(key, value, key_cache, value_cache, slots, cache_mode="Norm")  # noqa: E501  # KVL508


def bad_duplicate_slots_nd(torch_npu):
    cache = torch.zeros(4, 8, D)
    indices = torch.tensor([[0, 1], [2, 3], [0, 1]])
    return torch_npu.npu_scatter_nd_update_(cache, indices, torch.randn(3, D))  # noqa: E501  # KVL508 nd


BAD_CALLS = {
    "KVL201": bad_mask_dtype,
    "KVL202": bad_mask_shape,
    "KVL203": bad_mask_missing,
    "KVL301": bad_block_table_dtype,
    "KVL108": bad_rope_pair,
    "KVL109": bad_gqa_heads,
    "KVL106": bad_layout,
    "KVL503": bad_seq_lengths,
    "KVL504": bad_block_table,
    "KVL506": bad_head_shapes,
    "KVL507": bad_non_causal_prefill,
    "KVL508": bad_duplicate_slots,
}


def clean_calls(torch_npu):
    """Correct calls of every kind the bad ones get wrong; the probe must stay silent on them."""
    q, k, v = qkv()
    torch_npu.npu_fused_infer_attention_score(q, k, v, **causal())
    torch_npu.npu_fused_infer_attention_score(q, k, v, **causal(actual_seq_lengths_kv=[SKV, SKV - 2]))
    query, key, value = (t.transpose(1, 2).flatten(-2) for t in qkv(sq=1))
    torch_npu.npu_incre_flash_attention(query, key, value, num_heads=NQ, num_key_value_heads=NKV,
                                        scale_value=SCALE, actual_seq_lengths=[SKV, 5])
    query, cache, table = paged_decode_cache([20, 5], blocks_per_row=2)
    torch_npu.npu_fused_infer_attention_score(query, cache, cache, block_table=table, block_size=16,
                                              actual_seq_lengths_kv=[20, 5], num_heads=NQ,
                                              num_key_value_heads=NKV, scale=SCALE)
    key_cache, value_cache = torch.zeros(4, 16, NKV, D), torch.zeros(4, 16, NKV, D)
    key, value = torch.randn(3, NKV, D), torch.randn(3, NKV, D)
    torch_npu.npu_scatter_pa_kv_cache(key, value, key_cache, value_cache,
                                      torch.tensor([5, 6, 7], dtype=torch.int32), cache_mode="Norm")
