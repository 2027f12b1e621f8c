"""Rules on argument values of the attention operators (KVL104-KVL111, KVL115).

Defaults that are wrong for nearly every real model, literal values outside the documented set, argument
combinations the documentation requires (docs/operators/fused_infer_attention.md#fia-arguments and
#fia-family; the constraints are catalogued in docs/operators/constraints.md), and tensors passed where the
schema takes an int (docs/operators/dispatcher.md#dsp-t4).
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from astroid import nodes

from kvlint.analysis.callsite import CallSite
from kvlint.analysis.axes import names_query_heads
from kvlint.analysis.evaluate import literal
from kvlint.analysis.facts import FLOAT_DTYPES, is_torch_function
from kvlint.analysis.finding import Issue
from kvlint.analysis.flow import reaching_definitions, terminates
from kvlint.analysis.memo import tree_cache
from kvlint.analysis.names import is_self, qualified_name
from kvlint.analysis.shape_tests import computes_no_numbers
from kvlint.analysis.walk import nodes_of
from kvlint.catalogue.operators import (
    FA,
    FA_LAYOUTS,
    FIA,
    FIA_V1,
    INFERENCE_ATTENTION,
    KV_HEADS_PARAM,
    KV_LAYOUT_PARAM,
    FA_LENGTHS,
    KV_LENGTHS_PARAM,
    LAYOUTS,
    LENGTH_LAYOUTS,
    MAX_GQA_RATIO,
    NUM_HEADS_PARAM,
    QUERY_LAYOUT_PARAM,
    QUERY_LENGTHS_PARAM,
    ROPE_ONLY_SPARSE_MODES,
    SCALE_PARAM,
    SPARSE_ATTENTION_LAYOUTS,
    SPARSE_MODES,
)

_ANY_SCALE = frozenset(SCALE_PARAM.values())
_ANY_NUM_HEADS = frozenset(NUM_HEADS_PARAM.values())
_KV_LENGTH_NAME = re.compile(r"(^|_)(kv|kvs|context|ctx|cache|cached|past|kvlen|kvlens)(_|$)", re.IGNORECASE)


def _anchor(site: CallSite, name: str) -> nodes.NodeNG:
    if name in site.keywords:
        return site.keywords[name].anchor
    return site.argument(name) or site.call


def check_default_scale(site: CallSite) -> Iterator[Issue]:
    """KVL104: the scale defaults to 1.0, not 1/sqrt(head_dim); softmax then saturates silently."""
    if site.name not in INFERENCE_ATTENTION or site.open_ended or _ANY_SCALE & site.keywords.keys():
        return
    if computes_no_numbers(site):
        return
    param = SCALE_PARAM[site.name]
    yield Issue("KVL104", site.call,
                f"{site.name} called without '{param}': the default is 1.0, not 1/sqrt(head_dim); "
                f"pass {param}=1.0 / math.sqrt(head_dim)")


def check_default_num_heads(site: CallSite) -> Iterator[Issue]:
    """KVL105: the query head count defaults to 1, which reads a BSH hidden axis as one huge head. Reported
    only where the code around the call has a query head count of its own (a parameter, a local, an
    attribute it reads or the class sets): a single-head call (a kernel test, a tutorial) rightly keeps
    the default."""
    if site.name not in INFERENCE_ATTENTION or site.open_ended or _ANY_NUM_HEADS & site.keywords.keys():
        return
    if computes_no_numbers(site):
        return
    evidence = _head_count_in_scope(site.call.frame())
    if evidence is None:
        return
    param = NUM_HEADS_PARAM[site.name]
    yield Issue("KVL105", site.call,
                f"{site.name} called without '{param}': the default is 1 (one head as wide as the hidden "
                f"axis), but the code has a head count '{evidence}'; pass {param}={evidence}")


_HEAD_COUNTS: dict[nodes.NodeNG, str | None] = tree_cache()


def _head_count_in_scope(frame: nodes.NodeNG) -> str | None:
    """The first query head count the function names (parameter, local, attribute read), else one its
    class assigns to ``self``, as written in the code; None when there is none."""
    if frame not in _HEAD_COUNTS:
        _HEAD_COUNTS[frame] = _first_head_count(frame)
    return _HEAD_COUNTS[frame]


def _first_head_count(frame: nodes.NodeNG) -> str | None:
    if not isinstance(frame, nodes.FunctionDef):
        return None
    for named in nodes_of(frame, (nodes.AssignName, nodes.Name, nodes.Attribute, nodes.AssignAttr)):
        attribute = isinstance(named, (nodes.Attribute, nodes.AssignAttr))
        if names_query_heads(named.attrname if attribute else named.name):
            return named.as_string() if attribute else named.name
    owner = frame.parent
    if isinstance(owner, nodes.ClassDef):
        for assigned in nodes_of(owner, nodes.AssignAttr):
            if is_self(assigned.expr) and names_query_heads(assigned.attrname):
                return f"self.{assigned.attrname}"
    return None


def check_invalid_layout(site: CallSite) -> Iterator[Issue]:
    """KVL106: a layout outside the accepted set raises (FIA/IFA/PFA compare case-sensitively; the
    sparse-attention kernels have a query and a key layout of their own)."""
    role = site.role
    if role == FA:
        checked = [("input_layout", FA_LAYOUTS, "")]
    elif role in LAYOUTS:
        checked = [("input_layout", LAYOUTS[role], " (case-sensitive)")]
    else:
        checked = [(param, SPARSE_ATTENTION_LAYOUTS[param], "")
                   for param in (QUERY_LAYOUT_PARAM.get(role), KV_LAYOUT_PARAM.get(role)) if param]
    for param, accepted, case in checked:
        value = literal(site.argument(param))
        if not isinstance(value, str) or (value.upper() if role == FA else value) in accepted:
            continue
        hint = f"use '{value.upper()}'" if value.upper() in accepted else "use one of " + ", ".join(sorted(accepted))
        yield Issue("KVL106", _anchor(site, param), f"{param} '{value}' is not accepted by {site.name}{case}; {hint}")


def check_invalid_sparse_mode(site: CallSite) -> Iterator[Issue]:
    """KVL107: FIA accepts sparse_mode 0-4 (9 only for MLA with both rope inputs), PFA 0-4, the
    sparse-attention kernels 0 and 3; FIA's 5-8 are documented as not implemented and raise for prefill."""
    role = site.role
    accepted = SPARSE_MODES.get(role)
    value = literal(site.argument("sparse_mode"))
    if accepted is None or not isinstance(value, int) or isinstance(value, bool) or value in accepted:
        return
    has_rope = site.argument("query_rope") is not None and site.argument("key_rope") is not None
    if role in FIA and value in ROPE_ONLY_SPARSE_MODES:
        if has_rope or site.open_ended:
            return
        message = f"sparse_mode={value} (treeMask) needs query_rope and key_rope in {site.name}"
    else:
        listed = ("0-4, and 9 only with query_rope/key_rope" if role in FIA
                  else "0-4" if accepted == frozenset(range(5)) else " and ".join(map(str, sorted(accepted))))
        message = f"sparse_mode={value} is not accepted by {site.name} ({listed})"
    yield Issue("KVL107", _anchor(site, "sparse_mode"), message)


