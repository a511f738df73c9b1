"""A retrieval logged in the database, read back as a pipeline's answers to a golden set (what
``labeler eval`` scores when no pipeline is given: production's own retrieval)."""

from __future__ import annotations

import json

import sqlite_utils

from .. import db as store
from ..retrievers import default_retriever
from .golden import GoldenSet
from .pipeline import Answer


def stored_run(db: sqlite_utils.Database, golden: GoldenSet, *, retriever: str | None = None) -> list[Answer]:
    """The retrieval logged for each golden question under ``retriever`` (None: the default retriever,
    see :func:`labeler.retrievers.default_retriever`; RetrieverError when none can be chosen or the
    named one logged nothing), as answers: the query is
    found by query id, else by normalized question. A question the database does not hold, or holds
    without a logged ``retriever`` list, is ``skipped`` (not scored), so a first baseline reflects what
    production actually did."""
    from ..ingest.validate import NORM_MATCH, norm_params, normalize_question

    retriever = default_retriever(db, retriever)
    ids = sorted({q.query_id for q in golden.queries if q.query_id is not None})
    texts = sorted({normalize_question(q.question) for q in golden.queries})
    by_id = dict(db.execute(
        f"SELECT query_id, pk FROM queries q WHERE query_id IN (SELECT value FROM json_each(?)) AND {store.visible('q')}",
        [json.dumps(ids)]))
    by_text: dict[str, int] = {}
    # several logged queries may share a text: take the most frequent one
    for norm, pk in db.execute(
            f"SELECT norm_question, pk FROM queries q WHERE {NORM_MATCH} AND {store.visible('q')} "
            "ORDER BY occurrences DESC, pk", norm_params(texts)):
        by_text.setdefault(norm, pk)
    pks = [by_id.get(q.query_id) if q.query_id in by_id else by_text.get(normalize_question(q.question))
           for q in golden.queries]
    wanted = json.dumps(sorted({pk for pk in pks if pk is not None}))
    logged = {pk for (pk,) in db.execute(
        "SELECT query_pk FROM query_versions WHERE retriever = ? AND query_pk IN (SELECT value FROM json_each(?))",
        [retriever, wanted])}
    docs: dict[int, list[str]] = {}
    for pk, doc_id in db.execute(
            "SELECT r.query_pk, d.doc_id FROM retrievals r JOIN documents d ON d.pk = r.doc_pk "
            f"WHERE r.retriever = ? AND r.query_pk IN (SELECT value FROM json_each(?)) AND {store.visible('r')} "
            "ORDER BY r.query_pk, r.rank",
            [retriever, wanted]):
        docs.setdefault(pk, []).append(doc_id)
    answers = dict(db.execute("SELECT pk, answer FROM queries WHERE pk IN (SELECT value FROM json_each(?))",
                              [wanted]))
    out = []
    for pk in pks:
        if pk is None:
            out.append(Answer([], None, 0.0, "skipped", "not in the database"))
        elif pk not in logged and pk not in docs:
            out.append(Answer([], None, 0.0, "skipped", f"no logged retrieval for retriever {retriever!r}"))
        else:
            out.append(Answer(docs.get(pk, []), answers.get(pk), 0.0))
    return out
