"""The NPU as Ascend programs use it, on the CPU: ``torch.npu``, ``npu`` devices, pinned memory, generators,
the ``hccl`` backend and ``torch.compile`` over tensors created on ``npu``."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import types

import pytest
import torch

from tests.conftest import ROOT


def test_torch_npu_has_a_spec_so_find_spec_answers(torch_npu: types.ModuleType) -> None:
    """transformers checks ``importlib.util.find_spec("torch_npu")``, which raises on a module without one."""
    spec = importlib.util.find_spec("torch_npu")
    assert spec is not None and spec.name == "torch_npu"
    assert torch_npu.__version__.endswith("+kvlint.emulator")
    assert torch_npu.npu is torch.npu is sys.modules["torch_npu.npu"]
    import torch_npu.npu as submodule

    assert submodule is torch.npu


def test_factories_moves_and_modules_accept_the_npu_device(torch_npu: types.ModuleType) -> None:
    device = torch.device("npu:0")
    assert (device.type, device.index) == ("npu", 0)
    made = [
        torch.zeros(3, device="npu"), torch.tensor([1, 2], device="npu:0"), torch.arange(4, device=device),
        torch.randn(2, device="npu"), torch.full((2,), 3.0, device="npu"), torch.ones(2).to("npu"),
        torch.ones(2).npu(), torch.ones(2, dtype=torch.bfloat16).to(device="npu", dtype=torch.float32),
        torch.ones_like(torch.ones(2), device="npu"), torch.ones(3, 3, device="npu").triu(1),
        torch.nn.Linear(2, 2).npu().weight, torch.nn.Linear(2, 2).to(device).weight,
    ]  # fmt: skip
    assert all(t.device.type == "cpu" for t in made)
    assert torch.equal(torch.tensor([5, 6], device="npu") + torch.tensor([1, 1]), torch.tensor([6, 7]))
    assert not made[0].is_npu and made[0].device != device
    assert torch.empty(2, device="meta").device.type == "meta"


def test_set_default_device_npu_allocates_on_the_cpu(torch_npu: types.ModuleType) -> None:
    torch.set_default_device("npu")
    try:
        assert torch.zeros(2).device.type == "cpu" and torch.arange(3).device.type == "cpu"
    finally:
        torch.set_default_device(None)


def test_pinned_memory_is_host_memory(torch_npu: types.ModuleType) -> None:
    host = torch.tensor([1.0, 2.0], pin_memory=True)
    assert host.is_pinned() and host.pin_memory() is host
    assert torch.zeros(3, pin_memory=True).sum() == 0 and torch.empty(2, 3, pin_memory=True).shape == (2, 3)
    assert torch.equal(torch.arange(3, pin_memory=True).to("npu", non_blocking=True), torch.arange(3))


def test_generators_on_npu_are_cpu_generators(torch_npu: types.ModuleType) -> None:
    first, second = torch.Generator(device="npu"), torch.Generator(device="npu:0")
    first.manual_seed(7)
    second.manual_seed(7)
    assert first.device.type == "cpu" and isinstance(first, torch.Generator)
    assert isinstance(torch.default_generator, torch.Generator)
    assert torch.equal(torch.rand(3, generator=first), torch.rand(3, generator=second))


def test_torch_npu_runtime_api(torch_npu: types.ModuleType) -> None:
    npu = torch.npu
    assert npu.is_available() and npu.device_count() >= 1
    npu.set_device("npu:1")
    assert npu.current_device() == 1
    with npu.device(0):
        assert npu.current_device() == 0
    assert npu.current_device() == 1
    npu.set_device(0)
    free, total = npu.mem_get_info()
    assert free == total > 0 and npu.memory_allocated() == npu.max_memory_allocated() == 0
    assert npu.memory_stats()["allocated_bytes.all.peak"] == 0
    npu.empty_cache(), npu.reset_peak_memory_stats(), npu.synchronize()
    assert "910B" in npu.get_device_name(0) and npu.get_device_properties(0).total_memory == total
    npu.manual_seed(3)
    a = torch.rand(2)
    torch_npu.npu.manual_seed_all(3)
    assert torch.equal(a, torch.rand(2))


def test_streams_and_events(torch_npu: types.ModuleType) -> None:
    npu = torch.npu
    side = npu.Stream()
    start, end = npu.Event(enable_timing=True), npu.Event(enable_timing=True)
    start.record()
    with npu.stream(side):
        assert npu.current_stream() is side
        torch.ones(64, 64) @ torch.ones(64, 64)
    assert npu.current_stream() is npu.default_stream()
    end.record(side)
    side.wait_stream(npu.current_stream())
    assert end.query() and start.elapsed_time(end) >= 0.0


class _SideStreamBlock(torch.nn.Module):
    """The multi-stream pattern of the recipes' MoE layers: record_stream, events across a side stream."""

    def __init__(self) -> None:
        super().__init__()
        self.side = torch.npu.Stream()
        self.events = [torch.npu.Event(), torch.npu.Event()]
        self.linear = torch.nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x.record_stream(self.side)
        self.events[0].record()
        with torch.npu.stream(self.side):
            self.events[0].wait()
            shared = self.linear(x)
            self.events[1].record()
        self.events[1].wait()
        torch.npu.current_stream().wait_stream(self.side)
        return shared + x


