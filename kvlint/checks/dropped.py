"""KVL208: a parameter that controls attention, taken by the function (or stored by the class) that calls the
operator, and used by none of the call's arguments: a wrapper's ``softmax_scale`` (which may carry a YaRN
mscale) replaced by ``1 / math.sqrt(d)``, a ``sliding_window`` that never reaches ``pre_tokens`` or a mask,
a ``no_masking`` flag nothing looks at. The caller's setting is silently lost on the operator's path.

Not reported where the function tests the parameter (``if window_size is not None: raise ...``, a branch that
picks another path), where the call may pass it through ``**kwargs``, or where a method other than the
constructor reads the stored attribute.
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


def _mentions(expr: nodes.NodeNG, param: str, attribute: str | None, depth: int = 0) -> bool:
    """``expr`` reads the parameter (or ``self.<attribute>``), directly or through the local assignments
    that reach it."""
    if depth > _MAX_DEPTH:
        return True  # too deep to tell: assume it does
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
            if isinstance(statement, (nodes.Assign, nodes.AnnAssign, nodes.AugAssign)) and value is not None and (
                    _mentions(value, param, attribute, depth + 1)):
                return True
    return False


def _tested(function: nodes.FunctionDef, param: str, attribute: str | None) -> bool:
    """The function branches on the parameter (or guards it): ``if``, a conditional expression, ``assert``."""
    tests = [n.test for n in nodes_of(function, (nodes.If, nodes.IfExp, nodes.While, nodes.Assert))]
    return any(_mentions(test, param, attribute) for test in tests)


def _arguments(site: CallSite) -> list[nodes.NodeNG]:
    return list(site.positional) + [argument.value for argument in site.keywords.values()]


def _stored(site: CallSite) -> list[tuple[str, str]]:
    """(parameter, attribute) for each control parameter ``__init__`` stores in ``self`` and no other method
    of the class reads."""
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
                found.append((assign.value.name, target.attrname))
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
    taken = [(a.name, None) for a in function.args.posonlyargs + function.args.args + function.args.kwonlyargs
             if a.name in CONTROLS and not re.match(r"^_", a.name)]
    for param, attribute in taken + _stored(site):
        owner = function if attribute is None else function.parent.frame()
        if any(_mentions(argument, param, attribute) for argument in arguments) or _tested(function, param, attribute):
            continue
        kind = CONTROLS[param]
        op_scale = SCALE_PARAM.get(site.name, "scale")
        where = f"{function.name}() takes '{param}'" if attribute is None else (
            f"{owner.name} stores '{param}' as self.{attribute}, which nothing reads,")
        yield Issue("KVL208", site.call,
                    f"{where} but no argument of this {site.name} call uses it: "
                    + _CONSEQUENCE[kind].format(op_scale=op_scale))
        return
