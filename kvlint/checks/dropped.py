"""KVL208: a parameter that controls attention, taken by the function (or stored by the class) that calls the
operator, and used by none of the call's arguments: a wrapper's ``softmax_scale`` (which may carry a YaRN
mscale) replaced by ``1 / math.sqrt(d)``, a ``sliding_window`` that never reaches ``pre_tokens`` or a mask,
a ``no_masking`` flag nothing looks at. The caller's setting is silently lost on the operator's path.

Not reported where the function tests the parameter (``if window_size is not None: raise ...``, a branch that
picks another path) or hands it to another call on every path (a validator, an inputs object), where its
docstring says it is reserved or unused, where the call may pass it through ``**kwargs``, or where a method
other than the constructor reads the stored attribute.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from astroid import nodes

from kvlint.analysis.callsite import CallSite
from kvlint.analysis.finding import Issue
from kvlint.analysis.flow import Param, reaching_definitions
from kvlint.analysis.names import enclosing_class, is_self
from kvlint.analysis.walk import nodes_of
from kvlint.checks.masks import documented_unused
from kvlint.catalogue.operators import FA, INFERENCE_ATTENTION, SCALE_PARAM

CONTROLS: dict[str, str] = {
    "softmax_scale": "scale", "sm_scale": "scale", "attn_scale": "scale", "softmax_scaling": "scale",
    "sliding_window": "window", "window_size": "window", "local_window_size": "window",
    "attention_window": "window", "window_left": "window",
    "triangular_masking": "masking", "no_masking": "masking", "causal_masking": "masking",
}
"""Parameter names that control the attention a call computes, and what they control."""
_CONSEQUENCE = {
    "scale": "the caller's scale (a YaRN mscale, a model's own softmax scale) is replaced by whatever the call "
             "computes; pass it as {op_scale}",
    "window": "a sliding-window model gets full attention over the whole context; pass it as pre_tokens "
              "(with sparse_mode=4 and the 2048x2048 mask) or build it into atten_mask",
    "masking": "the masking the caller chose is ignored; build atten_mask / sparse_mode from it, or raise when "
               "this path cannot honour it",
}
_MAX_DEPTH = 6


def _mentions(expr: nodes.NodeNG, param: str, attribute: str | None, depth: int = 0,
              seen: set[int] | None = None) -> bool:
    """``expr`` reads the parameter (or ``self.<attribute>``), directly or through the local assignments
    that reach it (each assignment visited once)."""
    if depth > _MAX_DEPTH:
        return True  # too deep to tell: assume it does
    seen = set() if seen is None else seen
    for node in nodes_of(expr, (nodes.Name, nodes.Attribute)):
        if isinstance(node, nodes.Attribute) and attribute is not None and node.attrname == attribute and is_self(
                node.expr):
            return True
        if not isinstance(node, nodes.Name):
            continue
        if node.name == param:
            return True
        for definition, _ in reaching_definitions(node.name, node):
            if isinstance(definition, Param) or not isinstance(definition, nodes.NodeNG):
                continue
            statement = definition.statement()
            value = getattr(statement, "value", None)
            if id(statement) in seen or value is None or not isinstance(
                    statement, (nodes.Assign, nodes.AnnAssign, nodes.AugAssign)):
                continue
            seen.add(id(statement))
            if _mentions(value, param, attribute, depth + 1, seen):
                return True
    return False


def _tested(function: nodes.FunctionDef, param: str, attribute: str | None) -> bool:
    """The function branches on the parameter (or guards it): ``if``, a conditional expression, ``assert``."""
    tests = [n.test for n in nodes_of(function, (nodes.If, nodes.IfExp, nodes.While, nodes.Assert))]
    return any(_mentions(test, param, attribute) for test in tests)


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


def check_attention_parameter_dropped(site: CallSite) -> Iterator[Issue]:
    """KVL208: an attention-controlling parameter of the calling function (or the class's constructor) that no
    argument of the operator call uses."""
    if site.name not in INFERENCE_ATTENTION and site.name != FA or site.open_ended:
        return
    function = site.call.frame()
    if not isinstance(function, nodes.FunctionDef):
        return
    arguments = _arguments(site)
    taken = [a.name for a in function.args.posonlyargs + function.args.args + function.args.kwonlyargs
             if a.name in CONTROLS and not re.match(r"^_", a.name)]
    for param in taken:
        if any(_mentions(argument, param, None) for argument in arguments) or _tested(function, param, None) or (
                _handed_on(function, param, site) or documented_unused(function, param)):
            continue
        yield Issue("KVL208", site.call,
                    f"{function.name}() takes '{param}' but no argument of this {site.name} call uses it: "
                    + _CONSEQUENCE[CONTROLS[param]].format(op_scale=SCALE_PARAM.get(site.name, "scale")))
        return
    for param, attribute, target in _stored(site):
        cls = function.parent.frame()
        init = target.frame()
        if _tested(init, param, None):
            continue
        # One finding per class, at the assignment: the defect is the attribute nothing reads.
        yield Issue("KVL208", target,
                    f"{cls.name} stores '{param}' as self.{attribute} but no method reads it, and its methods call "
                    f"the attention operators without it: "
                    + _CONSEQUENCE[CONTROLS[param]].format(op_scale="the operator's scale argument"))
        return
