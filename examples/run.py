"""A small decoder-only model whose attention is written the way Ascend inference code is.

Paged KV cache with a static int32 block table; K/V written through ``npu_scatter_nd_update_`` at the
slots the runner computed for this step; prefill through FIA with ``sparse_mode=3`` and the 2048x2048
bool template mask (bottom-right causal, so a chunk sees the cached prefix), decode with ``sparse_mode=0``
and no mask. Runs on a CPU: without torch_npu, kvlint's emulator stands in.

    python examples/run.py                    # generate, check, print the KV budget
    KVLINT_PROBE=1 python examples/run.py     # the same, every operator call validated by the probe
    kvlint examples/run.py                    # the linter: no findings
"""

from __future__ import annotations

import sys

import torch
from model import Config, Step, install_emulator, run_example
from torch import nn

try:
    import torch_npu
except ImportError:  # no Ascend stack on this machine
    install_emulator()
    import torch_npu

CAUSAL_MASK = torch.triu(torch.ones(2048, 2048, dtype=torch.bool), diagonal=1)
"""The compressed causal template of sparse_mode 2/3/4: True above the diagonal = masked out."""


class PagedAttention(nn.Module):
    """One layer's paged KV cache and its attention (BSH layout, GQA through ``num_key_value_heads``)."""

    def __init__(self, cfg: Config, batch: int) -> None:
        super().__init__()
        self.cfg = cfg
        blocks = batch * cfg.blocks_per_seq
        self.register_buffer("k_cache", torch.zeros(blocks, cfg.block_size, cfg.kv_hidden, dtype=cfg.dtype))
        self.register_buffer("v_cache", torch.zeros(blocks, cfg.block_size, cfg.kv_hidden, dtype=cfg.dtype))
        # Built once, never changed: sequence b owns blocks b*M .. b*M+M-1 (block ids are int32).
        block_table = torch.arange(blocks, dtype=torch.int32).view(batch, cfg.blocks_per_seq)
        self.register_buffer("block_table", block_table)

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, step: Step) -> torch.Tensor:
        """Write this step's K/V into the cache, then attend over the cache: ``[B, S, Nq*D]``."""
        hidden = self.cfg.kv_hidden
        torch_npu.npu_scatter_nd_update_(self.k_cache.view(-1, hidden), step.slot_mapping, k[step.valid])
        torch_npu.npu_scatter_nd_update_(self.v_cache.view(-1, hidden), step.slot_mapping, v[step.valid])
        if q.shape[1] > 1:
            return self._prefill(q, step)
        return self._decode(q, step)

    def _prefill(self, q: torch.Tensor, step: Step) -> torch.Tensor:
        """Several new tokens per sequence, after ``kv_len`` cached ones: bottom-right causal."""
        out, _ = torch_npu.npu_fused_infer_attention_score(
            q, self.k_cache, self.v_cache,
            atten_mask=CAUSAL_MASK,
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
        """One new token per sequence: it sees the whole cache, no mask needed."""
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
