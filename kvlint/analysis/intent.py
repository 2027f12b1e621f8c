"""What the code shows about the causal intent of an operator call, path by path.

A copied ``sparse_mode=2/3`` says nothing about what the author wanted: flash-attn-style shims pass it whether
or not the caller asked for causal attention, and bidirectional encoders (ViT, DiT, video models) carry it
from the code they were adapted from. The rules that assume causality (KVL203, KVL207) speak only where one
of these holds on the path, and their messages name it (``CausalEvidence.text``):

- a causality flag is true on the path: a branch on ``causal`` / ``is_causal`` / ``self.causal`` (or a
  comparison with ``...causal``) the path took, a same-module caller passing ``causal=True``, or a default
  of True where no caller overrides it. A flag false on the path is evidence of the opposite: a mask that is
  None under ``not causal`` is the full attention the caller asked for;
- the call reads a KV cache: a block table, or keys or values that are a cache (named like one, or grown
  from one with ``torch.cat``);
- the static form of the probe's decoder evidence (KVL507): the function writes a KV cache (a cache-write
  operator of ``kvlint.catalogue.cache_writes``), or the same call also runs with a query of length 1
  (``kvlint.analysis.query_length``).
"""

from __future__ import annotations

import ast
import functools
import re
from dataclasses import dataclass

from astroid import nodes

from kvlint.analysis.callsite import CallSite
from kvlint.analysis.facts import CACHE, CACHE_NAME, GROWN_CACHE
from kvlint.analysis.flow import EMPTY, Caller, Key, Path, reads_choices
from kvlint.analysis.follow import callers, bind_arguments
from kvlint.analysis.names import qualified_name
from kvlint.analysis.query_length import ONE, query_lengths
from kvlint.analysis.walk import nodes_of
from kvlint.catalogue.cache_writes import CACHE_WRITES

CAUSAL_FLAG = re.compile(r"^(is_|use_|apply_|enable_)?causal(_attention|_attn)?$", re.IGNORECASE)
"""Names of a causality flag: ``causal``, ``is_causal``, ``use_causal``, ``causal_attention``."""


@dataclass(frozen=True)
class CausalEvidence:
    causal: bool
    """True: the code asks for causal attention on the path; False: it asks for full attention."""
    text: str
    """What shows it, for messages: ``'causal' is true on this path``."""


@functools.lru_cache(maxsize=4096)
def _flag_test(text: str) -> bool:
    """A condition that tests causality: a flag (``causal``, ``self.is_causal``, ``cfg.causal``) or a
    comparison with a causal constant (``mask_type == AttnMaskType.causal``, ``mode == 'causal'``)."""
    try:
        test = ast.parse(text, mode="eval").body
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    if isinstance(test, (ast.Name, ast.Attribute)):
        return bool(CAUSAL_FLAG.match(test.id if isinstance(test, ast.Name) else test.attr))
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq):
        right = test.comparators[0]
        named = right.attr if isinstance(right, ast.Attribute) else right.value if isinstance(
            right, ast.Constant) and isinstance(right.value, str) else None
        return isinstance(named, str) and named.lower() == "causal"
    return False


@reads_choices
def _tests_causality(key: Key) -> bool:
    """A branch on a causality flag, which is evidence of the intent on its sides."""
    return _flag_test(key[1])


def _from_branches(path: Path) -> CausalEvidence | None:
    """The causality branches the path took (a false one wins: the path is the non-causal one)."""
    found = None
    for (_, text), taken in path.choices:
        if isinstance(taken, bool) and _flag_test(text):
            if not taken:
                return CausalEvidence(False, f"'{text}' is false on this path")
            found = CausalEvidence(True, f"'{text}' is true on this path")
    return found


def _from_arguments(arguments: dict[str, nodes.NodeNG | None], call: nodes.Call | None) -> CausalEvidence | None:
    """A constant a causality parameter receives: from ``call``, or its default (``call`` None)."""
    for name, expr in arguments.items():
        if not (CAUSAL_FLAG.match(name) and isinstance(expr, nodes.Const) and isinstance(expr.value, bool)):
            continue
        default = isinstance(expr.parent, nodes.Arguments)
        if call is None or default:
            where = f"'{name}' defaults to {expr.value}" + ("" if call is None else f" (the call at line {call.lineno})")
        else:
            where = f"the call at line {call.lineno} passes {name}={expr.value}"
        return CausalEvidence(expr.value, where)
    return None


