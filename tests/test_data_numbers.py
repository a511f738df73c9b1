"""The Data page's export counts: computed without reading the rankings, equal to what an export
of the same filters holds, and reused only while nothing was committed to the database."""

from __future__ import annotations

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
