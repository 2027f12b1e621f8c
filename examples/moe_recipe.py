"""A small MoE decoder written the way the public Ascend inference recipes are, run on a CPU.

The model (2 layers, 4 query / 2 KV heads of 16, 4 experts choosing 2, bfloat16) and its runner use what an
Ascend recipe uses: ``torch.npu.set_device``, ``.npu()`` and ``device="npu"``, torchair's namespace switch
(``torch.ops.npu`` eagerly, ``torchair.ops`` in graph mode, where every step is compiled with
``torchair.get_npu_backend()``), ``npu_rms_norm`` / ``npu_add_rms_norm``, ``npu_apply_rotary_pos_emb``, MoE
gating and routing (``npu_moe_gating_top_k_softmax``, ``npu_moe_init_routing_v2``, ``npu_grouped_matmul``,
``npu_swiglu``, ``npu_moe_finalize_routing``), an NZ paged KV cache (``npu_format_cast(..., 29)``) written
with ``npu_scatter_pa_kv_cache`` (layer 0) and ``_npu_reshape_and_cache`` (layer 1), and FIA v2 in TND
over the cache's 5-D NZ view. Then it checks prefill and every decode step against a plain-PyTorch
implementation of the same model with the same weights (``reference_logits``).

    KVLINT_EMULATE=1 python examples/moe_recipe.py            # eager
    KVLINT_EMULATE=1 python examples/moe_recipe.py --graph    # compiled through torchair
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass

import torch
from torch import nn

try:
    import torch_npu
    import torchair as tng
except ImportError:
    sys.exit("examples/moe_recipe.py needs torch_npu: run it on an NPU, or on a CPU with KVLINT_EMULATE=1")

NZ = 29
"""ACL_FORMAT_FRACTAL_NZ."""
CAUSAL_MASK = torch.triu(torch.ones(2048, 2048, dtype=torch.bool), diagonal=1)


@dataclass(frozen=True)
class Config:
    vocab: int = 128
    hidden: int = 64
    heads: int = 4
    kv_heads: int = 2
    head_dim: int = 16
    experts: int = 4
    top_k: int = 2
    expert_hidden: int = 32
    layers: int = 2
    block_size: int = 16
    blocks: int = 16
    theta: float = 10000.0
    eps: float = 1e-6
    dtype: torch.dtype = torch.bfloat16


class Attention(nn.Module):
    def __init__(self, cfg: Config, layer: int, fa_ops: object) -> None:
        super().__init__()
        self.cfg, self.layer, self.fa_ops = cfg, layer, fa_ops
        self.qkv = nn.Linear(cfg.hidden, (cfg.heads + 2 * cfg.kv_heads) * cfg.head_dim, bias=False)
        self.o_proj = nn.Linear(cfg.heads * cfg.head_dim, cfg.hidden, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, caches: tuple[torch.Tensor, torch.Tensor],
                meta: dict[str, object]) -> torch.Tensor:  # fmt: skip
        cfg = self.cfg
        q, k, v = self.qkv(x).split([cfg.heads * cfg.head_dim, cfg.kv_heads * cfg.head_dim, cfg.kv_heads * cfg.head_dim], -1)
        q = q.reshape(-1, cfg.heads, cfg.head_dim).contiguous()
        k = k.reshape(-1, cfg.kv_heads, cfg.head_dim).contiguous()
        v = v.reshape(-1, cfg.kv_heads, cfg.head_dim).contiguous()
        q, k = torch_npu.npu_apply_rotary_pos_emb(q, k, cos, sin, layout="TND")
        key_cache, value_cache = caches
        if self.layer % 2 == 0:
            torch_npu.npu_scatter_pa_kv_cache(k, v, key_cache, value_cache, meta["slot_mapping"])
        else:
            torch_npu._npu_reshape_and_cache(k, v, key_cache, value_cache, meta["slot_mapping"])
        nz_view = (cfg.blocks, cfg.kv_heads, cfg.head_dim // 16, cfg.block_size, 16)
        out, _ = self.fa_ops.npu_fused_infer_attention_score_v2(
            q, key_cache.view(nz_view), value_cache.view(nz_view),
            num_query_heads=cfg.heads, num_key_value_heads=cfg.kv_heads, input_layout="TND",
            softmax_scale=cfg.head_dim**-0.5, block_table=meta["block_table"], block_size=cfg.block_size,
            actual_seq_qlen=meta["actual_seq_qlen"], actual_seq_kvlen=meta["actual_seq_kvlen"],
            sparse_mode=meta["sparse_mode"], atten_mask=meta["atten_mask"],
        )  # fmt: skip
        return self.o_proj(out.reshape(-1, cfg.heads * cfg.head_dim))


class MoE(nn.Module):
    def __init__(self, cfg: Config) -> None:
        super().__init__()
        self.cfg = cfg
        self.gate = nn.Linear(cfg.hidden, cfg.experts, bias=False)
        self.w13 = nn.Parameter(torch.empty(cfg.experts, cfg.hidden, 2 * cfg.expert_hidden))
        self.w2 = nn.Parameter(torch.empty(cfg.experts, cfg.expert_hidden, cfg.hidden))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        cfg = self.cfg
        weights, experts, _ = torch_npu.npu_moe_gating_top_k_softmax(self.gate(x), None, k=cfg.top_k)
        weights = weights / weights.sum(-1, keepdim=True)
        expanded, expanded_row_idx, tokens_per_expert, _ = torch_npu.npu_moe_init_routing_v2(
            x, experts, active_num=x.shape[0] * cfg.top_k, expert_num=cfg.experts, expert_tokens_num_type=1,
            expert_tokens_num_flag=True, active_expert_range=[0, cfg.experts],
        )  # fmt: skip
        gmm = {"group_list": tokens_per_expert, "split_item": 3, "group_type": 0, "group_list_type": 1}
        up = torch_npu.npu_grouped_matmul([expanded], [self.w13], **gmm)[0]
        down = torch_npu.npu_grouped_matmul([torch_npu.npu_swiglu(up)], [self.w2], **gmm)[0]
        return torch_npu.npu_moe_finalize_routing(down, skip1=None, skip2=None, bias=None, scales=weights.to(down.dtype),
                                                  expanded_src_to_dst_row=expanded_row_idx,
                                                  export_for_source_row=None, drop_pad_mode=2)  # fmt: skip


class Layer(nn.Module):
    def __init__(self, cfg: Config, index: int, fa_ops: object) -> None:
        super().__init__()
        self.cfg = cfg
        self.input_norm = nn.Parameter(torch.ones(cfg.hidden))
        self.post_norm = nn.Parameter(torch.ones(cfg.hidden))
        self.attn = Attention(cfg, index, fa_ops)
        self.moe = MoE(cfg)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, caches: tuple[torch.Tensor, torch.Tensor],
                meta: dict[str, object]) -> torch.Tensor:  # fmt: skip
        h = torch_npu.npu_rms_norm(x, self.input_norm, self.cfg.eps)[0]
        h = self.attn(h, cos, sin, caches, meta)
        normed, _, x = torch_npu.npu_add_rms_norm(x, h, self.post_norm, self.cfg.eps)
        return x + self.moe(normed)


class Model(nn.Module):
    def __init__(self, cfg: Config, fa_ops: object) -> None:
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab, cfg.hidden)
        self.layers = nn.ModuleList(Layer(cfg, i, fa_ops) for i in range(cfg.layers))
        self.norm = nn.Parameter(torch.ones(cfg.hidden))
        self.lm_head = nn.Linear(cfg.hidden, cfg.vocab, bias=False)

    def forward(self, tokens: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, caches: list[tuple[torch.Tensor, torch.Tensor]],
                meta: dict[str, object]) -> torch.Tensor:  # fmt: skip
        x = self.embed(tokens)
        for layer, layer_caches in zip(self.layers, caches):
            x = layer(x, cos, sin, layer_caches, meta)
        return self.lm_head(torch_npu.npu_rms_norm(x, self.norm, self.cfg.eps)[0])


def rope_tables(cfg: Config, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``[T, 1, D]`` cos/sin for rotate-half RoPE (the TND layout of ``npu_apply_rotary_pos_emb``)."""
    inverse = 1.0 / cfg.theta ** (torch.arange(0, cfg.head_dim, 2, dtype=torch.float32, device="npu") / cfg.head_dim)
    angles = positions.float()[:, None] * inverse[None]
    angles = torch.cat([angles, angles], -1)[:, None]
    return angles.cos().to(cfg.dtype), angles.sin().to(cfg.dtype)


