"""``coverage``: per topic, how much of the traffic it carries, how many of its questions are in the
golden set, and how the retriever does on them; and the traffic no labeled question covers."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import sqlite_utils

from ..errors import LabelerError
from .build import NO_TOPIC, assign_new, current_model

COVERAGE_SPECS = ("recall@10", "ndcg@10", "mrr")


def _share(part: float, whole: float) -> float | None:
    return None if not whole else part / whole


def coverage(db: sqlite_utils.Database, *, specs: Sequence[str] = COVERAGE_SPECS, retriever: str | None = None,
             config: Any = None, seed: int = 0) -> dict[str, Any]:
    """The coverage report of the current topics (see README "Topics, coverage and drift").

    Per topic: ``queries`` and ``occurrences`` of logged questions, ``traffic_share``
    (occurrences / all logged occurrences), ``labeled`` (queries with a submitted label, any
    origin), ``golden_share`` (labeled / all labeled), and ``metrics`` of ``retriever`` (None = the
    default) on its labeled queries with 95% bootstrap CIs (``labeler.report.metrics_by_group``;
    None below 5 measured queries). ``uncovered_share``: the traffic share of topics without a
    single labeled question. Queries that arrived after the build are assigned first."""
    from ..report.core import retrieval_report
    from ..report.groups import metrics_by_group

    model = current_model(db, config=config)
    assign_new(db, config=config)
    topics = {t: {"topic": t, "label": label, "terms": json.loads(terms), "medoid": medoid}
              for t, label, terms, medoid in db.execute(
                  "SELECT t.topic, t.label, t.terms, q.question FROM topics t LEFT JOIN queries q "
                  "ON q.pk = t.medoid_query_pk WHERE t.model_id = ? ORDER BY t.topic", [model.id])}
    traffic = {t: (n, occ) for t, n, occ in db.execute(
        "SELECT t.topic, count(*), sum(q.occurrences) FROM query_topics t JOIN queries q ON q.pk = t.query_pk "
        "WHERE t.model_id = ? AND q.origin = 'log' GROUP BY t.topic", [model.id])}
    labeled_by_pk = dict(db.execute(
        "SELECT t.query_pk, t.topic FROM query_topics t WHERE t.model_id = ? AND t.query_pk IN "
        "(SELECT query_pk FROM query_labels WHERE status = 'submitted')", [model.id]).fetchall())
    labeled: dict[int, int] = {}
    for t in labeled_by_pk.values():
        labeled[t] = labeled.get(t, 0) + 1
    for t in set(traffic) | set(labeled):
        topics.setdefault(t, {"topic": t, "label": "(no known words)" if t == NO_TOPIC else f"topic {t}",
                              "terms": [], "medoid": None})
    total_occ = sum(occ for _, occ in traffic.values())
    total_labeled = sum(labeled.values())
    measured: dict[Any, dict] = {}
    used_retriever, measured_specs, note = None, list(specs), None
    if total_labeled:
        try:
            report = retrieval_report(db, specs, retriever=retriever, seed=seed, reuse=True)
        except LabelerError as e:
            note = str(e)
        else:
            used_retriever, measured_specs = report.retriever, report.specs
            measured = metrics_by_group(report, labeled_by_pk)
    rows = []
    for t in sorted(topics, key=lambda t: (-traffic.get(t, (0, 0))[1], t)):
        n, occ = traffic.get(t, (0, 0))
        group = measured.get(t, {})
        rows.append({**topics[t], "queries": n, "occurrences": occ, "traffic_share": _share(occ, total_occ),
                     "labeled": labeled.get(t, 0), "golden_share": _share(labeled.get(t, 0), total_labeled),
                     "n_measured": group.get("n_measured", 0), "metrics": group.get("metrics")})
    uncovered = [r for r in rows if r["labeled"] == 0 and r["occurrences"]]
    return {"model": {"id": model.id, "method": model.method, "k": model.k, "seed": model.seed,
                      "created_at": model.created_at},
            "logged_queries": sum(n for n, _ in traffic.values()), "occurrences": total_occ,
            "labeled": total_labeled, "retriever": used_retriever, "specs": measured_specs, "note": note,
            "uncovered_share": _share(sum(r["occurrences"] for r in uncovered), total_occ) if total_occ else None,
            "uncovered_topics": [r["topic"] for r in uncovered], "topics": rows}
