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
from kvlint.analysis.facts import ADDITIVE, ADDITIVE_CAST, CACHE_NAME, FLOAT_DTYPES, GROWN_CACHE, TOP_LEFT, TRIL, Dim, Value
from kvlint.analysis.finding import Issue
from kvlint.analysis.flow import EMPTY, Path, reaching_definitions
from kvlint.analysis.follow import bind_arguments, callers
from kvlint.analysis.intent import CAUSAL_FLAG, CausalEvidence, causal_evidence, parameter_evidence
from kvlint.analysis.memo import tree_cache
from kvlint.analysis.names import enclosing_class, is_self, qualified_name
from kvlint.analysis.query_length import ONE, query_lengths
from kvlint.analysis.settings import Settings
from kvlint.analysis.siblings import (flag_attributes, flag_side, honoured_by_sibling_function, honoured_elsewhere,
                                      mentions)
from kvlint.analysis.walk import nodes_named, nodes_of
from kvlint.checks.signature import misspelled_mask
from kvlint.catalogue.operators import (FA, FA_LENGTHS, FIA, IFA, INFERENCE_ATTENTION, KV_LENGTHS_PARAM, PFA,
                                        QUERY_LENGTHS_PARAM)

MASK_DTYPES = frozenset({"bool", "int8", "uint8"})
FA_MASK_DTYPES = frozenset({"bool", "uint8"})
TEMPLATE = 2048
TEMPLATE_MODES = frozenset({2, 3, 4})
MODES_NEEDING_MASK = frozenset({1, 2, 3, 4})
TOP_LEFT_CAUSAL = 2
SPARSE_OPERATORS = FIA | {PFA}
"""Operators whose sparse_mode 2/3/4 take the fixed 2048x2048 template mask."""
SDPA = ("torch.nn.functional.scaled_dot_product_attention", "torch._C._nn.scaled_dot_product_attention")
_SDPA_POSITIONS = {"key": 1, "value": 2, "attn_mask": 3, "is_causal": 5}


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
        if value.has(ADDITIVE_CAST):
            cast = f" at line {value.origin.lineno}" if value.origin is not None and value.origin.lineno else ""
            yield Issue("KVL201", site.anchor("atten_mask"),
                        f"atten_mask is an additive mask (-inf / finfo.min / a large negative where masked) converted "
                        f"to {value.dtype}{cast}: those values have no integer form (undefined in C++; torch on x86 "
                        "gives 0, which means 'not masked', and -65504 gives 32 only by the wrap); convert it with "
                        "`mask < 0` or `.bool()` (every non-zero is True) instead of an integer cast")
            return
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
    sparse_mode when the mask is None and silently computes full, non-causal attention. Reported only where
    the code shows causal intent on the path (``kvlint.analysis.intent``): a copied literal mode is not
    evidence, and a mask that is None where a causality flag is false is the full attention asked for."""
    if site.name not in SPARSE_OPERATORS and site.name != FA or misspelled_mask(site):
        return
    for mode, path in _modes(site, MODES_NEEDING_MASK):
        for alt in site.values("atten_mask", path):
            if not alt.value.is_none or _mode_ignored(site, mode, alt.path):
                continue
            evidence = causal_evidence(site, alt.path)
            if evidence is None or not evidence.causal:
                continue
            if site.name == FA:
                consequence = ("npu_fusion_attention then ignores sparse_mode and computes full, non-causal "
                               "attention (the same as sparse_mode=3 only for a query of length 1, which the code "
                               "does not prove)")
            else:
                consequence = (f"{site.name} raises for prefill (it ignores sparse_mode only for a query of length 1 "
                               "without rope inputs, which the code does not prove here)")
            yield Issue("KVL203", site.anchor("sparse_mode"),
                        f"sparse_mode={mode} with no atten_mask on this path, where the code asks for causal "
                        f"attention ({evidence.text}): {consequence}; pass the {TEMPLATE}x{TEMPLATE} mask "
                        "torch.triu(torch.ones(2048, 2048, dtype=torch.bool), diagonal=1)")
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
    q_param, kv_param = (FA_LENGTHS if site.name == FA else
                         (QUERY_LENGTHS_PARAM.get(site.name), KV_LENGTHS_PARAM.get(site.name)))
    if kv_param is None or not _apart(site, kv_param, q_param, path):
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


def _over_cache(site: CallSite, path: Path) -> str | None:
    """Why the call attends over cached KV on ``path``: it reads a cache (``_reads_cache``), it is incremental
    attention (IFA decodes over a cache), or its key is a cache (named like one, or grown by ``torch.cat``
    with past keys)."""
    reason = _reads_cache(site, path)
    if reason is None and site.name == IFA:
        reason = f"{IFA} decodes over a KV cache"
    key = site.argument("key")
    if reason is None and _cached(key, path):
        reason = f"its key ({key.as_string()}) is a KV cache"
    return reason


def _apart(site: CallSite, kv_param: str, q_param: str | None, path: Path) -> bool:
    """The call passes KV lengths on ``path``, as an expression other than its query lengths'."""
    kv_lengths = site.argument(kv_param)
    q_lengths = site.argument(q_param) if q_param else None
    if kv_lengths is None or all(alt.value.is_none for alt in site.values(kv_param, path)):
        return False
    return q_lengths is None or q_lengths.as_string() != kv_lengths.as_string()


