"""What the probe saw: per-site counters and findings, the exit summary, the JSON report and merging.

The JSON shape is a public contract::

    {"findings": [{"code", "symbol", "severity", "message", "op", "path", "line", "count"}],
     "sites": [{"op", "path", "line", "calls", "validated", "compared", "max_abs_err", "max_rel_err",
                "raised", "first_raise", "probe_seconds"}],
     "cache": {"timing_source", "peak_bytes_per_s", "steps": [...], "unmeasured_steps", "dropped_steps"},
     "process": {"pid", "parent_pid", "rank", "world_size", "operator_calls"},
     "complete": bool, "interrupted": "SIGTERM" | "SIGHUP" | "SIGINT" | null}

``raised`` counts the calls at the site whose operator raised (the exception reached the program
unchanged) and ``first_raise`` is the first one's ``Type: message``; ``probe_seconds`` is the probe's own
host time at the site (the operator's time excluded). ``cache`` (the KV bytes the attention calls read
per step) is described in ``cache_summary``. ``process`` says which process wrote the report; a merged
report has ``"processes"``, the list of them (each with its report's ``complete`` and ``interrupted``),
instead. ``complete`` is true only in the report written at the process's normal exit (``keeper``);
``interrupted`` names the signal that stopped or interrupted it.
Reports are written atomically (``write_json``).

Codes, symbols and severities come from ``kvlint.catalogue.rules`` only. A finding is printed on stderr the
first time its (site, code) occurs; later occurrences are counted.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import tempfile
import threading
from collections.abc import Iterable
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any, TextIO

from kvlint.runtime_probe.cache_summary import merge_sections, section_lines

from kvlint.catalogue.rules import LEVELS, RULES

NO_CALL = "no operator call"


@dataclass
class Site:
    op: str
    path: str
    line: int
    calls: int = 0
    validated: int = 0
    compared: int = 0
    max_abs_err: float | None = None
    max_rel_err: float | None = None
    raised: int = 0
    first_raise: str | None = None
    probe_seconds: float = 0.0

    @property
    def key(self) -> tuple[str, str, int]:
        return (self.op, self.path, self.line)


@dataclass
class Finding:
    code: str
    symbol: str
    severity: str
    message: str
    op: str
    path: str
    line: int
    count: int = 1

    @property
    def key(self) -> tuple[str, str, int, str]:
        return (self.op, self.path, self.line, self.code)


def _max(a: float | None, b: float | None) -> float | None:
    return b if a is None else a if b is None else max(a, b)


class Recorder:
    """Thread-safe store of sites and findings; the only mutable state shared between probed calls."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self._lock = threading.Lock()
        self._stream = stream
        self.sites: dict[tuple[str, str, int], Site] = {}
        self.findings: dict[tuple[str, str, int, str], Finding] = {}

    def start_call(self, op: str, path: str, line: int) -> tuple[Site, int]:
        """Count a call at its site; returns the site and the call's number there (1 for the first)."""
        with self._lock:
            site = self.sites.get((op, path, line))
            if site is None:
                site = self.sites[(op, path, line)] = Site(op, path, line)
            site.calls += 1
            return site, site.calls

    def finish_call(self, site: Site, validated: bool, probe_seconds: float) -> None:
        """The end of a call that ``start_call`` counted at ``site``."""
        with self._lock:
            site.validated += validated
            site.probe_seconds += probe_seconds

    def compared(self, op: str, path: str, line: int, abs_err: float, rel_err: float) -> None:
        with self._lock:
            site = self.sites[(op, path, line)]
            site.compared += 1
            site.max_abs_err = _max(site.max_abs_err, abs_err)
            site.max_rel_err = _max(site.max_rel_err, rel_err)

    def raised(self, op: str, path: str, line: int, error: BaseException) -> None:
        """The operator raised on a call at this site (the program got the exception)."""
        with self._lock:
            site = self.sites[(op, path, line)]
            site.raised += 1
            if site.first_raise is None:
                site.first_raise = f"{type(error).__name__}: {error}".splitlines()[0][:300]

    def add(self, code: str, message: str, op: str, path: str, line: int, count: int = 1,
            severity: str | None = None) -> Finding:
        """Count a finding; print it when its (site, code) is new, or when it comes back at a higher level
        than before (which it then takes, with its message). ``severity``: the rule's own level unless said."""
        rule = RULES[code]
        level = severity or rule.severity
        with self._lock:
            finding = self.findings.get((op, path, line, code))
            if finding is not None:
                finding.count += count
                if LEVELS.index(level) <= LEVELS.index(finding.severity):
                    return finding
                finding.severity, finding.message = level, message
            else:
                finding = Finding(code, rule.symbol, level, message, op, path, line, count)
                self.findings[finding.key] = finding
        stream = self._stream or sys.stderr
        shown = "" if level == rule.severity else f" ({level})"
        print(f"kvlint-probe: {path}:{line}: {code} {rule.symbol}{shown}: {message} [{op}]", file=stream)
        return finding

    def as_json(self) -> dict[str, list[dict[str, object]]]:
        with self._lock:
            return {
                "findings": [asdict(f) for f in self.findings.values()],
                "sites": [asdict(s) for s in self.sites.values()],
            }


class WriteError(OSError):
    """A report that could not be written; the message names the path and why."""


def _why(error: OSError) -> str:
    return error.strerror or str(error)


def write_json(report: dict[str, Any], path: Path) -> None:
    """Write ``report`` to ``path`` atomically: into a temporary file of the same folder, then renamed over
    ``path``, so that a reader (or a full disk) never sees a partial report in place of the previous one."""
    text = json.dumps(report, indent=2) + "\n"
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handle = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)  # the umask applies, as usual
    except OSError as error:
        raise WriteError(f"{path}: cannot write the report ({_why(error)})") from None
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as stream:
            stream.write(text)
        os.replace(temporary, path)
    except BaseException as error:  # KeyboardInterrupt included: no temporary file is left behind
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        if isinstance(error, OSError):
            raise WriteError(f"{path}: cannot write the report ({_why(error)})") from None
        raise