def init_weights(model: Model, seed: int = 0) -> None:
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "norm" in name:
                parameter.copy_(1 + 0.1 * torch.randn(parameter.shape, generator=generator))
            else:
                parameter.copy_(torch.randn(parameter.shape, generator=generator) / math.sqrt(parameter.shape[-2 if parameter.dim() > 1 else 0]))


class Runner:
    """The recipe's executor: device, NZ paged caches, block table, per-step metadata."""

    def __init__(self, cfg: Config, graph: bool, batch: int) -> None:
        torch.npu.set_device(0)
        self.cfg, self.batch = cfg, batch
        self.fa_ops = tng.ops if graph else torch.ops.npu  # the recipes' namespace switch
        self.model = Model(cfg, self.fa_ops)
        init_weights(self.model)
        self.model = self.model.to(cfg.dtype).npu().eval()
        shape = (cfg.blocks, cfg.kv_heads * cfg.head_dim // 16, cfg.block_size, 16)
        self.caches = [tuple(torch_npu.npu_format_cast(torch.zeros(shape, dtype=cfg.dtype, device="npu"), NZ)
                             for _ in range(2)) for _ in range(cfg.layers)]  # fmt: skip
        per_sequence = cfg.blocks // batch
        order = torch.randperm(cfg.blocks, generator=torch.Generator().manual_seed(1))
        self.block_table = order.view(batch, per_sequence).to(torch.int32).npu()
        self.forward = self.model
        if graph:
            self.forward = torch.compile(self.model, backend=tng.get_npu_backend(compiler_config=tng.CompilerConfig()),
                                         dynamic=True, fullgraph=True)  # fmt: skip

    def _meta(self, positions: list[list[int]], kv_lens: list[int], prefill: bool) -> dict[str, object]:
        table = self.block_table.cpu()
        slots = [int(table[b, p // self.cfg.block_size]) * self.cfg.block_size + p % self.cfg.block_size
                 for b, rows in enumerate(positions) for p in rows]  # fmt: skip
        ends = torch.tensor([len(rows) for rows in positions]).cumsum(0).tolist()
        lengths: object = ends, kv_lens
        if self.fa_ops is not torch.ops.npu:  # torchair's attention takes its lengths as tensors
            lengths = torch.tensor(ends, device="npu"), torch.tensor(kv_lens, device="npu")
        return {"slot_mapping": torch.tensor(slots, dtype=torch.int32, device="npu"), "block_table": self.block_table,
                "actual_seq_qlen": lengths[0], "actual_seq_kvlen": lengths[1],
                "sparse_mode": 3 if prefill else 0, "atten_mask": CAUSAL_MASK.npu() if prefill else None}  # fmt: skip

    @torch.inference_mode()
    def step(self, tokens: list[list[int]], starts: list[int]) -> torch.Tensor:
        """Logits of every new token, ``[T, vocab]``; sequence b's tokens sit at positions ``starts[b]`` on."""
        positions = [list(range(start, start + len(row))) for row, start in zip(tokens, starts)]
        flat = torch.tensor([t for row in tokens for t in row], dtype=torch.long).npu()
        cos, sin = rope_tables(self.cfg, torch.tensor([p for rows in positions for p in rows], device="npu"))
        prefill = any(len(row) > 1 for row in tokens)
        meta = self._meta(positions, [start + len(row) for row, start in zip(tokens, starts)], prefill)
        logits = self.forward(flat, cos, sin, self.caches, meta)
        torch.npu.synchronize()
        return logits.float()


def reference_logits(model: Model, sequence: list[int]) -> torch.Tensor:
    """The same model in plain PyTorch over a whole sequence: no cache, no NPU operator."""
    cfg = model.cfg
    group = cfg.heads // cfg.kv_heads
    with torch.no_grad():
        x = model.embed.weight.float()[torch.tensor(sequence)]
        positions = torch.arange(len(sequence))
        inverse = 1.0 / cfg.theta ** (torch.arange(0, cfg.head_dim, 2).float() / cfg.head_dim)
        angles = torch.cat([positions[:, None] * inverse] * 2, -1)
        cos, sin = angles.cos()[:, None].to(cfg.dtype).float(), angles.sin()[:, None].to(cfg.dtype).float()

        def rope(t: torch.Tensor) -> torch.Tensor:
            half = t.shape[-1] // 2
            return t * cos + torch.cat([-t[..., half:], t[..., :half]], -1) * sin

        def norm(t: torch.Tensor, weight: nn.Parameter) -> torch.Tensor:
            return torch.nn.functional.rms_norm(t, (cfg.hidden,), weight.float(), eps=cfg.eps)

        for layer in model.layers:
            attn, moe = layer.attn, layer.moe
            q, k, v = (norm(x, layer.input_norm) @ attn.qkv.weight.float().t()).split(
                [cfg.heads * cfg.head_dim, cfg.kv_heads * cfg.head_dim, cfg.kv_heads * cfg.head_dim], -1)  # fmt: skip
            q = rope(q.view(-1, cfg.heads, cfg.head_dim)).transpose(0, 1)
            k = rope(k.view(-1, cfg.kv_heads, cfg.head_dim)).transpose(0, 1).repeat_interleave(group, 0)
            v = v.view(-1, cfg.kv_heads, cfg.head_dim).transpose(0, 1).repeat_interleave(group, 0)
            out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, scale=cfg.head_dim**-0.5)
            x = x + out.transpose(0, 1).reshape(len(sequence), -1) @ attn.o_proj.weight.float().t()
            h = norm(x, layer.post_norm)
            probabilities = (h @ moe.gate.weight.float().t()).softmax(-1)
            top, chosen = probabilities.topk(cfg.top_k, -1)
            top = top / top.sum(-1, keepdim=True)
            mixed = torch.zeros_like(x)
            for token in range(len(sequence)):
                for weight, expert in zip(top[token], chosen[token]):
                    a, b = (h[token] @ moe.w13[expert].float()).chunk(2)
                    mixed[token] += weight * ((torch.nn.functional.silu(a) * b) @ moe.w2[expert].float())
            x = x + mixed
        return norm(x, model.norm) @ model.lm_head.weight.float().t()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--graph", action="store_true", help="compile every step with torchair.get_npu_backend()")
    parser.add_argument("--decode-steps", type=int, default=3)
    args = parser.parse_args(argv)
    prompts = [[5, 17, 90, 42, 7, 99, 23, 8, 64, 3, 11, 30], [40, 41, 42, 43, 44, 45, 46]]
    runner = Runner(Config(), args.graph, batch=len(prompts))
    mode = "graph (torchair)" if args.graph else "eager"
    print(f"examples/moe_recipe.py: {mode}, torch_npu {torch_npu.__version__}, device {torch.npu.get_device_name()}")
    logits = runner.step(prompts, [0] * len(prompts))
    sequences = [list(p) for p in prompts]
    rows = torch.tensor([len(p) for p in prompts]).cumsum(0) - 1
    per_step = [logits[rows]]
    for _ in range(args.decode_steps):
        for sequence, row in zip(sequences, per_step[-1]):
            sequence.append(int(row.argmax()))
        per_step.append(runner.step([[s[-1]] for s in sequences], [len(s) - 1 for s in sequences]))
    worst = 0.0
    for b, sequence in enumerate(sequences):
        want = reference_logits(runner.model, sequence)
        start = len(prompts[b]) - 1
        got = torch.stack([step[b] for step in per_step])
        worst = max(worst, float((got - want[start : start + len(per_step)]).abs().max()))
    scale = float(want.abs().max())
    ok = worst <= 0.02 * max(scale, 1.0)
    print(f"{'PASS' if ok else 'FAIL'} prefill + {args.decode_steps} decode steps == plain PyTorch forward of the same "
          f"model: max |logit diff| {worst:.3g} (logits up to {scale:.3g}, bfloat16)")  # fmt: skip
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
