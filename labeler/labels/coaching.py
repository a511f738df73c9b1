"""The lead's table of annotators: speed, agreement, skips and flags, to coach people with.

How each column is defined (the Annotators page and ``labeler annotators --json`` show the same):

- **finished**: items the annotator submitted, skipped, flagged or discarded.
- **items per hour**: from the times at which they finished items (``query_labels.status_at``).
  Sorted, each gap between two consecutive finishes of one annotator is the time spent on the
  second item; a gap longer than ``idle_minutes`` (default 10) is a break and counts neither as
  time nor as an item. Items per hour = items after a counted gap / the counted time. Items that
  came in by ``labeler import`` all at once count no time, so imports do not look fast: their
  value is None ("-") when no gap was counted.
- **median seconds per item**: the median of the seconds the Label page measured on each submitted
  item (from showing it to the last write), leaving out items with more than ``idle_minutes``
  (left open during a break) and items with no time recorded (imports). ``timed`` is how many
  items the median is over.
- **kappa vs consolidated**: Cohen's kappa (unweighted) of their submitted grades against the
  consolidated golden grade (``golden_labels``: adjudicated, else the median), on the chunks of
  items at least two annotators submitted: on an item only they graded the consolidated grade is
  their own, which would say nothing. Their own grade is part of the median, so this is a
  little optimistic for a team of two.
- **kappa vs others**: Cohen's kappa of their grades against every other annotator's grade of the
  same chunk of the same item (one pair per other annotator); the pairwise table
  (``pairwise_agreement``) gives each pair of people.
- Kappas come from ``labeler.agreement`` with a 95% bootstrap interval resampling whole items; with
  fewer than ``min_n`` (default 10) chunk pairs, or when kappa is undefined, the value is None and
  ``*_reason`` says why.
- **skip share** / **flag share**: skipped / finished, flagged / finished.
"""

from __future__ import annotations

import json
from collections import defaultdict
from typing import Any

import sqlite_utils

from .. import db as store

FINISHED = ("submitted", "skipped", "flagged", "discarded")


def _shared_items(db: sqlite_utils.Database) -> list[int]:
    """The items at least two annotators submitted: the only ones any kappa here can use (on an
    item one person graded there is nobody to agree with), a tenth of a big set with the default
    overlap, none when everyone labels their own."""
    return [q for (q,) in db.execute("SELECT query_pk FROM query_labels WHERE status = 'submitted' "
                                     "GROUP BY query_pk HAVING count(*) >= 2 ORDER BY query_pk")]


def _submitted_grades(db: sqlite_utils.Database, items: list[int]) -> dict[str, dict[tuple[int, int], int]]:
    """annotator -> {(query_pk, doc_pk): grade} of their submitted grades of ``items``."""
    out: dict[str, dict[tuple[int, int], int]] = defaultdict(dict)
    for annotator, query_pk, doc_pk, grade in db.execute(
            "SELECT r.annotator, r.query_pk, r.doc_pk, r.grade FROM relevance_labels r JOIN query_labels l "
            "ON l.query_pk = r.query_pk AND l.annotator = r.annotator WHERE l.status = 'submitted' "
            "AND r.query_pk IN (SELECT value FROM json_each(?))", [json.dumps(items)]):
        out[annotator][(query_pk, doc_pk)] = grade
    return out


def _kappa(reference: list[int], rated: list[int], clusters: list[int], *, levels: int, threshold: int,
           min_n: int, n_resamples: int, seed: int) -> dict[str, Any]:
    from ..agreement.stats import ordinal_agreement

    if len(reference) < min_n:
        return {"value": None, "ci_low": None, "ci_high": None, "n": len(reference),
                "reason": f"fewer than {min_n} chunk pairs graded by both"}
    stat = ordinal_agreement(reference, rated, levels=levels, threshold=threshold, n_resamples=n_resamples,
                             seed=seed, min_n=min_n, clusters=clusters)["cohen_kappa"]
    return {"value": stat.value, "ci_low": stat.ci_low, "ci_high": stat.ci_high, "n": stat.n,
            "reason": stat.reason}


def _speed(times: list[str], idle_s: float) -> tuple[int, float]:
    """(items after a counted gap, counted seconds) from an annotator's sorted finish times."""
    from ..core.times import parse_time

    moments = [parse_time(t).timestamp() for t in times]
    items, seconds = 0, 0.0
    for before, after in zip(moments, moments[1:], strict=False):
        gap = after - before
        if 0 < gap <= idle_s:
            items += 1
            seconds += gap
    return items, seconds


def _median(values: list[float]) -> float | None:
    if not values:
        return None
    values = sorted(values)
    mid = len(values) // 2
    return values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) / 2


