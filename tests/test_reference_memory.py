"""Memory bound: a long-context call never holds the [S1, S2] score matrix.

Cases: a 64-token chunk against a 32K-token cache, 32 query heads, 8 KV heads, D=128, bf16 inputs (its
full float32 score matrix is 32 x 64 x 32768 x 4 B = 256 MiB); an 8K-token causal prefill, 4 heads, D=16
(score matrix 4 x 8192 x 8192 x 4 B = 1 GiB). Peak resident-memory growth during
the call is measured in a fresh subprocess (ru_maxrss, after inputs and a warm-up call exist); the
reference must stay under BOUND_MIB, and a control that does materialise the scores must exceed it,
which shows that the measurement can fail. The subprocess fixes glibc's mmap threshold at 128 KiB: by
default a freed large block raises the threshold, later blocks come from the heap, which keeps what it
freed, and the peak then measures the allocator's history (17 to 180 MiB for the same call) instead of
what the call holds.
"""

from __future__ import annotations

import os
import subprocess
import sys

BOUND_MIB = 64

SCRIPT = r"""
import resource, sys, torch
from kvlint.runtime_probe.reference.operators import fused_infer_attention_score

torch.manual_seed(0)
heads, kv_heads, dim, q_len, kv_len = (32, 8, 128, 64, 32768) if sys.argv[1] != "prefill" else (4, 4, 16, 8192, 8192)
query = torch.randn(1, heads, q_len, dim, dtype=torch.bfloat16)
key = torch.randn(1, kv_heads, kv_len, dim, dtype=torch.bfloat16)
value = torch.randn(1, kv_heads, kv_len, dim, dtype=torch.bfloat16)
mask = torch.ones(2048, 2048, dtype=torch.bool).triu(1)

def reference(q, k, v):
    return fused_infer_attention_score(q, k, v, num_heads=heads, num_key_value_heads=kv_heads,
        scale=dim ** -0.5, input_layout="BNSD", sparse_mode=3, atten_mask=mask)[0]

def materialised(q, k, v):
    scores = torch.matmul(q.float().view(kv_heads, -1, dim), k.float()[0].transpose(1, 2)) * dim ** -0.5
    return torch.matmul(scores.softmax(-1), v.float()[0])

run = {"reference": reference, "prefill": reference, "materialised": materialised}[sys.argv[1]]
run(query[:, :, :2], key[:, :, :2048], value[:, :, :2048])
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
run(query, key, value)
print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024)
"""


def peak_growth_mib(mode: str) -> float:
    environment = {**os.environ, "MALLOC_MMAP_THRESHOLD_": str(128 * 1024)}
    done = subprocess.run([sys.executable, "-c", SCRIPT, mode], capture_output=True, text=True, check=True,
                          env=environment)  # fmt: skip
    return float(done.stdout.split()[-1])


def test_long_context_call_stays_within_the_bound() -> None:
    assert peak_growth_mib("reference") < BOUND_MIB


def test_long_causal_prefill_stays_within_the_bound() -> None:
    assert peak_growth_mib("prefill") < BOUND_MIB


def test_materialising_the_scores_exceeds_the_bound() -> None:
    assert peak_growth_mib("materialised") > BOUND_MIB
