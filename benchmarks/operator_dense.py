"""kvlint's cost on operator-dense code, the three front-ends side by side: the ``kvlint`` command against
reading and parsing, the flake8 plugin against plain flake8, the pylint plugin against plain pylint, and
``-j 2`` scaling.

    python benchmarks/operator_dense.py [--corpus DIR] [--runs N] [--update-results]

The corpus is ``operator_corpus.py``'s (every module calls the operators), rebuilt identically in a temporary
folder or in ``--corpus DIR``. All commands are fresh processes of the same interpreter, alternating within
each round, medians of ``--runs`` rounds (default 3); the baselines are those of the other benchmarks:

- ``read + ast.parse``: one process reading and parsing every file (``cli_vs_parse.py``'s floor); kvlint on an
  empty folder gives its start-up alone;
- ``flake8``: flake8's default checks with kvlint hidden from its plugin discovery, against the same with the
  KVL plugin registered (``flake8_overhead.py``'s launcher, flake8's default ``--jobs``);
- ``pylint``: pylint's defaults, ``--jobs=1``, no configuration, against the same plus ``--load-plugins kvlint``.

The benchmark checks that the three front-ends report the same findings (file and line) and that the
plugins change nothing else in flake8's and pylint's output.

Targets (issue 17): kvlint -j 1 <= 2x the floor, flake8 <= 1.1x, pylint <= 1.05x, -j 2 near-linear.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import cli_vs_parse  # noqa: E402
import flake8_overhead  # noqa: E402
import harness  # noqa: E402
import operator_corpus  # noqa: E402
import pylint_overhead  # noqa: E402

TARGETS = {"kvlint -j 1": 2.0, "flake8 (KVL plugin registered)": 1.1, "pylint --load-plugins kvlint": 1.05}


def _flake8_lines(output: str) -> tuple[set[tuple[str, int]], list[str]]:
    """(file, line) of the KVL messages, and every other message."""
    kvl, others = set(), []
    for line in output.splitlines():
        if ": KVL" in line:
            path, row = line.split(":")[:2]
            kvl.add((os.path.normpath(path), int(row)))
        else:
            others.append(line)
    return kvl, sorted(others)


def _pylint_lines(output: str) -> tuple[set[tuple[str, int]], list[str]]:
    kvl, others = set(), []
    for message in pylint_overhead.messages(output):
        if pylint_overhead.KVLINT_MESSAGE.search(message):
            path, row = message.split(":")[:2]
            kvl.add((os.path.normpath(path), int(row)))
        else:
            others.append(message)
    return kvl, others


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", help="corpus folder to build in (default: a new temporary folder)")
    parser.add_argument("--runs", type=int, default=3, help="rounds (default 3; one round is ~1 min of CPU)")
    parser.add_argument("--update-results", action="store_true", help="write the section of benchmarks/RESULTS.md")
    args = parser.parse_args(argv)
    package, summary = operator_corpus.ensure(args.corpus)
    cwd = package.parent
    files = [os.path.relpath(path, cwd) for path in cli_vs_parse.discover(package)]
    scratch = Path(tempfile.mkdtemp(prefix="kvlint-bench-"))
    listing = scratch / "files.txt"
    listing.write_text("\n".join(files) + "\n", encoding="utf-8")
    (scratch / "empty").mkdir()
    home = tempfile.mkdtemp(prefix="kvlint-pylinthome-")
    env = harness.timed_environment(PYLINTHOME=home, PYLINTRC=os.path.join(home, "none"))
    py = harness.python()
    flake8 = ["--format=%(path)s:%(row)d:%(col)d: %(code)s", package.name]
    pylint = ["--score=n", "--jobs=1", package.name]
    commands = {
        "read + ast.parse": [py, "-c", cli_vs_parse.PARSE, str(listing)],
        "kvlint (empty folder)": [py, "-m", "kvlint", "--isolated", "--exit-zero", str(scratch / "empty")],
        "kvlint -j 1": [py, "-m", "kvlint", "--isolated", "--format", "json", "--exit-zero", package.name],
        "kvlint -j 2": [py, "-m", "kvlint", "--isolated", "--format", "json", "--exit-zero", "-j", "2", package.name],
        "flake8 (kvlint not registered)": [py, "-c", flake8_overhead.LAUNCHER, flake8_overhead.DISTRIBUTION, *flake8],
        "flake8 (KVL plugin registered)": [py, "-c", flake8_overhead.LAUNCHER, flake8_overhead.NOTHING, *flake8],
        "pylint": [py, "-m", "pylint", *pylint],
        "pylint --load-plugins kvlint": [py, "-m", "pylint", "--load-plugins", "kvlint", *pylint],
    }
    machine = harness.machine()
    series = harness.compare(commands, args.runs, cwd=cwd, env=env, warmup=False, check_codes=range(0, 64))

    cli = {(os.path.normpath(os.path.relpath(f["path"], cwd) if os.path.isabs(f["path"]) else f["path"]), f["line"])
           for f in json.loads(series["kvlint -j 1"].last.stdout)}
    flake8_kvl, flake8_plain = _flake8_lines(series["flake8 (KVL plugin registered)"].last.stdout)
    flake8_hidden, flake8_base = _flake8_lines(series["flake8 (kvlint not registered)"].last.stdout)
    pylint_kvl, pylint_plain = _pylint_lines(series["pylint --load-plugins kvlint"].last.stdout)
    _, pylint_base = _pylint_lines(series["pylint"].last.stdout)
    if not cli or cli != flake8_kvl or cli != pylint_kvl:
        raise SystemExit(f"the front-ends disagree: kvlint {len(cli)}, flake8 {len(flake8_kvl)}, pylint "
                         f"{len(pylint_kvl)} findings")
    if flake8_hidden or flake8_plain != flake8_base or pylint_plain != pylint_base:
        raise SystemExit("a plugin changed flake8's or pylint's own messages: the comparison is not fair")

    def line(label: str, baseline: str) -> str:
        cpu, wall = harness.ratio(series[label], series[baseline])
        target = TARGETS[label]
        verdict = "met" if cpu <= target else "not met"
        return f"| {label} / {baseline} | **{cpu:.2f}** | {wall:.2f} | <= {target}: {verdict} |"

    j1, j2, startup = series["kvlint -j 1"], series["kvlint -j 2"], series["kvlint (empty folder)"]
    floor = series["read + ast.parse"]
    body = "\n".join([
        "### Operator-dense code: the three front-ends",
        "",
        f"Measured {machine}",
        "",
        f"`python benchmarks/operator_dense.py --runs {args.runs}` on the operator-dense corpus: "
        f"{operator_corpus.describe(summary)}. Every front-end reports the same {len(cli)} findings; the plugins "
        "change nothing else in flake8's and pylint's output.",
        "",
        "| ratio | CPU | wall | target |",
        "|---|---|---|---|",
        line("kvlint -j 1", "read + ast.parse"),
        line("flake8 (KVL plugin registered)", "flake8 (kvlint not registered)"),
        line("pylint --load-plugins kvlint", "pylint"),
        f"| -j 2 scaling: wall kvlint -j 1 / -j 2 | | **{j1.wall / j2.wall:.2f}x** | near 2x on 2 idle cores |",
        "",
        f"- kvlint's start-up alone (an empty folder: interpreter, imports) is {startup.cpu:.2f} s CPU; without it "
        f"kvlint -j 1 is {(j1.cpu - startup.cpu) / floor.cpu:.2f}x the floor.",
        "",
        harness.series_table(series, "read + ast.parse"),
    ])
    print(body)
    if args.update_results:
        harness.update_results("operator_dense", body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
