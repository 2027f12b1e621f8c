"""kvlint over large real trees: the installed standard library and torch's Python sources.

    python benchmarks/trees.py [--update-results]

Runs ``kvlint --format json`` once over each tree and records the number of files, the findings per code
(with each finding listed), the exit status and the time. ``tests/test_robustness_trees.py`` holds the
same runs to their contract (no traceback, KVL000 only where Python fails too, no undefended finding).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import sysconfig
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import harness  # noqa: E402


def trees() -> dict[str, Path]:
    found = {"standard library": Path(sysconfig.get_paths()["stdlib"])}
    spec = importlib.util.find_spec("torch")
    if spec is not None and spec.origin is not None:
        found["torch's Python sources"] = Path(spec.origin).parent
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--update-results", action="store_true", help="write the section of benchmarks/RESULTS.md")
    args = parser.parse_args(argv)
    try:
        from kvlint.frontends.runner import discover
    except ImportError:
        from kvlint.frontends.cli import discover
    machine = harness.machine()
    rows = ["| tree | files | lines | exit | CPU s | wall s | findings per code |", "|---|---|---|---|---|---|---|"]
    listed = []
    for name, tree in trees().items():
        files = list(discover([str(tree)]))
        lines = 0
        for path in files:
            try:
                lines += Path(path).read_bytes().count(b"\n")
            except OSError:
                pass
        timing, done = harness.run_timed([harness.python(), "-m", "kvlint", "--format", "json", str(tree)],
                                         check_codes=(0, 1, 2))
        findings = json.loads(done.stdout)
        counts = Counter(f["code"] for f in findings)
        per_code = ", ".join(f"{code}: {count}" for code, count in sorted(counts.items())) or "none"
        traceback = " (traceback!)" if "Traceback" in done.stderr else ""
        rows.append(f"| {name} (`{tree}`) | {len(files)} | {lines} | {done.returncode}{traceback} | "
                    f"{timing.cpu:.1f} | {timing.wall:.1f} | {per_code} |")
        listed += [f"- `{f['path']}:{f['line']}` {f['code']} {f['message']}" for f in findings]
        listed += [f"- stderr: `{line}`" for line in done.stderr.splitlines() if line.strip()]
    body = "\n".join([
        "### kvlint over the standard library and torch",
        "",
        f"Measured {machine}",
        "",
        "`python benchmarks/trees.py`, one `kvlint --format json` run per tree (`-j 1`):",
        "",
        *rows,
        "",
        "Every finding and message:" if listed else "No finding and no message.",
        "",
        *listed,
    ])
    print(body)
    if args.update_results:
        harness.update_results("trees", body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
