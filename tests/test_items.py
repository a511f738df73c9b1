"""The lead's desk through the library: the items list (filters, paging, summary columns), the lead's
side-by-side view, re-queue, adjudication requests, discards, and the flag inbox. Annotators are
refused every one of these with RoleError and nothing is written."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from labeler import db as store
from labeler import labels as L
from labeler.accounts.settings import set_setting
from labeler.audit import audit_log
from labeler.errors import LabelError, RoleError

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)


def at(minutes: float) -> datetime:
    return T0 + timedelta(minutes=minutes)


def label(db, pk: int, who: str, grades: list[int], status: str = "submitted", reason: str | None = None,
          now=None) -> None:
    chunks = L.get_item(db, pk, who).chunks
    for chunk, grade in zip(chunks, grades, strict=False):
        L.set_grade(db, pk, chunk.doc_pk, who, grade, now=now)
    L.set_status(db, pk, who, status, reason=reason, now=now)


def build_desk(db, ingest_tiny) -> list[int]:
    """lena (lead), alice and bob (annotators); 6 items, every one for both annotators.
    q0: both submitted, conflicting on its first chunk; q1: alice flagged it; q2: bob skipped it."""
    pks = ingest_tiny(db, n=6, chunks=3)
    L.add_annotator(db, "lena", "lead")
    L.add_annotator(db, "alice")
    L.add_annotator(db, "bob")
    set_setting(db, "overlap_fraction", 1.0)
    set_setting(db, "overlap_annotators", 2)
    label(db, pks[0], "alice", [3, 0, 2], now=at(1))
    label(db, pks[0], "bob", [0, 0, 2], now=at(2))
    label(db, pks[1], "alice", [1], status="flagged", reason="the question has a typo", now=at(3))
    L.set_status(db, pks[2], "bob", "skipped", now=at(4))
    return pks


@pytest.fixture
def desk(db, ingest_tiny):
    return build_desk(db, ingest_tiny)


def test_list_items_pages_and_summarises(db, desk):
    page = L.list_items(db, page_size=4)
    assert page.total == 6 and page.pages == 2 and [r.query_pk for r in page.rows] == desk[:4]
    assert [r.query_pk for r in L.list_items(db, page=2, page_size=4).rows] == desk[4:]
    first = page.rows[0]
    assert first.question == "What is item q0?" and first.origin == "log" and first.occurrences == 1
    assert first.retrievers == ["production"] and first.pool_size == 3
    assert [(a.annotator, a.status) for a in first.annotators] == [("alice", "submitted"), ("bob", "submitted")]
    # chunk grades (3, 0) -> median 1.5 -> 2 relevant, conflict; (0, 0) -> 0; (2, 2) -> 2 relevant
    assert first.relevant == 2 and first.conflict is True and first.judge_agreement is None
    assert "alice submitted 2026-03-02 09:01" in first.statuses
    flagged = page.rows[1]
    assert [(a.annotator, a.status, a.reason) for a in flagged.annotators] == [
        ("alice", "flagged", "the question has a typo")]
    assert flagged.relevant is None and flagged.conflict is False
    assert page.to_dict()["items"][0]["statuses"] == first.statuses


def test_list_items_filters(db, desk):
    def pks(**filters) -> list[int]:
        return [r.query_pk for r in L.list_items(db, **filters).rows]

    assert pks(status="submitted") == [desk[0]]
    assert pks(status="flagged") == pks(flagged=True) == [desk[1]]
    assert pks(flagged=False) == [p for p in desk if p != desk[1]]
    assert pks(status="skipped", annotator="bob") == [desk[2]]
    assert pks(status="skipped", annotator="alice") == []
    assert pks(annotator="alice") == [desk[0], desk[1]]
    assert pks(status="unlabeled") == desk[3:]
    assert pks(conflict=True) == [desk[0]] and desk[0] not in pks(conflict=False)
    assert pks(search="item q4") == [desk[4]] and pks(search="ITEM Q4") == [desk[4]]
    assert pks(search="100%") == [] and pks(search="q_") == []  # LIKE wildcards are literal
    assert pks(origin="synthetic") == [] and pks(retriever="production") == desk
    assert pks(retriever="bm25") == []
    # tiny_records: item i first seen on 2026-01-(1+i)
    assert pks(since="2026-01-02T00:00:00Z", until="2026-01-04T00:00:00Z") == desk[1:3]
    assert L.list_items(db, status="flagged").total == 1
    with pytest.raises(LabelError, match="status 'done' is unknown"):
        L.list_items(db, status="done")
    with pytest.raises(LabelError, match="page_size"):
        L.list_items(db, page_size=0)


def test_adjudication_settles_the_conflict_in_the_list(db, desk):
    chunk = L.get_item(db, desk[0], "alice").chunks[0]
    L.adjudicate(db, desk[0], chunk.doc_pk, 1, "lena")
    row = L.list_items(db, page_size=1).rows[0]
    assert row.conflict is False and row.relevant == 1
    assert [r.query_pk for r in L.list_items(db, conflict=True).rows] == []


def test_judge_agreement_is_the_share_of_judged_chunks_on_the_same_side(db, desk):
    chunks = L.get_item(db, desk[0], "alice").chunks
    now = store.now()
    db.execute("INSERT INTO judge_runs (id, judge, kind, rubric, rubric_hash, rubric_text, model, params, on_set, "
               "status, created_at) VALUES (1, 'relevance.v1', 'relevance', 'r', 'h', 't', 'm', '{}', 'labeled', "
               "'done', ?)", [now])
    # consolidated: 2 (relevant), 0, 2 (relevant); the judge says 3, 2, 0: agrees on the first only
    for chunk, grade in zip(chunks, [3, 2, 0], strict=True):
        db.execute("INSERT INTO judge_labels (run_id, query_pk, doc_pk, status, grade, updated_at) "
                   "VALUES (1, ?, ?, 'ok', ?, ?)", [desk[0], chunk.doc_pk, grade, now])
    assert L.list_items(db, page_size=1).rows[0].judge_agreement == pytest.approx(1 / 3, abs=1e-4)


def test_item_detail_shows_every_annotators_grades(db, desk):
    detail = L.item_detail(db, desk[0], by="lena")
    assert detail.annotators == ["alice", "bob"]
    assert [c.grades for c in detail.chunks] == [{"alice": 3, "bob": 0}, {"alice": 0, "bob": 0},
                                                 {"alice": 2, "bob": 2}]
    assert [c.consolidated for c in detail.chunks] == [2, 0, 2]
    assert [c.conflict for c in detail.chunks] == [True, False, False]
    assert detail.answer == "Item q0 is a thing." and detail.row.conflict


def test_annotators_are_refused_everything_and_nothing_is_written(db, desk):
    before = {t: db.execute(f"SELECT * FROM {t}").fetchall() for t in
              ("queries", "query_labels", "requeued", "adjudication_requests", "question_edits",
               "flag_resolutions", "audit_events", "label_events", "queue")}
    for call in (lambda: L.list_items(db, by="bob"),
                 lambda: L.item_detail(db, desk[0], by="bob"),
                 lambda: L.requeue_item(db, desk[0], by="bob"),
                 lambda: L.request_adjudication(db, desk[0], by="bob"),
                 lambda: L.discard_item(db, desk[0], "bad", by="bob"),
                 lambda: L.restore_item(db, desk[0], by="bob"),
                 lambda: L.edit_question(db, desk[1], "What is item q1?", by="bob"),
                 lambda: L.flagged_items(db, by="bob"),
                 lambda: L.flag_count(db, by="bob"),
                 lambda: L.resolve_flag(db, desk[1], "alice", "unflag", note="fine", by="bob")):
        with pytest.raises(RoleError, match="leads only"):
            call()
    after = {t: db.execute(f"SELECT * FROM {t}").fetchall() for t in before}
    assert after == before


def test_requeue_sends_the_item_back_first_and_keeps_grades(db, desk):
    assert L.requeue_item(db, desk[0], ["bob"], by="lena", now=at(10)) == ["bob"]
    row = L.list_items(db, page_size=1).rows[0]
    assert [(a.annotator, a.status) for a in row.annotators] == [("alice", "submitted"), ("bob", "in_progress")]
    assert L.next_item(db, "bob", now=at(11)) == desk[0]  # before any new item
    item = L.get_item(db, desk[0], "bob")
    assert [c.grade for c in item.chunks] == [0, 0, 2] and not item.requeued and item.new_chunks == 0
    # bob's grades do not count until he submits again: alice's alone
    assert row.relevant == 2 and row.conflict is False
    L.set_status(db, desk[0], "bob", "submitted", now=at(12))
    assert L.next_item(db, "bob", now=at(13)) != desk[0]
    events = [e for e in audit_log(db) if e.action == "item_requeue"]
    assert len(events) == 1 and events[0].actor == "lena" and events[0].query_id == "q000"
    assert (events[0].old, events[0].new) == ('{"bob":"submitted"}', '["bob"]')
    with pytest.raises(LabelError, match="carol never opened query q000"):
        L.requeue_item(db, desk[0], ["carol"], by="lena")
    with pytest.raises(LabelError, match="nobody has labeled query q005"):
        L.requeue_item(db, desk[5], by="lena")


def test_request_adjudication_puts_the_item_on_the_adjudication_page(db, desk):
    L.adjudicate(db, desk[0], L.get_item(db, desk[0], "alice").chunks[0].doc_pk, 1, "lena")
    assert L.conflicts(db) == []
    assert L.request_adjudication(db, desk[0], note="check chunk 3", by="lena") is True
    assert L.request_adjudication(db, desk[0], by="lena") is False
    [item] = L.conflicts(db)
    assert item.query_pk == desk[0] and item.requested == "lena"
    assert [p.grades for p in item.pairs] == [{"alice": 0, "bob": 0}, {"alice": 2, "bob": 2}]  # unresolved only
    assert len(L.conflicts(db, include_resolved=True)[0].pairs) == 3
    assert L.list_items(db, page_size=1).rows[0].adjudication_requested


def test_discard_takes_the_item_out_of_the_queue_and_the_golden_set(db, desk):
    L.discard_item(db, desk[0], "not a real question", by="lena", now=at(5))
    row = L.list_items(db, page_size=1).rows[0]
    assert row.discarded and row.discard_reason == "not a real question" and row.relevant is None
    assert {a.status for a in row.annotators} == {"discarded"}
    assert desk[0] not in set(L.golden_labels(db)["query_pk"])
    L.sync_queue(db, force=True)
    assert db.execute("SELECT count(*) FROM queue WHERE query_pk = ?", [desk[0]]).fetchone()[0] == 0
    assert L.list_items(db, status="discarded").total == 1
    with pytest.raises(LabelError, match="reason to discard is empty"):
        L.discard_item(db, desk[1], "  ", by="lena")
    with pytest.raises(LabelError, match="discarded by a lead"):
        L.requeue_item(db, desk[0], by="lena")


def test_restore_undoes_a_discard_with_every_status_as_it_was(db, desk):
    golden_before = sorted(map(tuple, L.golden_labels(db)[["query_pk", "doc_pk", "grade"]].values.tolist()))
    L.discard_item(db, desk[0], "by mistake", by="lena", now=at(5))
    assert L.restore_item(db, desk[0], by="lena", now=at(6)) == {"alice": "submitted", "bob": "submitted"}
    row = L.list_items(db, page_size=1).rows[0]
    assert not row.discarded and row.discard_reason is None and row.relevant == 2
    assert sorted(map(tuple, L.golden_labels(db)[["query_pk", "doc_pk", "grade"]].values.tolist())) == golden_before
    assert [e.action for e in audit_log(db) if e.query_id == "q000"][-2:] == ["item_discard", "item_restore"]
    with pytest.raises(LabelError, match="q000 is not discarded"):
        L.restore_item(db, desk[0], by="lena")
    L.requeue_item(db, desk[0], ["bob"], by="lena", now=at(7))  # a live item again


def test_restore_after_a_flag_was_resolved_by_discarding_sends_it_back_to_the_flagger(db, desk):
    L.resolve_flag(db, desk[1], "alice", "discard", by="lena", now=at(5))
    other = L.next_item(db, "alice", now=at(6))
    assert other != desk[1]
    L.release(db, other, "alice", now=at(6))
    assert L.restore_item(db, desk[1], by="lena", now=at(7))["alice"] == "in_progress"
    assert db.execute("SELECT count(*) FROM queue WHERE query_pk = ?", [desk[1]]).fetchone()[0] == 1
    assert L.next_item(db, "alice", now=at(8)) == desk[1]  # first in her queue, grades kept


def test_flag_inbox_and_resolving_by_unflag(db, desk):
    assert L.flag_count(db, by="lena") == 1
    [flag] = L.flagged_items(db, by="lena")
    assert (flag.query_pk, flag.annotator, flag.reason) == (desk[1], "alice", "the question has a typo")
    assert flag.at == "2026-03-02T09:03:00.000000Z"
    with pytest.raises(LabelError, match="note is empty"):
        L.resolve_flag(db, desk[1], "alice", "unflag", by="lena")
    L.resolve_flag(db, desk[1], "alice", "unflag", note="It reads fine to me, please label it", by="lena")
    assert L.flag_count(db, by="lena") == 0
    [note] = L.lead_notes(db, desk[1], "alice")
    assert (note.action, note.note, note.flag_reason, note.lead) == (
        "unflagged", "It reads fine to me, please label it", "the question has a typo", "lena")
    assert L.next_item(db, "alice") == desk[1]
    with pytest.raises(LabelError, match="no open flag"):
        L.resolve_flag(db, desk[1], "alice", "unflag", note="again", by="lena")
    assert [e.action for e in audit_log(db) if e.action == "flag_resolve"] == ["flag_resolve"]


def test_resolving_by_editing_keeps_the_original_question(db, desk):
    L.resolve_flag(db, desk[1], "alice", "edit", question="What is item q1, exactly?", by="lena")
    assert L.list_items(db, page=2, page_size=1).rows[0].question == "What is item q1, exactly?"
    assert L.original_question(db, desk[1]) == "What is item q1?"
    [edit] = L.question_history(db, desk[1])
    assert (edit.old, edit.new, edit.lead) == ("What is item q1?", "What is item q1, exactly?", "lena")
    assert L.lead_notes(db, desk[1], "alice")[0].action == "edited"
    assert L.get_item(db, desk[1], "alice").status == "in_progress"
    # searching finds the new text; the original text stays retrievable, not searchable
    assert [r.query_pk for r in L.list_items(db, search="exactly").rows] == [desk[1]]
    assert L.original_question(db, desk[0]) == "What is item q0?"


def test_resolving_by_discarding(db, desk):
    L.resolve_flag(db, desk[1], "alice", "discard", by="lena")
    row = L.list_items(db, status="discarded").rows[0]
    assert row.query_pk == desk[1] and row.discard_reason == "the question has a typo"
    assert L.flag_count(db, by="lena") == 0


# --- labeler items ---------------------------------------------------------------------------

def test_cli_items_lists_filters_and_prints_json(file_db, db_path, ingest_tiny):
    import json

    from click.testing import CliRunner

    from labeler.cli import cli

    build_desk(file_db, ingest_tiny)

    def run(*args: str):
        result = CliRunner().invoke(cli, ["--db", str(db_path), "items", *args], catch_exceptions=False)
        return result

    out = run("--flagged", "--json")
    assert out.exit_code == 0, out.output
    doc = json.loads(out.output)
    assert (doc["total"], doc["page"], doc["pages"]) == (1, 1, 1)
    [item] = doc["items"]
    assert item["query_id"] == "q001" and item["annotators"] == [
        {"annotator": "alice", "status": "flagged", "at": "2026-03-02T09:03:00.000000Z",
         "reason": "the question has a typo"}]
    text = run("--annotator", "bob").output
    assert text.splitlines()[0] == "2 item(s); page 1 of 1"
    assert "q000" in text and "q002" in text and "bob skipped" in text and "q001" not in text
    text = run("--flagged").output
    assert "flag by alice: the question has a typo" in text
    assert json.loads(run("--search", "item q4", "--json").output)["items"][0]["query_id"] == "q004"
    assert json.loads(run("--limit", "2", "--page", "3", "--json").output)["items"][0]["query_id"] == "q004"
    assert json.loads(run("--conflict", "--json").output)["total"] == 1
    assert json.loads(run("--status", "unlabeled", "--json").output)["total"] == 3
    bad = run("--since", "yesterday")
    assert bad.exit_code == 1 and bad.output.startswith("Error: time 'yesterday' is not ISO 8601")


def test_the_conflict_filter_follows_every_change(file_db, ingest_tiny):
    # a file database: its conflicting items are kept between calls and brought up to date
    db, desk = file_db, build_desk(file_db, ingest_tiny)

    def conflicting() -> list[int]:
        return [r.query_pk for r in L.list_items(db, conflict=True).rows]

    assert conflicting() == [desk[0]]
    # q3: alice and bob submit grades 0 and 2 on its first chunk (both sides of the threshold)
    label(db, desk[3], "alice", [0, 0, 0], now=at(20))
    label(db, desk[3], "bob", [2, 0, 0], now=at(21))
    assert conflicting() == [desk[0], desk[3]]
    L.adjudicate(db, desk[0], L.get_item(db, desk[0], "alice").chunks[0].doc_pk, 3, "lena")
    assert conflicting() == [desk[3]]
    L.requeue_item(db, desk[3], ["bob"], by="lena")  # bob's grades stop counting
    assert conflicting() == []
    L.set_status(db, desk[3], "bob", "submitted")
    assert conflicting() == [desk[3]]
    set_setting(db, "threshold", 3)  # 0 vs 2: a spread of 2 conflicts whatever the threshold
    assert conflicting() == [desk[3]]
    L.set_grade(db, desk[3], L.get_item(db, desk[3], "bob").chunks[0].doc_pk, "bob", 1)
    assert conflicting() == []  # 0 vs 1, both under 3
    set_setting(db, "threshold", 1)
    assert conflicting() == [desk[3]]


def test_the_conflict_filter_matches_the_golden_sets_rule_on_random_labels(db, ingest_tiny):
    """``conflict_sql`` (SQL) and ``golden_labels`` (the golden set's consolidation) name the same
    items, over random grades by three annotators with every status, some adjudications, and each
    threshold."""
    import random

    from labeler.labels.consolidate import adjudicate, golden_labels
    from labeler.labels.items import conflict_sql

    rng = random.Random(7)
    pks = ingest_tiny(db, n=40, chunks=3)
    L.add_annotator(db, "lena", "lead")
    set_setting(db, "overlap_fraction", 1.0)
    set_setting(db, "overlap_annotators", 3)
    statuses = ["submitted"] * 4 + ["in_progress", "skipped", "flagged", "discarded"]
    for pk in pks:
        for who in rng.sample(["alice", "bob", "carol"], rng.randint(1, 3)):
            grades = [rng.randint(0, 3) for _ in range(rng.randint(1, 3))]
            status = rng.choice(statuses)
            if status == "in_progress":  # graded, not finished
                for chunk, grade in zip(L.get_item(db, pk, who).chunks, grades, strict=False):
                    L.set_grade(db, pk, chunk.doc_pk, who, grade)
            else:
                label(db, pk, who, grades, status=status, reason="why" if status != "submitted" else None)
        if rng.random() < 0.2:
            adjudicate(db, pk, L.get_item(db, pk, "lena").chunks[0].doc_pk, rng.randint(0, 3), "lena")
    found = set()
    for threshold in (1, 2, 3):
        set_setting(db, "threshold", threshold)
        golden = golden_labels(db)
        expected = sorted({int(p) for p in golden.loc[golden["conflict"], "query_pk"]})
        assert conflict_sql(db, threshold) == expected
        assert conflict_sql(db, threshold, pks[:10]) == [p for p in expected if p in pks[:10]]
        assert [r.query_pk for r in L.list_items(db, conflict=True, page_size=100).rows] == expected
        found |= set(expected)
    assert 5 < len(found) < len(pks)  # the data has both kinds
