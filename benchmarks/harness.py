"""What every benchmark shares: timing commands side by side, the machine description, and RESULTS.md.

Absolute times on a shared machine are noise, so a benchmark reports ratios of a candidate against a
baseline measured in the same run. Runs alternate (baseline, candidate, candidate, baseline, ...) so that
a slow stretch of the machine hits both sides; the figure is the median of several runs. Two clocks are
kept: CPU time (user + system of the command and every process it waited for, which a busy machine
disturbs least) and wall time.
"""

from __future__ import annotations

import datetime
import importlib.metadata
import os
import platform
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "RESULTS.md"
PACKAGES = ("kvlint-ascend", "astroid", "pylint", "flake8", "pyflakes", "pycodestyle", "hypothesis", "torch")


@dataclass
class Timing:
    wall: float
    cpu: float


@dataclass
class Series:
    """Repeated timings of one command."""

    label: str
    runs: list[Timing] = field(default_factory=list)
    last: subprocess.CompletedProcess | None = None
    """The output of the last run, to check what the command did."""

    @property
    def cpu(self) -> float:
        return statistics.median(run.cpu for run in self.runs)

    @property
    def wall(self) -> float:
        return statistics.median(run.wall for run in self.runs)


def timed_environment(**extra: str) -> dict[str, str]:
    """The environment of a timed command (with ``extra`` added): this one, with compiled modules cached as they
    are for an installed package, whose installer writes them. Under ``PYTHONDONTWRITEBYTECODE`` (set on this
    project's machines) an editable install of kvlint compiled its sources again in every process: 0.13 s of
    CPU per start that no installed kvlint pays, against a floor whose standard library is compiled. The cache
    goes to a folder of its own (``PYTHONPYCACHEPREFIX``), not into the checkout."""
    env = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}
    env.setdefault("PYTHONPYCACHEPREFIX", os.path.join(tempfile.gettempdir(), "kvlint-benchmarks-pycache"))
    return {**env, **extra}


def run_timed(command: Sequence[str], cwd: str | Path | None = None, env: dict[str, str] | None = None,
              check_codes: Sequence[int] = (0, 1)) -> tuple[Timing, subprocess.CompletedProcess]:
    """Run a command to completion (in ``env``, by default ``timed_environment()``); its wall time and the CPU
    time of it and its waited-for children."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(list(command), cwd=cwd, env=timed_environment() if env is None else env,
                          capture_output=True, text=True, check=False)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode not in check_codes:
        raise RuntimeError(f"{' '.join(command)} exited {done.returncode}:\n{done.stderr[-3000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return Timing(wall, cpu), done


def compare(commands: dict[str, Sequence[str]], runs: int, cwd: str | Path | None = None,
            env: dict[str, str] | None = None, warmup: bool = True,
            check_codes: Sequence[int] = (0, 1)) -> dict[str, Series]:
    """Time each command ``runs`` times, alternating the order every round (ABBA...)."""
    labels = list(commands)
    if warmup:
        for label in labels:
            run_timed(commands[label], cwd, env, check_codes)
    series = {label: Series(label) for label in labels}
    for round_ in range(runs):
        for label in labels if round_ % 2 == 0 else reversed(labels):
            timing, done = run_timed(commands[label], cwd, env, check_codes)
            series[label].runs.append(timing)
            series[label].last = done
            print(f"  {label}: {timing.cpu:.2f} s CPU, {timing.wall:.2f} s wall", file=sys.stderr, flush=True)
    return series


def ratio(candidate: Series, baseline: Series) -> tuple[float, float]:
    """(CPU, wall) ratio of the medians."""
    return candidate.cpu / baseline.cpu, candidate.wall / baseline.wall


def paired_ratios(candidate: Series, baseline: Series) -> list[float]:
    """CPU ratio of each round, for the spread."""
    return [c.cpu / b.cpu for c, b in zip(candidate.runs, baseline.runs)]


def series_table(series: dict[str, Series], baseline: str) -> str:
    rows = ["| command | median CPU s | median wall s | CPU ratio | wall ratio | CPU ratio per round |",
            "|---|---|---|---|---|---|"]
    base = series[baseline]
    for label, one in series.items():
        cpu_ratio, wall_ratio = ratio(one, base)
        rounds = ", ".join(f"{r:.3f}" for r in paired_ratios(one, base))
        rows.append(f"| {label} | {one.cpu:.2f} | {one.wall:.2f} | {cpu_ratio:.3f} | {wall_ratio:.3f} | {rounds} |")
    return "\n".join(rows)


def _version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def _git_commit() -> str:
    done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=Path(__file__).resolve().parent,
                          capture_output=True, text=True, check=False)
    return done.stdout.strip() or "unknown"


def machine() -> str:
    """One paragraph describing where and when the figures were measured."""
    cpu_model = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu_model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    load = ", ".join(f"{value:.1f}" for value in os.getloadavg())
    versions = ", ".join(f"{name} {_version(name)}" for name in PACKAGES)
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return (f"{now}; kvlint commit {_git_commit()}; {os.cpu_count()} cores ({cpu_model}), load average {load} "
            f"at the start (the machine is shared); {platform.system()} {platform.release()}; "
            f"Python {platform.python_version()}; {versions}.")


def update_results(name: str, body: str) -> None:
    """Replace (or append) the section of RESULTS.md between this benchmark's markers."""
    begin, end = f"<!-- begin {name} -->", f"<!-- end {name} -->"
    section = f"{begin}\n{body.rstrip()}\n{end}"
    text = RESULTS.read_text(encoding="utf-8") if RESULTS.exists() else "# Benchmark results\n"
    pattern = re.compile(re.escape(begin) + r".*?" + re.escape(end), re.S)
    text = pattern.sub(lambda _: section, text) if pattern.search(text) else text.rstrip() + "\n\n" + section + "\n"
    RESULTS.write_text(text, encoding="utf-8")


def python() -> str:
    """The interpreter running the benchmark: the tools are run from the same environment."""
    return sys.executable


def git(bare: Path, *args: str, stdin: str | None = None) -> bytes:
    """The output of ``git args`` in the bare clone ``bare``; exits naming the command and folder on failure."""
    done = subprocess.run(["git", "-C", str(bare), *args], input=stdin and stdin.encode(), capture_output=True,
                          check=False)
    if done.returncode:
        raise SystemExit(f"git {' '.join(args[:2])} in {bare}: {done.stderr.decode()[-500:]}")
    return done.stdout


def blobs_at(bare: Path, commit: str, paths: list[str]) -> Iterator[tuple[str, bytes]]:
    """(path, bytes) of each file at ``commit`` of the bare clone, read in one ``git cat-file --batch``
    (a path missing at the commit gives empty bytes)."""
    out = git(bare, "cat-file", "--batch", stdin="".join(f"{commit}:{path}\n" for path in paths))
    position = 0
    for path in paths:
        header_end = out.index(b"\n", position)
        header = out[position:header_end].split()
        size = int(header[2]) if len(header) == 3 else 0
        yield path, out[header_end + 1:header_end + 1 + size]
        position = header_end + 1 + size + (1 if len(header) == 3 else 0)
