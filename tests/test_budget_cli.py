"""kvlint-budget as a command: golden text/JSON output, printed formulas that reproduce every figure,
one-line errors with exit status 2, and ``python -m kvlint.budget`` in a subprocess.

Regenerate the golden files after an intended output change (and review the diff by hand)::

    python -m kvlint.budget $(cat tests/data/budget/golden_gqa_tp2.args) > tests/data/budget/golden_gqa_tp2.txt
    python -m kvlint.budget $(cat tests/data/budget/golden_gqa_tp2.args) --format json \\
        > tests/data/budget/golden_gqa_tp2.json
"""

from __future__ import annotations

import ast
import json
import math
import operator
import shlex
import shutil
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import pytest

from kvlint.budget.cli import main

DATA = Path(__file__).parent / "data" / "budget"
GOLDEN_ARGS = (DATA / "golden_gqa_tp2.args").read_text().split()
LLAMA_FLAGS = ["--layers", "32", "--kv-heads", "8", "--head-dim", "128"]


def run(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    assert main(list(args)) == 0
    return capsys.readouterr().out


def evaluate(expression: str) -> Fraction:
    """Evaluate a printed expression exactly, allowing only hand arithmetic: + - * /, ceil, floor."""
    binary = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv}
    rounding = {"ceil": math.ceil, "floor": math.floor}

    def value(node: ast.AST) -> Fraction:
        if isinstance(node, ast.Constant) and type(node.value) in (int, float):
            return Fraction(str(node.value))
        if isinstance(node, ast.BinOp) and type(node.op) in binary:
            return binary[type(node.op)](value(node.left), value(node.right))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in rounding:
            (argument,) = node.args
            return Fraction(rounding[node.func.id](value(argument)))
        raise AssertionError(f"not hand arithmetic in {expression!r}: {ast.dump(node)}")

    return value(ast.parse(expression, mode="eval").body)


# ------------------------------------------------------------------------------------------ worked examples


def test_worked_example_128_kib_per_token_and_1_gib_per_8192_tokens(capsys: pytest.CaptureFixture[str]) -> None:
    out = run(capsys, *LLAMA_FLAGS, "--dtype", "bf16", "--tokens", "8192")
    assert "KV bytes per token (all layers, K and V): 131072 B (128.000 KiB)" in out
    assert "= layers * 2 * kv_heads * head_dim * dtype_bytes = 32 * 2 * 8 * 128 * 2" in out
    assert "KV bytes per sequence of 8192 tokens: 1073741824 B (1.000 GiB)" in out


def test_mla_config_gives_70272_bytes_per_token(capsys: pytest.CaptureFixture[str]) -> None:
    doc = json.loads(run(capsys, "--config", str(DATA / "deepseek_v3_config.json"), "--format", "json"))
    figure = doc["sections"]["per_token"]["figures"]["bytes_per_token"]
    assert figure["value"] == 70272
    assert figure["expression"] == "61 * (512 + 64) * 2"
    assert doc["geometry"]["kv_lora_rank"] == 512 and doc["geometry"]["kv_heads"] is None


def test_flags_override_the_config(capsys: pytest.CaptureFixture[str]) -> None:
    doc = json.loads(run(capsys, "--config", str(DATA / "llama3_8b_config.json"), "--layers", "16",
                         "--format", "json"))
    assert doc["sections"]["per_token"]["figures"]["bytes_per_token"]["value"] == 65536


def test_attention_share_gives_the_amdahl_bound(capsys: pytest.CaptureFixture[str]) -> None:
    out = run(capsys, *LLAMA_FLAGS, "--kv-quant", "int8", "--attention-share", "0.4")
    assert "end-to-end speed-up bound, attention share p = 0.4: 1.250 x" in out
    assert "= 1 / ((1 - p) + p / s) = 1 / ((1 - 0.4) + 0.4 / (131072 / 65536))" in out


def test_batch_beyond_capacity_is_flagged(capsys: pytest.CaptureFixture[str]) -> None:
    out = run(capsys, *LLAMA_FLAGS, "--tokens", "8192", "--memory", "48GiB", "--reserve", "16GiB",
              "--bandwidth", "1.6TB/s", "--batch-sizes", "31,32")
    assert "note: batch 32 exceeds the 31 sequences that fit (paged)" in out
    assert "batch 31 exceeds" not in out


# ------------------------------------------------------------------------------------- golden output


