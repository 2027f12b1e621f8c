"""The probe's cache figures: KV bytes read per step, capacity in use, time and bandwidth, JSON, text, merge.

Hand-computed geometry used throughout: 2 sequences of 130 and 7 tokens, 2 KV heads, D = 32, fp16, so
one token is 2 * 32 * 2 = 128 bytes per tensor and 256 bytes for K and V; 137 tokens read
137 * 256 = 35072 bytes. Paged with block_size 128: ceil(130/128) + ceil(7/128) = 2 + 1 = 3 blocks.
"""

from __future__ import annotations

import json
import sys
from functools import cached_property

import pytest
import torch
from kvlint.runtime_probe import cache_usage, emulator
from kvlint.runtime_probe import probe as runtime_probe
from kvlint.runtime_probe.__main__ import main
from kvlint.runtime_probe.live_call import LiveCall
from kvlint.runtime_probe.report import summary

from tests.probe_fixtures import serving
from tests.probe_fixtures.harness import codes, in_threads, probe  # noqa: F401

NQ, NKV, D, BLOCK = 4, 2, 32, 128
LENGTHS = [130, 7]
TOKEN_BYTES = 2 * NKV * D * 2  # K and V rows of every KV head, fp16
PAGED_BYTES = 137 * TOKEN_BYTES  # 35072
STEP_KEYS = ["rank", "step", "phase", "calls", "kv_bytes_read", "tokens_in_use", "tokens_allocated",
             "blocks_in_use", "blocks_allocated", "seconds", "achieved_bytes_per_s", "floor_seconds"]


@pytest.fixture
def emulated(probe, monkeypatch):
    """``emulated(**settings)``: an active probe (no comparison) over the emulated torch_npu."""
    monkeypatch.delenv(cache_usage.BANDWIDTH_VARIABLE, raising=False)
    for variable in ("RANK", "LOCAL_RANK", "ASCEND_LAUNCH_BLOCKING"):
        monkeypatch.delenv(variable, raising=False)
    previous = sys.modules.pop("torch_npu", None)

    def start(**settings: object):
        running = probe(compare=False, **settings)
        return running, emulator.install()

    yield start
    runtime_probe.deactivate()
    sys.modules.pop("torch_npu", None)
    if previous is not None:
        sys.modules["torch_npu"] = previous


def paged_cache(blocks: int) -> torch.Tensor:
    """A [blocks, block_size, Nkv*D] fp16 cache (BSH)."""
    return torch.randn(blocks, BLOCK, NKV * D, generator=torch.Generator().manual_seed(0)).half()


def paged_decode(torch_npu, key: torch.Tensor, value: torch.Tensor, table: list[list[int]],
                 lengths: list[int] = LENGTHS) -> torch.Tensor:
    query = torch.randn(len(lengths), 1, NQ * D).half()
    out, _ = torch_npu.npu_fused_infer_attention_score(
        query, key, value, block_table=torch.tensor(table, dtype=torch.int32), block_size=BLOCK,
        actual_seq_lengths_kv=lengths, num_heads=NQ, num_key_value_heads=NKV, scale=D**-0.5,
        input_layout="BSH")
    return out


def steps(running: runtime_probe.Probe) -> list[dict[str, object]]:
    return running.report()["cache"]["steps"]


def test_a_paged_decode_call_reads_its_lengths_times_the_bytes_per_token(emulated):
    running, torch_npu = emulated()
    paged_decode(torch_npu, paged_cache(6), paged_cache(6), [[0, 1, 2], [3, 4, 5]])
    (step,) = steps(running)
    assert step == {**step, "step": 1, "phase": "decode", "calls": 1, "kv_bytes_read": PAGED_BYTES,
                    "tokens_in_use": 137, "tokens_allocated": 6 * BLOCK, "blocks_in_use": 3,
                    "blocks_allocated": 6}
    assert codes(running) == {}


def test_blocks_in_use_are_the_distinct_ids_within_the_lengths(emulated):
    running, torch_npu = emulated()
    cache = paged_cache(4)
    # block 0 holds a prefix both sequences share; -1 pads the second row beyond its 7 tokens
    paged_decode(torch_npu, cache, cache, [[0, 1], [0, -1]])
    (step,) = steps(running)
    assert (step["blocks_in_use"], step["blocks_allocated"]) == (2, 4)
    assert step["kv_bytes_read"] == 137 * TOKEN_BYTES // 2  # key and value are one tensor: read once


