"""Configuration: where the CLI finds it, what each key does in each front-end, and how bad values fail."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from kvlint.analysis.settings import DEFAULT_KV_LEN_NAMES
from kvlint.frontends.config import (
    Config,
    ConfigError,
    find_config,
    load_config,
    parse_per_file_ignores,
    parse_wrappers,
)

WRAPPED = textwrap.dedent('''\
    from mypkg.ops import fa


    def decode(q, k, v):
        return fa(q, k, v, num_heads=8, softmax_scale=0.1)
''')
"""A call through the user's own wrapper: a version mix only when the wrapper is configured as FIA v2."""
LAYER = textwrap.dedent('''\
    import torch
    import torch_npu


    class Layer(torch.nn.Module):
        def forward(self, key, cache, tokens_seen):
            torch_npu.scatter_update_(cache, tokens_seen, key, -2)
            tokens_seen += 1
            return cache
''')
"""A layer advancing a length variable named outside the defaults (KVL305 only with kv-len-names)."""
TWO_RULES = textwrap.dedent('''\
    import torch_npu


    def decode(q, k, v):
        return torch_npu.npu_fused_infer_attention_score(q, k, v, num_heads=8, input_layout="bnsd")
''')
"""KVL104 (no scale) and KVL106 (lower-case layout) on line 5."""


