"""The text of every rule's documentation page, static and probe (rendered by ``kvlint.catalogue.pages``).

Code, symbol, severity and summary come from the rule catalogue (``kvlint.catalogue.rules``); whether a rule has
an autofix comes from the catalogue row (``fixable``). This module holds only what a catalogue row cannot: what the
rule looks at, the concrete failure, a bad and a fixed example (both linted by the test suite: the bad one
is reported with exactly the rule's code, the fixed one is clean) and the references.

A probe rule's (``KVL5nn``) examples are programs: the test suite runs each under the probe on the CPU
emulator and requires the lines it prints for the bad one to be ``output``, and nothing for the fixed one
(and for ``silent``, a look-alike the rule must leave alone). ``runnable=False`` marks the two whose
finding the emulator cannot produce (KVL501 needs a kernel that disagrees with the reference, KVL599 a
failure of the probe itself).

References point into kvlint's own operator contract (``docs/operators/*.md``, ``docs/semantics.md``: every
documented constraint, trap and semantic choice has a stable anchor there, with the public sources it comes
from) and, where one exists, to a public bug report or pull request of the same mistake.
"""

from __future__ import annotations

from dataclasses import dataclass

DISPATCHER = "docs/operators/dispatcher.md"
FIA = "docs/operators/fused_infer_attention.md"
IFA_PFA = "docs/operators/incre_prompt_flash_attention.md"
FA = "docs/operators/fusion_attention.md"
KV_CACHE = "docs/operators/kv_cache_writes.md"
CONSTRAINTS = "docs/operators/constraints.md"
SEMANTICS = "docs/semantics.md"


@dataclass(frozen=True)
class Reference:
    title: str
    doc: str = ""
    """A page of kvlint's documentation and an anchor on it, relative to the repository root
    (``docs/operators/fused_infer_attention.md#fia-c20``), or empty for a public URL."""
    url: str = ""


def gh(repo: str, kind: str, number: int, title: str) -> Reference:
    """A public GitHub issue or pull request."""
    path = "pull" if kind == "PR" else "issues"
    return Reference(f"{repo} {kind} #{number}: {title}", url=f"https://github.com/{repo}/{path}/{number}")


@dataclass(frozen=True)
class RuleDoc:
    what: str
    why: str
    bad: str
    good: str
    references: tuple[Reference, ...]
    fix: str = ""
    """How the autofix rewrites the code (empty: no autofix, and ``no_fix`` says why)."""
    no_fix: str = ""
    output: str = ""
    """Probe rules: what the probe prints for ``bad`` (run as ``example.py``)."""
    silent: str = ""
    """Probe rules: a look-alike the rule must not report, shown under ``silent_note``."""
    silent_note: str = ""
    runnable: bool = True
    """Probe rules: the examples run on the emulator (see the module docstring)."""
    suppression: str = ""
    """How to silence a static rule, where the usual comments and options do not apply (empty: they do)."""


_HEADER = "import math\n\nimport torch\nimport torch_npu\n\n\n"
_PROBE_HEADER = "import torch\nimport torch_npu\n\n"
_ATTENTION_WITH_HEADS = (
    "class Attention(torch.nn.Module):\n"
    "    def __init__(self, hidden_size, num_heads):\n"
    "        super().__init__()\n"
    "        self.num_heads = num_heads\n"
    "        self.scale = 1 / math.sqrt(hidden_size // num_heads)\n\n"
    "    def forward(self, q, k, v):\n"
    "        return torch_npu.npu_fused_infer_attention_score(\n"
)
"""KVL105's example up to the call's arguments: a module that holds its head count."""
SHAPE_TESTS = ("Shape tests compute no numbers and are not reported: calls in the body of "
               "`with FakeTensorMode():` or `with torch.device(\"meta\"):` in the same function, and calls "
               "whose query is a meta tensor on every path (`device=\"meta\"`, `.to(\"meta\")`).")
"""The shape-test exemption of the rules whose only point is a default value."""

def _decode_example(lengths: str) -> str:
    """KVL509's and KVL510's example: a decode loop that writes each new token at ``kv_len`` and passes
    ``actual_seq_lengths_kv=[lengths]``."""
    return _PROBE_HEADER + (
        'B, N, D = 1, 2, 16\n'
        'k_cache, v_cache = torch.zeros(B, N, 64, D), torch.zeros(B, N, 64, D)\n'
        '\n'
        '\n'
        'def decode_step(q, k, v, kv_len):\n'
        '    start = torch.tensor([kv_len] * B)\n'
        '    torch_npu.scatter_update_(k_cache, start, k, -2)  # the new token goes to position kv_len\n'
        '    torch_npu.scatter_update_(v_cache, start, v, -2)\n'
        '    out, _ = torch_npu.npu_fused_infer_attention_score(\n'
        '        q, k_cache, v_cache, num_heads=4, num_key_value_heads=N, input_layout="BNSD",\n'
        f'        scale=D**-0.5, actual_seq_lengths_kv=[{lengths}] * B,\n'
        '    )\n'
        '    return out\n'
        '\n'
        '\n'
        'torch.manual_seed(0)\n'
        'for kv_len in range(3):\n'
        '    decode_step(torch.randn(B, 4, 1, D), torch.randn(B, N, 1, D), torch.randn(B, N, 1, D), kv_len)\n'
    )


