"""The rule functions, one per rule, and the tables the engine runs them from.

A call check takes an operator ``CallSite`` and yields ``Issue``s; a module check takes the module and the
settings. To add a rule: add its row to ``kvlint.catalogue.rules``, write its function here, list it below.
``engine`` runs these tables over a module; the front-ends call it.

Imports: ``kvlint.catalogue`` and ``kvlint.analysis``. Never the fixer or the front-ends.
"""

from kvlint.checks.arguments import (
    check_default_num_heads,
    check_default_scale,
    check_gqa_heads,
    check_invalid_layout,
    check_invalid_sparse_mode,
    check_rope_pair,
    check_seq_lengths_kv_habit,
    check_tensor_int_argument,
    check_tnd_missing_lengths,
)
from kvlint.checks.cache_views import check_cache_literal_width
from kvlint.checks.dropped import check_attention_parameter_dropped
from kvlint.checks.kv_cache import (
    check_block_size_invalid,
    check_block_size_missing,
    check_block_table_dtype,
    check_kv_len_mutated_in_layer,
    check_kv_repeat,
    check_kv_rmsnorm_unpack,
    check_paged_without_kv_lengths,
    check_scatter_result_discarded,
)
from kvlint.checks.layouts import check_layout_axes, check_layout_rank
from kvlint.checks.lengths import check_cumulative_lengths_non_tnd
from kvlint.checks.masks import (
    check_additive_mask_in_pse,
    check_atten_mask_dropped,
    check_atten_mask_dtype,
    check_atten_mask_polarity,
    check_atten_mask_shape,
    check_causal_top_left_with_cache,
    check_sdpa_causal_over_cache,
    check_sdpa_mask_reused,
    check_sparse_mode_needs_mask,
    check_top_left_mask_over_cache,
)
from kvlint.checks.signature import (
    check_positional_args,
    check_unknown_keyword,
    check_unknown_operator,
    check_version_mix,
)

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
    check_layout_axes,
    check_layout_rank,
    check_tensor_int_argument,
    check_atten_mask_dtype,
    check_atten_mask_shape,
    check_sparse_mode_needs_mask,
    check_atten_mask_polarity,
    check_sdpa_mask_reused,
    check_additive_mask_in_pse,
    check_causal_top_left_with_cache,
    check_top_left_mask_over_cache,
    check_atten_mask_dropped,
    check_attention_parameter_dropped,
    check_block_table_dtype,
    check_block_size_missing,
    check_paged_without_kv_lengths,
    check_block_size_invalid,
    check_scatter_result_discarded,
    check_kv_repeat,
    check_kv_rmsnorm_unpack,
    check_cumulative_lengths_non_tnd,
    check_cache_literal_width,
)
MODULE_CHECKS = (
    check_sdpa_causal_over_cache,
    check_kv_len_mutated_in_layer,
    check_unknown_operator,
)