_READ_OFF_A_SHAPE = re.compile(r"^[\w.]+(\.shape\[[^\]]+\]|\.size\([^)]*\))$")
"""A length read off a tensor (``q.shape[-2]``, ``k.size(2)``), not one the code keeps for itself."""


def _lengths_kept_apart(rows: object, columns: object) -> str | None:
    """Why the mask's sizes say KV_S > Q_S happens: the code keeps a KV length of its own (``kv_len``,
    ``kv_seq_len += past_len``, ``4096``) apart from the query's. Sizes read off the query's and the key's
    shapes say nothing of the kind: that is how attention over equal lengths is written too."""
    if rows is None or columns is None or rows == columns:
        return None
    if all(isinstance(d, str) and _READ_OFF_A_SHAPE.match(d) for d in (rows, columns)):
        return None
    return f"its KV length ({columns}) is kept apart from the query length ({rows})"


def check_top_left_mask_over_cache(site: CallSite) -> Iterator[Issue]:
    """KVL206 (a built mask): ``torch.triu(torch.ones(q_len, kv_len), diagonal=1)`` (or ``~tril``) aligns the
    causal triangle top-left: query i sees keys 0..i. Over a KV cache (KV_S > Q_S: chunked prefill, a prefix
    cache, speculative extends) the new queries then miss the cached keys. Judged where the mode uses the mask
    as given (sparse_mode 0 or 1, or IFA), where the code says KV_S > Q_S happens: the call proves a cache
    (``_over_cache``, as the rule's other two forms require), or the mask is sized by a KV length the code keeps
    apart from the query's (``_lengths_kept_apart``). A mask sized by the query's and the key's own shapes,
    over a call that proves no cache, is how self-attention over equal lengths is written (a kernel
    benchmark), where top-left is right."""
    if site.name not in INFERENCE_ATTENTION and site.name != FA:
        return
    has_mode = site.operator.param("sparse_mode") is not None
    modes = site.values("sparse_mode") if has_mode else [None]
    for mode_alt in modes:
        path = mode_alt.path if mode_alt is not None else EMPTY
        if mode_alt is not None and _int_mode(mode_alt.value) not in (0, 1):
            continue
        for alt in site.values("atten_mask", path):
            value = alt.value
            if not (value.tensor and value.has(TOP_LEFT)) or value.has(TRIL):
                continue  # a tril mask never inverted hides the visible part: KVL204's finding comes first
            known, _ = split(value.shape)
            sizes = (known[-2:] if len(known) >= 2 else (None, None))
            reason = _over_cache(site, alt.path) or _lengths_kept_apart(*sizes)
            if reason is None:
                continue
            rows, columns = ("?" if d is None else str(d) for d in sizes)
            yield Issue("KVL206", site.anchor("atten_mask"),
                        f"atten_mask{_built_at(value, site.call.lineno)} is a causal triangle over ({rows}, {columns}) "
                        f"aligned top-left (query i sees keys 0..i), but {reason}: with {columns} > {rows} the new "
                        "queries miss the keys cached before them; align it bottom-right: "
                        f"torch.triu(..., diagonal={columns} - {rows} + 1)")
            return


MASK_PARAMETER = re.compile(r"^(attention_mask|attn_mask|atten_mask|mask|causal_mask|key_padding_mask|"
                            r"padding_mask|src_mask|attn_masks|attention_masks)$")
