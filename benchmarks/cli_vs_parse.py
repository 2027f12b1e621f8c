"""The ``kvlint`` command against the floor of reading and ``ast.parse``-ing every file in one process.

    python benchmarks/cli_vs_parse.py [--tree PATH] [--runs N] [--update-results]

Without ``--tree`` the corpus of ``benchmarks/corpus.py`` is built in a temporary folder; ``--tree`` names any
folder instead (``--tree torch`` means torch's installed Python sources). Each command is a fresh process of
the same interpreter, over the same list of files (kvlint's own discovery):

- ``read``: read every file's bytes;
- ``ast.parse``: read and parse every file (the floor of any linter that looks at every file);
- ``kvlint (empty folder)``: the start-up cost alone (interpreter, astroid and the rule tables);
- ``kvlint -j 1`` and ``kvlint -j 2`` over the tree.

Then, in this process, the files the text gate turns away: kvlint's ``lint_file`` on each of them against
the cheapest correct read of a Python file (bytes, PEP 263 encoding, decode). That ratio is what a file
without a trigger word costs kvlint, in units of reading it.
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import sys
import tempfile
import time
import tokenize
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import corpus  # noqa: E402
import harness  # noqa: E402

READ = """
import sys
for path in open(sys.argv[1]).read().splitlines():
    with open(path, "rb") as handle:
        handle.read()
"""
PARSE = """
import ast, sys
for path in open(sys.argv[1]).read().splitlines():
    with open(path, "rb") as handle:
        source = handle.read()
    try:
        ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        pass
"""


def discover(tree: Path) -> list[str]:
    """The files kvlint lints under ``tree``, by kvlint's own discovery."""
    try:
        from kvlint.frontends.runner import discover as kvlint_discover
    except ImportError:
        from kvlint.frontends.cli import discover as kvlint_discover
    return list(kvlint_discover([str(tree)]))


def read_python(path: str) -> str:
    """The cheapest correct read of a Python file: bytes, the PEP 263 encoding, decode."""
    with open(path, "rb") as handle:
        raw = handle.read()
    encoding, _ = tokenize.detect_encoding(io.BytesIO(raw).readline)
    return raw.decode(encoding, errors="replace")


def gated_out_cost(files: list[str], rounds: int) -> tuple[int, int, float, list[float]]:
    """(files turned away by the gate, their bytes, median ratio lint_file / read, per-round ratios)."""
    try:
        from kvlint.frontends.runner import lint_file
    except ImportError:
        from kvlint.frontends.cli import lint_file
    from kvlint.analysis.settings import may_have_findings

    turned_away = []
    for path in files:
        try:
            if not may_have_findings(read_python(path)):
                turned_away.append(path)
        except OSError:
            continue
    size = sum(os.path.getsize(path) for path in turned_away)
    ratios = []
    for round_ in range(rounds):
        times = {}
        for name in (("read", "lint_file") if round_ % 2 == 0 else ("lint_file", "read")):
            function = read_python if name == "read" else lint_file
            start = time.process_time()
            for path in turned_away:
                function(path)
            times[name] = time.process_time() - start
        ratios.append(times["lint_file"] / times["read"])
    return len(turned_away), size, statistics.median(ratios), ratios


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", help="folder to lint (default: a fresh benchmark corpus; 'torch': torch's sources)")
    parser.add_argument("--runs", type=int, default=5, help="rounds per command (default 5)")
    parser.add_argument("--update-results", action="store_true", help="write the section of benchmarks/RESULTS.md")
    args = parser.parse_args(argv)

    if args.tree == "torch":
        import importlib.util

        spec = importlib.util.find_spec("torch")
        if spec is None or spec.origin is None:
            parser.error("torch is not installed")
        tree, what = Path(spec.origin).parent, "torch's installed Python sources"
    elif args.tree:
        tree, what = Path(args.tree), f"`{args.tree}`"
    else:
        tree, summary = corpus.ensure(None)
        what = f"the benchmark corpus ({corpus.describe(summary)})"
    files = discover(tree)
    lines = sum(read_python(path).count("\n") for path in files)
    scratch = Path(tempfile.mkdtemp(prefix="kvlint-bench-"))
    listing = scratch / "files.txt"
    listing.write_text("\n".join(files) + "\n", encoding="utf-8")
    empty = scratch / "empty"
    empty.mkdir()

    py = harness.python()
    commands = {
        "read": [py, "-c", READ, str(listing)],
        "ast.parse": [py, "-c", PARSE, str(listing)],
        "kvlint (empty folder)": [py, "-m", "kvlint", "--exit-zero", str(empty)],
        "kvlint -j 1": [py, "-m", "kvlint", "--exit-zero", str(tree)],
        "kvlint -j 2": [py, "-m", "kvlint", "--exit-zero", "-j", "2", str(tree)],
    }
    print(f"{len(files)} files, {lines} lines under {tree}", file=sys.stderr)
    machine = harness.machine()
    series = harness.compare(commands, args.runs)
    parse, j1, j2, startup = (series[k] for k in ("ast.parse", "kvlint -j 1", "kvlint -j 2", "kvlint (empty folder)"))
    turned_away, size, gate_ratio, gate_rounds = gated_out_cost(files, args.runs)

    body = "\n".join([
        f"### kvlint CLI vs reading and parsing: {what}",
        "",
        f"Measured {machine}",
        "",
        f"`python benchmarks/cli_vs_parse.py{' --tree ' + args.tree if args.tree else ''} --runs {args.runs}`: "
        f"{len(files)} files, {lines} lines; medians of {args.runs} rounds, ratios against `ast.parse`.",
        "",
        harness.series_table(series, "ast.parse"),
        "",
        f"- kvlint -j 1 / ast.parse floor: **{j1.cpu / parse.cpu:.2f}** CPU, **{j1.wall / parse.wall:.2f}** wall "
        f"(start-up alone: {startup.cpu:.2f} s CPU; without it {(j1.cpu - startup.cpu) / parse.cpu:.2f} CPU).",
        f"- -j 2 scaling (wall -j 1 / wall -j 2): **{j1.wall / j2.wall:.2f}x**; CPU -j 2 / -j 1: "
        f"{j2.cpu / j1.cpu:.2f}.",
        f"- files the text gate turns away: {turned_away} of {len(files)} ({size / 1e6:.1f} MB); kvlint's "
        f"`lint_file` on them costs **{gate_ratio:.2f}x** reading them (bytes + PEP 263 + decode), rounds: "
        + ", ".join(f"{r:.2f}" for r in gate_rounds) + ".",
    ])
    print(body)
    if args.update_results:
        harness.update_results(f"cli_vs_parse{'-' + Path(args.tree).name if args.tree else ''}", body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
