"""The documented operator constraints: one function per constraint, one table that the emulator and the probe
both read.

Each row names the constraint's identifier and page (``docs/operators/<page>#<anchor>``, whose entry is
authoritative), the operators it binds, the probe code that reports it, and what the device does with a call
that breaks it: ``raises`` is the exception type of the device's own check, or None when the device computes
something the documentation does not describe. Every argument check of the device surfaces as
``RuntimeError``: the dispatcher's (``docs/operators/dispatcher.md#dsp-c15``), op-plugin's ``TORCH_CHECK``s and
CANN's parameter checks, which op-plugin turns into ``RuntimeError`` through ``NPU_CHECK_ERROR`` on the aclnn
status (``docs/operators/dispatcher.md#dsp-c24``; op-plugin ``op_plugin/utils/op_api_common.h``,
``EXEC_NPU_NO_FORMAT_CHECK_CMD``).

- The emulator calls ``refuse`` before computing: the first violated raising constraint raises, with a message
  naming the argument, the rule and the page. Constraints with ``raises=None`` never raise there: the emulator
  computes what the call asks for and the probe warns.
- The probe reports each constraint under its code (``kvlint.runtime_probe.checks``), at error level when the
  device raises and at warning level otherwise.

Every check reads only ``Facts``: shapes, dtypes, scalar arguments, list lengths, never a tensor's values, so
its result is a pure function of the call's signature (dtypes, shapes, keyword set, literal ints and strings)
and may be cached per signature. The reference functions themselves stay permissive: their tests exercise the
arithmetic on small shapes that no device accepts. The catalogue of every constraint with what enforces it:
``docs/operators/constraints.md``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import torch
from kvlint.runtime_probe.reference.call_facts import (
    BLOCKS_TOKENS_HIDDEN,
    EITHER_4D,
    FORM_AXES,
    HEADS_MAJOR,
    NZ,
    TOKENS_MAJOR,
    Facts,
    axes,
)

from kvlint.catalogue.operators import FA, FIA, FIA_V1, FIA_V2, IFA, MAX_GQA_RATIO, NUM_HEADS_PARAM, PFA

FIA_PAGE = "fused_infer_attention.md"
IFA_PAGE = "incre_prompt_flash_attention.md"
FA_PAGE = "fusion_attention.md"
FA_V2 = "npu_fusion_attention_v2"
MASK_DTYPES = (torch.bool, torch.int8, torch.uint8)
SINK_LAYOUTS = ("TND", "NTD_TND")
MLA_QUERY_DIMS = (128, 512)
MAX_HEADS = 256
MAX_HEAD_DIM = 512
MAX_TND_BATCH = 4096


@dataclass(frozen=True)
class Constraint:
    id: str
    """The constraint's identifier on its page (``FIA-C2``)."""
    page: str
    """``<page>.md#<anchor>`` under ``docs/operators/``."""
    code: str
    """The rule code the probe reports it under."""
    operators: frozenset[str]
    raises: type[Exception] | None
    """What the device's own check raises; None: the device computes something undocumented."""
    check: Callable[[Facts], str | None]

    @property
    def doc(self) -> str:
        return f"docs/operators/{self.page}"


@dataclass(frozen=True)
class Violation:
    constraint: Constraint
    problem: str

    def __str__(self) -> str:
        return f"{self.problem} ({self.constraint.id}, {self.constraint.doc})"


# Layouts and the query length ------------------------------------------------------------------------


def bnsd_bsnd_needs_prefill(call: Facts) -> str | None:
    """BNSD_BSND transposes the output for prefill; the decode branch does not support it. MLA has its own
    layout lists (FIA-C50, FIA-C53), so calls with rope inputs are not judged."""
    if call.layout != "BNSD_BSND" or call.rope or call.q_seq is None or call.q_seq > 1:
        return None
    return f"input_layout='BNSD_BSND' needs a query length Q_S > 1, the query has Q_S = {call.q_seq}; use 'BNSD'"


