"""Behaviour of labeler.labels through its public functions: annotators, queue, leases, writes and
their audit events, blind reads, history, progress and consolidation."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest

from labeler import db as store
from labeler import labels as L
from labeler.accounts.settings import set_setting
from labeler.errors import ItemTakenError, LabelError, RoleError
from labeler.ingest import ingest_logs

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)


def at(minutes: float) -> datetime:
    return T0 + timedelta(minutes=minutes)


def no_overlap(db) -> None:
    set_setting(db, "overlap_fraction", 0)


def events(db, query_pk: int, field: str | None = None) -> list[tuple]:
    sql = "SELECT annotator, doc_pk, field, old, new FROM label_events WHERE query_pk = ?"
    params: list = [query_pk]
    if field:
        sql += " AND field = ?"
        params.append(field)
    return db.execute(sql + " ORDER BY id", params).fetchall()


def drain(db, annotator: str, *, now=None) -> list[int]:
    """Submit items in queue order until the queue is empty for ``annotator``."""
    done = []
    while (pk := L.next_item(db, annotator, now=now)) is not None:
        L.set_status(db, pk, annotator, "submitted", now=now)
        done.append(pk)
    return done


def query_ids(db, pks: list[int]) -> list[str]:
    ids = dict(db.execute("SELECT pk, query_id FROM queries").fetchall())
    return [ids[pk] for pk in pks]


# --- annotators ---------------------------------------------------------------------------

def test_first_annotator_becomes_lead_then_annotators(db):
    assert L.get_role(db, "alice") is None
    assert L.add_annotator(db, "alice").role == "lead"
    assert L.add_annotator(db, "bob").role == "annotator"
    assert L.add_annotator(db, "carol", "lead").role == "lead"
    assert [(a.name, a.role) for a in L.list_annotators(db)] == [
        ("alice", "lead"), ("bob", "annotator"), ("carol", "lead")]
    assert L.add_annotator(db, "bob").role == "annotator"  # known name keeps its role


def test_first_annotator_to_take_an_item_becomes_lead(db, ingest_tiny):
    ingest_tiny(db, 2)
    L.next_item(db, "zoe")
    L.next_item(db, "yann")
    assert (L.get_role(db, "zoe"), L.get_role(db, "yann")) == ("lead", "annotator")


def test_roles_are_validated_and_the_last_lead_stays(db):
    L.add_annotator(db, "alice")
    with pytest.raises(LabelError, match="only lead"):
        L.add_annotator(db, "alice", "annotator")
    with pytest.raises(LabelError, match="use one of: annotator, lead"):
        L.add_annotator(db, "bob", "admin")
    with pytest.raises(LabelError, match="empty"):
        L.add_annotator(db, "  ")
    L.add_annotator(db, "bob", "lead")
    assert L.add_annotator(db, "alice", "annotator").role == "annotator"


# --- queue --------------------------------------------------------------------------------

def test_next_item_leases_and_resumes_the_held_item(db, ingest_tiny):
    ingest_tiny(db, 3)
    pk = L.next_item(db, "alice", now=at(0))
    assert L.queue_counts(db, now=at(1))["leased"] == 1
    assert L.next_item(db, "alice", now=at(5)) == pk  # resume after a reload
    assert L.get_item(db, pk, "alice").lease_expires == "2026-03-02T09:20:00.000000Z"  # renewed


def test_two_annotators_never_share_an_item_without_overlap(db, ingest_tiny):
    pks = ingest_tiny(db, 7)
    no_overlap(db)
    handed = []
    for i in range(7):
        pk = L.next_item(db, f"a{i}", now=at(0))
        handed.append(pk)
    assert sorted(handed) == sorted(pks)
    assert L.next_item(db, "late", now=at(1)) is None


def test_an_annotator_never_gets_an_item_twice(db, ingest_tiny):
    pks = ingest_tiny(db, 10)
    set_setting(db, "overlap_fraction", 1.0)
    done = drain(db, "alice")
    assert sorted(done) == sorted(pks)
    assert sorted(drain(db, "bob")) == sorted(pks)  # everything needs 2: bob gets each once
    assert drain(db, "carol") == []


def test_overlap_share_is_exact_and_seeded(db, ingest_tiny):
    ingest_tiny(db, 50)
    set_setting(db, "overlap_fraction", 0.2)
    done = Counter()
    for name in ("a", "b", "c"):
        done.update(drain(db, name))
    twice = sorted(pk for pk, n in done.items() if n == 2)
    assert len(done) == 50 and len(twice) == 10 and set(done.values()) == {1, 2}
    assert L.queue_counts(db)["overlap"] == 10
    # the choice depends only on the seed: a fresh database picks the same queries
    other = store.connect(":memory:")
    ingest_tiny(other, 50)
    set_setting(other, "overlap_fraction", 0.2)
    L.sync_queue(other)
    chosen = [r[0] for r in other.execute(
        "SELECT q.query_id FROM queue u JOIN queries q ON q.pk = u.query_pk WHERE u.needed = 2 ORDER BY 1")]
    assert chosen == sorted(query_ids(db, twice))
    set_setting(other, "queue_seed", 8)
    L.sync_queue(other)
    reseeded = [r[0] for r in other.execute(
        "SELECT q.query_id FROM queue u JOIN queries q ON q.pk = u.query_pk WHERE u.needed = 2 ORDER BY 1")]
    assert len(reseeded) == 10 and reseeded != chosen


def test_overlap_share_stays_exact_as_queries_arrive(db, ingest_tiny):
    ingest_tiny(db, 15, prefix="a")
    L.sync_queue(db)
    before = {r[0] for r in db.execute("SELECT query_pk FROM queue WHERE needed = 2")}
    assert len(before) == 2  # round(1.5) half up
    ingest_tiny(db, 25, prefix="b")  # the ingest brings the queue in use up to date itself
    assert db.execute("SELECT count(*) FROM queue").fetchone()[0] == 40
    assert L.sync_queue(db) == L.QueueSync()
    after = {r[0] for r in db.execute("SELECT query_pk FROM queue WHERE needed = 2")}
    assert len(after) == 4 and before <= after  # chosen items keep their target


def test_queries_that_arrive_join_the_queue_as_the_full_plan_would_without_reading_the_rest(db, ingest_tiny):
    set_setting(db, "overlap_fraction", 0.3)
    ingest_tiny(db, 40, prefix="a")
    L.sync_queue(db)
    assert len(drain(db, "alice")) == 40  # the old rows are taken and done
    statements: list[str] = []
    db.conn.set_trace_callback(statements.append)
    ingest_tiny(db, 37, prefix="b")  # (the ingest adds its queries to the queue in use)
    assert db.execute("SELECT count(*) FROM queue").fetchone()[0] == 77
    assert L.sync_queue(db) == L.QueueSync()
    assert L.next_item(db, "bob") is not None  # (syncs what arrived in between inside its transaction)
    ingest_tiny(db, 23, prefix="c")
    assert L.next_item(db, "bob") is not None
    db.conn.set_trace_callback(None)
    # every query is read by the full plan only: the arrivals were added from the new queries alone
    assert not [s for s in statements if "FROM queries q WHERE (q.origin" in s]
    rows = db.execute("SELECT * FROM queue ORDER BY query_pk").fetchall()
    assert len(rows) == 100 and sum(r[3] for r in rows) == 30  # the overlap share is exact
    assert L.sync_queue(db, force=True) == L.QueueSync()  # the full plan changes nothing
    assert db.execute("SELECT * FROM queue ORDER BY query_pk").fetchall() == rows


def test_overlapped_item_goes_to_two_annotators_at_once(db, ingest_tiny):
    (pk,) = ingest_tiny(db, 1)
    set_setting(db, "overlap_fraction", 1.0)
    assert L.next_item(db, "alice", now=at(0)) == pk
    assert L.next_item(db, "bob", now=at(0)) == pk
    assert L.next_item(db, "carol", now=at(0)) is None


def _order(db, order: str) -> list[str]:
    no_overlap(db)
    set_setting(db, "queue_order", order)
    return query_ids(db, drain(db, "alice"))


def test_order_oldest(db, ingest_tiny):
    records = [{"query_id": qid, "question": qid, "timestamp": ts, "retrieved": [{"id": f"d-{qid}"}]}
               for qid, ts in (("x", "2026-02-01"), ("y", "2025-12-31"), ("z", "2026-01-15"))]
    ingest_tiny(db, records=records)
    assert _order(db, "oldest") == ["y", "z", "x"]


def test_order_lowest_score_puts_unscored_last(db, ingest_tiny):
    records = [{"query_id": qid, "question": qid, "retrieved": chunks} for qid, chunks in (
        ("high", [{"id": "h1", "score": 0.9}, {"id": "h2", "score": 0.1}]),
        ("none", [{"id": "n1"}]),
        ("low", [{"id": "l1", "score": 0.2}, {"id": "l2", "score": 0.95}]),
        ("mid", [{"id": "m1", "score": 0.5}]))]
    ingest_tiny(db, records=records)
    assert _order(db, "lowest_score") == ["low", "mid", "high", "none"]


def test_order_frequent(db, write_log):
    lines = [{"question": q, "retrieved": [{"id": "d1"}], "timestamp": f"2026-01-0{i}"}
             for q, n in (("once", 1), ("thrice", 3), ("twice", 2)) for i in range(1, n + 1)]
    ingest_logs(db, write_log(lines))
    no_overlap(db)
    set_setting(db, "queue_order", "frequent")
    questions = dict(db.execute("SELECT pk, question FROM queries").fetchall())
    assert [questions[pk] for pk in drain(db, "alice")] == ["thrice", "twice", "once"]


def test_order_random_is_seeded(db, ingest_tiny):
    ingest_tiny(db, 30)
    first = _order(db, "random")
    other = store.connect(":memory:")
    ingest_tiny(other, 30)
    assert _order(other, "random") == first
    assert first != sorted(first)
    third = store.connect(":memory:")
    ingest_tiny(third, 30)
    set_setting(third, "queue_seed", 99)
    assert _order(third, "random") != first


def test_changing_the_order_resorts_what_is_left(db, ingest_tiny):
    records = [{"query_id": f"q{i}", "question": f"q{i}", "timestamp": f"2026-01-{10 - i:02d}",
                "retrieved": [{"id": f"d{i}", "score": i / 10}]} for i in range(5)]
    ingest_tiny(db, records=records)
    no_overlap(db)
    set_setting(db, "queue_order", "oldest")
    first = L.next_item(db, "alice")
    L.set_status(db, first, "alice", "submitted")
    set_setting(db, "queue_order", "lowest_score")
    assert query_ids(db, [first] + drain(db, "alice")) == ["q4", "q0", "q1", "q2", "q3"]


def test_unknown_queue_order_says_what_is_allowed(db, ingest_tiny):
    ingest_tiny(db, 1)
    set_setting(db, "queue_order", "alphabetical")
    with pytest.raises(LabelError, match="random, oldest, lowest_score, frequent"):
        L.next_item(db, "alice")


def test_expired_lease_goes_to_someone_else(db, ingest_tiny):
    (pk,) = ingest_tiny(db, 1)
    assert L.next_item(db, "alice", now=at(0)) == pk
    assert L.next_item(db, "bob", now=at(14)) is None  # still held
    assert L.next_item(db, "bob", now=at(16)) == pk  # expired: handed over
    with pytest.raises(ItemTakenError, match="take the next item"):
        L.set_grade(db, pk, L.get_item(db, pk, "alice").chunks[0].doc_pk, "alice", 2, now=at(17))
    assert L.next_item(db, "alice", now=at(17)) is None


def test_writes_and_renew_extend_the_lease(db, ingest_tiny):
    (pk,) = ingest_tiny(db, 1)
    L.next_item(db, "alice", now=at(0))
    L.set_query_fields(db, pk, "alice", notes="reading", now=at(10))
    assert L.next_item(db, "bob", now=at(20)) is None  # lease runs to 25
    assert L.renew_lease(db, pk, "alice", now=at(24)) == "2026-03-02T09:39:00.000000Z"
    assert L.next_item(db, "bob", now=at(38)) is None
    assert L.next_item(db, "bob", now=at(40)) == pk


def test_lease_minutes_setting(db, ingest_tiny):
    (pk,) = ingest_tiny(db, 1)
    set_setting(db, "lease_minutes", 2)
    L.next_item(db, "alice", now=at(0))
    assert L.next_item(db, "bob", now=at(3)) == pk


def test_release_hands_the_item_on(db, ingest_tiny):
    (pk,) = ingest_tiny(db, 1)
    L.next_item(db, "alice")
    assert L.release(db, pk, "alice") is True
    assert L.release(db, pk, "alice") is False
    assert L.next_item(db, "bob") == pk


def test_skip_releases_to_others_but_not_back_to_me(db, ingest_tiny):
    (pk,) = ingest_tiny(db, 1)
    L.next_item(db, "alice")
    L.set_status(db, pk, "alice", "skipped", reason="do not know this product")
    assert L.next_item(db, "alice") is None
    assert L.next_item(db, "bob") == pk
    assert L.get_item(db, pk, "alice").status_reason == "do not know this product"


def test_synthetic_queries_wait_for_review(db, ingest_tiny):
    ingest_tiny(db, 1)
    no_overlap(db)
    with store.transaction(db):
        db.execute("INSERT INTO queries (query_id, question, norm_question, origin, review_state, created_at) "
                   "VALUES ('s1', 'synthetic?', 'synthetic?', 'synthetic', 'pending', '2026-01-01')")
    synthetic = db.execute("SELECT pk FROM queries WHERE query_id = 's1'").fetchone()[0]
    assert L.queue_counts(db)["pending_review"] == 1
    assert synthetic not in drain(db, "alice")
    with pytest.raises(LabelError, match="accepted in review"):
        L.set_grade(db, synthetic, 1, "alice", 1)
    with store.transaction(db):
        db.execute("UPDATE queries SET review_state = 'accepted' WHERE pk = ?", [synthetic])
    assert drain(db, "alice") == [synthetic]


def test_new_ingests_join_the_queue(db, ingest_tiny):
    ingest_tiny(db, 2, prefix="a")
    no_overlap(db)
    assert len(drain(db, "alice")) == 2
    later = ingest_tiny(db, 3, prefix="b")
    assert sorted(drain(db, "alice")) == sorted(later)
    assert L.sync_queue(db) == L.QueueSync()  # nothing missing: no work


def test_item_without_free_slot_cannot_be_written(db, ingest_tiny):
    (pk,) = ingest_tiny(db, 1)
    L.next_item(db, "alice")
    with pytest.raises(ItemTakenError):
        L.set_status(db, pk, "bob", "submitted")
    assert L.get_item(db, pk, "bob").status is None


def test_bad_keys_are_explained(db, ingest_tiny):
    (pk,) = ingest_tiny(db, 1)
    with pytest.raises(LabelError, match="does not exist"):
        L.set_grade(db, 999, 1, "alice", 1)
    with pytest.raises(LabelError, match="integer query pk"):
        L.set_grade(db, "q000", 1, "alice", 1)
    with pytest.raises(LabelError, match="chunk pk 999 does not exist"):
        L.set_grade(db, pk, 999, "alice", 1)


def labeled_queue(db, n: int) -> None:
    """``n`` queries, 99% submitted in queue order (overlapped items by two annotators); also the
    setup of tests/bench/bench_next_item.py."""
    with store.transaction(db):
        db.execute("WITH RECURSIVE i(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM i WHERE n < ?) "
                   "INSERT INTO queries (pk, query_id, question, norm_question, created_at) "
                   "SELECT n, 'q' || n, 'question ' || n, 'question ' || n, '2026-01-01' FROM i", [n])
    L.sync_queue(db)
    with store.transaction(db):
        db.execute("CREATE TEMP TABLE ordered AS SELECT query_pk, needed, "
                   "row_number() OVER (ORDER BY sort_key, query_pk) AS i FROM queue")
        for j in range(2):
            db.execute("INSERT INTO assignments (query_pk, annotator, state, updated_at) "
                       "SELECT query_pk, 'a' || ((i + ?) % 8), 'done', '2026' FROM ordered "
                       "WHERE i <= ? AND needed > ?", [j, int(n * 0.99), j])
            db.execute("INSERT INTO query_labels (query_pk, annotator, status, created_at, updated_at) "
                       "SELECT query_pk, 'a' || ((i + ?) % 8), 'submitted', '2026', '2026' FROM ordered "
                       "WHERE i <= ? AND needed > ?", [j, int(n * 0.99), j])
        db.execute("UPDATE queue SET taken = (SELECT count(*) FROM assignments a "
                   "WHERE a.query_pk = queue.query_pk), done = (SELECT count(*) FROM assignments a "
                   "WHERE a.query_pk = queue.query_pk)")


def test_next_item_uses_the_open_index_at_100k(db):
    """Its speed is measured by tests/bench/bench_next_item.py (a test asserts behaviour)."""
    n = 100_000
    labeled_queue(db, n)
    assert L.queue_counts(db)["open"] == n - int(n * 0.99)
    plan = " ".join(str(r) for r in db.execute(
        "EXPLAIN QUERY PLAN SELECT query_pk FROM queue u WHERE u.taken < u.needed ORDER BY sort_key, query_pk"))
    assert "queue_open" in plan
    open_pks = {r[0] for r in db.execute("SELECT query_pk FROM queue WHERE taken < needed")}
    handed = []
    for k in range(200):
        annotator = f"a{k % 8}"
        pk = L.next_item(db, annotator)
        # an open item, never one this annotator had (an overlapped item goes to two of them)
        assert pk in open_pks and (pk, annotator) not in handed
        handed.append((pk, annotator))
        L.set_status(db, pk, annotator, "submitted")


# --- writes and their events --------------------------------------------------------------

def test_set_grade_writes_at_once_with_old_and_new(db, ingest_tiny):
    (pk,) = ingest_tiny(db, 1)
    L.next_item(db, "alice")
    doc = L.get_item(db, pk, "alice").chunks[0].doc_pk
    assert L.set_grade(db, pk, doc, "alice", 1) is None
    assert L.set_grade(db, pk, doc, "alice", 3) == 1
    L.set_grade(db, pk, doc, "alice", 3)  # unchanged: no event
    assert L.clear_grade(db, pk, doc, "alice") == 3
    assert events(db, pk, "grade") == [("alice", doc, "grade", None, "1"), ("alice", doc, "grade", "1", "3"),
                                       ("alice", doc, "grade", "3", None)]
    assert L.get_item(db, pk, "alice").chunks[0].grade is None


def test_grades_are_validated_against_the_scale(db, ingest_tiny):
    (pk,) = ingest_tiny(db, 1)
    doc = L.get_item(db, pk, "alice").chunks[0].doc_pk
    for bad in (4, -1, 1.5, True, "2"):
        with pytest.raises(LabelError, match="from 0 to 3"):
            L.set_grade(db, pk, doc, "alice", bad)
    set_setting(db, "grade_names", ["no", "yes"])
    with pytest.raises(LabelError, match="from 0 to 1"):
        L.set_grade(db, pk, doc, "alice", 2)
    assert events(db, pk) == []


def test_a_missed_chunk_can_be_added(db, ingest_tiny):
    first, second = ingest_tiny(db, 2)
    missed = L.get_item(db, second, "alice").chunks[1]
    L.set_grade(db, first, missed.doc_pk, "alice", 3)
    item = L.get_item(db, first, "alice")
    assert [(c.doc_id, c.grade, c.rank) for c in item.extra] == [(missed.doc_id, 3, None)]
    assert all(c.grade is None for c in item.chunks)


def test_set_rest_zero_grades_only_the_ungraded(db, ingest_tiny):
    (pk,) = ingest_tiny(db, 1, chunks=4)
    chunks = L.get_item(db, pk, "alice").chunks
    L.set_grade(db, pk, chunks[1].doc_pk, "alice", 3)
    assert L.set_rest_zero(db, pk, "alice") == 3
    assert [c.grade for c in L.get_item(db, pk, "alice").chunks] == [0, 3, 0, 0]
    assert len(events(db, pk, "grade")) == 4
    assert L.set_rest_zero(db, pk, "alice") == 0


def test_query_fields_write_one_event_per_changed_field(db, ingest_tiny):
    (pk,) = ingest_tiny(db, 1)
    assert L.set_query_fields(db, pk, "alice", expected_answer="42", answer_faithful="yes",
                              answer_relevant="partly", notes="") == ["expected_answer", "answer_faithful",
                                                                      "answer_relevant"]
    assert L.set_query_fields(db, pk, "alice", expected_answer="42", answer_faithful="no") == ["answer_faithful"]
    assert events(db, pk) == [
        ("alice", None, "expected_answer", None, "42"), ("alice", None, "answer_faithful", None, "yes"),
        ("alice", None, "answer_relevant", None, "partly"), ("alice", None, "answer_faithful", "yes", "no")]
    item = L.get_item(db, pk, "alice")
    assert (item.expected_answer, item.answer_faithful, item.answer_relevant, item.notes) == (
        "42", "no", "partly", None)
    with pytest.raises(LabelError, match="yes, partly, no"):
        L.set_query_fields(db, pk, "alice", answer_relevant="maybe")
    with pytest.raises(LabelError, match="unknown query field 'grade'"):
        L.set_query_fields(db, pk, "alice", grade="3")


def test_add_seconds_accumulates(db, ingest_tiny):
    (pk,) = ingest_tiny(db, 1)
    L.add_seconds(db, pk, "alice", 12)
    assert L.add_seconds(db, pk, "alice", 3.5) == 15.5
    assert L.get_item(db, pk, "alice").seconds == 15.5
    assert events(db, pk, "seconds")[-1][3:] == ("12.0", "15.5")
    with pytest.raises(LabelError, match="seconds"):
        L.add_seconds(db, pk, "alice", -1)


def test_status_semantics(db, ingest_tiny):
    a, b, c = ingest_tiny(db, 3)
    no_overlap(db)
    with pytest.raises(LabelError, match="needs a reason"):
        L.set_status(db, a, "alice", "flagged")
    L.set_status(db, a, "alice", "flagged", reason="chunk text is truncated")
    L.set_status(db, b, "alice", "discarded", reason="not a question")
    L.set_status(db, c, "alice", "submitted")
    with pytest.raises(LabelError, match="submitted, skipped, flagged, discarded"):
        L.set_status(db, c, "alice", "done")
    assert L.get_item(db, a, "alice").flag_reason == "chunk text is truncated"
    assert [L.get_item(db, pk, "alice").assignment for pk in (a, b, c)] == ["done"] * 3
    counts = L.queue_counts(db)
    assert (counts["done"], counts["open"], counts["flagged"], counts["discarded"], counts["submitted"]) == (
        3, 0, 1, 1, 1)
    assert L.next_item(db, "bob") is None  # flagged and discarded items hold their slot
    assert events(db, a, "status") == [("alice", None, "status", "in_progress", "flagged")]
    assert L.set_status(db, a, "alice", "submitted") == "flagged"  # the lead's question answered


# --- reads --------------------------------------------------------------------------------

def test_get_item_is_blind_to_other_annotators(db, ingest_tiny):
    (pk,) = ingest_tiny(db, 1)
    set_setting(db, "overlap_fraction", 1.0)
    assert L.next_item(db, "alice") == L.next_item(db, "bob") == pk
    chunks = L.get_item(db, pk, "alice").chunks
    L.set_grade(db, pk, chunks[0].doc_pk, "alice", 3)
    L.set_query_fields(db, pk, "alice", expected_answer="alice's answer")
    L.set_status(db, pk, "alice", "submitted")
    bob = L.get_item(db, pk, "bob")
    assert [c.grade for c in bob.chunks] == [None, None, None]
    assert (bob.expected_answer, bob.status, bob.extra) == (None, None, [])
    assert (bob.question, bob.answer, bob.origin, bob.occurrences) == (
        "What is item q0?", "Item q0 is a thing.", "log", 1)
    assert [(c.rank, c.doc_id, c.text, c.score) for c in bob.chunks][0] == (1, "q000-c0", "chunk 0 about q0", 0.9)


def test_history_and_previous_item(db, ingest_tiny):
    ingest_tiny(db, 4)
    no_overlap(db)
    order = []
    for minute, status in enumerate(("submitted", "skipped", "submitted")):
        pk = L.next_item(db, "alice", now=at(minute))
        L.set_status(db, pk, "alice", status, now=at(minute))
        order.append(pk)
    current = L.next_item(db, "alice", now=at(5))
    hist = L.history(db, "alice")
    assert [h.query_pk for h in hist] == order[::-1]
    assert [h.status for h in hist] == ["submitted", "skipped", "submitted"]
    assert L.previous_item(db, "alice", current) == order[2]
    assert L.previous_item(db, "alice", order[2]) == order[1]
    L.set_query_fields(db, order[0], "alice", notes="fixed later", now=at(6))  # editing does not reorder
    assert L.previous_item(db, "alice", order[1]) == order[0]
    assert L.previous_item(db, "alice", order[0]) is None
    assert L.history(db, "alice", limit=1)[0].query_pk == order[2]
    assert L.history(db, "bob") == []


def test_history_item_can_be_edited_after_submit(db, ingest_tiny):
    (pk,) = ingest_tiny(db, 1)
    L.next_item(db, "alice", now=at(0))
    doc = L.get_item(db, pk, "alice").chunks[0].doc_pk
    L.set_grade(db, pk, doc, "alice", 1, now=at(1))
    L.set_status(db, pk, "alice", "submitted", now=at(1))
    L.set_grade(db, pk, doc, "alice", 2, now=at(60))  # long after the lease: finished items stay editable
    assert L.get_item(db, pk, "alice").chunks[0].grade == 2
    assert L.get_item(db, pk, "alice").status == "submitted"


# --- progress -----------------------------------------------------------------------------

def test_progress_numbers_on_a_hand_built_team(db, ingest_tiny):
    ingest_tiny(db, 6)
    no_overlap(db)
    now = at(0)
    work = [("carol", 120, "submitted", timedelta(days=-10)), ("alice", 30, "submitted", timedelta(hours=-2)),
            ("alice", 60, "submitted", timedelta(hours=-1)), ("bob", 90, "submitted", timedelta(hours=-1)),
            ("bob", 10, "skipped", timedelta(minutes=-30))]
    for name, seconds, status, when in work:
        pk = L.next_item(db, name, now=now + when)
        L.add_seconds(db, pk, name, seconds, now=now + when)
        L.set_status(db, pk, name, status, now=now + when)
    p = L.progress(db, now=now)
    by = {a.annotator: a for a in p.annotators}
    assert (by["alice"].submitted, by["alice"].median_seconds, by["alice"].seconds) == (2, 45.0, 90.0)
    assert (by["bob"].submitted, by["bob"].skipped, by["bob"].median_seconds) == (1, 1, 90.0)
    assert (by["carol"].active, by["alice"].active, by["bob"].active) == (False, True, True)
    assert (p.items, p.items_done, p.items_left) == (6, 4, 2)
    assert (p.submitted, p.skipped, p.median_seconds, p.active_annotators) == (4, 1, 75.0, 2)
    assert (p.labeling_now, p.eta_seconds) == (0, None)  # nobody labels through the app right now
    # bob's Label page saves a grade 10 minutes ago (the grading widget's stream): he is labeling now
    pk = L.next_item(db, "bob", now=now - timedelta(minutes=10))
    doc = L.get_item(db, pk, "bob").chunks[0].doc_pk
    L.apply_grade_events(db, pk, "bob", "page-1", [{"seq": 1, "doc_pk": doc, "grade": 2}],
                         now=now - timedelta(minutes=10))
    p = L.progress(db, now=now)
    assert (p.labeling_now, p.eta_seconds) == (1, 2 * 75.0 / 1)
    assert L.progress(db, now=now + timedelta(minutes=25)).labeling_now == 0  # 35 minutes later: not any more
    stats = {s["annotator"]: s for s in L.annotator_stats(db, now=now)}
    assert stats["carol"]["role"] == "lead" and stats["carol"]["submitted"] == 1
    assert L.queue_counts(db, now=now)["open_slots"] == 2


def test_progress_eta_edge_cases(db, ingest_tiny):
    assert L.progress(db).eta_seconds == 0.0  # nothing to do
    (pk,) = ingest_tiny(db, 1)
    assert L.progress(db).eta_seconds is None  # no timing yet
    L.next_item(db, "alice")
    L.set_status(db, pk, "alice", "submitted")
    assert (L.progress(db).items_left, L.progress(db).eta_seconds) == (0, 0.0)


# --- consolidation ------------------------------------------------------------------------

def _label(db, pk: int, grades: dict[str, list[int | None]], status: str = "submitted") -> None:
    """Have each annotator grade the item's chunks in rank order (None = leave ungraded)."""
    chunks = L.get_item(db, pk, "x").chunks
    for name, row in grades.items():
        for chunk, grade in zip(chunks, row, strict=False):
            if grade is not None:
                L.set_grade(db, pk, chunk.doc_pk, name, grade)
        L.set_status(db, pk, name, status, reason="r" if status == "flagged" else None)


