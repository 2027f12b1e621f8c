"""Build the operator-dense corpus: a package in which every module calls the operators, the way the attention
backends of Ascend inference repositories do.

    python benchmarks/operator_corpus.py [DEST] [--modules N] [--seed S]

Without DEST the corpus goes to a new temporary folder, whose path is printed. Deterministic for a given seed
and checkout, one package (``kvops/``) so that pylint resolves its imports. Each module (default 80, about 270
lines) holds what such a file holds:

- ordinary code around the attention code (``corpus._Module``'s dataclasses, caches and helpers), about a third;
- an attention layer (a ``torch.nn.Module``) whose ``__init__`` sets the heads, the scale, the block size, a
  namespace switch (``self.ops = torch.ops.npu``) or an operator kept in an attribute, and a 2048 x 2048
  compressed causal mask;
- a ``forward`` that writes the KV cache (``_npu_reshape_and_cache`` or ``scatter_update_``) and branches on
  prefill / decode into helper methods, each with several call sites: FIA (v1 and ``_v2``) with keywords
  gathered in a ``**kwargs`` dict (a literal, ``dict(...)``, then ``d["k"] = v`` / ``d.update(...)``), IFA and
  PFA with paged caches, ``npu_fusion_attention`` with positional arguments;
- module-level wrappers (``def fia(q, k, v, **kw): return torch_npu.npu_...(q, k, v, **kw)``), an optional
  import (``try: import torch_npu`` / ``except ImportError: torch_npu = None``) and a helper returning the mask.

Every identifier is drawn afresh per module, as in ``corpus.py``, so pylint's duplicate-code check does not
dominate. The calls are correct but for one slip in one module in twenty (FIA v1's ``scale`` passed to
``_v2``, KVL102): the benchmark checks that the three front-ends report the same findings.
"""

from __future__ import annotations

import argparse
import ast
import random
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import corpus  # noqa: E402

PACKAGE = "kvops"
PACKAGES = 4
_LAYOUTS = ("BSND", "BNSD", "BSH")


