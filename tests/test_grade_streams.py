"""Grade streams (labeler.labels.apply_grade_events): each event of the grading widget's ordered
stream is applied exactly once, in order, with its audit event, whatever is sent again, late,
out of order or from two page loads; a taken item writes nothing."""

from __future__ import annotations

import random
import threading
from datetime import UTC, datetime, timedelta

import pytest

from labeler import db as store
from labeler import labels as L
from labeler.errors import ItemTakenError, LabelError

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)


def at(minutes: float) -> datetime:
    return T0 + timedelta(minutes=minutes)


def grade_events(db, pk: int) -> list[tuple]:
    return db.execute("SELECT annotator, doc_pk, old, new FROM label_events WHERE query_pk = ? AND field = 'grade' "
                      "ORDER BY id", [pk]).fetchall()


def grades(db, pk: int, annotator: str = "alice") -> dict[int, int]:
    return {c.doc_pk: c.grade for c in L.get_item(db, pk, annotator).chunks if c.grade is not None}


@pytest.fixture
def item(db, ingest_tiny):
    store.set_setting(db, "overlap_fraction", 0)
    ingest_tiny(db, 2, chunks=4)
    pk = L.next_item(db, "alice", now=at(0))
    return pk, [c.doc_pk for c in L.get_item(db, pk, "alice").chunks]


def ev(seq: int, doc: int | None = None, grade: int | None = None, **kw) -> dict:
    return {"seq": seq, "doc_pk": doc, "grade": grade, **kw}


def test_events_apply_in_order_once_with_audit_rows(db, item):
    pk, docs = item
    r = L.apply_grade_events(db, pk, "alice", "tab-1", [ev(1, docs[0], 3), ev(2, docs[1], 1), ev(3, docs[0], 2)])
    assert (r.acked, r.applied, r.rejected, r.waiting) == (3, [1, 2, 3], [], 0)
    assert grades(db, pk) == {docs[0]: 2, docs[1]: 1}
    assert grade_events(db, pk) == [("alice", docs[0], None, "3"), ("alice", docs[1], None, "1"),
                                    ("alice", docs[0], "3", "2")]
    assert L.stream_acks(db, pk, "alice") == {"tab-1": 3}


def test_replays_and_duplicates_change_nothing(db, item):
    pk, docs = item
    batch = [ev(1, docs[0], 3), ev(2, docs[1], 0)]
    L.apply_grade_events(db, pk, "alice", "tab-1", batch)
    before = db.execute("SELECT count(*) FROM label_events").fetchone()[0]
    again = L.apply_grade_events(db, pk, "alice", "tab-1", batch + batch)  # resent twice after a lost ack
    assert (again.acked, again.applied) == (2, [])
    assert db.execute("SELECT count(*) FROM label_events").fetchone()[0] == before
    # the resend that carries one new event applies only that one
    r = L.apply_grade_events(db, pk, "alice", "tab-1", batch + [ev(3, docs[0], 1)])
    assert (r.acked, r.applied) == (3, [3])
    assert grade_events(db, pk)[-1] == ("alice", docs[0], "3", "1")


def test_a_replay_after_the_grade_changed_does_not_undo_it(db, item):
    pk, docs = item
    L.apply_grade_events(db, pk, "alice", "tab-1", [ev(1, docs[0], 3)])
    L.apply_grade_events(db, pk, "alice", "tab-1", [ev(2, docs[0], 0)])
    L.apply_grade_events(db, pk, "alice", "tab-1", [ev(1, docs[0], 3)])  # a late duplicate of seq 1
    assert grades(db, pk) == {docs[0]: 0}


