"""``labeler eval --report-md / --junit``: the pull-request comment and the JUnit XML, on a small
golden set whose questions carry markdown and HTML from the logs; and the GitHub Actions workflow
the docs ship (docs/ci/labeler-eval.yml), whose ``labeler`` command lines are run here as written."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import junitparser
import markdown
import pytest
import yaml
from click.testing import CliRunner

from labeler.cli import cli
from labeler.harness import evaluate, junit_xml, pr_markdown
from labeler.harness.ci import plain

ROOT = Path(__file__).resolve().parent.parent
WORKFLOW = ROOT / "docs" / "ci" / "labeler-eval.yml"
N = 30
PLANTED = "How do I **bold** <img src=x onerror=alert(1)> a | pipe, `code` and [a link](http://x.test)?"


@pytest.fixture(autouse=True)
def _no_step_summary(monkeypatch):
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)


def question(i: int) -> str:
    return f"question {i}: " + (PLANTED if i == 0 else f"what does chunk {i} say?")


def write_golden(path: Path) -> Path:
    with open(path, "w", encoding="utf-8") as f:
        for i in range(N):
            f.write(json.dumps({"query_id": f"q-{i}" if i else "q-0 | `x` **y**", "question": question(i),
                                "relevant_ids": [f"d{i}"], "relevance": {f"d{i}": 2}}) + "\n")
    return path


def _index(q: str) -> int:
    return int(re.match(r"question (\d+):", q).group(1))


def _docs(*ids: str) -> list[dict]:
    return [{"id": i} for i in ids]


def good(q: str):
    """The relevant chunk first."""
    i = _index(q)
    return _docs(f"d{i}", "x1", "x2"), None


def worse(q: str):
    """The relevant chunk third in two questions of three (question 0 among them)."""
    i = _index(q)
    return (_docs("x1", "x2", f"d{i}") if i % 3 != 2 else _docs(f"d{i}", "x1", "x2")), None


def better(q: str):
    return good(q)


@pytest.fixture
def gate_files(tmp_path):
    golden = write_golden(tmp_path / "golden.jsonl")
    baseline = tmp_path / "baseline.json"
    first = evaluate(golden, pipeline=worse, k=3, save_baseline=baseline)
    assert first.status == "no baseline"
    return golden, baseline


def run_eval(*args: str):
    return CliRunner().invoke(cli, ["eval", *args], catch_exceptions=False)


# --- the pull-request comment -------------------------------------------------------------------------

def test_a_regression_writes_the_comment_and_junit_and_keeps_exit_3(gate_files, tmp_path):
    golden, baseline = gate_files
    # the baseline is "good" this time: save it, then gate the worse pipeline against it
    good_baseline = tmp_path / "good.json"
    evaluate(golden, pipeline=good, k=3, save_baseline=good_baseline)
    md, xml = tmp_path / "report.md", tmp_path / "junit.xml"
    r = run_eval("--golden", str(golden), "--pipeline", "tests.test_eval_ci:worse", "-k", "3",
                 "--baseline", str(good_baseline), "--max-drop", "0.02", "--report-md", str(md), "--junit", str(xml),
                 "--permutations", "2000")
    assert r.exit_code == 3, r.output
    text = md.read_text(encoding="utf-8")
    assert text.startswith("<!-- labeler-eval -->\n## labeler eval: ❌ FAIL: ")
    assert "recall@1" not in text  # -k 3: recall@3 etc.
    rows = {line.split("|")[1].strip(): line for line in text.splitlines() if line.startswith("| ")}
    mrr = [c.strip() for c in rows["mrr"].split("|")[1:-1]]
    # baseline 1, candidate 1/3 * 2/3... : (20 * 1/3 + 10 * 1) / 30
    assert mrr[1] == "1.0000" and mrr[2] == f"{(20 / 3 + 10) / 30:.4f}"
    diff, low, high = re.match(r"([-+]\d\.\d{4}) \(([-+]\d\.\d{4}) to ([-+]\d\.\d{4})\)", mrr[3]).groups()
    assert float(low) <= float(diff) <= float(high) < 0
    assert float(mrr[4]) < 0.05 and mrr[5] == "0.02" and mrr[6] == "❌ regressed"
    hit = [c.strip() for c in rows["hit@3"].split("|")[1:-1]]
    assert hit[3].startswith("+0.0000") and hit[6] == "pass"
    assert "### Worst regressed queries (10)" in text
    assert f"sha256 `{json.loads(good_baseline.read_text())['golden']['sha256'][:12]}`" in text
    # junit: one test case per metric, a failure on each regressed one
    root = ET.parse(xml).getroot()
    cases = root.findall("./testsuite/testcase")
    assert [c.get("name") for c in cases] == ["recall@3", "precision@3", "hit@3", "mrr", "ndcg@3"]
    failed = {c.get("name"): c.find("failure") for c in cases if c.find("failure") is not None}
    assert set(failed) == {"mrr", "ndcg@3"}  # the relevant chunk stays in the top 3: recall, precision, hit unchanged
    assert failed["mrr"].get("message").startswith("mrr dropped by 0.4444 (max drop 0.02, p = ")
    assert root.get("failures") == "2" and root.find("testsuite").get("tests") == "5"
    suite = junitparser.JUnitXml.fromfile(str(xml))
    parsed = {case.name: case for s in suite for case in s}
    assert len(parsed) == 5 and not parsed["mrr"].is_passed and parsed["hit@3"].is_passed
    assert parsed["mrr"].result[0].message == failed["mrr"].get("message")


def test_text_from_the_logs_is_never_markdown_or_html(gate_files, tmp_path):
    golden, baseline = gate_files
    good_baseline = tmp_path / "good.json"
    evaluate(golden, pipeline=good, k=3, save_baseline=good_baseline)
    result = evaluate(golden, pipeline=worse, k=3, baseline=good_baseline, max_drop=["0.02"], n_permutations=500)
    text = pr_markdown(result.report, result.questions)
    html = markdown.markdown(text, extensions=["tables"])
    assert "<img" not in html and "<strong>" not in html and "<a " not in html
    assert "&lt;img src=x onerror=alert(1)&gt;" in html
    assert "**bold**" in html and "`code`" in html and "[a link](http://x.test)" in html  # shown as typed
    [row] = [line for line in text.splitlines() if "bold" in line]
    assert len(re.split(r"(?<!\\)\|", row)) == 5  # three cells: the question's pipe stays inside its cell
    cells = re.findall(r"<tr>\s*<td>(.*?)</td>\s*<td>(.*?)</td>\s*<td>(.*?)</td>\s*</tr>", html, re.S)
    [(query, shown, _)] = [c for c in cells if "bold" in c[1]]
    assert shown.startswith("question 0: How do I **bold** &lt;img") and "a | pipe" in shown
    assert "q-0 | `x` **y**" in query
    assert plain("a\n*b*", 80) == r"a \*b\*" and plain("x" * 10, 5) == "xxxx…"


def test_without_a_baseline_and_with_an_improvement(gate_files, tmp_path):
    golden, baseline = gate_files
    result = evaluate(golden, pipeline=good, k=3)
    text = pr_markdown(result.report, result.questions)
    assert "## labeler eval: no baseline to compare with" in text and "Worst regressed" not in text
    root = ET.fromstring(junit_xml(result.report).split("\n", 1)[1])
    assert root.get("failures") == "0" and len(root.findall(".//testcase")) == 5
    improved = evaluate(golden, pipeline=better, k=3, metrics=["recall@1"], baseline=baseline, n_permutations=500)
    text = pr_markdown(improved.report, improved.questions)
    assert "✅ PASS: no metric regressed" in text
    mrr = next(line for line in text.splitlines() if line.startswith("| mrr |"))
    assert mrr.endswith("| ✅ improved |")
    assert next(line for line in text.splitlines() if line.startswith("| recall@1 |")).endswith("| new (not in the baseline) |")
    root = ET.fromstring(junit_xml(improved.report).split("\n", 1)[1])
    assert root.get("skipped") == "1" and root.find(".//testcase[@name='recall@1']/skipped") is not None
    # a metric --max-drop does not name cannot fail: it is "not gated", never "pass"
    evaluate(golden, pipeline=good, k=3, save_baseline=tmp_path / "good.json")
    only_mrr = evaluate(golden, pipeline=worse, k=3, baseline=tmp_path / "good.json", max_drop=["mrr=0.02"],
                        n_permutations=500)
    text = pr_markdown(only_mrr.report, only_mrr.questions)
    assert next(line for line in text.splitlines() if line.startswith("| ndcg@3 |")).endswith("| not gated |")
    assert next(line for line in text.splitlines() if line.startswith("| mrr |")).endswith("| ❌ regressed |")


def test_the_files_are_written_even_when_every_question_failed(tmp_path):
    golden = write_golden(tmp_path / "golden.jsonl")
    md, xml = tmp_path / "r.md", tmp_path / "j.xml"
    r = run_eval("--golden", str(golden), "--pipeline", "tests.test_eval_ci:broken", "--report-md", str(md),
                 "--junit", str(xml))
    assert r.exit_code == 1 and "all 30 questions failed" in r.output
    assert "30 questions failed in the pipeline" in md.read_text() and ET.parse(xml).getroot().tag == "testsuites"
    r = run_eval("--golden", str(golden), "--pipeline", "tests.test_eval_ci:good", "--junit", " ")
    assert r.exit_code == 1 and "--junit must be a file path" in r.output


def broken(q: str):
    raise RuntimeError("the index is down")


# --- the workflow the docs ship -----------------------------------------------------------------------

def _labeler_shim(bin_dir: Path) -> None:
    """``labeler`` on PATH running this checkout (the shared install may point at another one)."""
    bin_dir.mkdir()
    shim = bin_dir / "labeler"
    shim.write_text(f"#!/bin/sh\nexec {sys.executable} -m labeler \"$@\"\n")
    shim.chmod(0o755)


def workflow_steps() -> tuple[dict, list[dict]]:
    doc = yaml.safe_load(WORKFLOW.read_text(encoding="utf-8"))
    [job] = doc["jobs"].values()
    return doc, job["steps"]


def test_the_workflow_is_a_github_actions_workflow_that_posts_the_comment_and_uploads_junit():
    doc, steps = workflow_steps()
    assert "pull_request" in doc.get("on", doc.get(True))  # YAML 1.1 reads the key on as True
    uses = [s.get("uses", "") for s in steps]
    assert any(u.startswith("actions/checkout@") for u in uses)
    setup = next(s for s in steps if s.get("uses", "").startswith("actions/setup-python@"))
    assert str(setup["with"]["python-version"]) == "3.11"
    assert any("pip install" in s.get("run", "") for s in steps)
    comment = next(s for s in steps if "gh pr comment" in s.get("run", ""))
    assert "--body-file report.md" in comment["run"] and comment["if"].startswith("always()")
    upload = next(s for s in steps if s.get("uses", "").startswith("actions/upload-artifact@"))
    assert upload["with"]["path"] == "junit.xml" and upload["if"].startswith("always()")
    [job] = doc["jobs"].values()
    assert job["permissions"]["pull-requests"] == "write"
    assert (ROOT / "docs" / "ci-gate.md").read_text().count(WORKFLOW.read_text().strip()) == 1  # the page shows the file


@pytest.mark.parametrize("pipeline, code", [("good", 0), ("worse", 3)])
def test_the_workflow_labeler_steps_run_as_written(tmp_path, pipeline, code):
    """Every ``run:`` step that calls labeler, run with bash in a checkout-like folder: the golden
    set, the baseline and a pipeline module where the workflow's env says; exit 0 on a pass and 3 on
    a regression, report.md and junit.xml written either way."""
    doc, steps = workflow_steps()
    [job] = doc["jobs"].values()
    env = {**os.environ, **{k: str(v) for k, v in (doc.get("env") or {}).items()},
           **{k: str(v) for k, v in (job.get("env") or {}).items()}}
    work = tmp_path / "repo"
    work.mkdir()
    golden = work / env["GOLDEN"]
    golden.parent.mkdir(parents=True, exist_ok=True)
    write_golden(golden)
    baseline = work / env["BASELINE"]
    baseline.parent.mkdir(parents=True, exist_ok=True)
    evaluate(golden, pipeline=good, k=int(env.get("K", 10)), save_baseline=baseline)
    module, function = env["PIPELINE"].split(":")
    (work / f"{module.replace('.', '/')}.py").parent.mkdir(parents=True, exist_ok=True)
    (work / f"{module.replace('.', '/')}.py").write_text(
        f"from tests.test_eval_ci import {pipeline} as {function}\n")
    _labeler_shim(tmp_path / "bin")
    env.update(PATH=f"{tmp_path / 'bin'}{os.pathsep}{env['PATH']}", PYTHONPATH=f"{ROOT}{os.pathsep}{work}")
    env.pop("GITHUB_STEP_SUMMARY", None)
    calls = [s for s in steps if re.search(r"(^|\s)labeler\s", s.get("run", ""))]
    assert calls, "no step runs labeler"
    for step in calls:
        step_env = {**env, **{k: str(v) for k, v in (step.get("env") or {}).items()}}
        done = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", step["run"]], cwd=work, env=step_env,
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == code, done.stdout + done.stderr
    assert (work / "report.md").read_text().startswith("<!-- labeler-eval -->")
    assert ET.parse(work / "junit.xml").getroot().get("failures") == ("0" if code == 0 else "2")
