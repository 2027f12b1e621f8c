"""The float32 reference of the operators' semantics (``docs/semantics.md``): the one source of what the
attention and cache-write operators compute, read by the emulator and by the probe's comparison.

- ``operators``: one function per operator, taking the operator's own arguments;
- ``attention_call``: one attention call in operator-neutral terms, split into batches;
- ``online_softmax``: the memory-bounded attention of one batch;
- ``layouts``, ``masks``, ``paged``: tensor layouts and lengths, sparse-mode geometry and user masks,
  readers of contiguous and paged key/value blocks;
- ``cache_writes``: the KV-cache write operators.

Imports: torch and ``kvlint.catalogue``. Never the emulator or the probe.
"""