def test_out_of_order_delivery_waits_for_the_gap(db, item):
    pk, docs = item
    r = L.apply_grade_events(db, pk, "alice", "tab-1", [ev(2, docs[1], 2), ev(3, docs[2], 1)])
    assert (r.acked, r.applied, r.waiting) == (0, [], 2)
    assert grades(db, pk) == {}  # nothing jumps the hole
    r = L.apply_grade_events(db, pk, "alice", "tab-1", [ev(1, docs[0], 3), ev(3, docs[2], 1)])
    assert (r.acked, r.applied, r.waiting) == (1, [1], 1)
    r = L.apply_grade_events(db, pk, "alice", "tab-1", [ev(3, docs[2], 1), ev(2, docs[1], 2)])
    assert (r.acked, r.applied) == (3, [2, 3])
    assert [e[1] for e in grade_events(db, pk)] == [docs[0], docs[1], docs[2]]


def test_shuffled_resends_give_the_sequential_result(db, item):
    pk, docs = item
    rng = random.Random(5)
    stream = [ev(i + 1, docs[rng.randrange(4)], rng.randrange(4)) for i in range(40)]
    expected: dict[int, int] = {}
    changes = 0
    for e in stream:
        changes += expected.get(e["doc_pk"]) != e["grade"]
        expected[e["doc_pk"]] = e["grade"]
    acked = 0
    while acked < 40:
        # the widget sends what is not acknowledged; the network drops, repeats and reorders
        batch = [e for e in stream if e["seq"] > acked - 3 and rng.random() < 0.7]
        rng.shuffle(batch)
        acked = L.apply_grade_events(db, pk, "alice", "tab-1", batch).acked
    assert grades(db, pk) == expected
    assert len(grade_events(db, pk)) == changes


def test_two_clients_are_two_streams(db, item):
    pk, docs = item
    L.apply_grade_events(db, pk, "alice", "tab-1", [ev(1, docs[0], 3), ev(2, docs[1], 3)])
    r = L.apply_grade_events(db, pk, "alice", "tab-2", [ev(1, docs[1], 0)])  # seq 1 again, other page load
    assert (r.acked, r.applied) == (1, [1])
    assert grades(db, pk) == {docs[0]: 3, docs[1]: 0}
    assert L.stream_acks(db, pk, "alice") == {"tab-1": 2, "tab-2": 1}


def test_clear_rest_zero_and_submit_as_events(db, item):
    pk, docs = item
    r = L.apply_grade_events(db, pk, "alice", "t", [ev(1, docs[0], 3), ev(2, docs[0], None), ev(3, submit=True)])
    assert r.rejected == [(3, "cannot submit: chunk #1 has no grade yet")] and not r.submitted
    assert grades(db, pk) == {}
    assert grade_events(db, pk)[-1] == ("alice", docs[0], "3", None)
    rest = [ev(4 + i, d, 0) for i, d in enumerate(docs)]
    r = L.apply_grade_events(db, pk, "alice", "t", [*rest, ev(8, submit=True)])
    assert (r.acked, r.submitted, r.rejected) == (8, True, [])
    assert L.get_item(db, pk, "alice").status == "submitted"
    # the submit sent again (e.g. after a restart) does not submit twice
    assert not L.apply_grade_events(db, pk, "alice", "t", [ev(8, submit=True)]).submitted
    assert db.execute("SELECT count(*) FROM label_events WHERE query_pk = ? AND field = 'status'", [pk]).fetchone() == (1,)
    # a submitted item stays editable through the stream (history)
    assert L.apply_grade_events(db, pk, "alice", "t", [ev(9, docs[0], 2)]).applied == [9]


def test_bad_events_are_acknowledged_not_applied(db, item):
    pk, docs = item
    r = L.apply_grade_events(db, pk, "alice", "t", [ev(1, 999, 2), ev(2, docs[0], 7), ev(3, docs[0], 1),
                                                    ev(4, docs[1], 2, accept=True)])
    assert r.acked == 4 and r.applied == [3]
    assert [s for s, _ in r.rejected] == [1, 2, 4]
    assert "chunk pk 999 does not exist" in r.rejected[0][1] and "not on the scale" in r.rejected[1][1]
    assert "no suggestion" in r.rejected[2][1]
    with pytest.raises(LabelError, match="'seq' must be an integer"):
        L.apply_grade_events(db, pk, "alice", "t", [{"doc_pk": docs[0], "grade": 1}])
    with pytest.raises(LabelError, match="client id"):
        L.apply_grade_events(db, pk, "alice", "", [ev(5, docs[0], 1)])


