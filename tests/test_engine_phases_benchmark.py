"""benchmarks/engine_phases.py's pruning estimate: what an ``ast`` pre-pass could leave out is what the
functions with a gate word do not reach by name (callees, callers of wrappers, setters of the ``self``
attributes they read); the rest is counted as left out."""

from __future__ import annotations

import ast
import importlib.util
import sys

from tests.conftest import ROOT

SPEC = importlib.util.spec_from_file_location("engine_phases", ROOT / "benchmarks" / "engine_phases.py")
engine_phases = importlib.util.module_from_spec(SPEC)
sys.modules[SPEC.name] = engine_phases
SPEC.loader.exec_module(engine_phases)

BACKEND = '''\
import torch_npu


def fia(q, k, v, **kw):
    return torch_npu.npu_fused_infer_attention_score(q, k, v, **kw)


def build_mask(n):
    return n


def decode(q, k, v):
    return fia(q, k, v, atten_mask=build_mask(4))


class Layer:
    def __init__(self, heads):
        self.heads = heads

    def forward(self, q, k, v):
        return torch_npu.npu_incre_flash_attention(q, k, v, num_heads=self.heads)

    def extra_repr(self):
        return "layer"


def log_config(config):
    print(config)
'''


def kept_and_left(source: str) -> tuple[list[str], list[str]]:
    lines = source.splitlines()
    units = [engine_phases._unit(node, lines) for node in engine_phases._functions(ast.parse(source).body)]
    kept = engine_phases._reached_by_name(units)
    return sorted(unit.node.name for unit in kept), sorted(unit.node.name for unit in units if unit not in kept)


def test_callees_callers_and_attribute_setters_are_kept() -> None:
    kept, left = kept_and_left(BACKEND)
    assert kept == ["__init__", "build_mask", "decode", "fia", "forward"]
    assert left == ["extra_repr", "log_config"]


def test_the_gate_words_alone_pick_the_seeds() -> None:
    units = [engine_phases._unit(node, BACKEND.splitlines())
             for node in engine_phases._functions(ast.parse(BACKEND).body)]  # fmt: skip
    assert sorted(unit.node.name for unit in units if unit.has_gate_word) == ["fia", "forward"]
