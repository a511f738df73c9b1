"""``labeler search``: the corpus search of the Label page (``text``, ``missed``) and ``embed``."""

from __future__ import annotations

import click

from .common import CONTEXT_SETTINGS, LabelerGroup, open_db, secrets_toml
from .group import cli
from .output import Output, output_options

_K = click.option("--k", "k", type=click.IntRange(min=1), default=10, show_default=True,
                  help="How many chunks to return.")


TEXT_COLUMNS = ["rank", "score", "doc_id", "text"]
MISSED_COLUMNS = ["query_id", "rank", "score", "doc_id", "text"]


@cli.group("search", cls=LabelerGroup, context_settings=CONTEXT_SETTINGS)
def search() -> None:
    """Search the corpus: BM25 over the database's full-text index, and the chunks every
    retriever missed for a labeled query.

    Example:

        labeler search text "reset my sso password"
    """


@search.command("text", context_settings=CONTEXT_SETTINGS)
@click.argument("words")
@_K
@output_options(nl=True)
@click.pass_context
def search_text_cmd(ctx: click.Context, words: str, k: int, output_format: str) -> Output:
    """The chunks that best match WORDS (BM25 over title and text). WORDS is plain text: quotes,
    *, -, : and NEAR( are words or nothing, never query syntax.

    Example:

        labeler search text "okta saml login" --k 5 --json
    """
    from ..search import search_text

    found = search_text(open_db(ctx), words, k)
    return Output([{"doc_id": h.doc_id, "score": round(h.score, 6)} for h in found], TEXT_COLUMNS,
                  [{"rank": rank, "score": round(h.score, 6), "doc_id": h.doc_id, "text": h.text}
                   for rank, h in enumerate(found, start=1)], empty="no chunk matches these words")


@search.command("missed", context_settings=CONTEXT_SETTINGS)
@click.argument("query_ids", nargs=-1)
@_K
@click.option("--annotator", help="What this annotator's Label page offers: only their own grades count "
                                  "(labeling is blind). Default: every annotator's grades and the adjudications.")
@output_options(nl=True)
@click.pass_context
def search_missed_cmd(ctx: click.Context, query_ids: tuple[str, ...], k: int, annotator: str | None,
                      output_format: str) -> Output:
    """Chunks outside the pool (what the retrievers logged plus what annotators graded) that are
    likely relevant to the QUERY_IDS (default: every query with a grade, by --annotator if given):
    BM25 on the question and on the words of the chunks graded relevant, plus embeddings when
    [llm] embedding_model is set, fused by reciprocal rank.

    Example:

        labeler search missed q-17 q-42 --k 10 --annotator alice --json
    """
    from ..llm import LLMConfig
    from ..search import labeled_queries, query_pk, search_missed

    db = open_db(ctx)
    targets = [(query_pk(db, q), q) for q in query_ids] if query_ids else \
        [(pk, q) for pk, q in labeled_queries(db, annotator)]
    config = LLMConfig.from_env(secrets_toml())
    result = {qid: search_missed(db, pk, k, config=config if config.embedding_model else None, annotator=annotator)
              for pk, qid in targets}
    return Output({qid: [{"doc_id": h.doc_id, "score": round(h.score, 6)} for h in found]
                   for qid, found in result.items()}, MISSED_COLUMNS,
                  [{"query_id": qid, "rank": rank, "score": round(h.score, 6), "doc_id": h.doc_id, "text": h.text}
                   for qid, found in result.items() for rank, h in enumerate(found, start=1)],
                  empty=None if result else "no labeled query yet: grade some chunks on the Label page first")


@search.command("embed", context_settings=CONTEXT_SETTINGS)
@output_options()
@click.pass_context
def search_embed_cmd(ctx: click.Context, output_format: str) -> Output:
    """Embed every chunk that has no cached vector with [llm] embedding_model (secrets.toml) or
    LABELER_EMBEDDING_MODEL, so that `search missed` uses embeddings too. Cached vectors cost nothing.

    Example:

        LABELER_EMBEDDING_MODEL=text-embedding-3-small labeler search embed
    """
    from ..llm import LLMConfig
    from ..search import embed_documents

    count = embed_documents(open_db(ctx), LLMConfig.from_env(secrets_toml()))
    return Output({"embedded": count}, ["embedded"], [{"embedded": count}], text=[f"{count} chunks embedded"])
