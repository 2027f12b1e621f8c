"""The rule catalogue: one row per rule, used by every front-end, the documentation and the probe.

Codes and symbols are a public contract. pylint message ids are derived: ``KVL<f><nn>`` ->
``<E|W>7<f><nn>`` (checker id 70 for family 0, 71 for family 1, 72 for 2, 73 for 3). ``KVL000`` (the file does
not parse; pylint reports that itself) and family 5 (the runtime probe) have no pylint message.
"""

from __future__ import annotations

from dataclasses import dataclass

ERROR = "error"
WARNING = "warning"
INFO = "info"
"""A probe finding's level when the evidence says it did no harm (a rule's own level is error or warning)."""
LEVELS = (INFO, WARNING, ERROR)


@dataclass(frozen=True)
class Rule:
    code: str
    symbol: str
    severity: str
    summary: str
    fixable: bool = False
    """``kvlint --fix`` has a certain rewrite for it (``kvlint.fix.rewrite``)."""
    about_code: bool = True
    """False for a rule about kvlint's run on a file rather than its code (KVL001: the file was not analysed):
    no fixture or page example can show it; tests/test_file_limits.py does."""

    @property
    def family(self) -> int:
        return int(self.code[3])

    @property
    def pylint_msgid(self) -> str | None:
        if self.family not in (0, 1, 2, 3) or self.code == "KVL000":
            return None
        letter = "E" if self.severity == ERROR else "W"
        return f"{letter}7{self.family}{self.code[4:]}"

    @property
    def doc_path(self) -> str:
        return f"docs/rules/{self.code}.md"


