"""KVL208: a parameter that controls attention, taken by the function (or stored by the class) that calls the
operator, and used by none of the call's arguments: a wrapper's ``softmax_scale`` (which may carry a YaRN
mscale) replaced by ``1 / math.sqrt(d)``, a ``sliding_window`` that never reaches ``pre_tokens`` or a mask,
a ``no_masking`` flag nothing looks at. The caller's setting is silently lost on the operator's path.

Not reported where the function tests the parameter (``if window_size is not None: raise ...``, a branch that
picks another path) or hands it to another call on every path (a validator, an inputs object), where its
docstring says it is reserved or unused, where the call may pass it through ``**kwargs``, or where a method
other than the constructor reads the stored attribute.

With a sibling path's evidence (``kvlint.analysis.siblings``: another branch's attention call takes it) also
for a parameter the function does test elsewhere, for per-sample lengths (``q_lens``, ``k_lens``,
``cu_seqlens_k``) and for a ``self`` attribute only this method reads, when the operator call's path reads
none of them. One finding per call names every dropped parameter.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from astroid import nodes

from kvlint.analysis.callsite import CallSite
from kvlint.analysis.facts import CACHE_NAME
from kvlint.analysis.finding import Issue
from kvlint.analysis.names import enclosing_class, is_self
from kvlint.analysis.siblings import (enumerate_names, flag_attributes, honoured_by_sibling_function,
                                      honoured_elsewhere, mentions)
from kvlint.analysis.walk import nodes_named, nodes_of
from kvlint.checks.masks import callers_pass_none, documented_unused
from kvlint.catalogue.operators import FA, FA_LENGTHS, INFERENCE_ATTENTION, KV_LENGTHS_PARAM, SCALE_PARAM, lookup

CONTROLS: dict[str, str] = {
    "softmax_scale": "scale", "sm_scale": "scale", "attn_scale": "scale", "softmax_scaling": "scale",
    "sliding_window": "window", "window_size": "window", "local_window_size": "window",
    "attention_window": "window", "window_left": "window",
    "triangular_masking": "masking", "no_masking": "masking", "causal_masking": "masking",
}
"""Parameter names that control the attention a call computes, and what they control."""
_CONTROL_NAMES = re.compile("^(" + "|".join(CONTROLS) + ")$")
LENGTHS = re.compile(r"^((cu_)?seq_?lens(_[qk]v?)?|(cu_)?seqlens(_[qk]v?)?|[qk]v?_?lens|(q|k|kv|key|query|context)_"
                     r"(seq_?lens|lengths)|actual_seq_(q|kv)len|actual_seq_lengths(_kv)?)$")
"""Per-sample lengths (``q_lens``, ``k_lens``, ``seq_lens``, ``cu_seqlens_k``, ``actual_seq_kvlen``): reported
only where a sibling path honours them (``kvlint.analysis.siblings``)."""
_CONSEQUENCE = {
    "scale": "the caller's scale (a YaRN mscale, a model's own softmax scale) is replaced by whatever the call "
             "computes; pass it as {op_scale}",
    "window": "a sliding-window model gets full attention over the whole context; pass it as {op_pre_tokens} "
              "(with sparse_mode=4 and the 2048x2048 mask) or build it into atten_mask",
    "masking": "the masking the caller chose is ignored; build atten_mask / sparse_mode from it, or raise when "
               "this path cannot honour it",
    "lengths": "the padding past each sample's length is attended on this path; pass the lengths as {op_lengths} "
               "(cumulative for TND) or cut the padding first",
}


def _pre_tokens_param(name: str) -> str:
    """The operator's own spelling of the window's left edge: ``npu_fusion_attention`` takes ``pre_tockens``,
    the inference operators ``pre_tokens``."""
    operator = lookup(name)
    return "pre_tockens" if operator is not None and operator.param("pre_tockens") else "pre_tokens"


def _tested(function: nodes.FunctionDef, param: str, attribute: str | None) -> bool:
    """The function branches on the parameter (or guards it): ``if``, a conditional expression, ``assert``."""
    tests = [n.test for n in nodes_of(function, (nodes.If, nodes.IfExp, nodes.While, nodes.Assert))]
    return any(mentions(test, param, attribute) for test in tests)


def _handed_on(function: nodes.FunctionDef, param: str, site: CallSite) -> bool:
    """The parameter is passed to another call on every path of the function (a validator that rejects it,
    an inputs object, another backend called first): the function does something with it."""
    for call in nodes_of(function, nodes.Call):
        if call is site.call or call.frame() is not function:
            continue
        node, conditional = call, False
        while node is not function:
            if isinstance(node.parent, (nodes.If, nodes.IfExp, nodes.For, nodes.While, nodes.Try)) and (
                    node is not getattr(node.parent, "test", None)):
                conditional = True
                break
            node = node.parent
        arguments = list(call.args) + [k.value for k in call.keywords or ()]
        if not conditional and any(isinstance(n, nodes.Name) and n.name == param
                                   for argument in arguments for n in nodes_of(argument, nodes.Name)):
            return True
    return False


def _arguments(site: CallSite) -> list[nodes.NodeNG]:
    return list(site.positional) + [argument.value for argument in site.keywords.values()]


def _stored(site: CallSite) -> list[tuple[str, str, nodes.AssignAttr]]:
    """(parameter, attribute, the assignment) for each control parameter ``__init__`` stores in ``self`` and
    no other method of the class reads."""
    cls = enclosing_class(site.call)
    init = cls.locals.get("__init__", [None])[0] if cls is not None else None
    if not isinstance(init, nodes.FunctionDef) or site.call.frame() is init:
        return []
    params = {a.name for a in init.args.posonlyargs + init.args.args + init.args.kwonlyargs} & set(CONTROLS)
    found = []
    for assign in nodes_of(init, nodes.Assign):
        if not (isinstance(assign.value, nodes.Name) and assign.value.name in params):
            continue
        for target in assign.targets:
            if isinstance(target, nodes.AssignAttr) and is_self(target.expr) and not any(
                    node.attrname == target.attrname and node.frame() is not init
                    for node in nodes_of(cls, nodes.Attribute)):
                found.append((assign.value.name, target.attrname, target))
    return found


def _dropped(site: CallSite, function: nodes.FunctionDef) -> Iterator[tuple[str, str, str]]:
    """(parameter, what it controls, the evidence) for each parameter of ``function`` this call drops: a
    control parameter nothing on any path uses (no evidence needed: the name says what it controls), or a
    control or length parameter that only a sibling path honours."""
    arguments = _arguments(site)
    kv_lengths = KV_LENGTHS_PARAM.get(site.name) or FA_LENGTHS[1]
    lengths_passed = site.argument(kv_lengths) is not None and not all(
        alt.value.is_none for alt in site.values(kv_lengths))
    for param in (a.name for a in function.args.posonlyargs + function.args.args + function.args.kwonlyargs):
        kind = CONTROLS.get(param) or ("lengths" if LENGTHS.match(param) and not lengths_passed else None)
        if kind is None or param.startswith("_") or documented_unused(function, param) or any(
                mentions(argument, param, None) for argument in arguments):
            continue
        honoured = honoured_elsewhere(function, site.call, param)
        if honoured is None and kind == "lengths" and not nodes_named(function, nodes.Name, param) and not (
                callers_pass_none(function, param)):
            honoured = honoured_by_sibling_function(function, param)
        if honoured is not None and not (kind == "lengths" and _over_cache(honoured.node) and not _over_cache(
                site.call)):
            yield f"'{param}'", kind, f" ({honoured.text})"
        elif kind != "lengths" and not _tested(function, param, None) and not _handed_on(function, param, site):
            yield f"'{param}'", kind, ""
    for attribute in flag_attributes(function, _CONTROL_NAMES):
        if any(mentions(argument, "", attribute) for argument in arguments):
            continue
        honoured = honoured_elsewhere(function, site.call, attribute, attribute=True)
        if honoured is not None:
            yield f"self.{attribute}", CONTROLS[attribute], f" ({honoured.text})"


def _over_cache(node: nodes.NodeNG) -> bool:
    """A call over a KV cache (its keys or values named like one, or a block table): the lengths it takes
    measure the cache (a decode step), not the fresh keys of a sibling prefill call."""
    if not isinstance(node, nodes.Call):
        return False
    keywords = {k.arg: k.value for k in node.keywords or () if k.arg}
    if any(name in keywords for name in ("block_table", "block_tables")):
        return True
    operands = list(node.args[1:3]) + [keywords[name] for name in ("key", "value", "k", "v") if name in keywords]
    return any(CACHE_NAME.search(n.name if isinstance(n, nodes.Name) else n.attrname)
               for operand in operands for n in nodes_of(operand, (nodes.Name, nodes.Attribute)))


def _verb(named: list[str]) -> str:
    """``takes`` for parameters, ``reads`` for ``self`` attributes, ``uses`` for both."""
    attributes = sum(name.startswith("self.") for name in named)
    return "takes" if not attributes else "reads" if attributes == len(named) else "uses"


def check_attention_parameter_dropped(site: CallSite) -> Iterator[Issue]:
    """KVL208: attention-controlling parameters of the calling function (or the class's constructor) that no
    argument of the operator call uses; one finding per call, naming each of them."""
    if site.name not in INFERENCE_ATTENTION and site.name != FA or site.open_ended:
        return
    function = site.call.frame()
    if not isinstance(function, nodes.FunctionDef):
        return
    dropped = list(_dropped(site, function))
    if dropped:
        named = enumerate_names([f"{param}{evidence}" for param, _, evidence in dropped])
        consequences = "; ".join(dict.fromkeys(
            _CONSEQUENCE[kind].format(op_scale=SCALE_PARAM.get(site.name, "scale"),
                                      op_lengths=KV_LENGTHS_PARAM.get(site.name) or FA_LENGTHS[1],
                                      op_pre_tokens=_pre_tokens_param(site.name))
            for _, kind, _ in dropped))
        verb = _verb([param for param, _, _ in dropped])
        yield Issue("KVL208", site.call,
                    f"{function.name}() {verb} {named} but no argument of this {site.name} call uses "
                    f"{'it' if len(dropped) == 1 else 'them'}: {consequences}")
        return
    stored = [(param, attribute, target) for param, attribute, target in _stored(site)
              if not _tested(target.frame(), param, None)]
    if stored:
        cls = function.parent.frame()
        # One finding per class, at the first assignment: the defect is the attributes nothing reads.
        named = enumerate_names([f"'{param}' as self.{attribute}" for param, attribute, _ in stored])
        consequences = "; ".join(dict.fromkeys(
            _CONSEQUENCE[CONTROLS[param]].format(op_scale="the operator's scale argument",
                                                 op_pre_tokens="pre_tokens (pre_tockens on npu_fusion_attention)")
            for param, _, _ in stored))
        yield Issue("KVL208", stored[0][2],
                    f"{cls.name} stores {named} but no method reads {'it' if len(stored) == 1 else 'them'}, and its "
                    f"methods call the attention operators without {'it' if len(stored) == 1 else 'them'}: "
                    + consequences)