def bnsd_nbsd_query_length(call: Facts) -> str | None:
    """BNSD_NBSD exists only for short prefills (1 < Q_S <= 16). MLA with D = 512 lists BNSD_NBSD without that
    condition (FIA-C50), and vllm-ascend's MLA decode uses it with Q_S = 1: calls with rope are not judged."""
    if call.layout != "BNSD_NBSD" or call.rope or call.q_seq is None or 1 < call.q_seq <= 16:
        return None
    return f"input_layout='BNSD_NBSD' needs a query length 1 < Q_S <= 16, the query has Q_S = {call.q_seq}"


# learnable_sink (FIA v2) -----------------------------------------------------------------------------


def sink_layout(call: Facts) -> str | None:
    """The sink is implemented only in the TND kernels."""
    if call.tensor("learnable_sink") is None or call.layout is None or call.layout in SINK_LAYOUTS:
        return None
    return f"learnable_sink is supported only with input_layout 'TND' or 'NTD_TND', not {call.layout!r}"


def sink_value_dim(call: Facts) -> str | None:
    """With a sink the value head dim is at most 128."""
    v_dim = call.head_dim("value")
    if call.tensor("learnable_sink") is None or v_dim is None or v_dim <= 128:
        return None
    return f"learnable_sink needs a value head dim D <= 128, value has D = {v_dim}"


def sink_dtype_and_shape(call: Facts) -> str | None:
    """The sink is one bf16 logit per query head."""
    sink = call.tensor("learnable_sink")
    if sink is None:
        return None
    if sink.dtype != torch.bfloat16:
        return f"learnable_sink must be bfloat16, got {sink.dtype}"
    if call.heads is not None and tuple(sink.shape) != (call.heads,):
        return f"learnable_sink must have shape ({call.heads},) (one per query head), got {tuple(sink.shape)}"
    return None


def sink_exclusions(call: Facts) -> str | None:
    """The sink kernels take no position bias and no (anti)quantisation. The shared prefix and left padding
    FIA-C70 also excludes are v1 parameters, which v2 (the only operator with a sink) does not have."""
    if call.tensor("learnable_sink") is None:
        return None
    excluded = call.given("pse_shift", "dequant_scale_query", "dequant_scale_key", "dequant_scale_value",
                          "quant_scale_out", "quant_offset_out")  # fmt: skip
    int8 = [name for name in ("key", "value") if call.dtype(name) == torch.int8]
    if not excluded and not int8:
        return None
    what = excluded[0] if excluded else f"an int8 {int8[0]}"
    return f"learnable_sink cannot be combined with {what} (no position bias, no quantisation)"


# MLA (query_rope / key_rope) -------------------------------------------------------------------------


def mla_query_dim(call: Facts) -> str | None:
    """With rope inputs the query (nope) head dim is 128 or 512."""
    if not call.rope or call.q_dim is None or call.q_dim in MLA_QUERY_DIMS:
        return None
    return f"with query_rope (MLA) the query head dim must be 128 or 512, the query has D = {call.q_dim}"


# Antiquantisation ------------------------------------------------------------------------------------


def _int8_kv_antiquant(call: Facts) -> bool:
    """Antiquant proper: an int8 key or value with a floating-point query and no query quantisation (the
    quantised-query modes, such as the fp8 block modes of Ascend950, follow other rules)."""
    query = call.dtype("query")
    if query is None or not query.is_floating_point or torch.int8 not in (call.dtype("key"), call.dtype("value")):
        return False
    return not call.given("dequant_scale_query") and not call.integer("query_quant_mode")


def _separated_modes(call: Facts) -> tuple[str, int, str, int] | None:
    """(key mode name, value, value mode name, value) when KV-separated antiquant scales are given."""
    key_mode, value_mode = call.name("key_antiquant_mode"), call.name("value_antiquant_mode")
    scales = call.given(call.name("key_antiquant_scale"), call.name("value_antiquant_scale"))
    if not scales or not _int8_kv_antiquant(call):
        return None
    modes = call.integer(key_mode), call.integer(value_mode)
    if modes[0] is None or modes[1] is None:
        return None
    return key_mode, modes[0], value_mode, modes[1]


