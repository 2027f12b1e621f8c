"""What one file costs kvlint, for choosing the per-file limits, and what their checkpoints cost.

    python benchmarks/file_limits.py --tree DIR [--top 30] [--runs 5] [--update-results]

``DIR``: a checkout of real code (the figures in RESULTS.md come from vllm-project/vllm-ascend, extracted
with ``git archive``; nothing of it is in this repository). Three measurements:

- every file of the tree linted in one process with the limits off, as ``kvlint DIR`` lints it: the CPU time
  and the growth of the resident memory of the slowest files;
- the largest generated files of ``benchmarks/scaling.py`` (a 50,000-line module, one function of 4,000
  operator calls), each in a fresh process with the limits off: the same two figures;
- the checkpoints' cost: the ``--top`` slowest files of the tree and a generated function of 1,000 calls,
  linted in fresh processes with the default limits and with ``Meter.check`` replaced by a function that does
  nothing, alternating, ``--runs`` rounds: the CPU ratio of the medians and of each round; then once more with
  every check counted and timed, which bounds their cost however loaded the machine is.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import harness  # noqa: E402
import scaling  # noqa: E402

GENERATED = (("length", 50000), ("calls", 4000))


def _limits_off():
    from kvlint.analysis.settings import FileLimits, Settings

    return Settings(limits=FileLimits(seconds=None, memory=None))


def measure(paths: list[str]) -> list[dict]:
    """Each file linted in this process with the limits off: CPU seconds and resident growth in MiB."""
    from kvlint.checks.limits import resident_bytes
    from kvlint.frontends.runner import lint_file

    settings = _limits_off()
    rows = []
    for path in paths:
        before, start = resident_bytes() or 0, time.process_time()
        result = lint_file(path, settings)
        rows.append({"path": path, "cpu": time.process_time() - start,
                     "rss_mib": ((resident_bytes() or 0) - before) / 2**20,
                     "findings": len(result.findings), "skipped": result.skipped})
    return rows


def lint_all(paths: list[str], checkpoints: str) -> dict[str, float]:
    """Lint the files with the default limits: ``on``; ``off``: ``Meter.check`` does nothing; ``count``: each
    check is counted and its wall time summed (an upper bound of what the checkpoints cost, independent of the
    machine's load), with the CPU time of the whole."""
    from kvlint.checks import limits
    from kvlint.frontends.runner import lint_file

    spent = {"checks": 0, "check_seconds": 0.0}
    check = limits.Meter.check

    def counted(self: limits.Meter) -> None:
        start = time.perf_counter()
        check(self)
        spent["check_seconds"] += time.perf_counter() - start
        spent["checks"] += 1

    if checkpoints == "off":
        limits.Meter.check = lambda self: None
    elif checkpoints == "count":
        limits.Meter.check = counted
    start = time.process_time()
    for path in paths:
        result = lint_file(path)
        assert not result.skipped, result.skipped
    return {**spent, "cpu": time.process_time() - start}


def _child(*args: str) -> list[str]:
    return [harness.python(), str(Path(__file__).resolve()), *args]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tree", help="a checkout of real code")
    parser.add_argument("--top", type=int, default=30, help="slowest files of the tree timed with and without")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--update-results", action="store_true")
    parser.add_argument("--measure", nargs="+", help=argparse.SUPPRESS)
    parser.add_argument("--lint", help=argparse.SUPPRESS)
    parser.add_argument("--checkpoints", choices=("on", "off", "count"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.measure:
        print(json.dumps(measure(args.measure)))
        return 0
    if args.lint:
        print(json.dumps(lint_all(Path(args.lint).read_text().split("\n"), args.checkpoints)))
        return 0
    if not args.tree or not Path(args.tree).is_dir():
        parser.error("--tree DIR: a folder of real code is needed")
    from kvlint.frontends.runner import discover

    header = harness.machine()
    tree = Path(args.tree).resolve()
    files = list(discover([str(tree)]))
    print(f"{len(files)} files of {tree}", file=sys.stderr, flush=True)
    real = json.loads(subprocess.run(_child("--measure", *files), capture_output=True, text=True, check=True).stdout)
    real.sort(key=lambda row: -row["cpu"])
    with tempfile.TemporaryDirectory() as scratch:
        generated = []
        for series, size in GENERATED:
            path = Path(scratch) / f"{series}_{size}.py"
            path.write_text(scaling.source(series, size), encoding="utf-8")
            print(f"generated {path.name}", file=sys.stderr, flush=True)
            done = subprocess.run(_child("--measure", str(path)), capture_output=True, text=True, check=True)
            generated.append((series, size, json.loads(done.stdout)[0]))
        dense = Path(scratch) / "calls_1000.py"
        dense.write_text(scaling.source("calls", 1000), encoding="utf-8")
        listing = Path(scratch) / "files.txt"
        listing.write_text("\n".join([*(row["path"] for row in real[:args.top]), str(dense)]))
        timed = harness.compare({"checkpoints off": _child("--lint", str(listing), "--checkpoints", "off"),
                                 "checkpoints on": _child("--lint", str(listing), "--checkpoints", "on")},
                                args.runs, warmup=False)
        counted = json.loads(subprocess.run(_child("--lint", str(listing), "--checkpoints", "count"),
                                            capture_output=True, text=True, check=True).stdout)
    on, off = timed["checkpoints on"], timed["checkpoints off"]
    rounds = harness.paired_ratios(on, off)
    lines = [
        "### File limits: what one file costs, and the checkpoints' cost",
        "",
        f"Measured {header}",
        "",
        f"`python benchmarks/file_limits.py --tree vllm-ascend --top {args.top} --runs {args.runs}` "
        "(vllm-project/vllm-ascend at 182b75e, extracted with `git archive`; its "
        f"{len(files)} Python files). CPU seconds of `lint_file` with the limits off, and how much it grew the "
        "process's resident memory (the tree in one process, as `kvlint DIR` lints it; each generated file in a "
        "fresh process).",
        "",
        "| file | lines | CPU s | resident growth MiB |",
        "|---|---|---|---|",
    ]
    for row in real[:5]:
        path = Path(row["path"])
        lines.append(f"| {path.relative_to(tree)} | {len(path.read_bytes().splitlines())} | {row['cpu']:.2f} | "
                     f"{row['rss_mib']:.1f} |")
    for series, size, row in generated:
        lines.append(f"| generated: {series} {size:,} (`scaling.py`) | | {row['cpu']:.2f} | {row['rss_mib']:.1f} |")
    lines += [
        "",
        f"Whole tree: **{sum(row['cpu'] for row in real):.1f} s** CPU; slowest file **{real[0]['cpu']:.2f} s**; "
        f"largest growth of one file **{max(row['rss_mib'] for row in real):.1f} MiB**.",
        "",
        f"Checkpoints: the {args.top} slowest files and a generated function of 1,000 calls, linted with the "
        "default limits against `Meter.check` doing nothing, alternating fresh processes, medians of "
        f"{args.runs} rounds: CPU **{on.cpu / off.cpu:.3f}x** (rounds {', '.join(f'{r:.3f}' for r in rounds)}; "
        f"median of the rounds {statistics.median(rounds):.3f}).",
        "",
        harness.series_table(timed, "checkpoints off"),
        "",
        f"Counted in one more run of the same files: **{counted['checks']:,}** checkpoints took "
        f"**{counted['check_seconds'] * 1000:.1f} ms** (wall time, summed around each call) of "
        f"{counted['cpu']:.2f} s CPU, **{100 * counted['check_seconds'] / counted['cpu']:.2f} %**: an upper bound "
        "of their cost that the machine's load does not blur, as it does the ratio above.",
    ]
    body = "\n".join(lines) + "\n"
    print(body)
    if args.update_results:
        harness.update_results("file_limits", body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
