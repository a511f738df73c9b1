"""The pool (labeler.labels.pool) through the public functions: the union of every retriever's
chunks for a query, each once, interleaved; blind labeling; "rest are 0" over the pool; one grade
counting for every retriever; the re-queue after an ingest adds another retriever's ranking."""

from __future__ import annotations

from typing import Any

import pytest

from labeler import db as store
from labeler import labels as L
from labeler.accounts.settings import set_setting
from labeler.errors import LabelError, RoleError
from labeler.ingest import ingest_logs
from labeler.labels.pool import retriever_order
from labeler.report import retrieval_report

# three retrievers over the same query with overlapping chunks (ids c1..c8)
RANKINGS = {
    "production": ["c1", "c2", "c3", "c4"],
    "bm25": ["c2", "c5", "c1", "c6"],
    "dense": ["c7", "c1", "c8", "c3"],
}


def record(query_id: str, retriever: str, ids: list[str]) -> dict[str, Any]:
    return {"query_id": query_id, "question": f"What about {query_id}?", "retriever": retriever,
            "retrieved": [{"id": d, "text": f"text of {d}", "score": round(1 - i / 10, 2)}
                          for i, d in enumerate(ids)]}


def pooled_ids(db, pk: int, annotator: str = "ann") -> list[str]:
    return [c.doc_id for c in L.get_item(db, pk, annotator).chunks]


def pk_of(db, query_id: str) -> int:
    return db.execute("SELECT pk FROM queries WHERE query_id = ?", [query_id]).fetchone()[0]


def expected_pool(query_id: str, rankings: dict[str, list[str]], depth: int) -> list[str]:
    """The pool by hand: round k takes each retriever's k-th chunk in the query's retriever order."""
    out: list[str] = []
    order = retriever_order(query_id, list(rankings))
    for k in range(depth):
        for r in order:
            if k < len(rankings[r]) and rankings[r][k] not in out:
                out.append(rankings[r][k])
    return out


@pytest.fixture
def three(db, write_log):
    set_setting(db, "overlap_fraction", 0)
    ingest_logs(db, write_log([record("q1", r, ids) for r, ids in RANKINGS.items()]))
    return pk_of(db, "q1")


def test_pool_of_three_retrievers_has_each_chunk_once_interleaved(db, three):
    ids = pooled_ids(db, three)
    assert sorted(ids) == [f"c{i}" for i in range(1, 9)]  # the union, each chunk once
    assert ids == expected_pool("q1", RANKINGS, 10)
    assert ids == pooled_ids(db, three) == [c.doc_id for c in
                                            [L.get_item(db, three, "other")][0].chunks]  # deterministic
    order = retriever_order("q1", list(RANKINGS))
    assert ids[0] == RANKINGS[order[0]][0]  # round 1 comes first, in the query's retriever order
    assert [c.position for c in L.get_item(db, three, "ann").chunks] == list(range(1, 9))
    # the library call gives the same pool, with every retriever that returned each chunk
    pool = L.pool(db, three)
    c1 = next(p for p in pool if p.doc_pk == L.get_item(db, three, "ann").chunks[ids.index("c1")].doc_pk)
    assert sorted((s.retriever, s.rank) for s in c1.sources) == [("bm25", 3), ("dense", 2), ("production", 1)]


def test_pool_depth_cuts_each_retriever(db, three):
    set_setting(db, "pool_depth", 2)
    ids = pooled_ids(db, three)
    assert ids == expected_pool("q1", {r: v[:2] for r, v in RANKINGS.items()}, 2)
    assert sorted(ids) == ["c1", "c2", "c5", "c7"]  # c3, c4, c6, c8 are below depth 2 everywhere
    assert [p.doc_pk for p in L.pool(db, three, depth=1)] == [
        c.doc_pk for c in L.get_item(db, three, "ann").chunks if c.doc_id in ("c1", "c2", "c7")]


def test_no_retriever_always_comes_first(db, write_log):
    records = [record(f"q{i}", r, [f"{r}-{i}-{j}" for j in range(3)])
               for i in range(30) for r in RANKINGS]
    ingest_logs(db, write_log(records))
    firsts = {pooled_ids(db, pk_of(db, f"q{i}"))[0].split("-")[0] for i in range(30)}
    assert firsts == set(RANKINGS)