CAUSAL_PARAMETER = re.compile(r"^(is_causal|causal|use_causal|causal_attention)$")
"""Parameters that carry masking for the attention a function computes (``_mask`` says it is unused)."""


_DOCUMENTED_UNUSED = re.compile(r"\b(reserved|unused|not used|ignored|has no effect|not supported|no-op)\b",
                                re.IGNORECASE)


def documented_unused(function: nodes.FunctionDef, name: str) -> bool:
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


def callers_pass_none(function: nodes.FunctionDef, param: str) -> bool:
    """Every same-module caller gives the parameter None (passed, or the default): there is no mask to drop."""
    calls = callers(function)
    bound = [bind_arguments(function, call) for call in calls]
    return bool(calls) and all(
        arguments is not None and isinstance(arguments.get(param), nodes.Const) and arguments[param].value is None
        for arguments in bound)


def _mask_absent(site: CallSite) -> bool:
    return site.argument("atten_mask") is None or all(alt.value.is_none for alt in site.values("atten_mask"))


def check_atten_mask_dropped(site: CallSite) -> Iterator[Issue]:
    """KVL207: a function that takes a mask or causality parameter, never reads it, and calls the operator
    without ``atten_mask`` silently attends what the caller asked to hide: padding, or the future. Not for a
    parameter its name (``_mask``) or its docstring (``Reserved``, ``unused``) says is unused, a mask every
    same-module caller gives None, a causality flag nothing shows true (``causal=True`` from a caller in the
    module, or a default of True), a causality flag where the code proves a query of length 1 (nothing to
    hide), nor a mask parameter where the call passes KV lengths (padding is cut by the lengths). Also for a
    parameter read only on sibling paths that honour it (a flash-attn or SDPA branch takes the flag, the
    eager branch adds the mask to its scores) while this call's path reads it nowhere: the call has no mask,
    or (for a mask) only the causal template, so the padding the mask hides is attended. Also for a class
    that stores a causality flag from its constructor (``self.causal = causal``), never reads it, and calls
    the operator without a mask where the module constructs it with the flag true."""
    if site.name not in INFERENCE_ATTENTION and site.name != FA or site.open_ended or misspelled_mask(site):
        return
    function = site.call.frame()
    if not isinstance(function, nodes.FunctionDef):
        return
    messages = list(_dropped_masking(site, function))
    if messages:
        yield Issue("KVL207", site.call, "; also ".join(messages))
        return
    yield from _stored_flag_unread(site, function)


def _dropped_masking(site: CallSite, function: nodes.FunctionDef) -> Iterator[str]:
    """A message for each mask or causality parameter of ``function`` this call drops."""
    absent = _mask_absent(site)
    kv_lengths = KV_LENGTHS_PARAM.get(site.name) or FA_LENGTHS[1]
    lengths = site.argument(kv_lengths) is not None and not all(alt.value.is_none for alt in site.values(kv_lengths))
    arguments = function.args.posonlyargs + function.args.args + function.args.kwonlyargs
    candidates = [(a.name, False) for a in arguments]
    candidates += [(name, True) for name in flag_attributes(function, CAUSAL_PARAMETER)]
    for param, attribute in candidates:
        causal = bool(CAUSAL_PARAMETER.match(param))
        if not (causal or MASK_PARAMETER.match(param)) or documented_unused(function, param):
            continue
        if not attribute and not _reads(function, param):
            if absent:
                message = _never_read(site, function, param, causal, lengths)
                if message is not None:
                    yield message
            continue
        if causal and not absent or not causal and (lengths or callers_pass_none(function, param)):
            continue
        mask_argument = site.argument("atten_mask")
        template = next((mode for mode, _ in _modes(site, TEMPLATE_MODES)), None)
        if not absent and (template is None or mentions(mask_argument, "" if attribute else param,
                                                        param if attribute else None)):
            continue  # the call builds its own mask from something else, or from this one
        if causal and (any(check_sparse_mode_needs_mask(site)) or all(
                length == ONE for length, _ in query_lengths(site, EMPTY))):
            continue
        if not causal and flag_side(site.call, function, CAUSAL_FLAG) is False:
            continue  # the mask belongs to the causal branch: None under 'not causal' is full attention
        honoured = honoured_elsewhere(function, site.call, param, mask=not causal, attribute=attribute)
        if honoured is None:
            continue
        takes = (f"reads self.{param} on another path" if attribute
                 else f"takes '{param}' and honours it on another path")
        if causal:
            yield (f"{function.name}() {takes} ({honoured.text}), but this "
                   f"{site.name} call's path never reads it and passes no atten_mask: a caller asking for causal "
                   "attention gets full attention here; build atten_mask (and sparse_mode) from it, or raise when "
                   "it is set if this path cannot mask")
        else:
            does = "passes no atten_mask" if absent else f"passes only the causal template (sparse_mode={template})"
            yield (f"{function.name}() {takes} ({honoured.text}), but this "
                   f"{site.name} call's path never reads it and {does}: the positions the mask hides (padding) "
                   f"are attended here; build atten_mask from it (True = masked out) or pass the KV lengths "
                   f"({kv_lengths})")


