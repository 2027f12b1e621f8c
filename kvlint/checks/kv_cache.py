"""Rules on the paged KV cache, cache writes and the kv_len lifecycle (KVL301-KVL308).

Facts: docs/operators/fused_infer_attention.md#fia-c34 to #fia-c44 (paged attention) and #fia-t10 (block ids
are not validated); docs/operators/kv_cache_writes.md (cache write operators; #kvc-t1 and #kvc-t2 for
discarded and undeclared writes).
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from astroid import nodes

from kvlint.analysis.callsite import CallSite
from kvlint.analysis.evaluate import literal
from kvlint.analysis.facts import KV_REPEAT
from kvlint.analysis.finding import Issue
from kvlint.analysis.flow import EMPTY, OUTER, UNKNOWN, Param, Path, reaching_definitions
from kvlint.analysis.names import is_self, qualified_name
from kvlint.analysis.query_length import SEVERAL, query_lengths
from kvlint.analysis.settings import Settings
from kvlint.analysis.shape_tests import computes_no_numbers
from kvlint.analysis.walk import nodes_named, nodes_of, nodes_outside
from kvlint.catalogue.operators import (
    IFA,
    IN_PLACE_FORM,
    KV_HEADS_PARAM,
    KV_LENGTHS_PARAM,
    KV_RMSNORM_OUTPUTS,
    NUM_HEADS_PARAM,
    OUT_OF_PLACE_SCATTER,
    PAGED_OPERATORS,
)

BLOCK_ALIGNMENT = 16
PREFILL_BLOCK_ALIGNMENT = 128
MAX_BLOCK_SIZE = 512
MAX_MLA_BLOCK_SIZE = 1024
NN_MODULE = frozenset({"torch.nn.Module", "torch.nn.modules.module.Module"})
LAYER_INDEX = re.compile(r"^(layer|layer_?(idx|id|index|num|number|no|i))$", re.IGNORECASE)
"""Names of a layer's index: ``layer_idx``, ``self.layer_id``, ``layer_number``."""
_SCOPES = (nodes.FunctionDef, nodes.ClassDef, nodes.Lambda)


def _block_table_paths(site: CallSite) -> Iterator[Path]:
    """The paths on which the call passes a block table that is not None."""
    if site.name not in PAGED_OPERATORS or site.argument("block_table") is None:
        return
    for alt in site.values("block_table"):
        if not alt.value.is_none:
            yield alt.path


def check_block_table_dtype(site: CallSite) -> Iterator[Issue]:
    """KVL301: block_table is read as int32 block ids (FIA, IFA, ATB's paged attention, the sparse-attention
    kernels); an int64 table (``torch.arange`` and ``torch.tensor`` of ints default to int64) is not
    validated and addresses the wrong blocks."""
    if site.name not in PAGED_OPERATORS:
        return
    for alt in site.values("block_table"):
        value = alt.value
        if value.tensor and value.dtype is not None and value.dtype != "int32":
            origin = value.origin
            elsewhere = origin is not None and origin.lineno != site.call.lineno
            where = f" (built at line {origin.lineno})" if elsewhere else ""
            yield Issue("KVL301", site.anchor("block_table"),
                        f"block_table is {value.dtype}{where}; {site.name} reads int32 block ids: build it with "
                        "dtype=torch.int32 or pass block_table.to(torch.int32)")
            return


def check_block_size_missing(site: CallSite) -> Iterator[Issue]:
    """KVL302: with a block table the operator needs the cache's block size; the default 0 does not
    describe any cache."""
    for path in _block_table_paths(site):
        sizes = site.values("block_size", path)
        if any(alt.value.const == 0 and not isinstance(alt.value.const, bool) for alt in sizes) and (
                not computes_no_numbers(site)):
            given = "block_size=0" if site.argument("block_size") is not None else "no block_size (default 0)"
            yield Issue("KVL302", site.anchor("block_size") if site.argument("block_size") else site.call,
                        f"block_table given with {given}: pass the cache's block size (block_size=128)")
            return


