"""The CLI's all-traffic parts: ``labeler metrics --all-traffic`` output and ``labeler queue --order``."""

from __future__ import annotations

from typing import Any

import click

from .output import Output

ALL_TRAFFIC_COLUMNS = ["metric", "estimate", "ci_low", "ci_high", "lambda", "effective_n", "human_only",
                       "human_only_ci_low", "human_only_ci_high", "judge_only"]
WEIGHTED_COLUMNS = ["human_weighted", "human_weighted_ci_low", "human_weighted_ci_high"]


def all_traffic_output(rep: Any) -> Output:
    """The output of ``labeler metrics --all-traffic`` from an ``AllTrafficReport``: a row per metric."""
    rows = [{"metric": spec, "estimate": v["estimate"], "ci_low": v["ci_low"], "ci_high": v["ci_high"],
             "lambda": v["lambda"], "effective_n": v["effective_n"], "human_only": v["human_only"]["mean"],
             "human_only_ci_low": v["human_only"]["ci_low"], "human_only_ci_high": v["human_only"]["ci_high"],
             "judge_only": v["judge_only"]["mean"]} for spec, v in rep.metrics.items()]
    columns = list(ALL_TRAFFIC_COLUMNS)
    before = [f"{rep.retriever}, all traffic: {rep.population} queries judged by run {rep.judge_run}, "
              f"{rep.n_labeled} labeled by humans ({rep.design} design)"]
    if rep.drawn is not None:
        columns += WEIGHTED_COLUMNS
        for row, v in zip(rows, rep.metrics.values(), strict=True):
            h = v.get("human_weighted") or {}
            row.update({"human_weighted": h.get("mean"), "human_weighted_ci_low": h.get("ci_low"),
                        "human_weighted_ci_high": h.get("ci_high")})
        before.append(f"labeled set {rep.drawn['text']}; human_only = the labeled set's plain mean (biased), "
                      "human_weighted = the same labels weighted by 1 / probability")
    after = ["judge-only means are biased: the judge's errors are not corrected"]
    a = rep.agreement
    if a["pairs"]:
        kappa = "-" if a["kappa_relevant"] is None else f"{a['kappa_relevant']:.2f}"
        after.append(f"judge vs humans on {a['pairs']} labeled chunks: exact {a['exact']:.0%}, "
                     f"kappa (relevant) {kappa}")
    h = rep.handed_out
    if h["handed_out"]:
        after.append(f"handed out under this design: {h['handed_out']}; skipped {h['skipped']} "
                     f"({h['skipped_share']:.0%}), discarded {h['discarded']} ({h['discarded_share']:.0%})")
    first = next(iter(rep.more_labels.items()), None)
    if first is not None and first[1].get("more_needed") is not None:
        spec, more = first
        if rep.design in ("stratified", "routed"):
            after.append(f"{spec}: {more['more_needed']} more labels for +-0.05 ({rep.design})")
        else:
            after.append(f"{spec}: {more['more_needed']} more labels for +-0.05 ({rep.design}); "
                         f"active would need {more['active_total']}, uniform {more['uniform_total']}")
    return Output(rep.to_dict(), columns, rows, before=before, after=after,
                  notes=[f"note: {note}" for note in rep.notes])


def set_order(db, order: str, *, judge_run: int | None, budget: float | None, seed: int,
              targets: list[str] | None = None) -> Output:
    """Set the queue order; ``active`` first draws the sample (``labeler.estimate.active.draw_active``);
    ``stratified`` needs topics and takes the lead's target shares (``labeler.labels.strata``)."""
    from ..accounts.settings import set_setting
    from ..estimate.active import draw_active
    from ..labels import strata

    if targets and order != "stratified":
        raise click.UsageError("--target goes with --order stratified")
    if order == "stratified":
        strata.require_topics(db)
        stored = strata.set_stratified_targets(db, strata.parse_targets(targets or []))
        set_setting(db, "queue_order", order)
        shares = stored or strata.traffic_shares(db.conn)
        how = "the lead's targets" if stored else "traffic"
        return Output({"queue_order": order, "targets": None if stored is None else
                       {str(t): v for t, v in stored.items()},
                       "shares": {str(t): v for t, v in sorted(shares.items())}},
                      ["queue_order", "topic", "share"],
                      [{"queue_order": order, "topic": t, "share": v} for t, v in sorted(shares.items())],
                      text=[f"queue order: stratified (labels per topic in proportion to {how}: "
                            + ", ".join(f"topic {t} {v:.0%}" for t, v in sorted(shares.items())) + ")"])

    if order == "active":
        draw = draw_active(db, judge_run, budget=budget, seed=seed)
        set_setting(db, "queue_order", "active")

        drawn = draw.to_dict()
        return Output({"queue_order": "active", "draw": drawn}, ["queue_order", *drawn],
                      [{"queue_order": "active", **drawn}],
                      text=[f"active draw {draw.id}: {draw.drawn} of {draw.population} traffic queries drawn to label "
                            f"(expected {draw.budget:g}; inclusion probabilities {draw.min_pi:.3f}-{draw.max_pi:.3f}; "
                            f"uncertainty model fitted on {draw.fitted_on} labels; seed {draw.seed})",
                            f"at this judge quality active needs about {draw.label_ratio:.0%} of the labels uniform "
                            "needs"])
    set_setting(db, "queue_order", order)

    return Output({"queue_order": order}, ["queue_order"], [{"queue_order": order}], text=[f"queue order: {order}"])