def antiquant_modes_equal(call: Facts) -> str | None:
    """Key and value antiquant modes must match, except per-channel keys with per-token values."""
    modes = _separated_modes(call)
    if modes is None or modes[1] == modes[3] or (modes[1], modes[3]) == (0, 1):
        return None
    key_mode, key, value_mode, value = modes
    return f"{key_mode}={key} and {value_mode}={value} differ; they must be equal, except ({key_mode}=0, {value_mode}=1)"


def antiquant_modes_prefill(call: Facts) -> str | None:
    """With several query tokens only per-channel (0) and per-token (1) antiquant exist."""
    modes = _separated_modes(call)
    if modes is None or call.q_seq is None or call.q_seq < 2:
        return None
    for name, mode in (modes[:2], modes[2:]):
        if mode not in (0, 1):
            return f"{name}={mode} is not supported with Q_S = {call.q_seq} > 1 (only 0 and 1)"
    return None


def combined_antiquant_mode_decode(call: Facts) -> str | None:
    """At Q_S = 1 the combined antiquant_mode is 0 (per channel) or 1 (per token)."""
    mode = call.integer("antiquant_mode")
    if call.q_seq != 1 or call.tensor("antiquant_scale") is None or mode in (0, 1, None):
        return None
    if not _int8_kv_antiquant(call):  # the combined scales dequantise an int8 cache only
        return None
    return f"antiquant_mode={mode} is not supported (0 per channel, 1 per token)"


def combined_antiquant_scale_prefill(call: Facts) -> str | None:
    """With several query tokens the combined antiquant scale is float16 only (so never per token)."""
    scale = call.tensor("antiquant_scale")
    if scale is None or call.q_seq is None or call.q_seq < 2 or scale.dtype == torch.float16:
        return None
    if not _int8_kv_antiquant(call):
        return None
    return f"antiquant_scale must be float16 with Q_S = {call.q_seq} > 1, got {scale.dtype}"


def combined_antiquant_mode_ignored(call: Facts) -> str | None:
    """With several query tokens the device ignores antiquant_mode and dequantises per channel."""
    mode = call.integer("antiquant_mode")
    if call.q_seq is None or call.q_seq < 2 or call.tensor("antiquant_scale") is None or not mode:
        return None
    if not _int8_kv_antiquant(call):
        return None
    return (f"antiquant_mode={mode} has no effect with Q_S = {call.q_seq} > 1: the device dequantises per "
            "channel; per-token combined antiquant exists only for decode (Q_S = 1)")


# Precision mode --------------------------------------------------------------------------------------


def inner_precise_fia(call: Facts) -> str | None:
    """inner_precise is 0-3 (bit0 precision, bit1 invalid-row correction); decode takes only 0 and 1."""
    value = call.integer("inner_precise")
    if value is None:
        return None
    if value not in range(4):
        return f"inner_precise={value} is not supported (0-3)"
    if call.q_seq == 1 and value > 1:
        return f"inner_precise={value} is not supported with Q_S = 1 (only 0 and 1)"
    return None


def inner_precise_ifa(call: Facts) -> str | None:
    """IFA's inner_precise is 0 (high precision) or 1 (high performance)."""
    value = call.integer("inner_precise")
    if value is None or value in (0, 1):
        return None
    return f"inner_precise={value} is not supported by {IFA} (0 or 1)"


# Masks -----------------------------------------------------------------------------------------------


def mask_dtype(call: Facts) -> str | None:
    """atten_mask is read as True/1 = excluded; a float mask is refused (also the 2048 template)."""
    dtype = call.dtype("atten_mask")
    if dtype is None or dtype in MASK_DTYPES:
        return None
    return f"atten_mask dtype is {dtype}, must be bool, int8 or uint8 (True/1 = masked out)"


