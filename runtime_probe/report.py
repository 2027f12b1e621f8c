"""What the probe saw: per-site counters and findings, the exit summary, the JSON report and merging.

The JSON shape is a public contract::

    {"findings": [{"code", "symbol", "severity", "message", "op", "path", "line", "count"}],
     "sites": [{"op", "path", "line", "calls", "validated", "compared", "max_abs_err", "max_rel_err"}],
     "cache": {"timing_source", "peak_bytes_per_s", "steps": [...]}}

``cache`` (the KV bytes the attention calls read per step) is described in ``cache_summary``.

Codes, symbols and severities come from ``kvlint.catalogue.rules`` only. A finding is printed on stderr the first
time its (site, code) occurs; later occurrences are counted.
"""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, TextIO

from kvlint.runtime_probe.cache_summary import merge_sections, section_lines

from kvlint.catalogue.rules import RULES


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

    def start_call(self, op: str, path: str, line: int) -> int:
        """Count a call at its site; returns the call's number there (1 for the first)."""
        with self._lock:
            site = self.sites.setdefault((op, path, line), Site(op, path, line))
            site.calls += 1
            return site.calls

    def validated(self, op: str, path: str, line: int) -> None:
        with self._lock:
            self.sites[(op, path, line)].validated += 1

    def compared(self, op: str, path: str, line: int, abs_err: float, rel_err: float) -> None:
        with self._lock:
            site = self.sites[(op, path, line)]
            site.compared += 1
            site.max_abs_err = _max(site.max_abs_err, abs_err)
            site.max_rel_err = _max(site.max_rel_err, rel_err)

    def add(self, code: str, message: str, op: str, path: str, line: int) -> Finding:
        """Count a finding; print it when its (site, code) is new."""
        rule = RULES[code]
        with self._lock:
            finding = self.findings.get((op, path, line, code))
            if finding is not None:
                finding.count += 1
                return finding
            finding = Finding(code, rule.symbol, rule.severity, message, op, path, line)
            self.findings[finding.key] = finding
        stream = self._stream or sys.stderr
        print(f"kvlint-probe: {path}:{line}: {code} {rule.symbol}: {message} [{op}]", file=stream)
        return finding

    def as_json(self) -> dict[str, list[dict[str, object]]]:
        with self._lock:
            return {
                "findings": [asdict(f) for f in self.findings.values()],
                "sites": [asdict(s) for s in self.sites.values()],
            }


def write_json(report: dict[str, Any], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")


def merge(reports: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """One report from several (one per rank): counts add up, errors take the maximum, the cache steps of
    the ranks are concatenated (``cache_summary.merge_sections``)."""
    reports = list(reports)
    sites: dict[tuple[str, str, int], Site] = {}
    findings: dict[tuple[str, str, int, str], Finding] = {}
    for report in reports:
        for entry in report["sites"]:
            site = Site(**entry)  # type: ignore[arg-type]
            total = sites.setdefault(site.key, Site(site.op, site.path, site.line))
            total.calls += site.calls
            total.validated += site.validated
            total.compared += site.compared
            total.max_abs_err = _max(total.max_abs_err, site.max_abs_err)
            total.max_rel_err = _max(total.max_rel_err, site.max_rel_err)
        for entry in report["findings"]:
            finding = Finding(**entry)  # type: ignore[arg-type]
            if finding.key in findings:
                findings[finding.key].count += finding.count
            else:
                findings[finding.key] = finding
    return {"findings": [asdict(f) for f in findings.values()], "sites": [asdict(s) for s in sites.values()],
            "cache": merge_sections(report.get("cache") for report in reports)}


def summary(report: dict[str, Any]) -> str:
    """The per-site table printed at exit and by ``--merge``, then the cache section when there is one."""
    by_site: dict[tuple[object, object, object], list[str]] = {}
    for f in report["findings"]:
        by_site.setdefault((f["op"], f["path"], f["line"]), []).append(f"{f['code']}x{f['count']}")
    header = ("site", "operator", "calls", "validated", "compared", "findings", "max abs err")
    rows = [header]
    for s in report["sites"]:
        err = s["max_abs_err"]
        rows.append((
            f"{s['path']}:{s['line']}", str(s["op"]), str(s["calls"]), str(s["validated"]), str(s["compared"]),
            " ".join(by_site.get((s["op"], s["path"], s["line"]), [])) or "-",
            "-" if err is None else f"{err:.3g}",
        ))
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in rows]
    total = sum(int(f["count"]) for f in report["findings"])  # type: ignore[call-overload]
    return "\n".join(["kvlint probe summary", *lines, f"{len(rows) - 1} call site(s), {total} finding(s)",
                      *section_lines(report.get("cache"))])
