"""Grade streams (labeler.labels.apply_grade_events): each event of the grading widget's ordered
stream is applied exactly once, in order, with its audit event, whatever is sent again, late,
out of order or from two page loads; a taken item writes nothing."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
from datetime import UTC, datetime, timedelta

import pytest

from labeler import db as store
from labeler import labels as L
from labeler.accounts.settings import set_setting
from labeler.errors import ItemTakenError, LabelError
from labeler.labels.streams import EVENTS_PER_TRANSACTION

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
    set_setting(db, "overlap_fraction", 0)
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


def test_a_submit_leases_the_next_item_in_its_own_transaction(db, item):
    """After Enter the annotator waits for the write lock once: the transaction that applies the
    submit also leases the next item (behind an ingest, each wait can be one of its transactions)."""
    pk, docs = item
    begins: list[str] = []
    db.conn.set_trace_callback(lambda sql: begins.append(sql) if sql.startswith("BEGIN") else None)
    r = L.apply_grade_events(db, pk, "alice", "t", [*(ev(1 + i, d, 1) for i, d in enumerate(docs)),
                                                    ev(len(docs) + 1, submit=True)], lease_next=True, now=at(1))
    db.conn.set_trace_callback(None)
    assert r.submitted and r.leased and r.next_error is None
    assert r.next_item is not None and r.next_item != pk
    assert begins == ["BEGIN IMMEDIATE"]
    assert db.execute("SELECT state FROM assignments WHERE query_pk = ? AND annotator = 'alice'",
                      [r.next_item]).fetchone() == ("leased",)
    assert L.next_item(db, "alice", now=at(2)) == r.next_item  # the lease is theirs: resumed, not a new one
    # the last item: the submit still goes in, and nothing is left
    docs2 = [c.doc_pk for c in L.get_item(db, r.next_item, "alice").chunks]
    last = L.apply_grade_events(db, r.next_item, "alice", "t2", [*(ev(1 + i, d, 0) for i, d in enumerate(docs2)),
                                                                 ev(len(docs2) + 1, submit=True)],
                                lease_next=True, now=at(3))
    assert last.submitted and last.leased and last.next_item is None
    # without a submit nothing is leased
    assert not L.apply_grade_events(db, pk, "alice", "t", [ev(len(docs) + 2, docs[0], 2)], lease_next=True).leased


def test_a_failed_lease_keeps_the_submit(db, item):
    pk, docs = item
    with store.transaction(db):
        store.put_setting(db.conn, "queue_order", "no-such-order")  # e.g. written by a newer labeler
    r = L.apply_grade_events(db, pk, "alice", "t", [*(ev(1 + i, d, 1) for i, d in enumerate(docs)),
                                                    ev(len(docs) + 1, submit=True)], lease_next=True)
    assert r.submitted and r.leased and r.next_item is None
    assert "queue_order" in r.next_error
    assert L.get_item(db, pk, "alice").status == "submitted"


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
    set_setting(file_db, "overlap_fraction", 0)
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


# --- a large outbox: bounded write transactions, exactly once across a crash --------------------

def outbox(docs: list[int], n: int) -> list[dict]:
    """``n`` grade events cycling over ``docs``, each one changing its chunk's grade."""
    return [ev(i + 1, docs[i % len(docs)], (i // len(docs) + i) % 4) for i in range(n)]


@pytest.fixture
def file_items(file_db, ingest_tiny):
    """Alice's item and bob's, on a file database."""
    set_setting(file_db, "overlap_fraction", 0)
    ingest_tiny(file_db, 2, chunks=4)
    mine, theirs = L.next_item(file_db, "alice"), L.next_item(file_db, "bob")
    docs = {pk: [c.doc_pk for c in L.get_item(file_db, pk, "alice").chunks] for pk in (mine, theirs)}
    return mine, docs[mine], theirs, docs[theirs]


def _transactions(statements: list[str]) -> list[int]:
    """Audit rows written per committed write transaction, from a connection's statement trace."""
    per: list[int] = []
    count = 0
    for sql in statements:
        if sql.startswith("BEGIN"):
            count = 0
        elif sql.startswith("INSERT INTO label_events"):
            count += 1
        elif sql == "COMMIT":
            per.append(count)
    return per


def test_a_large_outbox_is_applied_in_bounded_write_transactions(file_db, file_items):
    pk, docs, _, _ = file_items
    n = 3 * EVENTS_PER_TRANSACTION + 17
    statements: list[str] = []
    file_db.conn.set_trace_callback(statements.append)
    r = L.apply_grade_events(file_db, pk, "alice", "tab-1", outbox(docs, n))
    file_db.conn.set_trace_callback(None)
    assert (r.acked, r.applied, r.rejected, r.waiting) == (n, list(range(1, n + 1)), [], 0)
    per = _transactions(statements)
    assert sum(per) == n and len(per) >= 4, per
    assert max(per) <= EVENTS_PER_TRANSACTION, per
    assert len(grade_events(file_db, pk)) == n
    assert L.stream_acks(file_db, pk, "alice") == {"tab-1": n}


def test_another_annotators_grade_gets_in_while_a_large_outbox_is_applied(file_db, file_items, db_path):
    """Between two of alice's transactions bob's own connection grades and commits at once (within
    its first try at the lock): he never waits for the whole outbox."""
    pk, docs, bobs, bob_docs = file_items
    n = 3 * EVENTS_PER_TRANSACTION
    bob = store.connect(db_path)
    seen: list[int] = []
    begins = 0

    def between(sql: str) -> None:
        nonlocal begins
        if sql.startswith("BEGIN"):
            begins += 1
            if begins == 2:  # alice's first transaction is committed, her second not begun
                L.set_grade(bob, bobs, bob_docs[0], "bob", 3)
                seen.append(bob.execute("SELECT count(*) FROM label_events WHERE annotator = 'alice'").fetchone()[0])

    file_db.conn.set_trace_callback(between)
    r = L.apply_grade_events(file_db, pk, "alice", "tab-1", outbox(docs, n))
    file_db.conn.set_trace_callback(None)
    assert r.acked == n
    assert len(seen) == 1 and 0 < seen[0] < n, seen  # bob's grade landed with alice's outbox mid-way
    assert grades(file_db, bobs, "bob") == {bob_docs[0]: 3}


CRASH = """
import os, signal, sys
from labeler import db as store
from labeler import labels as L
db = store.connect(sys.argv[1])
pk, docs, n = int(sys.argv[2]), [int(d) for d in sys.argv[3].split(",")], int(sys.argv[4])
commits = 0
def trace(sql):
    global commits
    commits += sql == "COMMIT"
    if commits == 2 and sql.startswith("INSERT INTO label_events"):
        os.kill(os.getpid(), signal.SIGKILL)  # mid-way through the third transaction
db.conn.set_trace_callback(trace)
events = [{"seq": i + 1, "doc_pk": docs[i % len(docs)], "grade": (i // len(docs) + i) % 4} for i in range(n)]
L.apply_grade_events(db, pk, "alice", "tab-1", events)
"""


def test_a_crash_mid_outbox_applies_each_event_once_when_it_is_sent_again(file_db, file_items, db_path):
    pk, docs, _, _ = file_items
    n = 4 * EVENTS_PER_TRANSACTION
    child = subprocess.run([sys.executable, "-c", CRASH, str(db_path), str(pk), ",".join(map(str, docs)), str(n)],
                           env=os.environ.copy(), capture_output=True, text=True, timeout=120)
    assert child.returncode == -signal.SIGKILL, child.stderr  # killed while applying, not finished
    acked = L.stream_acks(file_db, pk, "alice")["tab-1"]
    assert 0 < acked < n
    assert len(grade_events(file_db, pk)) == acked  # what is acknowledged is exactly what was applied
    r = L.apply_grade_events(file_db, pk, "alice", "tab-1", outbox(docs, n))  # the widget sends it all again
    assert r.applied == list(range(acked + 1, n + 1))
    assert len(grade_events(file_db, pk)) == n
    final = {d: g for e in outbox(docs, n) for d, g in [(e["doc_pk"], e["grade"])]}
    assert grades(file_db, pk) == final


def test_a_submit_is_applied_after_every_grade_before_it_however_the_outbox_is_split(file_db, file_items):
    pk, docs, _, _ = file_items
    events = [*outbox(docs, 9), ev(10, submit=True), ev(11, docs[0], 0)]
    r = L.apply_grade_events(file_db, pk, "alice", "tab-1", events, per_transaction=1)
    assert (r.acked, r.rejected, r.submitted) == (11, [], True)
    rows = file_db.execute("SELECT field, doc_pk FROM label_events WHERE query_pk = ? AND annotator = 'alice' "
                           "ORDER BY id", [pk]).fetchall()
    fields = [f for f, _ in rows]
    assert fields.index("status") == 9 and fields.count("grade") == 10
    with pytest.raises(LabelError, match="per_transaction"):
        L.apply_grade_events(file_db, pk, "alice", "tab-2", [ev(1, docs[0], 2)], per_transaction=0)
