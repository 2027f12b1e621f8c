"""KVL501/KVL502: the probe compares live outputs with the reference and catches a subtly wrong operator.

The stand-ins differ from a correct operator only in the causal alignment of sparse_mode=3 (top-left
instead of bottom-right, visible only when the query is shorter than the KV) or in ignoring the scale.
"""

from __future__ import annotations

import pytest
import torch
from kvlint.runtime_probe.compare import compare, nonfinite
from kvlint.runtime_probe.live_call import LiveCall, bind
from kvlint.runtime_probe.report import summary

from kvlint.catalogue.operators import FIA_V1, OPERATORS
from tests.probe_fixtures.harness import codes, emulated, probe, standin  # noqa: F401

TEMPLATE = torch.ones(2048, 2048, dtype=torch.bool).triu(1)


def chunked_prefill(torch_npu, dtype=torch.float16, sq=4, skv=12, **overrides):
    """A chunk of ``sq`` new tokens over ``skv`` keys (bottom-right causal), BNSD, GQA 4/2."""
    generator = torch.Generator().manual_seed(2)
    q = torch.randn(2, 4, sq, 32, generator=generator).to(dtype)
    k = torch.randn(2, 2, skv, 32, generator=generator).to(dtype)
    v = torch.randn(2, 2, skv, 32, generator=generator).to(dtype)
    keywords = dict(num_heads=4, num_key_value_heads=2, input_layout="BNSD", scale=32**-0.5, sparse_mode=3,
                    atten_mask=TEMPLATE)
    keywords.update(overrides)
    return torch_npu.npu_fused_infer_attention_score(q, k, v, **keywords)


@pytest.mark.parametrize("variant", ["top_left", "no_scale"])
def test_subtly_wrong_attention_is_reported(variant, probe, standin):
    running = probe()
    chunked_prefill(standin(variant))
    (finding,) = running.recorder.findings.values()
    assert finding.code == "KVL501"
    assert "max abs error" in finding.message and "max rel error" in finding.message
    assert "(batch " in finding.message


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_correct_attention_is_not_reported(dtype, probe, standin):
    running = probe()
    torch_npu = standin("good")
    chunked_prefill(torch_npu, dtype)
    chunked_prefill(torch_npu, dtype, sq=12, skv=12)
    assert codes(running) == {}
    assert [site.compared for site in running.recorder.sites.values()] == [2]


def test_top_left_alignment_is_invisible_for_square_prefill(probe, standin):
    """The two alignments agree when S1 == S2: the probe reports differences, not guesses."""
    running = probe()
    chunked_prefill(standin("top_left"), sq=12, skv=12)
    assert codes(running) == {}


def test_sample_limits_the_compared_calls_per_site(probe, standin):
    running = probe(sample=2)
    torch_npu = standin("top_left")
    for _ in range(5):
        chunked_prefill(torch_npu)
    (site,) = running.recorder.sites.values()
    assert (site.calls, site.validated, site.compared) == (5, 5, 2)
    assert codes(running) == {"KVL501": 2}


def test_validate_mode_never_compares(probe, standin):
    running = probe(compare=False)
    chunked_prefill(standin("top_left"))
    (site,) = running.recorder.sites.values()
    assert (site.validated, site.compared) == (1, 0)
    assert codes(running) == {}


def test_nonfinite_output_is_reported(probe, standin):
    running = probe(compare=False)
    torch_npu = standin("good")
    q = torch.full((1, 1, 2, 8), float("nan"))
    torch_npu.npu_fused_infer_attention_score(q, q, q, num_heads=1, input_layout="BNSD", scale=0.5,
                                              sparse_mode=3, atten_mask=TEMPLATE)
    assert codes(running) == {"KVL502": 1}


def test_nonfinite_counts_nan_and_inf_and_accepts_the_largest_finite_values():
    output = torch.full((4, 1024), 65504.0, dtype=torch.float16)
    assert nonfinite(output) is None
    output[2, 2] = float("nan")
    assert nonfinite(output) == "output has 1 NaN and 0 Inf value(s) out of 4096"
    output[0, 0], output[1, 1] = float("inf"), float("-inf")
    assert nonfinite(output) == "output has 1 NaN and 2 Inf value(s) out of 4096"


def test_options_the_reference_does_not_implement_are_not_compared(probe, standin):
    running = probe()
    chunked_prefill(standin("top_left"), quant_scale2=torch.ones(1))
    (site,) = running.recorder.sites.values()
    assert (site.validated, site.compared) == (1, 0)


def bsh_call(**keywords) -> LiveCall:
    q = torch.zeros(2, 3, 64)
    bound = bind(OPERATORS[FIA_V1], (q, q, q), {"num_heads": 4, **keywords})
    assert bound is not None
    return LiveCall(OPERATORS[FIA_V1], bound, True)


@pytest.mark.parametrize(
    ("dtype", "inside", "outside"),
    [(torch.float16, 2.0**-8, 2.0**-6), (torch.bfloat16, 2.0**-7, 2.0**-5), (torch.float32, 0.9e-4, 1.1e-4)],
)
def test_tolerance_per_dtype_scales_with_the_reference(dtype, inside, outside):
    expected = torch.ones(2, 3, 64)
    for value in (1.0, 4.0):
        for delta, wrong in ((inside, False), (outside, True)):
            output = (expected * value + delta * value).to(dtype)
            assert compare(bsh_call(), output, expected * value).mismatch is wrong