def test_pool_is_blind_unless_show_sources(db, three):
    item = L.get_item(db, three, "ann")
    assert item.blind
    assert all(c.rank is None and c.score is None and c.sources == [] for c in item.chunks)
    set_setting(db, "show_sources", True)
    item = L.get_item(db, three, "ann")
    assert not item.blind
    c2 = next(c for c in item.chunks if c.doc_id == "c2")
    assert sorted((s.retriever, s.rank, s.score) for s in c2.sources) == [("bm25", 1, 1.0), ("production", 2, 0.9)]


def test_single_retriever_shows_rank_and_score(db, write_log):
    ingest_logs(db, write_log([record("q1", "tfidf", ["a", "b", "c"])]))
    item = L.get_item(db, pk_of(db, "q1"), "ann")
    assert not item.blind
    assert [(c.doc_id, c.rank, c.score, c.position) for c in item.chunks] == [
        ("a", 1, 1.0, 1), ("b", 2, 0.9, 2), ("c", 3, 0.8, 3)]


def test_pool_settings_are_for_leads_and_checked(db, three):
    L.add_annotator(db, "lena", "lead")
    L.add_annotator(db, "ann")
    with pytest.raises(RoleError, match="leads only"):
        L.set_pool_settings(db, show_sources=True, by="ann")
    with pytest.raises(LabelError, match="whole number"):
        L.set_pool_settings(db, pool_depth=0, by="lena")
    L.set_pool_settings(db, pool_depth=3, show_sources=True, by="lena")
    assert (store.get_setting(db, "pool_depth"), store.get_setting(db, "show_sources")) == (3, True)


def test_rest_zero_grades_the_whole_pool(db, three):
    item = L.get_item(db, three, "ann")
    L.set_grade(db, three, item.chunks[0].doc_pk, "ann", 3)
    assert L.set_rest_zero(db, three, "ann") == 7
    item = L.get_item(db, three, "ann")
    assert item.ungraded == 0
    assert [c.grade for c in item.chunks] == [3] + [0] * 7


def test_submit_needs_every_pool_chunk_graded(db, three):
    item = L.get_item(db, three, "ann")
    L.next_item(db, "ann")
    events = [{"seq": i + 1, "doc_pk": c.doc_pk, "grade": 1} for i, c in enumerate(item.chunks[:-1])]
    result = L.apply_grade_events(db, three, "ann", "tab1", [*events, {"seq": 8, "submit": True}])
    assert result.rejected == [(8, "cannot submit: chunk #8 has no grade yet")]
    result = L.apply_grade_events(db, three, "ann", "tab1", [
        {"seq": 9, "doc_pk": item.chunks[-1].doc_pk, "grade": 0}, {"seq": 10, "submit": True}])
    assert result.submitted
    # the rows are per (query, chunk id, annotator): no retriever in them
    assert db.execute("SELECT count(*), count(DISTINCT doc_pk) FROM relevance_labels WHERE query_pk = ?",
                      [three]).fetchone() == (8, 8)


def test_a_grade_counts_for_every_retriever_that_returned_the_chunk(db, write_log):
    set_setting(db, "overlap_fraction", 0)
    rankings = {"production": ["c1", "c2", "c3"], "bm25": ["c2", "c4", "c1"]}
    ingest_logs(db, write_log([record("q1", r, ids) for r, ids in rankings.items()]))
    pk = L.next_item(db, "ann")
    for c in L.get_item(db, pk, "ann").chunks:
        L.set_grade(db, pk, c.doc_pk, "ann", 3 if c.doc_id == "c2" else 0)  # c2 graded once
    L.set_status(db, pk, "ann", "submitted")
    for retriever, mrr in (("production", 0.5), ("bm25", 1.0)):
        report = retrieval_report(db, ["mrr", "recall@3"], retriever=retriever, n_resamples=10)
        assert report.n_queries == 1
        assert report.metrics["mrr"]["mean"] == mrr
        assert report.metrics["recall@3"]["mean"] == 1.0
        assert report.judged["judged@3"]["mean"] == 1.0  # every chunk judged for both


