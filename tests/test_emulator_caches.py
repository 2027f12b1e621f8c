"""The KV-cache and attention operators real engines call, checked against plain torch: paged writes (ND and
NZ) read back by FIA and ATB, the MLA cache writer, the ATB attention forms, ``npu_fusion_attention``,
``.out`` with a placeholder lse, the workspace queries and the fake kernels' dtypes."""

from __future__ import annotations

import types

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode


HEADS, KV_HEADS, DIM, BLOCK, BLOCKS = 4, 2, 32, 16, 8
LENGTHS = [20, 9]
TABLE = torch.tensor([[3, 5], [6, 0]], dtype=torch.int32)


def rand(*shape: int, dtype: torch.dtype = torch.float16, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


def sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float, causal: bool = False) -> torch.Tensor:
    """torch's attention, (N, S, D) per sequence, KV heads repeated."""
    group = q.shape[0] // k.shape[0]
    k, v = k.repeat_interleave(group, 0).float(), v.repeat_interleave(group, 0).float()
    if causal:  # bottom-right aligned
        s1, s2 = q.shape[1], k.shape[1]
        allowed = torch.ones(s1, s2, dtype=torch.bool).tril(s2 - s1)
        return torch.nn.functional.scaled_dot_product_attention(q.float(), k, v, attn_mask=allowed, scale=scale)
    return torch.nn.functional.scaled_dot_product_attention(q.float(), k, v, scale=scale)


