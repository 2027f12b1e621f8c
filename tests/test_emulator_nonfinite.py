"""NaN and Inf through every emulated attention operator propagate as softmax propagates them.

torch's fused CPU attention kernel gives 0 for a row whose scores are all NaN (pytorch issue 141128), which
would make a NaN query an all-zero output row on the CPU where the device emits NaN. The specification here
is ``tests/naive_attention.py`` (an explicit softmax over the keys each row sees): a row is NaN when its
query, a key or value it sees, or its ``pse`` at a position it sees is NaN; a position it does not see
(masked, outside the band, past the KV length) never reaches it. The probe reports the NaN (KVL502).
"""

from __future__ import annotations

import types
from collections.abc import Callable

import pytest
import torch

from tests.naive_attention import allowed_matrix, naive_attention
from tests.probe_fixtures.harness import codes, probe  # noqa: F401

B, HEADS, KV_HEADS, D, S = 2, 4, 2, 16, 12
BLOCK = 16
NAN, INF = float("nan"), float("inf")
TEMPLATE = torch.ones(2048, 2048, dtype=torch.bool).triu(1)


def rand(*shape: int, seed: int) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def spec(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, pse: torch.Tensor | None = None,
         lengths: list[int] | None = None) -> torch.Tensor:  # fmt: skip
    """(B, N, S1, D) float64 explicit-softmax attention of BNSD tensors (bottom-right causal if asked), each
    batch over its first ``lengths[b]`` keys."""
    lengths = lengths or [k.shape[2]] * k.shape[0]
    s1 = q.shape[2]
    allowed = [allowed_matrix(3 if causal else 0, 0, 0, s1, n, None) for n in lengths]
    outs, _ = naive_attention(list(q.unbind(0)), [k[b, :, :n] for b, n in enumerate(lengths)],
                              [v[b, :, :n] for b, n in enumerate(lengths)], D**-0.5, allowed,
                              pse=None if pse is None else [pse[b, :, :, :n] for b, n in enumerate(lengths)])  # fmt: skip
    return torch.stack(outs)


def assert_like(got: torch.Tensor, want: torch.Tensor, dtype: torch.dtype) -> None:
    """Equal, NaN where the specification has NaN and Inf where it has Inf."""
    tolerance = {torch.float64: 1e-9, torch.float32: 1e-4, torch.float16: 5e-3, torch.bfloat16: 3e-2}[dtype]
    torch.testing.assert_close(got.double(), want, rtol=tolerance, atol=tolerance, equal_nan=True)


# Each operator as a BNSD function (q, k, v, causal, pse) -> (B, N, S1, D); the layouts are the ones its
# callers use.
def fia_v1(npu: types.ModuleType, q, k, v, causal, pse=None):
    mode = dict(sparse_mode=3, atten_mask=TEMPLATE) if causal else {}
    return npu.npu_fused_infer_attention_score(q, k, v, num_heads=HEADS, num_key_value_heads=KV_HEADS,
                                               input_layout="BNSD", scale=D**-0.5, pse_shift=pse, **mode)[0]  # fmt: skip


def fia_v2(npu, q, k, v, causal, pse=None):
    mode = dict(sparse_mode=3, atten_mask=TEMPLATE) if causal else {}
    return npu.npu_fused_infer_attention_score_v2(q, k, v, num_query_heads=HEADS, num_key_value_heads=KV_HEADS,
                                                  input_layout="BNSD", softmax_scale=D**-0.5, pse_shift=pse,
                                                  **mode)[0]  # fmt: skip


def pfa(npu, q, k, v, causal, pse=None):
    mode = dict(sparse_mode=3, atten_mask=TEMPLATE) if causal else dict(next_tokens=2147483647)
    return npu.npu_prompt_flash_attention(q, k, v, num_heads=HEADS, num_key_value_heads=KV_HEADS, input_layout="BNSD",
                                          scale_value=D**-0.5, pse_shift=pse, **mode)  # fmt: skip


def fusion(npu, q, k, v, causal, pse=None):
    mode = dict(sparse_mode=3, atten_mask=TEMPLATE) if causal else {}
    return npu.npu_fusion_attention(q, k, v, HEADS, "BNSD", pse=pse, scale=D**-0.5, **mode)[0]


def fusion_v2(npu, q, k, v, causal, pse=None):
    mode = dict(sparse_mode=3, atten_mask=TEMPLATE) if causal else {}
    return npu.npu_fusion_attention_v2(q, k, v, HEADS, "BNSD", pse=pse, scale=D**-0.5, **mode)[0]


