"""Small serving loops for the probe's checks across calls: each step writes the new tokens' K/V into a
cache through torch_npu and attends over it, as an engine does.

``extra`` is added to the KV lengths the attention call is given: 0 is right (the lengths count the
tokens just written), -1 is the classic decode off-by-one (``actual_seq_lengths_kv=kv_len``, the new token
is never attended: KVL509), +1 reads one position that no write filled (KVL510). The marked lines are the
sites the probe must name.
"""

from __future__ import annotations

from functools import partial

import torch

B, NQ, NKV, D, BLOCK = 2, 4, 2, 16, 16
TND_D = 128
SCALE = D**-0.5
TEMPLATE = torch.ones(2048, 2048, dtype=torch.bool).triu(1)


def _mask(tokens: int) -> dict[str, object]:
    return {"sparse_mode": 3, "atten_mask": TEMPLATE} if tokens > 1 else {"sparse_mode": 0}


def contiguous(torch_npu, extra: int = 0, layers: int = 2, steps: int = 3, prompt: int = 4) -> None:
    """BNSD caches ``[B, N, S, D]`` written with ``scatter_update_`` at each row's start position."""
    generator = torch.Generator().manual_seed(0)
    caches = [(torch.zeros(B, NKV, 16, D), torch.zeros(B, NKV, 16, D)) for _ in range(layers)]
    kv_len = 0
    for step in range(steps):
        tokens = prompt if step == 0 else 1
        for k_cache, v_cache in caches:
            q, k, v = (torch.randn(B, heads, tokens, D, generator=generator) for heads in (NQ, NKV, NKV))
            torch_npu.scatter_update_(k_cache, torch.tensor([kv_len] * B), k, -2)  # contiguous write
            torch_npu.scatter_update_(v_cache, torch.tensor([kv_len] * B), v, -2)
            torch_npu.npu_fused_infer_attention_score(q, k_cache, v_cache, num_heads=NQ, num_key_value_heads=NKV, input_layout="BNSD", scale=SCALE, actual_seq_lengths_kv=[kv_len + tokens + extra] * B, **_mask(tokens))  # noqa: E501  # contiguous attention
        kv_len += tokens


def coordinates(torch_npu, extra: int = 0, steps: int = 3, prompt: int = 3) -> None:
    """BSH caches ``[B, S, H]`` written with ``npu_scatter_nd_update_`` at ``(batch, position)`` pairs;
    the two requests have different lengths."""
    generator = torch.Generator().manual_seed(1)
    k_cache, v_cache = torch.zeros(B, 16, NKV * D), torch.zeros(B, 16, NKV * D)
    kv_lens = [prompt, prompt + 2]
    for step in range(steps):
        tokens = [kv_lens[b] if step == 0 else 1 for b in range(B)]
        starts = [0] * B if step == 0 else kv_lens
        pairs = torch.tensor([[b, starts[b] + t] for b in range(B) for t in range(tokens[b])])
        k, v = (torch.randn(len(pairs), NKV * D, generator=generator) for _ in range(2))
        torch_npu.npu_scatter_nd_update_(k_cache, pairs, k)  # coordinates write
        torch_npu.npu_scatter_nd_update_(v_cache, pairs, v)
        if step > 0:
            kv_lens = [n + 1 for n in kv_lens]
        q = torch.randn(B, 1, NQ * D, generator=generator)
        torch_npu.npu_fused_infer_attention_score(q, k_cache, v_cache, num_heads=NQ, num_key_value_heads=NKV, input_layout="BSH", scale=SCALE, actual_seq_lengths_kv=[n + extra for n in kv_lens])  # noqa: E501  # coordinates attention


