"""The probe's per-call cost on a repeated signature, two source trees side by side (issue 24, item 5).

``python benchmarks/probe_overhead_trees.py BEFORE AFTER [--rounds 7] [--shapes decode prefill]
[--settings not-sampled default checked]``: BEFORE and AFTER are source trees of this repository (``git
archive <commit> | tar -x -C DIR``). Each round runs, in a fresh process per tree and in alternating order,
``probe_overhead.repeated_cost`` of that tree on its decode and prefill cases (the no-op operator probed minus
bare, the same arguments every call, after 256 calls) in the settings of ``probe_overhead.REPEATED`` asked for
(repeated signature not sampled, default sampling, every call value-checked), with the dump off. The figure per
tree, shape and setting is the median over rounds, with the after/before ratio; the load (``os.getloadavg``) is
printed before and after. A count no load disturbs comes with them: the Python bytecodes the probe executes per
call on a repeated signature, not sampled (``sys.settrace`` opcode events over 100 calls, in the first round).

Each child runs with its tree as the current folder and on ``PYTHONPATH``, and ``tree/kvlint/runtime_probe``
linked to ``tree/runtime_probe`` (the installed package maps that top-level folder under ``kvlint``): from any
other folder holding a ``kvlint`` package (this checkout), that folder would come first on ``sys.path`` and the
editable install would supply its own ``runtime_probe``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

CHILD = r"""
import importlib.util, io, json, sys
tree, shapes, wanted = sys.argv[1], sys.argv[2].split(","), json.loads(sys.argv[3])
spec = importlib.util.spec_from_file_location("probe_overhead", tree + "/benchmarks/probe_overhead.py")
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)
import kvlint.runtime_probe
assert kvlint.runtime_probe.__file__.startswith(tree), kvlint.runtime_probe.__file__
import torch
torch.manual_seed(0)
torch_npu = bench.emulator.install()


def bytecodes(case, output, calls=100):
    # Python bytecodes the probe executes per call on a repeated signature, not sampled (a count: no clock)
    args, keywords = case
    probe = bench.runtime_probe.activate(bench.REPEATED["repeated signature, not sampled"], stream=io.StringIO())
    try:
        probed = bench.ProbedOp(lambda *args, **keywords: output, bench.FIA_V1, probe)
        for _ in range(300):
            probed(*args, **keywords)
        count = [0]

        def trace(frame, event, arg):
            frame.f_trace_opcodes = True
            if event == "opcode":
                count[0] += 1
            return trace

        sys.settrace(trace)
        for _ in range(calls):
            probed(*args, **keywords)
        sys.settrace(None)
        return count[0] / calls
    finally:
        bench.runtime_probe.deactivate()


found = {}
for shape in shapes:
    args, keywords = case = getattr(bench, shape + "_case")()
    output = torch_npu.npu_fused_infer_attention_score(*args, **keywords)
    for name, label in wanted.items():
        settings = bench.REPEATED[label]
        calls = 4096 if settings.value_every else 1000 if settings.value_first is None else 5000
        found[shape + " " + name] = bench.repeated_cost(case, output, settings, calls, warm_up=256)
    found[shape + " bytecodes"] = bytecodes(case, output)
print(json.dumps(found))
"""

SETTINGS = {"not-sampled": "repeated signature, not sampled", "default": "repeated signature, default sampling",
            "checked": "every call value-checked"}
"""The settings of ``probe_overhead.REPEATED``, in its order, by a short name."""


def _importable(tree: Path) -> None:
    """Make ``kvlint.runtime_probe`` of ``tree`` importable from ``tree`` on PYTHONPATH (it is a top-level
    folder that the installed package maps under ``kvlint``)."""
    link = tree / "kvlint" / "runtime_probe"
    if not link.exists():
        link.symlink_to(tree / "runtime_probe", target_is_directory=True)


def _run(tree: Path, shapes: list[str], settings: list[str]) -> dict[str, Any]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("KVLINT_")}
    env.update(PYTHONPATH=str(tree), PYTHONWARNINGS="ignore")
    wanted = json.dumps({name: SETTINGS[name] for name in settings})
    result = subprocess.run([sys.executable, "-c", CHILD, str(tree), ",".join(shapes), wanted],
                            capture_output=True, text=True, env=env, cwd=tree, timeout=1800)  # fmt: skip
    if result.returncode != 0:
        sys.exit(f"probe_overhead_trees.py: the run in {tree} failed:\n{result.stderr.strip()}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--shapes", nargs="+", choices=("decode", "prefill"), default=["decode", "prefill"])
    parser.add_argument("--settings", nargs="+", choices=list(SETTINGS), default=list(SETTINGS))
    options = parser.parse_args()
    trees = {"before": options.before.resolve(), "after": options.after.resolve()}
    for tree in trees.values():
        if not (tree / "runtime_probe").is_dir() or not (tree / "benchmarks" / "probe_overhead.py").is_file():
            parser.error(f"{tree}: not a source tree of kvlint (no runtime_probe/ or benchmarks/probe_overhead.py)")
        _importable(tree)
    settings = [name for name in SETTINGS if name in options.settings]
    print(f"load before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
    samples: dict[str, list[dict[str, Any]]] = {name: [] for name in trees}
    for number in range(options.rounds):
        order = list(trees) if number % 2 == 0 else list(reversed(trees))
        for name in order:
            samples[name].append(_run(trees[name], options.shapes, settings))
    print(f"load after:  {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"{'probe cost per call (us)':44} {'before wall':>11} {'after wall':>10} {'ratio':>6} {'before CPU':>10} "
          f"{'after CPU':>9} {'ratio':>6}")
    for key in samples["before"][0]:
        shape, name = key.split(" ")
        if name == "bytecodes":
            before, after = (samples[tree][0][key] for tree in trees)
            print(f"{shape + ', Python bytecodes per call (not sampled)':44} {before:11.0f} {after:10.0f} "
                  f"{after / before:6.3f}")
            continue
        wall_before, wall_after, cpu_before, cpu_after = (
            statistics.median(run[key][clock] for run in samples[tree]) * 1e6
            for clock in (0, 1) for tree in trees)
        print(f"{shape + ', ' + SETTINGS[name]:44} {wall_before:11.1f} {wall_after:10.1f} "
              f"{wall_after / wall_before:6.3f} {cpu_before:10.1f} {cpu_after:9.1f} {cpu_after / cpu_before:6.3f}")
    print(f"medians of {options.rounds} rounds, one fresh process per tree and round, alternating order")


if __name__ == "__main__":
    main()
