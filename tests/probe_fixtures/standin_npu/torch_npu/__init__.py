"""A torch_npu stand-in for the probe's tests; ``KVLINT_TEST_STANDIN`` picks the variant at import:
``good``, ``top_left`` (sparse_mode=3 aligned top-left), ``no_scale`` (scale ignored) or ``nested``
(FIA runs through this module's own IFA, as a library helper would)."""

import os

from tests.probe_fixtures.standin import Attention

_VARIANT = os.environ.get("KVLINT_TEST_STANDIN", "good")
_ops = {
    "good": Attention(),
    "top_left": Attention(bottom_right=False),
    "no_scale": Attention(use_scale=False),
    "nested": Attention(),
}[_VARIANT].ops()

npu_fused_infer_attention_score = _ops.npu_fused_infer_attention_score
npu_incre_flash_attention = _ops.npu_incre_flash_attention
scatter_update_ = _ops.scatter_update_
scatter_update = _ops.scatter_update
npu_scatter_nd_update_ = _ops.npu_scatter_nd_update_
npu_scatter_pa_kv_cache = _ops.npu_scatter_pa_kv_cache
_npu_reshape_and_cache = _ops._npu_reshape_and_cache


def attention_helper(*args, **kwargs):
    """A helper inside torch_npu: the probe attributes its operator call to the helper's caller."""
    return npu_fused_infer_attention_score(*args, **kwargs)


def _fia_through_ifa(query, key, value, *, num_heads=1, scale=1.0, input_layout="BSH", num_key_value_heads=0,
                     **ignored):
    out = npu_incre_flash_attention(query, key, value, num_heads=num_heads, scale_value=scale,
                                    input_layout=input_layout, num_key_value_heads=num_key_value_heads)
    return out, out.new_empty(0)


if _VARIANT == "nested":
    npu_fused_infer_attention_score = _fia_through_ifa