def paged(torch_npu, extra: int = 0, steps: int = 3, prompt: int = 5, atb: bool = False) -> None:
    """ND paged caches ``[blocks, block_size, N, D]`` written by slot (``npu_scatter_pa_kv_cache``,
    ``cache_mode="Norm"``, or with ``atb`` ATB's ``_npu_reshape_and_cache``, vllm-ascend's write) and read
    as ``[blocks, block_size, H]`` through a block table whose blocks are not in order; the two requests
    have different lengths and their own blocks."""
    generator = torch.Generator().manual_seed(2)
    k_cache, v_cache = torch.zeros(6, BLOCK, NKV, D), torch.zeros(6, BLOCK, NKV, D)
    table = torch.tensor([[4, 1, 3], [0, 5, 2]], dtype=torch.int32)
    kv_lens = [prompt + 14, prompt]  # request 0 crosses into its second block during decode
    for step in range(steps):
        tokens = list(kv_lens) if step == 0 else [1] * B
        positions = [list(range(n)) if step == 0 else [kv_lens[b]] for b, n in enumerate(tokens)]
        slots = torch.tensor([int(table[b, p // BLOCK]) * BLOCK + p % BLOCK for b in range(B) for p in positions[b]])
        k, v = (torch.randn(len(slots), NKV, D, generator=generator) for _ in range(2))
        write = torch_npu._npu_reshape_and_cache if atb else partial(torch_npu.npu_scatter_pa_kv_cache, cache_mode="Norm")
        write(k, v, k_cache, v_cache, slots)  # paged write
        if step > 0:
            kv_lens = [n + 1 for n in kv_lens]
        q = torch.randn(B, 1, NQ * D, generator=generator)
        torch_npu.npu_fused_infer_attention_score(q, k_cache.view(6, BLOCK, -1), v_cache.view(6, BLOCK, -1), block_table=table, block_size=BLOCK, num_heads=NQ, num_key_value_heads=NKV, input_layout="BSH", scale=SCALE, actual_seq_lengths_kv=[n + extra for n in kv_lens])  # noqa: E501  # paged attention


def packed(torch_npu, extra: int = 0) -> None:
    """TND chunked prefill over a paged cache: the new tokens of two requests packed on T (cumulative
    ``actual_seq_qlen``), their slots in token order, per-request KV lengths (SEM-D4). Request 1 already
    holds 6 tokens and adds 3; request 0 is new with 4. Only request 1's lengths are off by ``extra``. The head
    dim is one the TND layouts document (FIA-C55: 128)."""
    D = TND_D  # noqa: N806
    generator = torch.Generator().manual_seed(3)
    k_cache, v_cache = torch.zeros(6, BLOCK, NKV * D), torch.zeros(6, BLOCK, NKV * D)
    table = torch.tensor([[2, 0], [5, 3]], dtype=torch.int32)
    for cache in (k_cache, v_cache):  # request 1's first 6 tokens, written by an earlier step
        cache[5, :6] = torch.randn(6, NKV * D, generator=generator)
    new = [list(range(4)), list(range(6, 9))]
    slots = torch.tensor([int(table[b, p // BLOCK]) * BLOCK + p % BLOCK for b in range(B) for p in new[b]])
    k, v = (torch.randn(len(slots), NKV, D, generator=generator) for _ in range(2))
    torch_npu.npu_scatter_pa_kv_cache(k, v, k_cache.view(6, BLOCK, NKV, D), v_cache.view(6, BLOCK, NKV, D), slots, cache_mode="Norm")  # noqa: E501  # packed write
    q = torch.randn(7, NQ, D, generator=generator)
    torch_npu.npu_fused_infer_attention_score_v2(q, k_cache, v_cache, block_table=table, block_size=BLOCK, num_query_heads=NQ, num_key_value_heads=NKV, input_layout="TND", softmax_scale=SCALE, actual_seq_qlen=[4, 7], actual_seq_kvlen=[4, 9 + extra], sparse_mode=3, atten_mask=TEMPLATE)  # noqa: E501  # packed attention


def round_robin(torch_npu, requests: int = 2, steps: int = 4) -> None:
    """Requests served in turn from one call site, each with its own one-layer cache and its own length."""
    generator = torch.Generator().manual_seed(4)
    caches = [(torch.zeros(1, NKV, 32, D), torch.zeros(1, NKV, 32, D)) for _ in range(requests)]
    kv_lens = [3 + 4 * r for r in range(requests)]
    for step in range(steps):
        for r, (k_cache, v_cache) in enumerate(caches):
            tokens = kv_lens[r] if step == 0 else 1
            start = 0 if step == 0 else kv_lens[r]
            q, k, v = (torch.randn(1, heads, tokens, D, generator=generator) for heads in (NQ, NKV, NKV))
            torch_npu.scatter_update_(k_cache, torch.tensor([start]), k, -2)
            torch_npu.scatter_update_(v_cache, torch.tensor([start]), v, -2)
            if step:
                kv_lens[r] += 1
            torch_npu.npu_fused_infer_attention_score(q, k_cache, v_cache, num_heads=NQ, num_key_value_heads=NKV, input_layout="BNSD", scale=SCALE, actual_seq_lengths_kv=[kv_lens[r]], **_mask(tokens))  # noqa: E501


def zero_keys_read_later(torch_npu, steps: int = 3, prompt: int = 5) -> None:
    """A paged cache whose first step writes keys that are exactly zero in some rows (a warm-up's dummy
    tokens: zero hidden states give zero keys), read again by the later steps' decode: every row read was
    written, in this step or an earlier one."""
    generator = torch.Generator().manual_seed(3)
    k_cache, v_cache = torch.zeros(4, BLOCK, NKV, D), torch.zeros(4, BLOCK, NKV, D)
    table = torch.tensor([[1], [2]], dtype=torch.int32)
    kv_lens = [prompt, prompt]
    for step in range(steps):
        tokens = list(kv_lens) if step == 0 else [1] * B
        positions = [list(range(n)) if step == 0 else [kv_lens[b]] for b, n in enumerate(tokens)]
        slots = torch.tensor([int(table[b, 0]) * BLOCK + p for b in range(B) for p in positions[b]])
        k, v = (torch.randn(len(slots), NKV, D, generator=generator) for _ in range(2))
        if step == 0:
            k[::2] = 0
        torch_npu.npu_scatter_pa_kv_cache(k, v, k_cache, v_cache, slots, cache_mode="Norm")  # zero-keys write
        if step > 0:
            kv_lens = [n + 1 for n in kv_lens]
        q = torch.randn(B, 1, NQ * D, generator=generator)
        torch_npu.npu_fused_infer_attention_score(q, k_cache.view(4, BLOCK, -1), v_cache.view(4, BLOCK, -1), block_table=table, block_size=BLOCK, num_heads=NQ, num_key_value_heads=NKV, input_layout="BSH", scale=SCALE, actual_seq_lengths_kv=kv_lens)  # noqa: E501  # zero-keys attention