def mask_shape_documented(call: Facts) -> str | None:
    """FIA documents (1, Q_S, KV_S), (B|1, 1, Q_S, KV_S) for modes 0/1, and 2-D masks only for BSH, BSND,
    BNSD and BNSD_BSND without rope (v2: and one D for query, key and value)."""
    mask = call.tensor("atten_mask")
    if mask is None or call.integer("sparse_mode") not in (0, 1) or call.layout is None:
        return None
    if mask.dim() == 3 and mask.shape[0] > 1:
        return (f"atten_mask of shape {tuple(mask.shape)}: (B, Q_S, KV_S) with B > 1 is documented for "
                f"{PFA} only; FIA documents (1, Q_S, KV_S) and (B, 1, Q_S, KV_S)")
    if mask.dim() != 2:
        return None
    if call.layout not in ("BSH", "BSND", "BNSD", "BNSD_BSND") or call.rope:
        where = "with query_rope" if call.rope else f"with input_layout {call.layout!r}"
        return f"a 2-D atten_mask {tuple(mask.shape)} is not documented {where}; use (1, 1, Q_S, KV_S)"
    dims = {call.q_dim, call.head_dim("key"), call.head_dim("value")}
    if call.op == FIA_V2 and len(dims) > 1 and None not in dims:
        return f"a 2-D atten_mask {tuple(mask.shape)} needs one head dim for query, key and value in v2"
    return None


# Paged KV cache --------------------------------------------------------------------------------------


def _heads_major_forms(call: Facts) -> tuple[str, ...]:
    return ("BNSD",) if call.op == IFA else ("BNSD", "TND")


def heads_major_cache_layout(call: Facts) -> str | None:
    """The heads-major cache (blocks, KV_N, block_size, D) is documented only with a BNSD (or TND) query."""
    forms = _heads_major_forms(call)
    if call.form is None or call.form in forms:
        return None
    for name in ("key", "value"):
        if call.cache_form(name) == HEADS_MAJOR:
            return (f"{name} cache {tuple(call.tensor(name).shape)} is {HEADS_MAJOR}, which needs a "
                    f"{' or '.join(forms)} query; with input_layout {call.layout!r} use {BLOCKS_TOKENS_HIDDEN}")
    return None


def tokens_major_cache(call: Facts) -> str | None:
    """The tokens-major 4-D cache is no documented layout of these operators (FIA-Q14); the emulator accepts it."""
    for name in ("key", "value"):
        form = call.cache_form(name)
        ambiguous = form == EITHER_4D and call.form is not None and call.form not in _heads_major_forms(call)
        if form == TOKENS_MAJOR or ambiguous:
            return (f"{name} cache {tuple(call.tensor(name).shape)} is read as {TOKENS_MAJOR}, which is not a "
                    f"documented layout of {call.op}; use {BLOCKS_TOKENS_HIDDEN} or, with a BNSD query, "
                    f"{HEADS_MAJOR}")
    return None


def block_size_prefill(call: Facts) -> str | None:
    """Paged prefill (Q_S > 1, no rope, not TND) tiles keys in 128-token blocks: 128, 256, 384 or 512."""
    size = call.block_size
    if not call.paged or size is None or call.rope or call.q_seq is None or call.q_seq < 2:
        return None
    if size % 128 == 0 and 128 <= size <= 512:
        return None
    return f"block_size={size} with Q_S = {call.q_seq} > 1 must be a multiple of 128 in [128, 512]"


def _kv_alignment(call: Facts) -> int:
    return 32 if call.dtype("key") == torch.int8 else 16


def block_size_decode(call: Facts) -> str | None:
    """Paged decode (Q_S = 1, no rope): a non-zero block_size up to 512, a multiple of 16 (32 for int8 KV)."""
    size = call.block_size
    if not call.paged or size is None or call.rope or call.q_seq != 1:
        return None
    step = _kv_alignment(call)
    if 0 < size <= 512 and size % step == 0:
        return None
    return f"block_size={size} with Q_S = 1 must be a multiple of {step} in [{step}, 512]"


def block_size_tnd(call: Facts) -> str | None:
    """TND-family paged calls without rope: block_size a multiple of 16, at most 1024."""
    size = call.block_size
    if not call.paged or size is None or call.rope or not call.varlen:
        return None
    if 0 < size <= 1024 and size % 16 == 0:
        return None
    return f"block_size={size} with input_layout {call.layout!r} must be a multiple of 16 in [16, 1024]"


