"""Rules on the shape of an operator call: keywords the schema lacks, version mixes, positional overflow,
forbidden aliases (KVL101, KVL102, KVL103, KVL112). All of these raise at run time, after the model has
loaded; the linter reports them before the job starts, with the exact fix.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterator

from astroid import nodes

from kvlint.analysis.callsite import CallSite
from kvlint.analysis.finding import Issue
from kvlint.catalogue.operators import FA, FIA_V1, FIA_V2, IFA_PFA_SPELLINGS, OPERATORS, V1_TO_V2, V2_TO_V1


def version_mix(site: CallSite, keyword: str) -> str | None:
    """The KVL102 message for ``keyword`` on FIA v1/v2, or None when it is not a version mix."""
    op = site.name
    if op not in (FIA_V1, FIA_V2) or keyword in site.operator.param_names:
        return None
    if keyword in IFA_PFA_SPELLINGS:
        spelling = IFA_PFA_SPELLINGS[keyword][op]
        if spelling is None:
            v1 = IFA_PFA_SPELLINGS[keyword][FIA_V1]
            return (f"'{keyword}' is the IFA/PFA name; {op} has no such parameter "
                    f"({FIA_V1} takes '{v1}')")
        return f"'{keyword}' is the IFA/PFA name; {op} takes '{spelling}'"
    other, renames = (FIA_V2, V2_TO_V1) if op == FIA_V1 else (FIA_V1, V1_TO_V2)
    version, other_version = ("v2", "v1") if op == FIA_V1 else ("v1", "v2")
    if keyword in renames:
        return f"'{keyword}' is the {version} name; {op} takes '{renames[keyword]}'"
    if keyword in OPERATORS[other].param_names:
        return f"'{keyword}' exists only in {other} ({version}); {op} ({other_version}) has no such parameter"
    return None


def check_unknown_keyword(site: CallSite) -> Iterator[Issue]:
    """KVL101: a keyword the operator's schema does not have raises RuntimeError at the call."""
    for keyword, argument in site.keywords.items():
        if keyword in site.operator.param_names or version_mix(site, keyword) is not None:
            continue
        close = difflib.get_close_matches(keyword, site.operator.param_names, n=1, cutoff=0.6)
        hint = f"; did you mean '{close[0]}'?" if close else " (it raises RuntimeError at the call)"
        yield Issue("KVL101", argument.anchor, f"'{keyword}' is not a parameter of {site.operator.qualified}{hint}")


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
        message = f"torch.{site.name} always raises RuntimeError (deprecated alias); call torch_npu.{site.name}"
    return Issue("KVL112", site.call.func, message)

