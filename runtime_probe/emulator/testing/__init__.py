"""``torch_npu.testing`` on a CPU: the test harness that torch_npu's and op-plugin's operator tests import,
written for the emulator from its documented and observable behaviour (not torch_npu's code):

- ``testcase``: ``TestCase`` (seeded ``setUp``, ``assertRtolEqual``, the old PyTorch-style ``assertEqual``
  with a precision) and ``run_tests``;
- ``common_utils``: ``create_common_tensor``, ``create_dtype_tensor``, ``SupportedDevices``,
  ``SkipIfNotGteCANNVersion``, ``check_operators_in_prof``, ``freeze_rng_state`` and the smaller helpers;
- ``decorator``: ``Dtypes``, ``Formats``, ``instantiate_tests``;
- ``common_distributed``: ``skipIfUnsupportMultiNPU``, ``with_comms``, ``init_pg``, ``TEST_SKIPS``;
- ``_internal.common_dtensor``: ``NPUDTensorTestBase``.

The emulator installs this package as ``torch_npu.testing`` (``emulator.install``), so a test file runs
unchanged with ``KVLINT_EMULATE=1``. Unlike torch_npu's, importing it patches nothing of torch's OpInfo
tests: the device-type test framework sees ``npu`` tensors as the CPU tensors they are.
"""