def _from_callers(site: CallSite, path: Path) -> CausalEvidence | None:
    """What the enclosing function's causality parameters receive: from the caller the path went through,
    else from the same-module callers or the defaults (``parameter_evidence``)."""
    function = site.call.frame()
    if not isinstance(function, nodes.FunctionDef):
        return None
    for (key_frame, _), taken in path.choices:
        if key_frame is function and isinstance(taken, Caller):
            return _from_arguments(dict(taken.arguments), taken.call)
    arguments = function.args.posonlyargs + function.args.args + function.args.kwonlyargs
    for param in arguments:
        if CAUSAL_FLAG.match(param.name):
            found = parameter_evidence(function, param.name)
            if found is not None:
                return found
    return None


def parameter_evidence(function: nodes.FunctionDef, param: str) -> CausalEvidence | None:
    """The constant a causality parameter receives: from every same-module caller when they agree (the
    default where a call omits it), else its default when no caller in the module calls the function."""
    found = []
    for call in callers(function):
        arguments = bind_arguments(function, call)
        found.append(_from_arguments({param: arguments.get(param)}, call) if arguments is not None else None)
    if found:
        return found[0] if all(f is not None and f.causal == found[0].causal for f in found) else None
    return _from_arguments({param: default_of(function, param)}, None)


def default_of(function: nodes.FunctionDef, param: str) -> nodes.NodeNG | None:
    """The default of a parameter, or None when it has none."""
    params = function.args.posonlyargs + function.args.args
    defaults = dict(zip((p.name for p in params[len(params) - len(function.args.defaults):]), function.args.defaults))
    defaults.update({p.name: d for p, d in zip(function.args.kwonlyargs, function.args.kw_defaults) if d is not None})
    return defaults.get(param)


def _reads_cache(site: CallSite, path: Path) -> str | None:
    if site.operator.param("block_table") is not None and site.argument("block_table") is not None and any(
            not alt.value.is_none for alt in site.values("block_table", path)):
        return "the call reads a paged KV cache (block_table)"
    for name in ("key", "value"):
        expr = site.argument(name)
        if expr is None:
            continue
        root = expr
        while isinstance(root, (nodes.Subscript, nodes.Call)) or (
                isinstance(root, nodes.Attribute) and not isinstance(root.expr, nodes.Name)):
            root = root.value if isinstance(root, nodes.Subscript) else root.func.expr if isinstance(
                root, nodes.Call) and isinstance(root.func, nodes.Attribute) else getattr(root, "expr", None)
            if root is None:
                break
        named = root.attrname if isinstance(root, nodes.Attribute) else getattr(root, "name", None)
        if isinstance(named, str) and CACHE_NAME.search(named):
            return f"the {name} is a KV cache ('{named}')"
        if any(alt.value.has(GROWN_CACHE) or (alt.value.tensor and alt.value.has(CACHE))
               for alt in site.values(name, path)):
            return f"the {name} is a KV cache"
    return None


def _writes_cache(site: CallSite) -> str | None:
    """A cache-write operator called in the same function before the attention call."""
    frame = site.call.frame()
    for call in nodes_of(frame, nodes.Call):
        if call.frame() is not frame or (call.lineno or 0) > (site.call.lineno or 0):
            continue
        name = qualified_name(call.func)
        last = name.rpartition(".")[2] if name else None
        if last in CACHE_WRITES and name.startswith(("torch_npu.", "torch.ops.")):
            return f"the function writes the KV cache with {last} at line {call.lineno}"
    return None


def _decodes(site: CallSite) -> str | None:
    """The same call runs with a query of length 1 on some path (its mode chosen for decode, or a decode
    branch around it): the call site serves a decoder's prefill and decode steps."""
    paths = [EMPTY] + [alt.path for alt in site.values("sparse_mode")]
    if any(length == ONE for path in paths for length, _ in query_lengths(site, path)):
        return "the same call also runs decode steps, with a query of length 1"
    return None


def causal_evidence(site: CallSite, path: Path) -> CausalEvidence | None:
    """What shows causal (or full) attention at ``site`` on ``path``; None when nothing does."""
    flag = _from_branches(path) or _from_callers(site, path)
    if flag is not None:
        return flag
    for found in (_reads_cache(site, path), _writes_cache(site), _decodes(site)):
        if found is not None:
            return CausalEvidence(True, found)
    return None
