"""The analysis: what the linter knows about one file's code, with no opinion on what is wrong.

- ``names``: the dotted name an expression stands for, from the file's own imports;
- ``callsite``: which operator a call reaches and which arguments it passes;
- ``flow``: reaching definitions along explicit paths;
- ``facts``: the abstract value (dtype, shape, traits) followed to an argument;
- ``evaluate`` with ``expressions``, ``follow`` and ``tensor_semantics``: the value follower;
- ``finding``: a finding and the rule issue it comes from.

Imports: ``kvlint.catalogue`` and astroid. Never the checks, the fixer or the front-ends.
"""