def annotator_performance(db: sqlite_utils.Database, *, idle_minutes: float = 10, min_n: int = 10,
                          n_resamples: int = 1000, seed: int = 0) -> list[dict[str, Any]]:
    """One flat record per annotator (see the module doc for each column): annotator, role,
    finished, submitted, skipped, flagged, discarded, skip_share, flag_share, items_per_hour,
    active_hours, median_item_seconds, timed, kappa_consolidated (+ _low, _high, _n, _reason) and
    kappa_others (+ _low, _high, _n, _reason)."""
    from .consolidate import golden_labels

    idle_s = idle_minutes * 60
    settings = store.get_settings(db)
    levels, threshold = len(settings["grade_names"]), int(settings["threshold"])
    people: dict[str, dict[str, Any]] = {}
    for name, role in db.execute("SELECT name, role FROM annotators WHERE removed_at IS NULL "
                                 "ORDER BY created_at, name"):
        people[name] = {"annotator": name, "role": role}
    counts: dict[str, dict[str, int]] = defaultdict(lambda: dict.fromkeys(FINISHED, 0))
    for name, status, n in db.execute("SELECT annotator, status, count(*) FROM query_labels "
                                      "WHERE status != 'in_progress' GROUP BY annotator, status"):
        counts[name][status] = n
        people.setdefault(name, {"annotator": name, "role": None})
    times: dict[str, list[str]] = defaultdict(list)
    for name, at in db.execute("SELECT annotator, status_at FROM query_labels WHERE status != 'in_progress' "
                               "AND status_at IS NOT NULL ORDER BY annotator, status_at"):
        times[name].append(at)
    seconds: dict[str, list[float]] = defaultdict(list)
    for name, s in db.execute("SELECT annotator, seconds FROM query_labels WHERE status = 'submitted' "
                              "AND seconds > 0 AND seconds <= ?", [idle_s]):
        seconds[name].append(s)
    shared_items = _shared_items(db)
    grades = _submitted_grades(db, shared_items)
    golden = golden_labels(db, query_pks=shared_items)
    golden = golden[golden["n_annotators"] >= 2]
    consolidated = {(int(q), int(d)): int(g) for q, d, g in
                    zip(golden["query_pk"], golden["doc_pk"], golden["grade"], strict=True)}
    opts = {"levels": levels, "threshold": threshold, "min_n": min_n, "n_resamples": n_resamples, "seed": seed}
    out = []
    for name, rec in people.items():
        c = counts[name]
        finished = sum(c.values())
        items, active = _speed(times[name], idle_s)
        mine = grades.get(name, {})
        shared = [k for k in mine if k in consolidated]
        vs_golden = _kappa([consolidated[k] for k in shared], [mine[k] for k in shared], [k[0] for k in shared],
                           **opts)
        ref, rated, clusters = [], [], []
        for other, theirs in grades.items():
            if other == name:
                continue
            for k, g in mine.items():
                if k in theirs:
                    ref.append(theirs[k])
                    rated.append(g)
                    clusters.append(k[0])
        vs_others = _kappa(ref, rated, clusters, **opts)
        rec.update({
            "finished": finished, **c,
            "skip_share": c["skipped"] / finished if finished else None,
            "flag_share": c["flagged"] / finished if finished else None,
            "items_per_hour": items / (active / 3600) if active > 0 else None,
            "active_hours": active / 3600,
            "median_item_seconds": _median(seconds[name]), "timed": len(seconds[name]),
        })
        for prefix, stat in (("kappa_consolidated", vs_golden), ("kappa_others", vs_others)):
            rec.update({prefix: stat["value"], f"{prefix}_low": stat["ci_low"], f"{prefix}_high": stat["ci_high"],
                        f"{prefix}_n": stat["n"], f"{prefix}_reason": stat["reason"]})
        out.append(rec)
    return out


def pairwise_agreement(db: sqlite_utils.Database, *, min_n: int = 10, n_resamples: int = 1000,
                       seed: int = 0) -> list[dict[str, Any]]:
    """Cohen's kappa with its interval for every pair of annotators who submitted grades of the same
    chunks: records with first, second, kappa, kappa_low, kappa_high, n, reason."""
    settings = store.get_settings(db)
    opts = {"levels": len(settings["grade_names"]), "threshold": int(settings["threshold"]), "min_n": min_n,
            "n_resamples": n_resamples, "seed": seed}
    grades = _submitted_grades(db, _shared_items(db))
    names = sorted(grades)
    out = []
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            shared = [k for k in grades[a] if k in grades[b]]
            if not shared:
                continue
            stat = _kappa([grades[a][k] for k in shared], [grades[b][k] for k in shared], [k[0] for k in shared],
                          **opts)
            out.append({"first": a, "second": b, "kappa": stat["value"], "kappa_low": stat["ci_low"],
                        "kappa_high": stat["ci_high"], "n": stat["n"], "reason": stat["reason"]})
    return out