def _golden(db, **filters) -> list[tuple]:
    return [tuple(r) for r in L.golden_labels(db, **filters)[
        ["query_pk", "grade", "n_annotators", "conflict", "adjudicated"]].itertuples(index=False)]


def test_golden_labels_consolidation_rules(db, ingest_tiny):
    (pk,) = ingest_tiny(db, 1, chunks=6)
    set_setting(db, "overlap_fraction", 1.0)
    set_setting(db, "overlap_annotators", 3)
    _label(db, pk, {"a": [1, 0, 2, 3, 0, 3], "b": [2, 3, 3, None, 1, 3], "c": [None, None, None, None, 3, None]})
    g = L.golden_labels(db)
    assert list(g.columns) == ["query_pk", "doc_pk", "grade", "n_annotators", "conflict", "adjudicated"]
    assert list(g["grade"]) == [2, 2, 3, 3, 1, 3]  # medians rounded half up; 0,1,3 -> 1
    assert list(g["n_annotators"]) == [2, 2, 2, 1, 3, 2]
    assert list(g["conflict"]) == [True, True, False, False, True, False]  # across threshold / >= 2 apart
    assert str(g["grade"].dtype) == "int64" and str(g["conflict"].dtype) == "bool"


def test_only_submitted_labels_count_and_discards(db, ingest_tiny):
    solo, shared, pending = ingest_tiny(db, 3, chunks=1)
    set_setting(db, "overlap_fraction", 1.0)
    _label(db, solo, {"a": [3]}, status="discarded")
    _label(db, shared, {"a": [0]}, status="discarded")
    _label(db, shared, {"b": [2]})
    L.next_item(db, "c")
    L.set_grade(db, pending, L.get_item(db, pending, "c").chunks[0].doc_pk, "c", 3)  # not submitted
    assert _golden(db) == [(shared, 2, 1, False, False)]
    assert L.golden_labels(db, annotator="a").empty


