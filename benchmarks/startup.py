"""What installing kvlint costs every Python process at start-up (issue 15): ``python -c pass`` and
``python -X importtime -c pass`` in three throw-away environments that differ only in kvlint's start-up files.

    python benchmarks/startup.py [--runs 21] [--before 967e61e] [--update-results]

- **no kvlint**: a venv (without pip) whose site-packages points, through a path-only ``.pth`` (which runs
  no code), at this environment's site-packages for torch;
- **kvlint before**: the same plus kvlint installed with ``pip install --no-deps`` from the sources at
  ``--before`` (default: the commit before issue 15), whose ``kvlint.pth`` imported ``kvlint._startup``
  (and through ``kvlint/__init__.py``, ``typing``) in every process, and whose ``KVLINT_EMULATE=1`` imported
  torch in every process;
- **kvlint now**: the same with the working tree's sources.

A regular install, not an editable one: setuptools' editable finder costs every process tens of
milliseconds of its own, whatever kvlint does. Commands alternate between the environments, each figure is
the median over ``--runs`` rounds of wall time (and of CPU time, the clock a shared machine disturbs
least). The modules each environment imports beyond the bare one come from ``-X importtime``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import harness  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
SOURCES = ("kvlint", "checkers", "runtime_probe", "setup.py", "setup.cfg", "pyproject.toml", "README.md")
BEFORE = "967e61e"
"""The last commit before issue 15's start-up changes."""


def _sources(destination: Path, ref: str | None) -> Path:
    """The package sources at ``ref`` (a git revision) or in the working tree (None)."""
    destination.mkdir(parents=True)
    if ref is None:
        for name in SOURCES:
            (shutil.copytree if (ROOT / name).is_dir() else shutil.copy)(ROOT / name, destination / name)
        return destination
    archive = subprocess.run(["git", "archive", ref, *SOURCES], cwd=ROOT, capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(destination)], input=archive.stdout, check=True)
    return destination


def environment(folder: Path, sources: Path | None) -> Path:
    """A venv seeing this environment's packages, with kvlint installed from ``sources``; its python."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder)], check=True)
    python = folder / "bin" / "python"
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    Path(purelib, "00_dev_packages.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")  # before kvlint.pth
    if sources is not None:
        done = subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                               str(sources)], capture_output=True, text=True)
        if done.returncode:
            raise RuntimeError(f"installing {sources} failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    return python


def imported(python: Path, environ: dict[str, str]) -> set[str]:
    """The modules ``python -c pass`` imports (``-X importtime``)."""
    done = subprocess.run([str(python), "-X", "importtime", "-c", "pass"], env=environ, capture_output=True,
                          text=True, check=True)
    return {line.split("|")[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")} - {
        "package"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=21)
    parser.add_argument("--before", default=BEFORE, help="git revision of the 'kvlint before' sources")
    parser.add_argument("--update-results", action="store_true")
    options = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as scratch:
        work = Path(scratch)
        pythons = {
            "no kvlint": environment(work / "bare", None),
            "kvlint before": environment(work / "before", _sources(work / "src-before", options.before)),
            "kvlint now": environment(work / "now", _sources(work / "src-now", None)),
        }
        unset = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
        bare = imported(pythons["no kvlint"], unset)
        lines = [f"Machine: {harness.machine()}", ""]
        lines += ["| environment | `python -c pass` wall ms | CPU ms | ratio to no kvlint (wall) | modules imported "
                  "beyond no kvlint |", "|---|---|---|---|---|"]
        series = harness.compare({label: [str(p), "-c", "pass"] for label, p in pythons.items()}, options.runs,
                                 env=unset)
        base = series["no kvlint"]
        for label, one in series.items():
            extra = sorted(imported(pythons[label], unset) - bare)
            lines.append(f"| {label} | {one.wall * 1e3:.1f} | {one.cpu * 1e3:.1f} | {one.wall / base.wall:.2f} | "
                         f"{', '.join(extra) or 'none'} |")
        emulate = {**unset, "KVLINT_EMULATE": "1"}
        lines += ["", "| `KVLINT_EMULATE=1 python -c pass` | wall ms | CPU ms | imports torch |", "|---|---|---|---|"]
        rounds = max(3, options.runs // 4)
        series = harness.compare({label: [str(pythons[label]), "-c", "pass"] for label in ("kvlint before", "kvlint now")},
                                 rounds, env=emulate)
        for label, one in series.items():
            torch = "torch" in imported(pythons[label], emulate)
            lines.append(f"| {label} | {one.wall * 1e3:.1f} | {one.cpu * 1e3:.1f} | {'yes' if torch else 'no'} |")
    body = "\n".join(["### Start-up cost of installing kvlint (`benchmarks/startup.py`)", "",
                      f"Command: `python benchmarks/startup.py --runs {options.runs}`; medians of {options.runs} "
                      f"rounds ({rounds} with `KVLINT_EMULATE=1`), commands alternating.", "", *lines])
    print(body)
    if options.update_results:
        harness.update_results("startup", body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
