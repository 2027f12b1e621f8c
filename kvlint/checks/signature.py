"""Rules on the shape of an operator call: keywords the schema lacks, version mixes, positional overflow,
forbidden aliases, operator names that do not exist (KVL101, KVL102, KVL103, KVL112, KVL113). All of these
raise at run time, after the model has loaded; the linter reports them before the job starts, with the
exact fix.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterator

from astroid import nodes

from kvlint.analysis.callsite import CallSite
from kvlint.analysis.finding import Issue
from kvlint.analysis.names import NONE, qualified_names
from kvlint.analysis.settings import Settings
from kvlint.analysis.walk import nodes_of
from kvlint.catalogue import operator_names
from kvlint.catalogue.operators import (
    FA,
    FIA_V1,
    FIA_V2,
    IFA_PFA_SPELLINGS,
    KEYWORD_HABITS,
    NAMESPACES,
    OPERATORS,
    V1_TO_V2,
    V2_TO_V1,
)


def version_mix(site: CallSite, keyword: str) -> str | None:
    """The KVL102 message for ``keyword`` on FIA v1/v2 (or a workspace helper of one), or None when it is not
    a version mix."""
    role, op = site.role, site.name
    if role not in (FIA_V1, FIA_V2) or keyword in site.operator.param_names:
        return None
    if keyword in IFA_PFA_SPELLINGS:
        spelling = IFA_PFA_SPELLINGS[keyword][role]
        if spelling is None:
            v1 = IFA_PFA_SPELLINGS[keyword][FIA_V1]
            return (f"'{keyword}' is the IFA/PFA name; {op} has no such parameter "
                    f"({FIA_V1} takes '{v1}')")
        return f"'{keyword}' is the IFA/PFA name; {op} takes '{spelling}'"
    other, renames = (FIA_V2, V2_TO_V1) if role == FIA_V1 else (FIA_V1, V1_TO_V2)
    version, other_version = ("v2", "v1") if role == FIA_V1 else ("v1", "v2")
    if keyword in renames:
        return f"'{keyword}' is the {version} name; {op} takes '{renames[keyword]}'"
    if keyword in OPERATORS[other].param_names:
        return f"'{keyword}' exists only in {other} ({version}); {op} ({other_version}) has no such parameter"
    return None


_MASK_KEYWORDS = frozenset({"mask", "attn_mask", "attention_mask", "causal_mask", "attn_bias"})
"""Other libraries' names for the mask: passed to an Ascend operator, they are its ``atten_mask`` misspelled."""


def unknown_keywords(site: CallSite) -> Iterator[tuple[str, nodes.NodeNG, str | None]]:
    """The keywords the operator's schema does not have: (keyword, anchor, the closest valid keyword)."""
    for keyword, argument in site.keywords.items():
        if keyword in site.operator.param_names or version_mix(site, keyword) is not None:
            continue
        habit = KEYWORD_HABITS.get(site.name, {}).get(keyword)
        close = [habit] if habit else difflib.get_close_matches(keyword, site.operator.param_names, n=1, cutoff=0.6)
        if not close and keyword in _MASK_KEYWORDS and "atten_mask" in site.operator.param_names:
            close = ["atten_mask"]
        yield keyword, argument.anchor, close[0] if close else None


def misspelled_mask(site: CallSite) -> bool:
    """The call passes its mask under another name (``attention_mask=``) and not as ``atten_mask``: KVL101
    reports it, and the rules on a missing mask leave the call alone (one defect, one finding)."""
    return site.argument("atten_mask") is None and any(
        close == "atten_mask" for _, _, close in unknown_keywords(site))


def check_unknown_keyword(site: CallSite) -> Iterator[Issue]:
    """KVL101: a keyword the operator's schema does not have raises RuntimeError at the call. A mask passed
    under another library's name never reaches ``atten_mask``: the message says so."""
    for keyword, anchor, close in unknown_keywords(site):
        hint = f"; did you mean '{close}'?" if close else " (it raises RuntimeError at the call)"
        if close == "atten_mask" and site.argument("atten_mask") is None:
            hint += (" The mask is therefore dropped: atten_mask stays None, and the unknown keyword raises "
                     "RuntimeError at the call")
        yield Issue("KVL101", anchor, f"'{keyword}' is not a parameter of {site.operator.qualified}{hint}")


