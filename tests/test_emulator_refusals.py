"""Every refusal of an emulated operator raises what torch_npu raises for it: ``RuntimeError`` (the device's
checks are C++ ``TORCH_CHECK``s) for the operator's own checks, the dispatcher's error for a call the schema
does not bind, and the message names the argument. A test that expects the device's exception behaves the same
on the CPU. The reference keeps raising ``ValueError`` to its Python callers (the probe).
"""

from __future__ import annotations

import types
from collections.abc import Callable

import pytest
import torch


def t(*shape: int, dtype: torch.dtype = torch.float16) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(0)).to(dtype)


TEMPLATE = torch.ones(2048, 2048, dtype=torch.bool).triu(1)
Q, K = t(2, 4, 3, 16), t(2, 2, 3, 16)

REFUSALS: dict[str, tuple[Callable[[types.ModuleType], object], str]] = {
    # attention: shapes and arguments the operator checks
    "FIA heads differ from the tensor": (
        lambda npu: npu.npu_fused_infer_attention_score(Q, K, K, num_heads=3, input_layout="BNSD"), "heads"),
    "FIA layout rank": (
        lambda npu: npu.npu_fused_infer_attention_score(Q[0], K[0], K[0], num_heads=4, input_layout="BNSD"),
        "BNSD"),
    "FIA v2 sparse_mode without its template": (
        lambda npu: npu.npu_fused_infer_attention_score_v2(Q, K, K, num_query_heads=4, num_key_value_heads=2,
                                                           input_layout="BNSD", sparse_mode=3), "atten_mask"),
    "FIA TND without lengths": (
        lambda npu: npu.npu_fused_infer_attention_score(t(6, 4, 16), t(6, 2, 16), t(6, 2, 16), num_heads=4,
                                                        num_key_value_heads=2, input_layout="TND"),
        "actual_seq_lengths"),
    "FIA KV length past the cache": (
        lambda npu: npu.npu_fused_infer_attention_score(Q, K, K, num_heads=4, num_key_value_heads=2,
                                                        input_layout="BNSD", actual_seq_lengths_kv=[7, 7]),
        "actual_seq_lengths_kv"),
    "FIA .out with one buffer": (
        lambda npu: npu.npu_fused_infer_attention_score(Q, K, K, num_heads=4, num_key_value_heads=2,
                                                        input_layout="BNSD", out=[torch.empty(0)]), "out"),
    "IFA mask dtype": (
        lambda npu: npu.npu_incre_flash_attention(Q[:, :, :1], K, K, num_heads=4, num_key_value_heads=2,
                                                  input_layout="BNSD", atten_mask=torch.zeros(2, 1, 1, 3)),
        "atten_mask"),
    "PFA pse_shift shape": (
        lambda npu: npu.npu_prompt_flash_attention(Q, K, K, num_heads=4, num_key_value_heads=2, input_layout="BNSD",
                                                   pse_shift=t(2, 3, 3, 3)), "pse_shift"),
    "FA layout": (lambda npu: npu.npu_fusion_attention(Q, K, K, 4, "BHSD"), "input_layout"),
    "FA mask covers too little": (
        lambda npu: npu.npu_fusion_attention(Q, K, K, 4, "BNSD", atten_mask=torch.zeros(2, 2, dtype=torch.bool)),
        "atten_mask"),
    # ATB
    "paged attention lengths and tokens": (
        lambda npu: npu._npu_paged_attention(t(2, 4, 16), t(4, 16, 2, 16), t(4, 16, 2, 16), 2, 4, 0.25,
                                             torch.zeros(2, 2, dtype=torch.int32), torch.tensor([3], dtype=torch.int32),
                                             t(2, 4, 16)), "context_lens"),
    "splitfuse_v2 mask_type": (
        lambda npu: npu._npu_paged_attention_splitfuse_v2(
            t(2, 4, 16), t(4, 16, 2, 16), t(4, 16, 2, 16), torch.zeros(1, 2, dtype=torch.int32),
            torch.tensor([2], dtype=torch.int32), TEMPLATE.half(), torch.tensor([2], dtype=torch.int32), 2, 4, 0.25,
            mask_type=2, out=t(2, 4, 16)), "mask_type"),
    "flash_attention_unpad_v2 kernel_type": (
        lambda npu: npu._npu_flash_attention_unpad_v2(t(3, 4, 16), t(3, 2, 16), t(3, 2, 16),
                                                      torch.tensor([3], dtype=torch.int32), 0.25, 4, 2,
                                                      kernel_type=1, out=t(3, 4, 16)), "kernel_type"),
    "flash_attention seq_len past the tokens": (
        lambda npu: npu._npu_flash_attention_unpad(t(3, 4, 16), t(3, 2, 16), t(3, 2, 16),
                                                   torch.tensor([5], dtype=torch.int32), 0.25, 4, 2, t(3, 4, 16)),
        "seq_len"),
    # KV-cache writes
    "scatter_nd_update updates shape": (
        lambda npu: npu.npu_scatter_nd_update(t(4, 8), torch.tensor([[1], [2]]), t(3, 8)), "updates"),
    "reshape_and_cache slot outside the cache": (
        lambda npu: npu._npu_reshape_and_cache(t(1, 2, 8), t(1, 2, 8), t(2, 16, 2, 8), t(2, 16, 2, 8),
                                               torch.tensor([40], dtype=torch.int32)), "slot"),
    "scatter_pa_kv_cache cache_mode": (
        lambda npu: npu.npu_scatter_pa_kv_cache(t(1, 2, 8), t(1, 2, 8), t(2, 16, 2, 8), t(2, 16, 2, 8),
                                                torch.tensor([1], dtype=torch.int32), cache_mode="ND"), "cache_mode"),
    # norms, rope, MoE, formats
    "rms_norm gamma": (lambda npu: npu.npu_rms_norm(t(2, 8), t(4)), "gamma"),
    "add_rms_norm operands": (lambda npu: npu.npu_add_rms_norm(t(2, 8), t(3, 8), t(8)), "x2"),
    "rotary_mul cos/sin broadcast": (lambda npu: npu.npu_rotary_mul(t(2, 3, 8), t(5, 8), t(5, 8)), "cos"),
    "apply_rotary_pos_emb layout": (
        lambda npu: npu.npu_apply_rotary_pos_emb(t(1, 2, 2, 8), t(1, 2, 2, 8), t(1, 2, 1, 8), t(1, 2, 1, 8),
                                                 layout="BHS"), "layout"),
    "interleave_rope rank": (lambda npu: npu.npu_interleave_rope(t(2, 8), t(1, 8), t(1, 8)), "x"),
    "swiglu odd dim": (lambda npu: npu.npu_swiglu(t(2, 7)), "dim"),
    "gating top-k k": (lambda npu: npu.npu_moe_gating_top_k_softmax(t(4, 8), k=9), "k"),
    "format_cast acl_format": (lambda npu: npu.npu_format_cast(t(2, 8), 7), "acl_format"),
}  # fmt: skip