def sequences() -> tuple[list[torch.Tensor], list[torch.Tensor], torch.Tensor]:
    """Per-sequence keys and values (tokens, KV_HEADS, DIM) and the slot of every token through TABLE."""
    keys = [rand(n, KV_HEADS, DIM, seed=10 + b) for b, n in enumerate(LENGTHS)]
    values = [rand(n, KV_HEADS, DIM, seed=20 + b) for b, n in enumerate(LENGTHS)]
    slots = torch.cat([TABLE[b, torch.arange(n) // BLOCK] * BLOCK + torch.arange(n) % BLOCK for b, n in enumerate(LENGTHS)])
    return keys, values, slots.int()


def close(got: torch.Tensor, want: torch.Tensor) -> bool:
    return torch.allclose(got.float(), want.float(), atol=2e-3, rtol=2e-3)


# -- cache writes ------------------------------------------------------------------------------------------
def test_reshape_and_cache_writes_slots_and_skips_negative_ones(torch_npu: types.ModuleType) -> None:
    key_cache, value_cache = torch.zeros(4, BLOCK, 2, 8), torch.zeros(4, BLOCK, 2, 8)
    key, value = rand(3, 2, 8, dtype=torch.float32), rand(3, 2, 8, dtype=torch.float32, seed=1)
    assert torch_npu._npu_reshape_and_cache(key, value, key_cache, value_cache, torch.tensor([17, -1, 63]).int()) is None
    assert torch.equal(key_cache[1, 1], key[0]) and torch.equal(value_cache[3, 15], value[2])
    assert torch.count_nonzero(key_cache) == 2 * 2 * 8


def test_reshape_and_cache_uses_nz_only_when_both_caches_are_nz(torch_npu: types.ModuleType) -> None:
    key, value = rand(2, 2, 16), rand(2, 2, 16, seed=1)
    slots = torch.tensor([0, 18], dtype=torch.int32)
    nz_key = torch_npu.npu_format_cast(torch.zeros(2, 2, BLOCK, 16, dtype=torch.float16), 29)
    nz_value = torch_npu.npu_format_cast(torch.zeros(2, 2, BLOCK, 16, dtype=torch.float16), 29)
    torch_npu._npu_reshape_and_cache(key, value, nz_key, nz_value, slots)
    # NZ: feature h of the token at (block b, offset o) is [b, h // 16, o, h % 16]
    assert torch.equal(nz_key[1, :, 2].reshape(-1), key[1].reshape(-1))
    nd_key = torch_npu.npu_format_cast(torch.zeros(2, 2, BLOCK, 16, dtype=torch.float16), 2)
    torch_npu._npu_reshape_and_cache(key, value, nd_key, nz_value, slots)
    assert torch.equal(nd_key.view(-1, 32)[18], key[1].reshape(-1))
    # no recorded format (a copy under torch.compile): the NZ shape [blocks, H/16, bs, 16] says NZ, the ND
    # shape [blocks, bs, N, D] says ND
    copies = torch.zeros(2, 2, BLOCK, 16, dtype=torch.float16), torch.zeros(2, 2, BLOCK, 16, dtype=torch.float16)
    torch_npu._npu_reshape_and_cache(key, value, *copies, slots)
    assert torch.equal(copies[0], nz_key)
    nd_shaped = torch.zeros(2, BLOCK, 2, 16, dtype=torch.float16), torch.zeros(2, BLOCK, 2, 16, dtype=torch.float16)
    torch_npu._npu_reshape_and_cache(key, value, *nd_shaped, slots)
    assert torch.equal(nd_shaped[0][1, 2], key[1])


def test_scatter_update_with_row_and_start_pairs(torch_npu: types.ModuleType) -> None:
    cache, rows = torch.zeros(4, 16, 32), rand(2, 1, 32, dtype=torch.float32)
    assert torch_npu.scatter_update_(cache, torch.tensor([[2, 5], [0, 15]]), rows, -2) is cache
    assert torch.equal(cache[2, 5], rows[0, 0]) and torch.equal(cache[0, 15], rows[1, 0])
    assert torch.count_nonzero(cache) == 64


@pytest.mark.parametrize("layout", ["nz_5d", "nd_bnsd"])
def test_paged_writes_are_read_back_by_fia(torch_npu: types.ModuleType, layout: str) -> None:
    keys, values, slots = sequences()
    if layout == "nz_5d":
        key_cache = torch.zeros(BLOCKS, KV_HEADS * DIM // 16, BLOCK, 16, dtype=torch.float16)
        value_cache = torch.zeros_like(key_cache)
        torch_npu.npu_scatter_pa_kv_cache(torch.cat(keys), torch.cat(values), key_cache, value_cache, slots)
        key_view = key_cache.view(BLOCKS, KV_HEADS, DIM // 16, BLOCK, 16)
        value_view = value_cache.view(BLOCKS, KV_HEADS, DIM // 16, BLOCK, 16)
    else:
        key_cache = torch.zeros(BLOCKS, BLOCK, KV_HEADS, DIM, dtype=torch.float16)
        value_cache = torch.zeros_like(key_cache)
        torch_npu.npu_scatter_pa_kv_cache(torch.cat(keys), torch.cat(values), key_cache, value_cache, slots,
                                          cache_mode="Norm")  # fmt: skip
        key_view, value_view = key_cache.transpose(1, 2), value_cache.transpose(1, 2)
    query = rand(2, HEADS, 1, DIM, seed=3)
    out, _ = torch_npu.npu_fused_infer_attention_score_v2(
        query, key_view, value_view, num_query_heads=HEADS, num_key_value_heads=KV_HEADS, input_layout="BNSD",
        block_table=TABLE, block_size=BLOCK, actual_seq_kvlen=LENGTHS, softmax_scale=DIM**-0.5,
    )  # fmt: skip
    for b in range(2):
        assert close(out[b], sdpa(query[b], keys[b].transpose(0, 1), values[b].transpose(0, 1), DIM**-0.5))


def test_mla_cache_writer_and_nz_rope_views_feed_fia(torch_npu: types.ModuleType) -> None:
    batch, seq, latent, rope = 2, 3, 512, 64
    kv = rand(batch, 1, seq, latent + rope, dtype=torch.bfloat16)
    gamma = rand(latent, dtype=torch.bfloat16, seed=1).abs() + 0.5
    cos, sin = rand(batch * seq, 1, 1, rope, dtype=torch.bfloat16, seed=2), rand(batch * seq, 1, 1, rope, dtype=torch.bfloat16, seed=3)
    rope_cache, nope_cache = torch.zeros(4, BLOCK, 1, rope, dtype=torch.bfloat16), torch.zeros(4, BLOCK, 1, latent, dtype=torch.bfloat16)
    slots = torch.tensor([16, 17, 18, 32, 33, 34])
    k_rope, c_kv = torch_npu.npu_kv_rmsnorm_rope_cache_v2(kv, gamma, cos, sin, slots, rope_cache, nope_cache,
                                                          cache_mode="PA_NZ", is_output_kv=True)  # fmt: skip
    want_c = torch.nn.functional.rms_norm(kv[..., :latent].float(), (latent,), gamma.float(), eps=1e-5)
    pe = kv[..., latent:].float()[..., list(range(0, rope, 2)) + list(range(1, rope, 2))]
    table_cos, table_sin = cos.float().view(batch, 1, seq, rope), sin.float().view(batch, 1, seq, rope)
    want_r = pe * table_cos + torch.cat((-pe[..., rope // 2:], pe[..., : rope // 2]), -1) * table_sin
    assert torch.allclose(c_kv.float(), want_c, atol=3e-2, rtol=2e-2) and torch.allclose(k_rope.float(), want_r, atol=3e-2, rtol=2e-2)
    nope_nz = nope_cache.view(4, 1, latent // 16, BLOCK, 16)
    rope_nz = rope_cache.view(4, 1, rope // 16, BLOCK, 16)
    assert torch.equal(nope_nz[1, 0, :, 1].reshape(-1), c_kv[0, 0, 1])
    query, query_rope = rand(2, 8, latent, dtype=torch.bfloat16, seed=4), rand(2, 8, rope, dtype=torch.bfloat16, seed=5)
    out, _ = torch_npu.npu_fused_infer_attention_score_v2(
        query, nope_nz, nope_nz, query_rope=query_rope, key_rope=rope_nz, num_query_heads=8, num_key_value_heads=1,
        input_layout="TND_NTD", block_table=torch.tensor([[1], [2]], dtype=torch.int32), block_size=BLOCK,
        actual_seq_qlen=[1, 2], actual_seq_kvlen=[3, 3], softmax_scale=0.1,
    )  # fmt: skip
    keys = torch.cat([c_kv, k_rope], -1)[:, 0]  # (batch, seq, latent + rope), one KV head
    for b, (start, stop) in enumerate([(0, 1), (1, 2)]):
        q = torch.cat([query[start:stop], query_rope[start:stop]], -1).transpose(0, 1)
        want = sdpa(q, keys[b][None], c_kv[b, 0][None], 0.1)
        assert torch.allclose(out[:, start:stop].float(), want.float(), atol=3e-2, rtol=2e-2)


def test_mla_cache_writer_variants_return_what_their_schemas_say(torch_npu: types.ModuleType) -> None:
    kv = rand(1, 1, 2, 576, dtype=torch.bfloat16)
    gamma, cos, sin = torch.ones(512, dtype=torch.bfloat16), rand(1, 1, 2, 64, dtype=torch.bfloat16), rand(1, 1, 2, 64, dtype=torch.bfloat16)
    k_cache, ckv_cache = torch.zeros(1, 1, 4, 64, dtype=torch.bfloat16), torch.zeros(1, 1, 4, 512, dtype=torch.bfloat16)
    positions = torch.tensor([[1, 3]])
    outputs = torch_npu.npu_kv_rmsnorm_rope_cache(kv, gamma, cos, sin, positions, k_cache, ckv_cache)
    assert outputs[0] is k_cache and outputs[1] is ckv_cache and len(outputs) == 4
    assert torch.equal(ckv_cache[0, 0, 3], outputs[3][0, 0, 1]) and torch.count_nonzero(ckv_cache[0, 0, 0]) == 0
    untouched_k, untouched_c = torch.zeros_like(k_cache), torch.zeros_like(ckv_cache)
    *_, new_k, new_c = torch_npu.npu_kv_rmsnorm_rope_cache_v2_functional(kv, gamma, cos, sin, positions, untouched_k, untouched_c)
    assert torch.count_nonzero(untouched_c) == 0 and torch.equal(new_c, ckv_cache) and torch.equal(new_k, k_cache)
    with pytest.raises(NotImplementedError, match="c_kv_scale"):
        torch_npu.npu_kv_rmsnorm_rope_cache_v2(kv, gamma, cos, sin, positions, k_cache, ckv_cache, c_kv_scale=torch.ones(512))


def test_gather_reads_paged_tokens_back(torch_npu: types.ModuleType) -> None:
    keys, values, slots = sequences()
    key_cache, value_cache = torch.zeros(BLOCKS, BLOCK, KV_HEADS, DIM), torch.zeros(BLOCKS, BLOCK, KV_HEADS, DIM)
    torch_npu._npu_reshape_and_cache(torch.cat(keys).float(), torch.cat(values).float(), key_cache, value_cache, slots)
    key, value = torch.zeros(12, KV_HEADS, DIM), torch.zeros(12, KV_HEADS, DIM)
    torch_npu.npu_gather_pa_kv_cache(key_cache, value_cache, TABLE, torch.tensor([8, 4]), key, value,
                                     seq_offset=torch.tensor([10, 2]))  # fmt: skip
    assert torch.equal(key[:8], keys[0][10:18].float()) and torch.equal(value[8:], values[1][2:6].float())


# -- ATB attention --------------------------------------------------------------------------------------
@pytest.mark.parametrize("nz", [False, True])
def test_atb_paged_attention(torch_npu: types.ModuleType, nz: bool) -> None:
    keys, values, slots = sequences()
    shape = (BLOCKS, KV_HEADS * DIM // 16, BLOCK, 16) if nz else (BLOCKS, BLOCK, KV_HEADS, DIM)
    key_cache, value_cache = torch.zeros(shape, dtype=torch.float16), torch.zeros(shape, dtype=torch.float16)
    if nz:
        key_cache, value_cache = torch_npu.npu_format_cast(key_cache, 29), torch_npu.npu_format_cast(value_cache, 29)
    torch_npu._npu_reshape_and_cache(torch.cat(keys), torch.cat(values), key_cache, value_cache, slots)
    query, out = rand(2, HEADS, DIM, seed=3), torch.empty(2, HEADS, DIM, dtype=torch.float16)
    workspace = torch_npu._npu_paged_attention_get_workspace(query, key_cache, value_cache, KV_HEADS, HEADS, 0.2, TABLE,
                                                             torch.tensor(LENGTHS).int(), out)  # fmt: skip
    torch_npu._npu_paged_attention(query, key_cache, value_cache, KV_HEADS, HEADS, 0.2, TABLE,
                                   torch.tensor(LENGTHS, dtype=torch.int32), out, workspace=workspace)  # fmt: skip
    for b in range(2):
        want = sdpa(query[b][:, None], keys[b].transpose(0, 1), values[b].transpose(0, 1), 0.2)[:, 0]
        assert close(out[b], want)


def test_atb_self_attention_forms(torch_npu: types.ModuleType) -> None:
    keys, values, _ = sequences()
    total = sum(LENGTHS)
    query, seq_len = rand(total, HEADS * DIM, seed=4), torch.tensor(LENGTHS)
    key, value = torch.cat(keys).flatten(1), torch.cat(values).flatten(1)
    causal_mask = torch.ones(1, 32, 32).triu(1).half() * -10000
    outs = {name: torch.empty(total, HEADS, DIM, dtype=torch.float16) for name in ("flash", "v3", "unpad")}
    torch_npu._npu_flash_attention(query, key, value, causal_mask, seq_len, 0.2, HEADS, KV_HEADS, outs["flash"])
    torch_npu._npu_flash_attention_v3(query, key, value, torch.zeros(2048, 2048).half(), seq_len, 0.2, HEADS, KV_HEADS,
                                      out=outs["v3"])  # fmt: skip
    torch_npu._npu_flash_attention_unpad(query, key, value, seq_len, 0.2, HEADS, KV_HEADS, outs["unpad"])
    start = 0
    for b, n in enumerate(LENGTHS):
        q = query[start : start + n].view(n, HEADS, DIM).transpose(0, 1)
        k, v = keys[b].transpose(0, 1), values[b].transpose(0, 1)
        causal = sdpa(q, k, v, 0.2, causal=True).transpose(0, 1)
        assert close(outs["flash"][start : start + n], causal) and close(outs["v3"][start : start + n], causal)
        assert close(outs["unpad"][start : start + n], sdpa(q, k, v, 0.2).transpose(0, 1))
        start += n
    with pytest.raises(RuntimeError, match="mask_type=2"):
        torch_npu._npu_flash_attention_v3(query, key, value, causal_mask, seq_len, 0.2, HEADS, KV_HEADS, mask_type=2,
                                          out=outs["v3"])  # fmt: skip


def test_atb_splitfuse_is_bottom_right_causal_chunked_prefill(torch_npu: types.ModuleType) -> None:
    keys, values, slots = sequences()
    key_cache, value_cache = torch.zeros(BLOCKS, BLOCK, KV_HEADS, DIM, dtype=torch.float16), torch.zeros(BLOCKS, BLOCK, KV_HEADS, DIM, dtype=torch.float16)
    torch_npu._npu_reshape_and_cache(torch.cat(keys), torch.cat(values), key_cache, value_cache, slots)
    new = [5, 3]  # the last 5 and 3 tokens of each sequence are this chunk's queries
    query, out = rand(sum(new), HEADS, DIM, seed=5), torch.empty(sum(new), HEADS, DIM, dtype=torch.float16)
    torch_npu._npu_paged_attention_splitfuse_v2(query, key_cache, value_cache, TABLE, torch.tensor(LENGTHS).int(),
                                                torch.zeros(2048, 2048).half(), torch.tensor(new).int(), KV_HEADS, HEADS,
                                                0.2, out=out)  # fmt: skip
    start = 0
    for b, n in enumerate(new):
        want = sdpa(query[start : start + n].transpose(0, 1), keys[b].transpose(0, 1), values[b].transpose(0, 1), 0.2,
                    causal=True).transpose(0, 1)  # fmt: skip
        assert close(out[start : start + n], want)
        start += n


# -- npu_fusion_attention ----------------------------------------------------------------------------------
@pytest.mark.parametrize("layout", ["BSH", "SBH", "BNSD", "BSND", "TND"])
def test_fusion_attention_layouts_against_sdpa(torch_npu: types.ModuleType, layout: str) -> None:
    q, k, v = (rand(2, HEADS, 7, DIM, dtype=torch.float32, seed=s) for s in (1, 2, 3))
    template = torch.ones(2048, 2048, dtype=torch.bool).triu(1)
    pack = {
        "BSH": lambda t: t.transpose(1, 2).flatten(2), "SBH": lambda t: t.permute(2, 0, 1, 3).flatten(2),
        "BNSD": lambda t: t, "BSND": lambda t: t.transpose(1, 2), "TND": lambda t: t.transpose(1, 2).flatten(0, 1),
    }[layout]  # fmt: skip
    lengths = {"actual_seq_qlen": [7, 14], "actual_seq_kvlen": [7, 14]} if layout == "TND" else {}
    result = torch_npu.npu_fusion_attention(pack(q), pack(k), pack(v), HEADS, layout, atten_mask=template, scale=0.2,
                                            sparse_mode=2, **lengths)  # fmt: skip
    assert len(result) == 7 and result[4:] == (0, 0, 0)
    want = torch.stack([sdpa(q[b], k[b], v[b], 0.2, causal=True) for b in range(2)])
    assert close(result[0], pack(want))
    unmasked = torch_npu.npu_fusion_attention(pack(q), pack(k), pack(v), HEADS, layout, scale=0.2, sparse_mode=3, **lengths)
    assert close(unmasked[0], pack(torch.stack([sdpa(q[b], k[b], v[b], 0.2) for b in range(2)])))  # fa-c8


def test_fusion_attention_statistics_recombine_partial_results(torch_npu: types.ModuleType) -> None:
    q, k, v = (rand(1, HEADS, 6, DIM, dtype=torch.float32, seed=s) for s in (1, 2, 3))
    parts = [torch_npu.npu_fusion_attention(q, k[:, :, i : i + 3], v[:, :, i : i + 3], HEADS, "BNSD", scale=0.3)
             for i in (0, 3)]  # fmt: skip
    lse = torch.stack([p[1][..., 0] + p[2][..., 0].log() for p in parts])
    combined = sum(p[0] * (l - lse.logsumexp(0)).exp().unsqueeze(-1) for p, l in zip(parts, lse))
    assert parts[0][1].shape == (1, HEADS, 6, 8) and close(combined, sdpa(q[0], k[0], v[0], 0.3)[None])


# -- .out, workspaces, fake dtypes --------------------------------------------------------------------------
def test_out_overload_leaves_a_placeholder_lse_alone(torch_npu: types.ModuleType) -> None:
    q, kv = rand(2, 1, HEADS * DIM, dtype=torch.float32), rand(2, 5, KV_HEADS * DIM, dtype=torch.float32, seed=1)
    keywords = {"num_heads": HEADS, "num_key_value_heads": KV_HEADS, "scale": 0.2}
    workspace = torch_npu._npu_fused_infer_attention_score_get_max_workspace(q, kv, kv, **keywords)
    out, placeholder = torch.empty(2, 1, HEADS * DIM), torch.empty(1)
    torch_npu.npu_fused_infer_attention_score.out(q, kv, kv, workspace=workspace, out=[out, placeholder], **keywords)
    assert placeholder.shape == (1,)
    assert torch.equal(out, torch_npu.npu_fused_infer_attention_score(q, kv, kv, **keywords)[0])
    lse = torch.empty(0)
    torch_npu.npu_fused_infer_attention_score.out(q, kv, kv, softmax_lse_flag=True, out=[out, lse], **keywords)
    assert lse.shape == (2, HEADS, 1, 1)
    with pytest.raises(RuntimeError, match="attention_out"):
        torch_npu.npu_fused_infer_attention_score.out(q, kv, kv, out=[torch.empty(3, 3), placeholder], **keywords)


def test_fake_attention_gives_int8_with_an_output_quantisation_scale(torch_npu: types.ModuleType) -> None:
    q, kv = rand(2, 1, HEADS * DIM), rand(2, 5, KV_HEADS * DIM, seed=1)
    with FakeTensorMode() as mode:
        fq, fkv, scale = mode.from_tensor(q), mode.from_tensor(kv), mode.from_tensor(torch.ones(1))
        v1, _ = torch_npu.npu_fused_infer_attention_score(fq, fkv, fkv, num_heads=HEADS, num_key_value_heads=KV_HEADS,
                                                          quant_scale2=scale)  # fmt: skip
        v2, _ = torch_npu.npu_fused_infer_attention_score_v2(fq, fkv, fkv, num_query_heads=HEADS,
                                                             num_key_value_heads=KV_HEADS, quant_scale_out=scale)  # fmt: skip
        plain, _ = torch_npu.npu_fused_infer_attention_score(fq, fkv, fkv, num_heads=HEADS, num_key_value_heads=KV_HEADS)
    assert v1.dtype == v2.dtype == torch.int8 and plain.dtype == torch.float16 and v1.shape == plain.shape
    with pytest.raises(NotImplementedError, match="quant_scale2"):
        torch_npu.npu_fused_infer_attention_score(q, kv, kv, num_heads=HEADS, num_key_value_heads=KV_HEADS,
                                                  quant_scale2=torch.ones(1))  # fmt: skip


def test_mla_prolog_v3_against_its_formula(torch_npu: types.ModuleType) -> None:
    tokens, hidden, q_rank, heads, nope, rope, latent = 3, 32, 16, 2, 16, 64, 32
    weights = [rand(*shape, dtype=torch.bfloat16, seed=s) * 0.2 for s, shape in
               enumerate([(hidden, q_rank), (q_rank, heads * (nope + rope)), (heads, nope, latent), (hidden, latent + rope)])]  # fmt: skip
    gamma_q, gamma_kv = torch.ones(q_rank, dtype=torch.bfloat16), torch.ones(latent, dtype=torch.bfloat16)
    x = rand(tokens, hidden, dtype=torch.bfloat16, seed=9)
    cos, sin = rand(tokens, rope, dtype=torch.bfloat16, seed=10), rand(tokens, rope, dtype=torch.bfloat16, seed=11)
    kv_cache, kr_cache = torch.zeros(2, BLOCK, 1, latent, dtype=torch.bfloat16), torch.zeros(2, BLOCK, 1, rope, dtype=torch.bfloat16)
    slots = torch.tensor([3, 17, 30])
    query, query_rope, *_ = torch_npu.npu_mla_prolog_v3(x, *weights[:2], weights[2], weights[3], gamma_q, gamma_kv, sin, cos,
                                                        kv_cache, kr_cache, cache_index=slots)  # fmt: skip

    def interleave_half(t: torch.Tensor) -> torch.Tensor:
        q = torch.cat([t[..., ::2], t[..., 1::2]], -1)
        half = q.shape[-1] // 2
        return q * cos.float()[:, None] + torch.cat([-q[..., half:], q[..., :half]], -1) * sin.float()[:, None]

    w_dq, w_uq, w_uk, w_dkv = (w.float() for w in weights)
    c_q = torch.nn.functional.rms_norm(x.float() @ w_dq, (q_rank,), eps=1e-5)
    q = (c_q @ w_uq).view(tokens, heads, nope + rope)
    kv = x.float() @ w_dkv
    assert torch.allclose(query.float(), torch.einsum("tnd,ndc->tnc", q[..., :nope], w_uk), atol=2e-2, rtol=2e-2)
    assert torch.allclose(query_rope.float(), interleave_half(q[..., nope:]), atol=2e-2, rtol=2e-2)
    c_kv = torch.nn.functional.rms_norm(kv[:, :latent], (latent,), eps=1e-5)
    assert torch.allclose(kv_cache.view(-1, latent)[slots].float(), c_kv, atol=2e-2, rtol=2e-2)
    assert torch.allclose(kr_cache.view(-1, rope)[slots].float(), interleave_half(kv[:, None, latent:])[:, 0], atol=2e-2, rtol=2e-2)
    with pytest.raises(NotImplementedError, match="weight_quant_mode"):
        torch_npu.npu_mla_prolog_v3(x, *weights, gamma_q, gamma_kv, sin, cos, kv_cache, kr_cache, cache_index=slots,
                                    weight_quant_mode=2)  # fmt: skip
