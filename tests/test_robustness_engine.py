"""The engine reads one file's own text: linting a file never builds the modules it imports.

astroid's builder, after parsing, infers the object of every attribute assignment (``config.flag = 1``,
``obj.attr = x``) to record the attribute on it; inferring an imported name builds that module from disk,
then the modules it imports, and so on. In torch's own tree one file (``torch/_inductor/lowering.py``)
took 9 s that way, for nothing: kvlint resolves names from the file's text and never uses inference.
These tests pin that down with a module only importable from a temporary folder: if linting loads it
into astroid's cache, the engine went to disk.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from astroid import MANAGER
from astroid.builder import AstroidBuilder

from kvlint.checks.engine import analyze, lint_source
from tests.fixture_files import fixture_files

TARGET = "kvlint_robustness_import_target"


@pytest.fixture
def importable_target(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A module astroid can find and build (it is on sys.path), not yet in astroid's cache."""
    (tmp_path / f"{TARGET}.py").write_text("class Thing:\n    flag = 0\n\nsettings = Thing()\n", encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    MANAGER.astroid_cache.pop(TARGET, None)
    yield TARGET
    MANAGER.astroid_cache.pop(TARGET, None)


@pytest.mark.parametrize("body", [
    f"{TARGET}.flag = 1",
    f"{TARGET}.settings.flag = 1",
    f"thing = {TARGET}.Thing()\nthing.flag = 1",
    f"class Layer:\n    @{TARGET}.Thing\n    def forward(self):\n        self.flag = 1",
], ids=["module-attribute", "nested-attribute", "instance-attribute", "self-in-decorated-method"])
def test_attribute_assignments_do_not_build_imported_modules(importable_target: str, body: str) -> None:
    source = f"import torch_npu\nimport {importable_target}\n\n{body}\n"
    assert lint_source(source, "model.py") == []
    assert importable_target not in MANAGER.astroid_cache


def full_tree_findings(source: str, path: str) -> list:
    """What pylint's front-end reports: the engine run on the tree astroid builds with every post-build step."""
    return analyze(AstroidBuilder(MANAGER).string_build(source, path=path), path)


CLASS_ATTRIBUTE = textwrap.dedent("""\
    import torch_npu


    class Layer:
        def __init__(self):
            self.op = torch_npu.npu_fused_infer_attention_score

        def forward(self, q, k, v):
            return self.op(q, k, v, num_head=8, scale=0.1, input_layout="BSND")
""")


@pytest.mark.parametrize("tail, reported", [
    ("", True),
    ("\n\nLayer.op = staticmethod(lambda *args, **kwargs: None)\n", False),
], ids=["instance-attribute-only", "class-attribute-set-outside"])
def test_attributes_of_the_files_own_classes_are_recorded_as_in_pylints_tree(tail: str, reported: bool) -> None:
    """``Layer.op = ...`` at module level adds ``op`` to the class in the tree pylint builds, which makes
    ``self.op`` ambiguous; the engine's own tree must agree so the front-ends report the same."""
    source = CLASS_ATTRIBUTE + tail
    findings = lint_source(source, "model.py")
    assert findings == full_tree_findings(source, "model.py")
    assert ("KVL101" in {f.code for f in findings}) is reported


PARSABLE_FIXTURES = [path for path in fixture_files() if path.parent.name != "KVL000"]


@pytest.mark.parametrize("fixture", PARSABLE_FIXTURES, ids=lambda path: f"{path.parent.name}/{path.name}")
def test_engine_tree_gives_the_same_findings_as_pylints_tree(fixture: Path) -> None:
    source = fixture.read_text(encoding="utf-8")
    assert lint_source(source, str(fixture)) == full_tree_findings(source, str(fixture))
