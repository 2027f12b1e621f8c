"""Under FakeTensorMode (torch.compile's tracing) IFA and PFA accept what torch_npu's meta kernels accept: those
check nothing and give an output of the query's shape (PFA: TND takes value's head dim, BNSD_BSND swaps N and S)
in the query's dtype, fp16 for an int8 query and int8 with ``quant_scale2``. torch_npu's own fake-tensor tests
call them with their default layout (BSH) on 4-D and 2-D queries."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
fake_tensor = pytest.importorskip("torch._subclasses.fake_tensor")


@pytest.mark.parametrize("op", ["npu_incre_flash_attention", "npu_prompt_flash_attention"])
@pytest.mark.parametrize("shape", [(1, 40, 1, 128), (1, 128), (2, 4, 64)], ids=["4-D", "2-D", "3-D"])
def test_the_output_has_the_query_shape_whatever_the_default_layout_says(torch_npu, op, shape):
    with fake_tensor.FakeTensorMode():
        q = torch.randn(shape, dtype=torch.float16)
        out = getattr(torch.ops.npu, op)(q, q, q)
    assert out.shape == q.shape and out.dtype == torch.float16


@pytest.mark.parametrize("op", ["npu_incre_flash_attention", "npu_prompt_flash_attention"])
def test_int8_queries_give_fp16_and_quant_scale2_gives_int8(torch_npu, op):
    with fake_tensor.FakeTensorMode():
        q = torch.randint(1, 40, (1, 128), dtype=torch.int8)
        assert getattr(torch.ops.npu, op)(q, q, q).dtype == torch.float16
        h = torch.randn(1, 2, 64, dtype=torch.float16)
        quantised = getattr(torch.ops.npu, op)(h, h, h, quant_scale2=torch.ones(1))
    assert quantised.dtype == torch.int8 and quantised.shape == h.shape


def test_pfa_tnd_takes_value_head_dim_and_bnsd_bsnd_swaps_heads_and_sequence(torch_npu):
    with fake_tensor.FakeTensorMode():
        q, v = torch.randn(6, 2, 64), torch.randn(6, 2, 32)
        tnd = torch.ops.npu.npu_prompt_flash_attention(q, q, v, num_heads=2, input_layout="TND",
                                                       actual_seq_lengths=[6], actual_seq_lengths_kv=[6])  # fmt: skip
        q4 = torch.randn(1, 2, 5, 64)
        swapped = torch.ops.npu.npu_prompt_flash_attention(q4, q4, q4, num_heads=2, input_layout="BNSD_BSND")
    assert tnd.shape == (6, 2, 32) and swapped.shape == (1, 5, 2, 64)


def test_the_eager_call_still_refuses_a_query_its_layout_does_not_fit(torch_npu):
    """The fake kernel is lenient like the meta kernel; the computation is not: a 4-D query is not BSH."""
    q = torch.randn(1, 4, 1, 16, dtype=torch.float16)
    with pytest.raises(RuntimeError, match="BSH"):
        torch.ops.npu.npu_incre_flash_attention(q, q, q)
