"""Per-call cost of the runtime probe on emulated FIA calls (issue 8 item 4).

Two shapes: a paged decode (B=8, 32 query / 8 KV heads, D=128, 4K cached tokens in 128-token blocks) and
a causal prefill (B=1, 512 tokens, same heads). Each is timed unprobed, probed with validation only
(``KVLINT_PROBE=validate``) and probed with every call compared with the reference
(``KVLINT_PROBE=1 KVLINT_PROBE_SAMPLE=all``). Modes are interleaved within each run so machine load
affects them alike; the figure per mode is the median over runs of the mean time per call.

On CPU the emulated operator itself takes milliseconds to seconds, so that ratio understates the
overhead relative to a device call. The probe's own cost is therefore also measured with the operator
replaced by a no-op returning the same output ("probe cost" rows): that added time per call is the
number to set against a device operator's latency, and unprobed time plus that cost gives ratios that
load changes between the timed blocks cannot distort ("unprobed + cost" rows).

The per-call cost on a repeated signature (issue 15, target <= 25 us) is measured the same way, on the
no-op operator with the same arguments every call, after the site's first (fully checked) call, in three
settings: value checks never sampled (the cost of every call that is not sampled), the default sampling
(first 256 calls of the site, then every 1024th: the cost averaged over 4096 calls past the first 256), and
every call value-checked (the cost of a sampled call). Both clocks are printed: wall time, and this
process's CPU time, which other processes on a shared machine disturb less. Run:
``python benchmarks/probe_overhead.py [--runs 5 --calls 3]``.
"""

from __future__ import annotations

import argparse
import io
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
from kvlint.runtime_probe import emulator
from kvlint.runtime_probe import probe as runtime_probe
from kvlint.runtime_probe.config import Settings
from kvlint.runtime_probe.hooks import ProbedOp

from kvlint.catalogue.operators import FIA_V1

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness  # noqa: E402

HEADS, KV_HEADS, HEAD_DIM = 32, 8, 128
VALIDATE = Settings(compare=False)
COMPARE = Settings(sample=None)
MODES: dict[str, Settings | None] = {"unprobed": None, "validate": VALIDATE, "compare every call": COMPARE}


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
    """Seconds per call, unprobed or under a probe with ``settings`` (which must see every call, validate
    it and find nothing)."""
    probe = None if settings is None else runtime_probe.activate(settings, stream=io.StringIO())
    try:
        return seconds_per_call(call, calls)
    finally:
        if probe is not None:
            runtime_probe.deactivate()
            (site,) = probe.recorder.sites.values()
            assert site.validated == calls + 1 and not probe.recorder.findings, probe.recorder.as_json()


def probe_cost(case: Case, output: object, calls: int, settings: Settings) -> float:
    """Seconds the probe adds to one call: a no-op operator returning ``output``, probed minus bare."""
    args, keywords = case

    def noop(*args: object, **keywords: object) -> object:
        return output

    bare = seconds_per_call(lambda: noop(*args, **keywords), calls)
    probe = runtime_probe.activate(settings, stream=io.StringIO())
    try:
        probed = ProbedOp(noop, FIA_V1, probe)
        return seconds_per_call(lambda: probed(*args, **keywords), calls) - bare
    finally:
        runtime_probe.deactivate()


REPEATED: dict[str, Settings] = {
    "repeated signature, not sampled": Settings(compare=False, value_first=1, value_every=0),
    "repeated signature, default sampling": Settings(compare=False),
    "every call value-checked": Settings(compare=False, value_first=None),
}


