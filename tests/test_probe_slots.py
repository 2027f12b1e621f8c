"""KVL509 (a slot written in the step that the layer's attention does not read) and KVL510 (the attention
reads positions no write filled), on contiguous caches, paged caches and TND packed lengths; KVL505
keyed so that separate requests and threads never compare.

The engines are ``tests/probe_fixtures/serving.py`` on the emulated torch_npu (its kernels write the
caches, ``npu_scatter_pa_kv_cache`` and ATB's ``_npu_reshape_and_cache`` included).
"""

from __future__ import annotations

from functools import partial
from pathlib import Path

import pytest
import torch

from tests.probe_fixtures import serving
from tests.probe_fixtures.serving import BLOCK, NKV, NQ, D
from tests.probe_fixtures.harness import codes, emulated, in_threads, marked_line, probe  # noqa: F401

SERVING = Path(serving.__file__)
PATH = "tests/probe_fixtures/serving.py"
ENGINES = {"contiguous": serving.contiguous, "coordinates": serving.coordinates, "paged": serving.paged,
           "paged_atb": partial(serving.paged, atb=True), "packed": serving.packed}
MARKS = {"paged_atb": "paged"}
"""Engine -> the name of its marked lines in serving.py, where it is not the engine's own."""


def marked(engine: str, what: str) -> int:
    return marked_line(SERVING, f"{MARKS.get(engine, engine)} {what}")


def sites(running, code: str) -> set[tuple[str, int]]:
    return {(f.path, f.line) for f in running.recorder.findings.values() if f.code == code}


@pytest.mark.parametrize("engine", sorted(ENGINES))
def test_lengths_that_count_the_new_tokens_give_no_finding(engine, emulated):
    running, torch_npu = emulated(sample=None)
    ENGINES[engine](torch_npu)
    assert codes(running) == {}
    assert all(site.compared == site.calls for site in running.recorder.sites.values() if "attention" in site.op)


@pytest.mark.parametrize("engine", sorted(ENGINES))
def test_the_decode_off_by_one_is_kvl509_at_the_attention_call(engine, emulated):
    running, torch_npu = emulated(compare=False)
    ENGINES[engine](torch_npu, extra=-1)
    assert set(codes(running)) == {"KVL509"}
    assert sites(running, "KVL509") == {(PATH, marked(engine, "attention"))}
    (finding,) = running.recorder.findings.values()
    write_line = marked(engine, "write")
    assert f"{PATH}:{write_line})" in finding.message
    assert "not attended" in finding.message


@pytest.mark.parametrize("engine", sorted(ENGINES))
def test_reading_one_position_past_the_written_ones_is_kvl510(engine, emulated):
    running, torch_npu = emulated(compare=False)
    ENGINES[engine](torch_npu, extra=1)
    assert set(codes(running)) == {"KVL510"}
    assert sites(running, "KVL510") == {(PATH, marked(engine, "attention"))}
    (finding,) = running.recorder.findings.values()
    assert "rows are all zero" in finding.message and "never written since the cache was allocated" in finding.message


def test_messages_name_the_request_position_and_lengths(emulated):
    running, torch_npu = emulated(compare=False)
    serving.packed(torch_npu, extra=-1)
    (finding,) = running.recorder.findings.values()
    assert finding.message.startswith("batch 1's token was written at position 8 in this step "
                                      "(npu_scatter_pa_kv_cache at tests/probe_fixtures/serving.py:")
    assert "reads only positions 0-7 of batch 1 (actual_seq_kvlen=[4, 8])" in finding.message
    running.recorder.findings.clear()
    serving.packed(torch_npu, extra=1)
    (finding,) = running.recorder.findings.values()
    assert finding.message.startswith("batch 1 reads position 9 of its key cache, whose rows are all zero")
    assert "actual_seq_kvlen=[4, 10] counts tokens that are not in the cache" in finding.message


def test_requests_served_in_turn_with_their_own_caches_never_drift(emulated):
    running, torch_npu = emulated(strict=True, sample=None)
    serving.round_robin(torch_npu, requests=2)
    serving.round_robin(torch_npu, requests=3)
    assert codes(running) == {}


def test_threads_with_their_own_caches_never_drift(emulated):
    running, torch_npu = emulated(strict=True, compare=False)

    def serve() -> None:
        serving.round_robin(torch_npu, requests=1, steps=6)
        serving.contiguous(torch_npu, layers=3)

    assert in_threads(serve, 4) == [] and codes(running) == {}