_TABLE: tuple[Rule, ...] = (
    Rule("KVL000", "syntax-error", ERROR, "the file could not be parsed"),
    Rule("KVL001", "file-not-analysed", WARNING,
         "kvlint read the file but did not analyse it: past the per-file time or memory limit, or nested deeper "
         "than its parser can follow", about_code=False),
    Rule("KVL101", "fa-unknown-keyword", ERROR,
         "a keyword the operator's schema does not have (raises RuntimeError at run time)"),
    Rule("KVL102", "fa-version-mix", ERROR,
         "FIA v1 called with a v2 name, v2 with a v1 name, or an IFA/PFA spelling on FIA", fixable=True),
    Rule("KVL103", "fa-positional-args", ERROR,
         "more positional arguments than the schema allows, or npu_fusion_attention's 6th (binds to pse)"),
    Rule("KVL104", "fa-default-scale", WARNING,
         "no scale / softmax_scale / scale_value: the default is 1.0, not 1/sqrt(D)"),
    Rule("KVL105", "fa-default-num-heads", WARNING,
         "no num_heads / num_query_heads where the code has a head count: the default is 1"),
    Rule("KVL106", "fa-invalid-layout", ERROR, "a literal input_layout outside the accepted set"),
    Rule("KVL107", "fa-invalid-sparse-mode", ERROR, "a literal sparse_mode the operator does not accept"),
    Rule("KVL108", "fa-rope-pair", ERROR, "exactly one of query_rope / key_rope given"),
    Rule("KVL109", "fa-gqa-heads", ERROR,
         "num_heads not divisible by num_key_value_heads, or a ratio above 64"),
    Rule("KVL110", "fa-seq-lengths-kv-habit", WARNING,
         "FIA v1 actual_seq_lengths given KV lengths (the IFA habit) and no actual_seq_lengths_kv"),
    Rule("KVL111", "fa-tnd-missing-lengths", ERROR,
         "a TND/NTD layout without both the query and the KV length arguments"),
    Rule("KVL112", "torch-npu-alias", ERROR,
         "torch.<npu op> (always raises) or torch_npu.npu.<op> (does not exist)", fixable=True),
    Rule("KVL113", "fa-unknown-operator", ERROR,
         "torch_npu.<name> / torch.ops.npu.<name> / tng.ops.<name> names no operator there (raises at run time)"),
    Rule("KVL114", "fa-layout-axes-mismatch", ERROR,
         "input_layout names another axis order than the one the code gives the query (B, N, S, D as BSND)"),
    Rule("KVL115", "tensor-int-argument", WARNING,
         "a tensor passed for an int parameter: read on the host, a float truncated toward zero"),
    Rule("KVL201", "atten-mask-dtype", ERROR, "atten_mask is not bool/int8/uint8 (float or additive mask)"),
    Rule("KVL202", "atten-mask-shape", ERROR,
         "sparse_mode 2/3/4 with a mask that is not the 2048x2048 template"),
    Rule("KVL203", "sparse-mode-needs-mask", ERROR, "sparse_mode 1-4 with no atten_mask"),
    Rule("KVL204", "atten-mask-polarity", WARNING,
         "a torch.tril mask passed as atten_mask without inversion (True means masked out)"),
    Rule("KVL205", "additive-mask-in-pse", WARNING, "an additive -inf mask passed as pse_shift"),
    Rule("KVL206", "causal-top-left-with-cache", WARNING,
         "top-left causal alignment (sparse_mode=2, SDPA is_causal) over a KV cache"),
    Rule("KVL207", "atten-mask-dropped", WARNING,
         "a function takes a mask or causality parameter, never reads it, and calls attention without a mask"),
    Rule("KVL208", "attention-parameter-dropped", WARNING,
         "a parameter that controls attention (softmax_scale, sliding_window, no_masking) that the operator call "
         "does not use"),
    Rule("KVL301", "block-table-dtype", ERROR, "block_table is not int32", fixable=True),
    Rule("KVL302", "block-size-missing", WARNING, "block_table given without block_size (default 0)"),
    Rule("KVL303", "paged-without-kv-lengths", ERROR, "block_table given without the KV lengths"),
    Rule("KVL304", "block-size-invalid", ERROR, "a literal block_size the documented constraints forbid"),
    Rule("KVL305", "kv-len-mutated-in-layer", ERROR,
         "the runner's kv_len mutated inside an nn.Module forward path"),
    Rule("KVL306", "scatter-result-discarded", ERROR,
         "the result of out-of-place scatter_update / npu_scatter_nd_update is discarded"),
    Rule("KVL307", "kv-repeat-before-fused-attention", WARNING,
         "key/value repeated to the query heads before a fused attention call"),
    Rule("KVL308", "kv-rmsnorm-unpack", ERROR,
         "npu_kv_rmsnorm_rope_cache* result unpacked into the wrong number of names"),
    Rule("KVL309", "cumulative-lengths-non-tnd", ERROR,
         "cumulative lengths (cumsum, cu_seqlens) passed as the per-batch lengths of a non-TND layout"),
    Rule("KVL310", "paged-cache-literal-width", WARNING,
         "a paged KV cache viewed with a literal row width while the KV head count comes from the model"),
    Rule("KVL501", "probe-output-mismatch", ERROR, "output differs from the float32 reference"),
    Rule("KVL502", "probe-nonfinite-output", ERROR, "NaN or Inf in the output"),
    Rule("KVL503", "probe-seq-lengths", ERROR, "sequence lengths inconsistent with the tensors"),
    Rule("KVL504", "probe-block-table", ERROR, "block_table malformed or too small for the KV length"),
    Rule("KVL505", "probe-cache-write-drift", ERROR,
         "cache writes of one step land at different positions in different layers"),
    Rule("KVL506", "probe-head-shapes", ERROR, "head counts inconsistent with the tensors"),
    Rule("KVL507", "probe-non-causal-prefill", WARNING,
         "a decoder's prefill (the evidence says so) with no causal masking"),
    Rule("KVL508", "probe-duplicate-slots", ERROR,
         "duplicate indices with different rows in one cache write, read by a later attention call"),
    Rule("KVL509", "probe-written-slot-not-read", ERROR,
         "a slot this step's cache write filled lies outside what the same layer's attention reads"),
    Rule("KVL510", "probe-read-slot-not-written", ERROR,
         "the attention reads cache positions that no write has filled since the cache was allocated"),
    Rule("KVL520", "probe-layout-query-length", ERROR,
         "an input_layout used with a query length it does not support (BNSD_BSND, BNSD_NBSD)"),
    Rule("KVL521", "probe-learnable-sink", ERROR,
         "learnable_sink outside its documented use (TND only, value D <= 128, bf16 (Q_N,), no pse or quant)"),
    Rule("KVL522", "probe-mla-head-dim", ERROR, "MLA (rope inputs) with a query head dim other than 128 or 512"),
    Rule("KVL523", "probe-antiquant-mode", ERROR,
         "antiquant modes the operator refuses (unequal K/V modes, modes for the query length, scale dtype)"),
    Rule("KVL524", "probe-antiquant-mode-ignored", WARNING,
         "combined antiquant_mode set with Q_S > 1, where the device ignores it"),
    Rule("KVL525", "probe-inner-precise", ERROR, "inner_precise outside 0-3 (FIA; 0/1 at Q_S = 1) or 0/1 (IFA)"),
    Rule("KVL526", "probe-mask-shape-undocumented", WARNING,
         "an atten_mask shape FIA does not document for sparse_mode 0/1"),
    Rule("KVL527", "probe-paged-cache-layout", ERROR,
         "a heads-major paged cache with a query layout that does not support it"),
    Rule("KVL528", "probe-paged-cache-undocumented", WARNING,
         "a tokens-major 4-D paged cache (blocks, block_size, KV_N, D): no documented FIA/IFA layout"),
    Rule("KVL529", "probe-block-size", ERROR, "a block_size the paged attention rules refuse for this call"),
    Rule("KVL530", "probe-paged-prefill-antiquant", ERROR, "paged attention with Q_S > 1 and an int8 cache"),
    Rule("KVL531", "probe-tnd-head-dims", WARNING, "query/key/value head dims the TND layouts do not document"),
    Rule("KVL532", "probe-axis-limit", ERROR, "a batch, head count or head dim above the operator's limits"),
    Rule("KVL533", "probe-kv-rank", ERROR, "value (IFA: key/value) ranks or shapes the operator refuses"),
    Rule("KVL534", "probe-pse-shift", ERROR, "pse_shift with a dtype, head dim or layout the operator refuses"),
    Rule("KVL535", "probe-negative-band", ERROR,
         "negative pre/next tokens the band rules refuse (int8 output; npu_fusion_attention edges)"),
    Rule("KVL536", "probe-tensor-scalar-argument", WARNING,
         "a tensor passed for an int/float/bool parameter: read on the host on every call"),
    Rule("KVL537", "probe-truncated-int-argument", ERROR,
         "a non-integral float tensor passed for an int parameter: the operator runs with the truncated value"),
    Rule("KVL550", "probe-graph-replay-not-updated", WARNING,
         "an NPU graph replay runs a task group no update refreshed since the previous replay"),
    Rule("KVL599", "probe-internal-error", WARNING, "the probe itself failed on a call"),
)

RULES: dict[str, Rule] = {rule.code: rule for rule in _TABLE}
FIXABLE: frozenset[str] = frozenset(rule.code for rule in _TABLE if rule.fixable)
"""Codes of the rules with an autofix."""
BY_SYMBOL: dict[str, Rule] = {rule.symbol: rule for rule in _TABLE}
STATIC_RULES: tuple[Rule, ...] = tuple(rule for rule in _TABLE if rule.family in (0, 1, 2, 3))
PROBE_RULES: tuple[Rule, ...] = tuple(rule for rule in _TABLE if rule.family == 5)
"""The runtime probe's rules (``KVL5nn``): reported on live calls, documented like the static ones."""
DOCUMENTED_RULES: tuple[Rule, ...] = _TABLE
"""Every rule has a page under ``docs/rules/``, a row in ``kvlint --list-rules`` and ``kvlint --explain``."""


def rule(code_or_symbol: str) -> Rule:
    """The rule for a code (``KVL201``) or a symbol (``atten-mask-dtype``); KeyError otherwise."""
    return RULES.get(code_or_symbol.upper()) or BY_SYMBOL[code_or_symbol]
