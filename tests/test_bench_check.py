"""The benchmark budget check (tests/bench/check.py): figures read by path, budgets held with slack,
and every budget in budgets.json names a script that exists and a source."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

BENCH = Path(__file__).parent / "bench"
spec = importlib.util.spec_from_file_location("bench_check", BENCH / "check.py")
check = importlib.util.module_from_spec(spec)
spec.loader.exec_module(check)


def test_a_figure_is_read_by_its_dotted_path():
    doc = {"ingest": {"ratio": 0.61, "runs": [{"s": 2.5}]}}
    assert check.figure(doc, "ingest.ratio") == 0.61
    assert check.figure(doc, "ingest.runs.0.s") == 2.5
    with pytest.raises(KeyError):
        check.figure(doc, "ingest.missing")


@pytest.mark.parametrize("value,better,slack,passed", [
    (0.60, "higher", 0.3, True), (0.43, "higher", 0.3, True), (0.41, "higher", 0.3, False),
    (5, "lower", 0.0, True), (6, "lower", 0.0, False), (0.25, "lower", 0.3, True), (0.27, "lower", 0.3, False),
])
def test_a_budget_holds_within_its_slack_and_fails_beyond_it(value, better, slack, passed):
    budget = {"budget": 0.6 if better == "higher" else (5 if value >= 5 else 0.2), "better": better, "slack": slack}
    assert check.verdict(value, budget)[0] is passed


def test_every_budget_names_a_benchmark_that_exists_and_where_it_came_from():
    budgets = check.load_budgets()
    assert budgets, "budgets.json lists no budget"
    for b in budgets:
        assert (BENCH / b["script"]).is_file(), b
        assert b["from"].strip(), b
