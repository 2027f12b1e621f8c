"""NPU graphs on the CPU: ``torch.npu.NPUGraph`` / ``torch.npu.graph`` capture the operators a block runs and
``replay()`` runs them again on the buffers as they are now; task-group updates and ``NPUGraph.update`` give
captured attention calls new lengths."""

from __future__ import annotations

import types
from typing import Any

import pytest
import torch


class _PagedDecode(torch.nn.Module):
    """nano-vLLM's decode step: a norm, a cache write through slot_mapping and paged attention."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(32, 3 * 32)

    def forward(self, x: torch.Tensor, slots: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                tables: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:  # fmt: skip
        import torch_npu

        q, k, v = torch_npu.npu_rms_norm(self.proj(x), torch.ones(96))[0].split(32, dim=-1)
        torch_npu._npu_reshape_and_cache(k.view(-1, 2, 16), v.view(-1, 2, 16), k_cache, v_cache, slots)
        out = torch.empty(x.shape[0], 2, 16)
        torch_npu._npu_paged_attention(q.view(-1, 2, 16), k_cache, v_cache, 2, 2, 0.25, tables, lengths, out)
        return out.view(x.shape[0], 32)


def test_npu_graph_replays_the_captured_operators_on_the_buffers_as_they_are_now(torch_npu: types.ModuleType) -> None:
    torch.manual_seed(0)
    model, batch, blocks = _PagedDecode(), 4, 8
    caches = [torch.zeros(blocks, 4, 2, 16) for _ in range(2)]
    x, slots = torch.zeros(batch, 32), torch.zeros(batch, dtype=torch.int32)
    tables = torch.arange(blocks, dtype=torch.int32).view(batch, 2)
    lengths = torch.ones(batch, dtype=torch.int32)
    outputs = torch.zeros(batch, 32)
    graph = torch.npu.NPUGraph()
    with torch.inference_mode():
        outputs[:] = model(x, slots, *caches, tables, lengths)  # warm-up
        with torch.npu.graph(graph, pool=torch.npu.graph_pool_handle()):
            assert torch.npu.is_current_stream_capturing()
            outputs[:] = model(x, slots, *caches, tables, lengths)
        eager_caches = [cache.clone() for cache in caches]
        for step in range(1, 4):  # each step writes one token per sequence, then attends to all of them
            x.copy_(torch.randn(batch, 32))
            slots.copy_(tables[:, 0] * 4 + step)
            lengths.fill_(step + 1)
            graph.replay()
            want = model(x, slots, *eager_caches, tables, lengths)
            torch.testing.assert_close(outputs, want)
            torch.testing.assert_close(caches[0], eager_caches[0])
    assert not torch.npu.is_current_stream_capturing()


_CAPTURE_PATHS = {
    "x.float()": (lambda x: x.float() * 2, (4, 4), torch.float16),
    "x.to(dtype)": (lambda x: x.to(torch.float64) + 1, (4, 4), torch.float32),
    "x.to(same dtype)": (lambda x: x.to(torch.float32) + 1, (4, 4), torch.float32),
    ".contiguous() of a transpose": (lambda x: x.t().contiguous() - x.t(), (4, 3), torch.float32),
    ".reshape() that copies": (lambda x: x.t().reshape(-1) * 3, (4, 3), torch.float32),
    ".view() (a view)": (lambda x: x.view(-1) * 3, (4, 3), torch.float32),
    ".reshape() that views": (lambda x: x.reshape(2, 6) * 3, (4, 3), torch.float32),
    "a view read directly": (lambda x: x[1:, :2], (4, 3), torch.float32),
}


@pytest.mark.parametrize("mode", [torch.no_grad, torch.inference_mode, torch.enable_grad],
                         ids=["no_grad", "inference_mode", "grad_enabled"])  # fmt: skip
@pytest.mark.parametrize("path", sorted(_CAPTURE_PATHS))
def test_every_capture_path_replays_equal_to_eager(torch_npu: types.ModuleType, mode: Any, path: str) -> None:
    """Whether an operator's output is a view is a run-time fact: under inference_mode a cast, a
    .contiguous() and a copying .reshape() reach the recorder with an alias schema yet copy, and must be
    replayed, or the replay reuses the capture's values."""
    step, shape, dtype = _CAPTURE_PATHS[path]
    x = torch.randn(shape).to(dtype)
    with mode():
        out = torch.zeros_like(step(x))
        graph = torch.npu.NPUGraph()
        with torch.npu.graph(graph):
            out.copy_(step(x))
        for _ in range(2):
            x.copy_(torch.randn(shape).to(dtype))
            graph.replay()
            torch.testing.assert_close(out, step(x))


