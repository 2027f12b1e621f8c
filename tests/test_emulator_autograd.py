"""Gradients through the emulated operators, as op-plugin's derivatives.yaml gives them, and the error where it
gives none.

Where torch_npu defines a backward (npu_fusion_attention(_v2), npu_rms_norm, npu_rotary_mul, npu_swiglu), the
gradients equal plain torch's autograd of the same formula in float32 and pass ``torch.autograd.gradcheck``
in float64 through the public call (the emulator accepts float64 and then computes in float64, so the
finite differences are of the operator itself). Where torch_npu registers the not-implemented fallback, the
forward runs and ``.backward()`` raises, as on the device. Never a silent ``None``.
"""

from __future__ import annotations

import types

import pytest
import torch

TEMPLATE = torch.ones(2048, 2048, dtype=torch.bool).triu(1)


def rand(*shape: int, seed: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64).to(dtype)


def leaves(*tensors: torch.Tensor) -> list[torch.Tensor]:
    return [t.clone().requires_grad_() for t in tensors]


def sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool) -> torch.Tensor:
    """BNSD attention by torch, GQA, top-left causal (S1 == S2 here)."""
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, scale=q.shape[-1] ** -0.5, is_causal=causal,
                                                            enable_gqa=True)  # fmt: skip


def to_layout(x: torch.Tensor, layout: str) -> torch.Tensor:
    """A BNSD tensor in ``layout`` (a differentiable view chain)."""
    b, n, s, d = x.shape
    if layout == "BNSD":
        return x
    if layout == "BSND":
        return x.transpose(1, 2)
    if layout == "BSH":
        return x.transpose(1, 2).reshape(b, s, n * d)
    if layout == "SBH":
        return x.permute(2, 0, 1, 3).reshape(s, b, n * d)
    assert layout == "TND"
    return x.transpose(1, 2).reshape(b * s, n, d)


def from_layout(x: torch.Tensor, layout: str, b: int, n: int, s: int) -> torch.Tensor:
    if layout == "BNSD":
        return x
    if layout == "BSND":
        return x.transpose(1, 2)
    if layout == "BSH":
        return x.view(b, s, n, -1).transpose(1, 2)
    if layout == "SBH":
        return x.view(s, b, n, -1).permute(1, 2, 0, 3)
    return x.view(b, s, n, -1).transpose(1, 2)


def fusion(npu: types.ModuleType, q, k, v, layout: str, causal: bool, v2: bool = False, **extra):
    b, n, s, _ = q.shape
    keywords = dict(scale=q.shape[-1] ** -0.5, **extra)
    if causal:
        keywords.update(atten_mask=TEMPLATE, sparse_mode=2)
    if layout == "TND":
        ends = [s * (i + 1) for i in range(b)]
        keywords.update(actual_seq_qlen=ends, actual_seq_kvlen=ends)
    op = npu.npu_fusion_attention_v2 if v2 else npu.npu_fusion_attention
    out = op(to_layout(q, layout), to_layout(k, layout), to_layout(v, layout), n, layout, **keywords)[0]
    return from_layout(out, layout, b, n, s)


@pytest.mark.parametrize("v2", [False, True], ids=["v1", "v2"])
@pytest.mark.parametrize("layout", ["BNSD", "BSND", "BSH", "SBH", "TND"])
def test_fusion_attention_gradients_equal_torch_autograd(torch_npu: types.ModuleType, layout: str, v2: bool) -> None:
    q, k, v = leaves(rand(2, 4, 6, 8, seed=1), rand(2, 2, 6, 8, seed=2), rand(2, 2, 6, 8, seed=3))
    grad = rand(2, 4, 6, 8, seed=4)
    fusion(torch_npu, q, k, v, layout, causal=True, v2=v2).backward(grad)
    assert q.grad is not None and k.grad is not None and v.grad is not None
    want = torch.autograd.grad(sdpa(q, k, v, causal=True), (q, k, v), grad)
    for got, expected in zip((q.grad, k.grad, v.grad), want):
        torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5)


