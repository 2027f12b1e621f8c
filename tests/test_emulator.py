"""The CPU emulator: ``import torch_npu`` works without an NPU, with the device's schemas and the reference's
results."""

from __future__ import annotations

import importlib
import math
import re
import sys
import types
from pathlib import Path

import pytest
import torch
from kvlint.runtime_probe import emulator
from kvlint.runtime_probe.reference import operators as reference
from torch._subclasses.fake_tensor import FakeTensorMode

from kvlint.catalogue import operators
from kvlint.catalogue.schemas import ATB_SCHEMAS, SCHEMAS

TEMPLATE = torch.ones(2048, 2048, dtype=torch.bool).triu(1)


def bsh(batch: int = 2, seq: int = 5, hidden: int = 32, seed: int = 0) -> torch.Tensor:
    return torch.randn(batch, seq, hidden, generator=torch.Generator().manual_seed(seed))


def test_install_registers_every_schema_verbatim_and_is_idempotent(torch_npu: types.ModuleType) -> None:
    import torch_npu as imported

    assert imported is torch_npu is emulator.install() and emulator.is_installed()
    assert len(operators.OVERLOADS) == len(SCHEMAS) + len(ATB_SCHEMAS)
    assert {op.namespace for op in operators.OVERLOADS.values()} == {"npu", "atb"}
    for op in operators.OVERLOADS.values():
        registered = getattr(getattr(getattr(torch.ops, op.namespace), op.name), op.overload)._schema
        assert str(registered) == str(torch._C.parse_schema(f"{op.namespace}::{op.schema}"))
    for name, op in operators.OPERATORS.items():
        assert getattr(torch_npu, name) is getattr(getattr(torch.ops, op.namespace), name)
    assert torch_npu._npu_paged_attention is torch.ops.atb._npu_paged_attention


def test_operators_without_a_kernel_raise_naming_the_operator(torch_npu: types.ModuleType) -> None:
    q = torch.zeros(2, 4, 8)
    lens = torch.tensor([4, 4], dtype=torch.int32)
    with pytest.raises(NotImplementedError, match="npu_attention_update"):
        torch_npu.npu_attention_update([lens.float()], [q], 0)
    with pytest.raises(RuntimeError, match="missing value for argument 'slot_indices'"):
        torch.ops.atb._npu_reshape_and_cache(q, q, q, q, slot_mapping=lens)


@pytest.mark.parametrize(
    ("name", "keyword"),
    [
        ("npu_fused_infer_attention_score", "num_query_heads"),
        ("npu_fused_infer_attention_score_v2", "num_heads"),
        ("npu_incre_flash_attention", "scale"),
        ("npu_prompt_flash_attention", "block_table"),
    ],
)
def test_schema_errors_match_the_device(torch_npu: types.ModuleType, name: str, keyword: str) -> None:
    q = bsh()
    with pytest.raises(RuntimeError, match=f"Unknown keyword argument '{keyword}'"):
        getattr(torch_npu, name)(q, q, q, **{keyword: 8})
    with pytest.raises(RuntimeError, match="positional"):
        getattr(torch_npu, name)(q, q, q, q)


def test_attention_results_equal_the_reference(torch_npu: types.ModuleType) -> None:
    q, k, v = bsh(seed=1), bsh(seq=9, hidden=16, seed=2), bsh(seq=9, hidden=16, seed=3)
    common = {"num_heads": 4, "num_key_value_heads": 2, "actual_seq_lengths_kv": [9, 6]}
    fia = {**common, "scale": 0.3, "sparse_mode": 3, "atten_mask": TEMPLATE, "softmax_lse_flag": True}
    decode = {"num_heads": 4, "num_key_value_heads": 2, "actual_seq_lengths": [9, 6]}
    tnd = (torch.randn(7, 4, 64), torch.randn(12, 4, 64), torch.randn(12, 4, 64))  # the sink needs TND (FIA-C70)
    sink = {"num_query_heads": 4, "softmax_scale": 0.3, "input_layout": "TND", "actual_seq_qlen": [3, 7],
            "actual_seq_kvlen": [5, 12], "learnable_sink": torch.ones(4, dtype=torch.bfloat16),
            "return_softmax_lse": True}  # fmt: skip
    for got, want in (
        (
            torch_npu.npu_fused_infer_attention_score(q, k, v, **fia),
            reference.fused_infer_attention_score(q, k, v, **fia),
        ),
        (
            torch_npu.npu_fused_infer_attention_score_v2(*tnd, **sink),
            reference.fused_infer_attention_score_v2(*tnd, **sink),
        ),
        (
            (torch_npu.npu_prompt_flash_attention(q, k, v, atten_mask=torch.zeros(5, 9, dtype=torch.bool), **common),),
            (reference.prompt_flash_attention(q, k, v, atten_mask=torch.zeros(5, 9, dtype=torch.bool), **common),),
        ),
        (
            (torch_npu.npu_incre_flash_attention(q[:, :1], k, v, **decode),),
            (reference.incre_flash_attention(q[:, :1], k, v, **decode),),
        ),
    ):  # fmt: skip
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert torch.equal(g, w)