def test_a_padded_batch_row_of_length_0_proves_nothing(emulated):
    """A decode batch padded to 3 rows (as for a captured graph): the padding row has KV length 0 and its
    token is written to a dummy block; only the real rows are judged."""
    running, torch_npu = emulated(compare=False)
    k_cache, v_cache = torch.zeros(6, 16, 2, 16), torch.zeros(6, 16, 2, 16)
    table = torch.tensor([[0, 1], [2, 3], [5, 5]], dtype=torch.int32)
    for cache in (k_cache, v_cache):
        cache[[0, 2], :4] = 1.0  # the real requests' first 4 tokens
    slots = torch.tensor([0 * 16 + 4, 2 * 16 + 4, 5 * 16])  # the padding row's token goes to the dummy block
    torch_npu.npu_scatter_pa_kv_cache(torch.ones(3, 2, 16), torch.ones(3, 2, 16), k_cache, v_cache, slots, cache_mode="Norm")
    torch_npu.npu_fused_infer_attention_score(
        torch.ones(3, 1, 64), k_cache.view(6, 16, 32), v_cache.view(6, 16, 32), block_table=table, block_size=16,
        actual_seq_lengths_kv=[5, 5, 0], num_heads=4, num_key_value_heads=2, scale=0.25)
    assert codes(running) == {}


def _decode_with_pairs_in_reverse_batch_order(torch_npu, extra: int) -> None:
    """A BSH cache written with ``npu_scatter_nd_update_`` whose ``(batch, position)`` pairs list batch 1
    before batch 0: the pairs say each token's request, so their order against the query's is irrelevant."""
    generator = torch.Generator().manual_seed(5)
    k_cache, v_cache = torch.zeros(2, 16, 32), torch.zeros(2, 16, 32)
    kv_lens = [3, 5]
    for cache in (k_cache, v_cache):
        cache[0, :3], cache[1, :5] = torch.randn(3, 32, generator=generator), torch.randn(5, 32, generator=generator)
    for _ in range(2):
        pairs = torch.tensor([[1, kv_lens[1]], [0, kv_lens[0]]])
        for cache in (k_cache, v_cache):
            torch_npu.npu_scatter_nd_update_(cache, pairs, torch.randn(2, 32, generator=generator))
        kv_lens = [n + 1 for n in kv_lens]
        torch_npu.npu_fused_infer_attention_score(
            torch.randn(2, 1, 64, generator=generator), k_cache, v_cache, num_heads=4, num_key_value_heads=2,
            input_layout="BSH", scale=0.25, actual_seq_lengths_kv=[n + extra for n in kv_lens])


def test_a_write_whose_token_order_differs_from_the_query_s_is_judged_by_its_addresses(emulated):
    running, torch_npu = emulated(compare=False)
    _decode_with_pairs_in_reverse_batch_order(torch_npu, extra=0)
    assert codes(running) == {}
    _decode_with_pairs_in_reverse_batch_order(torch_npu, extra=-1)
    assert set(codes(running)) == {"KVL509"}
    (finding,) = running.recorder.findings.values()
    assert finding.message.startswith("batch 1's token was written at position 5 in this step")
    assert "reads only positions 0-4 of batch 1 (actual_seq_lengths_kv=[3, 5])" in finding.message


def test_zero_keys_written_in_an_earlier_step_are_not_unwritten_rows(emulated):
    """cann-recipes' warm-up: dummy tokens write keys that are exactly zero, the next step reads them. KVL510
    asks for rows no followed write ever filled, not merely none of this step."""
    running, torch_npu = emulated(compare=False)
    serving.zero_keys_read_later(torch_npu)
    assert codes(running) == {}


def test_rows_written_where_the_probe_did_not_look_prove_nothing(emulated):
    """Past a site's sampled calls the probe no longer reads which rows its writes fill. Here the helper's
    first call (for another cache) used its one value-checked call, so its write of zero keys into the
    layer's cache goes unread: a zero row the probe did not see written may have been, and KVL510 stays
    silent. (Read as written by nobody, the rows at positions 2-3 were KVL510.)"""
    running, torch_npu = emulated(compare=False, value_first=1, value_every=0)

    def write(k, k_cache, v_cache, slots):
        torch_npu.npu_scatter_pa_kv_cache(k, k, k_cache, v_cache, slots, cache_mode="Norm")

    other = (torch.zeros(4, BLOCK, NKV, D), torch.zeros(4, BLOCK, NKV, D))
    k_cache, v_cache = torch.zeros(4, BLOCK, NKV, D), torch.zeros(4, BLOCK, NKV, D)
    write(torch.randn(2, NKV, D), *other, torch.tensor([16, 17]))
    torch_npu.npu_scatter_pa_kv_cache(torch.randn(2, NKV, D), torch.randn(2, NKV, D), k_cache, v_cache,
                                      torch.tensor([16, 17]), cache_mode="Norm")  # fmt: skip
    write(torch.zeros(2, NKV, D), k_cache, v_cache, torch.tensor([18, 19]))
    q = torch.randn(1, 1, NQ * D)
    torch_npu.npu_fused_infer_attention_score(
        q, k_cache.view(4, BLOCK, -1), v_cache.view(4, BLOCK, -1), block_table=torch.tensor([[1]], dtype=torch.int32),
        block_size=BLOCK, num_heads=NQ, num_key_value_heads=NKV, input_layout="BSH", scale=D**-0.5,
        actual_seq_lengths_kv=[4],
    )
    assert codes(running) == {}
