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


def test_kvl309_names_where_the_cumulative_lengths_and_the_layout_were_set() -> None:
    """A real backend: the cumsum in another method, the layout string in __init__. Without the lines the
    message named only the variable."""
    [message] = _messages("""
        import torch
        import torch_npu

        class Backend:
            def __init__(self, heads):
                self.heads = heads
                self.layout = "BSND"

            def prepare(self, seq_lens):
                self.cu_lens = torch.cumsum(seq_lens, dim=0)

            def forward(self, q, k, v):
                out, _ = torch_npu.npu_fused_infer_attention_score(
                    q, k, v, num_heads=self.heads, scale=0.1, input_layout=self.layout,
                    actual_seq_lengths=self.cu_lens,
                )
                return out
    """, "KVL309")
    assert "cumulative lengths (self.cu_lens built at line 11)" in message
    assert "input_layout 'BSND' (set at line 8) takes one length per batch" in message


def test_kvl309_says_when_the_layout_is_the_operators_default() -> None:
    [message] = _messages("""
        import torch_npu

        def decode(q, k_cache, v_cache, attn_metadata):
            return torch_npu.npu_incre_flash_attention(q, k_cache, v_cache, num_heads=8, scale_value=0.1,
                                                       actual_seq_lengths=attn_metadata.cu_seqlens_k)
    """, "KVL309")
    assert "input_layout 'BSH' (the operator's default)" in message
