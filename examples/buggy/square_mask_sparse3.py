"""Buggy example: sparse_mode=3 with a causal mask sized by the sequence, ``[seq, seq]``.

sparse_mode 2/3/4 take the fixed 2048x2048 template (the operator builds the real geometry from the
lengths); a ``[seq, seq]`` mask is only the right shape by accident. Everything else is
``examples/run.py``.

Does not run to the end: the first prefill raises RuntimeError, in the CPU emulator as on the device.
Caught by: ``kvlint`` KVL202 (atten-mask-shape); the probe KVL202 on that live call, before it raises.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # examples/, for the shared model
from model import Config, Step, install_emulator, run_example  # noqa: E402

try:
    import torch_npu
except ImportError:  # no Ascend stack on this machine
    install_emulator()
    import torch_npu


class PagedAttention(nn.Module):
    """One layer's paged KV cache and its attention, as in ``examples/run.py``."""

    def __init__(self, cfg: Config, batch: int) -> None:
        super().__init__()
        self.cfg = cfg
        blocks = batch * cfg.blocks_per_seq
        self.register_buffer("k_cache", torch.zeros(blocks, cfg.block_size, cfg.kv_hidden, dtype=cfg.dtype))
        self.register_buffer("v_cache", torch.zeros(blocks, cfg.block_size, cfg.kv_hidden, dtype=cfg.dtype))
        block_table = torch.arange(blocks, dtype=torch.int32).view(batch, cfg.blocks_per_seq)
        self.register_buffer("block_table", block_table)

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, step: Step) -> torch.Tensor:
        hidden = self.cfg.kv_hidden
        torch_npu.npu_scatter_nd_update_(self.k_cache.view(-1, hidden), step.slot_mapping, k[step.valid])
        torch_npu.npu_scatter_nd_update_(self.v_cache.view(-1, hidden), step.slot_mapping, v[step.valid])
        if q.shape[1] > 1:
            return self._prefill(q, step)
        return self._decode(q, step)

    def _prefill(self, q: torch.Tensor, step: Step) -> torch.Tensor:
        seq = q.shape[1]
        mask = torch.triu(torch.ones(seq, seq, dtype=torch.bool), diagonal=1)  # BUG
        out, _ = torch_npu.npu_fused_infer_attention_score(
            q, self.k_cache, self.v_cache,
            atten_mask=mask,
            actual_seq_lengths=step.q_lens,
            actual_seq_lengths_kv=step.kv_lens,
            block_table=self.block_table,
            block_size=self.cfg.block_size,
            num_heads=self.cfg.q_heads,
            num_key_value_heads=self.cfg.kv_heads,
            scale=self.cfg.scale,
            input_layout="BSH",
            sparse_mode=3,
        )
        return out

    def _decode(self, q: torch.Tensor, step: Step) -> torch.Tensor:
        out, _ = torch_npu.npu_fused_infer_attention_score(
            q, self.k_cache, self.v_cache,
            actual_seq_lengths_kv=step.kv_lens,
            block_table=self.block_table,
            block_size=self.cfg.block_size,
            num_heads=self.cfg.q_heads,
            num_key_value_heads=self.cfg.kv_heads,
            scale=self.cfg.scale,
            input_layout="BSH",
            sparse_mode=0,
        )
        return out


if __name__ == "__main__":
    sys.exit(0 if run_example(PagedAttention) else 1)
