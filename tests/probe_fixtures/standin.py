"""Hand-made torch_npu stand-ins: plain functions with the operators' keyword names, built per variant.

``Attention`` computes FIA/IFA for the BNSD and BSH layouts, GQA, per-batch KV lengths (clamped to
the keys there are), paged [blocks, block_size, H] caches and sparse_mode 0 (optional mask), 2 and 3,
naively in float64. Its two deliberate bugs are the ones the
probe must catch: top-left instead of bottom-right causal alignment for sparse_mode=3, and the scale
ignored. The cache writes follow docs/operators/kv_cache_writes.md.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import torch


def _to_bnsd(x: torch.Tensor, layout: str, heads: int) -> torch.Tensor:
    if layout == "BNSD":
        return x
    return x.unflatten(-1, (heads, x.shape[-1] // heads)).transpose(1, 2)


def _from_bnsd(x: torch.Tensor, layout: str) -> torch.Tensor:
    return x if layout == "BNSD" else x.transpose(1, 2).flatten(-2)


class Attention:
    def __init__(self, bottom_right: bool = True, use_scale: bool = True) -> None:
        self.bottom_right = bottom_right
        self.use_scale = use_scale

    def attend(self, query, key, value, *, atten_mask=None, actual_seq_lengths_kv=None, num_heads=1,
               scale=1.0, input_layout="BSH", num_key_value_heads=0, sparse_mode=0, block_table=None):
        kv_heads = num_key_value_heads or num_heads
        if block_table is not None:  # [blocks, block_size, H] caches gathered into BSH per batch row
            key, value = (cache[block_table.long()].flatten(1, 2) for cache in (key, value))
        q = _to_bnsd(query, input_layout, num_heads).double()
        k = _to_bnsd(key, input_layout, kv_heads).double().repeat_interleave(num_heads // kv_heads, 1)
        v = _to_bnsd(value, input_layout, kv_heads).double().repeat_interleave(num_heads // kv_heads, 1)
        out = torch.zeros_like(q)
        s1 = q.shape[2]
        for b in range(q.shape[0]):
            s2 = k.shape[2]
            if actual_seq_lengths_kv is not None:
                s2 = min(s2, list(actual_seq_lengths_kv)[b % len(actual_seq_lengths_kv)])
            scores = q[b] @ k[b, :, :s2].transpose(-1, -2) * (scale if self.use_scale else 1.0)
            i = torch.arange(s1).unsqueeze(1)
            j = torch.arange(s2).unsqueeze(0)
            masked = torch.zeros(s1, s2, dtype=torch.bool)
            if sparse_mode == 3 or sparse_mode == 2:
                offset = (s2 - s1) if (sparse_mode == 3 and self.bottom_right) else 0
                masked = j > i + offset
            elif atten_mask is not None:
                masked = atten_mask.bool().reshape(-1, *atten_mask.shape[-2:])[0][:s1, :s2]
            scores = scores.masked_fill(masked, -math.inf)
            probs = torch.softmax(scores, dim=-1).nan_to_num(0.0)
            out[b] = probs @ v[b, :, :s2]
        return _from_bnsd(out, input_layout).to(query.dtype)

    def ops(self) -> SimpleNamespace:
        def npu_fused_infer_attention_score(query, key, value, *, atten_mask=None, actual_seq_lengths=None,
                                            actual_seq_lengths_kv=None, num_heads=1, scale=1.0,
                                            input_layout="BSH", num_key_value_heads=0, sparse_mode=0,
                                            block_table=None, **ignored):
            out = self.attend(query, key, value, atten_mask=atten_mask, actual_seq_lengths_kv=actual_seq_lengths_kv,
                              num_heads=num_heads, scale=scale, input_layout=input_layout,
                              num_key_value_heads=num_key_value_heads, sparse_mode=sparse_mode,
                              block_table=block_table)
            return out, torch.empty(0)

        def npu_incre_flash_attention(query, key, value, *, atten_mask=None, actual_seq_lengths=None,
                                      num_heads=1, scale_value=1.0, input_layout="BSH",
                                      num_key_value_heads=0, **ignored):
            return self.attend(query, key, value, atten_mask=atten_mask, actual_seq_lengths_kv=actual_seq_lengths,
                               num_heads=num_heads, scale=scale_value, input_layout=input_layout,
                               num_key_value_heads=num_key_value_heads)

        return SimpleNamespace(
            npu_fused_infer_attention_score=npu_fused_infer_attention_score,
            npu_incre_flash_attention=npu_incre_flash_attention,
            scatter_update_=scatter_update_,
            scatter_update=scatter_update,
            npu_scatter_nd_update_=npu_scatter_nd_update_,
            npu_scatter_pa_kv_cache=npu_scatter_pa_kv_cache,
            _npu_reshape_and_cache=_npu_reshape_and_cache,
        )


def scatter_update_(input, indices, updates, axis):
    """Batch row b gets ``updates[b]`` at positions indices[b] .. indices[b] + updates.size(axis) - 1."""
    for b, start in enumerate(indices.tolist()):
        input[b].narrow(axis, start, updates.shape[axis]).copy_(updates[b])
    return input


def scatter_update(input, indices, updates, axis):
    return scatter_update_(input.clone(), indices, updates, axis)


def npu_scatter_nd_update_(input, indices, updates):
    input[tuple(indices.unbind(-1))] = updates
    return input


def npu_scatter_pa_kv_cache(key, value, key_cache, value_cache, slot_mapping, *, cache_mode="PA_NZ", **ignored):
    """Token t goes to slot ``slot_mapping[t]`` of a [blocks, block_size, ...] cache; a negative slot is
    padding and skipped, as in ATB's reshape_and_cache (KVC-C32)."""
    kept = slot_mapping >= 0
    for tokens, cache in ((key, key_cache), (value, value_cache)):
        rows = tokens.reshape(tokens.shape[0], *cache.shape[2:])[kept]
        cache.view(-1, *cache.shape[2:])[slot_mapping[kept].long()] = rows


def _npu_reshape_and_cache(key, value, key_cache, value_cache, slot_indices):
    """ATB's write, the ND semantics of its public golden (KVC-C32): ``npu_scatter_pa_kv_cache`` with
    ``cache_mode="Norm"``."""
    npu_scatter_pa_kv_cache(key, value, key_cache, value_cache, slot_indices, cache_mode="Norm")
