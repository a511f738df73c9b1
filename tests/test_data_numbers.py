"""The Data page's export counts: computed without reading the rankings, equal to what an export
of the same filters holds, and reused only while nothing was committed to the database."""

from __future__ import annotations

from pathlib import Path

import pytest

import labeler
from labeler import export as E
from labeler import labels as L
from tests.test_export import small  # noqa: F401 - the fixture
from tests.test_report import label, pk

FILTERS = [{}, {"origin": "log"}, {"origin": "import"}, {"min_annotators": 2},
           {"include_unreviewed_synthetic": True}, {"origin": "synthetic", "include_unreviewed_synthetic": True}]


@pytest.mark.parametrize("filters", FILTERS)
def test_the_counts_are_those_of_the_golden_set_an_export_writes(small, filters):  # noqa: F811
    labeler.set_setting(small, "overlap_fraction", 1.0)
    L.sync_queue(small, force=True)
    label(small, "qa", {"a1": 1, "a2": 0, "a3": 2}, annotator="bob")  # a conflict with alice's grades
    small.execute("INSERT INTO queries (query_id, question, norm_question, origin, review_state, created_at) "
                  "VALUES ('syn-p', 'pending?', 'pending?', 'synthetic', 'pending', '2026-01-01')")
    assert E.export_counts(small, **filters) == E.golden_set(small, **filters).counts()


def test_reused_counts_follow_every_commit_from_any_connection(small, db_path):  # noqa: F811
    first = E.export_counts(small, reuse=True)
    assert E.export_counts(small, reuse=True) == first
    other = labeler.connect(db_path)  # another session: a label submitted elsewhere
    L.set_grade(other, pk(other, "qa"), other.execute("SELECT pk FROM documents WHERE doc_id = 'a3'").fetchone()[0],
                "alice", 0)
    after = E.export_counts(small, reuse=True)
    assert after == E.golden_set(small).counts() != first
    after["queries"] = -1  # what a caller does with its copy stays out of the next answer
    assert E.export_counts(small, reuse=True)["queries"] == first["queries"]


def test_the_data_page_tiles_follow_an_ingest_and_a_label_from_another_session(tmp_path, monkeypatch, ingest_tiny):
    from streamlit.testing.v1 import AppTest

    path = tmp_path / "data.db"
    db = labeler.connect(path)
    ingest_tiny(db, n=6)
    L.add_annotator(db, "lena", "lead")
    monkeypatch.setenv("LABELER_DB", str(path))
    at = AppTest.from_file(str(Path(labeler.__file__).parent / "app" / "streamlit_app.py"), default_timeout=30)
    at.session_state["annotator"] = "lena"
    at.run()
    at.switch_page("views/data.py").run()
    tiles = lambda: {m.label: m.value for m in at.metric}  # noqa: E731
    assert (tiles()["Queries"], tiles()["Relevance labels"], tiles()["Queries to export"]) == ("6", "0", "0")
    assert at.run() and tiles()["Queries"] == "6"  # a rerun with nothing new: the same numbers

    other = labeler.connect(path)  # another session ingests, then an annotator submits one query
    ingest_tiny(other, n=4, prefix="extra")
    q = other.execute("SELECT pk FROM queries ORDER BY pk LIMIT 1").fetchone()[0]
    d = other.execute("SELECT doc_pk FROM retrievals WHERE query_pk = ? ORDER BY rank LIMIT 1", [q]).fetchone()[0]
    L.set_grade(other, q, d, "bob", 3)
    L.set_status(other, q, "bob", "submitted")
    at.run()
    assert not at.exception, at.exception
    assert (tiles()["Queries"], tiles()["Relevance labels"], tiles()["Labeled queries"],
            tiles()["Queries to export"]) == ("10", "1", "1", "1")