def test_task_group_updates_and_graph_update_give_captured_attention_new_lengths(torch_npu: types.ModuleType) -> None:
    q, k, v = (torch.randn(2, 1, 64) for _ in range(3))
    out, lse = torch.zeros(2, 1, 64), torch.empty(1)
    keys, values = torch.randn(2, 6, 64), torch.randn(2, 6, 64)

    def attention(lengths: list[int]) -> None:
        torch_npu.npu_fused_infer_attention_score.out(q, keys, values, num_heads=2, input_layout="BSH",
                                                      actual_seq_lengths_kv=lengths, scale=0.125,
                                                      out=[out, lse])  # fmt: skip

    graph, stream = torch.npu.NPUGraph(), torch.npu.current_stream()
    with torch.npu.graph(graph, auto_dispatch_capture=True):
        torch.npu.graph_task_group_begin(stream)
        attention([1, 1])
        handle = torch.npu.graph_task_group_end(stream)
    torch.npu.graph_task_update_begin(stream, handle)
    attention([6, 3])
    torch.npu.graph_task_update_end(stream)
    out.zero_()
    graph.replay()
    want = torch_npu.npu_fused_infer_attention_score(q, keys, values, num_heads=2, input_layout="BSH",
                                                     actual_seq_lengths_kv=[6, 3], scale=0.125)[0]  # fmt: skip
    torch.testing.assert_close(out, want)
    graph.update(cpu_update_input=[{"actual_seq_lengths_kv": torch.tensor([2, 5])}])
    graph.replay()
    want = torch_npu.npu_fused_infer_attention_score(q, keys, values, num_heads=2, input_layout="BSH",
                                                     actual_seq_lengths_kv=[2, 5], scale=0.125)[0]  # fmt: skip
    torch.testing.assert_close(out, want)
    graph.update(cpu_update_input=[{"pre_tokens": 3, "no_such_argument": 1}])  # torch_npu ignores such keys
    out.zero_()
    graph.replay()
    torch.testing.assert_close(out, want)
    with pytest.raises(RuntimeError, match="2 updates for the 1 calls"):
        graph.update(cpu_update_input=[{}, {}])
    with pytest.raises(RuntimeError, match="auto_dispatch_capture=True"):
        torch.npu.NPUGraph().update(cpu_update_input=[{}])
    with pytest.raises(NotImplementedError, match="make_graphed_callables"):
        torch.npu.make_graphed_callables(torch.nn.Linear(2, 2), (torch.ones(2),))