def _never_read(site: CallSite, function: nodes.FunctionDef, param: str, causal: bool, lengths: bool) -> str | None:
    """The message for a mask or causality parameter the function never reads, when the code shows it
    matters (a causality flag shown true; a mask that some caller may pass and no KV lengths replace)."""
    evidence = parameter_evidence(function, param) if causal else None
    sibling = None
    if causal and (evidence is None or not evidence.causal and not callers(function)):
        sibling = honoured_by_sibling_function(function, param)
    if causal and sibling is None and (evidence is None or not evidence.causal) or causal and any(
            check_sparse_mode_needs_mask(site)):
        return None  # no sign the caller asks for causal attention, or KVL203 reports the missing mask
    if causal and all(length == ONE for length, _ in query_lengths(site, EMPTY)):
        return None
    if sibling is not None:
        return (f"{function.name}() takes '{param}' but never reads it ({sibling.text}), and calls {site.name} "
                "without atten_mask: a caller asking for causal attention through this backend gets full "
                "attention; build atten_mask (and sparse_mode) from it, or raise when it is set if this path "
                "cannot mask")
    if not causal and (callers_pass_none(function, param) or lengths):
        return None
    hidden = (f"a caller asking for causal attention ({evidence.text}) gets every token attending the future"
              if evidence is not None else "the positions it masks (padding, the future) are attended")
    return (f"{function.name}() takes '{param}' but never reads it, and calls {site.name} without "
            f"atten_mask: {hidden}; build atten_mask (and sparse_mode) from it, or raise when it is set "
            "if this path cannot mask")


def _stored_flag_unread(site: CallSite, function: nodes.FunctionDef) -> Iterator[Issue]:
    """KVL207 for a constructor flag: ``__init__(self, causal=False)`` stores ``self.causal``, no method reads
    it, and the call has no mask on some path, while the module builds the class with the flag true."""
    cls = enclosing_class(site.call)
    init = cls.locals.get("__init__", [None])[0] if cls is not None else None
    if not isinstance(init, nodes.FunctionDef) or not any(alt.value.is_none for alt in site.values("atten_mask")):
        return
    for attribute, param, target in _stored_flags(init):
        if _attribute_read(cls, attribute):
            continue
        evidence = _constructed_with(cls, init, param)
        if evidence is None or not evidence.causal:
            continue
        if all(length == ONE for length, _ in query_lengths(site, EMPTY)):
            continue
        # One finding per class, at the assignment: the defect is the flag nothing reads.
        yield Issue("KVL207", target,
                    f"{cls.name} stores '{param}' as self.{attribute} but never reads it, and calls the attention "
                    f"operators without atten_mask: {evidence.text}, and that instance runs full, non-causal "
                    f"attention; build atten_mask (and sparse_mode) from self.{attribute}")
        return


def _stored_flags(init: nodes.FunctionDef) -> Iterator[tuple[str, str, nodes.AssignAttr]]:
    """(attribute, parameter, the target) for each ``self.<attribute> = <causality parameter>`` in ``__init__``."""
    params = {a.name for a in init.args.posonlyargs + init.args.args + init.args.kwonlyargs}
    for assign in nodes_of(init, nodes.Assign):
        pairs = [(target, assign.value) for target in assign.targets]
        pairs += [pair for target in assign.targets if isinstance(target, nodes.Tuple) and isinstance(
            assign.value, nodes.Tuple) and len(target.elts) == len(assign.value.elts)
            for pair in zip(target.elts, assign.value.elts)]
        for target, value in pairs:
            if (isinstance(value, nodes.Name) and value.name in params and CAUSAL_PARAMETER.match(value.name)
                    and isinstance(target, nodes.AssignAttr) and is_self(target.expr)):
                yield target.attrname, value.name, target


