"""``python -m kvlint.runtime_probe SCRIPT [ARGS...]`` runs a script under the probe (the fallback where
``.pth`` start-up hooks do not run, e.g. ``python -S``); ``KVLINT_PROBE`` defaults to ``1`` here and the
other ``KVLINT_*`` variables apply as usual.

``python -m kvlint.runtime_probe --merge FILES... [-o OUT]`` merges per-rank JSON reports into one summary
(and one report with ``-o``): counts add up and the ranks' cache steps are concatenated, each tagged with
its rank; the exit status is 1 when any error-level finding was reported.
"""

from __future__ import annotations

import argparse
import json
import os
import runpy
import sys
from pathlib import Path

from kvlint.runtime_probe.report import merge, summary, write_json

from kvlint import _startup
from kvlint.catalogue.rules import ERROR

USAGE = "python -m kvlint.runtime_probe SCRIPT [ARGS...] | --merge FILES... [-o OUT]"


def run_script(argv: list[str]) -> None:
    """Activate the probe and run ``argv[0]`` as ``__main__`` with ``argv`` as its ``sys.argv``."""
    os.environ.setdefault("KVLINT_PROBE", "1")
    _startup.activate_from_env()
    sys.argv = list(argv)
    sys.path[0] = os.path.dirname(os.path.abspath(argv[0]))
    runpy.run_path(argv[0], run_name="__main__")


def merge_reports(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m kvlint.runtime_probe --merge")
    parser.add_argument("files", nargs="+", type=Path)
    parser.add_argument("-o", "--output", type=Path, help="write the merged JSON report here")
    options = parser.parse_args(argv)
    report = merge(json.loads(path.read_text(encoding="utf-8")) for path in options.files)
    print(summary(report))
    if options.output is not None:
        write_json(report, options.output)
    return 1 if any(finding["severity"] == ERROR for finding in report["findings"]) else 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print(f"usage: {USAGE}", file=sys.stderr if not argv else sys.stdout)
        return 2 if not argv else 0
    if argv[0] == "--merge":
        return merge_reports(argv[1:])
    run_script(argv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
