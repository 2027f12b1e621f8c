"""The operators around attention (norms, RoPE, SwiGLU, MoE routing, the grouped matmul, internal formats)
against independent plain-torch formulas written here, and their fake kernels against their real outputs."""

from __future__ import annotations

import types
from collections.abc import Callable

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode



def rand(*shape: int, dtype: torch.dtype = torch.float32, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


def close(got: torch.Tensor, want: torch.Tensor, dtype: torch.dtype = torch.float32) -> bool:
    tolerance = {torch.float32: 1e-5, torch.bfloat16: 2e-2, torch.float16: 2e-3}[dtype]
    return got.dtype == dtype and torch.allclose(got.float(), want.float(), atol=tolerance, rtol=tolerance)


def hf_rotate_half(x: torch.Tensor) -> torch.Tensor:
    """transformers' rotate_half."""
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


# -- norms ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_rms_norm_is_torch_rms_norm(torch_npu: types.ModuleType, dtype: torch.dtype) -> None:
    x, gamma = rand(3, 5, 64, dtype=dtype), rand(64, seed=1).abs() + 0.5
    y, rstd = torch_npu.npu_rms_norm(x, gamma, epsilon=1e-5)
    assert close(y, torch.nn.functional.rms_norm(x.float(), (64,), gamma, eps=1e-5), dtype)
    assert rstd.dtype == torch.float32 and rstd.shape == (3, 5, 1)
    assert torch.allclose(rstd, 1 / x.float().pow(2).mean(-1, keepdim=True).add(1e-5).sqrt())


def test_rms_norm_over_two_axes_keeps_them_in_rstd(torch_npu: types.ModuleType) -> None:
    x, gamma = rand(2, 3, 4, 8), rand(4, 8, seed=1)
    y, rstd = torch_npu.npu_rms_norm(x, gamma)
    assert rstd.shape == (2, 3, 1, 1)
    assert close(y, torch.nn.functional.rms_norm(x, (4, 8), gamma, eps=1e-6))


def test_add_rms_norm_returns_the_sum_too(torch_npu: types.ModuleType) -> None:
    x1, x2, gamma = rand(4, 32, dtype=torch.bfloat16), rand(4, 32, dtype=torch.bfloat16, seed=1), rand(32, seed=2)
    y, rstd, total = torch_npu.npu_add_rms_norm(x1, x2, gamma.bfloat16(), 1e-6)
    summed = x1.float() + x2.float()
    assert close(total, summed, torch.bfloat16) and rstd.shape == (4, 1)
    assert close(y, torch.nn.functional.rms_norm(summed, (32,), gamma.bfloat16().float(), eps=1e-6), torch.bfloat16)
    with pytest.raises(RuntimeError, match="gamma"):
        torch_npu.npu_rms_norm(x1, torch.ones(16))


# -- rope ---------------------------------------------------------------------------------------------------
def test_rotary_mul_half_and_interleave(torch_npu: types.ModuleType) -> None:
    x, cos, sin = rand(2, 5, 4, 16), rand(1, 5, 1, 16, seed=1), rand(1, 5, 1, 16, seed=2)
    assert close(torch_npu.npu_rotary_mul(x, cos, sin), x * cos + hf_rotate_half(x) * sin)
    pairs = x.view(*x.shape[:-1], 8, 2)
    rotated = torch.stack((-pairs[..., 1], pairs[..., 0]), -1).view_as(x)
    assert close(torch_npu.npu_rotary_mul(x, cos, sin, rotary_mode="interleave"), x * cos + rotated * sin)
    matrix = rand(16, 16, seed=3)
    assert close(torch_npu.npu_rotary_mul(x, cos, sin, rotate=matrix), x * cos + (x @ matrix) * sin)


@pytest.mark.parametrize("layout", ["BSND", "TND"])
def test_apply_rotary_pos_emb_rotates_query_and_key_in_place(torch_npu: types.ModuleType, layout: str) -> None:
    shape, table = ((2, 6, 4, 64), (2, 6, 1, 64)) if layout == "BSND" else ((12, 4, 64), (12, 1, 64))
    q, k = rand(*shape, dtype=torch.bfloat16), rand(*shape[:-2], 2, 64, dtype=torch.bfloat16, seed=1)
    cos, sin = rand(*table, dtype=torch.bfloat16, seed=2), rand(*table, dtype=torch.bfloat16, seed=3)
    want_q = q.float() * cos.float() + hf_rotate_half(q.float()) * sin.float()
    want_k = k.float() * cos.float() + hf_rotate_half(k.float()) * sin.float()
    q_out, k_out = torch_npu.npu_apply_rotary_pos_emb(q, k, cos, sin, layout)
    assert q_out is q and k_out is k
    assert close(q, want_q, torch.bfloat16) and close(k, want_k, torch.bfloat16)


def test_interleave_rope_deinterleaves_then_rotates_by_halves(torch_npu: types.ModuleType) -> None:
    x, cos, sin = rand(2, 3, 5, 64, dtype=torch.float16), rand(2, 1, 5, 64, seed=1), rand(2, 1, 5, 64, seed=2)
    order = list(range(0, 64, 2)) + list(range(1, 64, 2))
    q = x.float()[..., order]
    want = q * cos + hf_rotate_half(q) * sin
    assert close(torch_npu.npu_interleave_rope(x, cos.half(), sin.half()), want, torch.float16)


# -- swiglu and the MoE family ----------------------------------------------------------------------------
def test_swiglu(torch_npu: types.ModuleType) -> None:
    x = rand(3, 4, 16)
    assert close(torch_npu.npu_swiglu(x), torch.nn.functional.silu(x[..., :8]) * x[..., 8:])
    assert close(torch_npu.npu_swiglu(x, dim=1), torch.nn.functional.silu(x[:, :2]) * x[:, 2:])


def moe_by_loops(h: torch.Tensor, weights: torch.Tensor, experts: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """sum_k weight[i, k] * (h[i] @ w[expert[i, k]]), token by token."""
    out = torch.zeros(h.shape[0], w.shape[-1])
    for i in range(h.shape[0]):
        for j in range(experts.shape[1]):
            out[i] += weights[i, j] * (h[i] @ w[experts[i, j]])
    return out


def test_gating_top_k_softmax(torch_npu: types.ModuleType) -> None:
    logits = rand(6, 8)
    weights, experts, row_idx = torch_npu.npu_moe_gating_top_k_softmax(logits, None, k=2)
    probabilities = logits.softmax(-1)
    assert experts.dtype == row_idx.dtype == torch.int32
    assert torch.equal(experts, probabilities.argsort(-1, descending=True)[:, :2].int())
    assert close(weights, probabilities.gather(1, experts.long()))
    assert row_idx.tolist() == [[i, i + 6] for i in range(6)]


def test_v1_routing_through_grouped_matmul_and_finalize(torch_npu: types.ModuleType) -> None:
    h, w = rand(6, 16), rand(8, 16, 32, seed=1)
    weights, experts, row_idx = torch_npu.npu_moe_gating_top_k_softmax(rand(6, 8, seed=2), None, k=2)
    expanded, expanded_row_idx, expanded_experts = torch_npu.npu_moe_init_routing(h, row_idx, experts, active_num=6)
    assert torch.equal(expanded_experts, experts.flatten().sort(stable=True).values)
    assert torch.equal(expanded[expanded_row_idx[torch.arange(6) + 6].long()], h)  # choice 1 of every token
    tokens = torch_npu.npu_moe_compute_expert_tokens(expanded_experts, 8)
    assert tokens.tolist() == [int((experts <= e).sum()) for e in range(8)]
    (y,) = torch_npu.npu_grouped_matmul([expanded], [w], group_list=tokens.long(), split_item=2, group_type=0)
    out = torch_npu.npu_moe_finalize_routing(y, None, None, None, weights, expanded_row_idx, experts)
    assert close(out, moe_by_loops(h, weights, experts, w))


def test_v2_routing_with_counts_and_row_order(torch_npu: types.ModuleType) -> None:
    h, w = rand(5, 16, dtype=torch.bfloat16), rand(4, 16, 8, dtype=torch.bfloat16, seed=1)
    experts = torch.tensor([[0, 2], [2, 3], [1, 0], [3, 3], [2, 1]], dtype=torch.int32)
    weights = rand(5, 2, seed=2).softmax(-1)
    expanded, expanded_row_idx, counts, _ = torch_npu.npu_moe_init_routing_v2(
        h, experts, active_num=10, expert_num=4, expert_tokens_num_type=1, expert_tokens_num_flag=True,
        active_expert_range=[0, 4],
    )  # fmt: skip
    assert counts.dtype == torch.int64 and counts.tolist() == [2, 2, 3, 3]
    (y,) = torch_npu.npu_grouped_matmul([expanded], [w], group_list=counts, split_item=3, group_type=0, group_list_type=1)
    out = torch_npu.npu_moe_finalize_routing(y, None, None, None, weights.bfloat16(), expanded_row_idx, None,
                                             drop_pad_mode=2)  # fmt: skip
    assert close(out, moe_by_loops(h.float(), weights.bfloat16().float(), experts, w.float()), torch.bfloat16)
    _, _, cumsum, _ = torch_npu.npu_moe_init_routing_v2(h, experts, expert_num=4, expert_tokens_num_flag=True)
    assert cumsum.tolist() == [2, 4, 7, 10]
    with pytest.raises(NotImplementedError, match="quant_mode"):
        torch_npu.npu_moe_init_routing_v2(h, experts, expert_num=4, quant_mode=1)


def test_grouped_gating_top_k(torch_npu: types.ModuleType) -> None:
    x, bias = rand(3, 16), rand(16, seed=1)
    weights, experts, scores = torch_npu.npu_moe_gating_top_k(x, 2, bias=bias, k_group=2, group_count=4,
                                                              group_select_mode=1, norm_type=1, routed_scaling_factor=2.5)  # fmt: skip
    sig = x.sigmoid()
    for row in range(3):
        biased = (sig[row] + bias).view(4, 4)
        best_groups = biased.topk(2, -1).values.sum(-1).topk(2).indices.tolist()
        candidates = [e for g in best_groups for e in range(4 * g, 4 * g + 4)]
        chosen = sorted(candidates, key=lambda e: -float(sig[row, e] + bias[e]))[:2]
        assert experts[row].tolist() == chosen
        expected = sig[row, chosen] / sig[row, chosen].sum() * 2.5
        assert close(weights[row], expected)
    assert scores.dtype == torch.float32 and close(scores, sig)


def test_grouped_matmul_per_pair_with_bias_and_activation(torch_npu: types.ModuleType) -> None:
    xs, ws, bs = [rand(3, 8), rand(2, 8, seed=1)], [rand(8, 4, seed=2), rand(8, 6, seed=3)], [rand(4), rand(6)]
    got = torch_npu.npu_grouped_matmul(xs, ws, bias=bs, act_type=5)
    assert [g.shape for g in got] == [(3, 4), (2, 6)]
    for g, x, w, b in zip(got, xs, ws, bs):
        assert close(g, torch.nn.functional.silu(x @ w + b))
    with pytest.raises(NotImplementedError, match="scale"):
        torch_npu.npu_grouped_matmul(xs, ws, scale=[torch.ones(4), torch.ones(6)])


# -- internal formats ------------------------------------------------------------------------------------
def test_format_is_tracked_per_storage_and_values_do_not_change(torch_npu: types.ModuleType) -> None:
    weight = rand(16, 32)
    nz = torch_npu.npu_format_cast(weight, torch_npu.Format.FRACTAL_NZ)
    assert torch_npu.get_npu_format(nz) == 29 and torch_npu.get_npu_format(weight) == 2
    assert torch.equal(nz, weight) and torch.equal(rand(4, 16) @ nz, rand(4, 16) @ weight)
    param = torch.nn.Parameter(weight.clone())
    param.data = torch_npu.npu_format_cast(param.data.contiguous(), 29)
    assert torch_npu.get_npu_format(param) == 29 and torch_npu.get_npu_format(param[0]) == 29
    cache = torch.zeros(4, 2, 16, 16)
    assert torch_npu.npu_format_cast_(cache, 29) is cache and torch_npu.get_npu_format(cache) == 29
    assert torch_npu.get_npu_format(torch_npu.npu_format_cast(rand(4, 4), nz)) == 29
    with pytest.raises(RuntimeError, match="acl_format=7"):
        torch_npu.npu_format_cast(weight, 7)


def test_a_freed_storage_does_not_pass_its_format_on(torch_npu: types.ModuleType) -> None:
    memory = bytearray(4096)
    first = torch.frombuffer(memory, dtype=torch.float32)
    torch_npu.npu_format_cast_(first, 29)
    address = first.data_ptr()
    assert torch_npu.get_npu_format(first) == 29
    del first
    second = torch.frombuffer(memory, dtype=torch.float32)  # a new storage at the same address
    assert second.data_ptr() == address and torch_npu.get_npu_format(second) == 2


# -- fake kernels --------------------------------------------------------------------------------------
FAKE_CASES: list[tuple[str, Callable[[types.ModuleType], tuple[Callable[..., object], tuple, dict]]]] = [
    ("rms_norm", lambda t: (t.npu_rms_norm, (rand(2, 3, 8, dtype=torch.bfloat16), torch.ones(8)), {})),
    ("add_rms_norm", lambda t: (t.npu_add_rms_norm, (rand(4, 8, dtype=torch.float16), rand(4, 8, dtype=torch.float16),
                                                     torch.ones(8, dtype=torch.float16)), {})),
    ("rotary_mul", lambda t: (t.npu_rotary_mul, (rand(1, 2, 3, 8), rand(1, 2, 1, 8), rand(1, 2, 1, 8)), {})),
    ("interleave_rope", lambda t: (t.npu_interleave_rope, (rand(1, 2, 3, 8), rand(1, 1, 3, 8), rand(1, 1, 3, 8)), {})),
    ("swiglu", lambda t: (t.npu_swiglu, (rand(4, 8),), {"dim": 0})),
    ("gating_softmax", lambda t: (t.npu_moe_gating_top_k_softmax, (rand(5, 8),), {"k": 3})),
    ("gating", lambda t: (t.npu_moe_gating_top_k, (rand(5, 8), 2), {"group_count": 2, "k_group": 1})),
    ("init_routing_v2", lambda t: (t.npu_moe_init_routing_v2, (rand(4, 6), torch.tensor([[0, 1]] * 4, dtype=torch.int32)),
                                   {"expert_num": 2, "expert_tokens_num_flag": True, "expert_tokens_num_type": 1})),
    ("format_cast", lambda t: (t.npu_format_cast, (rand(4, 4), 29), {})),
]  # fmt: skip


@pytest.mark.parametrize("case", [case for _, case in FAKE_CASES], ids=[name for name, _ in FAKE_CASES])
def test_fake_kernels_give_the_real_shapes_and_dtypes(torch_npu: types.ModuleType, case: Callable) -> None:
    function, args, keywords = case(torch_npu)
    real = function(*args, **keywords)
    with FakeTensorMode() as mode:
        fake = function(*[mode.from_tensor(a) if isinstance(a, torch.Tensor) else a for a in args], **keywords)

    def signature(value: object) -> list[tuple[tuple[int, ...], torch.dtype]]:
        values = value if isinstance(value, (tuple, list)) else (value,)
        return [(tuple(v.shape), v.dtype) for v in values]

    assert signature(fake) == signature(real)


def test_transpose_batchmatmul(torch_npu: types.ModuleType) -> None:
    """MLA's absorbed projection: (T, N, K) with perm_x1=[1, 0, 2] times (N, K, V) gives (T, N, V)."""
    x, w = rand(5, 4, 16, dtype=torch.bfloat16), rand(4, 16, 8, dtype=torch.bfloat16, seed=1)
    got = torch_npu.npu_transpose_batchmatmul(x, w, perm_x1=[1, 0, 2], perm_y=[1, 0, 2])
    want = torch.einsum("tnk,nkv->tnv", x.float(), w.float())
    assert got.shape == (5, 4, 8) and close(got, want, torch.bfloat16)
    with FakeTensorMode() as mode:
        fake = torch_npu.npu_transpose_batchmatmul(mode.from_tensor(x), mode.from_tensor(w), perm_x1=[1, 0, 2])
    assert fake.shape == got.shape and fake.dtype == got.dtype


def test_apply_rotary_pos_emb_reads_bsh_as_bsnd(torch_npu: types.ModuleType) -> None:
    """The C++ maps every layout but BNSD, SBND and TND to its BSND configuration (``LAYOUT_BSND_BSH``)."""
    q, cos, sin = rand(1, 4, 2, 8), rand(1, 4, 1, 8, seed=1), rand(1, 4, 1, 8, seed=2)
    bsh, bsnd = torch_npu.npu_apply_rotary_pos_emb(q.clone(), q.clone(), cos, sin, "BSH")
    assert torch.equal(bsh, torch_npu.npu_apply_rotary_pos_emb(q.clone(), q.clone(), cos, sin, "BSND")[0])
    with pytest.raises(RuntimeError, match="layout='BHS'"):
        torch_npu.npu_apply_rotary_pos_emb(q.clone(), q.clone(), cos, sin, "BHS")