def test_out_overload_writes_into_out(torch_npu: types.ModuleType) -> None:
    q = bsh()
    out, lse = torch.empty(0), torch.empty(0)
    result = torch_npu.npu_fused_infer_attention_score(q, q, q, num_heads=4, softmax_lse_flag=True, out=[out, lse])
    want = reference.fused_infer_attention_score(q, q, q, num_heads=4, softmax_lse_flag=True)
    assert result[0] is out and result[1] is lse
    assert torch.equal(out, want[0]) and torch.equal(lse, want[1])


def test_cache_writes_equal_the_reference(torch_npu: types.ModuleType) -> None:
    cache, updates, starts = torch.zeros(2, 8, 16), torch.randn(2, 3, 16), torch.tensor([4, 0])
    want = reference.scatter_update(cache, starts, updates, -2)
    assert torch.equal(torch_npu.scatter_update(cache, starts, updates, -2), want)
    assert torch.count_nonzero(cache) == 0
    assert torch_npu.scatter_update_(cache, starts, updates, -2) is cache and torch.equal(cache, want)
    table, indices, rows = torch.zeros(4, 5, 6), torch.tensor([[1, 2], [3, 0]]), torch.randn(2, 6)
    want = reference.npu_scatter_nd_update(table, indices, rows)
    assert torch.equal(torch_npu.npu_scatter_nd_update(table, indices, rows), want)
    assert torch_npu.npu_scatter_nd_update_(table, indices, rows) is table and torch.equal(table, want)


def test_quantisation_operators_raise_naming_the_operator_and_argument(torch_npu: types.ModuleType) -> None:
    x = torch.randint(-8, 8, (4, 16), dtype=torch.int8)
    with pytest.raises(NotImplementedError, match="npu_quant_matmul: quantising 'x1'"):
        torch_npu.npu_quant_matmul(x, x.t(), torch.ones(16))
    with pytest.raises(NotImplementedError, match="npu_dynamic_quant: quantising 'input'"):
        torch_npu.npu_dynamic_quant(torch.randn(4, 16))