def check_writable(folder: Path) -> str | None:
    """Why reports cannot be written in ``folder`` (created when missing), or None when they can."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder, prefix=".kvlint-probe-check."):
            pass
    except OSError as error:
        return _why(error)
    return None


class ReportError(ValueError):
    """A report file that cannot be merged; the message names the file and why."""


def read_report(path: Path) -> dict[str, Any]:
    """One report file, checked for the keys a merge needs."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise ReportError(f"{path}: cannot read it ({error.strerror or error})") from None
    try:
        report = json.loads(text)
    except ValueError as error:
        raise ReportError(f"{path}: not JSON ({error})") from None
    if not isinstance(report, dict) or not isinstance(report.get("findings"), list) or \
            not isinstance(report.get("sites"), list):
        raise ReportError(f"{path}: not a kvlint probe report (no 'findings' and 'sites' lists)")
    return report


def _known(cls: type, entry: dict[str, Any]) -> dict[str, Any]:
    """The entry's fields that ``cls`` has (a report from an older or newer kvlint still merges)."""
    names = {f.name for f in fields(cls)}
    return {key: value for key, value in entry.items() if key in names}


def merge(reports: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """One report from several (one per process or rank): counts add up, errors take the maximum, the
    cache steps of the ranks are concatenated (``cache_summary.merge_sections``)."""
    reports = list(reports)
    sites: dict[tuple[str, str, int], Site] = {}
    findings: dict[tuple[str, str, int, str], Finding] = {}
    for report in reports:
        for entry in report["sites"]:
            site = Site(**_known(Site, entry))
            total = sites.setdefault(site.key, Site(site.op, site.path, site.line))
            total.calls += site.calls
            total.validated += site.validated
            total.compared += site.compared
            total.max_abs_err = _max(total.max_abs_err, site.max_abs_err)
            total.max_rel_err = _max(total.max_rel_err, site.max_rel_err)
            total.raised += site.raised
            total.first_raise = total.first_raise or site.first_raise
            total.probe_seconds += site.probe_seconds
        for entry in report["findings"]:
            finding = Finding(**_known(Finding, entry))
            if finding.key in findings:
                findings[finding.key].count += finding.count
            else:
                findings[finding.key] = finding
    processes = [process if "processes" in report else
                 {**process, "complete": report.get("complete", True), "interrupted": report.get("interrupted")}
                 for report in reports for process in (report.get("processes") or [report.get("process")]) if process]
    return {"findings": [asdict(f) for f in findings.values()], "sites": [asdict(s) for s in sites.values()],
            "cache": merge_sections(report.get("cache") for report in reports), "processes": processes}


def missing_ranks(report: dict[str, Any]) -> list[int]:
    """Ranks below the world size that no merged process reported (a rank that died before writing)."""
    processes = report.get("processes") or []
    sizes = {p.get("world_size") for p in processes if isinstance(p.get("world_size"), int)}
    if len(sizes) != 1:
        return []
    seen = {p.get("rank") for p in processes}
    return [rank for rank in range(sizes.pop()) if rank not in seen]


def lost_calls(report: dict[str, Any]) -> bool:
    """The process ended without a final write (``os._exit``, SIGKILL, a crash): the report is its last
    periodic one, and calls after it are missing. A report stopped by a signal holds its calls up to it."""
    return report.get("complete") is False and report.get("interrupted") is None


def _table(rows: list[tuple[str, ...]]) -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in rows]


def _microseconds(seconds: float, calls: int) -> str:
    return f"{seconds / calls * 1e6:.1f}" if calls else "-"


def summary(report: dict[str, Any]) -> str:
    """The per-site table printed at exit and by ``--merge``, the raised calls, the probe's own time per
    call, then the cache section when there is one."""
    if not report["sites"]:
        return f"kvlint probe summary: {NO_CALL}"
    by_site: dict[tuple[object, object, object], list[str]] = {}
    for f in report["findings"]:
        by_site.setdefault((f["op"], f["path"], f["line"]), []).append(f"{f['code']}x{f['count']}")
    header = ("site", "operator", "calls", "validated", "compared", "raised", "findings", "max abs err",
              "probe us/call")
    rows = [header]
    raised = []
    for s in report["sites"]:
        err = s["max_abs_err"]
        rows.append((
            f"{s['path']}:{s['line']}", str(s["op"]), str(s["calls"]), str(s["validated"]), str(s["compared"]),
            str(s.get("raised", 0)), " ".join(by_site.get((s["op"], s["path"], s["line"]), [])) or "-",
            "-" if err is None else f"{err:.3g}", _microseconds(s.get("probe_seconds", 0.0), s["calls"]),
        ))
        if s.get("raised"):
            raised.append(f"{s['path']}:{s['line']}: {s['raised']} call(s) of {s['op']} raised; first: "
                          f"{s['first_raise']}")
    total = sum(int(f["count"]) for f in report["findings"])  # type: ignore[call-overload]
    calls = sum(int(s["calls"]) for s in report["sites"])
    probe_seconds = sum(float(s.get("probe_seconds", 0.0)) for s in report["sites"])
    return "\n".join(["kvlint probe summary", *_table(rows), *raised,
                      f"{len(rows) - 1} call site(s), {total} finding(s)",
                      f"probe time: {_microseconds(probe_seconds, calls)} us per call over {calls} call(s)",
                      *section_lines(report.get("cache"))])
