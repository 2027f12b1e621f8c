"""The catalogue's cache-write table and the rows the probe computes from it: every cache-writing operator has
a row, the rows name real parameters, and the rows a write is said to fill are the rows it changes."""

from __future__ import annotations

import pytest
import torch
from kvlint.runtime_probe.cache_rows import written_rows
from kvlint.runtime_probe.live_call import LiveCall, bind

from kvlint.catalogue.cache_writes import CACHE_WRITES, NOT_MODELLED
from kvlint.catalogue.operators import OPERATORS
from tests.probe_fixtures import standin


def test_every_operator_that_writes_a_cache_argument_has_a_row_or_a_reason():
    writers = {op.name for op in OPERATORS.values() if any(p.mutated and "cache" in p.name for p in op.params)}
    assert writers and writers <= set(CACHE_WRITES) | set(NOT_MODELLED)
    assert not set(CACHE_WRITES) & set(NOT_MODELLED) and set(NOT_MODELLED) <= set(OPERATORS)


@pytest.mark.parametrize("name", sorted(CACHE_WRITES))
def test_rows_name_parameters_of_the_operator(name):
    write, params = CACHE_WRITES[name], OPERATORS[name].param_names
    assert {write.cache, write.positions, write.source} <= set(params)
    assert write.mode is None or write.mode in params
    assert write.layouts and (write.mode is not None or set(write.layouts) == {None})


def changed_rows(before: torch.Tensor, after: torch.Tensor, token_axes: tuple[int, int]) -> set[int]:
    """Byte offsets of the token rows (indexed by ``token_axes``) whose values changed."""
    moved = (after != before).movedim(token_axes, (0, 1)).flatten(2).any(-1)
    strides = (before.stride(token_axes[0]), before.stride(token_axes[1]))
    return {(int(i) * strides[0] + int(j) * strides[1]) * before.element_size() for i, j in moved.nonzero()}


def rows_of(name: str, *args, **kwargs) -> set[int]:
    op = OPERATORS[name]
    call = LiveCall(op, bind(op, args, kwargs), True)
    rows = written_rows(call, CACHE_WRITES[name])
    assert rows is not None
    return set(rows.offsets.tolist())


def test_scatter_update_rows_are_each_batch_rows_start_onwards():
    cache = torch.zeros(3, 2, 10, 4)
    indices, updates = torch.tensor([0, 4, 7]), torch.ones(3, 2, 2, 4)
    before = cache.clone()
    standin.scatter_update_(cache, indices, updates, -2)
    assert rows_of("scatter_update_", before, indices, updates, -2) == changed_rows(before, cache, (0, 2))


def test_scatter_nd_update_rows_are_the_leading_coordinates():
    cache = torch.zeros(3, 10, 8)
    indices = torch.tensor([[0, 1], [2, 9], [1, 0]])
    before = cache.clone()
    standin.npu_scatter_nd_update_(cache, indices, torch.ones(3, 8))
    assert rows_of("npu_scatter_nd_update_", before, indices, torch.ones(3, 8)) == changed_rows(before, cache, (0, 1))


def test_scatter_nd_update_through_a_flattened_paged_view_names_the_same_rows_as_the_cache():
    cache = torch.zeros(4, 16, 8)  # [blocks, block_size, H], written as [slots, H]
    slots = torch.tensor([[3], [17], [63]])
    before = cache.clone()
    standin.npu_scatter_nd_update_(cache.view(-1, 8), slots, torch.ones(3, 8))
    assert rows_of("npu_scatter_nd_update_", before.view(-1, 8), slots, torch.ones(3, 8)) == \
        changed_rows(before, cache, (0, 1))


def test_paged_slots_skip_padding_and_follow_the_block_size_axis():
    key_cache, value_cache = torch.zeros(4, 16, 2, 8), torch.zeros(4, 16, 2, 8)
    slots = torch.tensor([5, -1, 33, 16])
    before = key_cache.clone()
    standin.npu_scatter_pa_kv_cache(torch.ones(4, 2, 8), torch.ones(4, 2, 8), key_cache, value_cache, slots,
                                    cache_mode="Norm")
    written = rows_of("npu_scatter_pa_kv_cache", torch.ones(4, 2, 8), torch.ones(4, 2, 8), before, value_cache,
                      slots, cache_mode="Norm")
    assert written == changed_rows(before, key_cache, (0, 1)) and len(written) == 3


def test_nz_slots_run_along_the_block_size_axis_of_the_nz_layout():
    cache = torch.zeros(4, 2, 16, 16)  # PA_NZ: [blocks, N*D/16, block_size, 16]
    ones = torch.ones(2, 2, 16)
    written = rows_of("npu_scatter_pa_kv_cache", ones, ones, cache, cache, torch.tensor([5, 20]))  # default PA_NZ
    assert written == {(0 * cache.stride(0) + 5 * cache.stride(2)) * 4, (1 * cache.stride(0) + 4 * cache.stride(2)) * 4}


def test_atb_reshape_and_cache_slots_address_block_and_offset_and_skip_negative_ones():
    """KVC-C32: token i goes to block ``slot // block_size``, offset ``slot % block_size`` of a
    ``(num_blocks, block_size, num_heads, head_size)`` cache; a negative slot is skipped."""
    key_cache, value_cache = torch.zeros(4, 16, 2, 8), torch.zeros(4, 16, 2, 8)
    slots = torch.tensor([5, -1, 33, 16], dtype=torch.int32)
    before = key_cache.clone()
    standin._npu_reshape_and_cache(torch.ones(4, 2, 8), torch.ones(4, 2, 8), key_cache, value_cache, slots)
    written = rows_of("_npu_reshape_and_cache", torch.ones(4, 2, 8), torch.ones(4, 2, 8), before, value_cache, slots)
    assert written == changed_rows(before, key_cache, (0, 1))
    assert written == {(slot // 16 * key_cache.stride(0) + slot % 16 * key_cache.stride(1)) * 4 for slot in (5, 33, 16)}