def atb_unpad(npu, q, k, v, causal, pse=None):
    """``_npu_flash_attention_unpad`` (full) or ``_npu_flash_attention_v3`` (causal), token-major."""
    assert pse is None
    tokens = [t.transpose(1, 2).reshape(-1, t.shape[1], D).contiguous() for t in (q, k, v)]
    out = torch.empty_like(tokens[0])
    seq_len = torch.tensor([S] * B, dtype=torch.int32)
    if causal:
        npu._npu_flash_attention_v3(*tokens, TEMPLATE.half(), seq_len, D**-0.5, HEADS, KV_HEADS, out=out)
    else:
        npu._npu_flash_attention_unpad(*tokens, seq_len, D**-0.5, HEADS, KV_HEADS, out)
    return out.view(B, S, HEADS, D).transpose(1, 2)


OPERATORS: dict[str, Callable[..., torch.Tensor]] = {
    "fia_v1": fia_v1, "fia_v2": fia_v2, "pfa": pfa, "npu_fusion_attention": fusion,
    "npu_fusion_attention_v2": fusion_v2, "atb_flash_attention": atb_unpad,
}  # fmt: skip
WITH_PSE = ("fia_v1", "fia_v2", "pfa", "npu_fusion_attention", "npu_fusion_attention_v2")


def inputs(dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    q, k, v = rand(B, HEADS, S, D, seed=1), rand(B, KV_HEADS, S, D, seed=2), rand(B, KV_HEADS, S, D, seed=3)
    return q.to(dtype), k.to(dtype), v.to(dtype)


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32, torch.float64])
@pytest.mark.parametrize("name", OPERATORS)
def test_nan_query_row_is_nan_not_zero(torch_npu: types.ModuleType, name: str, dtype: torch.dtype) -> None:
    q, k, v = inputs(dtype)
    q[1, 3, 5, 7] = NAN  # one element of one row of one head
    got = OPERATORS[name](torch_npu, q, k, v, causal=True)
    assert torch.isnan(got[1, 3, 5]).all()
    assert torch.isfinite(got[1, 3, :5]).all() and torch.isfinite(got[1, 3, 6:]).all() and torch.isfinite(got[0]).all()
    assert_like(got, spec(q, k, v, causal=True), dtype)


@pytest.mark.parametrize("name", OPERATORS)
@pytest.mark.parametrize("where", ["key", "value"])
def test_nan_key_or_value_reaches_exactly_the_rows_that_see_it(torch_npu, name: str, where: str) -> None:
    """Causal: the NaN at key 6 reaches rows 6-11; rows 0-5 do not see key 6, and its 0 weight times NaN must
    not reach them either."""
    q, k, v = inputs(torch.float32)
    (k if where == "key" else v)[0, 1, 6, 2] = NAN
    got = OPERATORS[name](torch_npu, q, k, v, causal=True)
    assert torch.isfinite(got[0, 2:4, :6]).all() and torch.isfinite(got[1]).all()
    rows = torch.isnan(got[0, 2:4, 6:]).all(-1) if where == "key" else torch.isnan(got[0, 2:4, 6:, 2])
    assert rows.all()
    assert_like(got, spec(q, k, v, causal=True), torch.float32)


@pytest.mark.parametrize("name", OPERATORS)
def test_inf_value_gives_inf_in_its_column(torch_npu, name: str) -> None:
    q, k, v = inputs(torch.float32)
    v[1, 0, 3, 4] = INF
    got = OPERATORS[name](torch_npu, q, k, v, causal=False)
    assert torch.isinf(got[1, :2, :, 4]).all() and torch.isfinite(got[1, :2, :, :4]).all()
    assert_like(got, spec(q, k, v, causal=False), torch.float32)


@pytest.mark.parametrize("name", OPERATORS)
def test_nan_in_every_key_is_nan_not_zero(torch_npu, name: str) -> None:
    """A feature that is NaN in every key makes every score NaN: the kernel's all-NaN row."""
    q, k, v = inputs(torch.float32)
    k[0, 0, :, 5] = NAN
    got = OPERATORS[name](torch_npu, q, k, v, causal=False)
    assert torch.isnan(got[0, :2]).all() and torch.isfinite(got[0, 2:]).all()


@pytest.mark.parametrize("name", WITH_PSE)
def test_nan_pse_reaches_only_its_row_and_a_masked_one_nothing(torch_npu, name: str) -> None:
    q, k, v = inputs(torch.float32)
    pse = rand(B, HEADS, S, S, seed=4)
    pse[0, 1, 4, 2] = NAN  # row 4 sees key 2
    pse[1, 2, 3, 9] = NAN  # row 3 does not see key 9 (causal)
    got = OPERATORS[name](torch_npu, q, k, v, causal=True, pse=pse)
    assert torch.isnan(got[0, 1, 4]).all() and torch.isfinite(got[1]).all()
    assert_like(got, spec(q, k, v, causal=True, pse=pse), torch.float32)