def test_fusion_attention_gradcheck_in_float64_with_pse_and_sink(torch_npu) -> None:
    """gradcheck of the public call: dq, dk, dv, dpse and dsink (all of npu_fusion_attention_grad's)."""
    q, k, v = leaves(rand(1, 2, 3, 4, seed=1, dtype=torch.float64), rand(1, 1, 3, 4, seed=2, dtype=torch.float64),
                     rand(1, 1, 3, 4, seed=3, dtype=torch.float64))  # fmt: skip
    pse, sink = leaves(rand(1, 2, 3, 3, seed=4, dtype=torch.float64), rand(2, seed=5, dtype=torch.float64))

    def call(q, k, v, pse, sink):
        return torch_npu.npu_fusion_attention(q, k, v, 2, "BNSD", pse=pse, scale=0.5, atten_mask=TEMPLATE,
                                              sparse_mode=2, sink=sink)[0]  # fmt: skip

    assert torch.autograd.gradcheck(call, (q, k, v, pse, sink))


def test_fusion_attention_v2_gradcheck_in_float64(torch_npu) -> None:
    q, k, v = leaves(rand(1, 3, 2, 4, seed=1, dtype=torch.float64), rand(1, 3, 2, 4, seed=2, dtype=torch.float64),
                     rand(1, 3, 2, 4, seed=3, dtype=torch.float64))  # fmt: skip

    def call(q, k, v):
        return torch_npu.npu_fusion_attention_v2(q, k, v, 2, "BSND", scale=0.5)[0]

    assert torch.autograd.gradcheck(call, (q, k, v))


def test_the_forward_outputs_are_unchanged_under_autograd(torch_npu) -> None:
    q, k, v = rand(1, 2, 5, 8, seed=1), rand(1, 2, 5, 8, seed=2), rand(1, 2, 5, 8, seed=3)
    plain = torch_npu.npu_fusion_attention(q, k, v, 2, "BNSD", scale=0.3)
    tracked = torch_npu.npu_fusion_attention(*leaves(q, k, v), 2, "BNSD", scale=0.3)
    assert all(torch.equal(a, b) for a, b in zip(plain[:3], tracked[:3])) and plain[4:] == tracked[4:]
    assert tracked[0].grad_fn is not None and plain[0].grad_fn is None


@pytest.mark.parametrize("mode", ["no_grad", "inference_mode"])
def test_no_graph_under_no_grad_and_inference_mode(torch_npu, mode: str) -> None:
    q, k, v = leaves(rand(1, 2, 5, 8, seed=1), rand(1, 2, 5, 8, seed=2), rand(1, 2, 5, 8, seed=3))
    with getattr(torch, mode)():
        out = torch_npu.npu_fusion_attention(q, k, v, 2, "BNSD", scale=8**-0.5)[0]
        y = torch_npu.npu_rms_norm(q, torch.ones(8))[0]
        z = torch_npu.npu_add_rms_norm(q, k, torch.ones(8))[0]
    assert not out.requires_grad and not y.requires_grad and not z.requires_grad
    torch.testing.assert_close(out, sdpa(q, k, v, causal=False).detach(), rtol=1e-4, atol=1e-5)


def test_compiled_training_step_gives_the_eager_gradients(torch_npu) -> None:
    """AOTAutograd traces the backward through the backward operator (opaque, as torch_npu's grad op is)."""

    def step(q, k, v, gamma):
        normed = torch_npu.npu_rms_norm(q, gamma)[0]
        out = torch_npu.npu_fusion_attention(normed, k, v, 4, "BNSD", scale=8**-0.5, atten_mask=TEMPLATE,
                                             sparse_mode=2)[0]  # fmt: skip
        return (out * out).sum()

    inputs = leaves(rand(2, 4, 6, 8, seed=1), rand(2, 2, 6, 8, seed=2), rand(2, 2, 6, 8, seed=3), rand(8, seed=4))
    compiled = torch.compile(step, backend="aot_eager", fullgraph=True)
    got = torch.autograd.grad(compiled(*inputs), inputs)
    want = torch.autograd.grad(step(*inputs), inputs)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w)


# -- the element-wise training operators -----------------------------------------------------------------
def rms_norm_formula(x, gamma, epsilon=1e-6):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + epsilon) * gamma


def rotate_half(x):
    first, second = x.chunk(2, dim=-1)
    return torch.cat((-second, first), dim=-1)