def check_version_mix(site: CallSite) -> Iterator[Issue]:
    """KVL102: FIA v1 and v2 renamed most keywords; the other version's spelling raises."""
    for keyword, argument in site.keywords.items():
        message = version_mix(site, keyword)
        if message is not None:
            yield Issue("KVL102", argument.anchor, message)


def check_positional_args(site: CallSite) -> Iterator[Issue]:
    """KVL103: FIA/IFA/PFA take query, key, value positionally and nothing else; npu_fusion_attention's
    sixth positional parameter is ``pse``, so a mask passed there silently becomes a position bias."""
    allowed = site.operator.positional
    if len(site.positional) > len(allowed):
        names = ", ".join(p.name for p in allowed)
        yield Issue("KVL103", site.positional[len(allowed)],
                    f"{site.name} takes {len(allowed)} positional arguments ({names}), got "
                    f"{len(site.positional)}: pass the rest by keyword")
    elif site.name == FA and len(site.positional) >= 6 and not _is_position_bias(site.positional[5]):
        yield Issue("KVL103", site.positional[5],
                    f"the 6th positional argument of {FA} binds to 'pse', not 'atten_mask': "
                    "pass atten_mask=... by keyword")


def _is_position_bias(expr: nodes.NodeNG) -> bool:
    """None, or a value named as a position bias (pse, bias, alibi): passed there on purpose."""
    if isinstance(expr, nodes.Const) and expr.value is None:
        return True
    name = expr.name if isinstance(expr, nodes.Name) else getattr(expr, "attrname", "")
    return bool(re.search(r"pse|bias|alibi", name, re.IGNORECASE))


def alias_issue(site: CallSite) -> Issue:
    """KVL112: ``torch.<op>`` always raises (deprecated alias); ``torch_npu.npu.<op>`` does not exist."""
    if site.qualname.startswith("torch_npu.npu."):
        message = f"torch_npu.npu has no {site.name}; call torch_npu.{site.name}"
    else:
        message = (f"torch.{site.name} raises RuntimeError on torch_npu 2.x (a deprecated alias; 1.11 only warned); "
                   f"call torch_npu.{site.name}")
    return Issue("KVL112", site.call.func, message)



# KVL113 -------------------------------------------------------------------------------------------------

OPERATOR_LIKE = re.compile(r"^_?(npu_|scatter_)\w+$")
"""Attribute names judged by KVL113: anything else on ``torch_npu`` (``npu``, ``contrib``, dtypes) is left alone."""
_EXISTS = {namespace: names | operator_names.DOCUMENTED if namespace == "torch_npu" else names
           for namespace, names in NAMESPACES.items()}
_MOVED: dict[str, tuple[tuple[frozenset[str], str], ...]] = {
    "torch_npu": ((operator_names.TORCH_NPU_ATB_MODULE, "torch_npu.atb"),),
    "torch.ops.npu": ((operator_names.ATB, "torch.ops.atb"),),
    "torch.ops.atb": ((operator_names.NPU, "torch.ops.npu"),),
    "torchair.ops": ((NAMESPACES["torch_npu"], "torch_npu"),),
}
"""Namespace -> (names that exist elsewhere, where): the name is right, the namespace is not."""
_GUARDS = frozenset({"AttributeError", "ImportError", "ModuleNotFoundError", "Exception", "BaseException"})


def check_unknown_operator(module: nodes.Module, settings: Settings) -> Iterator[Issue]:
    """KVL113: ``torch_npu.<name>``, ``torch.ops.npu.<name>``, ``torch.ops.atb.<name>`` or torchair's
    ``tng.ops.<name>`` that the namespace does not define raises AttributeError (``from torch_npu import``:
    ImportError) when the line runs. Reported when the name is a known operator's in another namespace, or a
    misspelling of one there; a name that only adds words to a known one may be a project's own operator
    mounted at run time, and code that tests for the name or handles its absence is left alone."""
    spelled: frozenset[str] | None = None
    for node in nodes_of(module, (nodes.Attribute, nodes.ImportFrom)):
        if isinstance(node, nodes.Attribute) and not OPERATOR_LIKE.match(node.attrname):
            continue  # nearly every attribute of a module, passed over without a generator each
        for name, namespace in _operator_references(node):
            spelled = _strings_and_assigned_attributes(module) if spelled is None else spelled
            if name in spelled or _handles_absence(node):
                continue
            message = _unknown_operator(name, namespace, isinstance(node, nodes.ImportFrom))
            if message is not None:
                yield Issue("KVL113", node, message)