def test_a_task_update_records_the_arguments_and_the_replay_computes(torch_npu: types.ModuleType) -> None:
    """CANN's task-update mode: the calls between graph_task_update_begin and _end rewrite the captured
    task's arguments; nothing runs until the replay, which first writes this step's key. Computing at the
    update would read the cache before that write, and change the output buffer early."""
    q, new_k, new_v = (torch.zeros(2, 1, 64) for _ in range(3))
    keys, values, position = torch.zeros(2, 6, 64), torch.zeros(2, 6, 64), torch.zeros(1, dtype=torch.long)
    out, lse = torch.zeros(2, 1, 64), torch.empty(1)

    def attention(lengths: list[int]) -> None:
        torch_npu.npu_fused_infer_attention_score.out(q, keys, values, num_heads=2, input_layout="BSH",
                                                      actual_seq_lengths_kv=lengths, scale=0.125,
                                                      out=[out, lse])  # fmt: skip

    graph, stream = torch.npu.NPUGraph(), torch.npu.current_stream()
    with torch.inference_mode():
        with torch.npu.graph(graph):
            keys.index_copy_(1, position, new_k)
            values.index_copy_(1, position, new_v)
            torch.npu.graph_task_group_begin(stream)
            attention([1, 1])
            handle = torch.npu.graph_task_group_end(stream)
        for step in range(1, 5):
            for buffer in (q, new_k, new_v):
                buffer.copy_(torch.randn(2, 1, 64))
            position.fill_(step)
            before = out.clone()
            torch.npu.graph_task_update_begin(stream, handle)
            attention([step + 1, step])
            torch.npu.graph_task_update_end(stream)
            torch.testing.assert_close(out, before)  # a program reading the buffer now sees the old data
            graph.replay()
            want = torch_npu.npu_fused_infer_attention_score(q, keys, values, num_heads=2, input_layout="BSH",
                                                             actual_seq_lengths_kv=[step + 1, step], scale=0.125)
            torch.testing.assert_close(out, want[0])
            torch.testing.assert_close(keys[:, step], new_k[:, 0])


def test_an_updated_call_that_makes_its_output_returns_it_undefined_until_the_replay(
        torch_npu: types.ModuleType) -> None:  # fmt: skip
    q, keys, values = torch.randn(2, 1, 64), torch.randn(2, 6, 64), torch.randn(2, 6, 64)

    def attention(lengths: list[int]) -> torch.Tensor:
        return torch_npu.npu_fused_infer_attention_score(q, keys, values, num_heads=2, input_layout="BSH",
                                                         actual_seq_lengths_kv=lengths, scale=0.125)[0]  # fmt: skip

    graph, stream = torch.npu.NPUGraph(), torch.npu.current_stream()
    with torch.npu.graph(graph):
        torch.npu.graph_task_group_begin(stream)
        attention([1, 1])
        handle = torch.npu.graph_task_group_end(stream)
    torch.npu.graph_task_update_begin(stream, handle)
    updated = attention([6, 3])
    torch.npu.graph_task_update_end(stream)
    assert updated.isnan().all()
    graph.replay()
    torch.testing.assert_close(updated, attention([6, 3]))
    torch.npu.graph_task_update_begin(stream, handle)
    with pytest.raises(RuntimeError, match="issued 0 of the captured group's 1 tasks"):
        torch.npu.graph_task_update_end(stream)
    torch.npu.graph_task_update_begin(stream, handle)
    with pytest.raises(RuntimeError, match="not a task of the captured group"):
        q.add(1)
    with pytest.raises(RuntimeError, match="missing: npu.npu_fused_infer_attention_score"):
        torch.npu.graph_task_update_end(stream)
    assert not torch.npu.is_current_stream_capturing()


def test_graph_update_gives_captured_paged_attention_new_context_lens(torch_npu: types.ModuleType) -> None:
    """torch_npu's handler for _npu_paged_attention updates its context_lens; one dict serves every call."""
    query, tables = torch.randn(2, 2, 16), torch.arange(4, dtype=torch.int32).view(2, 2)
    caches = [torch.randn(4, 4, 2, 16) for _ in range(2)]
    outs = [torch.zeros(2, 2, 16) for _ in range(2)]

    def attention(out: torch.Tensor, lengths: torch.Tensor) -> None:
        torch_npu._npu_paged_attention(query, *caches, 2, 2, 0.25, tables, lengths, out)

    graph = torch.npu.NPUGraph()
    with torch.npu.graph(graph, auto_dispatch_capture=True):
        for out in outs:
            attention(out, torch.tensor([1, 1], dtype=torch.int32))
    graph.update(cpu_update_input=[{"context_lens": torch.tensor([3, 7], dtype=torch.int32)}])
    graph.replay()
    want = torch.zeros(2, 2, 16)
    attention(want, torch.tensor([3, 7], dtype=torch.int32))
    for out in outs:
        torch.testing.assert_close(out, want)


