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

        def attend(q, k, v, is_causal=True):
            return torch_npu.npu_prompt_flash_attention(q, k, v, num_heads=8, scale_value=0.1, sparse_mode=3)
    """, "KVL203")
    assert "query of length 1" in message


def test_kvl203_names_the_evidence_of_causal_intent() -> None:
    [message] = _messages("""
        import torch_npu

        def shim(q, k, v, attn_mask=None, causal=False):
            mode = 3 if causal else 0
            return torch_npu.npu_fusion_attention(q, k, v, 8, "BSND", atten_mask=attn_mask, sparse_mode=mode)[0]

        def decoder(q, k, v):
            return shim(q, k, v, causal=True)
    """, "KVL203")
    assert "'causal' is true on this path" in message


def test_kvl203_is_silent_without_evidence_of_causal_intent() -> None:
    assert _messages("""
        import torch_npu

        def dit_attention(q, k, v, heads):
            return torch_npu.npu_fusion_attention(q, k, v, heads, "BNSD", scale=0.1, sparse_mode=3)[0]
    """, "KVL203") == []


def test_a_misspelled_mask_is_one_finding_whose_message_says_the_mask_is_dropped() -> None:
    source = """
        import torch_npu

        def prefill(q, k_cache, v_cache, mask):
            return torch_npu.npu_fusion_attention(q, k_cache, v_cache, 8, "BSND", attention_mask=mask,
                                                  sparse_mode=3)[0]
    """
    [message] = _messages(source, "KVL101")
    assert "did you mean 'atten_mask'?" in message and "the mask is therefore dropped" in message.lower()
    assert _messages(source, "KVL203") == [] and _messages(source, "KVL207") == []


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


def test_kvl208_spells_the_window_parameter_as_each_operator_does() -> None:
    """npu_fusion_attention takes ``pre_tockens`` (sic); the inference operators take ``pre_tokens``. A fix that
    names the other spelling is refused by the dispatcher."""
    source = """
        import flash_attn
        import torch_npu

        def attend(q, k, v, window_size=(-1, -1), use_fa=False):
            if use_fa:
                return flash_attn.flash_attn_func(q, k, v, window_size=window_size)
            return torch_npu.{call}
    """
    [fusion] = _messages(source.format(call='npu_fusion_attention(q, k, v, 8, "BSND")[0]'), "KVL208")
    [prompt] = _messages(source.format(call="npu_prompt_flash_attention(q, k, v, num_heads=8, scale_value=0.1)"),
                         "KVL208")
    assert "pass it as pre_tockens" in fusion
    assert "pass it as pre_tokens" in prompt
