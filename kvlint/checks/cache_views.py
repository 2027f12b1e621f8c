"""KVL310: a paged KV cache viewed with a literal width. ``key_cache.view(-1, block_size, 256)`` fixes the
row width at one model's ``num_kv_heads * head_dim`` while the call reads the head count from the model
(``num_key_value_heads=self.num_kv_heads``): every model with other heads or another head dim reads
mis-shaped blocks, without an error when the sizes happen to divide.
"""

from __future__ import annotations

from collections.abc import Iterator

from astroid import nodes

from kvlint.analysis.callsite import CallSite
from kvlint.analysis.evaluate import literal
from kvlint.analysis.facts import CACHE_NAME, NO_CONSTANT
from kvlint.analysis.finding import Issue
from kvlint.analysis.flow import reaching_definitions
from kvlint.analysis.names import is_self
from kvlint.catalogue.operators import KV_HEADS_PARAM

MIN_WIDTH = 32
"""A literal width below this is a fractal of the NZ layout (16), not a row width."""
_VIEWS = ("view", "reshape")


def _view_of_cache(expr: nodes.NodeNG) -> nodes.Call | None:
    """The ``<cache>.view(...)`` / ``.reshape(...)`` call ``expr`` is, directly or through the one local
    assignment that reaches it."""
    if isinstance(expr, nodes.Name):
        reaching = reaching_definitions(expr.name, expr)
        if len(reaching) != 1 or not isinstance(reaching[0][0], nodes.AssignName):
            return None
        statement = reaching[0][0].parent
        if not isinstance(statement, nodes.Assign) or len(statement.targets) != 1:
            return None
        expr = statement.value
    if not (isinstance(expr, nodes.Call) and isinstance(expr.func, nodes.Attribute) and expr.func.attrname in _VIEWS):
        return None
    receiver = expr.func.expr
    while isinstance(receiver, nodes.Subscript):
        receiver = receiver.value
    name = receiver.attrname if isinstance(receiver, nodes.Attribute) else getattr(receiver, "name", None)
    return expr if isinstance(name, str) and CACHE_NAME.search(name) else None


def _literal_width(view: nodes.Call) -> int | None:
    """The row width of a ``(blocks, block_size, width)`` or ``(blocks, block_size, heads, head_dim)`` view when
    it is literal (the heads and the head dim both literal) among sizes computed at run time."""
    sizes = list(view.args)
    if len(sizes) == 1 and isinstance(sizes[0], (nodes.Tuple, nodes.List)):
        sizes = list(sizes[0].elts)
    if len(sizes) not in (3, 4) or view.keywords:
        return None
    trailing = sizes[2:]
    if not all(isinstance(size, nodes.Const) and type(size.value) is int and size.value > 0 for size in trailing):
        return None
    if all(isinstance(size, nodes.Const) and size.value != -1 for size in sizes[:2]):
        return None  # a fully literal shape is a test's or an example's, not a model's
    width = 1
    for size in trailing:
        width *= size.value
    return width if width >= MIN_WIDTH else None


def check_cache_literal_width(site: CallSite) -> Iterator[Issue]:
    """KVL310: key or value is a cache viewed with a literal row width while the KV head count is not a
    literal."""
    param = KV_HEADS_PARAM.get(site.name)
    kv_heads = site.argument(param) if param else None
    if kv_heads is None or literal(kv_heads) is not NO_CONSTANT:
        return
    if not (isinstance(kv_heads, nodes.Attribute) and is_self(kv_heads.expr) or isinstance(
            kv_heads, (nodes.Name, nodes.Attribute))):
        return
    for name in [p.name for p in site.operator.positional[1:3]]:
        expr = site.argument(name)
        view = _view_of_cache(expr) if expr is not None else None
        width = _literal_width(view) if view is not None else None
        if width is None:
            continue
        yield Issue("KVL310", site.anchor(name),
                    f"{name} is {view.as_string()} (line {view.lineno}): the literal width {width} is one model's "
                    f"num_kv_heads * head_dim, while {param}={kv_heads.as_string()} comes from the model; with "
                    f"other heads or another head dim the blocks are read mis-shaped: view it with "
                    f"{kv_heads.as_string()} * head_dim")
        return
