"""A decode step captured in an NPU graph, vllm-ascend's way: the graph writes this step's K/V through
slots into a paged cache and attends in a task group; before each replay the program copies the step's
inputs into the static buffers and updates the group's lengths (``graph_task_update_begin/_end``), which
count the token the replay is about to write. The graph's body runs once eagerly before the capture (a
warm-up). The marked lines are the sites the probe must name.

``extra`` is added to the lengths the updates give (0 is right, -1 the decode off-by-one, +1 one position
past the written ones); ``skip`` lists the steps whose update the program forgets: their replay runs with
the previous lengths. With ``graph_update`` the lengths are given by ``NPUGraph.update(cpu_update_input=...)``
instead (torch_npu's own graph tests).
"""

from __future__ import annotations

import torch

B, NQ, NKV, D, BLOCK, BLOCKS = 2, 4, 2, 16, 16, 4
SCALE = D**-0.5


def decode_graph(torch_npu, steps: int = 4, prompt: int = 3, extra: int = 0, skip: tuple[int, ...] = (),
                 graph_update: bool = False) -> None:
    generator = torch.Generator().manual_seed(5)
    k_cache, v_cache = torch.zeros(BLOCKS, BLOCK, NKV, D), torch.zeros(BLOCKS, BLOCK, NKV, D)
    k_paged, v_paged = k_cache.view(BLOCKS, BLOCK, -1), v_cache.view(BLOCKS, BLOCK, -1)
    table = torch.tensor([[2, 0], [1, 3]], dtype=torch.int32)
    q, k, v = torch.zeros(B, 1, NQ * D), torch.zeros(B, NKV, D), torch.zeros(B, NKV, D)
    slots = torch.zeros(B, dtype=torch.int32)
    out, lse = torch.zeros(B, 1, NQ * D), torch.empty(1)
    geometry = {"block_table": table, "block_size": BLOCK, "num_heads": NQ, "num_key_value_heads": NKV,
                "input_layout": "BSH", "scale": SCALE}

    def feed(positions: list[int]) -> None:
        for buffer in (q, k, v):
            buffer.copy_(torch.randn(buffer.shape, generator=generator))
        slots.copy_(torch.tensor([int(table[b, 0]) * BLOCK + p for b, p in enumerate(positions)], dtype=torch.int32))

    with torch.inference_mode():
        prompt_slots = torch.tensor([int(table[b, 0]) * BLOCK + p for b in range(B) for p in range(prompt)], dtype=torch.int32)  # noqa: E501
        keys, values = (torch.randn(B * prompt, NKV, D, generator=generator) for _ in range(2))
        torch_npu._npu_reshape_and_cache(keys, values, k_cache, v_cache, prompt_slots)  # prefill write
        torch_npu.npu_fused_infer_attention_score(q, k_paged, v_paged, actual_seq_lengths_kv=[prompt] * B, **geometry)  # noqa: E501  # prefill attention
        lengths = [prompt + 1] * B  # counting the token the step writes
        feed([prompt] * B)

        def write() -> None:
            torch_npu._npu_reshape_and_cache(k, v, k_cache, v_cache, slots)  # graph write

        def attention() -> None:
            torch_npu.npu_fused_infer_attention_score.out(q, k_paged, v_paged, actual_seq_lengths_kv=lengths, out=[out, lse], **geometry)  # noqa: E501  # graph attention

        write()  # the warm-up before the capture
        attention()
        graph, stream = torch.npu.NPUGraph(), torch.npu.current_stream()
        with torch.npu.graph(graph, auto_dispatch_capture=graph_update):
            write()
            torch.npu.graph_task_group_begin(stream)
            attention()
            handle = torch.npu.graph_task_group_end(stream)
        lengths = [n + 1 for n in lengths]
        for step in range(1, steps):
            feed([n - 1 for n in lengths])
            if graph_update:
                graph.update(cpu_update_input=[{"actual_seq_lengths_kv": [n + extra for n in lengths]}])
            elif step not in skip:
                torch.npu.graph_task_update_begin(stream, handle)
                torch_npu.npu_fused_infer_attention_score.out(q, k_paged, v_paged, actual_seq_lengths_kv=[n + extra for n in lengths], out=[out, lse], **geometry)  # noqa: E501  # graph update
                torch.npu.graph_task_update_end(stream)
            graph.replay()  # graph replay
            lengths = [n + 1 for n in lengths]
