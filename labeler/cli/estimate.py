"""The CLI's all-traffic parts: ``labeler metrics --all-traffic`` output and ``labeler queue --order``."""

from __future__ import annotations

import click

from .common import print_json


def print_all_traffic(db, judge_run: int | None, specs: list[str] | None, *, retriever: str | None,
                      design: str | None, random_only: bool, as_json: bool) -> None:
    """Compute and print the all-traffic report (``labeler.estimate.report.all_traffic_report``)."""
    from ..estimate.report import all_traffic_report

    rep = all_traffic_report(db, judge_run, specs, retriever=retriever, design=design, random_only=random_only)
    if as_json:
        print_json(rep.to_dict())
        return
    click.echo(f"{rep.retriever}, all traffic: {rep.population} queries judged by run {rep.judge_run}, "
               f"{rep.n_labeled} labeled by humans ({rep.design} design)")
    click.echo(f"{'metric':<11}{'estimate':>9}  {'95% CI':<17}{'lambda':>7}{'eff. n':>8}  "
               f"{'human-only (n)':<26}{'judge-only*':>11}")
    for spec, v in rep.metrics.items():
        h, j = v["human_only"], v["judge_only"]["mean"]
        human = "-" if h["mean"] is None else f"{h['mean']:.3f} [{h['ci_low']:.3f}, {h['ci_high']:.3f}]"
        eff = "-" if v["effective_n"] is None else f"{v['effective_n']:.0f}"
        click.echo(f"{spec:<11}{v['estimate']:>9.3f}  [{v['ci_low']:.3f}, {v['ci_high']:.3f}]  {v['lambda']:>6.2f}"
                   f"{eff:>8}  {human:<26}{'-' if j is None else f'{j:.3f}':>11}")
    click.echo("* judge-only means are biased: the judge's errors are not corrected")
    a = rep.agreement
    if a["pairs"]:
        kappa = "-" if a["kappa_relevant"] is None else f"{a['kappa_relevant']:.2f}"
        click.echo(f"judge vs humans on {a['pairs']} labeled chunks: exact {a['exact']:.0%}, kappa (relevant) {kappa}")
    h = rep.handed_out
    if h["handed_out"]:
        click.echo(f"handed out under this design: {h['handed_out']}; skipped {h['skipped']} "
                   f"({h['skipped_share']:.0%}), discarded {h['discarded']} ({h['discarded_share']:.0%})")
    first = next(iter(rep.more_labels.items()), None)
    if first is not None and first[1].get("more_needed") is not None:
        spec, more = first
        if rep.design == "stratified":
            click.echo(f"{spec}: {more['more_needed']} more labels for +-0.05 (stratified)")
        else:
            click.echo(f"{spec}: {more['more_needed']} more labels for +-0.05 ({rep.design}); "
                       f"active would need {more['active_total']}, uniform {more['uniform_total']}")
    for note in rep.notes:
        click.echo(f"note: {note}", err=True)


def set_order(db, order: str, *, judge_run: int | None, budget: float | None, seed: int, as_json: bool,
              targets: list[str] | None = None) -> None:
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
        if as_json:
            print_json({"queue_order": order, "targets": None if stored is None else
                         {str(t): v for t, v in stored.items()},
                         "shares": {str(t): v for t, v in sorted(shares.items())}})
            return
        how = "the lead's targets" if stored else "traffic"
        click.echo(f"queue order: stratified (labels per topic in proportion to {how}: "
                   + ", ".join(f"topic {t} {v:.0%}" for t, v in sorted(shares.items())) + ")")
        return

    if order == "active":
        draw = draw_active(db, judge_run, budget=budget, seed=seed)
        set_setting(db, "queue_order", "active")
        if as_json:
            print_json({"queue_order": "active", "draw": draw.to_dict()})
            return
        click.echo(f"active draw {draw.id}: {draw.drawn} of {draw.population} traffic queries drawn to label "
                   f"(expected {draw.budget:g}; inclusion probabilities {draw.min_pi:.3f}-{draw.max_pi:.3f}; "
                   f"uncertainty model fitted on {draw.fitted_on} labels; seed {draw.seed})")
        click.echo(f"at this judge quality active needs about {draw.label_ratio:.0%} of the labels uniform needs")
        return
    set_setting(db, "queue_order", order)
    if as_json:
        print_json({"queue_order": order})
    else:
        click.echo(f"queue order: {order}")