DOCS: dict[str, RuleDoc] = {
    "KVL000": RuleDoc(
        what="Reports a file that CPython itself refuses to compile, with the compiler's reason, at the line "
             "and column it names (the undecodable byte of a file that does not decode). The check is "
             "CPython's own compiler, so it also catches what the parser accepts and the compiler refuses: a "
             "call that repeats a keyword (`num_heads=8, ..., num_heads=9`), `return` outside a function, "
             "`nonlocal` without a binding, `global` after a use. kvlint compiles a file only when its tree "
             "holds one of the constructs the compiler has such a rule about (a `global`, an `await`, a "
             "starred target, a repeated keyword, ...): a file with none of them cannot be refused. A file "
             "CPython runs is never KVL000: bytes that do not decode inside comments (GBK comments "
             "in a UTF-8 file, which CPython's compiler does not decode) are replaced before linting, and "
             "valid code nested deeper than the parser can follow (a generated 2,500-term sum) is skipped "
             "with a warning naming the file.",
        why="Nothing in such a file can be checked, so every other rule is silent on it. Python raises "
            "`SyntaxError` when the module is imported.",
        bad="import torch_npu\n\n\ndef decode(q, k, v):\n"
            "    return torch_npu.npu_fused_infer_attention_score(q, k, v, num_heads=8, scale=0.125\n",
        good="import torch_npu\n\n\ndef decode(q, k, v):\n"
             "    return torch_npu.npu_fused_infer_attention_score(q, k, v, num_heads=8, scale=0.125)\n",
        references=(Reference("Python language reference: lexical analysis and grammar",
                              url="https://docs.python.org/3/reference/grammar.html"),),
        no_fix="kvlint cannot guess the intended code. The finding cannot be suppressed either: a comment "
               "in a file that does not parse cannot be trusted.",
    ),
    "KVL001": RuleDoc(
        what="Reports a file kvlint read and did not analyse, and why: its analysis went past the per-file "
             "time limit (default 10 s of CPU) or memory limit (default 1 GiB of resident memory added to the "
             "process), or it is valid code nested deeper than the parser can follow (a generated 2,500-term "
             "sum). The limits are checked as the analysis goes, before each operator call's checks, so a "
             "file past one stops within one call's worth of work; the run goes on with the next file. flake8 "
             "and pylint report it at line 1, column 1 of the file (pylint: `W7001`), since a report is all "
             "their users read. The `kvlint` command says it in its own places instead, and keeps its exit "
             "status that of the findings: a `kvlint: warning: m.py: skipped: ...` line on standard error and "
             "an `incomplete results` line at the end, `::warning` with `--format github`, and with "
             "`--format sarif` `executionSuccessful: false` and a notification on the file. pylint's SARIF "
             "reporter (`kvlint.reporters.SarifReporter`) does the same with `W7001`.",
        why="Every rule is silent on a file kvlint did not analyse, so a clean report would claim more than "
            "kvlint checked. A limit keeps one generated file (an unrolled model, an exported graph) from "
            "stalling a pre-commit hook or a CI job.",
        bad="",
        good="",
        references=(Reference("SARIF 2.1.0: invocation objects (executionSuccessful, toolExecutionNotifications)",
                              url="https://docs.oasis-open.org/sarif/sarif/v2.1.0/os/sarif-v2.1.0-os.html"),),
        no_fix="Nothing in the file is wrong. Raise the limit, or turn it off with 0 or none: "
               "`--file-time-limit 2min` / `--file-memory-limit 4GiB` (`file-time-limit`, `file-memory-limit` "
               "in `[tool.kvlint]`); `--kvlint-file-time-limit` / `--kvlint-file-memory-limit` for flake8 "
               "(also in `[flake8]`) and pylint (also in its rc file).",
        suppression="flake8: `extend-ignore = KVL001` or `per-file-ignores` for the file; pylint: "
                    "`--disable=file-not-analysed`. Source comments do not apply to a file kvlint did not "
                    "analyse, and the `kvlint` command always names such a file.",
    ),
    "KVL101": RuleDoc(
        what="Reports a keyword argument that the resolved operator's schema does not have, and names the "
             "closest valid keyword. A mask passed under another library's name (`attention_mask=`, "
             "`attn_mask=`, `mask=`) is named as `atten_mask`, and the message says the mask is therefore "
             "dropped; the rules on a missing mask (KVL203, KVL207) do not report the same call again.",
        why="The operators are called through the PyTorch dispatcher, which rejects an unknown keyword "
            "with `RuntimeError: Unknown keyword argument ...`. The error comes at the first call, after "
            "the model weights have loaded, often minutes into a job.",
        bad=_HEADER + "def decode(q, k, v, head_dim):\n"
            "    return torch_npu.npu_fused_infer_attention_score(\n"
            "        q, k, v, num_heads=32, scale=1 / math.sqrt(head_dim), input_layuot=\"BSND\"\n    )\n",
        good=_HEADER + "def decode(q, k, v, head_dim):\n"
             "    return torch_npu.npu_fused_infer_attention_score(\n"
             "        q, k, v, num_heads=32, scale=1 / math.sqrt(head_dim), input_layout=\"BSND\"\n    )\n",
        references=(
            Reference("DSP-C13: FIA, FIA v2, IFA and PFA take three positional parameters",
                      f"{DISPATCHER}#dsp-c13"),
            Reference("What raises: an unknown keyword is a RuntimeError", f"{DISPATCHER}#dsp-raises"),
        ),
        no_fix="The closest spelling is a guess; the message names it and you decide.",
    ),
    "KVL102": RuleDoc(
        what="Reports FIA v1 (`npu_fused_infer_attention_score`) called with a keyword that only FIA v2 "
             "has, FIA v2 called with a v1-only keyword, or the IFA/PFA spelling (`scale_value`, "
             "`deq_scale1`) on FIA. The message names the exact rename (`scale` -> `softmax_scale`). "
             "Keywords passed through a statically known `**kwargs` dict count too, and so do FIA's "
             "workspace helpers (`_npu_fused_infer_attention_score[_v2]_get_max_workspace`), which take "
             "exactly their operator's arguments.",
        why="v2 renamed most parameters (`num_heads` -> `num_query_heads`, `scale` -> `softmax_scale`, "
            "`actual_seq_lengths` -> `actual_seq_qlen`, ...) and no name means different things in the two "
            "versions, so every mix raises `RuntimeError` at the first call. Migrations between IFA, FIA "
            "v1 and FIA v2 are where this happens.",
        bad=_HEADER + "def decode(q, k, v, head_dim):\n"
            "    return torch_npu.npu_fused_infer_attention_score_v2(\n"
            "        q, k, v, num_query_heads=32, scale=1 / math.sqrt(head_dim), input_layout=\"BSND\"\n    )\n",
        good=_HEADER + "def decode(q, k, v, head_dim):\n"
             "    return torch_npu.npu_fused_infer_attention_score_v2(\n"
             "        q, k, v, num_query_heads=32, softmax_scale=1 / math.sqrt(head_dim), input_layout=\"BSND\"\n"
             "    )\n",
        references=(
            Reference("The v1 <-> v2 parameter map", f"{FIA}#fia-v1-v2"),
            Reference("One concept, six spellings: the attention family", f"{FIA}#fia-family"),
            gh("vllm-project/vllm-ascend", "PR", 2792,
               "replace npu_incre_flash_attention with npu_fused_infer_attention_score"),
            gh("sgl-project/sglang", "PR", 25768, "[NPU]Replace ascend vision attn operator"),
        ),
        fix="`kvlint --fix` renames the keyword to the operator's own spelling when the rename is one to "
            "one (in the call, or as the key of a `**kwargs` dict used only by that call) and the new name "
            "is not already passed. A keyword that has no counterpart in the other version is left alone.",
    ),
    "KVL103": RuleDoc(
        what="Reports more positional arguments than the schema allows: FIA, FIA v2, IFA and PFA take "
             "`query, key, value` positionally and everything else by keyword. For "
             "`npu_fusion_attention`, whose schema has no keyword-only marker, it reports a 6th positional "
             "argument that is not a position bias.",
        why="A 4th positional argument to FIA/IFA/PFA raises `RuntimeError` (\"takes 3 positional "
            "argument(s)\"). `npu_fusion_attention(q, k, v, n, \"BSND\", mask)` is worse: it is accepted, "
            "the mask binds to `pse` (an additive bias) and `atten_mask` stays None, so the attention is "
            "computed unmasked.",
        bad=_HEADER + "def decode(q, k, v, mask, head_dim):\n"
            "    return torch_npu.npu_fused_infer_attention_score(\n"
            "        q, k, v, mask, num_heads=32, scale=1 / math.sqrt(head_dim)\n    )\n",
        good=_HEADER + "def decode(q, k, v, mask, head_dim):\n"
             "    return torch_npu.npu_fused_infer_attention_score(\n"
             "        q, k, v, atten_mask=mask, num_heads=32, scale=1 / math.sqrt(head_dim)\n    )\n",
        references=(
            Reference("DSP-C13: three positional parameters; npu_fusion_attention has no keyword-only marker",
                      f"{DISPATCHER}#dsp-c13"),
            Reference("DSP-T7: a mask as npu_fusion_attention's 6th positional argument binds to pse",
                      f"{DISPATCHER}#dsp-t7"),
            Reference("FA-T1: the mask is added to the scores and nothing is masked", f"{FA}#fa-t1"),
        ),
        no_fix="Which parameter the extra argument was meant for is a judgement call.",
    ),
    "KVL104": RuleDoc(
        what="Reports an FIA, FIA v2, IFA or PFA call that passes no `scale` / `softmax_scale` / "
             "`scale_value`. " + SHAPE_TESTS,
        why="The default scale is 1.0, not 1/sqrt(head_dim). The call runs and returns numbers, but the "
            "softmax is far too sharp: the output is silently wrong (the operator docs: \"in most cases it "
            "must be set manually, otherwise the results are wrong\").",
        bad=_HEADER + "def decode(q, k, v):\n"
            "    return torch_npu.npu_fused_infer_attention_score(q, k, v, num_heads=32, input_layout=\"BSND\")\n",
        good=_HEADER + "def decode(q, k, v, head_dim):\n"
             "    return torch_npu.npu_fused_infer_attention_score(\n"
             "        q, k, v, num_heads=32, input_layout=\"BSND\", scale=1 / math.sqrt(head_dim)\n    )\n",
        references=(
            Reference("FIA-T1: scale / softmax_scale left at its default 1.0", f"{FIA}#fia-t1"),
            Reference("IFA-T4: scale_value defaults to 1.0 in IFA and PFA", f"{IFA_PFA}#ifa-t4"),
        ),
        no_fix="The right scale depends on the head dim (and on the model: MLA uses 1/sqrt(D + 64)).",
    ),
    "KVL105": RuleDoc(
        what="Reports an FIA, FIA v2, IFA or PFA call that passes no `num_heads` / `num_query_heads` where the "
             "code around it has a query head count of its own: a parameter or local named like `num_heads`, "
             "an attribute it reads (`config.num_attention_heads`, `attn.heads`), or one its class sets "
             "(`self.num_heads`). A call with none of these (a single-head kernel test, a tutorial) is "
             "not reported. " + SHAPE_TESTS,
        why="The default is 1. With the BSH layout the head split comes only from this value "
            "(D = H // num_heads), so a missing value silently computes one huge head instead of many; "
            "with BNSD the call fails at run time.",
        bad=_HEADER + _ATTENTION_WITH_HEADS
        + "            q, k, v, scale=self.scale, input_layout=\"BSH\"\n        )\n",
        good=_HEADER + _ATTENTION_WITH_HEADS
        + "            q, k, v, num_heads=self.num_heads, scale=self.scale, input_layout=\"BSH\"\n        )\n",
        references=(
            Reference("FIA-T2: num_heads / num_query_heads left at 1", f"{FIA}#fia-t2"),
            Reference("FIA-C4: with BNSD, num_heads must equal the query's N axis", f"{FIA}#fia-c4"),
        ),
        no_fix="The message names the head count the code has, but kvlint cannot prove it is the query's "
               "(a tensor-parallel rank holds a share of the heads).",
    ),
    "KVL106": RuleDoc(
        what="Reports a literal `input_layout` (or a constant it resolves to) outside the set the operator "
             "accepts. The check is case-sensitive, as the operators are (except `npu_fusion_attention`, "
             "which upper-cases its argument). The sparse-attention kernels (`npu_lightning_indexer`, "
             "`npu_sparse_flash_attention` and their quantised forms) have a query layout (BSND, TND) and a "
             "key layout (BSND, TND, PA_BSND) of their own; FIA's workspace helpers take FIA's layouts.",
        why="FIA and FIA v2 raise `RuntimeError` (\"layout only support ...\") at the first call; IFA and PFA "
            "forward the string to CANN, which fails at launch with an opaque aclnn error code.",
        bad=_HEADER + "def decode(q, k, v, head_dim):\n"
            "    return torch_npu.npu_fused_infer_attention_score(\n"
            "        q, k, v, num_heads=32, scale=1 / math.sqrt(head_dim), input_layout=\"bnsd\"\n    )\n",
        good=_HEADER + "def decode(q, k, v, head_dim):\n"
             "    return torch_npu.npu_fused_infer_attention_score(\n"
             "        q, k, v, num_heads=32, scale=1 / math.sqrt(head_dim), input_layout=\"BNSD\"\n    )\n",
        references=(
            Reference("FIA-C1: the accepted input_layout values (case-sensitive)", f"{FIA}#fia-c1"),
            Reference("DSP-T9: a bad layout passes the parser and fails later", f"{DISPATCHER}#dsp-t9"),
        ),
        no_fix="The intended layout depends on the tensors' shapes.",
    ),
    "KVL107": RuleDoc(
        what="Reports a literal `sparse_mode` the operator does not accept: FIA and FIA v2 take 0-4, and 9 "
             "only together with `query_rope` and `key_rope`; PFA takes 0-4; the sparse-attention kernels "
             "take 0 (no causal limit) and 3 (bottom-right causal).",
        why="Modes 5-8 are documented as \"not implemented yet, do not use\" for FIA and raise for Q_S > 1; "
            "for decode (Q_S = 1, no rope) FIA ignores `sparse_mode` altogether, so the same code fails "
            "only when prefill runs.",
        bad=_HEADER + "def prefill(q, k, v, causal_mask, head_dim):\n"
            "    return torch_npu.npu_fused_infer_attention_score(\n"
            "        q, k, v, num_heads=32, scale=1 / math.sqrt(head_dim), atten_mask=causal_mask, sparse_mode=5\n"
            "    )\n",
        good=_HEADER + "def prefill(q, k, v, causal_mask, head_dim):\n"
             "    return torch_npu.npu_fused_infer_attention_score(\n"
             "        q, k, v, num_heads=32, scale=1 / math.sqrt(head_dim), atten_mask=causal_mask, sparse_mode=3\n"
             "    )\n",
        references=(
            Reference("FIA-C23: the accepted sparse_mode values", f"{FIA}#fia-c23"),
            Reference("FIA-C24: mode 9 (tree mask) only with query_rope and key_rope", f"{FIA}#fia-c24"),
        ),
        no_fix="Which mode was meant is a judgement call.",
    ),
    "KVL108": RuleDoc(
        what="Reports an FIA / FIA v2 call that passes exactly one of `query_rope` and `key_rope` "
             "(directly or through a known `**kwargs` dict).",
        why="MLA's rope split needs both halves: the operator documentation requires them \"together or not "
            "at all\", and one alone fails at launch.",
        bad=_HEADER + "def mla(q_nope, k_nope, v, q_rope, head_dim):\n"
            "    return torch_npu.npu_fused_infer_attention_score(\n"
            "        q_nope, k_nope, v, num_heads=16, scale=1 / math.sqrt(head_dim + 64), query_rope=q_rope\n"
            "    )\n",
        good=_HEADER + "def mla(q_nope, k_nope, v, q_rope, k_rope, head_dim):\n"
             "    return torch_npu.npu_fused_infer_attention_score(\n"
             "        q_nope, k_nope, v, num_heads=16, scale=1 / math.sqrt(head_dim + 64), query_rope=q_rope,\n"
             "        key_rope=k_rope,\n    )\n",
        references=(
            Reference("FIA-C46: query_rope and key_rope are given together or not at all", f"{FIA}#fia-c46"),
            Reference("FIA-C48: with rope, the query D is 512 or 128", f"{FIA}#fia-c48"),
        ),
        no_fix="The missing tensor is not in the code.",
    ),
    "KVL109": RuleDoc(
        what="Reports literal head counts where `num_heads` (or `num_query_heads`) is not divisible by "
             "`num_key_value_heads`, or the ratio is above 64; for ATB's attention, `num_heads` not divisible "
             "by `num_kv_heads`, which usually means the two were swapped: the paged operators take "
             "`num_kv_heads, num_heads` in that order and the flash operators the other way round.",
        why="Grouped-query attention maps each KV head to num_heads / num_key_value_heads query heads; "
            "the operators require an integer ratio of at most 64. Eager mode checks only num_heads > 0 and "
            "leaves the rest to CANN, which fails at launch with an opaque error code.",
        bad=_HEADER + "def decode(q, k, v, head_dim):\n"
            "    return torch_npu.npu_fused_infer_attention_score(\n"
            "        q, k, v, num_heads=32, num_key_value_heads=6, scale=1 / math.sqrt(head_dim)\n    )\n",
        good=_HEADER + "def decode(q, k, v, head_dim):\n"
             "    return torch_npu.npu_fused_infer_attention_score(\n"
             "        q, k, v, num_heads=32, num_key_value_heads=8, scale=1 / math.sqrt(head_dim)\n    )\n",
        references=(
            Reference("FIA-C45: query heads divisible by num_key_value_heads, ratio at most 64", f"{FIA}#fia-c45"),
        ),
        no_fix="The head counts are properties of the model.",
    ),
    "KVL110": RuleDoc(
        what="Reports FIA v1 given `actual_seq_lengths=` a value named like KV lengths (kv, context, "
             "cache, seq_lens_kv, ...) and no `actual_seq_lengths_kv`.",
        why="`actual_seq_lengths` means KV lengths in IFA but query lengths in FIA. Code migrated from IFA "
            "keeps a valid call, and for decode (Q_S = 1, non-TND) FIA ignores `actual_seq_lengths` "
            "entirely: the kernel attends over the whole KV buffer, padding included, with no error.",
        bad=_HEADER + "def decode(q, k, v, kv_lens, head_dim):\n"
            "    return torch_npu.npu_fused_infer_attention_score(\n"
            "        q, k, v, num_heads=32, scale=1 / math.sqrt(head_dim), actual_seq_lengths=kv_lens\n    )\n",
        good=_HEADER + "def decode(q, k, v, kv_lens, head_dim):\n"
             "    return torch_npu.npu_fused_infer_attention_score(\n"
             "        q, k, v, num_heads=32, scale=1 / math.sqrt(head_dim), actual_seq_lengths_kv=kv_lens\n    )\n",
        references=(
            Reference("One concept, six spellings: the attention family", f"{FIA}#fia-family"),
            Reference("FIA-T3: the actual_seq_lengths collision between IFA and FIA", f"{FIA}#fia-t3"),
            gh("vllm-project/vllm-ascend", "PR", 2792,
               "replace npu_incre_flash_attention with npu_fused_infer_attention_score"),
        ),
        no_fix="Whether the value holds query or KV lengths is a judgement call.",
    ),
    "KVL111": RuleDoc(
        what="Reports a literal TND/NTD-family `input_layout` on a call that does not pass both the query "
             "and the KV length arguments; for the sparse-attention kernels, a `layout_query` or key layout "
             "'TND' without that side's lengths (`actual_seq_lengths_query`, `actual_seq_lengths_key` / "
             "`_kv`). Also reports a TND call whose length lists are passed but stay empty or None on a "
             "path: a local `[]`, `()` or None that only one branch of an `if` fills (`if mask is not None:` "
             "appending the lengths) while the other branch goes on to the call; the message names the "
             "branch. Not where every path fills them (a loop, both branches) or the empty path returns or "
             "raises first. " + SHAPE_TESTS,
        why="In TND the batch is packed along T and the lengths are the only way the kernel finds the "
            "sequence boundaries; the operators require both (cumulative) length lists and fail at launch "
            "when one is missing.",
        bad=_HEADER + "def varlen(q, k, v, cu_q, head_dim):\n"
            "    return torch_npu.npu_fused_infer_attention_score(\n"
            "        q, k, v, num_heads=32, scale=1 / math.sqrt(head_dim), input_layout=\"TND\",\n"
            "        actual_seq_lengths=cu_q,\n    )\n",
        good=_HEADER + "def varlen(q, k, v, cu_q, cu_kv, head_dim):\n"
             "    return torch_npu.npu_fused_infer_attention_score(\n"
             "        q, k, v, num_heads=32, scale=1 / math.sqrt(head_dim), input_layout=\"TND\",\n"
             "        actual_seq_lengths=cu_q, actual_seq_lengths_kv=cu_kv,\n    )\n",
        references=(
            Reference("FIA-C14: TND needs both length lists, each cumulative", f"{FIA}#fia-c14"),
            Reference("FIA-T4: TND lengths must be cumulative", f"{FIA}#fia-t4"),
            Reference("FA-C5: TND needs actual_seq_qlen and actual_seq_kvlen", f"{FA}#fa-c5"),
            gh("sgl-project/sglang", "PR", 31867, "[NPU] Update non-vit vision part for cumulative seqlen"),
        ),
        no_fix="The length tensors are not in the call.",
    ),
    "KVL112": RuleDoc(
        what="Reports `torch.<npu operator>(...)` (for example `torch.npu_fused_infer_attention_score`) "
             "and `torch_npu.npu.<operator>(...)`.",
        why="`torch.<op>` exists but is a deprecated wrapper that always raises `RuntimeError` on torch_npu 2.x "
            "(\"Use torch_npu.<op> instead\"; torch_npu 1.11 only warned, and `torch_npu.<op>` works on both); "
            "`torch_npu.npu` is the device runtime module and has no operators, so the attribute lookup fails.",
        bad=_HEADER + "def decode(q, k, v, head_dim):\n"
            "    scale = 1 / math.sqrt(head_dim)\n"
            "    return torch.npu_fused_infer_attention_score(q, k, v, num_heads=32, scale=scale)\n",
        good=_HEADER + "def decode(q, k, v, head_dim):\n"
             "    scale = 1 / math.sqrt(head_dim)\n"
             "    return torch_npu.npu_fused_infer_attention_score(q, k, v, num_heads=32, scale=scale)\n",
        references=(
            Reference("Access paths: how the operators are reached", f"{DISPATCHER}#dsp-access"),
            Reference("DSP-C3: torch.<op> exists but always raises", f"{DISPATCHER}#dsp-c3"),
            Reference("DSP-C10: import torch_npu.onnx rebinds some operators", f"{DISPATCHER}#dsp-c10"),
        ),
        fix="`kvlint --fix` rewrites the callee to `torch_npu.<op>` (using the module's own alias when it "
            "has `import torch_npu as ...`), and adds `import torch_npu` after the torch import when the "
            "module does not import it.",
    ),
    "KVL113": RuleDoc(
        what="Reports `torch_npu.<name>`, `from torch_npu import <name>`, `torch.ops.npu.<name>`, "
             "`torch.ops.atb.<name>` and torchair's `tng.ops.<name>` when the namespace has no such operator "
             "and the name is either a known operator of another namespace (an ATB operator looked up in "
             "`torch.ops.npu`, one torchair does not wrap, one that lives on `torch_npu.atb`) or a "
             "misspelling of one there: a letter or two off, a word left out, words swapped. The known names "
             "are torch_npu's published operator declarations (op-plugin's function table, torch_npu's own, "
             "ATB's `m.def` schemas and torchair's `ops`), kept in `kvlint/catalogue/operator_names.py`; the "
             "message names the closest operator. Only names that look like operators (`npu_*`, `_npu_*`, "
             "`scatter_*`) are judged.",
        why="The lookup raises `AttributeError` (`ImportError` for the import) when the line runs, which is "
            "after the model loaded and often only on one branch (the graph-mode path, a test that is skipped "
            "off the device). Renamed operators are the usual cause: `npu_fused_infer_attention_v2` became "
            "`npu_fused_infer_attention_score_v2`, and op-plugin's own tests kept the old name. A name that "
            "adds words to a known one (`npu_gather_selection_kv_cache`) or carries a newer version number is "
            "not reported: projects register such operators themselves and mount them on `torch_npu` at run "
            "time, which a one-file linter cannot see. Nor is the public spelling of a private operator "
            "(`npu_matmul_add_fp32` for ATB's `_npu_matmul_add_fp32`, or the reverse): adaptor layers such as "
            "MindSpore's torch_npu export it. Nor is a name the file tests for (`hasattr`, "
            "`getattr`, a string), assigns (`torch_npu.npu_x = ...`), or looks up in a `try` that catches "
            "`AttributeError` / `ImportError`.",
        bad=_HEADER + "def decode(q, k, v, head_dim):\n"
            "    return torch_npu.npu_fused_infer_attention_v2(\n"
            "        q, k, v, num_query_heads=32, softmax_scale=1 / math.sqrt(head_dim)\n    )\n",
        good=_HEADER + "def decode(q, k, v, head_dim):\n"
             "    return torch_npu.npu_fused_infer_attention_score_v2(\n"
             "        q, k, v, num_query_heads=32, softmax_scale=1 / math.sqrt(head_dim)\n    )\n",
        references=(
            Reference("Access paths: how the operators are reached", f"{DISPATCHER}#dsp-access"),
            Reference("DSP-C2: torch_npu exports every operator of the npu namespace", f"{DISPATCHER}#dsp-c2"),
            Reference("DSP-C6: torchair.ops wraps only FIA and FIA v2", f"{DISPATCHER}#dsp-c6"),
            Reference("DSP-C8: ATB's operators are torch.ops.atb.<name>, some only on torch_npu.atb",
                      f"{DISPATCHER}#dsp-c8"),
        ),
        no_fix="The closest name is a suggestion: the intended operator may be another one, or a project's "
               "own registration.",
    ),
    "KVL114": RuleDoc(
        what="Reports an `input_layout` whose axis order contradicts the one the code proves for the query "
             "(and, outside paged attention, for key and value): a tensor unpacked as "
             "`B, N, S, D = q.shape`, or built by `x.view(bsz, q_len, num_heads, head_dim).transpose(1, 2)` "
             "(BNSD), passed with `input_layout=\"BSND\"`. The roles of the axes come from the names the code "
             "gives their sizes; `transpose` and `permute` are followed, so turning BNSD into BSND before a "
             "BSND call is fine. Names that prove nothing (vision code's `B, N, C`) are not judged. Also a "
             "layout whose rank is not the query's on a path: the code packs the query to 3-D "
             "(`q.reshape(T, N, D)`, `view`, `flatten`) and a branch still passes `\"BNSD\"` (or a 4-D query "
             "meets `\"TND\"`); the call raises there.",
        why="The operator takes the layout's word for the axis order. With heads and sequence swapped the "
            "call raises on the head count, or, when the two sizes happen to agree, attends along the head "
            "axis: wrong numbers and no error.",
        bad=_HEADER + "def prefill(query, key, value):\n"
            "    batch, heads, seq_len, head_dim = query.shape\n"
            "    out, _ = torch_npu.npu_fused_infer_attention_score(\n"
            "        query, key, value, num_heads=heads, scale=1 / math.sqrt(head_dim), input_layout=\"BSND\"\n"
            "    )\n"
            "    return out\n",
        good=_HEADER + "def prefill(query, key, value):\n"
             "    batch, heads, seq_len, head_dim = query.shape\n"
             "    out, _ = torch_npu.npu_fused_infer_attention_score(\n"
             "        query, key, value, num_heads=heads, scale=1 / math.sqrt(head_dim), input_layout=\"BNSD\"\n"
             "    )\n"
             "    return out\n",
        references=(
            Reference("FIA-C1: the layouts and the query rank each takes", f"{FIA}#fia-c1"),
            Reference("FIA-C4: with BNSD, num_heads must equal the query's N axis", f"{FIA}#fia-c4"),
            Reference("PFA-C1: PFA's layouts", f"{IFA_PFA}#pfa-c1"),
        ),
        no_fix="Whether the layout or the tensor is wrong is a judgement call: pass the layout the tensor has, "
               "or transpose the tensor.",
    ),
    "KVL115": RuleDoc(
        what="Reports a tensor passed for a scalar `int` parameter of an operator (`num_heads`, `block_size`, "
             "`sparse_mode`, `key_antiquant_mode`, `scatter_update`'s `axis`, ...) where the code builds that "
             "tensor with a torch function (`torch.tensor(...)`, `torch.ones(1).npu()`, ...). The length lists "
             "(`SymInt[]`) and the `float` parameters are not judged.",
        why="The dispatcher does not refuse a one-element tensor for an `int` parameter: it reads the value on "
            "the host on every call (a device->host synchronisation on the NPU, and a captured NPUGraph keeps "
            "the first value) and truncates a floating-point tensor toward zero, so "
            "`num_heads=torch.tensor(3.9)` runs with 3 heads, without a warning. Only a tensor with several "
            "elements raises.",
        bad=_HEADER + "def decode(q, k_int8, v_int8, k_scale, v_scale, head_dim):\n"
            "    return torch_npu.npu_fused_infer_attention_score(\n"
            "        q, k_int8, v_int8, num_heads=32, scale=1 / math.sqrt(head_dim),\n"
            "        key_antiquant_scale=k_scale, value_antiquant_scale=v_scale,\n"
            "        key_antiquant_mode=torch.ones(1).npu(), value_antiquant_mode=1,\n    )\n",
        good=_HEADER + "def decode(q, k_int8, v_int8, k_scale, v_scale, head_dim):\n"
             "    return torch_npu.npu_fused_infer_attention_score(\n"
             "        q, k_int8, v_int8, num_heads=32, scale=1 / math.sqrt(head_dim),\n"
             "        key_antiquant_scale=k_scale, value_antiquant_scale=v_scale,\n"
             "        key_antiquant_mode=1, value_antiquant_mode=1,\n    )\n",
        references=(
            Reference("DSP-T4: a floating-point tensor passed to an int parameter is truncated toward zero",
                      f"{DISPATCHER}#dsp-t4"),
            Reference("DSP-C22: only a tensor with several elements raises", f"{DISPATCHER}#dsp-c22"),
            Reference("FIA-T18: the same trap on the antiquant modes", f"{FIA}#fia-t18"),
        ),
        no_fix="A float tensor may hold a value that is not the intended int; pass the int you mean.",
    ),
    "KVL201": RuleDoc(
        what="Reports a value reaching `atten_mask` of FIA, FIA v2, IFA or PFA whose dtype is known and is "
             "not bool, int8 or uint8 (float16, bfloat16, float32, int64, an additive `-inf` / `finfo.min` "
             "mask); for `npu_fusion_attention`, anything but bool or uint8. Also an additive mask converted "
             "to an integer dtype (`(-65504 * torch.triu(...)).to(torch.int8)`, a `finfo(float32).min` mask "
             "`.to(torch.uint8)`): the message points at the cast. The value is followed through "
             "assignments, attributes set in `__init__`, helpers and dtype-changing methods.",
        why="The fused operators take a boolean-style mask in which 1/True means \"masked out\". A float "
            "mask is either rejected at launch with an opaque aclnn error code (after the model loaded) or, "
            "where a framework converts it, loses its additive meaning: a 0/-inf mask passed as a bias "
            "produced NaNs on long KV, and booleanizing a finite bias silently drops it. Converting `-inf` "
            "or `finfo(float32).min` to an integer is undefined in C++: torch on x86 gives 0, which means "
            "\"not masked\", and -65504 becomes 32 only by accident of the wrap; `.bool()` or `mask < 0` "
            "keeps the meaning (every non-zero is True).",
        bad=_HEADER + "def prefill(q, k, v, q_len, kv_len, head_dim):\n"
            "    mask = torch.zeros(1, 1, q_len, kv_len, dtype=torch.float16)\n"
            "    return torch_npu.npu_fused_infer_attention_score(\n"
            "        q, k, v, num_heads=32, scale=1 / math.sqrt(head_dim), atten_mask=mask\n    )\n",
        good=_HEADER + "def prefill(q, k, v, q_len, kv_len, head_dim):\n"
             "    mask = torch.zeros(1, 1, q_len, kv_len, dtype=torch.bool)\n"
             "    return torch_npu.npu_fused_infer_attention_score(\n"
             "        q, k, v, num_heads=32, scale=1 / math.sqrt(head_dim), atten_mask=mask\n    )\n",
        references=(
            Reference("FIA-C20: atten_mask is bool, int8 or uint8", f"{FIA}#fia-c20"),
            Reference("IFA-C13 and PFA-C7: the same dtypes for IFA and PFA", f"{IFA_PFA}#ifa-c13"),
            Reference("FA-C7: npu_fusion_attention takes bool or uint8", f"{FA}#fa-c7"),
            gh("tc-mb/llama.cpp-omni", "PR", 89,
               "[CANN] fix flash-attn mask: use BOOL attenMask instead of F16 -Inf pseShift"),
            gh("huggingface/transformers", "PR", 48843,
               "Fix NPU SDPA path silently discarding additive attention bias masks"),
            gh("vllm-project/vllm-ascend", "PR", 8387,
               "[Attention][BugFix] Fix the atten_mask in the npu_fused_infer_attention_score_v2"),
        ),
        no_fix="Converting an additive mask to a boolean one changes its meaning (which values are -inf, "
               "and which polarity): a judgement call.",
    ),
    "KVL202": RuleDoc(
        what="Reports `sparse_mode` 2, 3 or 4 with a mask whose shape is known and is not (2048, 2048), "
             "(1, 2048, 2048) or (1, 1, 2048, 2048), including a mask sized by the runtime sequence length. "
             "Not where the code proves a query of length 1 and no rope inputs are given (a `0:1` / `-1:` "
             "slice or a size of 1 on the layout's sequence axis, or a branch on `max_query_len > 1` / "
             "`q_len == 1`): the operator ignores `sparse_mode` then, and `(B, KV_S)` is a documented "
             "decode mask.",
        why="Modes 2-4 take an optimized causal/band template of fixed size 2048x2048, not a full "
            "S1xS2 mask. Another shape raises at launch (\"CheckAttentionMask ... shape is ...\"); a mask "
            "built from the sequence length works only when that length happens to be 2048.",
        bad=_HEADER + "def prefill(q, k, v, seq_len, head_dim):\n"
            "    mask = torch.triu(torch.ones(seq_len, seq_len, dtype=torch.bool), diagonal=1)\n"
            "    return torch_npu.npu_fused_infer_attention_score(\n"
            "        q, k, v, num_heads=32, scale=1 / math.sqrt(head_dim), atten_mask=mask, sparse_mode=3\n    )\n",
        good=_HEADER + "def prefill(q, k, v, seq_len, head_dim):\n"
             "    mask = torch.triu(torch.ones(2048, 2048, dtype=torch.bool), diagonal=1)\n"
             "    return torch_npu.npu_fused_infer_attention_score(\n"
             "        q, k, v, num_heads=32, scale=1 / math.sqrt(head_dim), atten_mask=mask, sparse_mode=3\n    )\n",
        references=(
            Reference("FIA-C21: the mask shapes of modes 0 and 1", f"{FIA}#fia-c21"),
            Reference("FIA-C22: modes 2, 3 and 4 require the 2048 x 2048 template", f"{FIA}#fia-c22"),
            Reference("FIA-C26: Q_S = 1 without rope: sparse_mode has no effect", f"{FIA}#fia-c26"),
            gh("sgl-project/sglang", "PR", 25455, "[NPU] MiMo-V2-Flash Adaptation"),
            gh("vllm-project/vllm-ascend", "PR", 2962,
               "[Perf] Add new npu_fused_infer_attention_score op ... resolve long-seq mask problems"),
        ),
        no_fix="Replacing the mask changes what the code allocates and caches; the fix is shown above.",
    ),
    "KVL203": RuleDoc(
        what="Reports `sparse_mode` 1-4 on a path where `atten_mask` is absent or None and the code shows "
             "causal intent on that path; the message names the evidence. Evidence is a causality flag true on "
             "the path (a branch on `causal` / `is_causal` / `self.causal`, a same-module caller passing "
             "`causal=True`, a default of True), a KV cache read at the call (a block table, keys named or "
             "grown like a cache), the function writing the KV cache, or the same call also running decode "
             "steps. A copied literal `sparse_mode` is not evidence: a bidirectional encoder (ViT, DiT) that "
             "carries one and passes no mask gets the full attention it wants, and a mask that is None where "
             "a causality flag is false (`mask = torch.triu(...) if causal else None`) is the full attention "
             "the caller asked for. Not where the code proves a query of length 1 (a `0:1` / `-1:` slice or a "
             "size of 1 on the layout's sequence axis, or a branch on `max_query_len > 1` / `q_len == 1`): FIA "
             "and PFA without rope inputs ignore `sparse_mode` then, and `npu_fusion_attention`'s full "
             "attention is what `sparse_mode=3` computes for one query. Arguments travel together: a "
             "same-module caller's mask and causality flag decide the callee's branches on them. A mask "
             "passed under another name (`attention_mask=`) is KVL101's finding, not this one.",
        why="FIA and PFA raise for prefill when the mask these modes require is missing; "
            "`npu_fusion_attention` silently ignores `sparse_mode` without a mask and computes full, "
            "non-causal attention: every token of a causal model sees the future.",
        bad=_HEADER + "def prefill(q, k_cache, v_cache, head_dim):\n"
            "    return torch_npu.npu_fused_infer_attention_score(\n"
            "        q, k_cache, v_cache, num_heads=32, scale=1 / math.sqrt(head_dim), sparse_mode=3\n    )\n",
        good=_HEADER + "def prefill(q, k_cache, v_cache, head_dim):\n"
             "    mask = torch.triu(torch.ones(2048, 2048, dtype=torch.bool), diagonal=1)\n"
             "    return torch_npu.npu_fused_infer_attention_score(\n"
             "        q, k_cache, v_cache, num_heads=32, scale=1 / math.sqrt(head_dim), atten_mask=mask, "
             "sparse_mode=3\n    )\n",
        references=(
            Reference("FIA-C22: modes 2, 3 and 4 require the 2048 x 2048 template", f"{FIA}#fia-c22"),
            Reference("FIA-T6: mode and mask mismatches", f"{FIA}#fia-t6"),
            Reference("FIA-C26: Q_S = 1 without rope: sparse_mode has no effect", f"{FIA}#fia-c26"),
            Reference("FA-T2: npu_fusion_attention without a mask computes full attention", f"{FA}#fa-t2"),
            gh("vllm-project/vllm-omni", "issue", 7322,
               "[Bug]: NPU FlashAttention ignores causal=True in the dense attention path"),
        ),
        no_fix="The mask to build depends on the mode and the model.",
    ),
    "KVL204": RuleDoc(
        what="Reports a mask built with `torch.tril(...)` and not inverted (`~`, `logical_not`, `1 - m`, "
             "`== 0`) that reaches `atten_mask`; and one mask variable passed to "
             "`scaled_dot_product_attention`'s `attn_mask` on one branch and to the operator's `atten_mask` on "
             "another, unconverted (SDPA reads True as attend, or adds a float mask to the scores).",
        why="In the Ascend operators True/1 means \"masked out\" - the opposite of SDPA's boolean mask. "
            "A lower-triangular mask therefore hides exactly the part each token should see and lets it "
            "see the future: the call runs and returns wrong numbers.",
        bad=_HEADER + "def prefill(q, k, v, head_dim):\n"
            "    mask = torch.tril(torch.ones(2048, 2048, dtype=torch.bool))\n"
            "    return torch_npu.npu_fused_infer_attention_score(\n"
            "        q, k, v, num_heads=32, scale=1 / math.sqrt(head_dim), atten_mask=mask, sparse_mode=3\n    )\n",
        good=_HEADER + "def prefill(q, k, v, head_dim):\n"
             "    mask = ~torch.tril(torch.ones(2048, 2048, dtype=torch.bool))\n"
             "    return torch_npu.npu_fused_infer_attention_score(\n"
             "        q, k, v, num_heads=32, scale=1 / math.sqrt(head_dim), atten_mask=mask, sparse_mode=3\n    )\n",
        references=(
            Reference("FIA-C20: 1/True in atten_mask means not computed", f"{FIA}#fia-c20"),
            Reference("FIA-T7: mask polarity, the opposite of SDPA's boolean attn_mask", f"{FIA}#fia-t7"),
            Reference("Semantics 4.1: polarity, True / 1 = excluded", f"{SEMANTICS}#sem-4-1"),
            gh("sgl-project/sglang", "PR", 7722, "Ascend attention backend (PA & MLA)"),
        ),
        no_fix="The rule is a warning: a tril mask may be inverted somewhere kvlint cannot see.",
    ),
    "KVL205": RuleDoc(
        what="Reports an additive float mask (`-inf`, `finfo.min`) passed as `pse_shift`.",
        why="`pse_shift` is a position bias added to the scores, not a mask. Hard -inf values in it "
            "produced NaNs and garbled output at long KV lengths; and a mask-shaped pse that is not "
            "per-head is wrong at every length.",
        bad=_HEADER + "def decode(q, k, v, kv_len, head_dim):\n"
            "    bias = torch.full((1, 32, 1, kv_len), float(\"-inf\"), dtype=torch.float16)\n"
            "    return torch_npu.npu_fused_infer_attention_score(\n"
            "        q, k, v, num_heads=32, scale=1 / math.sqrt(head_dim), pse_shift=bias\n    )\n",
        good=_HEADER + "def decode(q, k, v, kv_len, head_dim):\n"
             "    mask = torch.zeros(1, 1, 1, kv_len, dtype=torch.bool)\n"
             "    return torch_npu.npu_fused_infer_attention_score(\n"
             "        q, k, v, num_heads=32, scale=1 / math.sqrt(head_dim), atten_mask=mask\n    )\n",
        references=(
            Reference("FIA-C30: pse_shift is an fp16/bf16 bias, not a mask", f"{FIA}#fia-c30"),
            Reference("FIA-T8: under-ranked masks and pse give wrong results", f"{FIA}#fia-t8"),
            Reference("FIA-T9: an additive -inf mask as pse_shift gives NaN on long KV", f"{FIA}#fia-t9"),
            gh("tc-mb/llama.cpp-omni", "PR", 89,
               "[CANN] fix flash-attn mask: use BOOL attenMask instead of F16 -Inf pseShift"),
            gh("vllm-project/vllm-ascend", "issue", 15503,
               "npu_fused_infer_attention_score silently ignores atten_mask past KV position 512"),
        ),
        no_fix="Splitting a bias into a boolean mask and a finite bias is a judgement call.",
    ),
    "KVL206": RuleDoc(
        what="Reports top-left causal alignment over a KV cache: FIA/PFA `sparse_mode=2` in a call that "
             "also reads cached or paged KV (`block_table`, or KV lengths given separately), and "
             "`scaled_dot_product_attention(..., is_causal=True)` whose key/value are a cache. Not where the "
             "code proves a query of length 1 without rope inputs: FIA and PFA ignore the mode then, and one "
             "query sees every cached key. Also a mask the code builds top-left over two lengths, "
             "`torch.triu(torch.ones(q_len, kv_len), diagonal=1)` or `~torch.tril(torch.ones(q.shape[2], "
             "k.shape[2]))`, passed where the mode uses the mask as given (sparse_mode 0 or 1, IFA), where the "
             "code says KV_S > Q_S happens: it keeps a KV length apart from the query's (`kv_len`, "
             "`kv_seq_len += past_len`), or the call proves a cache (as above, IFA, FA's `actual_seq_kvlen`, a "
             "key named like a cache or grown by `torch.cat` with past keys). A mask sized by the query's and "
             "the key's own shapes, over a call that proves no cache, is how self-attention over equal lengths "
             "is written, and top-left is right there.",
        why="With P cached tokens and T new queries, query i sits at position P + i and must see keys up to "
            "P + i (bottom-right alignment). Top-left alignment lets it see only keys up to i, so most of "
            "the cache is hidden from every query: chunked prefill and prefix caching silently compute "
            "wrong attention.",
        bad=_HEADER + "def chunked_prefill(q, k_cache, v_cache, tables, q_lens, kv_lens, head_dim):\n"
            "    mask = torch.triu(torch.ones(2048, 2048, dtype=torch.bool), diagonal=1)\n"
            "    return torch_npu.npu_fused_infer_attention_score(\n"
            "        q, k_cache, v_cache, num_heads=32, scale=1 / math.sqrt(head_dim), atten_mask=mask,\n"
            "        sparse_mode=2, block_table=tables, block_size=128,\n"
            "        actual_seq_lengths=q_lens, actual_seq_lengths_kv=kv_lens,\n    )\n",
        good=_HEADER + "def chunked_prefill(q, k_cache, v_cache, tables, q_lens, kv_lens, head_dim):\n"
             "    mask = torch.triu(torch.ones(2048, 2048, dtype=torch.bool), diagonal=1)\n"
             "    return torch_npu.npu_fused_infer_attention_score(\n"
             "        q, k_cache, v_cache, num_heads=32, scale=1 / math.sqrt(head_dim), atten_mask=mask,\n"
             "        sparse_mode=3, block_table=tables, block_size=128,\n"
             "        actual_seq_lengths=q_lens, actual_seq_lengths_kv=kv_lens,\n    )\n",
        references=(
            Reference("Semantics 8: bottom-right versus top-left causal alignment", f"{SEMANTICS}#sem-8"),
            gh("sgl-project/sglang", "PR", 22020, "[NPU] Fix FIA chunked prefill accuracy bug on Ascend"),
            gh("xLLM-AI/xllm", "PR", 2161, "feat: fix prefix-cache prefill attention in Python graph path"),
        ),
        no_fix="The rule is a warning: a call may never see a cache with more tokens than queries.",
    ),
    "KVL207": RuleDoc(
        what="Reports a function that takes a mask or causality parameter (`attention_mask`, `attn_mask`, "
             "`mask`, `key_padding_mask`, `is_causal`, `causal`, ...), never reads it, and calls FIA, FIA v2, "
             "IFA, PFA or `npu_fusion_attention` without `atten_mask`; and a class that stores a causality flag "
             "from its constructor (`self.causal = causal`), never reads it, and calls the operator without a "
             "mask. A causality flag is reported only where the code shows it true (a same-module caller "
             "passing `causal=True` or `Module(causal=True)`, or a default of True), and the message names "
             "that evidence. Not reported: a parameter marked unused (`_mask`, `del mask`, a docstring saying "
             "reserved or unused), a mask every same-module caller gives None, a call that may pass the mask "
             "through `**kwargs`, a causality flag where the code proves a query of length 1, a mask "
             "parameter where the call passes KV lengths (padding is cut by the lengths), and a misspelled "
             "mask keyword (KVL101 reports it). Also reports a parameter the function reads only on sibling "
             "paths (the other branches of an `if` on the backend, the dtype, `is_npu`, or a branch that "
             "returns first) where one of them honours it (a flash-attn or SDPA call takes the flag or the "
             "mask, the eager branch adds the mask to its scores), while the operator call's path reads it "
             "nowhere: a causality flag where the call passes no mask, a mask where the call passes none or "
             "only the causal template (`sparse_mode` 2/3/4), so the padding part of the mask is lost; the "
             "message names the sibling that honours it; likewise a causality flag stored in `self` that only "
             "this method reads (`sdpa(..., is_causal=self.is_causal)` on the other branch), and a causality "
             "flag never read by a backend function (no same-module caller passes it False), where a sibling "
             "backend of the same signature (three shared parameters; not the dispatcher calling it) passes it "
             "to an attention call. Not where a test "
             "on the call's own path reads it "
             "(a flag that picks the branch, a guard that raises, a warning), where the call is on the "
             "`not causal` side of a causality flag (the mask is the causal one), where the call passes KV "
             "lengths, or where no path honours the parameter (logged only). Several dropped parameters of one "
             "call are one finding.",
        why="The caller built the mask (the padding of a batch of images, a causal flag) and handed it over; "
            "the function drops it and the operator attends every position. Padded patches or future tokens "
            "leak into the result, with no error; the SDPA backend of the same signature usually honours the "
            "argument, so only the NPU path is wrong.",
        bad=_HEADER + "def encoder_attention(q, k, v, attention_mask, head_dim):\n"
            "    return torch_npu.npu_prompt_flash_attention(\n"
            "        q, k, v, num_heads=16, input_layout=\"BNSD\", scale_value=1 / math.sqrt(head_dim)\n    )\n",
        good=_HEADER + "def encoder_attention(q, k, v, attention_mask, head_dim):\n"
             "    return torch_npu.npu_prompt_flash_attention(\n"
             "        q, k, v, num_heads=16, input_layout=\"BNSD\", scale_value=1 / math.sqrt(head_dim),\n"
             "        atten_mask=attention_mask,\n    )\n",
        references=(
            Reference("FIA-C20: atten_mask marks the positions that are not computed", f"{FIA}#fia-c20"),
            Reference("FA-T2: npu_fusion_attention without a mask computes full attention", f"{FA}#fa-t2"),
            gh("vllm-project/vllm-omni", "issue", 7322,
               "[Bug]: NPU FlashAttention ignores causal=True in the dense attention path"),
        ),
        no_fix="Building the mask needs to know what the parameter holds (padding, causal, additive).",
    ),
    "KVL208": RuleDoc(
        what="Reports an operator call in a function that takes a parameter controlling attention "
             "(`softmax_scale`, `sm_scale`, `sliding_window`, `window_size`, `triangular_masking`, "
             "`no_masking`, ...), or in a method of a class whose constructor stores one in `self` that no "
             "other method reads, when no argument of the call uses it, directly or through the local "
             "assignments that reach the argument; a stored attribute is one finding per class, at the "
             "assignment. Not reported where the function tests the parameter (a guard that raises, a branch "
             "that picks another path) or hands it to another call on every path (a validator, an inputs "
             "object), where its docstring says it is reserved or unused, where the call may pass it through "
             "`**kwargs`, or where another method reads the stored attribute (to build a mask, say). Also "
             "reports a control parameter, or per-sample lengths (`q_lens`, `k_lens`, `seq_lens`, "
             "`cu_seqlens_k`, `actual_seq_kvlen`, ...), that the function reads only on sibling paths (the "
             "other branches of an `if`, or a branch that returns first) where an attention call takes it "
             "(flash-attn, SDPA, another operator call), while the operator call's path reads it nowhere: "
             "the message names that call. The same for a `self` attribute of that kind (`self.softmax_scale`, "
             "`self.sliding_window`) that only this method reads, and for lengths a backend function never "
             "reads (no same-module caller passes None), where a sibling backend of the same signature passes "
             "them to an attention call. Lengths are reported only with that "
             "evidence, and not where the call passes KV lengths of its own or where the sibling that takes "
             "them runs over a KV cache (a decode step's lengths measure the cache, not a prefill call's "
             "fresh keys). Every dropped parameter of a call is named in its one finding (a stored attribute "
             "nothing reads: one finding per class).",
        why="The caller's setting is lost on the one path that calls the operator: a wrapper that takes "
            "`softmax_scale` (carrying a YaRN mscale) but passes `scale=1 / math.sqrt(d)` computes every "
            "score with the wrong temperature; a `sliding_window` that never reaches `pre_tokens` (with "
            "`sparse_mode=4`) or the mask gives a sliding-window model full attention over the whole context. "
            "Nothing raises, and the other backends of the same wrapper honour the parameter.",
        bad=_HEADER + "def flash_attn(q, k, v, softmax_scale=None):\n"
            "    return torch_npu.npu_fusion_attention(\n"
            "        q, k, v, q.shape[2], \"BSND\", scale=1 / math.sqrt(q.shape[-1])\n    )[0]\n",
        good=_HEADER + "def flash_attn(q, k, v, softmax_scale=None):\n"
             "    scale = softmax_scale if softmax_scale is not None else 1 / math.sqrt(q.shape[-1])\n"
             "    return torch_npu.npu_fusion_attention(q, k, v, q.shape[2], \"BSND\", scale=scale)[0]\n",
        references=(
            Reference("FIA-T1: scale / softmax_scale left at its default 1.0", f"{FIA}#fia-t1"),
            Reference("FIA-C25: where pre_tokens / next_tokens take effect", f"{FIA}#fia-c25"),
            Reference("FA-C10: the band of pre_tockens / next_tockens", f"{FA}#fa-c10"),
        ),
        no_fix="Where the parameter belongs (the scale, pre_tokens with sparse_mode=4, the mask) depends on "
               "what it controls.",
    ),
    "KVL301": RuleDoc(
        what="Reports a value reaching `block_table` whose dtype is known and is not int32: "
             "`torch.arange(...)` (int64 by default), `torch.tensor(list_of_ints)`, `.long()`, "
             "`dtype=torch.int64`. A later `.to(torch.int32)` or `.int()` makes it fine. Judged for FIA, FIA "
             "v2, IFA, ATB's paged attention (`_npu_paged_attention`, its workspace query, `_splitfuse`, "
             "`_splitfuse_v2`) and the sparse-attention kernels, which all document int32 block ids.",
        why="The paged-attention kernels read `block_table` as int32 block ids and do not validate them "
            "(\"block-id validity is currently not checked\"). An int64 table is rejected at launch or, "
            "read as int32, points at the wrong blocks.",
        bad=_HEADER + "def decode(q, k_cache, v_cache, batch, num_blocks, kv_lens, head_dim):\n"
            "    tables = torch.arange(num_blocks).reshape(batch, -1)\n"
            "    return torch_npu.npu_fused_infer_attention_score(\n"
            "        q, k_cache, v_cache, num_heads=32, scale=1 / math.sqrt(head_dim),\n"
            "        block_table=tables, block_size=128, actual_seq_lengths_kv=kv_lens,\n    )\n",
        good=_HEADER + "def decode(q, k_cache, v_cache, batch, num_blocks, kv_lens, head_dim):\n"
             "    tables = torch.arange(num_blocks, dtype=torch.int32).reshape(batch, -1)\n"
             "    return torch_npu.npu_fused_infer_attention_score(\n"
             "        q, k_cache, v_cache, num_heads=32, scale=1 / math.sqrt(head_dim),\n"
             "        block_table=tables, block_size=128, actual_seq_lengths_kv=kv_lens,\n    )\n",
        references=(
            Reference("FIA-C34: block_table is int32, 2-D, ids not validated", f"{FIA}#fia-c34"),
            Reference("dtypes across the family", f"{FIA}#fia-dtypes"),
            gh("vllm-project/vllm-ascend", "PR", 16597,
               "[Feature][MRV2] Supports the combination of SFA PCP, DCP, and MTP"),
        ),
        fix="`kvlint --fix` adds `dtype=torch.int32` to the factory call that builds the table "
            "(`torch.arange`, `torch.tensor`, `torch.zeros`, ...; replacing an int64 `dtype=`), or turns "
            "`.long()` into `.int()` - only where the finding points at that expression, or at a name "
            "assigned once from it in the same function and used nowhere else.",
    ),
    "KVL302": RuleDoc(
        what="Reports a call that passes `block_table` but no `block_size`. " + SHAPE_TESTS,
        why="`block_size` defaults to 0, which means \"paged attention off\"; the kernel then reads the "
            "cache tensors with the wrong layout, or fails at launch.",
        bad=_HEADER + "def decode(q, k_cache, v_cache, tables, kv_lens, head_dim):\n"
            "    return torch_npu.npu_fused_infer_attention_score(\n"
            "        q, k_cache, v_cache, num_heads=32, scale=1 / math.sqrt(head_dim),\n"
            "        block_table=tables, actual_seq_lengths_kv=kv_lens,\n    )\n",
        good=_HEADER + "def decode(q, k_cache, v_cache, tables, kv_lens, head_dim):\n"
             "    return torch_npu.npu_fused_infer_attention_score(\n"
             "        q, k_cache, v_cache, num_heads=32, scale=1 / math.sqrt(head_dim),\n"
             "        block_table=tables, block_size=128, actual_seq_lengths_kv=kv_lens,\n    )\n",
        references=(
            Reference("FIA-C34: paged attention is on when block_table is given", f"{FIA}#fia-c34"),
            Reference("FIA-C36: block_size for Q_S > 1", f"{FIA}#fia-c36"),
            Reference("FIA-C37: block_size for Q_S = 1 is non-zero", f"{FIA}#fia-c37"),
        ),
        no_fix="The block size is a property of the cache allocator.",
    ),
    "KVL303": RuleDoc(
        what="Reports a call that passes `block_table` but not the KV lengths (`actual_seq_lengths_kv` "
             "for FIA v1, `actual_seq_kvlen` for v2, `actual_seq_lengths` for IFA, `context_lens` for ATB's "
             "paged attention, `actual_seq_lengths_key` / `_kv` for the sparse-attention kernels). " + SHAPE_TESTS,
        why="A block table says where each sequence's blocks are, not how many tokens are valid in them. "
            "The documentation requires the KV lengths in paged mode; without them the kernel fails or "
            "attends over every slot of every block, padding included.",
        bad=_HEADER + "def decode(q, k_cache, v_cache, tables, head_dim):\n"
            "    return torch_npu.npu_fused_infer_attention_score(\n"
            "        q, k_cache, v_cache, num_heads=32, scale=1 / math.sqrt(head_dim),\n"
            "        block_table=tables, block_size=128,\n    )\n",
        good=_HEADER + "def decode(q, k_cache, v_cache, tables, kv_lens, head_dim):\n"
             "    return torch_npu.npu_fused_infer_attention_score(\n"
             "        q, k_cache, v_cache, num_heads=32, scale=1 / math.sqrt(head_dim),\n"
             "        block_table=tables, block_size=128, actual_seq_lengths_kv=kv_lens,\n    )\n",
        references=(
            Reference("FIA-C16: with paged attention the KV lengths must be passed", f"{FIA}#fia-c16"),
            Reference("IFA-C9: IFA paged attention needs block_table and actual_seq_lengths", f"{IFA_PFA}#ifa-c9"),
            gh("xLLM-AI/xllm", "PR", 2161, "feat: fix prefix-cache prefill attention in Python graph path"),
        ),
        no_fix="The lengths are runtime data kvlint cannot see.",
    ),
    "KVL304": RuleDoc(
        what="Reports a literal `block_size` that the documented table forbids, per path: FIA with a "
             "TND-family layout (TND, NTD, TND_NTD, NTD_TND) or MLA rope inputs takes a multiple of 16 up to "
             "1024; FIA with a query longer than 1, where the code proves it (a sequence axis longer than 1, "
             "or a branch on `max_query_len > 1`), a multiple of 128 in [128, 512]; other FIA calls (decode, "
             "or where the code proves neither) a multiple of 16 up to 512; IFA a multiple of 16 (its "
             "documentation gives no maximum).",
        why="The paged kernels tile the cache by block; the documented sizes depend on the branch the call "
            "takes (decode, prefill, TND, MLA). Other sizes fail at launch with an aclnn error code, after "
            "the model loaded. The int8-KV rule (a multiple of 32) is not checked: the KV dtype is rarely "
            "visible at the call.",
        bad=_HEADER + "def decode(q, k_cache, v_cache, tables, kv_lens, head_dim):\n"
            "    return torch_npu.npu_fused_infer_attention_score(\n"
            "        q, k_cache, v_cache, num_heads=32, scale=1 / math.sqrt(head_dim),\n"
            "        block_table=tables, block_size=100, actual_seq_lengths_kv=kv_lens,\n    )\n",
        good=_HEADER + "def decode(q, k_cache, v_cache, tables, kv_lens, head_dim):\n"
             "    return torch_npu.npu_fused_infer_attention_score(\n"
             "        q, k_cache, v_cache, num_heads=32, scale=1 / math.sqrt(head_dim),\n"
             "        block_table=tables, block_size=128, actual_seq_lengths_kv=kv_lens,\n    )\n",
        references=(
            Reference("FIA-C36: block_size for Q_S > 1", f"{FIA}#fia-c36"),
            Reference("FIA-C37: block_size for Q_S = 1", f"{FIA}#fia-c37"),
            Reference("FIA-C38: block_size up to 1024 for TND without rope", f"{FIA}#fia-c38"),
            Reference("FIA-C39: block_size up to 1024 for MLA", f"{FIA}#fia-c39"),
            Reference("IFA-C12: IFA's block_size, no documented maximum", f"{IFA_PFA}#ifa-c12"),
            Reference("Known gaps G21 and G22, which KVL304 now covers for literal sizes", f"{CONSTRAINTS}#gap-21"),
        ),
        no_fix="The block size must match the cache allocation.",
    ),
    "KVL305": RuleDoc(
        what="Reports the runner's KV length variable (`kv_len`, `kv_lens`, `kv_seq_len`, `cache_len`, "
             "`cache_position`, `seq_lens`, or the names configured with `kv-len-names`) mutated inside an "
             "`nn.Module`'s `forward` path: augmented assignment, in-place tensor methods (`add_`, `copy_`, "
             "...), item assignment, or rebinding from itself. Lengths a layer owns are not reported: a "
             "local read from a shape and advanced there (`kv_seq_len = key_states.shape[-2]`, then "
             "`kv_seq_len += past_key_value.get_usable_length(...)`, as in HF attention), and the row of a "
             "per-layer table picked by the layer's index (`self.seq_lens[layer_idx] += n`).",
        why="Every layer receives the same length. When one layer advances it, every following layer "
            "writes its cache one slot further and reads one slot more: the cache drifts layer by layer "
            "and the output degrades with no error. The runner, outside the layers, is the place to "
            "advance it.",
        bad=_HEADER + "class Layer(torch.nn.Module):\n"
            "    def forward(self, key, cache, kv_len):\n"
            "        torch_npu.scatter_update_(cache, kv_len, key, -2)\n"
            "        kv_len += 1\n"
            "        return cache\n",
        good=_HEADER + "class Layer(torch.nn.Module):\n"
             "    def forward(self, key, cache, kv_len):\n"
             "        torch_npu.scatter_update_(cache, kv_len, key, -2)\n"
             "        return cache\n\n\n"
             "def decode_step(layers, key, caches, kv_len):\n"
             "    for layer, cache in zip(layers, caches):\n"
             "        layer(key, cache, kv_len)\n"
             "    kv_len += 1\n"
             "    return kv_len\n",
        references=(Reference("KVC-C5: which positions scatter_update writes", f"{KV_CACHE}#kvc-c5"),),
        no_fix="Moving the update to the runner changes the program's structure.",
    ),
    "KVL306": RuleDoc(
        what="Reports the out-of-place `scatter_update(...)` / `npu_scatter_nd_update(...)`, or a "
             "`_functional` cache writer (`npu_scatter_pa_kv_cache_functional`, "
             "`npu_kv_rmsnorm_rope_cache_v2_functional`), called as a bare statement.",
        why="These return an updated copy (the implementation clones its input) and leave the cache "
            "unchanged. The new keys and values are never written: decoding attends over stale cache "
            "entries without any error.",
        bad=_HEADER + "def write(key_cache, positions, key):\n"
            "    torch_npu.scatter_update(key_cache, positions, key, -2)\n"
            "    return key_cache\n",
        good=_HEADER + "def write(key_cache, positions, key):\n"
             "    torch_npu.scatter_update_(key_cache, positions, key, -2)\n"
             "    return key_cache\n",
        references=(
            Reference("KVC-C1: scatter_update writes into a copy", f"{KV_CACHE}#kvc-c1"),
            Reference("KVC-C7: npu_scatter_nd_update returns an updated copy", f"{KV_CACHE}#kvc-c7"),
            Reference("KVC-T1: the result discarded, the cache unchanged", f"{KV_CACHE}#kvc-t1"),
        ),
        no_fix="In-place update or assignment of the result: either is right, depending on the caller.",
    ),
    "KVL307": RuleDoc(
        what="Reports key/value passed to FIA/IFA/PFA or ATB's attention that are `repeat_interleave` (or "
             "`expand` + `reshape`, or an `einops.repeat` whose output groups an axis with a new one) copies "
             "of the KV heads, with the line (and helper) where the repeat happened, however many same-module "
             "helpers away, also through a list comprehension over the tensors "
             "(`k, v = [t.repeat_interleave(n, dim=2) for t in (k, v)]`) and an `einops.rearrange` after the "
             "repeat.",
        why="The fused operators implement grouped-query attention through `num_key_value_heads`; "
            "materializing the repeated heads multiplies the memory and bandwidth of the KV tensors by "
            "the group size for nothing. A call that also passes the KV head count as "
            "`num_key_value_heads` now contradicts its own key and value, which have the query's head count.",
        bad=_HEADER + "def decode(q, key, value, head_dim):\n"
            "    key = key.repeat_interleave(4, dim=2)\n"
            "    value = value.repeat_interleave(4, dim=2)\n"
            "    return torch_npu.npu_fused_infer_attention_score(\n"
            "        q, key, value, num_heads=32, scale=1 / math.sqrt(head_dim), input_layout=\"BSND\"\n    )\n",
        good=_HEADER + "def decode(q, key, value, head_dim):\n"
             "    return torch_npu.npu_fused_infer_attention_score(\n"
             "        q, key, value, num_heads=32, num_key_value_heads=8, scale=1 / math.sqrt(head_dim),\n"
             "        input_layout=\"BSND\",\n    )\n",
        references=(Reference("FIA-C45: num_key_value_heads gives the operator the KV heads", f"{FIA}#fia-c45"),),
        no_fix="Removing the copy also needs `num_key_value_heads`, a property of the model.",
    ),
    "KVL308": RuleDoc(
        what="Reports the result of `npu_kv_rmsnorm_rope_cache` / `_v2` / `_v2_functional` unpacked into "
             "the wrong number of names (they return 4, 2 and 4 tensors, in different orders).",
        why="A mechanical migration from v1 to v2 that keeps four names raises `ValueError: not enough "
            "values to unpack`; to `_v2_functional` it silently assigns the outputs to the wrong names "
            "(the order differs).",
        bad=_HEADER + "def write(kv, gamma, cos, sin, index, k_cache, ckv_cache):\n"
            "    k_cache, ckv_cache, k_rope, c_kv = torch_npu.npu_kv_rmsnorm_rope_cache_v2(\n"
            "        kv, gamma, cos, sin, index, k_cache, ckv_cache\n    )\n"
            "    return k_rope, c_kv\n",
        good=_HEADER + "def write(kv, gamma, cos, sin, index, k_cache, ckv_cache):\n"
             "    k_rope, c_kv = torch_npu.npu_kv_rmsnorm_rope_cache_v2(\n"
             "        kv, gamma, cos, sin, index, k_cache, ckv_cache\n    )\n"
             "    return k_rope, c_kv\n",
        references=(
            Reference("KVC-T3: the output order of npu_kv_rmsnorm_rope_cache changes between variants",
                      f"{KV_CACHE}#kvc-t3"),
            gh("vllm-project/vllm-ascend", "PR", 657,
               "the unpacking of npu_kv_rmsnorm_rope_cache changed to four names (see KVC-T3)"),
        ),
        no_fix="Which names the code meant is a judgement call.",
    ),
    "KVL309": RuleDoc(
        what="Reports cumulative lengths (`torch.cumsum(...)`, `x.cumsum(...)`, `numpy.cumsum`, or a value "
             "named like `cu_seqlens`, `cu_q_lens`, `query_start_loc`) passed as the length arguments "
             "(`actual_seq_lengths` / `actual_seq_lengths_kv`, v2 `actual_seq_qlen` / `actual_seq_kvlen`, "
             "IFA `actual_seq_lengths`) of a call whose layout is not TND-family. Differences "
             "(`cu[1:] - cu[:-1]`) are per-batch lengths and fine; query lengths of a query of length 1 are "
             "ignored outside TND and not reported.",
        why="TND layouts pack the batch along one axis and take running totals; the other layouts take one "
            "length per batch. Running totals there are read as per-batch lengths: each batch after the first "
            "claims the lengths of all before it and runs past its own end (padding or the next sequence is "
            "attended), or the call raises when a length exceeds S. Code that serves both layouts from one "
            "metadata object is where this happens.",
        bad=_HEADER + "def prefill(q, k, v, cu_seqlens, head_dim):\n"
            "    out, _ = torch_npu.npu_fused_infer_attention_score(\n"
            "        q, k, v, num_heads=32, scale=1 / math.sqrt(head_dim), input_layout=\"BSND\",\n"
            "        actual_seq_lengths=cu_seqlens[1:], actual_seq_lengths_kv=cu_seqlens[1:],\n    )\n"
            "    return out\n",
        good=_HEADER + "def prefill(q, k, v, cu_seqlens, head_dim):\n"
             "    lengths = (cu_seqlens[1:] - cu_seqlens[:-1]).tolist()\n"
             "    out, _ = torch_npu.npu_fused_infer_attention_score(\n"
             "        q, k, v, num_heads=32, scale=1 / math.sqrt(head_dim), input_layout=\"BSND\",\n"
             "        actual_seq_lengths=lengths, actual_seq_lengths_kv=lengths,\n    )\n"
             "    return out\n",
        references=(
            Reference("FIA-C13: outside TND the length lists hold per-batch lengths", f"{FIA}#fia-c13"),
            Reference("FIA-C14: TND needs both length lists, each cumulative", f"{FIA}#fia-c14"),
            Reference("FIA-C18: Q_S = 1 outside TND: the query lengths have no effect", f"{FIA}#fia-c18"),
            Reference("PFA-C8 and PFA-C9: PFA's lengths, cumulative in TND only", f"{IFA_PFA}#pfa-c8"),
        ),
        no_fix="Whether to convert the lengths or to switch to TND depends on how the tensors are packed.",
    ),
    "KVL310": RuleDoc(
        what="Reports a KV cache passed as the key or value of FIA, FIA v2, IFA, PFA or ATB's attention as a "
             "view with a literal row width, `key_cache.view(-1, block_size, 256)` or `.view(-1, 128, 8, 128)`, "
             "while the call's KV head count (`num_key_value_heads`, `num_kv_heads`) is not a literal: it comes "
             "from the model. Not reported: a width computed from the model's sizes, a fully literal shape (a "
             "test's), a literal head count, or a width below 32 (the NZ layout's fractal of 16).",
        why="The literal is one model's `num_kv_heads * head_dim`. Every model with other KV heads or another "
            "head dim reads its blocks mis-shaped; when the sizes divide, nothing raises and the attention "
            "reads the wrong rows.",
        bad=_HEADER + "def decode(q, key_cache, value_cache, tables, kv_lens, block_size, num_kv_heads):\n"
            "    return torch_npu.npu_fused_infer_attention_score(\n"
            "        q, key_cache.view(-1, block_size, 256), value_cache.view(-1, block_size, 256),\n"
            "        num_heads=32, num_key_value_heads=num_kv_heads, scale=0.088, input_layout=\"BSH\",\n"
            "        block_table=tables, block_size=block_size, actual_seq_lengths_kv=kv_lens,\n    )\n",
        good=_HEADER + "def decode(q, key_cache, value_cache, tables, kv_lens, block_size, num_kv_heads, head_dim):\n"
             "    width = num_kv_heads * head_dim\n"
             "    return torch_npu.npu_fused_infer_attention_score(\n"
             "        q, key_cache.view(-1, block_size, width), value_cache.view(-1, block_size, width),\n"
             "        num_heads=32, num_key_value_heads=num_kv_heads, scale=0.088, input_layout=\"BSH\",\n"
             "        block_table=tables, block_size=block_size, actual_seq_lengths_kv=kv_lens,\n    )\n",
        references=(
            Reference("FIA-C34: paged attention, block_table and the paged cache", f"{FIA}#fia-c34"),
            Reference("ATB attention: schemas", "docs/operators/atb_attention.md#atb-schemas"),
        ),
        no_fix="The width to use (heads times head dim of this model) is not in the call.",
    ),
    "KVL501": RuleDoc(
        what=(
            'Compares the output of the first calls of each call site (``KVLINT_PROBE_SAMPLE``, default 3, or'
            " every call) with kvlint's float32 reference of the operator, element by element, with the "
            'tolerance of the output dtype (``|out - ref| <= max(|ref|, 1) * eps``, eps 2^-7 for float16, '
            '2^-6 for bfloat16, 1e-4 for float32), and reports the largest error and where it is (batch, '
            'head, token). Compared: npu_fused_infer_attention_score(_v2), IFA, PFA, npu_fusion_attention(_v2) '
            "(its attention output) and ATB's attention operators (the out tensor they write), with the same "
            'tolerances and the same rule for rows the reference leaves at 0 (fully masked, left out).'
        ),
        why=(
            'A fused attention call that computes something other than its arguments ask for gives plausible '
            'numbers: an operator version whose defaults differ, an option the kernel implements differently '
            'from its documentation, a hand-written CPU fallback of the operator with top-left instead of '
            "bottom-right causal alignment. Nothing raises; the model's quality degrades."
        ),
        bad=_PROBE_HEADER + (
            'def fallback_fia(q, k, v, *, num_heads, scale, sparse_mode=0, **options):\n'
            '    # a CPU stand-in of the operator, installed as torch_npu.npu_fused_infer_attention_score\n'
            '    causal = sparse_mode == 3\n'
            '    out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)\n'
            '    return out, None  # is_causal aligns top-left: wrong once the keys outnumber the queries\n'
        ),
        good=_PROBE_HEADER + (
            'def fallback_fia(q, k, v, *, num_heads, scale, sparse_mode=0, **options):\n'
            '    causal = sparse_mode == 3\n'
            '    s_q, s_kv = q.shape[-2], k.shape[-2]\n'
            '    mask = torch.ones(s_q, s_kv, dtype=torch.bool).tril(s_kv - s_q) if causal else None\n'
            '    out = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)\n'
            '    return out, None  # bottom-right: query i sees the keys up to s_kv - s_q + i\n'
        ),
        runnable=False,
        references=(
            Reference('Reference semantics, 7 Tolerances', f"{SEMANTICS}#sem-7"),
            Reference(
                'Reference semantics, 8 Bottom-right versus top-left causal alignment',
                f"{SEMANTICS}#sem-8",
            ),
        ),
        no_fix=(
            "The probe reports what differs; which side is wrong (the program's arguments, the kernel, the "
            'fallback) needs a person.'
        ),
    ),
    "KVL502": RuleDoc(
        what=(
            "Checks every value-checked attention call's output for NaN and Inf (one reduction and one scalar"
            ' read), and counts them when there are any.'
        ),
        why=(
            'A NaN in one attention output spreads through every later layer and token: the model then '
            'generates garbage or a single repeated token. Its usual causes are upstream: float16 overflow '
            '(values above 65504) in the keys or the queries, an uninitialised cache read, a fully masked row'
            ' without row correction.'
        ),
        bad=_PROBE_HEADER + (
            'q = torch.randn(1, 4, 1, 16).half()\n'
            'hidden = torch.randn(1, 2, 8, 16) * 3e4\n'
            'k = (hidden * 4).half()  # values above 65504 become inf in float16\n'
            'out, _ = torch_npu.npu_fused_infer_attention_score(\n'
            '    q, k, k, num_heads=4, num_key_value_heads=2, input_layout="BNSD", scale=0.25\n'
            ')\n'
        ),
        good=_PROBE_HEADER + (
            'q = torch.randn(1, 4, 1, 16).bfloat16()\n'
            'hidden = torch.randn(1, 2, 8, 16) * 3e4\n'
            "k = (hidden * 4).bfloat16()  # bfloat16 has float32's range\n"
            'out, _ = torch_npu.npu_fused_infer_attention_score(\n'
            '    q, k, k, num_heads=4, num_key_value_heads=2, input_layout="BNSD", scale=0.25\n'
            ')\n'
        ),
        output=(
            'kvlint-probe: example.py:7: KVL502 probe-nonfinite-output: output has 64 NaN and 0 Inf value(s) '
            'out of 64 [npu_fused_infer_attention_score]\n'
        ),
        references=(
            Reference('Reference semantics, 4.3 Fully masked rows, inner_precise', f"{SEMANTICS}#sem-4-3"),
            Reference('Reference semantics, 1.3 Low-precision emulation', f"{SEMANTICS}#sem-1-3"),
        ),
        no_fix=(
            'Where the NaN comes from is upstream of the call; the message counts them.'
        ),
    ),
    "KVL503": RuleDoc(
        what=(
            'Checks the live length lists against the tensors: outside TND, one entry per batch row (or one '
            'for all) and each at most S; for TND/NTD, cumulative ends, non-decreasing, without the leading 0'
            " of flash-attn's cu_seqlens, ending at T. A list with more entries than batch rows is reported: "
            'prompts packed into one row of a batch attend to each other. FIA at one query token outside TND '
            'ignores its query lengths (FIA-C18): out-of-range query lengths there are a warning when the KV '
            'lengths are given (or every entry covers the key), and without KV lengths an error saying that '
            'the device attends over every key.'
        ),
        why=(
            'The operator reads the first B entries of a longer list and ignores the rest (FIA-C13), so a '
            'batch of 1 holding two packed prompts is one causal sequence: the second prompt attends to the '
            'first. Lengths above S read past the tensor, and TND lengths that are per-batch rather than '
            'cumulative split the tokens wrongly (FIA-T4).'
        ),
        bad=_PROBE_HEADER + (
            'prompts = [torch.randn(12, 512), torch.randn(13, 512)]\n'
            'q = kv = torch.cat(prompts)[None]  # two prompts packed into one row of a batch of 1\n'
            'lengths = [*range(1, 13), *range(1, 14)]  # a position per token, as for flash-attn\n'
            'out, _ = torch_npu.npu_fused_infer_attention_score(\n'
            '    q, kv, kv, num_heads=4, scale=0.088, input_layout="BSH", sparse_mode=3,\n'
            '    atten_mask=torch.ones(2048, 2048, dtype=torch.bool).triu(1),\n'
            '    actual_seq_lengths=lengths, actual_seq_lengths_kv=lengths,\n'
            ')\n'
        ),
        good=_PROBE_HEADER + (
            'prompts = [torch.randn(12, 512), torch.randn(13, 512)]\n'
            'q = kv = torch.cat(prompts).view(25, 4, 128)  # TND: the prompts packed on T\n'
            "ends = [12, 25]  # each prompt's cumulative end\n"
            'out, _ = torch_npu.npu_fused_infer_attention_score(\n'
            '    q, kv, kv, num_heads=4, scale=0.088, input_layout="TND", sparse_mode=3,\n'
            '    atten_mask=torch.ones(2048, 2048, dtype=torch.bool).triu(1),\n'
            '    actual_seq_lengths=ends, actual_seq_lengths_kv=ends,\n'
            ')\n'
        ),
        output=(
            'kvlint-probe: example.py:7: KVL503 probe-seq-lengths: actual_seq_lengths=[1, 2, 3, 4, 5, 6, 7, '
            "8, '...'] has 25 entries for a batch of 1 (needs 1); 25 lengths for 1 batch row(s) look like "
            'sequences packed into one row, which needs the TND layout with cumulative lengths '
            '[npu_fused_infer_attention_score]\n'
        ),
        references=(
            Reference('FIA-C13 per-batch lengths', f"{FIA}#fia-c13"),
            Reference('FIA-C14 TND cumulative lengths', f"{FIA}#fia-c14"),
            Reference('FIA-T4 per-batch lengths under TND', f"{FIA}#fia-t4"),
        ),
        no_fix=(
            'Whether the prompts were meant to be separate sequences (TND, cumulative ends) or the lengths '
            "are wrong is the program's to say."
        ),
    ),
    "KVL504": RuleDoc(
        what=(
            "Checks a paged call's block table: 2-D, a row per batch, enough blocks for each KV length "
            '(block_table.shape[1] * block_size >= the length), and every block a sequence uses inside the '
            "cache (0 <= id < num_blocks). Entries past a sequence's length are padding and not checked."
        ),
        why=(
            'The kernels do not validate block ids: a table too short for the length, or an id outside the '
            "cache, reads another sequence's blocks or memory outside the cache, with no error."
        ),
        bad=_PROBE_HEADER + (
            'q = torch.randn(2, 1, 64)\n'
            'cache = torch.randn(4, 16, 32)  # 4 blocks of 16 tokens\n'
            'block_table = torch.tensor([[0], [1]], dtype=torch.int32)  # one block per sequence\n'
            'out, _ = torch_npu.npu_fused_infer_attention_score(\n'
            '    q, cache, cache, num_heads=4, num_key_value_heads=2, scale=0.25,\n'
            '    block_table=block_table, block_size=16, actual_seq_lengths_kv=[20, 5],\n'
            ')\n'
        ),
        good=_PROBE_HEADER + (
            'q = torch.randn(2, 1, 64)\n'
            'cache = torch.randn(4, 16, 32)  # 4 blocks of 16 tokens\n'
            'block_table = torch.tensor([[0, 2], [1, 3]], dtype=torch.int32)  # 20 tokens need 2 blocks\n'
            'out, _ = torch_npu.npu_fused_infer_attention_score(\n'
            '    q, cache, cache, num_heads=4, num_key_value_heads=2, scale=0.25,\n'
            '    block_table=block_table, block_size=16, actual_seq_lengths_kv=[20, 5],\n'
            ')\n'
        ),
        output=(
            'kvlint-probe: example.py:7: KVL504 probe-block-table: block_table.shape[1] * block_size = 1 * 16'
            ' = 16 < kv length 20 [npu_fused_infer_attention_score]\n'
        ),
        references=(
            Reference('Reference semantics, 5 Paged addressing', f"{SEMANTICS}#sem-5"),
            Reference('FIA-C41 cache layouts', f"{FIA}#fia-c41"),
        ),
        no_fix=(
            "The table comes from the program's block allocator; the message says which entry is wrong."
        ),
    ),
    "KVL505": RuleDoc(
        what=(
            "Compares the positions each layer's cache write uses within one step (per thread; caches of one "
            "shape, dtype and cache set written from one call site) with the step's first layer's, and "
            'reports a layer that writes elsewhere once its own attention call proves it: the call reads rows'
            " of that layer's cache that no write filled (they are still all zero). Two requests, two models "
            'or two threads writing their own caches at their own positions never compare.'
        ),
        why=(
            "When the runner's kv_len is advanced inside a layer (KVL305's runtime signature), layer l writes"
            ' its keys l tokens further than layer 0 and attends over positions it never wrote. No single '
            'call is malformed; the output is silently wrong from the second layer on.'
        ),
        bad=_PROBE_HEADER + (
            'LAYERS, N, D = 2, 2, 16\n'
            'caches = [(torch.zeros(1, N, 32, D), torch.zeros(1, N, 32, D)) for _ in range(LAYERS)]\n'
            "kv_len = torch.zeros(1, dtype=torch.int64)  # the runner's tensor, shared by the layers\n"
            '\n'
            '\n'
            'def layer(x, k_cache, v_cache):\n'
            '    q, k, v = x[:, :, :4], x[:, :, :N], x[:, :, N:]\n'
            '    torch_npu.scatter_update_(k_cache, kv_len, k.transpose(1, 2), -2)\n'
            '    torch_npu.scatter_update_(v_cache, kv_len, v.transpose(1, 2), -2)\n'
            '    kv_len.add_(x.shape[1])  # advances kv_len inside the layer: every layer\n'
            '    out, _ = torch_npu.npu_fused_infer_attention_score(\n'
            '        q.transpose(1, 2), k_cache, v_cache, num_heads=4, num_key_value_heads=N,\n'
            '        input_layout="BNSD", scale=D**-0.5, actual_seq_lengths_kv=kv_len.tolist(),\n'
            '        sparse_mode=3, atten_mask=torch.ones(2048, 2048, dtype=torch.bool).triu(1),\n'
            '    )\n'
            '    return out.transpose(1, 2)\n'
            '\n'
            '\n'
            'torch.manual_seed(0)\n'
            'x = torch.randn(1, 3, 4, D)\n'
            'for _ in range(LAYERS):\n'
            '    x = layer(x, *caches[_])\n'
        ),
        good=_PROBE_HEADER + (
            'LAYERS, N, D = 2, 2, 16\n'
            'caches = [(torch.zeros(1, N, 32, D), torch.zeros(1, N, 32, D)) for _ in range(LAYERS)]\n'
            "kv_len = torch.zeros(1, dtype=torch.int64)  # the runner's tensor, shared by the layers\n"
            '\n'
            '\n'
            'def layer(x, k_cache, v_cache):\n'
            '    q, k, v = x[:, :, :4], x[:, :, :N], x[:, :, N:]\n'
            '    torch_npu.scatter_update_(k_cache, kv_len, k.transpose(1, 2), -2)\n'
            '    torch_npu.scatter_update_(v_cache, kv_len, v.transpose(1, 2), -2)\n'
            '    out, _ = torch_npu.npu_fused_infer_attention_score(\n'
            '        q.transpose(1, 2), k_cache, v_cache, num_heads=4, num_key_value_heads=N,\n'
            '        input_layout="BNSD", scale=D**-0.5, actual_seq_lengths_kv=(kv_len + x.shape[1]).tolist(),\n'
            '        sparse_mode=3, atten_mask=torch.ones(2048, 2048, dtype=torch.bool).triu(1),\n'
            '    )\n'
            '    return out.transpose(1, 2)\n'
            '\n'
            '\n'
            'torch.manual_seed(0)\n'
            'x = torch.randn(1, 3, 4, D)\n'
            'for _ in range(LAYERS):\n'
            '    x = layer(x, *caches[_])\n'
            'kv_len.add_(x.shape[1])  # once per step, after every layer\n'
        ),
        output=(
            'kvlint-probe: example.py:11: KVL505 probe-cache-write-drift: layer 1 of this step (call 2 here) '
            "writes indices [3] but the step's first layer wrote [0]: kv_len advanced inside a layer?; "
            "evidence: this layer's attention call reads rows nobody filled (batch 0 reads positions 0-2 of "
            'its key cache, whose rows are all zero and were not written in this step) [scatter_update_]\n'
            'kvlint-probe: example.py:14: KVL510 probe-read-slot-not-written: batch 0 reads positions 0-2 of '
            'its key cache, whose rows are all zero and were not written in this step: never written since '
            'the cache was allocated; actual_seq_lengths_kv=[6] counts tokens that are not in the cache '
            '[npu_fused_infer_attention_score]\n'
            'kvlint-probe: example.py:12: KVL505 probe-cache-write-drift: layer 1 of this step (call 2 here) '
            "writes indices [3] but the step's first layer wrote [0]: kv_len advanced inside a layer?; "
            "evidence: this layer's attention call reads rows nobody filled (batch 0 reads positions 0-2 of "
            'its value cache, whose rows are all zero and were not written in this step) [scatter_update_]\n'
        ),
        references=(
            Reference('KVC-C5 scatter_update positions', f"{KV_CACHE}#kvc-c5"),
        ),
        no_fix=(
            'Advance kv_len once per step, in the runner, after every layer; the probe cannot move the code.'
        ),
    ),
    "KVL506": RuleDoc(
        what=(
            'Checks the head arguments against the tensors: num_heads and num_key_value_heads against the N '
            "axes (or H / head dim for BSH), the query and key head dims, and MLA's rope head dim of 64. An "
            'NZ cache is judged by its logical shape: [blocks, N, D/16, block_size, 16] has head dim D.'
        ),
        why=(
            'A head count that disagrees with the tensors makes the kernel split the hidden size wrongly: '
            'heads are mixed, or the call raises. An NZ rope view ends in the 16-wide tile, which is not its '
            'head dim.'
        ),
        bad=_PROBE_HEADER + (
            'q, k = torch.randn(2, 8, 3, 16), torch.randn(2, 2, 8, 16)  # 8 query heads, 2 KV heads\n'
            'out, _ = torch_npu.npu_fused_infer_attention_score(\n'
            '    q, k, k, num_heads=4, num_key_value_heads=2, input_layout="BNSD", scale=0.25,\n'
            '    sparse_mode=3, atten_mask=torch.ones(2048, 2048, dtype=torch.bool).triu(1),\n'
            ')\n'
        ),
        good=_PROBE_HEADER + (
            'q, k = torch.randn(2, 8, 3, 16), torch.randn(2, 2, 8, 16)  # 8 query heads, 2 KV heads\n'
            'out, _ = torch_npu.npu_fused_infer_attention_score(\n'
            '    q, k, k, num_heads=8, num_key_value_heads=2, input_layout="BNSD", scale=0.25,\n'
            '    sparse_mode=3, atten_mask=torch.ones(2048, 2048, dtype=torch.bool).triu(1),\n'
            ')\n'
        ),
        output=(
            'kvlint-probe: example.py:5: KVL506 probe-head-shapes: num_heads=4 but query (BNSD) has 8 heads '
            '[npu_fused_infer_attention_score]\n'
        ),
        references=(
            Reference('FIA-C41 cache layouts (NZ)', f"{FIA}#fia-c41"),
            Reference('Reference semantics, 2.3 GQA head mapping', f"{SEMANTICS}#sem-2-3"),
        ),
        no_fix=(
            "Which of the tensor and the argument is right is the program's to say."
        ),
    ),
    "KVL507": RuleDoc(
        what=(
            'Reports a call with several query tokens, sparse_mode=0 and no atten_mask, in which every query '
            "attends to every key, only where the evidence says decoder: the call's keys were written to a KV"
            ' cache in the same step, the keys are a paged cache or a cache a probed write filled holding '
            'more tokens than the queries (chunked prefill), or the call site also runs decode steps (one '
            "query token). The message names the evidence. An encoder's call (a ViT, a DiT, a multimodal "
            "encoder), whose keys are the query's own tokens and which writes no cache, is bidirectional by "
            'design and not reported.'
        ),
        why=(
            "A decoder's prefill without a causal mask lets every prompt token see the tokens after it: the "
            "prompt's keys and values, and so every generated token, are computed from the future. The "
            'outputs stay plausible.'
        ),
        bad=_PROBE_HEADER + (
            "cache = torch.randn(2, 128, 32)  # block 0 holds the prompt's first chunk\n"
            'block_table = torch.tensor([[0]], dtype=torch.int32)\n'
            'chunk = torch.randn(1, 8, 64)  # the next 8 tokens of the prompt\n'
            'out, _ = torch_npu.npu_fused_infer_attention_score(\n'
            '    chunk, cache, cache, num_heads=4, num_key_value_heads=2, scale=0.25, input_layout="BSH",\n'
            '    block_table=block_table, block_size=128, actual_seq_lengths=[8], actual_seq_lengths_kv=[40],\n'
            ')\n'
        ),
        good=_PROBE_HEADER + (
            "cache = torch.randn(2, 128, 32)  # block 0 holds the prompt's first chunk\n"
            'block_table = torch.tensor([[0]], dtype=torch.int32)\n'
            'chunk = torch.randn(1, 8, 64)  # the next 8 tokens of the prompt\n'
            'out, _ = torch_npu.npu_fused_infer_attention_score(\n'
            '    chunk, cache, cache, num_heads=4, num_key_value_heads=2, scale=0.25, input_layout="BSH",\n'
            '    block_table=block_table, block_size=128, actual_seq_lengths=[8], actual_seq_lengths_kv=[40],\n'
            '    sparse_mode=3, atten_mask=torch.ones(2048, 2048, dtype=torch.bool).triu(1),\n'
            ')\n'
        ),
        silent=_PROBE_HEADER + (
            'patches = torch.randn(2, 4, 196, 16)  # a ViT layer: every patch attends to every patch\n'
            'out, _ = torch_npu.npu_fused_infer_attention_score(\n'
            '    patches, patches, patches, num_heads=4, input_layout="BNSD", scale=0.25\n'
            ')\n'
        ),
        silent_note=(
            'Not reported: a ViT encoder layer, where every patch attends to every patch by design (no KV '
            'cache is written, no decode step follows).'
        ),
        output=(
            'kvlint-probe: example.py:7: KVL507 probe-non-causal-prefill: 8 query tokens over 40 keys with '
            'sparse_mode=0 and no atten_mask: every query attends to the tokens after it; decoder evidence: '
            'the keys are a paged KV cache (block_table) [npu_fused_infer_attention_score]\n'
        ),
        references=(
            Reference('Reference semantics, 4.2 Geometry per sparse mode', f"{SEMANTICS}#sem-4-2"),
            Reference(
                'Reference semantics, 8 Bottom-right versus top-left causal alignment',
                f"{SEMANTICS}#sem-8",
            ),
        ),
        no_fix=(
            'Only the program knows whether the call is meant to be causal; the rule is a warning.'
        ),
    ),
    "KVL508": RuleDoc(
        what=(
            'Reports a cache write whose slots repeat within one call (npu_scatter_nd_update coordinates, '
            "npu_scatter_pa_kv_cache slot_mapping, ATB's _npu_reshape_and_cache slot_indices, "
            'npu_kv_rmsnorm_rope_cache index) with different values, once an attention call reads the '
            'repeated slot within its KV length (before another write fills it again); the finding is at '
            "the write and names the read. Negative slots are padding. scatter_update's per-row starts may "
            'repeat, and so may tokens that write the same row. A repeated slot that nothing reads by the end '
            "of the run (a serving engine's warm-up sends dummy requests of random tokens, all to the pool's "
            'reserved block 0, and never reads it) is reported at info level, saying that no read followed.'
        ),
        why=(
            'Two tokens written to one slot in one call leave an undefined value on the device (KVC-C15, '
            "KVC-C24): which token wins, or a mix, depends on the kernel's scheduling. An attention call "
            'reading that slot then attends to an undefined key and value. It usually means two sequences '
            'were given the same block.'
        ),
        bad=_PROBE_HEADER + (
            'key_cache, value_cache = torch.zeros(4, 16, 2, 16), torch.zeros(4, 16, 2, 16)\n'
            'keys = torch.randn(2, 2, 16)\n'
            'slots = torch.tensor([16, 16], dtype=torch.int32)  # two sequences given block 1\n'
            'torch_npu._npu_reshape_and_cache(keys, keys.clone(), key_cache, value_cache, slots)\n'
            'table = torch.tensor([[1], [1]], dtype=torch.int32)\n'
            'torch_npu.npu_fused_infer_attention_score(\n'
            '    torch.randn(2, 1, 64), key_cache.view(4, 16, 32), value_cache.view(4, 16, 32), block_table=table,\n'
            '    block_size=16, actual_seq_lengths_kv=[1, 1], num_heads=4, num_key_value_heads=2, scale=0.25)\n'
        ),
        good=_PROBE_HEADER + (
            'key_cache, value_cache = torch.zeros(4, 16, 2, 16), torch.zeros(4, 16, 2, 16)\n'
            'keys = torch.randn(2, 2, 16)\n'
            'slots = torch.tensor([16, 32], dtype=torch.int32)  # blocks 1 and 2\n'
            'torch_npu._npu_reshape_and_cache(keys, keys.clone(), key_cache, value_cache, slots)\n'
            'table = torch.tensor([[1], [2]], dtype=torch.int32)\n'
            'torch_npu.npu_fused_infer_attention_score(\n'
            '    torch.randn(2, 1, 64), key_cache.view(4, 16, 32), value_cache.view(4, 16, 32), block_table=table,\n'
            '    block_size=16, actual_seq_lengths_kv=[1, 1], num_heads=4, num_key_value_heads=2, scale=0.25)\n'
        ),
        output=(
            'kvlint-probe: example.py:7: KVL508 probe-duplicate-slots: slot_indices repeats a slot (16 appears 2 '
            'times) with different values: the written value is undefined on the device; '
            'npu_fused_infer_attention_score at example.py:9 reads that slot (batch 0, position 0 of its key '
            'cache), so the attention uses the undefined row: give each token its own slot [_npu_reshape_and_cache]\n'
        ),
        silent=_PROBE_HEADER + (
            'key_cache, value_cache = torch.zeros(4, 16, 2, 16), torch.zeros(4, 16, 2, 16)\n'
            'dummies = torch.randn(4, 2, 16)  # warm-up: random token ids, all in the reserved block 0\n'
            'torch_npu._npu_reshape_and_cache(dummies, dummies.clone(), key_cache, value_cache,\n'
            '                                 torch.zeros(4, dtype=torch.int32))\n'
            'keys = torch.randn(1, 2, 16)\n'
            'torch_npu._npu_reshape_and_cache(keys, keys.clone(), key_cache, value_cache,\n'
            '                                 torch.tensor([16], dtype=torch.int32))\n'
            'table = torch.tensor([[1]], dtype=torch.int32)  # the real request never reads block 0\n'
            'torch_npu.npu_fused_infer_attention_score(\n'
            '    torch.randn(1, 1, 64), key_cache.view(4, 16, 32), value_cache.view(4, 16, 32), block_table=table,\n'
            '    block_size=16, actual_seq_lengths_kv=[1], num_heads=4, num_key_value_heads=2, scale=0.25)\n'
        ),
        silent_note=(
            "Not an error: a warm-up's dummy requests repeat slot 0 of the reserved block with different rows, "
            'and nothing reads block 0. At exit the summary and the JSON report carry it at info level '
            '("... no attention call read the slot afterwards, so nothing is known to have used the undefined '
            'row").'
        ),
        references=(
            Reference('KVC-C15 slot_mapping must not repeat', f"{KV_CACHE}#kvc-c15"),
            Reference('KVC-C24 index must not repeat', f"{KV_CACHE}#kvc-c24"),
        ),
        no_fix=(
            "The slots come from the program's block allocator; the message names a repeated slot and the "
            'call that reads it.'
        ),
    ),
    "KVL509": RuleDoc(
        what=(
            "Pairs each layer's cache write with the same layer's attention call in the same step and reports"
            ' a row written for request b (at position p of its sequence) that the call does not read for b: '
            "p is at or beyond b's KV length. Contiguous caches (scatter_update_, npu_scatter_nd_update_), "
            "paged caches (the slot, through b's block-table row) and TND packing (the written tokens mapped "
            'to requests by the cumulative query lengths) are covered.'
        ),
        why=(
            'The classic decode off-by-one: the step writes the new token at position kv_len, then attends '
            'with actual_seq_lengths_kv=kv_len instead of kv_len + 1, so no token ever attends to itself and '
            "each step's keys lag one token behind. The output is plausible and wrong."
        ),
        bad=_decode_example("kv_len"),
        good=_decode_example("kv_len + 1"),
        output=(
            "kvlint-probe: example.py:12: KVL509 probe-written-slot-not-read: batch 0's token was written at "
            'position 1 in this step (scatter_update_ at example.py:10) but this call reads only position 0 '
            'of batch 0 (actual_seq_lengths_kv=[1]): the token just written is not attended; the KV length '
            'must count it (kv_len + new tokens) [npu_fused_infer_attention_score]\n'
        ),
        references=(
            Reference('KVC-C5 scatter_update positions', f"{KV_CACHE}#kvc-c5"),
            Reference('FIA-C13 per-batch lengths', f"{FIA}#fia-c13"),
            Reference('Reference semantics, 5 Paged addressing', f"{SEMANTICS}#sem-5"),
        ),
        no_fix=(
            "The lengths come from the runner; pass the lengths after this step's writes (kv_len + new "
            'tokens).'
        ),
    ),
    "KVL510": RuleDoc(
        what=(
            "The mirror image of KVL509: a request the step's cache write served reads rows that no write "
            'the probe followed has filled, in this step or an earlier one, and whose elements are all '
            'exactly 0: a zero-initialised cache row that no write has touched since the cache was allocated. '
            'Judged only where the call certainly reads every position below the KV length (no mask, '
            "sparse_mode 3, or one query token), and only while the probe has read every write into the "
            "cache: once a write goes unread (past the value-checked calls of its site, or under tracing), "
            "a zero row proves nothing and the cache is no longer judged."
        ),
        why=(
            'Reading positions nobody wrote attends to zero keys: each adds exp(-max) to the softmax '
            'denominator and a zero value to the output, so attention is diluted by the unwritten positions. '
            'It comes from lengths one or more tokens too long, or from writes that landed elsewhere '
            '(KVL505).'
        ),
        bad=_decode_example("kv_len + 2"),
        good=_decode_example("kv_len + 1"),
        output=(
            'kvlint-probe: example.py:12: KVL510 probe-read-slot-not-written: batch 0 reads position 1 of its'
            ' key cache, whose rows are all zero and were not written in this step: never written since the '
            'cache was allocated; actual_seq_lengths_kv=[2] counts tokens that are not in the cache '
            '[npu_fused_infer_attention_score]\n'
        ),
        references=(
            Reference('FIA-C13 per-batch lengths', f"{FIA}#fia-c13"),
            Reference('Reference semantics, 3.4 Padded rows, empty KV', f"{SEMANTICS}#sem-3-4"),
        ),
        no_fix=(
            'The lengths come from the runner; they must count the tokens in the cache, no more.'
        ),
    ),
    "KVL550": RuleDoc(
        what=(
            'Reports an NPU graph replay that runs a task group (`graph_task_group_begin` / `_end` in the '
            'capture) with arguments that no update (`graph_task_update_begin` / `_end`) refreshed since the '
            'capture or the previous replay, in a program that does update that group before other replays. '
            'The calls issued during an update rewrite the captured task\'s arguments and compute nothing, so '
            'the probe validates their arguments there and judges the reads and writes (KVL509, KVL510) at the '
            'replay, with the arguments of the latest update.'
        ),
        why=(
            'A replay reuses the arguments it was last given: a step whose update was skipped attends with the '
            'lengths of an earlier step, leaving this step\'s token out or reading a stale range, with no error. '
            'The level is a warning: the replay runs as the device runs it, and lengths that did not change may '
            'need no update; where the stale lengths read the wrong rows, KVL509 or KVL510 at the replay says so.'
        ),
        bad=_PROBE_HEADER + (
            "q, k, v = torch.randn(1, 1, 64), torch.randn(1, 8, 64), torch.randn(1, 8, 64)\n"
            "out, lse = torch.zeros(1, 1, 64), torch.empty(1)\n"
            "graph, stream = torch.npu.NPUGraph(), torch.npu.current_stream()\n"
            "\n"
            "\n"
            "def attention(lengths):\n"
            "    torch_npu.npu_fused_infer_attention_score.out(\n"
            "        q, k, v, num_heads=1, scale=0.125, actual_seq_lengths_kv=lengths, out=[out, lse])\n"
            "\n"
            "\n"
            "with torch.npu.graph(graph):\n"
            "    torch.npu.graph_task_group_begin(stream)\n"
            "    attention([1])\n"
            "    handle = torch.npu.graph_task_group_end(stream)\n"
            "for length in range(2, 6):\n"
            "    if length != 4:  # this step's update is skipped\n"
            "        torch.npu.graph_task_update_begin(stream, handle)\n"
            "        attention([length])\n"
            "        torch.npu.graph_task_update_end(stream)\n"
            "    graph.replay()\n"
        ),
        good=_PROBE_HEADER + (
            "q, k, v = torch.randn(1, 1, 64), torch.randn(1, 8, 64), torch.randn(1, 8, 64)\n"
            "out, lse = torch.zeros(1, 1, 64), torch.empty(1)\n"
            "graph, stream = torch.npu.NPUGraph(), torch.npu.current_stream()\n"
            "\n"
            "\n"
            "def attention(lengths):\n"
            "    torch_npu.npu_fused_infer_attention_score.out(\n"
            "        q, k, v, num_heads=1, scale=0.125, actual_seq_lengths_kv=lengths, out=[out, lse])\n"
            "\n"
            "\n"
            "with torch.npu.graph(graph):\n"
            "    torch.npu.graph_task_group_begin(stream)\n"
            "    attention([1])\n"
            "    handle = torch.npu.graph_task_group_end(stream)\n"
            "for length in range(2, 6):  # every replay gets its step's lengths\n"
            "    torch.npu.graph_task_update_begin(stream, handle)\n"
            "    attention([length])\n"
            "    torch.npu.graph_task_update_end(stream)\n"
            "    graph.replay()\n"
        ),
        output=(
            "kvlint-probe: example.py:23: KVL550 probe-graph-replay-not-updated: replay 3 of this NPU graph runs "
            "npu_fused_infer_attention_score (captured at example.py:10) with an earlier update's arguments: no "
            "graph_task_update_begin/_end refreshed its task group since the previous replay, though the program "
            "updates that group before other replays; its lengths are those of an earlier step (update the group "
            "before every replay) [npu_fused_infer_attention_score]\n"
        ),
        references=(Reference("DSP-C25 the arguments a captured FIA call updates", f"{DISPATCHER}#dsp-c25"),),
        no_fix=(
            "The probe reports the replay; where the update belongs depends on the runner's step loop: update "
            "the group before every replay that needs new lengths."
        ),
    ),
    "KVL599": RuleDoc(
        what=(
            'Reports that the probe itself failed on a call: a check, the reference comparison or a '
            'measurement raised. The message names the stage and the exception. The call itself ran and '
            "returned normally; only the probe's judgement of it is missing."
        ),
        why=(
            'Nothing is wrong with the program as far as the probe knows, but a call the probe could not '
            'judge may hide a finding. Calls on fake or meta tensors (tracing) are not reported.'
        ),
        bad="",
        good="",
        runnable=False,
        references=(
            Reference("What the emulator and the probe do not enforce yet", f"{CONSTRAINTS}#known-gaps"),
        ),
        no_fix=(
            "Report the message and the call's arguments to kvlint."
        ),
    ),
}


