"""npu_fusion_attention accepts every atten_mask shape its documentation lists (BNSS [B,N1,S1,S2], B1SS
[B,1,S1,S2], 11SS [1,1,S1,S2], SS [S1,S2]) and broadcasts each as documented: BNSS masks each head of each
batch apart, B1SS each batch, 11SS and SS every batch and head alike. The golden is the documentation's own
reference: ``softmax(q @ k^T * scale + mask * -10000) @ v``, computed here in float64."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

B, N, S1, S2, D = 2, 3, 5, 7, 16
SCALE = 0.25


def documented_golden(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The doc example's reference in BNSD, with the mask broadcast to (B, N, S1, S2) by torch's rules."""
    scores = q.double() @ k.double().transpose(-1, -2) * SCALE + mask.double() * -10000.0
    return torch.softmax(scores, dim=-1) @ v.double()


@pytest.fixture(scope="module")
def qkv(torch_npu):
    generator = torch.Generator().manual_seed(3)
    return tuple(torch.randn(B, N, s, D, generator=generator) for s in (S1, S2, S2))


def random_mask(*shape: int) -> torch.Tensor:
    """A bool mask with True = masked, never a whole row masked (key 0 always visible)."""
    generator = torch.Generator().manual_seed(sum(shape))
    mask = torch.rand(*shape, generator=generator) < 0.5
    mask[..., 0] = False
    return mask


@pytest.mark.parametrize("shape", [(B, N, S1, S2), (B, 1, S1, S2), (1, 1, S1, S2), (S1, S2)],
                         ids=["BNSS", "B1SS", "11SS", "SS"])  # fmt: skip
@pytest.mark.parametrize("dtype", [torch.bool, torch.uint8])
def test_each_documented_mask_shape_is_accepted_and_broadcast_as_the_docs_golden(torch_npu, qkv, shape, dtype):
    q, k, v = qkv
    mask = random_mask(*shape)
    out, softmax_max, softmax_sum, *_ = torch_npu.npu_fusion_attention(
        q, k, v, N, "BNSD", atten_mask=mask.to(dtype), scale=SCALE, sparse_mode=0)
    torch.testing.assert_close(out.double(), documented_golden(q, k, v, mask), rtol=1e-5, atol=1e-5)
    assert softmax_max.shape == softmax_sum.shape == (B, N, S1, 8)


def test_a_bnss_mask_masks_each_head_apart(torch_npu, qkv):
    """Head 1 of batch 0 sees only key 0: its rows equal v[0, 1, 0]; the other heads are unmasked."""
    q, k, v = qkv
    mask = torch.zeros(B, N, S1, S2, dtype=torch.bool)
    mask[0, 1, :, 1:] = True
    out = torch_npu.npu_fusion_attention(q, k, v, N, "BNSD", atten_mask=mask, scale=SCALE)[0]
    torch.testing.assert_close(out[0, 1], v[0, 1, 0].expand(S1, D))
    unmasked = torch_npu.npu_fusion_attention(q, k, v, N, "BNSD", scale=SCALE)[0]
    torch.testing.assert_close(out[0, [0, 2]], unmasked[0, [0, 2]])
    torch.testing.assert_close(out[1], unmasked[1])


def test_a_bnss_mask_in_the_bsh_layout(torch_npu, qkv):
    """The mask's N axis is the head of the H split, whatever the tensors' layout."""
    q, k, v = qkv
    mask = random_mask(B, N, S1, S2)
    bsh = [t.transpose(1, 2).reshape(B, t.shape[2], N * D) for t in (q, k, v)]
    out = torch_npu.npu_fusion_attention(*bsh, N, "BSH", atten_mask=mask, scale=SCALE)[0]
    golden = documented_golden(q, k, v, mask).transpose(1, 2).reshape(B, S1, N * D)
    torch.testing.assert_close(out.double(), golden, rtol=1e-5, atol=1e-5)


def test_a_bnss_mask_with_grouped_kv_heads(torch_npu, qkv):
    """GQA (N1 = 3 query heads over one KV head): the mask's N is the query heads."""
    q, k, v = qkv
    mask = random_mask(B, N, S1, S2)
    out = torch_npu.npu_fusion_attention(q, k[:, :1], v[:, :1], N, "BNSD", atten_mask=mask, scale=SCALE)[0]
    golden = documented_golden(q, k[:, :1].expand(-1, N, -1, -1), v[:, :1].expand(-1, N, -1, -1), mask)
    torch.testing.assert_close(out.double(), golden, rtol=1e-5, atol=1e-5)


def test_mode_0_intersects_a_bnss_mask_with_the_band(torch_npu, qkv):
    """sparse_mode 0 reads pre/next_tockens with a mask: a band of pre 1, next 0 within an empty BNSS mask
    is the documented triu(k=next+1) + tril(k=-pre-1) mask."""
    q, k, v = qkv
    empty = torch.zeros(B, N, S1, S2, dtype=torch.bool)
    out = torch_npu.npu_fusion_attention(q, k, v, N, "BNSD", atten_mask=empty, scale=SCALE, pre_tockens=1,
                                         next_tockens=0)[0]  # fmt: skip
    ones = torch.ones(S1, S2)
    band = (torch.triu(ones, diagonal=1) + torch.tril(ones, diagonal=-2)).bool()
    torch.testing.assert_close(out.double(), documented_golden(q, k, v, band), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("shape", [(B, 2, S1, S2), (3, N, S1, S2), (B, N, S1)], ids=["heads", "batch", "3-D"])
def test_a_mask_of_another_shape_is_refused(torch_npu, qkv, shape):
    q, k, v = qkv
    with pytest.raises(RuntimeError, match=r"atten_mask of shape"):
        torch_npu.npu_fusion_attention(q, k, v, N, "BNSD", atten_mask=torch.zeros(shape, dtype=torch.bool))
