"""The probe's settings, read from the environment once at activation.

``KVLINT_PROBE``: ``1``/``on`` validate every call and compare a sample with the reference,
``validate`` validate only, ``strict`` like ``on`` but raise ``ProbeError`` at the first error-level
finding, ``0``/``off``/unset nothing. ``KVLINT_PROBE_SAMPLE``: compare the first N calls of each call
site (``all``: every call). ``KVLINT_PROBE_REPORT``: path of the JSON report, made per-rank
(``path.rank3.json``) when ``RANK`` or ``LOCAL_RANK`` is set so that torchrun workers do not overwrite
each other's report.
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


@dataclass(frozen=True)
class Settings:
    compare: bool = True
    strict: bool = False
    sample: int | None = DEFAULT_SAMPLE
    """Calls compared per call site; None compares every call."""
    report_path: Path | None = None


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
        sample=_sample(environ.get("KVLINT_PROBE_SAMPLE", "")),
        report_path=_report_path(environ),
    )


def _sample(value: str) -> int | None:
    value = value.strip().lower()
    if value == "all":
        return None
    if value.isdigit():
        return int(value)
    if value:
        print(f"kvlint: KVLINT_PROBE_SAMPLE={value!r} is not a count or 'all'; using {DEFAULT_SAMPLE}",
              file=sys.stderr)
    return DEFAULT_SAMPLE


def _report_path(environ: Mapping[str, str]) -> Path | None:
    value = environ.get("KVLINT_PROBE_REPORT", "").strip()
    if not value:
        return None
    path = Path(value)
    rank = environ.get("RANK", "").strip() or environ.get("LOCAL_RANK", "").strip()
    return rank_path(path, rank) if rank else path


def rank_path(path: Path, rank: str) -> Path:
    """``report.json`` -> ``report.rank3.json`` (the suffix is kept last so tools still see JSON)."""
    return path.with_name(f"{path.stem}.rank{rank}{path.suffix or '.json'}")
