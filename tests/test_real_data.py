"""Real data: CISI queries with a TF-IDF retriever's top 10 as production logs, ingested and counted."""

from __future__ import annotations

import labeler
from tests import cisi


def test_cisi_logs_ingest_with_counts_matching_the_source(tmp_path):
    cisi.require_cisi()
    logs = cisi.write_logs(tmp_path / "cisi-logs.jsonl")
    db = labeler.connect(tmp_path / "cisi.db")
    result = labeler.ingest_logs(db, logs)
    n_queries = len(cisi.queries())
    run = cisi.tfidf_run(10)
    assert n_queries == 112
    assert (result.records, result.new, result.rejected) == (n_queries, n_queries, 0)
    assert result.retrievals == sum(len(v) for v in run.values()) == 1120
    distinct_docs = {d for v in run.values() for d, _ in v}
    assert result.documents_new == len(distinct_docs)
    # every ranked list landed in order with its scores
    stored = db.execute(
        "SELECT q.query_id, d.doc_id, r.score FROM retrievals r JOIN queries q ON q.pk = r.query_pk "
        "JOIN documents d ON d.pk = r.doc_pk ORDER BY q.query_id, r.rank").fetchall()
    expected = sorted(((f"cisi-{q}", d, s) for q, v in run.items() for d, s in v), key=lambda t: t[0])
    by_query: dict[str, list] = {}
    for qid, d, s in stored:
        by_query.setdefault(qid, []).append((d, s))
    assert by_query == {f"cisi-{q}": [(d, s) for d, s in v] for q, v in run.items()}
    assert len(stored) == len(expected)

    corpus = labeler.ingest_corpus(db, cisi.write_corpus(tmp_path / "corpus.jsonl"))
    assert corpus.records == len(cisi.documents()) == 1460
    assert corpus.new == 1460 - len(distinct_docs)
    stats = labeler.stats(db)
    assert (stats["documents"], stats["documents_without_text"]) == (1460, 0)

    again = labeler.ingest_logs(db, logs)
    assert (again.new, again.unchanged) == (0, n_queries)
