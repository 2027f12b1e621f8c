"""The ATB attention operators vllm-ascend calls (``docs/operators/atb_attention.md``,
``docs/semantics.md#sem-15``): paged decode attention, self-attention over concatenated sequences with an
additive or a compressed causal mask, and split-fuse (chunked prefill) paged attention.

Each sequence is one ``online_softmax.BatchProblem``: the same memory-bounded attention as the FIA family.
Token-major tensors: ``query [tokens, heads, D]`` (or ``[tokens, heads * D]``); the paged caches are
``[blocks, block_size, kv_heads, D]`` or NZ (``paged.slot_rows``); results are written into ``out``.
The additive masks (0 = visible, -10000 = masked, ``atb-c7``) are added to the scaled scores.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from kvlint.runtime_probe.reference import batched_decode
from kvlint.runtime_probe.reference.attention_call import compute_dtype
from kvlint.runtime_probe.reference.masks import UNBOUNDED, Band
from kvlint.runtime_probe.reference.online_softmax import BatchProblem, attend
from kvlint.runtime_probe.reference.paged import slot_rows

FULL = Band(-UNBOUNDED, UNBOUNDED)


def _heads(x: torch.Tensor, heads: int, name: str) -> torch.Tensor:
    """``[tokens, heads, D]`` view of a token-major tensor (``[tokens, heads * D]`` accepted)."""
    if x.dim() == 2 and x.shape[1] % heads == 0:
        return x.view(x.shape[0], heads, -1)
    if x.dim() != 3 or x.shape[1] != heads:
        raise ValueError(f"{name} {tuple(x.shape)} is not [tokens, {heads}, D] or [tokens, {heads} * D]")
    return x


def _check_heads(heads: int, kv_heads: int, op: str) -> None:
    if heads <= 0 or kv_heads <= 0 or heads % kv_heads:
        raise ValueError(f"{op}: num_heads={heads} must be a positive multiple of num_kv_heads={kv_heads}")


def _lengths(lengths: torch.Tensor, name: str) -> list[int]:
    values = [int(n) for n in lengths.reshape(-1).tolist()]
    if any(n < 0 for n in values):
        raise ValueError(f"{name}={values} must not be negative")
    return values


def _rows(tensor: torch.Tensor, start: int, stop: int, dtype: torch.dtype) -> torch.Tensor:
    """Tokens [start, stop) of a ``[tokens, heads, D]`` tensor as ``(heads, stop - start, D)``."""
    return tensor[start:stop].transpose(0, 1).to(dtype)


def _solve(query: torch.Tensor, out: torch.Tensor, spans: list[tuple[int, int]], kv_lengths: list[int],
           read_kv: Callable[[int, int, int], tuple[torch.Tensor, torch.Tensor]], heads: int, kv_heads: int,
           scale: float, bands: list[Band], biases: list[torch.Tensor | None]) -> None:  # fmt: skip
    """Attention of every sequence b: its query rows ``spans[b]`` over its ``kv_lengths[b]`` keys."""
    dtype = compute_dtype(query.dtype)
    out_view = _heads(out, heads, "out")
    for b, ((start, stop), kv_len) in enumerate(zip(spans, kv_lengths)):
        result = torch.zeros((heads, stop - start, out_view.shape[-1]), dtype=dtype, device=query.device)
        problem = BatchProblem(
            read_query=lambda lo, hi, s=start: _rows(query, s + lo, s + hi, dtype),
            read_key=lambda lo, hi, b=b: read_kv(b, lo, hi)[0],
            read_value=lambda lo, hi, b=b: read_kv(b, lo, hi)[1],
            q_len=stop - start, kv_len=kv_len, heads=heads, kv_heads=kv_heads, scale=float(scale), band=bands[b],
            mask=None, pse=biases[b], sink=None,
        )  # fmt: skip
        attend(problem, result, None, dtype)
        out_view[start:stop] = result.transpose(0, 1).to(out.dtype)


@torch.no_grad()
def _paged_reader(key_cache: torch.Tensor, value_cache: torch.Tensor, block_table: torch.Tensor, key_dim: int,
                  value_dim: int, num_kv_heads: int, dtype: torch.dtype,
                  nz: bool) -> tuple[int, Callable[[int, int, int], tuple[torch.Tensor, torch.Tensor]]]:  # fmt: skip
    """(block size, reader of sequence ``b``'s tokens ``[start, stop)`` as ``[num_kv_heads, n, dim]`` K and V)
    of paged caches stored ND or NZ."""
    keys = slot_rows(key_cache, num_kv_heads * key_dim, nz=nz, name="key_cache")
    values = slot_rows(value_cache, num_kv_heads * value_dim, nz=nz, name="value_cache")
    table = block_table.long()

    def read(b: int, start: int, stop: int) -> tuple[torch.Tensor, torch.Tensor]:
        positions = torch.arange(start, stop, device=table.device)
        slots = table[b, positions // keys.block_size] * keys.block_size + positions % keys.block_size
        return tuple(rows.read(slots).view(len(slots), num_kv_heads, -1).transpose(0, 1).to(dtype)
                     for rows in (keys, values))  # fmt: skip

    return keys.block_size, read


def paged_attention(query: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor, num_kv_heads: int,
                    num_heads: int, scale_value: float, block_table: torch.Tensor, context_lens: torch.Tensor,
                    out: torch.Tensor, *, nz: bool = False) -> None:  # fmt: skip
    """``_npu_paged_attention``: one query token per sequence over its ``context_lens[b]`` cached tokens."""
    op = "_npu_paged_attention"
    _check_heads(num_heads, num_kv_heads, op)
    q = _heads(query, num_heads, "query")
    lengths = _lengths(context_lens, "context_lens")
    if len(lengths) != q.shape[0] or block_table.dim() != 2 or block_table.shape[0] < len(lengths):
        raise ValueError(f"{op}: {q.shape[0]} query tokens, {len(lengths)} context_lens and block_table "
                         f"{tuple(block_table.shape)} must describe the same sequences, one token each")  # fmt: skip
    value_dim = _heads(out, num_heads, "out").shape[-1]
    block_size, read = _paged_reader(key_cache, value_cache, block_table, q.shape[-1], value_dim, num_kv_heads,
                                     compute_dtype(query.dtype), nz)  # fmt: skip
    if any(n > block_table.shape[1] * block_size for n in lengths):
        raise ValueError(f"{op}: context_lens={lengths} exceed block_table's {block_table.shape[1]} blocks")

    if not nz and _decode_all(q, key_cache, value_cache, block_table, block_size, lengths, num_kv_heads,
                              float(scale_value), out):  # fmt: skip
        return
    spans = [(b, b + 1) for b in range(len(lengths))]
    _solve(q, out, spans, lengths, read, num_heads, num_kv_heads, scale_value, [FULL] * len(spans),
           [None] * len(spans))  # fmt: skip


def _decode_all(q: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor, block_table: torch.Tensor,
                block_size: int, lengths: list[int], kv_heads: int, scale: float, out: torch.Tensor) -> bool:  # fmt: skip
    """Every sequence at once (``batched_decode``) from ND caches; False when that path does not apply (another
    compute dtype, key and value head sizes that differ) or a result is not finite."""
    dtype = compute_dtype(q.dtype)
    out_view = _heads(out, q.shape[1], "out")
    if not batched_decode.available(q, dtype) or out_view.shape[-1] != q.shape[-1]:
        return False
    chosen = [b for b, n in enumerate(lengths) if n]
    if chosen:
        blocks = key_cache.shape[0]
        caches = [cache.view(blocks, block_size, kv_heads, -1).transpose(1, 2) for cache in (key_cache, value_cache)]
        query = q[chosen].to(dtype).view(len(chosen), kv_heads, q.shape[1] // kv_heads, -1)
        kv = batched_decode.PagedKV(*caches, block_table[chosen], block_size)
        result = batched_decode.attend(query, kv, [lengths[b] for b in chosen], scale)
        if result is None:
            return False
        out_view[chosen] = result[0].reshape(len(chosen), q.shape[1], -1).to(out.dtype)
    out_view[[b for b, n in enumerate(lengths) if not n]] = 0
    return True


def _sequence_spans(seq_len: torch.Tensor, tokens: int, op: str) -> list[tuple[int, int]]:
    lengths = _lengths(seq_len, "seq_len")
    ends = torch.tensor(lengths).cumsum(0).tolist() if lengths else []
    if not ends or ends[-1] > tokens:
        raise ValueError(f"{op}: seq_len={lengths} must sum to at most the {tokens} tokens of query")
    return list(zip([0, *ends[:-1]], ends))


def _mask_biases(mask: torch.Tensor | None, spans: list[tuple[int, int]], heads: int, op: str) -> list[torch.Tensor | None]:
    """Per-sequence additive bias ``(heads, S, S)`` from a ``(B or 1, max_s, max_s)`` (or 2-D) float mask."""
    if mask is None:
        return [None] * len(spans)
    if mask.dtype in (torch.bool, torch.int8, torch.uint8) or not mask.is_floating_point():
        raise ValueError(f"{op}: mask must be an additive float mask (0 = visible, -10000 = masked), got {mask.dtype}")
    square = mask if mask.dim() == 3 else mask.reshape(1, *mask.shape[-2:])
    biases = []
    for b, (start, stop) in enumerate(spans):
        length = stop - start
        if square.shape[-1] < length or square.shape[-2] < length:
            raise ValueError(f"{op}: mask {tuple(mask.shape)} does not cover a sequence of {length} tokens")
        plane = square[b if square.shape[0] > 1 else 0, :length, :length]
        biases.append(plane.unsqueeze(0).expand(heads, -1, -1))
    return biases


def _self_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, seq_len: torch.Tensor,
                    scale_value: float, num_heads: int, num_kv_heads: int, out: torch.Tensor, band: Band,
                    mask: torch.Tensor | None, op: str) -> None:  # fmt: skip
    _check_heads(num_heads, num_kv_heads, op)
    q, k, v = _heads(query, num_heads, "query"), _heads(key, num_kv_heads, "key"), _heads(value, num_kv_heads, "value")
    spans = _sequence_spans(seq_len, q.shape[0], op)
    dtype = compute_dtype(query.dtype)

    def read(b: int, start: int, stop: int) -> tuple[torch.Tensor, torch.Tensor]:
        first = spans[b][0]
        return _rows(k, first + start, first + stop, dtype), _rows(v, first + start, first + stop, dtype)

    lengths = [stop - start for start, stop in spans]
    _solve(q, out, spans, lengths, read, num_heads, num_kv_heads, scale_value, [band] * len(spans),
           _mask_biases(mask, spans, num_heads, op))  # fmt: skip


@torch.no_grad()
def flash_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask: torch.Tensor,
                    seq_len: torch.Tensor, scale_value: float, num_heads: int, num_kv_heads: int,
                    out: torch.Tensor) -> None:  # fmt: skip
    """``_npu_flash_attention``: each sequence attends to itself with the additive ``mask`` (the causal
    ``triu(ones, 1) * -10000`` of ``atb-c7``) added to the scaled scores."""
    _self_attention(query, key, value, seq_len, scale_value, num_heads, num_kv_heads, out, FULL, mask,
                    "_npu_flash_attention")  # fmt: skip


@torch.no_grad()
def flash_attention_unpad(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, seq_len: torch.Tensor,
                          scale_value: float, num_heads: int, num_kv_heads: int, out: torch.Tensor) -> None:  # fmt: skip
    """``_npu_flash_attention_unpad(_v2)``: no mask, each sequence attends to all of itself."""
    _self_attention(query, key, value, seq_len, scale_value, num_heads, num_kv_heads, out, FULL, None,
                    "_npu_flash_attention_unpad")  # fmt: skip


@torch.no_grad()
def flash_attention_compressed(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask: torch.Tensor,
                               seq_len: torch.Tensor, scale_value: float, num_heads: int, num_kv_heads: int,
                               out: torch.Tensor) -> None:  # fmt: skip
    """``_npu_flash_attention_v3`` (``mask_type`` 3, the compressed causal mask): causal within each
    sequence; the 2048x2048 mask's content is not indexed."""
    _self_attention(query, key, value, seq_len, scale_value, num_heads, num_kv_heads, out, Band(-UNBOUNDED, 0),
                    None, "_npu_flash_attention_v3")  # fmt: skip


@torch.no_grad()
def paged_attention_splitfuse(query: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor,
                              block_table: torch.Tensor, context_lens: torch.Tensor, mask: torch.Tensor | None,
                              seq_len: torch.Tensor, num_kv_heads: int, num_heads: int, scale_value: float,
                              out: torch.Tensor, *, nz: bool = False) -> None:  # fmt: skip
    """``_npu_paged_attention_splitfuse(_v2)`` (chunked prefill): sequence b has ``seq_len[b]`` new query
    tokens, the last of its ``context_lens[b]`` cached tokens. With an additive ``mask`` (v1: rows of
    ``[sum(seq_len), max_context]`` per sequence, ``atb-c8``) it is added; without (v2, the compressed mask)
    the causal triangle is aligned bottom-right."""
    op = "_npu_paged_attention_splitfuse"
    _check_heads(num_heads, num_kv_heads, op)
    q = _heads(query, num_heads, "query")
    spans = _sequence_spans(seq_len, q.shape[0], op)
    lengths = _lengths(context_lens, "context_lens")
    if len(lengths) != len(spans) or any(n < stop - start for n, (start, stop) in zip(lengths, spans)):
        raise ValueError(f"{op}: context_lens={lengths} must hold at least the seq_len query tokens of each sequence")
    value_dim = _heads(out, num_heads, "out").shape[-1]
    _, read = _paged_reader(key_cache, value_cache, block_table, q.shape[-1], value_dim, num_kv_heads,
                            compute_dtype(query.dtype), nz)  # fmt: skip

    if mask is None:
        bands = [Band(-UNBOUNDED, n - (stop - start)) for n, (start, stop) in zip(lengths, spans)]
        biases: list[torch.Tensor | None] = [None] * len(spans)
    else:
        bands = [FULL] * len(spans)
        biases = [mask[start:stop, :n].unsqueeze(0).expand(num_heads, -1, -1) for n, (start, stop) in zip(lengths, spans)]
    _solve(q, out, spans, lengths, read, num_heads, num_kv_heads, scale_value, bands, biases)
