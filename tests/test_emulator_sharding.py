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


def test_the_backward_of_a_batch_sharded_call_gives_the_plain_calls_gradients(torch_npu, mesh):
    """DTensor runs npu_fusion_attention_grad (the emulator's backward calls it, as torch_npu's does) through
    its handler: the gradients are sharded as q, k, v and equal the unsharded call's."""
    plain = [t.requires_grad_() for t in qkv(B, N, S, D)]
    torch_npu.npu_fusion_attention(*plain, head_num=N, input_layout="BNSD", scale=0.3)[0].sum().backward()
    sharded = [distribute_tensor(t.detach(), mesh, [Shard(0)]).requires_grad_() for t in plain]
    torch_npu.npu_fusion_attention(*sharded, head_num=N, input_layout="BNSD", scale=0.3)[0].sum().backward()
    for got, expected in zip(sharded, plain):
        assert got.grad.placements == (Shard(0),)
        torch.testing.assert_close(got.grad.full_tensor(), expected.grad)


TWO_RANKS = '''
import os, sys
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.distributed.tensor import Shard, distribute_tensor
from torch.distributed.device_mesh import init_device_mesh


def rank(index, store):
    import torch_npu
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=index, world_size=2)
    mesh = init_device_mesh("cpu", (2,))
    generator = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(2, 2, 8, 8, generator=generator).requires_grad_() for _ in range(3))
    template = torch.ones(2048, 2048, dtype=torch.bool).triu(1)
    keywords = dict(head_num=2, input_layout="BNSD", scale=0.3, sparse_mode=2)
    torch_npu.npu_fusion_attention(q, k, v, atten_mask=template, **keywords)[0].sum().backward()
    sharded = [distribute_tensor(t.detach(), mesh, [Shard(0)]).requires_grad_() for t in (q, k, v)]
    mask = distribute_tensor(template, mesh, [Shard(0)])  # the caller shards the template: the grad must not
    torch_npu.npu_fusion_attention(*sharded, atten_mask=mask, **keywords)[0].sum().backward()
    for got, expected in zip(sharded, (q, k, v)):
        torch.testing.assert_close(got.grad.full_tensor(), expected.grad)
    dist.barrier()  # neither rank closes its gloo connections while the other may still be using them
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(rank, args=(sys.argv[1],), nprocs=2)
    print("gradients equal on both ranks")
'''


def test_on_two_ranks_the_backward_redistributes_its_keyword_arguments(tmp_path):
    """npu_fusion_attention_grad takes the mask and the softmax statistics by keyword, which DTensor does not
    redistribute: the handler does, so a template the caller sharded reaches each rank whole (the device's
    2048x2048 template, not a half), and the gradients equal the unsharded call's."""
    import os
    import subprocess
    import sys

    script = tmp_path / "two_ranks.py"
    script.write_text(TWO_RANKS)
    env = {**os.environ, "KVLINT_EMULATE": "1", "KVLINT_EMULATE_DEVICES": "2"}
    done = subprocess.run([sys.executable, str(script), str(tmp_path / "store")], capture_output=True, text=True,
                          timeout=600, env=env)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert "gradients equal on both ranks" in done.stdout
