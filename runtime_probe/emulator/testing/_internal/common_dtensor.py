"""``torch_npu.testing._internal.common_dtensor``: torch's DTensor test base on NPUs."""

from __future__ import annotations

from torch.testing._internal.distributed._tensor.common_dtensor import DTensorTestBase
from kvlint.runtime_probe.emulator import npu

MAX_WORLD_SIZE = 4


class NPUDTensorTestBase(DTensorTestBase):
    """DTensor tests on ``npu`` meshes: one rank per NPU, at most 4 (4 ranks when there is at most one NPU)."""

    @property
    def device_type(self) -> str:
        return "npu"

    @property
    def world_size(self) -> int:
        count = npu.device_count()
        return min(MAX_WORLD_SIZE, count) if count > 1 else MAX_WORLD_SIZE
