"""benchmarks/realcode.py classifies every operator-named call of the repositories in its manifest."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

from tests.conftest import ROOT

SPEC = importlib.util.spec_from_file_location("realcode", ROOT / "benchmarks" / "realcode.py")
realcode = importlib.util.module_from_spec(SPEC)
sys.modules[SPEC.name] = realcode
SPEC.loader.exec_module(realcode)

MODEL = '''\
import torch
import torch_npu
import torchair as tng
from .ops import npu_fused_infer_attention_score


def npu_prompt_flash_attention(q, k, v):
    return q


class Attention:
    def __init__(self, graph):
        self.ops = tng.ops if graph else torch.ops.npu

    def forward(self, q, k, v, backend, k_cache, v_cache, slots):
        a = self.ops.npu_fused_infer_attention_score(q, k, v, num_heads=8, scale=0.1)
        b = torch.ops.npu._npu_reshape_and_cache(k, v, k_cache, v_cache, slots)
        c = npu_fused_infer_attention_score(q, k, v)
        d = npu_prompt_flash_attention(q, k, v)
        e = backend.npu_incre_flash_attention(q, k, v)
        return a, b, c, d, e
'''


def test_calls_are_resolved_the_projects_own_a_namespace_without_them_or_missed(tmp_path: Path) -> None:
    checkout = tmp_path / "repos" / "someone+engine"
    (checkout / "engine").mkdir(parents=True)
    (checkout / "engine" / "model.py").write_text(MODEL, encoding="utf-8")
    manifest = tmp_path / "manifest.json"
    manifest.write_text(json.dumps({"repositories": [
        {"repository": "someone/engine", "commit": "0" * 40, "paths": ["engine/model.py"]}]}), encoding="utf-8")
    repos = realcode.repositories(manifest, tmp_path / "repos")
    result = realcode.measure_recognition(repos)
    assert result.counts["someone/engine"] == {"resolved": 1, "own": 2, "namespace-without-it": 1, "missed": 1}
    missed = [row for row in result.listed if row[3] == "missed"]
    assert missed == [("someone/engine", "engine/model.py:20", "npu_incre_flash_attention", "missed",
                       "backend.npu_incre_flash_attention: backend is a parameter")]
    assert "| someone/engine | 5 | 1 | 2 | 1 | 1 | 50.0 % |" in realcode.render_recognition(result, "now")


def test_a_repository_missing_from_the_folder_is_an_error_naming_it(tmp_path: Path) -> None:
    manifest = tmp_path / "manifest.json"
    manifest.write_text(json.dumps({"repositories": [{"repository": "a/b", "commit": "0" * 40, "paths": []}]}))
    try:
        realcode.repositories(manifest, tmp_path)
    except SystemExit as error:
        assert "a/b" in str(error)
    else:
        raise AssertionError("no error")