def test_streams_are_torch_streams_that_record_stream_and_torch_compile_accept(torch_npu: types.ModuleType) -> None:
    side = torch.npu.Stream()
    assert isinstance(side, torch.Stream) and isinstance(torch.npu.Event(), torch.Event)
    assert side.device == torch.device("npu", 0) and side != torch.npu.default_stream()
    torch.ones(3).record_stream(side)
    block, x = _SideStreamBlock(), torch.randn(2, 8)
    compiled = torch.compile(block, backend="npugraph_ex", fullgraph=True)
    torch.testing.assert_close(compiled(x), block(x))


def test_memory_and_devices_come_from_the_environment() -> None:
    code = "import torch; from kvlint.runtime_probe import emulator; emulator.install(); " \
           "print(torch.npu.mem_get_info()[1], torch.npu.device_count())"  # fmt: skip
    env = dict(os.environ, KVLINT_EMULATE_MEMORY="256MiB", KVLINT_EMULATE_DEVICES="2")
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True, cwd=ROOT)
    assert done.stdout.split() == [str(256 * 2**20), "2"]
    bad = subprocess.run([sys.executable, "-c", code], env=dict(env, KVLINT_EMULATE_MEMORY="lots"),
                         capture_output=True, text=True, cwd=ROOT)  # fmt: skip
    assert bad.returncode != 0 and "KVLINT_EMULATE_MEMORY='lots'" in bad.stderr


def test_hccl_process_group_is_gloo(torch_npu: types.ModuleType, tmp_path: object) -> None:
    import torch.distributed as dist

    dist.init_process_group("hccl", init_method=f"file://{tmp_path}/store", rank=0, world_size=1)
    try:
        assert dist.get_backend() == "hccl"
        x = torch.ones(3, device="npu")
        dist.all_reduce(x)
        assert torch.equal(x, torch.ones(3))
    finally:
        dist.destroy_process_group()


def test_compiled_code_mixes_npu_created_and_input_tensors(torch_npu: types.ModuleType) -> None:
    def step(x: torch.Tensor) -> torch.Tensor:
        bias = torch.ones(x.shape[-1], device="npu")
        return (x.to("npu") + bias).sum(-1) + torch.arange(x.shape[0], device=x.device)

    x = torch.randn(4, 3)
    assert torch.allclose(torch.compile(step, backend="aot_eager", fullgraph=True)(x), step(x))


def test_mixed_float_matmuls_compute_in_the_promoted_dtype(torch_npu: types.ModuleType) -> None:
    """A bf16 activation times an fp32 router weight: the NPU accepts it, CPU aten alone would refuse. Each
    form computes what it computes on the activation converted to fp32 (bmm is compared with bmm: on some CPUs
    its batched kernel rounds differently from mm's, by an ulp)."""
    x, w = torch.randn(3, 4, dtype=torch.bfloat16), torch.randn(4, 5)
    promoted = x.float()
    pairs = ((torch.matmul(x, w), promoted @ w), (x @ w, promoted @ w), (x.matmul(w), promoted @ w),
             (torch.mm(x, w), promoted @ w), (torch.bmm(x[None], w[None])[0], torch.bmm(promoted[None], w[None])[0]))
    for got, want in pairs:
        assert got.dtype == torch.float32 and torch.equal(got, want)
    with pytest.raises(RuntimeError):
        torch.matmul(torch.ones(2, 2, dtype=torch.int64), torch.ones(2, 2))


def test_what_capture_time_code_reaches_exists_and_does_nothing(torch_npu: types.ModuleType) -> None:
    npu = torch.npu
    stream = npu.current_stream()
    npu.graph_task_group_begin(stream)
    handle = npu.graph_task_group_end(stream)
    assert isinstance(handle, torch_npu._C._NPUTaskGroupHandle)
    npu.graph_task_update_begin(stream, handle)
    npu.graph_task_update_end(stream)
    event = npu.ExternalEvent()
    event.record(stream)
    event.wait(stream)
    event.reset(stream)
    assert not npu.is_current_stream_capturing()
    x = torch.ones(2)
    assert torch_npu._C._weak_ref_tensor(x) is x


def test_hccl_groups_name_their_communicator_and_take_hccl_options(torch_npu: types.ModuleType, tmp_path: object) -> None:
    import torch.distributed as dist

    options = torch_npu._C._distributed_c10d.ProcessGroupHCCL.Options()
    options.hccl_config = {"hccl_buffer_size": 200}
    dist.init_process_group("hccl", init_method=f"file://{tmp_path}/store", rank=0, world_size=1)
    try:
        group = dist.new_group([0], pg_options=options)
        assert group._get_backend(torch.device("npu")).get_hccl_comm_name(0).startswith("kvlint-gloo")
    finally:
        dist.destroy_process_group()
