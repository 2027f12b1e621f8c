"""The reference's calling contract: schema defaults, decode rules, refusals, dtypes and the cache writes."""

from __future__ import annotations

import pytest
import torch
from kvlint.runtime_probe.reference.operators import (
    fused_infer_attention_score,
    fused_infer_attention_score_v2,
    incre_flash_attention,
    npu_scatter_nd_update,
    npu_scatter_nd_update_,
    prompt_flash_attention,
    scatter_update,
    scatter_update_,
)

TEMPLATE = torch.ones(2048, 2048, dtype=torch.bool).triu(1)


def qkv(
    batch: int = 2, q_len: int = 6, kv_len: int = 6, heads: int = 2, dim: int = 8, seed: int = 0
) -> tuple[torch.Tensor, ...]:
    gen = torch.Generator().manual_seed(seed)
    return (
        torch.randn(batch, q_len, heads * dim, generator=gen),
        torch.randn(batch, kv_len, heads * dim, generator=gen),
        torch.randn(batch, kv_len, heads * dim, generator=gen),
    )


def test_prompt_flash_attention_defaults_to_next_tokens_zero() -> None:
    q, k, v = qkv()
    unmasked = torch.zeros(6, 6, dtype=torch.bool)
    pfa = prompt_flash_attention(q, k, v, num_heads=2, atten_mask=unmasked)
    top_left, _ = fused_infer_attention_score(q, k, v, num_heads=2, sparse_mode=2, atten_mask=TEMPLATE)
    full, _ = fused_infer_attention_score(q, k, v, num_heads=2, atten_mask=unmasked)
    assert torch.allclose(pfa, top_left, atol=1e-6)
    assert not torch.allclose(pfa, full, atol=1e-3)


def test_scale_defaults_to_one_and_is_never_derived() -> None:
    q, k, v = qkv()
    default, _ = fused_infer_attention_score(q, k, v, num_heads=2)
    one, _ = fused_infer_attention_score(q, k, v, num_heads=2, scale=1.0)
    derived, _ = fused_infer_attention_score(q, k, v, num_heads=2, scale=8**-0.5)
    assert torch.equal(default, one)
    assert not torch.allclose(default, derived, atol=1e-3)


def test_unknown_keyword_is_refused() -> None:
    q, k, v = qkv()
    with pytest.raises(TypeError, match="num_query_heads"):
        fused_infer_attention_score(q, k, v, num_query_heads=2)
    with pytest.raises(TypeError, match="'scale'"):
        fused_infer_attention_score_v2(q, k, v, scale=1.0)


def test_single_query_token_ignores_sparse_mode_band_and_query_lengths() -> None:
    q, k, v = qkv(q_len=1, kv_len=9)
    plain, _ = fused_infer_attention_score(q, k, v, num_heads=2, actual_seq_lengths_kv=[9, 5])
    for kw in (
        {"sparse_mode": 2, "atten_mask": TEMPLATE},
        {"sparse_mode": 4, "atten_mask": TEMPLATE, "pre_tokens": 0, "next_tokens": 0},
        {"atten_mask": torch.zeros(2, 9, dtype=torch.bool), "pre_tokens": 0, "next_tokens": 0},
        {"actual_seq_lengths": [0]},
    ):
        out, _ = fused_infer_attention_score(q, k, v, num_heads=2, actual_seq_lengths_kv=[9, 5], **kw)
        assert torch.equal(out, plain), kw


def test_query_rows_past_the_length_are_zero_with_lse_inf() -> None:
    q, k, v = qkv()
    out, lse = fused_infer_attention_score(q, k, v, num_heads=2, actual_seq_lengths=[4, 6], softmax_lse_flag=True)
    assert torch.all(out[0, 4:] == 0) and torch.all(torch.isinf(lse[0, :, 4:]))
    assert torch.all(torch.isfinite(lse[1])) and torch.all(out[1] != 0)


def test_dtypes_follow_the_query_and_lse_is_float32_or_empty() -> None:
    q, k, v = (t.to(torch.bfloat16) for t in qkv())
    out, lse = fused_infer_attention_score(q, k, v, num_heads=2, softmax_lse_flag=True)
    assert out.dtype == torch.bfloat16 and lse.dtype == torch.float32 and lse.shape == (2, 2, 6, 1)
    _, empty = fused_infer_attention_score_v2(q, k, v, num_query_heads=2)
    assert empty.shape == (0,) and empty.dtype == torch.float32


