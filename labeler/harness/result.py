"""What ``evaluate`` returns and the files it writes: the result, report.json, the per-question
JSONL, the markdown summary and the GitHub step summary."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from ..errors import LabelerError
from .gate import Comparison

EXIT_REGRESSION = 3
MAX_LISTED = 20  # questions listed per section of the markdown summary (the report lists all)


@dataclass
class EvalResult:
    """What :func:`evaluate` found. ``report`` is the report.json document, ``questions`` the
    per-question records, ``markdown`` the summary, ``per_query`` the metric values as a DataFrame
    (row = golden question position); ``status`` is pass, fail or no baseline."""

    report: dict[str, Any]
    questions: list[dict[str, Any]]
    markdown: str
    comparison: Comparison | None = None
    per_query: pd.DataFrame | None = None

    @property
    def failed(self) -> bool:
        return self.comparison is not None and self.comparison.failed

    @property
    def status(self) -> str:
        return self.report["status"]

    @property
    def exit_code(self) -> int:
        """3 when the gate failed, else 0 (user errors raise LabelerError instead)."""
        return EXIT_REGRESSION if self.failed else 0




# --- outputs -------------------------------------------------------------------------------

def questions_path(output: str | Path) -> Path:
    """Where the per-question JSONL of ``report.json`` goes: ``report.questions.jsonl``."""
    output = Path(output)
    return output.with_name(output.stem + ".questions.jsonl") if output.suffix == ".json" \
        else output.with_name(output.name + ".questions.jsonl")


def write_json(path: str | Path, document: Any) -> Path:
    path = Path(path)
    try:
        path.write_text(json.dumps(document, indent=2, ensure_ascii=False, default=str) + "\n", encoding="utf-8")
    except OSError as e:
        raise LabelerError(f"cannot write {path}: {e.strerror or e}") from None
    return path


def write_report(result: EvalResult, output: str | Path) -> tuple[Path, Path]:
    """Write ``report.json`` and its per-question JSONL; returns both paths."""
    report = write_json(output, result.report)
    rows = questions_path(output)
    with open(rows, "w", encoding="utf-8") as f:
        for row in result.questions:
            f.write(json.dumps(row, ensure_ascii=False, default=str) + "\n")
    return report, rows


def append_step_summary(markdown: str, path: str | Path | None) -> bool:
    """Append the summary to a GitHub Actions step summary file (``$GITHUB_STEP_SUMMARY``) if given."""
    if not path:
        return False
    try:
        with open(path, "a", encoding="utf-8") as f:
            f.write(markdown.rstrip("\n") + "\n\n")
    except OSError as e:
        raise LabelerError(f"cannot append to GITHUB_STEP_SUMMARY {path}: {e.strerror or e}") from None
    return True


def _fmt(v: float | None, digits: int = 4) -> str:
    return "–" if v is None else f"{v:.{digits}f}"


def _who(row: Mapping[str, Any]) -> str:
    text = row["question"] if len(row["question"]) <= 80 else row["question"][:79] + "…"
    return f"`{row['query_id']}` {text}" if row.get("query_id") else text


def render_markdown(result: EvalResult) -> str:
    """The summary printed on stdout and appended to the GitHub step summary."""
    r = result.report
    comparison = r["comparison"]
    verdict = {"pass": "PASS", "fail": "FAIL: regression", "no baseline": "no baseline"}[r["status"]]
    g, c = r["golden"], r["counts"]
    lines = [f"### labeler eval: {verdict}", "",
             f"Pipeline `{r['pipeline']['id']}` on `{Path(g['path']).name}` ({g['questions']} questions, sha256 "
             f"`{g['sha256'][:12]}`, threshold {g['threshold']}): {c['evaluated']} evaluated, {c['errors']} errors, "
             f"{c['timeouts']} timeouts, {c['skipped']} skipped; {r['timings']['run_seconds']:.1f} s.", ""]
    split = r.get("split") or {}
    if split.get("evaluated") == "holdout":
        lines += [f"Holdout questions only: the holdout has now been looked at {split['holdout_looks']} time(s).", ""]
    elif split.get("holdout_excluded"):
        lines += [f"Dev questions only: {split['holdout_excluded']} holdout questions left out (--holdout "
                  "evaluates them, and counts the look).", ""]
    header = "| metric | value | 95% CI | n |"
    if comparison:
        header += " baseline | change | max drop | p | gate |"
    lines += [header, "|" + "---|" * (header.count("|") - 1)]
    for spec, agg in r["metrics"].items():
        ci = "–" if agg["mean"] is None else f"{agg['ci_low']:.4f}–{agg['ci_high']:.4f}"
        line = f"| {spec} | {_fmt(agg['mean'])} | {ci} | {agg['n']} |"
        if comparison:
            ch = comparison["metrics"].get(spec)
            if ch is None:
                line += " – | – | – | – | not in baseline |"
            else:
                change = "–" if ch["drop"] is None else f"{-ch['drop']:+.4f}"
                tolerance = "–" if ch["max_drop"] is None else f"{ch['max_drop']:g}"
                gate = "FAIL" if ch["failed"] else "ok" if ch["gated"] else "not gated"
                line += f" {_fmt(ch['baseline'])} | {change} | {tolerance} | {_fmt(ch['p_value'])} | {gate} |"
        lines.append(line)
    if comparison:
        lines += ["", f"Compared on {comparison['matched']} questions shared with `{comparison['baseline']}` "
                      f"({comparison['only_current']} new, {comparison['only_baseline']} only in the baseline). "
                      f"A metric fails when its drop exceeds its max drop and the paired randomization test "
                      f"gives p < {r['settings']['alpha']}."]
    cited = r.get("all_traffic")
    if cited:
        values = ", ".join(f"{spec} {v['estimate']:.4f} ({v['ci_low']:.4f}–{v['ci_high']:.4f})"
                           for spec, v in cited["metrics"].items() if v.get("estimate") is not None)
        lines += ["", f"All production traffic (not this pipeline): retriever `{cited['retriever']}` over "
                      f"{cited['population']} logged queries, judge run {cited['judge_run']} corrected by "
                      f"{cited['n_labeled']} human labels ({cited['design']}): {values}."]
    regressed = result.comparison.regressions if result.comparison else []
    if regressed:
        by_question: dict[str, list[str]] = {}
        rows = {}
        for reg in regressed:
            key = reg["query_id"] or reg["question"]
            rows[key] = reg
            by_question.setdefault(key, []).append(f"{reg['metric']} {reg['baseline']:.3f} → {reg['current']:.3f}")
        lines += ["", f"**Questions that got worse** ({len(by_question)}):"]
        for key, changes in list(by_question.items())[:MAX_LISTED]:
            lines.append(f"- {_who(rows[key])}: {', '.join(changes)}")
        if len(by_question) > MAX_LISTED:
            lines.append(f"- … and {len(by_question) - MAX_LISTED} more (see the report)")
    if r["errors"]:
        lines += ["", f"**Errors** ({len(r['errors'])} questions counted as misses):"]
        for row in r["errors"][:MAX_LISTED]:
            lines.append(f"- {_who(row)}: {row['error']}")
        if len(r["errors"]) > MAX_LISTED:
            lines.append(f"- … and {len(r['errors']) - MAX_LISTED} more (see the report)")
    for warning in r["warnings"]:
        lines += ["", f"Warning: {warning}"]
    return "\n".join(lines) + "\n"