def block_size_mla(call: Facts) -> str | None:
    """MLA with D = 512: block_size a multiple of 16, at most 1024."""
    size = call.block_size
    if not call.paged or size is None or not call.rope or call.q_dim != 512:
        return None
    if 0 < size <= 1024 and size % 16 == 0:
        return None
    return f"block_size={size} with MLA (query D = 512) must be a multiple of 16 in [16, 1024]"


def block_size_ifa(call: Facts) -> str | None:
    """IFA's block_size: a positive multiple of 16 for fp16/bf16 KV, of 32 for int8 KV."""
    size = call.block_size
    if not call.paged or size is None:
        return None
    step = _kv_alignment(call)
    if size > 0 and size % step == 0:
        return None
    return f"block_size={size} must be a positive multiple of {step} for {call.dtype('key')} KV"


def paged_prefill_antiquant(call: Facts) -> str | None:
    """Paged prefill (Q_S > 1) reads fp16/bf16 caches only: no int8 KV, no antiquant parameters. The GQA
    antiquant mode with an NZ cache takes 1 <= Q_S <= 16 (FIA-C68), so NZ caches are not judged."""
    if not call.paged or call.q_seq is None or call.q_seq < 2:
        return None
    if NZ in (call.cache_form("key"), call.cache_form("value")):
        return None
    scales = call.given("antiquant_scale", call.name("key_antiquant_scale"), call.name("value_antiquant_scale"))
    int8 = [name for name in ("key", "value") if call.dtype(name) == torch.int8]
    if not scales and not int8:
        return None
    what = f"an int8 {int8[0]} cache" if int8 else scales[0]
    return f"paged attention with Q_S = {call.q_seq} > 1 does not support antiquant ({what})"


# Head dims and axis limits ---------------------------------------------------------------------------


def tnd_head_dims(call: Facts) -> str | None:
    """TND-family layouts (query D != 512) document only a few (Q_D, K_D, V_D) combinations. Public code runs
    others on devices (vllm-ascend's GPT-OSS path: D = 64 with GQA and a sink; cann-recipes-infer's Gemma 4:
    D = 256), so the device computes them: a warning, not a refusal."""
    if not call.varlen or call.q_dim in (None, 512):
        return None
    dims = (call.q_dim, call.head_dim("key"), call.head_dim("value"))
    if None in dims:
        return None
    allowed = _tnd_allowed(call)
    if dims in allowed:
        return None
    shown = ", ".join(f"{q}/{k}/{v}" for q, k, v in sorted(allowed))
    return (f"input_layout {call.layout!r} documents query/key/value head dims {shown}"
            f"{' (with rope)' if call.rope else ''}, got {dims[0]}/{dims[1]}/{dims[2]}; results for other head "
            "dims depend on the CANN version")


def _tnd_allowed(call: Facts) -> set[tuple[int, int, int]]:
    if call.rope:
        return {(128, 128, 128)}
    if call.layout == "NTD_TND":
        return {(128, 128, 128), (192, 192, 128)}
    allowed = {(128, 128, 128), (192, 192, 128)}
    gqa = call.heads is not None and call.kv_heads is not None and call.heads != call.kv_heads
    if call.layout != "NTD" and not (call.op == FIA_V2 and (gqa or call.paged)):
        allowed.add((192, 192, 192))
    if call.op == FIA_V2 and not gqa:
        allowed.add((64, 64, 64))
    return allowed


def tnd_batch_limit(call: Facts) -> str | None:
    """TND-family layouts take at most 4096 batches (entries of the query length list)."""
    if not call.varlen or call.batch is None or call.batch <= MAX_TND_BATCH:
        return None
    return f"input_layout {call.layout!r} takes at most {MAX_TND_BATCH} batches, the length list has {call.batch}"


def _axis_limits(call: Facts, max_batch: int) -> str | None:
    """B, query and KV heads, and the query and value head dims against the operator's limits."""
    limits = (
        ("B", None if call.varlen else call.batch, max_batch),
        (NUM_HEADS_PARAM[call.op], call.q_heads, MAX_HEADS),
        ("num_key_value_heads", call.kv_heads, MAX_HEADS),
        ("the query head dim D", call.q_dim, MAX_HEAD_DIM),
        ("the value head dim D", call.head_dim("value"), MAX_HEAD_DIM),
    )
    for what, value, limit in limits:
        if value is not None and value > limit:
            return f"{what} = {value} is above the operator's limit of {limit}"
    return None