def test_refuses_to_shadow_an_imported_torch_npu(torch_npu: types.ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torch_npu", types.ModuleType("torch_npu"))
    with pytest.raises(RuntimeError, match="does not shadow"):
        emulator.install()


def test_refuses_to_shadow_an_installed_torch_npu(
    torch_npu: types.ModuleType, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (tmp_path / "torch_npu").mkdir()
    (tmp_path / "torch_npu" / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "torch_npu")
    importlib.invalidate_caches()
    with pytest.raises(RuntimeError, match=str(tmp_path)):
        emulator.install()


def test_a_folder_named_torch_npu_on_the_path_is_named_as_what_shadows_the_import(
    torch_npu: types.ModuleType, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A ``torch_npu/`` folder without ``__init__.py`` in the working directory is a namespace package whose
    spec has no origin: the message said "installed at None"."""
    folder = tmp_path / "torch_npu"
    folder.mkdir()
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "torch_npu")
    importlib.invalidate_caches()
    with pytest.raises(RuntimeError, match=re.escape(f"a folder named torch_npu at '{folder}' shadows the import")):
        emulator.install()


class TinyDecoderLayer(torch.nn.Module):
    """One attention layer as NPU model code writes it: paged KV cache written with torch_npu ops,
    prefill through FIA v1 (bottom-right causal), decode through FIA v2 with a paged cache. Paged prefill
    needs a block_size that is a multiple of 128 (FIA-C36)."""

    heads, kv_heads, dim, block = 4, 2, 8, 128

    def __init__(self, npu: types.ModuleType) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.npu = npu
        self.q = torch.nn.Linear(32, self.heads * self.dim)
        self.kv = torch.nn.Linear(32, 2 * self.kv_heads * self.dim)
        self.key_cache = torch.zeros(8, self.block, self.kv_heads * self.dim)
        self.value_cache = torch.zeros(8, self.block, self.kv_heads * self.dim)
        self.table = torch.tensor([[5, 2, 7], [0, 6, 3]], dtype=torch.int32)

    def forward(self, x: torch.Tensor, start: int) -> torch.Tensor:
        q = self.q(x)
        k, v = self.kv(x).chunk(2, dim=-1)
        positions = torch.arange(start, start + x.shape[1])
        slots = torch.stack([torch.stack([self.table[b, positions // self.block].long(), positions % self.block], -1)
                             for b in range(x.shape[0])])  # fmt: skip
        self.npu.npu_scatter_nd_update_(self.key_cache, slots, k)
        self.npu.npu_scatter_nd_update_(self.value_cache, slots, v)
        paged = {"block_table": self.table, "block_size": self.block, "num_key_value_heads": self.kv_heads}
        total = [start + x.shape[1]] * x.shape[0]
        if x.shape[1] > 1:
            out, _ = self.npu.npu_fused_infer_attention_score(
                q, self.key_cache, self.value_cache, num_heads=self.heads, scale=self.dim**-0.5, sparse_mode=3,
                atten_mask=TEMPLATE, actual_seq_lengths_kv=total, **paged,
            )  # fmt: skip
        else:
            out, _ = self.npu.npu_fused_infer_attention_score_v2(
                q, self.key_cache, self.value_cache, num_query_heads=self.heads, softmax_scale=self.dim**-0.5,
                actual_seq_kvlen=total, **paged,
            )  # fmt: skip
        return out

    def plain(self, x: torch.Tensor) -> torch.Tensor:
        """The same layer over the whole sequence in plain torch (causal softmax over repeated KV)."""
        q = self.q(x).unflatten(-1, (self.heads, self.dim)).transpose(1, 2)
        k, v = (t.unflatten(-1, (self.kv_heads, self.dim)).transpose(1, 2).repeat_interleave(2, 1)
                for t in self.kv(x).chunk(2, dim=-1))  # fmt: skip
        scores = (q @ k.transpose(-1, -2)) * self.dim**-0.5
        scores = scores.masked_fill(torch.ones(x.shape[1], x.shape[1], dtype=torch.bool).triu(1), -math.inf)
        return (scores.softmax(-1) @ v).transpose(1, 2).flatten(-2)


def test_a_small_model_steps_through_torch_npu_calls(torch_npu: types.ModuleType) -> None:
    for grad_mode in (torch.inference_mode, torch.enable_grad):  # inputs from nn.Linear may require grad
        layer, x = TinyDecoderLayer(torch_npu), bsh(seq=9, seed=4)
        with grad_mode():
            steps = [layer(x[:, :6], 0)] + [layer(x[:, pos : pos + 1], pos) for pos in range(6, 9)]
            assert (torch.cat(steps, dim=1) - layer.plain(x)).abs().max() < 1e-5


def test_torch_compile_traces_the_emulated_operators(torch_npu: types.ModuleType) -> None:
    def step(cache: torch.Tensor, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        torch_npu.scatter_update_(cache, torch.tensor([2, 5]), k, -2)
        out, _ = torch_npu.npu_fused_infer_attention_score(
            q, cache, cache, num_heads=4, scale=0.5, sparse_mode=3, atten_mask=TEMPLATE, actual_seq_lengths_kv=[3, 6]
        )
        return out * 2

    compiled = torch.compile(step, backend="aot_eager", fullgraph=True)
    q, k = bsh(seq=1), bsh(seq=1, seed=5)
    eager_cache, compiled_cache = torch.zeros(2, 8, 32), torch.zeros(2, 8, 32)
    assert torch.equal(compiled(compiled_cache, q, k), step(eager_cache, q, k))
    assert torch.equal(compiled_cache, eager_cache) and torch.count_nonzero(eager_cache) > 0


@pytest.mark.parametrize(
    ("layout", "query_shape", "kv_shape", "extra"),
    [
        ("BSH", (2, 5, 32), (2, 7, 16), {}),
        ("BNSD_BSND", (2, 4, 5, 8), (2, 2, 7, 8), {}),
        ("BSND_NBSD", (2, 5, 4, 8), (2, 7, 2, 8), {}),
        ("TND_NTD", (9, 4, 128), (12, 2, 128), {"actual_seq_lengths": [4, 9], "actual_seq_lengths_kv": [5, 12]}),
        ("BSH", (2, 1, 32), (6, 16, 16), {"block_table": torch.tensor([[0, 1], [2, 3]], dtype=torch.int32),
                                          "block_size": 16, "actual_seq_lengths_kv": [20, 5]}),
    ],
)  # fmt: skip
def test_fake_kernels_match_real_shapes(
    torch_npu: types.ModuleType, layout: str, query_shape: tuple, kv_shape: tuple, extra: dict
) -> None:
    q, kv = torch.randn(query_shape), torch.randn(kv_shape)
    kw = {"num_heads": 4, "num_key_value_heads": 2, "input_layout": layout, "softmax_lse_flag": True, **extra}
    real = torch_npu.npu_fused_infer_attention_score(q, kv, kv, **kw)
    with FakeTensorMode() as mode:
        fake_kw = {name: mode.from_tensor(x) if isinstance(x, torch.Tensor) else x for name, x in kw.items()}
        fake_q, fake_kv = mode.from_tensor(q), mode.from_tensor(kv)
        fake = torch_npu.npu_fused_infer_attention_score(fake_q, fake_kv, fake_kv, **fake_kw)
    assert [(t.shape, t.dtype) for t in fake] == [(t.shape, t.dtype) for t in real]
