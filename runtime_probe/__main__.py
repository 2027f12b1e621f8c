"""``python -m kvlint.runtime_probe SCRIPT [ARGS...]`` runs a script under the probe (the fallback where
``.pth`` start-up hooks do not run, e.g. ``python -S``); ``KVLINT_PROBE`` defaults to ``1`` here and the
other ``KVLINT_*`` variables apply as usual.

``python -m kvlint.runtime_probe --merge REPORTS... [-o OUT]`` merges the reports of several processes into
one summary (and one report with ``-o``): counts add up and the ranks' cache steps are concatenated, each
tagged with its rank. A report path as given to ``KVLINT_PROBE_REPORT`` (``report.json``) stands for the
whole set its processes wrote: itself and its ``report.rank*.json`` / ``report.pid*.json`` siblings; a
folder stands for the ``*.json`` files in it.

The summary ends with the count of processes that reported, of those expected: every process that made
a probed call lists its report in the set's roster (``report.processes``, ``config.roster_path``), and the
processes a signal stopped (SIGTERM, SIGHUP; a multiprocessing pool's ``terminate``) are named, their
reports holding their calls up to the signal.

Exit status: 0, or 1 when an error-level finding was reported; 3 when the set is incomplete: a report could
not be read (missing, not JSON, not a probe report), a rank's report is missing (fewer ranks than
``WORLD_SIZE``), a process the roster lists wrote none, or a report is a process's last periodic one (it
ended by ``os._exit``, SIGKILL or a crash, so later calls are missing). The others are still merged and
summarised, and the error names the file or the rank. 2 when the merged report cannot be written to ``-o
OUT`` (the error names the path). When the reader of the summary goes away (``--merge ... | head``), the
merge stops quietly with status 141.
"""

from __future__ import annotations

import argparse
import os
import re
import runpy
import sys
from pathlib import Path
from typing import Any

from kvlint.runtime_probe.config import roster_path
from kvlint.runtime_probe.keeper import ENDING_SIGNALS
from kvlint.runtime_probe.report import (
    ReportError, WriteError, lost_calls, merge, missing_ranks, read_report, summary, write_json,
)

from kvlint import _startup
from kvlint.catalogue.rules import ERROR
from kvlint.console import quiet_on_broken_pipe

USAGE = "python -m kvlint.runtime_probe SCRIPT [ARGS...] | --merge REPORTS... [-o OUT]"
FINDINGS, UNWRITTEN, INCOMPLETE = 1, 2, 3
_TAGGED = re.compile(r"\.(rank\d+|pid\d+)(\.pid\d+)?$")


def run_script(argv: list[str]) -> None:
    """Activate the probe and run ``argv[0]`` as ``__main__`` with ``argv`` as its ``sys.argv``."""
    os.environ.setdefault("KVLINT_PROBE", "1")
    _startup.activate_from_env()
    sys.argv = list(argv)
    sys.path[0] = os.path.dirname(os.path.abspath(argv[0]))
    runpy.run_path(argv[0], run_name="__main__")


def report_set(path: Path) -> list[Path]:
    """The files one argument of ``--merge`` stands for (the path itself when nothing else matches)."""
    if path.is_dir():
        return sorted(path.glob("*.json")) or [path / "*.json"]
    if _TAGGED.search(path.stem):
        return [path]
    siblings = sorted(p for p in path.parent.glob(f"{path.stem}.*{path.suffix}") if _TAGGED.search(p.stem))
    return ([path] if path.exists() or not siblings else []) + siblings


def _roster_of(path: Path) -> Path:
    """The roster a report file belongs to: a worker's (``.pidN``) is its parent's or its rank's."""
    return roster_path(path.with_name(re.sub(r"\.pid\d+$", "", path.stem) + path.suffix))


def expected_reports(arguments: list[Path], paths: list[Path]) -> dict[Path, Path]:
    """Report file -> the roster that lists it, over the rosters of the merged set (``config.roster_path``:
    every process that made a probed call is listed there)."""
    rosters = {_roster_of(path) for path in paths}
    rosters |= {roster for argument in arguments
                for roster in (argument.glob("*.processes") if argument.is_dir() else [_roster_of(argument)])}
    expected: dict[Path, Path] = {}
    for roster in sorted(rosters):
        try:
            names = roster.read_text(encoding="utf-8").split()
        except OSError:  # no roster: reports from before rosters, or no process made a call
            continue
        for name in names:
            expected.setdefault(roster.with_name(name), roster)
    return expected


def process_line(report: dict[str, Any], reported: int) -> str:
    """How many processes reported, of how many the rosters expected, and how many a signal stopped."""
    expected = report["expected_processes"]
    line = f"processes: {reported} reported" + (f" of {expected} expected" if expected is not None else "")
    stopped = [p for p in report["processes"] if p.get("interrupted") in ENDING_SIGNALS and not p.get("complete")]
    if stopped:
        signals = ", ".join(sorted({p["interrupted"] for p in stopped}))
        line += f"; {len(stopped)} stopped by {signals} (their reports hold their calls up to the signal)"
    return line


def merge_reports(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m kvlint.runtime_probe --merge")
    parser.add_argument("files", nargs="+", type=Path, metavar="REPORTS")
    parser.add_argument("-o", "--output", type=Path, help="write the merged JSON report here")
    options = parser.parse_args(argv)
    paths = list(dict.fromkeys(p for argument in options.files for p in report_set(argument)))
    reports, errors, contents, read_paths = [], [], [], []
    for path in paths:
        try:
            reports.append(read_report(path))
        except ReportError as error:
            errors.append(str(error))
            contents.append(None)
        else:
            contents.append(reports[-1])
            read_paths.append(path)
    report = merge(reports)
    errors += [f"no report from rank {rank} (WORLD_SIZE={report['processes'][0]['world_size']}): it did not write "
               "one (did it exit early?)" for rank in missing_ranks(report)]
    expected = expected_reports(options.files, paths)
    errors += [f"{path}: no report, though {roster.name} lists it (the process made probed calls and ended "
               "before its first write: killed?)" for path, roster in expected.items() if not path.exists()]
    errors += [f"{path}: incomplete: the process ended without its final report (os._exit, SIGKILL, a crash); "
               "calls after its last periodic write are missing" for path, read in zip(paths, contents)
               if read is not None and lost_calls(read)]
    report["expected_processes"] = len(set(expected) | set(read_paths)) if expected else None
    report["complete"] = not errors and all(p.get("complete", True) for p in report["processes"])
    if reports:
        print(summary(report))
        print(process_line(report, len(reports)))
    for error in errors:
        print(f"kvlint-probe: error: {error}", file=sys.stderr)
    if options.output is not None:
        try:
            write_json(report, options.output)
        except WriteError as error:
            print(f"kvlint-probe: error: {error}", file=sys.stderr)
            return UNWRITTEN
    if errors:
        return INCOMPLETE
    return FINDINGS if any(finding["severity"] == ERROR for finding in report["findings"]) else 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print(f"usage: {USAGE}", file=sys.stderr if not argv else sys.stdout)
        return 2 if not argv else 0
    if argv[0] == "--merge":
        return quiet_on_broken_pipe(lambda: merge_reports(argv[1:]))
    run_script(argv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
