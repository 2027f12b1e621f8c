"""Rules on attention masks and sparse modes (KVL201-KVL206).

Each rule judges the values that reach the operator's arguments (``kvlint.analysis.evaluate``), path by path: a
finding needs one path on which the bad combination holds (docs/operators/fused_infer_attention.md#fia-c20
to #fia-c26, docs/semantics.md#sem-4 and #sem-8).
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from astroid import nodes

from kvlint.analysis.axes import split
from kvlint.analysis.callsite import CallSite
from kvlint.analysis.evaluate import values
from kvlint.analysis.facts import ADDITIVE, CACHE_NAME, FLOAT_DTYPES, GROWN_CACHE, TRIL, Dim, Value
from kvlint.analysis.finding import Issue
from kvlint.analysis.flow import EMPTY, Path
from kvlint.analysis.names import qualified_name
from kvlint.analysis.query_length import ONE, query_lengths
from kvlint.analysis.settings import Settings
from kvlint.analysis.walk import nodes_named, nodes_of
from kvlint.catalogue.operators import FA, FIA, INFERENCE_ATTENTION, KV_LENGTHS_PARAM, PFA, QUERY_LENGTHS_PARAM

MASK_DTYPES = frozenset({"bool", "int8", "uint8"})
FA_MASK_DTYPES = frozenset({"bool", "uint8"})
TEMPLATE = 2048
TEMPLATE_MODES = frozenset({2, 3, 4})
MODES_NEEDING_MASK = frozenset({1, 2, 3, 4})
TOP_LEFT_CAUSAL = 2
SPARSE_OPERATORS = FIA | {PFA}
"""Operators whose sparse_mode 2/3/4 take the fixed 2048x2048 template mask."""
SDPA = ("torch.nn.functional.scaled_dot_product_attention", "torch._C._nn.scaled_dot_product_attention")
_SDPA_POSITIONS = {"key": 1, "value": 2, "is_causal": 5}


def _built_at(value: Value, site_line: int | None) -> str:
    """`` built at line N`` when the value was built away from the call, else nothing."""
    origin = value.origin
    if origin is None or origin.lineno is None or origin.lineno == site_line:
        return ""
    return f" built at line {origin.lineno}"


def _int_mode(value: Value) -> int | None:
    mode = value.const
    return mode if isinstance(mode, int) and not isinstance(mode, bool) else None


def _modes(site: CallSite, wanted: frozenset[int]) -> Iterator[tuple[int, Path]]:
    """The sparse modes in ``wanted`` that reach the call, each with its path."""
    for alt in site.values("sparse_mode"):
        mode = _int_mode(alt.value)
        if mode in wanted:
            yield mode, alt.path


def check_atten_mask_dtype(site: CallSite) -> Iterator[Issue]:
    """KVL201: FIA/IFA/PFA masks are bool/int8/uint8 (npu_fusion_attention: bool/uint8) with True = masked
    out. A float mask is not rejected by the dispatcher: an additive 0/-inf mask read as "nonzero = masked"
    hides every visible position instead of the masked ones."""
    if site.name not in INFERENCE_ATTENTION and site.name != FA:
        return
    allowed = FA_MASK_DTYPES if site.name == FA else MASK_DTYPES
    for alt in site.values("atten_mask"):
        value = alt.value
        if not value.tensor:
            continue
        where = _built_at(value, site.call.lineno)
        if value.has(ADDITIVE):
            found = f"an additive {value.dtype or 'float'} mask (-inf / finfo.min where masked){where}"
            fix = "pass `mask < 0` (True where it held -inf) or build it with dtype=torch.bool"
        elif value.dtype is not None and value.dtype not in allowed:
            guess = " (an additive mask?)" if value.dtype in FLOAT_DTYPES else ""
            found = f"{value.dtype}{guess}{where}"
            fix = "pass mask.bool() or build it with dtype=torch.bool"
        else:
            continue
        kinds = "/".join(sorted(allowed))
        yield Issue("KVL201", site.anchor("atten_mask"),
                    f"atten_mask is {found}; {site.name} masks are {kinds} with True = masked out: {fix}")
        return


def _shape_problem(shape: tuple[Dim, ...]) -> str | None:
    """What is wrong with a mask shape for the 2048 template (``has shape (bsz, kv_len), sized at run
    time``), or None when it is (or may be) the template."""
    text = "(" + ", ".join("?" if d is None else str(d) for d in shape) + ")"
    if len(shape) not in (2, 3, 4):
        return f"has shape {text}"
    leading, square = shape[:-2], shape[-2:]
    if any(isinstance(d, str) for d in square):
        return f"has shape {text}, sized at run time"
    if any(d is not None and d != TEMPLATE for d in square) or any(d is not None and d != 1 for d in leading):
        return f"has shape {text}"
    return None


def _mode_ignored(site: CallSite, mode: int, path: Path) -> bool:
    """True when the mode does not matter on ``path``: FIA and PFA ignore ``sparse_mode`` when every query
    has length 1 and no rope inputs are given (docs/operators/fused_infer_attention.md#fia-c26); without a
    mask ``npu_fusion_attention`` computes full attention, which is bottom-right causal (mode 3) then."""
    if site.name == FA:
        if mode != 3:
            return False
    elif site.name not in SPARSE_OPERATORS or (site.operator.param("query_rope") is not None and any(
            not alt.value.is_none for alt in site.values("query_rope", path))):
        return False
    return all(length == ONE for length, _ in query_lengths(site, path))


def check_atten_mask_shape(site: CallSite) -> Iterator[Issue]:
    """KVL202: for sparse_mode 2, 3 and 4 the mask is a compressed template of fixed shape (2048, 2048),
    (1, 2048, 2048) or (1, 1, 2048, 2048); the operator builds the real geometry from the lengths. A mask
    of the sequence's size is rejected or misread as soon as the sequence is not 2048 long. With a query of
    length 1 (and no rope) the mode is ignored and ``(B, KV_S)`` is a documented mask."""
    if site.name not in SPARSE_OPERATORS:
        return
    for mode, path in _modes(site, TEMPLATE_MODES):
        for alt in site.values("atten_mask", path):
            if not alt.value.tensor or split(alt.value.shape)[1] is None or _mode_ignored(site, mode, alt.path):
                continue
            problem = _shape_problem(alt.value.shape)
            if problem is None:
                continue
            yield Issue("KVL202", site.anchor("atten_mask"),
                        f"this mask{_built_at(alt.value, site.call.lineno)} {problem}, but sparse_mode={mode} "
                        f"takes the fixed {TEMPLATE}x{TEMPLATE} template ((2048, 2048), (1, 2048, 2048) or "
                        "(1, 1, 2048, 2048)) whatever the sequence lengths: build "
                        "torch.triu(torch.ones(2048, 2048, dtype=torch.bool), diagonal=1) once and pass it")
            return


def check_sparse_mode_needs_mask(site: CallSite) -> Iterator[Issue]:
    """KVL203: sparse_mode 1-4 need atten_mask. FIA/PFA raise for prefill; npu_fusion_attention ignores
    sparse_mode when the mask is None and silently computes full, non-causal attention."""
    if site.name not in SPARSE_OPERATORS and site.name != FA:
        return
    for mode, path in _modes(site, MODES_NEEDING_MASK):
        if not any(alt.value.is_none and not _mode_ignored(site, mode, alt.path)
                   for alt in site.values("atten_mask", path)):
            continue
        if site.name == FA:
            consequence = ("npu_fusion_attention then ignores sparse_mode and computes full, non-causal attention "
                           "(the same as sparse_mode=3 only for a query of length 1, which the code does not prove)")
        else:
            consequence = (f"{site.name} raises for prefill (it ignores sparse_mode only for a query of length 1 "
                           "without rope inputs, which the code does not prove here)")
        yield Issue("KVL203", site.anchor("sparse_mode"),
                    f"sparse_mode={mode} with no atten_mask on this path: {consequence}; pass the "
                    f"{TEMPLATE}x{TEMPLATE} mask torch.triu(torch.ones(2048, 2048, dtype=torch.bool), diagonal=1)")
        return


def check_atten_mask_polarity(site: CallSite) -> Iterator[Issue]:
    """KVL204: True/1 means masked out. A ``torch.tril`` mask that nothing inverted marks the lower
    triangle, which is exactly what a causal query may see."""
    if site.name not in INFERENCE_ATTENTION and site.name != FA:
        return
    for alt in site.values("atten_mask"):
        if alt.value.tensor and alt.value.has(TRIL):
            where = _built_at(alt.value, site.call.lineno)
            yield Issue("KVL204", site.anchor("atten_mask"),
                        f"atten_mask is a torch.tril mask{where} "
                        "that is never inverted: True/1 means masked out, so it hides exactly the positions a "
                        "causal query may see; use torch.triu(..., diagonal=1) or pass ~mask")
            return


def check_additive_mask_in_pse(site: CallSite) -> Iterator[Issue]:
    """KVL205: pse_shift is a finite fp16/bf16 position bias; an additive -inf mask there produces NaN on
    long KV (llama.cpp-omni PR #89)."""
    if site.name not in INFERENCE_ATTENTION:
        return
    for alt in site.values("pse_shift"):
        if alt.value.has(ADDITIVE):
            yield Issue("KVL205", site.anchor("pse_shift"),
                        "pse_shift receives an additive -inf / finfo.min mask"
                        f"{_built_at(alt.value, site.call.lineno)}: it gives NaN on long KV; pass the masked "
                        "positions as a bool atten_mask (True = masked out) and keep only finite biases in pse_shift")
            return


def _reads_cache(site: CallSite, path: Path) -> str | None:
    """Why the call reads cached KV on ``path``: a block table, or KV lengths apart from query lengths."""
    if site.argument("block_table") is not None and any(
        not alt.value.is_none for alt in site.values("block_table", path)
    ):
        return "it reads paged KV (block_table)"
    kv_param = KV_LENGTHS_PARAM.get(site.name)
    q_param = QUERY_LENGTHS_PARAM.get(site.name)
    kv_lengths = site.argument(kv_param) if kv_param else None
    if kv_lengths is None or all(alt.value.is_none for alt in site.values(kv_param, path)):
        return None
    q_lengths = site.argument(q_param) if q_param else None
    if q_lengths is not None and q_lengths.as_string() == kv_lengths.as_string():
        return None
    return f"it takes KV lengths ({kv_param}) apart from the query lengths"


def check_causal_top_left_with_cache(site: CallSite) -> Iterator[Issue]:
    """KVL206 (FIA/PFA): sparse_mode=2 aligns the causal triangle top-left (key j visible to query i iff
    j <= i). Over cached KV (chunked prefill, prefix cache) each new query must see every cached key:
    bottom-right alignment, sparse_mode=3."""
    if site.name not in SPARSE_OPERATORS:
        return
    for mode, path in _modes(site, frozenset({TOP_LEFT_CAUSAL})):
        reason = _reads_cache(site, path)
        if reason is not None and not _mode_ignored(site, mode, path):
            yield Issue("KVL206", site.anchor("sparse_mode"),
                        f"sparse_mode={mode} aligns the causal mask top-left, but {reason}: the new queries "
                        "then miss most of the cached keys; use sparse_mode=3 (bottom-right) with the 2048x2048 mask")
            return


MASK_PARAMETER = re.compile(r"^(attention_mask|attn_mask|atten_mask|mask|causal_mask|key_padding_mask|"
                            r"padding_mask|src_mask|attn_masks|attention_masks)$")
CAUSAL_PARAMETER = re.compile(r"^(is_causal|causal|use_causal|causal_attention)$")
"""Parameters that carry masking for the attention a function computes (``_mask`` says it is unused)."""


_DOCUMENTED_UNUSED = re.compile(r"\b(reserved|unused|not used|ignored|has no effect|not supported|no-op)\b",
                                re.IGNORECASE)


def _documented_unused(function: nodes.FunctionDef, name: str) -> bool:
    """The docstring says the parameter is not used (``attn_mask: Reserved for future use``)."""
    doc = function.doc_node.value if function.doc_node is not None else ""
    for match in re.finditer(rf"\b{re.escape(name)}\b", doc):
        entry = re.split(r"\n\s*\n|\n\s*\w+\s*(?:\(|:)", doc[match.end():], maxsplit=1)[0]
        if _DOCUMENTED_UNUSED.search(entry[:300]):
            return True
    return False


def _reads(function: nodes.FunctionDef, name: str) -> bool:
    """The function body reads the name (nested functions included) or deletes it on purpose (``del mask``)."""
    return bool(nodes_named(function, (nodes.Name, nodes.DelName), name))


def check_atten_mask_dropped(site: CallSite) -> Iterator[Issue]:
    """KVL207: a function that takes a mask or causality parameter, never reads it, and calls the operator
    without ``atten_mask`` silently attends what the caller asked to hide: padding, or the future. Not for a
    parameter its name (``_mask``) or its docstring (``Reserved``, ``unused``) says is unused, a causality flag
    where the code proves a query of length 1 (nothing to hide), nor a mask parameter where the call passes
    KV lengths (padding is cut by the lengths)."""
    if site.name not in INFERENCE_ATTENTION and site.name != FA or site.open_ended:
        return
    function = site.call.frame()
    if not isinstance(function, nodes.FunctionDef):
        return
    if site.argument("atten_mask") is not None and not all(alt.value.is_none for alt in site.values("atten_mask")):
        return
    arguments = function.args.posonlyargs + function.args.args + function.args.kwonlyargs
    for param in (a.name for a in arguments):
        causal = bool(CAUSAL_PARAMETER.match(param))
        if not (causal or MASK_PARAMETER.match(param)) or _reads(function, param) or _documented_unused(function, param):
            continue
        if causal and all(length == ONE for length, _ in query_lengths(site, EMPTY)):
            continue
        kv_lengths = KV_LENGTHS_PARAM.get(site.name) or "actual_seq_kvlen"
        if not causal and site.argument(kv_lengths) is not None and not all(
                alt.value.is_none for alt in site.values(kv_lengths)):
            continue
        hidden = "a caller asking for causal attention gets every token attending the future" if causal else (
            "the positions it masks (padding, the future) are attended")
        yield Issue("KVL207", site.call,
                    f"{function.name}() takes '{param}' but never reads it, and calls {site.name} without "
                    f"atten_mask: {hidden}; build atten_mask (and sparse_mode) from it, or raise when it is set "
                    "if this path cannot mask")
        return


def _sdpa_argument(call: nodes.Call, name: str) -> nodes.NodeNG | None:
    for keyword in call.keywords or ():
        if keyword.arg == name:
            return keyword
    position = _SDPA_POSITIONS[name]
    return call.args[position] if len(call.args) > position else None


def _root_name(expr: nodes.NodeNG) -> str | None:
    """The identifier an argument expression starts from: ``self.k_cache[:, :n].transpose(1, 2)`` -> k_cache."""
    while True:
        if isinstance(expr, nodes.Call) and isinstance(expr.func, nodes.Attribute):
            expr = expr.func.expr
        elif isinstance(expr, nodes.Subscript):
            expr = expr.value
        elif isinstance(expr, nodes.Attribute):
            return expr.attrname
        elif isinstance(expr, nodes.Name):
            return expr.name
        else:
            return None


def _cached(expr: nodes.NodeNG | None, path: Path) -> bool:
    """The argument is a cache: named like one, or a cache grown by ``torch.cat`` on this path. (A value
    gathered from a cache into a differently named variable is not judged: reference code pads the query
    to the gathered length, where top-left alignment is right.)"""
    if expr is None:
        return False
    value = expr.value if isinstance(expr, nodes.Keyword) else expr
    root = _root_name(value)
    if root is not None and CACHE_NAME.search(root):
        return True
    return any(alt.value.has(GROWN_CACHE) for alt in values(value, path))


def check_sdpa_causal_over_cache(module: nodes.Module, settings: Settings) -> Iterator[Issue]:
    """KVL206 (SDPA): ``scaled_dot_product_attention(..., is_causal=True)`` is top-left aligned; with a key
    or value that is a cache (concatenated with past keys, or named like one) the new queries miss the
    cache. Build a bottom-right mask (``torch.nn.attention.bias.causal_lower_right``)."""
    for call in nodes_of(module, nodes.Call):
        causal = _sdpa_argument(call, "is_causal")
        if causal is None or qualified_name(call.func) not in SDPA:
            continue
        causal_value = causal.value if isinstance(causal, nodes.Keyword) else causal
        for alt in values(causal_value, EMPTY):
            if alt.value.const is not True:
                continue
            cached = [n for n in ("key", "value") if _cached(_sdpa_argument(call, n), alt.path)]
            if cached:
                yield Issue("KVL206", causal,
                            f"is_causal=True aligns the causal mask top-left, but the {cached[0]} is a KV cache: "
                            "every new query misses the cached keys after its own index; pass a bottom-right "
                            "mask (torch.nn.attention.bias.causal_lower_right) instead of is_causal")
                break
