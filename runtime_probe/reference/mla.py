"""MLA preprocessing: ``npu_mla_prolog_v3`` (unquantised) (``docs/operators/sparse_and_mla.md``,
``docs/semantics.md#sem-16``).

For hidden states ``x`` (``[T, He]`` or ``[B, S, He]``), in float32:

- ``c_q = RMSNorm(x @ W_dq)``; ``q = c_q @ W_uq_qr`` split per head into ``q_nope (D)`` and ``q_pe (Dr)``;
  ``query = q_nope @ W_uk[n]`` per head (``[.., N, Hckv]``), ``query_rope = rope(q_pe)``;
- ``kv = x @ W_dkv_kr``; ``c_kv = RMSNorm(kv[:Hckv])`` goes to ``kv_cache``, ``rope(kv[Hckv:])`` to
  ``kr_cache``, at ``cache_index`` (a slot per token), ND (``PA_BSND``) or NZ (``PA_NZ``);
- ``rope`` is interleave-half: the even positions, then the odd ones, rotated by halves
  (``npu_interleave_rope``'s formula) with ``rope_cos`` / ``rope_sin`` per token.
"""

from __future__ import annotations

import torch
from kvlint.runtime_probe.reference.cache_writes import _write
from kvlint.runtime_probe.reference.norms import rms_norm
from kvlint.runtime_probe.reference.paged import slot_rows
from kvlint.runtime_probe.reference.rope import rotate_half

MLA_CACHE_MODES = ("PA_BSND", "PA_NZ")


def _interleave_half(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """``x [T, N, Dr]`` with ``cos`` / ``sin`` ``[T, Dr]``."""
    q = torch.cat([x[..., ::2], x[..., 1::2]], dim=-1)
    return q * cos.float().unsqueeze(-2) + rotate_half(q) * sin.float().unsqueeze(-2)


@torch.no_grad()
def mla_prolog_v3(token_x: torch.Tensor, weight_dq: torch.Tensor, weight_uq_qr: torch.Tensor, weight_uk: torch.Tensor,
                  weight_dkv_kr: torch.Tensor, rmsnorm_gamma_cq: torch.Tensor, rmsnorm_gamma_ckv: torch.Tensor,
                  rope_sin: torch.Tensor, rope_cos: torch.Tensor, kv_cache: torch.Tensor, kr_cache: torch.Tensor, *,
                  cache_index: torch.Tensor | None = None, rmsnorm_epsilon_cq: float = 1e-5,
                  rmsnorm_epsilon_ckv: float = 1e-5, cache_mode: str = "PA_BSND",
                  query_norm_flag: bool = False) -> tuple[torch.Tensor, ...]:  # fmt: skip
    """-> ``(query, query_rope, dequant_scale_q_nope (empty), query_norm (empty unless query_norm_flag),
    dequant_scale_q_norm (empty))``; the caches are written in place."""
    op = "npu_mla_prolog_v3"
    if cache_mode not in MLA_CACHE_MODES:
        raise NotImplementedError(f"{op}: cache_mode={cache_mode!r} is not implemented ({', '.join(MLA_CACHE_MODES)})")
    if cache_index is None:
        raise ValueError(f"{op}: cache_index is required with cache_mode={cache_mode!r}")
    lead = token_x.shape[:-1]
    x = token_x.reshape(-1, token_x.shape[-1]).float()
    heads, nope, latent = weight_uk.shape
    q_norm, _ = rms_norm(x @ weight_dq.float(), rmsnorm_gamma_cq, rmsnorm_epsilon_cq)
    q = (q_norm @ weight_uq_qr.float()).view(x.shape[0], heads, -1)
    rope = q.shape[-1] - nope
    cos, sin = rope_cos.reshape(-1, rope), rope_sin.reshape(-1, rope)
    query = torch.einsum("tnd,ndc->tnc", q[..., :nope], weight_uk.float())
    query_rope = _interleave_half(q[..., nope:], cos, sin)
    kv = x @ weight_dkv_kr.float()
    c_kv, _ = rms_norm(kv[:, :latent], rmsnorm_gamma_ckv, rmsnorm_epsilon_ckv)
    k_rope = _interleave_half(kv[:, None, latent:], cos, sin)
    nz = cache_mode == "PA_NZ"
    for cache, values, name in ((kv_cache, c_kv, "kv_cache"), (kr_cache, k_rope, "kr_cache")):
        _write(slot_rows(cache, values.shape[-1], nz=nz, name=name), cache_index, values.reshape(x.shape[0], -1), name)
    dtype = weight_uk.dtype
    empty = token_x.new_empty(0, dtype=torch.float32)
    norm_out = q_norm.to(weight_uq_qr.dtype).reshape(*lead, -1) if query_norm_flag else token_x.new_empty(0, dtype=weight_uq_qr.dtype)
    return (query.to(dtype).reshape(*lead, heads, latent), query_rope.to(torch.bfloat16).reshape(*lead, heads, rope),
            empty, norm_out, empty.clone())  # fmt: skip