def axis_limits_65536(call: Facts) -> str | None:
    """FIA and PFA: B <= 65536, N <= 256, D <= 512."""
    return _axis_limits(call, 65536)


def axis_limits_ifa(call: Facts) -> str | None:
    """IFA: B <= 65535, N <= 256, D <= 512."""
    return _axis_limits(call, 65535)


def gqa_ratio(call: Facts) -> str | None:
    """Query heads are a multiple of the KV heads, at most 64 per KV head."""
    heads, kv_heads = call.heads, call.kv_heads
    if heads is None or kv_heads is None:
        return None
    name = NUM_HEADS_PARAM[call.op]
    if heads % kv_heads:
        return f"{name}={heads} is not divisible by num_key_value_heads={kv_heads}"
    if heads // kv_heads > MAX_GQA_RATIO:
        return f"{name}={heads} / num_key_value_heads={kv_heads} = {heads // kv_heads} is above {MAX_GQA_RATIO}"
    return None


# Ranks (the C++ check, docs/semantics.md#sem-d6) -----------------------------------------------------


def value_rank(call: Facts) -> str | None:
    """The eager FIA code checks only ranks: value has the query's rank, or 3-5 dims when paged."""
    query, value = call.tensor("query"), call.tensor("value")
    if query is None or value is None:
        return None
    if call.paged:
        return None if value.dim() in (3, 4, 5) else f"a paged value cache must have 3, 4 or 5 dims, got {value.dim()}"
    if value.dim() == query.dim():
        return None
    return f"value has {value.dim()} dims, the query {query.dim()}; without block_table they must be equal"


def ifa_kv_shapes(call: Facts) -> str | None:
    """IFA: query, key and value have one rank; key and value one shape."""
    query, key, value = (call.tensor(name) for name in ("query", "key", "value"))
    if query is None or key is None or value is None:
        return None
    if not call.paged and not query.dim() == key.dim() == value.dim():
        return f"query, key and value have {query.dim()}, {key.dim()} and {value.dim()} dims; they must be equal"
    if key.shape != value.shape:
        return f"key {tuple(key.shape)} and value {tuple(value.shape)} must have the same shape"
    return None


# Position bias (pse_shift) ---------------------------------------------------------------------------


def pse_dtype(call: Facts) -> str | None:
    """pse_shift follows the query's dtype; with Q_S > 1 an fp16 pse may also go with an int8 query."""
    pse, query = call.dtype("pse_shift"), call.dtype("query")
    if pse is None or query is None or pse == query:
        return None
    prefill = call.op == PFA or (call.op in FIA and call.q_seq is not None and call.q_seq > 1)
    if prefill and pse == torch.float16 and query == torch.int8:
        return None
    return f"pse_shift dtype {pse} must be the query's ({query})"


def pse_head_dim(call: Facts) -> str | None:
    """With pse_shift, decode needs a head dim divisible by 16."""
    if call.tensor("pse_shift") is None or call.q_dim is None or call.q_dim % 16 == 0:
        return None
    if call.op in FIA and call.q_seq != 1:
        return None
    return f"pse_shift with Q_S = 1 needs a head dim divisible by 16, the query has D = {call.q_dim}"


def pse_layout(call: Facts) -> str | None:
    """pse_shift is not supported with the TND-family layouts, nor with MLA."""
    if call.tensor("pse_shift") is None or not (call.varlen or call.rope):
        return None
    where = "with query_rope (MLA)" if call.rope else f"with input_layout {call.layout!r}"
    return f"pse_shift is not supported {where}"


# Band arguments --------------------------------------------------------------------------------------


def int8_output_negative_band(call: Facts) -> str | None:
    """With an int8 output (quant_scale2 / quant_scale_out), band mode takes no negative pre/next_tokens."""
    if not call.given(call.name("quant_scale2")) or call.integer("sparse_mode") != 4:
        return None
    for name in ("pre_tokens", "next_tokens"):
        value = call.integer(name)
        if value is not None and value < 0:
            return f"{name}={value} is negative; sparse_mode=4 with an int8 output does not support that"
    return None