def test_golden_filters(db, ingest_tiny):
    first, second = ingest_tiny(db, 2, chunks=1)
    no_overlap(db)
    L.next_item(db, "a", now=at(0))
    L.set_grade(db, first, L.get_item(db, first, "a").chunks[0].doc_pk, "a", 3, now=at(0))
    L.set_status(db, first, "a", "submitted", now=at(0))
    L.next_item(db, "b", now=at(60))
    L.set_grade(db, second, L.get_item(db, second, "b").chunks[0].doc_pk, "b", 1, now=at(60))
    L.set_status(db, second, "b", "submitted", now=at(60))
    assert [r[0] for r in _golden(db, since=at(30))] == [second]
    assert [r[0] for r in _golden(db, until=at(30))] == [first]
    assert [r[0] for r in _golden(db, annotator="a")] == [first]
    assert [r[0] for r in _golden(db, origin="log")] == [first, second]
    assert _golden(db, origin="synthetic") == []
    with pytest.raises(LabelError, match="log, synthetic, import"):
        L.golden_labels(db, origin="web")


def test_conflicts_and_adjudication(db, ingest_tiny):
    (pk,) = ingest_tiny(db, 1, chunks=3)
    set_setting(db, "overlap_fraction", 1.0)
    L.add_annotator(db, "lead", "lead")
    _label(db, pk, {"a": [0, 2, 3], "b": [3, 3, 3]})
    (item,) = L.conflicts(db)
    assert item.query_pk == pk and item.question == "What is item q0?"
    assert [(p.doc_id, p.rank, p.grades) for p in item.pairs] == [("q000-c0", 1, {"a": 0, "b": 3})]
    doc = item.pairs[0].doc_pk
    with pytest.raises(RoleError, match="only a lead"):
        L.adjudicate(db, pk, doc, 1, "a")
    with pytest.raises(LabelError, match="from 0 to 3"):
        L.adjudicate(db, pk, doc, 7, "lead")
    assert L.adjudicate(db, pk, doc, 1, "lead") is None
    g = L.golden_labels(db)
    assert list(g["grade"]) == [1, 3, 3] and list(g["adjudicated"]) == [True, False, False]
    assert not g["conflict"].any()
    assert L.conflicts(db) == []
    assert L.conflicts(db, include_resolved=True)[0].pairs[0].adjudicated == 1
    assert events(db, pk, "adjudication") == [("lead", doc, "adjudication", None, "1")]
    assert L.golden_labels(db, annotator="a")["grade"].tolist() == [0, 2, 3]  # raw, not adjudicated
