"""What a user can configure about the analysis, and the text gate those settings imply.

Imports nothing of kvlint: the checks, the engine and every front-end read it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

DEFAULT_KV_LEN_NAMES = ("kv_len", "kv_lens", "kv_seq_len", "cache_len", "cache_position", "seq_lens")
DEFAULT_FILE_TIME_LIMIT = 60.0
"""CPU seconds one file's analysis may take (benchmarks/RESULTS.md, ``file_limits``: the slowest of a real tree's
files took 0.86 s, the generated 50,000-line module 24 s, one function of 4,000 operator calls 48 s)."""
DEFAULT_FILE_MEMORY_LIMIT = 2**30
"""Bytes of resident memory one file's analysis may add to the process (1 GiB)."""


@dataclass(frozen=True)
class FileLimits:
    """How much analysing one file may cost before the front-end skips it with a warning (None: no limit)."""

    seconds: float | None = DEFAULT_FILE_TIME_LIMIT
    """CPU time of the process from the start of the file's analysis."""
    memory: int | None = DEFAULT_FILE_MEMORY_LIMIT
    """Growth of the process's resident memory from the start of the file's analysis, in bytes."""


_BINARY = (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10))
_DECIMAL = (("GB", 10**9), ("MB", 10**6), ("KB", 10**3))


def format_seconds(seconds: float) -> str:
    return f"{seconds:g} s"


def format_size(size: int) -> str:
    """``1 GiB``, ``512 MiB``, ``2 GB``: the largest unit the size is a whole number of, else ``B``."""
    for name, unit in (*_BINARY, *_DECIMAL):
        if size >= unit and size % unit == 0:
            return f"{size // unit} {name}"
    return f"{size} B"


@dataclass(frozen=True)
class Settings:
    """What a user can configure about the analysis itself (selection is the front-ends' business)."""

    kv_len_names: tuple[str, ...] = DEFAULT_KV_LEN_NAMES
    extra_fa_wrappers: dict[str, str] = field(default_factory=dict)
    """Dotted name of a user's wrapper -> the operator it stands for."""
    limits: FileLimits = FileLimits()
    """How much analysing one file may cost (``kvlint.checks.limits`` meters it)."""

    def gate_words(self) -> tuple[str, ...]:
        return ("npu_", "torch_npu", "scatter_update", "scaled_dot_product_attention", *self.kv_len_names,
                *(name.rpartition(".")[2] for name in self.extra_fa_wrappers))


DEFAULT_SETTINGS = Settings()


def may_have_findings(source: str, settings: Settings = DEFAULT_SETTINGS) -> bool:
    """The text gate: False when no rule can possibly fire on this source."""
    return any(word in source for word in settings.gate_words())
