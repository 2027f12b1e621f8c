"""Runtime half of kvlint: the float32 reference, the CPU emulator of torch_npu and the probe."""

from __future__ import annotations


class ProbeError(RuntimeError):
    """Raised by the probe in strict mode (``KVLINT_PROBE=strict``) at the first error-level finding.

    ``code`` is the rule code and ``path``/``line`` the user's call site; the message carries all three.
    """

    def __init__(self, code: str, path: str, line: int, message: str) -> None:
        super().__init__(f"{path}:{line}: {code} {message}")
        self.code = code
        self.path = path
        self.line = line