def _clocks(call: Callable[[], object], calls: int) -> tuple[float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(calls):
        call()
    return (time.perf_counter() - wall) / calls, (time.process_time() - cpu) / calls


def repeated_cost(case: Case, output: object, settings: Settings, calls: int, warm_up: int) -> tuple[float, float]:
    """(wall, CPU) seconds the probe adds to a call whose signature the site has seen, after ``warm_up``
    calls: the no-op operator probed minus bare, same arguments every call."""
    args, keywords = case

    def noop(*args: object, **keywords: object) -> object:
        return output

    probe = runtime_probe.activate(settings, stream=io.StringIO())
    try:
        probed = ProbedOp(noop, FIA_V1, probe)

        def call() -> object:  # one call site for the warm-up and the timed calls
            return probed(*args, **keywords)

        _clocks(call, warm_up)
        bare = _clocks(lambda: noop(*args, **keywords), calls)
        timed = _clocks(call, calls)
        (site,) = probe.recorder.sites.values()
        assert site.validated == site.calls and not probe.recorder.findings, probe.recorder.as_json()
        return timed[0] - bare[0], timed[1] - bare[1]
    finally:
        runtime_probe.deactivate()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--calls", type=int, default=3)
    parser.add_argument("--update-results", action="store_true", help="write the table into RESULTS.md")
    options = parser.parse_args()
    table: list[str] = []

    def emit(line: str) -> None:
        """Print a row of the table and keep it for RESULTS.md."""
        table.append(line)
        print(line, flush=True)

    torch.manual_seed(0)
    torch_npu = emulator.install()
    emit(f"{'shape':8} {'mode':36} {'ms/call':>10} {'ratio':>7} {'+us/call':>9}")
    emit(f"{'':8} {'(probe cost rows: wall us added per call, and CPU us in parentheses)':36}")
    for shape, make_case in (("decode", decode_case), ("prefill", prefill_case)):
        args, keywords = case = make_case()

        def call() -> object:  # looked up per call, as user code does: the probe replaces the attribute
            return torch_npu.npu_fused_infer_attention_score(*args, **keywords)

        output = call()
        for label, settings in REPEATED.items():
            calls = 4096 if settings.value_every else 1000 if settings.value_first is None else 5000
            costs = [repeated_cost(case, output, settings, calls, warm_up=256) for _ in range(options.runs)]
            wall, cpu = (statistics.median(c[i] for c in costs) for i in (0, 1))
            emit(f"{shape:8} {'probe cost: ' + label:36} {'':>10} {'':>7} {wall * 1e6:9.1f}  (CPU {cpu * 1e6:.1f})")
        validation = statistics.median(probe_cost(case, output, 200, VALIDATE) for _ in range(options.runs))
        comparison = statistics.median(
            probe_cost(case, output, options.calls, COMPARE) for _ in range(options.runs)
        )
        emit(f"{shape:8} {'probe cost: validate':36} {'':>10} {'':>7} {validation * 1e6:9.0f}")
        emit(f"{shape:8} {'probe cost: compare':36} {'':>10} {'':>7} {comparison * 1e6:9.0f}")
        samples: dict[str, list[float]] = {mode: [] for mode in MODES}
        for _ in range(options.runs):
            for mode, settings in MODES.items():
                samples[mode].append(timed(call, options.calls, settings))
        base = statistics.median(samples["unprobed"])
        for mode in MODES:
            median = statistics.median(samples[mode])
            emit(f"{shape:8} {mode:36} {median * 1e3:10.3f} {median / base:7.3f} {(median - base) * 1e6:9.0f}")
        for mode, cost in (("validate", validation), ("compare every call", comparison)):
            emit(f"{shape:8} {mode + ' (unprobed + cost)':36} {(base + cost) * 1e3:10.3f} {(base + cost) / base:7.3f} "
                  f"{cost * 1e6:9.0f}")

    if options.update_results:
        harness.update_results("probe_overhead", "\n".join([
            "### Runtime probe overhead (`benchmarks/probe_overhead.py`)", "",
            f"Command: `python benchmarks/probe_overhead.py --runs {options.runs} --calls {options.calls}`. "
            f"Machine: {harness.machine()}", "", "```text", *table, "```"]))

if __name__ == "__main__":
    main()