def fa_negative_band(call: Facts) -> str | None:
    """npu_fusion_attention's band with a negative edge must keep every row non-empty: |next| < Skv and
    pre >= |next| (and the mirror case)."""
    names = ("pre_tockens", "next_tockens") if call.op == FA else ("pre_tokens", "next_tokens")
    pre, nxt = (call.integer(name) for name in names)
    layout = call.args.get("input_layout")
    if pre is None or nxt is None or (pre >= 0 and nxt >= 0) or not isinstance(layout, str):
        return None
    if call.tensor("atten_mask") is None or call.integer("sparse_mode") not in (0, 4):
        return None
    q_seq, kv_seq = (_fa_seq(call.tensor(name), layout.upper()) for name in ("query", "key"))
    if nxt < 0 and (pre < -nxt or (kv_seq is not None and -nxt >= kv_seq)):
        return f"{names[1]}={nxt} needs {names[0]} >= {-nxt} (got {pre}) and |{names[1]}| < Skv = {kv_seq}"
    if pre < 0 and (nxt < -pre or (q_seq is not None and -pre >= q_seq)):
        return f"{names[0]}={pre} needs {names[1]} >= {-pre} (got {nxt}) and |{names[0]}| < Sq = {q_seq}"
    return None


def _fa_seq(tensor: torch.Tensor | None, layout: str) -> int | None:
    """S of an npu_fusion_attention input (not TND, whose lengths are values)."""
    form = {"SBH": "SBH", **FORM_AXES}.get(layout)
    found = None if tensor is None or form is None or layout == "TND" else axes(tensor.shape, form)
    return None if found is None else found["S"]


# The table -------------------------------------------------------------------------------------------

_ANY = frozenset({FIA_V1, FIA_V2, IFA, PFA})
_V1 = frozenset({FIA_V1})
_V2 = frozenset({FIA_V2})
_IFA = frozenset({IFA})
_PFA = frozenset({PFA})
_FA = frozenset({FA, FA_V2})
_RAISES = RuntimeError


def _row(id_: str, page: str, code: str, operators: frozenset[str], check: Callable[[Facts], str | None],
         raises: type[Exception] | None = _RAISES) -> Constraint:
    return Constraint(id_, f"{page}#{id_.lower()}", code, operators, raises, check)


