"""KVL507 fires only where the evidence says decoder (issue 19): a ViT-style encoder's bidirectional
attention is silent; a decoder prefill that writes its cache and forgets the causal mask, and a chunked
prefill over a cache without a mask, are reported, each naming its evidence."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.probe_fixtures.harness import codes, emulated, marked_line, probe  # noqa: F401

THIS = Path(__file__)
PATH = "tests/test_probe_decoder.py"
B, NQ, NKV, D = 2, 4, 2, 16
KEYWORDS = dict(num_heads=NQ, num_key_value_heads=NKV, input_layout="BNSD", scale=D**-0.5)
TEMPLATE = torch.ones(2048, 2048, dtype=torch.bool).triu(1)


def randn(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(sum(shape)))


def vit_encoder(torch_npu, layers: int = 4, images: int = 3, operator: str = "fia") -> None:
    """Patch tokens attend to each other in every layer: q_len == kv_len, sparse_mode 0, no mask, no cache."""
    for _ in range(images):
        x = randn(B, 49, NQ * D)
        for _ in range(layers):
            q = x.unflatten(-1, (NQ, D)).transpose(1, 2)
            k = v = q[:, :NKV]
            if operator == "fia":
                out, _ = torch_npu.npu_fused_infer_attention_score(q, k, v, **KEYWORDS)
            else:
                out = torch_npu.npu_prompt_flash_attention(q, k, v, num_heads=NQ, num_key_value_heads=NKV,
                                                           input_layout="BNSD", scale_value=D**-0.5)
            x = out.transpose(1, 2).flatten(-2)


@pytest.mark.parametrize("operator", ["fia", "pfa"])
def test_a_vit_encoder_is_silent(operator, emulated):
    running, torch_npu = emulated(strict=True, compare=False)
    vit_encoder(torch_npu, operator=operator)
    assert codes(running) == {}
    assert sum(site.validated for site in running.recorder.sites.values()) == 4 * 3


def test_a_cross_attention_over_reused_encoder_keys_is_silent(emulated):
    """The decoder's queries over the encoder's keys, the same tensor at every step: not a KV cache."""
    running, torch_npu = emulated(compare=False)
    memory = randn(B, NKV, 40, D)
    for _ in range(3):
        torch_npu.npu_fused_infer_attention_score(randn(B, NQ, 5, D), memory, memory, **KEYWORDS)
    assert codes(running) == {}


def decoder_prefill(torch_npu, layers: int = 2) -> None:
    """Each layer writes the prompt's K/V into its cache, then attends over the cache without a mask."""
    for _ in range(layers):
        k_cache, v_cache = torch.zeros(B, NKV, 16, D), torch.zeros(B, NKV, 16, D)
        q, k, v = randn(B, NQ, 6, D), randn(B, NKV, 6, D), randn(B, NKV, 6, D) + 1
        torch_npu.scatter_update_(k_cache, torch.tensor([0, 0]), k, -2)  # cache write
        torch_npu.scatter_update_(v_cache, torch.tensor([0, 0]), v, -2)
        torch_npu.npu_fused_infer_attention_score(q, k_cache, v_cache, actual_seq_lengths_kv=[6, 6], **KEYWORDS)  # prefill


def test_a_decoder_prefill_that_writes_its_cache_and_forgets_the_mask_is_kvl507(emulated):
    running, torch_npu = emulated(compare=False)
    decoder_prefill(torch_npu)
    (finding,) = running.recorder.findings.values()
    assert (finding.code, finding.count, finding.path, finding.line) == ("KVL507", 2, PATH,
                                                                        marked_line(THIS, "prefill"))
    assert finding.severity == "warning"
    assert finding.message.startswith("6 query tokens over 6 keys with sparse_mode=0 and no atten_mask")
    assert finding.message.endswith(f"decoder evidence: the keys are a KV cache written in this step "
                                    f"(scatter_update_ at {PATH}:{marked_line(THIS, 'cache write')})")


