"""Operator calls that compute no numbers: shape tests.

A call under ``with FakeTensorMode():`` or on meta tensors checks shapes and dtypes only; the rules whose
only point is a default value (KVL104, KVL105, KVL111, KVL302, KVL303) are noise there. What counts:

- the call sits in the body of ``with FakeTensorMode(...):`` (``torch._subclasses.FakeTensorMode``, also
  through a name bound to one: ``mode = FakeTensorMode()`` then ``with mode:``) or ``with torch.device("meta"):``,
  in the same function: a function defined inside the block runs where it is called, not there;
- the query is a meta tensor on every path (built with ``device="meta"`` or moved there by ``.to("meta")``),
  however far the value travelled: a test function whose tensors are all meta.
"""

from __future__ import annotations

from astroid import nodes

from kvlint.analysis.callsite import CallSite
from kvlint.analysis.facts import META
from kvlint.analysis.flow import reaching_definitions
from kvlint.analysis.names import qualified_name

FAKE_TENSOR_MODES = frozenset({"torch._subclasses.FakeTensorMode", "torch._subclasses.fake_tensor.FakeTensorMode"})


def computes_no_numbers(site: CallSite) -> bool:
    """True when the call is a shape test: under a fake-tensor or meta-device block, or on a meta query."""
    return _under_fake_mode(site.call) or _meta_query(site)


def _under_fake_mode(call: nodes.Call) -> bool:
    node: nodes.NodeNG = call
    frame = call.frame()
    while node.parent is not None and node is not frame:
        parent = node.parent
        if isinstance(parent, nodes.With) and any(s is node for s in parent.body) and any(
                _fake_context(item) for item, _ in parent.items):
            return True
        node = parent
    return False


def _fake_context(expr: nodes.NodeNG, depth: int = 0) -> bool:
    """``FakeTensorMode(...)`` or ``torch.device("meta")``, directly or through a local name bound to one."""
    if isinstance(expr, nodes.Call):
        qualname = qualified_name(expr.func)
        if qualname in FAKE_TENSOR_MODES:
            return True
        return qualname == "torch.device" and bool(expr.args) and isinstance(expr.args[0], nodes.Const) and (
            expr.args[0].value == "meta")
    if isinstance(expr, nodes.Name) and depth == 0:
        definitions = reaching_definitions(expr.name, expr)
        return bool(definitions) and all(
            isinstance(d, nodes.AssignName) and isinstance(d.parent, nodes.Assign) and d.parent.targets[0] is d
            and _fake_context(d.parent.value, depth + 1) for d, _ in definitions)
    return False


def _meta_query(site: CallSite) -> bool:
    alts = site.values("query")
    return bool(alts) and all(alt.value.has(META) for alt in alts)
