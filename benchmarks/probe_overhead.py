"""Per-call cost of the runtime probe on emulated FIA calls (issue 8 item 4).

Two shapes: a paged decode (B=8, 32 query / 8 KV heads, D=128, 4K cached tokens in 128-token blocks) and
a causal prefill (B=1, 512 tokens, same heads). Each is timed unprobed, probed with validation only
(``KVLINT_PROBE=validate``) and probed with every call compared with the reference
(``KVLINT_PROBE=1 KVLINT_PROBE_SAMPLE=all``). Modes are interleaved within each run so machine load
affects them alike; the figure per mode is the median over runs of the mean time per call.

On CPU the emulated operator itself takes milliseconds to seconds, so that ratio understates the
overhead relative to a device call. The probe's own cost is therefore also measured with the operator
replaced by a no-op returning the same output ("probe cost" rows): that added time per call is the
number to set against a device operator's latency, and unprobed time plus that cost gives a validation
ratio that load changes between the timed blocks cannot distort. Run:
``python benchmarks/probe_overhead.py [--runs 5 --calls 3]``.
"""

from __future__ import annotations

import argparse
import io
import statistics
import time
from collections.abc import Callable

import torch

from kvlint.catalogue import FIA_V1
from kvlint.runtime_probe import emulator
from kvlint.runtime_probe import probe as runtime_probe
from kvlint.runtime_probe.config import Settings
from kvlint.runtime_probe.hooks import ProbedOp

HEADS, KV_HEADS, HEAD_DIM = 32, 8, 128
MODES: dict[str, Settings | None] = {
    "unprobed": None,
    "validate": Settings(compare=False),
    "compare every call": Settings(sample=None),
}


Case = tuple[tuple[object, ...], dict[str, object]]


def decode_case() -> Case:
    batch, kv_len, block_size = 8, 4096, 128
    blocks_per_row = kv_len // block_size
    query = torch.randn(batch, 1, HEADS * HEAD_DIM, dtype=torch.float16)
    cache = torch.randn(batch * blocks_per_row, block_size, KV_HEADS * HEAD_DIM, dtype=torch.float16)
    table = torch.randperm(batch * blocks_per_row, dtype=torch.int32).reshape(batch, blocks_per_row)
    keywords = dict(num_heads=HEADS, num_key_value_heads=KV_HEADS, scale=HEAD_DIM**-0.5, input_layout="BSH",
                    block_table=table, block_size=block_size, actual_seq_lengths_kv=[kv_len] * batch)
    return (query, cache, cache), keywords


def prefill_case() -> Case:
    tokens = 512
    query = torch.randn(1, HEADS, tokens, HEAD_DIM, dtype=torch.float16)
    key = torch.randn(1, KV_HEADS, tokens, HEAD_DIM, dtype=torch.float16)
    keywords = dict(num_heads=HEADS, num_key_value_heads=KV_HEADS, scale=HEAD_DIM**-0.5, input_layout="BNSD",
                    sparse_mode=3, atten_mask=torch.ones(2048, 2048, dtype=torch.bool).triu(1))
    return (query, key, key), keywords


def seconds_per_call(call: Callable[[], object], calls: int) -> float:
    call()  # warm-up (and, probed, the lazy imports of the first call)
    start = time.perf_counter()
    for _ in range(calls):
        call()
    return (time.perf_counter() - start) / calls


def timed(call: Callable[[], object], calls: int, settings: Settings | None) -> float:
    """Seconds per call, unprobed or under a probe with ``settings`` (which must find nothing)."""
    probe = None if settings is None else runtime_probe.activate(settings, stream=io.StringIO())
    try:
        return seconds_per_call(call, calls)
    finally:
        if probe is not None:
            runtime_probe.deactivate()
            assert not probe.recorder.findings, probe.recorder.as_json()["findings"]


def probe_cost(case: Case, output: object, calls: int) -> tuple[float, float]:
    """(seconds per call of a no-op operator returning ``output``, the same under a validating probe)."""
    args, keywords = case

    def noop(*args: object, **keywords: object) -> object:
        return output

    bare = seconds_per_call(lambda: noop(*args, **keywords), calls)
    probe = runtime_probe.activate(Settings(compare=False), stream=io.StringIO())
    try:
        probed = ProbedOp(noop, FIA_V1, None, probe)
        return bare, seconds_per_call(lambda: probed(*args, **keywords), calls)
    finally:
        runtime_probe.deactivate()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--calls", type=int, default=3)
    options = parser.parse_args()
    torch.manual_seed(0)
    operator = emulator.install().npu_fused_infer_attention_score
    print(f"{'shape':8} {'mode':28} {'ms/call':>10} {'ratio':>7} {'+us/call':>9}")
    for shape, make_case in (("decode", decode_case), ("prefill", prefill_case)):
        args, keywords = case = make_case()

        def call() -> object:
            return operator(*args, **keywords)

        costs = [probe_cost(case, call(), 200) for _ in range(options.runs)]
        bare, probed = (statistics.median(times) for times in zip(*costs))
        print(f"{shape:8} {'probe cost (no-op operator)':28} {probed * 1e3:10.3f} {'':>7} {(probed - bare) * 1e6:9.0f}")
        samples: dict[str, list[float]] = {mode: [] for mode in MODES}
        for _ in range(options.runs):
            for mode, settings in MODES.items():
                samples[mode].append(timed(call, options.calls, settings))
        base = statistics.median(samples["unprobed"])
        for mode in MODES:
            median = statistics.median(samples[mode])
            print(f"{shape:8} {mode:28} {median * 1e3:10.3f} {median / base:7.3f} {(median - base) * 1e6:9.0f}")
        derived = base + probed - bare  # immune to load changes between the timed blocks
        print(f"{shape:8} {'validate (unprobed + cost)':28} {derived * 1e3:10.3f} {derived / base:7.3f} "
              f"{(probed - bare) * 1e6:9.0f}")


if __name__ == "__main__":
    main()
