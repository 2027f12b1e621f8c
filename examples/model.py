"""The parts of the example model that call no NPU operator, shared by ``run.py`` and ``buggy/*.py``.

A small decoder-only transformer (GQA, RoPE, RMSNorm, SwiGLU MLP) with seeded random weights; the
runner that owns the paged KV cache's lengths (``kv_len``, advanced after each forward) and recomputes
the slot mapping every step; and the harness that generates tokens, checks the results and prints the
KV budget. Each example file brings its own attention layer (the cache writes and the fused-attention
calls), so that everything the linter needs to see is in that one file.

Paged cache layout, shared by every example: sequence ``b`` owns blocks ``[b * M, (b + 1) * M)`` with
``M = Config.blocks_per_seq``, so its block-table row is ``b * M + arange(M)`` and its slots start at the
per-batch offset ``b * M * block_size``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import nn

from kvlint.budget import formulas as budget

PASS, FAIL = "PASS", "FAIL"


@dataclass(frozen=True)
class Config:
    """Model and cache geometry. ``block_size`` 128 is the smallest that FIA accepts for prefill."""

    vocab: int = 256
    layers: int = 2
    q_heads: int = 8
    kv_heads: int = 2
    head_dim: int = 32
    ffn: int = 512
    block_size: int = 128
    blocks_per_seq: int = 2
    rope_theta: float = 10000.0
    dtype: torch.dtype = torch.float16
    seed: int = 0

    @property
    def hidden(self) -> int:
        return self.q_heads * self.head_dim

    @property
    def kv_hidden(self) -> int:
        return self.kv_heads * self.head_dim

    @property
    def scale(self) -> float:
        return 1.0 / math.sqrt(self.head_dim)


@dataclass
class Step:
    """What the runner hands every layer for one forward: the same for all layers of the step."""

    q_len: torch.Tensor
    """New tokens per sequence, int32 ``[B]`` (rows of the padded batch beyond it are padding)."""
    kv_len: torch.Tensor
    """Tokens already in the cache per sequence, int32 ``[B]``: the runner's tensor, read-only here."""
    seq_offsets: torch.Tensor
    """First cache slot of each sequence (the per-batch offset), int32 ``[B]``."""
    valid: torch.Tensor
    """``[B, S]`` bool, True for real tokens of the padded batch."""
    slot_mapping: torch.Tensor
    """Cache slot of each valid token, int32 ``[T, 1]`` (rows of ``valid``, in order)."""
    q_lens: list[int]
    """``q_len`` as host ints (FIA ``actual_seq_lengths``)."""
    kv_lens: list[int]
    """Cache length per sequence after this step's writes (FIA ``actual_seq_lengths_kv``)."""


# ------------------------------------------------------------------------------------------- model


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x32 = x.float()
        return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype) * self.weight


def apply_rope(x: torch.Tensor, positions: torch.Tensor, theta: float) -> torch.Tensor:
    """Rotary embedding (rotate-half form) of ``x [B, S, N, D]`` at absolute ``positions [B, S]``."""
    half = x.shape[-1] // 2
    freqs = theta ** (-torch.arange(half, dtype=torch.float32) / half)
    angles = positions.float()[..., None] * freqs  # [B, S, D/2]
    cos, sin = angles.cos()[:, :, None, :], angles.sin()[:, :, None, :]
    x1, x2 = x.float()[..., :half], x.float()[..., half:]
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1).to(x.dtype)


def dense_causal_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cfg: Config) -> torch.Tensor:
    """Plain PyTorch causal GQA attention over one whole sequence, in float32: the golden model.

    ``q [B, S, Nq*D]``, ``k``/``v [B, S, Nkv*D]`` (BSH) -> ``[B, S, Nq*D]``. Query head ``n`` reads KV head
    ``n // (Nq / Nkv)``.
    """
    b, s, _ = q.shape
    group = cfg.q_heads // cfg.kv_heads
    qh = q.float().view(b, s, cfg.q_heads, cfg.head_dim).transpose(1, 2)
    kh = k.float().view(b, s, cfg.kv_heads, cfg.head_dim).transpose(1, 2).repeat_interleave(group, dim=1)
    vh = v.float().view(b, s, cfg.kv_heads, cfg.head_dim).transpose(1, 2).repeat_interleave(group, dim=1)
    scores = (qh @ kh.transpose(-1, -2)) * cfg.scale
    future = torch.ones(s, s, dtype=torch.bool).triu(diagonal=1)
    probs = scores.masked_fill(future, float("-inf")).softmax(dim=-1)
    return (probs @ vh).transpose(1, 2).reshape(b, s, cfg.hidden).to(q.dtype)