@pytest.mark.parametrize("case", REFUSALS)
def test_refusal_raises_the_devices_runtime_error_naming_the_argument(torch_npu: types.ModuleType, case: str) -> None:
    call, argument = REFUSALS[case]
    with pytest.raises(RuntimeError) as raised:
        call(torch_npu)
    assert type(raised.value) is RuntimeError  # not a subclass such as NotImplementedError
    assert argument in str(raised.value)


class _Called:
    """``torch_npu`` that remembers which operator a call took from it."""

    def __init__(self, module: types.ModuleType) -> None:
        self.module, self.names = module, []

    def __getattr__(self, name: str) -> object:
        self.names.append(name)
        return getattr(self.module, name)


@pytest.mark.parametrize("case", REFUSALS)
def test_refusal_message_starts_with_the_refused_operator(torch_npu: types.ModuleType, case: str) -> None:
    """A test that calls several operators sees which one refused: the message leads with its name."""
    call, _ = REFUSALS[case]
    called = _Called(torch_npu)
    with pytest.raises(RuntimeError) as raised:
        call(called)
    (operator,) = called.names
    assert str(raised.value).startswith((f"{operator}: ", f"{operator}.out: ")), str(raised.value)


@pytest.mark.parametrize("mode", ["no_grad", "inference_mode"])
def test_refusals_are_the_same_under_no_grad_and_inference_mode(torch_npu, mode: str) -> None:
    with getattr(torch, mode)(), pytest.raises(RuntimeError, match="gamma"):
        torch_npu.npu_rms_norm(t(2, 8), t(4))


def test_an_unknown_keyword_is_the_dispatchers_error(torch_npu) -> None:
    """Schema binding is torch's: the dispatcher refuses a keyword no overload has, before any kernel runs."""
    with pytest.raises(RuntimeError, match="num_query_heads"):
        torch_npu.npu_fused_infer_attention_score(Q, K, K, num_query_heads=4)


def test_unimplemented_options_still_say_so(torch_npu) -> None:
    """What the emulator does not compute is NotImplementedError naming the argument, not a refusal."""
    with pytest.raises(NotImplementedError, match="keep_prob"):
        torch_npu.npu_fusion_attention(Q, K, K, 4, "BNSD", keep_prob=0.9)