def test_ids_outside_the_cache_are_not_counted_as_blocks_in_use():
    """A malformed table (KVL504) that still ran on the device: only real blocks count."""
    table = torch.tensor([[0, 1], [5, -1]], dtype=torch.int32)
    assert cache_usage.distinct_blocks(table, [130, 200], BLOCK, num_blocks=4) == 2


@pytest.mark.parametrize(("lengths", "tokens"), [(LENGTHS, 137), (None, 2 * 160)])
def test_a_contiguous_call_reads_its_lengths_or_the_whole_key(lengths, tokens, emulated):
    running, torch_npu = emulated()
    key, value = (torch.randn(2, NKV, 160, D).half() for _ in range(2))
    torch_npu.npu_fused_infer_attention_score(
        torch.randn(2, NQ, 1, D).half(), key, value, actual_seq_lengths_kv=lengths, num_heads=NQ,
        num_key_value_heads=NKV, scale=D**-0.5, input_layout="BNSD")
    (step,) = steps(running)
    assert step == {**step, "phase": "decode", "kv_bytes_read": tokens * TOKEN_BYTES, "tokens_in_use": tokens,
                    "tokens_allocated": 320, "blocks_in_use": None, "blocks_allocated": None}
    assert tokens * TOKEN_BYTES == {137: 35072, 320: 81920}[tokens]


def test_reading_a_layers_cache_again_starts_the_next_step(emulated):
    running, torch_npu = emulated()
    layers = [(paged_cache(6), paged_cache(6)) for _ in range(2)]
    table = [[0, 1, 2], [3, 4, 5]]
    for grown in range(3):
        for key, value in layers:
            paged_decode(torch_npu, key, value, table, [n + grown for n in LENGTHS])
    figures = steps(running)
    grown_bytes = [2 * (PAGED_BYTES + 2 * grown * TOKEN_BYTES) for grown in range(3)]  # 2 layers, +1 token each
    assert [(s["step"], s["calls"], s["kv_bytes_read"]) for s in figures] == [
        (1, 2, grown_bytes[0]), (2, 2, grown_bytes[1]), (3, 2, grown_bytes[2])
    ]
    assert all((s["blocks_in_use"], s["blocks_allocated"]) == (6, 12) for s in figures)  # 3 of 6, two layers


def test_a_step_with_several_query_tokens_is_a_prefill_step(emulated):
    running, torch_npu = emulated()
    key, value = (torch.randn(2, NKV, 16, D).half() for _ in range(2))
    template = torch.ones(2048, 2048, dtype=torch.bool).triu(1)
    torch_npu.npu_fused_infer_attention_score(torch.randn(2, NQ, 16, D).half(), key, value, num_heads=NQ,
                                              num_key_value_heads=NKV, scale=D**-0.5, input_layout="BNSD",
                                              sparse_mode=3, atten_mask=template)
    assert [s["phase"] for s in steps(running)] == ["prefill"]


def test_the_block_table_is_read_from_the_device_once_per_call(emulated, monkeypatch):
    reads: list[int] = []
    original = LiveCall.__dict__["host_block_table"].func

    def counted(call: LiveCall) -> torch.Tensor:
        reads.append(1)
        return original(call)

    spy = cached_property(counted)
    spy.__set_name__(LiveCall, "host_block_table")
    monkeypatch.setattr(LiveCall, "host_block_table", spy)
    running, torch_npu = emulated()
    key = paged_cache(6)
    paged_decode(torch_npu, key, key, [[0, 1, 2], [3, 4, 5]])
    paged_decode(torch_npu, key, key, [[0, 1, 2], [3, 4, 5]])
    assert len(reads) == 2 and len(steps(running)) == 2


def test_the_report_has_a_cache_section_with_timings_bandwidth_and_floor(emulated, monkeypatch, tmp_path):
    monkeypatch.setenv(cache_usage.BANDWIDTH_VARIABLE, "1.6TB/s")
    running, torch_npu = emulated(report_path=tmp_path / "report.json")
    paged_decode(torch_npu, paged_cache(6), paged_cache(6), [[0, 1, 2], [3, 4, 5]])
    running.finish()
    report = json.loads((tmp_path / "report.json").read_text())
    assert list(report) == ["findings", "sites", "cache", "process", "complete", "interrupted"]
    cache = report["cache"]
    assert list(cache) == ["timing_source", "peak_bytes_per_s", "steps", "unmeasured_steps", "dropped_steps"]
    assert cache["timing_source"] == "emulator" and cache["peak_bytes_per_s"] == 1.6e12
    (step,) = cache["steps"]
    assert list(step) == STEP_KEYS
    assert step["rank"] is None
    assert step["seconds"] > 0 and step["achieved_bytes_per_s"] == pytest.approx(PAGED_BYTES / step["seconds"])
    assert step["floor_seconds"] == pytest.approx(35072 / 1.6e12)


