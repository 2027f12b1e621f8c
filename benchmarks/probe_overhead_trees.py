"""The probe's per-call cost on a repeated signature, two source trees side by side (issue 24, item 5).

``python benchmarks/probe_overhead_trees.py BEFORE AFTER [--rounds 7]``: BEFORE and AFTER are source trees of
this repository (``git archive <commit> | tar -x -C DIR``). Each round runs, in a fresh process per tree and
in alternating order, ``probe_overhead.repeated_cost`` of that tree on its decode case (the no-op operator
probed minus bare, the same arguments every call, after 256 calls) in the three settings of
``probe_overhead.REPEATED``, with the dump off. The figure per tree and setting is the median over rounds;
the load (``os.getloadavg``) is printed before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

CHILD = r"""
import importlib.util, io, json, sys
tree = sys.argv[1]
spec = importlib.util.spec_from_file_location("probe_overhead", tree + "/benchmarks/probe_overhead.py")
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)
import kvlint.runtime_probe
assert kvlint.runtime_probe.__file__.startswith(tree), kvlint.runtime_probe.__file__
import torch
torch.manual_seed(0)
torch_npu = bench.emulator.install()
args, keywords = case = bench.decode_case()
output = torch_npu.npu_fused_infer_attention_score(*args, **keywords)
found = {}
for label, settings in bench.REPEATED.items():
    calls = 4096 if settings.value_every else 1000 if settings.value_first is None else 5000
    found[label] = bench.repeated_cost(case, output, settings, calls, warm_up=256)
print(json.dumps(found))
"""


def _importable(tree: Path) -> None:
    """Make ``kvlint.runtime_probe`` of ``tree`` importable from ``tree`` on PYTHONPATH (it is a top-level
    folder that the installed package maps under ``kvlint``)."""
    link = tree / "kvlint" / "runtime_probe"
    if not link.exists():
        link.symlink_to(tree / "runtime_probe", target_is_directory=True)


def _run(tree: Path) -> dict[str, list[float]]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("KVLINT_")}
    env.update(PYTHONPATH=str(tree), PYTHONWARNINGS="ignore")
    result = subprocess.run([sys.executable, "-c", CHILD, str(tree)], capture_output=True, text=True, env=env,
                            timeout=1800, check=True)  # fmt: skip
    return json.loads(result.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    parser.add_argument("--rounds", type=int, default=7)
    options = parser.parse_args()
    trees = {"before": options.before.resolve(), "after": options.after.resolve()}
    for tree in trees.values():
        _importable(tree)
    print(f"load before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
    samples: dict[str, list[dict[str, list[float]]]] = {name: [] for name in trees}
    for number in range(options.rounds):
        order = list(trees) if number % 2 == 0 else list(reversed(trees))
        for name in order:
            samples[name].append(_run(trees[name]))
    print(f"load after:  {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    labels = list(samples["before"][0])
    print(f"{'decode, probe cost per call (us)':44} {'before wall':>11} {'after wall':>10} {'before CPU':>10} "
          f"{'after CPU':>9}")
    for label in labels:
        row = [statistics.median(run[label][clock] for run in samples[name]) * 1e6
               for clock in (0, 1) for name in trees]  # fmt: skip
        print(f"{label:44} {row[0]:11.1f} {row[1]:10.1f} {row[2]:10.1f} {row[3]:9.1f}")
    print(f"medians of {options.rounds} rounds, one fresh process per tree and round, alternating order")


if __name__ == "__main__":
    main()