def rotate_interleaved(x):
    return torch.stack((-x[..., 1::2], x[..., ::2]), dim=-1).flatten(-2)


CASES = {
    "npu_rms_norm": (lambda npu, x, g: npu.npu_rms_norm(x, g)[0], rms_norm_formula, ((2, 3, 8), (8,))),
    "npu_rotary_mul half": (lambda npu, x, c, s: npu.npu_rotary_mul(x, c, s),
                            lambda x, c, s: x * c + rotate_half(x) * s, ((2, 3, 2, 8), (1, 3, 1, 8), (1, 3, 1, 8))),
    "npu_rotary_mul interleave": (lambda npu, x, c, s: npu.npu_rotary_mul(x, c, s, rotary_mode="interleave"),
                                  lambda x, c, s: x * c + rotate_interleaved(x) * s,
                                  ((2, 3, 2, 8), (1, 3, 1, 8), (1, 3, 1, 8))),
    "npu_swiglu": (lambda npu, x: npu.npu_swiglu(x), lambda x: torch.nn.functional.silu(x[..., :4]) * x[..., 4:],
                   ((3, 8),)),
}  # fmt: skip


@pytest.mark.parametrize("case", CASES)
def test_elementwise_gradients_equal_torch_autograd_and_gradcheck(torch_npu, case: str) -> None:
    call, formula, shapes = CASES[case]
    inputs = leaves(*(rand(*shape, seed=i) for i, shape in enumerate(shapes)))
    output = call(torch_npu, *inputs)
    grad = rand(*output.shape, seed=9)
    got = torch.autograd.grad(output, inputs, grad)
    want = torch.autograd.grad(formula(*inputs), inputs, grad)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-6)
    precise = leaves(*(rand(*shape, seed=i, dtype=torch.float64) for i, shape in enumerate(shapes)))
    assert torch.autograd.gradcheck(lambda *xs: call(torch_npu, *xs), precise)


def test_rms_norm_rstd_is_not_differentiable(torch_npu) -> None:
    x, gamma = leaves(rand(2, 8, seed=1), rand(8, seed=2))
    y, rstd = torch_npu.npu_rms_norm(x, gamma)
    assert y.requires_grad and not rstd.requires_grad


def test_rotary_mul_with_a_rotate_matrix_differentiates_input_and_cos_sin(torch_npu) -> None:
    x, cos, sin = leaves(rand(2, 4, seed=1), rand(2, 4, seed=2), rand(2, 4, seed=3))
    rotate = rand(4, 4, seed=4)
    got = torch.autograd.grad(torch_npu.npu_rotary_mul(x, cos, sin, rotate=rotate).sum(), (x, cos, sin))
    want = torch.autograd.grad((x * cos + (x @ rotate) * sin).sum(), (x, cos, sin))
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w)


# -- no derivative in torch_npu: the device's error ------------------------------------------------------
def _add_rms_norm(npu):
    x1, x2 = leaves(rand(2, 8, seed=1), rand(2, 8, seed=2))
    return npu.npu_add_rms_norm(x1, x2, torch.ones(8))[0]


def _interleave_rope(npu):
    (x,) = leaves(rand(1, 2, 3, 8, seed=1))
    return npu.npu_interleave_rope(x, torch.ones(1, 1, 3, 8), torch.zeros(1, 1, 3, 8))


def _gating(npu):
    (x,) = leaves(rand(4, 8, seed=1))
    return npu.npu_moe_gating_top_k_softmax(x, k=2)[0]


def _apply_rotary(npu):
    q, k = leaves(rand(1, 3, 2, 8, seed=1), rand(1, 3, 2, 8, seed=2))
    rotated = npu.npu_apply_rotary_pos_emb(q * 1, k * 1, torch.ones(1, 3, 1, 8), torch.zeros(1, 3, 1, 8))
    return rotated[0]


NO_DERIVATIVE = {"npu_add_rms_norm": _add_rms_norm, "npu_interleave_rope": _interleave_rope,
                 "npu_moe_gating_top_k_softmax": _gating, "npu_apply_rotary_pos_emb": _apply_rotary}  # fmt: skip