def _doc(page_anchor: str, title: str) -> Reference:
    """A constraint entry of kvlint's operator pages (``fused_infer_attention.md#fia-c2``)."""
    return Reference(title, f"docs/operators/{page_anchor}")


_PROBED = ("The probe reports the live call (its site and the message); the code is not rewritten: the fix "
           "depends on the model's shapes.")

CONSTRAINT_DOCS: dict[str, RuleDoc] = {
    "KVL520": RuleDoc(
        what="Reports a live FIA / FIA v2 call (without rope inputs) with `input_layout=\"BNSD_BSND\"` and one "
             "query token, or `\"BNSD_NBSD\"` with a query length outside 2-16.",
        why="Those output transposes exist only for prefill (BNSD_BSND) and short prefills (BNSD_NBSD); the "
            "device refuses the call and the emulator raises `RuntimeError`, as it does.",
        bad=_PROBE_HEADER + (
            "q = torch.randn(1, 8, 1, 64).half()  # decode: one query token\n"
            "k = v = torch.randn(1, 8, 16, 64).half()\n"
            "out, _ = torch_npu.npu_fused_infer_attention_score(\n"
            "    q, k, v, num_heads=8, scale=0.125, input_layout=\"BNSD_BSND\"\n"
            ")\n"
        ),
        good=_PROBE_HEADER + (
            "q = torch.randn(1, 8, 1, 64).half()\n"
            "k = v = torch.randn(1, 8, 16, 64).half()\n"
            "out, _ = torch_npu.npu_fused_infer_attention_score(\n"
            "    q, k, v, num_heads=8, scale=0.125, input_layout=\"BNSD\"\n"
            ")\n"
            "out = out.transpose(1, 2)  # (B, Q_S, N, D)\n"
        ),
        output=(
            "kvlint-probe: example.py:6: KVL520 probe-layout-query-length: input_layout='BNSD_BSND' needs a "
            "query length Q_S > 1, the query has Q_S = 1; use 'BNSD' (FIA-C2, "
            "docs/operators/fused_infer_attention.md#fia-c2) [npu_fused_infer_attention_score]\n"
        ),
        references=(_doc("fused_infer_attention.md#fia-c2", "FIA-C2 BNSD_BSND only for Q_S > 1"),
                    _doc("fused_infer_attention.md#fia-c3", "FIA-C3 BNSD_NBSD only for 1 < Q_S <= 16")),
        no_fix=_PROBED,
    ),
    "KVL521": RuleDoc(
        what="Reports a live FIA v2 call whose `learnable_sink` is outside its documented use: a layout other "
             "than TND / NTD_TND, a value head dim above 128, a sink that is not bfloat16 of shape `(Q_N,)`, "
             "or a sink together with `pse_shift` or (anti)quantisation.",
        why="The sink is implemented only in those kernels; the device refuses the other calls.",
        bad=_PROBE_HEADER + (
            "q = torch.randn(1, 1, 4, 64).bfloat16()\n"
            "k = v = torch.randn(1, 12, 4, 64).bfloat16()\n"
            "sinks = torch.zeros(4)  # one logit per head, kept in float32\n"
            "out, _ = torch_npu.npu_fused_infer_attention_score_v2(\n"
            "    q, k, v, num_query_heads=4, softmax_scale=0.125, input_layout=\"BSND\", learnable_sink=sinks\n"
            ")\n"
        ),
        good=_PROBE_HEADER + (
            "q = torch.randn(7, 4, 64).bfloat16()  # TND: the tokens of every request\n"
            "k = v = torch.randn(12, 4, 64).bfloat16()\n"
            "sinks = torch.zeros(4).bfloat16()\n"
            "out, _ = torch_npu.npu_fused_infer_attention_score_v2(\n"
            "    q, k, v, num_query_heads=4, softmax_scale=0.125, input_layout=\"TND\",\n"
            "    actual_seq_qlen=[3, 7], actual_seq_kvlen=[5, 12], learnable_sink=sinks, sparse_mode=3,\n"
            "    atten_mask=torch.ones(2048, 2048, dtype=torch.bool).triu(1),\n"
            ")\n"
        ),
        output=(
            "kvlint-probe: example.py:7: KVL521 probe-learnable-sink: learnable_sink is supported only with "
            "input_layout 'TND' or 'NTD_TND', not 'BSND' (FIA-C70, "
            "docs/operators/fused_infer_attention.md#fia-c70) [npu_fused_infer_attention_score_v2]\n"
        ),
        references=(_doc("fused_infer_attention.md#fia-c70", "FIA-C70 learnable_sink"),),
        no_fix=_PROBED,
    ),
    "KVL522": RuleDoc(
        what="Reports a live MLA call (`query_rope` / `key_rope` given) whose query head dim is not 128 or 512.",
        why="MLA is implemented for the absorbed latent (D = 512) and D = 128 only; the device refuses others.",
        bad=_PROBE_HEADER + (
            "q_nope, q_pe = torch.randn(1, 1, 16, 256).bfloat16(), torch.randn(1, 1, 16, 64).bfloat16()\n"
            "k_nope, k_pe = torch.randn(1, 8, 1, 256).bfloat16(), torch.randn(1, 8, 1, 64).bfloat16()\n"
            "out, _ = torch_npu.npu_fused_infer_attention_score(\n"
            "    q_nope, k_nope, k_nope, query_rope=q_pe, key_rope=k_pe, num_heads=16, num_key_value_heads=1,\n"
            "    scale=0.06, input_layout=\"BSND\",\n"
            ")\n"
        ),
        good=_PROBE_HEADER + (
            "q_nope, q_pe = torch.randn(1, 1, 16, 512).bfloat16(), torch.randn(1, 1, 16, 64).bfloat16()\n"
            "k_nope, k_pe = torch.randn(1, 8, 1, 512).bfloat16(), torch.randn(1, 8, 1, 64).bfloat16()\n"
            "# the absorbed latent: D = 512\n"
            "out, _ = torch_npu.npu_fused_infer_attention_score(\n"
            "    q_nope, k_nope, k_nope, query_rope=q_pe, key_rope=k_pe, num_heads=16, num_key_value_heads=1,\n"
            "    scale=0.06, input_layout=\"BSND\",\n"
            ")\n"
        ),
        output=(
            "kvlint-probe: example.py:6: KVL522 probe-mla-head-dim: with query_rope (MLA) the query head dim "
            "must be 128 or 512, the query has D = 256 (FIA-C48, "
            "docs/operators/fused_infer_attention.md#fia-c48) [npu_fused_infer_attention_score]\n"
        ),
        references=(_doc("fused_infer_attention.md#fia-c48", "FIA-C48 MLA query D is 128 or 512"),),
        no_fix=_PROBED,
    ),
    "KVL523": RuleDoc(
        what="Reports int8-KV antiquant modes the operator refuses: KV-separated key and value modes that differ "
             "(other than key 0 with value 1), separated modes other than 0/1 with several query tokens, a "
             "combined `antiquant_mode` other than 0/1 for decode, or a combined scale that is not float16 with "
             "several query tokens.",
        why="These combinations are documented as unsupported; the device refuses them.",
        bad=_PROBE_HEADER + (
            "q = torch.randn(1, 1, 256).half()\n"
            "k = v = torch.randint(-8, 8, (1, 16, 256), dtype=torch.int8)\n"
            "per_token, per_channel = torch.rand(1, 16) + 0.5, torch.rand(256) + 0.5\n"
            "out, _ = torch_npu.npu_fused_infer_attention_score(\n"
            "    q, k, v, num_heads=2, scale=0.09, key_antiquant_scale=per_token, key_antiquant_mode=1,\n"
            "    value_antiquant_scale=per_channel, value_antiquant_mode=0,\n"
            ")\n"
        ),
        good=_PROBE_HEADER + (
            "q = torch.randn(1, 1, 256).half()\n"
            "k = v = torch.randint(-8, 8, (1, 16, 256), dtype=torch.int8)\n"
            "per_token, per_channel = torch.rand(1, 16) + 0.5, torch.rand(256) + 0.5\n"
            "out, _ = torch_npu.npu_fused_infer_attention_score(\n"
            "    q, k, v, num_heads=2, scale=0.09, key_antiquant_scale=per_channel, key_antiquant_mode=0,\n"
            "    value_antiquant_scale=per_token, value_antiquant_mode=1,\n"
            ")\n"
        ),
        output=(
            "kvlint-probe: example.py:7: KVL523 probe-antiquant-mode: key_antiquant_mode=1 and "
            "value_antiquant_mode=0 differ; they must be equal, except (key_antiquant_mode=0, "
            "value_antiquant_mode=1) (FIA-C61, docs/operators/fused_infer_attention.md#fia-c61) "
            "[npu_fused_infer_attention_score]\n"
        ),
        references=(_doc("fused_infer_attention.md#fia-c61", "FIA-C61 KV-separated antiquant modes"),
                    _doc("fused_infer_attention.md#fia-c64", "FIA-C64 combined antiquant_mode")),
        no_fix=_PROBED,
    ),
    "KVL524": RuleDoc(
        what="Reports a live FIA v1 call with several query tokens, a combined `antiquant_scale` and a non-zero "
             "`antiquant_mode`.",
        why="With Q_S > 1 the mode has no effect: the device dequantises per channel, so per-token scales are "
            "not what it applies. The emulator computes per channel too.",
        bad=_PROBE_HEADER + (
            "q = torch.randn(1, 4, 256).half()  # Q_S = 4 (speculative tokens)\n"
            "k = v = torch.randint(-8, 8, (1, 16, 256), dtype=torch.int8)\n"
            "scale = (torch.rand(2, 256) + 0.5).half()\n"
            "out, _ = torch_npu.npu_fused_infer_attention_score(  # antiquant_mode=1: per-token dequantisation\n"
            "    q, k, v, num_heads=2, scale=0.09, antiquant_scale=scale, antiquant_mode=1, sparse_mode=3,\n"
            "    atten_mask=torch.ones(2048, 2048, dtype=torch.bool).triu(1),\n"
            ")\n"
        ),
        good=_PROBE_HEADER + (
            "q = torch.randn(1, 4, 256).half()\n"
            "k = v = torch.randint(-8, 8, (1, 16, 256), dtype=torch.int8)\n"
            "scale = (torch.rand(2, 256) + 0.5).half()  # per channel, as the device applies it with Q_S > 1\n"
            "out, _ = torch_npu.npu_fused_infer_attention_score(\n"
            "    q, k, v, num_heads=2, scale=0.09, antiquant_scale=scale, sparse_mode=3,\n"
            "    atten_mask=torch.ones(2048, 2048, dtype=torch.bool).triu(1),\n"
            ")\n"
        ),
        output=(
            "kvlint-probe: example.py:7: KVL524 probe-antiquant-mode-ignored: antiquant_mode=1 has no effect "
            "with Q_S = 4 > 1: the device dequantises per channel; per-token combined antiquant exists only "
            "for decode (Q_S = 1) (FIA-C64, docs/operators/fused_infer_attention.md#fia-c64) "
            "[npu_fused_infer_attention_score]\n"
        ),
        references=(_doc("fused_infer_attention.md#fia-c64", "FIA-C64 combined antiquant_mode"),),
        no_fix=_PROBED,
    ),
    "KVL525": RuleDoc(
        what="Reports `inner_precise` outside 0-3 on FIA (outside 0/1 for one query token), or outside 0/1 on IFA.",
        why="Only those precision modes exist; the device refuses others.",
        bad=_PROBE_HEADER + (
            "q = torch.randn(1, 1, 256).half()  # decode, Q_S = 1\n"
            "k = v = torch.randn(1, 16, 256).half()\n"
            "out, _ = torch_npu.npu_fused_infer_attention_score(q, k, v, num_heads=2, scale=0.09, inner_precise=2)\n"
        ),
        good=_PROBE_HEADER + (
            "q = torch.randn(1, 1, 256).half()\n"
            "k = v = torch.randn(1, 16, 256).half()\n"
            "out, _ = torch_npu.npu_fused_infer_attention_score(q, k, v, num_heads=2, scale=0.09, inner_precise=0)\n"
        ),
        output=(
            "kvlint-probe: example.py:6: KVL525 probe-inner-precise: inner_precise=2 is not supported with "
            "Q_S = 1 (only 0 and 1) (FIA-C56, docs/operators/fused_infer_attention.md#fia-c56) "
            "[npu_fused_infer_attention_score]\n"
        ),
        references=(_doc("fused_infer_attention.md#fia-c56", "FIA-C56 inner_precise"),
                    _doc("incre_prompt_flash_attention.md#ifa-c15", "IFA-C15 inner_precise")),
        no_fix=_PROBED,
    ),
    "KVL526": RuleDoc(
        what="Reports an FIA `atten_mask` (sparse_mode 0/1) of a shape FIA does not document: `(B, Q_S, KV_S)` "
             "with B > 1, a 2-D mask with a TND-family layout or rope inputs, a 2-D mask in v2 with unequal "
             "head dims.",
        why="The device's handling of those shapes is not documented (under-ranked masks have given wrong "
            "results, FIA-T8); the emulator computes them as the documented shapes would be read.",
        bad=_PROBE_HEADER + (
            "q = torch.randn(2, 4, 256).half()\n"
            "k = v = torch.randn(2, 16, 256).half()\n"
            "mask = torch.zeros(2, 4, 16, dtype=torch.bool)  # (B, Q_S, KV_S)\n"
            "mask[1, :, 12:] = True  # the second request has 12 tokens\n"
            "out, _ = torch_npu.npu_fused_infer_attention_score(q, k, v, num_heads=2, scale=0.09, atten_mask=mask)\n"
        ),
        good=_PROBE_HEADER + (
            "q = torch.randn(2, 4, 256).half()\n"
            "k = v = torch.randn(2, 16, 256).half()\n"
            "mask = torch.zeros(2, 4, 16, dtype=torch.bool)\n"
            "mask[1, :, 12:] = True\n"
            "mask = mask[:, None]  # (B, 1, Q_S, KV_S)\n"
            "out, _ = torch_npu.npu_fused_infer_attention_score(q, k, v, num_heads=2, scale=0.09, atten_mask=mask)\n"
        ),
        output=(
            "kvlint-probe: example.py:8: KVL526 probe-mask-shape-undocumented: atten_mask of shape (2, 4, "
            "16): (B, Q_S, KV_S) with B > 1 is documented for npu_prompt_flash_attention only; FIA documents "
            "(1, Q_S, KV_S) and (B, 1, Q_S, KV_S) (FIA-C21, docs/operators/fused_infer_attention.md#fia-c21) "
            "[npu_fused_infer_attention_score]\n"
        ),
        references=(_doc("fused_infer_attention.md#fia-c21", "FIA-C21 mode 0/1 mask shapes"),
                    _doc("fused_infer_attention.md#fia-t8", "FIA-T8 under-ranked masks")),
        no_fix=_PROBED,
    ),
    "KVL527": RuleDoc(
        what="Reports a heads-major paged cache `(blocks, KV_N, block_size, D)` with a query layout other than "
             "BNSD / TND (IFA: other than BNSD).",
        why="That cache form is documented only with those query layouts; the device refuses the others.",
        bad=_PROBE_HEADER + (
            "q = torch.randn(1, 1, 256).half()  # BSH\n"
            "k_cache = v_cache = torch.randn(4, 2, 128, 128).half()  # (blocks, KV_N, block_size, D)\n"
            "table = torch.tensor([[0, 1]], dtype=torch.int32)\n"
            "out, _ = torch_npu.npu_fused_infer_attention_score(\n"
            "    q, k_cache, v_cache, num_heads=2, num_key_value_heads=2, scale=0.09, input_layout=\"BSH\",\n"
            "    block_table=table, block_size=128, actual_seq_lengths_kv=[200],\n"
            ")\n"
        ),
        good=_PROBE_HEADER + (
            "q = torch.randn(1, 1, 256).half()\n"
            "k_cache = v_cache = torch.randn(4, 2, 128, 128).half()\n"
            "k_bsh = v_bsh = k_cache.transpose(1, 2).flatten(2)  # (blocks, block_size, KV_N * D)\n"
            "table = torch.tensor([[0, 1]], dtype=torch.int32)\n"
            "out, _ = torch_npu.npu_fused_infer_attention_score(\n"
            "    q, k_bsh, v_bsh, num_heads=2, num_key_value_heads=2, scale=0.09, input_layout=\"BSH\",\n"
            "    block_table=table, block_size=128, actual_seq_lengths_kv=[200],\n"
            ")\n"
        ),
        output=(
            "kvlint-probe: example.py:7: KVL527 probe-paged-cache-layout: key cache (4, 2, 128, 128) is "
            "(blocks, KV_N, block_size, D), which needs a BNSD or TND query; with input_layout 'BSH' use "
            "(blocks, block_size, H) (FIA-C41, docs/operators/fused_infer_attention.md#fia-c41) "
            "[npu_fused_infer_attention_score]\n"
        ),
        references=(_doc("fused_infer_attention.md#fia-c41", "FIA-C41 paged cache layouts"),
                    _doc("incre_prompt_flash_attention.md#ifa-c10", "IFA-C10 paged cache layouts")),
        no_fix=_PROBED,
    ),
    "KVL528": RuleDoc(
        what="Reports a tokens-major 4-D paged cache `(blocks, block_size, KV_N, D)` passed to FIA or IFA.",
        why="It is ATB's layout, not a documented FIA / IFA one; the emulator reads it, the device's reading is "
            "not documented. View it as `(blocks, block_size, KV_N * D)`, which every query layout takes.",
        bad=_PROBE_HEADER + (
            "q = torch.randn(1, 2, 1, 128).half()  # BNSD\n"
            "k_cache = v_cache = torch.randn(4, 128, 2, 128).half()  # (blocks, block_size, KV_N, D), as for ATB\n"
            "table = torch.tensor([[0, 1]], dtype=torch.int32)\n"
            "out, _ = torch_npu.npu_fused_infer_attention_score(\n"
            "    q, k_cache, v_cache, num_heads=2, num_key_value_heads=2, scale=0.09, input_layout=\"BNSD\",\n"
            "    block_table=table, block_size=128, actual_seq_lengths_kv=[200],\n"
            ")\n"
        ),
        good=_PROBE_HEADER + (
            "q = torch.randn(1, 2, 1, 128).half()\n"
            "k_cache = v_cache = torch.randn(4, 128, 2, 128).half()\n"
            "k_bsh = v_bsh = k_cache.flatten(2)  # (blocks, block_size, KV_N * D): every query layout takes it\n"
            "table = torch.tensor([[0, 1]], dtype=torch.int32)\n"
            "out, _ = torch_npu.npu_fused_infer_attention_score(\n"
            "    q, k_bsh, v_bsh, num_heads=2, num_key_value_heads=2, scale=0.09, input_layout=\"BNSD\",\n"
            "    block_table=table, block_size=128, actual_seq_lengths_kv=[200],\n"
            ")\n"
        ),
        output=(
            "kvlint-probe: example.py:7: KVL528 probe-paged-cache-undocumented: key cache (4, 128, 2, 128) "
            "is read as (blocks, block_size, KV_N, D), which is not a documented layout of "
            "npu_fused_infer_attention_score; use (blocks, block_size, H) or, with a BNSD query, (blocks, "
            "KV_N, block_size, D) (FIA-C41, docs/operators/fused_infer_attention.md#fia-c41) "
            "[npu_fused_infer_attention_score]\n"
        ),
        references=(_doc("fused_infer_attention.md#fia-q14", "FIA-Q14 the tokens-major cache"),),
        no_fix=_PROBED,
    ),
    "KVL529": RuleDoc(
        what="Reports a paged call's `block_size` outside its documented set: a multiple of 128 in [128, 512] "
             "for prefill, a multiple of 16 (32 for int8 KV) up to 512 for decode, a multiple of 16 up to 1024 "
             "with TND layouts or MLA with D = 512; IFA a multiple of 16 (32 for int8 KV).",
        why="The kernels tile the cache in those block sizes; the device refuses the others.",
        bad=_PROBE_HEADER + (
            "q = torch.randn(1, 64, 256).half()  # a prefill chunk, Q_S = 64\n"
            "k_cache = v_cache = torch.randn(16, 16, 256).half()  # block_size 16\n"
            "table = torch.arange(8, dtype=torch.int32)[None]\n"
            "out, _ = torch_npu.npu_fused_infer_attention_score(\n"
            "    q, k_cache, v_cache, num_heads=2, scale=0.09, sparse_mode=3,\n"
            "    atten_mask=torch.ones(2048, 2048, dtype=torch.bool).triu(1), block_table=table, block_size=16,\n"
            "    actual_seq_lengths_kv=[128],\n"
            ")\n"
        ),
        good=_PROBE_HEADER + (
            "q = torch.randn(1, 64, 256).half()\n"
            "k_cache = v_cache = torch.randn(2, 128, 256).half()  # block_size 128\n"
            "table = torch.arange(1, dtype=torch.int32)[None]\n"
            "out, _ = torch_npu.npu_fused_infer_attention_score(\n"
            "    q, k_cache, v_cache, num_heads=2, scale=0.09, sparse_mode=3,\n"
            "    atten_mask=torch.ones(2048, 2048, dtype=torch.bool).triu(1), block_table=table, block_size=128,\n"
            "    actual_seq_lengths_kv=[128],\n"
            ")\n"
        ),
        output=(
            "kvlint-probe: example.py:7: KVL529 probe-block-size: block_size=16 with Q_S = 64 > 1 must be a "
            "multiple of 128 in [128, 512] (FIA-C36, docs/operators/fused_infer_attention.md#fia-c36) "
            "[npu_fused_infer_attention_score]\n"
        ),
        references=(_doc("fused_infer_attention.md#fia-c36", "FIA-C36 block_size with Q_S > 1"),
                    _doc("fused_infer_attention.md#fia-c37", "FIA-C37 block_size with Q_S = 1"),
                    _doc("incre_prompt_flash_attention.md#ifa-c12", "IFA-C12 block_size")),
        no_fix=_PROBED,
    ),
    "KVL530": RuleDoc(
        what="Reports paged attention with several query tokens and an int8 cache or antiquant scales.",
        why="Paged prefill reads fp16 / bf16 caches only; the device refuses antiquant there.",
        bad=_PROBE_HEADER + (
            "q = torch.randn(1, 64, 256).half()  # a prefill chunk, Q_S = 64\n"
            "k_cache = v_cache = torch.randint(-8, 8, (2, 128, 256), dtype=torch.int8)\n"
            "scale = torch.rand(256) + 0.5\n"
            "table = torch.tensor([[0]], dtype=torch.int32)\n"
            "out, _ = torch_npu.npu_fused_infer_attention_score(\n"
            "    q, k_cache, v_cache, num_heads=2, scale=0.09, key_antiquant_scale=scale,\n"
            "    value_antiquant_scale=scale, block_table=table, block_size=128,\n"
            "    actual_seq_lengths_kv=[128], sparse_mode=3,\n"
            "    atten_mask=torch.ones(2048, 2048, dtype=torch.bool).triu(1),\n"
            ")\n"
        ),
        good=_PROBE_HEADER + (
            "q = torch.randn(1, 64, 256).half()\n"
            "k_cache = v_cache = torch.randint(-8, 8, (2, 128, 256), dtype=torch.int8)\n"
            "scale = torch.rand(256) + 0.5\n"
            "k_half = v_half = (k_cache * scale).half()  # dequantised before the prefill\n"
            "table = torch.tensor([[0]], dtype=torch.int32)\n"
            "out, _ = torch_npu.npu_fused_infer_attention_score(\n"
            "    q, k_half, v_half, num_heads=2, scale=0.09, block_table=table, block_size=128,\n"
            "    actual_seq_lengths_kv=[128], sparse_mode=3,\n"
            "    atten_mask=torch.ones(2048, 2048, dtype=torch.bool).triu(1),\n"
            ")\n"
        ),
        output=(
            "kvlint-probe: example.py:8: KVL530 probe-paged-prefill-antiquant: paged attention with Q_S = 64 "
            "> 1 does not support antiquant (an int8 key cache) (FIA-C43, "
            "docs/operators/fused_infer_attention.md#fia-c43) [npu_fused_infer_attention_score]\n"
        ),
        references=(_doc("fused_infer_attention.md#fia-c43", "FIA-C43 paged attention combinations"),),
        no_fix=_PROBED,
    ),
    "KVL531": RuleDoc(
        what="Reports a TND-family call (query D other than 512) whose query/key/value head dims are not among "
             "the combinations the documentation lists (128/128/128, 192/192/128, 192/192/192, v2 MHA "
             "64/64/64).",
        why="A warning, not an error: public code runs other head dims on devices (vllm-ascend's GPT-OSS path, "
            "D = 64 with GQA; cann-recipes-infer's Gemma 4, D = 256), so support depends on the CANN version. "
            "Check it on the target release.",
        bad=_PROBE_HEADER + (
            "q = torch.randn(7, 4, 256).bfloat16()  # TND, D = 256\n"
            "k = v = torch.randn(12, 2, 256).bfloat16()\n"
            "out, _ = torch_npu.npu_fused_infer_attention_score_v2(\n"
            "    q, k, v, num_query_heads=4, num_key_value_heads=2, softmax_scale=0.06, input_layout=\"TND\",\n"
            "    actual_seq_qlen=[3, 7], actual_seq_kvlen=[5, 12], sparse_mode=3,\n"
            "    atten_mask=torch.ones(2048, 2048, dtype=torch.bool).triu(1),\n"
            ")\n"
        ),
        good=_PROBE_HEADER + (
            "q = torch.randn(7, 4, 128).bfloat16()  # TND, D = 128\n"
            "k = v = torch.randn(12, 2, 128).bfloat16()\n"
            "out, _ = torch_npu.npu_fused_infer_attention_score_v2(\n"
            "    q, k, v, num_query_heads=4, num_key_value_heads=2, softmax_scale=0.09, input_layout=\"TND\",\n"
            "    actual_seq_qlen=[3, 7], actual_seq_kvlen=[5, 12], sparse_mode=3,\n"
            "    atten_mask=torch.ones(2048, 2048, dtype=torch.bool).triu(1),\n"
            ")\n"
        ),
        output=(
            "kvlint-probe: example.py:6: KVL531 probe-tnd-head-dims: input_layout 'TND' documents "
            "query/key/value head dims 128/128/128, 192/192/128, got 256/256/256; results for other head "
            "dims depend on the CANN version (FIA-C55, docs/operators/fused_infer_attention.md#fia-c55) "
            "[npu_fused_infer_attention_score_v2]\n"
        ),
        references=(_doc("fused_infer_attention.md#fia-c55", "FIA-C55 TND head dims"),),
        no_fix=_PROBED,
    ),
    "KVL532": RuleDoc(
        what="Reports a batch, query or KV head count or head dim above the operator's limits (N <= 256, "
             "D <= 512, B <= 65536 (IFA 65535); at most 4096 batches in the TND layouts).",
        why="The device refuses calls beyond those limits.",
        bad=_PROBE_HEADER + (
            "q_nope, q_pe = torch.randn(1, 1, 16, 512).bfloat16(), torch.randn(1, 1, 16, 64).bfloat16()\n"
            "k_nope, k_pe = torch.randn(1, 8, 1, 512).bfloat16(), torch.randn(1, 8, 1, 64).bfloat16()\n"
            "q, k = torch.cat([q_nope, q_pe], -1), torch.cat([k_nope, k_pe], -1)  # D = 576\n"
            "out, _ = torch_npu.npu_fused_infer_attention_score(\n"
            "    q, k, k_nope, num_heads=16, num_key_value_heads=1, scale=0.04, input_layout=\"BSND\"\n"
            ")\n"
        ),
        good=_PROBE_HEADER + (
            "q_nope, q_pe = torch.randn(1, 1, 16, 512).bfloat16(), torch.randn(1, 1, 16, 64).bfloat16()\n"
            "k_nope, k_pe = torch.randn(1, 8, 1, 512).bfloat16(), torch.randn(1, 8, 1, 64).bfloat16()\n"
            "out, _ = torch_npu.npu_fused_infer_attention_score(\n"
            "    q_nope, k_nope, k_nope, query_rope=q_pe, key_rope=k_pe, num_heads=16, num_key_value_heads=1,\n"
            "    scale=0.04, input_layout=\"BSND\",\n"
            ")\n"
        ),
        output=(
            "kvlint-probe: example.py:7: KVL532 probe-axis-limit: the query head dim D = 576 is above the "
            "operator's limit of 512 (FIA-C9, docs/operators/fused_infer_attention.md#fia-c9) "
            "[npu_fused_infer_attention_score]\n"
        ),
        references=(_doc("fused_infer_attention.md#fia-c9", "FIA-C9 axis limits"),
                    _doc("fused_infer_attention.md#fia-c15", "FIA-C15 at most 4096 TND batches")),
        no_fix=_PROBED,
    ),
    "KVL533": RuleDoc(
        what="Reports an FIA value whose rank differs from the query's (without `block_table`; with it, a value "
             "cache that is not 3-, 4- or 5-D), and IFA query/key/value ranks that differ or key and value "
             "shapes that differ.",
        why="These are the checks the eager code makes (FIA) or the documentation states (IFA); the device "
            "raises. FIA's key and value head dims may differ (SEM-D6).",
        bad=_PROBE_HEADER + (
            "q = k = torch.randn(1, 1, 256).half()  # (B, S, H)\n"
            "v = torch.randn(1, 1, 2, 128).half()  # (B, S, N, D)\n"
            "out, _ = torch_npu.npu_fused_infer_attention_score(q, k, v, num_heads=2, scale=0.09)\n"
        ),
        good=_PROBE_HEADER + (
            "q = k = torch.randn(1, 1, 256).half()\n"
            "v = torch.randn(1, 1, 2, 128).half().flatten(2)  # (B, S, H) like the query\n"
            "out, _ = torch_npu.npu_fused_infer_attention_score(q, k, v, num_heads=2, scale=0.09)\n"
        ),
        output=(
            "kvlint-probe: example.py:6: KVL533 probe-kv-rank: value has 4 dims, the query 3; without "
            "block_table they must be equal (FIA-C8, docs/operators/fused_infer_attention.md#fia-c8) "
            "[npu_fused_infer_attention_score]\n"
        ),
        references=(_doc("fused_infer_attention.md#fia-c8", "FIA-C8 the eager rank checks"),
                    _doc("incre_prompt_flash_attention.md#ifa-c4", "IFA-C4 ranks and shapes")),
        no_fix=_PROBED,
    ),
    "KVL534": RuleDoc(
        what="Reports a `pse_shift` whose dtype does not follow the query's, a decode call with `pse_shift` and a "
             "head dim not divisible by 16, or `pse_shift` with a TND-family layout or MLA.",
        why="The position bias is documented only in those combinations; the device refuses the others.",
        bad=_PROBE_HEADER + (
            "q = torch.randn(1, 1, 256).half()\n"
            "k = v = torch.randn(1, 16, 256).half()\n"
            "alibi = torch.randn(1, 2, 1, 16).bfloat16()\n"
            "out, _ = torch_npu.npu_fused_infer_attention_score(q, k, v, num_heads=2, scale=0.09, pse_shift=alibi)\n"
        ),
        good=_PROBE_HEADER + (
            "q = torch.randn(1, 1, 256).half()\n"
            "k = v = torch.randn(1, 16, 256).half()\n"
            "alibi = torch.randn(1, 2, 1, 16).bfloat16()\n"
            "alibi = alibi.half()  # the query's dtype\n"
            "out, _ = torch_npu.npu_fused_infer_attention_score(q, k, v, num_heads=2, scale=0.09, pse_shift=alibi)\n"
        ),
        output=(
            "kvlint-probe: example.py:7: KVL534 probe-pse-shift: pse_shift dtype torch.bfloat16 must be the "
            "query's (torch.float16) (FIA-C30, docs/operators/fused_infer_attention.md#fia-c30) "
            "[npu_fused_infer_attention_score]\n"
        ),
        references=(_doc("fused_infer_attention.md#fia-c30", "FIA-C30 pse_shift dtype and shape"),
                    _doc("fused_infer_attention.md#fia-c31", "FIA-C31 D % 16 at Q_S = 1"),
                    _doc("fused_infer_attention.md#fia-c32", "FIA-C32 no pse with TND or MLA")),
        no_fix=_PROBED,
    ),
    "KVL535": RuleDoc(
        what="Reports negative band edges the operators refuse: `pre_tokens` / `next_tokens` below 0 with "
             "sparse_mode 4 and an int8 output (FIA), and `npu_fusion_attention`'s negative edges that leave a "
             "row empty (`|next| >= Skv` or `pre < |next|`, and the mirror case).",
        why="These bands are documented as unsupported; the device refuses them.",
        bad=_PROBE_HEADER + (
            "q = torch.randn(1, 4, 256).half()\n"
            "k = v = torch.randn(1, 16, 256).half()\n"
            "out, _ = torch_npu.npu_fused_infer_attention_score(\n"
            "    q, k, v, num_heads=2, scale=0.09, sparse_mode=4, pre_tokens=8, next_tokens=-1,\n"
            "    atten_mask=torch.ones(2048, 2048, dtype=torch.bool).triu(1), quant_scale2=torch.ones(1),\n"
            ")\n"
        ),
        good=_PROBE_HEADER + (
            "q = torch.randn(1, 4, 256).half()\n"
            "k = v = torch.randn(1, 16, 256).half()\n"
            "out, _ = torch_npu.npu_fused_infer_attention_score(  # a float16 output, quantised afterwards\n"
            "    q, k, v, num_heads=2, scale=0.09, sparse_mode=4, pre_tokens=8, next_tokens=-1,\n"
            "    atten_mask=torch.ones(2048, 2048, dtype=torch.bool).triu(1),\n"
            ")\n"
            "out_int8 = torch.clamp(torch.round(out.float() * 16), -128, 127).to(torch.int8)\n"
        ),
        output=(
            "kvlint-probe: example.py:6: KVL535 probe-negative-band: next_tokens=-1 is negative; "
            "sparse_mode=4 with an int8 output does not support that (FIA-C27, "
            "docs/operators/fused_infer_attention.md#fia-c27) [npu_fused_infer_attention_score]\n"
        ),
        references=(_doc("fusion_attention.md#fa-c14", "FA-C14 negative band arguments"),
                    _doc("fused_infer_attention.md#fia-c27", "FIA-C27 int8 output and negative pre/next")),
        no_fix=_PROBED,
    ),
    "KVL536": RuleDoc(
        what="Reports a one-element tensor passed for a scalar `int`, `float` or `bool` parameter of a live call.",
        why="The dispatcher converts it on the host on every call: a device->host synchronisation on the NPU, and "
            "a captured NPUGraph keeps the first value. Pass a Python number.",
        bad=_PROBE_HEADER + (
            "q = k = v = torch.randn(1, 1, 256).half()\n"
            "heads = torch.tensor(2)  # kept as a tensor with the model's config\n"
            "out, _ = torch_npu.npu_fused_infer_attention_score(q, k, v, num_heads=heads, scale=0.09)\n"
        ),
        good=_PROBE_HEADER + (
            "q = k = v = torch.randn(1, 1, 256).half()\n"
            "heads = int(torch.tensor(2))  # once, outside the step\n"
            "out, _ = torch_npu.npu_fused_infer_attention_score(q, k, v, num_heads=heads, scale=0.09)\n"
        ),
        output=(
            "kvlint-probe: example.py:6: KVL536 probe-tensor-scalar-argument: num_heads is an int parameter "
            "but got a torch.int64 tensor: the dispatcher reads it on the host on every call (a device->host "
            "sync on the NPU; a captured NPUGraph keeps the first value); pass a Python int "
            "(docs/operators/dispatcher.md#dsp-t4) [npu_fused_infer_attention_score]\n"
        ),
        references=(_doc("dispatcher.md#dsp-t3", "DSP-T3 scalar conversions"),
                    _doc("dispatcher.md#dsp-t4", "DSP-T4 a float tensor for an int")),
        no_fix=_PROBED,
    ),
    "KVL537": RuleDoc(
        what="Reports a floating-point tensor whose value is not a whole number, passed for an `int` parameter.",
        why="The dispatcher truncates it toward zero without a warning: `num_heads=torch.tensor(3.9)` runs with "
            "3 heads. The static rule KVL115 reports the tensors the code builds itself.",
        bad=_PROBE_HEADER + (
            "q = k = v = torch.randn(1, 1, 48).half()\n"
            "heads = torch.tensor(3.9)  # a float tensor: the operator runs with 3 heads\n"
            "out, _ = torch_npu.npu_fused_infer_attention_score(q, k, v, num_heads=heads, scale=0.25)\n"
        ),
        good=_PROBE_HEADER + (
            "q = k = v = torch.randn(1, 1, 48).half()\n"
            "heads = 4  # a Python int\n"
            "out, _ = torch_npu.npu_fused_infer_attention_score(q, k, v, num_heads=heads, scale=0.29)\n"
        ),
        output=(
            "kvlint-probe: example.py:6: KVL537 probe-truncated-int-argument: num_heads=3.9 (a torch.float32 "
            "tensor) runs as num_heads=3: the dispatcher truncates a float tensor toward zero for an int "
            "parameter; pass a Python int (docs/operators/dispatcher.md#dsp-t4) "
            "[npu_fused_infer_attention_score]\n"
        ),
        references=(_doc("dispatcher.md#dsp-t4", "DSP-T4 a float tensor for an int"),),
        no_fix=_PROBED,
    ),
}
"""The pages of the probe's constraint checks (KVL520-KVL537), one per row of
``kvlint.runtime_probe.reference.constraints``; kept apart from the other probe pages for that reason."""
DOCS.update(CONSTRAINT_DOCS)


