"""npu_fusion_attention runs on DTensors: the emulator registers its sharding strategy as torch_npu does
(all-Replicate, and data parallel on the layout's B axis when the call is plain SDPA), so a sharded call gives
the unsharded call's results. One gloo rank here; torch_npu's own 2-rank tests are in
benchmarks/torch_npu_tests.py."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
if not dist.is_available():
    pytest.skip("torch.distributed is not available", allow_module_level=True)
from torch.distributed.tensor import Replicate, Shard, distribute_tensor  # noqa: E402

B, N, S, D = 4, 2, 6, 8


@pytest.fixture(scope="module")
def mesh(torch_npu, tmp_path_factory):
    dist.init_process_group("gloo", init_method=f"file://{tmp_path_factory.mktemp('pg') / 'store'}", rank=0,
                            world_size=1)  # fmt: skip
    yield torch.distributed.device_mesh.init_device_mesh("cpu", (1,))
    dist.destroy_process_group()


def qkv(*shape: int) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(5)
    return [torch.randn(*shape, generator=generator) for _ in range(3)]


def test_a_batch_sharded_call_stays_batch_sharded_and_equals_the_plain_call(torch_npu, mesh):
    q, k, v = qkv(B, N, S, D)
    mask = torch.rand(B, N, S, S, generator=torch.Generator().manual_seed(1)) < 0.3
    mask[..., 0] = False
    plain = torch_npu.npu_fusion_attention(q, k, v, head_num=N, input_layout="BNSD", atten_mask=mask, scale=0.3)
    sharded = [distribute_tensor(t, mesh, [Shard(0)]) for t in (q, k, v, mask)]
    result = torch_npu.npu_fusion_attention(*sharded[:3], head_num=N, input_layout="BNSD", atten_mask=sharded[3],
                                            scale=0.3)  # fmt: skip
    assert result[0].placements == (Shard(0),) and result[1].placements == (Shard(0),)
    for got, expected in zip(result[:3], plain[:3]):
        torch.testing.assert_close(got.full_tensor(), expected)


def test_bsh_shards_its_batch_axis_and_sbh_its_second(torch_npu, mesh):
    q, k, v = qkv(B, S, N * D)
    for layout, axis in (("BSH", 0), ("SBH", 1)):
        tensors = [t.transpose(0, 1).contiguous() if layout == "SBH" else t for t in (q, k, v)]
        sharded = [distribute_tensor(t, mesh, [Shard(axis)]) for t in tensors]
        result = torch_npu.npu_fusion_attention(*sharded, head_num=N, input_layout=layout, scale=0.3)
        assert result[0].placements == (Shard(axis),)
        plain = torch_npu.npu_fusion_attention(*tensors, head_num=N, input_layout=layout, scale=0.3)
        torch.testing.assert_close(result[0].full_tensor(), plain[0])


def test_tnd_and_a_pse_are_only_replicated(torch_npu, mesh):
    q, k, v = qkv(6, N, D)
    sharded = [distribute_tensor(t, mesh, [Replicate()]) for t in (q, k, v)]
    result = torch_npu.npu_fusion_attention(*sharded, head_num=N, input_layout="TND", scale=0.3,
                                            actual_seq_qlen=[2, 6], actual_seq_kvlen=[2, 6])  # fmt: skip
    assert result[0].placements == (Replicate(),)
    q, k, v = qkv(B, N, S, D)
    pse = distribute_tensor(torch.zeros(B, N, S, S), mesh, [Replicate()])
    sharded = [distribute_tensor(t, mesh, [Shard(0)]) for t in (q, k, v)]
    result = torch_npu.npu_fusion_attention(*sharded, head_num=N, input_layout="BNSD", pse=pse, scale=0.3)
    assert result[0].placements == (Replicate(),)