def check_paged_without_kv_lengths(site: CallSite) -> Iterator[Issue]:
    """KVL303: paged attention needs the per-batch KV lengths (FIA v1 actual_seq_lengths_kv, v2
    actual_seq_kvlen, IFA actual_seq_lengths): without them the operator cannot tell how much of each
    sequence's blocks hold valid keys."""
    param = KV_LENGTHS_PARAM.get(site.name)
    if param is None:
        return
    for path in _block_table_paths(site):
        if any(alt.value.is_none for alt in site.values(param, path)) and not computes_no_numbers(site):
            yield Issue("KVL303", site.anchor("block_table"),
                        f"block_table given without the KV lengths: pass {param}=<per-batch KV lengths>"
                        + (" (the KV lengths in IFA)" if site.name == IFA else ""))
            return


TND_QUERY_LAYOUTS = frozenset({"TND", "NTD"})
"""Query parts of the TND-family layouts (``TND``, ``TND_NTD``, ``NTD``, ``NTD_TND``)."""


def _block_size_limits(site: CallSite, path: Path) -> list[tuple[int, int, int, str, Path]]:
    """The documented block sizes on each path: (multiple, minimum, maximum, which rule, path).

    FIA (docs/operators/fused_infer_attention.md#fia-c36 .. #fia-c39): TND-family layouts and MLA rope inputs
    take a multiple of 16 up to 1024; otherwise a query longer than 1 takes a multiple of 128 in [128, 512]
    and decode a multiple of 16 up to 512, which is also the rule where the code proves neither. IFA
    (docs/operators/incre_prompt_flash_attention.md#ifa-c12): a multiple of 16, no documented maximum.
    """
    if site.name == IFA:
        return [(BLOCK_ALIGNMENT, BLOCK_ALIGNMENT, 0, "", path)]
    rope = site.argument("query_rope") is not None and any(
        not alt.value.is_none for alt in site.values("query_rope", path))
    limits = []
    for layout in site.values("input_layout", path):
        name = layout.value.const
        query_layout = name.split("_")[0] if isinstance(name, str) else None
        if rope or query_layout in TND_QUERY_LAYOUTS:
            reason = "with MLA rope inputs" if rope else f"with the {name} layout"
            limits.append((BLOCK_ALIGNMENT, BLOCK_ALIGNMENT, MAX_MLA_BLOCK_SIZE, reason, layout.path))
            continue
        for length, reached in query_lengths(site, layout.path):
            if length == SEVERAL:
                limits.append((PREFILL_BLOCK_ALIGNMENT, PREFILL_BLOCK_ALIGNMENT, MAX_BLOCK_SIZE,
                               "for a query longer than 1 (which the code proves here)", reached))
            else:
                limits.append((BLOCK_ALIGNMENT, BLOCK_ALIGNMENT, MAX_BLOCK_SIZE,
                               "outside TND and MLA (up to 1024 there)", reached))
    return limits


def check_block_size_invalid(site: CallSite) -> Iterator[Issue]:
    """KVL304: the documented block sizes: FIA with a TND-family layout or MLA rope inputs a multiple of 16 up
    to 1024; FIA with a query longer than 1 a multiple of 128 in [128, 512]; FIA decode a multiple of 16 up to
    512 (32 for int8 KV); IFA a multiple of 16. 128 is the recommended size."""
    for path in _block_table_paths(site):
        for alt in site.values("block_size", path):
            size = alt.value.const
            if not isinstance(size, int) or isinstance(size, bool) or size == 0:
                continue
            for multiple, low, high, reason, _ in _block_size_limits(site, alt.path):
                if size % multiple == 0 and size >= low and (not high or size <= high):
                    continue
                bounds = f" in [{low}, {high}]" if low > BLOCK_ALIGNMENT else (f" up to {high}" if high else "")
                took = f"a multiple of {multiple}{bounds}"
                yield Issue("KVL304", site.anchor("block_size"),
                            f"block_size={size} is not {took}, the block sizes {site.name} takes"
                            f"{' ' + reason if reason else ''}: use 128")
                return


def _never_read(name: str, frame: nodes.NodeNG) -> bool:
    return not nodes_named(frame, nodes.Name, name)


