"""The fixer: rewrites whose correctness is certain, from findings to new source text.

- ``rewrite``: ``fix_source`` (findings -> fixed text), the rewrite constants and ``FixUnavailable``;
- ``planner``: the libcst edits, imported only when a fix is asked for (``kvlint-ascend[fix]``).

Imports: ``kvlint.catalogue`` and ``kvlint.analysis``. Files, encodings and re-linting are the front-ends'
business (``kvlint.frontends.fixing``).
"""
