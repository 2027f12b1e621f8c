"""torchair on the CPU: the recipes' imports work, ``get_npu_backend()`` compiles emulated operators, and
``torchair.ops``' attention (Tensor lengths) gives torch_npu's results eagerly and compiled."""

from __future__ import annotations

import subprocess
import sys
import types
from pathlib import Path

import torch

from tests.conftest import ROOT

TEMPLATE = torch.ones(2048, 2048, dtype=torch.bool).triu(1)


def test_the_recipes_imports_resolve(torch_npu: types.ModuleType) -> None:
    import torchair
    import torchair as tng
    from torchair.configs.compiler_config import CompilerConfig
    from torchair.core.utils import logger

    import torchair.ge_concrete_graph.ge_converter.experimental.patch_for_hcom_allreduce  # noqa: F401

    assert tng is torchair and torchair.CompilerConfig is CompilerConfig and logger.name == "torchair"
    config = CompilerConfig()
    config.experimental_config.frozen_parameter = True
    config.mode = "reduce-overhead"
    assert config.experimental_config.frozen_parameter is True and config.mode == "reduce-overhead"
    backend = tng.get_npu_backend(compiler_config=config)
    assert backend.keywords["compiler_config"] is config
    tng.patch_for_hcom()
    with tng.scope.npu_stream_switch("1", 3), tng.scope.super_kernel("s"), tng.scope.limit_core_num(4, 8):
        x = torch.ones(2)
    assert tng.scope.npu_wait_tensor(x, x) is x and tng.ops.npu_tagged_event_record(None) is None


def test_npu_backend_compiles_a_step_with_emulated_operators(torch_npu: types.ModuleType) -> None:
    import torchair

    def step(x: torch.Tensor, gamma: torch.Tensor, cache: torch.Tensor) -> torch.Tensor:
        y = torch_npu.npu_rms_norm(x, gamma)[0]
        torch_npu.scatter_update_(cache, torch.tensor([1, 3]), y[:, :1], -2)
        out, _ = torch_npu.npu_fused_infer_attention_score(y[:, :1], cache, cache, num_heads=4, scale=0.5,
                                                           actual_seq_lengths_kv=[2, 4])  # fmt: skip
        return torch_npu.npu_swiglu(out.float())

    compiled = torch.compile(step, backend=torchair.get_npu_backend(), fullgraph=True)
    x, gamma = torch.randn(2, 3, 32), torch.rand(32) + 0.5
    eager_cache, compiled_cache = torch.zeros(2, 6, 32), torch.zeros(2, 6, 32)
    assert torch.allclose(compiled(x, gamma, compiled_cache), step(x, gamma, eager_cache))
    assert torch.equal(compiled_cache, eager_cache) and torch.count_nonzero(eager_cache) > 0


def test_rotary_pos_emb_compiles_and_still_writes_query_and_key(torch_npu: types.ModuleType) -> None:
    """``npu_apply_rotary_pos_emb`` returns its own inputs, which torch forbids a compiled custom operator when
    ``CI`` is set (the tests force that check on): compiled, it still rotates query and key in place."""
    import torchair

    def rotate(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        q, k = torch_npu.npu_apply_rotary_pos_emb(q, k, cos, sin, layout="TND")
        return q.sum(-1) + k.sum(-1)

    compiled = torch.compile(rotate, backend=torchair.get_npu_backend(), fullgraph=True)
    q, k, cos, sin = torch.randn(5, 2, 8), torch.randn(5, 1, 8), torch.randn(5, 1, 8), torch.randn(5, 1, 8)
    original_q, eager_q, eager_k = q.clone(), q.clone(), k.clone()
    want = rotate(eager_q, eager_k, cos, sin)
    assert torch.allclose(compiled(q, k, cos, sin), want)
    assert not torch.equal(eager_q, original_q)
    assert torch.allclose(q, eager_q) and torch.allclose(k, eager_k)


def test_torchair_attention_takes_tensor_lengths(torch_npu: types.ModuleType) -> None:
    import torchair as tng

    q, k = torch.randn(2, 4, 32), torch.randn(2, 7, 32)
    keywords = {"num_heads": 4, "scale": 0.3, "sparse_mode": 3, "atten_mask": TEMPLATE}
    want = torch_npu.npu_fused_infer_attention_score(q, k, k, actual_seq_lengths_kv=[7, 5], **keywords)[0]
    lengths = torch.tensor([7, 5], dtype=torch.int64)
    assert torch.equal(tng.ops.npu_fused_infer_attention_score(q, k, k, actual_seq_lengths_kv=lengths, **keywords)[0], want)

    def call(q: torch.Tensor, k: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        return tng.ops.npu_fused_infer_attention_score(q, k, k, actual_seq_lengths_kv=lengths, **keywords)[0]

    compiled = torch.compile(call, backend=tng.get_npu_backend(), fullgraph=True)
    assert torch.equal(compiled(q, k, lengths), want)
    v2 = tng.ops.npu_fused_infer_attention_score_v2(q, k, k, num_query_heads=4, softmax_scale=0.3,
                                                    actual_seq_kvlen=lengths)[0]  # fmt: skip
    assert torch.equal(v2, torch_npu.npu_fused_infer_attention_score_v2(q, k, k, num_query_heads=4, softmax_scale=0.3,
                                                                        actual_seq_kvlen=[7, 5])[0])  # fmt: skip


def test_cache_compile_compiles_a_method(torch_npu: types.ModuleType) -> None:
    import torchair

    class Model(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch_npu.npu_swiglu(x) * 2

    model = Model()
    model.compiled = torchair.inference.cache_compile(model.forward)
    x = torch.randn(3, 8)
    assert torch.equal(model.compiled(x), model(x))


def test_a_real_torchair_is_not_shadowed(tmp_path: Path) -> None:
    (tmp_path / "torchair").mkdir()
    (tmp_path / "torchair" / "__init__.py").write_text("REAL = True\n")
    code = ("from kvlint.runtime_probe import emulator; emulator.install(); import torchair; "
            "print(getattr(torchair, 'REAL', False))")  # fmt: skip
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT,
                          env={"PYTHONPATH": str(tmp_path), "PATH": ""})  # fmt: skip
    assert done.stdout.split() == ["True"]


def test_npugraph_ex_backend_compiles_on_the_cpu(torch_npu: types.ModuleType) -> None:
    def forward(x: torch.Tensor, gamma: torch.Tensor) -> torch.Tensor:
        return torch_npu.npu_rms_norm(x, gamma)[0] * 2

    x, gamma = torch.randn(3, 16), torch.rand(16)
    compiled = torch.compile(forward, backend="npugraph_ex", fullgraph=True,
                             options={"frozen_parameter": True, "static_kernel_compile": False})  # fmt: skip
    cached = torch.npu.npugraph_ex.inference.cache_compile(forward, cache_dir="unused", dynamic=False,
                                                           options={"frozen_parameter": True})  # fmt: skip
    torch.testing.assert_close(compiled(x, gamma), forward(x, gamma))
    torch.testing.assert_close(cached(x, gamma), forward(x, gamma))
