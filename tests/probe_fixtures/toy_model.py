"""A toy decoder whose layers write their K/V cache through torch_npu and attend over it.

``Runner.kv_len`` is the number of cached tokens. The correct model advances it once per step, after
all layers; the buggy one advances it inside each layer (KVL305's runtime signature, KVL505), so
layer l of a step writes l * tokens positions further than layer 0.
"""

from __future__ import annotations

import torch
from torch import nn

B, NQ, NKV, D, CAPACITY = 2, 4, 2, 16, 64
TEMPLATE = torch.ones(2048, 2048, dtype=torch.bool).triu(1)


class Runner:
    def __init__(self) -> None:
        self.kv_len = 0


class Layer(nn.Module):
    def __init__(self, torch_npu, runner: Runner, advance_inside: bool, in_place: bool) -> None:
        super().__init__()
        self.torch_npu, self.runner = torch_npu, runner
        self.advance_inside, self.in_place = advance_inside, in_place
        self.q, self.k, self.v = (nn.Linear(D, heads * D) for heads in (NQ, NKV, NKV))
        self.k_cache = torch.zeros(B, NKV, CAPACITY, D)
        self.v_cache = torch.zeros(B, NKV, CAPACITY, D)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        tokens = x.shape[1]
        q, k, v = (proj(x).unflatten(-1, (-1, D)).transpose(1, 2) for proj in (self.q, self.k, self.v))
        start = torch.full((B,), self.runner.kv_len)
        if self.in_place:
            self.torch_npu.scatter_update_(self.k_cache, start, k, -2)  # k write
            self.torch_npu.scatter_update_(self.v_cache, start, v, -2)  # v write
        else:
            self.k_cache = self.torch_npu.scatter_update(self.k_cache, start, k, -2)  # k write, out of place
            self.v_cache = self.torch_npu.scatter_update(self.v_cache, start, v, -2)  # v write, out of place
        if self.advance_inside:
            self.runner.kv_len += tokens
        out, _ = self.torch_npu.npu_fused_infer_attention_score(
            q, self.k_cache, self.v_cache, num_heads=NQ, num_key_value_heads=NKV, input_layout="BNSD",
            scale=D**-0.5, actual_seq_lengths_kv=[int(start[0]) + tokens] * B,
            sparse_mode=3 if tokens > 1 else 0, atten_mask=TEMPLATE if tokens > 1 else None,
        )
        return x + out.transpose(1, 2).flatten(-2)[..., :D]


class Model(nn.Module):
    def __init__(self, torch_npu, layers: int = 3, advance_inside: bool = False, in_place: bool = True) -> None:
        super().__init__()
        self.runner = Runner()
        self.advance_inside = advance_inside
        self.layers = nn.ModuleList(Layer(torch_npu, self.runner, advance_inside, in_place) for _ in range(layers))

    def step(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        if not self.advance_inside:
            self.runner.kv_len += x.shape[1]
        return x


def generate(model: Model, prompt_tokens: int = 3, decode_steps: int = 3) -> torch.Tensor:
    torch.manual_seed(0)
    with torch.no_grad():
        x = model.step(torch.randn(B, prompt_tokens, D))
        for _ in range(decode_steps):
            x = model.step(x[:, -1:])
    return x