def test_accept_event_takes_the_suggestion(db, item):
    pk, docs = item
    run = db.execute("INSERT INTO judge_runs (judge, kind, rubric, rubric_hash, rubric_text, model, params, on_set, "
                     "status, created_at) VALUES ('relevance.v1', 'relevance', 'r', 'h', 't', 'm', '{}', 'unlabeled', "
                     "'done', 'now')").lastrowid
    db.execute("INSERT INTO suggestions (query_pk, doc_pk, run_id, grade, created_at) VALUES (?, ?, ?, 2, 'now')",
               [pk, docs[1], run])
    r = L.apply_grade_events(db, pk, "alice", "t", [ev(1, docs[1], 2, accept=True)])
    assert r.applied == [1]
    assert db.execute("SELECT grade, origin FROM relevance_labels WHERE query_pk = ? AND doc_pk = ?",
                      [pk, docs[1]]).fetchone() == (2, "suggestion")
    assert db.execute("SELECT new FROM label_events WHERE field = 'origin'").fetchone() == (f"suggestion of judge run {run}",)


def test_taken_item_writes_nothing_and_keeps_the_sequence(db, item):
    pk, docs = item
    L.apply_grade_events(db, pk, "alice", "t", [ev(1, docs[0], 3)], now=at(1))
    assert L.next_item(db, "bob", now=at(17)) == pk  # alice's lease expired: the item went to bob
    with pytest.raises(ItemTakenError, match="take the next item"):
        L.apply_grade_events(db, pk, "alice", "t", [ev(1, docs[0], 3), ev(2, docs[1], 2)], now=at(18))
    assert L.stream_acks(db, pk, "alice") == {"t": 1}
    assert grades(db, pk) == {docs[0]: 3}
    # a pure replay needs no slot: it is answered without writing
    assert L.apply_grade_events(db, pk, "alice", "t", [ev(1, docs[0], 3)], now=at(18)).acked == 1


def test_events_renew_the_lease(db, item):
    pk, docs = item
    L.apply_grade_events(db, pk, "alice", "t", [ev(1, docs[0], 3)], now=at(10))
    assert L.next_item(db, "bob", now=at(20)) != pk  # lease runs to 25


def test_concurrent_resends_apply_once(file_db, ingest_tiny):
    store.set_setting(file_db, "overlap_fraction", 0)
    ingest_tiny(file_db, 1, chunks=8)
    pk = L.next_item(file_db, "alice")
    docs = [c.doc_pk for c in L.get_item(file_db, pk, "alice").chunks]
    stream = [ev(i + 1, docs[i % 8], (i * 7) % 4) for i in range(64)]
    path = file_db.conn.execute("PRAGMA database_list").fetchone()[2]
    errors: list[Exception] = []

    def resend(n: int) -> None:
        db = store.connect(path, migrate=False)
        try:
            for k in range(8, 65, 8):  # each resend carries everything typed so far
                L.apply_grade_events(db, pk, "alice", "tab", stream[:k][::-1] if n % 2 else stream[:k])
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)
        finally:
            db.conn.close()

    threads = [threading.Thread(target=resend, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    expected_changes, last = 0, {}
    for e in stream:
        expected_changes += last.get(e["doc_pk"]) != e["grade"]
        last[e["doc_pk"]] = e["grade"]
    assert len(grade_events(file_db, pk)) == expected_changes
    assert L.stream_acks(file_db, pk, "alice") == {"tab": 64}
