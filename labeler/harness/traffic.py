"""What ``labeler eval --judge-run`` cites about all production traffic: when one of the runs named is
a relevance run over all traffic (``labeler judge run --on all``), the report's ``all_traffic`` is
the all-traffic estimate of the logged retriever (:func:`labeler.estimate.report.all_traffic_report`,
labels drawn at random only, as the export manifest cites it). It describes production traffic,
not the pipeline under evaluation, and nothing of it enters the golden set or the gate.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlite_utils

from ..judge.store import get_run

ABOUT = ("production traffic: the logged retriever over every logged query the judge run graded, corrected "
         "by the human labels drawn at random; not the evaluated pipeline, and not part of the golden set")


def split_runs(db: sqlite_utils.Database, run_ids: Sequence[int]) -> tuple[int | None, list[int]]:
    """(the relevance run over all traffic to cite, or None; the other runs, in order). A second
    relevance run over all traffic is an error: the report cites one estimate."""
    from ..errors import LabelerError

    cited: int | None = None
    rest: list[int] = []
    for run_id in run_ids:
        run = get_run(db, int(run_id))
        if run.kind == "relevance" and run.on_set == "all":
            if cited is not None:
                raise LabelerError(f"--judge-run names two relevance runs over all traffic ({cited} and {run_id}); "
                                   "keep the one whose all-traffic estimate the report should cite")
            cited = int(run_id)
        else:
            rest.append(int(run_id))
    return cited, rest


def all_traffic_citation(db: sqlite_utils.Database, run_id: int, specs: Sequence[str]) -> dict[str, Any]:
    """The all-traffic estimate of ``specs`` from relevance run ``run_id`` (the default retriever,
    labels drawn at random only), with ``about`` saying what it describes. Raises EstimateError
    (a one-line reason and fix) when it cannot be estimated."""
    from ..estimate.report import all_traffic_report

    cited = all_traffic_report(db, run_id, list(specs), random_only=True).to_dict()
    return {"about": ABOUT, **cited}
