"""flake8's overhead from the kvlint plugin: ``flake8`` with its default checks, without and with the KVL plugin.

    python benchmarks/flake8_overhead.py [--corpus DIR | --tree DIR] [--select CODES] [--runs N] [--update-results]

What is compared, and why it is the honest baseline: installing kvlint registers the ``KVL`` entry point, and
flake8 turns every registered extension on by default, so a user's plain ``flake8`` runs the plugin on every
file. Deselecting its codes (``--extend-ignore KVL``) does not help as a baseline: flake8 still runs the
plugin and only drops its messages. The baseline is therefore flake8 *without the plugin registered*: both
runs go through the same small launcher, which starts flake8's own ``main`` in the same interpreter, and the
baseline launcher hides the kvlint distribution from flake8's plugin discovery
(``importlib.metadata.distributions``). Same interpreter, same flake8, same default selection
(E, F, W, C90), same parallelism (flake8's default ``--jobs=auto``); the only difference is whether the KVL
plugin is loaded. The benchmark checks that: the non-KVL messages of the two runs are identical, and the
KVL messages appear only in the plugin run.

``--select E9`` (any selection without a KVL code) measures what the plugin costs a user who did not ask for
its codes: the plugin then analyses nothing, and the two runs must report the same messages. ``--tree DIR``
runs on a folder of your own (a checkout of a real project) instead of the generated corpus.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import corpus  # noqa: E402
import harness  # noqa: E402

LAUNCHER = """
import importlib.metadata, sys
hidden = sys.argv.pop(1)
_distributions = importlib.metadata.distributions
def distributions(**kwargs):
    return (d for d in _distributions(**kwargs) if (d.metadata["Name"] or "").lower() != hidden)
importlib.metadata.distributions = distributions
from flake8.main.cli import main
sys.exit(main())
"""
NOTHING = "no-such-distribution"
DISTRIBUTION = "kvlint-ascend"
"""kvlint's distribution name (setup.cfg), which the baseline hides."""
CORPUS_TARGET = "target <= 1.10 on the generated corpus (issue 17)"
TREE_TARGETS = ("targets of issue 25: <= 1.15 on a whole repository tree, <= 1.4 on files that all call the "
                "operators")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", help="corpus folder to build in (default: a new temporary folder)")
    parser.add_argument("--tree", help="lint this folder instead of the generated corpus")
    parser.add_argument("--select", help="flake8's --select for both runs (default: flake8's default selection)")
    parser.add_argument("--runs", type=int, default=5, help="rounds per command (default 5)")
    parser.add_argument("--update-results", action="store_true", help="write the section of benchmarks/RESULTS.md")
    args = parser.parse_args(argv)
    if args.tree:
        package = Path(args.tree).resolve()
        files = sorted(package.rglob("*.py"))
        lines = sum(path.read_bytes().count(b"\n") for path in files)
        described = f"`{package.name}/`, {len(files)} files, {lines} lines"
    else:
        package, summary = corpus.ensure(args.corpus)
        described = f"the corpus: {corpus.describe(summary)}"
    selects_kvl = args.select is None or any(code.strip().startswith("KVL") for code in args.select.split(","))
    py = harness.python()
    common = ["--format=%(path)s:%(row)d:%(col)d: %(code)s", *(["--select", args.select] if args.select else []),
              str(package.name)]
    commands = {
        "flake8 (kvlint not registered)": [py, "-c", LAUNCHER, DISTRIBUTION, *common],
        "flake8 (KVL plugin registered)": [py, "-c", LAUNCHER, NOTHING, *common],
    }
    cwd = package.parent
    machine = harness.machine()
    series = harness.compare(commands, args.runs, cwd=cwd, warmup=False)
    without, with_plugin = series["flake8 (kvlint not registered)"].last, series["flake8 (KVL plugin registered)"].last
    plain = without.stdout.splitlines()
    kvl = [line for line in with_plugin.stdout.splitlines() if ": KVL" in line]
    others = [line for line in with_plugin.stdout.splitlines() if ": KVL" not in line]
    if (bool(kvl) != selects_kvl and not args.tree) or any(": KVL" in line for line in plain) \
            or sorted(others) != sorted(plain):
        raise SystemExit("the two flake8 runs differ in more than the KVL messages: the comparison is not fair")
    base, plugin = series["flake8 (kvlint not registered)"], series["flake8 (KVL plugin registered)"]
    cpu_ratio, wall_ratio = harness.ratio(plugin, base)
    options = "".join(f" {option} {value}" for option, value in (("--tree", args.tree), ("--select", args.select))
                      if value)
    selection = f"`--select {args.select}`" if args.select else "flake8's default selection"
    body = "\n".join([
        "### flake8 plugin overhead" + (f" with `--select {args.select}`" if args.select else ""),
        "",
        f"Measured {machine}",
        "",
        f"`python benchmarks/flake8_overhead.py{options} --runs {args.runs}` on {described}. "
        f"Both runs report the same {len(plain)} messages ({selection}); the plugin run adds {len(kvl)} KVL "
        "messages.",
        "",
        harness.series_table(series, "flake8 (kvlint not registered)"),
        "",
        f"- **flake8 with the KVL plugin / without: {cpu_ratio:.3f} CPU, {wall_ratio:.3f} wall**"
        + (f" ({TREE_TARGETS if args.tree else CORPUS_TARGET})." if selects_kvl
           else " (the plugin analyses nothing: target 1.0)."),
    ])
    print(body)
    if args.update_results:
        harness.update_results("flake8_overhead" if selects_kvl else "flake8_overhead_deselected", body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
