"""kvlint-budget: KV-cache budget figures from a model's cache geometry, each printed with its formula.

- ``units``: exact sizes, bandwidths, counts and their parsing;
- ``formulas``: plain functions of a geometry (also used by the runtime probe's cache figures);
- ``report``: the report's sections; ``render``: text and JSON; ``cli``: the command.

Imports: the standard library only; independent of the linter's layers.
"""
