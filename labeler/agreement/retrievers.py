"""Retrievers ranked by human grades and by a judge's grades: each retriever's recall@k and nDCG@k
under both label sets (the same pairs, the same queries) and Kendall's tau between the two orders.
DataFrames in, numbers out."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from .stats import Stat

if TYPE_CHECKING:
    import pandas as pd

# --- retrievers judged by humans and by the judge -------------------------------------------------

def retriever_agreement(run: pd.DataFrame, human: pd.DataFrame, judge: pd.DataFrame, *, k: int = 10,
                        threshold: int = 2, n_resamples: int = 1000, seed: int = 0,
                        confidence: float = 0.95) -> dict[str, Any]:
    """Each retriever's recall@k and nDCG@k with human qrels and with judge qrels (the same pairs,
    the same queries), and Kendall's tau between the retrievers' order by humans and by the judge.

    ``run``: retriever, query, doc, rank. ``human`` / ``judge``: query, doc, grade. Only pairs both
    graded count, and only queries with a relevant chunk under both (recall is undefined otherwise).
    """
    from scipy import stats as sps

    from ..metrics.bootstrap import aggregate
    from ..metrics.evaluate import per_query

    retrievers = sorted(run["retriever"].unique()) if len(run) else []
    specs = [f"recall@{k}", f"ndcg@{k}"]
    if len(retrievers) < 2:
        why = f"needs two or more retrievers logged; found {len(retrievers)}"
        return {"k": k, "retrievers": retrievers, "metrics": {},
                "kendall_tau": {s: Stat(None, n=len(retrievers), reason=why) for s in specs}}
    both = human.merge(judge, on=["query", "doc"], suffixes=("_human", "_judge"))
    qrels = {"human": both[["query", "doc", "grade_human"]].rename(columns={"grade_human": "grade"}),
             "judge": both[["query", "doc", "grade_judge"]].rename(columns={"grade_judge": "grade"})}
    per: dict[str, dict[str, pd.DataFrame]] = {}
    keep = None
    for r in retrievers:
        rows = run[run["retriever"] == r][["query", "doc", "rank"]]
        per[r] = {who: per_query(rows, q, specs, threshold=threshold) for who, q in qrels.items()}
        for frame in per[r].values():
            ok = frame[specs].notna().all(axis=1)
            keep = ok if keep is None else keep & ok
    metrics: dict[str, dict[str, dict[str, Stat]]] = {}
    means: dict[str, dict[str, list[float]]] = {s: {"human": [], "judge": []} for s in specs}
    for r in retrievers:
        metrics[r] = {}
        for who in ("human", "judge"):
            agg = aggregate(per[r][who][keep], confidence=confidence, n_resamples=max(n_resamples, 1), seed=seed)
            for s in specs:
                a = agg[s]
                stat = (Stat(a["mean"], a["ci_low"], a["ci_high"], a["n"]) if a["mean"] is not None else
                        Stat(None, n=0, reason="no query has a relevant chunk under both label sets"))
                metrics[r].setdefault(s, {})[who] = stat
                means[s][who].append(np.nan if a["mean"] is None else a["mean"])
    taus = {}
    for s in specs:
        h, j = np.array(means[s]["human"]), np.array(means[s]["judge"])
        if np.isnan(h).any() or np.isnan(j).any():
            taus[s] = Stat(None, n=len(retrievers), reason="a retriever has no measurable query")
            continue
        tau = sps.kendalltau(h, j).statistic
        taus[s] = (Stat(float(tau), n=len(retrievers), note="over retrievers: no interval")
                   if not np.isnan(tau) else
                   Stat(None, n=len(retrievers), reason="the retrievers tie under one of the label sets"))
    return {"k": k, "retrievers": retrievers, "queries": int(keep.sum()), "metrics": metrics, "kendall_tau": taus}


def retrievers_dict(section: dict[str, Any] | None) -> dict[str, Any] | None:
    if section is None:
        return None
    return {"k": section["k"], "retrievers": section["retrievers"], "queries": section.get("queries", 0),
            "metrics": {r: {s: {who: st.to_dict() for who, st in by.items()} for s, by in m.items()}
                        for r, m in section["metrics"].items()},
            "kendall_tau": {s: st.to_dict() for s, st in section["kendall_tau"].items()}}