def test_new_retriever_requeues_a_submitted_item_with_only_the_new_chunks(db, write_log):
    set_setting(db, "overlap_fraction", 0)
    set_setting(db, "queue_order", "lowest_score")  # equal top scores: by pk, so q1 first
    ingest_logs(db, write_log([record("q1", "production", ["c1", "c2", "c3"]),
                               record("q2", "production", ["d1"])]))
    first = L.next_item(db, "ann")
    assert L.get_item(db, first, "ann").query_id == "q1"
    L.set_grade(db, first, L.get_item(db, first, "ann").chunks[0].doc_pk, "ann", 3)
    L.set_rest_zero(db, first, "ann")
    L.set_status(db, first, "ann", "submitted")
    old = dict(db.execute("SELECT doc_pk, grade FROM relevance_labels WHERE query_pk = ?", [first]).fetchall())
    # a second retriever's ranking for q1 arrives: c2 and c3 again, c9 and c10 new
    ingest_logs(db, write_log([record("q1", "bm25", ["c9", "c2", "c10", "c3"])]))
    assert L.next_item(db, "ann") == first  # back first, before q2
    assert (L.progress(db).requeued, L.progress(db).items_left) == (1, 2)  # q1 back, q2 open
    counts = L.queue_counts(db)
    assert (counts["requeued"], counts["requeued_slots"]) == (1, 1)  # labeler queue says so too
    item = L.get_item(db, first, "ann")
    assert item.requeued and item.status == "submitted"
    assert sorted(c.doc_id for c in item.chunks if c.new) == ["c10", "c9"]
    assert sorted(c.doc_id for c in item.chunks if c.grade is None) == ["c10", "c9"]
    assert {c.doc_pk: c.grade for c in item.chunks if c.grade is not None} == old  # old grades kept
    assert L.set_rest_zero(db, first, "ann") == 2  # only the new chunks were left to grade
    assert sorted(c.doc_id for c in L.get_item(db, first, "ann").chunks if c.new) == ["c10", "c9"]  # badge stays
    L.set_status(db, first, "ann", "submitted")
    assert not L.get_item(db, first, "ann").requeued
    assert L.queue_counts(db)["requeued"] == 0
    assert L.get_item(db, L.next_item(db, "ann"), "ann").query_id == "q2"
    # an ingest that adds nothing new to the pool sends nothing back
    ingest_logs(db, write_log([record("q3", "production", ["e1"])]))
    assert db.execute("SELECT count(*) FROM requeued").fetchone()[0] == 0


def test_requeue_respects_pool_depth_and_skip_keeps_the_submission(db, write_log):
    set_setting(db, "overlap_fraction", 0)
    set_setting(db, "pool_depth", 2)
    ingest_logs(db, write_log([record("q1", "production", ["c1", "c2"])]))
    pk = L.next_item(db, "ann")
    L.set_rest_zero(db, pk, "ann")
    L.set_status(db, pk, "ann", "submitted")
    ingest_logs(db, write_log([record("q1", "bm25", ["c1", "c2", "c9"])]))  # c9 below the depth
    assert L.next_item(db, "ann") is None
    ingest_logs(db, write_log([record("q1", "dense", ["c7"])]))
    assert L.next_item(db, "ann") == pk
    L.set_status(db, pk, "ann", "skipped")  # sets the new chunk aside, the submission stays
    assert L.get_item(db, pk, "ann").status == "submitted"
    assert L.next_item(db, "ann") is None


def test_lowest_score_order_uses_the_default_retriever(db, write_log):
    set_setting(db, "overlap_fraction", 0)
    set_setting(db, "queue_order", "lowest_score")
    high, low = record("high", "tfidf", ["a"]), record("low", "tfidf", ["b"])
    low["retrieved"][0]["score"] = 0.1
    ingest_logs(db, write_log([high, low]))  # the only retriever is tfidf: it orders the queue
    assert L.get_item(db, L.next_item(db, "ann"), "ann").query_id == "low"
