"""What a CI job publishes about one evaluation: the pull-request comment (``--report-md``) and a
JUnit XML with one test case per metric (``--junit``), both made from the report of
:func:`labeler.harness.evaluate`.

The comment says the verdict in its title, then one row per metric: the baseline's mean, the
candidate's, the paired difference (candidate - baseline) with its 95% bootstrap CI and the paired
randomization test's p-value, and the verdict (regressed: the gate failed it; improved: it rose with
p < alpha; pass; new: not in the baseline); then the questions that got worse the most and the
golden set's version and hash. Text that came from logs (questions, ids, errors) is never markdown:
it is escaped so that ``**``, ``<img>``, pipes and backticks show as typed. The JUnit file is
written with ``xml.etree`` (so every value is escaped), one ``<testcase>`` per metric and a
``<failure>`` on a regressed one. Both files are written whatever the verdict; the exit code is
the gate's.
"""

from __future__ import annotations

import html
import math
import re
import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..errors import LabelerError

WORST = 10  # questions listed under "worst regressed queries"
QUESTION_WIDTH = 120  # characters of a question shown in the comment
MARKER = "<!-- labeler-eval -->"  # first line of the comment: lets a workflow find and update it

_MARKDOWN = re.compile(r"([\\`*_{}\[\]()#+\-.!|~>])")


def plain(text: Any, width: int | None = None) -> str:
    """``text`` as literal markdown inline text: one line, HTML special characters as entities and
    every markdown punctuation character backslash-escaped (a pipe cannot end a table cell, a
    backtick cannot open code, ``**`` cannot make bold, ``<img>`` cannot be an image). ``width``:
    cut longer text with an ellipsis."""
    text = " ".join(str(text).split())
    if width is not None and len(text) > width:
        text = text[: width - 1] + "…"
    return _MARKDOWN.sub(r"\\\1", html.escape(text, quote=False))


def _num(value: Any, digits: int = 4) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    return f"{value:.{digits}f}"


def _signed(value: Any) -> str:
    if value is None:
        return "–"
    text = f"{value:+.4f}"
    return "+0.0000" if float(text) == 0 else text  # no "-0.0000"


def verdicts(report: Mapping[str, Any]) -> dict[str, str]:
    """Each metric's verdict: ``regressed`` (the gate failed it), ``not gated`` (``--max-drop`` names
    only other metrics), ``improved`` (its mean rose and the paired test gives p < alpha), ``pass``,
    ``new`` (not in the baseline) or ``no baseline``."""
    comparison = report.get("comparison")
    alpha = report["settings"]["alpha"]
    out = {}
    for spec in report["metrics"]:
        if comparison is None:
            out[spec] = "no baseline"
            continue
        change = comparison["metrics"].get(spec)
        if change is None or change["drop"] is None:
            out[spec] = "new"
        elif change["failed"]:
            out[spec] = "regressed"
        elif change["max_drop"] is None:
            out[spec] = "not gated"  # --max-drop names other metrics: this one cannot fail
        elif change["drop"] < 0 and change["p_value"] is not None and change["p_value"] < alpha:
            out[spec] = "improved"
        else:
            out[spec] = "pass"
    return out


_SHOWN = {"regressed": "❌ regressed", "improved": "✅ improved", "pass": "pass", "new": "new (not in the baseline)",
          "not gated": "not gated", "no baseline": "–"}


def worst_regressed(questions: Sequence[Mapping[str, Any]], specs: Sequence[str],
                    n: int = WORST) -> list[dict[str, Any]]:
    """The ``n`` questions whose value dropped the most against the baseline in any metric of
    ``specs`` (ties: the order of the golden set), each with every metric that dropped."""
    worst = []
    for position, row in enumerate(questions):
        base = row.get("baseline") or {}
        drops = {}
        for spec in specs:
            before, after = base.get(spec), (row.get("metrics") or {}).get(spec)
            if isinstance(before, int | float) and isinstance(after, int | float) and after < before - 1e-12:
                drops[spec] = (float(before), float(after))
        if drops:
            largest = max(before - after for before, after in drops.values())
            worst.append((-largest, position, {"query_id": row.get("query_id"), "question": row.get("question"),
                                               "drop": largest, "changes": drops}))
    return [entry for *_, entry in sorted(worst, key=lambda w: (w[0], w[1]))[:n]]