def _attribute_read(cls: nodes.ClassDef, attribute: str) -> bool:
    """Some method of the class reads ``self.<attribute>`` (or names it in a string, as ``getattr`` does)."""
    for node in nodes_of(cls, (nodes.Attribute, nodes.Const)):
        if isinstance(node, nodes.Attribute) and node.attrname == attribute:
            return True
        if isinstance(node, nodes.Const) and node.value == attribute:
            return True
    return False


def _constructed_with(cls: nodes.ClassDef, init: nodes.FunctionDef, param: str) -> CausalEvidence | None:
    """The causality the module's constructions of the class pass: ``Attention(causal=True)``."""
    found = None
    for call in nodes_of(cls.root(), nodes.Call):
        if not (isinstance(call.func, nodes.Name) and call.func.name == cls.name):
            continue
        if any(isinstance(a, nodes.Starred) for a in call.args) or any(k.arg is None for k in call.keywords or ()):
            return None
        passed = {k.arg: k.value for k in call.keywords or ()}
        params = [a.name for a in init.args.posonlyargs + init.args.args][1:]
        passed.update({name: arg for name, arg in zip(params, call.args)})
        expr = passed.get(param)
        if isinstance(expr, nodes.Const) and expr.value is True:
            found = CausalEvidence(True, f"the module builds {cls.name}({param}=True) at line {call.lineno}")
    return found


def check_sdpa_mask_reused(site: CallSite) -> Iterator[Issue]:
    """KVL204 (an SDPA mask): the same mask variable goes to ``scaled_dot_product_attention``'s ``attn_mask``
    on one branch and to the operator's ``atten_mask`` on another. SDPA reads a bool mask as True = attend and
    a float mask as added to the scores; the Ascend operators read True/1 as masked out, so one of the two
    branches masks the wrong positions."""
    if site.name not in INFERENCE_ATTENTION and site.name != FA:
        return
    expr = site.argument("atten_mask")
    if not isinstance(expr, nodes.Name):
        return
    sdpa_masks = _sdpa_masks(site.call.frame()).get(expr.name)
    if not sdpa_masks:
        return
    reaching = {definition for definition, _ in reaching_definitions(expr.name, expr)}
    for call, mask in sdpa_masks:
        if {definition for definition, _ in reaching_definitions(mask.name, mask)} != reaching:
            continue
        yield Issue("KVL204", site.anchor("atten_mask"),
                    f"the same '{expr.name}' goes to scaled_dot_product_attention's attn_mask at line {call.lineno}: "
                    f"SDPA reads a bool mask as True = attend and a float mask as added to the scores, {site.name} "
                    f"reads True/1 as masked out, so one of the two branches masks the wrong positions; convert it "
                    f"for one of them (~{expr.name} turns one bool convention into the other; {expr.name} < 0 turns "
                    "an additive mask into the operator's)")
        return


_SDPA_MASKS: dict[nodes.NodeNG, dict[str, list[tuple[nodes.Call, nodes.Name]]]] = tree_cache()


def _sdpa_masks(frame: nodes.NodeNG) -> dict[str, list[tuple[nodes.Call, nodes.Name]]]:
    """The ``scaled_dot_product_attention`` calls of the frame (not of functions nested in it) whose
    ``attn_mask`` is a plain name, by that name, in the frame's order: found once per frame (a function of n
    operator calls must not be walked n times)."""
    if frame not in _SDPA_MASKS:
        by_name: dict[str, list[tuple[nodes.Call, nodes.Name]]] = {}
        for call in nodes_of(frame, nodes.Call):
            if call.frame() is not frame or qualified_name(call.func) not in SDPA:
                continue
            argument = _sdpa_argument(call, "attn_mask")
            mask = argument.value if isinstance(argument, nodes.Keyword) else argument
            if isinstance(mask, nodes.Name):
                by_name.setdefault(mask.name, []).append((call, mask))
        _SDPA_MASKS[frame] = by_name
    return _SDPA_MASKS[frame]


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
