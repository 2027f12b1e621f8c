"""What a user can configure about the analysis, and the text gate those settings imply.

Imports nothing of kvlint: the checks, the engine and every front-end read it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

DEFAULT_KV_LEN_NAMES = ("kv_len", "kv_lens", "kv_seq_len", "cache_len", "cache_position", "seq_lens")


@dataclass(frozen=True)
class Settings:
    """What a user can configure about the analysis itself (selection is the front-ends' business)."""

    kv_len_names: tuple[str, ...] = DEFAULT_KV_LEN_NAMES
    extra_fa_wrappers: dict[str, str] = field(default_factory=dict)
    """Dotted name of a user's wrapper -> the operator it stands for."""

    def gate_words(self) -> tuple[str, ...]:
        return ("npu_", "torch_npu", "scatter_update", "scaled_dot_product_attention", *self.kv_len_names,
                *(name.rpartition(".")[2] for name in self.extra_fa_wrappers))


DEFAULT_SETTINGS = Settings()


def may_have_findings(source: str, settings: Settings = DEFAULT_SETTINGS) -> bool:
    """The text gate: False when no rule can possibly fire on this source."""
    return any(word in source for word in settings.gate_words())