def check_rope_pair(site: CallSite) -> Iterator[Issue]:
    """KVL108: MLA needs query_rope and key_rope together; one alone is rejected or misread."""
    if site.role not in FIA:
        return
    for given, missing in (("query_rope", "key_rope"), ("key_rope", "query_rope")):
        if site.argument(given) is not None and site.absent(missing):
            yield Issue("KVL108", _anchor(site, given),
                        f"'{given}' given without '{missing}': MLA needs both; pass {missing}=...")


def check_gqa_heads(site: CallSite) -> Iterator[Issue]:
    """KVL109: query heads must be a multiple of KV heads; FIA/IFA/PFA take at most 64 per KV head. ATB's
    paged operators take ``num_kv_heads, num_heads`` in that order, its flash operators the other way round:
    a call copied from one to the other swaps them (ATB-T2)."""
    role = site.role
    if role not in KV_HEADS_PARAM:
        return
    param, kv_param = NUM_HEADS_PARAM[role], KV_HEADS_PARAM[role]
    heads = literal(site.argument(param))
    kv_heads = literal(site.argument(kv_param))
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (heads, kv_heads)) or kv_heads <= 0:
        return
    if heads % kv_heads:
        message = f"{param}={heads} is not divisible by {kv_param}={kv_heads}" + _head_order(site, param, kv_param)
    elif role in INFERENCE_ATTENTION and heads // kv_heads > MAX_GQA_RATIO:
        message = (f"{param}={heads} / {kv_param}={kv_heads} = {heads // kv_heads}: "
                   f"the operator supports at most {MAX_GQA_RATIO} query heads per KV head")
    else:
        return
    yield Issue("KVL109", _anchor(site, kv_param), message)


def _head_order(site: CallSite, param: str, kv_param: str) -> str:
    """The positional order of the two head counts, when the call passes both by position."""
    names = [p.name for p in site.operator.positional[:len(site.positional)]]
    if param not in names or kv_param not in names:
        return ""
    first, second = sorted((param, kv_param), key=names.index)
    return f" ({site.name} takes {first} before {second}: are they swapped?)"