class _OperatorModule(corpus._Module):
    """Source text of one operator-dense module."""

    def build(self) -> str:
        rng = self.rng
        self.emit(f'"""Attention backend for the {rng.choice(corpus._NOUNS)} model (generated module {self.index})."""')
        self.emit()
        self.emit("from __future__ import annotations")
        self.emit()
        self.emit("import logging")
        self.emit("import math")
        self.emit("from dataclasses import dataclass, field")
        self.emit("from typing import Any, Iterable, Iterator")
        self.emit()
        self.emit("import torch")
        self.emit("from torch import nn")
        self.emit()
        optional = rng.random() < 0.4
        if optional:
            self.emit("try:")
            self.emit("import torch_npu", 1)
            self.emit("except ImportError:")
            self.emit("torch_npu = None", 1)
        else:
            self.emit("import torch_npu")
        self.emit()
        self.emit("LOG = logging.getLogger(__name__)")
        self.emit(f"{self.fresh().upper()} = {self.number()}")
        self.emit()
        for _ in range(2):
            self.dataclass()
            self.plain_class()
        for _ in range(rng.randint(2, 3)):
            self.function()
        wrapper, mask_helper = self.wrapper(), self.mask_helper()
        self.metadata()
        self.layer(wrapper, mask_helper)
        for _ in range(rng.randint(1, 2)):
            self.function()
        text = "\n".join(self.lines) + "\n"
        ast.parse(text)
        return text

    def wrapper(self) -> str:
        """A module-level wrapper passing its keywords on: the call site sees only ``**kwargs``."""
        name, q, k, v, extra = self.fresh("_fia"), self.fresh(), self.fresh(), self.fresh(), self.fresh()
        self.emit()
        self.emit()
        self.emit(f"def {name}({q}, {k}, {v}, **{extra}):")
        self.emit('"""FIA with the project\'s defaults; the caller passes the rest."""', 1)
        self.emit(f"{extra}.setdefault(\"input_layout\", \"{self.rng.choice(_LAYOUTS)}\")", 1)
        self.emit(f"return torch_npu.npu_fused_infer_attention_score({q}, {k}, {v}, **{extra})", 1)
        return name

    def mask_helper(self) -> str:
        name, device = self.fresh("_mask"), self.fresh()
        self.emit()
        self.emit()
        self.emit(f"def {name}({device}):")
        self.emit('"""The compressed causal mask sparse_mode 2 and 3 expect: 2048 x 2048, '
                  'True above the diagonal."""', 1)
        self.emit(f"return torch.triu(torch.ones(2048, 2048, dtype=torch.bool, device={device}), diagonal=1)", 1)
        return name

    def metadata(self) -> None:
        self.cls_meta = self.fresh_class("Metadata")
        self.emit()
        self.emit()
        self.emit("@dataclass")
        self.emit(f"class {self.cls_meta}:")
        self.emit('"""What the scheduler hands the layer for one step."""', 1)
        self.emit()
        self.emit("block_tables: torch.Tensor", 1)
        self.emit("slot_mapping: torch.Tensor", 1)
        self.emit("seq_lens: list[int]", 1)
        self.emit("query_lens: list[int]", 1)
        self.emit("is_prefill: bool = False", 1)
        self.emit("cu_seqlens: list[int] = field(default_factory=list)", 1)

    def layer(self, wrapper: str, mask_helper: str) -> None:
        rng = self.rng
        cls = self.fresh_class("Attention")
        heads, kv_heads, dim, block = (rng.choice((8, 16, 32, 64)), rng.choice((1, 2, 4, 8)), rng.choice((64, 128)),
                                       rng.choice((128, 256)))
        hidden, extra = self.fresh(), self.fresh()
        prefill, decode, chunked, write = (self.fresh(f"_{w}") for w in ("prefill", "decode", "chunked", "write"))
        switch = rng.random() < 0.5
        self.emit()
        self.emit()
        self.emit(f"class {cls}(nn.Module):")
        self.emit('"""Paged attention on the NPU: the cache is (num_blocks, block_size, kv_heads * head_dim)."""', 1)
        self.emit()
        self.emit(f"def __init__(self, num_heads: int = {heads}, num_kv_heads: int = {kv_heads}, "
                  f"head_dim: int = {dim}) -> None:", 1)
        self.emit("super().__init__()", 2)
        self.emit("self.num_heads = num_heads", 2)
        self.emit("self.num_kv_heads = num_kv_heads", 2)
        self.emit("self.head_dim = head_dim", 2)
        self.emit("self.scale = 1.0 / math.sqrt(head_dim)", 2)
        self.emit(f"self.block_size = {block}", 2)
        self.emit(f"self.{hidden} = num_heads * head_dim", 2)
        if switch:
            self.emit("self.ops = torch.ops.npu", 2)
        else:
            self.emit("self.fa_op = torch_npu.npu_fused_infer_attention_score", 2)
        self.emit(f'self.register_buffer("attn_mask", {mask_helper}("cpu"), persistent=False)', 2)
        self.emit()
        self.emit(f"def {write}(self, key, value, kv_cache, meta: {self.cls_meta}):", 1)
        self.emit('"""Write this step\'s keys and values into the paged cache."""', 2)
        self.emit("key_cache, value_cache = kv_cache", 2)
        if rng.random() < 0.5:
            self.emit("torch_npu._npu_reshape_and_cache(key=key, value=value, key_cache=key_cache, "
                      "value_cache=value_cache, slot_indices=meta.slot_mapping)", 2)
        else:
            self.emit("torch_npu.scatter_update_(key_cache, meta.slot_mapping, key, -2)", 2)
            self.emit("torch_npu.scatter_update_(value_cache, meta.slot_mapping, value, -2)", 2)
        self.emit("return key_cache, value_cache", 2)
        self.emit()
        self.emit(f"def {prefill}(self, query, key, value, meta: {self.cls_meta}):", 1)
        self.emit('"""Prefill: the whole prompt at once, causal over itself."""', 2)
        self.emit("common = dict(num_heads=self.num_heads, num_key_value_heads=self.num_kv_heads, "
                  "scale=self.scale)", 2)
        self.emit('common["atten_mask"] = self.attn_mask', 2)
        self.emit('common.update(sparse_mode=3, input_layout="TND")', 2)
        self.emit('common["actual_seq_lengths"] = meta.cu_seqlens', 2)
        self.emit('common["actual_seq_lengths_kv"] = meta.cu_seqlens', 2)
        call = "self.ops.npu_fused_infer_attention_score" if switch else "self.fa_op"
        self.emit(f"output, _ = {call}(query, key, value, **common)", 2)
        self.emit("if meta.is_prefill and len(meta.seq_lens) > 1:", 2)
        self.emit("return output", 3)
        self.emit(f"{extra} = torch_npu.npu_prompt_flash_attention(query, key, value, num_heads=self.num_heads, "
                  "num_key_value_heads=self.num_kv_heads, scale_value=self.scale, input_layout=\"TND\", "
                  "atten_mask=self.attn_mask, sparse_mode=3, actual_seq_lengths=meta.cu_seqlens, "
                  "actual_seq_lengths_kv=meta.cu_seqlens)", 2)
        self.emit(f"return {extra}", 2)
        self.emit()
        self.emit(f"def {decode}(self, query, kv_cache, meta: {self.cls_meta}):", 1)
        self.emit('"""Decode: one new token per sequence against the paged cache."""', 2)
        self.emit("key_cache, value_cache = kv_cache", 2)
        self.emit("batch = query.shape[0]", 2)
        self.emit("query = query.view(batch, 1, self.num_heads * self.head_dim)", 2)
        self.emit("if self.num_kv_heads == self.num_heads:", 2)
        self.emit("output = torch_npu.npu_incre_flash_attention(query, key_cache, value_cache, "
                  "num_heads=self.num_heads, num_key_value_heads=self.num_kv_heads, scale_value=self.scale, "
                  "input_layout=\"BSH\", block_table=meta.block_tables, block_size=self.block_size, "
                  "actual_seq_lengths=meta.seq_lens)", 3)
        self.emit("else:", 2)
        self.emit("options = {", 3)
        self.emit('"num_query_heads": self.num_heads,', 4)
        self.emit('"num_key_value_heads": self.num_kv_heads,', 4)
        # one module in twenty keeps FIA v1's name for the scale (KVL102), the slip of a port to _v2
        self.emit(f'"{"scale" if self.index % 20 == 7 else "softmax_scale"}": self.scale,', 4)
        self.emit('"input_layout": "BSH",', 4)
        self.emit("}", 3)
        self.emit('options["block_table"] = meta.block_tables', 3)
        self.emit('options["block_size"] = self.block_size', 3)
        self.emit('options["actual_seq_kvlen"] = meta.seq_lens', 3)
        self.emit("output, _ = torch_npu.npu_fused_infer_attention_score_v2(query, key_cache, value_cache, "
                  "**options)", 3)
        self.emit("return output.view(batch, self.num_heads, self.head_dim)", 2)
        self.emit()
        self.emit(f"def {chunked}(self, query, key, value, meta: {self.cls_meta}):", 1)
        self.emit('"""Chunked prefill through the wrapper and the training kernel, for comparison runs."""', 2)
        self.emit(f"first = {wrapper}(query, key, value, num_heads=self.num_heads, "
                  "num_key_value_heads=self.num_kv_heads, scale=self.scale, actual_seq_lengths=meta.query_lens, "
                  "actual_seq_lengths_kv=meta.seq_lens)", 2)
        self.emit("batch, tokens = query.shape[0], query.shape[1]", 2)
        self.emit("second = torch_npu.npu_fusion_attention(query.view(batch, tokens, self.num_heads, self.head_dim), "
                  "key, value, self.num_heads, \"BSND\", atten_mask=self.attn_mask, scale=self.scale, "
                  "sparse_mode=2, pre_tockens=65536, next_tockens=0)[0]", 2)
        self.emit("return first[0] if meta.is_prefill else second", 2)
        self.emit()
        self.emit(f"def forward(self, query, key, value, kv_cache, meta: {self.cls_meta}):", 1)
        self.emit(f"kv_cache = self.{write}(key, value, kv_cache, meta)", 2)
        self.emit("if meta.is_prefill:", 2)
        self.emit(f"return self.{prefill}(query, key, value, meta)", 3)
        self.emit("if max(meta.query_lens, default=1) > 1:", 2)
        self.emit(f"return self.{chunked}(query, key, value, meta)", 3)
        self.emit(f"return self.{decode}(query, kv_cache, meta)", 2)


