"""The capacity benchmark's simulated annotator (``tests/bench/st_session.py``) against the real
app: it speaks the browser's websocket protocol and the grading widget's outbox, so when the Label
page or its widget changes what goes over the wire this test fails before the benchmark measures a
session that writes nothing. Its grades and its submit must be stored, and the next item shown."""

from __future__ import annotations

import asyncio
import random
import sqlite3

import labeler
import labeler.accounts as accounts
from tests.bench.st_session import Annotator
from tests.e2e.test_grader import make_db


def test_simulated_session_grades_and_submits_through_the_websocket(tmp_path, start_app):
    db_path = make_db(tmp_path, items=3, chunks=4)
    store = labeler.connect(db_path)
    accounts.add_user(store, "lead", "lead", password="capacity-test-pw")
    accounts.add_user(store, "ann", password="capacity-test-pw", by="lead")
    token = accounts.start_session(store, "ann")
    store.conn.close()
    server = start_app(db_path)

    async def label() -> tuple[int, int, list, bool, list]:
        a = Annotator(server.url, token, random.Random(1))
        await a.connect()
        first = a.data["item"]
        grades = [(c["doc_pk"], g) for g, c in enumerate(a.data["chunks"])]
        for doc_pk, g in grades:
            await a.press_grade(doc_pk, g % 4)
        run = await a.press_enter()
        await a.close()
        return first, a.data["item"], grades, run.item_at is not None, a.stats.errors

    first, shown, grades, moved, errors = asyncio.run(label())
    assert errors == []
    assert moved and shown != first
    with sqlite3.connect(db_path) as conn:
        stored = dict(conn.execute("SELECT r.doc_pk, r.grade FROM relevance_labels r JOIN queries q ON q.pk = r.query_pk "
                                   "WHERE r.annotator = 'ann' AND q.pk = ?", [first]).fetchall())
        status = conn.execute("SELECT status FROM query_labels WHERE annotator = 'ann' AND query_pk = ?",
                              [first]).fetchone()
    assert stored == {doc_pk: g % 4 for doc_pk, g in grades}
    assert status == ("submitted",)