LEVEL_RULE = ("Errors are for what the device refuses or computes wrongly; where the documentation calls a value "
              "out of range but the device is known to clamp or ignore it, the finding is a warning that says so.")
"""How a probe finding's level is chosen (issue 24); each probe code's page gives its level and why."""

LEVELS: dict[str, str] = {
    "KVL501": "error: the operator computed something other than its arguments ask for.",
    "KVL502": "error: a NaN or Inf in the attention output is a wrong result whatever caused it.",
    "KVL503": (
        "error: lengths above S read past the tensors, and more entries than batch rows (the device reads the "
        "first B, FIA-C13) or non-cumulative TND lengths give an output other than the list describes. A "
        "warning, saying so, where FIA ignores the lengths: its query lengths at Q_S = 1 outside TND (FIA-C18) "
        "when the KV lengths are given or every entry covers the key's S (torch_npu's own graph tests pass "
        "actual_seq_lengths=[100] there); without KV lengths they are the IFA habit and stay an error."
    ),
    "KVL504": "error: a block id outside the cache or a table too short for the length reads memory that is "
              "not the sequence's keys.",
    "KVL505": "error: reported only with the proof that the layer reads rows nobody wrote, a wrong result.",
    "KVL506": "error: head counts that disagree with the tensors split the heads wrongly or are refused.",
    "KVL507": "warning: whether attention should be causal is the program's intent; the evidence only "
              "suggests a decoder.",
    "KVL508": "error once an attention call reads the repeated slot (it attends to an undefined row); info when "
              "nothing reads it by the end of the run (the undefined row did no harm, as in a warm-up's "
              "reserved block).",
    "KVL509": "error: the token just written is not attended, a wrong result.",
    "KVL510": "error: attending to rows nobody wrote dilutes the attention, a wrong result.",
    "KVL520": "error: the device refuses the layout for this query length (the emulator raises RuntimeError).",
    "KVL521": "error: the device refuses learnable_sink outside its documented use (RuntimeError).",
    "KVL522": "error: the device refuses an MLA query head dim other than 128 or 512 (RuntimeError).",
    "KVL523": "error: the device refuses these antiquant modes (RuntimeError).",
    "KVL524": "warning: the device ignores the combined antiquant_mode with Q_S > 1; the call runs.",
    "KVL525": "error: the device refuses inner_precise outside its range (RuntimeError).",
    "KVL526": "warning: the shape is undocumented, not refused; the device computes something the "
              "documentation does not describe.",
    "KVL527": "error: the device refuses a heads-major paged cache with this query layout (RuntimeError).",
    "KVL528": "warning: the cache layout is undocumented, not refused.",
    "KVL529": "error: the device refuses this block_size for the call (RuntimeError).",
    "KVL530": "error: the device refuses paged attention with Q_S > 1 and an int8 cache (RuntimeError).",
    "KVL531": "warning: the head dims are undocumented for TND, not refused.",
    "KVL532": "error: the device refuses axes above its limits (RuntimeError).",
    "KVL533": "error: the device refuses these ranks and shapes (RuntimeError).",
    "KVL534": "error: the device refuses pse_shift with this dtype, head dim or layout (RuntimeError).",
    "KVL535": "error: the device refuses these negative band edges (RuntimeError).",
    "KVL536": "warning: the call computes the right result; the cost is a host read on every call.",
    "KVL537": "error: the operator runs with the truncated value, not the one passed.",
    "KVL550": ("warning: the replay computes with the arguments of an earlier step, which is a wrong result only "
               "when those arguments changed; the probe cannot see whether they did."),
    "KVL599": "warning: the program's call ran normally; only the probe's judgement of it is missing.",
}
"""Probe code -> its level and the reason, shown on its page."""
