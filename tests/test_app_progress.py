"""The Label page's sidebar: items done count items, labels count labels (with overlap one item takes
several), and the ETA counts only annotators labeling through the app in the last 30 minutes, not an
import (``labeler import``, the demo's annotator)."""

from __future__ import annotations

import json

import labeler
import labeler.labels as labels
from labeler.accounts.settings import set_setting
from labeler.app import widgets
from labeler.export import import_golden
from tests.test_app_label import RECORDS, Widget, app, make_db


def test_sidebar_counts_items_and_labels_apart_and_the_eta_ignores_an_import(tmp_path, monkeypatch):
    path = make_db(tmp_path, RECORDS)
    db = labeler.connect(path)
    set_setting(db, "overlap_fraction", 1.0)  # every item wants 2 annotators: 4 items, 8 labels
    golden = tmp_path / "golden.jsonl"
    golden.write_text("".join(json.dumps({"query_id": f"q{i}", "question": f"question number {i} about invoices", "relevance": {f"d{i}-0": 3, f"d{i}-1": 0,
                                                                                f"d{i}-2": 0}}) + "\n"
                              for i in range(2)))
    import_golden(db, golden, annotator="demo")  # labels written just now, but by an import
    monkeypatch.setenv("LABELER_DB", str(path))

    at = app("alice")
    widget = Widget(at)
    item = widget.data()["item"]
    widget.grade(0, 3)
    widget.rest_zero()
    widget.submit()
    labels.add_seconds(db, item, "alice", 40)  # a submitted item with time: the ETA needs a median
    widgets._team_progress.clear()  # the sidebar keeps the team figures 10 s: read them again now
    at = app("alice")

    p = labels.progress(db)
    assert p.submitted == 3 and p.items == 4  # labels: demo's 2 and alice's 1
    done = db.execute("SELECT count(*) FROM (SELECT query_pk FROM query_labels WHERE status = 'submitted' "
                      "GROUP BY query_pk HAVING count(*) >= 2)").fetchone()[0]
    assert p.items_done == done and p.items_left == 8 - 3
    assert p.active_annotators == 2  # demo and alice finished items this week...
    assert p.labeling_now == 1 and labels.labeling_now(db) == ["alice"]  # ...only alice labels in the app
    assert p.eta_seconds == p.items_left * p.median_seconds / 1

    side = {m.label: m.value for m in at.sidebar.metric}
    assert side["My labels"] == "1" and side["Team labels"] == "3" and side["Labels to go"] == "5"
    helps = {m.label: m.proto.help for m in at.sidebar.metric}
    assert "overlap" in helps["Team labels"] and "counts twice" in helps["Team labels"]
    assert "labels, not items" in helps["Labels to go"] and "overlap" in helps["Labels to go"]
    texts = [c.value for c in at.sidebar.caption]
    assert any("with 1 annotator labeling in the app in the last 30 min" in t for t in texts), texts
    bar = at.sidebar.get("progress")[0]
    assert bar.proto.text == f"{done} of 4 items done"