CONSTRAINTS: tuple[Constraint, ...] = (
    _row("FIA-C2", FIA_PAGE, "KVL520", FIA, bnsd_bsnd_needs_prefill),
    _row("FIA-C3", FIA_PAGE, "KVL520", FIA, bnsd_nbsd_query_length),
    _row("FIA-C70", FIA_PAGE, "KVL521", _V2, sink_layout),
    _row("FIA-C70", FIA_PAGE, "KVL521", _V2, sink_value_dim),
    _row("FIA-C70", FIA_PAGE, "KVL521", _V2, sink_dtype_and_shape),
    _row("FIA-C70", FIA_PAGE, "KVL521", _V2, sink_exclusions),
    _row("FIA-C48", FIA_PAGE, "KVL522", FIA, mla_query_dim),
    _row("FIA-C61", FIA_PAGE, "KVL523", FIA, antiquant_modes_equal),
    _row("FIA-C61", FIA_PAGE, "KVL523", FIA, antiquant_modes_prefill),
    _row("FIA-C64", FIA_PAGE, "KVL523", _V1, combined_antiquant_mode_decode),
    _row("FIA-C64", FIA_PAGE, "KVL523", _V1, combined_antiquant_scale_prefill),
    _row("FIA-C64", FIA_PAGE, "KVL524", _V1, combined_antiquant_mode_ignored, raises=None),
    _row("FIA-C56", FIA_PAGE, "KVL525", FIA, inner_precise_fia),
    _row("IFA-C15", IFA_PAGE, "KVL525", _IFA, inner_precise_ifa),
    _row("FIA-C20", FIA_PAGE, "KVL201", FIA, mask_dtype),
    _row("IFA-C13", IFA_PAGE, "KVL201", _IFA, mask_dtype),
    _row("PFA-C7", IFA_PAGE, "KVL201", _PFA, mask_dtype),
    _row("FIA-C21", FIA_PAGE, "KVL526", FIA, mask_shape_documented, raises=None),
    _row("FIA-C41", FIA_PAGE, "KVL527", FIA, heads_major_cache_layout),
    _row("IFA-C10", IFA_PAGE, "KVL527", _IFA, heads_major_cache_layout),
    _row("FIA-C41", FIA_PAGE, "KVL528", FIA, tokens_major_cache, raises=None),
    _row("IFA-C10", IFA_PAGE, "KVL528", _IFA, tokens_major_cache, raises=None),
    _row("FIA-C36", FIA_PAGE, "KVL529", FIA, block_size_prefill),
    _row("FIA-C37", FIA_PAGE, "KVL529", FIA, block_size_decode),
    _row("FIA-C38", FIA_PAGE, "KVL529", FIA, block_size_tnd),
    _row("FIA-C39", FIA_PAGE, "KVL529", FIA, block_size_mla),
    _row("IFA-C12", IFA_PAGE, "KVL529", _IFA, block_size_ifa),
    _row("FIA-C43", FIA_PAGE, "KVL530", FIA, paged_prefill_antiquant),
    _row("FIA-C55", FIA_PAGE, "KVL531", FIA, tnd_head_dims, raises=None),
    _row("FIA-C15", FIA_PAGE, "KVL532", FIA, tnd_batch_limit),
    _row("FIA-C9", FIA_PAGE, "KVL532", FIA, axis_limits_65536),
    _row("IFA-C5", IFA_PAGE, "KVL532", _IFA, axis_limits_ifa),
    _row("PFA-C12", IFA_PAGE, "KVL532", _PFA, axis_limits_65536),
    _row("FIA-C45", FIA_PAGE, "KVL109", FIA, gqa_ratio),
    _row("IFA-C3", IFA_PAGE, "KVL109", _IFA, gqa_ratio),
    _row("PFA-C14", IFA_PAGE, "KVL109", _PFA, gqa_ratio),
    _row("FIA-C8", FIA_PAGE, "KVL533", FIA, value_rank),
    _row("IFA-C4", IFA_PAGE, "KVL533", _IFA, ifa_kv_shapes),
    _row("FIA-C30", FIA_PAGE, "KVL534", FIA, pse_dtype),
    _row("IFA-C8", IFA_PAGE, "KVL534", _IFA, pse_dtype),
    _row("PFA-C11", IFA_PAGE, "KVL534", _PFA, pse_dtype),
    _row("FIA-C31", FIA_PAGE, "KVL534", FIA, pse_head_dim),
    _row("IFA-C8", IFA_PAGE, "KVL534", _IFA, pse_head_dim),
    _row("FIA-C32", FIA_PAGE, "KVL534", FIA, pse_layout),
    _row("FIA-C27", FIA_PAGE, "KVL535", FIA, int8_output_negative_band),
    _row("FA-C14", FA_PAGE, "KVL535", _FA, fa_negative_band),
)
"""Every documented constraint kvlint enforces, in the order the emulator checks them."""
BY_OPERATOR: dict[str, tuple[Constraint, ...]] = {
    op: tuple(c for c in CONSTRAINTS if op in c.operators) for op in sorted(_ANY | _FA)
}


def violations(op: str, args: Mapping[str, object]) -> list[Violation]:
    """The constraints that a call of ``op`` with every parameter bound in ``args`` breaks, in table order."""
    rows = BY_OPERATOR.get(op, ())
    if not rows:
        return []
    facts = Facts(op, args)
    return [Violation(row, problem) for row in rows if (problem := row.check(facts))]


def refuse(op: str, args: Mapping[str, object]) -> None:
    """Raise what the device raises for the first violated constraint that the device refuses."""
    for violation in violations(op, args):
        if violation.constraint.raises is not None:
            raise violation.constraint.raises(f"{op}: {violation}")