def _terminal_name(expr: nodes.NodeNG) -> str | None:
    """The identifier a value is named by: ``kv_lens``, ``meta.context_lens``, ``kv_lens.tolist()``."""
    if isinstance(expr, nodes.Call) and isinstance(expr.func, nodes.Attribute):
        return _terminal_name(expr.func.expr)
    if isinstance(expr, nodes.Name):
        return expr.name
    if isinstance(expr, nodes.Attribute):
        return expr.attrname
    return None


def check_seq_lengths_kv_habit(site: CallSite) -> Iterator[Issue]:
    """KVL110: IFA's actual_seq_lengths are KV lengths, FIA's are query lengths. Ported IFA code that
    keeps passing KV lengths there is accepted, and FIA ignores it for decode: padding is attended."""
    if site.name != FIA_V1 or "actual_seq_lengths" not in site.keywords:
        return
    if not site.absent("actual_seq_lengths_kv"):
        return
    name = _terminal_name(site.keywords["actual_seq_lengths"].value)
    if name is None or not _KV_LENGTH_NAME.search(name):
        return
    yield Issue("KVL110", site.keywords["actual_seq_lengths"].anchor,
                f"'{name}' looks like KV lengths, but actual_seq_lengths is the query lengths in {FIA_V1} "
                "(the KV lengths in IFA); pass it as actual_seq_lengths_kv")


def check_tnd_missing_lengths(site: CallSite) -> Iterator[Issue]:
    """KVL111: the TND/NTD layouts pack sequences; without both cumulative length lists the operator
    cannot tell where one sequence ends. The sparse-attention kernels need the lengths of each TND side."""
    if site.open_ended:
        return
    role = site.role
    if role in QUERY_LAYOUT_PARAM:
        yield from _sparse_tnd_missing_lengths(site, role)
        return
    layout = literal(site.argument("input_layout"))
    if not isinstance(layout, str):
        return
    if role == FA:
        if layout.upper() != "TND":
            return
        needed = FA_LENGTHS
    elif role in QUERY_LENGTHS_PARAM and layout in LENGTH_LAYOUTS:
        needed = (QUERY_LENGTHS_PARAM[role], KV_LENGTHS_PARAM[role])
    else:
        return
    missing = [name for name in needed if site.absent(name)]
    if computes_no_numbers(site):
        return
    if missing:
        yield Issue("KVL111", _anchor(site, "input_layout"),
                    f"input_layout '{layout}' needs both {needed[0]} and {needed[1]} (cumulative lengths); "
                    f"missing: {', '.join(missing)}")
        return
    empty = [(name, found) for name in needed if (found := _empty_on_a_path(site.argument(name))) is not None]
    if empty:
        if len(empty) == 2 and empty[0][1] == empty[1][1]:
            described = f"{empty[0][0]} and {empty[1][0]} stay {empty[0][1]}"
        else:
            described = " and ".join(f"{name} stays {found}" for name, found in empty)
        yield Issue("KVL111", _anchor(site, "input_layout"),
                    f"input_layout '{layout}' needs both {needed[0]} and {needed[1]} (cumulative lengths), but "
                    f"{described}: the call raises there (the lists must be non-empty); build the lengths on "
                    "every path (one sequence per batch when there is no mask), or use a layout without lengths")


_GROWERS = frozenset({"append", "extend", "insert"})


def _empty_on_a_path(expr: nodes.NodeNG | None) -> str | None:
    """Where a length list the call receives stays empty (or None) on some path: the local ``[]``, ``()`` or
    None that reaches the call while every later ``append`` / ``extend`` / ``+=`` (or the other assignment)
    sits in an ``if`` that does not hold the call, whose other branch goes on to it. None when no path is
    shown."""
    while isinstance(expr, nodes.Call) and isinstance(expr.func, nodes.Name) and expr.func.name in (
            "tuple", "list") and len(expr.args) == 1 and not expr.keywords:
        expr = expr.args[0]
    if not isinstance(expr, nodes.Name):
        return None
    call_line = expr.lineno or 0
    reaching = reaching_definitions(expr.name, expr)
    for definition, _ in reaching:
        statement = definition.statement() if isinstance(definition, nodes.AssignName) else None
        if not (isinstance(statement, nodes.Assign) and len(statement.targets) == 1 and (
                isinstance(statement.value, (nodes.List, nodes.Tuple)) and not statement.value.elts
                or isinstance(statement.value, nodes.Const) and statement.value.value is None)):
            continue
        frame = statement.frame()
        empty = statement.value.as_string()
        changes = [node.statement() for node in nodes_of(frame, (nodes.Call, nodes.AugAssign))
                   if _grows(node, expr.name) and statement.lineno < (node.lineno or 0) < call_line]
        changes += [other.statement() for other, _ in reaching if other is not definition]
        guards = [_guard(change, expr) for change in changes]
        if any(guard is None for guard in guards):
            continue
        branches: dict[int, set[bool]] = {}
        for guard, in_body in guards:
            branches.setdefault(id(guard), set()).add(in_body)
        if any(len(taken) == 2 for taken in branches.values()):
            continue  # both branches of one if fill it
        if not guards:
            return f"{empty} (line {statement.lineno}) on every path (nothing fills it)"
        tests = sorted({f"'{guard.test.as_string()}' is {'false' if in_body else 'true'}"
                        for guard, in_body in guards})
        return f"{empty} (line {statement.lineno}) when {' or '.join(tests)} (only the other branch fills it)"
    return None