def test_worst_element_is_located_by_batch_head_token():
    expected = torch.rand(2, 3, 64) + 0.5
    output = expected.clone()
    output[1, 2, 3 * 16 + 5] += 0.5  # batch 1, token 2, head 3 (BSH splits H head-major)
    result = compare(bsh_call(), output, expected)
    assert result.mismatch and result.worst == (1, 3, 2)
    assert result.max_abs_err == pytest.approx(0.5)


def test_fully_masked_rows_are_left_out_unless_inner_precise_corrects_them():
    expected = torch.rand(2, 3, 64) + 0.5
    expected[0, 1, 16:32] = 0.0  # batch 0, token 1, head 1: no visible key
    output = expected.clone()
    output[0, 1, 16:32] = 7.0
    assert not compare(bsh_call(), output, expected).mismatch
    assert compare(bsh_call(inner_precise=2), output, expected).mismatch


# npu_fusion_attention(_v2) and the ATB attention operators are compared like FIA (issue 24).


def _randn(*shape, dtype=torch.float16, seed=3):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed + sum(shape))).to(dtype)


def _fusion_bsh(torch_npu):
    return torch_npu.npu_fusion_attention(_randn(2, 6, 64), _randn(2, 6, 32), _randn(2, 6, 32), 4, "BSH", scale=0.25)


def _fusion_sbh(torch_npu):
    return torch_npu.npu_fusion_attention(_randn(6, 2, 64), _randn(6, 2, 64), _randn(6, 2, 64), 4, "SBH", scale=0.25)


def _fusion_tnd_causal(torch_npu):
    return torch_npu.npu_fusion_attention(
        _randn(7, 4, 16), _randn(7, 2, 16), _randn(7, 2, 16), 4, "TND", scale=0.25, atten_mask=TEMPLATE,
        sparse_mode=3, actual_seq_qlen=[3, 7], actual_seq_kvlen=[3, 7])


def _fusion_v2_bnsd(torch_npu):
    return torch_npu.npu_fusion_attention_v2(_randn(1, 4, 5, 16, dtype=torch.bfloat16),
                                             _randn(1, 4, 5, 16, dtype=torch.bfloat16),
                                             _randn(1, 4, 5, 16, dtype=torch.bfloat16), 4, "BNSD", scale=0.25)


def _atb_paged(torch_npu):
    out = torch.empty(2, 4, 16, dtype=torch.float16)
    torch_npu._npu_paged_attention(_randn(2, 4, 16), _randn(4, 16, 2, 16), _randn(4, 16, 2, 16, seed=4), 2, 4, 0.25,
                                   torch.tensor([[0], [1]], dtype=torch.int32), torch.tensor([5, 3], dtype=torch.int32),
                                   out)  # fmt: skip
    return out


def _atb_unpad(torch_npu):
    out = torch.empty(7, 4 * 16, dtype=torch.float16)
    torch_npu._npu_flash_attention_unpad(_randn(7, 4, 16), _randn(7, 2, 16), _randn(7, 2, 16, seed=5),
                                         torch.tensor([3, 4], dtype=torch.int32), 0.25, 4, 2, out)  # fmt: skip
    return out


FUSION_AND_ATB = {
    "npu_fusion_attention BSH": ("npu_fusion_attention", _fusion_bsh),
    "npu_fusion_attention SBH": ("npu_fusion_attention", _fusion_sbh),
    "npu_fusion_attention TND causal": ("npu_fusion_attention", _fusion_tnd_causal),
    "npu_fusion_attention_v2 BNSD": ("npu_fusion_attention_v2", _fusion_v2_bnsd),
    "_npu_paged_attention": ("_npu_paged_attention", _atb_paged),
    "_npu_flash_attention_unpad": ("_npu_flash_attention_unpad", _atb_unpad),
}


@pytest.mark.parametrize("case", sorted(FUSION_AND_ATB))
def test_fusion_attention_and_atb_attention_are_compared_with_the_reference(case, emulated):
    op, call = FUSION_AND_ATB[case]
    running, torch_npu = emulated()
    call(torch_npu)
    call(torch_npu)
    (site,) = running.recorder.sites.values()
    assert (site.op, site.calls, site.compared) == (op, 2, 2)
    assert site.max_abs_err == 0.0  # the emulator's kernel is the reference
    assert codes(running) == {}
    row = next(line for line in summary(running.report()).splitlines() if f"  {op}  " in line)
    assert row.split()[2:5] == ["2", "2", "2"]  # calls, validated, compared


def _off_by(function, delta):
    """A kernel that returns (or writes) the emulator's result plus ``delta``: subtly wrong."""

    def wrong(*args, **keywords):
        result = function(*args, **keywords)
        if result is None:  # ATB: the result is in ``out``
            out = keywords.get("out", args[-1])
            out += delta
            return None
        return (result[0] + delta, *result[1:])

    return wrong


@pytest.mark.parametrize("case", sorted(FUSION_AND_ATB))
def test_a_subtly_wrong_fusion_or_atb_kernel_is_reported(case, emulated):
    op, call = FUSION_AND_ATB[case]
    from kvlint.runtime_probe import emulator

    real = getattr(emulator.install(), op)
    running, torch_npu = emulated({op: _off_by(real, 0.05)})
    call(torch_npu)
    (finding,) = running.recorder.findings.values()
    assert (finding.code, finding.op) == ("KVL501", op)
    assert "output differs from the reference: max abs error 0.05" in finding.message