class DecoderLayer(nn.Module):
    """Pre-norm block; ``attention`` (from the example file) writes the cache and calls the operator."""

    def __init__(self, cfg: Config, attention: nn.Module) -> None:
        super().__init__()
        self.cfg = cfg
        self.attn_norm = RMSNorm(cfg.hidden)
        self.q_proj = nn.Linear(cfg.hidden, cfg.hidden, bias=False)
        self.k_proj = nn.Linear(cfg.hidden, cfg.kv_hidden, bias=False)
        self.v_proj = nn.Linear(cfg.hidden, cfg.kv_hidden, bias=False)
        self.o_proj = nn.Linear(cfg.hidden, cfg.hidden, bias=False)
        self.mlp_norm = RMSNorm(cfg.hidden)
        self.gate_up = nn.Linear(cfg.hidden, 2 * cfg.ffn, bias=False)
        self.down = nn.Linear(cfg.ffn, cfg.hidden, bias=False)
        self.attention = attention

    def forward(self, x: torch.Tensor, positions: torch.Tensor, step: Step | None) -> torch.Tensor:
        """``step=None`` runs the cache-free dense causal attention instead of the example's layer."""
        cfg, (b, s, _) = self.cfg, x.shape
        h = self.attn_norm(x)
        q = apply_rope(self.q_proj(h).view(b, s, cfg.q_heads, cfg.head_dim), positions, cfg.rope_theta)
        k = apply_rope(self.k_proj(h).view(b, s, cfg.kv_heads, cfg.head_dim), positions, cfg.rope_theta)
        q, k, v = q.reshape(b, s, cfg.hidden), k.reshape(b, s, cfg.kv_hidden), self.v_proj(h)
        o = dense_causal_attention(q, k, v, cfg) if step is None else self.attention(q, k, v, step)
        x = x + self.o_proj(o)
        gate, up = self.gate_up(self.mlp_norm(x)).chunk(2, dim=-1)
        return x + self.down(nn.functional.silu(gate) * up)


class DecoderModel(nn.Module):
    """Embedding, ``cfg.layers`` decoder layers, final norm and LM head; weights seeded by ``cfg.seed``."""

    def __init__(self, cfg: Config, make_attention: Callable[[], nn.Module]) -> None:
        super().__init__()
        torch.manual_seed(cfg.seed)
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab, cfg.hidden)
        self.layers = nn.ModuleList(DecoderLayer(cfg, make_attention()) for _ in range(cfg.layers))
        self.norm = RMSNorm(cfg.hidden)
        self.lm_head = nn.Linear(cfg.hidden, cfg.vocab, bias=False)
        self.to(cfg.dtype)  # floating-point weights and caches only; block tables keep their dtype

    def forward(self, tokens: torch.Tensor, positions: torch.Tensor, step: Step | None) -> torch.Tensor:
        """Logits ``[B, S, vocab]`` (float32) for ``tokens [B, S]`` at ``positions [B, S]``."""
        x = self.embed(tokens)
        for layer in self.layers:
            x = layer(x, positions, step)
        return self.lm_head(self.norm(x)).float()

    def full_causal_forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """The whole sequence at once with dense causal attention and no cache: the golden logits."""
        positions = torch.arange(tokens.shape[1]).expand_as(tokens)
        return self(tokens, positions, None)


# ------------------------------------------------------------------------------------------ runner


