"""The fast paths give what the naive float64 model (tests/naive_attention.py) gives, in the cases where they
could differ from the per-batch path: a decode of every batch at once (ragged lengths, GQA, block tables that
are shuffled, consecutive runs, repeated blocks, unused NaN blocks, partly filled last blocks, a NaN in one
block, ATB's paged attention), and a prefill in one or two kernel calls (causal with more keys than rows,
fewer keys than rows, a learnable sink).
"""

from __future__ import annotations

import pytest
import torch
from kvlint.runtime_probe.reference import atb, batched_decode
from kvlint.runtime_probe.reference.operators import fused_infer_attention_score, fused_infer_attention_score_v2

from tests.naive_attention import allowed_matrix, naive_attention

HEADS, KV_HEADS, D, BLOCK = 8, 2, 16, 4
NAN = float("nan")
TEMPLATE = torch.ones(2048, 2048, dtype=torch.bool).triu(1)


def rand(*shape: int, seed: int) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def spec(q: torch.Tensor, keys: list[torch.Tensor], values: list[torch.Tensor], mode: int = 0,
         sink: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    """(B, N, S1, D) outputs and (B, N, S1) lse, each batch b over keys[b] (N, S2_b, D)."""
    s1 = q.shape[2]
    allowed = [allowed_matrix(mode, 0, 0, s1, k.shape[1], None) for k in keys]
    outs, lses = naive_attention(list(q.unbind(0)), keys, values, D**-0.5, allowed, sink=sink)
    return torch.stack(outs), torch.stack(lses)


def paged(table: list[list[int]], lengths: list[int], blocks: int, dtype: torch.dtype = torch.float32):
    """A NaN-filled (blocks, N, BLOCK, D) cache holding each batch's first lengths[b] tokens where ``table``
    says; a block named twice holds the same tokens for both (the first batch's)."""
    key_cache = torch.full((blocks, KV_HEADS, BLOCK, D), NAN)
    value_cache = torch.full((blocks, KV_HEADS, BLOCK, D), NAN)
    keys, values = [], []
    for b, n in enumerate(lengths):
        k, v = rand(KV_HEADS, n, D, seed=10 + b), rand(KV_HEADS, n, D, seed=20 + b)
        for s in range(n):
            block, offset = table[b][s // BLOCK], s % BLOCK
            if torch.isnan(key_cache[block, :, offset]).all():
                key_cache[block, :, offset], value_cache[block, :, offset] = k[:, s], v[:, s]
            k[:, s], v[:, s] = key_cache[block, :, offset], value_cache[block, :, offset]
        keys.append(k)
        values.append(v)
    return key_cache.to(dtype), value_cache.to(dtype), torch.tensor(table, dtype=torch.int32), keys, values


def paged_decode(q: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor, table: torch.Tensor,
                 lengths: list[int]) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    out, lse = fused_infer_attention_score_v2(
        q, key_cache, value_cache, num_query_heads=HEADS, num_key_value_heads=KV_HEADS, input_layout="BNSD",
        softmax_scale=D**-0.5, block_table=table, block_size=BLOCK, actual_seq_kvlen=lengths, return_softmax_lse=True,
    )  # fmt: skip
    return out, lse[..., 0]


TABLES = {
    # batch 0: a run of 6 consecutive blocks; batch 1: a shuffled table; batch 2: none; batch 3: one partial block
    "runs and shuffled": ([[2, 3, 4, 5, 6, 7], [13, 9, 11, 1, 0, 0], [0, 0, 0, 0, 0, 0], [12, 0, 0, 0, 0, 0]],
                          [23, 13, 0, 2]),
    # batches 0 and 1 share their first two blocks (a shared prefix); block 8 and 14 are never used
    "repeated blocks": ([[4, 5, 6, 7, 3, 0], [4, 5, 10, 11, 12, 13], [1, 2, 9, 0, 0, 0], [15, 0, 0, 0, 0, 0]],
                        [20, 24, 9, 4]),
}  # fmt: skip


@pytest.mark.parametrize("name", TABLES)
def test_paged_decode_of_every_batch_at_once_is_the_softmax_over_each_batch_keys(name: str) -> None:
    table, lengths = TABLES[name]
    key_cache, value_cache, table, keys, values = paged(table, lengths, blocks=16)
    q = rand(len(lengths), HEADS, 1, D, seed=1)
    out, lse = paged_decode(q, key_cache, value_cache, table, lengths)
    want_out, want_lse = spec(q, keys, values)
    torch.testing.assert_close(out.double(), want_out, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(lse.double(), want_lse, rtol=1e-5, atol=1e-5)  # +inf for the batch without keys


def test_paged_decode_reads_each_block_where_it_lies_not_a_gathered_copy(monkeypatch: pytest.MonkeyPatch) -> None:
    """The full blocks of a run are views of the cache: nothing but the partial last blocks is gathered."""
    gathered = []
    real = torch.index_select
    key_cache, value_cache, table, _, _ = paged([TABLES["runs and shuffled"][0][0]], [22], blocks=16)
    caches = {key_cache.data_ptr(), value_cache.data_ptr()}

    def counting(x: torch.Tensor, dim: int, ids: torch.Tensor, **kw: object) -> torch.Tensor:
        if x.data_ptr() in caches:
            gathered.append(len(ids))
        return real(x, dim, ids, **kw)

    monkeypatch.setattr(torch, "index_select", counting)
    out, _ = paged_decode(rand(1, HEADS, 1, D, seed=1), key_cache, value_cache, table, [22])
    assert gathered == [1, 1]  # one partial block, key and value
    assert torch.isfinite(out).all()


def test_a_nan_in_one_block_of_a_run_reaches_only_the_rows_that_see_it() -> None:
    table, lengths = TABLES["runs and shuffled"]
    key_cache, value_cache, table, _, _ = paged(table, lengths, blocks=16)
    value_cache[4, 1, 2, 5] = NAN  # batch 0, token 10, KV head 1: query heads 4 to 7, column 5
    q = rand(len(lengths), HEADS, 1, D, seed=1)
    out, _ = paged_decode(q, key_cache, value_cache, table, lengths)
    assert torch.isnan(out[0, 4:, 0, 5]).all()
    out[0, 4:, 0, 5] = 0
    assert torch.isfinite(out).all()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_paged_decode_in_pieces_converts_every_block(dtype: torch.dtype, monkeypatch: pytest.MonkeyPatch) -> None:
    """fp16/bf16 caches are converted to float32 a few blocks at a time (here one block per kernel call)."""
    monkeypatch.setattr(batched_decode, "READ_ELEMENTS", KV_HEADS * BLOCK * D)
    table, lengths = TABLES["repeated blocks"]
    key_cache, value_cache, table, keys, values = paged(table, lengths, blocks=16, dtype=dtype)
    q = rand(len(lengths), HEADS, 1, D, seed=1).to(dtype)
    out, _ = paged_decode(q, key_cache, value_cache, table, lengths)
    want, _ = spec(q, [k.to(dtype) for k in keys], [v.to(dtype) for v in values])
    torch.testing.assert_close(out.double(), want, rtol=2e-2, atol=2e-2)


def test_contiguous_decode_with_ragged_lengths_never_reads_the_padding() -> None:
    lengths = [9, 3, 12]
    k, v = rand(3, KV_HEADS, 12, D, seed=2), rand(3, KV_HEADS, 12, D, seed=3)
    for b, n in enumerate(lengths):
        k[b, :, n:], v[b, :, n:] = NAN, NAN
    q = rand(3, HEADS, 1, D, seed=1)
    out, lse = fused_infer_attention_score(q, k, v, num_heads=HEADS, num_key_value_heads=KV_HEADS,
                                           input_layout="BNSD", scale=D**-0.5, actual_seq_lengths_kv=lengths,
                                           softmax_lse_flag=True)  # fmt: skip
    want_out, want_lse = spec(q, [k[b, :, :n] for b, n in enumerate(lengths)],
                              [v[b, :, :n] for b, n in enumerate(lengths)])  # fmt: skip
    torch.testing.assert_close(out.double(), want_out, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(lse[..., 0].double(), want_lse, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(("mode", "q_len", "kv_len"), [(3, 5, 11), (3, 9, 4), (2, 9, 4), (2, 4, 9), (3, 7, 7)])
@pytest.mark.parametrize("sink", [False, True])
def test_prefill_in_one_or_two_kernel_calls_is_the_causal_softmax(mode: int, q_len: int, kv_len: int,
                                                                   sink: bool) -> None:  # fmt: skip
    """Bottom-right (3) and top-left (2) causal, more keys than rows (the keys every row sees get a call of
    their own) and fewer (the first rows of mode 3 see nothing: 0 and lse +inf)."""
    q = rand(1, HEADS, q_len, D, seed=1)
    k, v = rand(1, KV_HEADS, kv_len, D, seed=2), rand(1, KV_HEADS, kv_len, D, seed=3)
    sinks = rand(HEADS, seed=4) if sink else None
    out, lse = fused_infer_attention_score_v2(
        q, k, v, num_query_heads=HEADS, num_key_value_heads=KV_HEADS, input_layout="BNSD", softmax_scale=D**-0.5,
        sparse_mode=mode, atten_mask=TEMPLATE, learnable_sink=sinks, return_softmax_lse=True,
    )  # fmt: skip
    want_out, want_lse = spec(q, [k[0]], [v[0]], mode=mode, sink=sinks)
    torch.testing.assert_close(out.double(), want_out, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(lse[..., 0].double(), want_lse, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", TABLES)
def test_atb_paged_attention_of_every_sequence_at_once_is_the_softmax_over_its_keys(name: str) -> None:
    """``_npu_paged_attention``'s token-major [blocks, block_size, N, D] caches; a sequence without context
    gives 0."""
    table, lengths = TABLES[name]
    key_cache, value_cache, table, keys, values = paged(table, lengths, blocks=16)
    token_major = [cache.transpose(1, 2).contiguous() for cache in (key_cache, value_cache)]
    q = rand(len(lengths), HEADS, 1, D, seed=1)
    out = torch.full((len(lengths), HEADS, D), NAN)
    atb.paged_attention(q[:, :, 0], *token_major, KV_HEADS, HEADS, D**-0.5, table, torch.tensor(lengths), out)
    want, _ = spec(q, keys, values)
    torch.testing.assert_close(out.double(), want[:, :, 0], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("mode", [torch.inference_mode, torch.no_grad, torch.enable_grad])
def test_the_fast_paths_give_the_same_numbers_under_every_grad_mode(mode: type) -> None:
    """inference_mode, no_grad and autograd enabled: a decode over a shared-prefix table and a causal prefill."""
    table, lengths = TABLES["repeated blocks"]
    key_cache, value_cache, table, keys, values = paged(table, lengths, blocks=16)
    q = rand(len(lengths), HEADS, 1, D, seed=1)
    prompt = rand(1, HEADS, 6, D, seed=5)
    with mode():
        decoded, _ = paged_decode(q, key_cache, value_cache, table, lengths)
        prefilled, _ = fused_infer_attention_score(prompt, keys[0][None], values[0][None], num_heads=HEADS,
                                                   num_key_value_heads=KV_HEADS, input_layout="BNSD", scale=D**-0.5,
                                                   sparse_mode=3, atten_mask=TEMPLATE)  # fmt: skip
    torch.testing.assert_close(decoded.double(), spec(q, keys, values)[0], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(prefilled.double(), spec(prompt, [keys[0]], [values[0]], mode=3)[0], rtol=1e-5, atol=1e-5)
