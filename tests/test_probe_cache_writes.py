"""KVL505 (cache writes drifting across the layers of a step) and KVL508 (duplicate slots in one write)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.probe_fixtures import standin as standin_ops
from tests.probe_fixtures import toy_model
from tests.probe_fixtures.harness import codes, emulated, marked_line, probe, standin  # noqa: F401

TOY_MODEL = Path(toy_model.__file__)


@pytest.mark.parametrize("in_place", [True, False])
def test_a_model_that_advances_kv_len_once_per_step_has_no_drift(in_place, probe, standin):
    running = probe(compare=False)
    toy_model.generate(toy_model.Model(standin("good"), in_place=in_place))
    assert codes(running) == {}
    writes = [s for s in running.recorder.sites.values() if s.op.startswith("scatter_update")]
    assert sum(site.validated for site in writes) == 2 * 3 * 4  # k and v, 3 layers, 4 steps


@pytest.mark.parametrize(("in_place", "suffix"), [(True, ""), (False, ", out of place")])
def test_a_model_that_advances_kv_len_inside_a_layer_is_reported_at_its_first_drifting_layer(
    in_place, suffix, probe, standin
):
    running = probe(compare=False)
    toy_model.generate(toy_model.Model(standin("good"), advance_inside=True, in_place=in_place))
    drift = {f.line: f for f in running.recorder.findings.values() if f.code == "KVL505"}
    assert set(drift) == {marked_line(TOY_MODEL, f"k write{suffix}"), marked_line(TOY_MODEL, f"v write{suffix}")}
    assert {f.path for f in drift.values()} == {"tests/probe_fixtures/toy_model.py"}
    first = drift[marked_line(TOY_MODEL, f"k write{suffix}")]
    assert first.message.startswith("layer 1 of this step (call 2 here)")
    assert "[3, 3]" in first.message and "[0, 0]" in first.message


def test_one_layer_models_and_new_steps_do_not_drift(probe, standin):
    running = probe(compare=False)
    toy_model.generate(toy_model.Model(standin("good"), layers=1, advance_inside=True), decode_steps=5)
    assert codes(running) == {}


@pytest.mark.parametrize("advance_inside", [False, True])
def test_paged_slot_writes_drift_when_the_slots_advance_between_layers(advance_inside, emulated):
    """Three layers decode two sequences in blocks 0 and 1; the runner's lengths are right, but with the
    slots advanced per layer, layers 1 and 2 write past what they read and read what nobody wrote."""
    running, torch_npu = emulated({"npu_scatter_pa_kv_cache": standin_ops.npu_scatter_pa_kv_cache}, compare=False)
    caches = [torch.zeros(4, 16, 2, 16) for _ in range(3)]
    table = torch.tensor([[0, 2], [1, 3]], dtype=torch.int32)
    for cache in caches:  # a prompt of 5 tokens per sequence, written before
        cache[:2, :5] = 1.0
    kv_len = 5
    for _ in range(2):
        for layer, cache in enumerate(caches):
            slots = torch.tensor([kv_len, 16 + kv_len]) + (layer if advance_inside else 0)
            torch_npu.npu_scatter_pa_kv_cache(torch.ones(2, 2, 16), torch.ones(2, 2, 16), cache, cache.clone(), slots, cache_mode="Norm")  # noqa: E501  # slot write
            torch_npu.npu_fused_infer_attention_score(
                torch.ones(2, 1, 64), cache.view(4, 16, 32), cache.view(4, 16, 32), block_table=table,
                block_size=16, actual_seq_lengths_kv=[kv_len + 1] * 2, num_heads=4, num_key_value_heads=2,
                scale=0.25)
        kv_len += 1
    if not advance_inside:
        assert codes(running) == {}
        return
    drift = [f for f in running.recorder.findings.values() if f.code == "KVL505"]
    assert [(f.line, f.count) for f in drift] == [(marked_line(Path(__file__), "slot write"), 4)]
    assert drift[0].message.startswith("layer 1 of this step (call 2 here) writes slot_mapping [6, 22] but the "
                                       "step's first layer wrote [5, 21]")
    assert set(codes(running)) == {"KVL505", "KVL509", "KVL510"}


def test_duplicate_scatter_nd_indices_are_reported(probe, standin):
    running = probe()
    torch_npu = standin("good")
    cache = torch.zeros(4, 8, 16)
    torch_npu.npu_scatter_nd_update_(cache, torch.tensor([[0, 1], [2, 3]]), torch.ones(2, 16))
    assert codes(running) == {}
    torch_npu.npu_scatter_nd_update_(cache, torch.tensor([[0, 1], [2, 3], [0, 1]]), torch.randn(3, 16))
    assert codes(running) == {}  # nothing has read the slot yet
    (finding,) = running.report()["findings"]
    assert finding["code"] == "KVL508" and finding["severity"] == "info"
    assert "([0, 1] appears 2 times) with different values" in finding["message"]
    assert "no attention call read the slot afterwards" in finding["message"]


def test_dummy_tokens_writing_the_same_row_twice_are_not_duplicates(probe, standin):
    """A warm-up or padded batch: the dummy requests' tokens all land in the reserved block 0, slot 0, with
    the same key and value up to rounding (cann-recipes' null block, where two identical dummy prompts in one
    batch differ by a few float32 ulps). Whichever write lands, the row is the same."""
    running = probe()
    torch_npu = standin("good")
    cache = torch.zeros(4 * 16, 2, 16)
    keys = torch.randn(4, 2, 16)
    keys[3] = keys[2] + 4e-6
    torch_npu.npu_scatter_nd_update_(cache, torch.tensor([[17], [33], [0], [0]]), keys)
    assert codes(running) == {}
    paged = torch.zeros(4, 16, 2, 16)
    torch_npu._npu_reshape_and_cache(keys, keys.clone(), paged, paged.clone(),
                                     torch.tensor([17, 33, 0, 0], dtype=torch.int32))  # fmt: skip
    assert codes(running) == {}


def test_padding_slots_are_not_duplicates(probe, standin):
    running = probe()
    torch_npu = standin("good")
    cache = torch.zeros(4, 16, 2, 16)
    torch_npu.npu_scatter_pa_kv_cache(torch.ones(4, 2, 16), torch.ones(4, 2, 16), cache, cache.clone(),
                                      torch.tensor([3, -1, -1, 4]), cache_mode="Norm")
    assert codes(running) == {}


def test_a_slot_repeated_in_atb_reshape_and_cache_is_reported(probe, standin):
    running = probe()
    torch_npu = standin("good")
    cache = torch.zeros(4, 16, 2, 16)
    rows = torch.randn(3, 2, 16)
    torch_npu._npu_reshape_and_cache(rows, rows, cache, cache.clone(), torch.tensor([3, -1, 4], dtype=torch.int32))
    assert codes(running) == {}
    torch_npu._npu_reshape_and_cache(rows, rows, cache, cache.clone(), torch.tensor([3, 7, 3], dtype=torch.int32))
    (finding,) = running.report()["findings"]
    assert finding["code"] == "KVL508" and finding["message"].startswith("slot_indices repeats a slot (3 appears 2 times)")


def test_a_writer_that_computes_its_rows_is_judged_by_its_slots_alone(emulated):
    """npu_kv_rmsnorm_rope_cache_v2 writes RMSNorm and RoPE of ``kv``, not a copy of an argument: tokens with
    equal ``cos``/``sin`` rows (one position) still write different rows into the slot they share. (Here
    only ``cos`` and ``sin`` have one row per token, ``[B * S, ...]``; ``kv`` is ``[B, 1, S, ...]``.)"""
    running, torch_npu = emulated(compare=False)
    kv = torch.randn(1, 1, 2, 512 + 64, dtype=torch.bfloat16)
    gamma = torch.ones(512, dtype=torch.bfloat16)
    cos = torch.randn(1, 1, 1, 64, dtype=torch.bfloat16).expand(2, 1, 1, 64).contiguous()
    sin = torch.randn(1, 1, 1, 64, dtype=torch.bfloat16).expand(2, 1, 1, 64).contiguous()
    rope_cache, nope_cache = torch.zeros(4, 16, 1, 64, dtype=torch.bfloat16), torch.zeros(4, 16, 1, 512, dtype=torch.bfloat16)
    torch_npu.npu_kv_rmsnorm_rope_cache_v2(kv, gamma, cos, sin, torch.tensor([16, 16]), rope_cache, nope_cache,
                                           cache_mode="PA")  # fmt: skip
    assert [f["code"] for f in running.report()["findings"]] == ["KVL508"]


def _warm_up_then_serve(torch_npu, read_block: int, length: int = 5) -> None:
    """A serving engine's warm-up: four dummy requests of random tokens, all mapped to the pool's reserved
    block 0 (slot 0), written in one call, then a request of 5 tokens in block 1 and the decode attention
    over the block-table row ``[read_block]`` up to ``length``."""
    key_cache, value_cache = torch.zeros(4, 16, 2, 16), torch.zeros(4, 16, 2, 16)
    dummies = torch.randn(4, 2, 16)
    torch_npu._npu_reshape_and_cache(dummies, dummies.clone(), key_cache, value_cache, torch.zeros(4, dtype=torch.int32))  # noqa: E501  # warm-up write
    prompt = torch.randn(5, 2, 16)
    torch_npu._npu_reshape_and_cache(prompt, prompt.clone(), key_cache, value_cache, torch.arange(16, 21, dtype=torch.int32))  # noqa: E501
    table = torch.tensor([[read_block]], dtype=torch.int32)
    keywords = {"block_size": 16, "actual_seq_lengths_kv": [length], "num_heads": 4, "num_key_value_heads": 2, "scale": 0.25}
    torch_npu.npu_fused_infer_attention_score(torch.randn(1, 1, 64), key_cache.view(4, 16, 32), value_cache.view(4, 16, 32), block_table=table, **keywords)  # noqa: E501  # attention read


def test_a_warm_up_batch_sharing_the_null_block_is_not_an_error_when_nothing_reads_it(emulated):
    """The dummy requests' rows differ (random token ids), so slot 0 is undefined; nothing reads block 0."""
    running, torch_npu = emulated()
    _warm_up_then_serve(torch_npu, read_block=1)
    assert codes(running) == {}
    (finding,) = running.report()["findings"]
    assert (finding["code"], finding["severity"], finding["line"]) == (
        "KVL508", "info", marked_line(Path(__file__), "warm-up write"))
    assert finding["message"].startswith("slot_indices repeats a slot (0 appears 4 times) with different values")
    assert "no attention call read the slot afterwards, so nothing is known to have used the undefined row" in (
        finding["message"])


