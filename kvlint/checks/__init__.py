"""The rule functions, one per rule, and the tables the engine runs them from.

A call check takes an operator ``CallSite`` and yields ``Issue``s; a module check takes the module and the
settings. To add a rule: add its row to ``kvlint.ruleset``, write its function here, list it below.
"""

from kvlint.checks.arguments import (
    check_default_num_heads,
    check_default_scale,
    check_gqa_heads,
    check_invalid_layout,
    check_invalid_sparse_mode,
    check_rope_pair,
    check_seq_lengths_kv_habit,
    check_tnd_missing_lengths,
)
from kvlint.checks.signature import check_positional_args, check_unknown_keyword, check_version_mix

CALL_CHECKS = (
    check_unknown_keyword,
    check_version_mix,
    check_positional_args,
    check_default_scale,
    check_default_num_heads,
    check_invalid_layout,
    check_invalid_sparse_mode,
    check_rope_pair,
    check_gqa_heads,
    check_seq_lengths_kv_habit,
    check_tnd_missing_lengths,
)
MODULE_CHECKS = ()