def _grows(node: nodes.NodeNG, name: str) -> bool:
    if isinstance(node, nodes.AugAssign):
        return isinstance(node.target, nodes.AssignName) and node.target.name == name
    func = node.func
    return isinstance(func, nodes.Attribute) and func.attrname in _GROWERS and isinstance(
        func.expr, nodes.Name) and func.expr.name == name


def _guard(statement: nodes.NodeNG, use: nodes.NodeNG) -> tuple[nodes.If, bool] | None:
    """The outermost ``if`` around ``statement`` that does not hold ``use`` and whose other branch goes on to
    it (it is empty, or neither returns nor raises), with True when ``statement`` is in its body."""
    found = None
    node = statement
    while node.parent is not None and node is not use.frame():
        parent = node.parent
        if isinstance(parent, nodes.If) and node is not parent.test and not any(
                ancestor is parent for ancestor in use.node_ancestors()):
            in_body = node in parent.body
            if not terminates(parent.orelse if in_body else parent.body):
                found = (parent, in_body)
        node = parent
    return found


def _sparse_tnd_missing_lengths(site: CallSite, role: str) -> Iterator[Issue]:
    for layout_param, lengths_param in ((QUERY_LAYOUT_PARAM[role], QUERY_LENGTHS_PARAM[role]),
                                        (KV_LAYOUT_PARAM[role], KV_LENGTHS_PARAM[role])):
        if literal(site.argument(layout_param)) == "TND" and site.absent(lengths_param):
            yield Issue("KVL111", _anchor(site, layout_param),
                        f"{layout_param} 'TND' needs {lengths_param} (cumulative lengths, an int32 tensor); "
                        f"{site.name} cannot tell where one sequence ends without it")


INT_TYPES = frozenset({"int", "SymInt", "int?", "SymInt?"})
"""Schema types of the scalar integer parameters (not the ``int[]`` length lists)."""


def _built_by_torch(origin: nodes.NodeNG) -> bool:
    """The expression calls a torch function, itself or under tensor methods (``torch.ones(1).npu()``), so
    what it builds is a torch tensor (``np.array(lens).cumsum()`` is a numpy array)."""
    node = origin
    while isinstance(node, nodes.Call):
        if is_torch_function(qualified_name(node.func)):
            return True
        if not isinstance(node.func, nodes.Attribute):
            return False
        node = node.func.expr
    return False


def check_tensor_int_argument(site: CallSite) -> Iterator[Issue]:
    """KVL115: the dispatcher converts a one-element tensor passed for an ``int`` parameter without a word: it
    reads the value on the host on every call (a device->host sync on the NPU, frozen into a captured graph)
    and truncates a float toward zero (``num_heads=torch.tensor(3.9)`` runs with 3 heads). Reported only
    where the code builds the tensor with a torch function, so the value is proved to be a tensor."""
    for param in site.operator.params:
        if param.type not in INT_TYPES or site.argument(param.name) is None:
            continue
        built = [alt.value for alt in site.values(param.name)
                 if alt.value.tensor and alt.value.origin is not None and _built_by_torch(alt.value.origin)]  # fmt: skip
        if not built:
            continue
        value = built[0]
        origin = value.origin.as_string()
        shown = origin if len(origin) <= 40 else origin[:37] + "..."
        truncates = f" and truncates this {value.dtype} tensor toward zero (3.9 runs as 3)" if (
            value.dtype in FLOAT_DTYPES) else ""
        yield Issue("KVL115", _anchor(site, param.name),
                    f"'{param.name}' is an int parameter of {site.name} but gets a tensor ({shown}): the dispatcher "
                    f"reads it on the host on every call{truncates}; pass a Python int")