def test_finite_inputs_stay_on_the_fused_path(torch_npu) -> None:
    """The check costs no precision: finite inputs give the same numbers as before (the spec, to fp32)."""
    q, k, v = inputs(torch.float32)
    for name, operator in OPERATORS.items():
        assert_like(operator(torch_npu, q, k, v, causal=True), spec(q, k, v, causal=True), torch.float32)


# -- paged caches: what lies past a sequence's length is never read --------------------------------------
def paged_case(dtype: torch.dtype = torch.float32):
    """Two sequences of 27 and 9 tokens in a shuffled block table; the cache is NaN everywhere else (as an
    uninitialised ``torch.empty`` cache may be)."""
    lengths = [27, 9]
    table = torch.tensor([[3, 0], [1, 2]], dtype=torch.int32)
    key_cache = torch.full((4, BLOCK, KV_HEADS, D), NAN, dtype=dtype)
    value_cache = torch.full((4, BLOCK, KV_HEADS, D), NAN, dtype=dtype)
    k, v = rand(B, KV_HEADS, 32, D, seed=5).to(dtype), rand(B, KV_HEADS, 32, D, seed=6).to(dtype)
    for b, n in enumerate(lengths):
        for s in range(n):
            block, offset = int(table[b, s // BLOCK]), s % BLOCK
            key_cache[block, offset], value_cache[block, offset] = k[b, :, s], v[b, :, s]
    q = rand(B, HEADS, 1, D, seed=7).to(dtype)
    return q, k, v, key_cache, value_cache, table, lengths


def paged_fia(npu, q, key_cache, value_cache, table, lengths):
    return npu.npu_fused_infer_attention_score_v2(
        q, key_cache.flatten(2), value_cache.flatten(2), num_query_heads=HEADS, num_key_value_heads=KV_HEADS,
        input_layout="BNSD", softmax_scale=D**-0.5, block_table=table, block_size=BLOCK, actual_seq_kvlen=lengths,
    )[0]  # fmt: skip


def paged_ifa(npu, q, key_cache, value_cache, table, lengths):
    return npu.npu_incre_flash_attention(q, key_cache.flatten(2), value_cache.flatten(2), num_heads=HEADS,
                                         num_key_value_heads=KV_HEADS, input_layout="BNSD", scale_value=D**-0.5,
                                         block_table=table, block_size=BLOCK, actual_seq_lengths=lengths)  # fmt: skip


def paged_atb(npu, q, key_cache, value_cache, table, lengths):
    out = torch.empty(B, HEADS, D, dtype=q.dtype)
    npu._npu_paged_attention(q[:, :, 0].contiguous(), key_cache, value_cache, KV_HEADS, HEADS, D**-0.5, table,
                             torch.tensor(lengths, dtype=torch.int32), out)  # fmt: skip
    return out.unsqueeze(2)


PAGED = {"fia_v2": paged_fia, "ifa": paged_ifa, "atb_paged_attention": paged_atb}


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
@pytest.mark.parametrize("name", PAGED)
def test_paged_decode_reads_no_nan_past_the_lengths_and_every_nan_before(torch_npu, name: str, dtype) -> None:
    q, k, v, key_cache, value_cache, table, lengths = paged_case(dtype)
    assert_like(PAGED[name](torch_npu, q, key_cache, value_cache, table, lengths),
                spec(q, k, v, causal=False, lengths=lengths), dtype)  # fmt: skip
    key_cache[0, 10, 1, 3] = NAN  # sequence 0, token 26: seen by its KV head 1 (query heads 2 and 3)
    q[1, 0, 0, 0] = NAN
    got = PAGED[name](torch_npu, q, key_cache, value_cache, table, lengths)
    assert torch.isnan(got[0, 2:]).all() and torch.isfinite(got[0, :2]).all()
    assert torch.isnan(got[1, 0]).all() and torch.isfinite(got[1, 1:]).all()


def test_probe_reports_a_nan_that_comes_from_the_inputs(torch_npu, probe) -> None:
    """KVL502 on the emulated operator's own output: a NaN query row is NaN, so the probe sees it."""
    running = probe(compare=False)
    q, k, v = inputs(torch.float16)
    q[0, 0, 2, 0] = NAN
    fia_v1(torch_npu, q, k, v, causal=True)
    assert codes(running) == {"KVL502": 1}
    (finding,) = running.recorder.findings.values()
    assert f"{D} NaN" in finding.message