def check_scatter_result_discarded(site: CallSite) -> Iterator[Issue]:
    """KVL306: out-of-place ``scatter_update`` / ``npu_scatter_nd_update`` (and the ``_functional`` cache
    writers) return an updated copy and leave the cache unchanged; a bare call (or a result nobody reads)
    writes nothing."""
    if site.name not in OUT_OF_PLACE_SCATTER:
        return
    parent = site.call.parent
    discarded = isinstance(parent, nodes.Expr)
    if (isinstance(parent, nodes.Assign) and len(parent.targets) == 1
            and isinstance(parent.targets[0], nodes.AssignName)):
        discarded = _never_read(parent.targets[0].name, site.call.frame())
    if discarded:
        yield Issue("KVL306", site.call,
                    f"{site.name} returns an updated copy and leaves the cache unchanged, and the result is "
                    f"discarded: call {IN_PLACE_FORM[site.name]} to write in place, or assign the result back "
                    "to the cache")


def _repeated_at(repeat: nodes.NodeNG | None, site: CallSite) -> str:
    """`` (repeated at line N, in helper())`` when the repeat is away from the call."""
    if repeat is None or repeat.lineno is None or repeat.lineno == site.call.lineno:
        return ""
    frame = repeat.frame()
    inside = f", in {frame.name}()" if isinstance(frame, nodes.FunctionDef) and frame is not site.call.frame() else ""
    return f" (repeated at line {repeat.lineno}{inside})"


def check_kv_repeat(site: CallSite) -> Iterator[Issue]:
    """KVL307: FIA/IFA/PFA (num_key_value_heads) and ATB's attention (num_kv_heads) take KV with fewer
    heads (GQA); repeating the KV heads to the query head count first copies the cache (memory, bandwidth)
    for nothing, and a KV-heads argument that still gives the KV head count then contradicts the repeated
    tensor."""
    if site.name not in KV_HEADS_PARAM:
        return
    kv_heads = site.argument(KV_HEADS_PARAM[site.name])
    heads = site.argument(NUM_HEADS_PARAM[site.name])
    contradicts = kv_heads is not None and (heads is None or kv_heads.as_string() != heads.as_string()) and (
        literal(kv_heads) != 0)
    for name in ("key", "value"):
        repeated = [alt.value for alt in site.values(name) if alt.value.has(KV_REPEAT)]
        if not repeated:
            continue
        where = _repeated_at(repeated[0].origin, site)
        consequence = (f"; {KV_HEADS_PARAM[site.name]}={kv_heads.as_string()} now contradicts the repeated tensor, "
                       "which has the query's head count" if contradicts else "")
        yield Issue("KVL307", site.anchor(name),
                    f"{name} is a copy of the KV heads (repeat_interleave, expand+reshape, einops.repeat){where}: {site.name} "
                    f"handles GQA itself{consequence}; pass the KV tensor before the repeat with "
                    f"{KV_HEADS_PARAM[site.name]}=<KV heads>")


def _unpacking_targets(site: CallSite) -> Iterator[nodes.Tuple | nodes.List]:
    """The tuple targets the call's result is unpacked into, directly or through one local name."""
    parent = site.call.parent
    if not isinstance(parent, nodes.Assign) or len(parent.targets) != 1:
        return
    target = parent.targets[0]
    if isinstance(target, (nodes.Tuple, nodes.List)):
        yield target
        return
    if not isinstance(target, nodes.AssignName):
        return
    for statement in nodes_of(site.call.frame(), nodes.Assign):
        value = statement.value
        if not (isinstance(value, nodes.Name) and value.name == target.name and len(statement.targets) == 1
                and isinstance(statement.targets[0], (nodes.Tuple, nodes.List))):
            continue
        reaching = reaching_definitions(target.name, value, EMPTY)
        if reaching and all(definition is target for definition, _ in reaching):
            yield statement.targets[0]


def check_kv_rmsnorm_unpack(site: CallSite) -> Iterator[Issue]:
    """KVL308: npu_kv_rmsnorm_rope_cache returns 4 outputs (k_cache, ckv_cache, k_rope, c_kv), _v2 returns
    2 (k_rope, c_kv), _v2_functional 4 (k_rope, c_kv, k_cache, ckv_cache): a migration that keeps the old
    unpacking raises, or silently swaps caches and rope outputs."""
    expected = KV_RMSNORM_OUTPUTS.get(site.name)
    if expected is None:
        return
    for target in _unpacking_targets(site):
        if any(isinstance(e, nodes.Starred) for e in target.elts) or len(target.elts) == expected:
            continue
        order = {
            "npu_kv_rmsnorm_rope_cache": "(k_cache, ckv_cache, k_rope, c_kv)",
            "npu_kv_rmsnorm_rope_cache_v2": "(k_rope, c_kv)",
            "npu_kv_rmsnorm_rope_cache_v2_functional": "(k_rope, c_kv, k_cache, ckv_cache)",
        }[site.name]
        yield Issue("KVL308", target,
                    f"{site.name} returns {expected} outputs {order}, unpacked here into {len(target.elts)} names: "
                    f"unpack {order[1:-1]} in that order")