def test_operators_that_write_a_cache_and_return_new_tensors_refresh_both_on_replay(torch_npu: types.ModuleType) -> None:
    """DeepSeek's MLA cache writer updates the caches in place and returns the normed latent the next
    operator consumes: a replay must refresh that output too, not only the caches."""
    kv, slots = torch.zeros(1, 1, 2, 16 + 16), torch.tensor([0, 1])
    gamma, cos, sin = torch.ones(16), torch.ones(2, 1, 1, 16), torch.zeros(2, 1, 1, 16)
    rope_cache, nope_cache = torch.zeros(2, 16, 1, 16), torch.zeros(2, 16, 1, 16)
    doubled = torch.zeros(1, 1, 2, 16)
    graph = torch.npu.NPUGraph()
    with torch.npu.graph(graph):
        _, c_kv = torch_npu.npu_kv_rmsnorm_rope_cache_v2(kv, gamma, cos, sin, slots, rope_cache, nope_cache,
                                                         cache_mode="PA", is_output_kv=True)  # fmt: skip
        doubled.copy_(c_kv * 2)
    kv.copy_(torch.randn(1, 1, 2, 32))
    slots.copy_(torch.tensor([5, 6]))
    graph.replay()
    want = torch.nn.functional.rms_norm(kv[..., :16], (16,), gamma, eps=1e-5)
    torch.testing.assert_close(doubled, want * 2)
    torch.testing.assert_close(nope_cache.view(32, 16)[5:7], want.view(2, 16))


def test_a_replay_whose_shapes_change_and_a_nested_capture_raise(torch_npu: types.ModuleType) -> None:
    lengths = torch.tensor([2, 3])
    out = torch.zeros(1)
    graph = torch.npu.NPUGraph()
    with torch.npu.graph(graph):
        nonzero = torch.nonzero(lengths > 2)  # a data-dependent shape: legal eagerly, not in a captured graph
        out.copy_(nonzero.sum())
        with pytest.raises(RuntimeError, match="already being captured"):
            torch.npu.NPUGraph().capture_begin()
    lengths.fill_(3)
    with pytest.raises(RuntimeError, match="static shapes"):
        graph.replay()
    assert not torch.npu.is_current_stream_capturing()


def test_graph_handlers_are_torch_npus_registry_and_a_programs_handler_updates_its_operator(
        torch_npu: types.ModuleType) -> None:  # fmt: skip
    """``torch_npu.npu.NpuGraphOpHandler`` / ``register_npu_graph_handler``: the built-in handlers name FIA's
    length arguments by schema position, and a handler a program registers makes ``NPUGraph.update`` reach
    an operator torch_npu has none for (IFA here), by its ``UPDATE_SPECS``."""
    from torch_npu.npu import NpuGraphOpHandler, register_npu_graph_handler
    from torch_npu.npu._npugraph_handlers.npugraph_handler import _NPU_GRAPH_OP_HANDLERS

    specs = _NPU_GRAPH_OP_HANDLERS["npu_fused_infer_attention_score.out"].get_update_specs(
        "npu_fused_infer_attention_score.out")
    assert ("arg", 5, "actual_seq_lengths") in specs and ("arg", 6, "actual_seq_lengths_kv") in specs
    assert "npu_incre_flash_attention.default" not in _NPU_GRAPH_OP_HANDLERS
    q, keys, values = torch.randn(2, 1, 32), torch.randn(2, 6, 32), torch.randn(2, 6, 32)

    def attention(lengths: list[int]) -> torch.Tensor:
        return torch_npu.npu_incre_flash_attention(q, keys, values, num_heads=2, input_layout="BSH",
                                                   actual_seq_lengths=lengths, scale_value=0.25)  # fmt: skip

    snapshot = dict(_NPU_GRAPH_OP_HANDLERS)
    try:
        @register_npu_graph_handler(["npu_incre_flash_attention.default"])
        class _Lengths(NpuGraphOpHandler):
            UPDATE_SPECS = {"npu_incre_flash_attention.default": [("arg", 6, "actual_seq_lengths")]}

        assert _NPU_GRAPH_OP_HANDLERS["npu_incre_flash_attention.default"] is _Lengths
        graph = torch.npu.NPUGraph()
        with torch.npu.graph(graph, auto_dispatch_capture=True):
            out = attention([1, 1])
        graph.update(cpu_update_input=[{"actual_seq_lengths": [6, 2]}])
        graph.replay()
        torch.testing.assert_close(out, attention([6, 2]))
    finally:
        _NPU_GRAPH_OP_HANDLERS.clear()
        _NPU_GRAPH_OP_HANDLERS.update(snapshot)


