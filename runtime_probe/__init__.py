"""Runtime half of kvlint: the float32 reference, the CPU emulator of torch_npu and the probe."""
