"""``labeler topics``, ``coverage``, ``drift`` (labeler.topics) and ``split`` (labeler.holdout)."""

from __future__ import annotations

from typing import Any

import click

from .common import CONTEXT_SETTINGS, LabelerGroup, open_db, progress_bar, secrets_toml
from .group import cli
from .output import Output, output_options


def _embedding_config(method: str) -> Any:
    """The LLM config when topics use the embeddings model (``auto``: when one is configured)."""
    if method == "tfidf":
        return None
    from ..errors import LabelerError
    from ..llm import LLMConfig

    try:
        config = LLMConfig.from_env(secrets_toml())
    except LabelerError:
        config = None
    if method == "embeddings" and not (config and config.embedding_model):
        raise click.UsageError("--method embeddings needs embedding_model in the [llm] section of secrets.toml "
                               "or LABELER_EMBEDDING_MODEL")
    return config if config is not None and config.embedding_model else None


def _pct(v: float | None) -> str:
    return "–" if v is None else f"{v:.1%}"


TOPIC_COLUMNS = ["topic", "questions", "label", "medoid"]
COVERAGE_COLUMNS = ["topic", "traffic_share", "labeled", "golden_share", "metric", "mean", "ci_low", "ci_high",
                    "label"]
DRIFT_COLUMNS = ["kind", "topic", "label", "questions", "occurrences", "baseline_share", "new_share", "ci_low",
                 "ci_high", "grew"]
SPLIT_COLUMNS = ["fraction", "seed", "created_at", "labeled_dev", "labeled_holdout", "holdout_looks"]


@cli.group("topics", cls=LabelerGroup, context_settings=CONTEXT_SETTINGS)
def topics() -> None:
    """Cluster the logged questions into topics (for coverage and drift).

    Example:

        labeler topics build --seed 7
    """


@topics.command("build", context_settings=CONTEXT_SETTINGS)
@click.option("--k", "k", type=click.IntRange(min=2), help="Number of topics (default: chosen from the data; --json says why).")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the sample and the clustering.")
@click.option("--method", type=click.Choice(["auto", "tfidf", "embeddings"]), default="auto", show_default=True,
              help="auto = the embeddings model when [llm] embedding_model is set, else TF-IDF.")
@output_options(nl=True)
@click.pass_context
def topics_build_cmd(ctx: click.Context, k: int | None, seed: int, method: str, output_format: str) -> Output:
    """Cluster the logged questions into topics (TF-IDF + k-means by default) and store them;
    every query gets its topic. Rebuilding replaces the topics.

    Example:

        labeler topics build --k 12 --seed 7 --json
    """
    from ..topics import build_topics

    update, close = progress_bar("questions")
    try:
        summary = build_topics(open_db(ctx), k=k, seed=seed, config=_embedding_config(method), progress=update)
    finally:
        close()
    return _topics_output(summary)


@topics.command("show", context_settings=CONTEXT_SETTINGS)
@output_options(nl=True)
@click.pass_context
def topics_show_cmd(ctx: click.Context, output_format: str) -> Output:
    """The current topics: label (top terms), size and medoid question.

    Example:

        labeler topics show --json
    """
    from ..topics import topic_summary

    return _topics_output(topic_summary(open_db(ctx)))


def _topics_output(summary: dict[str, Any]) -> Output:
    reason = (summary.get("k_choice") or {}).get("reason")
    return Output(summary, TOPIC_COLUMNS, summary["topics"],
                  before=[f"model {summary['model']}: {summary['k']} topics ({summary['method']}, seed "
                          f"{summary['seed']}) over {summary['questions']} logged questions"]
                  + ([f"why {summary['k']}: {reason}"] if reason else []))


@cli.command("coverage", context_settings=CONTEXT_SETTINGS)
@click.option("--retriever", help="Whose metrics per topic (default: the only retriever, else production).")
@output_options()
@click.pass_context
def coverage_cmd(ctx: click.Context, retriever: str | None, output_format: str) -> Output:
    """Per topic: traffic share, labeled questions, share of the golden set, metrics with 95% CIs;
    and the traffic share no labeled question covers. Needs `labeler topics build` first.

    Example:

        labeler coverage --json
    """
    from ..topics import coverage

    report = coverage(open_db(ctx), retriever=retriever, config=_embedding_config("auto"))
    spec = report["specs"][0] if report["specs"] else None
    rows = []
    for t in report["topics"]:
        value = ((t["metrics"] or {}).get(spec) if spec else None) or {}
        rows.append({**t, "metric": spec, **{key: value.get(key) for key in ("mean", "ci_low", "ci_high")}})
    return Output(report, COVERAGE_COLUMNS, rows,
                  before=[f"{report['logged_queries']} logged questions ({report['occurrences']} occurrences), "
                          f"{report['labeled']} labeled; traffic not covered by any labeled question: "
                          f"{_pct(report['uncovered_share'])}"],
                  notes=[f"metrics: {report['note']}"] if report["note"] else [])


