"""Runtime half of kvlint: the float32 reference, the CPU emulator of torch_npu and the probe.

- ``reference/``: the float32 semantics of the operators (imports torch and ``kvlint.catalogue`` only);
- ``emulator/``: torch_npu on a CPU, one module per operator family (imports the reference);
- this package's own modules are the probe: ``hooks`` and ``op_wrappers`` (where it attaches), ``probe``
  (activation, the per-call flow), ``config`` and ``callsite``; ``signature`` (what a call's checks depend
  on) and ``isolation`` (hiding the probe's work from the program's modes); ``live_call`` and ``checks``
  (checks of one call, one function per code); ``steps`` (steps and layers across calls), ``cache_rows``,
  ``coverage`` (KVL509, KVL510), ``drift`` (KVL505) and ``decoder`` (KVL507's evidence); ``compare``
  (against the reference); ``cache_usage``, ``report`` and ``cache_summary`` (what it saw).

The probe may import the emulator, the reference, ``kvlint.catalogue`` and ``kvlint.budget``'s formulas;
nothing here imports the static linter.
"""

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
