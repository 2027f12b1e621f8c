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