def test_a_repeated_slot_that_an_attention_call_reads_is_an_error_at_the_write(emulated):
    running, torch_npu = emulated()
    _warm_up_then_serve(torch_npu, read_block=0, length=1)
    assert codes(running) == {"KVL508": 1}
    finding = running.recorder.findings[("_npu_reshape_and_cache", "tests/test_probe_cache_writes.py",
                                         marked_line(Path(__file__), "warm-up write"), "KVL508")]
    assert finding.severity == "error"
    assert (f"npu_fused_infer_attention_score at tests/test_probe_cache_writes.py:"
            f"{marked_line(Path(__file__), 'attention read')} reads that slot (batch 0, position 0 of its key "
            "cache)") in finding.message
    assert [f["severity"] for f in running.report()["findings"] if f["code"] == "KVL508"] == ["error"]


def test_a_repeated_slot_written_again_before_the_read_is_defined(emulated):
    running, torch_npu = emulated()
    key_cache, value_cache = torch.zeros(4, 16, 2, 16), torch.zeros(4, 16, 2, 16)
    dummies = torch.randn(2, 2, 16)
    torch_npu._npu_reshape_and_cache(dummies, dummies.clone(), key_cache, value_cache, torch.tensor([0, 0], dtype=torch.int32))  # noqa: E501
    one = torch.randn(1, 2, 16)
    torch_npu._npu_reshape_and_cache(one, one.clone(), key_cache, value_cache, torch.tensor([0], dtype=torch.int32))
    torch_npu.npu_fused_infer_attention_score(
        torch.randn(1, 1, 64), key_cache.view(4, 16, 32), value_cache.view(4, 16, 32),
        block_table=torch.tensor([[0]], dtype=torch.int32), block_size=16, actual_seq_lengths_kv=[1],
        num_heads=4, num_key_value_heads=2, scale=0.25, input_layout="BSH")
    assert codes(running) == {}


def test_a_strict_probe_raises_at_the_attention_call_that_reads_a_repeated_slot(emulated):
    from kvlint.runtime_probe import ProbeError

    running, torch_npu = emulated(strict=True)
    with pytest.raises(ProbeError) as raised:
        _warm_up_then_serve(torch_npu, read_block=0, length=1)
    assert "KVL508 probe-duplicate-slots: slot_indices repeats a slot" in str(raised.value)
