"""Messages say what the code shows and what to do: the shape a mask has, the exemption a rule knows,
where a repeat happened."""

from __future__ import annotations

import textwrap

from kvlint.checks.engine import lint_source


def _messages(source: str, code: str) -> list[str]:
    return [f.message for f in lint_source(textwrap.dedent(source), "m.py") if f.code == code]


def test_kvl202_names_the_symbolic_shape_it_saw_and_the_template() -> None:
    [message] = _messages("""
        import torch
        import torch_npu

        def attend(q, k, v, bsz, causal_len):
            mask = torch.ones([bsz, causal_len], dtype=torch.bool)
            return torch_npu.npu_prompt_flash_attention(q, k, v, num_heads=8, scale_value=0.1, sparse_mode=2,
                                                        atten_mask=mask)
    """, "KVL202")
    assert "has shape (bsz, causal_len), sized at run time" in message
    assert "(2048, 2048), (1, 2048, 2048) or (1, 1, 2048, 2048)" in message
    assert "happens to be" not in message


def test_kvl203_mentions_the_query_length_one_exemption() -> None:
    [message] = _messages("""
        import torch_npu

        def attend(q, k, v):
            return torch_npu.npu_prompt_flash_attention(q, k, v, num_heads=8, scale_value=0.1, sparse_mode=3)
    """, "KVL203")
    assert "query of length 1" in message


def test_kvl307_says_where_the_repeat_happened_and_that_the_kv_head_count_contradicts_it() -> None:
    [message] = _messages("""
        import torch
        import torch_npu

        def widen(key, groups):
            return torch.repeat_interleave(key, groups, dim=1)

        def to_3d(key, groups):
            return widen(key, groups)

        def attend(q, key, value, heads, kv_heads):
            k = to_3d(key, heads // kv_heads)
            out, _ = torch_npu.npu_fused_infer_attention_score(
                q, k, value, num_heads=heads, num_key_value_heads=kv_heads, scale=0.1)
            return out
    """, "KVL307")
    assert "(repeated at line 6, in widen())" in message
    assert "num_key_value_heads=kv_heads now contradicts the repeated tensor" in message