# KVL305 -------------------------------------------------------------------------------------------------


def is_nn_module(cls: nodes.ClassDef, _seen: frozenset[int] = frozenset()) -> bool:
    """True when a base of the class resolves to torch.nn.Module, directly or through classes of the module."""
    if id(cls) in _seen:
        return False
    for base in cls.bases:
        if qualified_name(base) in NN_MODULE:
            return True
        if isinstance(base, nodes.Name):
            _, bindings = base.lookup(base.name)
            if len(bindings) == 1 and isinstance(bindings[0], nodes.ClassDef) and is_nn_module(
                bindings[0], _seen | {id(cls)}
            ):
                return True
    return False


def forward_path(cls: nodes.ClassDef) -> list[nodes.FunctionDef]:
    """``forward`` and the methods of the class it calls through ``self.``, transitively."""
    forward = cls.locals.get("forward", [])
    found = [f for f in forward if isinstance(f, nodes.FunctionDef)][:1]
    for method in found:
        for call in nodes_of(method, nodes.Call):
            func = call.func
            if isinstance(func, nodes.Attribute) and isinstance(func.expr, nodes.Name) and func.expr.name == "self":
                called = [m for m in cls.locals.get(func.attrname, []) if isinstance(m, nodes.FunctionDef)]
                if len(called) == 1 and called[0] not in found:
                    found.append(called[0])
    return found


class _Tracked:
    """Which expressions stand for the runner's length variable inside one method."""

    def __init__(self, names: frozenset[str]) -> None:
        self.names = names

    def name_of(self, expr: nodes.NodeNG) -> str | None:
        """The tracked name ``expr`` refers to (``kv_len``, ``self.kv_len``, ``meta.kv_len[i]``), or None.
        A row of a per-layer table (``self.seq_lens[layer_idx]``) is that layer's own bookkeeping."""
        if isinstance(expr, nodes.Subscript):
            return None if _layer_row(expr) else self.name_of(expr.value)
        if isinstance(expr, (nodes.Attribute, nodes.AssignAttr)) and expr.attrname in self.names:
            return expr.as_string()
        if isinstance(expr, (nodes.Name, nodes.AssignName)) and expr.name in self.names and _shared(expr):
            return expr.name
        return None


def _layer_row(expr: nodes.Subscript) -> bool:
    """``table[layer_idx]`` or ``table[layer_idx, i]``: indexed first by the layer's index."""
    index = expr.slice.elts[0] if isinstance(expr.slice, nodes.Tuple) and expr.slice.elts else expr.slice
    name = index.attrname if isinstance(index, nodes.Attribute) else getattr(index, "name", None)
    return isinstance(name, str) and bool(LAYER_INDEX.match(name))


def _size_read(expr: nodes.NodeNG) -> bool:
    """``x.shape[-2]`` or ``x.size(1)``: a Python int, which ``+=`` rebinds instead of changing in place."""
    if isinstance(expr, nodes.Subscript):
        expr = expr.value
        return isinstance(expr, nodes.Attribute) and expr.attrname == "shape"
    return isinstance(expr, nodes.Call) and isinstance(expr.func, nodes.Attribute) and expr.func.attrname == "size"


def _shared(name: nodes.Name | nodes.AssignName) -> bool:
    """True when a local name still refers to what the caller passed (a parameter, a global, or an alias of
    an attribute or item), not to a value the method computed itself (a size it read from a tensor's
    shape is its own: ``kv_seq_len = key_states.shape[-2]``, then ``+=``, as in HF attention)."""
    for definition, _ in reaching_definitions(name.name, name, EMPTY):
        if isinstance(definition, Param) or definition is OUTER:
            return True
        if isinstance(definition, nodes.AssignName):
            statement = definition.parent
            if (isinstance(statement, nodes.Assign) and isinstance(statement.value, (nodes.Attribute, nodes.Subscript))
                    and not _size_read(statement.value)):
                return True
        if definition is UNKNOWN and _parameter_only_augmented(name):
            return True
    return False


