"""The probe's settings, read from the environment once at activation.

``KVLINT_PROBE``: ``1``/``on`` validate every call and compare a sample with the reference,
``validate`` validate only, ``strict`` like ``on`` but raise ``ProbeError`` at the first error-level
finding, ``0``/``off``/unset nothing. ``KVLINT_PROBE_SAMPLE``: compare the first N calls of each call
site (``all``: every call).

What is validated on which call: a call site's first call with a given argument signature (dtypes,
shapes, keyword set, layout, modes) gets every check; later calls with that signature are counted, and the
findings of the checks that follow from the signature alone are counted again, at a cost of a few
microseconds. The checks that read values (lengths, block ids, slots, outputs; on a device each is a host
sync) run on sampled calls: the first ``KVLINT_PROBE_VALUE_FIRST`` calls of each site (default 256,
``all``: every call), then every ``KVLINT_PROBE_VALUE_EVERY``-th (default 1024, ``0``: never).

``KVLINT_PROBE_DUMP``: a folder where each call site's first error-level finding writes a reproduction
(``dump``), at most ``KVLINT_PROBE_DUMP_MAX`` bytes of tensors per site (default 64 MiB; ``512MiB``, ``1GB``,
bytes). A worker process dumps only when its folder was set for it: a value other than the one its probed
parent had (exported as ``KVLINT_PROBE_DUMP_PARENT``).

``KVLINT_PROBE_REPORT``: path of the JSON report, rewritten every ``KVLINT_PROBE_REPORT_EVERY`` seconds
(default 5) while the program runs (``keeper``), made per-rank (``path.rank3.json``) when ``RANK`` or
``LOCAL_RANK`` is set; a process started by a probed process (a spawned or forked worker, which inherits
``KVLINT_PROBE_PARENT``) adds its pid (``path.pid4242.json``), so no process overwrites another's report.
Each process that makes a probed call adds its report's name to ``path.processes`` (``roster_path``),
which the process that started the run empties at its start.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

OFF_VALUES = frozenset({"", "0", "off", "false", "no"})
ON_VALUES = frozenset({"1", "on", "true", "yes"})
DEFAULT_SAMPLE = 3
DEFAULT_VALUE_FIRST = 256
DEFAULT_VALUE_EVERY = 1024
DEFAULT_REPORT_EVERY = 5.0
DEFAULT_DUMP_MAX = 64 << 20
DUMP_PARENT_VARIABLE = "KVLINT_PROBE_DUMP_PARENT"
"""Set by the first probed process to its ``KVLINT_PROBE_DUMP``: a worker that inherited the same folder does
not dump."""
PARENT_VARIABLE = "KVLINT_PROBE_PARENT"
"""Set by the first probed process to its pid; a process that inherits another pid is a worker."""


@dataclass(frozen=True)
class Settings:
    compare: bool = True
    strict: bool = False
    sample: int | None = DEFAULT_SAMPLE
    """Calls compared per call site; None compares every call."""
    report_path: Path | None = None
    value_first: int | None = DEFAULT_VALUE_FIRST
    """Calls of each site whose values are all checked; None checks every call."""
    value_every: int = DEFAULT_VALUE_EVERY
    """After the first ones, every n-th call of a site is value-checked (0: none)."""
    report_every: float = DEFAULT_REPORT_EVERY
    """Seconds between rewrites of the report while the program runs (``keeper``)."""
    dump_dir: Path | None = None
    """Where each call site's first error-level finding writes its reproduction (None: nowhere)."""
    dump_max: int = DEFAULT_DUMP_MAX
    """Tensor bytes dumped per site at most."""

    def value_checked(self, number: int) -> bool:
        """Whether the ``number``-th call of a site (1 for the first) gets the value checks."""
        first = self.value_first
        return first is None or number <= first or (self.value_every > 0 and number % self.value_every == 0)