def test_golden_text(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(capsys, *GOLDEN_ARGS) == (DATA / "golden_gqa_tp2.txt").read_text()


def test_golden_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(capsys, *GOLDEN_ARGS, "--format", "json") == (DATA / "golden_gqa_tp2.json").read_text()


@pytest.mark.parametrize("args", [
    GOLDEN_ARGS,
    ["--config", str(DATA / "deepseek_v3_config.json"), "--lengths", "1000:0.7,30000:0.3", "--tp", "8",
     "--memory", "64GB", "--reserve", "40GB", "--block-size", "64", "--bandwidth", "800GiB/s",
     "--weights-bytes", "90GB", "--kv-quant", "fp8"],
    [*LLAMA_FLAGS, "--q-heads", "32", "--tokens", "3000", "--tp", "8", "--kv-replication", "2",
     "--memory", "32GiB", "--bandwidth", "1.2TB/s", "--kv-quant", "int8", "--attention-share", "0.35"],
], ids=["golden", "mla-mix", "explicit-replication"])
def test_every_printed_expression_reproduces_its_figure(capsys: pytest.CaptureFixture[str],
                                                        args: list[str]) -> None:
    doc = json.loads(run(capsys, *args, "--format", "json"))
    checked = 0
    for section in doc["sections"].values():
        for key, figure in section["figures"].items():
            exact = evaluate(figure["expression"])
            if isinstance(figure["value"], int):
                assert exact == figure["value"], key
            else:
                assert float(exact) == pytest.approx(figure["value"], rel=1e-12), key
            checked += 1
    assert checked > 20


def test_docs_worked_example_is_the_real_output(capsys: pytest.CaptureFixture[str]) -> None:
    doc = (Path(__file__).parent.parent / "docs" / "budget.md").read_text()
    block = doc.split("```console\n$ kvlint-budget ", 1)[1].split("```", 1)[0]
    command, expected = block.split("\n", 1)
    assert run(capsys, *shlex.split(command)) == expected


# ------------------------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(("args", "names"), [
    (["--layers", "32", "--kv-heads", "8", "--head-dim", "128", "--tokens", "1", "--memory", "48XB"],
     "argument --memory: invalid size '48XB'"),
    (["--config", "does/not/exist.json"], "--config does/not/exist.json: cannot read"),
    (["--layers", "32", "--kv-heads", "8"], "missing --head-dim"),
    (["--layers", "0"], "argument --layers: expected a positive integer"),
    ([*LLAMA_FLAGS, "--memory", "48GiB"], "--memory needs --tokens or --lengths"),
    ([*LLAMA_FLAGS, "--tokens", "8", "--bandwidth", "1.6TB"], "argument --bandwidth"),
    ([*LLAMA_FLAGS, "--tp", "3"], "--tp 3 neither divides 8 KV heads"),
    ([*LLAMA_FLAGS, "--tokens", "8", "--lengths", "8"], "argument --lengths: not allowed with argument --tokens"),
    ([*LLAMA_FLAGS, "--tokens", "8", "--memory", "1GiB", "--reserve", "2GiB"], "--reserve"),
    ([*LLAMA_FLAGS, "--q-heads", "12"], "--q-heads 12 is not a multiple of --kv-heads 8"),
    ([*LLAMA_FLAGS, "--attention-share", "0.4"], "--attention-share needs --kv-quant"),
    ([*LLAMA_FLAGS, "--kv-quant", "int8", "--attention-share", "1.5"], "argument --attention-share"),
    ([*LLAMA_FLAGS, "--kv-lora-rank", "512", "--rope-dim", "64"], "describe different caches"),
    (["--config", str(DATA / "deepseek_v3_config.json"), "--kv-heads", "8"], "is an MLA model"),
    (["--layers", "61", "--kv-lora-rank", "512"], "missing --rope-dim"),
    ([*LLAMA_FLAGS, "--dtype", "fp32"], "argument --dtype: invalid choice: 'fp32'"),
])
def test_bad_input_is_one_line_naming_the_argument(capsys: pytest.CaptureFixture[str], args: list[str],
                                                   names: str) -> None:
    with pytest.raises(SystemExit) as info:
        main(args)
    captured = capsys.readouterr()
    assert info.value.code == 2
    assert captured.out == ""
    assert captured.err.count("\n") == 1
    assert captured.err.startswith("kvlint-budget: error: ")
    assert names in captured.err


def test_config_without_num_hidden_layers(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "config.json"
    config.write_text('{"num_attention_heads": 32, "hidden_size": 4096}')
    with pytest.raises(SystemExit) as info:
        main(["--config", str(config)])
    assert info.value.code == 2
    assert capsys.readouterr().err == f"kvlint-budget: error: --config {config}: no num_hidden_layers\n"


def test_config_that_is_not_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "config.json"
    config.write_text("{num_hidden_layers: 32")
    with pytest.raises(SystemExit) as info:
        main(["--config", str(config)])
    assert info.value.code == 2
    assert f"--config {config}: not valid JSON" in capsys.readouterr().err


# ----------------------------------------------------------------------------------------- subprocesses


def test_python_dash_m_runs_the_cli() -> None:
    done = subprocess.run([sys.executable, "-m", "kvlint.budget", *LLAMA_FLAGS, "--tokens", "8192"],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert "1073741824 B (1.000 GiB)" in done.stdout


def test_python_dash_m_bad_input_exits_2_without_traceback() -> None:
    done = subprocess.run([sys.executable, "-m", "kvlint.budget", "--memory", "48XB"],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert done.stderr.startswith("kvlint-budget: error: argument --memory")


def test_budget_does_not_import_torch() -> None:
    code = "import sys, kvlint.budget; sys.exit('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


@pytest.mark.skipif(shutil.which("kvlint-budget", path=str(Path(sys.executable).parent)) is None,
                    reason="console script not installed (pip install -e .)")
def test_console_script() -> None:
    script = shutil.which("kvlint-budget", path=str(Path(sys.executable).parent))
    done = subprocess.run([script, *LLAMA_FLAGS, "--tokens", "8192", "--format", "json"],
                          capture_output=True, text=True, check=True)
    assert json.loads(done.stdout)["sections"]["per_token"]["figures"]["bytes_per_sequence_8192"]["value"] == 2**30
