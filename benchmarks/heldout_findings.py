"""kvlint's static findings on a held-out set of issue 23: the files of a manifest (``heldout_manifest.json``, or
``--set heldout2`` for the second round's ``heldout2_*.json``), the mistakes labelled by hand before kvlint ran
(``<set>_labels.json``) and the verdict on every finding (``<set>_judgements.json``).

    python benchmarks/heldout_findings.py --tree DIR [--set heldout2] [--run]

``DIR`` holds one folder per repository, named ``<owner>+<name>``, with the manifest's paths inside it (the files
at the manifest's commit; nothing of them is committed here). The line count of every file is checked against
the manifest first. ``--run`` runs ``kvlint --isolated --format json`` once per repository folder and writes the
findings to ``DIR/<owner>+<name>.findings.json``; without it the findings already there are read. Then every
finding is joined with its verdict (a finding without one is listed as unjudged) and the figures are printed:
findings, true / false / debatable, false findings per 10k lines of the recorded files, recall against the
labels within the rules' scope (a label counts as found when a finding judged true, or debatable because no
caller reaches the wrong result, names it; also over the labels not known to be unreached), and the findings
that repeat another finding's defect (a verdict's ``same_defect_as`` names that finding).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
KVLINT = Path(sys.executable).with_name("kvlint")


def folder(repository: str) -> str:
    return repository.replace("/", "+")


def check_tree(tree: Path, repositories: list[dict]) -> None:
    """Every recorded file is there with its recorded number of lines, or the figures would mean nothing."""
    for repo in repositories:
        for entry in repo["paths"]:
            path = tree / folder(repo["repository"]) / entry["path"]
            if not path.is_file():
                sys.exit(f"{path}: recorded in the manifest but missing")
            with path.open(encoding="utf-8", errors="replace") as handle:
                lines = sum(1 for _ in handle)
            if lines != entry["lines"]:
                sys.exit(f"{path}: {lines} lines, the manifest records {entry['lines']} (another commit?)")


def run_kvlint(tree: Path, repository: str) -> list[dict]:
    out = tree / f"{folder(repository)}.findings.json"
    root = tree / folder(repository)
    result = subprocess.run([str(KVLINT), "--isolated", "--exit-zero", "--format", "json", str(root)],
                            capture_output=True, text=True, check=False)
    if result.returncode != 0:
        sys.exit(f"kvlint failed on {root}: {result.stderr.strip()}")
    out.write_text(result.stdout, encoding="utf-8")
    return json.loads(result.stdout)


def relative(finding: dict, tree: Path, repository: str) -> str:
    return str(Path(finding["path"]).resolve().relative_to((tree / folder(repository)).resolve()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", type=Path, required=True)
    parser.add_argument("--set", default="heldout", choices=("heldout", "heldout2"),
                        help="which held-out round: its <set>_manifest.json, _labels.json and _judgements.json")
    parser.add_argument("--run", action="store_true", help="run kvlint (once) instead of reading its findings")
    args = parser.parse_args()
    manifest = json.loads((HERE / f"{args.set}_manifest.json").read_text())
    # The second round's manifest keeps the replacements it took apart from its first choices.
    entries = manifest["repositories"] + manifest.get("replacements_in_order", [])
    repositories = [r for r in entries if r.get("paths")]
    check_tree(args.tree, repositories)
    labels = json.loads((HERE / f"{args.set}_labels.json").read_text())["labels"]
    judgements = HERE / f"{args.set}_judgements.json"
    verdicts = {(j["repository"], j["path"], j["line"], j["code"]): j
                for j in json.loads(judgements.read_text())["judgements"]} if judgements.exists() else {}
    lines = sum(r["lines"] for r in repositories)
    counts: Counter[str] = Counter()
    found: set[int] = set()
    doubles: list[tuple[tuple, str]] = []
    unjudged = []
    for repo in repositories:
        name = repo["repository"]
        source = args.tree / f"{folder(name)}.findings.json"
        if not args.run and not source.is_file():
            sys.exit(f"{source}: no findings recorded for {name}; run once with --run")
        findings = run_kvlint(args.tree, name) if args.run else json.loads(source.read_text())
        for finding in findings:
            key = (name, relative(finding, args.tree, name), finding["line"], finding["code"])
            verdict = verdicts.get(key)
            if verdict is None:
                unjudged.append(key)
                continue
            counts[verdict["verdict"]] += 1
            if verdict.get("same_defect_as"):
                doubles.append((key, verdict["same_defect_as"]))
            for index in verdict.get("labels", []):
                if verdict["verdict"] in ("true", "debatable"):
                    found.add(index)
    in_scope = [i for i, label in enumerate(labels) if label["in_scope"]]
    print(f"files: {sum(len(r['paths']) for r in repositories)}, lines: {lines}")
    print(f"findings: {sum(counts.values()) + len(unjudged)} (true {counts['true']}, false {counts['false']}, "
          f"debatable {counts['debatable']}, unjudged {len(unjudged)})")
    print(f"false per 10k lines: {counts['false'] / lines * 10_000:.2f}")
    print(f"recall: {len(found & set(in_scope))} of {len(in_scope)} labelled mistakes within scope")
    reachable = [i for i in in_scope if labels[i]["reached"] != "no"]
    print(f"recall on the labels a caller may reach: {len(found & set(reachable))} of {len(reachable)}")
    for index in in_scope:
        if index not in found:
            label = labels[index]
            print(f"  missed: {label['repository']} {label['path']}:{label['line']} ({label['rule_family']})")
    print(f"findings that repeat another finding's defect: {len(doubles)}")
    for key, other in doubles:
        print("  double:", *key, "repeats", other)
    for key in unjudged:
        print("  unjudged:", *key)


if __name__ == "__main__":
    main()
