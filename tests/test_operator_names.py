"""scripts/operator_names.py reads operator names from op-plugin, torch_npu and torchair sources, and the
generated kvlint/catalogue/operator_names.py is what it renders."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from kvlint.catalogue import operator_names
from tests.conftest import ROOT

SPEC = importlib.util.spec_from_file_location("operator_names_script", ROOT / "scripts" / "operator_names.py")
script = importlib.util.module_from_spec(SPEC)
sys.modules[SPEC.name] = script
SPEC.loader.exec_module(script)

YAML = """\
all_version: [v2.1]
official:
  - func: embedding_dense_backward(Tensor grad_output, Tensor indices) -> Tensor
    op_api: all_version
custom:
  - func: npu_fused_infer_attention_score(Tensor query, Tensor key, Tensor value, *, int num_heads=1) -> (Tensor, Tensor)
    op_api: all_version
  - func: npu_fused_infer_attention_score.out(Tensor query, *, Tensor(a!) out) -> Tensor(a!)
symint:
  - func: _npu_fused_infer_attention_score_get_max_workspace(Tensor query) -> Tensor
quant:
  - func: q_scale(Tensor self) -> float
"""
ATB_CPP = """\
TORCH_LIBRARY_FRAGMENT(atb, m) {
  m.def(
      "_npu_paged_attention(Tensor query, Tensor(a!) out, *,"
      "Tensor? workspace=None) -> ()");
  m.def("_npu_reshape_and_cache(Tensor key, Tensor slot_indices) -> ()");
}
"""


def test_yaml_names_come_from_the_npu_sections_only_with_their_lines() -> None:
    found = script.yaml_functions(YAML, script.NPU_SECTIONS)
    assert sorted({name for name, _ in found.values()}) == [
        "_npu_fused_infer_attention_score_get_max_workspace", "npu_fused_infer_attention_score"]
    schema = "npu_fused_infer_attention_score(Tensor query, Tensor key, Tensor value, *, int num_heads=1) -> (Tensor, Tensor)"
    assert found[schema] == ("npu_fused_infer_attention_score", 6)


@pytest.fixture()
def repository(tmp_path: Path) -> object:
    files = {script.OP_PLUGIN_YAML: YAML, f"{script.ATB_SOURCES}/PagedAttentionAtb.cpp": ATB_CPP}
    for path, text in files.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text, encoding="utf-8")
    git = ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "sources"], check=True)
    return script.Repository.parse(str(tmp_path))


def test_atb_schemas_are_read_from_the_m_def_calls_with_their_file_and_line(repository: object) -> None:
    found = script.atb_definitions(repository)
    assert found == {
        "_npu_paged_attention(Tensor query, Tensor(a!) out, *,Tensor? workspace=None) -> ()":
            ("_npu_paged_attention", "PagedAttentionAtb.cpp:2"),
        "_npu_reshape_and_cache(Tensor key, Tensor slot_indices) -> ()":
            ("_npu_reshape_and_cache", "PagedAttentionAtb.cpp:5"),
    }
    assert len(repository.commit) == 40


def test_a_source_that_cannot_be_read_is_an_error_naming_it(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match=str(tmp_path)):
        script.Repository.parse(f"{tmp_path}@HEAD").read("op_plugin/config/op_plugin_functions.yaml")


def test_python_lists_and_functions_are_read_without_running_the_module() -> None:
    text = "import torch\nAPI_LIST = ['_npu_paged_attention']\ndef npu_print(x): pass\ndef _hidden(): pass\n"
    assert script.list_assignment(text, "API_LIST") == ["_npu_paged_attention"]
    assert script.module_functions(text) == ["npu_print"]


def test_the_rendered_module_holds_the_names_and_sources() -> None:
    text = script.render({"NPU": ("doc", ["b", "a", "a"])}, {"Ascend/op-plugin": "0" * 40}, "cmd")
    namespace: dict[str, object] = {}
    exec(compile(text, "generated.py", "exec"), namespace)
    assert namespace["NPU"] == frozenset({"a", "b"}) and namespace["SOURCES"] == {"Ascend/op-plugin": "0" * 40}


def test_the_committed_names_record_their_sources_and_hold_every_catalogued_operator() -> None:
    assert set(operator_names.SOURCES) == {"Ascend/op-plugin", "Ascend/pytorch", "Ascend/torchair"}
    assert all(len(commit) == 40 for commit in operator_names.SOURCES.values())
    assert {"npu_fused_infer_attention_score", "npu_format_cast"} <= operator_names.NPU | operator_names.TORCH_NPU_OWN
    assert "_npu_paged_attention" in operator_names.ATB & operator_names.TORCH_NPU_ATB