def test_without_the_emulator_the_timings_are_the_devices(emulated, monkeypatch):
    running, torch_npu = emulated()
    paged_decode(torch_npu, paged_cache(6), paged_cache(6), [[0, 1, 2], [3, 4, 5]])
    monkeypatch.setattr(emulator, "is_installed", lambda: False)
    assert running.report()["cache"]["timing_source"] == "device"


def test_a_malformed_bandwidth_is_announced_and_ignored(capsys):
    assert cache_usage.peak_bandwidth({cache_usage.BANDWIDTH_VARIABLE: "fast"}) is None
    assert cache_usage.BANDWIDTH_VARIABLE in capsys.readouterr().err
    assert cache_usage.peak_bandwidth({cache_usage.BANDWIDTH_VARIABLE: "2 GB/s"}) == 2 * 10**9


def test_a_failure_while_measuring_becomes_kvl599_and_the_call_returns(emulated, monkeypatch):
    def broken(call, memo):
        raise RuntimeError("boom")

    monkeypatch.setattr(cache_usage, "call_reads", broken)
    running, torch_npu = emulated()
    out = paged_decode(torch_npu, paged_cache(6), paged_cache(6), [[0, 1, 2], [3, 4, 5]])
    assert out.shape == (2, 1, NQ * D)
    (finding,) = running.recorder.findings.values()
    assert finding.code == "KVL599" and "measuring the cache reads failed: RuntimeError: boom" in finding.message


def _step(**figures: object) -> dict[str, object]:
    base = dict(rank=None, step=1, phase="decode", calls=2, kv_bytes_read=PAGED_BYTES, tokens_in_use=137,
                tokens_allocated=768, blocks_in_use=3, blocks_allocated=6, seconds=0.5,
                achieved_bytes_per_s=PAGED_BYTES / 0.5, floor_seconds=None)
    return {**base, **figures}


def _report(steps: list[dict[str, object]], source: str = "emulator") -> dict[str, object]:
    return {"findings": [], "sites": [dict(op="op", path="run.py", line=3, calls=2, validated=2, compared=0,
                                           max_abs_err=None, max_rel_err=None)],
            "cache": {"timing_source": source, "peak_bytes_per_s": None, "steps": steps}}


def test_the_text_summary_has_a_cache_section():
    text = summary(_report([_step(), _step(step=2, phase="prefill", seconds=None, achieved_bytes_per_s=None)]))
    lines = text.splitlines()
    start = lines.index("KV cache reads per step (emulator timings; no floor: KVLINT_PROBE_BANDWIDTH unset)")
    assert lines[start - 2:start] == ["1 call site(s), 0 finding(s)", "probe time: 0.0 us per call over 2 call(s)"]
    assert lines[start + 1].split("  ")[0] == "step"
    assert lines[start + 2].split() == ["1", "decode", "2", "35072", "137/768", "3/6", "0.5", "7.01e+04", "-"]
    assert lines[start + 3].split() == ["2", "prefill", "2", "35072", "137/768", "3/6", "-", "-", "-"]
    assert lines[start + 4:] == ["decode: 1 step(s), 35072 bytes read in 0.5 s = 7.01e+04 B/s",
                                 "prefill: 1 step(s), 35072 bytes read"]


def test_a_long_run_shows_both_ends_and_untimed_steps_say_why():
    many = [_step(step=n, seconds=None, achieved_bytes_per_s=None) for n in range(1, 21)]
    lines = summary(_report(many, source="device")).splitlines()
    start = next(n for n, line in enumerate(lines) if line.startswith("KV cache reads per step"))
    assert lines[start].startswith("KV cache reads per step (untimed: asynchronous device launches; ")
    rows = lines[start + 2 : start + 13]
    assert [row.split()[0] for row in rows] == ["1", "2", "3", "4", "5", "(10", "16", "17", "18", "19", "20"]
    assert rows[5] == "(10 more steps in the JSON report)"
    assert lines[start + 13:] == [f"decode: 20 step(s), {20 * PAGED_BYTES} bytes read"]


