"""SARIF 2.1.0 from ``kvlint --format sarif`` and from pylint's ``kvlint.reporters.SarifReporter``: valid
against the OASIS schema, carrying what GitHub code scanning requires, and the same from both."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from kvlint.catalogue import pages, project
from kvlint.catalogue.pages import doc_url
from kvlint.catalogue.rules import STATIC_RULES, rule
from kvlint.frontends.output import SarifLog, kvlint_descriptor
from tests.conftest import ROOT
from tests.fixture_files import FIXTURES

SCHEMA = json.loads((ROOT / "tests" / "data" / "sarif" / "sarif-schema-2.1.0.json").read_text(encoding="utf-8"))
FLAGGED = sorted(str(p.relative_to(ROOT)) for p in FIXTURES.glob("KVL1*/flagged_*.py"))


def cli_sarif(*paths: str, cwd: Path = ROOT) -> dict:
    out = subprocess.run([sys.executable, "-m", "kvlint", "--isolated", "--format", "sarif", *paths],
                         capture_output=True, text=True, cwd=cwd)
    assert out.returncode in (0, 1, 2), out.stderr
    return json.loads(out.stdout)


def pylint_sarif(*args: str, cwd: Path = ROOT) -> dict:
    out = subprocess.run([sys.executable, "-m", "pylint", "--load-plugins", "kvlint", "--score=n",
                          "--output-format=kvlint.reporters.SarifReporter", *args],
                         capture_output=True, text=True, cwd=cwd)
    assert out.returncode < 32, out.stderr
    return json.loads(out.stdout)


def validate(log: dict) -> None:
    jsonschema.Draft4Validator(SCHEMA).validate(log)


@pytest.fixture(scope="module")
def cli_log() -> dict:
    return cli_sarif(*FLAGGED)


def test_cli_output_is_valid_sarif_2_1_0(cli_log: dict) -> None:
    validate(cli_log)
    assert cli_log["version"] == "2.1.0"
    assert cli_log["$schema"] == "https://json.schemastore.org/sarif-2.1.0.json"


def test_driver_lists_every_static_rule_as_github_requires(cli_log: dict) -> None:
    driver = cli_log["runs"][0]["tool"]["driver"]
    assert driver["name"] == "kvlint"
    rules = driver["rules"]
    assert [(r["id"], r["name"]) for r in rules] == [(r.code, r.symbol) for r in STATIC_RULES]
    for descriptor, entry in zip(rules, STATIC_RULES):
        assert descriptor["shortDescription"]["text"] == entry.summary
        assert 0 < len(descriptor["shortDescription"]["text"]) <= 1024 and len(descriptor["name"]) <= 255
        assert descriptor["fullDescription"]["text"] and descriptor["help"]["text"]
        assert descriptor["help"]["markdown"].startswith(f"# {entry.code} ")
        assert descriptor.get("helpUri") == doc_url(entry)
        assert descriptor["defaultConfiguration"]["level"] == entry.severity


def test_links_come_from_the_distributions_metadata_or_are_left_out(cli_log: dict) -> None:
    """No made-up home page: the installed metadata declares no project URL, so there is neither an
    ``informationUri`` nor a ``helpUri``."""
    assert project.project_urls() == {}, "the metadata now declares URLs: check what helpUri derives from them"
    driver = cli_log["runs"][0]["tool"]["driver"]
    assert "informationUri" not in driver
    assert all("helpUri" not in descriptor for descriptor in driver["rules"])
    assert "github.com/kvlint/kvlint" not in json.dumps(cli_log)


@pytest.mark.parametrize(("urls", "docs", "home"), [
    ({"documentation": "https://example.org/kvlint/docs"}, "https://example.org/kvlint/docs/", None),
    ({"source": "https://github.com/acme/kvlint-ascend/"}, "https://github.com/acme/kvlint-ascend/blob/HEAD/docs/",
     "https://github.com/acme/kvlint-ascend/"),
    ({"homepage": "https://acme.example/kvlint"}, None, "https://acme.example/kvlint"),
    ({"homepage": "https://github.com/acme"}, None, "https://github.com/acme"),
    ({}, None, None),
])
def test_docs_and_home_urls_are_derived_from_project_urls(urls: dict, docs: str | None, home: str | None) -> None:
    assert project.docs_url(urls) == docs
    assert project.home_url(urls) == home


def test_help_uri_and_explained_links_follow_a_published_documentation_url(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pages, "docs_url", lambda: "https://example.org/kvlint/docs/")
    descriptor = kvlint_descriptor(rule("KVL201")).to_sarif()
    assert descriptor["helpUri"] == "https://example.org/kvlint/docs/rules/KVL201.md"
    assert ("[FIA-C20: atten_mask is bool, int8 or uint8](https://example.org/kvlint/docs/operators/"
            "fused_infer_attention.md#fia-c20)") in descriptor["help"]["markdown"]
    monkeypatch.setattr("kvlint.frontends.output.home_url", lambda: "https://example.org/kvlint")
    assert SarifLog().to_dict()["runs"][0]["tool"]["driver"]["informationUri"] == "https://example.org/kvlint"


def test_results_carry_level_message_relative_uri_region_and_fingerprint(cli_log: dict) -> None:
    run = cli_log["runs"][0]
    rules = run["tool"]["driver"]["rules"]
    expected = json.loads(subprocess.run([sys.executable, "-m", "kvlint", "--isolated", "--format", "json", *FLAGGED],
                                         capture_output=True, text=True, cwd=ROOT).stdout)
    assert len(run["results"]) == len(expected) > 10
    for result, finding in zip(run["results"], expected):
        assert rules[result["ruleIndex"]]["id"] == result["ruleId"] == finding["code"]
        assert result["level"] == finding["severity"]
        assert result["message"]["text"] == f"{finding['message']} [{finding['symbol']}]"
        location = result["locations"][0]["physicalLocation"]
        assert location["artifactLocation"] == {"uri": finding["path"], "uriBaseId": "%SRCROOT%"}
        assert location["region"] == {"startLine": finding["line"], "startColumn": finding["column"],
                                      "endLine": finding["end_line"], "endColumn": finding["end_column"]}
        assert result["partialFingerprints"]["primaryLocationLineHash"]
    assert run["originalUriBaseIds"]["%SRCROOT%"]["uri"] == ROOT.as_uri() + "/"
    assert run["invocations"] == [{"executionSuccessful": True}]


def test_without_a_git_work_tree_uris_are_relative_to_the_current_folder(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "m.py").write_text((ROOT / FLAGGED[0]).read_text(encoding="utf-8"))
    log = cli_sarif("pkg", cwd=tmp_path)
    location = log["runs"][0]["results"][0]["locations"][0]["physicalLocation"]["artifactLocation"]
    assert location == {"uri": "pkg/m.py", "uriBaseId": "%SRCROOT%"}


def test_uris_are_relative_to_the_repository_root_from_any_folder(tmp_path: Path) -> None:
    """The root is the folder that holds ``.git`` (built here, so the test also runs from an unpacked sdist)."""
    (tmp_path / ".git").mkdir()
    path = tmp_path / "src" / "pkg" / "m.py"
    path.parent.mkdir(parents=True)
    path.write_text((ROOT / FLAGGED[0]).read_text(encoding="utf-8"))
    (tmp_path / "docs").mkdir()
    log = cli_sarif(str(path), cwd=tmp_path / "docs")
    location = log["runs"][0]["results"][0]["locations"][0]["physicalLocation"]["artifactLocation"]
    assert location == {"uri": "src/pkg/m.py", "uriBaseId": "%SRCROOT%"}


def test_files_outside_the_repository_get_absolute_file_uris(tmp_path: Path) -> None:
    path = tmp_path / "m.py"
    path.write_text((ROOT / FLAGGED[0]).read_text(encoding="utf-8"))
    log = cli_sarif(str(path), cwd=ROOT)
    validate(log)
    location = log["runs"][0]["results"][0]["locations"][0]["physicalLocation"]["artifactLocation"]
    assert location == {"uri": path.resolve().as_uri()}


BAD_LINE = "    torch_npu.npu_fused_infer_attention_score(q, k, v, num_heads=8, scale=0.1, input_layout='bnsd')\n"


def _fingerprints(tmp_path: Path, text: str) -> list[str]:
    path = tmp_path / "m.py"
    path.write_text(text)
    log = cli_sarif("m.py", cwd=tmp_path)
    return [r["partialFingerprints"]["primaryLocationLineHash"] for r in log["runs"][0]["results"]]


def test_fingerprints_survive_moved_lines_and_tell_identical_lines_apart(tmp_path: Path) -> None:
    body = "import torch_npu\n\n\ndef decode(q, k, v):\n" + BAD_LINE + BAD_LINE
    first = _fingerprints(tmp_path, body)
    moved = _fingerprints(tmp_path, "# a comment\n\n" + body)
    assert first == moved
    assert len(set(first)) == 2 and first[0].endswith(":1") and first[1].endswith(":2")


def test_columns_count_code_points_on_non_ascii_lines(tmp_path: Path) -> None:
    path = tmp_path / "m.py"
    path.write_text("import torch_npu\n\n\ndef decode(q, k, v):\n"
                    "    é = torch_npu.npu_fused_infer_attention_score(q, k, v, num_heads=8, scale=0.1,"
                    " inputlayout='x')\n",
                    encoding="utf-8")
    log = cli_sarif("m.py", cwd=tmp_path)
    region = log["runs"][0]["results"][0]["locations"][0]["physicalLocation"]["region"]
    line = path.read_text(encoding="utf-8").splitlines()[4]
    assert region["startColumn"] == line.index("inputlayout") + 1
    assert region["endColumn"] == line.index("inputlayout") + len("inputlayout='x'") + 1


def test_unreadable_files_are_tool_notifications(tmp_path: Path) -> None:
    log = cli_sarif(str(tmp_path / "missing.py"), cwd=tmp_path)
    validate(log)
    [invocation] = log["runs"][0]["invocations"]
    assert invocation["executionSuccessful"] is False
    assert "missing.py: no such file" in invocation["toolExecutionNotifications"][0]["message"]["text"]


def test_pylint_reporter_gives_the_same_results_as_the_cli(cli_log: dict) -> None:
    log = pylint_sarif("--disable=all", "--enable=kvlint", *FLAGGED)
    validate(log)
    assert log["runs"][0]["tool"]["driver"]["rules"] == cli_log["runs"][0]["tool"]["driver"]["rules"]

    def key(result: dict) -> tuple:
        return (result["locations"][0]["physicalLocation"]["artifactLocation"]["uri"],
                result["locations"][0]["physicalLocation"]["region"]["startLine"],
                result["locations"][0]["physicalLocation"]["region"]["startColumn"], result["ruleId"])

    assert sorted(log["runs"][0]["results"], key=key) == sorted(cli_log["runs"][0]["results"], key=key)


def test_pylint_reporter_describes_pylint_messages_too(tmp_path: Path) -> None:
    path = tmp_path / "m.py"
    path.write_text("import os\nimport torch_npu\n\n\ndef decode(q, k, v):\n" + BAD_LINE)
    log = pylint_sarif("--disable=all", "--enable=kvlint,unused-import", "m.py", cwd=tmp_path)
    validate(log)
    run = log["runs"][0]
    assert sorted(r["ruleId"] for r in run["results"]) == ["KVL106", "W0611"]
    descriptor = run["tool"]["driver"]["rules"][-1]
    assert (descriptor["id"], descriptor["name"], descriptor["defaultConfiguration"]["level"]) == (
        "W0611", "unused-import", "warning")
    unused = next(r for r in run["results"] if r["ruleId"] == "W0611")
    assert run["tool"]["driver"]["rules"][unused["ruleIndex"]]["id"] == "W0611"