@pytest.mark.parametrize("name", NO_DERIVATIVE)
def test_backward_without_a_derivative_raises_as_on_the_device(torch_npu, name: str) -> None:
    out = NO_DERIVATIVE[name](torch_npu)
    assert out.requires_grad and torch.isfinite(out).all()
    with pytest.raises(RuntimeError, match=f"^derivative for npu::{name} is not implemented$"):
        out.sum().backward()


def test_no_derivative_operators_still_run_without_grad(torch_npu) -> None:
    x = rand(2, 8, seed=1)
    y, rstd, total = torch_npu.npu_add_rms_norm(x, x, torch.ones(8))
    torch.testing.assert_close(total, 2 * x)
    torch.testing.assert_close(y, rms_norm_formula(2 * x, torch.ones(8)), rtol=1e-5, atol=1e-6)
    q, k = rand(1, 3, 2, 8, seed=1), rand(1, 3, 2, 8, seed=2)
    assert torch_npu.npu_apply_rotary_pos_emb(q, k, torch.ones(1, 3, 1, 8), torch.zeros(1, 3, 1, 8))[0] is q


def test_npu_fusion_attention_grad_is_the_operator_the_backward_calls(torch_npu) -> None:
    """torch_npu.npu_fusion_attention_grad, called as derivatives.yaml calls it (dy, the forward's results),
    gives the gradients backward() gives, dpse and dsink empty when not given; under FakeTensorMode it gives
    the inputs' shapes and dtypes (torch_npu's fake-tensor test calls it so)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    q, k, v = leaves(rand(2, 4, 6, 8, seed=1), rand(2, 2, 6, 8, seed=2), rand(2, 2, 6, 8, seed=3))
    dy = rand(2, 4, 6, 8, seed=4)
    result = torch_npu.npu_fusion_attention(q, k, v, 4, "BNSD", scale=0.3, atten_mask=TEMPLATE, sparse_mode=2)
    result[0].backward(dy)
    grads = torch_npu.npu_fusion_attention_grad(
        q.detach(), k.detach(), v.detach(), dy, 4, "BNSD", atten_mask=TEMPLATE, sparse_mode=2, scale_value=0.3,
        attention_in=result[0].detach(), softmax_max=result[1], softmax_sum=result[2], softmax_in=result[3])
    for got, expected in zip(grads[:3], (q.grad, k.grad, v.grad)):
        torch.testing.assert_close(got, expected)
    assert grads[3].numel() == 0 and grads[4].numel() == 0
    with FakeTensorMode():
        fq, fk = torch.empty(1, 4, 6, 8, dtype=torch.float16), torch.empty(1, 2, 6, 8, dtype=torch.float16)
        fake = torch.ops.npu.npu_fusion_attention_grad(fq, fk, fk, fq, head_num=4, input_layout="BNSD")
        shapes = [(t.shape, t.dtype) for t in fake[:3]]
    assert shapes == [(fq.shape, torch.float16), (fk.shape, torch.float16), (fk.shape, torch.float16)]


def test_gradients_through_a_per_head_bnss_mask_equal_torch_autograd(torch_npu) -> None:
    """A [B, N1, S1, S2] mask (a mask per head, sparse_mode 0, GQA) in the backward's recomputation: the
    gradients equal SDPA's with the same boolean mask (torch_npu's DTensor tests use such a band mask)."""
    q, k, v = leaves(rand(2, 4, 6, 8, seed=1), rand(2, 2, 6, 8, seed=2), rand(2, 2, 6, 8, seed=3))
    grad = rand(2, 4, 6, 8, seed=4)
    mask = torch.rand(2, 4, 6, 6, generator=torch.Generator().manual_seed(9)) < 0.4
    mask[..., 0] = False
    torch_npu.npu_fusion_attention(q, k, v, 4, "BNSD", scale=8**-0.5, atten_mask=mask)[0].backward(grad)
    expected = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=~mask, enable_gqa=True,
                                                                scale=8**-0.5)  # fmt: skip
    want = torch.autograd.grad(expected, (q, k, v), grad)
    for got, wanted in zip((q.grad, k.grad, v.grad), want):
        torch.testing.assert_close(got, wanted, rtol=1e-4, atol=1e-5)