class PagedRunner:
    """Owns ``kv_len``: builds each step's ``Step`` (slot mapping from ``kv_len`` plus the per-batch
    offset), runs the model, and advances ``kv_len`` after the forward, once for all layers."""

    def __init__(self, model: DecoderModel, batch: int) -> None:
        cfg = model.cfg
        self.model = model
        self.seq_offsets = torch.arange(batch, dtype=torch.int32) * (cfg.blocks_per_seq * cfg.block_size)
        self.kv_len = torch.zeros(batch, dtype=torch.int32)

    def reset(self) -> None:
        """Forget every sequence (the cache contents are simply overwritten later)."""
        self.kv_len.zero_()

    def forward(self, tokens: torch.Tensor, q_len: torch.Tensor) -> torch.Tensor:
        """Logits for ``tokens [B, S]`` (right-padded; ``q_len [B]`` real tokens per row)."""
        positions = self.kv_len[:, None] + torch.arange(tokens.shape[1], dtype=torch.int32)
        valid = torch.arange(tokens.shape[1]) < q_len[:, None]
        slot_mapping = (self.seq_offsets[:, None] + positions)[valid].view(-1, 1)
        step = Step(
            q_len=q_len,
            kv_len=self.kv_len,
            seq_offsets=self.seq_offsets,
            valid=valid,
            slot_mapping=slot_mapping,
            q_lens=q_len.tolist(),
            kv_lens=(self.kv_len + q_len).tolist(),
        )
        logits = self.model(tokens, positions, step)
        self.kv_len += q_len
        return logits


# ----------------------------------------------------------------------------------------- harness


@dataclass
class Generation:
    """Greedy generation of a batch: its prompts, the new tokens and the logits each step produced."""

    prompts: list[list[int]]
    new_tokens: list[list[int]] = field(default_factory=list)
    prefill_logits: torch.Tensor | None = None
    """``[B, S, vocab]`` of the one-shot prefill (right-padded)."""
    step_logits: list[torch.Tensor] = field(default_factory=list)
    """``[B, vocab]`` per generated token: the logits it was chosen from."""


def install_emulator() -> None:
    """Stand in for torch_npu with kvlint's CPU emulator, and say so (call when it is not installed)."""
    from kvlint.runtime_probe import emulator

    emulator.install()
    print("torch_npu is not installed: using kvlint's CPU emulator (kvlint.runtime_probe.emulator)")


def make_prompts(cfg: Config, lengths: tuple[int, ...] = (12, 7, 5)) -> list[list[int]]:
    """Seeded random prompts of different lengths."""
    generator = torch.Generator().manual_seed(cfg.seed + 1)
    return [torch.randint(cfg.vocab, (n,), generator=generator).tolist() for n in lengths]