def test_merge_concatenates_the_steps_of_each_rank(tmp_path, capsys):
    rank0 = _report([_step(rank=0), _step(rank=0, step=2)])
    rank1 = _report([_step(rank=1, kv_bytes_read=1000)])
    unranked = _report([_step()], source="device")
    old = {"findings": [], "sites": rank0["sites"]}  # written before the cache section existed
    paths = []
    for n, report in enumerate((rank0, rank1, unranked, old)):
        paths.append(tmp_path / f"r{n}.json")
        paths[-1].write_text(json.dumps(report))
    assert main(["--merge", *map(str, paths), "-o", str(tmp_path / "merged.json")]) == 0
    merged = json.loads((tmp_path / "merged.json").read_text())
    assert sum(site["calls"] for site in merged["sites"]) == 4 * 2
    cache = merged["cache"]
    assert cache["timing_source"] == "mixed"
    assert [(s["rank"], s["step"], s["kv_bytes_read"]) for s in cache["steps"]] == [
        (0, 1, PAGED_BYTES), (0, 2, PAGED_BYTES), (1, 1, 1000), (2, 1, PAGED_BYTES)  # unranked: file position
    ]
    out = capsys.readouterr().out
    assert "rank  step  phase" in out and "decode: 4 step(s), 106216 bytes read in 2 s" in out


def test_a_prefill_over_fresh_keys_is_its_own_step_before_the_decode_steps(emulated):
    """Each layer writes its new tokens into its paged cache (one call site, as engines do); the prompt's
    attention reads the freshly projected K/V, each decode step's the cache (another call site). The
    prefill must not merge into the first decode step."""
    running, torch_npu = emulated()
    caches = [paged_cache(6).zero_() for _ in range(2)]
    table = [[0, 1, 2], [3, 4, 5]]
    template = torch.ones(2048, 2048, dtype=torch.bool).triu(1)
    prompt = 7

    def write(cache: torch.Tensor, start: int, tokens: torch.Tensor) -> None:
        slots = torch.tensor([row[0] * BLOCK + start + t for row in table for t in range(tokens.shape[1])])
        torch_npu.npu_scatter_nd_update_(cache.view(-1, NKV * D), slots.reshape(-1, 1), tokens.reshape(-1, NKV * D))

    for cache in caches:
        fresh = torch.randn(2, prompt, NKV * D).half()
        write(cache, 0, fresh)
        torch_npu.npu_fused_infer_attention_score(
            torch.randn(2, prompt, NQ * D).half(), fresh, fresh, num_heads=NQ, num_key_value_heads=NKV,
            scale=D**-0.5, input_layout="BSH", sparse_mode=3, atten_mask=template)
    for grown in range(2):
        for cache in caches:
            write(cache, prompt + grown, torch.randn(2, 1, NKV * D).half())
            paged_decode(torch_npu, cache, cache, table, [prompt + grown + 1] * 2)
    assert [(s["phase"], s["calls"]) for s in steps(running)] == [("prefill", 2), ("decode", 2), ("decode", 2)]
    assert codes(running) == {}


def test_a_warm_up_call_that_never_comes_back_does_not_hold_the_step_open(emulated):
    running, torch_npu = emulated()
    paged_decode(torch_npu, paged_cache(6), paged_cache(6), [[0, 1, 2], [3, 4, 5]])  # a dummy cache, once
    layers = [paged_cache(6) for _ in range(3)]
    for _ in range(3):
        for key in layers:
            paged_decode(torch_npu, key, key, [[0, 1, 2], [3, 4, 5]])
    assert [s["calls"] for s in steps(running)] == [4, 3, 3]


def test_steps_beyond_the_value_checked_calls_are_counted_as_unmeasured(emulated, capsys):
    running, torch_npu = emulated(value_first=4, value_every=0)
    layers = [paged_cache(6) for _ in range(2)]
    for _ in range(5):
        for key in layers:
            paged_decode(torch_npu, key, key, [[0, 1, 2], [3, 4, 5]])
    cache = running.report()["cache"]
    assert ([s["step"] for s in cache["steps"]], cache["unmeasured_steps"]) == ([1, 2], 3)
    assert ("3 later step(s) not measured: their calls were not all value-checked (KVLINT_PROBE_VALUE_FIRST=all "
            "measures every step)") in summary(running.report())


def test_threads_serving_their_own_models_count_their_own_steps(emulated):
    """Two threads, each a 2-layer model run for 3 steps (a prompt, then 2 decode steps) on its own caches,
    interleaved: every step holds one thread's 2 layers, never a mix of both threads' calls."""
    running, torch_npu = emulated()
    assert in_threads(lambda: serving.contiguous(torch_npu, layers=2, steps=3), 2) == []
    figures = steps(running)
    expected = [("prefill", 2), ("decode", 2), ("decode", 2)] * 2
    assert sorted((s["phase"], s["calls"]) for s in figures) == sorted(expected)
    assert codes(running) == {}
