"""Long reads nobody wants any more stop (``db.abandon_when``): a page run that a newer run replaced
stops its corpus search instead of finishing it on a core the newer run needs."""

from __future__ import annotations

import sqlite3
import threading

import pytest
from streamlit.testing.v1 import AppTest

import labeler
from labeler import db as store

# about a second of work on this machine, far more than the moment it takes to stop
_LONG = "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 30000000) SELECT count(*) FROM n"


def test_a_read_stops_soon_after_it_is_unwanted():
    db = labeler.connect(":memory:")
    unwanted = threading.Event()
    threading.Timer(0.05, unwanted.set).start()
    steps: list[int] = []
    with pytest.raises(store.Abandoned), store.abandon_when(db, unwanted.is_set):
        steps.append(1)
        db.execute(_LONG).fetchone()
    assert steps == [1]
    # the handler is gone afterwards: the same read runs to the end
    assert db.execute("WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 100000) "
                      "SELECT count(*) FROM n").fetchone() == (100000,)


def test_a_wanted_read_finishes_and_other_errors_pass_through():
    db = labeler.connect(":memory:")
    with store.abandon_when(db, lambda: False):
        assert db.execute("WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 200000) "
                          "SELECT count(*) FROM n").fetchone() == (200000,)
    with pytest.raises(sqlite3.OperationalError, match="no such table"), store.abandon_when(db, lambda: True):
        db.execute("SELECT * FROM no_such_table")


_PAGE = """
import streamlit as st
from streamlit.runtime.scriptrunner_utils.script_run_context import get_script_run_ctx
from labeler.app import state

check = state.superseded()
requests = get_script_run_ctx().script_requests
st.write(f"wired={requests is not None and hasattr(requests, '_state')} superseded={check()}")
"""


def test_a_script_run_can_tell_it_was_not_replaced():
    """In a run nobody replaced the check is false; the run's stop requests are where the check
    looks (a Streamlit that moves them fails here, rather than silently never stopping a search)."""
    at = AppTest.from_string(_PAGE).run()
    assert not at.exception
    assert at.markdown[0].value == "wired=True superseded=False"


def test_outside_a_script_run_nothing_is_superseded():
    from labeler.app import state

    assert state.superseded()() is False
