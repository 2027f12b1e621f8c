"""``torch_npu.testing._internal``: the distributed test bases (``common_dtensor``)."""