def _operator_references(node: nodes.NodeNG) -> Iterator[tuple[str, str]]:
    """(name, namespace) for an operator-like name looked up on an operator namespace that lacks it, when
    every alternative of the receiver is such a namespace: an attribute (``check_unknown_operator`` passes
    only ``OPERATOR_LIKE`` ones), or a name imported from torch_npu."""
    if isinstance(node, nodes.ImportFrom):
        if node.modname == "torch_npu" and not node.level:
            for imported, _ in node.names:
                if OPERATOR_LIKE.match(imported) and imported not in _EXISTS["torch_npu"]:
                    yield imported, "torch_npu"
        return
    receivers = qualified_names(node.expr)
    namespaces = sorted(receivers - {NONE}) if receivers is not None else []
    if namespaces and all(ns in _EXISTS and node.attrname not in _EXISTS[ns] for ns in namespaces):
        yield node.attrname, namespaces[0]


def _unknown_operator(name: str, namespace: str, imported: bool) -> str | None:
    """The KVL113 message for ``namespace.name``, or None when the name may exist after all."""
    raises = "ImportError" if imported else "AttributeError"
    for names, where in _MOVED[namespace]:
        if name in names:
            return f"{namespace} has no operator '{name}' ({raises} at run time): it is {where}.{name}"
    close = _misspelling_of(name, _EXISTS[namespace])
    if close is None:
        return None
    return f"{namespace} has no operator '{name}' ({raises} at run time); did you mean '{close}'?"


def _misspelling_of(name: str, known: frozenset[str]) -> str | None:
    """The known name ``name`` misspells: one of its words left out, its words in another order, or one or
    two letters off (digits aside: ``_v4`` may be newer than the list). The public spelling of a private
    operator (``npu_x`` for ``_npu_x``) and the reverse are no misspelling: adaptor layers export them."""
    if name.lstrip("_") in known or "_" + name in known:
        return None
    words = name.split("_")
    reordered = [candidate for candidate in sorted(known) if sorted(candidate.split("_")) == sorted(words)]
    if reordered:
        return reordered[0]
    for candidate in difflib.get_close_matches(name, known, n=5, cutoff=0.75):
        other = candidate.split("_")
        dropped = [i for i in range(len(other)) if other[:i] + other[i + 1:] == words]
        if dropped and not re.fullmatch(r"v\d+", other[dropped[0]]):
            return candidate
        if _letters_off(name, candidate) <= (2 if len(name) >= 12 else 1):
            return candidate
    return None


def _letters_off(name: str, candidate: str) -> int:
    """Edit distance, or a large number when the two differ in a digit."""
    if re.sub(r"\D", "", name) != re.sub(r"\D", "", candidate):
        return len(name) + len(candidate)
    previous = list(range(len(candidate) + 1))
    for i, a in enumerate(name, start=1):
        current = [i]
        for j, b in enumerate(candidate, start=1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (a != b)))
        previous = current
    return previous[-1]


def _strings_and_assigned_attributes(module: nodes.Module) -> frozenset[str]:
    """Names the file itself spells as a string (``hasattr(torch_npu, "npu_x")``, ``mock.patch``) or assigns
    as an attribute (``torch_npu.npu_x = torch.ops.custom.npu_x``): the file knows the name may be missing."""
    found = {node.attrname for node in nodes_of(module, nodes.AssignAttr)}
    for const in nodes_of(module, nodes.Const):
        if isinstance(const.value, str) and len(const.value) < 200:
            found.add(const.value.rpartition(".")[2])
    return frozenset(found)


def _handles_absence(node: nodes.NodeNG) -> bool:
    """Inside a ``try`` (of the same scope) whose handlers catch AttributeError or ImportError, or anything."""
    child = node
    for ancestor in node.node_ancestors():
        if isinstance(ancestor, (nodes.FunctionDef, nodes.ClassDef, nodes.Lambda)):
            return False
        if isinstance(ancestor, nodes.Try) and child in ancestor.body:
            for handler in ancestor.handlers:
                caught = [] if handler.type is None else (
                    handler.type.elts if isinstance(handler.type, nodes.Tuple) else [handler.type])
                if handler.type is None or _GUARDS & {n.as_string().rpartition(".")[2] for n in caught}:
                    return True
        child = ancestor
    return False