@cli.command("drift", context_settings=CONTEXT_SETTINGS)
@click.argument("source", metavar="FILE_OR_INGEST")
@click.option("--map", "maps", multiple=True, metavar="FIELD=PATH", help="Field mapping of the file, as for ingest.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the clustering of far questions.")
@output_options()
@click.pass_context
def drift_cmd(ctx: click.Context, source: str, maps: tuple[str, ...], seed: int, output_format: str) -> Output:
    """New traffic against the topics: topics that grew beyond their share and questions far from
    every topic (clustered into candidate new topics). FILE_OR_INGEST is a log file (read, not
    stored) or an ingest id (compared with the traffic before it).

    Example:

        labeler drift logs/this-week.jsonl --json
    """
    from ..ingest import parse_mapping
    from ..topics import drift

    report = drift(open_db(ctx), source, mapping=parse_mapping(maps), config=_embedding_config("auto"), seed=seed)
    lines = [f"{report['source']}: {report['questions']} questions ({report['occurrences']:.0f} occurrences); "
             f"far from every topic: {_pct(report['far_share'])}"]
    for t in report["topics"]:
        if t["grew"]:
            lines.append(f"grew  {t['label']}: {_pct(t['baseline_share'])} -> {_pct(t['new_share'])} "
                         f"(95% CI {_pct(t['ci_low'])}-{_pct(t['ci_high'])})")
            lines += [f"        {e}" for e in t["examples"]]
    for t in report["new_topics"]:
        lines.append(f"new   {t['label']}: {t['questions']} questions, {_pct(t['share'])} of the new traffic")
        lines += [f"        {e}" for e in t["examples"]]
    if not any(t["grew"] for t in report["topics"]) and not report["new_topics"]:
        lines.append("no drift: no topic grew beyond its share and no new topic")
    rows = [{"kind": "topic", **t} for t in report["topics"]]
    rows += [{"kind": "new", **t, "new_share": t["share"]} for t in report["new_topics"]]
    return Output(report, DRIFT_COLUMNS, rows, text=lines)


@cli.command("split", context_settings=CONTEXT_SETTINGS)
@click.option("--holdout", "fraction", type=float, help="Share of the questions kept aside, e.g. 0.2.")
@click.option("--seed", type=int, help="Seed of the assignment (hash of seed and query id).")
@click.option("--force", is_flag=True, help="Change a split that is already set (written to the audit).")
@output_options()
@click.pass_context
def split_cmd(ctx: click.Context, fraction: float | None, seed: int | None, force: bool,
              output_format: str) -> Output:
    """Lock a dev/holdout split of the golden set: every labeled question, now and later, goes to
    the holdout when the hash of the seed and its query id falls below the share. Without options,
    shows the split and how often the holdout was evaluated.

    Example:

        labeler split --holdout 0.2 --seed 7
    """
    from ..holdout import set_split, split_counts

    db = open_db(ctx)
    if fraction is None and seed is None:
        counts = split_counts(db)
    elif fraction is None or seed is None:
        raise click.UsageError("give both --holdout and --seed (e.g. --holdout 0.2 --seed 7)")
    else:
        counts = set_split(db, fraction, seed=seed, force=force)
    s = counts["split"]
    row = {**(s or {}), "labeled_dev": counts["labeled"].get("dev"),
           "labeled_holdout": counts["labeled"].get("holdout"), "holdout_looks": counts["looks"]["count"]}
    if s is None:
        text = ["no split: every question is dev (set one with labeler split --holdout 0.2 --seed N)"]
    else:
        text = [f"holdout {s['fraction']:g}, seed {s['seed']} (set {s['created_at']}): labeled dev "
                f"{counts['labeled']['dev']}, holdout {counts['labeled']['holdout']}; holdout looked at "
                f"{counts['looks']['count']} time(s)"]
    return Output(counts, SPLIT_COLUMNS, [row], text=text)
