"""The catalogue: the facts every other layer reads, and nothing else.

- ``schemas``: the operators' registered schema strings, verbatim (the linter parses them, the emulator
  registers them);
- ``operators``: those schemas parsed into parameters and defaults, with the operator families' fact tables
  and the namespaces operators are called through;
- ``operator_names``: every operator name torch_npu, ATB and torchair define (generated from their sources by
  ``scripts/operator_names.py``);
- ``rules``: the rule catalogue (code, symbol, level, summary), shared by every front-end and the probe;
- ``rule_pages``: the text of each rule's documentation page, and ``pages``, which renders them;
- ``project``: the distribution's name (``kvlint-ascend``) and the URLs its metadata declares.

Imports: the standard library only. Every other package of kvlint may import this one.
"""