@pytest.mark.parametrize(
    ("function", "argument", "value"),
    [
        (fused_infer_attention_score, "quant_scale2", torch.ones(1)),
        (fused_infer_attention_score, "dequant_scale1", torch.ones(1)),
        (fused_infer_attention_score, "query_padding_size", torch.zeros(1, dtype=torch.long)),
        (fused_infer_attention_score, "kv_padding_size", torch.zeros(1, dtype=torch.long)),
        (fused_infer_attention_score_v2, "quant_scale_out", torch.ones(1)),
        (fused_infer_attention_score_v2, "dequant_scale_query", torch.ones(1)),
        (fused_infer_attention_score_v2, "query_quant_mode", 3),
        (fused_infer_attention_score_v2, "out_dtype", 1),
        (fused_infer_attention_score_v2, "sparse_mode", 9),
        (incre_flash_attention, "kv_padding_size", torch.zeros(1, dtype=torch.long)),
        (prompt_flash_attention, "deq_scale1", torch.ones(1)),
    ],
)
def test_unimplemented_arguments_raise_naming_the_argument(function: object, argument: str, value: object) -> None:
    q, k, v = qkv()
    heads = "num_query_heads" if function is fused_infer_attention_score_v2 else "num_heads"
    with pytest.raises(NotImplementedError, match=argument):
        function(q, k, v, **{heads: 2, argument: value})


def test_unimplemented_antiquant_granularities_are_refused() -> None:
    q, _, _ = qkv()
    k = torch.randint(-5, 5, (2, 6, 16), dtype=torch.int8)
    with pytest.raises(NotImplementedError, match="key antiquant scale"):
        fused_infer_attention_score(q, k, k, num_heads=2, key_antiquant_scale=torch.ones(2, 5),
                                    value_antiquant_scale=torch.ones(16))  # fmt: skip
    with pytest.raises(NotImplementedError, match="antiquant_mode=2"):  # decode reads the combined mode
        fused_infer_attention_score(q[:, :1], k, k, num_heads=2, antiquant_mode=2)
    with pytest.raises(NotImplementedError, match="key_antiquant_mode"):
        fused_infer_attention_score(q, k, k, num_heads=2, key_antiquant_scale=torch.ones(16), key_antiquant_mode=2,
                                    value_antiquant_scale=torch.ones(16))  # fmt: skip
    with pytest.raises(NotImplementedError, match="key_quant_mode"):
        fused_infer_attention_score_v2(q, k, k, num_query_heads=2, dequant_scale_key=torch.ones(16), key_quant_mode=3,
                                       dequant_scale_value=torch.ones(16))  # fmt: skip


def test_combined_antiquant_mode_has_no_effect_with_several_query_tokens() -> None:
    """FIA-C64: with Q_S > 1 the device dequantises per channel whatever antiquant_mode says; decode reads it."""
    q, _, _ = qkv()
    k = torch.randint(-5, 5, (2, 6, 16), dtype=torch.int8)
    scale = torch.rand(2, 2, 1, 8, generator=torch.Generator().manual_seed(1)) + 0.5  # (2, KV_N, 1, D)
    per_channel, _ = fused_infer_attention_score(q, k, k, num_heads=2, antiquant_scale=scale)
    mode_one, _ = fused_infer_attention_score(q, k, k, num_heads=2, antiquant_scale=scale, antiquant_mode=1)
    assert torch.equal(mode_one, per_channel)
    with pytest.raises(NotImplementedError, match="per-token"):
        fused_infer_attention_score(q[:, :1], k, k, num_heads=2, antiquant_scale=scale, antiquant_mode=1)


def test_modes_two_to_four_need_the_template_and_warn_on_a_wrong_one() -> None:
    q, k, v = qkv()
    with pytest.raises(ValueError, match="2048"):
        fused_infer_attention_score(q, k, v, num_heads=2, sparse_mode=3)
    with pytest.warns(UserWarning, match="triu"):
        fused_infer_attention_score(q, k, v, num_heads=2, sparse_mode=3, atten_mask=~TEMPLATE)
    with pytest.raises(ValueError, match="sparse_mode=5"):
        fused_infer_attention_score(q, k, v, num_heads=2, sparse_mode=5)


