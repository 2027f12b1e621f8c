"""pylint's overhead from the kvlint plugin: ``pylint`` with its default checks, then the same plus
``--load-plugins kvlint``.

    python benchmarks/pylint_overhead.py [--corpus DIR] [--runs N] [--update-results]

Both runs use pylint's defaults (every default checker, ``--jobs 1``, no configuration file: the corpus folder
has none and ``PYLINTRC`` points nowhere), with ``--score=n`` and the text output sent to a pipe. The only
difference is ``--load-plugins kvlint``. The benchmark checks that the plugin run reports kvlint's messages
(E71xx/W71xx) and that the two runs otherwise report the same messages.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import corpus  # noqa: E402
import harness  # noqa: E402

KVLINT_MESSAGE = re.compile(r": [EW]7[123]\d\d: ")


def messages(output: str) -> list[str]:
    return sorted(line for line in output.splitlines() if re.match(r"^\S+:\d+:\d+: [A-Z]\d{4}: ", line))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", help="corpus folder to build in (default: a new temporary folder)")
    parser.add_argument("--runs", type=int, default=3, help="rounds per command (default 3; one round is ~1 min)")
    parser.add_argument("--update-results", action="store_true", help="write the section of benchmarks/RESULTS.md")
    args = parser.parse_args(argv)
    package, summary = corpus.ensure(args.corpus)
    py = harness.python()
    home = tempfile.mkdtemp(prefix="kvlint-pylinthome-")
    env = harness.timed_environment(PYLINTHOME=home, PYLINTRC=os.path.join(home, "none"))
    common = ["--score=n", "--jobs=1", package.name]
    commands = {
        "pylint": [py, "-m", "pylint", *common],
        "pylint --load-plugins kvlint": [py, "-m", "pylint", "--load-plugins", "kvlint", *common],
    }
    cwd = package.parent
    machine = harness.machine()
    series = harness.compare(commands, args.runs, cwd=cwd, env=env, warmup=False, check_codes=range(0, 64))
    plain, plugin = (one.last for one in series.values())
    plain_messages, plugin_messages = messages(plain.stdout), messages(plugin.stdout)
    kvl = [m for m in plugin_messages if KVLINT_MESSAGE.search(m)]
    others = [m for m in plugin_messages if not KVLINT_MESSAGE.search(m)]
    if not kvl or others != plain_messages:
        raise SystemExit("the two pylint runs differ in more than kvlint's messages: the comparison is not fair")
    base, with_plugin = series.values()
    cpu_ratio, wall_ratio = harness.ratio(with_plugin, base)
    body = "\n".join([
        "### pylint plugin overhead",
        "",
        f"Measured {machine}",
        "",
        f"`python benchmarks/pylint_overhead.py --runs {args.runs}` on the corpus: {corpus.describe(summary)}. "
        f"Both runs report the same {len(plain_messages)} pylint messages; the plugin run adds {len(kvl)} kvlint "
        "messages.",
        "",
        harness.series_table(series, "pylint"),
        "",
        f"- **pylint --load-plugins kvlint / pylint: {cpu_ratio:.3f} CPU, {wall_ratio:.3f} wall** (target <= 1.10).",
    ])
    print(body)
    if args.update_results:
        harness.update_results("pylint_overhead", body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