def pr_markdown(report: Mapping[str, Any], questions: Sequence[Mapping[str, Any]], *, worst: int = WORST) -> str:
    """The pull-request comment of an evaluation (see the module docstring)."""
    comparison = report.get("comparison")
    shown = verdicts(report)
    regressed = [spec for spec, v in shown.items() if v == "regressed"]
    if comparison is None:
        title = "no baseline to compare with"
    elif regressed:
        title = f"❌ FAIL: {', '.join(regressed)} regressed"
    else:
        title = "✅ PASS: no metric regressed"
    g, counts = report["golden"], report["counts"]
    export = g.get("export") or {}
    version = f"version {plain(export['version'])}, " if export.get("version") else ""
    lines = [MARKER, f"## labeler eval: {title}", "",
             f"Golden set {plain(Path(g['path']).name)} ({version}sha256 `{g['sha256'][:12]}`, "
             f"{g['questions']} questions, threshold {g['threshold']}); pipeline {plain(report['pipeline']['id'])}: "
             f"{counts['evaluated']} evaluated, {counts['errors']} errors, {counts['timeouts']} timeouts, "
             f"{counts['skipped']} skipped.", ""]
    lines += ["| metric | baseline | candidate | difference (95% CI) | p-value | max drop | verdict |",
              "|---|---:|---:|---|---:|---:|---|"]
    for spec, agg in report["metrics"].items():
        change = (comparison or {}).get("metrics", {}).get(spec) or {}
        difference = "–"
        if change.get("drop") is not None:
            difference = _signed(-change["drop"])
            if change.get("diff_ci_low") is not None:
                difference += f" ({_signed(change['diff_ci_low'])} to {_signed(change['diff_ci_high'])})"
        tolerance = "–" if change.get("max_drop") is None else f"{change['max_drop']:g}"
        lines.append(f"| {plain(spec)} | {_num(change.get('baseline'))} | {_num(agg['mean'])} | {difference} | "
                     f"{_num(change.get('p_value'))} | {tolerance} | {_SHOWN[shown[spec]]} |")
    if comparison is not None:
        lines += ["", f"Paired on the {comparison['matched']} questions shared with the baseline "
                      f"{plain(Path(comparison['baseline']).name)} ({comparison['only_current']} new, "
                      f"{comparison['only_baseline']} only in the baseline). A metric regresses when its mean "
                      f"drops by more than its max drop and the paired randomization test gives p < "
                      f"{report['settings']['alpha']}."]
        listed = worst_regressed(questions, list(report["metrics"]), worst)
        if listed:
            lines += ["", f"### Worst regressed queries ({len(listed)})", "",
                      "| query | question | baseline → candidate |", "|---|---|---|"]
            for entry in listed:
                changes = "; ".join(f"{plain(spec)} {before:.3f} → {after:.3f}"
                                    for spec, (before, after) in entry["changes"].items())
                query = plain(entry["query_id"]) if entry["query_id"] else "–"
                lines.append(f"| {query} | {plain(entry['question'], QUESTION_WIDTH)} | {changes} |")
    if report.get("errors"):
        lines += ["", f"{len(report['errors'])} questions failed in the pipeline and count as misses; "
                      "see the report for each error."]
    for warning in report.get("warnings") or []:
        lines += ["", f"Warning: {plain(warning)}"]
    return "\n".join(lines) + "\n"


def junit_xml(report: Mapping[str, Any]) -> str:
    """The evaluation as JUnit XML: a ``<testsuite>`` named after the golden set, one ``<testcase>``
    per metric (``classname`` labeler.eval), a ``<failure>`` on a regressed metric whose message
    says by how much and with which p-value, a ``<skipped>`` on a metric not in the baseline."""
    shown = verdicts(report)
    comparison = report.get("comparison")
    g = report["golden"]
    failures = sum(v == "regressed" for v in shown.values())
    skipped = sum(v == "new" for v in shown.values())
    seconds = f"{report['timings'].get('total_seconds') or 0:.3f}"
    suites = ET.Element("testsuites", name="labeler eval", tests=str(len(shown)), failures=str(failures),
                        errors="0", skipped=str(skipped), time=seconds)
    suite = ET.SubElement(suites, "testsuite", name=f"labeler eval {Path(g['path']).name}", tests=str(len(shown)),
                          failures=str(failures), errors="0", skipped=str(skipped), time=seconds,
                          timestamp=str(report.get("created_at", "")).removesuffix("Z"))
    properties = ET.SubElement(suite, "properties")
    for name, value in (("golden.path", g["path"]), ("golden.sha256", g["sha256"]),
                        ("golden.version", (g.get("export") or {}).get("version")),
                        ("pipeline", report["pipeline"]["id"]), ("status", report["status"])):
        if value is not None:
            ET.SubElement(properties, "property", name=name, value=str(value))
    for spec, agg in report["metrics"].items():
        case = ET.SubElement(suite, "testcase", classname="labeler.eval", name=spec, time="0")
        change = (comparison or {}).get("metrics", {}).get(spec) or {}
        summary = f"{spec}: candidate {_num(agg['mean'])}"
        if change.get("drop") is not None:
            summary += (f", baseline {_num(change['baseline'])}, difference {_signed(-change['drop'])} "
                        f"(95% CI {_signed(change.get('diff_ci_low'))} to {_signed(change.get('diff_ci_high'))}), "
                        f"p = {_num(change['p_value'])}")
        if shown[spec] == "regressed":
            failure = ET.SubElement(case, "failure", type="regression",
                                    message=f"{spec} dropped by {change['drop']:.4f} (max drop {change['max_drop']:g}, "
                                            f"p = {_num(change['p_value'])})")
            failure.text = summary
        elif shown[spec] == "new":
            ET.SubElement(case, "skipped", message=f"{spec} is not in the baseline")
        ET.SubElement(case, "system-out").text = summary
    ET.indent(suites)
    return ET.tostring(suites, encoding="unicode", xml_declaration=True) + "\n"


def write_ci_files(report: Mapping[str, Any], questions: Sequence[Mapping[str, Any]], *,
                   report_md: str | Path | None = None, junit: str | Path | None = None) -> list[Path]:
    """Write the pull-request comment to ``report_md`` and the JUnit XML to ``junit`` (each when
    given); returns the paths written."""
    written = []
    for path, make in ((report_md, lambda: pr_markdown(report, questions)), (junit, lambda: junit_xml(report))):
        if path is None:
            continue
        try:
            Path(path).write_text(make(), encoding="utf-8")
        except OSError as e:
            raise LabelerError(f"cannot write {path}: {e.strerror or e}") from None
        written.append(Path(path))
    return written