def _parameter_only_augmented(name: nodes.Name | nodes.AssignName) -> bool:
    """A parameter the method rebinds only by augmented assignment (``kv_len += 1`` in a loop)."""
    function = name.frame()
    if not isinstance(function, nodes.FunctionDef) or name.name not in function.argnames():
        return False
    return all(isinstance(n.parent, nodes.AugAssign) for n in nodes_outside(function, nodes.AssignName, _SCOPES)
               if n.name == name.name and not isinstance(n.parent, nodes.Arguments))


def _derived_from_itself(target: nodes.NodeNG, value: nodes.NodeNG) -> bool:
    text = target.as_string()
    return isinstance(value, nodes.BinOp) and any(
        isinstance(n, (nodes.Attribute, nodes.Name)) and n.as_string() == text
        for n in nodes_of(value, (nodes.Attribute, nodes.Name))
    )


def _mutations(method: nodes.FunctionDef, tracked: _Tracked) -> Iterator[tuple[nodes.NodeNG, str, str]]:
    """(node, tracked name, how) for each mutation of a tracked name in the method."""
    for node in nodes_outside(method, (nodes.AugAssign, nodes.Assign, nodes.Call), _SCOPES):
        if isinstance(node, nodes.AugAssign):
            name = tracked.name_of(node.target)
            if name is not None:
                yield node, name, f"'{node.op}'"
        elif isinstance(node, nodes.Assign):
            for target in node.targets:
                if isinstance(target, nodes.Subscript) and tracked.name_of(target) is not None:
                    yield node, tracked.name_of(target), "an item assignment"
                elif isinstance(target, nodes.AssignAttr) and target.attrname in tracked.names and (
                        _derived_from_itself(target, node.value)):
                    yield node, target.as_string(), "a rebinding derived from itself"
        elif isinstance(node, nodes.Call) and isinstance(node.func, nodes.Attribute):
            method_name = node.func.attrname
            if method_name.endswith("_") and not method_name.startswith("_"):
                name = tracked.name_of(node.func.expr)
                if name is not None:
                    yield node, name, f"the in-place {method_name}()"


def _layer_loops(method: nodes.FunctionDef) -> list[nodes.For]:
    """Loops that run sub-layers: ``for layer in self.layers: h = layer(h, ...)`` (also through
    ``enumerate`` / ``zip``). A forward with such a loop is a model's, which may advance lengths after it."""
    loops = []
    for loop in nodes_of(method, nodes.For):
        attributes = nodes_of(loop.iter, nodes.Attribute)
        if not any(isinstance(n, nodes.Attribute) and is_self(n.expr) for n in attributes):
            continue
        targets = {n.name for n in nodes_of(loop.target, nodes.AssignName)}
        if any(isinstance(call.func, nodes.Name) and call.func.name in targets
               for call in nodes_of(loop, nodes.Call)):
            loops.append(loop)
    return loops


def _inside(node: nodes.NodeNG, loops: list[nodes.For]) -> bool:
    return any(ancestor in loops for ancestor in node.node_ancestors())


def check_kv_len_mutated_in_layer(module: nodes.Module, settings: Settings) -> Iterator[Issue]:
    """KVL305: the runner owns the length variable and advances it once per step, after every layer ran.
    A layer (a torch.nn.Module's forward and the methods it calls) that mutates it makes each layer see a
    different length, so every layer writes its cache one slot further than the one before. A model's
    forward that loops over its layers is the runner's place too, except inside that loop."""
    tracked = _Tracked(frozenset(settings.kv_len_names))
    for cls in nodes_of(module, nodes.ClassDef):
        if not is_nn_module(cls):
            continue
        for method in forward_path(cls):
            loops = _layer_loops(method)
            for node, name, how in _mutations(method, tracked):
                if loops and not _inside(node, loops):
                    continue
                yield Issue("KVL305", node,
                            f"{name} is mutated by {how} inside {cls.name}.{method.name}, a layer's forward path: "
                            "each layer then sees a different length and writes its cache one slot further; "
                            "advance it once in the runner, after all layers ran")