def from_env(environ: Mapping[str, str] = os.environ) -> Settings | None:
    """The settings for this process, or None when the probe is off (or the value is not understood)."""
    mode = environ.get("KVLINT_PROBE", "").strip().lower()
    if mode in OFF_VALUES:
        return None
    if mode not in ON_VALUES | {"validate", "strict"}:
        print(f"kvlint: KVLINT_PROBE={mode!r} not understood (use 1, validate, strict or 0); probe off",
              file=sys.stderr)
        return None
    return Settings(
        compare=mode != "validate",
        strict=mode == "strict",
        sample=_count("KVLINT_PROBE_SAMPLE", environ, DEFAULT_SAMPLE),
        report_path=_report_path(environ),
        value_first=_count("KVLINT_PROBE_VALUE_FIRST", environ, DEFAULT_VALUE_FIRST),
        value_every=_count("KVLINT_PROBE_VALUE_EVERY", environ, DEFAULT_VALUE_EVERY, allow_all=False) or 0,
        report_every=_seconds("KVLINT_PROBE_REPORT_EVERY", environ, DEFAULT_REPORT_EVERY),
        dump_dir=Path(environ["KVLINT_PROBE_DUMP"].strip()) if environ.get("KVLINT_PROBE_DUMP", "").strip() else None,
        dump_max=_bytes("KVLINT_PROBE_DUMP_MAX", environ, DEFAULT_DUMP_MAX),
    )


def _seconds(variable: str, environ: Mapping[str, str], default: float) -> float:
    """A non-negative number of seconds; anything else is announced and the default used."""
    value = environ.get(variable, "").strip()
    try:
        seconds = float(value) if value else default
    except ValueError:
        seconds = -1.0
    if 0 <= seconds < float("inf"):
        return seconds
    print(f"kvlint: {variable}={value!r} is not a number of seconds; using {default:g}", file=sys.stderr)
    return default


_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30}


def _bytes(variable: str, environ: Mapping[str, str], default: int) -> int:
    """A size: bytes, or a number with KB/MB/GB or KiB/MiB/GiB; anything else is announced and the default used."""
    value = environ.get(variable, "").strip()
    number, unit = value.rstrip("kKmMgGiIbB"), value.lstrip("0123456789.").lower()
    try:
        return int(float(number) * _UNITS[unit])
    except (ValueError, KeyError):
        if value:
            print(f"kvlint: {variable}={value!r} is not a size (bytes, or e.g. 64MiB); using {default}",
                  file=sys.stderr)
        return default


def _count(variable: str, environ: Mapping[str, str], default: int, allow_all: bool = True) -> int | None:
    """A count of calls, ``all`` (None) where allowed; anything else is announced and the default used."""
    value = environ.get(variable, "").strip().lower()
    if allow_all and value == "all":
        return None
    if value.isdigit():
        return int(value)
    if value:
        expected = "a count or 'all'" if allow_all else "a count"
        print(f"kvlint: {variable}={value!r} is not {expected}; using {default}", file=sys.stderr)
    return default


def rank(environ: Mapping[str, str] = os.environ) -> str:
    """This process's rank (``RANK``, else ``LOCAL_RANK``), or empty."""
    return environ.get("RANK", "").strip() or environ.get("LOCAL_RANK", "").strip()


def _report_path(environ: Mapping[str, str]) -> Path | None:
    value = environ.get("KVLINT_PROBE_REPORT", "").strip()
    if not value:
        return None
    path = Path(value)
    return rank_path(path, rank(environ)) if rank(environ) else path


def rank_path(path: Path, rank: str) -> Path:
    """``report.json`` -> ``report.rank3.json`` (the suffix is kept last so tools still see JSON)."""
    return _suffixed(path, f"rank{rank}")


def worker_path(path: Path, pid: int) -> Path:
    """``report.json`` -> ``report.pid4242.json``: the report of a worker process."""
    return _suffixed(path, f"pid{pid}")


def roster_path(path: Path) -> Path:
    """``report.json`` -> ``report.processes``: the report files of the processes that made probed calls,
    one a line, each added by its process at its first call (``--merge`` expects each of them)."""
    return path.with_name(f"{path.stem}.processes")


def _suffixed(path: Path, tag: str) -> Path:
    return path.with_name(f"{path.stem}.{tag}{path.suffix or '.json'}")
