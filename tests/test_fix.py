"""``kvlint --fix`` / ``--diff``: the exact rewrite for each fixable rule, nothing else touched, the fixed
file clean for the fixed codes, and no rewrite where the code does not prove it right."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from kvlint.analysis.finding import Finding
from kvlint.catalogue.rules import FIXABLE
from kvlint.checks.engine import lint_source
from kvlint.fix.rewrite import fix_source


def fixed(source: str, codes: tuple[str, ...] = tuple(FIXABLE)) -> str:
    source = textwrap.dedent(source)
    findings = [f for f in lint_source(source, "m.py") if f.code in codes]
    result = fix_source(source, findings, "m.py").fixed
    remaining = {f.code for f in lint_source(result, "m.py")}
    if result != source:
        assert not remaining & set(codes), "the fixed file still has the fixed codes"
    return result


def test_kvl102_renames_keywords_in_the_call_and_keeps_comments_and_spacing() -> None:
    before = '''\
        import torch_npu


        def decode(q, k, v):
            # the v2 operator
            return torch_npu.npu_fused_infer_attention_score_v2(
                q, k, v,
                num_heads = 8,   # heads
                scale=0.1,  # keep this comment
                actual_seq_lengths_kv=[4],
            )
    '''
    assert fixed(before) == textwrap.dedent('''\
        import torch_npu


        def decode(q, k, v):
            # the v2 operator
            return torch_npu.npu_fused_infer_attention_score_v2(
                q, k, v,
                num_query_heads = 8,   # heads
                softmax_scale=0.1,  # keep this comment
                actual_seq_kvlen=[4],
            )
    ''')


def test_kvl102_renames_ifa_spellings_to_the_operators_own() -> None:
    assert fixed('''\
        import torch_npu
        x = torch_npu.npu_fused_infer_attention_score(q, k, v, num_heads=8, scale_value=0.1, deq_scale1=d)
    ''') == textwrap.dedent('''\
        import torch_npu
        x = torch_npu.npu_fused_infer_attention_score(q, k, v, num_heads=8, scale=0.1, dequant_scale1=d)
    ''')


def test_kvl102_renames_keys_of_a_dict_only_this_call_unpacks() -> None:
    assert fixed('''\
        import torch_npu


        def attention(q, k, v, s, lens):
            kwargs = {'num_query_heads': 8, "scale": s}
            kwargs["actual_seq_lengths_kv"] = lens
            kwargs.update(softmax_lse_flag=True)
            options = dict(input_layout="BSND", num_heads=8)
            a = torch_npu.npu_fused_infer_attention_score_v2(q, k, v, **kwargs)
            return torch_npu.npu_fused_infer_attention_score_v2(q, k, v, softmax_scale=s, **options)
    ''') == textwrap.dedent('''\
        import torch_npu


        def attention(q, k, v, s, lens):
            kwargs = {'num_query_heads': 8, "softmax_scale": s}
            kwargs["actual_seq_kvlen"] = lens
            kwargs.update(return_softmax_lse=True)
            options = dict(input_layout="BSND", num_query_heads=8)
            a = torch_npu.npu_fused_infer_attention_score_v2(q, k, v, **kwargs)
            return torch_npu.npu_fused_infer_attention_score_v2(q, k, v, softmax_scale=s, **options)
    ''')


@pytest.mark.parametrize("source", [
    # the new name is already passed: renaming would pass it twice
    "import torch_npu\nx = torch_npu.npu_fused_infer_attention_score_v2(q, k, v, scale=1, softmax_scale=2)\n",
    # no counterpart in v2
    "import torch_npu\nx = torch_npu.npu_fused_infer_attention_score_v2(q, k, v, softmax_scale=1, kv_padding_size=p)\n",
    "import torch_npu\nx = torch_npu.npu_fused_infer_attention_score_v2(q, k, v, softmax_scale=1, deq_scale1=d)\n",
    # the dict is read by key after the call, or unpacked by a second call
    textwrap.dedent('''\
        import torch_npu
        def f(q, k, v):
            kw = {"scale": 0.1}
            out = torch_npu.npu_fused_infer_attention_score_v2(q, k, v, **kw)
            return out, kw["scale"]
    '''),
    textwrap.dedent('''\
        import torch_npu
        def f(q, k, v):
            kw = {"scale": 0.1, "num_query_heads": 8}
            a = torch_npu.npu_fused_infer_attention_score_v2(q, k, v, **kw)
            b = torch_npu.npu_fused_infer_attention_score_v2(q, k, v, **kw)
            return a, b
    '''),
])
def test_kvl102_leaves_what_is_not_a_one_to_one_rename(source: str) -> None:
    findings = [f for f in lint_source(source, "m.py") if f.code == "KVL102"]
    assert findings
    assert fix_source(source, findings, "m.py").fixed == source


def test_kvl112_uses_the_modules_own_torch_npu_alias() -> None:
    assert fixed('''\
        import torch
        import torch_npu as tnpu

        a = torch.npu_fused_infer_attention_score(q, k, v, num_heads=8, scale=0.1)
        b = tnpu.npu.npu_incre_flash_attention(q, k, v, num_heads=8, scale_value=0.1)
    ''') == textwrap.dedent('''\
        import torch
        import torch_npu as tnpu

        a = tnpu.npu_fused_infer_attention_score(q, k, v, num_heads=8, scale=0.1)
        b = tnpu.npu_incre_flash_attention(q, k, v, num_heads=8, scale_value=0.1)
    ''')


def test_kvl112_adds_the_import_after_the_torch_import_once() -> None:
    assert fixed('''\
        """Decode."""
        import math

        import torch as th

        a = th.npu_fused_infer_attention_score(q, k, v, num_heads=8, scale=0.1)
        th.scatter_update_(a, i, v, -2)
    ''') == textwrap.dedent('''\
        """Decode."""
        import math

        import torch as th
        import torch_npu

        a = torch_npu.npu_fused_infer_attention_score(q, k, v, num_heads=8, scale=0.1)
        torch_npu.scatter_update_(a, i, v, -2)
    ''')


def test_kvl112_leaves_a_module_where_torch_npu_names_something_else() -> None:
    source = ("import torch\ntorch_npu = None\n"
              "a = torch.npu_fused_infer_attention_score(q, k, v, num_heads=8, scale=0.1)\n")
    findings = [f for f in lint_source(source, "m.py") if f.code == "KVL112"]
    assert findings and fix_source(source, findings, "m.py").fixed == source


# KVL301: the fixer acts on the position of the engine's finding; these findings are built by hand so
# that each position the engine may point at (the keyword, its value, the factory) is covered.
KVL301 = textwrap.dedent('''\
    import torch
    import torch_npu


    def decode(q, k, v, n, lens, raw):
        tables = torch.arange(n).view(2, -1)
        a = torch_npu.npu_fused_infer_attention_score(q, k, v, block_table=tables, actual_seq_lengths_kv=lens)
        b = torch_npu.npu_fused_infer_attention_score(q, k, v, block_table=torch.tensor(raw, dtype=torch.int64))
        c = torch_npu.npu_fused_infer_attention_score(q, k, v, block_table=raw.long())
        return a, b, c
''')


def at(text: str, line: int, length: int | None = None, source: str = KVL301) -> Finding:
    source_line = source.splitlines()[line - 1]
    column = source_line.index(text)
    return Finding("m.py", line, column, line, column + (length or len(text)), "KVL301", "block_table is not int32")


@pytest.mark.parametrize(("finding", "old", "new"), [
    (at("block_table=tables", 7), "torch.arange(n).view(2, -1)", "torch.arange(n, dtype=torch.int32).view(2, -1)"),
    (at("tables, actual", 7, length=6), "torch.arange(n).view(2, -1)",
     "torch.arange(n, dtype=torch.int32).view(2, -1)"),
    (at("torch.tensor(raw, dtype=torch.int64)", 8), "dtype=torch.int64", "dtype=torch.int32"),
    (at("block_table=raw.long()", 9), "raw.long()", "raw.int()"),
])
def test_kvl301_fixes_the_factory_or_long_at_the_findings_position(finding: Finding, old: str, new: str) -> None:
    result = fix_source(KVL301, [finding], "m.py")
    assert result.applied == [finding]
    assert result.fixed == KVL301.replace(old, new, 1)


def test_kvl301_leaves_a_name_used_elsewhere_and_unknown_dtypes() -> None:
    source = KVL301.replace("    return a, b, c\n", "    return a, b, c, tables\n")
    assert source != KVL301
    assert fix_source(source, [at("block_table=tables", 7, source=source)], "m.py").fixed == source
    source = KVL301.replace("dtype=torch.int64", "dtype=choose()")
    assert fix_source(source, [at("torch.tensor(raw, dtype=choose())", 8, source=source)], "m.py").fixed == source


def test_kvl301_counts_a_read_from_a_nested_function_as_another_use() -> None:
    """A closure that reads the table would see the new dtype too: the name is not read only at the call."""
    source = KVL301.replace("    return a, b, c\n", "    def later():\n        return tables.sum()\n    return a, b, c, later\n")
    assert source != KVL301
    result = fix_source(source, [at("block_table=tables", 7, source=source)], "m.py")
    assert result.fixed == source
    assert "read elsewhere" in next(iter(result.declined.values()))


def test_kvl301_fixes_a_table_read_once_inside_a_comprehension_of_its_function() -> None:
    source = KVL301.replace(
        "a = torch_npu.npu_fused_infer_attention_score(q, k, v, block_table=tables, actual_seq_lengths_kv=lens)",
        "a = [torch_npu.npu_fused_infer_attention_score(q, k, v, block_table=tables) for _ in range(2)]")
    assert source != KVL301
    result = fix_source(source, [at("block_table=tables", 7, source=source)], "m.py")
    assert result.fixed == source.replace("torch.arange(n).view", "torch.arange(n, dtype=torch.int32).view")


@pytest.mark.parametrize(("imports", "factory", "new"), [
    ("import torch as t", "t.arange(n, dtype=t.long)", "t.arange(n, dtype=t.int32)"),
    ("import torch\nfrom torch import int64", "torch.zeros(n, 4, dtype=int64)", "torch.zeros(n, 4, dtype=torch.int32)"),
])
def test_kvl301_reads_torch_and_its_dtypes_through_the_modules_imports(imports: str, factory: str, new: str) -> None:
    source = (f"{imports}\nimport torch_npu\n\n\ndef decode(q, k, v, n):\n    tables = {factory}\n"
              "    return torch_npu.npu_fused_infer_attention_score(q, k, v, block_table=tables)\n")
    line = source.splitlines().index("    return torch_npu.npu_fused_infer_attention_score(q, k, v, block_table=tables)") + 1
    result = fix_source(source, [at("block_table=tables", line, source=source)], "m.py")
    assert result.fixed == source.replace(factory, new)


def test_kvl301_leaves_a_factory_whose_torch_is_not_the_module() -> None:
    source = KVL301.replace("def decode(q, k, v, n, lens, raw):", "def decode(q, k, v, n, lens, raw, torch=None):")
    assert fix_source(source, [at("block_table=tables", 7, source=source)], "m.py").fixed == source


def test_kvl301_finds_the_assignment_after_characters_of_several_bytes_on_its_line() -> None:
    source = KVL301.replace("    tables = torch.arange(n)", "    é = 1; tables = torch.arange(n)")
    result = fix_source(source, [at("block_table=tables", 7, source=source)], "m.py")
    assert result.fixed == source.replace("torch.arange(n).view", "torch.arange(n, dtype=torch.int32).view")


def test_the_marks_preview_makes_the_decisions_of_the_fix() -> None:
    """The ``[*]`` marks come from a preview that reads an outline of the module: it marks exactly the findings
    that ``--fix`` rewrites, and leaves the text as it is."""
    source = KVL301 + "\n\ndef unrelated():\n    return 1\n" + KVL301.split("\n\n\n", 1)[1].replace("decode", "again")
    findings = [f for f in lint_source(source, "m.py") if f.code in FIXABLE]
    assert len(findings) >= 2
    preview, fix = fix_source(source, findings, "m.py", preview=True), fix_source(source, findings, "m.py")
    assert preview.fixed == source and fix.fixed != source
    assert preview.applied == fix.applied and preview.declined == fix.declined


# --- the command line ------------------------------------------------------------------------------------

BAD_FILE = textwrap.dedent('''\
    # -*- coding: utf-8 -*-
    import torch
    import torch_npu


    def decode(q, k, v):  # décodage
        a = torch.npu_fused_infer_attention_score(q, k, v, num_heads=8, input_layout="BSND", scale=0.1)
        return torch_npu.npu_fused_infer_attention_score_v2(q, k, v, num_heads=8, softmax_scale=0.1)
''')
FIXED_FILE = BAD_FILE.replace("torch.npu_fused", "torch_npu.npu_fused").replace(
    "v2(q, k, v, num_heads=8", "v2(q, k, v, num_query_heads=8")


def kvlint(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kvlint", "--isolated", *args], capture_output=True, text=True,
                          cwd=cwd)


def test_diff_previews_without_writing_and_exits_one(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text(BAD_FILE, encoding="utf-8")
    out = kvlint("--diff", "m.py", cwd=tmp_path)
    assert out.returncode == 1
    assert (tmp_path / "m.py").read_text(encoding="utf-8") == BAD_FILE
    assert out.stdout.startswith("--- a/m.py\n+++ b/m.py\n")
    removed = [line for line in out.stdout.splitlines() if line.startswith("-") and not line.startswith("---")]
    added = [line for line in out.stdout.splitlines() if line.startswith("+") and not line.startswith("+++")]
    assert len(removed) == len(added) == 2
    (tmp_path / "m.py").write_text(FIXED_FILE, encoding="utf-8")
    assert kvlint("--diff", "m.py", cwd=tmp_path).returncode == 0


def test_fix_rewrites_in_place_and_reports_only_what_is_left(tmp_path: Path) -> None:
    source = BAD_FILE.replace(', input_layout="BSND", scale=0.1', "")
    (tmp_path / "m.py").write_text(source, encoding="utf-8")
    out = kvlint("--fix", "--format", "json", "m.py", cwd=tmp_path)
    expected = FIXED_FILE.replace(', input_layout="BSND", scale=0.1', "")
    assert (tmp_path / "m.py").read_text(encoding="utf-8") == expected
    assert '"code": "KVL104"' in out.stdout and "KVL102" not in out.stdout and "KVL112" not in out.stdout
    assert out.returncode == 1
    assert "kvlint: fixed 2 finding(s)" in out.stderr


def test_fix_respects_select_ignore_and_suppression(tmp_path: Path) -> None:
    source = BAD_FILE.replace("num_heads=8, softmax_scale=0.1)", "num_heads=8, softmax_scale=0.1)  # noqa: KVL102")
    (tmp_path / "m.py").write_text(source, encoding="utf-8")
    out = kvlint("--fix", "--ignore", "KVL112", "m.py", cwd=tmp_path)
    assert out.returncode == 0 and "kvlint: fixed 0 finding(s)" in out.stderr
    assert (tmp_path / "m.py").read_text(encoding="utf-8") == source


def test_fix_of_a_clean_tree_changes_nothing_and_exits_zero(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text(FIXED_FILE, encoding="utf-8")
    out = kvlint("--fix", "m.py", cwd=tmp_path)
    assert out.returncode == 0 and out.stdout == ""
    assert (tmp_path / "m.py").read_text(encoding="utf-8") == FIXED_FILE


def test_a_file_that_cannot_be_written_is_an_error_naming_it(tmp_path: Path, monkeypatch, capsys) -> None:
    from kvlint.frontends import cli
    from kvlint.frontends import fixing as fix

    path = tmp_path / "m.py"
    path.write_text(BAD_FILE, encoding="utf-8")

    def read_only(file, mode="r", *args, **kwargs):
        if "w" in mode and str(file) == str(path):
            raise PermissionError(13, "Permission denied")
        return open(file, mode, *args, **kwargs)

    monkeypatch.setattr(fix, "open", read_only, raising=False)
    assert cli.main(["--isolated", "--fix", str(path)]) == 2
    assert f"{path}: cannot write the fixes: Permission denied" in capsys.readouterr().err
    assert path.read_text(encoding="utf-8") == BAD_FILE


def test_the_fix_count_leaves_out_fixes_a_file_did_not_take(tmp_path: Path, monkeypatch, capsys) -> None:
    """Three fixes in two files, one of which cannot be written: 'fixed 2', the failure named, exit 2."""
    from kvlint.frontends import cli
    from kvlint.frontends import fixing as fix

    written, refused = tmp_path / "a.py", tmp_path / "b.py"
    written.write_text(BAD_FILE, encoding="utf-8")  # KVL112 and KVL102: two fixes
    refused.write_text(FIXED_FILE.replace("num_query_heads=8", "num_heads=8"), encoding="utf-8")  # KVL102: one

    def read_only(file, mode="r", *args, **kwargs):
        if "w" in mode and str(file) == str(refused):
            raise PermissionError(13, "Permission denied")
        return open(file, mode, *args, **kwargs)

    monkeypatch.setattr(fix, "open", read_only, raising=False)
    assert cli.main(["--isolated", "--fix", str(written), str(refused)]) == 2
    err = capsys.readouterr().err
    assert written.read_text(encoding="utf-8") == FIXED_FILE
    assert "kvlint: fixed 2 finding(s); 1 more could not be written" in err
    assert f"{refused}: cannot write the fixes: Permission denied" in err


def test_fix_and_diff_are_exclusive(tmp_path: Path) -> None:
    out = kvlint("--fix", "--diff", ".", cwd=tmp_path)
    assert out.returncode == 2 and "not allowed with argument" in out.stderr


def test_fix_without_libcst_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text(BAD_FILE, encoding="utf-8")
    blocker = tmp_path / "blocker"
    blocker.mkdir()
    (blocker / "libcst.py").write_text("raise ImportError('libcst is not installed')\n")
    env = {"PYTHONPATH": str(blocker), "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-m", "kvlint", "--isolated", "--fix", "m.py"], capture_output=True,
                         text=True, cwd=tmp_path, env=env)
    assert out.returncode == 2
    assert "--fix and --diff need libcst: pip install 'kvlint-ascend[fix]'" in out.stderr
    assert "Traceback" not in out.stderr
    assert (tmp_path / "m.py").read_text(encoding="utf-8") == BAD_FILE


# --- a fixed point in one run, and the reasons for what is left ---------------------------------------------

CHAIN = textwrap.dedent('''\
    import torch


    class Attention(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.tables = torch.arange(64).view(4, 16)

        def forward(self, q, k, v, kv_lens):
            tables = torch.arange(64).view(4, 16)
            a = torch.npu_fused_infer_attention_score(q, k, v, num_heads=8, scale=0.1, block_table=tables,
                                                      block_size=128, actual_seq_lengths_kv=kv_lens)
            b = torch.npu_fused_infer_attention_score(q, k, v, num_heads=8, scale=0.1, block_table=self.tables,
                                                      block_size=128, actual_seq_lengths_kv=kv_lens)
            return a, b
''')
"""Before the KVL112 fix the calls are not resolvable (only KVL112 is reported); after it, both block tables
are int64 (KVL301): the local one is fixable, the one built in ``__init__`` is not."""


def test_fix_reaches_a_fixed_point_in_one_run(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text(CHAIN, encoding="utf-8")
    assert {f["code"] for f in json.loads(kvlint("--format", "json", "m.py", cwd=tmp_path).stdout)} == {"KVL112"}
    first = kvlint("--fix", "m.py", cwd=tmp_path)
    after_one_run = (tmp_path / "m.py").read_text(encoding="utf-8")
    assert "torch.arange(64, dtype=torch.int32).view(4, 16)\n        a = torch_npu." in after_one_run
    assert "kvlint: fixed 3 finding(s)" in first.stderr
    second = kvlint("--fix", "m.py", cwd=tmp_path)
    assert (tmp_path / "m.py").read_text(encoding="utf-8") == after_one_run
    assert "kvlint: fixed 0 finding(s)" in second.stderr
    assert first.stdout == second.stdout


def test_a_fixable_finding_left_unfixed_says_why(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text(CHAIN, encoding="utf-8")
    out = kvlint("--fix", "m.py", cwd=tmp_path)
    [left] = out.stdout.splitlines()
    assert left.startswith("m.py:14:88: KVL301 ") and "[*]" not in left
    assert ("kvlint: note: m.py:14:88: KVL301 was not fixed: the table is 'self.tables', built elsewhere "
            "(for example in __init__); add dtype=torch.int32 where it is built") in out.stderr
    assert out.returncode == 1


def test_diff_shows_the_fixed_point_too(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text(CHAIN, encoding="utf-8")
    out = kvlint("--diff", "m.py", cwd=tmp_path)
    assert "+        tables = torch.arange(64, dtype=torch.int32).view(4, 16)" in out.stdout
    assert (tmp_path / "m.py").read_text(encoding="utf-8") == CHAIN


def test_the_marker_shows_what_fix_would_fix_and_only_that(tmp_path: Path) -> None:
    source = CHAIN.replace("torch.npu_fused", "torch_npu.npu_fused").replace("import torch\n",
                                                                           "import torch\nimport torch_npu\n")
    (tmp_path / "m.py").write_text(source, encoding="utf-8")
    lines = kvlint("m.py", cwd=tmp_path).stdout.splitlines()
    assert [(line.split(":")[1], "[*]" in line) for line in lines] == [("12", True), ("14", False)]
    findings = json.loads(kvlint("--format", "json", "m.py", cwd=tmp_path).stdout)
    assert [(f["line"], f["fixable"]) for f in findings] == [(12, True), (14, False)]


@pytest.mark.parametrize("target", ["src/m.py", "./src/m.py", "{root}/src/m.py"])
def test_diff_applies_with_git_apply(tmp_path: Path, target: str) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "m.py").write_text(CHAIN, encoding="utf-8")
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    out = kvlint("--diff", target.format(root=tmp_path), cwd=tmp_path)
    assert out.stdout.startswith("--- a/src/m.py\n+++ b/src/m.py\n")
    (tmp_path / "fix.patch").write_text(out.stdout, encoding="utf-8")
    subprocess.run(["git", "apply", "fix.patch"], cwd=tmp_path, check=True, capture_output=True)
    assert kvlint("--diff", "src/m.py", cwd=tmp_path).stdout == ""


# --- bytes: a fix changes only the bytes of what it fixes -------------------------------------------------

V2_CALL = b"    return torch_npu.npu_fused_infer_attention_score_v2(q, k, v, num_heads=8, softmax_scale=0.1)\n"


def _bytes_file(comment: bytes, cookie: bytes = b"") -> bytes:
    return cookie + b"import torch_npu\n# " + comment + b"\n\n\ndef attend(q, k, v):\n" + V2_CALL


def _run_bytes(*args: str, cwd: Path, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-m", "kvlint", "--isolated", *args], capture_output=True, cwd=cwd,
                          input=stdin, check=False)


def test_a_file_that_does_not_decode_losslessly_is_not_fixed_and_says_why(tmp_path: Path) -> None:
    """A latin-1 byte in a comment, no coding line: CPython runs the file and kvlint lints it, but writing the
    decoded text back would turn 0xE9 into U+FFFD, a change --diff would not show."""
    original = _bytes_file(b"caf\xe9")
    path = tmp_path / "m.py"
    path.write_bytes(original)
    why = b"m.py: not fixed: byte 0xe9 on line 2 is not utf-8"
    fixed = _run_bytes("--fix", "m.py", cwd=tmp_path)
    assert path.read_bytes() == original
    assert fixed.returncode == 1 and b"KVL102" in fixed.stdout and why in fixed.stderr
    diff = _run_bytes("--diff", "m.py", cwd=tmp_path)
    assert diff.stdout == b"" and why in diff.stderr
    assert b"[*]" not in _run_bytes("m.py", cwd=tmp_path).stdout  # nothing is marked that --fix will not fix
    piped = _run_bytes("--fix", "-", "--stdin-filename", "m.py", cwd=tmp_path, stdin=original)
    assert piped.stdout == original and why in piped.stderr


@pytest.mark.parametrize(("cookie", "comment"), [
    (b"# -*- coding: latin-1 -*-\n", b"caf\xe9"),
    (b"# coding=gbk\n", "注意力".encode("gbk")),
    (b"", "注意力\r".encode("utf-8")),
])
def test_a_fix_keeps_every_byte_it_does_not_fix(tmp_path: Path, cookie: bytes, comment: bytes) -> None:
    """On disk and on standard output (which wrote the fixed text in UTF-8 whatever the file declared)."""
    original = _bytes_file(comment, cookie)
    expected = original.replace(b"num_heads=8", b"num_query_heads=8")
    path = tmp_path / "m.py"
    path.write_bytes(original)
    assert b"fixed 1 finding(s)" in _run_bytes("--fix", "m.py", cwd=tmp_path).stderr
    assert path.read_bytes() == expected
    piped = _run_bytes("--fix", "-", cwd=tmp_path, stdin=original)
    assert piped.stdout == expected, piped.stderr