def build(dest: Path, modules: int = 80, seed: int = 20261201) -> dict[str, int]:
    """Write the corpus under ``dest/kvops`` (replacing it) and return its summary."""
    rng = random.Random(seed)
    package = dest / PACKAGE
    if package.exists():
        shutil.rmtree(package)
    package.mkdir(parents=True)
    (package / "__init__.py").write_text('"""Operator-dense benchmark corpus (benchmarks/operator_corpus.py)."""\n')
    for index in range(modules):
        sub = package / f"backend_{index % PACKAGES:02d}"
        if not sub.exists():
            sub.mkdir()
            (sub / "__init__.py").write_text("")
        (sub / f"attention_{index:04d}.py").write_text(_OperatorModule(rng, index, [], False).build(), encoding="utf-8")
    files = sorted(package.rglob("*.py"))
    summary = {
        "files": len(files),
        "lines": sum(path.read_text(encoding="utf-8").count("\n") for path in files),
        "operator_files": modules,
    }
    (package / "CORPUS.txt").write_text(describe(summary) + "\n")
    return summary


def describe(summary: dict[str, int]) -> str:
    return (f"{summary['files']} files, {summary['lines']} lines; {summary['operator_files']} modules, every one "
            "calling the operators (the rest are empty package __init__ files)")


def ensure(dest: str | None) -> tuple[Path, dict[str, int]]:
    """The corpus package path, building it in ``dest`` (or a new temporary folder)."""
    root = Path(dest) if dest else Path(tempfile.mkdtemp(prefix="kvlint-opcorpus-"))
    summary = build(root)
    return root / PACKAGE, summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dest", nargs="?", help="folder to build the corpus in (default: a new temporary folder)")
    parser.add_argument("--modules", type=int, default=80, help="number of modules (default 80)")
    parser.add_argument("--seed", type=int, default=20261201)
    args = parser.parse_args(argv)
    root = Path(args.dest) if args.dest else Path(tempfile.mkdtemp(prefix="kvlint-opcorpus-"))
    summary = build(root, args.modules, args.seed)
    print(root / PACKAGE)
    print(describe(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