def test_the_fia_out_graph_entry_point_updates_the_captured_group_and_the_update_stream_is_shared(
        torch_npu: types.ModuleType) -> None:  # fmt: skip
    """``torch_npu._C._npu_fused_infer_attention_score_out_graph(stream, handle, event, ...)`` is FIA's ``.out``
    issued as the group's update: nothing runs until the replay, which computes the new lengths."""
    q, keys, values = torch.randn(2, 1, 64), torch.randn(2, 6, 64), torch.randn(2, 6, 64)
    out, lse = torch.zeros(2, 1, 64), torch.empty(1)
    arguments = dict(num_heads=2, input_layout="BSH", scale=0.125)
    graph, stream, event = torch.npu.NPUGraph(), torch.npu.current_stream(), torch.npu.ExternalEvent()
    with torch.npu.graph(graph):
        torch.npu.graph_task_group_begin(stream)
        torch_npu.npu_fused_infer_attention_score.out(q, keys, values, actual_seq_lengths_kv=[1, 1], **arguments,
                                                      out=[out, lse])  # fmt: skip
        handle = torch.npu.graph_task_group_end(stream)
    update = graph.graph_dispatch_mode.update_stream
    assert update is torch.npu.NPUGraph().graph_dispatch_mode.update_stream
    returned = torch_npu._C._npu_fused_infer_attention_score_out_graph(
        update, handle, event, q, keys, values, actual_seq_lengths_kv=[6, 3], **arguments, out=[out, lse])
    assert returned[0] is out
    out.zero_()
    graph.replay()
    want = torch_npu.npu_fused_infer_attention_score(q, keys, values, actual_seq_lengths_kv=[6, 3], **arguments)[0]
    torch.testing.assert_close(out, want)


def test_debug_dump_writes_the_recorded_calls_and_their_aligned_copy(torch_npu: types.ModuleType, tmp_path,
                                                                     monkeypatch) -> None:  # fmt: skip
    """As on the device: the dump and ``<name>.aligned.json``; a failing alignment keeps the dump and writes no
    aligned copy; a graph that captured nothing writes nothing and warns."""
    import json

    import torch_npu.npu._npugraph_utils as utils

    x, linear = torch.randn(3, 4), torch.nn.Linear(4, 2)
    graph = torch.npu.NPUGraph()
    with torch.npu.graph(graph):
        linear(x).relu()
    path = tmp_path / "dump.json"
    assert graph.debug_dump(str(path)) is None
    tasks = json.loads(path.read_text())["tasks"]
    assert [task["operator"] for task in tasks][-1] == "aten.relu.default" and len(tasks) >= 2
    assert "aten.relu.default" in (tmp_path / "dump.aligned.json").read_text()
    (tmp_path / "dump.aligned.json").unlink()

    def failing(path: str, output: str | None) -> None:
        raise RuntimeError("alignment failed")

    monkeypatch.setattr(utils, "align_trace_json", failing)
    graph.debug_dump(str(path))
    assert path.stat().st_size > 0 and not (tmp_path / "dump.aligned.json").exists()
    with pytest.warns(UserWarning, match="captured nothing"):
        torch.npu.NPUGraph().debug_dump(str(tmp_path / "empty.json"))
    assert not (tmp_path / "empty.json").exists()