def pad(rows: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded ``[B, S]`` token tensor and int32 ``[B]`` lengths."""
    width = max(len(row) for row in rows)
    tokens = torch.tensor([row + [0] * (width - len(row)) for row in rows])
    return tokens, torch.tensor([len(row) for row in rows], dtype=torch.int32)


def last_logits(logits: torch.Tensor, q_len: torch.Tensor) -> torch.Tensor:
    """``[B, vocab]``: each row's logits at its last real token."""
    return logits[torch.arange(logits.shape[0]), q_len.long() - 1]


def generate(runner: PagedRunner, prompts: list[list[int]], new_tokens: int) -> Generation:
    """One-shot prefill of the padded batch, then ``new_tokens - 1`` single-token decode steps."""
    runner.reset()
    result = Generation(prompts=prompts)
    tokens, q_len = pad(prompts)
    result.prefill_logits = runner.forward(tokens, q_len)
    logits = last_logits(result.prefill_logits, q_len)
    for index in range(new_tokens):
        result.step_logits.append(logits)
        next_tokens = logits.argmax(dim=-1)
        result.new_tokens.append(next_tokens.tolist())
        if index + 1 < new_tokens:
            logits = runner.forward(next_tokens[:, None], torch.ones_like(q_len))[:, 0]
    return result


def report(name: str, error: float, tolerance: float) -> bool:
    """Print a PASS/FAIL line for a max-abs-error comparison; True when it passed."""
    ok = error <= tolerance
    print(f"{PASS if ok else FAIL} {name} (max abs error {error:.2e}, tolerance {tolerance:.0e})")
    return ok


LOGIT_TOLERANCE = 2e-2
"""float16 activations: the paths differ only in the order of roundings (measured ~1e-3)."""


def check_decode_matches_full_forward(model: DecoderModel, gen: Generation) -> bool:
    """The logits of every generated token equal those of a full causal forward over the same tokens."""
    error = 0.0
    for b, prompt in enumerate(gen.prompts):
        sequence = prompt + [step[b] for step in gen.new_tokens[:-1]]
        golden = model.full_causal_forward(torch.tensor([sequence]))[0]
        for index, logits in enumerate(gen.step_logits):
            error = max(error, (logits[b] - golden[len(prompt) - 1 + index]).abs().max().item())
    return report("incremental decode == full causal forward", error, LOGIT_TOLERANCE)


def check_chunked_prefill(runner: PagedRunner, gen: Generation, first_chunk: int = 4) -> bool:
    """Prefill in two chunks (the second reads the first from the cache) equals the one-shot prefill."""
    assert gen.prefill_logits is not None
    runner.reset()
    tokens, q_len = pad(gen.prompts)
    first = runner.forward(tokens[:, :first_chunk], torch.full_like(q_len, first_chunk))
    second = runner.forward(tokens[:, first_chunk:], q_len - first_chunk)
    error = (first - gen.prefill_logits[:, :first_chunk]).abs().max().item()
    for b, n in enumerate(q_len.tolist()):
        error = max(error, (second[b, : n - first_chunk] - gen.prefill_logits[b, first_chunk:n]).abs().max().item())
    return report("chunked prefill == one-shot prefill", error, LOGIT_TOLERANCE)


BUDGET_DTYPES = {torch.float16: "fp16", torch.bfloat16: "bf16", torch.int8: "int8"}


def print_budget(model: DecoderModel, gen: Generation, batch: int) -> None:
    """KV bytes per token and for this run, through kvlint.budget.formulas (the code behind kvlint-budget), next to what the caches allocate."""
    cfg = model.cfg
    geometry = budget.CacheGeometry(
        layers=cfg.layers, dtype=BUDGET_DTYPES[cfg.dtype], kv_heads=cfg.kv_heads, head_dim=cfg.head_dim,
        q_heads=cfg.q_heads,
    )
    per_token = budget.kv_bytes_per_token(geometry)
    lengths = [len(prompt) + len(gen.new_tokens) - 1 for prompt in gen.prompts]
    used = sum(budget.sequence_bytes(per_token, n) for n in lengths)
    blocks = sum(budget.paged_blocks(n, cfg.block_size) for n in lengths)
    paged = blocks * budget.paged_block_bytes(per_token, cfg.block_size)
    allocated = sum(buf.numel() * buf.element_size() for name, buf in model.named_buffers() if "cache" in name)
    print(f"KV cache: {per_token} bytes per token = {cfg.layers} layers x 2 (K, V) x {cfg.kv_heads} KV heads "
          f"x {cfg.head_dim} x {geometry.dtype_bytes} bytes ({geometry.dtype})")
    print(f"KV cache for this run: {sum(lengths)} tokens in {len(lengths)} sequences = {used} bytes; "
          f"paged: {blocks} of {batch * cfg.blocks_per_seq} blocks of {cfg.block_size} tokens in use = {paged} "
          f"bytes (with their block-table entries); the cache tensors hold {allocated} bytes")


def run_example(make_attention: Callable[[Config, int], nn.Module], new_tokens: int = 6) -> bool:
    """Build the model with the example's attention layer, generate, check and print; True if all PASS."""
    started = time.perf_counter()
    cfg = Config()
    prompts = make_prompts(cfg)
    batch = len(prompts)
    with torch.inference_mode():
        model = DecoderModel(cfg, lambda: make_attention(cfg, batch))
        runner = PagedRunner(model, batch)
        gen = generate(runner, prompts, new_tokens)
        for b, prompt in enumerate(prompts):
            print(f"sequence {b}: prompt of {len(prompt)} tokens -> generated {[step[b] for step in gen.new_tokens]}")
        ok = check_decode_matches_full_forward(model, gen)
        ok = check_chunked_prefill(runner, gen) and ok
        print_budget(model, gen, batch)
    print(f"done in {time.perf_counter() - started:.2f}s")
    return ok