def test_a_prefill_over_the_fresh_keys_it_wrote_to_the_cache_is_kvl507(emulated):
    """vLLM-style: the prompt's K/V go into the paged cache, attention reads the fresh K/V themselves."""
    running, torch_npu = emulated(compare=False)
    cache = torch.zeros(B, 16, NKV * D)  # [blocks, block_size, H], one block per sequence
    q, new_keys = randn(B, 5, NQ * D), randn(B * 5, NKV * D)
    slots = torch.tensor([b * 16 + t for b in range(B) for t in range(5)]).reshape(-1, 1)
    torch_npu.npu_scatter_nd_update_(cache.view(-1, NKV * D), slots, new_keys)
    fresh = new_keys.view(B, 5, NKV * D)
    torch_npu.npu_fused_infer_attention_score(q, fresh, fresh, num_heads=NQ, num_key_value_heads=NKV, input_layout="BSH", scale=D**-0.5)  # noqa: E501  # fresh
    (finding,) = running.recorder.findings.values()
    assert finding.code == "KVL507" and finding.line == marked_line(THIS, "fresh")
    assert finding.message.endswith("decoder evidence: these keys were written to a KV cache in this step")


def test_a_chunked_prefill_over_a_paged_cache_without_a_mask_is_kvl507(emulated):
    """The second chunk of a prompt attends over the first chunk's blocks and its own: no mask."""
    running, torch_npu = emulated(compare=False)
    cache = randn(4, 16, NKV * D)
    table = torch.tensor([[0, 1], [2, 3]], dtype=torch.int32)
    torch_npu.npu_fused_infer_attention_score(randn(B, 8, NQ * D), cache, cache, block_table=table, block_size=16, actual_seq_lengths=[8, 8], actual_seq_lengths_kv=[24, 20], num_heads=NQ, num_key_value_heads=NKV, input_layout="BSH", scale=D**-0.5)  # noqa: E501  # chunk
    (finding,) = running.recorder.findings.values()
    assert finding.code == "KVL507" and finding.line == marked_line(THIS, "chunk")
    assert finding.message.startswith("8 query tokens over 24 keys")
    assert finding.message.endswith("decoder evidence: the keys are a paged KV cache (block_table)")


def test_a_chunked_prefill_over_a_filled_contiguous_cache_is_kvl507(emulated):
    """Chunk 1 (6 tokens) goes through the probed write and a masked call; chunk 2 (4 tokens), in the next
    step, is copied in by plain indexing and attends over the 10 cached tokens without a mask: no write in
    its step, but the keys are a cache the probe saw filled."""
    running, torch_npu = emulated(compare=False)
    k_cache = torch.zeros(B, NKV, 16, D)
    for chunk, tokens in enumerate((6, 4)):
        new = randn(B, NKV, tokens, D)
        if chunk == 0:
            torch_npu.scatter_update_(k_cache, torch.tensor([0, 0]), new, -2)
        else:
            k_cache[:, :, 6:10] = new
        mask = {"sparse_mode": 3, "atten_mask": TEMPLATE} if chunk == 0 else {}
        torch_npu.npu_fused_infer_attention_score(randn(B, NQ, tokens, D), k_cache, k_cache, actual_seq_lengths_kv=[6 + 4 * chunk] * B, **KEYWORDS, **mask)  # noqa: E501  # chunks
    (finding,) = running.recorder.findings.values()
    assert (finding.code, finding.line) == ("KVL507", marked_line(THIS, "chunks"))
    assert finding.message.startswith("4 query tokens over 10 keys")
    assert finding.message.endswith("decoder evidence: the keys are a KV cache a cache write filled, holding 10 "
                                    "tokens for 4 queries (chunked prefill)")


def concatenating_decoder(torch_npu, steps: int = 3) -> None:
    """No probed cache write: the past keys are concatenated; one call site for prompt and decode."""
    past_k = past_v = None
    for step in range(steps):
        tokens = 5 if step == 0 else 1
        q, k, v = randn(B, NQ, tokens, D), randn(B, NKV, tokens, D), randn(B, NKV, tokens, D)
        past_k = k if past_k is None else torch.cat([past_k, k], 2)
        past_v = v if past_v is None else torch.cat([past_v, v], 2)
        torch_npu.npu_fused_infer_attention_score(q, past_k, past_v, **KEYWORDS)  # prompt and decode


def test_a_call_site_that_later_decodes_confirms_its_unmasked_prompt(emulated):
    running, torch_npu = emulated(compare=False)
    concatenating_decoder(torch_npu, steps=1)
    assert codes(running) == {}  # one prompt alone: could be an encoder
    concatenating_decoder(torch_npu, steps=3)
    (finding,) = running.recorder.findings.values()
    assert (finding.code, finding.count, finding.line) == ("KVL507", 2, marked_line(THIS, "prompt and decode"))
    assert finding.message.endswith("decoder evidence: this call site also runs decode steps (one query token)")