def run(tool: str, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    command = {"kvlint": ["-m", "kvlint"], "flake8": ["-m", "flake8"], "pylint": ["-m", "pylint"]}[tool]
    return subprocess.run([sys.executable, *command, *args], capture_output=True, text=True, cwd=cwd, check=False)


def cli_codes(cwd: Path, *args: str) -> list[tuple[str, int, str]]:
    out = run("kvlint", "--format", "json", *args, cwd=cwd)
    assert out.returncode in (0, 1), out.stderr
    return [(f["path"], f["line"], f["code"]) for f in json.loads(out.stdout)]


def flake8_codes(cwd: Path, *args: str) -> list[tuple[str, int, str]]:
    out = run("flake8", "--select", "KVL", "--format", "%(path)s\t%(row)d\t%(code)s", *args, cwd=cwd)
    assert out.returncode in (0, 1), out.stderr
    return [(p, int(r), c) for p, r, c in (line.split("\t") for line in out.stdout.splitlines())]


def pylint_codes(cwd: Path, *args: str) -> list[tuple[str, int, str]]:
    out = run("pylint", "--load-plugins", "kvlint", "--disable=all", "--enable=kvlint", "--output-format=json",
              "--score=n", *args, cwd=cwd)
    assert out.returncode < 32, out.stderr
    return [(m["path"], m["line"], m["symbol"]) for m in json.loads(out.stdout)]


def project(tmp_path: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return tmp_path


# --- finding the configuration -----------------------------------------------------------------------------

def test_defaults_when_no_file_configures_kvlint(tmp_path: Path) -> None:
    project(tmp_path, {"pyproject.toml": "[tool.black]\nline-length = 100\n",
                       "setup.cfg": "[flake8]\nmax-line-length = 100\n"})
    assert find_config(str(tmp_path)) == Config()


def test_nearest_folder_upwards_wins_and_pyproject_before_setup_cfg(tmp_path: Path) -> None:
    project(tmp_path, {
        "pyproject.toml": "[tool.kvlint]\nignore = ['KVL104']\n",
        "pkg/setup.cfg": "[kvlint]\nignore = KVL105\n",
        "pkg/pyproject.toml": "[tool.kvlint]\nignore = ['KVL106']\n",
        "pkg/sub/dir/.keep": "",
    })
    config = find_config(str(tmp_path / "pkg" / "sub" / "dir"))
    assert config.ignore == ("KVL106",)
    assert config.source == str((tmp_path / "pkg" / "pyproject.toml").resolve())
    (tmp_path / "pkg" / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    assert find_config(str(tmp_path / "pkg" / "sub" / "dir")).ignore == ("KVL105",)


def test_cli_reads_the_configuration_of_the_current_folder(tmp_path: Path) -> None:
    project(tmp_path, {"pyproject.toml": "[tool.kvlint]\nignore = ['KVL104']\n", "m.py": TWO_RULES})
    assert cli_codes(tmp_path, "m.py") == [("m.py", 5, "KVL106")]
    assert sorted(cli_codes(tmp_path, "--isolated", "m.py")) == [("m.py", 5, "KVL104"), ("m.py", 5, "KVL106")]


def test_command_line_select_and_ignore_replace_the_configured_ones(tmp_path: Path) -> None:
    project(tmp_path, {"setup.cfg": "[kvlint]\nselect = KVL104\n", "m.py": TWO_RULES})
    assert cli_codes(tmp_path, "m.py") == [("m.py", 5, "KVL104")]
    assert cli_codes(tmp_path, "--select", "KVL106", "m.py") == [("m.py", 5, "KVL106")]


def test_explicit_config_file(tmp_path: Path) -> None:
    project(tmp_path, {"conf/kvlint.toml": "[tool.kvlint]\nignore = ['KVL106']\n", "m.py": TWO_RULES})
    assert cli_codes(tmp_path, "--config", "conf/kvlint.toml", "m.py") == [("m.py", 5, "KVL104")]


@pytest.mark.parametrize(("files", "args", "message"), [
    ({"pyproject.toml": "[tool.kvlint]\nselects = ['KVL1']\n"}, (),
     "pyproject.toml: unknown key 'selects' in [tool.kvlint]; did you mean 'select'?"),
    ({"setup.cfg": "[kvlint]\nkv_len_names = n\n"}, (),
     "setup.cfg: unknown key 'kv_len_names' in [kvlint]; did you mean 'kv-len-names'?"),
    ({"pyproject.toml": "[tool.kvlint]\nignore = ['E501']\n"}, (),
     "pyproject.toml: [tool.kvlint] ignore: 'E501' is not a kvlint code or prefix"),
    ({"pyproject.toml": "[tool.kvlint\n"}, (), "pyproject.toml: not valid TOML"),
    ({"setup.cfg": "[kvlint]\nextra-fa-wrappers = mypkg.fa = npu_fused_attention\n"}, (),
     "'npu_fused_attention' (for 'mypkg.fa') is not an operator kvlint knows"),
    ({"setup.cfg": "[kvlint]\nper-file-ignores = KVL104\n"}, (), "expected 'glob: codes'"),
    ({}, ("--config", "missing.toml"), "missing.toml: no such configuration file"),
    ({"other.toml": "[tool.ruff]\n"}, ("--config", "other.toml"), "other.toml: no [tool.kvlint] section"),
])
def test_bad_configuration_is_a_clear_error_naming_file_and_key(tmp_path: Path, files, args, message) -> None:
    project(tmp_path, {**files, "m.py": TWO_RULES})
    out = run("kvlint", *args, "m.py", cwd=tmp_path)
    assert out.returncode == 2
    assert message in out.stderr
    assert "Traceback" not in out.stderr and out.stdout == ""


# --- value parsing ------------------------------------------------------------------------------------------

def test_per_file_ignores_accept_a_toml_table_and_flake8_text() -> None:
    expected = (("tests/*", ("KVL104", "KVL105")), ("legacy.py", ("KVL1",)))
    assert parse_per_file_ignores({"tests/*": ["KVL104", "KVL105"], "legacy.py": "KVL1"}, "x") == expected
    assert parse_per_file_ignores("\n  tests/*: KVL104,KVL105\n  legacy.py:KVL1\n", "x") == expected


def test_extra_fa_wrappers_accept_a_table_lines_and_commas() -> None:
    expected = {"mypkg.ops.fa": "npu_fused_infer_attention_score_v2", "a.b": "npu_incre_flash_attention"}
    assert parse_wrappers(expected, "x") == expected
    lines = "\nmypkg.ops.fa = npu_fused_infer_attention_score_v2\na.b=npu_incre_flash_attention"
    assert parse_wrappers(lines, "x") == expected
    commas = "mypkg.ops.fa = npu_fused_infer_attention_score_v2, a.b = npu_incre_flash_attention"
    assert parse_wrappers(commas, "x") == expected
    with pytest.raises(ConfigError, match="'my pkg' is not a dotted Python name"):
        parse_wrappers("my pkg = npu_incre_flash_attention", "x")


def test_settings_carry_kv_len_names_and_wrappers(tmp_path: Path) -> None:
    project(tmp_path, {"pyproject.toml": textwrap.dedent('''\
        [tool.kvlint]
        kv-len-names = ["tokens_seen", "pos"]
        extra-fa-wrappers = {"mypkg.ops.fa" = "npu_fused_infer_attention_score_v2"}
    ''')})
    settings = load_config(str(tmp_path / "pyproject.toml")).settings()
    assert settings.kv_len_names == ("tokens_seen", "pos")
    assert settings.extra_fa_wrappers == {"mypkg.ops.fa": "npu_fused_infer_attention_score_v2"}
    assert Config().settings().kv_len_names == DEFAULT_KV_LEN_NAMES


# --- the same keys in all three front-ends ------------------------------------------------------------------

def test_extra_fa_wrappers_in_all_three_front_ends(tmp_path: Path) -> None:
    project(tmp_path, {"m.py": WRAPPED})
    assert cli_codes(tmp_path, "m.py") == []
    assert flake8_codes(tmp_path, "m.py") == []
    assert pylint_codes(tmp_path, "m.py") == []
    project(tmp_path, {
        "pyproject.toml": '[tool.kvlint]\n'
                          'extra-fa-wrappers = {"mypkg.ops.fa" = "npu_fused_infer_attention_score_v2"}\n'
                          '[tool.pylint.kvlint]\n'
                          'extra-fa-wrappers = ["mypkg.ops.fa = npu_fused_infer_attention_score_v2"]\n',
        "setup.cfg": "[flake8]\nextra-fa-wrappers =\n    mypkg.ops.fa = npu_fused_infer_attention_score_v2\n",
    })
    assert cli_codes(tmp_path, "m.py") == [("m.py", 5, "KVL102")]
    assert flake8_codes(tmp_path, "m.py") == [("m.py", 5, "KVL102")]
    assert pylint_codes(tmp_path, "m.py") == [("m.py", 5, "fa-version-mix")]


def test_kv_len_names_in_all_three_front_ends(tmp_path: Path) -> None:
    project(tmp_path, {"m.py": LAYER})
    assert cli_codes(tmp_path, "m.py") == []
    project(tmp_path, {
        "pyproject.toml": '[tool.kvlint]\nkv-len-names = ["tokens_seen"]\n'
                          '[tool.pylint.kvlint]\nkv-len-names = "tokens_seen"\n',
        "setup.cfg": "[flake8]\nkv-len-names = tokens_seen\n",
    })
    assert cli_codes(tmp_path, "m.py") == [("m.py", 8, "KVL305")]
    assert flake8_codes(tmp_path, "m.py") == [("m.py", 8, "KVL305")]
    assert pylint_codes(tmp_path, "m.py") == [("m.py", 8, "kv-len-mutated-in-layer")]


def test_per_file_ignores_in_all_three_front_ends(tmp_path: Path) -> None:
    project(tmp_path, {
        "tests/test_m.py": TWO_RULES, "m.py": TWO_RULES,
        "pyproject.toml": '[tool.kvlint]\nper-file-ignores = {"tests/*" = ["KVL104"]}\n'
                          '[tool.pylint.kvlint]\nkvlint-per-file-ignores = "tests/*: KVL104"\n',
        "setup.cfg": "[flake8]\nper-file-ignores =\n    tests/*: KVL104\n",
    })
    for codes in (cli_codes, flake8_codes):
        assert sorted(codes(tmp_path, "m.py", "tests/test_m.py")) == [
            ("m.py", 5, "KVL104"), ("m.py", 5, "KVL106"), ("tests/test_m.py", 5, "KVL106")]
    assert sorted(pylint_codes(tmp_path, "m.py", "tests/test_m.py")) == [
        ("m.py", 5, "fa-default-scale"), ("m.py", 5, "fa-invalid-layout"), ("tests/test_m.py", 5, "fa-invalid-layout")]


def test_select_and_ignore_in_pylint_options(tmp_path: Path) -> None:
    project(tmp_path, {"m.py": TWO_RULES})
    assert pylint_codes(tmp_path, "--kvlint-select=KVL10", "--kvlint-ignore=KVL104", "m.py") == [
        ("m.py", 5, "fa-invalid-layout")]


def test_bad_plugin_options_are_clear_errors_in_flake8_and_pylint(tmp_path: Path) -> None:
    project(tmp_path, {"m.py": TWO_RULES, "setup.cfg": "[flake8]\nextra-fa-wrappers = mypkg.fa\n"})
    out = run("flake8", "--select", "KVL", "m.py", cwd=tmp_path)
    assert out.returncode != 0 and "Traceback" not in out.stderr
    assert "expected 'dotted.wrapper.name = operator'" in out.stderr
    out = run("pylint", "--load-plugins", "kvlint", "--kv-len-names=9lives", "m.py", cwd=tmp_path)
    assert out.returncode == 32 and "Traceback" not in out.stderr
    assert "kvlint: error: pylint option --kv-len-names: '9lives' is not a Python identifier" in out.stderr


@pytest.mark.parametrize(("value", "problem"), [
    ("9lives", "'9lives' is not a Python identifier"),
    ("kv_len,class", "'class' is not a Python identifier"),
    ("kv-len", "'kv-len' is not a Python identifier"),
    ("", "give at least one name"),
])
def test_kv_len_names_are_validated_the_same_way_in_all_three_front_ends(tmp_path: Path, value: str,
                                                                        problem: str) -> None:
    project(tmp_path, {"m.py": LAYER})
    (tmp_path / "pyproject.toml").write_text(f'[tool.kvlint]\nkv-len-names = "{value}"\n')
    out = run("kvlint", "m.py", cwd=tmp_path)
    assert out.returncode == 2 and f"[tool.kvlint] kv-len-names: {problem}" in out.stderr
    (tmp_path / "pyproject.toml").write_text(f'[tool.pylint.kvlint]\nkv-len-names = "{value}"\n')
    out = run("pylint", "--load-plugins", "kvlint", "m.py", cwd=tmp_path)
    assert out.returncode == 32 and f"pylint option --kv-len-names: {problem}" in out.stderr
    (tmp_path / "pyproject.toml").unlink()
    (tmp_path / "setup.cfg").write_text(f"[flake8]\nkv-len-names = {value}\n")
    out = run("flake8", "--select", "KVL", "m.py", cwd=tmp_path)
    assert out.returncode != 0 and f"flake8 option --kv-len-names: {problem}" in out.stderr
    assert "Traceback" not in out.stderr


def test_pylint_selection_options_refuse_codes_no_rule_has(tmp_path: Path) -> None:
    project(tmp_path, {"m.py": TWO_RULES})
    out = run("pylint", "--load-plugins", "kvlint", "--kvlint-select=KVL999", "m.py", cwd=tmp_path)
    assert out.returncode == 32 and "pylint option --kvlint-select: no kvlint rule has the code 'KVL999'" in out.stderr
