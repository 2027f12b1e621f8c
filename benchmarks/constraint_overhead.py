"""Per-call cost of the documented-constraint checks (issue 18): the probe's KVL520-KVL537 checks and the
emulator's refusal, on the two shapes of ``probe_overhead.py`` (paged decode, causal prefill).

Each round binds a fresh live call (as the probe does per call) and times, interleaved: the argument checks
the probe had before (every check of ``SIGNATURE_CHECKS`` and ``VALUE_CHECKS`` outside KVL520-KVL537), the new ones, and the
emulator's ``constraints.refuse`` on the same arguments; for scale, the emulated operator call itself (the
refusal included) on the same arguments. The figure is the median over rounds of the mean microseconds per call,
and the refusal's share of the emulated call. Run:
``python benchmarks/constraint_overhead.py [--rounds 7 --calls 2000 --kernel-calls 1] [--update-results]`` (the
last writes the ``constraint_overhead`` section of benchmarks/RESULTS.md: command, date, load).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

from kvlint.runtime_probe import emulator
from kvlint.runtime_probe.checks import SIGNATURE_CHECKS, VALUE_CHECKS
from kvlint.runtime_probe.live_call import LiveCall, bind, is_concrete
from kvlint.runtime_probe.reference import constraints

from kvlint.catalogue.operators import OPERATORS

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness  # noqa: E402
from probe_overhead import decode_case, prefill_case  # noqa: E402

OP = OPERATORS["npu_fused_infer_attention_score"]
ARGUMENT_CHECKS = {**SIGNATURE_CHECKS, **VALUE_CHECKS}
NEW = {code for code in ARGUMENT_CHECKS if "KVL520" <= code <= "KVL537"}


def per_call(run: Callable[[], object], calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        run()
    return (time.perf_counter() - start) / calls * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--kernel-calls", type=int, default=1, help="emulated operator calls per round")
    parser.add_argument("--update-results", action="store_true", help="write the section of benchmarks/RESULTS.md")
    options = parser.parse_args()
    machine = harness.machine()  # the load before the run
    operator = getattr(emulator.install(), OP.name)
    table: list[str] = []

    def show(line: str) -> None:
        print(line, flush=True)
        table.append(line)

    show(f"{'shape':8} {'what':44} {'us/call':>8}")
    for shape, make_case in (("decode", decode_case), ("prefill", prefill_case)):
        args, keywords = make_case()
        bound = bind(OP, args, keywords)
        assert bound is not None

        def checks(codes: set[str]) -> Callable[[], object]:
            def run() -> object:
                call = LiveCall(OP, bound, is_concrete(list(bound.values())))
                return [ARGUMENT_CHECKS[code](call) for code in codes]

            return run

        measured: dict[str, Callable[[], object]] = {
            "argument checks before issue 18 (KVL1xx-KVL508)": checks(set(ARGUMENT_CHECKS) - NEW),
            "constraint checks KVL520-KVL537": checks(NEW),
            "emulator refusal (constraints.refuse)": lambda: constraints.refuse(OP.name, bound),
        }
        kernel = "emulated operator call (refusal included)"
        samples: dict[str, list[float]] = {what: [] for what in (*measured, kernel)}
        for _ in range(options.rounds):
            for what, run in measured.items():
                samples[what].append(per_call(run, options.calls))
            samples[kernel].append(per_call(lambda: operator(*args, **keywords), options.kernel_calls))
        assert not any(measured["constraint checks KVL520-KVL537"]()), "the benchmark calls must be valid"
        medians = {what: statistics.median(values) for what, values in samples.items()}
        for what, value in medians.items():
            show(f"{shape:8} {what:44} {value:8.1f}")
        share = medians["emulator refusal (constraints.refuse)"] / medians[kernel]
        show(f"{shape:8} {'refusal / emulated call':44} {share:8.1e}")
    if options.update_results:
        command = (f"python benchmarks/constraint_overhead.py --rounds {options.rounds} --calls {options.calls} "
                   f"--kernel-calls {options.kernel_calls}")
        harness.update_results("constraint_overhead", "\n".join([
            "### Cost of the documented-constraint checks (`benchmarks/constraint_overhead.py`)", "",
            f"Command: `{command}`. Machine: {machine}", "", "```text", *table, "```"]))


if __name__ == "__main__":
    main()
