"""CI's benchmark step: run each benchmark named in ``budgets.json``, read the figures it prints, and
fail when one is worse than the budget written next to it.

A budget is a figure an issue resolved, so that it cannot slip unnoticed. Speed figures are ratios to
a baseline measured in the same run (CI machines differ, ratios travel); counts and shares (attempts
checked by the throttle, redaction recall) are exact. Each entry of ``budgets.json``:

    {"name": "...", "script": "bench_x.py", "args": ["--n", "100"], "figure": "a.b.c",
     "budget": 0.6, "better": "higher" | "lower", "slack": 0.3, "from": "where the budget came from"}

``figure`` is a dotted path into the JSON document the script prints; ``slack`` is how much worse than
the budget the figure may be before the step fails (0.3 = 30% for noisy ratios, 0 for exact figures).
``tries`` (default 1): a timing the issue bounds in absolute terms (a lock hold under 0.2 s) is run
again, up to that many times, while it misses, since one descheduled moment on a shared machine is not
a regression; a real regression misses on every try. Scripts with the same ``script`` and ``args``
run once (again only for a retry). Prints one JSON document; exits 1 on a miss.

    python tests/bench/check.py [--only NAME ...] [--list]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]


def load_budgets(path: Path = HERE / "budgets.json") -> list[dict[str, Any]]:
    budgets = json.loads(path.read_text(encoding="utf-8"))
    for b in budgets:
        missing = {"name", "script", "figure", "budget", "better", "from"} - set(b)
        if missing:
            raise SystemExit(f"{path}: budget {b.get('name')!r} lacks {', '.join(sorted(missing))}")
        if b["better"] not in ("higher", "lower"):
            raise SystemExit(f"{path}: budget {b['name']!r}: better must be 'higher' or 'lower'")
    return budgets


def figure(doc: Any, dotted: str) -> float:
    value = doc
    for part in dotted.split("."):
        if isinstance(value, list):
            value = value[int(part)]
        elif isinstance(value, dict) and part in value:
            value = value[part]
        else:
            raise KeyError(dotted)
    return float(value)


def verdict(value: float, budget: dict[str, Any]) -> tuple[bool, float]:
    """Whether ``value`` keeps ``budget``, and the limit it was held to (budget widened by slack)."""
    slack = float(budget.get("slack", 0.0))
    target = float(budget["budget"])
    if budget["better"] == "higher":
        limit = target * (1 - slack)
        return value >= limit, limit
    limit = target * (1 + slack)
    return value <= limit, limit


def run(script: str, args: list[str]) -> tuple[dict[str, Any] | None, str, float]:
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    started = time.monotonic()
    proc = subprocess.run([sys.executable, str(HERE / script), *args], capture_output=True, text=True,
                          cwd=ROOT, env=env)
    took = time.monotonic() - started
    if proc.returncode != 0:
        lines = (proc.stderr or proc.stdout).strip().splitlines()
        return None, lines[-1] if lines else f"exit {proc.returncode}", took
    try:
        return json.loads(proc.stdout), "", took
    except json.JSONDecodeError as e:
        return None, f"printed no JSON document ({e})", took


def _check(b: dict[str, Any], doc: dict[str, Any] | None, error: str, took: float) -> dict[str, Any]:
    row = {"name": b["name"], "budget": b["budget"], "better": b["better"], "seconds": round(took, 1)}
    if doc is None:
        return {**row, "passed": False, "error": f"{b['script']}: {error}"}
    try:
        value = figure(doc, b["figure"])
    except (KeyError, IndexError, ValueError, TypeError):
        return {**row, "passed": False, "error": f"{b['script']} printed no figure {b['figure']}"}
    passed, limit = verdict(value, b)
    return {**row, "value": value, "limit": round(limit, 6), "passed": passed}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="*", help="Check only the budgets with these names.")
    parser.add_argument("--list", action="store_true", help="List the budgets and exit.")
    opts = parser.parse_args(argv)
    budgets = load_budgets()
    if opts.only:
        budgets = [b for b in budgets if b["name"] in set(opts.only)]
    if opts.list:
        for b in budgets:
            print(f"{b['name']}: {b['figure']} {'>=' if b['better'] == 'higher' else '<='} {b['budget']} "
                  f"(slack {b.get('slack', 0)}) from {b['from']}")
        return 0
    outputs: dict[tuple, tuple] = {}
    results, ok = [], True
    for b in budgets:
        key = (b["script"], tuple(b.get("args", [])))
        for attempt in range(1, int(b.get("tries", 1)) + 1):
            if key not in outputs or attempt > 1:
                outputs[key] = run(b["script"], list(key[1]))
            row = _check(b, *outputs[key])
            row["tries"] = attempt
            if row["passed"] or "error" in row:
                break
        ok = ok and row["passed"]
        results.append(row)
    print(json.dumps({"passed": ok, "budgets": results}, indent=1))
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
