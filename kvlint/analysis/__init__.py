"""The analysis: what the linter knows about one file's code, with no opinion on what is wrong.

- ``names``: the dotted name an expression stands for, from the file's own imports;
- ``callsite``: which operator a call reaches and which arguments it passes;
- ``flow``: reaching definitions along explicit paths;
- ``facts``: the abstract value (dtype, shape, axis order, traits) followed to an argument;
- ``axes``: shapes and axis orders, what indexing, ``unsqueeze``, ``transpose`` and ``permute`` do to them;
- ``evaluate`` with ``expressions``, ``follow`` and ``tensor_semantics``: the value follower;
- ``query_length``: what the code proves about a call's query length (Q_S = 1, Q_S > 1) on each path;
- ``shape_tests``: calls that compute no numbers (``FakeTensorMode``, meta tensors);
- ``finding``: a finding and the rule issue it comes from;
- ``walk`` and ``memo``: the nodes of a class below a node from one walk of the module, and the caches of
  facts about the tree under analysis, emptied when the engine is done with it.

Imports: ``kvlint.catalogue`` and astroid. Never the checks, the fixer or the front-ends.
"""
