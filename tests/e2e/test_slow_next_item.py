"""Enter while the next item is slow to hand out, in a real browser: the page must still move on.

Under load (other annotators, an ingest holding the write lock) ``labels.next_item`` can take
seconds. Meanwhile the grading widget, whose submit is not acknowledged yet, sends it again every
1.5 s, and Streamlit (``runner.fastReruns``) answers each send with a new script-run thread while the
one handing out the next item is still inside its callback. That older thread's next access to
``st.session_state`` raises Streamlit's StopException, so the item it leased was never shown: the
page stayed on the submitted item (the submit stored, the next item leased) until a reload.

The server here hands out the item after the first submit slowly: ``next_item`` waits until another
script run has drawn the page (the window in which the page used to be lost), at most
``SLOW_S`` seconds, as if behind a writer's lock (``sitecustomize`` on the server's path, written below).
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from tests.e2e.test_grader import check_item, make_db, next_shown, open_label, saved, stored

SLOW_S = 6.0

_SLOW_NEXT = f'''"""Test server only: the next item after the gate file appears is handed out slowly."""
import os
import threading

import labeler.labels as labels
import labeler.labels.streams as streams

_GATE = os.environ["LABELER_TEST_SLOW_NEXT"]
_drawn = threading.Event()
_next_item, _get_item = labels.next_item, labels.get_item


def next_item(db, annotator, **kwargs):
    if os.path.exists(_GATE):
        os.remove(_GATE)
        _drawn.clear()
        open(_GATE + ".entered", "w").close()
        _drawn.wait({SLOW_S})  # until another script run draws an item, at most {SLOW_S} s
    return _next_item(db, annotator, **kwargs)


def get_item(db, query_pk, annotator, **kwargs):
    _drawn.set()
    return _get_item(db, query_pk, annotator, **kwargs)


# a submit leases the next item in its own transaction (streams), other moves through the face
labels.next_item, streams.next_item, labels.get_item = next_item, next_item, get_item
'''


def leased(db_path: Path, annotator: str = "alice") -> list[int]:
    with sqlite3.connect(db_path) as conn:
        return [pk for (pk,) in conn.execute("SELECT query_pk FROM assignments WHERE annotator = ? AND "
                                             "state = 'leased'", [annotator])]


def test_enter_moves_on_when_the_next_item_is_slow_to_hand_out(tmp_path, start_app, page):
    db_path = make_db(tmp_path, items=3)
    shim = tmp_path / "slow_next"
    shim.mkdir()
    (shim / "sitecustomize.py").write_text(_SLOW_NEXT)
    gate = tmp_path / "slow-next.gate"
    path = os.pathsep.join(p for p in (str(shim), os.environ.get("PYTHONPATH")) if p)
    server = start_app(db_path, env={"PYTHONPATH": path, "LABELER_TEST_SLOW_NEXT": str(gate)})
    first = open_label(page, server.url)
    page.keyboard.type("12301230", delay=20)
    page.get_by_text("8 of 8 retrieved chunks graded").wait_for()
    saved(page)
    gate.touch()
    page.keyboard.press("Enter")
    second = next_shown(page, first, timeout=(SLOW_S + 20) * 1000)
    assert Path(f"{gate}.entered").exists()  # the slow hand-out did happen
    check_item(db_path, first, [1, 2, 3, 0, 1, 2, 3, 0])
    assert leased(db_path) == [second]  # the item shown is the one the queue leased
    page.keyboard.type("3", delay=20)  # and it is live: a key grades it
    saved(page)
    assert stored(db_path, second)[0] == 3