def test_inconsistent_calls_are_refused() -> None:
    q, k, v = qkv()
    with pytest.raises(ValueError, match="heads"):
        fused_infer_attention_score(q.view(2, 6, 2, 8).transpose(1, 2), k.view(2, 6, 2, 8).transpose(1, 2),
                                    v.view(2, 6, 2, 8).transpose(1, 2), num_heads=4, input_layout="BNSD")  # fmt: skip
    with pytest.raises(ValueError, match="actual_seq_lengths_kv"):
        fused_infer_attention_score(q, k.view(-1, 4, 16), v.view(-1, 4, 16), num_heads=2,
                                    block_table=torch.zeros(2, 3, dtype=torch.int32), block_size=4)  # fmt: skip
    with pytest.raises(ValueError, match="actual_seq_lengths"):
        fused_infer_attention_score(q[0].view(6, 2, 8), k[0].view(6, 2, 8), v[0].view(6, 2, 8), num_heads=2,
                                    input_layout="TND")  # fmt: skip
    with pytest.raises(ValueError, match="must lie within"):
        fused_infer_attention_score(q, k, v, num_heads=2, actual_seq_lengths_kv=[7])


def test_scatter_update_writes_consecutive_positions_per_batch() -> None:
    cache = torch.zeros(2, 3, 8, 4)  # (batch, heads, seq, dim), axis -2 = seq
    updates = torch.randn(2, 3, 2, 4)
    starts = torch.tensor([5, 1])
    copy = scatter_update(cache, starts, updates, -2)
    assert torch.count_nonzero(cache) == 0, "the out-of-place variant leaves its input alone"
    assert scatter_update_(cache, starts, updates, -2) is cache
    for result in (copy, cache):
        assert torch.equal(result[0, :, 5:7], updates[0]) and torch.equal(result[1, :, 1:3], updates[1])
        assert torch.count_nonzero(result) == updates.numel()


def test_scatter_nd_update_follows_the_documented_shapes() -> None:
    data = torch.zeros(4, 5, 6)
    indices = torch.tensor([[0, 1], [3, 4], [2, 0]])
    updates = torch.randn(3, 6)
    copy = npu_scatter_nd_update(data, indices, updates)
    assert torch.count_nonzero(data) == 0
    assert npu_scatter_nd_update_(data, indices, updates) is data
    for result in (copy, data):
        for row, (i, j) in enumerate(indices.tolist()):
            assert torch.equal(result[i, j], updates[row])
        assert torch.count_nonzero(result) == updates.numel()
    with pytest.raises(ValueError, match="updates"):
        npu_scatter_nd_update(data, indices, torch.randn(3, 5))



def test_every_accepted_mask_shape_means_the_same() -> None:
    gen = torch.Generator().manual_seed(3)
    q, k, v = qkv(q_len=1, kv_len=9)
    decode = torch.rand(2, 9, generator=gen) < 0.4
    want, _ = fused_infer_attention_score(q, k, v, num_heads=2, atten_mask=decode.view(2, 1, 1, 9))
    for mask in (decode, decode.view(2, 1, 9), decode.to(torch.uint8)):
        assert torch.equal(fused_infer_attention_score(q, k, v, num_heads=2, atten_mask=mask)[0], want)
    q, k, v = qkv(q_len=5, kv_len=9)
    prefill = torch.rand(5, 9, generator=gen) < 0.4
    want, _ = fused_infer_attention_score(q, k, v, num_heads=2, atten_mask=prefill.view(1, 1, 5, 9))
    for mask in (prefill, prefill.view(1, 5, 9), prefill.expand(2, 5, 9), prefill.to(torch.int8)):
        assert torch.equal(fused_infer_attention_score(q, k, v, num_heads=2, atten_mask=mask)[0], want)
    unmasked, _ = fused_infer_attention_score(q, k, v, num_heads=2)
    assert not torch.allclose(want, unmasked, atol=1e-3)
